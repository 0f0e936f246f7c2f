#include "kernels/quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <tuple>
#include <type_traits>

#include <omp.h>

#include "kernels/cpu_isa.h"
#include "kernels/float_quant.h"
#include "kernels/kernel_error.h"
#include "kernels/quant_clip.h"
#include "kernels/quant_core.h"
#include "kernels/vec_math512.h"

namespace pgq::kernels {
namespace detail {

GroupParams paramsFromRange(double lo, double hi, const QuantFormat& format) {
  lo = std::min(lo, 0.0);
  hi = std::max(hi, 0.0);
  GroupParams p;
  if (!format.asymmetric) {
    double qmax = double((1 << (format.bits - 1)) - 1);
    p.scale = float(std::max(std::max(-lo, hi) / qmax, double(kMinScale)));
    return p;
  }
  double levels = double((1 << format.bits) - 1);
  p.scale = float(std::max((hi - lo) / levels, double(kMinScale)));
  p.zero_point = float(std::clamp(std::nearbyint(-lo / double(p.scale)), 0.0, levels));
  return p;
}

void checkParamValues(const char* what, const QuantFormat& format, std::span<const float> params,
                      int64_t groups) {
  const QuantGrid grid = gridOf(format);
  for (int64_t g = 0; g < groups; ++g) {
    const float scale = params[g];
    if (!(scale >= kMinScale && scale <= std::numeric_limits<float>::max())) {
      throw KernelError::format(
          "{}: scale params[{}] = {} is not a finite number >= kMinScale (were the params "
          "computed for format {}?)",
          what, g, scale, format.toString());
    }
    if (format.asymmetric) {
      const float zero_point = params[groups + g];
      if (!(zero_point >= float(grid.lo) && zero_point <= float(grid.hi)) ||
          zero_point != std::nearbyint(zero_point)) {
        throw KernelError::format("{}: zero point params[{}] = {} is not an integer in [{}, {}]",
                                  what, groups + g, zero_point, grid.lo, grid.hi);
      }
    }
  }
}

void checkQuantArgs(const char* what, int64_t x_size, const OperandView& view,
                    const QuantFormat& format, int64_t params_size) {
  view.validate();
  checkFormat(format);
  if (x_size != view.elements()) {
    throw KernelError::format("{}: buffer has {} elements, the view {}x{}x{} needs {}", what,
                              x_size, view.batch, view.rows, view.cols, view.elements());
  }
  int64_t expected = quantParamCount(view, format);
  if (params_size != expected) {
    throw KernelError::format(
        "{}: params buffer has {} floats, format {} on view {}x{}x{} "
        "needs {}",
        what, params_size, format.toString(), view.batch, view.rows, view.cols, expected);
  }
}

QuantPlan::QuantPlan(const OperandView& view, const QuantFormat& format,
                     std::span<const float> params, int storage_offset)
    : view_(view), format_(format), blocks_(blockCount(view, format)) {
  QuantGrid grid = gridOf(format);
  lo_ = grid.lo + storage_offset;
  hi_ = grid.hi + storage_offset;
  const int64_t groups = quantGroupCount(view, format);
  inv_.resize(groups);
  add_.resize(groups);
  scale_.resize(groups);
  // Per-column groups of a view with K along the rows are walked [batch][block][column].
  const bool transpose = !view.contract_along_cols && format.granularity == Granularity::kPerBlock;
  checkParamValues("quantize", format, params, groups);
  auto place = [&](int64_t g, int64_t slot) {
    const float scale = params[g];
    const float zero_point = format.asymmetric ? params[groups + g] : 0.0f;
    inv_[slot] = 1.0f / scale;
    add_[slot] = zero_point + float(storage_offset);
    scale_[slot] = scale;
  };
  if (transpose) {
    // Group (b * cols + c) * blocks + j goes to slot (b * blocks + j) * cols + c, written
    // in slot order (with 32-row blocks, integer divisions per group or writes a row
    // apart cost more than the rest of a quantization).
    for (int64_t b = 0; b < view.batch; ++b) {
      for (int64_t j = 0; j < blocks_; ++j) {
        for (int64_t c = 0; c < view.cols; ++c) {
          place((b * view.cols + c) * blocks_ + j, (b * blocks_ + j) * view.cols + c);
        }
      }
    }
  } else {
    for (int64_t g = 0; g < groups; ++g) place(g, g);
  }
  // Per-element stochastic runs (per-column groups, visitRow's last case) read the
  // fixed-point constants from arrays; broadcast runs derive them per run.
  const bool per_element_runs =
      !view.contract_along_cols && format.granularity != Granularity::kPerTensor;
  if (format.rounding == Rounding::kStochastic && per_element_runs) {
    sr_mul_.resize(groups);
    sr_add16_.resize(groups);
    bool any_prescale = false;
    for (int64_t g = 0; g < groups; ++g) {
      const SrConstants c = srConstants(inv_[g], add_[g]);
      sr_mul_[g] = c.mul;
      sr_add16_[g] = c.add16;
      any_prescale = any_prescale || c.prescale;
    }
    if (any_prescale) {
      sr_pre_.resize(groups);
      for (int64_t g = 0; g < groups; ++g) sr_pre_[g] = srConstants(inv_[g], add_[g]).pre;
    }
  }
  const int64_t rows = view.batch * view.rows;
  if (view.cols >= kUnitElements) {
    col_chunk_ = kUnitElements;
    chunks_per_row_ = (view.cols + kUnitElements - 1) / kUnitElements;
    units_ = rows * chunks_per_row_;
  } else {
    rows_per_unit_ = kUnitElements / view.cols;
    units_ = (rows + rows_per_unit_ - 1) / rows_per_unit_;
    rows_at_once_ = view.contract_along_cols && format.granularity == Granularity::kPerChannel &&
                    view.cols % 32 == 0;
    blocks_at_once_ = view.contract_along_cols && format.granularity == Granularity::kPerBlock &&
                      format.block % 32 == 0 && view.cols % format.block == 0;
  }
}

}  // namespace detail

namespace {

float horizontalMin(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_min_ss(m, _mm_shuffle_ps(m, m, 1)));
}

float horizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}

