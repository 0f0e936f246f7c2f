#include "runtime/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "support/errors.h"
#include "support/file_io.h"

namespace pgq {
namespace {

// Tensor data is written as it lies in memory; the format is little-endian.
static_assert(std::endian::native == std::endian::little);

constexpr char kMagic[8] = {'P', 'G', 'Q', '-', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kHeaderBytes = 24;
constexpr uint64_t kHeaderCrcOffset = 20;
constexpr uint64_t kTrailerBytes = 4;

// Slice-by-8 tables for CRC-32. pgq carries its own CRC rather than zlib's because
// pgq_runtime is a static library exported to embedding projects (pgqConfig.cmake):
// linking zlib would make every one of them find and link it for these few lines.
// Slice-by-8 runs at a few GB/s, faster than the disk a checkpoint goes to.
using CrcTables = std::array<std::array<uint32_t, 256>, 8>;

constexpr CrcTables makeCrcTables() {
  CrcTables tables{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    tables[0][i] = c;
  }
  for (size_t s = 1; s < 8; ++s)
    for (size_t i = 0; i < 256; ++i)
      tables[s][i] = (tables[s - 1][i] >> 8) ^ tables[0][tables[s - 1][i] & 0xFF];
  return tables;
}

constexpr CrcTables kCrcTables = makeCrcTables();

template <typename T>
T loadLe(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

// ---- Writing ----

// serialize() runs twice: into a ByteCounter to learn the size the header records,
// then into the file.
struct ByteCounter {
  uint64_t bytes = 0;
  void put(const void*, size_t n) { bytes += n; }
};

template <typename Sink, typename T>
void putScalar(Sink& sink, T value) {
  sink.put(&value, sizeof value);
}

template <typename Sink>
void putString(Sink& sink, std::string_view text) {
  putScalar<Sink, uint64_t>(sink, text.size());
  sink.put(text.data(), text.size());
}

template <typename Sink>
void serializeBody(Sink& sink, const Checkpoint& checkpoint) {
  putScalar<Sink, int64_t>(sink, checkpoint.step);
  putScalar<Sink, uint64_t>(sink, checkpoint.seed);
  putScalar<Sink, int32_t>(sink, checkpoint.threads);
  putString(sink, checkpoint.model_config);
  putString(sink, checkpoint.recipe);
  putScalar<Sink, uint32_t>(sink, static_cast<uint32_t>(checkpoint.info.size()));
  for (const auto& [key, value] : checkpoint.info) {
    putString(sink, key);
    putString(sink, value);
  }
  putScalar<Sink, uint32_t>(sink, static_cast<uint32_t>(checkpoint.tensors.size()));
  for (const auto& [name, tensor] : checkpoint.tensors) {
    putString(sink, name);
    putString(sink, dtypeName(tensor.dtype()));
    putScalar<Sink, uint32_t>(sink, static_cast<uint32_t>(tensor.shape().rank()));
    for (int64_t dim : tensor.shape().dims()) putScalar<Sink, int64_t>(sink, dim);
    putScalar<Sink, uint64_t>(sink, tensor.bytes());
    sink.put(tensor.raw(), tensor.bytes());
  }
}

// The checkpoint file being written (see OutputFile for what a path means), buffered,
// with the running CRC of everything put so far.
class CheckpointWriter {
 public:
  explicit CheckpointWriter(const std::string& path) : out_(path) { buffer_.reserve(kBufferBytes); }

  void put(const void* data, size_t n) {
    crc_ = crc32(data, n, crc_);
    if (buffer_.size() + n > kBufferBytes) flush();
    if (n >= kBufferBytes) {
      out_.write(data, n);
    } else {
      const uint8_t* bytes = static_cast<const uint8_t*>(data);
      buffer_.insert(buffer_.end(), bytes, bytes + n);
    }
  }

  uint32_t crc() const { return crc_; }

  // Makes the file durable, then atomically replaces the previous checkpoint with it.
  void commit() {
    flush();
    out_.commit();
  }

  bool committed() const { return out_.committed(); }

 private:
  static constexpr size_t kBufferBytes = size_t{1} << 20;

  void flush() {
    out_.write(buffer_.data(), buffer_.size());
    buffer_.clear();
  }

  OutputFile out_;
  uint32_t crc_ = 0;
  std::vector<uint8_t> buffer_;
};

// ---- Reading ----

class FileReader {
 public:
  explicit FileReader(const std::string& path) : path_(path) {
    try {
      file_ = openInputFile(path, InputKind::kCheckpoint);
    } catch (const Error& e) {
      throw Error(fmt::format("checkpoint {}", e.what()));
    }
  }

  uint64_t size() const { return file_.size; }

  // Reads exactly n bytes at `offset`; the caller has checked that they lie in the file.
  void readAt(uint64_t offset, void* dst, size_t n) const {
    uint8_t* p = static_cast<uint8_t*>(dst);
    while (n > 0) {
      ssize_t got = ::pread(file_.fd.get(), p, n, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0)
        throw Error(fmt::format("checkpoint {}: cannot read at byte offset {}: {}", path_, offset,
                                std::strerror(errno)));
      if (got == 0)
        throw Error(fmt::format("checkpoint {}: the file shrank while it was read (byte offset {})",
                                path_, offset));
      p += got;
      n -= static_cast<size_t>(got);
      offset += static_cast<uint64_t>(got);
    }
  }

  uint32_t crcOf(uint64_t begin, uint64_t end) const {
    std::vector<uint8_t> chunk(std::min<uint64_t>(end - begin, uint64_t{1} << 20));
    uint32_t crc = 0;
    for (uint64_t offset = begin; offset < end;) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(chunk.size(), end - offset));
      readAt(offset, chunk.data(), n);
      crc = crc32(chunk.data(), n, crc);
      offset += n;
    }
    return crc;
  }

 private:
  std::string path_;
  InputFile file_;
};

// Reads the body field by field from the header up to `limit`, never past it. When the
// file is truncated, `limit` is the file size and running past it is the truncation
// report; otherwise it is the start of the trailer and running past it is corruption.
class BodyParser {
 public:
  BodyParser(const FileReader& file, const std::string& path, uint64_t limit,
             std::optional<uint64_t> recorded_size)
      : file_(file), path_(path), limit_(limit), recorded_size_(recorded_size) {}

