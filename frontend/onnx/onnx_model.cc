#include "frontend/onnx/onnx_model.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstring>
#include <exception>
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
  if (location.find('\0') != std::string::npos)  // a path stops at its first NUL: another file would be read
    ctx.fail("external data location holds a NUL byte");
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

// The element count of `t`'s dims (into `dims`), refused past the budget before
// anything is allocated; checking each partial product keeps it from overflowing.
uint64_t checkedCount(const TensorProto& t, std::vector<int64_t>& dims, const TensorContext& ctx) {
  if (elementSize(t.data_type()) == 0) ctx.fail(fmt::format("dtype {} is not supported", dtypeName(t.data_type())));
  for (int64_t d : t.dims()) {
    if (d < 0) ctx.fail(fmt::format("dimension {} is negative", d));
    dims.push_back(d);
  }
  constexpr uint64_t kMaxElements = kMaxConstTensorBytes / sizeof(double);
  uint64_t count = std::find(dims.begin(), dims.end(), 0) == dims.end() ? 1 : 0;
  for (int64_t d : dims) {
    if (count > kMaxElements / static_cast<uint64_t>(d == 0 ? 1 : d))
      ctx.fail(fmt::format("its dims {} make more than {} elements, the most pgq holds in one constant tensor ({} "
                           "as 8-byte doubles)",
                           fmt::join(dims, "x"), kMaxElements, byteSizeText(kMaxConstTensorBytes)));
    count *= static_cast<uint64_t>(d);
  }
  return count;
}

void checkInlineLength(const TensorProto& t, const ExternalData::Range& range, uint64_t count,
                       const TensorContext& ctx) {
  if (range.length != count * elementSize(t.data_type()))
    ctx.fail(fmt::format("raw_data has {} bytes, but {} elements of {} need {}", range.length, count,
                         dtypeName(t.data_type()), count * elementSize(t.data_type())));
}

// The little-endian bytes of `t`'s `count` elements (raw_data; an initializer's raw_data
// left in the model file, read into `scratch`; or external data, whose mapping `files`
// or `own_files` holds), or nullopt when they are in a typed field.
std::optional<std::string_view> rawBytes(const TensorProto& t, const fs::path& model_dir, uint64_t count,
                                         ExternalData* files, ExternalData& own_files, std::string* scratch,
                                         const TensorContext& ctx) {
  const bool external = t.has_data_location() && t.data_location() == TensorProto::EXTERNAL;
  if (std::optional<ExternalData::Range> range =
          !external && scratch && files ? files->inlineRange(t.name()) : std::nullopt) {
    checkInlineLength(t, *range, count, ctx);
    scratch->resize(range->length);
    files->readInline(t.name(), *range, scratch->data());
    return std::string_view(*scratch);
  }
  if (!external && !t.has_raw_data()) {
    std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    if (static_cast<uint64_t>(typedCount(t)) != count)
      ctx.fail(fmt::format("has {} values, but its dims {} need {}", typedCount(t), fmt::join(dims, "x"), count));
    return std::nullopt;
  }
  const size_t size = elementSize(t.data_type());
  std::string_view raw = external ? externalBytes(t, model_dir, count * size, files ? *files : own_files, ctx)
                                  : std::string_view(t.raw_data());
  if (raw.size() != count * size)
    ctx.fail(fmt::format("raw_data has {} bytes, but {} elements of {} need {}", raw.size(), count,
                         dtypeName(t.data_type()), count * size));
  return raw;
}

// Gives a decoded tensor's external pages back (ExternalData::release).
void releaseExternal(const TensorProto& t, std::string_view raw, ExternalData* files) {
  if (files && t.has_data_location() && t.data_location() == TensorProto::EXTERNAL) files->release(raw);
}

// `initializer`: `t` is a graph initializer, whose raw_data may have been left in the
// model file (readOnnxModel's `weights`).
ConstTensor readTensor(const TensorProto& t, const fs::path& model_dir, ExternalData* files,
                       const TensorContext& ctx, bool initializer) {
  ConstTensor out;
  out.dtype = t.data_type();
  const uint64_t count = checkedCount(t, out.dims, ctx);
  ExternalData own_files;  // maps only when `files` is null and the tensor is external
  std::string scratch;
  if (std::optional<std::string_view> raw =
          rawBytes(t, model_dir, count, files, own_files, initializer ? &scratch : nullptr, ctx)) {
    const size_t size = elementSize(out.dtype);
    out.values.resize(count);
    for (uint64_t i = 0; i < count; ++i) out.values[i] = decodeElement(out.dtype, raw->data() + i * size, ctx);
    releaseExternal(t, *raw, files);
  } else {
    out.values = typedValues(t, ctx);
  }
  return out;
}

}  // namespace

