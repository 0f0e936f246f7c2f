#include "kernels/optim.h"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "kernels/quant_core.h"
#include "kernels/quantize.h"

#include "kernels/kernel_error.h"
#include "kernels/vec_math.h"

namespace pgq::kernels {

namespace {

// torch.optim.AdamW's update of elements [begin, end) (adamwUpdate's contract).
class AdamW {
 public:
  AdamW(const AdamWParams& p, float grad_scale) {
    if (p.step < 1) throw KernelError::format("adamwUpdate: step must be >= 1 (1-based), got {}", p.step);
    // torch computes these scalars in Python (f64) and the tensor ops take them as f32.
    const double bias1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(p.step));
    const double bias2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(p.step));
    decay_ = _mm256_set1_ps(static_cast<float>(1.0 - static_cast<double>(p.lr) * p.weight_decay));
    b1_ = _mm256_set1_ps(p.beta1);
    one_minus_b1_ = _mm256_set1_ps(static_cast<float>(1.0 - p.beta1));
    b2_ = _mm256_set1_ps(p.beta2);
    one_minus_b2_ = _mm256_set1_ps(static_cast<float>(1.0 - p.beta2));
    neg_step_size_ = _mm256_set1_ps(static_cast<float>(-p.lr / bias1));
    bias2_sqrt_ = _mm256_set1_ps(static_cast<float>(std::sqrt(bias2)));
    eps_ = _mm256_set1_ps(p.eps);
    scale_ = _mm256_set1_ps(grad_scale);
  }

  // Each step follows torch's operation order (one rounding per tensor op), so results
  // match torch to an ulp or so rather than only to the formula. Element-wise: the
  // result does not depend on how the elements are split.
  void update(float* param, const float* grad, float* m, float* v, int64_t begin, int64_t end) const {
    for (int64_t i = begin; i < end; i += 8) step(param, grad, m, v, i, end - i);
  }

  // update() of rows [r0, r1) of a [rows, cols] parameter that also folds each new value's
  // magnitude bits (|x| as uint32; finite magnitudes order like their bits) into its row's
  // maximum, row_bits[r - r0], and, when col_bits is given, into its column's, col_bits[c].
  // The folds are integer max on values already in registers: where the update waits on
  // memory they cost nothing, where a separate pass over the chunk would read it again.
  void updateFolding(float* param, const float* grad, float* m, float* v, int64_t r0, int64_t r1, int64_t cols,
                     uint32_t* row_bits, uint32_t* col_bits) const {
    const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
    const int64_t whole = cols - cols % 8;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t row = r * cols;
      __m256i top = _mm256_setzero_si256();
      for (int64_t c = 0; c < whole; c += 8) {
        const __m256i bits = _mm256_and_si256(_mm256_castps_si256(step(param, grad, m, v, row + c, 8)), abs_mask);
        top = _mm256_max_epu32(top, bits);
        if (col_bits) {
          __m256i* acc = reinterpret_cast<__m256i*>(col_bits + c);
          _mm256_storeu_si256(acc, _mm256_max_epu32(_mm256_loadu_si256(acc), bits));
        }
      }
      __m128i h = _mm_max_epu32(_mm256_castsi256_si128(top), _mm256_extracti128_si256(top, 1));
      h = _mm_max_epu32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
      h = _mm_max_epu32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
      uint32_t row_top = uint32_t(_mm_cvtsi128_si32(h));
      if (whole < cols) {
        step(param, grad, m, v, row + whole, cols - whole);
        for (int64_t c = whole; c < cols; ++c) {
          const uint32_t bits = std::bit_cast<uint32_t>(param[row + c]) & 0x7FFFFFFFu;
          row_top = std::max(row_top, bits);
          if (col_bits) col_bits[c] = std::max(col_bits[c], bits);
        }
      }
      row_bits[r - r0] = row_top;
    }
  }

 private:
  // Elements [i, i + min(k, 8)): stores the new param, m and v and returns the new param
  // (lanes past k are 0).
  __m256 step(float* param, const float* grad, float* m, float* v, int64_t i, int64_t k) const {
    const __m256 g = _mm256_mul_ps(vec::loadPart(grad + i, k), scale_);
    const __m256 pw = _mm256_mul_ps(vec::loadPart(param + i, k), decay_);
    const __m256 mv = _mm256_add_ps(_mm256_mul_ps(vec::loadPart(m + i, k), b1_), _mm256_mul_ps(g, one_minus_b1_));
    // addcmul_(g, g, value=c) is self + (c * g) * g; addcdiv_(m, d, value=c) is
    // self + (c * m) / d.
    const __m256 vv = _mm256_add_ps(_mm256_mul_ps(vec::loadPart(v + i, k), b2_),
                                    _mm256_mul_ps(_mm256_mul_ps(one_minus_b2_, g), g));
    const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vv), bias2_sqrt_), eps_);
    const __m256 pn = _mm256_add_ps(pw, _mm256_div_ps(_mm256_mul_ps(neg_step_size_, mv), denom));
    vec::storePart(m + i, k, mv);
    vec::storePart(v + i, k, vv);
    vec::storePart(param + i, k, pn);
    return pn;
  }

  __m256 decay_, b1_, one_minus_b1_, b2_, one_minus_b2_, neg_step_size_, bias2_sqrt_, eps_, scale_;
};

