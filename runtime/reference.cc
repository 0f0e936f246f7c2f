#include "runtime/reference.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>
#include <utility>

#include <fmt/format.h>

#include "ir/dot_dims.h"
#include "ir/quant.h"
#include "kernels/quant_stats.h"  // kSqnrCap, a definition shared by every SQNR (no kernel code)
#include "support/errors.h"

namespace pgq {
namespace {

using Values = std::vector<double>;

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string where(const Node& node) {
  return fmt::format("reference: {} %{}", opName(node.op()), node.name());
}

size_t count(const Shape& shape) { return static_cast<size_t>(shape.numElements()); }

// The smallest and largest value of an integer dtype.
std::pair<double, double> integerRange(DType dtype) {
  switch (dtype) {
    case DType::kS8: return {-128.0, 127.0};
    case DType::kU8: return {0.0, 255.0};
    case DType::kS32: return {-2147483648.0, 2147483647.0};
    default: throw InternalError(fmt::format("{} is not an integer dtype", dtypeName(dtype)));
  }
}

// Round to nearest even with 8 significant bits (bf16 keeps 7 stored mantissa bits plus
// the implicit one). bf16 has f32's exponent range: below the smallest normal, 2^-126,
// the spacing stays that of the subnormals, 2^-133; a result at or above 2^128 is out
// of range and becomes infinity. NaN, infinities and zeros are unchanged.
double roundToBf16(double x) {
  if (!std::isfinite(x) || x == 0.0) return x;
  int exponent = 0;
  std::frexp(x, &exponent);  // |x| is in [2^(exponent-1), 2^exponent)
  const int quantum = std::max(exponent - 8, -133);
  // Scaling by a power of two is exact, and nearbyint rounds half to even in the
  // default rounding mode.
  const double rounded = std::ldexp(std::nearbyint(std::ldexp(x, -quantum)), quantum);
  return std::abs(rounded) >= 0x1p128 ? std::copysign(kInf, x) : rounded;
}

// Float to integer dtype: round half to even, saturate to the dtype's range, NaN -> 0.
double roundToInteger(double x, DType dtype) {
  if (std::isnan(x)) return 0.0;
  const auto [lo, hi] = integerRange(dtype);
  return std::clamp(std::nearbyint(x), lo, hi);
}

// max that propagates NaN (as torch.maximum does); std::max would depend on the order.
double maxNan(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a >= b ? a : b;
}

const double kGeluC = std::sqrt(2.0 / std::numbers::pi);
constexpr double kGeluK = 0.044715;

double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(kGeluC * (x + kGeluK * x * x * x))); }

// d/dx of gelu: with u = c (x + k x^3) and t = tanh(u),
// gelu = x (1 + t) / 2, so gelu' = (1 + t) / 2 + x (1 - t^2) c (1 + 3 k x^2) / 2.
double geluDerivative(double x) {
  const double t = std::tanh(kGeluC * (x + kGeluK * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluC * (1.0 + 3.0 * kGeluK * x * x);
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// The standard normal CDF and density; gelu_erf(x) = x Phi(x). erfc keeps Phi's
// relative accuracy for negative x, where 1 + erf(x / sqrt 2) would cancel.
double normalCdf(double x) { return 0.5 * std::erfc(-x / std::numbers::sqrt2); }
double normalPdf(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * std::numbers::pi); }

// Row-major strides of a shape, in elements.
std::vector<int64_t> stridesOf(const Shape& shape) {
  std::vector<int64_t> strides(static_cast<size_t>(shape.rank()), 1);
  for (int i = shape.rank() - 2; i >= 0; --i)
    strides[static_cast<size_t>(i)] = strides[static_cast<size_t>(i) + 1] * shape.dim(i + 1);
  return strides;
}

// The offsets sum_j idx[j] * strides[j] of every multi-index idx over `sizes`, in
// row-major order (the first size varies slowest). Every layout op is a gather through
// such a table.
std::vector<int64_t> offsetsOf(const std::vector<int64_t>& sizes,
                               const std::vector<int64_t>& strides) {
  std::vector<int64_t> offsets{0};
  for (size_t j = 0; j < sizes.size(); ++j) {
    std::vector<int64_t> next;
    next.reserve(offsets.size() * static_cast<size_t>(sizes[j]));
    for (int64_t base : offsets)
      for (int64_t i = 0; i < sizes[j]; ++i) next.push_back(base + i * strides[j]);
    offsets = std::move(next);
  }
  return offsets;
}

// The offsets in `shape` of every index over its dims `dims`, taken in that order.
std::vector<int64_t> offsetsOfDims(const Shape& shape, const std::vector<int64_t>& dims) {
  const std::vector<int64_t> strides = stridesOf(shape);
  std::vector<int64_t> sizes, picked;
  for (int64_t d : dims) {
    sizes.push_back(shape.dim(static_cast<int>(d)));
    picked.push_back(strides[static_cast<size_t>(d)]);
  }
  return offsetsOf(sizes, picked);
}

// Calls fn(offset, width) for every row of the last dim.
template <typename F>
void forEachRow(const Shape& shape, F fn) {
  const int64_t width = shape.dim(shape.rank() - 1);
  for (int64_t offset = 0; offset < shape.numElements(); offset += width) fn(offset, width);
}

double sumOf(const double* x, int64_t n) {
  double s = 0.0;
  for (int64_t j = 0; j < n; ++j) s += x[j];
  return s;
}

double dotOf(const double* a, const double* b, int64_t n) {
  double s = 0.0;
  for (int64_t j = 0; j < n; ++j) s += a[j] * b[j];
  return s;
}

// y = softmax(x) over one row, with the row max subtracted before exp.
void softmaxRow(const double* x, double* y, int64_t n) {
  double m = -kInf;
  for (int64_t j = 0; j < n; ++j) m = maxNan(m, x[j]);
  for (int64_t j = 0; j < n; ++j) y[j] = std::exp(x[j] - m);
  const double s = sumOf(y, n);
  for (int64_t j = 0; j < n; ++j) y[j] /= s;
}

// log(sum(exp(x))) over one row, computed around the row max.
double logSumExp(const double* x, int64_t n) {
  double m = -kInf;
  for (int64_t j = 0; j < n; ++j) m = maxNan(m, x[j]);
  double s = 0.0;
  for (int64_t j = 0; j < n; ++j) s += std::exp(x[j] - m);
  return m + std::log(s);
}

Values reduce(Op op, const Values& x, const Shape& in, const std::vector<int64_t>& axes) {
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < in.rank(); ++d)
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) kept.push_back(d);
  const std::vector<int64_t> kept_offsets = offsetsOfDims(in, kept);
  const std::vector<int64_t> reduced_offsets = offsetsOfDims(in, axes);
  Values out(kept_offsets.size());
  for (size_t o = 0; o < out.size(); ++o) {
    double acc = op == Op::kReduceMax ? -kInf : 0.0;
    for (int64_t r : reduced_offsets) {
      const double v = x[static_cast<size_t>(kept_offsets[o] + r)];
      acc = op == Op::kReduceMax ? maxNan(acc, v) : acc + v;
    }
    out[o] = op == Op::kReduceMean ? acc / static_cast<double>(reduced_offsets.size()) : acc;
  }
  return out;
}

