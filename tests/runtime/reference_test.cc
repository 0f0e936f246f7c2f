#include "runtime/reference.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <limits>
#include <numbers>
#include <string>

#include "ir/builder.h"
#include "ir/parser.h"
#include "support/errors.h"

namespace pgq {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TensorType typeOf(DType dtype, std::initializer_list<int64_t> dims) { return {dtype, Shape(dims)}; }
TensorType f32(std::initializer_list<int64_t> dims) { return typeOf(DType::kF32, dims); }
TensorType s32(std::initializer_list<int64_t> dims) { return typeOf(DType::kS32, dims); }

// Element by element within `tol` (absolute); an expected NaN must be NaN and an
// expected infinity the same infinity.
void expectValues(const RefTensor& actual, const std::vector<double>& expected,
                  double tol = 1e-12) {
  ASSERT_EQ(actual.data.size(), expected.size()) << actual.type.toString();
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::isnan(expected[i]))
      EXPECT_TRUE(std::isnan(actual.data[i])) << "at " << i;
    else if (std::isinf(expected[i]))
      EXPECT_EQ(actual.data[i], expected[i]) << "at " << i;
    else
      EXPECT_NEAR(actual.data[i], expected[i], tol) << "at " << i;
  }
}

// A graph with inputs set by name and one result to read after run().
class RefTest : public ::testing::Test {
 protected:
  Node* input(std::string_view name, TensorType type, std::vector<double> data) {
    Node* node = b_.input(name, type);
    values_.emplace_back(node, RefTensor{std::move(type), std::move(data)});
    return node;
  }
  const RefTensor& eval(Node* result) {
    ev_ = std::make_unique<ReferenceEvaluator>(g_);
    for (auto& [node, value] : values_) ev_->setInput(node, value);
    ev_->run();
    return ev_->value(result);
  }

  Graph g_;
  Builder b_{g_};
  std::vector<std::pair<Node*, RefTensor>> values_;
  std::unique_ptr<ReferenceEvaluator> ev_;
};

TEST_F(RefTest, BinaryElementwise) {
  Node* a = input("a", f32({2, 3}), {1, -2, 3, 4, 0.5, -6});
  Node* c = input("c", f32({2, 3}), {2, 5, -3, 4, 0.25, -1});
  Node* add = b_.add(a, c);
  Node* sub = b_.sub(a, c);
  Node* mul = b_.mul(a, c);
  Node* div = b_.div(a, c);
  Node* max = b_.max(a, c);
  Node* ge = b_.ge(a, c);
  expectValues(eval(add), {3, 3, 0, 8, 0.75, -7});
  expectValues(ev_->value(sub), {-1, -7, 6, 0, 0.25, -5});
  expectValues(ev_->value(mul), {2, -10, -9, 16, 0.125, 6});
  expectValues(ev_->value(div), {0.5, -0.4, -1, 1, 2, 6});
  expectValues(ev_->value(max), {2, 5, 3, 4, 0.5, -1});
  expectValues(ev_->value(ge), {0, 0, 1, 1, 1, 0});
}

TEST_F(RefTest, MaxAndReluPropagateNaN) {
  Node* a = input("a", f32({2}), {kNaN, 1});
  Node* c = input("c", f32({2}), {0, kNaN});
  Node* max = b_.max(a, c);
  Node* relu = b_.unary(Op::kRelu, a);
  Node* ge = b_.ge(a, c);
  expectValues(eval(max), {kNaN, kNaN});
  expectValues(ev_->value(relu), {kNaN, 1});
  expectValues(ev_->value(ge), {0, 0});
}

TEST_F(RefTest, UnaryElementwise) {
  const double ln2 = std::numbers::ln2;
  Node* x = input("x", f32({2, 2}), {0, ln2, -2 * ln2, 1});
  Node* pos = input("pos", f32({2, 2}), {1, std::numbers::e, 0.5, 8});
  Node* sq = input("sq", f32({2, 2}), {4, 0.25, 1, 16});
  Node* t = input("t", f32({2, 2}), {0, std::log(3.0) / 2, ln2, -ln2});
  Node* r = input("r", f32({2, 2}), {-1, 0, 2.5, -0.0});
  Node* neg = b_.unary(Op::kNeg, x);
  Node* exp = b_.unary(Op::kExp, x);
  Node* log = b_.unary(Op::kLog, pos);
  Node* rsqrt = b_.unary(Op::kRsqrt, sq);
  Node* tanh = b_.unary(Op::kTanh, t);
  Node* relu = b_.unary(Op::kRelu, r);
  eval(neg);
  expectValues(ev_->value(neg), {0, -ln2, 2 * ln2, -1});
  expectValues(ev_->value(exp), {1, 2, 0.25, std::numbers::e}, 1e-15);
  expectValues(ev_->value(log), {0, 1, -ln2, 3 * ln2}, 1e-15);
  expectValues(ev_->value(rsqrt), {0.5, 2, 1, 0.25});
  // tanh(ln(a)/2) = (a - 1) / (a + 1).
  expectValues(ev_->value(tanh), {0, 0.5, 0.6, -0.6}, 1e-15);
  expectValues(ev_->value(relu), {0, 0, 2.5, 0});
}