// FLT_MAX's bits: a magnitude's bits above it are Inf or NaN.
constexpr uint32_t kMaxFiniteBits = 0x7F7FFFFFu;

// Range of the finite values of x[0, n), folded into [mn, mx] (callers start at 0, so
// the range always contains 0).
void finiteRange(const float* x, int64_t n, float& mn, float& mx) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 fmax = _mm256_set1_ps(FLT_MAX);
  __m256 vmn[4], vmx[4];
  for (int k = 0; k < 4; ++k) vmn[k] = vmx[k] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      __m256 v = _mm256_loadu_ps(x + i + 8 * k);
      v = _mm256_and_ps(v, _mm256_cmp_ps(_mm256_and_ps(v, abs_mask), fmax, _CMP_LE_OQ));
      vmn[k] = _mm256_min_ps(vmn[k], v);
      vmx[k] = _mm256_max_ps(vmx[k], v);
    }
  }
  // Horizontal reduction in registers: this runs once per row or block, so it must be
  // cheap next to a 256-element row.
  float lmn =
      horizontalMin(_mm256_min_ps(_mm256_min_ps(vmn[0], vmn[1]), _mm256_min_ps(vmn[2], vmn[3])));
  float lmx =
      horizontalMax(_mm256_max_ps(_mm256_max_ps(vmx[0], vmx[1]), _mm256_max_ps(vmx[2], vmx[3])));
  for (; i < n; ++i) {
    if (std::isfinite(x[i])) {
      lmn = std::min(lmn, x[i]);
      lmx = std::max(lmx, x[i]);
    }
  }
  mn = std::min(mn, lmn);
  mx = std::max(mx, lmx);
}

// finiteRange for a symmetric format without clipping, which reads only max(-mn, mx):
// the largest finite magnitude a, folded in as [-a, a]. Finite magnitudes order like
// their bits, and NaN and Inf sit above them, so one integer max per vector does it (half
// the work of the range); a stretch with a NaN or Inf goes to finiteRange, which skips
// them. The scales are the same: paramsFromRange and the emulated scales read max(-mn, mx).
void finiteMagnitude(const float* x, int64_t n, float& mn, float& mx) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  __m256i top[4];
  for (int k = 0; k < 4; ++k) top[k] = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 8 * k));
      top[k] = _mm256_max_epi32(top[k], _mm256_and_si256(v, abs_mask));
    }
  }
  __m256i t = _mm256_max_epi32(_mm256_max_epi32(top[0], top[1]), _mm256_max_epi32(top[2], top[3]));
  __m128i h = _mm_max_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
  h = _mm_max_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
  h = _mm_max_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
  uint32_t bits = uint32_t(_mm_cvtsi128_si32(h));
  for (; i < n; ++i) bits = std::max(bits, std::bit_cast<uint32_t>(x[i]) & 0x7FFFFFFFu);
  if (bits > kMaxFiniteBits) {
    finiteRange(x, n, mn, mx);
    return;
  }
  const float a = std::bit_cast<float>(bits);
  mn = std::min(mn, -a);
  mx = std::max(mx, a);
}

