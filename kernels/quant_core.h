#pragma once
// Internal to kernels/: the quantizer arithmetic that quantize(), quantStats() and the
// clip search share, so that the statistics the profiler reports describe exactly the
// arithmetic that runs. Not part of the public API.
//
// For one element x of a group with scale s (inv = 1/s), zero point z, storage offset o
// and [lo, hi] the format's grid, the stored integer t is
//   round-to-nearest:    t = clamp(round(v) + (z + o), lo + o, hi + o), v = x * inv
//                        rounded to float, round = ties to even
//   stochastic rounding: t = floor((trunc(T) + r) / 2^16),
//                        T = clamp(fma(x, inv * 2^16, (z + o) * 2^16), (lo + o) * 2^16,
//                                  (hi + o) * 2^16)
// where r is the element's 16 noise bits (sr_noise.h: ARS-5 keyed by (seed, offset,
// element index)) and fma rounds (x * inv + z + o) * 2^16 once to float (as
// fma(x * 2^16, inv, ...) when inv * 2^16 overflows float, i.e. s < ~2^-112). Stochastic
// rounding thus runs in 16.16 fixed point: the stored value with 16 fraction bits
// (truncated toward zero), plus a uniform u = r / 2^16 in [0, 1), floored. It rounds up
// with probability exactly the fraction of trunc(T) / 2^16, which differs from the exact
// x * inv + z + o by less than 2^-16 (|T| < 2^24, so the float rounding error is at most
// half a unit there and cannot move trunc(T) by more than one unit away): the mean of t
// is within 2^-16 of a step of the exact value, and a 5-sigma test of the mean needs
// ~3*10^10 samples to see 2^-16.
// NaN is quantized to the zero point and +-Inf saturate; the dequantized value is
// s * (t - z - o). Every rounding is explicit on the instruction (the conversion
// truncates), so MXCSR does not matter.
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "kernels/quant_format.h"
#include "kernels/quantize.h"
#include "kernels/sr_noise.h"

namespace pgq::kernels::detail {

// One group's scale and zero point (0 when symmetric).
struct GroupParams {
  float scale = 1.0f;
  float zero_point = 0.0f;
};

// The scale and zero point that map [lo, hi], widened to contain 0, onto the grid:
// symmetric s = max(|lo|, |hi|) / qmax, asymmetric s = (hi - lo) / (2^bits - 1) and
// z = round(-lo / s); s is at least kMinScale so a zero group never divides by zero.
// Computed in double and rounded to float once.
GroupParams paramsFromRange(double lo, double hi, const QuantFormat& format);

// Eight lanes of the stored integer t by round-to-nearest (see the header comment).
inline __m256 roundNearestLanes(__m256 x, __m256 inv, __m256 add, __m256 lo, __m256 hi) {
  __m256 v = _mm256_mul_ps(x, inv);
  v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));  // NaN -> 0
  v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(v, add), lo), hi);
}

// The fixed-point constants of stochastic rounding for one group (header comment):
// T = fma(x * pre, mul, add16) with pre = 1, mul = inv * 2^16 and add16 = (z + o) * 2^16,
// so T is (x * inv + z + o) * 2^16 rounded once. If inv * 2^16 overflows (scales below
// ~2^-112), the group is prescaled instead: pre = 2^16 (x * 2^16 is exact, and an x that
// overflows there saturates either way) and mul = inv.
struct SrConstants {
  float pre = 1.0f;
  float mul = 0.0f;
  float add16 = 0.0f;
  bool prescale = false;
};

inline constexpr float kSrFixedOne = 65536.0f;  // 2^16: 16 fraction bits, 16 noise bits

// add: zero point + storage offset, an integer on the storage grid.
inline SrConstants srConstants(float inv, float add) {
  SrConstants c;
  const float mul = inv * kSrFixedOne;
  c.prescale = !(mul <= std::numeric_limits<float>::max());
  c.pre = c.prescale ? kSrFixedOne : 1.0f;
  c.mul = c.prescale ? inv : mul;
  c.add16 = add * kSrFixedOne;
  return c;
}

