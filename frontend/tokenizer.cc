#include "frontend/tokenizer.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "frontend/sentencepiece/shim.h"
#include "support/errors.h"

namespace pgq {
namespace {

class BytesTokenizer : public Tokenizer {
 public:
  BytesTokenizer() { piece_bytes_.assign(256, 1); }

  void encode(std::string_view text, std::vector<uint32_t>& ids) const override {
    for (char c : text) ids.push_back(static_cast<uint8_t>(c));
  }
  std::string decode(std::span<const uint32_t> ids) const override {
    std::string text;
    text.reserve(ids.size());
    for (uint32_t id : ids) {
      PGQ_ASSERT(id < 256, "byte token {} out of range", id);
      text += static_cast<char>(id);
    }
    return text;
  }
};

// Sinks of the shim's callbacks (shim.h): they copy what the library sends.
void appendText(void* context, const void* data, size_t size) {
  static_cast<std::string*>(context)->append(static_cast<const char*>(data), size);
}
void appendIds(void* context, const void* data, size_t size) {
  auto* ids = static_cast<std::vector<uint32_t>*>(context);
  const int* begin = static_cast<const int*>(data);
  ids->insert(ids->end(), begin, begin + size / sizeof(int));
}

// libpgq_sentencepiece.so (frontend/sentencepiece/shim.h says why it is separate),
// loaded on first use and kept for the life of the process.
struct SentencePieceLibrary {
  PgqSpmTrain train;
  PgqSpmLoad load;
  PgqSpmFree free;
  PgqSpmPieceCount piece_count;
  PgqSpmPiece piece;
  PgqSpmEncode encode;
  PgqSpmDecode decode;
};

// The library's candidates: $PGQ_SENTENCEPIECE_LIB, the build tree's, the installed one.
std::vector<std::string> libraryPaths() {
  std::vector<std::string> paths;
  if (const char* path = std::getenv("PGQ_SENTENCEPIECE_LIB"); path && *path) paths.emplace_back(path);
  paths.emplace_back(PGQ_SENTENCEPIECE_BUILD_PATH);
  paths.emplace_back(PGQ_SENTENCEPIECE_INSTALL_PATH);
  return paths;
}

SentencePieceLibrary loadLibrary() {
  std::string tried;
  for (const std::string& path : libraryPaths()) {
    // RTLD_DEEPBIND: SentencePiece resolves its symbols in its own library first (its
    // protobuf, not the program's). dlmopen into the program's namespace (LM_ID_BASE) is
    // dlopen, except that AddressSanitizer, which refuses RTLD_DEEPBIND through dlopen
    // because a deep-bound library may reach another malloc, does not intercept it: in a
    // sanitized build the shim itself needs libasan first, so its malloc is ASan's anyway,
    // and no memory crosses the interface.
    void* handle = ::dlmopen(LM_ID_BASE, path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!handle) {
      tried += fmt::format("\n  {}: {}", path, ::dlerror());
      continue;
    }
    auto symbol = [&](const char* name) {
      void* address = ::dlsym(handle, name);
      if (!address) throw Error(fmt::format("SentencePiece: {} has no {}: {}", path, name, ::dlerror()));
      return address;
    };
    return {reinterpret_cast<PgqSpmTrain>(symbol("pgq_spm_train")),
            reinterpret_cast<PgqSpmLoad>(symbol("pgq_spm_load")),
            reinterpret_cast<PgqSpmFree>(symbol("pgq_spm_free")),
            reinterpret_cast<PgqSpmPieceCount>(symbol("pgq_spm_piece_count")),
            reinterpret_cast<PgqSpmPiece>(symbol("pgq_spm_piece")),
            reinterpret_cast<PgqSpmEncode>(symbol("pgq_spm_encode")),
            reinterpret_cast<PgqSpmDecode>(symbol("pgq_spm_decode"))};
  }
  throw Error(fmt::format("SentencePiece: cannot load pgq's SentencePiece library (build the target "
                          "pgq_sentencepiece, or set PGQ_SENTENCEPIECE_LIB to libpgq_sentencepiece.so):{}",
                          tried));
}

const SentencePieceLibrary& library() {
  static const SentencePieceLibrary lib = loadLibrary();
  return lib;
}

// SentencePiece writes a space inside a piece as U+2581.
constexpr std::string_view kSpaceSymbol = "\xe2\x96\x81";

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::string_view serialized)
      : lib_(library()), processor_(nullptr, lib_.free) {
    std::string error;
    processor_.reset(lib_.load(serialized.data(), serialized.size(), appendText, &error));
    if (!processor_) throw Error(fmt::format("not a SentencePiece model: {}", error));
    int size = lib_.piece_count(processor_.get());
    piece_bytes_.resize(static_cast<size_t>(size));
    int byte_pieces = 0;
    for (int id = 0; id < size; ++id) {
      std::string piece;
      int kind = lib_.piece(processor_.get(), id, appendText, &piece);
      uint32_t bytes = 0;
      if (kind == 1) {
        bytes = 1;
        ++byte_pieces;
      } else if (kind == 0) {
        for (size_t at = 0; at < piece.size(); ++bytes)
          at += std::string_view(piece).substr(at, kSpaceSymbol.size()) == kSpaceSymbol ? kSpaceSymbol.size() : 1;
      }
      piece_bytes_[static_cast<size_t>(id)] = bytes;
    }
    if (byte_pieces != 256)
      throw Error(fmt::format("the SentencePiece model has {} byte pieces, expected 256 (byte_fallback)",
                              byte_pieces));
    // The options that make encoding lossless are in the model's normalizer spec; a
    // probe text with what they affect (leading, repeated and trailing spaces, a tab, a
    // newline, accents) shows whether it was trained with them.
    constexpr std::string_view kProbe = "  two  spaces\tand\na caf\xc3\xa9 \xe2\x80\x94 end ";
    std::vector<uint32_t> ids;
    encode(kProbe, ids);
    if (decode(ids) != kProbe)
      throw Error("the SentencePiece model does not reproduce its input (it was trained with another "
                  "normalization, a dummy prefix or whitespace removal)");
  }

