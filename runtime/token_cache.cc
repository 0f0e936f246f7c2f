#include "runtime/token_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include <fmt/format.h>

#include "support/errors.h"
#include "support/file_io.h"
#include "support/hash.h"

namespace pgq {
namespace {

static_assert(std::endian::native == std::endian::little);

constexpr char kMagic[8] = {'P', 'G', 'Q', 'C', 'A', 'C', 'H', 'E'};

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t kind;
  uint32_t width;
  uint32_t zero0;
  uint64_t key;
  uint64_t count;
  uint64_t payload_hash;
  double build_ms;
  uint64_t zero1;
};
static_assert(sizeof(Header) == 64);
constexpr uint64_t kHeaderBytes = sizeof(Header);

// Refuses a path that exists and is not a regular file (symlinks are followed).
void checkRegularOrMissing(const std::string& path) {
  std::error_code ec;
  std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status) || std::filesystem::is_regular_file(status)) return;
  throw Error(fmt::format("tokenizer cache {}: is not a regular file; remove it or set PGQ_CACHE_DIR to another "
                          "directory",
                          path));
}

}  // namespace

std::optional<CacheFile> CacheFile::open(const std::string& path, const CacheFileKey& expected,
                                         std::string& problem) {
  problem.clear();
  checkRegularOrMissing(path);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  InputFile in;
  try {
    in = openInputFile(path, InputKind::kTokenCache);
  } catch (const Error& e) {
    problem = e.what();
    return std::nullopt;
  }
  Header h;
  if (in.size < kHeaderBytes || ::pread(in.fd.get(), &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h)) {
    problem = fmt::format("{} bytes, shorter than the {}-byte header", in.size, kHeaderBytes);
    return std::nullopt;
  }
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) {
    problem = "not a pgq cache file (wrong magic)";
  } else if (h.version != kCacheFormatVersion) {
    problem = fmt::format("format version {}, expected {}", h.version, kCacheFormatVersion);
  } else if (h.kind != static_cast<uint32_t>(expected.kind) || h.key != expected.key) {
    problem = "built from another corpus, tokenizer or vocabulary (its key differs)";
  } else if (h.width != expected.width) {
    problem = fmt::format("{}-byte elements, expected {}", h.width, expected.width);
  } else if (h.count > (in.size - kHeaderBytes) / h.width || kHeaderBytes + h.count * h.width != in.size) {
    problem = fmt::format("{} bytes, but its header says {} + {} x {}", in.size, kHeaderBytes, h.count, h.width);
  }
  if (!problem.empty()) return std::nullopt;

  CacheFile file;
  file.map_size_ = static_cast<size_t>(in.size);
  void* map = ::mmap(nullptr, file.map_size_, PROT_READ, MAP_PRIVATE, in.fd.get(), 0);
  if (map == MAP_FAILED) {
    problem = fmt::format("cannot map it: {}", std::strerror(errno));
    return std::nullopt;
  }
  file.map_ = map;
  file.count_ = h.count;
  file.payload_hash_ = h.payload_hash;
  file.build_ms_ = h.build_ms;
  std::span<const uint8_t> payload = file.payload();
  if (fnv1a64(payload.data(), payload.size()) != h.payload_hash) {
    problem = "its payload does not match its hash (a damaged file)";
    return std::nullopt;
  }
  return file;
}

void CacheFile::write(const std::string& path, const CacheFileKey& key, std::span<const uint8_t> payload,
                      double build_ms) {
  PGQ_ASSERT(key.width > 0 && payload.size() % key.width == 0, "{}: payload of {} bytes in {}-byte elements",
             path, payload.size(), key.width);
  checkRegularOrMissing(path);
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kCacheFormatVersion;
  h.kind = static_cast<uint32_t>(key.kind);
  h.width = key.width;
  h.key = key.key;
  h.count = payload.size() / key.width;
  h.payload_hash = fnv1a64(payload.data(), payload.size());
  h.build_ms = build_ms;
  try {
    OutputFile out(path);
    out.write(&h, sizeof h);
    out.write(payload.data(), payload.size());
    out.commit();
  } catch (const Error& e) {
    throw WriteFailed(e.what());
  }
}

CacheFile CacheFile::inMemory(const CacheFileKey& key, std::vector<uint8_t> payload, double build_ms) {
  PGQ_ASSERT(key.width > 0 && payload.size() % key.width == 0, "a payload of {} bytes in {}-byte elements",
             payload.size(), key.width);
  CacheFile file;
  file.count_ = payload.size() / key.width;
  file.payload_hash_ = fnv1a64(payload.data(), payload.size());
  file.build_ms_ = build_ms;
  file.memory_ = std::move(payload);
  return file;
}

CacheFile::CacheFile(CacheFile&& other) noexcept
    : map_(std::exchange(other.map_, nullptr)),
      map_size_(std::exchange(other.map_size_, 0)),
      memory_(std::move(other.memory_)),
      count_(other.count_),
      payload_hash_(other.payload_hash_),
      build_ms_(other.build_ms_) {}

CacheFile& CacheFile::operator=(CacheFile&& other) noexcept {
  if (this != &other) {
    if (map_) ::munmap(map_, map_size_);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    memory_ = std::move(other.memory_);
    count_ = other.count_;
    payload_hash_ = other.payload_hash_;
    build_ms_ = other.build_ms_;
  }
  return *this;
}

CacheFile::~CacheFile() {
  if (map_) ::munmap(map_, map_size_);
}

std::span<const uint8_t> CacheFile::payload() const {
  if (!map_) return memory_;
  return {static_cast<const uint8_t*>(map_) + kHeaderBytes, map_size_ - kHeaderBytes};
}

}  // namespace pgq
