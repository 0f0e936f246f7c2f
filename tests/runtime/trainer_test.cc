#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <numbers>

#include <gtest/gtest.h>

#include "runtime/checkpoint.h"
#include "runtime/trainer.h"
#include "runtime/training_session.h"
#include "support/errors.h"
#include "tests/test_util.h"

namespace pgq {
namespace {

namespace fs = std::filesystem;

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("pgq_trainer_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  TrainOptions tinyOptions(const std::string& out) {
    TrainOptions o;
    o.model = loadModelConfig("tiny");
    o.corpus = kDefaultCorpus;
    o.steps = 12;
    o.eval_every = 4;
    o.eval_batches = 2;
    o.optimizer.warmup = 3;
    o.optimizer.lr = 3e-3;
    o.out_dir = (dir_ / out).string();
    o.progress = false;
    return o;
  }

  fs::path dir_;
};

TEST_F(TrainerTest, LossGoesDownOnTheDefaultCorpus) {
  TrainOptions o = tinyOptions("run");
  o.steps = 150;
  o.eval_every = 50;
  TrainResult r = train(o);
  ASSERT_EQ(r.history.size(), 150u);
  double first = r.history.front().loss;
  double last = 0;
  for (size_t i = r.history.size() - 10; i < r.history.size(); ++i) last += r.history[i].loss / 10;
  EXPECT_NEAR(first, std::log(256.0), 0.3);  // an untrained byte model is ~uniform
  EXPECT_LT(last, first - 1.5);
  ASSERT_TRUE(r.final_val_loss);
  EXPECT_LT(*r.final_val_loss, first - 1.0);
  EXPECT_TRUE(fs::exists(r.checkpoint_path));
  // The metrics CSV has a header and one row per step; val_loss only on eval steps.
  std::ifstream csv(r.metrics_path);
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "step,loss,val_loss,val_bpb,lr,grad_norm,step_ms,tokens_per_s,recipe");
  int rows = 0;
  while (std::getline(csv, line)) ++rows;
  EXPECT_EQ(rows, 150);
}

// A recipe that runs every GEMM in bf16 (stage iii's bf16 choice: convert both operands,
// a bf16 GEMM) trains exactly as --precision bf16 does: the same conversions and GEMMs.
// (Validation runs in the run's precision: f32 with a recipe, so only training losses.)
TEST_F(TrainerTest, AnAllBf16RecipeTrainsAsPrecisionBf16) {
  const fs::path recipe = dir_ / "all_bf16.yaml";
  std::ofstream(recipe) << "gemms:\n  - {match: \".*\", decision: bf16, lhs_format: bf16, rhs_format: bf16}\n";
  TrainOptions a = tinyOptions("recipe");
  a.steps = 6;
  a.recipe_path = recipe.string();
  TrainOptions b = tinyOptions("precision");
  b.steps = 6;
  b.precision = Precision::kBf16;
  TrainOptions c = tinyOptions("f32");
  c.steps = 6;
  const TrainResult ra = train(a), rb = train(b), rc = train(c);
  ASSERT_EQ(ra.history.size(), 6u);
  ASSERT_EQ(rb.history.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(ra.history[i].loss, rb.history[i].loss) << "step " << i + 1;
  EXPECT_NE(ra.history[5].loss, rc.history[5].loss);  // bf16 is not f32
}

// With an int8 recipe the optimizer makes the next step's int8 weight copies
// (Executor::parameterQuantizations); state loaded into a running session replaces the
// weights, so the copies must be made anew: session `a`, after two steps, takes the state
// of `b` after three and then steps exactly as `b` does. (Were the copies of a's own
// weights kept, its fourth loss would differ.) Profiled steps run another executor: a
// step after one quantizes in the graph, and the two sessions stay equal through them.
TEST_F(TrainerTest, LoadedStateReplacesTheWeightsInt8Copies) {
  const fs::path recipe = dir_ / "all_int8.yaml";
  std::ofstream(recipe) << "gemms:\n  - {match: \".*\", decision: int8, lhs_format: int8:channel:rtn, "
                           "rhs_format: int8:channel:rtn}\n";
  TrainOptions oa = tinyOptions("a"), ob = tinyOptions("b");
  oa.recipe_path = ob.recipe_path = recipe.string();
  TrainingSession a(oa), b(ob);
  a.step(0);
  a.step(1);
  for (int64_t step = 0; step < 3; ++step) b.step(step);
  a.loadState(b.state(), "b");
  for (int64_t step = 3; step < 7; ++step) {
    const bool profile = step == 4;
    EXPECT_EQ(a.step(step, profile).loss, b.step(step, profile).loss) << "step " << step + 1;
  }
  const auto sa = a.state(), sb = b.state();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i)
    EXPECT_EQ(std::memcmp(sa[i].second.raw(), sb[i].second.raw(), sa[i].second.bytes()), 0) << sa[i].first;
}

