#include "kernels/quantize_items.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/kernel_error.h"

namespace pgq::kernels {

bool quantizesItemsAlone(const QuantFormat& format) {
  return !format.isEmulated() && format.granularity != Granularity::kPerTensor &&
         !(format.granularity == Granularity::kPerBlock && format.block2d) && !format.hadamard &&
         format.clipping == Clipping::kNone && format.rounding == Rounding::kNearest;
}

namespace {

// Item b's scales and zero points, computed into `item` (quantParamCount of one item), to
// their places in the whole value's buffer: groups are numbered item by item, and the
// zero points follow all the scales.
void storeItemParams(const ItemQuantization& e, const std::vector<float>& item, int64_t b, int64_t items) {
  const int64_t groups = quantGroupCount(e.item, e.format);
  std::copy_n(item.begin(), groups, e.params + b * groups);
  if (e.format.asymmetric) std::copy_n(item.begin() + groups, groups, e.params + items * groups + b * groups);
}

// Every entry's work on item b, after make(b). `scratch[i]` holds entry i's scales of
// this item (a params entry's, which a later quantize reads).
void quantizeItem(int64_t b, int64_t items, std::span<const ItemQuantization> entries, const std::vector<bool>& done_by_quantize,
                  std::vector<std::vector<float>>& scratch) {
  for (size_t i = 0; i < entries.size(); ++i) {
    const ItemQuantization& e = entries[i];
    const int64_t n = e.item.elements();
    const std::span<const float> x(e.x + b * n, static_cast<size_t>(n));
    if (e.out == nullptr) {
      if (done_by_quantize[i]) continue;
      computeQuantParams(x, e.item, e.format, scratch[i], e.sr);
      storeItemParams(e, scratch[i], b, items);
      continue;
    }
    std::vector<float>& params = scratch[static_cast<size_t>(e.scales_of)];
    if (e.dynamic) {
      if (e.u8)
        quantizeDynamic(x, e.item, e.format, params, std::span<uint8_t>(static_cast<uint8_t*>(e.out) + b * n, n), e.sr);
      else
        quantizeDynamic(x, e.item, e.format, params, std::span<int8_t>(static_cast<int8_t*>(e.out) + b * n, n), e.sr);
      storeItemParams(entries[static_cast<size_t>(e.scales_of)], params, b, items);
    } else if (e.u8) {
      quantize(x, e.item, e.format, params, std::span<uint8_t>(static_cast<uint8_t*>(e.out) + b * n, n), e.sr);
    } else {
      quantize(x, e.item, e.format, params, std::span<int8_t>(static_cast<int8_t*>(e.out) + b * n, n), e.sr);
    }
  }
}

}  // namespace

void quantizeItems(int64_t items, const std::function<void(int64_t)>& make, std::span<const ItemQuantization> entries) {
  // Everything the kernels would refuse is refused here, before any thread starts: an
  // exception must not leave an OpenMP region.
  std::vector<bool> done_by_quantize(entries.size(), false);
  for (size_t i = 0; i < entries.size(); ++i) {
    const ItemQuantization& e = entries[i];
    checkFormat(e.format);
    e.item.validate();
    if (!quantizesItemsAlone(e.format) || e.item.batch != 1)
      throw KernelError::format("quantizeItems: entry {} ({}, batch {}) does not quantize items on their own", i,
                                e.format.toString(), e.item.batch);
    if (e.out == nullptr) continue;
    const bool earlier = e.scales_of >= 0 && static_cast<size_t>(e.scales_of) < i &&
                         entries[static_cast<size_t>(e.scales_of)].out == nullptr;
    if (!earlier || !(entries[static_cast<size_t>(e.scales_of)].item == e.item))
      throw KernelError::format("quantizeItems: entry {} reads the scales of entry {}, not an earlier scales entry of its view",
                                i, e.scales_of);
    const QuantFormat& own = entries[static_cast<size_t>(e.scales_of)].format;
    if (quantParamCount(e.item, own) != quantParamCount(e.item, e.format))
      throw KernelError::format("quantizeItems: entry {} ({}) reads scales of {}", i, e.format.toString(), own.toString());
    if (e.dynamic) done_by_quantize[static_cast<size_t>(e.scales_of)] = true;
  }
  auto scratchFor = [&] {
    std::vector<std::vector<float>> scratch(entries.size());
    for (size_t i = 0; i < entries.size(); ++i)
      if (entries[i].out == nullptr)
        scratch[i].resize(static_cast<size_t>(quantParamCount(entries[i].item, entries[i].format)));
    return scratch;
  };
  // Each thread makes and quantizes its own items; the kernels called for one item then
  // run on that thread alone (a nested region is inactive). Where nesting is active they
  // would start threads of their own, so the items run one after the other instead, each
  // kernel on all threads: the same results, without oversubscribing the cores.
  if (omp_in_parallel() || omp_get_max_active_levels() > 1) {
    std::vector<std::vector<float>> scratch = scratchFor();
    for (int64_t b = 0; b < items; ++b) {
      make(b);
      quantizeItem(b, items, entries, done_by_quantize, scratch);
    }
    return;
  }
#pragma omp parallel
  {
    std::vector<std::vector<float>> scratch = scratchFor();
#pragma omp for schedule(static)
    for (int64_t b = 0; b < items; ++b) {
      make(b);
      quantizeItem(b, items, entries, done_by_quantize, scratch);
    }
  }
}

}  // namespace pgq::kernels