  void encode(std::string_view text, std::vector<uint32_t>& ids) const override {
    std::string error;
    int failed = lib_.encode(processor_.get(), text.data(), text.size(), appendIds, &ids, appendText, &error);
    PGQ_ASSERT(!failed, "SentencePiece encode: {}", error);
  }

  std::string decode(std::span<const uint32_t> ids) const override {
    std::vector<int> as_int(ids.begin(), ids.end());
    std::string text, error;
    int failed = lib_.decode(processor_.get(), as_int.data(), as_int.size(), appendText, &text, appendText, &error);
    PGQ_ASSERT(!failed, "SentencePiece decode: {}", error);
    return text;
  }

 private:
  const SentencePieceLibrary& lib_;
  std::unique_ptr<void, PgqSpmFree> processor_;
};

// Training sentences SentencePiece keeps at most: a random sample of the lines (its
// reservoir sampler has a fixed seed). Enough for a stable vocabulary of a few thousand
// pieces, and it bounds training time on a large corpus.
constexpr int64_t kTrainingSentences = 400'000;
// SentencePiece's unigram EM splits the sentences into one shard per thread and sums the
// shards in order: a fixed count keeps the model a function of the text alone.
constexpr int kTrainerThreads = 2;

// SentencePiece's trainer skips every sentence (line) longer than max_sentence_length,
// 4192 bytes by default: a corpus on one line (a 48 MiB dump) gave it nothing and it
// failed asking for a smaller vocabulary. Lines are cut into pieces of at most this many
// bytes for training, at the last space before the limit (or at a UTF-8 character
// boundary when there is none); encoding still sees the text as it is.
constexpr size_t kMaxSentenceBytes = 4192;

