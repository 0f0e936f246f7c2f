#pragma once
// Element types of IR tensors. Quantization scales are tensors of their own, never
// part of a dtype (they change every training step).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace pgq {

enum class DType : uint8_t { kF32, kBF16, kS8, kU8, kS32 };

std::string_view dtypeName(DType dtype);          // "f32", "bf16", "s8", "u8", "s32"
std::optional<DType> parseDType(std::string_view text);
size_t dtypeSize(DType dtype);                    // bytes per element
bool isFloat(DType dtype);                        // f32 or bf16

}  // namespace pgq
