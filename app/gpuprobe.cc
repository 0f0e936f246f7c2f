#include "app/gpuprobe.h"

#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include <fmt/format.h>

#include "pgq_gpu_scripts.h"
#include "plan/hardware.h"
#include "support/child_process.h"
#include "support/errors.h"
#include "support/scratch_dir.h"
#include "support/file_io.h"

namespace pgq {
namespace {

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
  const ChildEnd end = runChild({.args = args, .cwd = "", .stderr_file = errors.string(), .timeout_s = 0});
  if (end.signal != 0) {
    // Stopped from outside: the measuring has ended, its scratch folder goes, and pgq
    // ends by the same signal (a shell sees 128 + its number).
    scratch.remove();
    endBySignal(end.signal);
  }
  if (end.spawn_error == ENOENT || end.spawn_error == EACCES || end.spawn_error == ENOTDIR)
    throw Error(fmt::format("gpuprobe: cannot run '{}': install Python 3 with PyTorch (and numpy) or name one "
                            "with --python",
                            o.python));
  if (end.spawn_error != 0)
    throw Error(fmt::format("gpuprobe: cannot run {}: {}", o.python, std::strerror(end.spawn_error)));
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
