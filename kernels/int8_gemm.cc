// The int8 GEMM of gemm.h: oneDNN u8 x s8 -> s32 per K segment, then zero-point
// compensation and the row x column rescale in one pass over C.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu_isa.h"
#include "kernels/dnnl_context.h"
#include "kernels/gemm.h"
#include "kernels/kernel_error.h"
#include "kernels/optim.h"
#include "kernels/vec_math.h"
#include "kernels/quant_core.h"

namespace pgq::kernels {
namespace {

// One operand's quantization, resolved for the GEMM.
struct Operand {
  OperandView view;
  const QuantFormat* format;
  std::span<const float> params;
  int64_t groups;
  int64_t blocks;
  int offset;  // storage offset (quant_format.h)

  // The group of channel c of batch b in block j (quant_format.h order).
  int64_t group(int64_t b, int64_t c, int64_t j) const {
    switch (format->granularity) {
      case Granularity::kPerTensor: return 0;
      case Granularity::kPerChannel: return b * view.channels() + c;
      case Granularity::kPerBlock: return (b * view.channels() + c) * blocks + j;
    }
    return 0;
  }
  float scale(int64_t g) const { return params[g]; }
  // The zero point in the storage domain: what the stored byte of a real 0 is.
  int32_t storedZero(int64_t g) const {
    return (format->asymmetric ? int32_t(params[groups + g]) : 0) + offset;
  }
};

Operand makeOperand(const OperandView& view, const QuantFormat& format,
                    std::span<const float> params, GemmSide side, const char* name) {
  int64_t expected = quantParamCount(view, format);
  if (int64_t(params.size()) != expected) {
    throw KernelError::format("int8Gemm: params of {} ({}) have {} floats, expected {}", name,
                              format.toString(), params.size(), expected);
  }
  Operand op{view,
             &format,
             params,
             quantGroupCount(view, format),
             blockCount(view, format),
             storageOffset(format, side)};
  detail::checkParamValues("int8Gemm", format, params, op.groups);
  return op;
}

// Boundaries of the K segments: every block edge of either operand.
std::vector<int64_t> segmentBounds(int64_t k, const QuantFormat& fa, const QuantFormat& fb) {
  std::vector<int64_t> bounds = {0, k};
  for (const QuantFormat* f : {&fa, &fb}) {
    if (f->granularity != Granularity::kPerBlock) continue;
    for (int64_t edge = f->block; edge < k; edge += f->block) bounds.push_back(edge);
  }
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  return bounds;
}

// out[c] = sum over k in [k0, k1) of q[k * stride_k + c * stride_c], per batch.
template <typename T>
void sumAlongK(const T* q, int64_t batch, int64_t channels, int64_t k0, int64_t k1,
               int64_t stride_k, int64_t stride_c, int64_t batch_stride, int32_t* out) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < batch; ++b) {
    const T* base = q + b * batch_stride;
    int32_t* o = out + b * channels;
    if (stride_k == 1) {
      for (int64_t c = 0; c < channels; ++c) {
        int32_t sum = 0;
        for (int64_t k = k0; k < k1; ++k) sum += base[c * stride_c + k];
        o[c] = sum;
      }
    } else {
      std::fill(o, o + channels, 0);
      for (int64_t k = k0; k < k1; ++k) {
        const T* row = base + k * stride_k;
        for (int64_t c = 0; c < channels; ++c) o[c] += row[c];
      }
    }
  }
}

// Per-segment vectors of the epilogue, [batch][M] and [batch][N].
struct SegmentTerms {
  std::vector<float> sa, sb;
  // S = P - dza[m] * cb[n] - ra[m] * zb[n]  (gemm.h), all in wrapping int32.
  std::vector<int32_t> dza, ra, zb, cb;
  bool compensate = false;
};

// The s32 result of the K segments of a per-block GEMM, reused across calls.
thread_local std::vector<int32_t> tl_scratch;

// A transposed to row-major, reused across calls (see rowMajorA).
thread_local std::vector<uint8_t> tl_a_rows;

