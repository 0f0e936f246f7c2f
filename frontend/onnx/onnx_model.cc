#include "frontend/onnx/onnx_model.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "support/errors.h"
#include "support/file_io.h"
#include "support/hash.h"

namespace pgq {
namespace {

namespace fs = std::filesystem;
using onnx::TensorProto;

constexpr double kTwo63 = 9223372036854775808.0;

// Bytes per element of the dtypes whose values can be read, 0 for the others.
size_t elementSize(int32_t dtype) {
  switch (dtype) {
    case TensorProto::BOOL:
    case TensorProto::INT8:
    case TensorProto::UINT8: return 1;
    case TensorProto::INT16:
    case TensorProto::UINT16:
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16: return 2;
    case TensorProto::INT32:
    case TensorProto::UINT32:
    case TensorProto::FLOAT: return 4;
    case TensorProto::INT64:
    case TensorProto::UINT64:
    case TensorProto::DOUBLE: return 8;
    default: return 0;
  }
}

// IEEE binary16 by hand: clang 14 has no _Float16 on x86-64 (GCC has), and the fuzz
// build uses clang.
double halfBitsToDouble(uint16_t bits) {
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);  // zero and subnormals
  if (exponent == 31) return mantissa ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// `value` rounded to the nearest binary16 value, ties to even; beyond the largest
// finite value (65504) plus half a step, infinity.
double roundToHalf(double value) {
  if (std::isnan(value) || std::isinf(value) || value == 0) return value;
  int e = 0;
  std::frexp(std::abs(value), &e);  // |value| = m * 2^e, m in [0.5, 1)
  const double quantum = std::ldexp(1.0, std::max(e - 1, -14) - 10);
  const double rounded = std::nearbyint(std::abs(value) / quantum) * quantum;
  return std::copysign(rounded > 65504.0 ? HUGE_VAL : rounded, value);
}

double bfloat16BitsToDouble(uint16_t bits) {
  return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(bits) << 16));
}

// Where a tensor comes from, for messages: "m.onnx: initializer 'w'".
struct TensorContext {
  std::string model_file;
  std::string what;

  [[noreturn]] void fail(const std::string& message) const {
    throw Error(model_file.empty() ? fmt::format("{}: {}", what, message)
                                   : fmt::format("{}: {}: {}", model_file, what, message));
  }
};

// A signed or unsigned 64-bit integer as a double, refusing what a double cannot hold
// exactly (except the INT64_MAX/INT64_MIN sentinels, see ConstTensor).
double exactInteger(int64_t v, const TensorContext& ctx) {
  if (v == std::numeric_limits<int64_t>::max()) return kTwo63;
  if (v == std::numeric_limits<int64_t>::min()) return -kTwo63;
  if (v > int64_t{1} << 53 || v < -(int64_t{1} << 53))
    ctx.fail(fmt::format("value {} is beyond 2^53, which pgq cannot hold exactly", v));
  return static_cast<double>(v);
}

double exactUnsigned(uint64_t v, const TensorContext& ctx) {
  if (v > uint64_t{1} << 53) ctx.fail(fmt::format("value {} is beyond 2^53, which pgq cannot hold exactly", v));
  return static_cast<double>(v);
}

// One element of `dtype` from its little-endian bytes.
double decodeElement(int32_t dtype, const char* p, const TensorContext& ctx) {
  auto load = [p]<typename T>(T) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (dtype) {
    case TensorProto::BOOL: return load(uint8_t{}) != 0 ? 1.0 : 0.0;
    case TensorProto::INT8: return load(int8_t{});
    case TensorProto::UINT8: return load(uint8_t{});
    case TensorProto::INT16: return load(int16_t{});
    case TensorProto::UINT16: return load(uint16_t{});
    case TensorProto::FLOAT16: return halfBitsToDouble(load(uint16_t{}));
    case TensorProto::BFLOAT16: return bfloat16BitsToDouble(load(uint16_t{}));
    case TensorProto::INT32: return load(int32_t{});
    case TensorProto::UINT32: return load(uint32_t{});
    case TensorProto::FLOAT: return load(float{});
    case TensorProto::INT64: return exactInteger(load(int64_t{}), ctx);
    case TensorProto::UINT64: return exactUnsigned(load(uint64_t{}), ctx);
    case TensorProto::DOUBLE: return load(double{});
  }
  throw InternalError(fmt::format("decodeElement: dtype {}", dtype));
}

