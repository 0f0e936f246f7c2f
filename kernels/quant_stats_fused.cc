// The statistics of one tensor in several formats that share a walk, in one pass
// (quant_stats.h). Every format keeps its own StatsSink, and each block adds to it the
// same values in the same order as quantStatsWithParams()'s pass would; only the work
// that does not depend on the format is done once per block: loading x, the finiteness
// test and absmax, the zero count, the sum of squares of x, and the stochastic-rounding
// noise (every format of a statistics node draws the same stream at the same index).
// A pass takes R formats with round to nearest and S with stochastic rounding, R + S
// formats in all: a gradient operand is measured in both roundings.
//
// Blocks of 32 finite elements take the fused path. A ragged block, a block with a NaN
// or an Inf, a run with a prescaled stochastic group (scales below ~2^-112) and a unit
// whose float sums overflow go through quantStatsWithParams()'s own code, format by
// format, so that rare cases have one implementation.
//
// Where the CPU has AVX-512 (avx512Kernels()), two consecutive blocks go through one
// pass of 512-bit vectors, each 256-bit half one block's lanes exactly as the 256-bit
// path holds them (fusedPair), so that every lane computes what it computes there and the
// sums take the blocks' values in the same order: the statistics are the same bit for bit.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu_isa.h"
#include "kernels/kernel_error.h"
#include "kernels/quant_core.h"
#include "kernels/quant_stats.h"
#include "kernels/stats_sink.h"
#include "kernels/vec_math512.h"

namespace pgq::kernels {
namespace {

using detail::Partial;
using detail::QuantPlan;
using detail::RunParams;
using Sink = detail::StatsSink</*kWide=*/false, /*kClipped=*/false>;

// At most this many formats per pass; longer lists are cut into passes of this size.
constexpr int kMaxFused = 4;

// Whether `format` can join a fused pass: a symmetric integer grid with f32 scales whose
// params come from x and cannot clip (clippingIsImpossible). Its zero point and storage
// offset are 0, so Q(x) = 0 exactly when the grid integer is 0, and with round to nearest
// |x / s| <= qmax (1 + 2^-21) rounds inside the grid, so the clamp changes nothing.
bool fusable(const QuantFormat& format, bool params_from_x) {
  return params_from_x && !format.isEmulated() && !format.asymmetric && !format.hadamard &&
         !format.block2d && detail::clippingIsImpossible(format);
}

// Formats whose runs cover the same elements with groups at the same places.
bool sameGroups(const QuantFormat& a, const QuantFormat& b) {
  return a.granularity == b.granularity && a.block == b.block;
}

// Whether every run of `format`'s walk of `view` starts at a multiple of 32 elements:
// there round to nearest and stochastic rounding cut a run into the same blocks, so
// formats of both roundings can share a pass.
bool runsAligned(const OperandView& view, const QuantFormat& format) {
  const bool blocks_along_rows = format.granularity == Granularity::kPerBlock && view.contract_along_cols;
  return view.cols % 32 == 0 && (!blocks_along_rows || format.block % 32 == 0);
}

// The per-format sinks of one work unit, and what the fast blocks share.
template <int N>
struct FusedSinks {
  std::array<Sink, N> sinks;
  __m256i zeros = _mm256_setzero_si256();
  __m256i absmax_bits = _mm256_setzero_si256();
  int64_t fast = 0;  // elements of fast blocks (full and finite)

  Partial result(int f) const {
    Sink s = sinks[f];
    // Fast blocks count every t = 0 as underflow, x = 0 included (StatsSink::fast_zeros).
    s.fast_zeros = _mm256_add_epi32(s.fast_zeros, zeros);
    s.absmax_bits = _mm256_max_epi32(s.absmax_bits, absmax_bits);
    s.fast_finite += fast;
    s.real += fast;
    return s.result();
  }
};

// One run's parameters per format: formats [0, R) round to nearest, [R, R + S) round
// stochastically. Broadcast runs: one multiplier (1/s for round to nearest, the
// fixed-point 2^16/s for stochastic rounding) and scale per format; per-element runs:
// the arrays from the run's first element.
template <int R, int S, bool kPerElement>
struct FusedRun {
  static constexpr int N = R + S;
  __m256 mul[N];
  __m256 scale[N];
  const float* mul_at[N];
  const float* scale_at[N];
  __m256i lo16[N];  // stochastic rounding: the grid's ends times 2^16
  __m256i hi16[N];

