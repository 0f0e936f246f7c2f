#include "app/gpuprobe.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include <fmt/format.h>

#include "pgq_gpu_scripts.h"
#include "plan/hardware.h"
#include "support/errors.h"
#include "support/scratch_dir.h"
#include "support/file_io.h"

namespace pgq {
namespace {

extern "C" char** environ;

// How the probe's Python process ended, and the signal that stopped pgq meanwhile (0).
struct ChildEnd {
  int status = 0;
  int signal = 0;
};

// Runs argv (argv[0] looked up in PATH) with its stderr in `errors`, and waits for it. A
// SIGINT, SIGTERM or SIGHUP sent to pgq meanwhile (Ctrl-C reaches both, a `kill` or a job
// scheduler only pgq) is passed on to the child and waited for, so that no measuring is
// left running on the GPU, and returned for the caller to clean up and stop. posix_spawn,
// not std::system: a shell between the two would not pass the signal on.
ChildEnd runChild(const std::vector<std::string>& args, const std::string& errors, const std::string& python) {
  sigset_t stops, old;
  sigemptyset(&stops);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stops, s);
  pthread_sigmask(SIG_BLOCK, &stops, &old);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, STDERR_FILENO, errors.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setsigmask(&attr, &old);
  posix_spawnattr_setsigdefault(&attr, &stops);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t child = 0;
  const int spawned = posix_spawnp(&child, argv[0], &files, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (spawned != 0) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (spawned == ENOENT || spawned == EACCES || spawned == ENOTDIR)
      throw Error(fmt::format("gpuprobe: cannot run '{}': install Python 3 with PyTorch (and numpy) or name one "
                              "with --python",
                              python));
    throw Error(fmt::format("gpuprobe: cannot run {}: {}", python, std::strerror(spawned)));
  }
  ChildEnd end;
  for (;;) {
    const pid_t done = ::waitpid(child, &end.status, WNOHANG);
    if (done == child) break;
    if (done < 0 && errno != EINTR) {
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      throw Error(fmt::format("gpuprobe: waiting for {}: {}", python, std::strerror(errno)));
    }
    const timespec tick{0, 50'000'000};
    const int s = ::sigtimedwait(&stops, nullptr, &tick);
    if (s > 0) {
      end.signal = s;
      ::kill(child, s);
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return end;
}

// The last line the script wrote to stderr: its reason, or a traceback's last line.
std::string lastLine(const std::string& text) {
  size_t end = text.find_last_not_of(" \n\r\t");
  if (end == std::string::npos) return "";
  size_t start = text.rfind('\n', end);
  start = start == std::string::npos ? 0 : start + 1;
  std::string line = text.substr(start, end + 1 - start);
  const std::string prefix = "gpuprobe: ";
  return line.rfind(prefix, 0) == 0 ? line.substr(prefix.size()) : line;
}

}  // namespace

std::string probeGpu(const GpuProbeOptions& o) {
  namespace fs = std::filesystem;
  const ScratchDir scratch("pgq-gpuprobe", "gpuprobe");
  const fs::path& dir = scratch.path();
  for (const auto& [name, text] : kGpuScripts)
    writeFileAtomically((dir / (std::string(name) + ".py")).string(), std::string(text));
  const fs::path yaml = dir / "hw.yaml", errors = dir / "stderr.txt";
  std::vector<std::string> args = {o.python, (dir / "gpuprobe.py").string(), "-o", yaml.string(), "--name", o.name};
  if (!o.from.empty()) args.insert(args.end(), {"--from", o.from});
  args.insert(args.end(), {"--keep", o.keep.empty() ? (dir / "measured").string() : o.keep});
  // The script's progress goes to the terminal; its reason for refusing, to a file.
  const ChildEnd end = runChild(args, errors.string(), o.python);
  if (end.signal != 0) {
    // Stopped from outside: the measuring has ended, its scratch folder goes, and pgq
    // ends by the same signal (a shell sees 128 + its number).
    scratch.remove();
    std::signal(end.signal, SIG_DFL);
    ::raise(end.signal);
  }
  const int status = end.status;
  if (!WIFEXITED(status))
    throw Error(fmt::format("gpuprobe: {} ended by signal {}", o.python, WTERMSIG(status)));
  // pgq's own scratch file, not a user's input.
  std::ifstream in(errors);
  const std::string stderr_text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (WEXITSTATUS(status) != 0)
    throw Error(fmt::format("gpuprobe: {}", stderr_text.empty() ? fmt::format("{} exited with {}", o.python,
                                                                             WEXITSTATUS(status))
                                                               : lastLine(stderr_text)));
  std::string text = readTextFile(yaml.string(), InputKind::kHardwareModel);
  parseHardwareModel(text, "the model gpuprobe wrote");
  return text;
}

}  // namespace pgq