// Folds rows x[r * stride + c] (r < rows, c < n) into per-column ranges mn[0, n),
// mx[0, n). Four rows share one load and store of the accumulators.
void foldColumns(const float* x, int64_t rows, int64_t stride, int64_t n, float* mn, float* mx) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 fmax = _mm256_set1_ps(FLT_MAX);
  auto finite = [&](__m256 v) {
    return _mm256_and_ps(v, _mm256_cmp_ps(_mm256_and_ps(v, abs_mask), fmax, _CMP_LE_OQ));
  };
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* row = x + r * stride;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 v0 = finite(_mm256_loadu_ps(row + i));
      __m256 v1 = finite(_mm256_loadu_ps(row + stride + i));
      __m256 v2 = finite(_mm256_loadu_ps(row + 2 * stride + i));
      __m256 v3 = finite(_mm256_loadu_ps(row + 3 * stride + i));
      __m256 lo = _mm256_min_ps(_mm256_min_ps(v0, v1), _mm256_min_ps(v2, v3));
      __m256 hi = _mm256_max_ps(_mm256_max_ps(v0, v1), _mm256_max_ps(v2, v3));
      _mm256_storeu_ps(mn + i, _mm256_min_ps(_mm256_loadu_ps(mn + i), lo));
      _mm256_storeu_ps(mx + i, _mm256_max_ps(_mm256_loadu_ps(mx + i), hi));
    }
    for (; i < n; ++i) {
      for (int64_t k = 0; k < 4; ++k) {
        float v = row[k * stride + i];
        if (std::isfinite(v)) {
          mn[i] = std::min(mn[i], v);
          mx[i] = std::max(mx[i], v);
        }
      }
    }
  }
  for (; r < rows; ++r) {
    const float* row = x + r * stride;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 v = finite(_mm256_loadu_ps(row + i));
      _mm256_storeu_ps(mn + i, _mm256_min_ps(_mm256_loadu_ps(mn + i), v));
      _mm256_storeu_ps(mx + i, _mm256_max_ps(_mm256_loadu_ps(mx + i), v));
    }
    for (; i < n; ++i) {
      if (std::isfinite(row[i])) {
        mn[i] = std::min(mn[i], row[i]);
        mx[i] = std::max(mx[i], row[i]);
      }
    }
  }
}

// Whether a format's scales read only each range's magnitude max(-mn, mx): symmetric
// formats without clipping (paramsFromRange, the emulated scales), so finiteMagnitude
// and foldColumnMagnitudes may stand for finiteRange and foldColumns.
bool readsMagnitudeOnly(const QuantFormat& format) {
  return !format.asymmetric && format.clipping == Clipping::kNone;
}

// foldColumns for a symmetric format without clipping (finiteMagnitude's rule): each
// column's largest finite magnitude a folded in as [-a, a], n <= kMaxFoldColumns. A chunk
// with a NaN or Inf goes to foldColumns.
constexpr int64_t kMaxFoldColumns = 2048;
void foldColumnMagnitudes(const float* x, int64_t rows, int64_t stride, int64_t n, float* mn, float* mx) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  alignas(32) uint32_t top[kMaxFoldColumns];
  std::fill(top, top + n, 0u);
  auto magnitude = [&](const float* p) {
    return _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), abs_mask);
  };
  const int64_t vec = n - n % 8;
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* row = x + r * stride;
    for (int64_t i = 0; i < vec; i += 8) {
      __m256i* acc = reinterpret_cast<__m256i*>(top + i);
      const __m256i m = _mm256_max_epi32(_mm256_max_epi32(magnitude(row + i), magnitude(row + stride + i)),
                                         _mm256_max_epi32(magnitude(row + 2 * stride + i), magnitude(row + 3 * stride + i)));
      _mm256_store_si256(acc, _mm256_max_epi32(_mm256_load_si256(acc), m));
    }
  }
  for (; r < rows; ++r) {
    for (int64_t i = 0; i < vec; i += 8) {
      __m256i* acc = reinterpret_cast<__m256i*>(top + i);
      _mm256_store_si256(acc, _mm256_max_epi32(_mm256_load_si256(acc), magnitude(x + r * stride + i)));
    }
  }
  for (int64_t rr = 0; rr < rows; ++rr)
    for (int64_t i = vec; i < n; ++i) top[i] = std::max(top[i], std::bit_cast<uint32_t>(x[rr * stride + i]) & 0x7FFFFFFFu);
  if (*std::max_element(top, top + n) > kMaxFiniteBits) {
    foldColumns(x, rows, stride, n, mn, mx);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::bit_cast<float>(top[i]);
    mn[i] = std::min(mn[i], -a);
    mx[i] = std::max(mx[i], a);
  }
}

}  // namespace

