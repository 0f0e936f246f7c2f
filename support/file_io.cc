#include "support/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "support/errors.h"

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
    case InputKind::kPlotImage: return {"a plot image", 64 * kMiB};
    // A long run logs one short row per step: a million steps is ~100 MB.
    case InputKind::kMetrics: return {"a metrics file", kGiB};
    case InputKind::kCorpus: return {"a corpus", 4 * kGiB};
    case InputKind::kNpyArray: return {"a NumPy array", 4 * kGiB};
    case InputKind::kCheckpoint: return {"a checkpoint", UINT64_MAX};
    // Protobuf cannot parse a message of 2 GiB or more; larger models keep their
    // weights in external data files.
    case InputKind::kOnnxModel: return {"an ONNX model", 2 * kGiB - 1};
    case InputKind::kOnnxExternalData: return {"an ONNX external data file", UINT64_MAX};
    case InputKind::kTokenCache: return {"a tokenizer cache file", UINT64_MAX};
    case InputKind::kShardingRules: return {"a sharding-rules file", 64 * kMiB};
    case InputKind::kGemmShapes: return {"a GEMM shapes CSV", 64 * kMiB};
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

// The limit of `kind` and how messages name it.
std::pair<uint64_t, std::string> limitOf(InputKind kind) {
  KindInfo info = kindInfo(kind);
  if (info.limit == UINT64_MAX) return {UINT64_MAX, fmt::format("the size {} may have", info.what)};
  if (kind == InputKind::kCorpus || kind == InputKind::kNpyArray) {
    // The corpus (an array) is held in memory whole; reading more than there is room for would
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

size_t readChunk(InputFile& file, char* dst, size_t size, uint64_t already_read) {
  for (;;) {
    ssize_t got = ::read(file.fd.get(), dst, size);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      throw Error(fmt::format("{}: cannot read at byte offset {}: {}", file.path, already_read, errnoText(errno)));
    if (static_cast<uint64_t>(got) > file.limit - std::min(already_read, file.limit))
      throw Error(tooLarge(file, already_read + static_cast<uint64_t>(got)));
    return static_cast<size_t>(got);
  }
}

std::string readTextFile(const std::string& path, InputKind kind) {
  InputFile file = openInputFile(path, kind);
  std::string text;
  readRest(file, text);
  return text;
}

// ---- Writing ----

namespace {

// True for the file systems whose entries are the kernel's, not files: a path there
// (such as /dev/stdout, a link to /proc/self/fd/1) is written in place, never replaced
// by a rename. Devices elsewhere in /dev are written in place for their type.
bool underKernelFileSystem(const fs::path& p) {
  const std::string& s = p.native();
  return s.starts_with("/proc/") || s.starts_with("/sys/");
}

// N when `p` is /proc/<our pid>/fd/N (what /dev/stdout, /dev/fd/N and /proc/self/fd/N
// resolve to): one of this process's own descriptors.
std::optional<int> ownDescriptor(const fs::path& p) {
  if (p.parent_path() != fs::path("/proc") / std::to_string(::getpid()) / "fd") return std::nullopt;
  std::string name = p.filename().string();
  int fd = -1;
  auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), fd);
  if (ec != std::errc() || end != name.data() + name.size() || fd < 0) return std::nullopt;
  return fd;
}

// How long a write to a FIFO waits for a process to open its other end.
constexpr std::chrono::seconds kFifoReaderWait{10};

struct OutputTarget {
  std::string path;  // the regular file to replace, or the path to open in place
  bool in_place = false;
  bool exists = false;
  mode_t mode = 0;
};

// Follows `path` through symlinks to the file a write should end up in (see OutputFile).
OutputTarget resolveOutput(const std::string& path) {
  if (path.empty()) throw Error("an output path is empty");
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) throw Error(fmt::format("{}: cannot resolve the path: {}", path, ec.message()));
  p = p.lexically_normal();
  // Linux follows at most 40 links in one path; so does this.
  for (int hop = 0; hop <= 40; ++hop) {
    // The directory may itself be reached through links (/dev/fd is /proc/self/fd).
    fs::path dir = fs::weakly_canonical(p.parent_path(), ec);
    if (!ec && !p.filename().empty()) p = dir / p.filename();
    if (underKernelFileSystem(p)) return {p.string(), true};
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) {
      int err = errno;
      if (err == ENOENT) return {p.string(), false};
      throw Error(fmt::format("{}: cannot write: {}", path, errnoText(err)));
    }
    if (S_ISLNK(st.st_mode)) {
      std::string link(PATH_MAX, '\0');
      ssize_t n = ::readlink(p.c_str(), link.data(), link.size());
      int err = n < 0 ? errno : ENAMETOOLONG;
      if (n < 0 || static_cast<size_t>(n) == link.size())
        throw Error(fmt::format("{}: cannot read the symlink {}: {}", path, p.string(), errnoText(err)));
      link.resize(static_cast<size_t>(n));
      fs::path next(link);
      p = (next.is_absolute() ? next : p.parent_path() / next).lexically_normal();
      continue;
    }
    if (S_ISDIR(st.st_mode)) throw Error(fmt::format("{}: is a directory, expected a file", path));
    if (S_ISREG(st.st_mode)) return {p.string(), false, true, st.st_mode & 07777};
    return {p.string(), true};
  }
  throw Error(fmt::format("{}: cannot write: {}", path, errnoText(ELOOP)));
}

