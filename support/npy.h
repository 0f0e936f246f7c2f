#pragma once
// NumPy .npy files (format versions 1.0 and 2.0): the inputs `pgq import` feeds an ONNX
// graph and the loss and gradients it writes, compared against PyTorch's by
// tests/onnx/check_grads.py. Reads little-endian float32, float64, int64, int32 and
// bool arrays in C order, which is what np.save writes for those types on x86 and ARM.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pgq {

struct NpyArray {
  std::string descr;           // "<f4", "<f8", "<i8", "<i4" or "|b1"
  std::vector<int64_t> shape;  // empty for a 0-d array (one element)
  std::vector<char> data;      // numElements() * the item size, C order, little-endian
  int64_t numElements() const;
};

// Reads an .npy file. Throws pgq::Error naming the file and what is wrong: not an .npy
// file, a format version other than 1 or 2, a malformed header, a dtype outside the
// five above, fortran_order True, or data shorter or longer than the shape says.
NpyArray readNpy(const std::string& path);

// Writes `values` as a float32 array of `shape` (format 1.0), atomically for a regular
// file (support/file_io.h). The shape's element count must be values.size().
void writeNpy(const std::string& path, const std::vector<int64_t>& shape, std::span<const float> values);

// The elements as float: float32 as they are, float64 rounded to nearest. Any other
// dtype is an Error naming `path`.
std::vector<float> npyAsFloats(const NpyArray& array, const std::string& path);

// The elements as int32: int32 as they are, int64 when every element fits (token ids
// written by NumPy are int64). Any other dtype, or an int64 out of range, is an Error
// naming `path`.
std::vector<int32_t> npyAsInt32(const NpyArray& array, const std::string& path);

}  // namespace pgq