TEST_F(RefTest, SqrtSigmoidErfSiluGeluErf) {
  const double ln3 = std::log(3.0);
  Node* sq = input("sq", f32({4}), {4, 0.25, 0, 2});
  Node* x = input("x", f32({4}), {0, ln3, -ln3, 1});
  Node* sqrt = b_.unary(Op::kSqrt, sq);
  Node* sigmoid = b_.unary(Op::kSigmoid, x);
  Node* silu = b_.unary(Op::kSilu, x);
  Node* erf = b_.unary(Op::kErf, x);
  Node* gelu_erf = b_.unary(Op::kGeluErf, x);
  eval(sqrt);
  expectValues(ev_->value(sqrt), {2, 0.5, 0, std::numbers::sqrt2});
  // sigmoid(ln 3) = 3/4.
  expectValues(ev_->value(sigmoid), {0.5, 0.75, 0.25, 1 / (1 + std::exp(-1.0))}, 1e-15);
  expectValues(ev_->value(silu), {0, 0.75 * ln3, -0.25 * ln3, 1 / (1 + std::exp(-1.0))}, 1e-15);
  // erf(1) and Phi(1) from tables; gelu_erf(x) = x Phi(x).
  expectValues(ev_->value(erf), {0, std::erf(ln3), -std::erf(ln3), 0.8427007929497149}, 1e-15);
  EXPECT_NEAR(ev_->value(gelu_erf).data[3], 0.8413447460685429, 1e-15);
  EXPECT_NEAR(ev_->value(gelu_erf).data[2], -ln3 * 0.5 * (1 - std::erf(ln3 / std::numbers::sqrt2)), 1e-15);
}

TEST_F(RefTest, SliceAndPad) {
  Node* x = input("x", f32({2, 3}), {1, 2, 3, 4, 5, 6});
  Node* slice = b_.slice(x, {0, 1}, {2, 3});
  Node* pad = b_.pad(x, {1, 0}, {0, 2});
  expectValues(eval(slice), {2, 3, 5, 6});
  expectValues(ev_->value(pad), {0, 0, 0, 0, 0, 1, 2, 3, 0, 0, 4, 5, 6, 0, 0});
}

TEST_F(RefTest, ConcatAlongEachAxis) {
  Node* a = input("a", f32({2, 2}), {1, 2, 3, 4});
  Node* c = input("c", f32({2, 1}), {5, 6});
  Node* r = input("r", f32({1, 2}), {7, 8});
  Node* cols = b_.concat(a, c, 1);
  Node* rows = b_.concat(a, r, 0);
  expectValues(eval(cols), {1, 2, 5, 3, 4, 6});
  expectValues(ev_->value(rows), {1, 2, 3, 4, 7, 8});
}

TEST_F(RefTest, SelectPicksWhereConditionIsNonzero) {
  Node* cond = input("cond", f32({5}), {1, 0, -0.0, kNaN, -2});
  Node* a = input("a", f32({5}), {1, 2, 3, 4, 5});
  Node* c = input("c", f32({5}), {-1, -2, -3, -4, -5});
  expectValues(eval(b_.select(cond, a, c)), {1, -2, -3, 4, 5});
}

TEST_F(RefTest, GeluAndReluGrad) {
  Node* x = input("x", f32({2, 3}), {0, 1, -1, 2, -3, 0.5});
  Node* dy = input("dy", f32({2, 3}), {5, 6, 7, 8, 9, 10});
  Node* gelu = b_.unary(Op::kGelu, x);
  Node* relu_grad = b_.binary(Op::kReluGrad, x, dy);
  Node* gelu_grad = b_.binary(Op::kGeluGrad, x, dy);
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), worked out separately.
  const double c = std::sqrt(2 / std::numbers::pi);
  expectValues(eval(gelu),
               {0, 0.8411919906082768, -0.15880800939172324, 1.954597694087775,
                -0.0036373920817729943, 0.25 * (1 + std::tanh(c * (0.5 + 0.044715 / 8)))},
               1e-15);
  // relu_grad passes dy only where x > 0 (not at x = 0).
  expectValues(ev_->value(relu_grad), {0, 6, 0, 8, 0, 10});
  // gelu'(0) = 1/2.
  EXPECT_DOUBLE_EQ(ev_->value(gelu_grad).data[0], 2.5);
}