// `text` with every line longer than kMaxSentenceBytes cut as above; the text itself
// when no line is that long.
std::string_view trainingLines(std::string_view text, std::string& storage) {
  bool long_line = false;
  for (size_t start = 0; start < text.size() && !long_line;) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    long_line = end - start > kMaxSentenceBytes;
    start = end + 1;
  }
  if (!long_line) return text;
  storage.clear();
  storage.reserve(text.size() + text.size() / kMaxSentenceBytes + 1);
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    while (end - start > kMaxSentenceBytes) {
      // Searched within the window only: from its end back to the start of the text, a
      // line without spaces took quadratic time (a 20 MB one did not finish in 5 min).
      const size_t space = text.substr(start, kMaxSentenceBytes + 1).find_last_of(" \t");
      size_t cut = space == std::string_view::npos || space == 0 ? std::string_view::npos : start + space;
      if (cut == std::string_view::npos) {
        cut = start + kMaxSentenceBytes;
        while (cut > start && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not mid-character
        if (cut == start) cut = start + kMaxSentenceBytes;  // no character boundary: not UTF-8; cut anyway
      }
      storage.append(text.substr(start, cut - start));
      storage.push_back('\n');
      start = cut;
    }
    storage.append(text.substr(start, end - start));
    storage.push_back('\n');
    start = end + 1;
  }
  return storage;
}

}  // namespace

std::unique_ptr<Tokenizer> bytesTokenizer() { return std::make_unique<BytesTokenizer>(); }

std::string trainSentencePiece(std::string_view text, SentencePieceModel model, int64_t vocab) {
  // Why these options:
  //   normalization_rule_name=identity, add_dummy_prefix=false,
  //   remove_extra_whitespaces=false: the text is modelled as it is, so decoding gives
  //     back the exact bytes and bits per byte count the real bytes (the defaults apply
  //     NFKC, add a leading space and squeeze runs of spaces).
  //   byte_fallback=true: a character outside the pieces is spelled as its UTF-8 bytes
  //     instead of <unk>, so every text encodes losslessly.
  //   bos_id=-1, eos_id=-1: pgq trains on a stream where documents are separated by
  //     blank lines; sentence markers would only take two ids.
  //   allow_whitespace_only_pieces=true: runs of spaces (indented verse, aligned
  //     columns) become pieces instead of one token per space.
  //   character_coverage stays at its default, 0.9995: the rarest characters are
  //     spelled in bytes (byte_fallback) instead of each taking a piece.
  //   required_chars=U+2581 (SentencePiece's space symbol): the space always has a piece.
  //     In a corpus where spaces are rarer than the coverage (one line in 100 of random
  //     letters, CJK text) it was left out, and the space then did not come back from
  //     decoding (its bytes decode as the symbol itself): the model failed its check.
  //   input_sentence_size, shuffle_input_sentence: a fixed-seed sample of the lines.
  //   minloglevel=2: SentencePiece's progress log stays quiet; errors come back as a
  //     status, which pgq reports.
  const std::vector<std::pair<std::string, std::string>> options = {
      {"model_type", model == SentencePieceModel::kBpe ? "bpe" : "unigram"},
      {"vocab_size", std::to_string(vocab)},
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"byte_fallback", "true"},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"allow_whitespace_only_pieces", "true"},
      {"required_chars", "\xe2\x96\x81"},
      {"input_sentence_size", std::to_string(kTrainingSentences)},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(kTrainerThreads)},
      {"minloglevel", "2"},
  };
  std::vector<const char*> keys, values;
  for (const auto& [key, value] : options) {
    keys.push_back(key.c_str());
    values.push_back(value.c_str());
  }
  std::string storage, serialized, error;
  const std::string_view lines = trainingLines(text, storage);
  if (library().train(keys.data(), values.data(), options.size(), lines.data(), lines.size(), appendText, &serialized,
                      appendText, &error))
    throw Error(error);
  return serialized;
}

std::unique_ptr<Tokenizer> loadSentencePiece(std::string_view serialized) {
  return std::make_unique<SentencePieceTokenizer>(serialized);
}

}  // namespace pgq