// dot_general: both operands are first packed as [B,M,K] and [B,K,N] (batch dims, free
// dims and contracting dims each in the order the attributes list them, so
// lhs_contract[i] pairs with rhs_contract[i]); the result [B,M,N] is then batch dims,
// lhs free dims, rhs free dims in row-major order.
Values matmul(const Values& lhs, const Shape& lhs_shape, const Values& rhs,
              const Shape& rhs_shape, const DotDims& dims) {
  const auto lb = offsetsOfDims(lhs_shape, dims.lhs_batch);
  const auto lm = offsetsOfDims(lhs_shape, dims.lhsFree(lhs_shape.rank()));
  const auto lk = offsetsOfDims(lhs_shape, dims.lhs_contract);
  const auto rb = offsetsOfDims(rhs_shape, dims.rhs_batch);
  const auto rk = offsetsOfDims(rhs_shape, dims.rhs_contract);
  const auto rn = offsetsOfDims(rhs_shape, dims.rhsFree(rhs_shape.rank()));
  const size_t nb = lb.size(), m = lm.size(), k = lk.size(), n = rn.size();
  Values a(nb * m * k), b(nb * k * n), out(nb * m * n, 0.0);
  for (size_t ib = 0; ib < nb; ++ib)
    for (size_t ik = 0; ik < k; ++ik) {
      for (size_t im = 0; im < m; ++im)
        a[(ib * m + im) * k + ik] = lhs[static_cast<size_t>(lb[ib] + lm[im] + lk[ik])];
      for (size_t in = 0; in < n; ++in)
        b[(ib * k + ik) * n + in] = rhs[static_cast<size_t>(rb[ib] + rk[ik] + rn[in])];
    }
  // [M,K] x [K,N] -> [M,N] per batch, k outside n so the inner loop is contiguous.
  for (size_t ib = 0; ib < nb; ++ib)
    for (size_t im = 0; im < m; ++im) {
      double* row = &out[(ib * m + im) * n];
      for (size_t ik = 0; ik < k; ++ik) {
        const double aik = a[(ib * m + im) * k + ik];
        const double* brow = &b[(ib * k + ik) * n];
        for (size_t in = 0; in < n; ++in) row[in] += aik * brow[in];
      }
    }
  return out;
}

// An index read from an s32 tensor, checked against [0, bound).
size_t checkedIndex(const Node& node, const char* what, double index, size_t position,
                    int64_t bound) {
  if (!(index >= 0.0 && index < static_cast<double>(bound)))
    throw Error(fmt::format("{}: {} {} at position {} is outside [0, {})", where(node), what,
                            index, position, bound));
  return static_cast<size_t>(index);
}


// What one op's rule reads and writes: the node, its operands' values (in operand
// order) and its result, zero-filled with the node's element count.
struct OpValues {
  const Node& node;
  std::vector<const Values*> operands;
  Values& y;

  const Values& in(int i) const { return *operands[static_cast<size_t>(i)]; }
  const Shape& shape() const { return node.shape(); }
  const Shape& operandShape(int i) const { return node.operand(i)->shape(); }
  double attrFloat(AttrKey key) const { return node.attrs().getFloat(key); }
  const std::vector<int64_t>& attrInts(AttrKey key) const { return node.attrs().getInts(key); }
  template <typename F>
  void unary(F f) const {
    const Values& x = in(0);
    for (size_t i = 0; i < y.size(); ++i) y[i] = f(x[i]);
  }
  template <typename F>
  void binary(F f) const {
    const Values& a = in(0);
    const Values& b = in(1);
    for (size_t i = 0; i < y.size(); ++i) y[i] = f(a[i], b[i]);
  }
};

// A family's rules reached with an op of another family: evaluate()'s dispatch is wrong.
[[noreturn]] void notInFamily(const Node& node, const char* family) {
  throw InternalError(fmt::format("{}: dispatched to the {} rules", where(node), family));
}

