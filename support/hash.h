#pragma once
// FNV-1a 64-bit: a cheap identity for the files a run reads (a corpus, an ONNX model),
// recorded in checkpoints so that a resumed run can tell it reads the same bytes.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pgq {

uint64_t fnv1a64(const uint8_t* data, size_t size, uint64_t hash = 0xcbf29ce484222325ull);
inline uint64_t fnv1a64(std::string_view text) {
  return fnv1a64(reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

}  // namespace pgq
