#pragma once
// Reading an ONNX model file and the constant tensors in it (initializers, Constant
// nodes' values, external data). The ONNX importer's lowest layer: it knows protobuf
// and ONNX's tensor encodings, nothing of pgq's IR.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace pgq {

// Parses the ONNX model at `path` (at most 2 GiB, protobuf's limit). Throws pgq::Error
// naming the file when it cannot be read, is not an ONNX protobuf (a text file, a
// truncated download), has no graph or imports no opset of the default domain.
// `fingerprint`, when given, receives the FNV-1a hash of the file's bytes (support/hash.h).
onnx::ModelProto readOnnxModel(const std::string& path, uint64_t* fingerprint = nullptr);

// The opset version the model imports for the default domain ("" or "ai.onnx").
// Throws pgq::Error (naming `model_file` when given) when there is none.
int64_t defaultOpset(const onnx::ModelProto& model, const std::string& model_file = "");

// A tensor of constant values: an initializer, a Constant node's value or a folded
// computation. Every element is held as a double: floats exactly, integers exactly up
// to 2^53 in magnitude. INT64_MAX and INT64_MIN, which exporters use for "to the end"
// in Slice, are the only larger integers accepted; they are held as +-2^63 and ints()
// gives them back.
struct ConstTensor {
  int32_t dtype = 0;  // an onnx::TensorProto_DataType
  std::vector<int64_t> dims;
  std::vector<double> values;  // row-major; bool as 0/1

  int64_t numElements() const;
  bool isInteger() const;  // INT8..INT64, UINT8..UINT64 and BOOL
  bool isFloat() const;    // FLOAT, DOUBLE, FLOAT16 and BFLOAT16
  // The values as integers; throws pgq::Error when one is not integral.
  std::vector<int64_t> ints() const;
  std::vector<float> floats() const;
};

// "FLOAT", "INT64", ...: a dtype's name for messages.
std::string dtypeName(int32_t dtype);

// Rounds `value` to what an element of `dtype` can hold: float32's nearest for FLOAT,
// half's for FLOAT16, bfloat16's for BFLOAT16, truncates integers toward zero and wraps
// those of 8 to 32 bits (as a runtime computing in that type would), maps BOOL to 0/1.
double roundToDtype(int32_t dtype, double value);

// The values of initializer or attribute tensor `t` of the model `model_file`, whose
// external data files are looked up in `model_dir` (and may not lie outside it).
// Supports FLOAT, DOUBLE, FLOAT16, BFLOAT16, INT64, INT32, INT16, INT8, UINT8, UINT16,
// UINT32, UINT64 and BOOL; throws pgq::Error naming the file and the tensor otherwise, and
// when the data does not match the dims.
ConstTensor tensorFromProto(const onnx::TensorProto& t, const std::filesystem::path& model_dir,
                            const std::string& model_file);

// The value of a Constant node's attribute: `value` (a tensor), `value_float(s)` or
// `value_int(s)`. A `value` tensor with external data is read through `model_dir`.
// Messages name `model_file` and `node` when given.
ConstTensor attributeTensor(const onnx::AttributeProto& attribute, const std::filesystem::path& model_dir = {},
                            const std::string& model_file = "", const std::string& node = "");

}  // namespace pgq
