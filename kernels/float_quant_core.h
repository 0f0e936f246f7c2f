#pragma once
// Internal to kernels/: the lane arithmetic of fake quantization (float_quant.h has the
// numerics), shared by fakeQuantize() and quantStats() so that the statistics describe
// exactly the values the GEMM reads. Not part of the public API.
//
// Q(v) of float_quant.h in eight lanes, from the float bits of c = clamp(v, -max, max):
// the exponent field of c, raised to emin's, gives the step q = 2^(e - m) and 1/q =
// 2^(m - e) as exact powers of two built from bits, so c * (1/q) is exact and a
// multiplication by q puts the rounded integer back. A float subnormal c has exponent
// field 0, below every emin, so it takes the smallest step like any other value below
// 2^emin. Int elements skip all that: their step is 1.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>

#include "kernels/quant_core.h"
#include "kernels/sr_noise.h"

namespace pgq::kernels::detail {

// How an element's grid is walked: FP8/FP4 steps from the exponent field, int steps of
// 1, or bf16's (the float's own bits rounded to their upper 16: f32's exponent range
// reaches steps of 2^-133, which no float exponent field below can build).
enum class ElementKind { kFloat, kInt, kBf16 };

// A format's element grid as the lanes need it.
struct EmulatedGrid {
  ElementKind kind = ElementKind::kFloat;  // kInt: step 1 everywhere; the fields below are FP8's
  float max = 0.0f;          // largest element magnitude
  float clip_edge = 0.0f;    // |v| above which saturation changed the rounding:
                             // max + half the step at max (as the int path's qmax + 1/2)
  int32_t lo_exp = 0;        // exponent field floor, (emin + 127) << 23
  int32_t mantissa = 0;      // m << 23
};
EmulatedGrid emulatedGridOf(const QuantFormat& format);

// Throws KernelError unless format is valid and emulated.
void checkEmulatedFormat(const char* what, const QuantFormat& format);
// Throws KernelError unless every scale is a finite float >= kMinScale (a power of two
// for scale=e8m0): params computed for another format are caught here.
void checkEmulatedParams(const char* what, const QuantFormat& format, std::span<const float> params,
                         int64_t groups);

// A QuantPlan (quant_core.h) over the groups of an emulated format: the walk into work
// units and runs of one group (or one scale per element of a row). Its stochastic-rounding
// tables are not needed here, so it is built as for round-to-nearest.
inline QuantPlan emulatedPlan(const OperandView& view, const QuantFormat& format,
                              std::span<const float> params) {
  QuantFormat nearest = format;
  nearest.rounding = Rounding::kNearest;
  return QuantPlan(view, nearest, params, 0);
}

// EmulatedGrid broadcast to eight lanes, with the exponent-field sums the steps need.
struct GridLanes {
  __m256 max;
  __m256 neg_max;
  __m256i lo_exp;
  __m256i step_sub;   // q's bits = exponent field - (m << 23)
  __m256i inv_add;    // 1/q's bits = ((254 + m) << 23) - exponent field
  __m256i inv16_add;  // 2^16/q's bits = ((270 + m) << 23) - exponent field

  explicit GridLanes(const EmulatedGrid& g)
      : max(_mm256_set1_ps(g.max)),
        neg_max(_mm256_set1_ps(-g.max)),
        lo_exp(_mm256_set1_epi32(g.lo_exp)),
        step_sub(_mm256_set1_epi32(g.mantissa)),
        inv_add(bits((254u << 23) + static_cast<uint32_t>(g.mantissa))),
        inv16_add(bits((270u << 23) + static_cast<uint32_t>(g.mantissa))) {}