  FusedRun(const RunParams (&p)[N], const QuantPlan* const* plans) {
    for (int f = 0; f < N; ++f) {
      const bool stochastic = f >= R;
      if constexpr (kPerElement) {
        mul_at[f] = stochastic ? p[f].sr_mul : p[f].inv;
        scale_at[f] = p[f].scale;
      } else {
        mul[f] = _mm256_set1_ps(stochastic ? detail::srConstants(*p[f].inv, *p[f].add).mul : *p[f].inv);
        scale[f] = _mm256_set1_ps(*p[f].scale);
      }
      lo16[f] = _mm256_set1_epi32(plans[f]->lo() * int(detail::kSrFixedOne));
      hi16[f] = _mm256_set1_epi32(plans[f]->hi() * int(detail::kSrFixedOne));
    }
  }

  // Whether some stochastic format's group of this run is prescaled (SrConstants): those
  // runs take the single-format path.
  static bool prescaled(const RunParams (&p)[N]) {
    for (int f = R; f < N; ++f) {
      if (kPerElement ? p[f].sr_pre != nullptr : detail::srConstants(*p[f].inv, *p[f].add).prescale) return true;
    }
    return false;
  }
};

// One format's share of a fast block: StatsSink's fast path on quantizeBlock's lanes with
// the zero point 0: the error (t - 0) * s - x in one fused multiply-subtract, as StatsSink
// computes it, and every t = 0 as underflow (x = 0 gives t = 0; the block's zeros are
// taken off once per unit, StatsSink::fast_zeros).
__attribute__((always_inline)) inline void addFormat(Sink& sink, const __m256 (&t)[4], const __m256 (&on_zero)[4],
                                                     const __m256 (&x)[4], const __m256 (&scale)[4], __m256d signal) {
  __m256 block_noise = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    Sink::count(sink.underflow, on_zero[k]);
    const __m256 err = _mm256_fmsub_ps(t[k], scale[k], x[k]);
    block_noise = _mm256_fmadd_ps(err, err, block_noise);
  }
  sink.signal = _mm256_add_pd(sink.signal, signal);
  Sink::addBlock(sink.noise, block_noise);
}

// Stochastic rounding of format f (>= R) on the products v = x * mul (times 2^16) of one
// block, and its share of the block. stochasticLanes clamps v to [lo16, hi16] and then
// truncates; both ends are integers and |v| <= hi16 (1 + 2^-21) < 2^31 (params from x,
// grids of at most 8 bits), so truncating first and clamping the integer gives the same
// lanes.
template <int R, int S, bool kPerElement>
__attribute__((always_inline)) inline void stochasticFormat(int f, const FusedRun<R, S, kPerElement>& run,
                                                            const __m256i (&fixed_in)[4], const __m256 (&x)[4],
                                                            const __m256 (&scale)[4], __m256i w0, __m256i w1,
                                                            __m256d signal, Sink& sink) {
  __m256 t[4], on_zero[4];
  for (int k = 0; k < 4; ++k) {
    const __m256i fixed = _mm256_min_epi32(_mm256_max_epi32(fixed_in[k], run.lo16[f]), run.hi16[f]);
    const __m256i ti = _mm256_srai_epi32(_mm256_add_epi32(fixed, detail::noiseLanes(w0, w1, k)), 16);
    t[k] = _mm256_cvtepi32_ps(ti);
    // t = 0 tested on the integer (the same lanes), off the floating-point ports.
    on_zero[k] = _mm256_castsi256_ps(_mm256_cmpeq_epi32(ti, _mm256_setzero_si256()));
  }
  addFormat(sink, t, on_zero, x, scale, signal);
}

// The 32 elements xs[0, 32) at offset `at` of the run, with noise words w0, w1 (S > 0).
// Returns false, having added nothing, unless all 32 are finite.
// kPaired (R = S): stochastic format R + i has the scales of round-to-nearest format i
// (a gradient's rtn and sr). Its fixed-point product x * (inv * 2^16) is then the round-
// to-nearest product x * inv times 2^16, exactly (a power of two; below 2^-110 both
// truncate to 0), which an integer add to the exponent makes without a multiply, and
// its scales are those already loaded.
template <int R, int S, bool kPaired, bool kPerElement>
__attribute__((always_inline)) inline bool fusedBlock(const float* xs, int64_t at, const FusedRun<R, S, kPerElement>& run,
                                                      __m256i w0, __m256i w1, FusedSinks<R + S>& s) {
  static_assert(!kPaired || R == S);
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 zero = _mm256_setzero_ps();
  __m256 x[4];
  __m256i ax[4];
  for (int k = 0; k < 4; ++k) {
    x[k] = _mm256_loadu_ps(xs + 8 * k);
    ax[k] = _mm256_castps_si256(_mm256_and_ps(x[k], abs_mask));
  }
  const __m256i top = _mm256_max_epi32(_mm256_max_epi32(ax[0], ax[1]), _mm256_max_epi32(ax[2], ax[3]));
  const __m256i nonfinite = _mm256_cmpgt_epi32(top, _mm256_set1_epi32(0x7F7FFFFF));
  if (!__builtin_expect(_mm256_testz_si256(nonfinite, nonfinite), 1)) return false;
  s.fast += 32;
  s.absmax_bits = _mm256_max_epi32(s.absmax_bits, top);
  // The masks below are integer compares on the float bits, which Zen 3 runs on any of its
  // four vector pipes, while its float compares, min/max and multiplies share two.
  const __m256i zero_i = _mm256_setzero_si256();
  __m256 block_signal = zero;
  for (int k = 0; k < 4; ++k) {
    Sink::count(s.zeros, _mm256_castsi256_ps(_mm256_cmpeq_epi32(ax[k], zero_i)));  // x = +-0
    block_signal = _mm256_fmadd_ps(x[k], x[k], block_signal);
  }
  const __m256d signal = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(block_signal)),
                                       _mm256_cvtps_pd(_mm256_extractf128_ps(block_signal, 1)));
  auto params = [&](int f, __m256 (&mul)[4], __m256 (&scale)[4]) {
    for (int k = 0; k < 4; ++k) {
      mul[k] = kPerElement ? _mm256_loadu_ps(run.mul_at[f] + at + 8 * k) : run.mul[f];
      scale[k] = kPerElement ? _mm256_loadu_ps(run.scale_at[f] + at + 8 * k) : run.scale[f];
    }
  };
  for (int f = 0; f < R; ++f) {
    __m256 mul[4], scale[4], v[4], t[4], on_zero[4];
    params(f, mul, scale);
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_mul_ps(x[k], mul[k]);
      t[k] = _mm256_round_ps(v[k], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      // t = +-0: its bits doubled (the sign shifted out) are 0.
      const __m256i tb = _mm256_castps_si256(t[k]);
      on_zero[k] = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_add_epi32(tb, tb), zero_i));
    }
    addFormat(s.sinks[f], t, on_zero, x, scale, signal);
    if constexpr (kPaired) {
      __m256i fixed[4];
      const __m256i times_2_16 = _mm256_set1_epi32(16 << 23);  // + 16 on the exponent
      for (int k = 0; k < 4; ++k)
        fixed[k] = _mm256_cvttps_epi32(_mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(v[k]), times_2_16)));
      stochasticFormat(R + f, run, fixed, x, scale, w0, w1, signal, s.sinks[R + f]);
    }
  }
  if constexpr (!kPaired) {
    for (int f = R; f < R + S; ++f) {
      __m256 mul[4], scale[4];
      __m256i fixed[4];
      params(f, mul, scale);
      for (int k = 0; k < 4; ++k) fixed[k] = _mm256_cvttps_epi32(_mm256_fmadd_ps(x[k], mul[k], zero));
      stochasticFormat(f, run, fixed, x, scale, w0, w1, signal, s.sinks[f]);
    }
  }
  return true;
}