TEST_F(RefTest, ConstantIsASplat) {
  Node* c = b_.constant(-1.5, f32({2, 2}));
  Node* h =
      b_.constant(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -12), typeOf(DType::kBF16, {2}));
  expectValues(eval(c), {-1.5, -1.5, -1.5, -1.5});
  // A bf16 constant holds its value at bf16 precision.
  expectValues(ev_->value(h), {1.0 + std::ldexp(1.0, -7), 1.0 + std::ldexp(1.0, -7)}, 0);
}

TEST_F(RefTest, ConvertToBf16RoundsToNearestEven) {
  auto p = [](double m, int e) { return std::ldexp(m, e); };
  const double f32_max = std::numeric_limits<float>::max();
  const double bf16_max = p(0x1.fep0, 127);
  Node* x = input("x", f32({15}),
                  {1 + p(1, -8), 1 + p(3, -8), -(1 + p(1, -8)), 1 + p(1, -8) + p(1, -20), 257, 259,
                   p(3, -134), p(1, -134), p(1, -140), bf16_max, f32_max, kNaN, -kInf, -0.0, 0.1});
  Node* y = b_.convert(x, DType::kBF16);
  Node* back = b_.convert(y, DType::kF32);
  expectValues(eval(y),
               {1, 1 + p(1, -6), -1, 1 + p(1, -7), 256, 260, p(1, -132), 0, 0, bf16_max, kInf, kNaN,
                -kInf, 0, p(0x1.9ap0, -4)},
               0);
  expectValues(ev_->value(back), ev_->value(y).data, 0);
  EXPECT_TRUE(std::signbit(ev_->value(y).data[13]));
}

TEST_F(RefTest, ConvertToIntegersRoundsHalfEvenAndSaturates) {
  Node* x = input("x", f32({9}), {2.5, 3.5, -2.5, -0.5, 200, -200, kNaN, kInf, 126.6});
  Node* u = input("u", f32({6}), {-3, 300, 0.5, 1.5, 254.5, kNaN});
  Node* w = input("w", f32({4}), {3e9, -3e9, 2.5, -1.5});
  Node* ints = input("ints", s32({3}), {-7, 0, 257});
  Node* s8 = b_.convert(x, DType::kS8);
  Node* u8 = b_.convert(u, DType::kU8);
  Node* s32n = b_.convert(w, DType::kS32);
  Node* from_int = b_.convert(ints, DType::kF32);
  Node* int_to_bf16 = b_.convert(ints, DType::kBF16);
  Node* narrowed = b_.convert(ints, DType::kS8);
  expectValues(eval(s8), {2, 4, -2, 0, 127, -128, 0, 127, 127}, 0);
  expectValues(ev_->value(u8), {0, 255, 0, 2, 254, 0}, 0);
  expectValues(ev_->value(s32n), {2147483647, -2147483648.0, 2, -2}, 0);
  expectValues(ev_->value(from_int), {-7, 0, 257}, 0);
  expectValues(ev_->value(int_to_bf16), {-7, 0, 256}, 0);
  expectValues(ev_->value(narrowed), {-7, 0, 127}, 0);
}

TEST_F(RefTest, TransposeAndReshape) {
  Node* x = input("x", f32({2, 3}), {1, 2, 3, 4, 5, 6});
  Node* t = b_.transpose(x, {1, 0});
  Node* r = b_.reshape(x, Shape({3, 1, 2}));
  expectValues(eval(t), {1, 4, 2, 5, 3, 6});
  EXPECT_EQ(ev_->value(r).type, f32({3, 1, 2}));
  expectValues(ev_->value(r), {1, 2, 3, 4, 5, 6});
}

TEST_F(RefTest, TransposeRank3MatchesLoop) {
  RefTensor x = randomRefTensor(f32({2, 3, 4}), 1);
  Node* in = input("x", x.type, x.data);
  Node* t = b_.transpose(in, {2, 0, 1});  // result [4,2,3], result dim i = operand dim perm[i]
  const RefTensor& out = eval(t);
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 3; ++c)
        EXPECT_EQ(out.data[static_cast<size_t>((a * 2 + b) * 3 + c)],
                  x.data[static_cast<size_t>((b * 3 + c) * 4 + a)]);
}

TEST_F(RefTest, BroadcastNonTrailingDims) {
  Node* v = input("v", f32({2}), {1, 2});
  Node* m = input("m", f32({2, 2}), {1, 2, 3, 4});
  Node* s = input("s", f32({}), {7});
  Node* rows = b_.broadcast(v, Shape({2, 3}), {0});       // v[i] along row i
  Node* mid = b_.broadcast(m, Shape({2, 3, 2}), {0, 2});  // m repeated along the middle dim
  Node* splat = b_.broadcast(s, Shape({2, 2}), {});
  expectValues(eval(rows), {1, 1, 1, 2, 2, 2});
  expectValues(ev_->value(mid), {1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4});
  expectValues(ev_->value(splat), {7, 7, 7, 7});
}

