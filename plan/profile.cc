#include "plan/profile.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string_view>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "support/config_file.h"
#include "support/errors.h"
#include "support/escape.h"
#include "support/file_io.h"

namespace pgq {

const FormatStats* OperandProfile::find(const QuantFormat& format) const {
  for (const FormatStats& f : formats)
    if (f.format == format) return &f;
  return nullptr;
}

const OutputErrorStats* GemmProfile::findOutputError(const QuantFormat& lhs, const QuantFormat& rhs) const {
  for (const OutputErrorStats& e : output_errors)
    if (e.lhs_format == lhs && e.rhs_format == rhs) return &e;
  return nullptr;
}

const GemmProfile* Profile::find(const std::string& label) const {
  for (const GemmProfile& g : gemms)
    if (g.label == label) return &g;
  return nullptr;
}

namespace {

YAML::Emitter& flowList(YAML::Emitter& out, const std::vector<int64_t>& values) {
  out << YAML::Flow << YAML::BeginSeq;
  for (int64_t v : values) out << v;
  return out << YAML::EndSeq;
}

YAML::Emitter& flowList(YAML::Emitter& out, const std::vector<std::string>& values) {
  out << YAML::Flow << YAML::BeginSeq;
  for (const std::string& v : values) out << v;
  return out << YAML::EndSeq;
}

void emitOperand(YAML::Emitter& out, const OperandProfile& o) {
  out << YAML::BeginMap;
  out << YAML::Key << "side" << YAML::Value << std::string(o.sideName());
  out << YAML::Key << "role" << YAML::Value << std::string(o.roleName());
  out << YAML::Key << "tensor" << YAML::Value << o.tensor;
  out << YAML::Key << "shape" << YAML::Value;
  flowList(out, o.shape);
  out << YAML::Key << "contract_dims" << YAML::Value;
  flowList(out, o.contract_dims);
  out << YAML::Key << "batch_dims" << YAML::Value;
  flowList(out, o.batch_dims);
  out << YAML::Key << "absmax" << YAML::Value << o.absmax;
  out << YAML::Key << "absmax_mean" << YAML::Value << o.absmax_mean;
  out << YAML::Key << "rms" << YAML::Value << o.rms;
  out << YAML::Key << "zero_fraction" << YAML::Value << o.zero_fraction;
  out << YAML::Key << "nonfinite_fraction" << YAML::Value << o.nonfinite_fraction;
  out << YAML::Key << "formats" << YAML::Value << YAML::BeginSeq;
  for (const FormatStats& f : o.formats) {
    out << YAML::Flow << YAML::BeginMap;
    out << YAML::Key << "format" << YAML::Value << f.format.toString();
    out << YAML::Key << "sqnr_mean" << YAML::Value << f.sqnr_mean;
    out << YAML::Key << "sqnr_min" << YAML::Value << f.sqnr_min;
    out << YAML::Key << "sqnr_max" << YAML::Value << f.sqnr_max;
    out << YAML::Key << "mse" << YAML::Value << f.mse;
    out << YAML::Key << "underflow_fraction" << YAML::Value << f.underflow_fraction;
    out << YAML::Key << "clipped_fraction" << YAML::Value << f.clipped_fraction;
    if (f.bias_sqnr_mean > 0) out << YAML::Key << "bias_sqnr_mean" << YAML::Value << f.bias_sqnr_mean;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  if (const std::optional<ScalingStats>& s = o.scaling) {
    out << YAML::Key << "scaling" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "steps" << YAML::Value << s->steps;
    out << YAML::Key << "delayed_history" << YAML::Value << s->delayed_history;
    out << YAML::Key << "delayed_clip_fraction" << YAML::Value << s->delayed_clip_fraction;
    out << YAML::Key << "delayed_worst_ratio" << YAML::Value << s->delayed_worst_ratio;
    if (const std::optional<PredictedScaling>& p = s->predicted) {
      out << YAML::Key << "predicted_clip_fraction" << YAML::Value << p->clip_fraction;
      out << YAML::Key << "predicted_worst_ratio" << YAML::Value << p->worst_ratio;
      out << YAML::Key << "predicted_overestimate" << YAML::Value << p->overestimate;
      out << YAML::Key << "predicted_rigorous_clip_fraction" << YAML::Value << p->rigorous_clip_fraction;
      out << YAML::Key << "predicted_rigorous_overestimate" << YAML::Value << p->rigorous_overestimate;
    }
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
}

std::vector<int64_t> intList(const ConfigNode& node, std::string_view key, size_t exact_size = 0) {
  ConfigNode list = node.child(key);
  std::vector<int64_t> out;
  for (const ConfigNode& item : list.items()) out.push_back(item.asInt());
  if (exact_size && out.size() != exact_size)
    node.fail(key, fmt::format("expected a list of {} integers, got {}", exact_size, out.size()));
  return out;
}

std::vector<std::string> stringList(const ConfigNode& node, std::string_view key) {
  std::vector<std::string> out;
  for (const ConfigNode& item : node.child(key).items()) out.push_back(item.asString());
  return out;
}

void checkFormat(const ConfigNode& node, std::string_view key, const std::string& format) {
  try {
    QuantFormat::parse(format);
  } catch (const Error& e) {
    node.fail(key, e.what());
  }
}

// Field `key`, a format's text.
QuantFormat formatField(const ConfigNode& node, std::string_view key) {
  const std::string text = node.getString(key);
  try {
    return QuantFormat::parse(text);
  } catch (const Error& e) {
    node.fail(key, e.what());
  }
}

FormatStats readFormat(const ConfigNode& node) {
  node.allowOnly({"format", "sqnr_mean", "sqnr_min", "sqnr_max", "mse", "underflow_fraction", "clipped_fraction",
                  "bias_sqnr_mean"});
  FormatStats f;
  f.format = formatField(node, "format");
  f.sqnr_mean = node.getDouble("sqnr_mean", 0.0, 1e300);
  f.sqnr_min = node.getDouble("sqnr_min", 0.0, 1e300);
  f.sqnr_max = node.getDouble("sqnr_max", 0.0, 1e300);
  if (!(f.sqnr_min <= f.sqnr_mean * (1 + 1e-9) && f.sqnr_mean <= f.sqnr_max * (1 + 1e-9)))
    node.fail("sqnr_mean", fmt::format("expected sqnr_min <= sqnr_mean <= sqnr_max, got {} {} {}", f.sqnr_min,
                                       f.sqnr_mean, f.sqnr_max));
  f.mse = node.getDouble("mse", 0.0, 1e300);
  f.underflow_fraction = node.getDouble("underflow_fraction", 0.0, 1.0);
  f.clipped_fraction = node.getDouble("clipped_fraction", 0.0, 1.0);
  if (node.has("bias_sqnr_mean")) f.bias_sqnr_mean = node.getDouble("bias_sqnr_mean", 0.0, 1e300);
  return f;
}

// Every field is required; the predicted ones only on weights (`weight`), where they are
// all or none (a profile made without the optimizer's learning rates has none).
ScalingStats readScaling(const ConfigNode& node, bool weight) {
  node.allowOnly({"steps", "delayed_history", "delayed_clip_fraction", "delayed_worst_ratio",
                  "predicted_clip_fraction", "predicted_worst_ratio", "predicted_overestimate",
                  "predicted_rigorous_clip_fraction", "predicted_rigorous_overestimate"});
  ScalingStats s;
  s.steps = node.getInt("steps", 2, INT64_MAX);
  s.delayed_history = node.getInt("delayed_history", 1, s.steps - 1);
  s.delayed_clip_fraction = node.getDouble("delayed_clip_fraction", 0.0, 1.0);
  // A ratio of a clipping strategy is >= 1 by definition (1 when it never clipped).
  s.delayed_worst_ratio = node.getDouble("delayed_worst_ratio", 1.0, 1e300);
  constexpr std::string_view kPredicted[] = {"predicted_clip_fraction", "predicted_worst_ratio",
                                             "predicted_overestimate", "predicted_rigorous_clip_fraction",
                                             "predicted_rigorous_overestimate"};
  size_t given = 0;
  for (std::string_view key : kPredicted) given += node.has(key) ? 1 : 0;
  if (given == 0) return s;
  if (!weight)
    for (std::string_view key : kPredicted)
      if (node.has(key)) node.fail(key, "predicted scales are for weight operands only");
  PredictedScaling p;
  p.clip_fraction = node.getDouble("predicted_clip_fraction", 0.0, 1.0);
  p.worst_ratio = node.getDouble("predicted_worst_ratio", 1.0, 1e300);
  p.overestimate = node.getDouble("predicted_overestimate", 0.0, 1e300);
  p.rigorous_clip_fraction = node.getDouble("predicted_rigorous_clip_fraction", 0.0, 1.0);
  p.rigorous_overestimate = node.getDouble("predicted_rigorous_overestimate", 0.0, 1e300);
  s.predicted = p;
  return s;
}

OperandProfile readOperand(const ConfigNode& node) {
  node.allowOnly({"side", "role", "tensor", "shape", "contract_dims", "batch_dims", "absmax", "absmax_mean", "rms",
                  "zero_fraction", "nonfinite_fraction", "formats", "scaling"});
  OperandProfile o;
  // The GEMM's result is no operand and has no operand role.
  o.side = parseName<GemmOperand>(node.getEnum("side", {"lhs", "rhs", "out"}));
  o.role = parseName<OperandRole>(node.getEnum("role", {"weight", "activation", "gradient", "output"}));
  o.tensor = node.getString("tensor");
  o.shape = intList(node, "shape");
  o.contract_dims = intList(node, "contract_dims");
  o.batch_dims = intList(node, "batch_dims");
  for (int64_t d : o.shape)
    if (d < 1) node.fail("shape", "dims must be >= 1");
  o.absmax = node.getDouble("absmax", 0.0, 1e300);
  o.absmax_mean = node.getDouble("absmax_mean", 0.0, 1e300);
  o.rms = node.getDouble("rms", 0.0, 1e300);
  o.zero_fraction = node.getDouble("zero_fraction", 0.0, 1.0);
  o.nonfinite_fraction = node.getDouble("nonfinite_fraction", 0.0, 1.0);
  for (const ConfigNode& f : node.child("formats").items()) o.formats.push_back(readFormat(f));
  if (o.formats.empty()) node.fail("formats", "expected at least one format");
  if (node.has("scaling")) o.scaling = readScaling(node.child("scaling"), o.role == OperandRole::kWeight);
  return o;
}

// The sizes the roofline estimates from: every dim of [batch, M, K, N] at least 1 and
// below 2^31, at most 2^52 multiply-adds (a GEMM of a 1B-parameter model's head over a
// million tokens is 2^48), flops twice that, each device's share no larger than the
// whole. An edited or damaged profile otherwise reaches the roofline as a GEMM estimated
// at 6e15 ms.
void checkGemmShapes(const ConfigNode& node, const GemmProfile& g) {
  constexpr int64_t kMaxDim = (int64_t{1} << 31) - 1;
  constexpr double kMaxMacs = static_cast<double>(int64_t{1} << 52);
  double macs = 1;
  for (int64_t d : g.gemm_shape) {
    if (d < 1 || d > kMaxDim)
      node.fail("gemm_shape", fmt::format("dims of [batch, M, K, N] must lie in [1, {}], got {}", kMaxDim, d));
    macs *= static_cast<double>(d);
  }
  if (macs > kMaxMacs)
    node.fail("gemm_shape", fmt::format("{} multiply-adds is more than any GEMM a profile describes (at most 2^52)", macs));
  if (static_cast<double>(g.flops) != 2 * macs)
    node.fail("flops", fmt::format("{} is not twice the product of gemm_shape ({})", g.flops, 2 * macs));
  for (size_t i = 0; i < g.device_shape.size(); ++i)
    if (g.device_shape[i] < 1 || g.device_shape[i] > g.gemm_shape[i])
      node.fail("device_shape", fmt::format("dim {} is {}; one device's share lies in [1, {}] (gemm_shape's)", i,
                                            g.device_shape[i], g.gemm_shape[i]));
}

// The label of the forward GEMM a backward GEMM labelled `label` differentiates:
// autodiff labels it `<forward label>:<dgrad|wgrad>[_lhs|_rhs]`. Empty when the label
// has no suffix (it was given otherwise), and the forward GEMM is unknown.
std::string forwardLabel(const std::string& label) {
  const size_t colon = label.rfind(':');
  return colon == std::string::npos ? std::string() : label.substr(0, colon);
}

// The N of a collector's "pgq_profile/N ..." mark: a profile from a newer collector may
// mean something this pgq does not know, so it is refused, not guessed at.
int64_t collectorVersion(const ConfigNode& run, std::string_view mark) {
  std::string_view digits = mark.substr(kCollectorMark.size());
  digits = digits.substr(0, digits.find(' '));
  int64_t version = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), version);
  if (ec != std::errc() || end != digits.data() + digits.size() || version < 1)
    run.fail("pgq_version", fmt::format("'{}' names no collector version (expected {}<N>, N >= 1)", mark,
                                        kCollectorMark));
  if (version > kCollectorVersion)
    run.fail("pgq_version", fmt::format("written by pgq_profile collector version {}; this pgq reads collector "
                                        "profiles up to version {}: update pgq",
                                        version, kCollectorVersion));
  return version;
}

GemmProfile readGemm(const ConfigNode& node) {
  node.allowOnly({"label", "direction", "grad_of", "layer", "gemm_shape", "flops", "bytes", "sharding", "devices",
                  "device_shape", "operands", "reach", "gradient_reach", "output_errors"});
  GemmProfile g;
  g.label = node.getString("label");
  g.direction = *parseName<GemmDirection>(node.getEnum("direction", allNames<GemmDirection>()));
  // Profiles before grad_of was written name the forward GEMM only in the label.
  if (node.has("grad_of")) {
    if (!isBackward(g.direction)) node.fail("grad_of", "a forward GEMM differentiates none; only backward GEMMs have it");
    g.grad_of = node.getString("grad_of");
  } else if (isBackward(g.direction)) {
    g.grad_of = forwardLabel(g.label);
  }
  g.layer = node.getInt("layer", -1, 1 << 20);
  g.gemm_shape = intList(node, "gemm_shape", 4);
  g.flops = node.getInt("flops", 0);
  g.bytes = node.getInt("bytes", 1);
  g.sharding = *parseName<ShardingKind>(node.getEnum("sharding", allNames<ShardingKind>()));
  g.devices = node.getInt("devices", 1, 1 << 20);
  g.device_shape = intList(node, "device_shape", 4);
  checkGemmShapes(node, g);
  for (const ConfigNode& o : node.child("operands").items()) g.operands.push_back(readOperand(o));
  if (g.operands.size() < 2 || g.operands[0].side != GemmOperand::kLhs || g.operands[1].side != GemmOperand::kRhs)
    node.fail("operands", "expected the lhs operand, then the rhs operand (then optionally out)");
  if (!g.operands[0].role || !g.operands[1].role)
    node.fail("operands", "the lhs and rhs operands need a role: weight, activation or gradient");
  if (node.has("reach")) g.reach = node.getDouble("reach", 0.0, 1.0);
  if (node.has("gradient_reach")) g.gradient_reach = node.getDouble("gradient_reach", 0.0, 1.0);
  if (node.has("output_errors"))
    for (const ConfigNode& e : node.child("output_errors").items()) {
      e.allowOnly({"lhs_format", "rhs_format", "sqnr_mean", "sqnr_min"});
      OutputErrorStats o;
      o.lhs_format = formatField(e, "lhs_format");
      o.rhs_format = formatField(e, "rhs_format");
      o.sqnr_mean = e.getDouble("sqnr_mean", 0.0, 1e300);
      o.sqnr_min = e.getDouble("sqnr_min", 0.0, 1e300);
      g.output_errors.push_back(o);
    }
  return g;
}

}  // namespace

std::string profileToYaml(const Profile& profile) {
  YAML::Emitter out;
  out.SetDoublePrecision(9);
  out << YAML::Comment("pgq profile (stage i): statistics of every GEMM operand. SQNR = E[x^2] / E[(Q(x)-x)^2] "
                       "as a ratio, per quantization format, over the logged steps.");
  out << YAML::BeginMap;
  out << YAML::Key << "version" << YAML::Value << kProfileVersion;
  const ProfileRun& r = profile.run;
  out << YAML::Key << "run" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "model" << YAML::Value << r.model;
  out << YAML::Key << "model_config" << YAML::Value << YAML::Literal << r.model_config;
  out << YAML::Key << "corpus" << YAML::Value << r.corpus;
  out << YAML::Key << "corpus_fingerprint" << YAML::Value << r.corpus_fingerprint;
  out << YAML::Key << "seed" << YAML::Value << r.seed;
  out << YAML::Key << "warmup_steps" << YAML::Value << r.warmup_steps;
  out << YAML::Key << "profile_steps" << YAML::Value << r.profile_steps;
  if (r.processes > 1) out << YAML::Key << "processes" << YAML::Value << r.processes;
  out << YAML::Key << "threads" << YAML::Value << r.threads;
  out << YAML::Key << "precision" << YAML::Value << r.precision;
  out << YAML::Key << "pgq_version" << YAML::Value << r.pgq_version;
  out << YAML::Key << "cpu_isa" << YAML::Value << r.cpu_isa;
  out << YAML::Key << "vnni" << YAML::Value << r.vnni;
  out << YAML::Key << "formats" << YAML::Value;
  flowList(out, r.formats);
  out << YAML::Key << "gradient_formats" << YAML::Value;
  flowList(out, r.gradient_formats);
  out << YAML::Key << "step_ms" << YAML::Value << r.step_ms;
  if (r.metrics) {
    out << YAML::Key << "metrics" << YAML::Value << true;
    out << YAML::Key << "metrics_step_ms" << YAML::Value << r.metrics_step_ms;
  }
  out << YAML::EndMap;
  // Before the list, so that a file cut short after any GEMM still disagrees with it.
  out << YAML::Key << "gemm_count" << YAML::Value << profile.gemms.size();
  out << YAML::Key << "gemms" << YAML::Value << YAML::BeginSeq;
  for (const GemmProfile& g : profile.gemms) {
    out << YAML::BeginMap;
    out << YAML::Key << "label" << YAML::Value << g.label;
    out << YAML::Key << "direction" << YAML::Value << std::string(nameOf(g.direction));
    if (!g.grad_of.empty()) out << YAML::Key << "grad_of" << YAML::Value << g.grad_of;
    out << YAML::Key << "layer" << YAML::Value << g.layer;
    out << YAML::Key << "gemm_shape" << YAML::Value;
    flowList(out, g.gemm_shape);
    out << YAML::Key << "flops" << YAML::Value << g.flops;
    out << YAML::Key << "bytes" << YAML::Value << g.bytes;
    out << YAML::Key << "sharding" << YAML::Value << std::string(nameOf(g.sharding));
    out << YAML::Key << "devices" << YAML::Value << g.devices;
    out << YAML::Key << "device_shape" << YAML::Value;
    flowList(out, g.device_shape);
    out << YAML::Key << "operands" << YAML::Value << YAML::BeginSeq;
    for (const OperandProfile& o : g.operands) emitOperand(out, o);
    out << YAML::EndSeq;
    if (g.reach >= 0) out << YAML::Key << "reach" << YAML::Value << g.reach;
    if (g.gradient_reach >= 0) out << YAML::Key << "gradient_reach" << YAML::Value << g.gradient_reach;
    if (!g.output_errors.empty()) {
      out << YAML::Key << "output_errors" << YAML::Value << YAML::BeginSeq;
      for (const OutputErrorStats& e : g.output_errors) {
        out << YAML::Flow << YAML::BeginMap;
        out << YAML::Key << "lhs_format" << YAML::Value << e.lhs_format.toString();
        out << YAML::Key << "rhs_format" << YAML::Value << e.rhs_format.toString();
        out << YAML::Key << "sqnr_mean" << YAML::Value << e.sqnr_mean;
        out << YAML::Key << "sqnr_min" << YAML::Value << e.sqnr_min;
        out << YAML::EndMap;
      }
      out << YAML::EndSeq;
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::string profileToCsv(const Profile& profile) {
  std::string csv =
      "label,direction,layer,batch,m,k,n,flops,bytes,intensity,side,role,tensor,absmax,rms,zero_fraction,"
      "format,sqnr_mean,sqnr_min,sqnr_max,sqnr_min_db,underflow_fraction,clipped_fraction,"
      "delayed_clip_fraction,delayed_worst_ratio,predicted_clip_fraction\n";
  for (const GemmProfile& g : profile.gemms)
    for (const OperandProfile& o : g.operands) {
      // The scaling strategies are per operand, repeated on its format rows; empty when
      // not measured.
      std::string scaling = ",,";
      if (const std::optional<ScalingStats>& s = o.scaling)
        scaling = fmt::format("{:.9g},{:.9g},{}", s->delayed_clip_fraction, s->delayed_worst_ratio,
                              s->predicted ? fmt::format("{:.9g}", s->predicted->clip_fraction) : "");
      for (const FormatStats& f : o.formats)
        csv += fmt::format("{},{},{},{},{},{},{},{},{},{:.6g},{},{},{},{:.9g},{:.9g},{:.9g},{},{:.9g},{:.9g},{:.9g},{:.4f},{:.9g},{:.9g},{}\n",
                           csvField(g.label), g.direction, g.layer, g.gemm_shape[0], g.gemm_shape[1], g.gemm_shape[2],
                           g.gemm_shape[3], g.flops, g.bytes, g.intensity(), o.sideName(), o.roleName(), csvField(o.tensor),
                           o.absmax, o.rms, o.zero_fraction, f.format.toString(), f.sqnr_mean, f.sqnr_min, f.sqnr_max,
                           10.0 * std::log10(std::max(f.sqnr_min, 1e-30)), f.underflow_fraction,
                           f.clipped_fraction, scaling);
    }
  return csv;
}

std::string profileCsvPath(const std::string& path) {
  std::string csv_path = std::filesystem::path(path).replace_extension(".csv").string();
  if (csv_path == path) csv_path += ".csv";
  return csv_path;
}

std::string writeProfile(const std::string& path, const Profile& profile) {
  const std::string csv_path = profileCsvPath(path);
  checkFileWithSidecar("profile", path, csv_path);  // both paths decided before either is written
  std::string yaml = profileToYaml(profile);
  std::string csv = profileToCsv(profile);
  writeFilesTogether({{path, yaml}, {csv_path, csv}});
  return csv_path;
}

Profile parseProfile(const std::string& yaml_text, const std::string& source) {
  ConfigNode root = ConfigNode::loadString(yaml_text, source);
  root.allowOnly({"version", "run", "gemm_count", "gemms"});
  int64_t version = root.getInt("version", 1, 1000000);
  if (version != kProfileVersion)
    root.fail("version", fmt::format("this pgq reads profile version {}, the file is version {}", kProfileVersion,
                                     version));
  Profile p;
  p.source = source;
  ConfigNode run = root.child("run");
  run.allowOnly({"model", "model_config", "corpus", "corpus_fingerprint", "seed", "warmup_steps", "profile_steps",
                 "processes", "threads", "precision", "pgq_version", "cpu_isa", "vnni", "formats", "gradient_formats", "step_ms",
                 "metrics", "metrics_step_ms"});
  ProfileRun& r = p.run;
  r.model = run.getString("model");
  p.model_line = run.child("model").yaml().Mark().line + 1;
  r.model_config = run.getString("model_config");
  r.corpus = run.getString("corpus");
  r.corpus_fingerprint = run.getString("corpus_fingerprint");
  r.seed = static_cast<uint64_t>(run.getInt("seed", 0));
  r.warmup_steps = run.getInt("warmup_steps", 0);
  r.profile_steps = run.getInt("profile_steps", 1);
  r.processes = run.getInt("processes", 1, 1, 1 << 20);
  r.threads = run.getInt("threads", 0);
  r.precision = run.getEnum("precision", {"f32", "bf16"});
  r.pgq_version = run.getString("pgq_version");
  if (r.pgq_version.starts_with(kCollectorMark)) r.collector_version = collectorVersion(run, r.pgq_version);
  r.cpu_isa = run.getString("cpu_isa");
  r.vnni = run.getBool("vnni");
  r.formats = stringList(run, "formats");
  r.gradient_formats = stringList(run, "gradient_formats");
  r.step_ms = run.getDouble("step_ms", 0.0, 0.0, 1e12);
  if (run.has("metrics")) r.metrics = run.getBool("metrics");
  r.metrics_step_ms = run.getDouble("metrics_step_ms", 0.0, 0.0, 1e12);
  for (const std::string& f : r.formats) checkFormat(run, "formats", f);
  for (const std::string& f : r.gradient_formats) checkFormat(run, "gradient_formats", f);
  ConfigNode gemms = root.child("gemms");
  std::unordered_set<std::string> labels;  // a search of the earlier ones made reading quadratic
  for (const ConfigNode& g : gemms.items()) {
    p.gemms.push_back(readGemm(g));
    if (!labels.insert(p.gemms.back().label).second)
      g.fail("label", fmt::format("GEMM '{}' appears twice", p.gemms.back().label));
  }
  if (p.gemms.empty()) gemms.failHere("expected at least one GEMM");
  std::unordered_set<std::string_view> forward;
  for (const GemmProfile& g : p.gemms)
    if (!isBackward(g.direction)) forward.insert(g.label);
  size_t i = 0;
  for (const ConfigNode& g : gemms.items()) {
    const std::string& of = p.gemms[i++].grad_of;
    if (g.has("grad_of") && !forward.count(of))
      g.fail("grad_of", fmt::format("names '{}', which is no forward GEMM of this profile", of));
  }
  if (!root.has("gemm_count"))
    root.fail("gemm_count", fmt::format("is missing; pgq writes it before `gemms:` to detect a file cut short (a "
                                        "profile from an older pgq lacks it: add `gemm_count: {}` if all its GEMMs "
                                        "are there)",
                                        p.gemms.size()));
  int64_t count = root.getInt("gemm_count", 1, INT32_MAX);
  if (count != static_cast<int64_t>(p.gemms.size()))
    root.fail("gemm_count", fmt::format("the profile records {} GEMMs but lists {} (the last is '{}'): the file was "
                                        "cut short or edited",
                                        count, p.gemms.size(), p.gemms.back().label));
  return p;
}

Profile loadProfile(const std::string& path) { return parseProfile(readTextFile(path, InputKind::kProfile), path); }

void checkProfileModel(const Profile& profile, const std::string& model_name, const std::string& model_yaml,
                       const std::string& model_source) {
  std::string where = profile.model_line ? fmt::format("{}:{}", profile.source, profile.model_line) : profile.source;
  if (profile.run.model != model_name)
    throw Error(fmt::format("{}: field 'run.model': the profile was made with model '{}', not with model '{}' ({})",
                            where, profile.run.model, model_name, model_source));
  if (profile.run.model_config == model_yaml) return;
  // Same name, other sizes: show the first line that differs.
  auto lines = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  };
  std::vector<std::string> theirs = lines(profile.run.model_config), ours = lines(model_yaml);
  size_t i = 0;
  while (i < theirs.size() && i < ours.size() && theirs[i] == ours[i]) ++i;
  auto at = [&](const std::vector<std::string>& v) { return i < v.size() ? fmt::format("'{}'", v[i]) : "nothing"; };
  throw Error(fmt::format("{}: field 'run.model_config': the profile was made with another config of model '{}' than "
                          "{}: {} in the profile, {} in {}",
                          where, model_name, model_source, at(theirs), at(ours), model_source));
}

std::string gemmShapeText(const std::vector<int64_t>& s) {
  if (s.size() != 4) return "?";
  return s[0] > 1 ? fmt::format("{}x{},{},{}", s[0], s[1], s[2], s[3]) : fmt::format("{},{},{}", s[1], s[2], s[3]);
}

}  // namespace pgq
