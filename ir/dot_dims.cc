#include "ir/dot_dims.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/errors.h"

namespace pgq {
namespace {

std::vector<int64_t> freeDims(int rank, const std::vector<int64_t>& contract,
                              const std::vector<int64_t>& batch) {
  std::vector<int64_t> free;
  for (int64_t d = 0; d < rank; ++d)
    if (std::find(contract.begin(), contract.end(), d) == contract.end() &&
        std::find(batch.begin(), batch.end(), d) == batch.end())
      free.push_back(d);
  return free;
}

void checkSide(const char* side, const Shape& shape, const std::vector<int64_t>& contract,
               const std::vector<int64_t>& batch) {
  std::vector<bool> used(static_cast<size_t>(shape.rank()), false);
  for (const auto* list : {&contract, &batch})
    for (int64_t d : *list) {
      if (d < 0 || d >= shape.rank())
        throw Error(fmt::format("matmul {} dim {} is out of range for shape {}", side, d,
                                shape.toString()));
      if (used[static_cast<size_t>(d)])
        throw Error(fmt::format("matmul {} dim {} is listed twice", side, d));
      used[static_cast<size_t>(d)] = true;
    }
}

int64_t productOf(const Shape& shape, const std::vector<int64_t>& dims) {
  int64_t p = 1;
  for (int64_t d : dims) p *= shape.dim(static_cast<int>(d));
  return p;
}

}  // namespace

std::vector<int64_t> freeDimsOf(int rank, const std::vector<int64_t>& contract, const std::vector<int64_t>& batch) {
  return freeDims(rank, contract, batch);
}

OperandOrder operandOrder(int rank, const std::vector<int64_t>& contract, const std::vector<int64_t>& batch) {
  std::vector<int64_t> free = freeDims(rank, contract, batch);
  auto storedAs = [&](const std::vector<int64_t>& first, const std::vector<int64_t>& second) {
    std::vector<int64_t> order = batch;
    order.insert(order.end(), first.begin(), first.end());
    order.insert(order.end(), second.begin(), second.end());
    for (size_t i = 0; i < order.size(); ++i)
      if (order[i] != static_cast<int64_t>(i)) return false;
    return static_cast<int>(order.size()) == rank;
  };
  if (storedAs(free, contract)) return OperandOrder::kFreeFirst;
  if (storedAs(contract, free)) return OperandOrder::kContractFirst;
  return OperandOrder::kNeedsPermute;
}

DotDims DotDims::fromAttrs(const Attrs& attrs) {
  return {attrs.getIntsOr(AttrKey::kLhsContract, {}), attrs.getIntsOr(AttrKey::kRhsContract, {}),
          attrs.getIntsOr(AttrKey::kLhsBatch, {}), attrs.getIntsOr(AttrKey::kRhsBatch, {})};
}

void DotDims::toAttrs(Attrs& attrs) const {
  attrs.set(AttrKey::kLhsContract, lhs_contract);
  attrs.set(AttrKey::kRhsContract, rhs_contract);
  if (!lhs_batch.empty() || !rhs_batch.empty()) {
    attrs.set(AttrKey::kLhsBatch, lhs_batch);
    attrs.set(AttrKey::kRhsBatch, rhs_batch);
  }
}

std::vector<int64_t> DotDims::lhsFree(int lhs_rank) const {
  return freeDims(lhs_rank, lhs_contract, lhs_batch);
}

std::vector<int64_t> DotDims::rhsFree(int rhs_rank) const {
  return freeDims(rhs_rank, rhs_contract, rhs_batch);
}

Shape dotResultShape(const Shape& lhs, const Shape& rhs, const DotDims& dims) {
  checkSide("lhs", lhs, dims.lhs_contract, dims.lhs_batch);
  checkSide("rhs", rhs, dims.rhs_contract, dims.rhs_batch);
  if (dims.lhs_contract.empty())
    throw Error("matmul needs at least one contracting dim (lhs_contract)");
  if (dims.lhs_contract.size() != dims.rhs_contract.size())
    throw Error(fmt::format("matmul lhs_contract [{}] and rhs_contract [{}] differ in length",
                            fmt::join(dims.lhs_contract, ","), fmt::join(dims.rhs_contract, ",")));
  if (dims.lhs_batch.size() != dims.rhs_batch.size())
    throw Error(fmt::format("matmul lhs_batch [{}] and rhs_batch [{}] differ in length",
                            fmt::join(dims.lhs_batch, ","), fmt::join(dims.rhs_batch, ",")));
  auto checkPairs = [&](const char* what, const std::vector<int64_t>& l,
                        const std::vector<int64_t>& r) {
    for (size_t i = 0; i < l.size(); ++i)
      if (lhs.dim(static_cast<int>(l[i])) != rhs.dim(static_cast<int>(r[i])))
        throw Error(fmt::format("matmul {} dims differ: lhs {} dim {} is {}, rhs {} dim {} is {}",
                                what, lhs.toString(), l[i], lhs.dim(static_cast<int>(l[i])),
                                rhs.toString(), r[i], rhs.dim(static_cast<int>(r[i]))));
  };
  checkPairs("contracting", dims.lhs_contract, dims.rhs_contract);
  checkPairs("batch", dims.lhs_batch, dims.rhs_batch);

  std::vector<int64_t> out;
  for (int64_t d : dims.lhs_batch) out.push_back(lhs.dim(static_cast<int>(d)));
  for (int64_t d : dims.lhsFree(lhs.rank())) out.push_back(lhs.dim(static_cast<int>(d)));
  for (int64_t d : dims.rhsFree(rhs.rank())) out.push_back(rhs.dim(static_cast<int>(d)));
  return Shape(std::move(out));
}

GemmSizes gemmSizes(const Shape& lhs, const Shape& rhs, const DotDims& dims) {
  return {productOf(lhs, dims.lhs_batch), productOf(lhs, dims.lhsFree(lhs.rank())),
          productOf(lhs, dims.lhs_contract), productOf(rhs, dims.rhsFree(rhs.rank()))};
}

}  // namespace pgq