TEST_F(RefTest, ReductionsOverSeveralAxes) {
  // x[i][j][k] = 12 i + 4 j + k.
  std::vector<double> data(24);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<double>(i);
  Node* x = input("x", f32({2, 3, 4}), data);
  Node* sum02 = b_.reduce(Op::kReduceSum, x, {0, 2});
  Node* mean02 = b_.reduce(Op::kReduceMean, x, {0, 2});
  Node* max02 = b_.reduce(Op::kReduceMax, x, {0, 2});
  Node* sum1 = b_.reduce(Op::kReduceSum, x, {1});
  Node* all = b_.reduce(Op::kReduceMean, x, {0, 1, 2});
  // sum over i, k of 12 i + 4 j + k = 32 j + 60.
  expectValues(eval(sum02), {60, 92, 124});
  expectValues(ev_->value(mean02), {7.5, 11.5, 15.5});
  expectValues(ev_->value(max02), {15, 19, 23});
  // sum over j = 36 i + 12 + 3 k.
  expectValues(ev_->value(sum1), {12, 15, 18, 21, 48, 51, 54, 57});
  EXPECT_EQ(ev_->value(all).type, f32({}));
  expectValues(ev_->value(all), {11.5});
}

TEST_F(RefTest, Softmax) {
  const double ln2 = std::numbers::ln2;
  Node* x = input("x", f32({2, 3}), {0, ln2, std::log(5.0), 1000, 1000 + std::log(3.0), -kInf});
  Node* y = b_.softmax(x);
  // The second row only works with the max subtracted (exp(1000) overflows); its
  // inputs carry the rounding of 1000 + ln 3 (ulp 1.1e-13), hence the bound.
  expectValues(eval(y), {0.125, 0.25, 0.625, 0.25, 0.75, 0}, 1e-12);
}

TEST_F(RefTest, SoftmaxGradByHand) {
  Node* y = input("y", f32({1, 2}), {0.25, 0.75});
  Node* dy = input("dy", f32({1, 2}), {1, 3});
  // sum(dy * y) = 2.5, so y * (dy - 2.5) = [-0.375, 0.375].
  expectValues(eval(b_.binary(Op::kSoftmaxGrad, y, dy)), {-0.375, 0.375});
}

TEST_F(RefTest, CausalMask) {
  std::vector<double> ones(8, 1.0);
  Node* wide = input("wide", f32({2, 4}), ones);  // tq = 2 < tk = 4: offset 2
  Node* square = input("square", f32({3, 3}), std::vector<double>(9, 1.0));
  Node* tall = input("tall", f32({2, 3, 2}), std::vector<double>(12, 1.0));  // tq > tk
  Node* mw = b_.causalMask(wide, -9);
  Node* ms = b_.causalMask(square, -9);
  Node* mt = b_.causalMask(tall, -9);
  expectValues(eval(mw), {1, 1, 1, -9, 1, 1, 1, 1});
  expectValues(ev_->value(ms), {1, -9, -9, 1, 1, -9, 1, 1, 1});
  // tq = 3, tk = 2: offset -1, so query 0 sees no key; each batch entry alike.
  expectValues(ev_->value(mt), {-9, -9, 1, -9, 1, 1, -9, -9, 1, -9, 1, 1});
}

TEST_F(RefTest, Norms) {
  Node* x = input("x", f32({2, 4}), {2, -2, 4, 4, 1, 2, 3, 6});
  Node* rms = b_.norm(Op::kRmsNorm, x, 6);
  Node* ln = b_.norm(Op::kLayerNorm, x, 0.5);
  // Row 0: mean(x^2) = 10, + 6 = 16, so x / 4. Row 1: mean(x^2) = 12.5, + 6 = 18.5.
  const double s = 1 / std::sqrt(18.5);
  expectValues(eval(rms), {0.5, -0.5, 1, 1, s, 2 * s, 3 * s, 6 * s});
  // Row 1: mean 3, biased var (4 + 1 + 0 + 9) / 4 = 3.5, + 0.5 = 4, so (x - 3) / 2.
  // Row 0: mean 2, var (0 + 16 + 4 + 4) / 4 = 6, + 0.5 = 6.5.
  const double t = 1 / std::sqrt(6.5);
  expectValues(ev_->value(ln), {0, -4 * t, 2 * t, 2 * t, -1, -0.5, 0, 1.5});
}

