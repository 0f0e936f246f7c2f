#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "ir/analysis.h"
#include "ir/parser.h"
#include "ir/quant.h"
#include "kernels/cpu_isa.h"
#include "kernels/quant_format.h"
#include "kernels/quant_stats.h"
#include "passes/pipeline.h"
#include "passes/quantize_gemms.h"
#include "passes/tag_metadata.h"
#include "plan/profile.h"
#include "plan/recipe.h"
#include "runtime/checkpoint.h"
#include "runtime/executor.h"
#include "runtime/profile_collector.h"
#include "runtime/reference.h"
#include "runtime/trainer.h"
#include "support/errors.h"
#include "tests/passes/pass_test_util.h"

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
      const FormatStats* f8 = op.find(QuantFormat::parse("int8:channel:rtn"));
      ASSERT_NE(f8, nullptr);
      EXPECT_GT(f8->sqnr_min, 1.0);
      EXPECT_LE(f8->sqnr_min, f8->sqnr_mean);
      EXPECT_LE(f8->sqnr_mean, f8->sqnr_max);
      if (!kernels::int8Caps().vnni) {
        // One bit less costs about 6 dB: a factor of ~4 in SQNR.
        const FormatStats* f7 = op.find(QuantFormat::parse("int7:channel:rtn"));
        ASSERT_NE(f7, nullptr);
        EXPECT_LT(f7->sqnr_mean, f8->sqnr_mean);
        EXPECT_GT(f7->sqnr_mean, f8->sqnr_mean / 8);
      }
      if (op.role == OperandRole::kGradient) {
        EXPECT_NE(op.find(QuantFormat::parse("int8:channel:sr")), nullptr);
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
  // Without --profile-metrics, none of their statistics.
  EXPECT_FALSE(p.run.metrics);
  for (const GemmProfile& g : p.gemms) {
    EXPECT_EQ(g.reach, -1);
    EXPECT_TRUE(g.output_errors.empty());
    for (const OperandProfile& op : g.operands)
      for (const FormatStats& f : op.formats) EXPECT_EQ(f.bias_sqnr_mean, 0);
  }

  // Nor do the metrics' statistics change them: the quantized copies feed nothing.
  o = tiny("metrics");
  o.profile_steps = 3;
  o.profile_warmup = 4;
  o.profile.metrics = true;
  o.profile_out = (dir_ / "m.yaml").string();
  train(o);
  Checkpoint c = loadCheckpoint((dir_ / "metrics/checkpoint.pgqckpt").string());
  for (size_t i = 0; i < a.tensors.size(); ++i)
    EXPECT_EQ(std::memcmp(a.tensors[i].second.raw(), c.tensors[i].second.raw(), a.tensors[i].second.bytes()), 0)
        << a.tensors[i].first;
  Profile m = loadProfile(o.profile_out);
  EXPECT_TRUE(m.run.metrics);
  EXPECT_GT(m.run.metrics_step_ms, 0);
  EXPECT_EQ(m.gemms.size(), p.gemms.size());
  // The same operands are quantized with the same noise: the plain statistics agree.
  for (size_t i = 0; i < p.gemms.size(); ++i)
    EXPECT_EQ(m.gemms[i].lhs().formats[0].sqnr_mean, p.gemms[i].lhs().formats[0].sqnr_mean) << p.gemms[i].label;
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

// The error of a GEMM's result that the profile reports is the SQNR of the result
// quantize_gemms computes from the same operands: mean and min over the steps.
TEST_F(ProfileTest, OutputErrorsAreTheSqnrOfTheQuantizedGemm) {
  const char* one = R"(graph @g {
  %x = input() : f32[48,40]
  %w = parameter() : f32[40,24]
  %y = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="fc"} : f32[48,24]
  return %y
}
)";
  // The GEMM twice on the same operands: `ref` stays f32, `q` is rewritten.
  const char* twice = R"(graph @g {
  %x = input() : f32[48,40]
  %w = parameter() : f32[40,24]
  %ref = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="ref"} : f32[48,24]
  %q = matmul(%x, %w) {lhs_contract=[1], rhs_contract=[0], label="q"} : f32[48,24]
  return %ref, %q
}
)";
  const std::vector<std::string> formats = {"int4:channel:rtn", "e4m3:tensor:rtn"};
  auto measured = parseGraph(one);
  PassContext ctx;
  parsePipeline("tag_metadata,instrument_stats{output_pairs=[int4:channel:rtn/int4:channel:sr,"
                "e4m3:tensor:rtn/e5m2:tensor:sr]}")
      ->run(*measured, ctx);
  Executor exec(*measured);
  ProfileCollector collector(*measured);
  std::vector<std::unique_ptr<Executor>> direct;
  std::vector<std::unique_ptr<Graph>> rewritten;
  for (const std::string& format : formats) {
    rewritten.push_back(parseGraph(twice));
    Recipe recipe = parseRecipe(fmt::format("gemms:\n  - {{label: q, decision: {}, lhs_format: \"{}\", rhs_format: "
                                            "\"{}\"}}\n",
                                            QuantFormat::parse(format).isEmulated() ? "fp8" : "int8", format, format),
                                "r.yaml");
    Pipeline p;
    p.add(std::make_unique<TagMetadata>());
    p.add(std::make_unique<QuantizeGemms>(QuantizeGemmsOptions{.recipe = recipe}));
    p.run(*rewritten.back(), ctx);
    direct.push_back(std::make_unique<Executor>(*rewritten.back()));
  }
  Tensor w = toTensor(randomRefTensor({DType::kF32, Shape{40, 24}}, 2));
  std::vector<std::vector<double>> expected(formats.size());
  for (int step = 0; step < 3; ++step) {
    // Wider inputs each step: a different SQNR each time.
    Tensor x = toTensor(randomRefTensor({DType::kF32, Shape{48, 40}}, 10 + static_cast<uint64_t>(step), 1.0 + step));
    exec.bind("x", x);
    exec.bind("w", w);
    exec.run(step);
    collector.add(exec);
    for (size_t f = 0; f < formats.size(); ++f) {
      direct[f]->bind("x", x);
      direct[f]->bind("w", w);
      direct[f]->run(step);
      expected[f].push_back(1 / testing::relativeSquaredError(direct[f]->output<float>(0), direct[f]->output<float>(1)));
    }
  }
  ProfileRun run;
  run.metrics = true;
  Profile p = collector.profile(run);
  ASSERT_EQ(p.gemms.size(), 1u);
  const GemmProfile& g = p.gemms[0];
  // A forward GEMM: each pair's gradient format goes unused.
  ASSERT_EQ(g.output_errors.size(), 2u);
  for (size_t f = 0; f < formats.size(); ++f) {
    SCOPED_TRACE(formats[f]);
    const OutputErrorStats* e = g.findOutputError(QuantFormat::parse(formats[f]), QuantFormat::parse(formats[f]));
    ASSERT_NE(e, nullptr);
    const double mean = (expected[f][0] + expected[f][1] + expected[f][2]) / 3;
    const double min = *std::min_element(expected[f].begin(), expected[f].end());
    EXPECT_NEAR(e->sqnr_mean, mean, 1e-6 * mean);
    EXPECT_NEAR(e->sqnr_min, min, 1e-6 * min);
    EXPECT_GT(e->sqnr_mean, 10);
  }
  // One GEMM, no weight gradient: it reaches nothing.
  EXPECT_EQ(g.reach, -1);
  for (const OperandProfile& o : g.operands)
    for (const FormatStats& f : o.formats) EXPECT_EQ(f.bias_sqnr_mean, 0);  // no bias requested
}