void detail::groupRanges(const float* x, const OperandView& view, const QuantFormat& format,
                         std::vector<float>& mn, std::vector<float>& mx) {
  const int64_t groups = quantGroupCount(view, format);
  const int64_t blocks = blockCount(view, format);
  mn.assign(groups, 0.0f);
  mx.assign(groups, 0.0f);
  const int64_t rows = view.batch * view.rows;
  const int64_t cols = view.cols;
  const bool magnitude = readsMagnitudeOnly(format);
  const auto range = magnitude ? finiteMagnitude : finiteRange;
  const auto fold = magnitude ? foldColumnMagnitudes : foldColumns;
  if (format.granularity == Granularity::kPerTensor) {
    float tmn = 0.0f, tmx = 0.0f;
#pragma omp parallel for schedule(static) reduction(min : tmn) reduction(max : tmx)
    for (int64_t r = 0; r < rows; ++r) range(x + r * cols, cols, tmn, tmx);
    mn[0] = tmn;
    mx[0] = tmx;
  } else if (view.contract_along_cols) {
    // One row is one channel; per-block splits it along the columns.
    const int64_t block = format.granularity == Granularity::kPerBlock ? format.block : cols;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < blocks; ++j) {
        int64_t c0 = j * block;
        range(x + r * cols + c0, std::min(cols, c0 + block) - c0, mn[r * blocks + j], mx[r * blocks + j]);
      }
    }
  } else {
    // One column is one channel: a group's range folds its column down the rows of its
    // block. A work item folds the rows of one block over a chunk of up to
    // kMaxFoldColumns columns: each row's chunk is one contiguous stretch of pages (chunks
    // of 128 columns read down thousands of rows took a new page per row and ran 1.5x
    // slower). Where that leaves fewer than 4 items, the blocks' rows are cut into as
    // many slabs as make 4, whose ranges then combine by min and max, which are exact:
    // the result depends neither on the cut nor on the threads.
    const int64_t block = format.granularity == Granularity::kPerBlock ? format.block : view.rows;
    const int64_t chunks = (cols + kMaxFoldColumns - 1) / kMaxFoldColumns;
    const int64_t whole = view.batch * blocks * chunks;
    const int64_t slab = whole >= 4 ? block : std::max<int64_t>(4, (block * whole / 4 + 3) / 4 * 4);
    const int64_t slabs = (block + slab - 1) / slab;  // per block of rows
    const int64_t parts = view.batch * blocks * slabs;
    // Each part's ranges over all columns, [batch][block][slab][column], widened to 0.
    std::vector<float> part_mn(static_cast<size_t>(parts * cols), 0.0f), part_mx(part_mn.size(), 0.0f);
#pragma omp parallel for schedule(static)
    for (int64_t item = 0; item < parts * chunks; ++item) {
      const int64_t part = item / chunks, c0 = (item % chunks) * kMaxFoldColumns;
      const int64_t b = part / (blocks * slabs), j = (part / slabs) % blocks, s = part % slabs;
      const int64_t r0 = j * block + s * slab;
      const int64_t r1 = std::min({view.rows, (j + 1) * block, r0 + slab});
      const int64_t n = std::min(cols, c0 + kMaxFoldColumns) - c0;
      if (r1 > r0)
        fold(x + (b * view.rows + r0) * cols + c0, r1 - r0, cols, n, &part_mn[part * cols + c0],
             &part_mx[part * cols + c0]);
    }
    // The slabs of each block combined in the first slab's row, slab after slab.
#pragma omp parallel for schedule(static)
    for (int64_t bj = 0; bj < view.batch * blocks; ++bj) {
      float* lo = &part_mn[bj * slabs * cols];
      float* hi = &part_mx[bj * slabs * cols];
      for (int64_t s = 1; s < slabs; ++s)
        for (int64_t c = 0; c < cols; ++c) {
          lo[c] = std::min(lo[c], lo[s * cols + c]);
          hi[c] = std::max(hi[c], hi[s * cols + c]);
        }
      const int64_t b = bj / blocks, j = bj % blocks;
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t g = (b * cols + c) * blocks + j;
        mn[g] = lo[c];
        mx[g] = hi[c];
      }
    }
  }
}

