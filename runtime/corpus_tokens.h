#pragma once
// A corpus as the token ids a model trains on, under the model config's tokenizer
// (frontend/tokenizer.h).
//   - bytes: the corpus's own bytes are the ids, read in place (vocab 256).
//   - sentencepiece: pgq trains a SentencePiece model of `vocab` pieces on the training
//     split, encodes both splits once and keeps the model and the ids in the tokenizer
//     cache; later runs on the same corpus map them instead (a log line says so, with
//     what building them took).
//
// Cache directory: $PGQ_CACHE_DIR, else $XDG_CACHE_HOME/pgq, else $HOME/.cache/pgq; the
// files live in its sentencepiece/ folder, named by their key
//   <corpus fingerprint>-<training bytes>-<bpe|unigram>-<vocab>-v<format>.tokenizer
//   ... .train.tokens and ... .val.tokens
// (runtime/token_cache.h has their format). A token file's key also covers the hash of
// the model that encoded it, so a rebuilt model never meets ids of another. An entry
// that is damaged or does not match is reported in one log line and rebuilt; one the
// directory refuses (a full disk) is reported and kept in memory for this run.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "frontend/model_config.h"
#include "frontend/tokenizer.h"
#include "runtime/corpus.h"
#include "runtime/data_loader.h"
#include "runtime/token_cache.h"

namespace pgq {

// $PGQ_CACHE_DIR, else $XDG_CACHE_HOME/pgq, else $HOME/.cache/pgq (relative values of the
// variables are ignored, as the XDG specification says). Throws pgq::Error when none is set.
std::string tokenCacheDirectory();

class CorpusTokens {
 public:
  // Tokenizes `corpus` (which must outlive this object) for `model`, with the cache in
  // `cache_dir` (tokenCacheDirectory() when empty; created when missing; unused for
  // bytes). Throws pgq::Error when a split has fewer than seq_len + 1 tokens (one window
  // of a sequence and its shifted targets; checked on the bytes first, before any
  // training), naming the model config and its `vocab` when SentencePiece cannot build
  // that vocabulary from the corpus, and naming the cache directory when it cannot be
  // created or written.
  CorpusTokens(const Corpus& corpus, const ModelConfig& model, const std::string& cache_dir = "");

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  TokenSpan train() const { return train_; }
  TokenSpan val() const { return val_; }
  // True when the tokenizer and both splits came from the cache (nothing was trained or
  // encoded).
  bool reused() const { return reused_; }
  // FNV-1a 64 of the serialized SentencePiece model; 0 for bytes.
  uint64_t tokenizerHash() const { return tokenizer_hash_; }

 private:
  std::unique_ptr<Tokenizer> tokenizer_;
  std::optional<CacheFile> train_file_, val_file_;
  TokenSpan train_, val_;
  bool reused_ = false;
  uint64_t tokenizer_hash_ = 0;
};

}  // namespace pgq
