#include "runtime/data_loader.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "support/errors.h"
#include "support/hash.h"

namespace pgq {
namespace {

std::vector<uint8_t> randomBytes(size_t size, uint32_t seed = 7) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(size);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  return bytes;
}

std::vector<int32_t> values(const Tensor& t) {
  const int32_t* p = t.data<int32_t>();
  return std::vector<int32_t>(p, p + t.numElements());
}

TEST(BatchSampler, SameSeedAndStepGiveTheSameBatch) {
  std::vector<uint8_t> data = randomBytes(10000);
  BatchSampler a(data, 4, 16, 42);
  BatchSampler b(data, 4, 16, 42);
  Tensor tok_a(a.batchType()), tgt_a(a.batchType()), tok_b(b.batchType()), tgt_b(b.batchType());
  for (int64_t step : {0, 1, 17, 1000000}) {
    a.sample(step, tok_a, tgt_a);
    b.sample(step, tok_b, tgt_b);
    EXPECT_EQ(values(tok_a), values(tok_b)) << "step " << step;
    EXPECT_EQ(values(tgt_a), values(tgt_b)) << "step " << step;
  }
  EXPECT_NE(a.offsets(3), a.offsets(4));
  EXPECT_NE(a.offsets(3), BatchSampler(data, 4, 16, 43).offsets(3));
  EXPECT_NE(a.offsets(3), BatchSampler(data, 4, 16, 42, Split::kVal).offsets(3));
  // The four windows of one batch are distinct draws.
  std::vector<int64_t> o = a.offsets(5);
  EXPECT_FALSE(o[0] == o[1] && o[1] == o[2] && o[2] == o[3]);
}

TEST(BatchSampler, ResumingGivesTheBatchesOfAnUninterruptedRun) {
  std::vector<uint8_t> data = randomBytes(5000);
  BatchSampler run(data, 3, 8, 9);
  std::vector<std::vector<int64_t>> uninterrupted;
  for (int64_t step = 0; step < 20; ++step) uninterrupted.push_back(run.offsets(step));
  BatchSampler resumed(data, 3, 8, 9);
  for (int64_t step = 12; step < 20; ++step)
    EXPECT_EQ(resumed.offsets(step), uninterrupted[static_cast<size_t>(step)]);
}

TEST(BatchSampler, TargetsAreTokensShiftedByOne) {
  std::vector<uint8_t> data = randomBytes(3000);
  const int64_t kBatch = 5, kSeq = 32;
  BatchSampler sampler(data, kBatch, kSeq, 1);
  Tensor tokens(sampler.batchType()), targets(sampler.batchType());
  EXPECT_EQ(tokens.type().toString(), "s32[5,32]");
  sampler.sample(3, tokens, targets);
  std::vector<int64_t> offsets = sampler.offsets(3);
  const int32_t* tok = tokens.data<int32_t>();
  const int32_t* tgt = targets.data<int32_t>();
  for (int64_t b = 0; b < kBatch; ++b)
    for (int64_t t = 0; t < kSeq; ++t) {
      size_t o = static_cast<size_t>(offsets[static_cast<size_t>(b)] + t);
      ASSERT_EQ(tok[b * kSeq + t], data[o]);
      ASSERT_EQ(tgt[b * kSeq + t], data[o + 1]);
      if (t + 1 < kSeq) {
        ASSERT_EQ(tgt[b * kSeq + t], tok[b * kSeq + t + 1]);
      }
    }
}

TEST(BatchSampler, OffsetsStayInRangeAndCoverIt) {
  // 20 valid window starts: 0..19 (the window needs T+1 = 9 bytes of 28).
  std::vector<uint8_t> data = randomBytes(28);
  BatchSampler sampler(data, 8, 8, 5);
  std::map<int64_t, int> counts;
  for (int64_t step = 0; step < 2500; ++step)
    for (int64_t o : sampler.offsets(step)) ++counts[o];
  ASSERT_EQ(counts.size(), 20u);
  EXPECT_EQ(counts.begin()->first, 0);
  EXPECT_EQ(counts.rbegin()->first, 19);
  // 20000 draws over 20 values: 1000 each, standard deviation ~31; 5 sigma.
  for (const auto& [offset, count] : counts) {
    EXPECT_GT(count, 845) << "offset " << offset;
    EXPECT_LT(count, 1155) << "offset " << offset;
  }
  // The shortest usable data has exactly one window.
  BatchSampler tight(randomBytes(9), 2, 8, 5);
  EXPECT_EQ(tight.offsets(7), (std::vector<int64_t>{0, 0}));
}

TEST(EvalBatches, FixedWindowsSpanTheSplitIndependentlyOfTheSeed) {
  std::vector<uint8_t> data = randomBytes(1001);
  EvalBatches eval = BatchSampler(data, 4, 10, 1, Split::kVal).evalBatches(5);
  EvalBatches again = BatchSampler(data, 4, 10, 999, Split::kVal).evalBatches(5);
  ASSERT_EQ(eval.size(), 5);
  std::vector<int64_t> all;
  for (int64_t i = 0; i < eval.size(); ++i) {
    auto o = eval.offsets(i);
    auto p = again.offsets(i);
    ASSERT_EQ(o.size(), 4u);
    EXPECT_TRUE(std::equal(o.begin(), o.end(), p.begin()));
    all.insert(all.end(), o.begin(), o.end());
  }
  EXPECT_EQ(all.front(), 0);
  EXPECT_EQ(all.back(), 1001 - 10 - 1);
  // 20 windows of 10 tokens in 1000 usable bytes do not overlap.
  for (size_t j = 1; j < all.size(); ++j) EXPECT_GE(all[j] - all[j - 1], 10);

  Tensor tokens(TensorType{DType::kS32, Shape{4, 10}}), targets(tokens.type());
  eval.fill(2, tokens, targets);
  auto o = eval.offsets(2);
  for (int64_t b = 0; b < 4; ++b)
    for (int64_t t = 0; t < 10; ++t) {
      size_t at = static_cast<size_t>(o[static_cast<size_t>(b)] + t);
      ASSERT_EQ(tokens.data<int32_t>()[b * 10 + t], data[at]);
      ASSERT_EQ(targets.data<int32_t>()[b * 10 + t], data[at + 1]);
    }
}

// The byte-level batches are those of the loader before it read token files: the same
// windows of the same bytes (a hash of the filled tensors, recorded with that loader).
TEST(BatchSampler, ByteBatchesAreTheRecordedOnes) {
  std::vector<uint8_t> data = randomBytes(10000);
  uint64_t hash = 0xcbf29ce484222325ull;
  auto add = [&](const Tensor& t) { hash = fnv1a64(static_cast<const uint8_t*>(t.raw()), t.bytes(), hash); };
  BatchSampler sampler(data, 4, 16, 42);
  Tensor tokens(sampler.batchType()), targets(sampler.batchType());
  for (int64_t step : {0, 1, 17, 1000000}) {
    sampler.sample(step, tokens, targets);
    add(tokens);
    add(targets);
  }
  BatchSampler val(data, 4, 10, 1, Split::kVal);
  Tensor val_tokens(val.batchType()), val_targets(val.batchType());
  EvalBatches eval = val.evalBatches(5);
  for (int64_t i = 0; i < eval.size(); ++i) {
    eval.fill(i, val_tokens, val_targets);
    add(val_tokens);
    add(val_targets);
  }
  EXPECT_EQ(hash, 0x6c6f5551ed401031ull);
}

// Token ids stored 16 or 32 bits wide give the batches of the same ids as bytes: the
// windows depend on the sequence's length only.
TEST(BatchSampler, WideTokensGiveTheSameBatchesAsBytes) {
  std::vector<uint8_t> bytes = randomBytes(3000);
  std::vector<uint16_t> narrow(bytes.begin(), bytes.end());
  std::vector<uint32_t> wide(bytes.begin(), bytes.end());
  BatchSampler a(bytes, 3, 20, 11);
  BatchSampler b(TokenSpan(narrow), 3, 20, 11);
  BatchSampler c(TokenSpan(wide), 3, 20, 11);
  Tensor tok_a(a.batchType()), tgt_a(a.batchType()), tok_b(a.batchType()), tgt_b(a.batchType());
  for (int64_t step : {0, 5, 99}) {
    a.sample(step, tok_a, tgt_a);
    b.sample(step, tok_b, tgt_b);
    EXPECT_EQ(values(tok_a), values(tok_b));
    EXPECT_EQ(values(tgt_a), values(tgt_b));
    c.sample(step, tok_b, tgt_b);
    EXPECT_EQ(values(tok_a), values(tok_b));
  }
  // Ids above 255 reach the tensors whole.
  std::vector<uint16_t> large(100);
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<uint16_t>(60000 + i);
  BatchSampler d(TokenSpan(large), 1, 99, 0);
  Tensor tok_d(d.batchType()), tgt_d(d.batchType());
  d.sample(0, tok_d, tgt_d);
  EXPECT_EQ(values(tok_d).front(), 60000);
  EXPECT_EQ(values(tgt_d).back(), 60099);
}

TEST(BatchSampler, RejectsBadSizesAndTensors) {
  std::vector<uint8_t> data = randomBytes(16);
  EXPECT_THROW(BatchSampler(data, 1, 16, 0), Error);  // needs 17 bytes
  EXPECT_THROW(BatchSampler(data, 0, 4, 0), Error);
  EXPECT_THROW(BatchSampler(data, 2, 0, 0), Error);
  BatchSampler sampler(data, 2, 4, 0);
  EXPECT_THROW(sampler.evalBatches(0), Error);
  Tensor wrong(TensorType{DType::kS32, Shape{2, 5}});
  Tensor right(sampler.batchType());
  EXPECT_THROW(sampler.sample(0, wrong, right), InternalError);
  Tensor f32(TensorType{DType::kF32, Shape{2, 4}});
  EXPECT_THROW(sampler.sample(0, right, f32), InternalError);
}

// Rows [first, first+count) of the batch, as a flat list of values (s32[B,T] is row-major).
std::vector<int32_t> rowsOf(const std::vector<int32_t>& whole, int64_t first, int64_t count, int64_t seq_len) {
  return std::vector<int32_t>(whole.begin() + first * seq_len, whole.begin() + (first + count) * seq_len);
}

// Data parallelism: two replicas that each fill their half of the batch see together
// exactly the batch one process fills, step after step.
TEST(BatchSampler, RowRangesConcatenatedAreTheWholeBatch) {
  std::vector<uint8_t> data = randomBytes(10000);
  const int64_t batch = 6, seq_len = 16;
  BatchSampler whole(data, batch, seq_len, 42);
  BatchSampler low(data, batch, seq_len, 42, Split::kTrain, RowRange{0, 4});
  BatchSampler high(data, batch, seq_len, 42, Split::kTrain, RowRange{4});  // count -1: rows 4, 5
  EXPECT_EQ(low.batchType(), (TensorType{DType::kS32, Shape{4, seq_len}}));
  EXPECT_EQ(high.batchType(), (TensorType{DType::kS32, Shape{2, seq_len}}));
  Tensor tok(whole.batchType()), tgt(whole.batchType());
  Tensor tok_low(low.batchType()), tgt_low(low.batchType());
  Tensor tok_high(high.batchType()), tgt_high(high.batchType());
  for (int64_t step : {0, 1, 17, 1000000}) {
    whole.sample(step, tok, tgt);
    low.sample(step, tok_low, tgt_low);
    high.sample(step, tok_high, tgt_high);
    std::vector<int32_t> joined = values(tok_low);
    std::vector<int32_t> rest = values(tok_high);
    joined.insert(joined.end(), rest.begin(), rest.end());
    EXPECT_EQ(joined, values(tok)) << "step " << step;
    EXPECT_EQ(values(tgt_low), rowsOf(values(tgt), 0, 4, seq_len)) << "step " << step;
    EXPECT_EQ(values(tgt_high), rowsOf(values(tgt), 4, 2, seq_len)) << "step " << step;
    std::vector<int64_t> offsets = whole.offsets(step);
    EXPECT_EQ(high.offsets(step), std::vector<int64_t>(offsets.begin() + 4, offsets.end()));
  }
}

TEST(EvalBatches, RowRangesConcatenatedAreTheWholeBatch) {
  std::vector<uint8_t> data = randomBytes(3000);
  const int64_t batch = 4, seq_len = 10;
  EvalBatches whole = BatchSampler(data, batch, seq_len, 1, Split::kVal).evalBatches(3);
  EvalBatches first = BatchSampler(data, batch, seq_len, 1, Split::kVal, RowRange{0, 1}).evalBatches(3);
  EvalBatches rest = BatchSampler(data, batch, seq_len, 1, Split::kVal, RowRange{1, 3}).evalBatches(3);
  Tensor tok(TensorType{DType::kS32, Shape{batch, seq_len}}), tgt(tok.type());
  Tensor tok_first(TensorType{DType::kS32, Shape{1, seq_len}}), tgt_first(tok_first.type());
  Tensor tok_rest(TensorType{DType::kS32, Shape{3, seq_len}}), tgt_rest(tok_rest.type());
  for (int64_t i = 0; i < whole.size(); ++i) {
    whole.fill(i, tok, tgt);
    first.fill(i, tok_first, tgt_first);
    rest.fill(i, tok_rest, tgt_rest);
    std::vector<int32_t> joined = values(tok_first);
    std::vector<int32_t> tail = values(tok_rest);
    joined.insert(joined.end(), tail.begin(), tail.end());
    EXPECT_EQ(joined, values(tok)) << "batch " << i;
    EXPECT_EQ(values(tgt_rest), rowsOf(values(tgt), 1, 3, seq_len)) << "batch " << i;
    EXPECT_EQ(first.offsets(i)[0], whole.offsets(i)[0]) << "batch " << i;
  }
}

TEST(BatchSampler, RejectsRowRangesOutsideTheBatch) {
  std::vector<uint8_t> data = randomBytes(100);
  EXPECT_THROW(BatchSampler(data, 4, 8, 0, Split::kTrain, RowRange{-1, 2}), Error);
  EXPECT_THROW(BatchSampler(data, 4, 8, 0, Split::kTrain, RowRange{0, 0}), Error);
  EXPECT_THROW(BatchSampler(data, 4, 8, 0, Split::kTrain, RowRange{3, 2}), Error);
  EXPECT_THROW(BatchSampler(data, 4, 8, 0, Split::kTrain, RowRange{4}), Error);
  EXPECT_THROW(EvalBatches(TokenSpan(std::span<const uint8_t>(data)), 4, 8, 1, RowRange{2, 3}), Error);
}

}  // namespace
}  // namespace pgq
