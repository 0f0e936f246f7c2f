// The scaling strategies of a profile: their arithmetic on hand-made absmax series,
// AdamW's step bound against the AdamW kernel, the `scaling` record's round trip
// through YAML and its validation, and the `sqnr-table --scaling` table.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/optim.h"
#include "plan/profile.h"
#include "plan/scaling_strategies.h"
#include "plan/sqnr_table.h"
#include "support/errors.h"

namespace pgq {
namespace {

std::vector<WeightStepBound> constantLr(size_t steps, double lr, double rigorous_bound = 1.0) {
  return std::vector<WeightStepBound>(steps, WeightStepBound{lr, rigorous_bound});
}

TEST(DelayedScaling, ASpikeClipsOnceByItsRatio) {
  const std::vector<double> absmax = {1.0, 1.0, 1.0, 2.5, 1.0, 1.0};
  ScalingStats s = scalingStats(absmax, 16);
  EXPECT_EQ(s.steps, 6);
  EXPECT_EQ(s.delayed_history, 5);  // min(16, steps - 1)
  // Only step 3 exceeds its history (1); after it the history holds the spike.
  EXPECT_DOUBLE_EQ(s.delayed_clip_fraction, 1.0 / 5.0);
  EXPECT_DOUBLE_EQ(s.delayed_worst_ratio, 2.5);
  EXPECT_FALSE(s.predicted.has_value());  // no optimizer steps given
}

TEST(DelayedScaling, AShortHistoryForgetsTheSpike) {
  const std::vector<double> absmax = {1.0, 1.0, 1.0, 2.0, 1.0, 1.5};
  // H = 1 is "most recent": step 5 (1.5) exceeds step 4 (1.0) too.
  ScalingStats h1 = scalingStats(absmax, 1);
  EXPECT_EQ(h1.delayed_history, 1);
  EXPECT_DOUBLE_EQ(h1.delayed_clip_fraction, 2.0 / 5.0);
  EXPECT_DOUBLE_EQ(h1.delayed_worst_ratio, 2.0);
  // H = 2 still holds the spike at step 5.
  ScalingStats h2 = scalingStats(absmax, 2);
  EXPECT_DOUBLE_EQ(h2.delayed_clip_fraction, 1.0 / 5.0);
  EXPECT_DOUBLE_EQ(h2.delayed_worst_ratio, 2.0);
}

TEST(DelayedScaling, ASteadyOrShrinkingTensorNeverClips) {
  ScalingStats flat = scalingStats(std::vector<double>{3.0, 3.0, 3.0}, 16);
  EXPECT_EQ(flat.delayed_clip_fraction, 0.0);
  EXPECT_EQ(flat.delayed_worst_ratio, 1.0);
  ScalingStats shrinking = scalingStats(std::vector<double>{3.0, 2.0, 1.0}, 16);
  EXPECT_EQ(shrinking.delayed_clip_fraction, 0.0);
  EXPECT_EQ(shrinking.delayed_worst_ratio, 1.0);
}

// An amax history of zeros keeps the scale before it (TE's _default_sf_compute): at
// first the unit scale, which the statistics cannot judge (no clip), later the last
// positive amax's.
TEST(DelayedScaling, AnAllZeroHistoryKeepsTheScaleBeforeIt) {
  ScalingStats first = scalingStats(std::vector<double>{0.0, 0.0, 4.0}, 16);
  EXPECT_EQ(first.delayed_clip_fraction, 0.0);
  EXPECT_EQ(first.delayed_worst_ratio, 1.0);
  // H = 1: step 2's history is step 1's 0, so step 0's 2 still scales it.
  ScalingStats later = scalingStats(std::vector<double>{2.0, 0.0, 4.0, 1.0}, 1);
  EXPECT_DOUBLE_EQ(later.delayed_clip_fraction, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(later.delayed_worst_ratio, 2.0);
}

TEST(PredictedWeightScales, GrowthWithinLrNeverClips) {
  const double lr = 1e-3;
  std::vector<double> absmax;
  for (int t = 0; t < 8; ++t) absmax.push_back(0.5 + 0.6 * lr * t);  // 0.6 lr per step
  ScalingStats s = scalingStats(absmax, 16, constantLr(absmax.size(), lr, 1.2));
  ASSERT_TRUE(s.predicted.has_value());
  const PredictedScaling& p = *s.predicted;
  EXPECT_EQ(p.clip_fraction, 0.0);
  EXPECT_EQ(p.worst_ratio, 1.0);
  EXPECT_EQ(p.rigorous_clip_fraction, 0.0);
  double over = 0, rigorous = 0;
  for (size_t t = 1; t < absmax.size(); ++t) {
    over += (absmax[t - 1] + lr) / absmax[t];
    rigorous += (absmax[t - 1] + 1.2 * lr) / absmax[t];
  }
  EXPECT_DOUBLE_EQ(p.overestimate, over / 7);
  EXPECT_DOUBLE_EQ(p.rigorous_overestimate, rigorous / 7);
  EXPECT_GT(p.overestimate, 1.0);
  EXPECT_GT(p.rigorous_overestimate, p.overestimate);
  // Delayed scaling clips every step of a growing tensor, by a ratio just above 1.
  EXPECT_EQ(s.delayed_clip_fraction, 1.0);
  EXPECT_NEAR(s.delayed_worst_ratio, (0.5 + 0.6 * lr) / 0.5, 1e-12);
}

TEST(PredictedWeightScales, GrowthFasterThanLrClips) {
  const double lr = 1e-3;
  std::vector<double> absmax;
  for (int t = 0; t < 5; ++t) absmax.push_back(0.5 + 3 * lr * t);  // 3 lr per step
  ScalingStats s = scalingStats(absmax, 16, constantLr(absmax.size(), lr, 2.0));
  ASSERT_TRUE(s.predicted.has_value());
  const PredictedScaling& p = *s.predicted;
  EXPECT_EQ(p.clip_fraction, 1.0);
  // The worst step is the first, where 3 lr is the largest part of the amax.
  EXPECT_DOUBLE_EQ(p.worst_ratio, (0.5 + 3 * lr) / (0.5 + lr));
  EXPECT_LT(p.overestimate, 1.0);
  // A bound of 2 lr still falls short of 3 lr a step.
  EXPECT_EQ(p.rigorous_clip_fraction, 1.0);
  ScalingStats wide = scalingStats(absmax, 16, constantLr(absmax.size(), lr, 3.5));
  EXPECT_EQ(wide.predicted->rigorous_clip_fraction, 0.0);
}

TEST(PredictedWeightScales, UseEachStepsOwnLearningRate) {
  // A warmup: lr grows 1e-3, 2e-3, 3e-3 and the weight grows by 0.9 of each.
  const std::vector<WeightStepBound> updates = {{1e-3, 1}, {2e-3, 1}, {3e-3, 1}, {4e-3, 1}};
  const std::vector<double> absmax = {1.0, 1.0009, 1.0027, 1.0054};
  EXPECT_EQ(scalingStats(absmax, 16, updates).predicted->clip_fraction, 0.0);
  // With the first step's lr throughout, steps 2 and 3 clip.
  EXPECT_DOUBLE_EQ(scalingStats(absmax, 16, constantLr(4, 1e-3)).predicted->clip_fraction, 2.0 / 3.0);
}

TEST(AdamUpdateBound, IsOneAtTheFirstStepAndGrowsToItsLimit) {
  for (auto [b1, b2] : {std::pair{0.9, 0.95}, {0.9, 0.999}, {0.0, 0.5}, {0.0, 0.0}})
    EXPECT_NEAR(adamUpdateBound(b1, b2, 1), 1.0, 1e-12) << b1 << " " << b2;
  // (1 - b1) / sqrt((1 - b2)(1 - b1^2 / b2)).
  EXPECT_NEAR(adamUpdateBound(0.9, 0.95, 100000), 0.1 / std::sqrt(0.05 * (1 - 0.81 / 0.95)), 1e-9);
  EXPECT_NEAR(adamUpdateBound(0.9, 0.999, 100000), 0.1 / std::sqrt(0.001 * (1 - 0.81 / 0.999)), 1e-6);
  double previous = 0;
  for (int64_t t : {1, 2, 3, 10, 100, 1000}) {
    const double b = adamUpdateBound(0.9, 0.95, t);
    EXPECT_GE(b, previous) << t;
    previous = b;
  }
  // (1 - b1) / sqrt(1 - b2) alone is below the first step's bound: not a bound.
  EXPECT_LT(0.1 / std::sqrt(0.05), adamUpdateBound(0.9, 0.95, 1));
  // Unbounded updates: momentum without a second-moment history.
  EXPECT_EQ(adamUpdateBound(0.5, 0.0, 3), 1e30);
  EXPECT_EQ(adamUpdateBound(0.9, 0.5, 1000000), 1e30);  // beta1^2 > beta2
}

// The AdamW kernel on the worst gradients for step t (the gradient j steps old is
// (beta1 / beta2)^j) moves the weight by the bound, never more.
TEST(AdamUpdateBound, HoldsAndIsReachedByTheKernel) {
  const float b1 = 0.9f, b2 = 0.95f, lr = 1e-3f;
  for (int64_t steps : {1, 2, 5, 20, 100}) {
    float w = 0.25f, m = 0, v = 0, before = w;
    for (int64_t k = 1; k <= steps; ++k) {
      const float g = static_cast<float>(std::pow(static_cast<double>(b1) / b2, static_cast<double>(steps - k)));
      before = w;
      kernels::adamwUpdate(&w, &g, &m, &v, 1, {lr, b1, b2, 1e-12f, 0.0f, k}, 1.0f);
    }
    const double moved = std::abs(static_cast<double>(w) - before) / lr;
    const double bound = adamUpdateBound(b1, b2, steps);
    EXPECT_LE(moved, bound * (1 + 1e-4)) << steps;
    EXPECT_GE(moved, bound * (1 - 1e-3)) << steps;
  }
}

// A profile with one GEMM: a weight with predicted scales, an activation without, and
// an output with no scaling record (as an older profile has).
Profile scalingProfile() {
  Profile p;
  ProfileRun& r = p.run;
  r.model = "tiny";
  r.model_config = "name: tiny\n";
  r.corpus = "c.txt";
  r.corpus_fingerprint = "0123456789abcdef";
  r.profile_steps = 4;
  r.threads = 1;
  r.precision = "f32";
  r.pgq_version = "0.1.0";
  r.cpu_isa = "avx2";
  r.formats = {"int8:channel:rtn"};
  r.gradient_formats = {"int8:channel:sr"};
  GemmProfile g;
  g.label = "layer0/mlp/up";
  g.gemm_shape = g.device_shape = {1, 8, 4, 16};
  g.flops = 1024;
  g.bytes = 4 * (32 + 64 + 128);
  auto operand = [](const std::string& side, std::optional<OperandRole> role) {
    OperandProfile o;
    o.side = parseName<GemmOperand>(side);
    o.role = role;
    o.tensor = side + "_value";
    o.shape = {8, 4};
    o.contract_dims = {1};
    o.absmax = 2;
    o.absmax_mean = 1.5;
    o.rms = 0.5;
    o.formats = {{QuantFormat::parse("int8:channel:rtn"), 1e4, 9e3, 1.1e4, 1e-5, 0.01, 0}};
    return o;
  };
  OperandProfile activation = operand("lhs", OperandRole::kActivation);
  activation.scaling = ScalingStats{4, 3, 1.0 / 3.0, 1.25, std::nullopt};
  OperandProfile weight = operand("rhs", OperandRole::kWeight);
  weight.scaling = ScalingStats{4, 3, 0.0, 1.0, PredictedScaling{1.0 / 3.0, 1.0002, 1.001, 0.0, 1.0015}};
  g.operands = {activation, weight, operand("out", std::nullopt)};
  p.gemms = {g};
  return p;
}

std::string parseError(const std::string& text) {
  try {
    parseProfile(text, "p.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

TEST(ScalingRecord, RoundTripsThroughYaml) {
  const Profile p = scalingProfile();
  const std::string yaml = profileToYaml(p);
  EXPECT_NE(yaml.find("        scaling:\n          steps: 4\n          delayed_history: 3\n"
                      "          delayed_clip_fraction: 0.333333333\n          delayed_worst_ratio: 1.25\n"),
            std::string::npos)
      << yaml;
  Profile back = parseProfile(yaml, "p.yaml");
  const std::vector<OperandProfile>& ops = back.gemms[0].operands;
  ASSERT_TRUE(ops[0].scaling.has_value());
  EXPECT_EQ(ops[0].scaling->steps, 4);
  EXPECT_EQ(ops[0].scaling->delayed_history, 3);
  EXPECT_NEAR(ops[0].scaling->delayed_clip_fraction, 1.0 / 3.0, 1e-9);
  EXPECT_EQ(ops[0].scaling->delayed_worst_ratio, 1.25);
  EXPECT_FALSE(ops[0].scaling->predicted.has_value());
  ASSERT_TRUE(ops[1].scaling && ops[1].scaling->predicted);
  const PredictedScaling& pred = *ops[1].scaling->predicted;
  EXPECT_NEAR(pred.clip_fraction, 1.0 / 3.0, 1e-9);
  EXPECT_EQ(pred.worst_ratio, 1.0002);
  EXPECT_EQ(pred.overestimate, 1.001);
  EXPECT_EQ(pred.rigorous_clip_fraction, 0.0);
  EXPECT_EQ(pred.rigorous_overestimate, 1.0015);
  EXPECT_FALSE(ops[2].scaling.has_value());  // a profile without records still loads
  EXPECT_EQ(profileToYaml(back), yaml);
  // The CSV repeats an operand's strategies on each of its format rows.
  const std::string csv = profileToCsv(p);
  EXPECT_NE(csv.find(",clipped_fraction,delayed_clip_fraction,delayed_worst_ratio,predicted_clip_fraction\n"),
            std::string::npos);
  EXPECT_NE(csv.find(",activation,lhs_value,"), std::string::npos);
  EXPECT_NE(csv.find(",0.333333333,1.25,\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",0,1,0.333333333\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",0,,,\n"), std::string::npos) << csv;  // the output: none
}

TEST(ScalingRecord, BadValuesAreRejectedNamingTheField) {
  const std::string good = profileToYaml(scalingProfile());
  ASSERT_EQ(parseError(good), "no error");
  struct Case {
    std::string from, to, message;
  };
  const std::vector<Case> cases = {
      {"delayed_clip_fraction: 0.333333333", "delayed_clip_fraction: 1.5",
       "field 'gemms[0].operands[0].scaling.delayed_clip_fraction': expected a number in [0, 1], got 1.5"},
      {"delayed_worst_ratio: 1.25", "delayed_worst_ratio: 0.5",
       "field 'gemms[0].operands[0].scaling.delayed_worst_ratio'"},
      // The upper bound that stands for "none" is named too (session 15).
      {"delayed_worst_ratio: 1.25", "delayed_worst_ratio: 1.7e308",
       "field 'gemms[0].operands[0].scaling.delayed_worst_ratio': expected a number in [1, 1e+300], got 1.7e+308"},
      {"delayed_worst_ratio: 1.25", "delayed_worst_ratio: .nan",
       "field 'gemms[0].operands[0].scaling.delayed_worst_ratio'"},
      {"predicted_clip_fraction: 0.333333333", "predicted_clip_fraction: -0.1",
       "field 'gemms[0].operands[1].scaling.predicted_clip_fraction'"},
      {"predicted_overestimate: 1.001", "predicted_overestimate: -1",
       "field 'gemms[0].operands[1].scaling.predicted_overestimate'"},
      {"          predicted_rigorous_overestimate: 1.0015\n", "",
       "field 'gemms[0].operands[1].scaling.predicted_rigorous_overestimate': is missing"},
      {"delayed_history: 3\n          delayed_clip_fraction: 0.3",
       "delayed_history: 4\n          delayed_clip_fraction: 0.3",
       "field 'gemms[0].operands[0].scaling.delayed_history'"},
      {"steps: 4\n          delayed_history: 3\n          delayed_clip_fraction: 0.3",
       "steps: 1\n          delayed_history: 3\n          delayed_clip_fraction: 0.3",
       "field 'gemms[0].operands[0].scaling.steps'"},
      {"          steps: 4\n          delayed_history: 3\n          delayed_clip_fraction: 0.3",
       "          delayed_history: 3\n          delayed_clip_fraction: 0.3",
       "field 'gemms[0].operands[0].scaling.steps': is missing"},
      {"delayed_worst_ratio: 1.25\n", "delayed_worst_ratio: 1.25\n          predicted_clip_fraction: 0\n",
       "field 'gemms[0].operands[0].scaling.predicted_clip_fraction': predicted scales are for weight operands only"},
      {"delayed_worst_ratio: 1.25\n", "delayed_worst_ratio: 1.25\n          jit_clip_fraction: 0\n",
       "unknown field 'gemms[0].operands[0].scaling.jit_clip_fraction'"},
  };
  for (const Case& c : cases) {
    const std::string error = parseError(replaced(good, c.from, c.to));
    EXPECT_NE(error.find("p.yaml:"), std::string::npos) << error;
    EXPECT_NE(error.find(c.message), std::string::npos) << c.to << "\n" << error;
  }
}

TEST(ScalingTable, ShowsTheWorstClippedFirst) {
  Profile p = scalingProfile();
  EXPECT_THROW(scalingRows(p), Error);  // the output has no record
  p.gemms[0].operands.pop_back();
  std::vector<ScalingRow> rows = scalingRows(p);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].side, "lhs");  // clipped by 1.25 under delayed scaling
  EXPECT_EQ(rows[1].role, "weight");
  const std::string md = scalingTableMarkdown(rows);
  EXPECT_NE(md.find("over 4 logged steps"), std::string::npos) << md;
  EXPECT_NE(md.find("previous 3 steps"), std::string::npos) << md;
  EXPECT_NE(md.find("| 1 | layer0/mlp/up | fwd | lhs | activation | 33.3% | 1.25 | - | - | - |\n"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| 2 | layer0/mlp/up | fwd | rhs | weight | 0.0% | 1 | 33.3% | 1.0002 | 1.001 |\n"),
            std::string::npos)
      << md;
  const std::string csv = scalingTableCsv(rows);
  EXPECT_EQ(csv.substr(0, 20), "rank,label,direction");
  EXPECT_NE(csv.find("\n1,layer0/mlp/up,fwd,lhs,activation,4,3,0.333333333,1.25,,,,,\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\n2,layer0/mlp/up,fwd,rhs,weight,4,3,0,1,0.333333333,1.0002,1.001,0,1.0015\n"),
            std::string::npos)
      << csv;
  const std::string json = scalingTableJson(rows);
  EXPECT_NE(json.find("\"predicted\": null"), std::string::npos) << json;
  EXPECT_NE(json.find("\"rigorous_overestimate\": 1.0015"), std::string::npos) << json;
}

}  // namespace
}  // namespace pgq
