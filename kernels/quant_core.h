#pragma once
// Internal to kernels/: the quantizer arithmetic that quantize(), quantStats() and the
// clip search share, so that the statistics the profiler reports describe exactly the
// arithmetic that runs. Not part of the public API.
//
// For one element x of a group with scale s (inv = 1/s), zero point z and storage
// offset o, the stored integer is
//     t = clamp(round(x * inv) + (z + o), lo + o, hi + o)
// where round is ties-to-even (kNearest) or floor(v + u), u uniform in [0,1) from
// Philox (kStochastic), [lo, hi] is the format's grid, NaN is quantized as 0 and +-Inf
// saturate. The dequantized value is s * (t - z - o). Every rounding mode is set
// explicitly on the instruction, so MXCSR does not matter.
#include <immintrin.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "kernels/philox.h"
#include "kernels/quant_format.h"
#include "kernels/quantize.h"

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

// Eight lanes of the stored integer t (as a float; see the header comment).
template <bool kStochastic>
inline __m256 quantizeLanes(__m256 x, __m256 inv, __m256 add, __m256 lo, __m256 hi, __m256 u) {
  __m256 v = _mm256_mul_ps(x, inv);
  v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));  // NaN -> 0
  if constexpr (kStochastic) {
    v = _mm256_floor_ps(_mm256_add_ps(v, u));
  } else {
    v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  return _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(v, add), lo), hi);
}

// The uniforms of stochastic rounding for element indices (philox.h), generated
// kGroups * 64 at a time. Walks consume indices in increasing order, so little is wasted.
class SrState {
 public:
  static constexpr int kGroups = 4;
  static constexpr int64_t kSpan = 64 * kGroups;

  explicit SrState(SrStream stream) : gen_(stream.seed, stream.offset) {}
  // Valid for the 32 elements from `index` as long as they lie in one 64-element group
  // (the buffer is padded so a 32-wide load never leaves it).
  const float* at(int64_t index) {
    const int64_t base = index & ~(kSpan - 1);
    if (base != base_) {
      gen_.uniforms<kGroups>(uint64_t(base >> 6), buf_);
      base_ = base;
    }
    return buf_ + (index - base);
  }

 private:
  PhiloxAvx2 gen_;
  int64_t base_ = -1;
  alignas(32) float buf_[kSpan + 32] = {};
};

// The parameters of a run: single values (broadcast) or one per element of the run.
struct RunParams {
  const float* inv;
  const float* add;
  const float* scale;
};

// 32 elements as the sinks see them.
struct Lanes {
  __m256 x[4];
  __m256 inv[4];
  __m256 add[4];
  __m256 scale[4];
  __m256 t[4];
};

