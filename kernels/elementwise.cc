#include "kernels/elementwise.h"

#include <cstring>

#include "kernels/cpu_isa.h"
#include "kernels/kernel_error.h"
#include "kernels/vec_math.h"
#include "kernels/vec_math512.h"

namespace pgq::kernels {
namespace {

using vec::loadTail;
using vec::loadPart;
using vec::storeTail;
using vec::storePart;

// Elementwise work splits at multiples of 16 floats, so that two threads never write
// the same 64-byte cache line (unless the buffer itself is misaligned).
constexpr int64_t kAlign = 16;

template <typename Op>
void mapUnary(const float* x, float* y, int64_t n, Op op) {
  vec::parallelRanges(n, 1, kAlign, [&](int64_t begin, int64_t end) {
    int64_t i = begin;
    // Two vectors per iteration give the out-of-order core two independent chains
    // of the (latency-bound) exp polynomial.
    for (; i + 16 <= end; i += 16) {
      const __m256 r0 = op(_mm256_loadu_ps(x + i));
      const __m256 r1 = op(_mm256_loadu_ps(x + i + 8));
      _mm256_storeu_ps(y + i, r0);
      _mm256_storeu_ps(y + i + 8, r1);
    }
    for (; i + 8 <= end; i += 8) _mm256_storeu_ps(y + i, op(_mm256_loadu_ps(x + i)));
    if (i < end) storeTail(y + i, end - i, op(loadTail(x + i, end - i)));
  });
}

template <typename Op>
void mapBinary(const float* a, const float* b, float* y, int64_t n, Op op) {
  vec::parallelRanges(n, 1, kAlign, [&](int64_t begin, int64_t end) {
    int64_t i = begin;
    for (; i + 16 <= end; i += 16) {
      const __m256 r0 = op(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
      const __m256 r1 = op(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));
      _mm256_storeu_ps(y + i, r0);
      _mm256_storeu_ps(y + i + 8, r1);
    }
    for (; i + 8 <= end; i += 8)
      _mm256_storeu_ps(y + i, op(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    if (i < end) storeTail(y + i, end - i, op(loadTail(a + i, end - i), loadTail(b + i, end - i)));
  });
}

// The exp-based activations and their gradients on 16 lanes where the CPU has AVX-512
// (avx512Kernels()): vec_math512.h's twins of the 256-bit functions, so each element
// gets the 256-bit path's bits; the last < 16 elements of a range take that path itself.
// Measured in docs/PERFORMANCE.md (the Zen 5 section).
enum class WideOp { kGelu, kSilu, kGeluGrad, kSiluGrad };

PGQ_AVX512_BEGIN
template <WideOp kOp>
PGQ_AVX512 __attribute__((always_inline)) inline __m512 wideOp(__m512 x, __m512 g) {
  if constexpr (kOp == WideOp::kGelu) return vec::vgelu512(x);
  if constexpr (kOp == WideOp::kSilu) return vec::vsilu512(x);
  if constexpr (kOp == WideOp::kGeluGrad) return _mm512_mul_ps(g, vec::vgeluGrad512(x));
  return _mm512_mul_ps(g, vec::vsiluGrad512(x));
}

template <WideOp kOp>
inline __m256 narrowOp(__m256 x, __m256 g) {
  if constexpr (kOp == WideOp::kGelu) return vec::vgelu(x);
  if constexpr (kOp == WideOp::kSilu) return vec::vsilu(x);
  if constexpr (kOp == WideOp::kGeluGrad) return _mm256_mul_ps(g, vec::vgeluGrad(x));
  return _mm256_mul_ps(g, vec::vsiluGrad(x));
}

// y[begin, end) = op(x, dy) (dy unread for the activations themselves).
template <WideOp kOp>
PGQ_AVX512 void mapWide(const float* x, const float* dy, float* y, int64_t begin, int64_t end) {
  constexpr bool kGrad = kOp == WideOp::kGeluGrad || kOp == WideOp::kSiluGrad;
  const __m512 zero = _mm512_setzero_ps();
  int64_t i = begin;
  // Two vectors per iteration: two independent chains of the exp polynomial.
  for (; i + 32 <= end; i += 32) {
    const __m512 r0 = wideOp<kOp>(_mm512_loadu_ps(x + i), kGrad ? _mm512_loadu_ps(dy + i) : zero);
    const __m512 r1 = wideOp<kOp>(_mm512_loadu_ps(x + i + 16), kGrad ? _mm512_loadu_ps(dy + i + 16) : zero);
    _mm512_storeu_ps(y + i, r0);
    _mm512_storeu_ps(y + i + 16, r1);
  }
  for (; i + 16 <= end; i += 16)
    _mm512_storeu_ps(y + i, wideOp<kOp>(_mm512_loadu_ps(x + i), kGrad ? _mm512_loadu_ps(dy + i) : zero));
  const __m256 zero8 = _mm256_setzero_ps();
  for (; i + 8 <= end; i += 8)
    _mm256_storeu_ps(y + i, narrowOp<kOp>(_mm256_loadu_ps(x + i), kGrad ? _mm256_loadu_ps(dy + i) : zero8));
  if (i < end)
    storeTail(y + i, end - i, narrowOp<kOp>(loadTail(x + i, end - i), kGrad ? loadTail(dy + i, end - i) : zero8));
}
PGQ_AVX512_END

template <WideOp kOp>
void mapWideRanges(const float* x, const float* dy, float* y, int64_t n) {
  vec::parallelRanges(n, 1, kAlign, [&](int64_t begin, int64_t end) { mapWide<kOp>(x, dy, y, begin, end); });
}

// SwiGLU and its gradients: (gate, up, dy) -> one output, the 256-bit functions or their
// 512-bit twins, so each element is what silu/siluGrad and mul give separately.
enum class GluOp { kForward, kGradGate, kGradUp };

template <GluOp kOp>
inline __m256 narrowGlu(__m256 g, __m256 u, __m256 d) {
  if constexpr (kOp == GluOp::kForward) return _mm256_mul_ps(vec::vsilu(g), u);
  if constexpr (kOp == GluOp::kGradGate) return _mm256_mul_ps(_mm256_mul_ps(d, u), vec::vsiluGrad(g));
  return _mm256_mul_ps(d, vec::vsilu(g));
}

template <GluOp kOp>
struct GluOperands {
  const float* g;
  const float* u;  // unread by kGradUp
  const float* d;  // unread by kForward
  static constexpr bool kU = kOp != GluOp::kGradUp, kD = kOp != GluOp::kForward;
  __m256 narrow(int64_t i, int64_t k) const {
    const __m256 zero = _mm256_setzero_ps();
    return narrowGlu<kOp>(loadPart(g + i, k), kU ? loadPart(u + i, k) : zero, kD ? loadPart(d + i, k) : zero);
  }
};

template <GluOp kOp>
void mapGluNarrow(const GluOperands<kOp>& in, float* y, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {  // two independent exp chains
    const __m256 r0 = in.narrow(i, 8), r1 = in.narrow(i + 8, 8);
    _mm256_storeu_ps(y + i, r0);
    _mm256_storeu_ps(y + i + 8, r1);
  }
  for (; i < end; i += 8) storePart(y + i, end - i, in.narrow(i, end - i));
}

PGQ_AVX512_BEGIN
template <GluOp kOp>
PGQ_AVX512 __attribute__((always_inline)) inline __m512 wideGlu(const GluOperands<kOp>& in, int64_t i) {
  const __m512 zero = _mm512_setzero_ps();
  const __m512 g = _mm512_loadu_ps(in.g + i);
  const __m512 u = GluOperands<kOp>::kU ? _mm512_loadu_ps(in.u + i) : zero;
  const __m512 d = GluOperands<kOp>::kD ? _mm512_loadu_ps(in.d + i) : zero;
  if constexpr (kOp == GluOp::kForward) return _mm512_mul_ps(vec::vsilu512(g), u);
  if constexpr (kOp == GluOp::kGradGate) return _mm512_mul_ps(_mm512_mul_ps(d, u), vec::vsiluGrad512(g));
  return _mm512_mul_ps(d, vec::vsilu512(g));
}

template <GluOp kOp>
PGQ_AVX512 void mapGluWide(const GluOperands<kOp>& in, float* y, int64_t begin, int64_t end) {
  int64_t i = begin;
  for (; i + 32 <= end; i += 32) {
    const __m512 r0 = wideGlu<kOp>(in, i), r1 = wideGlu<kOp>(in, i + 16);
    _mm512_storeu_ps(y + i, r0);
    _mm512_storeu_ps(y + i + 16, r1);
  }
  for (; i + 16 <= end; i += 16) _mm512_storeu_ps(y + i, wideGlu<kOp>(in, i));
  for (; i < end; i += 8) storePart(y + i, end - i, in.narrow(i, end - i));
}
PGQ_AVX512_END

template <GluOp kOp>
void mapGlu(const GluOperands<kOp>& in, float* y, int64_t n) {
  const bool wide = avx512Kernels();
  vec::parallelRanges(n, 1, kAlign, [&](int64_t begin, int64_t end) {
    if (wide) mapGluWide<kOp>(in, y, begin, end);
    else mapGluNarrow<kOp>(in, y, begin, end);
  });
}

template <BinaryOp kOp>
inline __m256 applyBinary(__m256 a, __m256 b) {
  if constexpr (kOp == BinaryOp::kAdd) return _mm256_add_ps(a, b);
  if constexpr (kOp == BinaryOp::kSub) return _mm256_sub_ps(a, b);
  if constexpr (kOp == BinaryOp::kMul) return _mm256_mul_ps(a, b);
  if constexpr (kOp == BinaryOp::kDiv) return _mm256_div_ps(a, b);
  if constexpr (kOp == BinaryOp::kMax) {
    // maxps returns b when either is NaN; put a back where a is NaN.
    return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
  if constexpr (kOp == BinaryOp::kGe)
    return _mm256_and_ps(_mm256_cmp_ps(a, b, _CMP_GE_OQ), _mm256_set1_ps(1.0f));
}

// One contiguous run of outputs. A "vector" operand advances with the output, a
// "scalar" one is p[0] for the whole run.
template <BinaryOp kOp, bool kAVec, bool kBVec>
void binaryRun(const float* a, const float* b, float* y, int64_t n) {
  const __m256 a_s = kAVec ? _mm256_setzero_ps() : _mm256_set1_ps(a[0]);
  const __m256 b_s = kBVec ? _mm256_setzero_ps() : _mm256_set1_ps(b[0]);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 va = kAVec ? _mm256_loadu_ps(a + i) : a_s;
    const __m256 vb = kBVec ? _mm256_loadu_ps(b + i) : b_s;
    _mm256_storeu_ps(y + i, applyBinary<kOp>(va, vb));
  }
  if (i < n) {
    const __m256 va = kAVec ? loadTail(a + i, n - i) : a_s;
    const __m256 vb = kBVec ? loadTail(b + i, n - i) : b_s;
    storeTail(y + i, n - i, applyBinary<kOp>(va, vb));
  }
}

using RunFn = void (*)(const float*, const float*, float*, int64_t);

template <BinaryOp kOp>
RunFn pickRun(bool a_vec, bool b_vec) {
  if (a_vec) return b_vec ? binaryRun<kOp, true, true> : binaryRun<kOp, true, false>;
  return b_vec ? binaryRun<kOp, false, true> : binaryRun<kOp, false, false>;
}

RunFn pickRun(BinaryOp op, bool a_vec, bool b_vec) {
  switch (op) {
    case BinaryOp::kAdd: return pickRun<BinaryOp::kAdd>(a_vec, b_vec);
    case BinaryOp::kSub: return pickRun<BinaryOp::kSub>(a_vec, b_vec);
    case BinaryOp::kMul: return pickRun<BinaryOp::kMul>(a_vec, b_vec);
    case BinaryOp::kDiv: return pickRun<BinaryOp::kDiv>(a_vec, b_vec);
    case BinaryOp::kMax: return pickRun<BinaryOp::kMax>(a_vec, b_vec);
    case BinaryOp::kGe: return pickRun<BinaryOp::kGe>(a_vec, b_vec);
  }
  throw KernelError::format("binary: unknown BinaryOp {}", static_cast<int>(op));
}

// Rewrites a broadcast that is degenerate for this shape into a simpler one (a row of
// a one-column output is a scalar, ...), so that the common cases become long runs.
Bcast normalize(Bcast b, int64_t outer, int64_t inner) {
  if (inner == 1 && b == Bcast::kRow) return Bcast::kScalar;
  if (inner == 1 && b == Bcast::kCol) return Bcast::kFull;
  if (outer == 1 && b == Bcast::kCol) return Bcast::kScalar;
  if (outer == 1 && b == Bcast::kRow) return Bcast::kFull;
  return b;
}

// Start of the run at row o, column i, and whether it advances along the run.
const float* operandAt(const float* p, Bcast b, int64_t o, int64_t i, int64_t inner) {
  switch (b) {
    case Bcast::kFull: return p + o * inner + i;
    case Bcast::kRow: return p + i;
    case Bcast::kCol: return p + o;
    case Bcast::kScalar: return p;
  }
  return p;
}

bool advances(Bcast b) { return b == Bcast::kFull || b == Bcast::kRow; }

}  // namespace

void unary(UnaryOp op, const float* x, float* y, int64_t n) {
  vec::checkSizes("unary", {n});
  switch (op) {
    case UnaryOp::kNeg:
      return mapUnary(x, y, n, [](__m256 v) { return _mm256_xor_ps(v, _mm256_set1_ps(-0.0f)); });
    case UnaryOp::kExp: return mapUnary(x, y, n, vec::vexp);
    case UnaryOp::kLog: return mapUnary(x, y, n, vec::vlog);
    case UnaryOp::kRsqrt:
      // Not _mm256_rsqrt_ps: its 12-bit estimate (even after a Newton step, ~2 ulp
      // off) would be the least accurate op of the graph.
      return mapUnary(x, y, n, [](__m256 v) {
        return _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_sqrt_ps(v));
      });
    case UnaryOp::kTanh: return mapUnary(x, y, n, vec::vtanh);
    case UnaryOp::kRelu:
      // maxps returns its second operand when one is NaN: NaN propagates like torch.
      return mapUnary(x, y, n, [](__m256 v) { return _mm256_max_ps(_mm256_setzero_ps(), v); });
    case UnaryOp::kGelu:
      if (avx512Kernels()) return mapWideRanges<WideOp::kGelu>(x, nullptr, y, n);
      return mapUnary(x, y, n, vec::vgelu);
    case UnaryOp::kSqrt: return mapUnary(x, y, n, [](__m256 v) { return _mm256_sqrt_ps(v); });
    case UnaryOp::kSigmoid: return mapUnary(x, y, n, vec::vsigmoid);
    case UnaryOp::kErf: return mapUnary(x, y, n, vec::verf);
    case UnaryOp::kSilu:
      if (avx512Kernels()) return mapWideRanges<WideOp::kSilu>(x, nullptr, y, n);
      return mapUnary(x, y, n, vec::vsilu);
    case UnaryOp::kGeluErf: return mapUnary(x, y, n, vec::vgeluErf);
  }
  throw KernelError::format("unary: unknown UnaryOp {}", static_cast<int>(op));
}

void binary(BinaryOp op, const float* a, Bcast a_bcast, const float* b, Bcast b_bcast, float* y,
            int64_t outer, int64_t inner) {
  vec::checkSizes("binary", {outer, inner});
  a_bcast = normalize(a_bcast, outer, inner);
  b_bcast = normalize(b_bcast, outer, inner);
  // Without row or column operands the output is one flat run.
  const auto flat = [](Bcast c) { return c == Bcast::kFull || c == Bcast::kScalar; };
  if (flat(a_bcast) && flat(b_bcast)) {
    inner *= outer;
    outer = outer == 0 ? 0 : 1;
  }
  const RunFn run = pickRun(op, advances(a_bcast), advances(b_bcast));
  // Split the flat output range among threads; each range is walked row segment by
  // row segment, so long rows and many short rows both balance.
  vec::parallelRanges(outer * inner, 1, kAlign, [&](int64_t begin, int64_t end) {
    int64_t o = begin / inner;
    int64_t i = begin % inner;
    for (int64_t pos = begin; pos < end; ++o, i = 0) {
      const int64_t len = std::min(inner - i, end - pos);
      run(operandAt(a, a_bcast, o, i, inner), operandAt(b, b_bcast, o, i, inner), y + pos, len);
      pos += len;
    }
  });
}

void geluGrad(const float* x, const float* dy, float* dx, int64_t n) {
  vec::checkSizes("geluGrad", {n});
  if (avx512Kernels()) return mapWideRanges<WideOp::kGeluGrad>(x, dy, dx, n);
  mapBinary(x, dy, dx, n, [](__m256 xv, __m256 g) { return _mm256_mul_ps(g, vec::vgeluGrad(xv)); });
}

void siluGrad(const float* x, const float* dy, float* dx, int64_t n) {
  vec::checkSizes("siluGrad", {n});
  if (avx512Kernels()) return mapWideRanges<WideOp::kSiluGrad>(x, dy, dx, n);
  mapBinary(x, dy, dx, n, [](__m256 xv, __m256 g) { return _mm256_mul_ps(g, vec::vsiluGrad(xv)); });
}

void swiglu(const float* gate, const float* up, float* y, int64_t n) {
  vec::checkSizes("swiglu", {n});
  mapGlu<GluOp::kForward>({gate, up, nullptr}, y, n);
}

void swigluGrad(SwigluOperand wrt, const float* gate, const float* up, const float* dy, float* dx, int64_t n) {
  vec::checkSizes("swigluGrad", {n});
  if (wrt == SwigluOperand::kGate) return mapGlu<GluOp::kGradGate>({gate, up, dy}, dx, n);
  mapGlu<GluOp::kGradUp>({gate, nullptr, dy}, dx, n);
}

void geluErfGrad(const float* x, const float* dy, float* dx, int64_t n) {
  vec::checkSizes("geluErfGrad", {n});
  mapBinary(x, dy, dx, n, [](__m256 xv, __m256 g) { return _mm256_mul_ps(g, vec::vgeluErfGrad(xv)); });
}

void reluGrad(const float* x, const float* dy, float* dx, int64_t n) {
  vec::checkSizes("reluGrad", {n});
  mapBinary(x, dy, dx, n, [](__m256 xv, __m256 g) {
    return _mm256_and_ps(g, _mm256_cmp_ps(xv, _mm256_setzero_ps(), _CMP_GT_OQ));
  });
}

void select(const float* cond, const float* a, const float* b, float* y, int64_t n) {
  vec::checkSizes("select", {n});
  vec::parallelRanges(n, 1, kAlign, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i += 8) {
      const int64_t k = end - i;
      // NEQ_UQ is true for NaN, as `cond != 0` is.
      const __m256 pick_a = _mm256_cmp_ps(vec::loadPart(cond + i, k), _mm256_setzero_ps(), _CMP_NEQ_UQ);
      vec::storePart(y + i, k, _mm256_blendv_ps(vec::loadPart(b + i, k), vec::loadPart(a + i, k), pick_a));
    }
  });
}

void fill(float* y, int64_t n, float v) {
  vec::checkSizes("fill", {n});
  const __m256 vv = _mm256_set1_ps(v);
  vec::parallelRanges(n, 1, kAlign, [&](int64_t begin, int64_t end) {
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) _mm256_storeu_ps(y + i, vv);
    if (i < end) storeTail(y + i, end - i, vv);
  });
}

void copy(const float* x, float* y, int64_t n) {
  vec::checkSizes("copy", {n});
  if (x == y) return;
  vec::parallelRanges(n, 1, kAlign, [&](int64_t begin, int64_t end) {
    std::memcpy(y + begin, x + begin, static_cast<size_t>(end - begin) * sizeof(float));
  });
}

}  // namespace pgq::kernels
