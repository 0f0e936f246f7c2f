#include "support/child_process.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <poll.h>
#include <spawn.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "support/errors.h"

extern "C" char** environ;

namespace pgq {
namespace {

// Reads what the pipe holds now, keeping the last kOutputTail bytes of everything read.
// False once the pipe is at its end (or broken).
bool drain(int fd, std::string& output) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EINTR;
    output.append(buf, static_cast<size_t>(n));
    if (output.size() > 2 * kOutputTail) output.erase(0, output.size() - kOutputTail);
  }
}

}  // namespace

std::string findProgram(const std::string& name) {
  if (name.empty()) return "";
  auto runnable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) return runnable(name) ? name : "";
  const char* env = std::getenv("PATH");
  // posix_spawnp's default search path when PATH is unset.
  const std::string path = env ? env : "/bin:/usr/bin";
  size_t begin = 0;
  for (;;) {
    const size_t end = path.find(':', begin);
    std::string dir = path.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    // An empty PATH entry is the working directory (push_back: GCC 12 warns falsely on
    // assigning "." here, -Wstringop-overflow).
    if (dir.empty()) dir.push_back('.');
    const std::string candidate = dir + "/" + name;
    if (runnable(candidate)) return candidate;
    if (end == std::string::npos) return "";
    begin = end + 1;
  }
}

ChildEnd runChild(const ChildRun& run) {
  sigset_t stops, old;
  sigemptyset(&stops);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stops, s);
  pthread_sigmask(SIG_BLOCK, &stops, &old);
  int pipe_fds[2] = {-1, -1};
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  ChildEnd end;
  if (!run.stderr_file.empty()) {
    posix_spawn_file_actions_addopen(&files, STDERR_FILENO, run.stderr_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
  } else if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    end.spawn_error = errno;
  } else {
    posix_spawn_file_actions_adddup2(&files, pipe_fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&files, pipe_fds[1], STDERR_FILENO);
  }
  if (!run.cwd.empty()) posix_spawn_file_actions_addchdir_np(&files, run.cwd.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setsigmask(&attr, &old);
  posix_spawnattr_setsigdefault(&attr, &stops);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> argv;
  for (const std::string& a : run.args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t child = 0;
  if (end.spawn_error == 0) end.spawn_error = posix_spawnp(&child, argv[0], &files, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (pipe_fds[1] >= 0) ::close(pipe_fds[1]);
  if (pipe_fds[0] >= 0) ::fcntl(pipe_fds[0], F_SETFL, O_NONBLOCK);
  // The stop signals, blocked, are read from a descriptor, so that one poll waits for
  // them and for the child's output at once (a child writing fast is read at once).
  const int signals = ::signalfd(-1, &stops, SFD_CLOEXEC | SFD_NONBLOCK);
  bool reading = pipe_fds[0] >= 0;
  const auto started = std::chrono::steady_clock::now();
  while (end.spawn_error == 0) {
    pollfd fds[2] = {{signals, POLLIN, 0}, {reading ? pipe_fds[0] : -1, POLLIN, 0}};
    ::poll(fds, 2, 20);
    if (reading) reading = drain(pipe_fds[0], end.output);
    signalfd_siginfo info;
    if (signals >= 0 && ::read(signals, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
      end.signal = static_cast<int>(info.ssi_signo);
      ::kill(child, end.signal);
    }
    const pid_t done = ::waitpid(child, &end.status, WNOHANG);
    if (done == child) break;
    if (done < 0 && errno != EINTR) {
      const int error = errno;
      if (pipe_fds[0] >= 0) ::close(pipe_fds[0]);
      if (signals >= 0) ::close(signals);
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      throw Error(fmt::format("waiting for {}: {}", run.args[0], std::strerror(error)));
    }
    if (run.timeout_s > 0 && !end.timed_out &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() > run.timeout_s) {
      end.timed_out = true;
      ::kill(child, SIGKILL);
    }
  }
  if (pipe_fds[0] >= 0) {
    if (reading) drain(pipe_fds[0], end.output);
    ::close(pipe_fds[0]);
  }
  if (signals >= 0) {
    // One that came as the child ended is reported too (unblocked, it would end pgq
    // before the caller cleans up).
    signalfd_siginfo info;
    if (end.signal == 0 && ::read(signals, &info, sizeof info) == static_cast<ssize_t>(sizeof info))
      end.signal = static_cast<int>(info.ssi_signo);
    ::close(signals);
  }
  if (end.output.size() > kOutputTail) end.output.erase(0, end.output.size() - kOutputTail);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return end;
}

void endBySignal(int signal) {
  std::signal(signal, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, signal);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  ::raise(signal);
  std::_Exit(128 + signal);  // not reached: the default action ends the process
}

}  // namespace pgq