  uint64_t position() const { return pos_; }
  void setWhere(std::string where) { where_ = std::move(where); }

  void read(void* dst, uint64_t n, std::string_view field) {
    require(n, field);
    file_.readAt(pos_, dst, static_cast<size_t>(n));
    pos_ += n;
  }

  template <typename T>
  T scalar(std::string_view field) {
    T value;
    read(&value, sizeof value, field);
    return value;
  }

  std::string text(std::string_view field) {
    uint64_t size = scalar<uint64_t>(fmt::format("{} length", field));
    require(size, field);
    std::string value(static_cast<size_t>(size), '\0');
    read(value.data(), size, field);
    return value;
  }

  // A count of entries that take at least `min_entry_bytes` each.
  uint32_t count(std::string_view field, uint64_t min_entry_bytes) {
    uint32_t n = scalar<uint32_t>(field);
    if (!recorded_size_ && n > remaining() / min_entry_bytes)
      corrupt(fmt::format("{} {} cannot fit in the {} bytes that remain", field, n, remaining()));
    return n;
  }

  // Throws unless n more bytes lie before the limit; called before allocating them.
  void require(uint64_t n, std::string_view field) {
    if (n <= remaining()) return;
    if (recorded_size_)
      throw Error(fmt::format(
          "checkpoint {} is truncated: the file has {} bytes but its header records {}; the "
          "data ends inside {}, whose {} needs {} bytes at byte offset {}",
          path_, file_.size(), *recorded_size_, where_, field, n, pos_));
    corrupt(fmt::format("{} needs {} bytes but only {} remain before the checksum", field, n,
                        remaining()));
  }

  [[noreturn]] void corrupt(std::string_view what) const {
    throw Error(fmt::format("checkpoint {} is corrupt at byte offset {} (in {}): {}", path_,
                            pos_, where_, what));
  }

 private:
  uint64_t remaining() const { return limit_ - pos_; }

