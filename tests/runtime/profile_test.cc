#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "ir/parser.h"
#include "ir/quant.h"
#include "kernels/cpu_isa.h"
#include "kernels/quant_format.h"
#include "kernels/quant_stats.h"
#include "plan/profile.h"
#include "runtime/checkpoint.h"
#include "runtime/executor.h"
#include "runtime/reference.h"
#include "runtime/trainer.h"
#include "support/errors.h"

namespace pgq {
namespace {

namespace fs = std::filesystem;

class ProfileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("pgq_profile_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  TrainOptions tiny(const std::string& out) {
    TrainOptions o;
    o.model = loadModelConfig("tiny");
    o.steps = 10;
    o.eval_every = 0;
    o.eval_batches = 1;
    o.optimizer.warmup = 2;
    o.out_dir = (dir_ / out).string();
    o.progress = false;
    return o;
  }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string writeFile(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
    return (dir_ / name).string();
  }

  fs::path dir_;
};

TEST_F(ProfileTest, ProfilingDoesNotChangeTrainingNumerics) {
  train(tiny("plain"));
  TrainOptions o = tiny("profiled");
  o.profile_steps = 3;
  o.profile_warmup = 4;
  o.profile_out = (dir_ / "p.yaml").string();
  TrainResult r = train(o);
  EXPECT_EQ(r.profile_path, o.profile_out);
  Checkpoint a = loadCheckpoint((dir_ / "plain/checkpoint.pgqckpt").string());
  Checkpoint b = loadCheckpoint((dir_ / "profiled/checkpoint.pgqckpt").string());
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i)
    EXPECT_EQ(std::memcmp(a.tensors[i].second.raw(), b.tensors[i].second.raw(), a.tensors[i].second.bytes()), 0)
        << a.tensors[i].first;

  Profile p = loadProfile(o.profile_out);
  EXPECT_EQ(p.run.profile_steps, 3);
  EXPECT_EQ(p.run.warmup_steps, 4);
  EXPECT_EQ(p.run.model, "tiny");
  EXPECT_EQ(p.gemms.size(), 51u);  // 2 layers x 24 + logits x 3
  EXPECT_TRUE(fs::exists(dir_ / "p.csv"));
  for (const GemmProfile& g : p.gemms) {
    SCOPED_TRACE(g.label);
    for (const OperandProfile& op : g.operands) {
      const FormatStats* f8 = op.find("int8:channel:rtn");
      ASSERT_NE(f8, nullptr);
      EXPECT_GT(f8->sqnr_min, 1.0);
      EXPECT_LE(f8->sqnr_min, f8->sqnr_mean);
      EXPECT_LE(f8->sqnr_mean, f8->sqnr_max);
      if (!kernels::int8Caps().vnni) {
        // One bit less costs about 6 dB: a factor of ~4 in SQNR.
        const FormatStats* f7 = op.find("int7:channel:rtn");
        ASSERT_NE(f7, nullptr);
        EXPECT_LT(f7->sqnr_mean, f8->sqnr_mean);
        EXPECT_GT(f7->sqnr_mean, f8->sqnr_mean / 8);
      }
      if (op.role == OperandRole::kGradient) {
        EXPECT_NE(op.find("int8:channel:sr"), nullptr);
      }
      // The scaling strategies over the 3 steps (delayed scaling's history has 2).
      ASSERT_TRUE(op.scaling.has_value());
      EXPECT_EQ(op.scaling->steps, 3);
      EXPECT_EQ(op.scaling->delayed_history, 2);
      EXPECT_EQ(op.scaling->predicted.has_value(), op.role == OperandRole::kWeight);
    }
  }
  // The round trip through YAML is exact.
  EXPECT_EQ(profileToYaml(parseProfile(profileToYaml(p), "again")), profileToYaml(p));
}

// quant_stats in the executor measures the operand the GEMM reads: per channel along
// its non-contracting dims, whatever their order in memory.
TEST_F(ProfileTest, StatisticsFollowTheOperandLayout) {
  auto g = parseGraph(R"(graph @s {
  %x = parameter() : f32[6,5,4]
  %a = quant_stats(%x) {formats=["int8:channel:rtn","int4:channel:rtn"], contract_dims=[2], seed=1} : f32[2,9]
  %b = quant_stats(%x) {formats=["int8:channel:rtn"], contract_dims=[0], seed=1} : f32[1,9]
  %c = quant_stats(%x) {formats=["int8:channel:rtn"], contract_dims=[1], batch_dims=[2], seed=1} : f32[1,9]
  return %a, %b, %c
}
)");
  Executor exec(*g);
  Tensor x = toTensor(randomRefTensor({DType::kF32, Shape{6, 5, 4}}, 3));
  exec.bind("x", x);
  exec.run();
  std::span<const float> xs(x.data<float>(), 120);
  auto sqnr = [&](size_t out, int row) { return exec.output<float>(out)[static_cast<size_t>(row * kStatFields)]; };
  using kernels::OperandView;
  using kernels::QuantFormat;
  // [6*5 channels, 4 contract]
  EXPECT_FLOAT_EQ(sqnr(0, 0), kernels::quantStats(xs, OperandView{1, 30, 4, true}, QuantFormat::parse("int8:channel:rtn")).sqnr);
  EXPECT_FLOAT_EQ(sqnr(0, 1), kernels::quantStats(xs, OperandView{1, 30, 4, true}, QuantFormat::parse("int4:channel:rtn")).sqnr);
  // Contracting the leading dim: stored [K=6, channels=20].
  EXPECT_FLOAT_EQ(sqnr(1, 0), kernels::quantStats(xs, OperandView{1, 6, 20, false}, QuantFormat::parse("int8:channel:rtn")).sqnr);
  // Batch dim last, contracting the middle: permuted to [4 batch, 6 channels, 5 contract].
  std::vector<float> permuted(120);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 5; ++j)
      for (int k = 0; k < 4; ++k) permuted[static_cast<size_t>((k * 6 + i) * 5 + j)] = xs[static_cast<size_t>((i * 5 + j) * 4 + k)];
  EXPECT_FLOAT_EQ(sqnr(2, 0), kernels::quantStats(permuted, OperandView{4, 6, 5, true}, QuantFormat::parse("int8:channel:rtn")).sqnr);
  EXPECT_GT(sqnr(0, 0), 4 * sqnr(0, 1));  // 8 bits beat 4 bits by far
}