// The 512-bit pair path (avx512Kernels()). Lane j < 8 of a vector holds what lane j of
// the 256-bit path holds for the first block, lane 8 + j what it holds for the second;
// every operation below is lane-wise and the same as fusedBlock's, and the two blocks'
// float sums are added to each sink's double sums first block first, as two fusedBlock
// calls add them. Counts and maxima (order-free) are kept in 512-bit lanes for a run and
// folded into the sinks at its end.
PGQ_AVX512_BEGIN

// The 8 floats at a, then the 8 at b.
PGQ_AVX512 __attribute__((always_inline)) inline __m512 pairLoad(const float* a, const float* b) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(a))),
                                             _mm256_castps_pd(_mm256_loadu_ps(b)), 1));
}

PGQ_AVX512 __attribute__((always_inline)) inline __m512i pairOf(__m256i a, __m256i b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

// Each block's float sums widened as Sink::addBlock widens them (lanes j and j + 4 of
// the block in double, added), first block to a, second to b.
PGQ_AVX512 __attribute__((always_inline)) inline void blockSums(__m512 v, __m256d& a, __m256d& b) {
  const __m512d first = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
  const __m512d second = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  a = _mm256_add_pd(_mm512_castpd512_pd256(first), _mm512_extractf64x4_pd(first, 1));
  b = _mm256_add_pd(_mm512_castpd512_pd256(second), _mm512_extractf64x4_pd(second, 1));
}

// Adds to the counter `into` (its lanes are summed in the end) the lanes that were 0: of
// `vectors` vectors of 16 lanes, those not counted in `nonzero`.
PGQ_AVX512 __attribute__((always_inline)) inline __m256i foldZeros(__m256i into, __m512i nonzero, int64_t vectors) {
  const __m512i zero = _mm512_sub_epi32(_mm512_set1_epi32(int32_t(vectors)), nonzero);
  return _mm256_add_epi32(into, _mm256_add_epi32(_mm512_castsi512_si256(zero), _mm512_extracti64x4_epi64(zero, 1)));
}

// A run's parameters, order-free counts in 512-bit lanes, and the sinks' double sums
// (copied back to the sinks around a pair that goes block by block, and at the end).
// The counts are of lanes that are NOT zero (x) or not on the zero point (t): one
// unsigned min(v, 1) and one add a vector on the integer pipes, where a compare into a
// mask and a masked add made the pass ~8% slower (quant_bench grad2 on the Zen 5 of
// docs/PERFORMANCE.md); the fold takes them off the lanes seen (`vectors` of 16).
template <int N>
struct WideState {
  __m256d signal[N];
  __m256d noise[N];
  __m512 mul[N];  // broadcast runs
  __m512 scale[N];
  __m512i lo16[N];
  __m512i hi16[N];
  __m512i nonzero_t[N];
  __m512i nonzero_x;
  int64_t vectors;
  __m512i absmax_bits;
};

// Format f's share of two fast blocks (addFormat on both), the first block's sums first.
template <int N>
PGQ_AVX512 __attribute__((always_inline)) inline void addFormatPair(int f, WideState<N>& w, const __m512 (&t)[4],
                                                                    const __m512i (&nonzero)[4],
                                                                    const __m512 (&x)[4], const __m512 (&scale)[4],
                                                                    __m256d signal_a, __m256d signal_b) {
  __m512 block_noise = _mm512_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    w.nonzero_t[f] = _mm512_add_epi32(w.nonzero_t[f], nonzero[k]);
    const __m512 err = _mm512_fmsub_ps(t[k], scale[k], x[k]);
    block_noise = _mm512_fmadd_ps(err, err, block_noise);
  }
  __m256d noise_a, noise_b;
  blockSums(block_noise, noise_a, noise_b);
  w.signal[f] = _mm256_add_pd(_mm256_add_pd(w.signal[f], signal_a), signal_b);
  w.noise[f] = _mm256_add_pd(_mm256_add_pd(w.noise[f], noise_a), noise_b);
}

