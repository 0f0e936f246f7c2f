#pragma once
// Tokenizers: text to token ids and back, for the model config's `tokenizer`.
//   - bytes: each byte is its own token (vocab 256), the identity.
//   - sentencepiece: a subword vocabulary of `vocab` pieces (BPE or unigram) that pgq
//     trains itself with SentencePiece on a corpus's training split, so a model config
//     names only the kind and the size, never a model file (runtime/corpus_tokens.h
//     trains, caches and reuses it).
//
// Both are lossless on UTF-8 text: decode(encode(text)) == text byte for byte, and every
// byte string has an encoding (SentencePiece spells what its pieces do not cover with its
// 256 byte pieces). The exception is SentencePiece's whitespace symbol U+2581 ("▁"),
// which it cannot tell from an escaped space: such text decodes with spaces instead.
// pieceBytes() is how many bytes of text each id stands for, which turns a loss per
// token into bits per byte.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "frontend/model_config.h"

namespace pgq {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  int64_t vocabSize() const { return static_cast<int64_t>(piece_bytes_.size()); }
  // Appends the ids of `text` to `ids`. Thread-safe: several threads may encode at once.
  virtual void encode(std::string_view text, std::vector<uint32_t>& ids) const = 0;
  virtual std::string decode(std::span<const uint32_t> ids) const = 0;
  // The bytes of text id i decodes to, for every id (0 for control pieces).
  const std::vector<uint32_t>& pieceBytes() const { return piece_bytes_; }

 protected:
  std::vector<uint32_t> piece_bytes_;
};

// The identity on bytes: 256 ids, one byte each.
std::unique_ptr<Tokenizer> bytesTokenizer();

// Trains a SentencePiece model of `vocab` pieces on the lines of `text` (a line is one
// training sentence; a sample of the lines when there are many) and returns it
// serialized (a ModelProto). The same text, model and vocab give the same model.
// Throws pgq::Error with SentencePiece's own message when it cannot build the model,
// such as a vocabulary larger than the text has pieces for; the caller names the
// config field.
std::string trainSentencePiece(std::string_view text, SentencePieceModel model, int64_t vocab);

// Loads a model trainSentencePiece wrote. Throws pgq::Error when the bytes are not a
// SentencePiece model or one trained with other options (no byte fallback, another
// normalization), which could not encode every text losslessly.
std::unique_ptr<Tokenizer> loadSentencePiece(std::string_view serialized);

}  // namespace pgq
