#include "kernels/quant_format.h"

#include "kernels/kernel_error.h"
#include "support/errors.h"

namespace pgq::kernels {

void checkFormat(const QuantFormat& format) {
  try {
    format.validate();
  } catch (const Error& error) {
    throw KernelError(error.what());
  }
}

QuantGrid gridOf(const QuantFormat& format) {
  if (format.asymmetric) return {0, (1 << format.bits) - 1};
  int qmax = (1 << (format.bits - 1)) - 1;
  return {-qmax, qmax};
}

StorageType storageOf(const QuantFormat& format, GemmSide side) {
  return side == GemmSide::kLhs ? StorageType::kU8 : StorageType::kS8;
}

int storageOffset(const QuantFormat& format, GemmSide side) {
  int half = 1 << (format.bits - 1);
  if (side == GemmSide::kLhs) return format.asymmetric ? 0 : half;
  return format.asymmetric ? -half : 0;
}

int64_t blockCount(const OperandView& view, const QuantFormat& format) {
  return quantBlockCount(format, view.contractLength());
}

int64_t quantGroupCount(const OperandView& view, const QuantFormat& format) {
  return pgq::quantGroupCount(format, view.batch, view.channels(), view.contractLength());
}

int64_t quantParamCount(const OperandView& view, const QuantFormat& format) {
  return pgq::quantParamCount(format, view.batch, view.channels(), view.contractLength());
}

}  // namespace pgq::kernels