// stochasticFormat on two blocks: the fixed-point products, the noise words of both.
template <int N>
PGQ_AVX512 __attribute__((always_inline)) inline void stochasticPair(int f, WideState<N>& w, const __m512i (&fixed_in)[4],
                                                                     const __m512 (&x)[4], const __m512 (&scale)[4],
                                                                     __m512i w0, __m512i w1, __m256d signal_a,
                                                                     __m256d signal_b) {
  __m512 t[4];
  __m512i nonzero[4];
  for (int k = 0; k < 4; ++k) {
    const __m512i fixed = _mm512_min_epi32(_mm512_max_epi32(fixed_in[k], w.lo16[f]), w.hi16[f]);
    const __m512i word = k < 2 ? w0 : w1;
    const __m512i bits = k % 2 == 0 ? _mm512_and_si512(word, _mm512_set1_epi32(0xFFFF)) : _mm512_srli_epi32(word, 16);
    const __m512i ti = _mm512_srai_epi32(_mm512_add_epi32(fixed, bits), 16);
    t[k] = _mm512_cvtepi32_ps(ti);
    nonzero[k] = _mm512_min_epu32(ti, _mm512_set1_epi32(1));  // 0 where ti = 0, else 1
  }
  addFormatPair<N>(f, w, t, nonzero, x, scale, signal_a, signal_b);
}