// Eight lanes of the stored integer t by stochastic rounding, given the 16 noise bits
// of each lane in r; lo16 and hi16 are the storage grid's ends times 2^16. With T
// clamped (|T| <= 2^24), the sum with r cannot overflow, and the arithmetic shift is a
// floor division by 2^16.
// kPrescale: some group of the run may be prescaled (pre is then applied).
template <bool kPrescale>
inline __m256i stochasticLanes(__m256 x, __m256 pre, __m256 mul, __m256 add16, __m256 lo16,
                               __m256 hi16, __m256i r) {
  x = _mm256_and_ps(x, _mm256_cmp_ps(x, x, _CMP_ORD_Q));  // NaN -> 0 -> the zero point
  if constexpr (kPrescale) x = _mm256_mul_ps(x, pre);
  __m256 v = _mm256_fmadd_ps(x, mul, add16);
  v = _mm256_min_ps(_mm256_max_ps(v, lo16), hi16);
  const __m256i fixed = _mm256_cvttps_epi32(v);  // truncates toward zero
  return _mm256_srai_epi32(_mm256_add_epi32(fixed, r), 16);
}

// The noise words of stochastic rounding for element indices (sr_noise.h), generated
// kSpan elements at a time. Walks consume indices in increasing order, so little is wasted.
// With VAES, processRun generates the words of full 32-element blocks in registers
// instead (interleaved with the quantizer arithmetic, which hides most of their cost) and
// uses this buffer for ragged heads and tails only.
class SrState {
 public:
  static constexpr int64_t kSpan = 256;

  // isa: for tests; kernels use the fastest implementation.
  explicit SrState(SrStream stream, SrNoiseIsa isa = srNoiseBestIsa())
      : noise_(stream.seed, stream.offset, isa) {}
  // The 16 words of the 32 elements from `index`, a multiple of 32: element index + j
  // takes the low 16 bits of word j % 8 + 8 * (j / 16) for (j / 8) even, the high
  // 16 bits otherwise.
  const uint32_t* at(int64_t index) {
    const int64_t base = index & ~(kSpan - 1);
    if (base != base_) {
      noise_.fill(uint64_t(base / 8), int(kSpan / 8), buf_);
      base_ = base;
    }
    return buf_ + (index - base) / 2;
  }
  // The 16 noise bits of element e.
  uint32_t bits16(int64_t e) {
    const int64_t j = e & 31;
    const uint32_t word = at(e - j)[j % 8 + 8 * (j / 16)];
    return (j / 8) % 2 == 0 ? (word & 0xFFFFu) : (word >> 16);
  }
  const SrNoise& noise() const { return noise_; }

 private:
  SrNoise noise_;
  int64_t base_ = -1;
  alignas(32) uint32_t buf_[kSpan / 2] = {};
};

// The 16 noise words of a ragged block of n < 32 elements from element `first`, each
// element's 16 bits in the place it has in a full block (SrState::at's order), the rest 0.
inline void partialNoiseWords(SrState& sr, int64_t first, int n, uint32_t* words) {
  for (int j = 0; j < n; ++j) words[j % 8 + 8 * (j / 16)] |= sr.bits16(first + j) << (16 * ((j / 8) % 2));
}

// The parameters of a run: single values (broadcast) or one per element of the run.
// The sr_* arrays (SrConstants, one per element) are needed by per-element stochastic
// runs only; broadcast runs derive the constants from inv and add. sr_pre is null unless
// some group of the plan is prescaled.
// row_len > 0 (broadcast runs only): the run is len / row_len consecutive rows (or blocks
// of a row) of row_len elements, a multiple of 32, starting at a multiple of 32; row j
// has the parameters inv[j], add[j], scale[j]. One call then covers many short rows
// (e.g. the rows of an activation with per-row scales), which saves a call per row.
struct RunParams {
  const float* inv;
  const float* add;
  const float* scale;
  const float* sr_pre = nullptr;
  const float* sr_mul = nullptr;
  const float* sr_add16 = nullptr;
  int64_t row_len = 0;
};

// 32 elements as the sinks see them: t is the stored integer as a float, ti the same
// as an int32 (whichever a sink does not use is optimized away).
struct Lanes {
  __m256 x[4];
  __m256 inv[4];
  __m256 add[4];
  __m256 scale[4];
  __m256 t[4];
  __m256i ti[4];
};