// How many values the typed field that `t`'s dtype is stored in (when not in raw_data)
// holds, so that a count that does not match the dims is refused before converting.
int typedCount(const TensorProto& t) {
  switch (t.data_type()) {
    case TensorProto::FLOAT: return t.float_data_size();
    case TensorProto::DOUBLE: return t.double_data_size();
    case TensorProto::INT64: return t.int64_data_size();
    case TensorProto::UINT32:
    case TensorProto::UINT64: return t.uint64_data_size();
    default: return t.int32_data_size();
  }
}

// The values in the typed field that `dtype` is stored in when not in raw_data.
std::vector<double> typedValues(const TensorProto& t, const TensorContext& ctx) {
  std::vector<double> out;
  switch (t.data_type()) {
    case TensorProto::FLOAT: out.assign(t.float_data().begin(), t.float_data().end()); break;
    case TensorProto::DOUBLE: out.assign(t.double_data().begin(), t.double_data().end()); break;
    case TensorProto::INT64:
      for (int64_t v : t.int64_data()) out.push_back(exactInteger(v, ctx));
      break;
    case TensorProto::UINT32:
    case TensorProto::UINT64:
      for (uint64_t v : t.uint64_data()) out.push_back(exactUnsigned(v, ctx));
      break;
    case TensorProto::FLOAT16:
      // int32_data holds the bit patterns of the 16-bit floats.
      for (int32_t v : t.int32_data()) out.push_back(halfBitsToDouble(static_cast<uint16_t>(v)));
      break;
    case TensorProto::BFLOAT16:
      for (int32_t v : t.int32_data()) out.push_back(bfloat16BitsToDouble(static_cast<uint16_t>(v)));
      break;
    case TensorProto::BOOL:
      for (int32_t v : t.int32_data()) out.push_back(v != 0 ? 1.0 : 0.0);
      break;
    default: out.assign(t.int32_data().begin(), t.int32_data().end()); break;
  }
  return out;
}

// The real path (every symlink resolved) of external data `location`, a path relative to
// the model's folder. A model is often downloaded: a symlink in its folder (or a linked
// folder on the way) must not let it read any file the user can, so the real path must
// lie inside the real path of the folder. A link that stays inside is fine.
fs::path realExternalFile(const std::string& location, const fs::path& model_dir, const TensorContext& ctx) {
  fs::path relative = fs::path(location).lexically_normal();
  if (relative.is_absolute() || relative.empty() || *relative.begin() == "..")
    ctx.fail(fmt::format("external data location '{}' is not a path inside the model's folder", location));
  std::error_code ec;
  const fs::path real_dir = fs::canonical(model_dir, ec);
  if (ec) ctx.fail(fmt::format("cannot resolve the model's folder {}: {}", model_dir.string(), ec.message()));
  // weakly_canonical resolves what exists (stat and readlink, opening nothing) and
  // keeps a missing tail as written, which the caller reports as missing.
  const fs::path real = fs::weakly_canonical(real_dir / relative, ec);
  if (ec)
    ctx.fail(fmt::format("cannot resolve external data location '{}' in {}: {}", location, model_dir.string(),
                         ec.message()));
  if (std::mismatch(real_dir.begin(), real_dir.end(), real.begin(), real.end()).first != real_dir.end())
    ctx.fail(fmt::format("external data location '{}' leads to {}, outside the model's folder {}", location,
                         real.string(), real_dir.string()));
  return real;
}