// Format f's multipliers and scales for the two blocks at offset `at` of the run.
template <int R, int S, bool kPerElement>
PGQ_AVX512 __attribute__((always_inline)) inline void pairParams(const FusedRun<R, S, kPerElement>& run,
                                                                 const WideState<R + S>& w, int f, int64_t at,
                                                                 __m512 (&mul)[4], __m512 (&scale)[4]) {
  for (int k = 0; k < 4; ++k) {
    mul[k] = kPerElement ? pairLoad(run.mul_at[f] + at + 8 * k, run.mul_at[f] + at + 32 + 8 * k) : w.mul[f];
    scale[k] = kPerElement ? pairLoad(run.scale_at[f] + at + 8 * k, run.scale_at[f] + at + 32 + 8 * k) : w.scale[f];
  }
}

// fusedBlock on the blocks xs[0, 32) and xs[32, 64) at once (noise words: words[0],
// words[1] for the first, words[2], words[3] for the second). Returns false, having added
// nothing, unless all 64 are finite.
template <int R, int S, bool kPaired, bool kPerElement>
PGQ_AVX512 __attribute__((always_inline)) inline bool fusedPair(const float* xs, int64_t at,
                                                                const FusedRun<R, S, kPerElement>& run,
                                                                const __m256i (&words)[4], WideState<R + S>& w,
                                                                FusedSinks<R + S>& s) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512 zero = _mm512_setzero_ps();
  const __m512i zero_i = _mm512_setzero_si512();
  __m512 x[4];
  __m512i ax[4];
  for (int k = 0; k < 4; ++k) {
    x[k] = pairLoad(xs + 8 * k, xs + 32 + 8 * k);
    ax[k] = _mm512_and_si512(_mm512_castps_si512(x[k]), abs_mask);
  }
  const __m512i top = _mm512_max_epi32(_mm512_max_epi32(ax[0], ax[1]), _mm512_max_epi32(ax[2], ax[3]));
  if (__builtin_expect(_mm512_cmpgt_epi32_mask(top, _mm512_set1_epi32(0x7F7FFFFF)) != 0, 0)) return false;
  s.fast += 64;
  w.vectors += 4;
  w.absmax_bits = _mm512_max_epi32(w.absmax_bits, top);
  __m512 block_signal = zero;
  for (int k = 0; k < 4; ++k) {
    w.nonzero_x = _mm512_add_epi32(w.nonzero_x, _mm512_min_epu32(ax[k], _mm512_set1_epi32(1)));  // x = +-0: 0
    block_signal = _mm512_fmadd_ps(x[k], x[k], block_signal);
  }
  __m256d signal_a, signal_b;
  blockSums(block_signal, signal_a, signal_b);
  const __m512i w0 = S > 0 ? pairOf(words[0], words[2]) : zero_i;
  const __m512i w1 = S > 0 ? pairOf(words[1], words[3]) : zero_i;
  for (int f = 0; f < R; ++f) {
    __m512 mul[4], scale[4], v[4], t[4];
    __m512i nonzero[4];
    pairParams(run, w, f, at, mul, scale);
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm512_mul_ps(x[k], mul[k]);
      t[k] = _mm512_roundscale_ps(v[k], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512i tb = _mm512_castps_si512(t[k]);
      // t = +-0: its bits doubled (the sign shifted out) are 0.
      nonzero[k] = _mm512_min_epu32(_mm512_add_epi32(tb, tb), _mm512_set1_epi32(1));
    }
    addFormatPair<R + S>(f, w, t, nonzero, x, scale, signal_a, signal_b);
    if constexpr (kPaired) {
      __m512i fixed[4];
      const __m512i times_2_16 = _mm512_set1_epi32(16 << 23);
      for (int k = 0; k < 4; ++k)
        fixed[k] = _mm512_cvttps_epi32(_mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(v[k]), times_2_16)));
      stochasticPair<R + S>(R + f, w, fixed, x, scale, w0, w1, signal_a, signal_b);
    }
  }
  if constexpr (!kPaired) {
    for (int f = R; f < R + S; ++f) {
      __m512 mul[4], scale[4];
      __m512i fixed[4];
      pairParams(run, w, f, at, mul, scale);
      for (int k = 0; k < 4; ++k) fixed[k] = _mm512_cvttps_epi32(_mm512_fmadd_ps(x[k], mul[k], zero));
      stochasticPair<R + S>(f, w, fixed, x, scale, w0, w1, signal_a, signal_b);
    }
  }
  return true;
}