namespace {

// Rejects emulated formats in the int8-storage kernels.
void checkIntStorage(const char* what, const QuantFormat& format) {
  if (format.isEmulated()) {
    throw KernelError::format(
        "{}: format {} is an emulated format: use fakeQuantize (float_quant.h)", what,
        format.toString());
  }
}

// Appends the finite values of group g to `out`.
void gatherGroup(const float* x, const OperandView& view, const QuantFormat& format, int64_t g,
                 std::vector<float>& out) {
  out.clear();
  auto take = [&](float v) {
    if (std::isfinite(v)) out.push_back(v);
  };
  const int64_t cols = view.cols;
  if (format.granularity == Granularity::kPerTensor) {
    for (int64_t i = 0; i < view.elements(); ++i) take(x[i]);
    return;
  }
  const int64_t blocks = blockCount(view, format);
  const int64_t j = g % blocks;
  const int64_t channel = g / blocks;  // b * channels + c
  const int64_t block =
      format.granularity == Granularity::kPerBlock ? format.block : view.contractLength();
  const int64_t k0 = j * block;
  const int64_t k1 = std::min(view.contractLength(), k0 + block);
  if (view.contract_along_cols) {
    for (int64_t c = k0; c < k1; ++c) take(x[channel * cols + c]);
  } else {
    const int64_t b = channel / cols;
    const int64_t c = channel % cols;
    for (int64_t r = k0; r < k1; ++r) take(x[(b * view.rows + r) * cols + c]);
  }
}

// Writes one byte per element of a run: stored integers, packed 32 at a time.
template <typename T>
struct StoreSink {
  T* out;
  void operator()(int64_t index, const detail::Lanes& l, int valid) {
    __m256i p01 = _mm256_packs_epi32(l.ti[0], l.ti[1]);
    __m256i p23 = _mm256_packs_epi32(l.ti[2], l.ti[3]);
    __m256i bytes =
        std::is_same_v<T, uint8_t> ? _mm256_packus_epi16(p01, p23) : _mm256_packs_epi16(p01, p23);
    // The packs work per 128-bit lane; this restores element order.
    bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    if (valid == 32) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + index), bytes);
    } else {
      alignas(32) T tmp[32];
      _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), bytes);
      std::memcpy(out + index, tmp, size_t(valid));
    }
  }
};

// Round-to-nearest into int8 / uint8 storage with 512-bit vectors (avx512Kernels()): per
// element the operations of roundNearestLanes and StoreSink, in their order (x * inv,
// NaN to 0, round half to even, + add, clamped to [lo, hi], truncated, saturated to T),
// so the bytes are the same; 16 lanes a vector, and one saturating narrow (vpmovsdb,
// vpmovusdb) where the 256-bit path packs twice and permutes. A ragged end is a masked
// vector. kPerElement: inv and add per element (from x's position), else one group's.
// Measured in docs/PERFORMANCE.md ("Issue 34 on an AVX-512 CPU without AMX").
PGQ_AVX512_BEGIN
template <typename T, bool kPerElement>
PGQ_AVX512 __attribute__((always_inline)) inline void roundStoreVector(
    const float* x, const float* inv, const float* add, __m512 vinv, __m512 vadd, __m512 vlo,
    __m512 vhi, T* out, int64_t i, __mmask16 m) {
  const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
  const __m512 iv = kPerElement ? _mm512_maskz_loadu_ps(m, inv + i) : vinv;
  const __m512 av = kPerElement ? _mm512_maskz_loadu_ps(m, add + i) : vadd;
  __m512 v = _mm512_mul_ps(xv, iv);
  v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);  // NaN -> 0
  v = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  v = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(v, av), vlo), vhi);
  const __m512i t = _mm512_cvttps_epi32(v);
  // packs_epi32 + packus_epi16 clamp to [0, 255]; packs_epi32 + packs_epi16 to int8's range.
  const __m128i bytes = std::is_same_v<T, uint8_t>
                            ? _mm512_cvtusepi32_epi8(_mm512_max_epi32(t, _mm512_setzero_si512()))
                            : _mm512_cvtsepi32_epi8(t);
  _mm_mask_storeu_epi8(out + i, m, bytes);
}

// How far ahead roundStoreAvx512 prefetches a column-scaled copy's input: 1024 floats.
constexpr int64_t kPrefetchFloats = 1024;

template <typename T, bool kPerElement>
PGQ_AVX512 void roundStoreAvx512(const float* x, int64_t len, const float* inv, const float* add,
                                 float lo, float hi, T* out) {
  const __m512 vlo = _mm512_set1_ps(lo);
  const __m512 vhi = _mm512_set1_ps(hi);
  const __m512 vinv = kPerElement ? _mm512_setzero_ps() : _mm512_set1_ps(*inv);
  const __m512 vadd = kPerElement ? _mm512_setzero_ps() : _mm512_set1_ps(*add);
  int64_t i = 0;
  for (; i + 16 <= len; i += 16) {
    // Per-element scales are a column-scaled copy, read once from memory in a single
    // stream; a prefetch 4 KiB ahead keeps more of it in flight than the hardware
    // prefetcher does (docs/PERFORMANCE.md, the Zen 5 section). Prefetches do not fault
    // past the end.
    if constexpr (kPerElement) _mm_prefetch(reinterpret_cast<const char*>(x + i + kPrefetchFloats), _MM_HINT_T0);
    roundStoreVector<T, kPerElement>(x, inv, add, vinv, vadd, vlo, vhi, out, i, __mmask16(0xFFFF));
  }
  if (i < len) {
    roundStoreVector<T, kPerElement>(x, inv, add, vinv, vadd, vlo, vhi, out, i,
                                     __mmask16((1u << (len - i)) - 1));
  }
}
PGQ_AVX512_END

