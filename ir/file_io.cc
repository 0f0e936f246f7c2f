#include "ir/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "ir/errors.h"

namespace pgq {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

struct KindInfo {
  const char* what;  // "a recipe": completes "the 64 MiB ... may have"
  uint64_t limit;
};

KindInfo kindInfo(InputKind kind) {
  switch (kind) {
    case InputKind::kModelConfig: return {"a model config", 64 * kMiB};
    case InputKind::kRecipe: return {"a recipe", 64 * kMiB};
    case InputKind::kPolicy: return {"a policy", 64 * kMiB};
    case InputKind::kProfile: return {"a profile", 64 * kMiB};
    case InputKind::kHardwareModel: return {"a hardware model", 64 * kMiB};
    case InputKind::kIrText: return {"an IR text file", 64 * kMiB};
    case InputKind::kRunSummary: return {"a run summary", 64 * kMiB};
    case InputKind::kExperimentOptions: return {"an experiment's options file", 64 * kMiB};
    // A long run logs one short row per step: a million steps is ~100 MB.
    case InputKind::kMetrics: return {"a metrics file", kGiB};
    case InputKind::kCorpus: return {"a corpus", 4 * kGiB};
    case InputKind::kCheckpoint: return {"a checkpoint", UINT64_MAX};
  }
  throw InternalError(fmt::format("unknown input kind {}", static_cast<int>(kind)));
}

std::string errnoText(int err) { return std::strerror(err); }

// "a FIFO" for the file types pgq refuses to read or must write in place.
const char* fileTypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

[[noreturn]] void notRegular(const std::string& path, mode_t mode) {
  throw Error(fmt::format("{}: is {}, expected a regular file", path, fileTypeName(mode)));
}

// MemAvailable from /proc/meminfo in bytes, or nothing where it cannot be read.
std::optional<uint64_t> memAvailable() {
  FileDescriptor fd(::open("/proc/meminfo", O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return std::nullopt;
  InputFile file{"/proc/meminfo", std::move(fd), 0, kMiB, "1 MiB"};
  std::string text;
  try {
    readRest(file, text);
  } catch (const Error&) {
    return std::nullopt;
  }
  constexpr std::string_view kKey = "MemAvailable:";
  size_t at = text.find(kKey);
  if (at == std::string::npos) return std::nullopt;
  at = text.find_first_not_of(' ', at + kKey.size());
  if (at == std::string::npos) return std::nullopt;
  uint64_t kib = 0;
  auto [end, ec] = std::from_chars(text.data() + at, text.data() + text.size(), kib);
  if (ec != std::errc() || kib > UINT64_MAX / 1024) return std::nullopt;
  return kib * 1024;
}

// The limit of `kind` and how messages name it.
std::pair<uint64_t, std::string> limitOf(InputKind kind) {
  KindInfo info = kindInfo(kind);
  if (info.limit == UINT64_MAX) return {UINT64_MAX, fmt::format("the size {} may have", info.what)};
  if (kind == InputKind::kCorpus) {
    // The corpus is held in memory whole; reading more than there is room for would
    // push the machine into swap or the OOM killer instead of giving a message.
    std::optional<uint64_t> available = memAvailable();
    if (available && *available < info.limit)
      return {*available, fmt::format("the {} of memory available now (MemAvailable in /proc/meminfo)",
                                      byteSizeText(*available))};
  }
  return {info.limit, fmt::format("the {} {} may have", byteSizeText(info.limit), info.what)};
}

std::string tooLarge(const InputFile& file, uint64_t size) {
  std::string shown = byteSizeText(size);
  // A size just over the limit rounds to the limit's own text; give the bytes then.
  if (shown == byteSizeText(file.limit)) shown = fmt::format("{} bytes", size);
  return fmt::format("{}: {} is more than {}", file.path, shown, file.limit_text);
}

template <typename Buffer>
void readRestInto(InputFile& file, Buffer& out) {
  PGQ_ASSERT(out.size() <= file.limit, "{}: the buffer is already past the limit", file.path);
  const size_t start = out.size();
  uint64_t expected_end = std::min(file.limit, start + file.size);
  // Geometric growth, so that a corpus read file by file is not copied once per file.
  if (expected_end > out.capacity())
    out.reserve(static_cast<size_t>(std::max(expected_end, std::min<uint64_t>(file.limit, 2 * out.capacity()))));
  char probe[1 << 16];
  for (;;) {
    // Reads into `out` up to the size fstat reported, then through a small buffer, so
    // that the read which finds the end of the file does not grow `out`'s capacity.
    // Direct reads are cut into 64 MiB pieces, each zero-filled once by resize().
    bool direct = out.size() < expected_end;
    size_t old_size = out.size();
    size_t want = direct ? static_cast<size_t>(std::min(expected_end - old_size, 64 * kMiB)) : sizeof probe;
    if (direct) out.resize(old_size + want);
    char* dst = direct ? reinterpret_cast<char*>(out.data()) + old_size : probe;
    ssize_t got = ::read(file.fd.get(), dst, want);
    int err = errno;
    if (direct) out.resize(old_size + static_cast<size_t>(std::max<ssize_t>(got, 0)));
    if (got < 0 && err == EINTR) continue;
    if (got < 0)
      throw Error(fmt::format("{}: cannot read at byte offset {}: {}", file.path, old_size - start, errnoText(err)));
    if (got == 0) return;
    if (!direct) {
      if (static_cast<uint64_t>(got) > file.limit - old_size)
        throw Error(fmt::format("{}: grew past {} while it was read", file.path, file.limit_text));
      out.insert(out.end(), probe, probe + got);
    }
  }
}

}  // namespace

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

FileDescriptor::~FileDescriptor() { close(); }

int FileDescriptor::close() {
  if (fd_ < 0) return 0;
  return ::close(std::exchange(fd_, -1));
}

std::string byteSizeText(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  double value = static_cast<double>(bytes) / 1024;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  std::string number = fmt::format("{:.1f}", value);
  if (number.ends_with(".0")) number.resize(number.size() - 2);
  return fmt::format("{} {}", number, units[unit]);
}

InputFile openInputFile(const std::string& path, InputKind kind) {
  KindInfo info = kindInfo(kind);
  InputFile file;
  std::tie(file.limit, file.limit_text) = limitOf(kind);
  if (path == "-") {
    if (kind != InputKind::kIrText)
      throw Error(fmt::format("-: {} is read from a file, not from standard input", info.what));
    file.path = "standard input";
    // A duplicate, so that closing the InputFile leaves standard input open.
    file.fd = FileDescriptor(::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 0));
    if (file.fd.get() < 0) throw Error(fmt::format("standard input: cannot read: {}", errnoText(errno)));
    struct stat st;
    if (::fstat(file.fd.get(), &st) == 0 && S_ISREG(st.st_mode)) {
      file.size = static_cast<uint64_t>(st.st_size);
      if (file.size > file.limit) throw Error(tooLarge(file, file.size));
    }
    return file;
  }
  file.path = path;
  // stat first, so that a device is refused without being opened (opening some has
  // side effects); fstat after the open is what counts.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) throw Error(fmt::format("{}: cannot open: {}", path, errnoText(errno)));
  if (!S_ISREG(st.st_mode)) notRegular(path, st.st_mode);
  file.fd = FileDescriptor(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (file.fd.get() < 0) throw Error(fmt::format("{}: cannot open: {}", path, errnoText(errno)));
  if (::fstat(file.fd.get(), &st) != 0) throw Error(fmt::format("{}: cannot stat: {}", path, errnoText(errno)));
  if (!S_ISREG(st.st_mode)) notRegular(path, st.st_mode);
  file.size = static_cast<uint64_t>(st.st_size);
  if (file.size > file.limit) throw Error(tooLarge(file, file.size));
  int flags = ::fcntl(file.fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(file.fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
    throw Error(fmt::format("{}: cannot clear O_NONBLOCK: {}", path, errnoText(errno)));
  return file;
}

void readRest(InputFile& file, std::string& out) { readRestInto(file, out); }
void readRest(InputFile& file, std::vector<uint8_t>& out) { readRestInto(file, out); }

std::string readTextFile(const std::string& path, InputKind kind) {
  InputFile file = openInputFile(path, kind);
  std::string text;
  readRest(file, text);
  return text;
}

void writeFileAtomically(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmp = (dir / fmt::format(".{}.tmp-{}", target.filename().string(), ::getpid())).string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
  auto fail = [&](const char* what) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(fmt::format("{}: {}: {}", path, what, std::strerror(err)));
  };
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write failed");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail("fsync failed");
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("{}: close failed: {}", path, std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw Error(fmt::format("{}: rename failed: {}", path, std::strerror(err)));
  }
}

}  // namespace pgq