// The 16x16 bytes at a (row stride lda) transposed to t (row stride ldt): four rounds of
// unpacks, bytes, then 16-, 32- and 64-bit pairs.
void transpose16x16(const uint8_t* a, int64_t lda, uint8_t* t, int64_t ldt) {
  __m128i r[16], s[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i * lda));
  for (int i = 0; i < 8; ++i) {
    s[2 * i] = _mm_unpacklo_epi8(r[2 * i], r[2 * i + 1]);
    s[2 * i + 1] = _mm_unpackhi_epi8(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm_unpacklo_epi16(s[4 * i], s[4 * i + 2]);
    r[4 * i + 1] = _mm_unpackhi_epi16(s[4 * i], s[4 * i + 2]);
    r[4 * i + 2] = _mm_unpacklo_epi16(s[4 * i + 1], s[4 * i + 3]);
    r[4 * i + 3] = _mm_unpackhi_epi16(s[4 * i + 1], s[4 * i + 3]);
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      s[8 * i + 2 * j] = _mm_unpacklo_epi32(r[8 * i + j], r[8 * i + 4 + j]);
      s[8 * i + 2 * j + 1] = _mm_unpackhi_epi32(r[8 * i + j], r[8 * i + 4 + j]);
    }
  for (int j = 0; j < 8; ++j) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(t + (2 * j) * ldt), _mm_unpacklo_epi64(s[j], s[8 + j]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(t + (2 * j + 1) * ldt), _mm_unpackhi_epi64(s[j], s[8 + j]));
  }
}

// A stored transposed ([batch][K][M], a weight gradient's activation or output gradient)
// copied to [batch][M][K]. On AMX, oneDNN 2.6 runs a transposed u8 A through gemm:jit,
// which there reaches 115-130 GOP/s on GPT-2 124M's 256-token weight gradients, against
// 240-610 GOP/s for its AMX brgemm on this copy (2 threads, the copy included; with
// AVX-512 VNNI alone gemm:jit itself runs them at 445-600): so only AMX takes the copy
// (docs/PERFORMANCE.md, "The step's other kernels").
std::span<const uint8_t> rowMajorA(std::span<const uint8_t> qa, int64_t batch, int64_t m, int64_t k) {
  if (tl_a_rows.size() < qa.size()) tl_a_rows.resize(qa.size());
  uint8_t* out = tl_a_rows.data();
  const int64_t mb = (m + 15) / 16, kb = (k + 15) / 16;
#pragma omp parallel for schedule(static)
  for (int64_t task = 0; task < batch * mb; ++task) {
    const int64_t b = task / mb, i0 = task % mb * 16;
    const uint8_t* src = qa.data() + b * m * k;  // [k][m]
    uint8_t* dst = out + b * m * k;              // [m][k]
    for (int64_t jb = 0; jb < kb; ++jb) {
      const int64_t j0 = jb * 16;
      if (i0 + 16 <= m && j0 + 16 <= k) {
        transpose16x16(src + j0 * m + i0, m, dst + i0 * k + j0, k);
        continue;
      }
      for (int64_t i = i0; i < std::min(m, i0 + 16); ++i)
        for (int64_t j = j0; j < std::min(k, j0 + 16); ++j) dst[i * k + j] = src[j * m + i];
    }
  }
  return {out, qa.size()};
}

// Eight int32 from memory that may hold floats (the in-place rescale reads oneDNN's s32
// output from the f32 output buffer); the intrinsic load may alias any type.
inline __m256i loadInt(const int32_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// The rescale pass of a one-segment GEMM with N % 8 == 0 (the row loop in runInt8, the
// same operations on each element) walked in sumSquares' blocks of C, returning
// sumSquares(C) bit for bit: each block's squares summed by vec::sumVectors as its
// values are written, in order (no vector of 8 crosses a row), then the blocks in order.
double rescaleSummingSquares(const int32_t* s32, const SegmentTerms& t, int64_t batch, int64_t m, int64_t n,
                             float* c) {
  const int64_t total = batch * m * n;
  const int64_t blocks = (total + kSumSquaresBlock - 1) / kSumSquaresBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
#pragma omp parallel for schedule(static)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t f0 = block * kSumSquaresBlock;
    int64_t row = f0 / n, j = f0 % n, bi = row / m;
    partial[static_cast<size_t>(block)] = vec::sumVectors(std::min(kSumSquaresBlock, total - f0), [&](int64_t, int64_t) {
      __m256i v = loadInt(s32 + row * n + j);
      if (t.compensate) {
        v = _mm256_sub_epi32(v, _mm256_mullo_epi32(_mm256_set1_epi32(t.dza[row]), loadInt(t.cb.data() + bi * n + j)));
        v = _mm256_sub_epi32(v, _mm256_mullo_epi32(_mm256_set1_epi32(t.ra[row]), loadInt(t.zb.data() + bi * n + j)));
      }
      const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(v),
                                     _mm256_mul_ps(_mm256_set1_ps(t.sa[row]), _mm256_loadu_ps(t.sb.data() + bi * n + j)));
      _mm256_storeu_ps(c + row * n + j, f);
      j += 8;
      if (j == n) {
        j = 0;
        if (++row % m == 0) ++bi;
      }
      return _mm256_mul_ps(f, f);
    });
  }
  double sum = 0.0;
  for (double p : partial) sum += p;
  return sum;
}

