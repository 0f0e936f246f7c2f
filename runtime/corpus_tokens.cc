#include "runtime/corpus_tokens.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string_view>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "support/errors.h"
#include "support/file_io.h"
#include "support/hash.h"

namespace pgq {
namespace {

namespace fs = std::filesystem;

double msSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

std::string_view textOf(const std::vector<uint8_t>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

template <typename T>
std::span<const uint8_t> bytesOf(std::span<const T> values) {
  return {reinterpret_cast<const uint8_t*>(values.data()), values.size_bytes()};
}

// Ids of a vocabulary up to 2^16 fit 16 bits: half the file and the page cache of 32.
uint32_t tokenWidth(int64_t vocab) { return vocab <= 65536 ? 2 : 4; }

const char* modelName(const ModelConfig& model) {
  return model.tokenizer_model == SentencePieceModel::kBpe ? "bpe" : "unigram";
}

// Encodes `text` in two halves at once (SentencePiece's encoder is thread-safe); each half
// ends at a newline, where no piece crosses, so the ids are those of the whole text.
std::vector<uint32_t> encodeText(const Tokenizer& tokenizer, std::string_view text) {
  size_t middle = text.find('\n', text.size() / 2);
  middle = middle == std::string_view::npos ? text.size() : middle + 1;
  std::vector<uint32_t> first, second;
  std::thread worker([&] { tokenizer.encode(text.substr(middle), second); });
  tokenizer.encode(text.substr(0, middle), first);
  worker.join();
  first.insert(first.end(), second.begin(), second.end());
  return first;
}

// The encoded split in the payload format of a token file (`width` bytes per id).
std::vector<uint8_t> packTokens(const std::vector<uint32_t>& ids, uint32_t width) {
  if (width == 4) {
    std::span<const uint32_t> all(ids);
    return {bytesOf(all).begin(), bytesOf(all).end()};
  }
  std::vector<uint16_t> narrow(ids.begin(), ids.end());
  std::span<const uint16_t> all(narrow);
  return {bytesOf(all).begin(), bytesOf(all).end()};
}

TokenSpan spanOf(const CacheFile& file, uint32_t width) {
  std::span<const uint8_t> payload = file.payload();
  if (width == 2) return std::span<const uint16_t>(reinterpret_cast<const uint16_t*>(payload.data()), file.count());
  return std::span<const uint32_t>(reinterpret_cast<const uint32_t*>(payload.data()), file.count());
}

uint32_t maxId(TokenSpan tokens) {
  return tokens.visit([](auto ids) {
    uint32_t top = 0;
    for (auto id : ids) top = std::max<uint32_t>(top, id);
    return top;
  });
}

// Throws when a split has fewer than seq_len + 1 tokens.
void checkTokensFit(TokenSpan train, TokenSpan val, const Corpus& corpus, int64_t seq_len) {
  uint64_t needed = static_cast<uint64_t>(seq_len) + 1;
  auto check = [&](TokenSpan part, const char* name) {
    if (part.size() < needed)
      throw Error(fmt::format("corpus {}: {} split has {} tokens, needs at least seq_len+1 = {}; use a longer "
                              "text, a smaller seq_len or a larger vocab",
                              corpus.source, name, part.size(), needed));
  };
  check(train, "training");
  check(val, "validation");
}

uint64_t hashOf(std::string_view text) {
  return fnv1a64(text);
}

void reportDiscarded(const std::string& path, const std::string& problem) {
  spdlog::warn("tokenizer cache {}: {}; rebuilding it", path, problem);
}

// Writes a cache file and maps it back, as every later run will. Where the file system
// refuses the file (a full disk, no permission), the run goes on with the payload in
// memory and says so: the cache saves time, training does not need it.
CacheFile writeAndOpen(const std::string& path, const CacheFileKey& key, std::span<const uint8_t> payload,
                       double build_ms) {
  try {
    CacheFile::write(path, key, payload, build_ms);
  } catch (const CacheFile::WriteFailed& e) {
    spdlog::warn("{}; going on without caching it (the next run builds it again: free space there or set "
                 "PGQ_CACHE_DIR to another directory)",
                 e.what());
    return CacheFile::inMemory(key, std::vector<uint8_t>(payload.begin(), payload.end()), build_ms);
  }
  std::string problem;
  std::optional<CacheFile> file = CacheFile::open(path, key, problem);
  if (!file) throw Error(fmt::format("tokenizer cache {}: cannot read back what was written: {}", path, problem));
  return std::move(*file);
}

// The cached model at `path` with its tokenizer, when it loads and has model.vocab pieces.
std::optional<CacheFile> cachedModel(const std::string& path, const CacheFileKey& key, const ModelConfig& model,
                                     std::unique_ptr<Tokenizer>& tokenizer) {
  std::string problem;
  std::optional<CacheFile> file = CacheFile::open(path, key, problem);
  if (file) {
    std::span<const uint8_t> payload = file->payload();
    try {
      tokenizer = loadSentencePiece({reinterpret_cast<const char*>(payload.data()), payload.size()});
      if (tokenizer->vocabSize() != model.vocab)
        problem = fmt::format("its model has {} pieces, expected vocab {}", tokenizer->vocabSize(), model.vocab);
    } catch (const Error& e) {
      problem = e.what();
    }
  }
  if (problem.empty()) return file;
  reportDiscarded(path, problem);
  return std::nullopt;
}

// A model trained on the corpus's training split, cached at `path`.
CacheFile trainModel(const std::string& path, const CacheFileKey& key, const Corpus& corpus,
                     const ModelConfig& model, std::unique_ptr<Tokenizer>& tokenizer) {
  auto start = std::chrono::steady_clock::now();
  std::string serialized;
  try {
    serialized = trainSentencePiece(textOf(corpus.train), model.tokenizer_model, model.vocab);
  } catch (const Error& e) {
    throw Error(fmt::format("model {}: field 'vocab' is {}: SentencePiece cannot build a {} vocabulary of that size "
                            "from the training split of corpus {} ({}): {}",
                            model.source.empty() ? model.name : model.source, model.vocab, modelName(model),
                            corpus.source, byteSizeText(corpus.train.size()), e.what()));
  }
  double ms = msSince(start);
  tokenizer = loadSentencePiece(serialized);
  return writeAndOpen(path, key, bytesOf(std::span<const char>(serialized)), ms);
}

// The cached ids of a split at `path`, when they match `key` and fit the vocabulary.
std::optional<CacheFile> cachedTokens(const std::string& path, const CacheFileKey& key, int64_t vocab) {
  std::string problem;
  std::optional<CacheFile> file = CacheFile::open(path, key, problem);
  // A file with the right hash can still come from a bug, and an id past the embedding
  // table would read out of bounds.
  if (file && maxId(spanOf(*file, key.width)) >= static_cast<uint64_t>(vocab))
    problem = fmt::format("an id is outside the vocabulary of {}", vocab);
  if (problem.empty()) return file;
  reportDiscarded(path, problem);
  return std::nullopt;
}

CacheFile encodeSplit(const std::string& path, const CacheFileKey& key, const Tokenizer& tokenizer,
                      const std::vector<uint8_t>& text) {
  auto start = std::chrono::steady_clock::now();
  std::vector<uint8_t> payload = packTokens(encodeText(tokenizer, textOf(text)), key.width);
  return writeAndOpen(path, key, payload, msSince(start));
}

}  // namespace

std::string tokenCacheDirectory() {
  auto absolute = [](const char* name) -> const char* {
    const char* value = std::getenv(name);
    return value && value[0] == '/' ? value : nullptr;
  };
  if (const char* dir = absolute("PGQ_CACHE_DIR")) return dir;
  // pgq's own variable set to a relative path is a mistake, not a request for the default
  // (XDG's rule for its own variables); empty counts as unset.
  if (const char* dir = std::getenv("PGQ_CACHE_DIR"); dir && dir[0] != '\0')
    throw Error(fmt::format("PGQ_CACHE_DIR={}: expected an absolute path (the cache must not depend on the folder pgq "
                            "is started in)",
                            dir));
  if (const char* xdg = absolute("XDG_CACHE_HOME")) return (fs::path(xdg) / "pgq").string();
  if (const char* home = absolute("HOME")) return (fs::path(home) / ".cache" / "pgq").string();
  throw Error("tokenizer cache: none of PGQ_CACHE_DIR, XDG_CACHE_HOME and HOME is set to an absolute path; set "
              "PGQ_CACHE_DIR to a directory for the SentencePiece models and encoded corpora");
}

CorpusTokens::CorpusTokens(const Corpus& corpus, const ModelConfig& model, const std::string& cache_dir) {
  // A token is at least one byte: a split too short in bytes is too short in tokens.
  checkCorpusFits(corpus, model.seq_len);
  if (model.tokenizer == TokenizerKind::kBytes) {
    tokenizer_ = bytesTokenizer();
    train_ = TokenSpan(corpus.train);
    val_ = TokenSpan(corpus.val);
    return;
  }
  fs::path dir = fs::path(cache_dir.empty() ? tokenCacheDirectory() : cache_dir) / "sentencepiece";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw Error(fmt::format("tokenizer cache {}: cannot create the directory: {}; set PGQ_CACHE_DIR to a writable "
                            "directory",
                            dir.string(), ec.message()));
  const std::string key = fmt::format("{:016x}-{}-{}-{}-v{}", corpus.fingerprint, corpus.train.size(),
                                      modelName(model), model.vocab, kCacheFormatVersion);
  const std::string base = (dir / key).string();

  const std::string model_path = base + ".tokenizer";
  const CacheFileKey model_key{CacheFileKind::kTokenizer, hashOf(key), 1};
  std::optional<CacheFile> model_file = cachedModel(model_path, model_key, model, tokenizer_);
  bool built = !model_file;
  if (!model_file) model_file = trainModel(model_path, model_key, corpus, model, tokenizer_);
  tokenizer_hash_ = model_file->payloadHash();

  // A split's ids belong to the model that encoded them: its hash is part of their key.
  auto tokens = [&](const char* split, const std::vector<uint8_t>& text) {
    const std::string path = fmt::format("{}.{}.tokens", base, split);
    const std::string tokens_id = fmt::format("{}.{}:{:016x}", key, split, tokenizer_hash_);
    const CacheFileKey tokens_key{CacheFileKind::kTokens, hashOf(tokens_id), tokenWidth(model.vocab)};
    std::optional<CacheFile> file = cachedTokens(path, tokens_key, model.vocab);
    if (file) return std::move(*file);
    built = true;
    return encodeSplit(path, tokens_key, *tokenizer_, text);
  };
  train_file_ = tokens("train", corpus.train);
  val_file_ = tokens("val", corpus.val);
  train_ = spanOf(*train_file_, tokenWidth(model.vocab));
  val_ = spanOf(*val_file_, tokenWidth(model.vocab));
  reused_ = !built;

  double bytes = static_cast<double>(corpus.train.size() + corpus.val.size());
  size_t count = train_.size() + val_.size();
  std::string what = fmt::format("sentencepiece {} vocab {} of {} ({} tokens, {:.3f} tokens per byte)",
                                 modelName(model), model.vocab, corpus.source, count,
                                 static_cast<double>(count) / std::max(bytes, 1.0));
  double train_s = model_file->buildMs() / 1000;
  double encode_s = (train_file_->buildMs() + val_file_->buildMs()) / 1000;
  if (reused_)
    spdlog::info("tokenizer: reusing the cached {} from {} (built in {:.1f} s training + {:.1f} s encoding)", what,
                 dir.string(), train_s, encode_s);
  else
    spdlog::info("tokenizer: built {} in {:.1f} s training + {:.1f} s encoding; {} {}", what, train_s, encode_s,
                 model_file->cached() && train_file_->cached() && val_file_->cached() ? "cached in" : "not all cached in",
                 dir.string());
  checkTokensFit(train_, val_, corpus, model.seq_len);
}

}  // namespace pgq
