#pragma once
// A recipe: the per-GEMM decisions stage (iii) applies. Written by `pgq recipe` with a
// human reason per GEMM, and meant to be read and edited:
//
//   gemms:
//     - label: layer0/attn/q             # an exact GEMM label ...
//       decision: int8                   # int8 | keep
//       lhs_format: int8:channel:rtn
//       rhs_format: int7:channel:rtn
//       smooth: 0.5                      # optional: SmoothQuant with this alpha
//       reason: "fwd, min SQNR 3.1e+04 > 20, est. 1.64x faster: int8"
//     - match: "layer[0-9]+/mlp/.*"       # ... or a regular expression (RE2) over labels
//       direction: bwd_wgrad             # optional filters: direction, role
//       decision: keep
//
// The first entry that matches a GEMM decides it; a GEMM no entry matches stays in
// high precision.
//
// pgq also writes `model:` (the model the recipe was made for) and `entry_count:` (the
// number of entries, to detect a file cut short at an entry boundary, which is still
// valid YAML). Both are optional in a hand-written recipe and checked when present.
#include <optional>
#include <string>
#include <vector>

#include "ir/gemm_meta.h"
#include "ir/graph.h"
#include "plan/hardware.h"
#include "support/label_pattern.h"
#include "support/quant_scheme.h"

namespace pgq {

// What a generated entry's GEMM is, from the profile: its direction, its operands'
// roles, and for a backward GEMM the label of the forward GEMM it differentiates. The
// PyTorch export (plan/recipe_export.h) groups GEMMs into modules by these.
struct EntryGemm {
  GemmDirection direction = GemmDirection::kFwd;
  OperandRoles roles = {OperandRole::kActivation, OperandRole::kActivation};
  std::string grad_of;  // empty for a forward GEMM
};

struct RecipeEntry {
  std::string label;   // exact label ...
  LabelPattern match;  // ... or a pattern (exactly one of the two is set)
  // Filters for match entries (absent: every GEMM): fwd | bwd | bwd_dgrad | bwd_wgrad,
  // and a GEMM with an operand of this role.
  std::optional<DirectionFilter> direction;
  std::optional<OperandRole> role;
  Decision decision = Decision::kKeep;
  // quantize: the operands' formats (text in the file, parsed and checked when read).
  QuantFormat lhs_format;
  QuantFormat rhs_format;
  double smooth = 0;  // SmoothQuant alpha in (0, 1]; 0 = off
  // Delayed scaling (per-tensor formats, as Transformer Engine's DelayedScaling): the
  // scale comes from the amax of the last amax_history steps reduced by amax_compute
  // (max | most_recent). 0: just in time (this step's absmax).
  int64_t amax_history = 0;
  std::string amax_compute = "max";
  // The weight operand's scale predicted from the optimizer step bound (MOSS) instead
  // of measured (per-tensor FP8/MX weight formats); overrides delayed scaling there.
  bool predict_weight_scale = false;
  std::string reason;
  // Informational, from generation: the lower input SQNR in the chosen formats (-1 when
  // unknown: an SQNR of 0 is a measurement, the worst there is) and the roofline
  // estimate of the int8 speedup (0 when unknown).
  double min_sqnr = -1;
  double est_speedup = 0;
  // The roofline's times behind est_speedup (not written to the file): the GEMM in high
  // precision, and quantized (the GEMM alone, and casting or quantizing its operands),
  // in the chosen formats or, for a GEMM kept, those considered.
  GemmEstimate estimate;
  // The value of the policy's metric the thresholds compared (not written to the file).
  double metric_value = 0;
  int line = 0;  // in the file, for messages
  // From the profile, for explanations only (not written to the file): the GEMM as
  // [batch, M, K, N], and per device under tensor parallelism.
  std::vector<int64_t> gemm_shape, device_shape;
  int64_t devices = 1;
  ShardingKind sharding = ShardingKind::kReplicated;
  // From generation (not written to the file): what the GEMM is. None for an entry read
  // from a file.
  std::optional<EntryGemm> gemm;
};

struct RecipeSummary {
  int fwd_total = 0, fwd_quantized = 0, bwd_total = 0, bwd_quantized = 0;
  double est_gemm_ms = 0;        // roofline estimate of all GEMMs in high precision
  double est_gemm_quantized_ms = 0;   // ... with this recipe
  double measured_step_ms = 0;   // the profiled run's plain step time (0 when unknown)
  double estimatedStepSpeedup() const;
};

struct Recipe {
  std::string name;      // usually the policy name
  std::string policy;
  std::string model;
  int model_line = 0;    // of `model:` in the file, for messages
  std::string hardware;
  std::string profile;   // path of the profile it came from
  RecipeSummary summary;
  std::vector<RecipeEntry> entries;
  // From generation, for explanations only (not written): e.g. policy schemes the
  // hardware does not run, which were skipped.
  std::vector<std::string> notes;
  std::string source;    // file it was loaded from
};

// The decision for one GEMM after resolving a recipe against a graph.
struct GemmDecision {
  Decision decision = Decision::kKeep;
  QuantFormat lhs_format;  // int8 only
  QuantFormat rhs_format;
  double smooth = 0;
  // Delayed scaling (per-tensor formats): amax history length, 0 = just in time.
  int64_t amax_history = 0;
  std::string amax_compute = "max";
  bool predict_weight_scale = false;
  std::string reason;
};

std::string recipeToYaml(const Recipe& recipe);
void writeRecipe(const std::string& path, const Recipe& recipe);  // atomic
Recipe loadRecipe(const std::string& path);
Recipe parseRecipe(const std::string& yaml_text, const std::string& source);

// Throws pgq::Error when the recipe records a `model:` other than `model`, naming both
// models and both files (`model_source`, where the model config comes from, may be
// empty when unknown).
void checkRecipeModel(const Recipe& recipe, const std::string& model, const std::string& model_source);

// Throws pgq::Error naming the recipe file, the entry's line and label, its formats and
// the hardware for the first int8 entry whose operand widths `hw` cannot run exactly
// (without VNNI one operand must have at most 7 bits: kernels/cpu_isa.h).
void checkRecipeRunsExactly(const Recipe& recipe, const HardwareModel& hw);

// Decisions by GEMM label for the matmuls of `graph` (tag_metadata must have run).
// Throws pgq::Error, naming the recipe file, when the recipe was made for another
// model than the graph's (checkRecipeModel, first), and naming the line of an entry
// whose exact label is not a GEMM of the graph (with the closest labels) or whose
// regex matches none.
std::vector<std::pair<std::string, GemmDecision>> resolveRecipe(const Recipe& recipe, const Graph& graph);

}  // namespace pgq
