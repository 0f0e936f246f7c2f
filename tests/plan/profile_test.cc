// The profile's fields of the metrics beyond SQNR (`--profile-metrics`) through YAML:
// written when recorded, read back exactly, absent (and defaulted) otherwise.
#include "plan/profile.h"

#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "support/errors.h"

namespace pgq {
namespace {

Profile metricsProfile() {
  Profile p;
  ProfileRun& r = p.run;
  r.model = "tiny";
  r.model_config = "name: tiny\n";
  r.corpus = "c.txt";
  r.corpus_fingerprint = "0123456789abcdef";
  r.profile_steps = 2;
  r.threads = 1;
  r.precision = "f32";
  r.pgq_version = "0.1.0";
  r.cpu_isa = "avx2";
  r.formats = {"int8:channel:rtn"};
  r.gradient_formats = {"int8:channel:sr"};
  r.step_ms = 10.5;
  r.metrics = true;
  r.metrics_step_ms = 31.25;
  GemmProfile g;
  g.label = "layer0/mlp/up:wgrad";
  g.direction = GemmDirection::kBwdWgrad;
  g.gemm_shape = g.device_shape = {1, 4, 8, 16};
  g.flops = 1024;
  g.bytes = 4 * (32 + 128 + 64);
  auto operand = [](const std::string& side, OperandRole role) {
    OperandProfile o;
    o.side = parseName<GemmOperand>(side);
    o.role = role;
    o.tensor = side + "_value";
    o.shape = {8, 4};
    o.contract_dims = {0};
    o.absmax = 2;
    o.absmax_mean = 1.5;
    o.rms = 0.5;
    o.formats = {{QuantFormat::parse("int8:channel:rtn"), 1e4, 9e3, 1.1e4, 1e-5, 0.01, 0, 2500.5}};
    return o;
  };
  g.operands = {operand("lhs", OperandRole::kActivation), operand("rhs", OperandRole::kGradient)};
  g.operands[1].formats.push_back({QuantFormat::parse("int8:channel:sr"), 8e3, 7e3, 9e3, 2e-5, 0, 0, 7990.25});
  g.reach = 0.125;
  g.gradient_reach = 0.0625;
  const QuantFormat rtn = QuantFormat::parse("int8:channel:rtn"), sr = QuantFormat::parse("int8:channel:sr");
  g.output_errors = {{rtn, rtn, 5000.5, 4000.25}, {rtn, sr, 3000.5, 2000.25}};
  g.grad_of = "layer0/mlp/up";
  GemmProfile forward = g;  // the GEMM the weight gradient differentiates
  forward.label = "layer0/mlp/up";
  forward.direction = GemmDirection::kFwd;
  forward.grad_of.clear();
  p.gemms = {g, forward};
  return p;
}

TEST(ProfileMetrics, RoundTripThroughYaml) {
  const Profile p = metricsProfile();
  const std::string yaml = profileToYaml(p);
  EXPECT_NE(yaml.find("  metrics: true\n  metrics_step_ms: 31.25\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("    reach: 0.125\n    gradient_reach: 0.0625\n    output_errors:\n"
                      "      - {lhs_format: int8:channel:rtn, rhs_format: int8:channel:rtn, sqnr_mean: 5000.5, "
                      "sqnr_min: 4000.25}\n"),
            std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("bias_sqnr_mean: 7990.25}"), std::string::npos) << yaml;
  const Profile back = parseProfile(yaml, "p.yaml");
  EXPECT_TRUE(back.run.metrics);
  EXPECT_EQ(back.run.metrics_step_ms, 31.25);
  const GemmProfile& g = back.gemms[0];
  EXPECT_EQ(g.reach, 0.125);
  EXPECT_EQ(g.gradient_reach, 0.0625);
  ASSERT_EQ(g.output_errors.size(), 2u);
  const QuantFormat rtn_format = QuantFormat::parse("int8:channel:rtn"), sr_format = QuantFormat::parse("int8:channel:sr");
  const OutputErrorStats* sr = g.findOutputError(rtn_format, sr_format);
  ASSERT_NE(sr, nullptr);
  EXPECT_EQ(sr->sqnr_mean, 3000.5);
  EXPECT_EQ(sr->sqnr_min, 2000.25);
  EXPECT_EQ(g.findOutputError(sr_format, sr_format), nullptr);
  EXPECT_EQ(g.lhs().formats[0].bias_sqnr_mean, 2500.5);
  EXPECT_EQ(g.rhs().find(sr_format)->bias_sqnr_mean, 7990.25);
  EXPECT_EQ(g.grad_of, "layer0/mlp/up");
  EXPECT_NE(yaml.find("    direction: bwd_wgrad\n    grad_of: layer0/mlp/up\n"), std::string::npos) << yaml;
  EXPECT_EQ(g.lhs().side, GemmOperand::kLhs);
  EXPECT_EQ(g.rhs().side, GemmOperand::kRhs);
  EXPECT_EQ(profileToYaml(back), yaml);
}

// The forward GEMM a backward GEMM differentiates: `grad_of:`, or in a profile written
// before that field, the label without autodiff's suffix. One that names no forward
// GEMM, or a grad_of on a forward GEMM, is refused naming the field.
TEST(ProfileMetrics, GradOfFromTheFileOrOlderFilesLabels) {
  const std::string yaml = profileToYaml(metricsProfile());
  const std::string line = "    grad_of: layer0/mlp/up\n";
  const size_t at = yaml.find(line);
  ASSERT_NE(at, std::string::npos);
  std::string older = yaml;
  older.erase(at, line.size());
  EXPECT_EQ(parseProfile(older, "p.yaml").gemms[0].grad_of, "layer0/mlp/up");
  std::string renamed = yaml;
  renamed.replace(at, line.size(), "    grad_of: layer0/mlp/down\n");
  EXPECT_THROW(
      {
        try {
          parseProfile(renamed, "p.yaml");
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("grad_of': names 'layer0/mlp/down', which is no forward GEMM"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
  std::string forward = yaml;
  const size_t fwd = forward.find("    direction: fwd\n");
  ASSERT_NE(fwd, std::string::npos);
  forward.insert(fwd + std::string("    direction: fwd\n").size(), "    grad_of: layer0/mlp/up\n");
  EXPECT_THROW(parseProfile(forward, "p.yaml"), Error);
}

TEST(ProfileMetrics, AbsentWithoutMetricsAndRangeChecked) {
  Profile p = metricsProfile();
  p.run.metrics = false;
  for (GemmProfile& g : p.gemms) {
    g.reach = g.gradient_reach = -1;
    g.output_errors.clear();
    for (OperandProfile& o : g.operands)
      for (FormatStats& f : o.formats) f.bias_sqnr_mean = 0;
  }
  const std::string yaml = profileToYaml(p);
  for (const char* field : {"metrics", "reach", "output_errors", "bias_sqnr_mean"})
    EXPECT_EQ(yaml.find(field), std::string::npos) << field;
  const Profile back = parseProfile(yaml, "p.yaml");
  EXPECT_FALSE(back.run.metrics);
  EXPECT_EQ(back.run.metrics_step_ms, 0);
  EXPECT_EQ(back.gemms[0].reach, -1);
  EXPECT_EQ(back.gemms[0].gradient_reach, -1);
  EXPECT_TRUE(back.gemms[0].output_errors.empty());
  EXPECT_EQ(back.gemms[0].lhs().formats[0].bias_sqnr_mean, 0);
  // A reach is a fraction.
  std::string bad = profileToYaml(metricsProfile());
  bad.replace(bad.find("reach: 0.125"), 12, "reach: 1.5");
  EXPECT_THROW(parseProfile(bad, "p.yaml"), Error);
}

}  // namespace
// Issue 29, 12: the sizes the roofline estimates from are checked, naming the field.
TEST(ProfileShapes, AbsurdOrInconsistentShapesAreRefused) {
  struct Case {
    std::vector<int64_t> gemm, device;
    int64_t flops;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{1, 4, -8, 16}, {1, 4, 8, 16}, 1024, "gemm_shape': dims of [batch, M, K, N] must lie in [1, 2147483647], got -8"},
      {{1, 0, 8, 16}, {1, 1, 8, 16}, 0, "got 0"},
      {{1, 1 << 20, 1 << 20, 1 << 20}, {1, 4, 8, 16}, 2 * (int64_t{1} << 60), "more than any GEMM a profile describes"},
      {{1, 4, 8, 16}, {1, 4, 8, 16}, 1000, "flops': 1000 is not twice the product of gemm_shape (1024)"},
      {{1, 4, 8, 16}, {1, 8, 8, 16}, 1024, "device_shape': dim 1 is 8; one device's share lies in [1, 4]"},
      {{1, 4, 8, 16}, {1, 4, 0, 16}, 1024, "device_shape': dim 2 is 0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    Profile p = metricsProfile();
    p.gemms[0].gemm_shape = c.gemm;
    p.gemms[0].device_shape = c.device;
    p.gemms[0].flops = c.flops;
    try {
      parseProfile(profileToYaml(p), "p.yaml");
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("p.yaml"), std::string::npos) << e.what();
    }
  }
}


// Issue 32: a profile of the PyTorch collector (python/pgq_profile) marks its version in
// run.pgq_version; one from a newer collector is refused, naming the file and field.
TEST(ProfileCollector, VersionMarkIsReadAndANewerCollectorRefused) {
  Profile p = metricsProfile();
  EXPECT_EQ(parseProfile(profileToYaml(p), "p.yaml").run.collector_version, 0);
  p.run.pgq_version = "pgq_profile/1 (torch 2.5.1)";
  EXPECT_EQ(parseProfile(profileToYaml(p), "p.yaml").run.collector_version, 1);
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"pgq_profile/2 (torch 2.5.1)", "field 'run.pgq_version': written by pgq_profile collector version 2; this pgq "
                                      "reads collector profiles up to version 1: update pgq"},
      {"pgq_profile/x", "field 'run.pgq_version': 'pgq_profile/x' names no collector version"},
      {"pgq_profile/0", "names no collector version"},
  };
  for (const auto& [mark, message] : refused) {
    SCOPED_TRACE(mark);
    p.run.pgq_version = mark;
    try {
      parseProfile(profileToYaml(p), "p.yaml");
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("p.yaml:"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

}  // namespace pgq