TEST_F(TrainerTest, ResumeIsBitExact) {
  TrainOptions whole = tinyOptions("whole");
  train(whole);
  TrainOptions part = tinyOptions("part");
  part.stop_after = 5;  // as if the run were interrupted after step 5
  EXPECT_EQ(train(part).history.size(), 5u);
  part.stop_after = 0;
  part.resume = true;
  TrainResult resumed = train(part);
  EXPECT_EQ(resumed.history.front().step, 6);
  Checkpoint a = loadCheckpoint((dir_ / "whole/checkpoint.pgqckpt").string());
  Checkpoint b = loadCheckpoint((dir_ / "part/checkpoint.pgqckpt").string());
  EXPECT_EQ(a.step, 12);
  EXPECT_EQ(b.step, 12);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    SCOPED_TRACE(a.tensors[i].first);
    ASSERT_EQ(a.tensors[i].first, b.tensors[i].first);
    ASSERT_EQ(a.tensors[i].second.bytes(), b.tensors[i].second.bytes());
    EXPECT_EQ(std::memcmp(a.tensors[i].second.raw(), b.tensors[i].second.raw(), a.tensors[i].second.bytes()), 0);
  }
  // The resumed metrics file holds steps 1..12 once each.
  std::ifstream csv(dir_ / "part/metrics.csv");
  std::string line;
  std::vector<std::string> steps;
  std::getline(csv, line);
  while (std::getline(csv, line)) steps.push_back(line.substr(0, line.find(',')));
  ASSERT_EQ(steps.size(), 12u);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(steps[static_cast<size_t>(i)], std::to_string(i + 1));
}

// A checkpoint keeps what the kernels carry from step to step (delayed scaling's amax
// histories, predicted weight scales), and the first resumed step's predicted scales add
// the bound of the update before the stop: a stopped and resumed FP8 run ends with the
// uninterrupted run's checkpoint, byte for byte. A new run from the stopped one's
// checkpoint (--init-from) scales anew, and its first step differs.
TEST_F(TrainerTest, ResumeKeepsDelayedAndPredictedScaling) {
  const fs::path recipe = dir_ / "fp8.yaml";
  std::ofstream(recipe) << "gemms:\n"
                           "  - {match: \"layer./mlp/(up|down)\", decision: fp8, lhs_format: \"e4m3:tensor:rtn\", "
                           "rhs_format: \"e4m3:tensor:rtn\", predict_weight_scale: true}\n"
                           "  - {match: \".*\", decision: fp8, lhs_format: \"e4m3:tensor:rtn\", "
                           "rhs_format: \"e4m3:tensor:rtn\", amax_history: 3}\n";
  TrainOptions whole = tinyOptions("whole");
  whole.steps = 8;
  whole.recipe_path = recipe.string();
  const TrainResult uninterrupted = train(whole);
  TrainOptions part = whole;
  part.out_dir = (dir_ / "part").string();
  part.stop_after = 4;
  train(part);
  fs::copy_file(dir_ / "part/checkpoint.pgqckpt", dir_ / "at4.pgqckpt");
  part.stop_after = 0;
  part.resume = true;
  const TrainResult resumed = train(part);
  ASSERT_EQ(resumed.history.front().step, 5);
  EXPECT_EQ(resumed.history.front().loss, uninterrupted.history[4].loss);
  Checkpoint a = loadCheckpoint((dir_ / "whole/checkpoint.pgqckpt").string());
  Checkpoint b = loadCheckpoint((dir_ / "part/checkpoint.pgqckpt").string());
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  int delayed = 0, predicted = 0;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    SCOPED_TRACE(a.tensors[i].first);
    ASSERT_EQ(a.tensors[i].first, b.tensors[i].first);
    ASSERT_EQ(a.tensors[i].second.bytes(), b.tensors[i].second.bytes());
    EXPECT_EQ(std::memcmp(a.tensors[i].second.raw(), b.tensors[i].second.raw(), a.tensors[i].second.bytes()), 0);
    if (a.tensors[i].first == "kernel_state/train/layer0/attn/q.lhs_scales") ++delayed;
    if (a.tensors[i].first == "kernel_state/train/layer0/mlp/up.rhs_scales") ++predicted;
  }
  EXPECT_EQ(delayed, 1);
  EXPECT_EQ(predicted, 1);
  TrainOptions fresh = whole;
  fresh.out_dir = (dir_ / "fresh").string();
  fresh.init_from = (dir_ / "at4.pgqckpt").string();
  const TrainResult anew = train(fresh);
  ASSERT_EQ(anew.history.front().step, 5);
  EXPECT_NE(anew.history.front().loss, uninterrupted.history[4].loss);
}