// Lanes [0, valid - 8*k) of vector k are real elements; the rest is padding.
inline __m256 validMask(int valid, int k) {
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(valid - 8 * k),
                                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

// The noise of lanes 8k .. 8k+7 of a 32-element block from its 16 words w0, w1
// (SrState::at order): the low halves of w0, its high halves, then the same of w1.
// Extracting each vector just before its use keeps two registers live instead of four.
inline __m256i noiseLanes(__m256i w0, __m256i w1, int k) {
  const __m256i w = k < 2 ? w0 : w1;
  return k % 2 == 0 ? _mm256_and_si256(w, _mm256_set1_epi32(0xFFFF)) : _mm256_srli_epi32(w, 16);
}

// Quantizes 32 elements xs[0, 32) with parameters q (offset to the block when per
// element; run_sr holds the constants of a broadcast stochastic run) and noise words
// w0, w1 (stochastic only).
template <bool kStochastic, bool kPerElement, bool kPrescale>
__attribute__((always_inline)) inline void quantizeBlock(const float* xs, const RunParams& q,
                                                         const SrConstants& run_sr, __m256i w0,
                                                         __m256i w1, __m256 vlo, __m256 vhi,
                                                         Lanes& l) {
  const __m256 lo16 = _mm256_mul_ps(vlo, _mm256_set1_ps(kSrFixedOne));
  const __m256 hi16 = _mm256_mul_ps(vhi, _mm256_set1_ps(kSrFixedOne));
  for (int k = 0; k < 4; ++k) {
    l.x[k] = _mm256_loadu_ps(xs + 8 * k);
    l.inv[k] = kPerElement ? _mm256_loadu_ps(q.inv + 8 * k) : _mm256_broadcast_ss(q.inv);
    l.add[k] = kPerElement ? _mm256_loadu_ps(q.add + 8 * k) : _mm256_broadcast_ss(q.add);
    l.scale[k] = kPerElement ? _mm256_loadu_ps(q.scale + 8 * k) : _mm256_broadcast_ss(q.scale);
    if constexpr (kStochastic) {
      const __m256 pre = !kPrescale    ? _mm256_setzero_ps()
                         : kPerElement ? _mm256_loadu_ps(q.sr_pre + 8 * k)
                                       : _mm256_set1_ps(run_sr.pre);
      const __m256 mul =
          kPerElement ? _mm256_loadu_ps(q.sr_mul + 8 * k) : _mm256_set1_ps(run_sr.mul);
      const __m256 add16 =
          kPerElement ? _mm256_loadu_ps(q.sr_add16 + 8 * k) : _mm256_set1_ps(run_sr.add16);
      l.ti[k] =
          stochasticLanes<kPrescale>(l.x[k], pre, mul, add16, lo16, hi16, noiseLanes(w0, w1, k));
      l.t[k] = _mm256_cvtepi32_ps(l.ti[k]);
    } else {
      l.t[k] = roundNearestLanes(l.x[k], l.inv[k], l.add[k], vlo, vhi);
      l.ti[k] = _mm256_cvttps_epi32(l.t[k]);
    }
  }
}

// offsetParams of a per-element run.
template <bool kStochastic>
inline RunParams offsetCopy(const RunParams& p, int64_t at) {
  RunParams q = p;
  q.inv += at;
  q.add += at;
  q.scale += at;
  if constexpr (kStochastic) {
    if (q.sr_pre != nullptr) q.sr_pre += at;
    q.sr_mul += at;
    q.sr_add16 += at;
  }
  return q;
}

// The parameters of a run from element `at` on: p itself when broadcast (a reference:
// copying a RunParams that the caller has just written costs a store-forwarding stall).
template <bool kStochastic, bool kPerElement>
inline decltype(auto) offsetParams(const RunParams& p, int64_t at) {
  if constexpr (!kPerElement) {
    return (p);
  } else {
    return offsetCopy<kStochastic>(p, at);
  }
}

// Stochastic rounding of `rows` consecutive rows of `blocks` full 32-element blocks each,
// x[0, 32 * blocks * rows), element indices from `index` (a multiple of 32), with the
// noise made in registers by VAES: two ARS evaluations (four blocks of 128 bits) per 32
// elements. The out-of-order core overlaps their latency with the quantization of
// earlier blocks. Broadcast runs: row j has the parameters p.inv[j], p.add[j],
// p.scale[j], and every row must have SrConstants::prescale == kPrescale. Per-element
// runs: rows == 1.
template <bool kPerElement, bool kPrescale, typename Sink>
__attribute__((target("aes,vaes"))) void stochasticBlocksVaes(const float* x, int64_t index,
                                                              int64_t rows, int64_t blocks,
                                                              const RunParams& p, int lo, int hi,
                                                              SrState& sr, Sink& sink) {
  const SrNoise& noise = sr.noise();
  __m256i keys[kSrArsRounds + 1];
  for (int r = 0; r <= kSrArsRounds; ++r) {
    keys[r] = _mm256_broadcastsi128_si256(
        _mm_load_si128(reinterpret_cast<const __m128i*>(noise.roundKey(r).data())));
  }
  // Element e draws from ARS block 2 * (e / 16) + (e % 8) / 4: the 32 elements from e
  // use blocks e/8 .. e/8 + 3, and the rows are consecutive.
  const int64_t off = int64_t(noise.offset());
  const int64_t c0 = index / 8;
  __m256i ctr = _mm256_set_epi64x(off, c0 + 1, off, c0);
  const __m256i two = _mm256_set_epi64x(0, 2, 0, 2);
  const __m256 vlo = _mm256_set1_ps(float(lo));
  const __m256 vhi = _mm256_set1_ps(float(hi));
  // A local copy of the sink: its address does not escape, so its members (e.g. the
  // output pointer) stay in registers instead of being reloaded after every store.
  Sink local = sink;
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t first = 32 * blocks * row;
    RunParams rp = p;
    SrConstants run_sr;
    if constexpr (!kPerElement) {
      rp.inv += row;
      rp.add += row;
      rp.scale += row;
      run_sr = srConstants(*rp.inv, *rp.add);
    }
    for (int64_t b = 0; b < blocks; ++b) {
      const __m256i w0 = arsVaes(ctr, keys);
      ctr = _mm256_add_epi64(ctr, two);
      const __m256i w1 = arsVaes(ctr, keys);
      ctr = _mm256_add_epi64(ctr, two);
      Lanes l;
      quantizeBlock<true, kPerElement, kPrescale>(x + first + 32 * b,
                                                  offsetParams<true, kPerElement>(rp, 32 * b),
                                                  run_sr, w0, w1, vlo, vhi, l);
      local(index + first + 32 * b, l, 32);
    }
  }
  sink = local;
}

