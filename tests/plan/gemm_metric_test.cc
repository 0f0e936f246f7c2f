// The metrics beyond SQNR (plan/gemm_metric.h): their definitions on a hand-made
// profile, the thresholds and orderings of recipes made with them, the sqnr-table's
// columns, and the errors for a profile that lacks their statistics.
#include "plan/gemm_metric.h"

#include <cmath>

#include <gtest/gtest.h>

#include "plan/hardware.h"
#include "plan/policy.h"
#include "plan/recipe_generator.h"
#include "plan/sqnr_table.h"
#include "support/errors.h"

namespace pgq {
namespace {

const char* kHardware = R"(name: test-cpu
threads: 2
peak_gflops: {f32: 200, bf16: 200, int8: 400}
gemm_gflops: {f32: 180, bf16: 170, int8: 340}
memory_bandwidth_gbs: 40
quantize_gbs: {rtn: 30, sr: 15}
call_overhead_us: 3
int8: {vnni: true, max_bits_one: 8, max_bits_both: 8}
)";

// An operand profiled in int4:tensor (rtn, and sr for gradients) with a bias-aware SQNR.
OperandProfile operand(const std::string& side, OperandRole role, double sqnr, double bias) {
  OperandProfile o;
  o.side = parseName<GemmOperand>(side);
  o.role = role;
  o.tensor = side + "_t";
  o.formats.push_back({QuantFormat::parse("int4:tensor:rtn"), sqnr, sqnr, sqnr, 1 / sqnr, 0, 0, bias});
  if (role == OperandRole::kGradient)
    o.formats.push_back({QuantFormat::parse("int4:tensor:sr"), sqnr / 2, sqnr / 2, sqnr / 2, 2 / sqnr, 0, 0, sqnr / 2});
  return o;
}

GemmProfile gemm(const std::string& label, GemmDirection d, OperandRole l, double sl, double bl, OperandRole r,
                 double sr, double br, double output, double reach, double gradient_reach) {
  GemmProfile g;
  g.label = label;
  g.direction = d;
  g.layer = 0;
  g.gemm_shape = g.device_shape = {1, 1024, 1024, 1024};
  g.flops = 2LL << 30;
  g.bytes = 12LL << 20;
  g.operands = {operand("lhs", l, sl, bl), operand("rhs", r, sr, br)};
  g.reach = reach;
  g.gradient_reach = gradient_reach;
  g.output_errors.push_back({QuantFormat::parse("int4:tensor:rtn"), QuantFormat::parse("int4:tensor:rtn"), output, output});
  return g;
}

// Three backward GEMMs: SQNR orders a > b > c; the bias-aware SQNR says a is biased; the
// output SQNR says b is worst; c's result reaches nothing but its own weight.
Profile metricProfile() {
  Profile p;
  p.source = "prof.yaml";
  p.run.model = "test";
  p.run.metrics = true;
  using R = OperandRole;
  p.gemms = {
      gemm("a:dgrad", GemmDirection::kBwdDgrad, R::kGradient, 40, 2, R::kWeight, 50, 50, 30, 0.9, 0.8),
      gemm("b:dgrad", GemmDirection::kBwdDgrad, R::kGradient, 20, 20, R::kWeight, 50, 50, 5, 0.5, 0.6),
      gemm("c:wgrad", GemmDirection::kBwdWgrad, R::kActivation, 30, 30, R::kGradient, 10, 10, 8, 0.01, 0.02),
  };
  return p;
}

double metric(Metric m, const GemmProfile& g) {
  return metricOf(m, g, QuantFormat::parse("int4:tensor:rtn"), QuantFormat::parse("int4:tensor:rtn"), g.lhs().formats[0].sqnr_mean, g.rhs().formats[0].sqnr_mean,
                  "prof.yaml")
      .value;
}

TEST(GemmMetric, NamesParseAndListEveryMetric) {
  EXPECT_EQ(metricNames(), "sqnr, bias, output, reach, effect");
  for (Metric m : allMetrics()) EXPECT_EQ(parseMetric(nameOf(m)), m);
  EXPECT_FALSE(parseMetric("SQNR"));
  try {
    metricFromName("snr", "--metric");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--metric: unknown metric 'snr'; expected one of sqnr, bias, output, reach, effect");
  }
}

TEST(GemmMetric, Definitions) {
  Profile p = metricProfile();
  const GemmProfile &a = p.gemms[0], &c = p.gemms[2];
  EXPECT_DOUBLE_EQ(metric(Metric::kSqnr, a), 40);
  EXPECT_DOUBLE_EQ(metric(Metric::kBias, a), 2);  // the lower input's bias-aware SQNR
  EXPECT_DOUBLE_EQ(metric(Metric::kOutput, a), 30);
  EXPECT_DOUBLE_EQ(metric(Metric::kReach, a), 40 / 0.9);
  EXPECT_DOUBLE_EQ(metric(Metric::kEffect, a), 30 / 0.8);
  EXPECT_DOUBLE_EQ(metric(Metric::kReach, c), 10 / 0.01);  // a wgrad reaches only its own weight
}

TEST(GemmMetric, AnotherIntegerWidthIsEstimatedFromTheProfiledOne) {
  Profile p = metricProfile();
  MetricValue v = metricOf(Metric::kBias, p.gemms[0], QuantFormat::parse("int3:tensor:rtn"), QuantFormat::parse("int4:tensor:rtn"), 10,
                           50, "prof.yaml");
  EXPECT_TRUE(v.estimated);
  EXPECT_DOUBLE_EQ(v.value, 2.0 / 4);  // one bit fewer: a quarter
}

TEST(GemmMetric, AProfileWithoutTheStatisticsNamesTheFieldAndTheFlag) {
  Profile p = metricProfile();
  p.run.metrics = false;
  for (Metric m : {Metric::kBias, Metric::kOutput, Metric::kReach}) {
    try {
      requireMetric(p, m, "prof.yaml");
      FAIL() << nameOf(m);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("prof.yaml: metric '" + std::string(nameOf(m)) + "'"), std::string::npos);
      EXPECT_NE(std::string(e.what()).find("--profile-metrics"), std::string::npos) << e.what();
    }
  }
  EXPECT_NO_THROW(requireMetric(p, Metric::kSqnr, "prof.yaml"));
  p.run.metrics = true;
  p.gemms[1].gradient_reach = -1;
  EXPECT_THROW(
      {
        try {
          requireMetric(p, Metric::kEffect, "prof.yaml");
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("GEMM 'b:dgrad' has none"), std::string::npos);
          EXPECT_NE(std::string(e.what()).find("--profile-outputs"), std::string::npos);
          throw;
        }
      },
      Error);
  // A pair of formats the profile did not measure the output error for.
  try {
    metricOf(Metric::kOutput, p.gemms[0], QuantFormat::parse("e4m3:tensor:rtn"), QuantFormat::parse("e4m3:tensor:rtn"),
             1, 1, "prof.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("e4m3:tensor:rtn x e4m3:tensor:rtn (output_errors)"), std::string::npos);
  }
}