TEST_F(RefTest, GatherAndScatterAdd) {
  Node* table = input("table", f32({4, 2}), {1, 2, 3, 4, 5, 6, 7, 8});
  Node* idx = input("idx", s32({2, 2}), {2, 0, 1, 2});
  Node* dy = input("dy", f32({2, 2, 2}), {1, 10, 2, 20, 3, 30, 4, 40});
  Node* rows = b_.gather(table, idx);
  Node* grad = b_.scatterAdd(dy, idx, Shape({4, 2}));
  EXPECT_EQ(rows->type(), f32({2, 2, 2}));
  expectValues(eval(rows), {5, 6, 1, 2, 3, 4, 5, 6});
  // Row 2 is used twice (positions 0 and 3) and accumulates; row 3 is untouched.
  expectValues(ev_->value(grad), {2, 20, 3, 30, 5, 50, 0, 0});
}

TEST_F(RefTest, CrossEntropyByHand) {
  Node* logits = input("logits", f32({2, 2}), {0, std::log(3.0), 5, 5});
  Node* targets = input("targets", s32({2}), {1, 0});
  Node* dloss = input("dloss", f32({}), {2});
  Node* loss = b_.crossEntropy(logits, targets);
  Node* grad = b_.crossEntropyGrad(logits, targets, dloss);
  // -log(3/4) and -log(1/2), averaged.
  expectValues(eval(loss), {(std::log(4.0 / 3.0) + std::log(2.0)) / 2}, 1e-15);
  // (softmax - onehot) * 2 / 2.
  expectValues(ev_->value(grad), {0.25, -0.25, -0.5, 0.5}, 1e-15);
}

TEST_F(RefTest, MatMulPlainByHand) {
  Node* a = input("a", f32({2, 3}), {1, 2, 3, 4, 5, 6});
  Node* c = input("c", f32({3, 2}), {7, 8, 9, 10, 11, 12});
  // [2,3] x [3,2] -> [2,2]
  expectValues(eval(b_.matmul(a, c, DotDims::matrix())), {58, 64, 139, 154});
}

// Explicit loops for the matmul layouts below, written independently of the
// evaluator's packing.
TEST_F(RefTest, MatMulWithBatchDimsMatchesLoop) {
  // lhs [K=4, B=3, M=2] with its batch dim in the middle; rhs [B=3, N=5, K=4].
  RefTensor l = randomRefTensor(f32({4, 3, 2}), 1), r = randomRefTensor(f32({3, 5, 4}), 2);
  Node* lhs = input("l", l.type, l.data);
  Node* rhs = input("r", r.type, r.data);
  Node* out = b_.matmul(lhs, rhs, {{0}, {2}, {1}, {0}});
  EXPECT_EQ(out->type(), f32({3, 2, 5}));
  const RefTensor& y = eval(out);
  for (int b = 0; b < 3; ++b)
    for (int m = 0; m < 2; ++m)
      for (int n = 0; n < 5; ++n) {
        double s = 0;
        for (int k = 0; k < 4; ++k)
          s += l.data[static_cast<size_t>((k * 3 + b) * 2 + m)] *
               r.data[static_cast<size_t>((b * 5 + n) * 4 + k)];
        EXPECT_NEAR(y.data[static_cast<size_t>((b * 2 + m) * 5 + n)], s, 1e-13);
      }
}

TEST_F(RefTest, MatMulTransposedAndPairedContractingDims) {
  // Transposed operands: lhs [K=3, M=2] and rhs [N=4, K=3] -> [M,N].
  RefTensor l = randomRefTensor(f32({3, 2}), 3), r = randomRefTensor(f32({4, 3}), 4);
  // Two contracting dims paired in order: lhs [2,3,4] dims (1,2) with rhs [4,3,5] dims
  // (1,0), i.e. sizes 3<->3 and 4<->4.
  RefTensor p = randomRefTensor(f32({2, 3, 4}), 5), q = randomRefTensor(f32({4, 3, 5}), 6);
  Node* t = b_.matmul(input("l", l.type, l.data), input("r", r.type, r.data), {{0}, {1}, {}, {}});
  Node* two =
      b_.matmul(input("p", p.type, p.data), input("q", q.type, q.data), {{1, 2}, {1, 0}, {}, {}});
  const RefTensor& yt = eval(t);
  for (int m = 0; m < 2; ++m)
    for (int n = 0; n < 4; ++n) {
      double s = 0;
      for (int k = 0; k < 3; ++k)
        s += l.data[static_cast<size_t>(k * 2 + m)] * r.data[static_cast<size_t>(n * 3 + k)];
      EXPECT_NEAR(yt.data[static_cast<size_t>(m * 4 + n)], s, 1e-13);
    }
  const RefTensor& y2 = ev_->value(two);
  ASSERT_EQ(y2.type, f32({2, 5}));
  for (int i = 0; i < 2; ++i)
    for (int n = 0; n < 5; ++n) {
      double s = 0;
      for (int j = 0; j < 3; ++j)
        for (int k = 0; k < 4; ++k)
          s += p.data[static_cast<size_t>((i * 3 + j) * 4 + k)] *
               q.data[static_cast<size_t>((k * 3 + j) * 5 + n)];
      EXPECT_NEAR(y2.data[static_cast<size_t>(i * 5 + n)], s, 1e-13);
    }
}