 private:
  // The lanes' arithmetic is modulo 2^32 (270 << 23 does not fit an int): build the
  // constant unsigned and pass its bit pattern.
  static __m256i bits(uint32_t v) {
    int32_t i;
    std::memcpy(&i, &v, sizeof i);
    return _mm256_set1_epi32(i);
  }
};

// Q(v) of eight lanes (float_quant.h) for FP8 elements, int elements (kInt), whose step
// is 1, or bf16 (kBf16); r holds the 16 noise bits of each lane (stochastic only).
template <bool kStochastic, ElementKind kKind>
inline __m256 roundElementLanes(__m256 v, const GridLanes& g, __m256i r) {
  constexpr bool kInt = kKind == ElementKind::kInt;
  if constexpr (kKind == ElementKind::kBf16) {
    // On the float's bits: round to nearest even adds 0x7FFF plus the kept lowest bit,
    // stochastic rounding the 16 noise bits, then the low half is dropped. Float
    // subnormals round like any other value; beyond bf16's max the carry reaches Inf
    // (bf16 does not saturate: it rounds as the bf16 GEMM's conversion, convert.h); no
    // carry reaches the sign. Round to nearest keeps the sign of zero; a stochastic zero
    // is +0 (adding 0 makes it so), as for FP8.
    const __m256 c = v;
    const __m256i bits = _mm256_castps_si256(c);
    // Stochastic rounding on the magnitude's bits draws as the signed fixed point does
    // (floor(trunc(f 2^16) + r) / 2^16)): negative lanes take 65535 - r.
    const __m256i signs = _mm256_and_si256(_mm256_srai_epi32(bits, 31), _mm256_set1_epi32(0xFFFF));
    const __m256i add = kStochastic ? _mm256_xor_si256(r, signs)
                                    : _mm256_add_epi32(_mm256_set1_epi32(0x7FFF),
                                                       _mm256_and_si256(_mm256_srli_epi32(bits, 16),
                                                                        _mm256_set1_epi32(1)));
    __m256 q = _mm256_castsi256_ps(
        _mm256_and_si256(_mm256_add_epi32(bits, add), _mm256_set1_epi32(static_cast<int32_t>(0xFFFF0000u))));
    if constexpr (kStochastic) q = _mm256_add_ps(q, _mm256_setzero_ps());
    return _mm256_blendv_ps(q, c, _mm256_cmp_ps(c, c, _CMP_UNORD_Q));  // NaN stays NaN
  }
  // max and min return their second operand when either is NaN: NaN lanes keep c = NaN.
  const __m256 c = _mm256_min_ps(g.max, _mm256_max_ps(g.neg_max, v));
  __m256 q = _mm256_set1_ps(1.0f);
  __m256 inv = q;
  __m256 inv16 = _mm256_set1_ps(kSrFixedOne);
  if constexpr (!kInt) {
    // |c| <= max, so the exponent field is at most emax's (NaN's is all ones, and its
    // lanes give NaN whatever the step).
    __m256i e = _mm256_and_si256(_mm256_castps_si256(c), _mm256_set1_epi32(0x7F800000));
    e = _mm256_max_epi32(e, g.lo_exp);
    q = _mm256_castsi256_ps(_mm256_sub_epi32(e, g.step_sub));
    if constexpr (kStochastic) {
      inv16 = _mm256_castsi256_ps(_mm256_sub_epi32(g.inv16_add, e));
    } else {
      inv = _mm256_castsi256_ps(_mm256_sub_epi32(g.inv_add, e));
    }
  }
  if constexpr (kStochastic) {
    // |f| * 2^16 < 2^23 (|f| < 2^(m+1) <= 8 for FP8, <= 127 for int), so the truncation
    // to int32 and the sum with r < 2^16 cannot overflow; the arithmetic shift floors.
    const __m256i fixed = _mm256_cvttps_epi32(_mm256_mul_ps(c, inv16));
    const __m256i t = _mm256_srai_epi32(_mm256_add_epi32(fixed, r), 16);
    // t * q is exact; adding c - c (0, or NaN in NaN lanes) keeps NaN.
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), q, _mm256_sub_ps(c, c));
  } else if constexpr (kInt) {
    return _mm256_round_ps(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  } else {
    return _mm256_mul_ps(
        _mm256_round_ps(_mm256_mul_ps(c, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), q);
  }
}

// Fake-quantizes 32 elements xs[0, 32) into the sinks' Lanes (quant_core.h): t = Q(v),
// the element value in units of the scale, add = 0; ti is not set. Per-element runs read
// inv and scale at q (offset to the block).
template <bool kStochastic, ElementKind kKind, bool kPerElement>
__attribute__((always_inline)) inline void emulatedBlock(const float* xs, const RunParams& q,
                                                         __m256i w0, __m256i w1, const GridLanes& g,
                                                         Lanes& l) {
  for (int k = 0; k < 4; ++k) {
    l.x[k] = _mm256_loadu_ps(xs + 8 * k);
    l.inv[k] = kPerElement ? _mm256_loadu_ps(q.inv + 8 * k) : _mm256_broadcast_ss(q.inv);
    l.scale[k] = kPerElement ? _mm256_loadu_ps(q.scale + 8 * k) : _mm256_broadcast_ss(q.scale);
    l.add[k] = _mm256_setzero_ps();
    const __m256i r = kStochastic ? noiseLanes(w0, w1, k) : _mm256_setzero_si256();
    l.t[k] = roundElementLanes<kStochastic, kKind>(_mm256_mul_ps(l.x[k], l.inv[k]), g, r);
  }
}

// Stochastic rounding of `groups` consecutive groups of `blocks` full 32-element blocks
// each, x[0, 32 * blocks * groups), element indices from `index` (a multiple of 32), with
// the noise made in registers by VAES, as stochasticBlocksVaes (quant_core.h) does for
// the int grid: the out-of-order core overlaps the two ARS evaluations per 32 elements
// with the rounding of earlier blocks. Broadcast runs: group j has the scale scale[j]
// (inv[j]); per-element runs (groups == 1): one per element. Callers must check
// srNoiseIsaSupported(SrNoiseIsa::kVaes).
template <ElementKind kKind, bool kPerElement, typename Sink>
__attribute__((target("aes,vaes"))) void emulatedBlocksVaes(const float* x, int64_t index,
                                                            int64_t groups, int64_t blocks,
                                                            const float* inv, const float* scale,
                                                            const GridLanes& g,
                                                            const SrNoise& noise, Sink& sink) {
  __m256i keys[kSrArsRounds + 1];
  for (int r = 0; r <= kSrArsRounds; ++r) {
    keys[r] = _mm256_broadcastsi128_si256(
        _mm_load_si128(reinterpret_cast<const __m128i*>(noise.roundKey(r).data())));
  }
  // The 32 elements from e (a multiple of 32) take their words from ARS blocks e/8 ..
  // e/8 + 3 (sr_noise.h), two per evaluation.
  const int64_t off = int64_t(noise.offset());
  const int64_t c0 = index / 8;
  __m256i ctr = _mm256_set_epi64x(off, c0 + 1, off, c0);
  const __m256i two = _mm256_set_epi64x(0, 2, 0, 2);
  Sink local = sink;  // in registers (see emulatedRun)
  for (int64_t j = 0; j < groups; ++j) {
    const RunParams q{inv + j, nullptr, scale + j};
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t at = 32 * (j * blocks + b);
      const __m256i w0 = arsVaes(ctr, keys);
      ctr = _mm256_add_epi64(ctr, two);
      const __m256i w1 = arsVaes(ctr, keys);
      ctr = _mm256_add_epi64(ctr, two);
      Lanes l;
      if constexpr (kPerElement) {
        emulatedBlock<true, kKind, true>(x + at, RunParams{inv + at, nullptr, scale + at}, w0, w1, g,
                                        l);
      } else {
        emulatedBlock<true, kKind, false>(x + at, q, w0, w1, g, l);
      }
      local(index + at, l, 32);
    }
  }
  sink = local;
}

