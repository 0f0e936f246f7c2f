#pragma once
// A recipe as PyTorch users apply it: which nn.Linear modules Transformer Engine or
// torchao should train in low precision. `pgq recipe --export-torch FILE.json` writes
// the JSON and, beside it, a Python filter (FILE.py) for torchao's
// convert_to_float8_training(model, module_filter_fn=...). docs/TRAINING.md describes
// both files.
//
// Those libraries quantize per module: a Linear's forward GEMM and its two backward
// GEMMs (dgrad, wgrad) together. pgq decides per GEMM, so the export groups GEMMs into
// modules and lists, per module, the formats of each of its GEMMs; a module is
// quantized when its forward GEMM is, and a `note` says when its backward GEMMs were
// decided otherwise. GEMMs that are no nn.Linear (attention's batched q.k^T and p.v,
// a tied logits GEMM) are listed apart: neither library converts them.
//
// The grouping uses what generation recorded of each GEMM (RecipeEntry::gemm, from the
// profile), so it needs a recipe generateRecipe made:
//   - a backward GEMM belongs with the forward GEMM it differentiates (its grad_of);
//   - a forward GEMM is a module's when exactly one of its operands is a weight (x.W,
//     what nn.Linear computes; its backward GEMMs are then one dgrad and one wgrad at
//     most) and it is not `get_logits`, the name pgq gives a logits GEMM without a
//     module path (a tied `x @ wte.weight.T`);
//   - the module path is the forward label read as torch.onnx records scopes (see
//     torchModulePath).

#include <string>
#include <string_view>
#include <vector>

#include "plan/recipe.h"

namespace pgq {

// The PyTorch module path (a named_modules() name) of the forward GEMM labelled
// `label` in an imported ONNX model. torch.onnx names a node after the scopes of the
// modules whose forward ran it, each scope the module's name from its last word on:
// `blocks.0` (a ModuleList entry), `attn`, `mlp` then `mlp.0` (an nn.Sequential entry,
// whose container scope `mlp` comes first). So '/' becomes '.', and a scope that the
// next one extends (`mlp` before `mlp.0`) is dropped:
//   blocks.0/attn/q      -> blocks.0.attn.q
//   blocks.0/mlp/mlp.0   -> blocks.0.mlp.0
// A container that never runs a forward and is named by a word (nn.ModuleDict) leaves
// no scope, so its name is missing from the path.
std::string torchModulePath(std::string_view label);

// Where an export error points: the recipe file and the entry's line ("r.yaml:12"), or,
// for a recipe generated in memory and not read from a file, "recipe NAME (from profile
// P)".
std::string entryLocation(const Recipe& recipe, int line);

// Whether the training libraries run entry `e` in low precision: a quantized GEMM,
// except bf16 (a CPU recipe's third choice), which PyTorch runs unconverted under
// autocast. Both exports (this one and trainer_export.h) keep what this says no to.
bool lowPrecisionForTrainers(const RecipeEntry& e);

// A module's GEMMs: its forward GEMM and the two backward GEMMs labelled after it
// (absent when the recipe has none, e.g. the wgrad of a frozen weight).
struct ModuleGemms {
  std::string path;  // torchModulePath() of the forward label
  const RecipeEntry* forward = nullptr;
  const RecipeEntry* dgrad = nullptr;
  const RecipeEntry* wgrad = nullptr;
};
struct ModuleGrouping {
  std::vector<ModuleGemms> modules;             // in the recipe's order of their forward GEMMs
  std::vector<const RecipeEntry*> other_gemms;  // every other GEMM, in the recipe's order
};
// The recipe's GEMMs grouped into Linear modules as above (the trainer exports of
// trainer_export.h use it too). Throws as recipeToTorchJson does.
ModuleGrouping groupByModule(const Recipe& recipe);

// The JSON export (see docs/TRAINING.md for its fields). Throws pgq::Error naming the
// recipe file and line for a `match:` entry (the export needs one `label:` entry per
// GEMM, as pgq recipe writes them) or an entry generation did not make, and for two
// labels with the same module path.
std::string recipeToTorchJson(const Recipe& recipe);

// Python source defining PGQ_QUANTIZE (the module paths to quantize),
// PGQ_KEEP_HIGH_PRECISION, PGQ_FORMATS (per module, the formats of its forward, dgrad
// and wgrad GEMMs) and module_filter_fn(module, fqn) for torchao, with comments on
// using it with Transformer Engine. Throws as recipeToTorchJson does.
std::string recipeToTorchFilter(const Recipe& recipe);

// The Python filter's path for the JSON at `json_path`: the same stem with `.py`.
// Throws pgq::Error when that is `json_path` itself.
std::string torchFilterPath(const std::string& json_path);

// Writes both files, each atomically (support/file_io.h); returns the filter's path.
std::string writeTorchExport(const std::string& json_path, const Recipe& recipe);

}  // namespace pgq