// The blocks of a run from pos on, two at a time while two fit, as fusedRun's loop takes
// them one at a time: a pair with a non-finite element goes block by block (fusedBlock,
// then `single`). Returns where it stopped (fewer than 64 elements left).
template <int R, int S, bool kPaired, bool kPerElement, typename Single>
PGQ_AVX512 int64_t fusedPairs(const float* x, int64_t index, int64_t pos, int64_t len,
                              const FusedRun<R, S, kPerElement>& run, detail::SrState& noise, FusedSinks<R + S>& s,
                              Single&& single) {
  constexpr int N = R + S;
  WideState<N> w;
  for (int f = 0; f < N; ++f) {
    if constexpr (!kPerElement) {
      w.mul[f] = _mm512_set1_ps(_mm256_cvtss_f32(run.mul[f]));
      w.scale[f] = _mm512_set1_ps(_mm256_cvtss_f32(run.scale[f]));
    }
    w.lo16[f] = _mm512_set1_epi32(_mm256_cvtsi256_si32(run.lo16[f]));
    w.hi16[f] = _mm512_set1_epi32(_mm256_cvtsi256_si32(run.hi16[f]));
    w.nonzero_t[f] = _mm512_setzero_si512();
    w.signal[f] = s.sinks[f].signal;
    w.noise[f] = s.sinks[f].noise;
  }
  w.nonzero_x = _mm512_setzero_si512();
  w.vectors = 0;
  w.absmax_bits = _mm512_setzero_si512();
  for (; pos + 64 <= len; pos += 64) {
    __m256i words[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    if constexpr (S > 0) {
      // at() may refill its buffer: the first block's words are read before the second's.
      const uint32_t* a = noise.at(index + pos);
      words[0] = _mm256_load_si256(reinterpret_cast<const __m256i*>(a));
      words[1] = _mm256_load_si256(reinterpret_cast<const __m256i*>(a + 8));
      const uint32_t* b = noise.at(index + pos + 32);
      words[2] = _mm256_load_si256(reinterpret_cast<const __m256i*>(b));
      words[3] = _mm256_load_si256(reinterpret_cast<const __m256i*>(b + 8));
    }
    if (fusedPair<R, S, kPaired, kPerElement>(x + pos, pos, run, words, w, s)) continue;
    // Block by block, through the sinks.
    for (int f = 0; f < N; ++f) {
      s.sinks[f].signal = w.signal[f];
      s.sinks[f].noise = w.noise[f];
    }
    if (!fusedBlock<R, S, kPaired, kPerElement>(x + pos, pos, run, words[0], words[1], s)) single(pos, 32);
    if (!fusedBlock<R, S, kPaired, kPerElement>(x + pos + 32, pos + 32, run, words[2], words[3], s))
      single(pos + 32, 32);
    for (int f = 0; f < N; ++f) {
      w.signal[f] = s.sinks[f].signal;
      w.noise[f] = s.sinks[f].noise;
    }
  }
  for (int f = 0; f < N; ++f) {
    s.sinks[f].signal = w.signal[f];
    s.sinks[f].noise = w.noise[f];
    s.sinks[f].underflow = foldZeros(s.sinks[f].underflow, w.nonzero_t[f], w.vectors);
  }
  s.zeros = foldZeros(s.zeros, w.nonzero_x, w.vectors);
  s.absmax_bits = _mm256_max_epi32(s.absmax_bits, _mm256_max_epi32(_mm512_castsi512_si256(w.absmax_bits),
                                                                    _mm512_extracti64x4_epi64(w.absmax_bits, 1)));
  return pos;
}
PGQ_AVX512_END

// Elements [at, at + n) of the run x (element indices index ..) in format f alone,
// through quantStatsWithParams()'s own pass.
template <bool kPerElement>
void singleFormat(const float* x, int64_t index, int64_t at, int64_t n, const RunParams& p, bool stochastic,
                  const QuantPlan& plan, detail::SrState& sr, Sink& sink) {
  if (stochastic) {
    detail::processRun<true, kPerElement>(x + at, index + at, n, detail::offsetParams<true, kPerElement>(p, at),
                                          plan.lo(), plan.hi(), &sr, sink);
  } else {
    detail::processRun<false, kPerElement>(x + at, index + at, n, detail::offsetParams<false, kPerElement>(p, at),
                                           plan.lo(), plan.hi(), &sr, sink);
  }
}

// The run x[0, len) (element indices index ..) in R + S formats, cut into blocks as
// processRun cuts it: stochastic runs at multiples of 32 element indices (a ragged head
// first), round-to-nearest runs from their first element; a ragged tail last. The two
// cuts agree when the run starts at a multiple of 32; a run with both roundings that
// does not (quantStatsWithParams() fuses the roundings only where none does) goes
// format by format.
template <int R, int S, bool kPaired, bool kPerElement>
void fusedRun(const float* x, int64_t index, int64_t len, const RunParams (&p)[R + S], const QuantPlan* const* plans,
              detail::SrState& noise, detail::SrState* alone, FusedSinks<R + S>& s) {
  using Run = FusedRun<R, S, kPerElement>;
  auto single = [&](int64_t at, int64_t n) {
    for (int f = 0; f < R + S; ++f)
      singleFormat<kPerElement>(x, index, at, n, p[f], f >= R, *plans[f], alone[f], s.sinks[f]);
  };
  if (Run::prescaled(p) || (R > 0 && S > 0 && index % 32 != 0)) return single(0, len);
  const Run run(p, plans);
  int64_t pos = 0;
  if constexpr (S > 0) {
    pos = std::min<int64_t>(len, (32 - (index & 31)) & 31);
    if (pos > 0) single(0, pos);
  }
  if (avx512Kernels()) pos = fusedPairs<R, S, kPaired, kPerElement>(x, index, pos, len, run, noise, s, single);
  for (; pos + 32 <= len; pos += 32) {
    __m256i w0 = _mm256_setzero_si256(), w1 = _mm256_setzero_si256();
    if constexpr (S > 0) {
      const uint32_t* w = noise.at(index + pos);
      w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w));
      w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 8));
    }
    if (!fusedBlock<R, S, kPaired, kPerElement>(x + pos, pos, run, w0, w1, s)) single(pos, 32);
  }
  if (pos < len) single(pos, len - pos);
}

