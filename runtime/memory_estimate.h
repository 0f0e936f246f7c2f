#pragma once
// Whether training a model fits this machine's memory, asked before anything is
// allocated, so that a model too large for the machine is refused with the sizes and
// the fields to change instead of dying in std::bad_alloc or by the OOM killer.
//
// Two checks: before any graph is built, a closed-form estimate from the model config
// (in double, so no size can overflow); once the executors have planned their
// buffers, the real plan, before the arenas are allocated. Both compare with the
// memory available (MemAvailable), passed in so tests can give a small value.
#include <cstdint>
#include <optional>
#include <string>

#include "frontend/model_config.h"

namespace pgq {

struct MemoryEstimate {
  double weight_bytes = 0;      // parameters, their gradients and both AdamW moments
  double activation_bytes = 0;  // kept for backward by the training graph(s), logits included
  double other_bytes = 0;       // the evaluation graph and its batch windows
  double total_bytes = 0;       // their sum with a safety margin: what is compared
};

// The memory a TrainingSession of `model` uses at its peak, estimated to be at least
// the executors' real plan and within about twice of it (calibrated on the shipped
// presets). `profiling` adds the instrumented copy of the training graph stage (i)
// runs; `eval_batches` the windows of the validation batches.
MemoryEstimate estimateTrainingMemory(const ModelConfig& model, int64_t eval_batches, bool profiling);

// MemAvailable of /proc/meminfo in bytes; nullopt where it cannot be read (no Linux
// /proc), and then nothing is checked.
std::optional<double> availableMemoryBytes();

// Throws pgq::Error when the estimate exceeds `available_bytes`: "model huge.yaml:
// training needs about 812 GiB (parameters+AdamW 37 GiB, activations 775 GiB at batch
// 64 x seq_len 4096), this machine has 22.4 GiB available; reduce batch, seq_len,
// d_model, d_ff or n_layers". Does nothing when `available_bytes` is nullopt.
void checkTrainingMemory(const ModelConfig& model, const MemoryEstimate& estimate,
                         std::optional<double> available_bytes);
// The same for the bytes the compiled executors planned (with the parameters and
// moments), checked before their buffers are allocated.
void checkPlannedMemory(const ModelConfig& model, double planned_bytes, std::optional<double> available_bytes);

// "812 GiB", "22.4 GiB", "3.1 MiB".
std::string memorySizeText(double bytes);

}  // namespace pgq