// The analytic gradient `grad` of L(x) = sum(dy * y(x)) against central finite
// differences of the forward op, in double. The caller has set every other input.
void expectGradientMatchesFiniteDifferences(ReferenceEvaluator& ev, Node* x, Node* dy, Node* y,
                                            Node* grad, uint64_t seed) {
  RefTensor xv = randomRefTensor(x->type(), seed);
  const RefTensor dyv = randomRefTensor(dy->type(), seed + 1);
  ev.setInput(x, xv);
  ev.setInput(dy, dyv);
  ev.run();
  const std::vector<double> analytic = ev.value(grad).data;
  auto loss = [&] {
    ev.setInput(x, xv);
    ev.run();
    double l = 0;
    for (size_t i = 0; i < dyv.data.size(); ++i) l += dyv.data[i] * ev.value(y).data[i];
    return l;
  };
  double scale = 0;
  for (double g : analytic) scale = std::max(scale, std::abs(g));
  ASSERT_GT(scale, 0);
  const double h = 1e-5;
  for (size_t i = 0; i < xv.data.size(); ++i) {
    const double x0 = xv.data[i];
    xv.data[i] = x0 + h;
    const double up = loss();
    xv.data[i] = x0 - h;
    const double down = loss();
    xv.data[i] = x0;
    EXPECT_NEAR(analytic[i], (up - down) / (2 * h), 1e-7 * scale)
        << opName(grad->op()) << " at " << i;
  }
}

struct GradCase {
  Op forward;
  Op grad;
  double eps;
};

void PrintTo(const GradCase& c, std::ostream* os) { *os << opName(c.grad) << " eps=" << c.eps; }

class UnaryGradientTest : public ::testing::TestWithParam<GradCase> {};

TEST_P(UnaryGradientTest, MatchesFiniteDifferences) {
  const GradCase c = GetParam();
  Graph g;
  Builder b(g);
  Node* x = b.input("x", f32({3, 5}));
  Node* dy = b.input("dy", f32({3, 5}));
  Node* y = nullptr;
  Node* grad = nullptr;
  if (c.forward == Op::kGelu || c.forward == Op::kSilu || c.forward == Op::kGeluErf) {
    y = b.unary(c.forward, x);
    grad = b.binary(c.grad, x, dy);
  } else if (c.forward == Op::kSoftmax) {
    y = b.softmax(x);
    grad = b.binary(Op::kSoftmaxGrad, y, dy);  // takes the forward result, not x
  } else {
    y = b.norm(c.forward, x, c.eps);
    grad = b.normGrad(c.grad, x, dy, c.eps);
  }
  g.addOutput(grad);
  ReferenceEvaluator ev(g);
  expectGradientMatchesFiniteDifferences(ev, x, dy, y, grad, 11);
}

INSTANTIATE_TEST_SUITE_P(Ops, UnaryGradientTest,
                         ::testing::Values(GradCase{Op::kGelu, Op::kGeluGrad, 0},
                                           GradCase{Op::kSilu, Op::kSiluGrad, 0},
                                           GradCase{Op::kGeluErf, Op::kGeluErfGrad, 0},
                                           GradCase{Op::kSoftmax, Op::kSoftmaxGrad, 0},
                                           GradCase{Op::kRmsNorm, Op::kRmsNormGrad, 1e-5},
                                           GradCase{Op::kRmsNorm, Op::kRmsNormGrad, 0.5},
                                           GradCase{Op::kLayerNorm, Op::kLayerNormGrad, 1e-5},
                                           GradCase{Op::kLayerNorm, Op::kLayerNormGrad, 0.5}),
                         [](const ::testing::TestParamInfo<GradCase>& info) {
                           return fmt::format("{}_{}", opName(info.param.grad), info.index);
                         });

TEST(ReferenceGradient, CrossEntropyMatchesFiniteDifferences) {
  Graph g;
  Builder b(g);
  Node* logits = b.input("logits", f32({4, 6}));
  Node* targets = b.input("targets", s32({4}));
  Node* dloss = b.input("dloss", f32({}));
  Node* loss = b.crossEntropy(logits, targets);
  Node* grad = b.crossEntropyGrad(logits, targets, dloss);
  ReferenceEvaluator ev(g);
  ev.setInput(targets, RefTensor{s32({4}), {5, 0, 3, 3}});
  expectGradientMatchesFiniteDifferences(ev, logits, dloss, loss, grad, 21);
}

