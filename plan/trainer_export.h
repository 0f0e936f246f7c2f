#pragma once
// A recipe as GPU trainers load it, beside the torchao / Transformer Engine module lists
// of recipe_export.h:
//
//  - Megatron-LM's `--te-precision-config-file` (YAML; docs TransformerEngineMixedPrecision.md
//    and megatron/core/extensions/transformer_engine.py, TEQuantizationParams /
//    TEQuantizationRecipe, Megatron-LM main of 2026): named `configs`, each
//    `transformer_engine_config_type: TEQuantizationParams` with a `training_recipe`
//    (fp8_quantization_recipe tensorwise|blockwise|mxfp8|custom, fp4_quantization_recipe
//    nvfp4|custom, custom_recipe_factory, fp8_format e4m3|hybrid, the two override
//    flags), and ordered `matchers` (type glob, enabled, pattern, config), the first
//    enabled match choosing a module's config. One matcher per Megatron module, its exact
//    name (`decoder.layers.3.self_attention.linear_qkv`).
//  - Transformer Engine CustomRecipe quantizer factories (Python): `CustomRecipe(qfactory=f)`
//    calls f(role) for each tensor a module quantizes, role.tensor_type one of input,
//    weight, grad_output (TE's QuantizerRole; TE 2.9's first API passes the strings
//    "linear_input", "linear_weight", "linear_grad_output"); f returns a quantizer, or
//    None for high precision, and raises on a role it does not know. The file maps each
//    module and tensor role to the format pgq chose for that operand, so a decision
//    that differs between the forward and the backward GEMMs survives where the roles
//    can say it: `input` and `weight` are the forward GEMM's operands, `grad_output` the
//    backward GEMMs' gradient. TE quantizes each tensor once per module (input for fprop
//    and wgrad, weight for fprop and dgrad, grad_output for dgrad and wgrad): where the
//    recipe reads one tensor in two formats, the module is kept in bf16 with a note.
//    Stochastic rounding is per tensor; the random Hadamard transform is TE's on the
//    columnwise copies the weight gradient reads, so a recipe transforming a forward or
//    dgrad GEMM is refused. Delayed scaling and predicted weight scales export as current
//    scaling, with a note (Megatron's per-module configs have no delayed scaling).
//
// Megatron names modules after its GPT layer (linear_qkv fuses pgq's q, k and v GEMMs,
// linear_fc1 the gate and up GEMMs of SwiGLU), so the export needs a model pgq built:
// a GEMM of any other module (an imported ONNX model's) is an error naming the recipe
// and the GEMM. Formats Transformer Engine has no quantizer for (int8, mxint8, MOSS,
// MXFP4) are errors too. TE's FP8 quantizers have no stochastic rounding, so an FP8
// gradient in SR exports as round to nearest.
#include <string>
#include <string_view>

#include "plan/recipe.h"

namespace pgq {

// Megatron-LM's module name for pgq's module path (recipe_export.h torchModulePath):
// layer3.attn.q -> decoder.layers.3.self_attention.linear_qkv; empty when there is none.
std::string megatronModuleName(std::string_view module_path);

// The precision config; custom configs name factories of `factory_module` (the Python
// module recipeToTeFactories writes, importable by that name).
std::string recipeToMegatronConfig(const Recipe& recipe, std::string_view factory_module);
// The Python factories: PGQ_TENSOR_FORMATS, one pgq_factory_<n>(role) per Megatron
// module, pgq_quantizer_factory(role) choosing by role.name, and pgq_custom_recipe(name).
std::string recipeToTeFactories(const Recipe& recipe);

// The factories' path for the YAML at yaml_path: the same stem with .py, imported by
// that stem, so it must be a Python identifier. Checks both paths as outputs (support/
// file_io.h checkFileWithSidecar) and throws pgq::Error naming the flag and the file;
// `pgq recipe` calls it before any work.
std::string megatronFactoryPath(const std::string& yaml_path);
// Writes the YAML at yaml_path and the factories at megatronFactoryPath(yaml_path);
// returns that path. Throws pgq::Error naming the file or the recipe's field; a recipe
// the export refuses writes neither file.
std::string writeMegatronExport(const std::string& yaml_path, const Recipe& recipe);

}  // namespace pgq