// Quantizes the run x[0, len) (element indices index .. index+len-1) and hands each
// 32 elements to sink(first_index, lanes, valid). Stochastic runs are split at
// multiples of 32 element indices so that each 32-wide block takes its noise from 16
// consecutive words; the ragged head and tail go through a zero-padded copy with the
// same arithmetic.
template <bool kStochastic, bool kPerElement, typename Sink>
void processRun(const float* x, int64_t index, int64_t len, const RunParams& p, int lo, int hi,
                SrState* sr, Sink& sink) {
  if constexpr (!kPerElement) {
    if (p.row_len > 0) {
      // Rows at a time: with VAES, maximal stretches of rows that agree on prescale in one
      // call; otherwise (and for the rows in between) one row at a time.
      const int64_t rows = len / p.row_len;
      auto one_row = [&](int64_t r) {
        const RunParams q{p.inv + r, p.add + r, p.scale + r};
        processRun<kStochastic, false>(x + r * p.row_len, index + r * p.row_len, p.row_len, q,
                                       lo, hi, sr, sink);
      };
      int64_t r = 0;
      if constexpr (kStochastic) {
        if (sr->noise().isa() == SrNoiseIsa::kVaes) {
          while (r < rows) {
            int64_t e = r;
            while (e < rows && !srConstants(p.inv[e], p.add[e]).prescale) ++e;
            if (e > r) {
              const RunParams q{p.inv + r, p.add + r, p.scale + r};
              stochasticBlocksVaes<false, false>(x + r * p.row_len, index + r * p.row_len, e - r,
                                                 p.row_len / 32, q, lo, hi, *sr, sink);
            }
            if (e < rows) one_row(e++);
            r = e;
          }
        }
      }
      for (; r < rows; ++r) one_row(r);
      return;
    }
  }
  const __m256 vlo = _mm256_set1_ps(float(lo));
  const __m256 vhi = _mm256_set1_ps(float(hi));
  // Broadcast stochastic runs: one set of fixed-point constants for the whole run.
  SrConstants run_sr;
  if constexpr (kStochastic && !kPerElement) run_sr = srConstants(*p.inv, *p.add);
  const bool prescale = kPerElement ? p.sr_pre != nullptr : run_sr.prescale;

  auto body = [&]<bool kPrescale>() {
    // A block of `valid` elements from xs (zero-padded to 32), element index + at on.
    // w16: the noise words of a partial block, assembled per element; null for full
    // blocks, which start at a multiple of 32 and read the words from the buffer.
    auto block = [&](const float* xs, const RunParams& q, int64_t at, int valid,
                     const uint32_t* w16) {
      __m256i w0 = _mm256_setzero_si256(), w1 = _mm256_setzero_si256();
      if constexpr (kStochastic) {
        const uint32_t* w = w16 != nullptr ? w16 : sr->at(index + at);
        w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w));
        w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 8));
      }
      Lanes l;
      quantizeBlock<kStochastic, kPerElement, kPrescale>(xs, q, run_sr, w0, w1, vlo, vhi, l);
      sink(index + at, l, valid);
    };
    auto partial = [&](int64_t at, int n) {
      alignas(32) float xb[32] = {};
      std::memcpy(xb, x + at, sizeof(float) * n);
      // Element j of the block takes the same place in the words as in a full block.
      alignas(32) uint32_t wb[16] = {};
      if constexpr (kStochastic) partialNoiseWords(*sr, index + at, n, wb);
      if constexpr (kPerElement) {
        alignas(32) float ib[32] = {}, ab[32] = {}, sb[32] = {};
        alignas(32) float eb[32] = {}, mb[32] = {}, db[32] = {};
        const RunParams src = offsetParams<kStochastic, kPerElement>(p, at);
        RunParams q = p;
        q.inv = ib;
        q.add = ab;
        q.scale = sb;
        std::memcpy(ib, src.inv, sizeof(float) * n);
        std::memcpy(ab, src.add, sizeof(float) * n);
        std::memcpy(sb, src.scale, sizeof(float) * n);
        if constexpr (kStochastic) {
          if (src.sr_pre != nullptr) {
            q.sr_pre = eb;
            std::memcpy(eb, src.sr_pre, sizeof(float) * n);
          }
          q.sr_mul = mb;
          q.sr_add16 = db;
          std::memcpy(mb, src.sr_mul, sizeof(float) * n);
          std::memcpy(db, src.sr_add16, sizeof(float) * n);
        }
        block(xb, q, at, n, wb);
      } else {
        block(xb, p, at, n, wb);
      }
    };
    int64_t pos = 0;
    if constexpr (kStochastic) {
      int64_t head = std::min<int64_t>(len, (32 - (index & 31)) & 31);
      if (head > 0) partial(0, int(head));
      pos = head;
      if (sr->noise().isa() == SrNoiseIsa::kVaes && len - pos >= 32) {
        const int64_t blocks = (len - pos) / 32;
        stochasticBlocksVaes<kPerElement, kPrescale>(
            x + pos, index + pos, 1, blocks, offsetParams<kStochastic, kPerElement>(p, pos), lo,
            hi, *sr, sink);
        pos += 32 * blocks;
      }
    }
    for (; pos + 32 <= len; pos += 32) {
      block(x + pos, offsetParams<kStochastic, kPerElement>(p, pos), pos, 32, nullptr);
    }
    if (pos < len) partial(pos, int(len - pos));
  };
  if (kStochastic && prescale) {
    body.template operator()<true>();
  } else {
    body.template operator()<false>();
  }
}