TEST(ReferenceErrors, InputsMustBeGivenWithTheirType) {
  Graph g;
  Builder b(g);
  Node* x = b.input("x", f32({2}));
  Node* idx = b.input("idx", s32({2}));
  Node* w = b.parameter("w", f32({2}));
  Node* y = b.add(x, w);
  g.addOutput(y);
  ReferenceEvaluator ev(g);
  EXPECT_THROW(ev.value(y), Error);  // before run()
  ev.setInput("x", RefTensor{f32({2}), {1, 2}});
  ev.setInput(idx, RefTensor{s32({2}), {0, 1}});
  EXPECT_THAT([&] { ev.run(); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("%w")));
  EXPECT_THROW(ev.setInput(w, RefTensor{f32({3}), {1, 2, 3}}), Error);                // shape
  EXPECT_THROW(ev.setInput(w, RefTensor{typeOf(DType::kBF16, {2}), {1, 2}}), Error);  // dtype
  EXPECT_THROW(ev.setInput(w, RefTensor{f32({2}), {1}}), Error);                      // data size
  EXPECT_THROW(ev.setInput(idx, RefTensor{s32({2}), {0.5, 1}}), Error);  // not an integer
  EXPECT_THROW(ev.setInput(idx, RefTensor{s32({2}), {0, 3e9}}), Error);  // out of s32
  EXPECT_THROW(ev.setInput(y, RefTensor{f32({2}), {1, 2}}), Error);      // not an input
  EXPECT_THROW(ev.setInput("nope", RefTensor{f32({2}), {1, 2}}), Error);
  ev.setInput(w, RefTensor{f32({2}), {10, 20}});
  ev.run();
  expectValues(ev.output(0), {11, 22});
  EXPECT_THROW(ev.output(1), Error);
}

TEST(ReferenceErrors, IndexAndTargetOutOfRange) {
  Graph g;
  Builder b(g);
  Node* table = b.parameter("table", f32({3, 2}));
  Node* idx = b.input("idx", s32({2}));
  b.gather(table, idx, "rows");
  ReferenceEvaluator ev(g);
  ev.setInput(table, randomRefTensor(table->type(), 1));
  ev.setInput(idx, RefTensor{s32({2}), {1, 3}});
  EXPECT_THAT([&] { ev.run(); },
              ::testing::ThrowsMessage<Error>(::testing::AllOf(::testing::HasSubstr("%rows"),
                                                               ::testing::HasSubstr("index 3"))));

  Graph g2;
  Builder b2(g2);
  Node* l2 = b2.input("logits", f32({2, 3}));
  Node* t2 = b2.input("targets", s32({2}));
  b2.crossEntropy(l2, t2, "loss");
  ReferenceEvaluator ev2(g2);
  ev2.setInput(l2, randomRefTensor(l2->type(), 4));
  ev2.setInput(t2, RefTensor{s32({2}), {-1, 0}});
  EXPECT_THAT([&] { ev2.run(); },
              ::testing::ThrowsMessage<Error>(::testing::AllOf(::testing::HasSubstr("%loss"),
                                                               ::testing::HasSubstr("target -1"))));
}

TEST(ReferenceErrors, ScatterAddAndCrossEntropyGradCheckIndices) {
  Graph g;
  Builder b(g);
  Node* idx = b.input("idx", s32({1}));
  Node* dy = b.input("dy", f32({1, 2}));
  b.scatterAdd(dy, idx, Shape({3, 2}), "dtable");
  ReferenceEvaluator ev(g);
  ev.setInput(dy, RefTensor{f32({1, 2}), {1, 2}});
  ev.setInput(idx, RefTensor{s32({1}), {3}});
  EXPECT_THAT([&] { ev.run(); }, ::testing::ThrowsMessage<Error>(::testing::HasSubstr("%dtable")));

  Graph g2;
  Builder b2(g2);
  Node* logits = b2.input("logits", f32({1, 2}));
  Node* targets = b2.input("targets", s32({1}));
  b2.crossEntropyGrad(logits, targets, b2.scalar(1.0), "dlogits");
  ReferenceEvaluator ev2(g2);
  ev2.setInput(logits, RefTensor{f32({1, 2}), {0, 0}});
  ev2.setInput(targets, RefTensor{s32({1}), {2}});
  EXPECT_THAT([&] { ev2.run(); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("%dlogits")));
}