// A profile of the PyTorch collector is not remade with `pgq train`: the advice names the
// collector's arguments, and where it left reach out, why and what to use instead.
TEST(GemmMetric, ACollectorProfileWithoutTheStatisticsNamesTheCollectorsWay) {
  Profile p = metricProfile();
  p.run.collector_version = 1;
  p.run.metrics = false;
  auto message = [&](Metric m) {
    try {
      requireMetric(p, m, "torch.yaml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(Metric::kBias).find("pgq_profile.collect(..., metrics=True)"), std::string::npos)
      << message(Metric::kBias);
  EXPECT_NE(message(Metric::kEffect).find("metrics=True, outputs=True"), std::string::npos) << message(Metric::kEffect);
  EXPECT_EQ(message(Metric::kEffect).find("pgq train"), std::string::npos) << message(Metric::kEffect);
  p.run.metrics = true;
  EXPECT_EQ(message(Metric::kReach), "no error");
  for (GemmProfile& g : p.gemms) g.reach = g.gradient_reach = -1;
  for (Metric m : {Metric::kReach, Metric::kEffect}) {
    const std::string text = message(m);
    EXPECT_EQ(text.rfind("torch.yaml: metric '" + std::string(nameOf(m)) + "' needs ", 0), 0u) << text;
    EXPECT_NE(text.find("the PyTorch collector leaves it out"), std::string::npos) << text;
    EXPECT_NE(text.find("choose metric sqnr, bias or output"), std::string::npos) << text;
    EXPECT_EQ(text.find("pgq train"), std::string::npos) << text;
  }
  EXPECT_EQ(message(Metric::kOutput), "no error");
  EXPECT_EQ(defaultMetric(p), Metric::kSqnr);
}

Policy backwardOnly(double threshold, Metric m) {
  Policy p = loadPolicy("F+B");
  p.forward.quantize = false;
  p.backward.threshold = threshold;
  p.bits = 4;
  p.granularity = ScaleLayout::parse("tensor");
  p.metric = m;
  return p;
}

std::vector<std::string> quantized(const Recipe& r) {
  std::vector<std::string> out;
  for (const RecipeEntry& e : r.entries)
    if (e.decision == Decision::kQuantize) out.push_back(e.label);
  return out;
}

TEST(GemmMetric, ThresholdsCompareThePolicysMetric) {
  HardwareModel hw = parseHardwareModel(kHardware, "hw");
  Profile p = metricProfile();
  // Above 15: by SQNR a and b (c's gradient is 10); by the bias-aware SQNR only b; by
  // output SQNR a; by reach c (1000) and a (44), not b (40).
  using V = std::vector<std::string>;
  EXPECT_EQ(quantized(generateRecipe(p, hw, backwardOnly(15, Metric::kSqnr), "prof.yaml")), (V{"a:dgrad", "b:dgrad"}));
  EXPECT_EQ(quantized(generateRecipe(p, hw, backwardOnly(15, Metric::kBias), "prof.yaml")), (V{"b:dgrad"}));
  EXPECT_EQ(quantized(generateRecipe(p, hw, backwardOnly(15, Metric::kOutput), "prof.yaml")), (V{"a:dgrad"}));
  EXPECT_EQ(quantized(generateRecipe(p, hw, backwardOnly(42, Metric::kReach), "prof.yaml")), (V{"a:dgrad", "c:wgrad"}));
  Recipe r = generateRecipe(p, hw, backwardOnly(15, Metric::kBias), "prof.yaml");
  EXPECT_NE(r.entries[0].reason.find("bias 2 (min SQNR 40) <= 15: kept f32"), std::string::npos) << r.entries[0].reason;
  EXPECT_DOUBLE_EQ(r.entries[1].metric_value, 20);
  // An ordering's scores replace the metric.
  std::map<std::string, double> scores{{"a:dgrad", 0}, {"b:dgrad", 1}, {"c:wgrad", 1}};
  EXPECT_EQ(quantized(generateRecipe(p, hw, backwardOnly(0.5, Metric::kSqnr), "prof.yaml", &scores)),
            (V{"b:dgrad", "c:wgrad"}));
}

// A policy that names no metric compares the default: effect when the profile has its
// statistics, SQNR otherwise; the recipe says which.
TEST(GemmMetric, TheDefaultIsEffectWhenTheProfileGivesIt) {
  HardwareModel hw = parseHardwareModel(kHardware, "hw");
  Profile p = metricProfile();
  EXPECT_EQ(defaultMetric(p), Metric::kEffect);
  Policy unnamed = backwardOnly(15, Metric::kSqnr);
  unnamed.metric.reset();
  // By effect above 15: a (30 / 0.8) and c (8 / 0.02); b's 5 / 0.6 is below.
  using V = std::vector<std::string>;
  Recipe r = generateRecipe(p, hw, unnamed, "prof.yaml");
  EXPECT_EQ(quantized(r), (V{"a:dgrad", "c:wgrad"}));
  EXPECT_EQ(r.entries[0].metric_value, 30 / 0.8);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes[0].find("the default metric, effect"), std::string::npos) << r.notes[0];
  // Without the results' statistics (no gradient reach): SQNR, and the note says why.
  for (GemmProfile& g : p.gemms) g.gradient_reach = -1;
  EXPECT_EQ(defaultMetric(p), Metric::kSqnr);
  r = generateRecipe(p, hw, unnamed, "prof.yaml");
  EXPECT_EQ(quantized(r), (V{"a:dgrad", "b:dgrad"}));
  EXPECT_NE(r.notes[0].find("thresholds compare min SQNR: the default metric, effect, needs"), std::string::npos)
      << r.notes[0];
  // Forward GEMMs compare SQNR by default: f's SQNR (30) passes 15, its effect (5) would not.
  Profile with_forward = metricProfile();
  with_forward.gemms.push_back(gemm("f", GemmDirection::kFwd, OperandRole::kActivation, 30, 30, OperandRole::kWeight, 30,
                                    30, 5, 1, 1));
  Policy both = unnamed;
  both.forward = {.quantize = true, .threshold = 15};
  EXPECT_EQ(quantized(generateRecipe(with_forward, hw, both, "prof.yaml")), (V{"a:dgrad", "c:wgrad", "f"}));
  both.metric = Metric::kEffect;
  EXPECT_EQ(quantized(generateRecipe(with_forward, hw, both, "prof.yaml")), (V{"a:dgrad", "c:wgrad"}));
  // A named metric is used (and required) as named, without a note.
  r = generateRecipe(metricProfile(), hw, backwardOnly(15, Metric::kSqnr), "prof.yaml");
  EXPECT_EQ(quantized(r), (V{"a:dgrad", "b:dgrad"}));
  EXPECT_TRUE(r.notes.empty());
}

TEST(GemmMetric, PolicyFilesNameTheirMetric) {
  Policy p = parsePolicy("name: t\nmetric: bias\nforward: {quantize: true}\nbackward: {quantize: true, threshold: 3}\n",
                         "t.yaml");
  EXPECT_EQ(p.metric, Metric::kBias);
  try {
    parsePolicy("name: t\nmetric: loss\nforward: {quantize: true}\nbackward: {quantize: false}\n", "t.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown metric 'loss'; expected one of sqnr, bias"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("t.yaml"), std::string::npos);
  }
}

TEST(GemmMetric, TheSqnrTableShowsAndSortsByEveryMetric) {
  Profile p = metricProfile();
  const QuantFormat int4 = QuantFormat::parse("int4:tensor:rtn");
  std::vector<SqnrRow> rows = sqnrRows(p, int4, std::nullopt, Metric::kBias);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].label, "a:dgrad");  // bias 2 is the lowest
  EXPECT_EQ(metricsShown(rows).size(), allMetrics().size());
  std::string md = sqnrTableMarkdown(rows, "int4:tensor:rtn");
  EXPECT_NE(md.find("| bias | output | reach | effect |"), std::string::npos) << md;
  std::string csv = sqnrTableCsv(rows);
  EXPECT_NE(csv.find("min_sqnr,bias,output,reach,effect\n"), std::string::npos);
  // Without the statistics the columns are absent, and sorting by them is refused.
  p.run.metrics = false;
  for (GemmProfile& g : p.gemms) g.output_errors.clear(), g.reach = g.gradient_reach = -1;
  for (GemmProfile& g : p.gemms)
    for (OperandProfile& o : g.operands)
      for (FormatStats& f : o.formats) f.bias_sqnr_mean = 0;
  rows = sqnrRows(p, int4);
  EXPECT_EQ(metricsShown(rows), std::vector<Metric>{Metric::kSqnr});
  EXPECT_EQ(sqnrTableMarkdown(rows, "int4:tensor:rtn").find("| bias |"), std::string::npos);
  EXPECT_THROW(sqnrRows(p, int4, std::nullopt, Metric::kOutput), Error);
}

}  // namespace
}  // namespace pgq
