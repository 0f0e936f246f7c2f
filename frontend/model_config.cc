#include "frontend/model_config.h"

#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "frontend/onnx/import_once.h"
#include "frontend/sharding_rules.h"
#include "support/config_file.h"
#include "support/errors.h"
#include "support/escape.h"
#include "support/file_io.h"
#include "pgq_model_presets.h"

namespace pgq {
namespace {

// Imports the model (once per process: the graphs built from this config reuse the
// import): it must import, and its sizes fill the config.
ModelConfig importedConfig(ModelConfig c) {
  ImportedSizes m = importedSizes({c.onnx, c.batch, c.seq_len, c.trainable, c.frozen});
  c.batch = m.batch;
  c.seq_len = m.seq_len;
  c.vocab = m.vocab;
  // The hash of the bytes imported identifies the model a checkpoint was trained from.
  c.onnx_hash = fmt::format("{:016x}", m.fingerprint);
  c.imported_parameters = m.parameters;
  return c;
}

ModelConfig importedFromNode(const ConfigNode& root) {
  root.allowOnly({"name", "onnx", "onnx_hash", "batch", "seq_len", "vocab", "trainable", "frozen", "seed"});
  ModelConfig c;
  c.source = root.file();
  c.onnx = root.getString("onnx", "");
  // A relative path is relative to the YAML file.
  if (!c.onnx.empty() && std::filesystem::path(c.onnx).is_relative() && !root.file().empty() &&
      root.file().front() != '<')
    c.onnx = (std::filesystem::path(root.file()).parent_path() / c.onnx).string();
  if (!std::filesystem::is_regular_file(c.onnx)) root.fail("onnx", fmt::format("no such file: {}", c.onnx));
  c.name = root.getString("name", std::filesystem::path(c.onnx).stem().string());
  c.batch = root.getInt("batch", 0, 0, kMaxModelSize);
  c.seq_len = root.getInt("seq_len", 0, 0, kMaxModelSize);
  c.trainable = root.getString("trainable", "");
  c.frozen = root.getString("frozen", "");
  c.seed = static_cast<uint64_t>(root.getInt("seed", 0, 0, INT64_MAX));
  c = importedConfig(c);
  std::string hash = root.getString("onnx_hash", "");
  if (!hash.empty() && hash != c.onnx_hash)
    root.fail("onnx_hash", fmt::format("{} has changed since this config was written (hash {}, now {})", c.onnx,
                                       hash, c.onnx_hash));
  return c;
}

ModelConfig fromNode(const ConfigNode& root) {
  if (root.has("onnx")) return importedFromNode(root);
  root.allowOnly({"name", "vocab", "d_model", "n_layers", "n_heads", "d_ff", "seq_len", "batch",
                  "norm", "norm_eps", "activation", "position", "rope_theta", "n_kv_heads",
                  "tied_embeddings", "tokenizer", "tokenizer_model", "tensor_parallel", "init_std", "seed"});
  ModelConfig c;
  c.source = root.file();
  c.name = root.getString("name", "model");
  c.tokenizer = root.getEnum("tokenizer", {"bytes", "sentencepiece"}, "bytes") == "bytes"
                    ? TokenizerKind::kBytes
                    : TokenizerKind::kSentencePiece;
  c.tokenizer_model = root.getEnum("tokenizer_model", {"bpe", "unigram"}, "bpe") == "bpe"
                          ? SentencePieceModel::kBpe
                          : SentencePieceModel::kUnigram;
  if (c.tokenizer == TokenizerKind::kBytes) {
    c.vocab = root.getInt("vocab", 256, 256, kMaxModelSize);
  } else {
    // SentencePiece needs room for its byte fallback pieces (256) and the special pieces.
    c.vocab = root.getInt("vocab", 8192, 260, kMaxModelSize);
  }
  c.d_model = root.getInt("d_model", 1, kMaxModelSize);
  c.n_layers = root.getInt("n_layers", 1, 1024);
  c.n_heads = root.getInt("n_heads", 1, kMaxModelSize);
  c.d_ff = root.getInt("d_ff", 1, kMaxModelSize);
  c.seq_len = root.getInt("seq_len", 2, kMaxModelSize);
  c.batch = root.getInt("batch", 1, kMaxModelSize);
  c.norm = root.getEnum("norm", {"rmsnorm", "layernorm"}, "rmsnorm") == "rmsnorm"
               ? NormKind::kRmsNorm
               : NormKind::kLayerNorm;
  c.norm_eps = root.getDouble("norm_eps", 1e-5, 1e-12, 1.0);
  std::string activation = root.getEnum("activation", {"gelu", "relu", "swiglu"}, "gelu");
  c.activation = activation == "gelu"   ? Activation::kGelu
                 : activation == "relu" ? Activation::kRelu
                                        : Activation::kSwiGlu;
  c.position = root.getEnum("position", {"learned", "rope"}, "learned") == "learned" ? Position::kLearned
                                                                                      : Position::kRope;
  c.rope_theta = root.getDouble("rope_theta", 10000.0, 1.0, 1e9);
  c.n_kv_heads = root.getInt("n_kv_heads", 0, 0, kMaxModelSize);
  c.tied_embeddings = root.getBool("tied_embeddings", true);
  c.tensor_parallel = root.getInt("tensor_parallel", 1, 1, 1024);
  c.init_std = root.getDouble("init_std", 0.02, 1e-6, 10.0);
  c.seed = static_cast<uint64_t>(root.getInt("seed", 0, 0, INT64_MAX));
  if (c.d_model % c.n_heads != 0)
    root.fail("n_heads", fmt::format("must divide d_model = {}, got {}", c.d_model, c.n_heads));
  if (c.n_heads % c.kvHeads() != 0)
    root.fail("n_kv_heads", fmt::format("must divide n_heads = {}, got {}", c.n_heads, c.n_kv_heads));
  if (c.position == Position::kRope && c.headDim() % 2 != 0)
    root.fail("position", fmt::format("rotary embeddings rotate pairs of dimensions: the head dimension d_model / "
                                      "n_heads = {} must be even",
                                      c.headDim()));
  if (c.n_heads % c.tensor_parallel != 0 || c.d_ff % c.tensor_parallel != 0)
    root.fail("tensor_parallel", fmt::format("must divide n_heads = {} and d_ff = {}, got {}",
                                             c.n_heads, c.d_ff, c.tensor_parallel));
  // The embedding and the logits GEMM are split along the vocabulary.
  if (c.vocab % c.tensor_parallel != 0)
    root.fail("tensor_parallel", fmt::format("must divide vocab = {} (the logits GEMM is split along the "
                                             "vocabulary), got {}",
                                             c.vocab, c.tensor_parallel));
  if (c.kvHeads() % c.tensor_parallel != 0)
    root.fail("tensor_parallel",
              fmt::format("must divide n_kv_heads = {} (each device computes whole k and v heads), got {}",
                          c.kvHeads(), c.tensor_parallel));
  if (c.batch * c.seq_len > kMaxModelSize)
    root.fail("batch", fmt::format("batch x seq_len = {} tokens is more than {}",
                                   c.batch * c.seq_len, kMaxModelSize));
  // Each factor is at most 2^20 and tokens x seq_len at most 2^40, so the product
  // itself fits int64.
  if (c.tokens() * c.n_heads * c.seq_len > kMaxModelElements)
    root.fail("n_heads", fmt::format("the attention scores, batch x n_heads x seq_len x seq_len = {} x {} x {} x {}, "
                                     "have more than {} elements; reduce batch, n_heads or seq_len",
                                     c.batch, c.n_heads, c.seq_len, c.seq_len, kMaxModelElements));
  return c;
}

// A float as YAML 1.1 readers (PyYAML) take it: they need a '.', so 1e-05 becomes
// 1.0e-05.
std::string yamlFloat(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find('.') != std::string::npos || s.find_first_of("ni") != std::string::npos) return s;
  size_t e = s.find('e');
  return e == std::string::npos ? s + ".0" : s.insert(e, ".0");
}

}  // namespace