TEST_F(TrainerTest, InitFromStartsANewRunThatContinuesTheDataOrder) {
  TrainOptions whole = tinyOptions("whole");
  train(whole);
  TrainOptions base = tinyOptions("base");
  base.stop_after = 5;
  train(base);
  TrainOptions next = tinyOptions("next");
  next.init_from = base.out_dir + "/checkpoint.pgqckpt";
  TrainResult r = train(next);
  EXPECT_EQ(r.history.front().step, 6);
  Checkpoint a = loadCheckpoint(whole.out_dir + "/checkpoint.pgqckpt");
  Checkpoint b = loadCheckpoint(next.out_dir + "/checkpoint.pgqckpt");
  for (size_t i = 0; i < a.tensors.size(); ++i)
    EXPECT_EQ(std::memcmp(a.tensors[i].second.raw(), b.tensors[i].second.raw(), a.tensors[i].second.bytes()), 0)
        << a.tensors[i].first;
  // The base run is untouched, and --resume with --init-from is a contradiction.
  EXPECT_EQ(loadCheckpoint(base.out_dir + "/checkpoint.pgqckpt").step, 5);
  next.resume = true;
  EXPECT_THROW(train(next), Error);
}

TEST_F(TrainerTest, InitFromMayChangeBatchAndSeedButNotTheModel) {
  TrainOptions base = tinyOptions("base");
  base.stop_after = 5;
  train(base);
  // A second seed, at twice the batch: a new run, from the same weights.
  TrainOptions next = tinyOptions("next");
  next.init_from = base.out_dir + "/checkpoint.pgqckpt";
  next.model.seed += 1;
  next.model.batch *= 2;
  TrainResult r = train(next);
  EXPECT_EQ(r.history.front().step, 6);
  EXPECT_TRUE(std::isfinite(r.history.back().loss));
  // Resuming changes nothing: the seed is the run's.
  TrainOptions resumed = base;
  resumed.stop_after = 0;
  resumed.resume = true;
  resumed.model.seed += 1;
  EXPECT_NE(test::errorOf([&] { train(resumed); }).find("field 'seed' is"), std::string::npos);
  // Any other change of the model is refused, naming what may change.
  TrainOptions wider = tinyOptions("wider");
  wider.init_from = next.init_from;
  wider.model.n_layers += 1;
  EXPECT_NE(test::errorOf([&] { train(wider); })
                .find("only batch, seed and tensor_parallel may change in a new run from it): n_layers is 2 there, 3 here"),
            std::string::npos);
}

