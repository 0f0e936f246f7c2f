// libpgq_sentencepiece.so: SentencePiece behind the C interface of shim.h.
#include "frontend/sentencepiece/shim.h"

#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

namespace {

using sentencepiece::SentencePieceProcessor;
using sentencepiece::util::Status;

int fail(const Status& status, PgqSpmSink error, void* context) {
  std::string message = status.ToString();
  error(context, message.data(), message.size());
  return 1;
}

// The training sentences: the non-empty lines of a text.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(std::string_view text) : text_(text) { Next(); }

  bool done() const override { return done_; }
  void Next() override {
    line_.clear();
    while (line_.empty() && !text_.empty()) {
      size_t end = text_.find('\n');
      line_.assign(text_.substr(0, end));
      text_.remove_prefix(end == std::string_view::npos ? text_.size() : end + 1);
    }
    done_ = line_.empty();
  }
  const std::string& value() const override { return line_; }
  Status status() const override { return {}; }  // OK: reading lines cannot fail

 private:
  std::string_view text_;
  std::string line_;
  bool done_ = false;
};

}  // namespace

extern "C" {

int pgq_spm_train(const char* const* keys, const char* const* values, size_t options, const char* text,
                  size_t text_size, PgqSpmSink model, void* model_context, PgqSpmSink error, void* error_context) {
  std::unordered_map<std::string, std::string> kwargs;
  for (size_t i = 0; i < options; ++i) kwargs[keys[i]] = values[i];
  // The trainer's random generator (unigram's sampling); its sentence sampler has its
  // own fixed seed.
  sentencepiece::SetRandomGeneratorSeed(1);
  LineIterator lines(std::string_view(text, text_size));
  std::string serialized;
  Status status = sentencepiece::SentencePieceTrainer::Train(kwargs, &lines, &serialized);
  if (!status.ok()) return fail(status, error, error_context);
  model(model_context, serialized.data(), serialized.size());
  return 0;
}

void* pgq_spm_load(const char* model, size_t model_size, PgqSpmSink error, void* error_context) {
  auto* processor = new SentencePieceProcessor;
  Status status = processor->LoadFromSerializedProto(std::string_view(model, model_size));
  if (status.ok()) return processor;
  fail(status, error, error_context);
  delete processor;
  return nullptr;
}

void pgq_spm_free(void* processor) {
  delete static_cast<SentencePieceProcessor*>(processor);
}

int pgq_spm_piece_count(const void* processor) {
  return static_cast<const SentencePieceProcessor*>(processor)->GetPieceSize();
}

int pgq_spm_piece(const void* processor, int id, PgqSpmSink piece, void* piece_context) {
  const auto* p = static_cast<const SentencePieceProcessor*>(processor);
  const std::string& text = p->IdToPiece(id);
  piece(piece_context, text.data(), text.size());
  if (p->IsByte(id)) return 1;
  if (p->IsControl(id)) return 2;
  if (p->IsUnknown(id)) return 3;
  return 0;
}

int pgq_spm_encode(const void* processor, const char* text, size_t text_size, PgqSpmSink ids, void* ids_context,
                   PgqSpmSink error, void* error_context) {
  const auto* p = static_cast<const SentencePieceProcessor*>(processor);
  // Line by line: one call on a whole corpus would hold per-character state for all of
  // it. No piece spans a newline (training sentences are lines), so the ids are those of
  // the whole text.
  std::string_view all(text, text_size);
  std::vector<int> line_ids;
  for (size_t begin = 0; begin < all.size();) {
    size_t end = all.find('\n', begin);
    end = end == std::string_view::npos ? all.size() : end + 1;
    Status status = p->Encode(all.substr(begin, end - begin), &line_ids);
    if (!status.ok()) return fail(status, error, error_context);
    ids(ids_context, line_ids.data(), line_ids.size() * sizeof(int));
    begin = end;
  }
  return 0;
}

int pgq_spm_decode(const void* processor, const int* ids, size_t count, PgqSpmSink text, void* text_context,
                   PgqSpmSink error, void* error_context) {
  std::string decoded;
  Status status = static_cast<const SentencePieceProcessor*>(processor)->Decode(std::vector<int>(ids, ids + count),
                                                                                &decoded);
  if (!status.ok()) return fail(status, error, error_context);
  text(text_context, decoded.data(), decoded.size());
  return 0;
}

}  // extern "C"

// The definitions have the types frontend/tokenizer.cc looks them up with.
static_assert(std::is_same_v<decltype(&pgq_spm_train), PgqSpmTrain>);
static_assert(std::is_same_v<decltype(&pgq_spm_load), PgqSpmLoad>);
static_assert(std::is_same_v<decltype(&pgq_spm_free), PgqSpmFree>);
static_assert(std::is_same_v<decltype(&pgq_spm_piece_count), PgqSpmPieceCount>);
static_assert(std::is_same_v<decltype(&pgq_spm_piece), PgqSpmPiece>);
static_assert(std::is_same_v<decltype(&pgq_spm_encode), PgqSpmEncode>);
static_assert(std::is_same_v<decltype(&pgq_spm_decode), PgqSpmDecode>);