std::string ModelConfig::toYaml() const {
  if (imported())
    return fmt::format("name: {}\nonnx: {}\nonnx_hash: {}\nbatch: {}\nseq_len: {}\nvocab: {}\ntrainable: {}\n"
                       "frozen: {}\nseed: {}\n{}",
                       yamlScalar(name), yamlScalar(onnx), onnx_hash, batch, seq_len, vocab,
                       quoted(trainable, QuoteStyle::kJson), quoted(frozen, QuoteStyle::kJson), seed,
                       sharding_rules.empty() ? std::string()
                                              : fmt::format("sharding_rules: {}\n", yamlScalar(sharding_rules)));
  return fmt::format(
      "name: {}\nvocab: {}\nd_model: {}\nn_layers: {}\nn_heads: {}\nd_ff: {}\nseq_len: {}\n"
      "batch: {}\nnorm: {}\nnorm_eps: {}\nactivation: {}\nposition: {}\nrope_theta: {}\nn_kv_heads: {}\n"
      "tied_embeddings: {}\ntokenizer: {}\ntokenizer_model: {}\ntensor_parallel: {}\ninit_std: {}\nseed: {}\n",
      yamlScalar(name), vocab, d_model, n_layers, n_heads, d_ff, seq_len, batch,
      norm == NormKind::kRmsNorm ? "rmsnorm" : "layernorm", yamlFloat(norm_eps),
      activation == Activation::kGelu ? "gelu" : activation == Activation::kRelu ? "relu" : "swiglu",
      position == Position::kLearned ? "learned" : "rope", yamlFloat(rope_theta), kvHeads(),
      tied_embeddings ? "true" : "false", tokenizer == TokenizerKind::kBytes ? "bytes" : "sentencepiece",
      tokenizer_model == SentencePieceModel::kBpe ? "bpe" : "unigram", tensor_parallel, yamlFloat(init_std), seed);
}

