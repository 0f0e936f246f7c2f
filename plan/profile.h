#pragma once
// The profile a stage (i) run writes: one record per GEMM with its metadata (from
// tag_metadata) and, per operand, statistics aggregated over the logged steps, per
// candidate quantization format. Stage (ii) reads it to decide what to quantize.
//
// SQNR is the ratio E[x^2] / E[(Q(x) - x)^2] (not dB). Files: YAML (the record, read
// back by loadProfile) and CSV (one row per operand and format, for spreadsheets).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/gemm_meta.h"
#include "support/quant_format.h"

namespace pgq {

struct FormatStats {
  QuantFormat format;
  double sqnr_mean = 0;
  double sqnr_min = 0;
  double sqnr_max = 0;
  double mse = 0;                 // mean over steps
  double underflow_fraction = 0;  // nonzero values that quantize to 0
  double clipped_fraction = 0;
  // Bias-aware SQNR (mean over steps): E[x^2] over the error as it sums along the
  // contracting dimension, E_rows[(sum_k (Q(x)-x))^2] / K. Independent zero-mean errors
  // (stochastic rounding) give the plain SQNR; errors that share a sign along a row (round
  // to nearest flushing small values of one sign) give less. Absent (0) in profiles made
  // without `--profile-metrics`.
  double bias_sqnr_mean = 0;
};

// The error of a GEMM's result when both operands are quantized as a recipe would run
// them (the quantized GEMM computed beside the f32 one in the profiled steps):
// sqnr = E[y^2] / E[(y_q - y)^2], per pair of operand formats.
struct OutputErrorStats {
  QuantFormat lhs_format;
  QuantFormat rhs_format;
  double sqnr_mean = 0;
  double sqnr_min = 0;
};

// Scaling strategies: how often the per-tensor scales of FP8 training (Transformer
// Engine, MOSS) would have clipped an operand over the logged steps t = 0 .. steps-1,
// computed from its absmax series (plan/scaling_strategies.h; docs/PROFILING.md,
// "Scaling strategies"). Just-in-time scaling (this step's absmax) never clips: it is
// what the SQNR columns measure. Whether a strategy clips depends only on the absmax
// series, not on the element format.
//
// Predicted weight scales (MOSS's automatic scaling for weights): amax_pred[t] =
// absmax[t-1] + lr[t-1] x 1, an element moving by at most about lr in an Adam step.
struct PredictedScaling {
  double clip_fraction = 0;  // of the steps t >= 1 with absmax[t] > amax_pred[t]
  double worst_ratio = 1;    // max of absmax[t] / amax_pred[t]; 1 when it never clipped
  double overestimate = 1;   // mean of amax_pred[t] / absmax[t]
  // The same with AdamW's exact bound on |update| / lr at that step instead of 1
  // (adamUpdateBound(), plan/scaling_strategies.h): it never clips on f32 weights.
  double rigorous_clip_fraction = 0;
  double rigorous_overestimate = 1;
};

struct ScalingStats {
  int64_t steps = 0;            // logged steps (>= 2); fractions are over t = 1 .. steps-1
  int64_t delayed_history = 0;  // H: min(the requested amax history, steps - 1)
  // Delayed scaling (TE's DelayedScaling, amax_compute_algo "max"): the scale of step t
  // comes from max(absmax[t-H .. t-1]).
  double delayed_clip_fraction = 0;  // of the steps t >= 1 with absmax[t] above it
  double delayed_worst_ratio = 1;    // max of absmax[t] / that amax; 1 when it never clipped
  std::optional<PredictedScaling> predicted;  // weight operands only
};

struct OperandProfile {
  std::optional<GemmOperand> side;  // none for the GEMM's result ("out" in files)
  std::optional<OperandRole> role;  // none for the GEMM's result ("output" in files)
  std::string tensor;               // IR value name
  std::vector<int64_t> shape;
  std::vector<int64_t> contract_dims;
  std::vector<int64_t> batch_dims;
  double absmax = 0;       // max over steps
  double absmax_mean = 0;  // mean over steps
  double rms = 0;          // mean over steps of sqrt(E[x^2])
  double zero_fraction = 0;
  double nonfinite_fraction = 0;
  std::vector<FormatStats> formats;
  std::optional<ScalingStats> scaling;  // none when fewer than 2 steps were logged