// Removes the temporary files of `target` left by writes that were killed: named
// ".NAME.tmp-PID" (or "NAME.tmp-PID", as checkpoints and metrics once named them)
// whose PID is our own or no longer alive. Best effort: a file that cannot be listed
// or removed is left for the next write.
void removeStaleTemporaries(const fs::path& target) {
  std::string name = target.filename().string();
  std::string dir = target.parent_path().string();
  DIR* listing = ::opendir(dir.c_str());
  if (!listing) return;
  std::vector<std::string> stale;
  for (struct dirent* entry; (entry = ::readdir(listing)) != nullptr;) {
    std::string_view entry_name = entry->d_name;
    for (std::string_view prefix : {fmt::format(".{}.tmp-", name), fmt::format("{}.tmp-", name)}) {
      if (!entry_name.starts_with(prefix)) continue;
      std::string_view digits = entry_name.substr(prefix.size());
      pid_t pid = 0;
      auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
      if (ec != std::errc() || end != digits.data() + digits.size() || pid <= 0) continue;
      if (pid == ::getpid() || (::kill(pid, 0) != 0 && errno == ESRCH)) stale.emplace_back(entry_name);
    }
  }
  ::closedir(listing);
  for (const std::string& file : stale) ::unlink((target.parent_path() / file).c_str());
}

// The temporary files being written, for a SIGINT, SIGTERM or SIGHUP that kills the
// process mid-write (Ctrl-C during a 400 MB checkpoint): its handler removes them, then
// dies by the signal as it would have. Fixed slots of fixed size, so the handler only
// reads memory that stays valid and calls nothing but unlink, signal and raise
// (async-signal-safe). A path too long for a slot, or a 65th write at once, is left to
// removeStaleTemporaries as before.
constexpr int kTempSlots = 64;
constexpr size_t kTempPathMax = 1024;
char g_temp_paths[kTempSlots][kTempPathMax];
std::atomic<bool> g_temp_claimed[kTempSlots];  // by a writer, which fills the path
std::atomic<bool> g_temp_used[kTempSlots];     // published to the handler

void removeTemporariesAndDie(int sig) {
  for (int i = 0; i < kTempSlots; ++i)
    if (g_temp_used[i].load()) ::unlink(g_temp_paths[i]);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// Installs the handler once, for the signals whose action is still the default (one
// ignored or handled by someone else, e.g. a parent that set SIG_IGN, stays so).
void installTemporaryCleanup() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction old {};
      if (::sigaction(sig, nullptr, &old) != 0 || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) continue;
      struct sigaction action {};
      action.sa_handler = removeTemporariesAndDie;
      sigemptyset(&action.sa_mask);
      ::sigaction(sig, &action, nullptr);
    }
  });
}

// The slot now holding `path`, or -1.
int registerTemporary(const std::string& path) {
  if (path.size() >= kTempPathMax) return -1;
  installTemporaryCleanup();
  for (int i = 0; i < kTempSlots; ++i) {
    bool expected = false;
    // Claimed first, filled, then published: the handler reads only published slots.
    if (!g_temp_claimed[i].compare_exchange_strong(expected, true)) continue;
    std::memcpy(g_temp_paths[i], path.c_str(), path.size() + 1);
    g_temp_used[i].store(true);
    return i;
  }
  return -1;
}

void unregisterTemporary(int slot) {
  if (slot < 0) return;
  g_temp_used[slot].store(false);
  g_temp_claimed[slot].store(false);
}

}  // namespace