// constant: every element is `value`; a bf16 constant holds it rounded to bf16, as that
// is the only value a bf16 tensor can store.
void evaluateConstant(const OpValues& v) {
  const double value = v.attrFloat(AttrKey::kValue);
  std::fill(v.y.begin(), v.y.end(), v.node.dtype() == DType::kBF16 ? roundToBf16(value) : value);
}

// Elementwise, exact in double; max propagates NaN.
void evaluateElementwise(const OpValues& v) {
  switch (v.node.op()) {
    case Op::kAdd: return v.binary([](double a, double b) { return a + b; });
    case Op::kSub: return v.binary([](double a, double b) { return a - b; });
    case Op::kMul: return v.binary([](double a, double b) { return a * b; });
    case Op::kDiv: return v.binary([](double a, double b) { return a / b; });
    case Op::kMax: return v.binary(maxNan);
    // ge: 1 where a >= b, else 0 (so 0 when either is NaN).
    case Op::kGe: return v.binary([](double a, double b) { return a >= b ? 1.0 : 0.0; });
    case Op::kNeg: return v.unary([](double x) { return -x; });
    case Op::kExp: return v.unary([](double x) { return std::exp(x); });
    case Op::kLog: return v.unary([](double x) { return std::log(x); });
    // rsqrt: 1 / sqrt(x).
    case Op::kRsqrt: return v.unary([](double x) { return 1.0 / std::sqrt(x); });
    case Op::kTanh: return v.unary([](double x) { return std::tanh(x); });
    // relu: max(x, 0), NaN stays NaN.
    case Op::kRelu: return v.unary([](double x) { return maxNan(x, 0.0); });
    // gelu: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), torch approximate='tanh'.
    case Op::kGelu: return v.unary(gelu);
    case Op::kSqrt: return v.unary([](double x) { return std::sqrt(x); });
    // sigmoid: 1 / (1 + exp(-x)).
    case Op::kSigmoid: return v.unary(sigmoid);
    case Op::kErf: return v.unary([](double x) { return std::erf(x); });
    // silu: x sigmoid(x).
    case Op::kSilu: return v.unary([](double x) { return x * sigmoid(x); });
    case Op::kSwiglu: return v.binary([](double gate, double up) { return gate * sigmoid(gate) * up; });
    // gelu_erf: x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), torch's exact gelu.
    case Op::kGeluErf: return v.unary([](double x) { return x * normalCdf(x); });
    // select(cond, a, b): a where cond != 0 (NaN counts as nonzero), else b.
    case Op::kSelect: {
      const Values& c = v.in(0);
      const Values& a = v.in(1);
      const Values& b = v.in(2);
      for (size_t i = 0; i < v.y.size(); ++i) v.y[i] = c[i] != 0.0 ? a[i] : b[i];
      return;
    }
    default: notInFamily(v.node, "elementwise");
  }
}

// The fused gradients of the activations, (x, dy) -> dx.
void evaluateActivationGrad(const OpValues& v) {
  switch (v.node.op()) {
    // relu_grad(x, dy): dy where x > 0, else 0.
    case Op::kReluGrad: return v.binary([](double x, double dy) { return x > 0.0 ? dy : 0.0; });
    // gelu_grad(x, dy): dy * gelu'(x), the derivative written out at geluDerivative.
    case Op::kGeluGrad: return v.binary([](double x, double dy) { return dy * geluDerivative(x); });
    // silu_grad(x, dy): dy s (1 + x (1 - s)) with s = sigmoid(x).
    case Op::kSiluGrad:
      return v.binary([](double x, double dy) {
        const double s = sigmoid(x);
        return dy * s * (1.0 + x * (1.0 - s));
      });
    // swiglu_grad(gate, up, dy){wrt}: dy * up * silu'(gate) (lhs) or dy * silu(gate) (rhs).
    case Op::kSwigluGrad: {
      const bool gate = v.node.attrs().getOperand(AttrKey::kWrt) == GemmOperand::kLhs;
      const Values &g = v.in(0), &u = v.in(1), &dy = v.in(2);
      for (size_t i = 0; i < v.y.size(); ++i) {
        const double s = sigmoid(g[i]);
        v.y[i] = gate ? dy[i] * u[i] * s * (1.0 + g[i] * (1.0 - s)) : dy[i] * g[i] * s;
      }
      return;
    }
    // gelu_erf_grad(x, dy): dy (Phi(x) + x phi(x)).
    case Op::kGeluErfGrad:
      return v.binary([](double x, double dy) { return dy * (normalCdf(x) + x * normalPdf(x)); });
    default: notInFamily(v.node, "activation gradient");
  }
}

// convert: to f32 exact (the reference does not round to f32); to bf16 round to nearest
// even at bf16 precision; to s8/u8/s32 round half to even and saturate, NaN -> 0.
void evaluateConvert(const OpValues& v) {
  const DType to = v.node.dtype();
  if (to == DType::kF32) {
    v.unary([](double x) { return x; });
  } else if (to == DType::kBF16) {
    v.unary(roundToBf16);
  } else {
    v.unary([&](double x) { return roundToInteger(x, to); });
  }
}