// One work unit in R + S formats, each with its plan.
template <int R, int S, bool kPaired = false>
void fusedUnit(const QuantPlan* const* plans, int64_t unit, const float* x, SrStream sr, Partial* out) {
  constexpr int N = R + S;
  FusedSinks<N> s;
  detail::SrState noise(sr);
  std::vector<detail::SrState> alone(N, detail::SrState(sr));
  plans[0]->forEachRun(unit, [&](int64_t index, int64_t len, RunParams p0, bool per_element) {
    RunParams p[N];
    for (int f = 0; f < N; ++f) p[f] = plans[f]->sameRunAs(p0, *plans[0]);
    if (per_element) {
      fusedRun<R, S, kPaired, true>(x + index, index, len, p, plans, noise, alone.data(), s);
    } else {
      fusedRun<R, S, kPaired, false>(x + index, index, len, p, plans, noise, alone.data(), s);
    }
  });
  for (int f = 0; f < N; ++f) out[f] = s.result(f);
}

// fusedUnit for r formats with round to nearest and s stochastic, 1 <= r + s <= kMaxFused;
// paired: r = s and stochastic format r + i has the scales of format i.
void fusedUnitAny(int r, int s, bool paired, const QuantPlan* const* plans, int64_t unit, const float* x, SrStream sr,
                  Partial* out) {
  if (paired && r == 1) return fusedUnit<1, 1, true>(plans, unit, x, sr, out);
  if (paired && r == 2) return fusedUnit<2, 2, true>(plans, unit, x, sr, out);
  switch (r * 8 + s) {
    case 1: return fusedUnit<0, 1>(plans, unit, x, sr, out);
    case 8: return fusedUnit<1, 0>(plans, unit, x, sr, out);
    case 2: return fusedUnit<0, 2>(plans, unit, x, sr, out);
    case 3: return fusedUnit<0, 3>(plans, unit, x, sr, out);
    case 4: return fusedUnit<0, 4>(plans, unit, x, sr, out);
    case 9: return fusedUnit<1, 1>(plans, unit, x, sr, out);
    case 10: return fusedUnit<1, 2>(plans, unit, x, sr, out);
    case 11: return fusedUnit<1, 3>(plans, unit, x, sr, out);
    case 16: return fusedUnit<2, 0>(plans, unit, x, sr, out);
    case 17: return fusedUnit<2, 1>(plans, unit, x, sr, out);
    case 18: return fusedUnit<2, 2>(plans, unit, x, sr, out);
    case 24: return fusedUnit<3, 0>(plans, unit, x, sr, out);
    case 25: return fusedUnit<3, 1>(plans, unit, x, sr, out);
    default: return fusedUnit<4, 0>(plans, unit, x, sr, out);
  }
}

