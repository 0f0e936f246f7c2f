#pragma once
// Reading an ONNX model file and the constant tensors in it (initializers, Constant
// nodes' values, external data). The ONNX importer's lowest layer: it knows protobuf
// and ONNX's tensor encodings, nothing of pgq's IR.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <onnx/onnx_pb.h>

#include "support/file_io.h"

namespace pgq {

class ExternalData;

// Parses the ONNX model at `path` (at most 2 GiB, protobuf's limit), reading it in
// chunks. Throws pgq::Error naming the file when it cannot be read, is not an ONNX
// protobuf (a text file, a truncated download), has no graph or imports no opset of the
// default domain. `fingerprint`, when given, receives the FNV-1a hash of the file's
// bytes (support/hash.h).
// `weights`, when given, keeps the file open and the raw_data of every graph initializer
// of kInlineWeightBytes or more in it: those tensors come back without data, and
// tensorFromProto and floatsFromProto read them from the file when given the same
// `weights`. A model's weights are then held once while it is imported (as the values
// decoded), not also as protobuf bytes.
onnx::ModelProto readOnnxModel(const std::string& path, uint64_t* fingerprint = nullptr,
                               ExternalData* weights = nullptr);
inline constexpr uint64_t kInlineWeightBytes = uint64_t{64} << 10;

// The opset version the model imports for the default domain ("" or "ai.onnx").
// Throws pgq::Error (naming `model_file` when given) when there is none.
int64_t defaultOpset(const onnx::ModelProto& model, const std::string& model_file = "");

// FLOAT, DOUBLE, FLOAT16 and BFLOAT16: the onnx::TensorProto_DataType values pgq
// computes in float32.
bool isOnnxFloatType(int32_t dtype);

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
  bool isFloat() const;    // isOnnxFloatType(dtype)
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

// The most bytes the values of one ConstTensor may take, 8 an element (they are
// doubles): 2 GiB, 268435456 elements. A tensor whose dims ask for more is refused with a
// message naming it before anything is allocated, rather than failing with bad_alloc (or
// waking the OOM killer). The largest weight of a model pgq can train on a CPU is far
// smaller (Llama 3.2 1B's 128256 x 2048 embedding, 263 million elements, still fits).
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
// Under libFuzzer (2 GiB of memory by default, ASan's overhead included) a tensor at the
// real budget would be reported as running out of memory; the same checks run at 64 MiB.
inline constexpr uint64_t kMaxConstTensorBytes = uint64_t{64} << 20;
#else
inline constexpr uint64_t kMaxConstTensorBytes = uint64_t{1} << 31;
#endif

// The external data files of one model (tensors whose data_location is EXTERNAL, as
// torch.onnx.export writes them to model.onnx.data), each mapped read-only (mmap,
// MAP_PRIVATE) the first time a tensor reads from it and unmapped when this object is
// destroyed. An importer owns one for the whole import of a model and passes it to every
// tensorFromProto and attributeTensor call, so that each file is opened and mapped once
// and tensors are decoded from the mapping, never copied into a buffer first: the page
// cache, not pgq's heap, holds the bytes read. Files are keyed by their real path
// (symlinks resolved). The ConstTensors read never point into a mapping.
class ExternalData {
 public:
  ExternalData();
  ~ExternalData();
  ExternalData(const ExternalData&) = delete;
  ExternalData& operator=(const ExternalData&) = delete;

  // The whole content of the file at `real_path` (symlinks resolved; tensorFromProto
  // has checked that it lies in the model's folder), mapped on first use and valid as
  // long as this object. Throws pgq::Error naming the path when it is not a regular
  // file (checked with stat, so a FIFO is never opened) or cannot be opened or mapped.
  // A file cut shorter while mapped makes reading past its new end fault (SIGBUS), as
  // with any reader that maps files.
  std::string_view file(const std::filesystem::path& real_path);
  // How many files are mapped now.
  size_t mappedFiles() const { return files_.size(); }
  // Hands the pages of `bytes` (a view of one of the mappings, a tensor just decoded)
  // back to the page cache, so that a model's external weights are not all resident at
  // once besides the values decoded from them.
  void release(std::string_view bytes);

  // Where an initializer's raw_data lies in the model file itself (readOnnxModel with
  // `weights`).
  struct Range {
    uint64_t offset = 0;
    uint64_t length = 0;
  };
  void keepModelFile(InputFile file, std::map<std::string, Range> ranges);
  // Where the raw_data of initializer `name` lies in the model file, when it was left
  // there; readInline reads range.length bytes of it into `dst`.
  std::optional<Range> inlineRange(const std::string& name) const;
  void readInline(const std::string& name, const Range& range, char* dst);

 private:
  struct Mapping;
  std::map<std::string, std::unique_ptr<Mapping>> files_;
  std::optional<InputFile> model_file_;
  std::map<std::string, Range> inline_;
};

// The values of initializer or attribute tensor `t` of the model `model_file`, whose
// external data files are looked up in `model_dir`. Supports FLOAT, DOUBLE, FLOAT16,
// BFLOAT16, INT64, INT32, INT16, INT8, UINT8, UINT16, UINT32, UINT64 and BOOL; throws
// pgq::Error naming the file and the tensor otherwise, when the data does not match the
// dims, and when the dims need more than kMaxConstTensorBytes.
// External data is read from `external_data`'s mappings, or from a mapping made for this
// tensor alone when it is null. Its `location` must be a regular file inside the model's
// folder once every symlink is resolved (a link that escapes the folder, directly or
// through a linked folder, is refused naming the location); `offset` (default 0) and
// `length` (default: to the end of the file) must lie within the file and `length` must be
// what the dims and dtype need, all checked before any byte is read.
ConstTensor tensorFromProto(const onnx::TensorProto& t, const std::filesystem::path& model_dir,
                            const std::string& model_file, ExternalData* external_data = nullptr);

// The values of initializer `t` as float32 (a weight the model trains), decoded straight
// from its bytes (FLOAT's are copied, never widened to doubles on the way), with the same
// checks and messages as tensorFromProto; `dims`, when given, receives its dims. For the
// float dtypes (ConstTensor::isFloat).
std::vector<float> floatsFromProto(const onnx::TensorProto& t, const std::filesystem::path& model_dir,
                                   const std::string& model_file, ExternalData* external_data,
                                   std::vector<int64_t>* dims);

// The value of a Constant node's attribute: `value` (a tensor), `value_float(s)` or
// `value_int(s)`. A `value` tensor with external data is read through `model_dir` (and
// `external_data`, as tensorFromProto does). Messages name `model_file` and `node` when
// given.
ConstTensor attributeTensor(const onnx::AttributeProto& attribute, const std::filesystem::path& model_dir = {},
                            const std::string& model_file = "", const std::string& node = "",
                            ExternalData* external_data = nullptr);

}  // namespace pgq
