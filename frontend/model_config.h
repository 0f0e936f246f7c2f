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
// gelu: tanh approximation (GPT-2); swiglu: silu(x W_gate) * (x W_up) (LLaMA).
enum class Activation { kGelu, kRelu, kSwiGlu };
// learned: a trained position table added to the token embedding (GPT-2); rope: rotary
// embeddings of q and k in every attention layer (LLaMA, rotate-half pairing).
enum class Position { kLearned, kRope };
// bytes: the 256 byte values are the tokens; sentencepiece: a subword vocabulary of
// `vocab` pieces trained by pgq on the corpus's training split (frontend/tokenizer.h).
enum class TokenizerKind { kBytes, kSentencePiece };
enum class SentencePieceModel { kBpe, kUnigram };

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
  Position position = Position::kLearned;
  double rope_theta = 10000.0;
  // Grouped-query attention: k and v have n_kv_heads heads, each shared by
  // n_heads / n_kv_heads query heads. 0 in a file means n_heads (multi-head attention).
  int64_t n_kv_heads = 0;
  bool tied_embeddings = true;
  TokenizerKind tokenizer = TokenizerKind::kBytes;
  SentencePieceModel tokenizer_model = SentencePieceModel::kBpe;
  int64_t tensor_parallel = 1;
  double init_std = 0.02;
  uint64_t seed = 0;
  // An imported model (frontend/onnx/importer.h): the ONNX file, a hash of its bytes
  // (so a checkpoint refuses a changed file) and the RE2 patterns that override which
  // initializers are trained. The sizes above are then read from the model (vocab,
  // batch, seq_len) or left 0.
  std::string onnx;
  std::string onnx_hash;
  // The trainable parameters' elements of an imported model (for the memory estimate:
  // its config has no sizes); not part of the config (toYaml leaves it out).
  int64_t imported_parameters = 0;
  std::string trainable;
  std::string frozen;
  // Imported models: the sharding-rules file (frontend/sharding_rules.h) tensor
  // parallelism needs.
  std::string sharding_rules;

  bool imported() const { return !onnx.empty(); }

  int64_t headDim() const { return d_model / n_heads; }
  int64_t kvHeads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
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
//
// `spec` may also be an ONNX file (FILE.onnx), or a YAML file with `onnx: FILE.onnx`
// (beside batch, seq_len, trainable, frozen, seed); the model is imported once to check
// it. `overrides` replace the batch and sequence length of any model (and the
// trainable/frozen patterns of an imported one), checked like the file's own values.
struct ModelOverrides {
  int64_t batch = 0;
  int64_t seq_len = 0;
  int64_t tensor_parallel = 0;  // 0: the model's
  std::string sharding_rules;   // imported models
  std::string trainable;
  std::string frozen;
};
ModelConfig loadModelConfig(const std::string& spec, const ModelOverrides& overrides = {});
ModelConfig parseModelConfig(const std::string& yaml_text, const std::string& source);
std::vector<std::string> modelPresetNames();

}  // namespace pgq