// Fake-quantizes the run x[0, len) (element indices index .. index+len-1) of one group,
// or of one scale per element, and hands each 32 elements to sink(first_index, lanes,
// valid), as processRun (quant_core.h) does for the int grid. Stochastic runs are split
// at multiples of 32 element indices so that each full block takes its 16 noise words
// from consecutive ARS blocks (made in registers with VAES, else read from the SrState
// buffer); the ragged head and tail go through a zero-padded copy (its padding lanes give
// t = 0) with words assembled per element.
template <bool kStochastic, ElementKind kKind, bool kPerElement, typename Sink>
__attribute__((always_inline)) inline void emulatedGroupRun(const float* x, int64_t index,
                                                            int64_t len, const RunParams& p,
                                                            const GridLanes& g, SrState* sr,
                                                            Sink& sink) {
  // The parameters in locals: the sink's stores could alias p (see emulatedRun).
  const RunParams pl{p.inv, nullptr, p.scale};
  auto block = [&](const float* xs, const RunParams& q, int64_t at, int valid,
                   const uint32_t* w16) {
    __m256i w0 = _mm256_setzero_si256(), w1 = _mm256_setzero_si256();
    if constexpr (kStochastic) {
      const uint32_t* w = w16 != nullptr ? w16 : sr->at(index + at);
      w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w));
      w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 8));
    }
    Lanes l;
    emulatedBlock<kStochastic, kKind, kPerElement>(xs, q, w0, w1, g, l);
    sink(index + at, l, valid);
  };
  auto partial = [&](int64_t at, int n) {
    alignas(32) float xb[32] = {};
    std::memcpy(xb, x + at, sizeof(float) * n);
    // Element j of the block takes the same place in the words as in a full block.
    alignas(32) uint32_t wb[16] = {};
    if constexpr (kStochastic) partialNoiseWords(*sr, index + at, n, wb);
    if constexpr (kPerElement) {
      alignas(32) float ib[32] = {}, sb[32] = {};
      std::memcpy(ib, pl.inv + at, sizeof(float) * n);
      std::memcpy(sb, pl.scale + at, sizeof(float) * n);
      block(xb, RunParams{ib, nullptr, sb}, at, n, wb);
    } else {
      block(xb, pl, at, n, wb);
    }
  };
  int64_t pos = 0;
  if constexpr (kStochastic) {
    const int64_t head = std::min<int64_t>(len, (32 - (index & 31)) & 31);
    if (head > 0) partial(0, int(head));
    pos = head;
    if (sr->noise().isa() == SrNoiseIsa::kVaes && len - pos >= 32) {
      const int64_t blocks = (len - pos) / 32;
      const int64_t step = kPerElement ? pos : 0;
      emulatedBlocksVaes<kKind, kPerElement>(x + pos, index + pos, 1, blocks, pl.inv + step,
                                            pl.scale + step, g, sr->noise(), sink);
      pos += 32 * blocks;
    }
  }
  for (; pos + 32 <= len; pos += 32) {
    if constexpr (kPerElement) {
      block(x + pos, RunParams{pl.inv + pos, nullptr, pl.scale + pos}, pos, 32, nullptr);
    } else {
      block(x + pos, pl, pos, 32, nullptr);
    }
  }
  if (pos < len) partial(pos, int(len - pos));
}