OutputFile::OutputFile(const std::string& path) : path_(path) {
  OutputTarget target = resolveOutput(path);
  target_ = target.path;
  if (target.in_place) {
    if (std::optional<int> own = ownDescriptor(target_)) {
      // Reopening /proc/self/fd/1 would start a new file offset (and O_TRUNC would wipe
      // a file the shell redirected to); writing through the descriptor itself puts the
      // output where the redirection points, after what this process printed so far.
      std::fflush(nullptr);
      fd_ = FileDescriptor(::fcntl(*own, F_DUPFD_CLOEXEC, 0));
    } else {
      // O_NONBLOCK: a FIFO with no reader fails the open (ENXIO) instead of blocking it
      // for ever; its reader gets kFifoReaderWait to appear, then the write is an error.
      const auto give_up = std::chrono::steady_clock::now() + kFifoReaderWait;
      for (;;) {
        fd_ = FileDescriptor(
            ::open(target_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0666));
        if (fd_.get() >= 0 || errno != ENXIO || std::chrono::steady_clock::now() >= give_up) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (fd_.get() < 0 && errno == ENXIO)
        throw Error(fmt::format("{}: is a FIFO that no process reads (waited {} s); start its reader first", path_,
                                std::chrono::duration_cast<std::chrono::seconds>(kFifoReaderWait).count()));
      int flags = fd_.get() < 0 ? -1 : ::fcntl(fd_.get(), F_GETFL);
      if (flags >= 0 && ::fcntl(fd_.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) fail("cannot clear O_NONBLOCK", errno);
    }
    if (fd_.get() < 0) fail("cannot open for writing", errno);
    return;
  }
  fs::path final_path(target_);
  removeStaleTemporaries(final_path);
  tmp_ = (final_path.parent_path() / fmt::format(".{}.tmp-{}", final_path.filename().string(), ::getpid())).string();
  fd_ = FileDescriptor(::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666));
  if (fd_.get() < 0) {
    int err = errno;
    tmp_.clear();  // not ours to remove
    fail(fmt::format("cannot create a temporary file in {}", final_path.parent_path().string()), err);
  }
  if (target.exists && ::fchmod(fd_.get(), target.mode) != 0) {
    int err = errno;
    ::unlink(tmp_.c_str());  // the destructor does not run for a throwing constructor
    fail(fmt::format("cannot give the temporary file {} the permissions of {}", tmp_, target_), err);
  }
  temp_slot_ = registerTemporary(tmp_);
}

OutputFile::~OutputFile() {
  fd_.close();
  if (atomic() && !committed_) ::unlink(tmp_.c_str());
  unregisterTemporary(temp_slot_);
}

void OutputFile::fail(const std::string& what, int err) const {
  throw Error(fmt::format("{}: {}: {}", path_, what, errnoText(err)));
}

void OutputFile::write(const void* data, size_t size) {
  PGQ_ASSERT(!committed_ && fd_.get() >= 0, "{}: write after commit", path_);
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd_.get(), p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(atomic() ? fmt::format("cannot write the temporary file {}", tmp_) : std::string("cannot write"), errno);
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void OutputFile::flush() {
  PGQ_ASSERT(!committed_ && fd_.get() >= 0, "{}: flushed twice", path_);
  if (!atomic()) {
    // Devices and FIFOs cannot be fsynced (EINVAL); close reports a late write error.
    if (fd_.close() != 0) fail("cannot close", errno);
    return;
  }
  if (::fsync(fd_.get()) != 0) fail(fmt::format("cannot fsync the temporary file {}", tmp_), errno);
  if (fd_.close() != 0) fail(fmt::format("cannot close the temporary file {}", tmp_), errno);
}

void OutputFile::commit() {
  if (fd_.get() >= 0) flush();
  PGQ_ASSERT(!committed_, "{}: committed twice", path_);
  if (!atomic()) {
    committed_ = true;
    return;
  }
  if (::rename(tmp_.c_str(), target_.c_str()) != 0) fail(fmt::format("cannot rename {} to {}", tmp_, target_), errno);
  committed_ = true;
  // The rename itself is durable only once the directory entry is on disk.
  std::string dir = fs::path(target_).parent_path().string();
  FileDescriptor dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  int rc = dir_fd.get() < 0 ? -1 : ::fsync(dir_fd.get());
  // Some file systems cannot fsync a directory (EINVAL); the rename is then as durable
  // as they allow.
  if (rc != 0 && errno != EINVAL)
    fail(fmt::format("written, but its directory {} could not be synced, so it may not survive a crash", dir), errno);
}

void writeFileAtomically(const std::string& path, const std::string& text) {
  OutputFile out(path);
  out.write(text.data(), text.size());
  out.commit();
}

void writeFilesTogether(const std::vector<std::pair<std::string, std::string>>& files) {
  std::vector<std::unique_ptr<OutputFile>> outs;
  for (const auto& [path, text] : files) {
    outs.push_back(std::make_unique<OutputFile>(path));
    outs.back()->write(text.data(), text.size());
  }
  // Every file's content is on disk before any replaces its target: a full disk fails
  // here, and the destructors remove the temporary files.
  for (auto& out : outs) out->flush();
  for (auto& out : outs) out->commit();
}

// ---- Planning the outputs ----

void OutputPlan::reads(const std::string& path) { inputs_.push_back(path); }

void OutputPlan::writes(const std::string& flag, const std::string& path) { outputs_.push_back({flag, path, ""}); }

void OutputPlan::writesWithSidecar(const std::string& flag, const std::string& path, const std::string& sidecar) {
  outputs_.push_back({flag, path, ""});
  outputs_.push_back({flag, sidecar, path});
}

void OutputPlan::check() const {
  struct Target {
    const Output* output;
    OutputTarget target;
    struct stat st;  // of target.path, where target.exists
  };
  auto title = [](const Output& o) {
    return o.beside.empty() ? fmt::format("{} {}", o.flag, o.path)
                            : fmt::format("{} {} (written beside {})", o.flag, o.path, o.beside);
  };
  std::vector<Target> targets;
  for (const Output& o : outputs_) {
    Target t{&o, {}, {}};
    try {
      t.target = resolveOutput(o.path);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", o.flag, e.what()));
    }
    const Output* main = &o;
    if (!o.beside.empty()) main = &outputs_[static_cast<size_t>(&o - outputs_.data()) - 1];
    if (!o.beside.empty() && (t.target.in_place || targets.back().target.in_place))
      throw Error(fmt::format("{} {}: is written in place (a device, a FIFO or a stream), but {} is written beside it; "
                              "give a regular file's path",
                              main->flag, main->path, o.path));
    if (!t.target.in_place) {
      fs::path dir = fs::path(t.target.path).parent_path();
      std::error_code ec;
      if (!fs::is_directory(dir, ec))
        throw Error(fmt::format("{}: folder {} does not exist", title(o), dir.string()));
      if (::access(dir.c_str(), W_OK | X_OK) != 0)
        throw Error(fmt::format("{}: folder {} is not writable: {}", title(o), dir.string(), errnoText(errno)));
      if (t.target.exists && ::stat(t.target.path.c_str(), &t.st) != 0) t.target.exists = false;
    }
    targets.push_back(t);
  }
  auto same = [](const Target& a, const Target& b) {
    if (a.target.in_place || b.target.in_place) return false;
    if (a.target.exists && b.target.exists) return a.st.st_dev == b.st.st_dev && a.st.st_ino == b.st.st_ino;
    return a.target.path == b.target.path;
  };
  for (size_t i = 0; i < targets.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (same(targets[i], targets[j]))
        throw Error(fmt::format("{} and {} are one file: each output needs its own path", title(*targets[j].output),
                                title(*targets[i].output)));
  for (const std::string& input : inputs_) {
    struct stat st;
    if (::stat(input.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    for (const Target& t : targets)
      if (!t.target.in_place && t.target.exists && t.st.st_dev == st.st_dev && t.st.st_ino == st.st_ino)
        throw Error(fmt::format("{} is {}, which this command reads: writing it would destroy it; give another path",
                                title(*t.output), input));
  }
}

void checkFileWithSidecar(const std::string& flag, const std::string& path, const std::string& sidecar) {
  for (const std::string& p : {path, sidecar}) {
    const std::string which = p == path ? "" : fmt::format(" (written beside {})", path);
    struct stat st;
    if (::stat(p.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      throw Error(fmt::format("{} {}: {}{} is {}; it and {} need regular files (or paths not taken yet)", flag, path,
                              p, which, fileTypeName(st.st_mode), p == path ? sidecar : path));
    // /dev/stdout redirected to a file stats as that file, but is written in place: its
    // sidecar would be /dev/stdout.py.
    if (resolveOutput(p).in_place)
      throw Error(fmt::format("{} {}: {}{} is written in place (a device, a FIFO or a stream); it and {} need regular "
                              "files (or paths not taken yet)",
                              flag, path, p, which, p == path ? sidecar : path));
    fs::path dir = fs::path(p).parent_path();
    if (dir.empty()) dir = ".";
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      throw Error(fmt::format("{} {}: folder {} does not exist", flag, path, dir.string()));
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
      throw Error(fmt::format("{} {}: folder {} is not writable: {}", flag, path, dir.string(), errnoText(errno)));
  }
}

}  // namespace pgq