// Dispatches processRun on the rounding mode and the parameter layout.
template <typename Sink>
void processRunAny(bool stochastic, bool per_element, const float* x, int64_t index, int64_t len,
                   const RunParams& p, int lo, int hi, SrState* sr, Sink& sink) {
  if (stochastic && per_element) {
    processRun<true, true>(x, index, len, p, lo, hi, sr, sink);
  } else if (stochastic) {
    processRun<true, false>(x, index, len, p, lo, hi, sr, sink);
  } else if (per_element) {
    processRun<false, true>(x, index, len, p, lo, hi, sr, sink);
  } else {
    processRun<false, false>(x, index, len, p, lo, hi, sr, sink);
  }
}

// How a quantization pass walks a tensor. The tensor is cut into work units of about
// kUnitElements elements (whole rows, or column chunks of one long row) that depend only
// on the view, so per-unit partial sums combined in unit order give the same result for
// any thread count. Within a unit, the walk yields runs: contiguous element ranges of
// one row whose parameters are either one group's (a row of A [M,K], a block of it, or
// the whole tensor) or one per column (a row of B [K,N] with per-column scales).
class QuantPlan {
 public:
  static constexpr int64_t kUnitElements = 16384;

  // params: the caller's buffer (quant_format.h layout); storage_offset: 0 for the
  // grid domain (statistics), storageOffset(format, side) for stored bytes.
  QuantPlan(const OperandView& view, const QuantFormat& format, std::span<const float> params,
            int storage_offset);