bool sameParams(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() &&
         (a.data() == b.data() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Whether every stochastic format of which[r, 2r) can be paired with a round-to-nearest
// one of which[0, r) with the same scales (fusedBlock's kPaired); if so, puts each in
// its partner's place (r + i for i). The stochastic formats' order is otherwise free.
bool pairByScales(std::span<const std::span<const float>> params, int r, std::vector<size_t>& which) {
  if (r == 0 || 2 * r != int(which.size())) return false;
  for (int i = 0; i < r; ++i) {
    int j = r + i;
    while (j < 2 * r && !sameParams(params[which[i]], params[which[j]])) ++j;
    if (j == 2 * r) return false;
    std::swap(which[r + i], which[j]);
  }
  return true;
}

// The statistics of x in formats[which[0..n)] (1 <= n <= kMaxFused): formats that share
// a pass, those with round to nearest first.
void fusedStats(std::span<const float> x, const OperandView& view, std::span<const QuantFormat> formats,
                std::span<const std::span<const float>> params, SrStream sr, std::vector<size_t> which,
                std::vector<QuantStats>& stats) {
  const int n = int(which.size());
  int r = 0;
  while (r < n && formats[which[r]].rounding == Rounding::kNearest) ++r;
  const bool paired = pairByScales(params, r, which);
  std::vector<QuantPlan> plans;
  for (size_t i : which) plans.emplace_back(view, formats[i], params[i], 0);
  std::array<const QuantPlan*, kMaxFused> plan_ptrs{};
  for (int f = 0; f < n; ++f) plan_ptrs[f] = &plans[f];
  const int64_t units = plans[0].units();
  std::vector<Partial> partials(static_cast<size_t>(units * n));
#pragma omp parallel for schedule(static)
  for (int64_t unit = 0; unit < units; ++unit) {
    Partial* out = &partials[unit * n];
    fusedUnitAny(r, n - r, paired, plan_ptrs.data(), unit, x.data(), sr, out);
    for (int f = 0; f < n; ++f) {
      if (detail::needsWideSums(out[f])) {
        out[f] = detail::unitStatsOf(plans[f], unit, x.data(), formats[which[f]], sr, /*wide=*/true,
                                     /*count_clipped=*/false);
      }
    }
  }
  for (int f = 0; f < n; ++f) {
    std::vector<Partial> mine(static_cast<size_t>(units));
    for (int64_t unit = 0; unit < units; ++unit) mine[unit] = partials[unit * n + f];
    stats[which[f]] = detail::combinePartials(mine, view);
  }
}

}  // namespace

std::vector<QuantStats> quantStatsWithParams(std::span<const float> x, const OperandView& view,
                                             std::span<const QuantFormat> formats,
                                             std::span<const std::span<const float>> params, SrStream sr,
                                             bool params_from_x) {
  if (params.size() != formats.size()) {
    throw KernelError::format("quantStats: {} formats but {} params buffers", formats.size(), params.size());
  }
  std::vector<QuantStats> stats(formats.size());
  // Passes: up to kMaxFused fusable formats with the same groups, round to nearest first;
  // both roundings in one pass only where the runs are aligned.
  std::vector<bool> done(formats.size(), false);
  for (size_t i = 0; i < formats.size(); ++i) {
    if (done[i]) continue;
    std::vector<size_t> which = {i};
    if (fusable(formats[i], params_from_x)) {
      const bool mixed = runsAligned(view, formats[i]);
      for (size_t j = i + 1; j < formats.size() && which.size() < size_t(kMaxFused); ++j) {
        if (!done[j] && fusable(formats[j], params_from_x) && sameGroups(formats[i], formats[j]) &&
            (mixed || formats[j].rounding == formats[i].rounding))
          which.push_back(j);
      }
    }
    for (size_t j : which) done[j] = true;
    // A fusable format alone takes the fused pass too: its blocks skip the clamp and the
    // masks that quantStatsWithParams()'s general pass needs, with the same sums.
    if (which.size() == 1 && !fusable(formats[i], params_from_x)) {
      stats[i] = quantStatsWithParams(x, view, formats[i], params[i], sr, params_from_x);
      continue;
    }
    for (size_t j : which) {
      detail::checkQuantArgs("quantStats", int64_t(x.size()), view, formats[j], int64_t(params[j].size()));
    }
    std::stable_partition(which.begin(), which.end(),
                          [&](size_t j) { return formats[j].rounding == Rounding::kNearest; });
    fusedStats(x, view, formats, params, sr, which, stats);
  }
  return stats;
}

}  // namespace pgq::kernels