// The bytes of a tensor stored outside the model (data_location EXTERNAL): the
// `location` file relative to the model's folder, from `offset` for `length` bytes (to
// the end of the file when there is no `length`, as ONNX specifies). A view into
// `files`' mapping of the file; every range is checked before a byte is read.
std::string_view externalBytes(const TensorProto& t, const fs::path& model_dir, uint64_t expected_bytes,
                               ExternalData& files, const TensorContext& ctx) {
  std::string location;
  uint64_t offset = 0;
  std::optional<uint64_t> length;
  for (const onnx::StringStringEntryProto& entry : t.external_data()) {
    // Decimal digits only (no sign, space or prefix), below 2^64.
    auto number = [&](const std::string& text) {
      uint64_t v = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (text.empty() || ec != std::errc() || end != text.data() + text.size())
        ctx.fail(fmt::format("external data {} '{}' is not a byte count", entry.key(), text));
      return v;
    };
    if (entry.key() == "location") location = entry.value();
    else if (entry.key() == "offset") offset = number(entry.value());
    else if (entry.key() == "length") length = number(entry.value());
  }
  if (location.empty()) ctx.fail("external data has no 'location'");
  PGQ_ASSERT(!model_dir.empty(), "{}: external data read without the model's folder", ctx.what);
  const fs::path real = realExternalFile(location, model_dir, ctx);
  // Messages name the file as the model does, beside the model.
  const std::string file = (model_dir / fs::path(location).lexically_normal()).string();
  struct stat st;
  if (::stat(real.c_str(), &st) != 0 && errno == ENOENT) ctx.fail(fmt::format("missing external data file {}", file));
  std::string_view data;
  try {
    data = files.file(real);
  } catch (const Error& e) {
    ctx.fail(fmt::format("external data location '{}': {}", location, e.what()));
  }
  const uint64_t size = data.size();
  if (offset > size)
    ctx.fail(fmt::format("external data offset {} is past the end of {} ({} bytes)", offset, file, size));
  const uint64_t bytes = length.value_or(size - offset);
  if (bytes != expected_bytes)
    ctx.fail(fmt::format("external data in {} is {} bytes, but its dims and dtype need {}", file, bytes,
                         expected_bytes));
  if (bytes > size - offset)
    ctx.fail(fmt::format("external data at offset {} for {} bytes runs past the end of {} ({} bytes)", offset,
                         bytes, file, size));
  return data.substr(offset, bytes);
}

ConstTensor readTensor(const TensorProto& t, const fs::path& model_dir, ExternalData* files,
                       const TensorContext& ctx) {
  ConstTensor out;
  out.dtype = t.data_type();
  size_t size = elementSize(out.dtype);
  if (size == 0) ctx.fail(fmt::format("dtype {} is not supported", dtypeName(out.dtype)));
  for (int64_t d : t.dims()) {
    if (d < 0) ctx.fail(fmt::format("dimension {} is negative", d));
    out.dims.push_back(d);
  }
  // The element count, refused past the budget before anything is allocated; checking
  // each partial product keeps it from overflowing.
  constexpr uint64_t kMaxElements = kMaxConstTensorBytes / sizeof(double);
  uint64_t count = std::find(out.dims.begin(), out.dims.end(), 0) == out.dims.end() ? 1 : 0;
  for (int64_t d : out.dims) {
    if (count > kMaxElements / static_cast<uint64_t>(d == 0 ? 1 : d))
      ctx.fail(fmt::format("its dims {} make more than {} elements, the most pgq holds in one constant tensor ({} "
                           "as 8-byte doubles)",
                           fmt::join(out.dims, "x"), kMaxElements, byteSizeText(kMaxConstTensorBytes)));
    count *= static_cast<uint64_t>(d);
  }
  const bool external = t.has_data_location() && t.data_location() == TensorProto::EXTERNAL;
  if (external || t.has_raw_data()) {
    ExternalData own_files;  // maps only when `files` is null and the tensor is external
    std::string_view raw =
        external ? externalBytes(t, model_dir, count * size, files ? *files : own_files, ctx) : t.raw_data();
    if (raw.size() != count * size)
      ctx.fail(fmt::format("raw_data has {} bytes, but {} elements of {} need {}", raw.size(), count,
                           dtypeName(out.dtype), count * size));
    out.values.resize(count);
    for (uint64_t i = 0; i < count; ++i) out.values[i] = decodeElement(out.dtype, raw.data() + i * size, ctx);
  } else {
    if (static_cast<uint64_t>(typedCount(t)) != count)
      ctx.fail(fmt::format("has {} values, but its dims {} need {}", typedCount(t), fmt::join(out.dims, "x"),
                           count));
    out.values = typedValues(t, ctx);
  }
  return out;
}

}  // namespace