  const FormatStats* find(const QuantFormat& format) const;
  // lhs | rhs | out
  std::string_view sideName() const { return side ? nameOf(*side) : "out"; }
  // weight | activation | gradient | output
  std::string_view roleName() const { return role ? nameOf(*role) : "output"; }
};

struct GemmProfile {
  std::string label;
  GemmDirection direction = GemmDirection::kFwd;
  // A backward GEMM: the label of the forward GEMM it differentiates (empty for a
  // forward GEMM, or when it is not known), from the graph (autodiff's grad_of) or the
  // PyTorch collector's hooks; `grad_of:` in files. Files written before that field
  // record it only in the label (`layer0/mlp/up:dgrad`: autodiff's suffix), so the
  // reader takes it from there for them.
  std::string grad_of;
  int64_t layer = -1;
  std::vector<int64_t> gemm_shape;    // [batch, M, K, N]
  int64_t flops = 0;
  int64_t bytes = 0;
  ShardingKind sharding = ShardingKind::kReplicated;
  int64_t devices = 1;
  std::vector<int64_t> device_shape;  // [batch, M, K, N] on one device
  std::vector<OperandProfile> operands;  // lhs, rhs, then optionally out
  // Where the GEMM's result goes (from the graph's dataflow, `--profile-metrics`): the
  // fraction of the parameter elements whose gradient (computed by a weight-gradient
  // GEMM) depends on it, and the same weighted by each gradient's squared norm
  // (needs the results' statistics: -1 when they were not logged). -1: not recorded.
  double reach = -1;
  double gradient_reach = -1;
  std::vector<OutputErrorStats> output_errors;  // empty without `--profile-metrics`

  const OutputErrorStats* findOutputError(const QuantFormat& lhs, const QuantFormat& rhs) const;

  const OperandProfile& lhs() const { return operands[0]; }
  const OperandProfile& rhs() const { return operands[1]; }
  double intensity() const { return bytes > 0 ? static_cast<double>(flops) / static_cast<double>(bytes) : 0; }
};

struct ProfileRun {
  std::string model;         // model name
  std::string model_config;  // YAML text of the model config
  std::string corpus;
  std::string corpus_fingerprint;
  uint64_t seed = 0;
  int64_t warmup_steps = 0;   // steps trained before logging started
  int64_t profile_steps = 0;  // steps logged (by each process)
  int64_t processes = 1;      // processes whose statistics it holds (mpirun ranks)
  int64_t threads = 0;
  std::string precision;      // f32 | bf16
  // pgq's version, or for a profile written by the PyTorch collector (python/pgq_profile)
  // "pgq_profile/<collector version> ...", the version also in `collector_version`.
  std::string pgq_version;
  int64_t collector_version = 0;  // 0: written by pgq itself
  std::string cpu_isa;
  bool vnni = false;
  std::vector<std::string> formats;           // profiled for every operand
  std::vector<std::string> gradient_formats;  // also profiled for gradient operands
  double step_ms = 0;  // mean time of a plain (uninstrumented) step before logging; 0 if unknown
  // Logged with `--profile-metrics`: bias-aware SQNRs, reach and output errors (the
  // statistics of the metrics beyond SQNR, plan/gemm_metric.h), and what a profiled step
  // cost against a plain one.
  bool metrics = false;
  // Mean time of a profiled step (after the first, whose kernels run for the first time,
  // when there are several); 0 if unknown.
  double metrics_step_ms = 0;
};

// A GEMM's [batch, M, K, N] as tables print it: "M,K,N", with "BxM,K,N" when batched.
std::string gemmShapeText(const std::vector<int64_t>& shape);

struct Profile {
  ProfileRun run;
  std::vector<GemmProfile> gemms;
  // Where it was read from, and the line of `run.model` there, for messages.
  std::string source;
  int model_line = 0;

  const GemmProfile* find(const std::string& label) const;
};

inline constexpr int kProfileVersion = 1;
// The newest PyTorch collector (python/pgq_profile, its COLLECTOR_VERSION) whose profiles
// this pgq reads; the collector writes the same file format, and marks it in
// `run.pgq_version` so that older readers load it unchanged.
inline constexpr int64_t kCollectorVersion = 1;
inline constexpr std::string_view kCollectorMark = "pgq_profile/";

std::string profileToYaml(const Profile& profile);
std::string profileToCsv(const Profile& profile);
// The CSV written beside profile PATH: PATH with its extension replaced by .csv.
std::string profileCsvPath(const std::string& path);
// Writes PATH (YAML) and profileCsvPath(PATH), each atomically, after checking that
// both can be (support/file_io.h's checkFileWithSidecar); returns the CSV path. On
// failure throws pgq::Error and leaves no partial file.
std::string writeProfile(const std::string& path, const Profile& profile);
// Reads and validates a profile: every field present and of the right kind, formats
// well formed, fractions in [0, 1], SQNR >= 0, each operand's `scaling` record complete
// when present (older profiles have none; `predicted_*` fields on weights only), lhs
// and rhs operands for every GEMM, and as many GEMMs as `gemm_count` (written before
// the list, so that a file cut short after any GEMM, still valid YAML, is caught); a
// collector profile no newer than kCollectorVersion.
// Errors name the file, the line and the field.
Profile loadProfile(const std::string& path);
Profile parseProfile(const std::string& yaml_text, const std::string& source);

// Throws pgq::Error unless the profile was made with this model: the name and then the
// whole config (`model_yaml`, ModelConfig::toYaml()) must match. The message names both
// models and both files (`model_source`: where the model config comes from).
void checkProfileModel(const Profile& profile, const std::string& model_name, const std::string& model_yaml,
                       const std::string& model_source);

}  // namespace pgq