// Lanes [0, valid - 8*k) of vector k are real elements; the rest is padding.
inline __m256 validMask(int valid, int k) {
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(valid - 8 * k),
                                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

// Quantizes the run x[0, len) (element indices index .. index+len-1) and hands each
// 32 elements to sink(first_index, lanes, valid). Stochastic runs are split at
// multiples of 32 element indices so that each 32-wide block draws its uniforms from one
// Philox group; the ragged head and tail go through a zero-padded copy with the same
// arithmetic.
template <bool kStochastic, bool kPerElement, typename Sink>
void processRun(const float* x, int64_t index, int64_t len, RunParams p, int lo, int hi,
                SrState* sr, Sink& sink) {
  const __m256 vlo = _mm256_set1_ps(float(lo));
  const __m256 vhi = _mm256_set1_ps(float(hi));
  auto block = [&](const float* xs, const float* inv, const float* add, const float* scale,
                   int64_t at, int valid) {
    const float* u = kStochastic ? sr->at(index + at) : nullptr;
    Lanes l;
    for (int k = 0; k < 4; ++k) {
      l.x[k] = _mm256_loadu_ps(xs + 8 * k);
      l.inv[k] = kPerElement ? _mm256_loadu_ps(inv + 8 * k) : _mm256_broadcast_ss(inv);
      l.add[k] = kPerElement ? _mm256_loadu_ps(add + 8 * k) : _mm256_broadcast_ss(add);
      l.scale[k] = kPerElement ? _mm256_loadu_ps(scale + 8 * k) : _mm256_broadcast_ss(scale);
      __m256 uk = kStochastic ? _mm256_loadu_ps(u + 8 * k) : _mm256_setzero_ps();
      l.t[k] = quantizeLanes<kStochastic>(l.x[k], l.inv[k], l.add[k], vlo, vhi, uk);
    }
    sink(index + at, l, valid);
  };
  auto partial = [&](int64_t at, int n) {
    alignas(32) float xb[32] = {};
    alignas(32) float ib[32] = {};
    alignas(32) float ab[32] = {};
    alignas(32) float sb[32] = {};
    std::memcpy(xb, x + at, sizeof(float) * n);
    if constexpr (kPerElement) {
      std::memcpy(ib, p.inv + at, sizeof(float) * n);
      std::memcpy(ab, p.add + at, sizeof(float) * n);
      std::memcpy(sb, p.scale + at, sizeof(float) * n);
      block(xb, ib, ab, sb, at, n);
    } else {
      block(xb, p.inv, p.add, p.scale, at, n);
    }
  };
  int64_t pos = 0;
  if constexpr (kStochastic) {
    int64_t head = std::min<int64_t>(len, (32 - (index & 31)) & 31);
    if (head > 0) partial(0, int(head));
    pos = head;
  }
  for (; pos + 32 <= len; pos += 32) {
    if constexpr (kPerElement) {
      block(x + pos, p.inv + pos, p.add + pos, p.scale + pos, pos, 32);
    } else {
      block(x + pos, p.inv, p.add, p.scale, pos, 32);
    }
  }
  if (pos < len) partial(pos, int(len - pos));
}

// Dispatches processRun on the rounding mode and the parameter layout.
template <typename Sink>
void processRunAny(bool stochastic, bool per_element, const float* x, int64_t index, int64_t len,
                   RunParams p, int lo, int hi, SrState* sr, Sink& sink) {
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
  int lo() const { return lo_; }
  int hi() const { return hi_; }

  // f(index, len, RunParams, per_element) for every run of the unit.
  template <typename F>
  void forEachRun(int64_t unit, F&& f) const {
    if (chunks_per_row_ > 1) {
      int64_t row = unit / chunks_per_row_;
      int64_t c0 = (unit % chunks_per_row_) * col_chunk_;
      visitRow(row, c0, std::min(view_.cols, c0 + col_chunk_), f);
      return;
    }
    int64_t r0 = unit * rows_per_unit_;
    int64_t r1 = std::min(view_.batch * view_.rows, r0 + rows_per_unit_);
    for (int64_t row = r0; row < r1; ++row) visitRow(row, 0, view_.cols, f);
  }

 private:
  template <typename F>
  void visitRow(int64_t row, int64_t c0, int64_t c1, F& f) const {
    const int64_t base = row * view_.cols;
    if (format_.granularity == Granularity::kPerTensor) {
      f(base + c0, c1 - c0, at(0), false);
    } else if (view_.contract_along_cols) {
      if (format_.granularity == Granularity::kPerChannel) {
        f(base + c0, c1 - c0, at(row), false);
        return;
      }
      for (int64_t cs = c0; cs < c1;) {
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

  RunParams at(int64_t i) const { return {&inv_[i], &add_[i], &scale_[i]}; }

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
  int64_t units_ = 0;
  int64_t rows_per_unit_ = 1;
  int64_t chunks_per_row_ = 1;
  int64_t col_chunk_ = 0;
};

// Throws KernelError unless every scale of params is finite and >= kMinScale and every
// zero point (asymmetric) is an integer on the grid: a params buffer computed for
// another format is caught here.
void checkParamValues(const char* what, const QuantFormat& format, std::span<const float> params,
                      int64_t groups);

// Throws KernelError unless the buffers match the view and format.
void checkQuantArgs(const char* what, int64_t x_size, const OperandView& view,
                    const QuantFormat& format, int64_t params_size);

}  // namespace pgq::kernels::detail