// Layout: every op is a gather through a table of offsets (offsetsOf).
void evaluateLayout(const OpValues& v) {
  const Shape& shape = v.shape();
  const Values& x = v.in(0);
  Values& y = v.y;
  switch (v.node.op()) {
    // transpose(perm): result dim i is operand dim perm[i].
    case Op::kTranspose: {
      const auto offsets = offsetsOfDims(v.operandShape(0), v.attrInts(AttrKey::kPerm));
      for (size_t i = 0; i < y.size(); ++i) y[i] = x[static_cast<size_t>(offsets[i])];
      return;
    }
    // reshape: the same row-major data.
    case Op::kReshape: y = x; return;
    // broadcast(dims): operand dim i is result dim dims[i]; the other result dims repeat
    // the operand (stride 0).
    case Op::kBroadcast: {
      const auto& dims = v.attrInts(AttrKey::kDims);
      const auto operand_strides = stridesOf(v.operandShape(0));
      std::vector<int64_t> strides(static_cast<size_t>(shape.rank()), 0);
      for (size_t i = 0; i < dims.size(); ++i)
        strides[static_cast<size_t>(dims[i])] = operand_strides[i];
      const auto offsets =
          offsetsOf(std::vector<int64_t>(shape.dims().begin(), shape.dims().end()), strides);
      for (size_t i = 0; i < y.size(); ++i) y[i] = x[static_cast<size_t>(offsets[i])];
      return;
    }
    // slice(starts, limits): result element idx is operand element starts + idx.
    case Op::kSlice: {
      const auto strides = stridesOf(v.operandShape(0));
      const auto& starts = v.attrInts(AttrKey::kStarts);
      int64_t base = 0;
      for (size_t d = 0; d < starts.size(); ++d) base += starts[d] * strides[d];
      const auto offsets =
          offsetsOf(std::vector<int64_t>(shape.dims().begin(), shape.dims().end()), strides);
      for (size_t i = 0; i < y.size(); ++i) y[i] = x[static_cast<size_t>(base + offsets[i])];
      return;
    }
    // pad(low, high): zeros, with operand element idx at result element low + idx.
    case Op::kPad: {
      const Shape& from = v.operandShape(0);
      const auto strides = stridesOf(shape);
      const auto& low = v.attrInts(AttrKey::kLow);
      int64_t base = 0;
      for (size_t d = 0; d < low.size(); ++d) base += low[d] * strides[d];
      const auto offsets =
          offsetsOf(std::vector<int64_t>(from.dims().begin(), from.dims().end()), strides);
      for (size_t i = 0; i < x.size(); ++i) y[static_cast<size_t>(base + offsets[i])] = x[i];
      return;
    }
    // concat(a, b){axis}: for every index of the dims before axis, a's block, then b's.
    case Op::kConcat: {
      const int axis = static_cast<int>(v.node.attrs().getInt(AttrKey::kAxis));
      const Values& b = v.in(1);
      size_t outer = 1;
      for (int d = 0; d < axis; ++d) outer *= static_cast<size_t>(shape.dim(d));
      const size_t a_block = outer == 0 ? 0 : x.size() / outer;
      const size_t b_block = outer == 0 ? 0 : b.size() / outer;
      auto out = y.begin();
      for (size_t o = 0; o < outer; ++o) {
        out = std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(o * a_block), a_block, out);
        out = std::copy_n(b.begin() + static_cast<std::ptrdiff_t>(o * b_block), b_block, out);
      }
      return;
    }
    default: notInFamily(v.node, "layout");
  }
}

// softmax's optional scale and causal mask (ops.def): how many entries of row r (of
// [.., tq, tk] rows) the mask keeps, the scale, and the masked entries' value.
struct RowPrologue {
  double scale = 1.0;
  bool causal = false;
  double fill = 0.0;
  int64_t tq = 1;

  int64_t kept(int64_t row, int64_t tk) const {
    return causal ? std::clamp<int64_t>(row % tq + (tk - tq) + 1, 0, tk) : tk;
  }
};

RowPrologue softmaxPrologue(const OpValues& v) {
  RowPrologue p;
  const Attrs& a = v.node.attrs();
  // The scale as the kernels and the unfused graph's f32 constant hold it.
  if (a.has(AttrKey::kScale)) p.scale = static_cast<float>(a.getFloat(AttrKey::kScale));
  if (a.has(AttrKey::kCausal)) {
    p.causal = true;
    p.fill = a.getFloat(AttrKey::kCausal);
    p.tq = v.shape().dim(v.shape().rank() - 2);
  }
  return p;
}

