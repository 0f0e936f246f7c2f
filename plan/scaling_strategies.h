#pragma once
// The arithmetic of the scaling strategies a profile records per operand (ScalingStats
// in plan/profile.h): given an operand's absmax at each logged step, would delayed
// scaling (the max of an amax history) or predicted weight scales (the previous amax
// plus the optimizer's step bound) have clipped, and by how much.
#include <cstdint>
#include <span>

#include "plan/profile.h"

namespace pgq {

// The amax history of delayed scaling when none is given: the length Transformer
// Engine's examples use (DelayedScaling's own default is 1024, longer than most
// profile windows).
inline constexpr int64_t kDefaultAmaxHistory = 16;

// How far the optimizer update that follows a step can move any weight element: at
// most about lr (MOSS's bound for Adam-type updates), exactly at most lr x
// `rigorous_bound` (adamUpdateBound()).
struct WeightStepBound {
  double lr = 0;
  double rigorous_bound = 1;
};

// The largest |update| / lr of one AdamW step (kernels/optim.h: bias-corrected moments
// that start at zero, eps > 0) at 1-based step `step`, for any gradients:
//   sqrt(1 - beta2^t) / (1 - beta1^t) x (1 - beta1) / sqrt(1 - beta2) x sqrt(sum_{j<t} r^j)
// with r = beta1^2 / beta2 (Cauchy-Schwarz over the t gradients the moments hold; it
// is reached when the gradient j steps old is (beta1 / beta2)^j). It is 1 at step 1
// and tends to (1 - beta1) / sqrt((1 - beta2)(1 - r)) when r < 1 (1.165 for 0.9 / 0.95,
// 7.27 for 0.9 / 0.999); (1 - beta1) / sqrt(1 - beta2) alone is not a bound (0.447 for
// 0.9 / 0.95). Decoupled weight decay only shrinks |w| while lr x decay <= 2. Capped at
// 1e30 where it grows without limit (beta2 = 0 < beta1, or r > 1 over many steps).
double adamUpdateBound(double beta1, double beta2, int64_t step);

// The strategies on one operand's absmax series (at least 2 steps), the amax history
// `history` >= 1 long. `updates` (one per step: the update after it) makes the
// predicted weight scales; without it `predicted` stays empty. A step whose history
// amax is 0 while its absmax is not counts as a delayed clip with no finite ratio
// (Transformer Engine then keeps its previous scale, which says nothing about this
// tensor); a step with absmax 0 does not count in the mean over-estimates.
ScalingStats scalingStats(std::span<const double> absmax, int64_t history,
                          std::span<const WeightStepBound> updates = {});

}  // namespace pgq