onnx::ModelProto readOnnxModel(const std::string& path, uint64_t* fingerprint) {
  InputFile file = openInputFile(path, InputKind::kOnnxModel);
  std::string bytes;
  readRest(file, bytes);
  if (fingerprint) *fingerprint = fnv1a64(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  google::protobuf::io::ArrayInputStream stream(bytes.data(), static_cast<int>(bytes.size()));
  google::protobuf::io::CodedInputStream coded(&stream);
  // The default limit is 64 MiB; a model file may have up to 2 GiB.
  coded.SetTotalBytesLimit(INT_MAX);
  onnx::ModelProto model;
  if (!model.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage())
    throw Error(fmt::format("{}: not an ONNX model: it is not a valid ONNX protobuf or is truncated", path));
  // Most byte strings that are not protobuf fail to parse; the few that do lack a graph.
  if (!model.has_graph())
    throw Error(fmt::format("{}: not an ONNX model: it has no graph (not a valid ONNX protobuf, or truncated)", path));
  defaultOpset(model, path);
  return model;
}

int64_t defaultOpset(const onnx::ModelProto& model, const std::string& model_file) {
  for (const onnx::OperatorSetIdProto& opset : model.opset_import())
    if (opset.domain().empty() || opset.domain() == "ai.onnx") return opset.version();
  std::string message = "the model imports no opset of the default ONNX domain (\"\" or \"ai.onnx\")";
  throw Error(model_file.empty() ? message : fmt::format("{}: {}", model_file, message));
}

int64_t ConstTensor::numElements() const { return static_cast<int64_t>(values.size()); }

bool ConstTensor::isInteger() const { return !isFloat() && elementSize(dtype) != 0; }

bool ConstTensor::isFloat() const {
  return dtype == TensorProto::FLOAT || dtype == TensorProto::DOUBLE || dtype == TensorProto::FLOAT16 ||
         dtype == TensorProto::BFLOAT16;
}

std::vector<int64_t> ConstTensor::ints() const {
  std::vector<int64_t> out;
  out.reserve(values.size());
  for (double v : values) {
    if (v >= kTwo63) out.push_back(std::numeric_limits<int64_t>::max());
    else if (v <= -kTwo63) out.push_back(std::numeric_limits<int64_t>::min());
    else if (std::trunc(v) == v) out.push_back(static_cast<int64_t>(v));
    else throw Error(fmt::format("constant value {} is not an integer", v));
  }
  return out;
}

std::vector<float> ConstTensor::floats() const { return {values.begin(), values.end()}; }

std::string dtypeName(int32_t dtype) {
  if (TensorProto::DataType_IsValid(dtype)) return TensorProto::DataType_Name(static_cast<TensorProto::DataType>(dtype));
  return fmt::format("unknown dtype {}", dtype);
}

double roundToDtype(int32_t dtype, double value) {
  // An integer of `bits` bits, wrapped as two's complement arithmetic would.
  auto wrap = [value](int bits, bool is_signed) {
    if (!std::isfinite(value)) return value;
    double span = std::ldexp(1.0, bits);
    double v = std::fmod(std::trunc(value), span);
    if (v < 0) v += span;
    if (is_signed && v >= span / 2) v -= span;
    return v;
  };
  switch (dtype) {
    case TensorProto::FLOAT: return static_cast<float>(value);
    case TensorProto::FLOAT16: return roundToHalf(value);
    case TensorProto::BFLOAT16: {
      uint32_t bits = std::bit_cast<uint32_t>(static_cast<float>(value));
      if (std::isnan(value)) return value;
      bits += 0x7fff + ((bits >> 16) & 1);  // to nearest, ties to even
      return bfloat16BitsToDouble(static_cast<uint16_t>(bits >> 16));
    }
    case TensorProto::BOOL: return value != 0 ? 1.0 : 0.0;
    case TensorProto::INT8: return wrap(8, true);
    case TensorProto::UINT8: return wrap(8, false);
    case TensorProto::INT16: return wrap(16, true);
    case TensorProto::UINT16: return wrap(16, false);
    case TensorProto::INT32: return wrap(32, true);
    case TensorProto::UINT32: return wrap(32, false);
    case TensorProto::INT64:
    case TensorProto::UINT64: return std::isfinite(value) ? std::trunc(value) : value;
    default: return value;
  }
}

struct ExternalData::Mapping {
  void* address = nullptr;  // null for an empty file, which mmap cannot map
  size_t size = 0;

  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (address) ::munmap(address, size);
  }
};