namespace {

// A model file for the protobuf parser, read in 1 MiB chunks and hashed as it goes: the
// file's bytes are never held whole, so the parsed model (which copies each tensor's
// bytes) is the only copy in memory. An error reading stops the parse; the caller
// rethrows it.
class ModelFileStream final : public google::protobuf::io::ZeroCopyInputStream {
 public:
  explicit ModelFileStream(InputFile& file) : file_(file), buffer_(kChunk) {}

  bool Next(const void** data, int* size) override {
    if (backed_up_ == 0) {
      if (error_) return false;
      try {
        filled_ = readChunk(file_, buffer_.data(), buffer_.size(), read_);
      } catch (const Error&) {
        error_ = std::current_exception();
        return false;
      }
      if (filled_ == 0) return false;
      read_ += filled_;
      hash_ = fnv1a64(reinterpret_cast<const uint8_t*>(buffer_.data()), filled_, hash_);
      backed_up_ = filled_;
    }
    *data = buffer_.data() + (filled_ - backed_up_);
    *size = static_cast<int>(backed_up_);
    position_ += static_cast<int64_t>(backed_up_);
    backed_up_ = 0;
    return true;
  }
  void BackUp(int count) override {
    backed_up_ = static_cast<size_t>(count);
    position_ -= count;
  }
  bool Skip(int count) override {
    const void* data;
    int size;
    while (count > 0) {
      if (!Next(&data, &size)) return false;
      if (size > count) BackUp(size - count);
      count -= std::min(size, count);
    }
    return true;
  }
  int64_t ByteCount() const override { return position_; }

  uint64_t hash() const { return hash_; }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }
  // Reads (and hashes) what is left after the message, which the parse does not want.
  bool atEnd() {
    const void* data;
    int size;
    return !Next(&data, &size);
  }

 private:
  static constexpr size_t kChunk = size_t{1} << 20;
  InputFile& file_;
  std::vector<char> buffer_;
  size_t filled_ = 0;     // bytes in buffer_
  size_t backed_up_ = 0;  // of them, given back by BackUp (the end of the buffer)
  uint64_t read_ = 0;
  int64_t position_ = 0;
  uint64_t hash_ = 0xcbf29ce484222325ull;  // FNV-1a's offset basis, as fnv1a64's default
  std::exception_ptr error_;
};

}  // namespace

// ---- Leaving large initializers' bytes in the file ----
// A model's protobuf is walked field by field (the wire format: a varint tag of field
// number and wire type, then a varint, 8 bytes, a length and bytes, or 4 bytes) and
// copied, except the raw_data of the graph's large initializers: those bytes are skipped
// and their place in the file recorded. Protobuf 3.21 has no lazy bytes fields, and a
// parse copies every byte string.

namespace {

namespace wire {
constexpr int kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5;
constexpr int kModelGraph = 7;               // ModelProto.graph
constexpr int kGraphInitializer = 5;         // GraphProto.initializer
constexpr int kTensorName = 8;               // TensorProto.name
constexpr int kTensorRawData = 9;            // TensorProto.raw_data
constexpr int kTensorDataLocation = 14;      // TensorProto.data_location
}  // namespace wire

void appendVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void appendBytesField(std::string& out, uint32_t tag, const std::string& bytes) {
  appendVarint(out, tag);
  appendVarint(out, bytes.size());
  out += bytes;
}

// Copies the field whose `tag` was just read; false on a malformed or cut field (or a
// group, which ONNX does not use).
bool copyField(google::protobuf::io::CodedInputStream& in, uint32_t tag, std::string& out) {
  appendVarint(out, tag);
  switch (tag & 7) {
    case wire::kVarint: {
      uint64_t v;
      if (!in.ReadVarint64(&v)) return false;
      appendVarint(out, v);
      return true;
    }
    case wire::kFixed64: {
      uint64_t v;
      if (!in.ReadLittleEndian64(&v)) return false;
      for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
      return true;
    }
    case wire::kFixed32: {
      uint32_t v;
      if (!in.ReadLittleEndian32(&v)) return false;
      for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
      return true;
    }
    case wire::kBytes: {
      uint32_t length;
      std::string bytes;
      if (!in.ReadVarint32(&length) || !in.ReadString(&bytes, static_cast<int>(length))) return false;
      appendVarint(out, length);
      out += bytes;
      return true;
    }
    default: return false;
  }
}

struct Stripper {
  google::protobuf::io::CodedInputStream& in;
  std::map<std::string, ExternalData::Range> ranges;
  std::string duplicate;  // an initializer name seen twice among those stripped

