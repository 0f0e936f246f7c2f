#include "ir/quant.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "ir/errors.h"
#include "kernels/kernel_error.h"
#include "kernels/quant_format.h"

namespace pgq {
namespace {

kernels::QuantFormat parseFormat(const std::string& text) {
  try {
    return kernels::QuantFormat::parse(text);
  } catch (const kernels::KernelError& e) {
    throw Error(fmt::format("bad quantization format \"{}\": {}", text, e.what()));
  }
}

}  // namespace

QuantOperandShape quantOperandShape(const Shape& shape, const std::vector<int64_t>& contract_dims,
                                    const std::vector<int64_t>& batch_dims) {
  if (contract_dims.empty()) throw Error("contract_dims must name at least one dim");
  std::vector<bool> used(static_cast<size_t>(shape.rank()), false);
  QuantOperandShape out;
  for (const auto* list : {&contract_dims, &batch_dims})
    for (int64_t d : *list) {
      if (d < 0 || d >= shape.rank() || used[static_cast<size_t>(d)])
        throw Error(fmt::format("contract_dims [{}] and batch_dims [{}] must be distinct dims of {}",
                                fmt::join(contract_dims, ","), fmt::join(batch_dims, ","), shape.toString()));
      used[static_cast<size_t>(d)] = true;
      (list == &contract_dims ? out.contract : out.batch) *= shape.dim(static_cast<int>(d));
    }
  for (int d = 0; d < shape.rank(); ++d)
    if (!used[static_cast<size_t>(d)]) out.channels *= shape.dim(d);
  return out;
}

int64_t quantParamCount(const QuantOperandShape& operand, const std::string& format) {
  kernels::OperandView view{operand.batch, operand.channels, operand.contract, true};
  return kernels::quantParamCount(view, parseFormat(format));
}

int quantFormatBits(const std::string& format) { return parseFormat(format).bits; }

bool quantFormatIsStochastic(const std::string& format) {
  return parseFormat(format).rounding == kernels::Rounding::kStochastic;
}

}  // namespace pgq