// Attention over the last dims: softmax and its gradient, the causal mask, rotary
// position embedding.
void evaluateAttention(const OpValues& v) {
  const Shape& shape = v.shape();
  Values& y = v.y;
  switch (v.node.op()) {
    // softmax over the last dim, the row max subtracted before exp.
    // With `scale` and `causal` (fuse_softmax), of x * scale masked as causal_mask does.
    case Op::kSoftmax: {
      const RowPrologue p = softmaxPrologue(v);
      std::vector<double> row;
      return forEachRow(shape, [&](int64_t o, int64_t n) {
        row.assign(&v.in(0)[o], &v.in(0)[o] + n);
        const int64_t keep = p.kept(o / n, n);
        for (int64_t j = 0; j < n; ++j) {
          double& e = row[static_cast<size_t>(j)];
          e = j < keep ? e * p.scale : p.fill;
        }
        softmaxRow(row.data(), &y[o], n);
      });
    }
    // softmax_grad(y, dy) = y * (dy - sum_lastdim(dy * y)); with `scale` and `causal`,
    // masked entries 0 and the rest times scale.
    case Op::kSoftmaxGrad: {
      const RowPrologue p = softmaxPrologue(v);
      return forEachRow(shape, [&](int64_t o, int64_t n) {
        const double* s = &v.in(0)[o];
        const double* dy = &v.in(1)[o];
        const double d = dotOf(dy, s, n);
        const int64_t keep = p.kept(o / n, n);
        for (int64_t j = 0; j < n; ++j) y[static_cast<size_t>(o + j)] = j < keep ? s[j] * (dy[j] - d) * p.scale : 0.0;
      });
    }
    // causal_mask(x){value}: over the last two dims [tq, tk], element (i, j) becomes
    // `value` where j > i + (tk - tq) (query i sees the keys up to its own position
    // when the queries are the last tq of tk positions); the rest is unchanged.
    case Op::kCausalMask: {
      const int64_t tq = shape.dim(shape.rank() - 2), tk = shape.dim(shape.rank() - 1);
      const double fill = v.attrFloat(AttrKey::kValue);
      y = v.in(0);
      for (int64_t base = 0; base < shape.numElements(); base += tq * tk)
        for (int64_t i = 0; i < tq; ++i)
          for (int64_t j = std::max<int64_t>(0, i + (tk - tq) + 1); j < tk; ++j)
            y[static_cast<size_t>(base + i * tk + j)] = fill;
      return;
    }
    // rope(x [B,H,T,Dh]){theta, rotation}: in every row (b, h, t), dims i and i + Dh/2
    // (i < Dh/2) turn by a = t * theta^(-2i/Dh), or by -a when the rotation is inverse:
    // y_i = x_i cos a - x_{i+Dh/2} sin a, y_{i+Dh/2} = x_{i+Dh/2} cos a + x_i sin a.
    case Op::kRope: {
      const int64_t seq = shape.dim(2), dim = shape.dim(3), half = dim / 2;
      const double theta = v.attrFloat(AttrKey::kTheta);
      const double sign = v.node.attrs().getRotation(AttrKey::kRotation) == RopeRotation::kInverse ? -1.0 : 1.0;
      const Values& x = v.in(0);
      return forEachRow(shape, [&](int64_t o, int64_t) {
        const double t = static_cast<double>((o / dim) % seq);
        for (int64_t i = 0; i < half; ++i) {
          const double a = sign * t * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(dim));
          const double lo = x[static_cast<size_t>(o + i)], hi = x[static_cast<size_t>(o + half + i)];
          y[static_cast<size_t>(o + i)] = lo * std::cos(a) - hi * std::sin(a);
          y[static_cast<size_t>(o + half + i)] = hi * std::cos(a) + lo * std::sin(a);
        }
      });
    }
    default: notInFamily(v.node, "attention");
  }
}

// Normalization over the last dim (width D) and its gradients.
void evaluateNormalization(const OpValues& v) {
  const Shape& shape = v.shape();
  Values& y = v.y;
  const double eps = v.attrFloat(AttrKey::kEps);
  switch (v.node.op()) {
    // rms_norm(x){eps} = x * s over the last dim, s = 1 / sqrt(mean(x^2) + eps).
    case Op::kRmsNorm:
      return forEachRow(shape, [&](int64_t o, int64_t n) {
        const double* x = &v.in(0)[o];
        const double s = 1.0 / std::sqrt(dotOf(x, x, n) / static_cast<double>(n) + eps);
        for (int64_t j = 0; j < n; ++j) y[o + j] = x[j] * s;
      });
    // rms_norm_grad(x, dy): since ds/dx_j = -s^3 x_j / D,
    // dx_j = s dy_j - s^3 x_j sum_k(dy_k x_k) / D.
    case Op::kRmsNormGrad:
      return forEachRow(shape, [&](int64_t o, int64_t n) {
        const double* x = &v.in(0)[o];
        const double* dy = &v.in(1)[o];
        const double d = static_cast<double>(n);
        const double s = 1.0 / std::sqrt(dotOf(x, x, n) / d + eps);
        const double c = s * s * s * dotOf(dy, x, n) / d;
        for (int64_t j = 0; j < n; ++j) y[o + j] = s * dy[j] - c * x[j];
      });
    // layer_norm(x){eps} = (x - mean) * s over the last dim, s = 1 / sqrt(var + eps),
    // var the biased variance mean((x - mean)^2).
    case Op::kLayerNorm:
      return forEachRow(shape, [&](int64_t o, int64_t n) {
        const double* x = &v.in(0)[o];
        const double d = static_cast<double>(n);
        const double mu = sumOf(x, n) / d;
        double var = 0.0;
        for (int64_t j = 0; j < n; ++j) var += (x[j] - mu) * (x[j] - mu) / d;
        const double s = 1.0 / std::sqrt(var + eps);
        for (int64_t j = 0; j < n; ++j) y[o + j] = (x[j] - mu) * s;
      });
    // layer_norm_grad(x, dy): with xhat = (x - mean) * s,
    // dx_j = s (dy_j - mean(dy) - xhat_j mean(dy * xhat)).
    case Op::kLayerNormGrad:
      return forEachRow(shape, [&](int64_t o, int64_t n) {
        const double* x = &v.in(0)[o];
        const double* dy = &v.in(1)[o];
        const double d = static_cast<double>(n);
        const double mu = sumOf(x, n) / d;
        double var = 0.0;
        for (int64_t j = 0; j < n; ++j) var += (x[j] - mu) * (x[j] - mu) / d;
        const double s = 1.0 / std::sqrt(var + eps);
        double mean_dy = 0.0, mean_dy_xhat = 0.0;
        for (int64_t j = 0; j < n; ++j) {
          mean_dy += dy[j] / d;
          mean_dy_xhat += dy[j] * (x[j] - mu) * s / d;
        }
        for (int64_t j = 0; j < n; ++j)
          y[o + j] = s * (dy[j] - mean_dy - (x[j] - mu) * s * mean_dy_xhat);
      });
    default: notInFamily(v.node, "normalization");
  }
}