// Reach, from the dataflow of the tiny model's training graph: a weight-gradient GEMM
// reaches itself; the logits' data gradient every weight gradient below the logits;
// every forward GEMM all of them.
TEST_F(ProfileTest, ReachFollowsTheDataflowToTheWeightGradients) {
  TrainOptions o = tiny("run");
  o.steps = 2;
  o.profile_steps = 2;
  o.profile.metrics = true;
  o.profile.outputs = true;
  o.profile_out = (dir_ / "p.yaml").string();
  train(o);
  Profile p = loadProfile(o.profile_out);  // (the file holds 9 significant digits)
  auto elements = [](const GemmProfile& g) {
    return static_cast<double>(g.gemm_shape[0] * g.gemm_shape[1] * g.gemm_shape[3]);
  };
  // The parameters counted: the weight-gradient GEMMs' results and the embedding
  // gradient's scatter-add ([vocab, d_model]; the tiny model's norms and embedding are
  // the only other parameters).
  double wgrad_elements = 0, gradient_reach_sum = 0;
  for (const GemmProfile& g : p.gemms)
    if (g.direction == GemmDirection::kBwdWgrad) wgrad_elements += elements(g), gradient_reach_sum += g.gradient_reach;
  const ModelConfig& m = o.model;
  const double embedding = static_cast<double>(m.vocab * m.d_model);
  const double counted = wgrad_elements + embedding;
  // The rest of the squared norm is the scatter-add's (its result profiled too).
  EXPECT_GT(gradient_reach_sum, 0.0);
  EXPECT_LT(gradient_reach_sum, 1.0 - 1e-6);
  const GemmProfile* logits_wgrad = p.find("get_logits:wgrad");
  const GemmProfile* logits_dgrad = p.find("get_logits:dgrad");
  ASSERT_NE(logits_wgrad, nullptr);
  ASSERT_NE(logits_dgrad, nullptr);
  EXPECT_NEAR(logits_dgrad->reach, 1.0 - logits_wgrad->reach, 1e-8);
  EXPECT_NEAR(logits_dgrad->gradient_reach, 1.0 - logits_wgrad->gradient_reach, 1e-7);
  for (const GemmProfile& g : p.gemms) {
    SCOPED_TRACE(g.label);
    if (g.direction == GemmDirection::kBwdWgrad) {
      EXPECT_NEAR(g.reach, elements(g) / counted, 1e-8);
    }
    if (g.direction == GemmDirection::kFwd) {
      EXPECT_NEAR(g.reach, 1.0, 1e-8);
      EXPECT_NEAR(g.gradient_reach, 1.0, 1e-7);
    }
    EXPECT_GE(g.reach, 0);
    EXPECT_LE(g.reach, 1);
    EXPECT_GE(g.gradient_reach, 0);
    // A data gradient reaches the weight gradients below it: no more than the logits'.
    if (g.direction == GemmDirection::kBwdDgrad) {
      EXPECT_LE(g.reach, logits_dgrad->reach + 1e-8);
    }
    EXPECT_FALSE(g.output_errors.empty());
    for (const OperandProfile& op : g.operands)
      for (const FormatStats& f : op.formats) EXPECT_GT(f.bias_sqnr_mean, 0) << op.sideName() << " " << f.format.toString();
  }
  // The first layer's query data gradient reaches only the embedding's gradient (a
  // scatter-add, no GEMM): its share of the parameters and of the squared norm; the
  // last layer's down projection's reaches the layers below.
  EXPECT_NEAR(p.find("layer0/attn/q:dgrad")->reach, embedding / counted, 1e-8);
  EXPECT_NEAR(p.find("layer0/attn/q:dgrad")->gradient_reach, 1.0 - gradient_reach_sum, 1e-7);
  EXPECT_GT(p.find("layer1/mlp/down:dgrad")->reach, p.find("layer0/mlp/down:dgrad")->reach);
}