TEST(ReferenceRandom, DeterministicAndInRange) {
  const TensorType type = f32({64, 64});
  RefTensor a = randomRefTensor(type, 7, 2.0), b = randomRefTensor(type, 7, 2.0);
  EXPECT_EQ(a.data, b.data);
  EXPECT_NE(a.data, randomRefTensor(type, 8, 2.0).data);
  double mean = 0, square = 0;
  for (double v : a.data) {
    mean += v / 4096;
    square += v * v / 4096;
  }
  // Standard errors for 4096 normal(0, 2) samples: 0.03 for the mean, ~0.09 for the
  // mean square; the bounds are five of them.
  EXPECT_NEAR(mean, 0, 0.16);
  EXPECT_NEAR(square, 4, 0.45);

  RefTensor h = randomRefTensor(typeOf(DType::kBF16, {100}), 1);
  for (double v : h.data)  // bf16 values: an f32 whose lower 16 bits are zero
    EXPECT_EQ(std::bit_cast<uint32_t>(static_cast<float>(v)) & 0xFFFFu, 0u) << v;

  RefTensor s8 = randomRefTensor(typeOf(DType::kS8, {1000}), 3);
  for (double v : s8.data) EXPECT_TRUE(v >= -128 && v <= 127 && v == std::floor(v));

  RefTensor idx = randomIndices(s32({1000}), 7, 5);
  bool saw_zero = false, saw_six = false;
  for (double v : idx.data) {
    EXPECT_TRUE(v >= 0 && v < 7 && v == std::floor(v));
    saw_zero |= v == 0;
    saw_six |= v == 6;
  }
  EXPECT_TRUE(saw_zero && saw_six);
  EXPECT_THROW(randomIndices(f32({2}), 3, 1), Error);
  EXPECT_THROW(randomIndices(typeOf(DType::kS8, {2}), 1000, 1), Error);
}

TEST(ReferenceTensor, RoundTripsThroughRuntimeTensors) {
  RefTensor f{f32({3}), {1.5, -0.1, 3e38}};
  Tensor t = toTensor(f);
  EXPECT_EQ(t.data<float>()[1], -0.1f);
  expectValues(toRefTensor(t), {1.5, static_cast<double>(-0.1f), static_cast<double>(3e38f)}, 0);

  RefTensor h{typeOf(DType::kBF16, {3}), {1 + std::ldexp(1.0, -8), -2, kNaN}};
  Tensor th = toTensor(h);
  EXPECT_EQ(th.data<uint16_t>()[0], 0x3F80);  // the tie rounds to 1.0
  EXPECT_EQ(th.data<uint16_t>()[1], 0xC000);
  expectValues(toRefTensor(th), {1, -2, kNaN}, 0);

  RefTensor i{typeOf(DType::kS8, {2}), {-128, 127}};
  expectValues(toRefTensor(toTensor(i)), {-128, 127}, 0);
  EXPECT_THROW(toTensor(RefTensor{typeOf(DType::kU8, {1}), {256}}), Error);
}

// Every op of the golden file on random inputs: every value is finite except the NaN
// constant (and the one output that is that constant).
TEST(ReferenceGolden, AllOpsRunWithFiniteValues) {
  auto graph = parseGraphFile(
      (std::filesystem::path(PGQ_SOURCE_DIR) / "tests/ir/golden/all_ops.pgq").string());
  ReferenceEvaluator ev(*graph);
  uint64_t seed = 100;
  for (const Node* node : graph->nodes()) {
    if (node->op() != Op::kParameter && node->op() != Op::kInput) continue;
    if (node->dtype() == DType::kS32)
      ev.setInput(node, randomIndices(node->type(), 10, ++seed));  // vocab 10 everywhere
    else
      ev.setInput(node, randomRefTensor(node->type(), ++seed));
  }
  ev.run();
  for (const Node* node : graph->nodes()) {
    const RefTensor& v = ev.value(node);
    EXPECT_EQ(v.type, node->type());
    ASSERT_EQ(v.data.size(), static_cast<size_t>(node->shape().numElements()));
    const bool is_nan = node->name() == "nan";
    for (double x : v.data) EXPECT_EQ(std::isfinite(x), !is_nan) << "%" << node->name();
  }
  EXPECT_TRUE(std::isnan(ev.output(6).data[0]));
  EXPECT_GT(ev.output(0).data[0], 0);  // the loss
}

// The quantizing ops have no rule here (tests/kernels/ checks their kernels): evaluating
// one is an InternalError that names it, never a silent zero.
TEST(ReferenceGolden, AnOpWithoutARuleIsAnInternalErrorNamingIt) {
  auto graph = parseGraph(R"(graph @q {
  %x = input() : f32[8,4]
  %s = quant_params(%x) {format="int8:channel:rtn", side="lhs", contract_dims=[1]} : f32[8]
  return %s
}
)");
  ReferenceEvaluator ev(*graph);
  ev.setInput("x", randomRefTensor(graph->find("x")->type(), 1));
  try {
    ev.run();
    ADD_FAILURE() << "quant_params evaluated";
  } catch (const InternalError& e) {
    EXPECT_EQ(std::string(e.what()), "reference evaluator has no rule for op 'quant_params' (%s)");
  }
}

}  // namespace
}  // namespace pgq