TEST_F(TrainerTest, DivergenceStopsWithTheStepAndKeepsTheLastCheckpoint) {
  TrainOptions o = tinyOptions("nan");
  o.steps = 20;
  o.stop_after = 4;
  train(o);  // a healthy start, checkpointed at step 4
  // The learning rate is at most 10 (support/option_ranges.h), too little to overflow
  // the tiny model in a few steps; a negative AdamW second moment, whose square root
  // is NaN, makes the weights NaN after the next step instead.
  std::string path = o.out_dir + "/checkpoint.pgqckpt";
  Checkpoint before = loadCheckpoint(path);
  for (auto& [name, tensor] : before.tensors)
    if (name.starts_with("adam_v/")) std::fill_n(tensor.data<float>(), tensor.numElements(), -1e6f);
  saveCheckpoint(path, before);
  o.stop_after = 0;
  o.resume = true;
  try {
    train(o);
    FAIL() << "training from a NaN-producing optimizer state did not diverge";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("step "), std::string::npos) << msg;
    EXPECT_NE(msg.find("the last good checkpoint"), std::string::npos) << msg;
    EXPECT_NE(msg.find("step 4"), std::string::npos) << msg;
  }
  Checkpoint kept = loadCheckpoint(o.out_dir + "/checkpoint.pgqckpt");
  EXPECT_EQ(kept.step, 4);
  for (size_t i = 0; i < kept.tensors.size(); ++i)
    EXPECT_EQ(std::memcmp(kept.tensors[i].second.raw(), before.tensors[i].second.raw(),
                          kept.tensors[i].second.bytes()),
              0);
}

TEST_F(TrainerTest, RefusesToClobberOrResumeWhatIsNotThere) {
  TrainOptions o = tinyOptions("run");
  o.steps = 2;
  o.optimizer.warmup = 2;
  o.resume = true;
  EXPECT_THROW(train(o), Error);  // nothing to resume
  o.resume = false;
  train(o);
  EXPECT_THROW(train(o), Error);  // would overwrite a checkpoint
  o.resume = true;
  EXPECT_THROW(train(o), Error);  // already at step 2
  TrainOptions other = o;
  other.model.d_ff = 48;
  other.steps = 4;
  EXPECT_THROW(train(other), Error);  // another model
  // A corrupted checkpoint is reported, not loaded.
  std::string path = o.out_dir + "/checkpoint.pgqckpt";
  fs::resize_file(path, fs::file_size(path) / 2);
  o.steps = 4;
  EXPECT_THROW(train(o), Error);
}

// With bytes every target is one byte: bits per byte is the loss in bits.
TEST_F(TrainerTest, BitsPerByteOfAByteModelIsTheLossInBits) {
  TrainOptions o = tinyOptions("run");
  TrainResult r = train(o);
  int evaluations = 0;
  for (const StepRecord& step : r.history) {
    ASSERT_EQ(step.val_loss.has_value(), step.val_bpb.has_value());
    if (!step.val_loss) continue;
    ++evaluations;
    EXPECT_NEAR(*step.val_bpb, *step.val_loss / std::numbers::ln2, 1e-12 * *step.val_bpb);
  }
  EXPECT_EQ(evaluations, 3);
  ASSERT_TRUE(r.final_val_bpb);
  EXPECT_EQ(*r.final_val_bpb, *r.history.back().val_bpb);
}

TEST_F(TrainerTest, ATokenizerThatCannotFeedTheModelIsRefused) {
  TrainOptions o = tinyOptions("run");
  o.model.vocab = 300;  // bytes have 256 ids
  EXPECT_EQ(test::errorOf([&] { train(o); }),
            "model <preset tiny>: field 'vocab' is 300, but tokenizer bytes has exactly 256 tokens; set vocab to "
            "256, or tokenizer to sentencepiece");
}

TEST_F(TrainerTest, BadCorpusIsAnError) {
  TrainOptions o = tinyOptions("run");
  o.corpus = (dir_ / "missing.txt").string();
  EXPECT_THROW(train(o), Error);
  std::ofstream(dir_ / "short.txt") << "too short";
  o.corpus = (dir_ / "short.txt").string();
  EXPECT_THROW(train(o), Error);
  std::ofstream(dir_ / "empty.txt").close();
  o.corpus = (dir_ / "empty.txt").string();
  EXPECT_THROW(train(o), Error);
}