// A run as QuantPlan::forEachRun gives it: one group's, one scale per element, or
// (RunParams::row_len > 0) consecutive rows or blocks with a scale each, whose lengths are
// multiples of 32 from a multiple of 32 (so every 32 elements are a full, aligned block:
// MX blocks take this tight loop).
template <bool kStochastic, ElementKind kKind, bool kPerElement, typename Sink>
void emulatedRun(const float* x, int64_t index, int64_t len, const RunParams& p, const GridLanes& g,
                 SrState* sr, Sink& sink) {
  // A local copy of the sink keeps its members (the output pointer) in registers, as in
  // stochasticBlocksVaes (quant_core.h).
  Sink local = sink;
  if constexpr (!kPerElement) {
    if (p.row_len > 0) {
      // Locals, not p's members: the sink's stores could alias p, and the compiler would
      // reload them for every group.
      const float* inv = p.inv;
      const float* scale = p.scale;
      const int64_t row_len = p.row_len;
      if constexpr (kStochastic) {
        if (sr->noise().isa() == SrNoiseIsa::kVaes) {
          emulatedBlocksVaes<kKind, false>(x, index, len / row_len, row_len / 32, inv, scale, g,
                                          sr->noise(), local);
          sink = local;
          return;
        }
      }
      for (int64_t j = 0, at = 0; at < len; ++j, at += row_len) {
        const RunParams q{inv + j, nullptr, scale + j};
        for (int64_t pos = at; pos < at + row_len; pos += 32) {
          __m256i w0 = _mm256_setzero_si256(), w1 = _mm256_setzero_si256();
          if constexpr (kStochastic) {
            const uint32_t* w = sr->at(index + pos);
            w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w));
            w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 8));
          }
          Lanes l;
          emulatedBlock<kStochastic, kKind, false>(x + pos, q, w0, w1, g, l);
          local(index + pos, l, 32);
        }
      }
      sink = local;
      return;
    }
  }
  emulatedGroupRun<kStochastic, kKind, kPerElement>(x, index, len, p, g, sr, local);
  sink = local;
}

// Dispatches emulatedRun on the rounding mode, the element kind and the parameter layout.
template <typename Sink>
void emulatedRunAny(bool stochastic, ElementKind kind, bool per_element, const float* x,
                    int64_t index, int64_t len, const RunParams& p, const GridLanes& g, SrState* sr,
                    Sink& sink) {
  auto run = [&]<bool kStochastic, ElementKind kKind>() {
    if (per_element) {
      emulatedRun<kStochastic, kKind, true>(x, index, len, p, g, sr, sink);
    } else {
      emulatedRun<kStochastic, kKind, false>(x, index, len, p, g, sr, sink);
    }
  };
  auto element = [&]<bool kStochastic>() {
    switch (kind) {
      case ElementKind::kFloat: return run.template operator()<kStochastic, ElementKind::kFloat>();
      case ElementKind::kInt: return run.template operator()<kStochastic, ElementKind::kInt>();
      case ElementKind::kBf16: return run.template operator()<kStochastic, ElementKind::kBf16>();
    }
  };
  stochastic ? element.template operator()<true>() : element.template operator()<false>();
}

}  // namespace pgq::kernels::detail
