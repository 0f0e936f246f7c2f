#pragma once
// A value made item by item ([items, rows, cols], e.g. an attention's scores per batch and
// head) and quantized while each item is still in cache, as Transformer Engine fuses a
// cast into the kernel that makes its input. An item's quantizations read only that item
// (scales per channel or block, rounding to nearest): each item is made, then each of its
// quantizations run on it, one item per thread at a time. The scales, zero points and
// stored bytes equal, bit for bit, computeQuantParams, quantize and quantizeDynamic on the
// whole value (quantize.h), for any thread count.
#include <cstdint>
#include <functional>
#include <span>

#include "kernels/gemm_shape.h"
#include "kernels/quant_format.h"
#include "kernels/quantize.h"

namespace pgq::kernels {

// One quantization of a value [items, rows, cols] (or its scales alone).
struct ItemQuantization {
  const float* x = nullptr;  // the whole value
  OperandView item;          // one item's view: batch 1, the value's rows and cols
  QuantFormat format;
  // The whole value's quantParamCount() floats (layout in quant_format.h: scales, then
  // zero points); filled by this entry, or read, for a quantize, from `scales_of`'s.
  float* params = nullptr;
  // Stored bytes of the whole value (u8 for a GEMM's lhs, s8 for its rhs); null for an
  // entry that computes scales alone.
  void* out = nullptr;
  bool u8 = false;
  // For a quantize: the index of the earlier entry that computes its scales (params must
  // be that entry's). `dynamic`: this quantize computes them itself (quantizeDynamic; the
  // entry then does nothing; its format must equal this one's but for rounding).
  int scales_of = -1;
  bool dynamic = false;
  SrStream sr;
};

// Whether `format` quantizes each item of a value on its own, as quantizeItems needs:
// int8-storage grids with scales per channel or block (not 2-D tiles) made just in time
// from the item's values, no clipping and no Hadamard transform, rounding to nearest
// (stochastic rounding's noise is keyed by the index in the whole value).
bool quantizesItemsAlone(const QuantFormat& format);

// For each item b in [0, items): make(b) writes the item, then every entry quantizes it
// in order. Throws KernelError for an entry quantizesItemsAlone() refuses or whose
// buffers do not fit.
void quantizeItems(int64_t items, const std::function<void(int64_t)>& make, std::span<const ItemQuantization> entries);

}  // namespace pgq::kernels
