#include "runtime/data_loader.h"

#include <fmt/format.h>

#include "kernels/philox.h"
#include "support/errors.h"

namespace pgq {
namespace {

void checkSizes(TokenSpan data, int64_t batch_size, int64_t seq_len) {
  if (batch_size < 1 || seq_len < 1)
    throw Error(fmt::format("batch sampler: batch size {} and seq_len {} must be at least 1",
                            batch_size, seq_len));
  if (data.size() < static_cast<uint64_t>(seq_len) + 1)
    throw Error(fmt::format(
        "batch sampler: the data has {} tokens, needs at least seq_len+1 = {}", data.size(),
        seq_len + 1));
}

// `rows` with count -1 resolved to the rest of the batch; refuses an empty or outside
// range (the batch size and the number of replicas come from flags).
RowRange resolveRows(RowRange rows, int64_t batch_size) {
  int64_t count = rows.count == -1 ? batch_size - rows.first : rows.count;
  if (rows.first < 0 || count < 1 || rows.first + count > batch_size)
    throw Error(fmt::format("batch sampler: rows [{}, {}) are not a non-empty range of the batch of "
                            "{} rows (--batch-size)",
                            rows.first, rows.first + count, batch_size));
  return RowRange{rows.first, count};
}

// tokens[b,t] = data[o_b + t], targets[b,t] = data[o_b + t + 1].
void fillWindows(TokenSpan data, std::span<const int64_t> offsets, int64_t seq_len, Tensor& tokens,
                 Tensor& targets) {
  TensorType expected{DType::kS32, Shape{static_cast<int64_t>(offsets.size()), seq_len}};
  PGQ_ASSERT(tokens.type() == expected && !tokens.empty(), "tokens tensor is {}, expected {}",
             tokens.type().toString(), expected.toString());
  PGQ_ASSERT(targets.type() == expected && !targets.empty(),
             "targets tensor is {}, expected {}", targets.type().toString(),
             expected.toString());
  int32_t* tok = tokens.data<int32_t>();
  int32_t* tgt = targets.data<int32_t>();
  data.visit([&](auto ids) {
    for (size_t b = 0; b < offsets.size(); ++b) {
      PGQ_ASSERT(offsets[b] >= 0 && static_cast<uint64_t>(offsets[b] + seq_len) < ids.size(),
                 "window offset {} out of range", offsets[b]);
      auto window = ids.subspan(static_cast<size_t>(offsets[b]));
      int32_t* tok_row = tok + static_cast<int64_t>(b) * seq_len;
      int32_t* tgt_row = tgt + static_cast<int64_t>(b) * seq_len;
      for (int64_t t = 0; t < seq_len; ++t) {
        tok_row[t] = static_cast<int32_t>(window[static_cast<size_t>(t)]);
        tgt_row[t] = static_cast<int32_t>(window[static_cast<size_t>(t) + 1]);
      }
    }
  });
}

}  // namespace

EvalBatches::EvalBatches(TokenSpan data, int64_t batch_size, int64_t seq_len, int64_t n_batches,
                         RowRange rows)
    : data_(data), batch_size_(batch_size), seq_len_(seq_len), n_batches_(n_batches) {
  checkSizes(data, batch_size, seq_len);
  rows_ = resolveRows(rows, batch_size);
  if (n_batches < 1)
    throw Error(fmt::format("evaluation: {} batches requested, expected at least 1", n_batches));
  // Window j of N starts at floor(j * last / (N - 1)): the first window starts at token 0
  // and the last one ends at the last token.
  uint64_t count = static_cast<uint64_t>(n_batches) * static_cast<uint64_t>(batch_size);
  uint64_t last = data.size() - static_cast<uint64_t>(seq_len) - 1;
  offsets_.resize(count);
  for (uint64_t j = 0; j < count; ++j)
    offsets_[j] = count == 1 ? 0
                             : static_cast<int64_t>(static_cast<unsigned __int128>(j) * last /
                                                    (count - 1));
}

std::span<const int64_t> EvalBatches::offsets(int64_t index) const {
  PGQ_ASSERT(index >= 0 && index < n_batches_, "evaluation batch {} of {}", index, n_batches_);
  return std::span<const int64_t>(offsets_).subspan(
      static_cast<size_t>(index * batch_size_ + rows_.first), static_cast<size_t>(rows_.count));
}

void EvalBatches::fill(int64_t index, Tensor& tokens, Tensor& targets) const {
  fillWindows(data_, offsets(index), seq_len_, tokens, targets);
}

BatchSampler::BatchSampler(TokenSpan data, int64_t batch_size, int64_t seq_len, uint64_t seed,
                           Split split, RowRange rows)
    : data_(data), batch_size_(batch_size), seq_len_(seq_len), seed_(seed), split_(split) {
  checkSizes(data, batch_size, seq_len);
  rows_ = resolveRows(rows, batch_size);
}

TensorType BatchSampler::batchType() const {
  return TensorType{DType::kS32, Shape{rows_.count, seq_len_}};
}

std::vector<int64_t> BatchSampler::offsets(int64_t step) const {
  PGQ_ASSERT(step >= 0, "negative step {}", step);
  // One Philox call per window: key = seed, counter = (window, split, step), where the
  // window is the row of the global batch, so a replica's rows draw what they would in
  // the whole batch. The 64 random bits map to [0, range) by a 64x64->128-bit multiply
  // (Lemire), whose bias is below range / 2^64 (< 2^-24 for any corpus that fits in
  // memory), and unlike std::uniform_int_distribution it gives the same offsets with
  // every standard library.
  uint64_t range = data_.size() - static_cast<uint64_t>(seq_len_);
  uint64_t s = static_cast<uint64_t>(step);
  kernels::PhiloxKey key{static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)};
  std::vector<int64_t> result;
  result.reserve(static_cast<size_t>(rows_.count));
  for (int64_t b = rows_.first; b < rows_.first + rows_.count; ++b) {
    kernels::PhiloxCounter out = kernels::philox4x32(
        {static_cast<uint32_t>(b), static_cast<uint32_t>(split_), static_cast<uint32_t>(s),
         static_cast<uint32_t>(s >> 32)},
        key);
    uint64_t bits = (uint64_t{out[1]} << 32) | out[0];
    result.push_back(static_cast<int64_t>((static_cast<unsigned __int128>(bits) * range) >> 64));
  }
  return result;
}

void BatchSampler::sample(int64_t step, Tensor& tokens, Tensor& targets) const {
  std::vector<int64_t> starts = offsets(step);
  fillWindows(data_, starts, seq_len_, tokens, targets);
}

EvalBatches BatchSampler::evalBatches(int64_t n_batches) const {
  return EvalBatches(data_, batch_size_, seq_len_, n_batches, rows_);
}

}  // namespace pgq
