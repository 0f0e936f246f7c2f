#include "ir/dtype.h"

#include <array>

namespace pgq {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DTypeInfo, 5> kDTypes = {{
    {DType::kF32, "f32", 4},
    {DType::kBF16, "bf16", 2},
    {DType::kS8, "s8", 1},
    {DType::kU8, "u8", 1},
    {DType::kS32, "s32", 4},
}};

}  // namespace

std::string_view dtypeName(DType dtype) { return kDTypes[static_cast<size_t>(dtype)].name; }

size_t dtypeSize(DType dtype) { return kDTypes[static_cast<size_t>(dtype)].size; }

bool isFloat(DType dtype) { return dtype == DType::kF32 || dtype == DType::kBF16; }

std::optional<DType> parseDType(std::string_view text) {
  for (const DTypeInfo& info : kDTypes)
    if (info.name == text) return info.dtype;
  return std::nullopt;
}

}  // namespace pgq
