#pragma once
// Batches of a language model: B windows of T+1 consecutive tokens of the corpus become
// tokens s32[B,T] (tokens o..o+T-1) and targets s32[B,T] (tokens o+1..o+T, the next
// token of each). The tokens are the corpus's bytes for a byte-level model, or its ids
// under a subword tokenizer (runtime/corpus_tokens.h); windows are counted in tokens.
//
// Training batches are random but stateless: the window offsets of batch `step` are a
// pure function of (seed, step, split), drawn from the counter-based Philox generator
// (kernels/philox.h). A run resumed at step k therefore sees exactly the batches an
// uninterrupted run would have seen, and no loader state needs to be checkpointed.
// Evaluation batches are fixed windows that do not depend on the seed, so validation
// losses are comparable across runs and recipes that share B, T and the corpus.
//
// Data-parallel training shards the GLOBAL batch: each replica fills only its rows
// (RowRange) of the batch every replica would draw, so a job of R replicas of B/R rows
// sees the batches of one process of B rows, whatever R is.
#include <cstdint>
#include <span>
#include <vector>

#include "ir/node.h"
#include "runtime/tensor.h"

namespace pgq {

// A read-only sequence of token ids as stored: bytes (a byte-level corpus, read in
// place), or uint16/uint32 ids (a memory-mapped token file). Does not own the ids.
class TokenSpan {
 public:
  TokenSpan() = default;
  TokenSpan(std::span<const uint8_t> ids) : data_(ids.data()), size_(ids.size()), width_(1) {}
  TokenSpan(std::span<const uint16_t> ids) : data_(ids.data()), size_(ids.size()), width_(2) {}
  TokenSpan(std::span<const uint32_t> ids) : data_(ids.data()), size_(ids.size()), width_(4) {}

  size_t size() const { return size_; }
  int width() const { return width_; }  // bytes per id
  uint32_t operator[](size_t i) const {
    switch (width_) {
      case 1: return static_cast<const uint8_t*>(data_)[i];
      case 2: return static_cast<const uint16_t*>(data_)[i];
      default: return static_cast<const uint32_t*>(data_)[i];
    }
  }
  // Calls f(std::span<const T>) with the ids in their stored type, for loops that must
  // not switch on the width per id.
  template <typename F>
  decltype(auto) visit(F&& f) const {
    switch (width_) {
      case 1: return f(std::span<const uint8_t>(static_cast<const uint8_t*>(data_), size_));
      case 2: return f(std::span<const uint16_t>(static_cast<const uint16_t*>(data_), size_));
      default: return f(std::span<const uint32_t>(static_cast<const uint32_t*>(data_), size_));
    }
  }

 private:
  const void* data_ = nullptr;
  size_t size_ = 0;
  int width_ = 1;
};

// Which part of the corpus a sampler reads; part of the random key, so the two splits
// never draw correlated offsets.
enum class Split : uint32_t { kTrain = 0, kVal = 1 };

// Rows [first, first + count) of a global batch of B rows; count -1: to the last row.
struct RowRange {
  int64_t first = 0;
  int64_t count = -1;
};

// A fixed list of evaluation batches over one span of tokens: n_batches * B windows
// spaced evenly from the first token to the last, in order. The windows do not overlap
// when n_batches * B * T <= size - 1; otherwise neighbours share bytes.
class EvalBatches {
 public:
  // `data` must outlive this object. `rows` selects the rows of each batch this process
  // fills; the windows are those of the whole batch (they do not depend on `rows`).
  EvalBatches(TokenSpan data, int64_t batch_size, int64_t seq_len, int64_t n_batches,
              RowRange rows = {});

  int64_t size() const { return n_batches_; }
  // The window start offsets of the rows of evaluation batch `index` (count of them).
  std::span<const int64_t> offsets(int64_t index) const;
  // Fills tokens and targets (both s32[count,T]) with the rows of evaluation batch `index`.
  void fill(int64_t index, Tensor& tokens, Tensor& targets) const;

 private:
  TokenSpan data_;
  int64_t batch_size_;
  int64_t seq_len_;
  int64_t n_batches_;
  RowRange rows_;  // resolved: count >= 1
  std::vector<int64_t> offsets_;
};

class BatchSampler {
 public:
  // `data` must outlive the sampler. `batch_size` is the global batch; the sampler
  // fills only its `rows`. Throws pgq::Error when batch_size or seq_len is below 1,
  // `rows` is not a non-empty range of the batch, or `data` is shorter than seq_len + 1
  // tokens.
  BatchSampler(TokenSpan data, int64_t batch_size, int64_t seq_len, uint64_t seed,
               Split split = Split::kTrain, RowRange rows = {});
  // A byte-level corpus: its bytes are the tokens.
  BatchSampler(std::span<const uint8_t> bytes, int64_t batch_size, int64_t seq_len,
               uint64_t seed, Split split = Split::kTrain, RowRange rows = {})
      : BatchSampler(TokenSpan(bytes), batch_size, seq_len, seed, split, rows) {}

  // s32[count,T], the type of the tokens and targets tensors (count = B for the whole
  // batch).
  TensorType batchType() const;

  // The window start offsets of this sampler's rows of training batch `step`, each
  // uniform in [0, size - T - 1]; row b's offset is the same whatever the range.
  std::vector<int64_t> offsets(int64_t step) const;
  // Fills tokens and targets (both s32[count,T], allocated by the caller) with this
  // sampler's rows of batch `step`.
  void sample(int64_t step, Tensor& tokens, Tensor& targets) const;

  // The fixed evaluation batches over this sampler's data (independent of the seed),
  // filling the same rows as the sampler.
  EvalBatches evalBatches(int64_t n_batches) const;

 private:
  TokenSpan data_;
  int64_t batch_size_;
  int64_t seq_len_;
  uint64_t seed_;
  Split split_;
  RowRange rows_;  // resolved: count >= 1
};

}  // namespace pgq
