#include "runtime/run_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <sstream>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "support/errors.h"

namespace pgq {
namespace {

std::string hostName() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) return "unknown";
  return name.data();
}

// The holder's record, "pid: P\nhost: H\nstarted: T\n", as the clause of the message
// that names it. The holder writes it just after taking the lock, so it can still be
// empty.
std::string describeHolder(int fd) {
  std::array<char, 1024> buffer{};
  ssize_t n = ::pread(fd, buffer.data(), buffer.size() - 1, 0);
  std::string pid, host, started;
  std::istringstream in(std::string(buffer.data(), n > 0 ? static_cast<size_t>(n) : 0));
  for (std::string line; std::getline(in, line);) {
    size_t colon = line.find(": ");
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon), value = line.substr(colon + 2);
    if (key == "pid") pid = value;
    else if (key == "host") host = value;
    else if (key == "started") started = value;
  }
  if (pid.empty()) return "another pgq process (which has not recorded its pid yet)";
  return fmt::format("pgq pid {} on host {} (started {})", pid, host.empty() ? "unknown" : host,
                     started.empty() ? "at an unknown time" : started);
}

}  // namespace

RunDirLock::RunDirLock(const std::string& dir) {
  std::string path = (std::filesystem::path(dir) / kRunDirLockFile).string();
  // O_CLOEXEC: a child process (a plot renderer) must not inherit the lock and keep the
  // directory locked after pgq exits.
  // O_NOFOLLOW and O_NONBLOCK: the record below truncates the file, so a symlink there
  // (whose target would lose its content) is refused, and a FIFO cannot block the open.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0644);
  if (fd_ < 0) {
    const int err = errno;
    if (err == ELOOP)
      throw Error(fmt::format("{}: the lock file {} is a symlink; pgq writes its own lock file there: remove the "
                              "link",
                              dir, path));
    throw Error(fmt::format("{}: cannot create the lock file {}: {}", dir, path, std::strerror(err)));
  }
  struct stat st;
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw Error(fmt::format("{}: the lock file {} is not a regular file; pgq writes its own lock file there: remove "
                            "it",
                            dir, path));
  }
  // A hard link shares the content of another file, which the record below would replace
  // (a symlink is refused above for the same reason).
  if (st.st_nlink > 1) {
    ::close(fd_);
    throw Error(fmt::format("{}: the lock file {} is a hard link to another file ({} names); pgq writes its own lock "
                            "file there: remove it",
                            dir, path, st.st_nlink));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    std::string holder = err == EWOULDBLOCK ? describeHolder(fd_) : "";
    ::close(fd_);
    if (err == EWOULDBLOCK)
      throw Error(fmt::format("{} is in use by {}; wait for it or choose another --out", dir, holder));
    throw Error(fmt::format("{}: cannot lock {}: {}", dir, path, std::strerror(err)));
  }
  std::string record = fmt::format("pid: {}\nhost: {}\nstarted: {:%Y-%m-%d %H:%M:%S} UTC\n", ::getpid(), hostName(),
                                   fmt::gmtime(std::chrono::system_clock::to_time_t(std::chrono::system_clock::now())));
  // The record only serves the message another process prints; failing to write it
  // does not weaken the lock.
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] ssize_t written = ::pwrite(fd_, record.data(), record.size(), 0);
  }
}

RunDirLock::~RunDirLock() {
  // Closing the only descriptor of the open file releases the flock.
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace pgq