  int64_t units() const { return units_; }
  // The run of this plan at the place of `p`, a run of `other`: a plan of the same view
  // and group layout (formats that differ only in bits or rounding), whose groups sit
  // where this plan's do.
  RunParams sameRunAs(const RunParams& p, const QuantPlan& other) const {
    RunParams q = at(p.inv - other.inv_.data());
    q.row_len = p.row_len;
    return q;
  }
  int lo() const { return lo_; }
  int hi() const { return hi_; }

  // f(index, len, RunParams, per_element) for every run of the unit. With rows_at_once,
  // the rows of a unit with per-row groups may come as one run with RunParams::row_len
  // (for callers that hand the runs to processRun, which understands it). With
  // blocks_at_once, so may consecutive full blocks with per-block groups along the rows
  // (all of a unit's when blocks tile the rows), when blocks and rows are multiples of 32
  // elements (the emulated formats' runs use it; quantize() does not).
  template <typename F>
  void forEachRun(int64_t unit, F&& f, bool rows_at_once = false,
                  bool blocks_at_once = false) const {
    if (chunks_per_row_ > 1) {
      int64_t row = unit / chunks_per_row_;
      int64_t c0 = (unit % chunks_per_row_) * col_chunk_;
      visitRow(row, c0, std::min(view_.cols, c0 + col_chunk_), f, blocks_at_once);
      return;
    }
    int64_t r0 = unit * rows_per_unit_;
    int64_t r1 = std::min(view_.batch * view_.rows, r0 + rows_per_unit_);
    if (format_.granularity == Granularity::kPerTensor) {
      // One group: the unit is one contiguous run.
      f(r0 * view_.cols, (r1 - r0) * view_.cols, at(0), false);
      return;
    }
    if (rows_at_once && rows_at_once_) {
      RunParams p = at(r0);
      p.row_len = view_.cols;
      f(r0 * view_.cols, (r1 - r0) * view_.cols, p, false);
      return;
    }
    if (blocks_at_once && blocks_at_once_) {
      RunParams p = at(r0 * blocks_);
      p.row_len = format_.block;
      f(r0 * view_.cols, (r1 - r0) * view_.cols, p, false);
      return;
    }
    for (int64_t row = r0; row < r1; ++row) visitRow(row, 0, view_.cols, f, blocks_at_once);
  }

 private:
  template <typename F>
  void visitRow(int64_t row, int64_t c0, int64_t c1, F& f, bool blocks_at_once) const {
    const int64_t base = row * view_.cols;
    if (format_.granularity == Granularity::kPerTensor) {
      f(base + c0, c1 - c0, at(0), false);
    } else if (view_.contract_along_cols) {
      if (format_.granularity == Granularity::kPerChannel) {
        f(base + c0, c1 - c0, at(row), false);
        return;
      }
      int64_t cs = c0;
      if (blocks_at_once && format_.block % 32 == 0 && view_.cols % 32 == 0) {
        // The full blocks of [cs, c1) in one run, when cs is a block boundary (a column
        // chunk of a long row may start inside a block).
        const int64_t full = (c1 - cs) / format_.block;
        if (cs % format_.block == 0 && full > 1) {
          RunParams p = at(row * blocks_ + cs / format_.block);
          p.row_len = format_.block;
          f(base + cs, full * format_.block, p, false);
          cs += full * format_.block;
        }
      }
      for (; cs < c1;) {
        int64_t j = cs / format_.block;
        int64_t ce = std::min(c1, (j + 1) * format_.block);
        f(base + cs, ce - cs, at(row * blocks_ + j), false);
        cs = ce;
      }
    } else {
      int64_t b = row / view_.rows;
      int64_t j = (row % view_.rows) /
                  (format_.granularity == Granularity::kPerBlock ? format_.block : view_.rows);
      f(base + c0, c1 - c0, at((b * blocks_ + j) * view_.cols + c0), true);
    }
  }

