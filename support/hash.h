#pragma once
// FNV-1a 64-bit: a cheap identity for the files a run reads (a corpus, an ONNX model),
// recorded in checkpoints so that a resumed run can tell it reads the same bytes.
#include <cstddef>
#include <cstdint>

namespace pgq {

uint64_t fnv1a64(const uint8_t* data, size_t size, uint64_t hash = 0xcbf29ce484222325ull);

}  // namespace pgq
