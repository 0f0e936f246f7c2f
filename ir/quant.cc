#include "ir/quant.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/errors.h"

namespace pgq {

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

int64_t quantParamCount(const QuantOperandShape& operand, const QuantFormat& format) {
  return pgq::quantParamCount(format, operand.batch, operand.channels, operand.contract);
}


}  // namespace pgq