ExternalData::ExternalData() = default;
ExternalData::~ExternalData() = default;

std::string_view ExternalData::file(const fs::path& real_path) {
  std::unique_ptr<Mapping>& mapping = files_[real_path.string()];
  if (!mapping) {
    try {
      // stat before opening, O_NONBLOCK, fstat after: a FIFO or device is never read.
      InputFile in = openInputFile(real_path.string(), InputKind::kOnnxExternalData);
      auto mapped = std::make_unique<Mapping>();
      mapped->size = static_cast<size_t>(in.size);
      if (mapped->size > 0) {
        void* address = ::mmap(nullptr, mapped->size, PROT_READ, MAP_PRIVATE, in.fd.get(), 0);
        if (address == MAP_FAILED)
          throw Error(fmt::format("{}: cannot map it: {}", real_path.string(), std::strerror(errno)));
        mapped->address = address;
      }
      mapping = std::move(mapped);
    } catch (...) {
      files_.erase(real_path.string());
      throw;
    }
  }
  return {static_cast<const char*>(mapping->address), mapping->size};
}

ConstTensor tensorFromProto(const TensorProto& t, const fs::path& model_dir, const std::string& model_file,
                            ExternalData* external_data) {
  return readTensor(t, model_dir, external_data, {model_file, fmt::format("initializer '{}'", t.name())});
}

ConstTensor attributeTensor(const onnx::AttributeProto& attribute, const fs::path& model_dir,
                            const std::string& model_file, const std::string& node, ExternalData* external_data) {
  TensorContext ctx{model_file, node.empty() ? fmt::format("attribute '{}'", attribute.name())
                                             : fmt::format("node '{}': attribute '{}'", node, attribute.name())};
  ConstTensor out;
  const std::string& name = attribute.name();
  if (name == "value") {
    if (!attribute.has_t()) ctx.fail("has no tensor");
    return readTensor(attribute.t(), model_dir, external_data, ctx);
  }
  if (name == "value_float" || name == "value_floats") {
    out.dtype = TensorProto::FLOAT;
    if (name == "value_float") out.values = {attribute.f()};
    else out.values.assign(attribute.floats().begin(), attribute.floats().end());
  } else if (name == "value_int" || name == "value_ints") {
    out.dtype = TensorProto::INT64;
    if (name == "value_int") out.values = {exactInteger(attribute.i(), ctx)};
    else
      for (int64_t v : attribute.ints()) out.values.push_back(exactInteger(v, ctx));
  } else {
    ctx.fail("is not a constant value pgq reads (value, value_float(s) or value_int(s))");
  }
  if (name.ends_with('s')) out.dims = {static_cast<int64_t>(out.values.size())};
  return out;
}

}  // namespace pgq