  // Reads the length of a message field and walks it with `walk`, appending it to `out`.
  template <typename Walk>
  bool nested(uint32_t tag, std::string& out, Walk walk) {
    uint32_t length;
    if (!in.ReadVarint32(&length)) return false;
    auto limit = in.PushLimit(static_cast<int>(length));
    std::string inner;
    if (!walk(inner) || !in.ConsumedEntireMessage() || in.BytesUntilLimit() != 0) return false;
    in.PopLimit(limit);
    appendBytesField(out, tag, inner);
    return true;
  }

  bool tensor(std::string& out) {
    std::string name;
    std::optional<ExternalData::Range> raw;
    bool external = false;
    for (uint32_t tag; (tag = in.ReadTag()) != 0;) {
      const int field = static_cast<int>(tag >> 3);
      if (field == wire::kTensorRawData && (tag & 7) == wire::kBytes) {
        uint32_t length;
        if (!in.ReadVarint32(&length)) return false;
        if (length >= kInlineWeightBytes) {
          raw = ExternalData::Range{static_cast<uint64_t>(in.CurrentPosition()), length};
          if (!in.Skip(static_cast<int>(length))) return false;
          continue;
        }
        raw.reset();  // a later raw_data replaces an earlier one, as in a parse
        std::string bytes;
        if (!in.ReadString(&bytes, static_cast<int>(length))) return false;
        appendBytesField(out, tag, bytes);
        continue;
      }
      if (field == wire::kTensorName && (tag & 7) == wire::kBytes) {
        uint32_t length;
        if (!in.ReadVarint32(&length) || !in.ReadString(&name, static_cast<int>(length))) return false;
        appendBytesField(out, tag, name);
        continue;
      }
      if (field == wire::kTensorDataLocation && (tag & 7) == wire::kVarint) {
        uint64_t v;
        if (!in.ReadVarint64(&v)) return false;
        external = v == TensorProto::EXTERNAL;
        appendVarint(out, tag);
        appendVarint(out, v);
        continue;
      }
      if (!copyField(in, tag, out)) return false;
    }
    // External data wins over raw_data (the readers look at data_location first).
    if (raw && !external && !ranges.emplace(name, *raw).second) duplicate = name;
    return true;
  }

  // Copies a message's fields up to its end, walking the message fields numbered
  // `field` with `walk` and copying the others as they are.
  template <typename Walk>
  bool fields(std::string& out, int field, Walk walk) {
    for (uint32_t tag; (tag = in.ReadTag()) != 0;) {
      const bool ok = static_cast<int>(tag >> 3) == field && (tag & 7) == wire::kBytes ? nested(tag, out, walk)
                                                                                       : copyField(in, tag, out);
      if (!ok) return false;
    }
    return true;
  }
  bool graph(std::string& out) {
    return fields(out, wire::kGraphInitializer, [&](std::string& t) { return tensor(t); });
  }
  bool model(std::string& out) {
    return fields(out, wire::kModelGraph, [&](std::string& g) { return graph(g); }) && in.ConsumedEntireMessage();
  }
};

}  // namespace