// Elements per chunk of rows of the fused update: the chunk's parameter (32 KiB) stays in
// L1 and its four arrays (128 KiB) in L2 between the update and the quantizations.
constexpr int64_t kChunkElements = 8192;

// FLT_MAX's bits: a magnitude's bits above it are Inf or NaN.
constexpr uint32_t kMaxFiniteBits = 0x7F7FFFFFu;

// Folds the magnitude bits |x| of rows x[r * cols + c] (r < rows) into top[0, cols) by
// integer max, one pass per row.
void foldMagnitudeBits(const float* x, int64_t rows, int64_t cols, uint32_t* top) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const int64_t vec = cols - cols % 8;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    for (int64_t c = 0; c < vec; c += 8) {
      const __m256i v = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c)), abs_mask);
      __m256i* acc = reinterpret_cast<__m256i*>(top + c);
      _mm256_storeu_si256(acc, _mm256_max_epu32(_mm256_loadu_si256(acc), v));
    }
    for (int64_t c = vec; c < cols; ++c) top[c] = std::max(top[c], std::bit_cast<uint32_t>(row[c]) & 0x7FFFFFFFu);
  }
}

}  // namespace

void adamwUpdate(float* param, const float* grad, float* m, float* v, int64_t n,
                 const AdamWParams& p, float grad_scale) {
  vec::checkSizes("adamwUpdate", {n});
  const AdamW adamw(p, grad_scale);
  vec::parallelRanges(n, 4, 16, [&](int64_t begin, int64_t end) { adamw.update(param, grad, m, v, begin, end); });
}

bool fusesIntoUpdate(const OperandView& view, const QuantFormat& format) {
  const bool values_only = !format.isEmulated() && format.rounding == Rounding::kNearest &&
                           format.clipping == Clipping::kNone && !format.hadamard && !format.block2d;
  if (!values_only) return false;
  if (view.contract_along_cols)
    return format.granularity == Granularity::kPerChannel || format.granularity == Granularity::kPerBlock;
  return format.granularity == Granularity::kPerChannel && view.batch == 1;
}