// A run as QuantPlan::forEachRun gives it (processRun's layouts), rounded to nearest by
// roundStoreAvx512: per element, rows of row_len with one group each, or one group.
template <typename T>
void roundStoreRunAvx512(const float* x, int64_t len, const detail::RunParams& p, bool per_element,
                         int lo, int hi, T* out) {
  if (per_element) {
    roundStoreAvx512<T, true>(x, len, p.inv, p.add, float(lo), float(hi), out);
  } else if (p.row_len > 0) {
    for (int64_t r = 0; r < len / p.row_len; ++r) {
      roundStoreAvx512<T, false>(x + r * p.row_len, p.row_len, p.inv + r, p.add + r, float(lo),
                                 float(hi), out + r * p.row_len);
    }
  } else {
    roundStoreAvx512<T, false>(x, len, p.inv, p.add, float(lo), float(hi), out);
  }
}

template <typename T>
void quantizeInto(std::span<const float> x, const OperandView& view, const QuantFormat& format,
                  std::span<const float> params, std::span<T> out, SrStream sr, GemmSide side) {
  detail::checkQuantArgs("quantize", int64_t(x.size()), view, format, int64_t(params.size()));
  checkIntStorage("quantize", format);
  if (int64_t(out.size()) != view.elements()) {
    throw KernelError::format("quantize: output has {} elements, the view needs {}", out.size(),
                              view.elements());
  }
  detail::QuantPlan plan(view, format, params, storageOffset(format, side));
  const bool stochastic = format.rounding == Rounding::kStochastic;
  const bool wide = !stochastic && avx512Kernels();
#pragma omp parallel for schedule(static)
  for (int64_t unit = 0; unit < plan.units(); ++unit) {
    detail::SrState sr_state(sr);
    StoreSink<T> sink{out.data()};
    plan.forEachRun(
        unit,
        [&](int64_t index, int64_t len, const detail::RunParams& p, bool per_elem) {
          if (wide) {
            roundStoreRunAvx512(x.data() + index, len, p, per_elem, plan.lo(), plan.hi(),
                                out.data() + index);
            return;
          }
          detail::processRunAny(stochastic, per_elem, x.data() + index, index, len, p, plan.lo(),
                                plan.hi(), &sr_state, sink);
        },
        /*rows_at_once=*/true);
  }
}

// Rows [r0, r1) of quantizeDynamic's fused path (per-channel or per-block scales along
// the rows of a [rows, cols] matrix, no clipping): each row's groups get their scales from
// the row's values and the row is quantized while it is in L1. Rows are walked in
// increasing index order, as stochastic rounding's noise buffer wants.
template <typename T>
void quantizeRowsDynamic(const float* x, int64_t r0, int64_t r1, int64_t cols, const QuantFormat& format,
                         float* params, int64_t groups, T* out, detail::SrState& sr_state, GemmSide side,
                         const uint32_t* row_bits = nullptr) {
  const int64_t blocks = format.granularity == Granularity::kPerBlock ? (cols + format.block - 1) / format.block : 1;
  const int64_t block = format.granularity == Granularity::kPerBlock ? format.block : cols;
  const int offset = storageOffset(format, side);
  const QuantGrid grid = gridOf(format);
  const bool stochastic = format.rounding == Rounding::kStochastic;
  const bool wide = !stochastic && avx512Kernels();
  const auto range = readsMagnitudeOnly(format) ? finiteMagnitude : finiteRange;
  if (row_bits && !(blocks == 1 && readsMagnitudeOnly(format)))
    throw KernelError::format("quantizeRowsNearest: row magnitudes given for {}, which is not per channel and "
                              "symmetric", format.toString());
  StoreSink<T> sink{out};
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t j = 0; j < blocks; ++j) {
      const int64_t index = r * cols + j * block;
      const int64_t len = std::min(cols, (j + 1) * block) - j * block;
      float mn = 0.0f, mx = 0.0f;
      if (row_bits && row_bits[r - r0] <= kMaxFiniteBits) {
        // finiteMagnitude's fold of the given bits.
        const float a = std::bit_cast<float>(row_bits[r - r0]);
        mn = std::min(mn, -a);
        mx = std::max(mx, a);
      } else {
        range(x + index, len, mn, mx);
      }
      const detail::GroupParams p = detail::paramsFromRange(mn, mx, format);
      params[r * blocks + j] = p.scale;
      if (format.asymmetric) params[groups + r * blocks + j] = p.zero_point;
      // The same per-group constants QuantPlan derives from params.
      const float inv = 1.0f / p.scale;
      const float add = p.zero_point + float(offset);
      const float scale = p.scale;
      if (wide) {
        roundStoreAvx512<T, false>(x + index, len, &inv, &add, float(grid.lo + offset), float(grid.hi + offset),
                                   out + index);
        continue;
      }
      detail::processRunAny(stochastic, false, x + index, index, len, detail::RunParams{&inv, &add, &scale},
                            grid.lo + offset, grid.hi + offset, &sr_state, sink);
    }
  }
}