TEST_F(ProfileTest, BadOptionsFailBeforeTrainingAndLeaveNothingBehind) {
  TrainOptions o = tiny("run");
  o.profile_out = (dir_ / "p.yaml").string();
  o.profile_steps = 0;
  EXPECT_THROW(train(o), Error);
  o.profile_steps = -3;
  EXPECT_THROW(train(o), Error);
  o.profile_steps = 8;
  o.profile_warmup = 5;  // 13 > 10 steps
  EXPECT_THROW(train(o), Error);
  o.profile_warmup = 0;
  o.profile_out = (dir_ / "missing_dir/p.yaml").string();
  EXPECT_THROW(train(o), Error);
  o.profile_out = dir_.string();  // a directory
  EXPECT_THROW(train(o), Error);
  o.profile_out = (dir_ / "p.yaml").string();
  o.profile_steps = 2;
  o.profile_amax_history = 0;
  try {
    train(o);
    ADD_FAILURE() << "an amax history of 0 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--profile-amax-history: expected an integer in [1, "), std::string::npos)
        << e.what();
  }
  o.profile_amax_history = kDefaultAmaxHistory;
  o.profile_out = "";
  o.profile_steps = 2;
  EXPECT_THROW(train(o), Error);  // steps without an output
  EXPECT_EQ(files(), std::vector<std::string>{});
}

TEST_F(ProfileTest, AProfileOfAnotherModelIsRefusedNamingBoth) {
  TrainOptions o = tiny("run");
  o.steps = 2;
  o.profile_steps = 1;
  o.profile_out = (dir_ / "p.yaml").string();
  train(o);
  Profile p = loadProfile(o.profile_out);
  auto errorOf = [&](const ModelConfig& m) {
    try {
      checkProfileModel(p, m.name, m.toYaml(), m.source);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(errorOf(o.model), "no error");
  EXPECT_EQ(errorOf(loadModelConfig("small")),
            o.profile_out + ":4: field 'run.model': the profile was made with model 'tiny', not with model 'small' "
                            "(<preset small>)");
  ModelConfig wider = o.model;
  wider.d_ff = 128;
  wider.source = "wide.yaml";
  EXPECT_EQ(errorOf(wider), o.profile_out + ":4: field 'run.model_config': the profile was made with another config "
                                            "of model 'tiny' than wide.yaml: 'd_ff: 64' in the profile, 'd_ff: 128' in "
                                            "wide.yaml");
}

TEST_F(ProfileTest, BrokenProfilesAreRejectedWithFileAndField) {
  TrainOptions o = tiny("run");
  o.steps = 3;
  o.profile_steps = 2;
  o.profile_out = (dir_ / "good.yaml").string();
  train(o);
  std::string good;
  {
    std::ifstream in(o.profile_out);
    std::stringstream s;
    s << in.rdbuf();
    good = s.str();
  }
  auto errorOf = [&](const std::string& text) {
    try {
      parseProfile(text, "p.yaml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  EXPECT_NE(errorOf(good.substr(0, good.size() / 2)).find("p.yaml"), std::string::npos);  // truncated
  EXPECT_NE(errorOf(replaced("version: 1", "version: 2")).find("profile version 1, the file is version 2"), std::string::npos);
  EXPECT_NE(errorOf(replaced("    direction: fwd\n", "")).find("field 'gemms[0].direction': is missing"), std::string::npos)
      << errorOf(replaced("    direction: fwd\n", ""));
  EXPECT_NE(errorOf(replaced("format: int8:channel:rtn", "format: int9:channel:rtn")).find("bad quantization format"),
            std::string::npos);
  EXPECT_NE(errorOf(replaced("zero_fraction: 0\n", "zero_fraction: 1.5\n")).find("zero_fraction"), std::string::npos);
  EXPECT_NE(errorOf(replaced("sharding: column", "sharding: diagonal")).find("expected one of column, row"), std::string::npos);
  EXPECT_NE(errorOf(replaced("gemms:", "gemmz:")).find("unknown field 'gemmz'"), std::string::npos);
  // Cut after a GEMM: still valid YAML, caught by the count written before the list.
  std::string cut = good.substr(0, good.rfind("\n  - label: ") + 1);
  std::string error = errorOf(cut);
  EXPECT_NE(error.find("field 'gemm_count': the profile records 51 GEMMs but lists 50 (the last is 'layer0/attn/q:dgrad')"
                       ": the file was cut short or edited"),
            std::string::npos)
      << error;
  EXPECT_NE(errorOf(replaced("gemm_count: 51\n", "")).find("field 'gemm_count': is missing"), std::string::npos);
  EXPECT_NE(errorOf("\x7f" "ELF\x01\x02").find("p.yaml"), std::string::npos);
  EXPECT_NE(errorOf("").find("p.yaml: is empty"), std::string::npos);
  EXPECT_THROW(loadProfile((dir_ / "nope.yaml").string()), Error);
}

}  // namespace
}  // namespace pgq
