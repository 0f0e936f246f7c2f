#include "runtime/corpus.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "ir/errors.h"

namespace pgq {
namespace {

namespace fs = std::filesystem;

// The whole content of a regular file. `what` names the corpus in messages when the
// file is one of a directory's.
std::vector<uint8_t> readFile(const std::string& file, const std::string& what) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw Error(fmt::format("corpus {}: cannot open {}: {}", what, file, std::strerror(errno)));
  std::vector<uint8_t> bytes;
  uint8_t buffer[1 << 16];
  for (;;) {
    ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      int err = errno;
      ::close(fd);
      throw Error(fmt::format("corpus {}: cannot read {} at byte offset {}: {}", what, file,
                              bytes.size(), std::strerror(err)));
    }
    if (got == 0) break;
    bytes.insert(bytes.end(), buffer, buffer + got);
  }
  ::close(fd);
  return bytes;
}

std::optional<size_t> firstNul(const std::vector<uint8_t>& bytes) {
  if (bytes.empty()) return std::nullopt;
  const void* nul = std::memchr(bytes.data(), 0, bytes.size());
  if (!nul) return std::nullopt;
  return static_cast<size_t>(static_cast<const uint8_t*>(nul) - bytes.data());
}

// The text files of a directory, concatenated in sorted name order (see corpus.h).
std::vector<uint8_t> readDirectory(const std::string& dir, int64_t& files) {
  std::error_code ec;
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code status_ec;
    if (it->symlink_status(status_ec).type() == fs::file_type::regular && !status_ec)
      names.push_back(it->path().filename().string());
  }
  if (ec)
    throw Error(fmt::format("corpus {}: cannot list the directory: {}", dir, ec.message()));
  std::sort(names.begin(), names.end());

  std::vector<uint8_t> text;
  for (const std::string& name : names) {
    std::vector<uint8_t> bytes = readFile((fs::path(dir) / name).string(), dir);
    if (firstNul(bytes)) continue;  // A binary file such as fortune's *.dat index.
    text.insert(text.end(), bytes.begin(), bytes.end());
    ++files;
  }
  if (files == 0)
    throw Error(fmt::format(
        "corpus {}: the directory has no text file (expected regular files without NUL "
        "bytes; symlinks and subdirectories are skipped)",
        dir));
  return text;
}

}  // namespace

uint64_t fnv1a64(const uint8_t* data, size_t size, uint64_t hash) {
  for (size_t i = 0; i < size; ++i) {
    hash ^= data[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

Corpus loadCorpus(const std::string& path, double val_fraction) {
  if (!(val_fraction > 0.0 && val_fraction < 1.0))
    throw Error(fmt::format("corpus {}: validation fraction {} must be in (0, 1)", path,
                            val_fraction));
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (ec || !fs::exists(status))
    throw Error(fmt::format("corpus {}: no such file or directory", path));

  Corpus corpus;
  corpus.source = path;
  std::vector<uint8_t> text;
  if (fs::is_directory(status)) {
    text = readDirectory(path, corpus.files);
  } else if (fs::is_regular_file(status)) {
    text = readFile(path, path);
    if (std::optional<size_t> nul = firstNul(text))
      throw Error(fmt::format(
          "corpus {}: byte offset {} is a NUL byte; expected a text file (is this a binary "
          "file?)",
          path, *nul));
    corpus.files = 1;
  } else {
    throw Error(fmt::format("corpus {}: not a regular file or a directory", path));
  }
  if (text.empty()) throw Error(fmt::format("corpus {}: the corpus is empty", path));

  corpus.fingerprint = fnv1a64(text.data(), text.size());
  size_t val_bytes = static_cast<size_t>(static_cast<double>(text.size()) * val_fraction);
  size_t train_bytes = text.size() - val_bytes;
  corpus.val.assign(text.begin() + static_cast<std::ptrdiff_t>(train_bytes), text.end());
  text.resize(train_bytes);
  corpus.train = std::move(text);
  return corpus;
}

void checkCorpusFits(const Corpus& corpus, int64_t seq_len) {
  if (seq_len < 1) throw Error(fmt::format("seq_len {} must be at least 1", seq_len));
  uint64_t needed = static_cast<uint64_t>(seq_len) + 1;
  auto check = [&](const std::vector<uint8_t>& part, const char* name) {
    if (part.size() < needed)
      throw Error(fmt::format(
          "corpus {}: {} split has {} bytes, needs at least seq_len+1 = {}; use a longer "
          "text or a smaller seq_len",
          corpus.source, name, part.size(), needed));
  };
  check(corpus.train, "training");
  check(corpus.val, "validation");
}

}  // namespace pgq
