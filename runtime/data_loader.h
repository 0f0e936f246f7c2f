#pragma once
// Batches of a byte-level language model: B windows of T+1 consecutive bytes of the
// corpus become tokens s32[B,T] (bytes o..o+T-1) and targets s32[B,T] (bytes o+1..o+T,
// the next byte of each token).
//
// Training batches are random but stateless: the window offsets of batch `step` are a
// pure function of (seed, step, split), drawn from the counter-based Philox generator
// (kernels/philox.h). A run resumed at step k therefore sees exactly the batches an
// uninterrupted run would have seen, and no loader state needs to be checkpointed.
// Evaluation batches are fixed windows that do not depend on the seed, so validation
// losses are comparable across runs and recipes that share B, T and the corpus.
#include <cstdint>
#include <span>
#include <vector>

#include "ir/node.h"
#include "runtime/tensor.h"

namespace pgq {

// Which part of the corpus a sampler reads; part of the random key, so the two splits
// never draw correlated offsets.
enum class Split : uint32_t { kTrain = 0, kVal = 1 };

// A fixed list of evaluation batches over one span of bytes: n_batches * B windows
// spaced evenly from the first byte to the last, in order. The windows do not overlap
// when n_batches * B * T <= size - 1; otherwise neighbours share bytes.
class EvalBatches {
 public:
  // `data` must outlive this object.
  EvalBatches(std::span<const uint8_t> data, int64_t batch_size, int64_t seq_len,
              int64_t n_batches);

  int64_t size() const { return n_batches_; }
  // The window start offsets of evaluation batch `index` (B of them).
  std::span<const int64_t> offsets(int64_t index) const;
  // Fills tokens and targets (both s32[B,T]) with evaluation batch `index`.
  void fill(int64_t index, Tensor& tokens, Tensor& targets) const;

 private:
  std::span<const uint8_t> data_;
  int64_t batch_size_;
  int64_t seq_len_;
  int64_t n_batches_;
  std::vector<int64_t> offsets_;
};

class BatchSampler {
 public:
  // `data` must outlive the sampler. Throws pgq::Error when batch_size or seq_len is
  // below 1 or `data` is shorter than seq_len + 1 bytes.
  BatchSampler(std::span<const uint8_t> data, int64_t batch_size, int64_t seq_len,
               uint64_t seed, Split split = Split::kTrain);

  // s32[B,T], the type of the tokens and targets tensors.
  TensorType batchType() const;

  // The B window start offsets of training batch `step`, each uniform in
  // [0, size - T - 1].
  std::vector<int64_t> offsets(int64_t step) const;
  // Fills tokens and targets (both s32[B,T], allocated by the caller) with batch `step`.
  void sample(int64_t step, Tensor& tokens, Tensor& targets) const;

  // The fixed evaluation batches over this sampler's data (independent of the seed).
  EvalBatches evalBatches(int64_t n_batches) const;

 private:
  std::span<const uint8_t> data_;
  int64_t batch_size_;
  int64_t seq_len_;
  uint64_t seed_;
  Split split_;
};

}  // namespace pgq