// Library callers get the same range checks as the CLI: each bad value is an Error
// naming the option, raised before the run directory is created or a graph is built.
TEST_F(TrainerTest, OptionsOutOfRangeFailBeforeAnyWork) {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  const int64_t huge = std::numeric_limits<int64_t>::max();
  struct Case {
    std::string name;  // named in the message
    std::function<void(TrainOptions&)> set;
  };
  std::vector<Case> cases = {
      {"--steps", [](TrainOptions& o) { o.steps = 0; }},
      {"--steps", [&](TrainOptions& o) { o.steps = huge; }},
      {"--stop-after", [](TrainOptions& o) { o.stop_after = -1; }},
      {"--eval-every", [](TrainOptions& o) { o.eval_every = -1; }},
      {"--eval-batches", [&](TrainOptions& o) { o.eval_batches = huge; }},
      {"--eval-batches", [](TrainOptions& o) { o.eval_batches = 0; }},
      {"--checkpoint-every", [](TrainOptions& o) { o.checkpoint_every = -5; }},
      {"log_every", [](TrainOptions& o) { o.log_every = 0; }},
      {"--lr", [&](TrainOptions& o) { o.optimizer.lr = nan; }},
      {"--lr", [](TrainOptions& o) { o.optimizer.lr = -1; }},
      {"--lr", [&](TrainOptions& o) { o.optimizer.lr = inf; }},
      {"--warmup", [](TrainOptions& o) { o.optimizer.warmup = -5; }},
      {"--warmup", [](TrainOptions& o) { o.optimizer.warmup = 13; }},  // past the 12 steps
      {"--min-lr-ratio", [](TrainOptions& o) { o.optimizer.min_lr_ratio = 2; }},
      {"--weight-decay", [&](TrainOptions& o) { o.optimizer.weight_decay = nan; }},
      {"--grad-clip", [&](TrainOptions& o) { o.optimizer.grad_clip = nan; }},
      {"--grad-clip", [](TrainOptions& o) { o.optimizer.grad_clip = -1; }},
      {"optimizer.beta1", [](TrainOptions& o) { o.optimizer.beta1 = 1; }},
      {"optimizer.beta2", [&](TrainOptions& o) { o.optimizer.beta2 = -inf; }},
      {"optimizer.eps", [](TrainOptions& o) { o.optimizer.eps = 0; }},
      {"--profile-bits", [](TrainOptions& o) { o.profile.bits = 9; }},
      {"--profile-steps", [](TrainOptions& o) { o.profile_steps = -1; }},
      {"--profile-warmup", [&](TrainOptions& o) {
         o.profile_steps = 1;
         o.profile_warmup = huge;  // + profile_steps would overflow
       }},
      {"--profile-warmup", [](TrainOptions& o) {
         o.profile_steps = 5;
         o.profile_warmup = 10;  // 15 > 12 steps
       }},
  };
  for (const Case& c : cases) {
    TrainOptions o = tinyOptions("run");
    o.profile_out = (dir_ / "p.yaml").string();
    o.profile_steps = 2;
    c.set(o);
    for (bool session : {false, true}) {
      SCOPED_TRACE(c.name + (session ? " (TrainingSession)" : " (train)"));
      try {
        if (session) {
          TrainingSession s(o);
        } else {
          train(o);
        }
        ADD_FAILURE() << "no error";
      } catch (const Error& e) {
        std::string message = e.what();
        EXPECT_TRUE(message.starts_with(c.name + ":") || message.starts_with(c.name + " ")) << message;
      }
      EXPECT_FALSE(fs::exists(o.out_dir));
      EXPECT_FALSE(fs::exists(o.profile_out));
    }
  }
}

TEST(LearningRate, WarmupThenCosine) {
  OptimizerConfig opt;
  opt.lr = 1.0;
  opt.warmup = 10;
  opt.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(learningRate(opt, 0, 100), 0.1);
  EXPECT_DOUBLE_EQ(learningRate(opt, 9, 100), 1.0);
  EXPECT_DOUBLE_EQ(learningRate(opt, 10, 100), 1.0);
  EXPECT_NEAR(learningRate(opt, 55, 100), 0.55, 1e-12);
  EXPECT_NEAR(learningRate(opt, 100, 100), 0.1, 1e-12);
}

}  // namespace
}  // namespace pgq