// Embedding lookup and the loss. An index or target outside the table is an error naming
// the node and the index.
void evaluateEmbeddingAndLoss(const OpValues& v) {
  const Node& node = v.node;
  const Shape& shape = v.shape();
  Values& y = v.y;
  switch (node.op()) {
    // gather(table [V,D], indices [...]) -> [..., D]: row indices[p] of the table at
    // position p.
    case Op::kGather: {
      const Values& table = v.in(0);
      const Values& indices = v.in(1);
      const int64_t rows = v.operandShape(0).dim(0);
      const size_t width = static_cast<size_t>(v.operandShape(0).dim(1));
      for (size_t p = 0; p < indices.size(); ++p) {
        const size_t row = checkedIndex(node, "index", indices[p], p, rows);
        std::copy_n(&table[row * width], width, &y[p * width]);
      }
      return;
    }
    // scatter_add(dy [..., D], indices) -> [V,D]: zeros, plus dy row p added to row
    // indices[p] (repeated indices accumulate).
    case Op::kScatterAdd: {
      const Values& dy = v.in(0);
      const Values& indices = v.in(1);
      const size_t width = static_cast<size_t>(shape.dim(1));
      for (size_t p = 0; p < indices.size(); ++p) {
        const size_t row = checkedIndex(node, "index", indices[p], p, shape.dim(0));
        for (size_t j = 0; j < width; ++j) y[row * width + j] += dy[p * width + j];
      }
      return;
    }
    // cross_entropy(logits [N,V], targets [N]) = mean over rows of
    // logsumexp(row) - row[target], i.e. -log_softmax(row)[target].
    case Op::kCrossEntropy: {
      const Values& logits = v.in(0);
      const Values& targets = v.in(1);
      const int64_t vocab = v.operandShape(0).dim(1);
      double total = 0.0;
      for (size_t r = 0; r < targets.size(); ++r) {
        const double* row = &logits[r * static_cast<size_t>(vocab)];
        const size_t t = checkedIndex(node, "target", targets[r], r, vocab);
        total += logSumExp(row, vocab) - row[t];
      }
      y[0] = total / static_cast<double>(targets.size());
      return;
    }
    // cross_entropy_grad(logits, targets, dloss) = (softmax(row) - onehot(target)) *
    // dloss / N.
    case Op::kCrossEntropyGrad: {
      const Values& logits = v.in(0);
      const Values& targets = v.in(1);
      const int64_t vocab = shape.dim(1);
      const double scale = v.in(2)[0] / static_cast<double>(targets.size());
      for (size_t r = 0; r < targets.size(); ++r) {
        const size_t o = r * static_cast<size_t>(vocab);
        const size_t t = checkedIndex(node, "target", targets[r], r, vocab);
        softmaxRow(&logits[o], &y[o], vocab);
        y[o + t] -= 1.0;
        for (int64_t j = 0; j < vocab; ++j) y[o + static_cast<size_t>(j)] *= scale;
      }
      return;
    }
    default: notInFamily(node, "embedding and loss");
  }
}

// smooth_scales(a, b): for each contracting channel k (the contracting dims flattened in
// the order listed), s_k = max|a_k|^alpha / max|b_k|^(1-alpha) over all other dims;
// s_k = 1 where either maximum is 0.
void evaluateSmoothScales(const OpValues& v) {
  Values& y = v.y;
  DotDims d = DotDims::fromAttrs(v.node.attrs());
  const double alpha = v.attrFloat(AttrKey::kAlpha);
  auto channelMax = [&](const Values& x, const Shape& s, const std::vector<int64_t>& contract) {
    std::vector<double> out(y.size(), 0.0);
    std::vector<int64_t> index(static_cast<size_t>(s.rank()), 0);
    for (size_t i = 0; i < x.size(); ++i) {
      int64_t k = 0;
      for (int64_t c : contract) k = k * s.dim(static_cast<int>(c)) + index[static_cast<size_t>(c)];
      out[static_cast<size_t>(k)] = std::max(out[static_cast<size_t>(k)], std::abs(x[i]));
      for (int dim = s.rank() - 1; dim >= 0; --dim) {
        if (++index[static_cast<size_t>(dim)] < s.dim(dim)) break;
        index[static_cast<size_t>(dim)] = 0;
      }
    }
    return out;
  };
  std::vector<double> ma = channelMax(v.in(0), v.operandShape(0), d.lhs_contract);
  std::vector<double> mb = channelMax(v.in(1), v.operandShape(1), d.rhs_contract);
  for (size_t k = 0; k < y.size(); ++k)
    y[k] = ma[k] > 0 && mb[k] > 0 ? std::pow(ma[k], alpha) / std::pow(mb[k], 1 - alpha) : 1.0;
}

// error_stats(ref, approx) = [sqnr, mean_square, mse]: mean_square = mean of ref^2, mse =
// mean of (approx - ref)^2, over the pairs where both are finite; sqnr = mean_square /
// mse, capped at kernels::kSqnrCap, the cap when mse is 0.
void evaluateErrorStats(const OpValues& v) {
  const Values& ref = v.in(0);
  const Values& approx = v.in(1);
  double signal = 0, noise = 0, finite = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(ref[i]) || !std::isfinite(approx[i])) continue;
    signal += ref[i] * ref[i];
    noise += (approx[i] - ref[i]) * (approx[i] - ref[i]);
    finite += 1;
  }
  const double mean_square = finite > 0 ? signal / finite : 0, mse = finite > 0 ? noise / finite : 0;
  v.y[static_cast<size_t>(ErrorStatField::kSqnr)] =
      mse > 0 ? std::min(mean_square / mse, kernels::kSqnrCap) : kernels::kSqnrCap;
  v.y[static_cast<size_t>(ErrorStatField::kMeanSquare)] = mean_square;
  v.y[static_cast<size_t>(ErrorStatField::kMse)] = mse;
}