onnx::ModelProto readOnnxModel(const std::string& path, uint64_t* fingerprint, ExternalData* weights) {
  InputFile file = openInputFile(path, InputKind::kOnnxModel);
  ModelFileStream stream(file);
  onnx::ModelProto model;
  bool parsed;
  std::map<std::string, ExternalData::Range> ranges;
  {
    google::protobuf::io::CodedInputStream coded(&stream);
    // The default limit is 64 MiB; a model file may have up to 2 GiB.
    coded.SetTotalBytesLimit(INT_MAX);
    if (weights) {
      Stripper stripper{coded, {}, {}};
      std::string stripped;
      parsed = stripper.model(stripped) && model.ParseFromString(stripped);
      if (parsed && !stripper.duplicate.empty())
        throw Error(fmt::format("{}: two initializers are named \"{}\"", path, stripper.duplicate));
      ranges = std::move(stripper.ranges);
    } else {
      parsed = model.ParseFromCodedStream(&coded) && coded.ConsumedEntireMessage();
    }
  }  // the coded stream gives back what it read ahead
  stream.rethrow();
  if (!parsed || !stream.atEnd())
    throw Error(fmt::format("{}: not an ONNX model: it is not a valid ONNX protobuf or is truncated", path));
  stream.rethrow();
  if (fingerprint) *fingerprint = stream.hash();
  // Most byte strings that are not protobuf fail to parse; the few that do lack a graph.
  if (!model.has_graph())
    throw Error(fmt::format("{}: not an ONNX model: it has no graph (not a valid ONNX protobuf, or truncated)", path));
  defaultOpset(model, path);
  if (weights) weights->keepModelFile(std::move(file), std::move(ranges));
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

bool isOnnxFloatType(int32_t dtype) {
  return dtype == TensorProto::FLOAT || dtype == TensorProto::DOUBLE || dtype == TensorProto::FLOAT16 ||
         dtype == TensorProto::BFLOAT16;
}

bool ConstTensor::isFloat() const { return isOnnxFloatType(dtype); }

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

void ExternalData::release(std::string_view bytes) {
  // Whole pages inside the range only: a page shared with a neighbouring tensor stays.
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(bytes.data()) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(bytes.data()) + bytes.size()) / page * page;
  // The mapping is private and never written: its pages are the file's, which a later
  // read faults in again. A failure only leaves them resident.
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void ExternalData::keepModelFile(InputFile file, std::map<std::string, Range> ranges) {
  model_file_.emplace(std::move(file));
  inline_ = std::move(ranges);
}

std::optional<ExternalData::Range> ExternalData::inlineRange(const std::string& name) const {
  auto it = inline_.find(name);
  if (it == inline_.end() || !model_file_) return std::nullopt;
  return it->second;
}

void ExternalData::readInline(const std::string& name, const Range& range, char* dst) {
  PGQ_ASSERT(model_file_, "initializer '{}' read from a model file that was not kept", name);
  uint64_t done = 0;
  while (done < range.length) {
    ssize_t got = ::pread(model_file_->fd.get(), dst + done, range.length - done,
                          static_cast<off_t>(range.offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      throw Error(fmt::format("{}: initializer '{}': cannot read its raw_data at byte offset {}: {}",
                              model_file_->path, name, range.offset + done, std::strerror(errno)));
    if (got == 0)
      throw Error(fmt::format("{}: initializer '{}': the file was cut short while it was imported",
                              model_file_->path, name));
    done += static_cast<uint64_t>(got);
  }
}

ConstTensor tensorFromProto(const TensorProto& t, const fs::path& model_dir, const std::string& model_file,
                            ExternalData* external_data) {
  return readTensor(t, model_dir, external_data, {model_file, fmt::format("initializer '{}'", t.name())}, true);
}

std::vector<float> floatsFromProto(const TensorProto& t, const fs::path& model_dir, const std::string& model_file,
                                   ExternalData* external_data, std::vector<int64_t>* dims) {
  TensorContext ctx{model_file, fmt::format("initializer '{}'", t.name())};
  std::vector<int64_t> shape;
  const uint64_t count = checkedCount(t, shape, ctx);
  if (dims) *dims = shape;
  std::vector<float> out;
  const bool external = t.has_data_location() && t.data_location() == TensorProto::EXTERNAL;
  if (std::optional<ExternalData::Range> range =
          !external && external_data && t.data_type() == TensorProto::FLOAT && std::endian::native == std::endian::little
              ? external_data->inlineRange(t.name())
              : std::nullopt) {
    checkInlineLength(t, *range, count, ctx);  // read straight into the values
    out.resize(count);
    external_data->readInline(t.name(), *range, reinterpret_cast<char*>(out.data()));
    return out;
  }
  ExternalData own_files;
  std::string scratch;
  std::optional<std::string_view> raw = rawBytes(t, model_dir, count, external_data, own_files, &scratch, ctx);
  if (raw && t.data_type() == TensorProto::FLOAT && std::endian::native == std::endian::little) {
    out.resize(count);
    if (count) std::memcpy(out.data(), raw->data(), raw->size());
  } else if (raw) {
    const size_t size = elementSize(t.data_type());
    out.resize(count);
    for (uint64_t i = 0; i < count; ++i)
      out[i] = static_cast<float>(decodeElement(t.data_type(), raw->data() + i * size, ctx));
  } else if (t.data_type() == TensorProto::FLOAT) {
    out.assign(t.float_data().begin(), t.float_data().end());
  } else {
    std::vector<double> values = typedValues(t, ctx);
    out.assign(values.begin(), values.end());
  }
  if (raw) releaseExternal(t, *raw, external_data);
  return out;
}

ConstTensor attributeTensor(const onnx::AttributeProto& attribute, const fs::path& model_dir,
                            const std::string& model_file, const std::string& node, ExternalData* external_data) {
  TensorContext ctx{model_file, node.empty() ? fmt::format("attribute '{}'", attribute.name())
                                             : fmt::format("node '{}': attribute '{}'", node, attribute.name())};
  ConstTensor out;
  const std::string& name = attribute.name();
  if (name == "value") {
    if (!attribute.has_t()) ctx.fail("has no tensor");
    return readTensor(attribute.t(), model_dir, external_data, ctx, false);
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