template <typename T>
void quantizeDynamicInto(std::span<const float> x, const OperandView& view,
                         const QuantFormat& format, std::span<float> params, std::span<T> out,
                         SrStream sr, GemmSide side) {
  detail::checkQuantArgs("quantizeDynamic", int64_t(x.size()), view, format,
                         int64_t(params.size()));
  checkIntStorage("quantizeDynamic", format);
  const bool fused = view.contract_along_cols && format.granularity != Granularity::kPerTensor &&
                     format.clipping == Clipping::kNone;
  if (!fused) {
    computeQuantParams(x, view, format, params);
    quantizeInto(x, view, format, std::span<const float>(params), out, sr, side);
    return;
  }
  if (int64_t(out.size()) != view.elements()) {
    throw KernelError::format("quantizeDynamic: output has {} elements, the view needs {}",
                              out.size(), view.elements());
  }
  const int64_t rows = view.batch * view.rows;
  const int64_t groups = quantGroupCount(view, format);
#pragma omp parallel
  {
    detail::SrState sr_state(sr);
    // One contiguous share of the rows per thread (schedule(static)'s split).
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t r0 = rows * t / threads, r1 = rows * (t + 1) / threads;
    quantizeRowsDynamic(x.data(), r0, r1, view.cols, format, params.data(), groups, out.data(), sr_state, side);
  }
}

}  // namespace

void detail::foldColumnRanges(const float* x, int64_t rows, int64_t cols, const QuantFormat& format, float* mn,
                              float* mx) {
  const auto fold = readsMagnitudeOnly(format) ? foldColumnMagnitudes : foldColumns;
  for (int64_t c0 = 0; c0 < cols; c0 += kMaxFoldColumns)
    fold(x + c0, rows, cols, std::min(cols - c0, kMaxFoldColumns), mn + c0, mx + c0);
}

void detail::quantizeRowsNearest(const float* x, int64_t r0, int64_t r1, int64_t cols, const QuantFormat& format,
                                 float* params, int64_t groups, void* out, GemmSide side, const uint32_t* row_bits) {
  if (format.rounding != Rounding::kNearest)
    throw KernelError::format("quantizeRowsNearest: format {} does not round to nearest", format.toString());
  detail::SrState none(SrStream{});
  if (side == GemmSide::kLhs)
    quantizeRowsDynamic(x, r0, r1, cols, format, params, groups, static_cast<uint8_t*>(out), none, side, row_bits);
  else
    quantizeRowsDynamic(x, r0, r1, cols, format, params, groups, static_cast<int8_t*>(out), none, side, row_bits);
}

namespace {

template <typename T>
void dequantizeFrom(std::span<const T> q, const OperandView& view, const QuantFormat& format,
                    std::span<const float> params, std::span<float> out, GemmSide side) {
  detail::checkQuantArgs("dequantize", int64_t(q.size()), view, format, int64_t(params.size()));
  checkIntStorage("dequantize", format);
  if (int64_t(out.size()) != view.elements()) {
    throw KernelError::format("dequantize: output has {} elements, the view needs {}", out.size(),
                              view.elements());
  }
  detail::QuantPlan plan(view, format, params, storageOffset(format, side));
#pragma omp parallel for schedule(static)
  for (int64_t unit = 0; unit < plan.units(); ++unit) {
    plan.forEachRun(unit, [&](int64_t index, int64_t len, const detail::RunParams& p,
                              bool per_elem) {
      const int64_t step = per_elem ? 1 : 0;
      for (int64_t i = 0; i < len; ++i) {
        out[index + i] = p.scale[i * step] * (float(q[index + i]) - p.add[i * step]);
      }
    });
  }
}

}  // namespace

