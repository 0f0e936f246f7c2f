#pragma once
// The valid range of every numeric option, in one table. The library's option
// validation (train(), TrainingSession, runExperiment(), probeHardware()) checks each
// value against it, and the CLI shows the same range in --help and checks each flag
// with it while parsing, so what the help promises and what is enforced cannot drift.
// A range is named after the CLI flag that sets the option, the name a user sees in
// the message; an option no flag sets is named after its field.
//
// NaN compares false with everything, so a check written as `v < min || v > max`
// lets it through; check() rejects every non-finite value first.
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace pgq {

template <typename T>
struct OptionRange {
  std::string_view name;
  T min;
  T max;
  bool min_open = false;  // (min, ...
  bool max_open = false;  // ..., max)
  // The option that bounds this one from above ("--steps"), shown instead of `max`;
  // `max` is then the bound that option itself never exceeds.
  std::string_view max_name = {};

  // "[0, 1]", "(0, 10]", "[0, --steps]".
  std::string text() const;
  // "--lr: expected a finite number in (0, 10]", the start of every message about it.
  std::string expectation() const;
  bool contains(T value) const;
  // Throws pgq::Error "--lr: expected a finite number in (0, 10], got nan".
  void check(T value) const;
  // check() and `value <= bound`, the current value of the `max_name` option:
  // "--warmup: expected an integer in [0, --steps] (--steps is 30), got 100".
  void check(T value, T bound) const;
};

extern template struct OptionRange<int64_t>;
extern template struct OptionRange<double>;

namespace ranges {

// Step counts are bounded so that every sum and product of them pgq forms (a warmup
// plus a profile window, a baseline plus its fine-tuning, the steps of a few hundred
// recipes) stays far inside int64; 10^12 steps is 30 years at 1 ms a step.
inline constexpr int64_t kMaxSteps = 1'000'000'000'000;
// An evaluation runs this many forward passes and keeps batch x this many window
// offsets; 10^5 batches is far beyond a useful validation estimate.
inline constexpr int64_t kMaxEvalBatches = 100'000;

// pgq train (TrainOptions).
inline constexpr OptionRange<int64_t> kSteps{.name = "--steps", .min = 1, .max = kMaxSteps};
inline constexpr OptionRange<int64_t> kStopAfter{.name = "--stop-after", .min = 0, .max = kMaxSteps};
inline constexpr OptionRange<int64_t> kEvalEvery{.name = "--eval-every", .min = 0, .max = kMaxSteps};
inline constexpr OptionRange<int64_t> kCheckpointEvery{.name = "--checkpoint-every", .min = 0, .max = kMaxSteps};
inline constexpr OptionRange<int64_t> kEvalBatches{.name = "--eval-batches", .min = 1, .max = kMaxEvalBatches};
inline constexpr OptionRange<int64_t> kLogEvery{.name = "log_every", .min = 1, .max = kMaxSteps};
inline constexpr OptionRange<int64_t> kProfileSteps{
    .name = "--profile-steps", .min = 0, .max = kMaxSteps, .max_name = "--steps"};
inline constexpr OptionRange<int64_t> kProfileWarmup{
    .name = "--profile-warmup", .min = 0, .max = kMaxSteps, .max_name = "--steps"};
inline constexpr OptionRange<int64_t> kProfileBits{.name = "--profile-bits", .min = 2, .max = 8};
inline constexpr OptionRange<int64_t> kProfileAmaxHistory{.name = "--profile-amax-history", .min = 1, .max = kMaxSteps};
inline constexpr OptionRange<int64_t> kSeed{
    .name = "--seed", .min = 0, .max = std::numeric_limits<int64_t>::max()};

// The optimizer (OptimizerConfig), for train and experiment. A learning rate above 10
// or a decay above 1 (the weights shrink by lr x decay each step) only diverges.
inline constexpr OptionRange<double> kLr{.name = "--lr", .min = 0, .max = 10, .min_open = true};
inline constexpr OptionRange<int64_t> kWarmup{.name = "--warmup", .min = 0, .max = kMaxSteps, .max_name = "--steps"};
inline constexpr OptionRange<double> kMinLrRatio{.name = "--min-lr-ratio", .min = 0, .max = 1};
inline constexpr OptionRange<double> kWeightDecay{.name = "--weight-decay", .min = 0, .max = 1};
inline constexpr OptionRange<double> kGradClip{.name = "--grad-clip", .min = 0, .max = 1e6};
inline constexpr OptionRange<double> kBeta1{.name = "optimizer.beta1", .min = 0, .max = 1, .max_open = true};
inline constexpr OptionRange<double> kBeta2{.name = "optimizer.beta2", .min = 0, .max = 1, .max_open = true};
inline constexpr OptionRange<double> kAdamEps{.name = "optimizer.eps", .min = 0, .max = 1, .min_open = true};

// pgq experiment (ExperimentOptions).
inline constexpr OptionRange<int64_t> kBaselineSteps{.name = "--baseline-steps", .min = 1, .max = kMaxSteps};
inline constexpr OptionRange<int64_t> kExperimentProfileSteps{
    .name = "--profile-steps", .min = 1, .max = kMaxSteps, .max_name = "--baseline-steps"};
inline constexpr OptionRange<int64_t> kFinetuneSteps{.name = "--finetune-steps", .min = 2, .max = kMaxSteps};
inline constexpr OptionRange<int64_t> kTrialSteps{.name = "--trial-steps", .min = 2, .max = kMaxSteps};
inline constexpr OptionRange<int64_t> kBits{.name = "--bits", .min = 2, .max = 8};
inline constexpr OptionRange<double> kFraction{
    .name = "--fractions", .min = 0, .max = 1, .min_open = true, .max_open = true};
inline constexpr OptionRange<int64_t> kRandomOrderings{.name = "--random-orderings", .min = 1, .max = 100};
// 0: no Pareto estimate; else at least 2 and at most --finetune-steps (checked with it).
inline constexpr OptionRange<int64_t> kParetoSteps{.name = "--pareto-steps", .min = 0, .max = kMaxSteps};
inline constexpr OptionRange<double> kOrderingPoint{
    .name = "--points", .min = 0, .max = 1, .min_open = true, .max_open = true};
// The roofline's tokens per device relative to the profiled run's (pgq recipe and pgq
// experiment --token-scale); bounded so that scaled GEMM dims stay far inside int64.
inline constexpr OptionRange<double> kTokenScale{
    .name = "--token-scale", .min = 0, .max = 1e6, .min_open = true};
inline constexpr OptionRange<double> kLossBudget{.name = "--loss-budget", .min = 0, .max = 10, .min_open = true};
inline constexpr OptionRange<int64_t> kExperimentEvalBatches{
    .name = "eval_batches", .min = 1, .max = kMaxEvalBatches};
// Each fraction adds two recipes and each --policy one, each a fine-tuning run.
inline constexpr int64_t kMaxExtraRecipes = 100;

// Under mpirun: seconds a collective waits for the other ranks (0: for ever).
inline constexpr OptionRange<double> kCollectiveTimeout{.name = "--collective-timeout", .min = 0, .max = 1e9};

// pgq hwprobe (ProbeOptions).
inline constexpr OptionRange<double> kProbeSeconds{.name = "--seconds", .min = 0.05, .max = 60};

// OpenMP threads: 0 leaves OpenMP's default (OMP_NUM_THREADS, else one per
// processor). More threads than processors only slow OpenMP's spinning barriers
// down, and libgomp aborts when it cannot create that many, so the bound is this
// machine's processor count (omp_get_num_procs()).
OptionRange<int64_t> threadsRange();

}  // namespace ranges
}  // namespace pgq