// The output error pairs of --profile-metrics run exactly on this CPU: integer pairs at
// a width both operands may have (plan/profile_request.h decides; its test covers CPUs
// with and without VNNI).
TEST_F(ProfileTest, OutputPairsRunExactlyOnThisCpu) {
  TrainOptions o = tiny("run");
  EXPECT_TRUE(profileRequest(o).output_pairs.empty());
  o.profile.metrics = true;
  o.profile.granularity = ScaleLayout::parse("tensor");
  o.profile.candidates = {Scheme::kFp8};
  const ProfileRequest p = profileRequest(o);
  const int b = kernels::int8Caps().max_bits_both;
  ASSERT_EQ(p.output_pairs.size(), 6u);
  EXPECT_EQ(p.output_pairs.front().operand, QuantFormat::parse(fmt::format("int{}:tensor:rtn", b)));
  EXPECT_EQ(p.output_pairs.back(), (FormatPair{QuantFormat::parse("e4m3:tensor:rtn"), QuantFormat::parse("e5m2:tensor:sr")}));
  EXPECT_TRUE(p.metrics);
}

// The quantized copy of a GEMM and its error_stats run right after the GEMM: its result
// and the copy's die there, not at the end of the step.
// The forward GEMM of each backward GEMM: the collector takes it from the graph
// (autodiff's grad_of), the profile reader from the label the file records; they agree.
TEST_F(ProfileTest, BackwardGemmsNameTheirForwardGemm) {
  TrainOptions o = tiny("grad_of");
  TrainingSession session(o);
  session.step(0, true);
  const Profile p = session.profile();
  const Profile back = parseProfile(profileToYaml(p), "p.yaml");
  ASSERT_EQ(back.gemms.size(), p.gemms.size());
  int backward = 0;
  for (size_t i = 0; i < p.gemms.size(); ++i) {
    SCOPED_TRACE(p.gemms[i].label);
    EXPECT_EQ(back.gemms[i].grad_of, p.gemms[i].grad_of);
    if (!isBackward(p.gemms[i].direction)) {
      EXPECT_EQ(p.gemms[i].grad_of, "");
      continue;
    }
    ++backward;
    const GemmProfile* forward = p.find(p.gemms[i].grad_of);
    ASSERT_NE(forward, nullptr);
    EXPECT_EQ(forward->direction, GemmDirection::kFwd);
  }
  EXPECT_GT(backward, 0);
  EXPECT_EQ(p.find("layer0/mlp/up:wgrad")->grad_of, "layer0/mlp/up");
}

TEST_F(ProfileTest, OutputErrorsRunRightAfterTheirGemm) {
  TrainOptions o = tiny("run");
  o.profile.metrics = true;
  o.profile_ops = true;  // the executor's kernel order
  TrainingSession session(o);
  const Executor& exec = session.instrumentedExecutor();
  std::vector<NodeProfile> order = exec.profile();
  std::map<const Node*, size_t> position;
  for (size_t i = 0; i < order.size(); ++i) position[order[i].node] = i;
  int errors = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const Node* error = order[i].node;
    if (error->op() != Op::kErrorStats) continue;
    ++errors;
    const Node* gemm = error->operand(0);
    ASSERT_LT(position.at(gemm), i);
    // Between the GEMM and its error_stats only what measures: statistics, and values
    // (the copy's) read by nothing after the error_stats.
    for (size_t j = position.at(gemm) + 1; j < i; ++j) {
      const Node* n = order[j].node;
      bool dies = true;
      for (const Node* user : n->users()) dies = dies && position.count(user) && position.at(user) <= i;
      EXPECT_TRUE(isStatistics(*n) || dies) << n->name() << " between " << gemm->name() << " and " << error->name();
    }
  }
  EXPECT_GT(errors, 51);
}

}  // namespace
}  // namespace pgq