template <bool kS32Out>
void runInt8(const GemmShape& given, std::span<const uint8_t> qa, const QuantFormat& fa,
             std::span<const float> pa, std::span<const int8_t> qb, const QuantFormat& fb,
             std::span<const float> pb, void* c_out, size_t c_size, const char* what,
             double* sum_squares = nullptr) {
  GemmShape shape = given;
  shape.validate();
  checkFormat(fa);
  checkFormat(fb);
  auto check = [&](const char* name, size_t actual, int64_t expected) {
    if (int64_t(actual) != expected) {
      throw KernelError::format("{}: {} has {} elements, shape batch={} m={} n={} k={} needs {}",
                                what, name, actual, shape.batch, shape.m, shape.n, shape.k,
                                expected);
    }
  };
  check("A", qa.size(), shape.sizeA());
  check("B", qb.size(), shape.sizeB());
  check("C", c_size, shape.sizeC());
  if (shape.k > kMaxInt8GemmK) {
    throw KernelError::format("{}: k={} is too large for exact int32 accumulation (max {})", what,
                              shape.k, kMaxInt8GemmK);
  }
  checkExactInt8Gemm(fa, fb);
  const Operand a = makeOperand(lhsView(shape), fa, pa, GemmSide::kLhs, "A");
  const Operand b = makeOperand(rhsView(shape), fb, pb, GemmSide::kRhs, "B");
  // The params are in group order, which does not depend on the layout: only A's bytes move.
  if (shape.trans_a && int8Caps().isa_name == "avx512_core_amx") {
    qa = rowMajorA(qa, shape.batch, shape.m, shape.k);
    shape.trans_a = false;
  }

  const int64_t batch = shape.batch, m = shape.m, n = shape.n, k = shape.k;
  // A constant lhs zero point (symmetric, or asymmetric per-tensor) goes to oneDNN; a
  // per-row one and any rhs zero point are compensated on the s32 result.
  const bool lhs_row_zero = fa.asymmetric && fa.granularity != Granularity::kPerTensor;
  const int32_t zc = lhs_row_zero ? 0 : a.storedZero(0);
  const bool rhs_zero = fb.asymmetric;

  const std::vector<int64_t> bounds = segmentBounds(k, fa, fb);
  const size_t segments = bounds.size() - 1;
  int32_t* s32 = static_cast<int32_t*>(c_out);
  if (segments > 1) {
    if (tl_scratch.size() < size_t(shape.sizeC())) tl_scratch.resize(size_t(shape.sizeC()));
    s32 = tl_scratch.data();
  }
  SegmentTerms t;
  t.sa.resize(batch * m);
  t.sb.resize(batch * n);
  t.compensate = lhs_row_zero || rhs_zero;
  if (t.compensate) {
    t.dza.assign(batch * m, 0);
    t.ra.assign(batch * m, 0);
    t.zb.assign(batch * n, 0);
    t.cb.assign(batch * n, 0);
  }

  for (size_t s = 0; s < segments; ++s) {
    const int64_t k0 = bounds[s], k1 = bounds[s + 1], kb = k1 - k0;
    // [batch, M, kb] x [batch, kb, N] -> [batch, M, N], sub-matrices by offset + stride.
    const int64_t a_offset = shape.trans_a ? k0 * m : k0;
    const int64_t b_offset = shape.trans_b ? k0 : k0 * n;
    detail::MatmulKey key{dnnl::memory::data_type::u8,
                          dnnl::memory::data_type::s8,
                          dnnl::memory::data_type::s32,
                          batch,
                          m,
                          n,
                          kb,
                          {m * k, shape.trans_a ? 1 : k, shape.trans_a ? m : 1},
                          {k * n, shape.trans_b ? 1 : n, shape.trans_b ? k : 1},
                          zc != 0};
    detail::runMatmul(key, qa.data() + a_offset, qb.data() + b_offset, s32, zc);

    const int64_t ja = fa.granularity == Granularity::kPerBlock ? k0 / fa.block : 0;
    const int64_t jb = fb.granularity == Granularity::kPerBlock ? k0 / fb.block : 0;
    for (int64_t bi = 0; bi < batch; ++bi) {
      for (int64_t i = 0; i < m; ++i) {
        int64_t g = a.group(bi, i, ja);
        t.sa[bi * m + i] = a.scale(g);
        if (lhs_row_zero) t.dza[bi * m + i] = a.storedZero(g) - zc;
      }
      for (int64_t j = 0; j < n; ++j) {
        int64_t g = b.group(bi, j, jb);
        t.sb[bi * n + j] = b.scale(g);
        if (rhs_zero) t.zb[bi * n + j] = b.storedZero(g);
      }
    }
    if (rhs_zero) {
      // ra[m] = sum_k qa[m,k] - kb * zc
      sumAlongK(qa.data(), batch, m, k0, k1, shape.trans_a ? m : 1, shape.trans_a ? 1 : k, m * k,
                t.ra.data());
      for (int32_t& v : t.ra) v = int32_t(uint32_t(v) - uint32_t(kb) * uint32_t(zc));
    }
    if (lhs_row_zero) {
      // cb[n] = sum_k qb[k,n] - kb * zb[n]
      sumAlongK(qb.data(), batch, n, k0, k1, shape.trans_b ? 1 : n, shape.trans_b ? k : 1, k * n,
                t.cb.data());
      for (int64_t j = 0; j < batch * n; ++j) {
        t.cb[j] = int32_t(uint32_t(t.cb[j]) - uint32_t(kb) * uint32_t(t.zb[j]));
      }
    }

    const bool first = s == 0;
    if (!kS32Out && sum_squares != nullptr && segments == 1 && n % 8 == 0) {
      *sum_squares = rescaleSummingSquares(s32, t, batch, m, n, static_cast<float*>(c_out));
      return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < batch * m; ++row) {
      const int64_t bi = row / m;
      const int32_t* p = s32 + row * n;
      const int32_t* zb = t.compensate ? t.zb.data() + bi * n : nullptr;
      const int32_t* cb = t.compensate ? t.cb.data() + bi * n : nullptr;
      const int32_t dza = t.compensate ? t.dza[row] : 0;
      const int32_t ra = t.compensate ? t.ra[row] : 0;
      const float sa = t.sa[row];
      const float* sb = t.sb.data() + bi * n;
      const __m256i vdza = _mm256_set1_epi32(dza);
      const __m256i vra = _mm256_set1_epi32(ra);
      const __m256 vsa = _mm256_set1_ps(sa);
      // p and the f32 output may be the same memory: each element is read as int32
      // before it is written as float, through intrinsics (which may alias).
      int64_t j = 0;
      for (; j + 8 <= n; j += 8) {
        __m256i v = loadInt(p + j);
        if (t.compensate) {
          v = _mm256_sub_epi32(v, _mm256_mullo_epi32(vdza, loadInt(cb + j)));
          v = _mm256_sub_epi32(v, _mm256_mullo_epi32(vra, loadInt(zb + j)));
        }
        if constexpr (kS32Out) {
          int32_t* out = static_cast<int32_t*>(c_out) + row * n + j;
          if (!first) v = _mm256_add_epi32(v, loadInt(out));
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), v);
        } else {
          float* out = static_cast<float*>(c_out) + row * n + j;
          __m256 f =
              _mm256_mul_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(vsa, _mm256_loadu_ps(sb + j)));
          if (!first) f = _mm256_add_ps(f, _mm256_loadu_ps(out));
          _mm256_storeu_ps(out, f);
        }
      }
      for (; j < n; ++j) {
        int32_t raw;
        std::memcpy(&raw, p + j, sizeof(raw));
        int64_t wide = int64_t(raw);
        if (t.compensate) wide -= int64_t(dza) * cb[j] + int64_t(ra) * zb[j];
        int32_t v = int32_t(uint32_t(uint64_t(wide)));
        if constexpr (kS32Out) {
          int32_t* out = static_cast<int32_t*>(c_out) + row * n + j;
          *out = first ? v : int32_t(uint32_t(*out) + uint32_t(v));
        } else {
          float* out = static_cast<float*>(c_out) + row * n + j;
          float f = float(v) * (sa * sb[j]);
          *out = first ? f : *out + f;
        }
      }
    }
  }
  if (!kS32Out && sum_squares != nullptr)
    *sum_squares = sumSquares(static_cast<const float*>(c_out), static_cast<int64_t>(c_size));
}

}  // namespace

void int8Gemm(const GemmShape& shape, std::span<const uint8_t> qa, const QuantFormat& fa,
              std::span<const float> pa, std::span<const int8_t> qb, const QuantFormat& fb,
              std::span<const float> pb, std::span<float> c, double* sum_squares) {
  runInt8<false>(shape, qa, fa, pa, qb, fb, pb, c.data(), c.size(), "int8Gemm", sum_squares);
}

void int8GemmS32(const GemmShape& shape, std::span<const uint8_t> qa, const QuantFormat& fa,
                 std::span<const float> pa, std::span<const int8_t> qb, const QuantFormat& fb,
                 std::span<const float> pb, std::span<int32_t> c) {
  runInt8<true>(shape, qa, fa, pa, qb, fb, pb, c.data(), c.size(), "int8GemmS32");
}

}  // namespace pgq::kernels