void computeQuantParams(std::span<const float> x, const OperandView& view,
                        const QuantFormat& format, std::span<float> params, SrStream sr) {
  if (format.isEmulated()) {
    computeEmulatedScales(x, view, format, params, sr);
    return;
  }
  detail::checkQuantArgs("computeQuantParams", int64_t(x.size()), view, format,
                         int64_t(params.size()));
  std::vector<float> mn, mx;
  detail::groupRanges(x.data(), view, format, mn, mx);
  const int64_t groups = int64_t(mn.size());
  const bool clip = format.clipping != Clipping::kNone;
#pragma omp parallel if (clip && groups > 1)
  {
    std::vector<float> values;
#pragma omp for schedule(dynamic, 4)
    for (int64_t g = 0; g < groups; ++g) {
      double lo = mn[g];
      double hi = mx[g];
      if (clip) {
        gatherGroup(x.data(), view, format, g, values);
        std::tie(lo, hi) = clipRange(values, lo, hi, format);
      }
      detail::GroupParams p = detail::paramsFromRange(lo, hi, format);
      params[g] = p.scale;
      if (format.asymmetric) params[groups + g] = p.zero_point;
    }
  }
}

void computeQuantParams(std::span<const float> x, const OperandView& view, std::span<const QuantFormat> formats,
                        std::span<const std::span<float>> params, SrStream sr) {
  if (params.size() != formats.size()) {
    throw KernelError::format("computeQuantParams: {} formats but {} params buffers", formats.size(), params.size());
  }
  // Integer formats with f32 scales and without clipping take their params straight from
  // the group ranges, which depend only on the groups and on whether magnitudes suffice.
  auto from_ranges = [](const QuantFormat& f) {
    return !f.isEmulated() && !f.hadamard && !f.block2d && f.clipping == Clipping::kNone;
  };
  auto same_ranges = [](const QuantFormat& a, const QuantFormat& b) {
    return a.granularity == b.granularity && a.block == b.block && readsMagnitudeOnly(a) == readsMagnitudeOnly(b);
  };
  std::vector<bool> done(formats.size(), false);
  std::vector<float> mn, mx;
  for (size_t i = 0; i < formats.size(); ++i) {
    if (done[i]) continue;
    if (!from_ranges(formats[i])) {
      computeQuantParams(x, view, formats[i], params[i], sr);
      continue;
    }
    detail::checkQuantArgs("computeQuantParams", int64_t(x.size()), view, formats[i], int64_t(params[i].size()));
    detail::groupRanges(x.data(), view, formats[i], mn, mx);
    for (size_t j = i; j < formats.size(); ++j) {
      if (done[j] || !from_ranges(formats[j]) || !same_ranges(formats[i], formats[j])) continue;
      detail::checkQuantArgs("computeQuantParams", int64_t(x.size()), view, formats[j], int64_t(params[j].size()));
      const int64_t groups = int64_t(mn.size());
      for (int64_t g = 0; g < groups; ++g) {
        const detail::GroupParams p = detail::paramsFromRange(mn[g], mx[g], formats[j]);
        params[j][g] = p.scale;
        if (formats[j].asymmetric) params[j][groups + g] = p.zero_point;
      }
      done[j] = true;
    }
  }
}

void quantize(std::span<const float> x, const OperandView& view, const QuantFormat& format,
              std::span<const float> params, std::span<uint8_t> out, SrStream sr) {
  quantizeInto(x, view, format, params, out, sr, GemmSide::kLhs);
}

void quantize(std::span<const float> x, const OperandView& view, const QuantFormat& format,
              std::span<const float> params, std::span<int8_t> out, SrStream sr) {
  quantizeInto(x, view, format, params, out, sr, GemmSide::kRhs);
}

void quantizeDynamic(std::span<const float> x, const OperandView& view, const QuantFormat& format,
                     std::span<float> params, std::span<uint8_t> out, SrStream sr) {
  quantizeDynamicInto(x, view, format, params, out, sr, GemmSide::kLhs);
}

void quantizeDynamic(std::span<const float> x, const OperandView& view, const QuantFormat& format,
                     std::span<float> params, std::span<int8_t> out, SrStream sr) {
  quantizeDynamicInto(x, view, format, params, out, sr, GemmSide::kRhs);
}

void dequantize(std::span<const uint8_t> q, const OperandView& view, const QuantFormat& format,
                std::span<const float> params, std::span<float> out) {
  dequantizeFrom(q, view, format, params, out, GemmSide::kLhs);
}

void dequantize(std::span<const int8_t> q, const OperandView& view, const QuantFormat& format,
                std::span<const float> params, std::span<float> out) {
  dequantizeFrom(q, view, format, params, out, GemmSide::kRhs);
}

}  // namespace pgq::kernels
