#pragma once
// Stage (ii): from a profile, a hardware model and a policy, a recipe with a decision
// and a human reason for every GEMM.
//
// For each GEMM, in order: a matching policy rule decides; a direction the policy does
// not quantize stays in high precision; the roofline estimate must say int8 (with its
// quantization traffic) is at least policy.min_speedup times faster; then the lower
// SQNR of its two inputs, in the formats that would run, must pass the direction's
// threshold (or, for an adversarial policy, fail it). Without VNNI one operand runs
// 7-bit: the one with the higher SQNR, which loses less.
//
// Each GEMM is decided in two steps: the decision, with its reason as a value (what
// decided, and the numbers: metric, threshold, estimate, the schemes that did not fit),
// then the reason in words. A GEMM not quantized is "kept" in the hardware's
// high-precision dtype (f32 on CPUs, bf16 on GPU models), and the reason says which.
#include <map>
#include <string>

#include "plan/hardware.h"
#include "plan/policy.h"
#include "plan/profile.h"
#include "plan/recipe.h"

namespace pgq {

// The profile's GEMMs as a run with `factor` times the tokens per device would run them
// (a CPU profile at batch 8 for a GPU run at batch 64: factor 8), for the roofline only:
// statistics are kept as profiled. The dim that grows follows from the operands'
// roles: a weight x activation GEMM's token rows (M, or N when the weight is the lhs),
// a weight gradient's contracting dim (activation^T x gradient), and the batch dim of
// a batched GEMM between activations (attention). Throws pgq::Error unless factor > 0.
Profile scaleTokens(const Profile& profile, double factor);

// With `scores` (GEMM label -> value), the thresholds compare those instead of the
// policy's metric: an ordering given from outside (random or measured orderings of
// `pgq experiment --orderings`). Every GEMM the thresholds reach must have a score.
Recipe generateRecipe(const Profile& profile, const HardwareModel& hw, const Policy& policy,
                      const std::string& profile_path, const std::map<std::string, double>* scores = nullptr);

// A summary a person reads: GEMMs quantized per direction, why the others were kept,
// the lowest-SQNR GEMMs, and the estimated GEMM and step speedups.
std::string explainRecipe(const Recipe& recipe);

}  // namespace pgq
