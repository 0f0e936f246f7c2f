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
#include <string>

#include "plan/hardware.h"
#include "plan/policy.h"
#include "plan/profile.h"
#include "plan/recipe.h"

namespace pgq {

Recipe generateRecipe(const Profile& profile, const HardwareModel& hw, const Policy& policy,
                      const std::string& profile_path);

// A summary a person reads: GEMMs quantized per direction, why the others were kept,
// the lowest-SQNR GEMMs, and the estimated GEMM and step speedups.
std::string explainRecipe(const Recipe& recipe);

}  // namespace pgq