  RunParams at(int64_t i) const {
    RunParams p{&inv_[i], &add_[i], &scale_[i]};
    if (!sr_mul_.empty()) {
      if (!sr_pre_.empty()) p.sr_pre = &sr_pre_[i];
      p.sr_mul = &sr_mul_[i];
      p.sr_add16 = &sr_add16_[i];
    }
    return p;
  }

  OperandView view_;
  QuantFormat format_;
  int64_t blocks_ = 1;
  int lo_ = 0;
  int hi_ = 0;
  // 1/scale, zero point + storage offset, and scale per group, in walk order: the
  // group order of quant_format.h, except that per-column groups of a view with K
  // along the rows are stored [batch][block][column].
  std::vector<float> inv_;
  std::vector<float> add_;
  std::vector<float> scale_;
  // Stochastic rounding only: SrConstants per group, in walk order (sr_pre_ stays empty
  // unless some group is prescaled).
  std::vector<float> sr_pre_;
  std::vector<float> sr_mul_;
  std::vector<float> sr_add16_;
  int64_t units_ = 0;
  // Per-row groups (A [M,K] per channel) on rows of a multiple of 32 elements: a unit's
  // rows go out as one run with row_len (RunParams).
  bool rows_at_once_ = false;
  // Per-block groups along rows that blocks of a multiple of 32 elements tile: a unit's
  // blocks go out as one run with row_len = block (for forEachRun's blocks_at_once).
  bool blocks_at_once_ = false;
  int64_t rows_per_unit_ = 1;
  int64_t chunks_per_row_ = 1;
  int64_t col_chunk_ = 0;
};

// Per-group ranges [mn[g], mx[g]] of the finite values, widened to contain 0 (group order
// of quant_format.h). Parallel over rows or column chunks; the result does not depend on
// the thread count.
void groupRanges(const float* x, const OperandView& view, const QuantFormat& format,
                 std::vector<float>& mn, std::vector<float>& mx);

// Folds the finite values of the rows of x [rows, cols] into per-column ranges mn[0, cols),
// mx[0, cols) (which start at 0 or hold earlier rows' ranges), as groupRanges folds a
// per-channel operand with K along the rows; serial. Min and max are exact, so folding
// the rows in parts gives groupRanges' result.
void foldColumnRanges(const float* x, int64_t rows, int64_t cols, const QuantFormat& format, float* mn, float* mx);

// Rows [r0, r1) of quantizeDynamic's one-pass path (scales along the rows of x [rows,
// cols], per channel or per block, no clipping), rounded to nearest, serial: the
// scales go to params (`groups` of them, zero points after), the stored integers to
// out (u8 for kLhs, s8 for kRhs). Bit for bit quantizeDynamic's result for those rows.
// row_bits, when given for a per-channel format that reads magnitudes only (symmetric),
// holds the largest magnitude bits (|x| as uint32) of each row, row_bits[r - r0]: a row
// whose bits are finite takes its range from them and is read once, by the rounding; a
// row with a NaN or Inf is ranged as without them.
void quantizeRowsNearest(const float* x, int64_t r0, int64_t r1, int64_t cols, const QuantFormat& format,
                         float* params, int64_t groups, void* out, GemmSide side,
                         const uint32_t* row_bits = nullptr);

// Throws KernelError unless every scale of params is finite and >= kMinScale and every
// zero point (asymmetric) is an integer on the grid: a params buffer computed for
// another format is caught here.
void checkParamValues(const char* what, const QuantFormat& format, std::span<const float> params,
                      int64_t groups);

// Throws KernelError unless the buffers match the view and format.
void checkQuantArgs(const char* what, int64_t x_size, const OperandView& view,
                    const QuantFormat& format, int64_t params_size);

}  // namespace pgq::kernels::detail