  const FileReader& file_;
  const std::string& path_;
  uint64_t limit_;
  std::optional<uint64_t> recorded_size_;
  uint64_t pos_ = kHeaderBytes;
  std::string where_;
};

Tensor parseTensor(BodyParser& in) {
  std::string dtype_name = in.text("dtype");
  std::optional<DType> dtype = parseDType(dtype_name);
  if (!dtype) in.corrupt(fmt::format("unknown dtype '{}'", dtype_name));
  uint32_t rank = in.scalar<uint32_t>("rank");
  if (rank > static_cast<uint32_t>(Shape::kMaxRank))
    in.corrupt(fmt::format("rank {} exceeds the maximum {}", rank, Shape::kMaxRank));
  std::vector<int64_t> dims(rank);
  for (int64_t& dim : dims) dim = in.scalar<int64_t>("dims");
  std::optional<TensorType> type;
  try {
    type = TensorType{*dtype, Shape(std::move(dims))};
  } catch (const Error& e) {
    in.corrupt(e.what());
  }
  uint64_t bytes = in.scalar<uint64_t>("data byte count");
  uint64_t expected = static_cast<uint64_t>(type->shape.numElements()) * dtypeSize(*dtype);
  if (bytes != expected)
    in.corrupt(fmt::format("data byte count {}, expected {} for {}", bytes, expected,
                           type->toString()));
  in.require(bytes, "data");
  Tensor tensor(*type);
  in.read(tensor.raw(), bytes, "data");
  return tensor;
}

Checkpoint parseBody(BodyParser& in) {
  Checkpoint checkpoint;
  in.setWhere("the run fields");
  checkpoint.step = in.scalar<int64_t>("step");
  checkpoint.seed = in.scalar<uint64_t>("seed");
  checkpoint.threads = in.scalar<int32_t>("threads");
  in.setWhere("the model config");
  checkpoint.model_config = in.text("model_config");
  in.setWhere("the recipe");
  checkpoint.recipe = in.text("recipe");

  in.setWhere("the info map");
  uint32_t n_info = in.count("info entry count", 16);
  for (uint32_t i = 0; i < n_info; ++i) {
    in.setWhere(fmt::format("info entry {} of {}", i + 1, n_info));
    std::string key = in.text("key");
    std::string value = in.text("value");
    if (!checkpoint.info.emplace(key, std::move(value)).second)
      in.corrupt(fmt::format("duplicate info key '{}'", key));
  }

  in.setWhere("the tensor table");
  uint32_t n_tensors = in.count("tensor count", 28);
  std::set<std::string> names;
  for (uint32_t i = 0; i < n_tensors; ++i) {
    in.setWhere(fmt::format("tensor {} of {}", i + 1, n_tensors));
    std::string name = in.text("name");
    in.setWhere(fmt::format("tensor '{}' ({} of {})", name, i + 1, n_tensors));
    if (!names.insert(name).second) in.corrupt(fmt::format("duplicate tensor '{}'", name));
    checkpoint.tensors.emplace_back(std::move(name), parseTensor(in));
  }
  return checkpoint;
}

// The run fields no writer produces out of range. The checksum vouches only that the
// file is what some writer wrote: a forged or foreign file can carry a valid one.
void checkRunFields(const Checkpoint& checkpoint, const std::string& path) {
  // More OpenMP threads than any machine has: a larger count is not a real run's.
  constexpr int kMaxThreads = 1 << 20;
  if (checkpoint.step < 0)
    throw Error(fmt::format("checkpoint {}: field 'step' is {}, expected a step count >= 0", path, checkpoint.step));
  if (checkpoint.threads < 1 || checkpoint.threads > kMaxThreads)
    throw Error(fmt::format("checkpoint {}: field 'threads' is {}, expected a thread count in [1, {}]", path,
                            checkpoint.threads, kMaxThreads));
}

}  // namespace

uint32_t crc32(const void* data, size_t size, uint32_t crc) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  const CrcTables& t = kCrcTables;
  crc = ~crc;
  for (; size >= 8; size -= 8, p += 8) {
    uint32_t lo = loadLe<uint32_t>(p) ^ crc;
    uint32_t hi = loadLe<uint32_t>(p + 4);
    crc = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
          t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
  }
  for (; size > 0; --size, ++p) crc = t[0][(crc ^ *p) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

void saveCheckpoint(const std::string& path, const Checkpoint& checkpoint) {
  std::set<std::string_view> names;
  for (const auto& [name, tensor] : checkpoint.tensors) {
    PGQ_ASSERT(names.insert(name).second, "checkpoint tensor '{}' appears twice", name);
    PGQ_ASSERT(!tensor.empty(), "checkpoint tensor '{}' has no storage", name);
  }
  PGQ_ASSERT(checkpoint.tensors.size() <= UINT32_MAX && checkpoint.info.size() <= UINT32_MAX,
             "too many checkpoint entries");

  ByteCounter counter;
  serializeBody(counter, checkpoint);
  uint64_t file_size = kHeaderBytes + counter.bytes + kTrailerBytes;
  std::array<uint8_t, kHeaderBytes> header{};
  std::memcpy(header.data(), kMagic, sizeof kMagic);
  std::memcpy(header.data() + 8, &kVersion, 4);
  std::memcpy(header.data() + 12, &file_size, 8);
  uint32_t header_crc = crc32(header.data(), kHeaderCrcOffset);
  std::memcpy(header.data() + kHeaderCrcOffset, &header_crc, 4);

  std::optional<CheckpointWriter> out;
  try {
    out.emplace(path);
    out->put(header.data(), header.size());
    serializeBody(*out, checkpoint);
    uint32_t crc = out->crc();
    out->put(&crc, sizeof crc);
    out->commit();
  } catch (const Error& e) {
    if (out && out->committed()) throw Error(fmt::format("checkpoint {}", e.what()));
    throw Error(fmt::format("checkpoint {}; any previous checkpoint is unchanged", e.what()));
  }
}

std::string checkpointIdentity(const std::string& path) {
  FileReader file(path);
  const uint64_t size = file.size();
  std::array<uint8_t, kTrailerBytes> trailer{};
  if (size < kHeaderBytes + kTrailerBytes)
    throw Error(fmt::format("checkpoint {} is truncated: the file has {} bytes", path, size));
  file.readAt(size - kTrailerBytes, trailer.data(), trailer.size());
  return fmt::format("{}:{:08x}", size, loadLe<uint32_t>(trailer.data()));
}

Checkpoint loadCheckpoint(const std::string& path) {
  FileReader file(path);
  uint64_t size = file.size();
  std::array<uint8_t, kHeaderBytes> header{};
  size_t have = static_cast<size_t>(std::min<uint64_t>(size, kHeaderBytes));
  file.readAt(0, header.data(), have);

  auto truncated_header = [&] {
    return Error(fmt::format(
        "checkpoint {} is truncated: the file has {} bytes, the header alone needs {}", path,
        size, kHeaderBytes));
  };
  if (std::memcmp(header.data(), kMagic, std::min(have, sizeof kMagic)) != 0)
    throw Error(fmt::format(
        "checkpoint {}: not a pgq checkpoint (the file does not start with \"PGQ-CKPT\")", path));
  if (have < 12) throw truncated_header();
  uint32_t version = loadLe<uint32_t>(header.data() + 8);
  if (version != kVersion)
    throw Error(fmt::format(
        "checkpoint {}: format version {} is not supported; this pgq reads version {}", path,
        version, kVersion));
  if (have < kHeaderBytes) throw truncated_header();
  if (crc32(header.data(), kHeaderCrcOffset) !=
      loadLe<uint32_t>(header.data() + kHeaderCrcOffset))
    throw Error(fmt::format("checkpoint {}: header checksum mismatch; the file is corrupt", path));

  uint64_t recorded = loadLe<uint64_t>(header.data() + 12);
  if (recorded < kHeaderBytes + kTrailerBytes)
    throw Error(fmt::format("checkpoint {} is corrupt: the header records a size of {} bytes",
                            path, recorded));
  if (size < recorded) {
    // Parsing the bytes that are there finds the field where the file ends.
    BodyParser in(file, path, size, recorded);
    parseBody(in);
    throw Error(fmt::format(
        "checkpoint {} is truncated: the file has {} bytes but its header records {}; it ends "
        "inside the final checksum",
        path, size, recorded));
  }
  if (size > recorded)
    throw Error(fmt::format(
        "checkpoint {} is corrupt: the file has {} bytes but its header records {} (data "
        "after the end)",
        path, size, recorded));

  uint64_t body_end = size - kTrailerBytes;
  uint32_t stored_crc;
  file.readAt(body_end, &stored_crc, sizeof stored_crc);
  uint32_t actual_crc = file.crcOf(0, body_end);
  if (stored_crc != actual_crc)
    throw Error(fmt::format(
        "checkpoint {}: checksum mismatch (stored {:08x}, computed {:08x}); the file is corrupt",
        path, stored_crc, actual_crc));

  BodyParser in(file, path, body_end, std::nullopt);
  Checkpoint checkpoint = parseBody(in);
  if (in.position() != body_end)
    in.corrupt(fmt::format("{} unexpected bytes after the last tensor", body_end - in.position()));
  checkRunFields(checkpoint, path);
  return checkpoint;
}

void checkCheckpointMatches(const Checkpoint& checkpoint,
                            const std::vector<std::pair<std::string, TensorType>>& expected,
                            const std::string& path) {
  std::map<std::string_view, const Tensor*> present;
  for (const auto& [name, tensor] : checkpoint.tensors) present.emplace(name, &tensor);
  std::set<std::string_view> wanted;
  std::vector<std::string> problems;
  for (const auto& [name, type] : expected) {
    wanted.insert(name);
    auto it = present.find(name);
    if (it == present.end())
      problems.push_back(fmt::format("missing tensor '{}' (expected {})", name, type.toString()));
    else if (it->second->type() != type)
      problems.push_back(fmt::format("tensor '{}' is {}, expected {}", name,
                                     it->second->type().toString(), type.toString()));
  }
  for (const auto& [name, tensor] : checkpoint.tensors)
    if (!wanted.count(name))
      problems.push_back(
          fmt::format("unexpected tensor '{}' ({})", name, tensor.type().toString()));
  if (problems.empty()) return;
  constexpr size_t kShown = 10;
  std::string list = fmt::format(
      "{}", fmt::join(problems.begin(),
                      problems.begin() + static_cast<std::ptrdiff_t>(
                                             std::min(problems.size(), kShown)),
                      "; "));
  if (problems.size() > kShown) list += fmt::format("; and {} more", problems.size() - kShown);
  throw Error(fmt::format("checkpoint {} does not match the model: {}", path, list));
}

}  // namespace pgq