void adamwUpdateQuantized(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWParams& p,
                          float grad_scale, std::span<const ParamQuantization> quantizations) {
  if (quantizations.empty()) {
    adamwUpdate(param, grad, m, v, n, p, grad_scale);
    return;
  }
  vec::checkSizes("adamwUpdateQuantized", {n});
  const AdamW adamw(p, grad_scale);
  const OperandView& first = quantizations[0].view;
  const int64_t rows = first.batch * first.rows, cols = first.cols;
  std::vector<const ParamQuantization*> along_rows, along_cols;
  for (const ParamQuantization& q : quantizations) {
    q.view.validate();
    checkFormat(q.format);
    if (!fusesIntoUpdate(q.view, q.format))
      throw KernelError::format("adamwUpdateQuantized: format {} on a view {}x{}x{} (K along the {}) is not made by "
                                "the update", q.format.toString(), q.view.batch, q.view.rows, q.view.cols,
                                q.view.contract_along_cols ? "columns" : "rows");
    if (q.view.elements() != n || q.view.batch * q.view.rows != rows || q.view.cols != cols)
      throw KernelError::format("adamwUpdateQuantized: a view {}x{}x{} of a parameter of {} elements stored as {}x{}",
                                q.view.batch, q.view.rows, q.view.cols, n, rows, cols);
    if (int64_t(q.params.size()) != quantParamCount(q.view, q.format))
      throw KernelError::format("adamwUpdateQuantized: params buffer has {} floats, format {} needs {}",
                                q.params.size(), q.format.toString(), quantParamCount(q.view, q.format));
    (q.view.contract_along_cols ? along_rows : along_cols).push_back(&q);
  }
  const int64_t chunk_rows = std::max<int64_t>(1, kChunkElements / cols);
  const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  const int threads = static_cast<int>(std::min<int64_t>(vec::availableThreads(), chunks));
  // Each quantization along the columns folds, per thread, the largest magnitude bits of
  // each column (symmetric formats read only max(-mn, mx); finite magnitudes order like
  // their bits) or its range (asymmetric). Both combine exactly by max and min.
  const size_t sets = along_cols.size() * static_cast<size_t>(threads);
  std::vector<std::vector<uint32_t>> top(sets);
  std::vector<std::vector<float>> mn(sets), mx(sets);
  auto magnitudes = [&](size_t q) { return !along_cols[q]->format.asymmetric; };
  // The update itself folds the new values' magnitudes (updateFolding): per row for the
  // symmetric per-channel quantizations along the rows, and per column for the first
  // symmetric one along the columns; the others read the chunk again.
  auto rowFromBits = [](const ParamQuantization& q) {
    return !q.format.asymmetric && q.format.granularity == Granularity::kPerChannel;
  };
  const bool row_bits_used = std::any_of(along_rows.begin(), along_rows.end(), [&](auto* q) { return rowFromBits(*q); });
  size_t folded_q = 0;
  while (folded_q < along_cols.size() && !magnitudes(folded_q)) ++folded_q;
  const bool folding = row_bits_used || folded_q < along_cols.size();
#pragma omp parallel num_threads(threads)
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    std::vector<uint32_t> row_bits(folding ? static_cast<size_t>(chunk_rows) : 0);
    for (size_t q = 0; q < along_cols.size(); ++q) {
      const size_t set = q * threads + t;
      if (magnitudes(q)) {
        top[set].assign(static_cast<size_t>(cols), 0u);
      } else {
        mn[set].assign(static_cast<size_t>(cols), 0.0f);
        mx[set].assign(static_cast<size_t>(cols), 0.0f);
      }
    }
#pragma omp for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t r0 = c * chunk_rows, r1 = std::min(rows, r0 + chunk_rows);
      if (folding) {
        uint32_t* col_bits = folded_q < along_cols.size() ? top[folded_q * threads + t].data() : nullptr;
        adamw.updateFolding(param, grad, m, v, r0, r1, cols, row_bits.data(), col_bits);
      } else {
        adamw.update(param, grad, m, v, r0 * cols, r1 * cols);
      }
      for (const ParamQuantization* q : along_rows)
        detail::quantizeRowsNearest(param, r0, r1, cols, q->format, q->params.data(),
                                    quantGroupCount(q->view, q->format), q->out, q->side,
                                    rowFromBits(*q) ? row_bits.data() : nullptr);
      for (size_t q = 0; q < along_cols.size(); ++q) {
        const size_t set = q * threads + t;
        if (q == folded_q) continue;
        if (magnitudes(q))
          foldMagnitudeBits(param + r0 * cols, r1 - r0, cols, top[set].data());
        else
          detail::foldColumnRanges(param + r0 * cols, r1 - r0, cols, along_cols[q]->format, mn[set].data(),
                                   mx[set].data());
      }
    }
  }
  for (size_t q = 0; q < along_cols.size(); ++q) {
    const ParamQuantization& pq = *along_cols[q];
    const size_t first = q * threads;
    std::vector<float>& lo = mn[first];
    std::vector<float>& hi = mx[first];
    if (magnitudes(q)) {
      std::vector<uint32_t>& bits = top[first];
      for (int t = 1; t < threads; ++t)
        for (int64_t c = 0; c < cols; ++c) bits[c] = std::max(bits[c], top[first + t][c]);
      if (*std::max_element(bits.begin(), bits.end()) > kMaxFiniteBits) {
        // A NaN or Inf (a diverged weight): the finite ranges, as computeQuantParams takes them.
        detail::groupRanges(param, pq.view, pq.format, lo, hi);
      } else {
        lo.resize(static_cast<size_t>(cols));
        hi.resize(static_cast<size_t>(cols));
        for (int64_t c = 0; c < cols; ++c) {
          const float a = std::bit_cast<float>(bits[c]);
          lo[c] = -a;
          hi[c] = a;
        }
      }
    } else {
      for (int t = 1; t < threads; ++t)
        for (int64_t c = 0; c < cols; ++c) {
          lo[c] = std::min(lo[c], mn[first + t][c]);
          hi[c] = std::max(hi[c], mx[first + t][c]);
        }
    }
    // computeQuantParams' scales from the ranges (no clipping), then quantize's pass.
    for (int64_t c = 0; c < cols; ++c) {
      const detail::GroupParams g = detail::paramsFromRange(lo[c], hi[c], pq.format);
      pq.params[c] = g.scale;
      if (pq.format.asymmetric) pq.params[cols + c] = g.zero_point;
    }
    const std::span<const float> x(param, static_cast<size_t>(n));
    if (pq.side == GemmSide::kLhs)
      quantize(x, pq.view, pq.format, pq.params, std::span<uint8_t>(static_cast<uint8_t*>(pq.out), n));
    else
      quantize(x, pq.view, pq.format, pq.params, std::span<int8_t>(static_cast<int8_t*>(pq.out), n));
  }
}

double sumSquares(const float* x, int64_t n) {
  vec::checkSizes("sumSquares", {n});
  constexpr int64_t kBlock = kSumSquaresBlock;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
  vec::parallelRanges(blocks, kBlock, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const float* xb = x + b * kBlock;
      const int64_t len = std::min(kBlock, n - b * kBlock);
      partial[static_cast<size_t>(b)] = vec::sumVectors(len, [&](int64_t i, int64_t k) {
        const __m256 v = vec::loadPart(xb + i, k);
        return _mm256_mul_ps(v, v);
      });
    }
  });
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace pgq::kernels
