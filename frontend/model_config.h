#pragma once
// The model config a user edits (YAML): the shape of a decoder-only transformer.
#include <cstdint>
#include <string>
#include <vector>

namespace pgq {

// Bounds of the sizes in a model config. With every size at most 2^20 (and the
// tokens of a batch too), the largest tensor of the graph, the attention scores,
// is bounded separately, so no tensor has more than 2^40 elements and the sum of all
// tensor bytes of a graph (at most 1024 layers) stays far inside int64.
inline constexpr int64_t kMaxModelSize = int64_t{1} << 20;
inline constexpr int64_t kMaxModelElements = int64_t{1} << 40;

enum class NormKind { kRmsNorm, kLayerNorm };
enum class Activation { kGelu, kRelu };

struct ModelConfig {
  std::string name = "model";
  // Where the config was read from (a file, "<preset small>"), for messages; not part
  // of the config itself (toYaml() leaves it out).
  std::string source;
  int64_t vocab = 256;
  int64_t d_model = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t d_ff = 0;
  int64_t seq_len = 0;
  int64_t batch = 0;
  NormKind norm = NormKind::kRmsNorm;
  double norm_eps = 1e-5;
  Activation activation = Activation::kGelu;
  bool tied_embeddings = true;
  int64_t tensor_parallel = 1;
  double init_std = 0.02;
  uint64_t seed = 0;

  int64_t headDim() const { return d_model / n_heads; }
  int64_t tokens() const { return batch * seq_len; }
  // The config as YAML, in the same form loadModelConfig reads (stored in checkpoints).
  std::string toYaml() const;
};

// `spec` is a preset name ("tiny", "small") or a path to a YAML file. Throws
// pgq::Error naming the file, the line and the field for anything invalid: missing or
// non-positive sizes, heads that do not divide d_model, unknown keys or enum values,
// and sizes too large for the tensor sizes computed from them to fit int64 (every
// size is at most kMaxModelSize, batch x seq_len too, and an attention score tensor,
// batch x n_heads x seq_len x seq_len, at most kMaxModelElements). Whether the model
// fits this machine's memory is checked before training (runtime/memory_estimate.h).
ModelConfig loadModelConfig(const std::string& spec);
ModelConfig parseModelConfig(const std::string& yaml_text, const std::string& source);
std::vector<std::string> modelPresetNames();

}  // namespace pgq