// The reference evaluates one device: a collective over a group of one copies.
void evaluateCollective(const OpValues& v) {
  const Attrs& attrs = v.node.attrs();
  if (attrs.has(AttrKey::kDevices) && attrs.getInt(AttrKey::kDevices) != 1)
    throw Error(fmt::format("reference evaluator: %{} runs over {} devices; it evaluates one", v.node.name(),
                            attrs.getInt(AttrKey::kDevices)));
  v.unary([](double x) { return x; });
}
}  // namespace

ReferenceEvaluator::ReferenceEvaluator(const Graph& graph) : graph_(graph) {}

void ReferenceEvaluator::setInput(const Node* node, RefTensor value) {
  if (node == nullptr || graph_.find(node->name()) != node)
    throw Error("reference: setInput got a node that is not in the graph");
  if (node->op() != Op::kParameter && node->op() != Op::kInput)
    throw Error(fmt::format("{}: only parameters and inputs take values", where(*node)));
  if (!(value.type == node->type()))
    throw Error(fmt::format("{}: expects a value of type {}, got {}", where(*node),
                            node->type().toString(), value.type.toString()));
  if (value.data.size() != count(node->shape()))
    throw Error(fmt::format("{}: type {} needs {} values, got {}", where(*node),
                            node->type().toString(), count(node->shape()), value.data.size()));
  if (!isFloat(node->dtype())) {
    const auto [lo, hi] = integerRange(node->dtype());
    for (size_t i = 0; i < value.data.size(); ++i) {
      const double v = value.data[i];
      if (!(v >= lo && v <= hi && v == std::nearbyint(v)))
        throw Error(fmt::format("{}: value {} at position {} is not a {} integer", where(*node),
                                v, i, dtypeName(node->dtype())));
    }
  }
  inputs_[node] = std::move(value);
}

void ReferenceEvaluator::setInput(std::string_view name, RefTensor value) {
  const Node* node = graph_.find(name);
  if (node == nullptr) throw Error(fmt::format("reference: the graph has no node %{}", name));
  setInput(node, std::move(value));
}

void ReferenceEvaluator::run() {
  values_.clear();
  for (const Node* node : graph_.postOrder()) values_[node] = evaluate(*node);
}

const RefTensor& ReferenceEvaluator::value(const Node* node) const {
  auto it = values_.find(node);
  if (it == values_.end())
    throw Error(node ? fmt::format("{}: has no value (run() first)", where(*node))
                     : std::string("reference: value() of a null node"));
  return it->second;
}

const RefTensor& ReferenceEvaluator::output(size_t i) const {
  if (i >= graph_.outputs().size())
    throw Error(fmt::format("reference: output {} requested, the graph has {}", i,
                            graph_.outputs().size()));
  return value(graph_.outputs()[i]);
}

// Every op of ops.def is named here once, with the rules that evaluate it; each rule's
// meaning is written beside it above. There is no default: a new op left out is a
// compiler warning (-Wswitch), and an op without rules is an InternalError naming it,
// never a silent zero.
RefTensor ReferenceEvaluator::evaluate(const Node& node) const {
  RefTensor result{node.type(), Values(count(node.shape()), 0.0)};
  std::vector<const Values*> operands;
  for (const Node* operand : node.operands()) operands.push_back(&values_.at(operand).data);
  const OpValues v{node, std::move(operands), result.data};
  switch (node.op()) {
    // parameter, input: the values given to setInput.
    case Op::kParameter:
    case Op::kInput: {
      auto it = inputs_.find(&node);
      if (it == inputs_.end())
        throw Error(fmt::format("{}: has no value (call setInput)", where(node)));
      return it->second;
    }
    case Op::kConstant: evaluateConstant(v); return result;

    case Op::kAdd: case Op::kSub: case Op::kMul: case Op::kDiv: case Op::kMax: case Op::kGe:
    case Op::kNeg: case Op::kExp: case Op::kLog: case Op::kRsqrt: case Op::kTanh: case Op::kRelu:
    case Op::kGelu: case Op::kSqrt: case Op::kSigmoid: case Op::kErf: case Op::kSilu:
    case Op::kGeluErf: case Op::kSelect: case Op::kSwiglu:
      evaluateElementwise(v);
      return result;
    case Op::kReluGrad: case Op::kGeluGrad: case Op::kSiluGrad: case Op::kGeluErfGrad: case Op::kSwigluGrad:
      evaluateActivationGrad(v);
      return result;
    case Op::kConvert: evaluateConvert(v); return result;

    case Op::kTranspose: case Op::kReshape: case Op::kBroadcast: case Op::kSlice: case Op::kPad:
    case Op::kConcat:
      evaluateLayout(v);
      return result;

    // reduce_sum / reduce_max / reduce_mean over `axes`; those dims disappear. The max of
    // a slice holding NaN is NaN.
    case Op::kReduceSum: case Op::kReduceMax: case Op::kReduceMean:
      result.data = reduce(node.op(), v.in(0), v.operandShape(0), v.attrInts(AttrKey::kAxes));
      return result;

    case Op::kSoftmax: case Op::kSoftmaxGrad: case Op::kCausalMask: case Op::kRope:
      evaluateAttention(v);
      return result;
    case Op::kRmsNorm: case Op::kRmsNormGrad: case Op::kLayerNorm: case Op::kLayerNormGrad:
      evaluateNormalization(v);
      return result;
    case Op::kGather: case Op::kScatterAdd: case Op::kCrossEntropy: case Op::kCrossEntropyGrad:
      evaluateEmbeddingAndLoss(v);
      return result;

    // matmul: dot_general per ir/dot_dims.h, see matmul() above. The result is f32.
    case Op::kMatMul:
      result.data = matmul(v.in(0), v.operandShape(0), v.in(1), v.operandShape(1), DotDims::fromAttrs(node.attrs()));
      return result;
    case Op::kSmoothScales: evaluateSmoothScales(v); return result;
    case Op::kErrorStats: evaluateErrorStats(v); return result;

    case Op::kAllReduce: case Op::kAllGather: case Op::kReduceScatter: case Op::kShard:
      evaluateCollective(v);
      return result;

    // The quantizing ops have no double-precision meaning of their own here: the kernel
    // tests check them against their own references (tests/kernels/).
    case Op::kQuantStats: case Op::kQuantParams: case Op::kQuantize: case Op::kFakeQuant:
    case Op::kQMatMul:
      throw InternalError(fmt::format("reference evaluator has no rule for op '{}' (%{})", opName(node.op()),
                                      node.name()));
  }
  throw InternalError(fmt::format("reference evaluator: %{} has op {}, which is not in ops.def", node.name(),
                                  static_cast<int>(node.op())));
}

