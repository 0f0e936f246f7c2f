#include "kernels/float_quant.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "kernels/emulated_forms.h"
#include "kernels/float_quant_core.h"
#include "kernels/kernel_error.h"

namespace pgq::kernels {
namespace detail {

EmulatedGrid emulatedGridOf(const QuantFormat& format) {
  const ElementLimits limits = elementLimits(format);
  EmulatedGrid g;
  g.kind = !format.isFloat()                     ? ElementKind::kInt
           : format.element == Element::kBf16 ? ElementKind::kBf16
                                              : ElementKind::kFloat;
  g.max = float(limits.max);
  if (g.kind == ElementKind::kInt) {
    g.clip_edge = g.max + 0.5f;
  } else {
    g.clip_edge = g.max + std::ldexp(1.0f, limits.emax - limits.mantissa - 1);
    g.lo_exp = (limits.emin + 127) << 23;
    g.mantissa = limits.mantissa << 23;
  }
  return g;
}

void checkEmulatedFormat(const char* what, const QuantFormat& format) {
  checkFormat(format);
  if (!format.isEmulated()) {
    throw KernelError::format(
        "{}: format {} is not emulated (an integer grid with f32 scales runs as an int8 GEMM): "
        "use computeQuantParams and quantize",
        what, format.toString());
  }
}

void checkEmulatedParams(const char* what, const QuantFormat& format, std::span<const float> params,
                         int64_t groups) {
  // On the float bits: a finite float >= kMinScale is a positive normal number, bits in
  // [0x00800000, 0x7F7FFFFF]; a power of two has a zero mantissa field too.
  const uint32_t mantissa_mask = format.scale == ScaleKind::kE8M0 ? 0x7FFFFFu : 0u;
  auto valid = [&](float scale) {
    const uint32_t bits = std::bit_cast<uint32_t>(scale);
    return (bits - 0x00800000u <= 0x7F7FFFFFu - 0x00800000u) & ((bits & mantissa_mask) == 0);
  };
  // One branch-free pass (it vectorizes); the search only when something is wrong.
  uint32_t invalid = 0;
  for (int64_t g = 0; g < groups; ++g) invalid |= uint32_t(!valid(params[g]));
  if (invalid == 0) return;
  for (int64_t g = 0; g < groups; ++g) {
    const float scale = params[g];
    if (!valid(scale)) {
      throw KernelError::format(
          "{}: scale params[{}] = {} is not a finite number >= kMinScale{} (were the params "
          "computed for format {}?)",
          what, g, scale, format.scale == ScaleKind::kE8M0 ? " and a power of two" : "",
          format.toString());
    }
  }
}

}  // namespace detail

namespace {

// Writes s * Q(v) per element of a run.
struct FakeStoreSink {
  float* out;
  void operator()(int64_t index, const detail::Lanes& l, int valid) {
    if (valid == 32) {
      for (int k = 0; k < 4; ++k) {
        _mm256_storeu_ps(out + index + 8 * k, _mm256_mul_ps(l.t[k], l.scale[k]));
      }
    } else {
      alignas(32) float tmp[32];
      for (int k = 0; k < 4; ++k) _mm256_store_ps(tmp + 8 * k, _mm256_mul_ps(l.t[k], l.scale[k]));
      std::memcpy(out + index, tmp, sizeof(float) * size_t(valid));
    }
  }
};

// Ties to even, written out so that the reference does not depend on the rounding mode.
double roundTiesEven(double f) {
  const double down = std::floor(f);
  const double rest = f - down;
  if (rest > 0.5 || (rest == 0.5 && std::fmod(down, 2.0) != 0.0)) return down + 1.0;
  return down;
}

// floor(log2 a) and the significand bits of a normal double a > 0.
int floorLog2(double a) { return int(std::bit_cast<uint64_t>(a) >> 52) - 1023; }
uint64_t significand(double a) { return std::bit_cast<uint64_t>(a) & ((uint64_t(1) << 52) - 1); }

// The scale of an NVFP4 block whose E4M3 scale underflows (scaleFromAbsmax).
constexpr float kUnderflowScale = 0x1p125f;

// 2^e for e in [-126, 127], built from bits.
float powerOfTwo(int e) { return std::bit_cast<float>(uint32_t(e + 127) << 23); }

// emulatedScaleFromAbsmax with the element limits at hand (computeEmulatedScales calls
// it once per group).
float scaleFromAbsmax(double group_absmax, double tensor_absmax, const QuantFormat& format,
                      const ElementLimits& limits) {
  // Absmax values are clamped to [0, FLT_MAX] (NaN counts as 0). Positive values below
  // the smallest float get that value instead (a normal double); the scale does not
  // change, as it is clamped at 2^-126 long before.
  auto clean = [](double a) {
    return a > 0.0
               ? std::clamp(a, double(std::numeric_limits<float>::denorm_min()), double(FLT_MAX))
               : 0.0;
  };
  const double group = clean(group_absmax);
  // bf16 has f32's exponent range: its values need no scale.
  if (format.element == Element::kBf16) return 1.0f;
  switch (format.scale) {
    case ScaleKind::kF32:
      return float(std::max(group / limits.max, double(kMinScale)));
    case ScaleKind::kE8M0:
      // 2^-126 is kMinScale, the smallest scale any group gets.
      return powerOfTwo(group > 0.0 ? std::clamp(floorLog2(group) - limits.emax, -126, 127) : -126);
    case ScaleKind::kE4M3: {
      // NVFP4 as Transformer Engine computes it (docs/features/low_precision_training/
      // nvfp4/nvfp4.rst and common/cast/nvfp4/core_nvfp4.cuh, read in its 2025-26 sources): the tensor's
      // encode scale S = 448 * 6 / tensor absmax in f32, each block's decode scale
      // s_b = e4m3(G * (S * (1/6))) in f32 with round to nearest (TE's
      // compute_decoding_scaling_factor, in its order: the product in double, rounded to
      // f32 and then to E4M3, rounded twice and took 192 for 200.0000075), and an
      // element's value e2m1 * s_b / S. One f32 scale per group holds s_b / S.
      const double tensor = std::max(clean(tensor_absmax), group);
      if (group == 0.0) return kMinScale;
      const float encode = float(std::min(448.0 * limits.max / tensor, double(FLT_MAX)));
      static const QuantFormat kE4m3 = QuantFormat::parse("e4m3:tensor:rtn");
      const float inverse_max = 1.0f / float(limits.max);
      const float block = roundToElement(std::min(float(group) * (encode * inverse_max), FLT_MAX), kE4m3);
      // A block whose s_b underflows E4M3 (G below ~2^-10 * 6 * T / 2688) decodes to 0 on
      // the GPU. A huge scale gives the same: every |x| <= G divided by it rounds to 0
      // (stochastic rounding included), counted as underflow. kMinScale, as before,
      // saturated such a block at 6 * 2^-126 and counted it as clipped. 2^125, not
      // FLT_MAX: an infinity in the block saturates at 6 * 2^125, finite, as elsewhere.
      if (block == 0.0f) return kUnderflowScale;
      return float(std::max(double(block) / double(encode), double(kMinScale)));
    }
    case ScaleKind::kTwoLevel: {
      const double tensor = std::max(clean(tensor_absmax), group);
      const float global = float(std::max(tensor / limits.max, double(kMinScale)));
      if (group == 0.0) return global;
      // c = ceil(log2(group / tensor)), exactly: the exponents' difference, plus one when
      // group's significand exceeds tensor's (the ratio then lies strictly between two
      // powers of two). c is in [-277, 0], and 2^c a double built from bits.
      const int c =
          floorLog2(group) - floorLog2(tensor) + int(significand(group) > significand(tensor));
      const double step = std::bit_cast<double>(uint64_t(c + 1023) << 52);
      return float(std::clamp(double(global) * step, double(FLT_MIN), double(FLT_MAX)));
    }
  }
  return kMinScale;
}

}  // namespace

float emulatedScaleFromAbsmax(double group_absmax, double tensor_absmax,
                              const QuantFormat& format) {
  return scaleFromAbsmax(group_absmax, tensor_absmax, format, elementLimits(format));
}

namespace {

// Each group's absmax, as two ranges whose max(-mn, mx) is it: 1-D groups from
// groupRanges, 2-D tiles as the largest of their channels' blocks.
void groupAbsmaxRanges(const float* x, const OperandView& view, const QuantFormat& format, std::vector<float>& mn,
                       std::vector<float>& mx) {
  if (!format.block2d) {
    detail::groupRanges(x, view, format, mn, mx);
    return;
  }
  std::vector<float> row_mn, row_mx;
  detail::groupRanges(x, view, detail::rowFormat(format), row_mn, row_mx);
  mn.assign(size_t(quantGroupCount(view, format)), 0.0f);
  mx.assign(mn.size(), 0.0f);
  for (int64_t g = 0; g < int64_t(row_mx.size()); ++g) {
    const int64_t t = detail::tileOfGroup(view, format, g);
    mn[t] = std::min(mn[t], row_mn[g]);
    mx[t] = std::max(mx[t], row_mx[g]);
  }
}

}  // namespace

void computeEmulatedScales(std::span<const float> x, const OperandView& view,
                           const QuantFormat& format, std::span<float> params, SrStream sr) {
  detail::checkEmulatedFormat("computeEmulatedScales", format);
  detail::checkQuantArgs("computeEmulatedScales", int64_t(x.size()), view, format,
                         int64_t(params.size()));
  if (format.hadamard) {
    QuantFormat plain = format;
    plain.hadamard = false;
    computeEmulatedScales(detail::hadamardCopy(x, view, sr.offset), view, plain, params, sr);
    return;
  }
  if (format.element == Element::kBf16) {  // one group, no scale
    std::fill(params.begin(), params.end(), 1.0f);
    return;
  }
  std::vector<float> mn, mx;
  groupAbsmaxRanges(x.data(), view, format, mn, mx);
  const int64_t groups = int64_t(mx.size());
  const ElementLimits limits = elementLimits(format);
  if (format.scale == ScaleKind::kE8M0) {
    // scaleFromAbsmax's e8m0 case on the float bits of each absmax, branch-free (MX
    // formats have a group per 32 elements): floor(log2 a) is the exponent field - 127,
    // and a float subnormal or 0 (field 0) lands below -126 like any tiny absmax.
    for (int64_t g = 0; g < groups; ++g) {
      const float absmax = std::max(-mn[g], mx[g]);  // ranges contain 0; may be -0
      const int field = int((std::bit_cast<uint32_t>(absmax) >> 23) & 0xFF);
      const int exponent = std::clamp(field - 127 - limits.emax, -126, 127);
      params[g] = powerOfTwo(exponent);
    }
    return;
  }
  double tensor = 0.0;  // two_level and e4m3 only
  for (int64_t g = 0; g < groups; ++g) {
    mx[g] = std::max(-mn[g], mx[g]);
    tensor = std::max(tensor, double(mx[g]));
  }
  for (int64_t g = 0; g < groups; ++g) params[g] = scaleFromAbsmax(mx[g], tensor, format, limits);
}

void fakeQuantize(std::span<const float> x, const OperandView& view, const QuantFormat& format,
                  std::span<const float> params, std::span<float> out, SrStream sr) {
  detail::checkEmulatedFormat("fakeQuantize", format);
  detail::checkQuantArgs("fakeQuantize", int64_t(x.size()), view, format, int64_t(params.size()));
  if (int64_t(out.size()) != view.elements()) {
    throw KernelError::format("fakeQuantize: output has {} elements, the view needs {}", out.size(),
                              view.elements());
  }
  // In place is fine (each block is read before it is written); a shifted overlap is not.
  const std::less<const float*> before;
  const float* x_end = x.data() + x.size();
  const float* out_end = out.data() + out.size();
  if (out.data() != x.data() && before(out.data(), x_end) && before(x.data(), out_end)) {
    throw KernelError("fakeQuantize: x and out overlap without being the same buffer");
  }
  detail::checkEmulatedParams("fakeQuantize", format, params, quantGroupCount(view, format));
  if (format.hadamard) {
    // Quantize H D x, then give the GEMM D H Q(H D x): the product of two such operands
    // is that of the transformed ones (hadamard.h).
    QuantFormat plain = format;
    plain.hadamard = false;
    const std::vector<float> y = detail::hadamardCopy(x, view, sr.offset);
    fakeQuantize(y, view, plain, params, out, sr);
    hadamardTransform(out, view, sr.offset, /*inverse=*/true, out);
    return;
  }
  if (format.block2d) {
    fakeQuantize(x, view, detail::rowFormat(format), detail::expandTileParams(view, format, params), out, sr);
    return;
  }
  const detail::QuantPlan plan = detail::emulatedPlan(view, format, params);
  const detail::EmulatedGrid grid = detail::emulatedGridOf(format);
  const detail::GridLanes lanes(grid);
  const bool stochastic = format.rounding == Rounding::kStochastic;
#pragma omp parallel for schedule(static)
  for (int64_t unit = 0; unit < plan.units(); ++unit) {
    detail::SrState sr_state(sr);
    FakeStoreSink sink{out.data()};
    plan.forEachRun(
        unit,
        [&](int64_t index, int64_t len, const detail::RunParams& p, bool per_elem) {
          detail::emulatedRunAny(stochastic, grid.kind, per_elem, x.data() + index, index,
                                 len, p, lanes, &sr_state, sink);
        },
        /*rows_at_once=*/true, /*blocks_at_once=*/true);
  }
}

float roundToElement(float v, const QuantFormat& format, uint32_t noise16) {
  const ElementLimits limits = elementLimits(format);
  const float max = float(limits.max);
  // bf16 does not saturate: beyond its max it rounds to Inf, as the conversion does.
  const bool bf16 = format.element == Element::kBf16;
  const float c = std::isnan(v) || bf16 ? v : std::clamp(v, -max, max);
  if (std::isnan(c) || std::isinf(c)) return c;
  // ilogb(0) is below every emin, so 0 takes the subnormal step.
  const float step = format.isFloat()
                         ? std::ldexp(1.0f, std::max(std::ilogb(c), limits.emin) - limits.mantissa)
                         : 1.0f;
  const double f = double(c) / double(step);  // exact: step is a power of two
  if (format.rounding == Rounding::kNearest) {
    return std::copysign(float(roundTiesEven(f)) * step, c);  // keeps the sign of zero
  }
  const double t = std::floor((std::trunc(f * 65536.0) + double(noise16 & 0xFFFFu)) / 65536.0);
  return float(t) * step + 0.0f;  // t = 0 gives +0
}

}  // namespace pgq::kernels