ModelConfig parseModelConfig(const std::string& yaml_text, const std::string& source) {
  return fromNode(ConfigNode::loadString(yaml_text, source));
}

std::vector<std::string> modelPresetNames() {
  std::vector<std::string> names;
  for (const auto& [name, text] : kModelPresets) names.emplace_back(name);
  return names;
}

ModelConfig loadModelConfig(const std::string& spec, const ModelOverrides& overrides) {
  ModelConfig c;
  bool found = false;
  for (const auto& [name, text] : kModelPresets)
    if (spec == name) {
      c = parseModelConfig(std::string(text), fmt::format("<preset {}>", name));
      found = true;
    }
  std::error_code ec;
  if (!found && !std::filesystem::exists(spec, ec))
    throw Error(fmt::format("model '{}' is neither a preset ({}) nor an existing file", spec,
                            fmt::join(modelPresetNames(), ", ")));
  // Tensor parallelism of an imported model: the rules say which parameters split.
  auto layout = [&](ModelConfig& m) {
    if (overrides.tensor_parallel > 1 && overrides.sharding_rules.empty())
      throw Error(fmt::format("--tensor-parallel {}: an imported model needs --sharding-rules FILE (which parameter "
                              "splits along which dim; docs/DISTRIBUTED.md); data parallelism (mpirun -np N "
                              "without --tensor-parallel) works for {} as it is",
                              overrides.tensor_parallel, spec));
    if (!overrides.sharding_rules.empty()) {
      loadShardingRules(overrides.sharding_rules);  // checked before any work
      m.sharding_rules = overrides.sharding_rules;
    }
    if (overrides.tensor_parallel > 0) m.tensor_parallel = overrides.tensor_parallel;
  };
  if (!found && isOnnxModelPath(spec)) {
    c.onnx = spec;
    c.name = std::filesystem::path(spec).stem().string();
    c.source = spec;
    c.batch = overrides.batch;
    c.seq_len = overrides.seq_len;
    c.trainable = overrides.trainable;
    c.frozen = overrides.frozen;
    layout(c);
    return importedConfig(c);
  }
  if (!found) {
    const std::string text = readTextFile(spec, InputKind::kModelConfig);
    if (text.find('\0') != std::string::npos)
      throw Error(fmt::format("{}: contains NUL bytes; expected a model config (YAML) or, named NAME.onnx, an ONNX "
                              "model",
                              spec));
    c = fromNode(ConfigNode::loadString(text, spec));
  }
  if (c.imported()) layout(c);
  else if (!overrides.sharding_rules.empty())
    throw Error(fmt::format("--sharding-rules applies to imported (ONNX) models; {} is built by pgq, which splits it "
                            "the Megatron way",
                            spec));
  if (c.imported()) {
    if (overrides.batch || overrides.seq_len || !overrides.trainable.empty() || !overrides.frozen.empty()) {
      if (overrides.batch) c.batch = overrides.batch;
      if (overrides.seq_len) c.seq_len = overrides.seq_len;
      if (!overrides.trainable.empty()) c.trainable = overrides.trainable;
      if (!overrides.frozen.empty()) c.frozen = overrides.frozen;
      c = importedConfig(c);
    }
    return c;
  }
  if (!overrides.trainable.empty() || !overrides.frozen.empty())
    throw Error(fmt::format("--trainable and --frozen apply to imported (ONNX) models; {} is built by pgq", spec));
  if (overrides.batch || overrides.seq_len || overrides.tensor_parallel) {
    // Re-read with the new sizes, so that every bound is checked as for the file's own.
    const std::string source = c.source;
    if (overrides.batch) c.batch = overrides.batch;
    if (overrides.seq_len) c.seq_len = overrides.seq_len;
    if (overrides.tensor_parallel) c.tensor_parallel = overrides.tensor_parallel;
    std::string given;
    for (auto [flag, value] : {std::pair{"--batch", overrides.batch}, std::pair{"--seq", overrides.seq_len},
                               std::pair{"--tensor-parallel", overrides.tensor_parallel}})
      if (value) given += fmt::format("{}{} {}", given.empty() ? "" : " ", flag, value);
    const std::string label = fmt::format("{} with {}", source, given);
    try {
      c = parseModelConfig(c.toYaml(), label);
    } catch (const Error& e) {
      // The line numbers are the rewritten text's, not the file's: say the flags instead.
      std::string_view what = e.what();
      if (!what.starts_with(label)) throw;
      what.remove_prefix(label.size());
      const size_t colon = what.find(": ");
      throw Error(fmt::format("{}: {}", label, what.substr(colon == std::string_view::npos ? 0 : colon + 2)));
    }
    c.source = source;
  }
  return c;
}

}  // namespace pgq