RefTensor randomRefTensor(const TensorType& type, uint64_t seed, double scale) {
  // mt19937_64 is fully specified by the standard; the normal deviates are made here
  // (Box-Muller) because std::normal_distribution differs between libraries.
  std::mt19937_64 rng(seed);
  auto uniform = [&] { return static_cast<double>(rng() >> 11) * 0x1p-53; };  // [0, 1)
  RefTensor t{type, Values(count(type.shape))};
  for (double& v : t.data) {
    if (isFloat(type.dtype)) {
      const double radius = std::sqrt(-2.0 * std::log(1.0 - uniform()));
      v = scale * radius * std::cos(2.0 * std::numbers::pi * uniform());
      if (type.dtype == DType::kBF16) v = roundToBf16(v);
    } else {
      const auto [lo, hi] = integerRange(type.dtype);
      v = lo + static_cast<double>(rng() % static_cast<uint64_t>(hi - lo + 1.0));
    }
  }
  return t;
}

RefTensor randomIndices(const TensorType& type, int64_t bound, uint64_t seed) {
  if (isFloat(type.dtype))
    throw Error(fmt::format("randomIndices: needs an integer type, got {}", type.toString()));
  if (bound < 1 || static_cast<double>(bound) > integerRange(type.dtype).second + 1.0)
    throw Error(fmt::format("randomIndices: bound {} does not fit {}", bound, type.toString()));
  std::mt19937_64 rng(seed);
  RefTensor t{type, Values(count(type.shape))};
  for (double& v : t.data) v = static_cast<double>(rng() % static_cast<uint64_t>(bound));
  return t;
}

RefTensor toRefTensor(const Tensor& tensor) {
  RefTensor t{tensor.type(), Values(static_cast<size_t>(tensor.numElements()))};
  for (size_t i = 0; i < t.data.size(); ++i) {
    switch (tensor.dtype()) {
      case DType::kF32: t.data[i] = tensor.data<float>()[i]; break;
      // bf16 is the upper half of an f32 bit pattern.
      case DType::kBF16:
        t.data[i] = std::bit_cast<float>(uint32_t{tensor.data<uint16_t>()[i]} << 16);
        break;
      case DType::kS8: t.data[i] = tensor.data<int8_t>()[i]; break;
      case DType::kU8: t.data[i] = tensor.data<uint8_t>()[i]; break;
      case DType::kS32: t.data[i] = tensor.data<int32_t>()[i]; break;
    }
  }
  return t;
}

Tensor toTensor(const RefTensor& value) {
  if (value.data.size() != count(value.type.shape))
    throw Error(fmt::format("toTensor: type {} needs {} values, got {}", value.type.toString(),
                            count(value.type.shape), value.data.size()));
  Tensor tensor(value.type);
  for (size_t i = 0; i < value.data.size(); ++i) {
    const double v = value.data[i];
    if (!isFloat(value.type.dtype)) {
      const auto [lo, hi] = integerRange(value.type.dtype);
      if (!(v >= lo && v <= hi && v == std::nearbyint(v)))
        throw Error(fmt::format("toTensor: value {} at position {} is not a {} integer", v, i,
                                dtypeName(value.type.dtype)));
    }
    switch (value.type.dtype) {
      case DType::kF32: tensor.data<float>()[i] = static_cast<float>(v); break;
      case DType::kBF16: {
        // The rounded value is exact in f32, so its upper half is the bf16 pattern.
        const float f = std::isnan(v) ? std::numeric_limits<float>::quiet_NaN()
                                      : static_cast<float>(roundToBf16(v));
        tensor.data<uint16_t>()[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16);
        break;
      }
      case DType::kS8: tensor.data<int8_t>()[i] = static_cast<int8_t>(v); break;
      case DType::kU8: tensor.data<uint8_t>()[i] = static_cast<uint8_t>(v); break;
      case DType::kS32: tensor.data<int32_t>()[i] = static_cast<int32_t>(v); break;
    }
  }
  return tensor;
}

}  // namespace pgq
