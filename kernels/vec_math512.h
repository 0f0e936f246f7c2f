#pragma once
// Internal to kernels/: what pgq's 512-bit paths share (where the CPU has AVX-512,
// avx512Kernels(): quantize.cc, quant_stats_fused.cc, softmax.cc, elementwise.cc): the
// target attribute and diagnostics macros, and 512-bit versions of vec_math.h's exp and
// the activations built on it. Each function is its 256-bit twin's operations in the
// same order on 16 lanes (a masked move where the twin ands with a compare's all-ones
// lanes), so every lane's result is the twin's bit for bit; tests compare the paths
// (softmax_test.cc, elementwise_test.cc). Functions here carry the target attribute:
// call them only from functions that have it too (PGQ_AVX512), and only when
// avx512Kernels() is true.
#include <immintrin.h>

#include "kernels/vec_math.h"

#define PGQ_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

// Around the functions of a .cc file that use these: GCC 12 warns that its own
// _mm512_undefined_* placeholders are (or "may be") used uninitialized once the
// intrinsics are inlined there; they are never read.
#if !defined(__clang__)
#define PGQ_AVX512_BEGIN                                           \
  _Pragma("GCC diagnostic push")                                   \
  _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")      \
  _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define PGQ_AVX512_END _Pragma("GCC diagnostic pop")
#else
#define PGQ_AVX512_BEGIN
#define PGQ_AVX512_END
#endif

namespace pgq::kernels::vec {

// vexp on 16 lanes.
PGQ_AVX512 __attribute__((always_inline)) inline __m512 vexp512(__m512 x) {
  const __mmask16 zero = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-104.0f), _CMP_LE_OQ);
  x = _mm512_maskz_mov_ps(__mmask16(~zero), x);
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), _mm512_min_ps(_mm512_set1_ps(88.8f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i ni = _mm512_cvtps_epi32(n);
  const __m512i n1 = _mm512_srai_epi32(ni, 1);
  const __m512i n2 = _mm512_sub_epi32(ni, n1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
  return _mm512_maskz_mov_ps(__mmask16(~zero), _mm512_mul_ps(_mm512_mul_ps(p, s1), s2));
}

// vgelu on 16 lanes.
PGQ_AVX512 __attribute__((always_inline)) inline __m512 vgelu512(__m512 x) {
  const __m512 x2 = _mm512_mul_ps(x, x);
  const __m512 inner = _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(-2.0f * kGeluBeta)),
                                     _mm512_fmadd_ps(x2, _mm512_set1_ps(kGeluKappa), _mm512_set1_ps(1.0f)));
  const __m512 e = vexp512(inner);
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

// vgeluGrad on 16 lanes.
PGQ_AVX512 __attribute__((always_inline)) inline __m512 vgeluGrad512(__m512 x) {
  const __m512 x2 = _mm512_mul_ps(x, x);
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 arg = _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(-2.0f * kGeluBeta)),
                             _mm512_fmadd_ps(x2, _mm512_set1_ps(kGeluKappa), one));
  arg = _mm512_min_ps(_mm512_set1_ps(88.0f), arg);
  const __m512 e = vexp512(arg);
  const __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, e));
  const __m512 one_minus_s = _mm512_mul_ps(e, s);
  const __m512 du = _mm512_mul_ps(_mm512_set1_ps(2.0f * kGeluBeta),
                                  _mm512_fmadd_ps(x2, _mm512_set1_ps(3.0f * kGeluKappa), one));
  return _mm512_mul_ps(s, _mm512_fmadd_ps(_mm512_mul_ps(x, one_minus_s), du, one));
}

// vsilu on 16 lanes.
PGQ_AVX512 __attribute__((always_inline)) inline __m512 vsilu512(__m512 x) {
  const __m512 e = vexp512(_mm512_sub_ps(_mm512_setzero_ps(), x));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

// vsiluGrad on 16 lanes.
PGQ_AVX512 __attribute__((always_inline)) inline __m512 vsiluGrad512(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = vexp512(_mm512_min_ps(_mm512_set1_ps(88.0f), _mm512_sub_ps(_mm512_setzero_ps(), x)));
  const __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, e));
  return _mm512_mul_ps(s, _mm512_fmadd_ps(x, _mm512_mul_ps(e, s), one));
}

}  // namespace pgq::kernels::vec
