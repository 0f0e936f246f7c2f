#pragma once
// The files of the tokenizer cache (runtime/corpus_tokens.h): a SentencePiece model pgq
// trained, and a corpus split encoded with it. Both are one format, a 64-byte header and
// a payload, little-endian (pgq runs on x86-64 only):
//
//   offset  0  char[8]  magic "PGQCACHE"
//           8  u32      format version (kCacheFormatVersion)
//          12  u32      kind: 1 tokenizer model, 2 token ids
//          16  u32      width of one payload element in bytes: 1 for a model's
//                       serialized bytes; 2 (vocab <= 65536) or 4 for token ids
//          20  u32      zero
//          24  u64      key: FNV-1a 64 of what the payload was built from
//          32  u64      count: payload elements (the file is 64 + count * width bytes)
//          40  u64      FNV-1a 64 of the payload bytes
//          48  f64      milliseconds building the payload took, reported on reuse
//          56  u64      zero
//          64  payload
//
// A reader maps the file read-only (mmap) and checks every field against what it expects
// before it uses the payload; token ids are never copied. Writers replace a file
// atomically (a temporary file in the same directory, then rename(2)), so a reader sees
// a whole old file or a whole new one: two runs that build the same entry at once each
// rename a complete file into place, the last one stays, and a run that mapped the other
// file keeps reading it (a mapping outlives its file's replacement).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "support/errors.h"

namespace pgq {

inline constexpr uint32_t kCacheFormatVersion = 1;

enum class CacheFileKind : uint32_t { kTokenizer = 1, kTokens = 2 };

// What a cache file must be to be used.
struct CacheFileKey {
  CacheFileKind kind;
  uint64_t key;
  uint32_t width;
};

class CacheFile {
 public:
  // Maps `path` and checks it against `expected`. Returns nothing when there is no such
  // file (`problem` empty) or when it cannot be used (`problem` says why: another magic,
  // version, kind, key or width, a size that is not the header's, a payload whose hash
  // differs, a read error). Throws pgq::Error when `path` exists but is not a regular
  // file (a directory, a FIFO): pgq does not remove what it did not write.
  static std::optional<CacheFile> open(const std::string& path, const CacheFileKey& expected,
                                       std::string& problem);
  // Writes `payload` (count elements of expected.width bytes) to `path` atomically.
  // Throws WriteFailed naming the path when the file system refuses (no space, no
  // permission: nothing is left behind), pgq::Error for a non-regular file there.
  struct WriteFailed : Error {
    using Error::Error;
  };
  static void write(const std::string& path, const CacheFileKey& key, std::span<const uint8_t> payload,
                    double build_ms);
  // A payload held in memory, for when it could not be cached (write threw WriteFailed).
  static CacheFile inMemory(const CacheFileKey& key, std::vector<uint8_t> payload, double build_ms);

  CacheFile(CacheFile&& other) noexcept;
  CacheFile& operator=(CacheFile&& other) noexcept;
  CacheFile(const CacheFile&) = delete;
  CacheFile& operator=(const CacheFile&) = delete;
  ~CacheFile();

  std::span<const uint8_t> payload() const;
  uint64_t count() const { return count_; }
  uint64_t payloadHash() const { return payload_hash_; }
  double buildMs() const { return build_ms_; }
  // False for an inMemory() payload.
  bool cached() const { return map_ != nullptr; }

 private:
  CacheFile() = default;

  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::vector<uint8_t> memory_;  // inMemory()'s payload (map_ is null)
  uint64_t count_ = 0;
  uint64_t payload_hash_ = 0;
  double build_ms_ = 0;
};

}  // namespace pgq
