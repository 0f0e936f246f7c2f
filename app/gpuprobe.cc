#include "app/gpuprobe.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "pgq_gpu_scripts.h"
#include "plan/hardware.h"
#include "support/errors.h"
#include "support/scratch_dir.h"
#include "support/file_io.h"

namespace pgq {
namespace {

// A word for sh -c: single-quoted, with each ' written as '\''.
std::string quoted(const std::string& word) {
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
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
  std::string cmd = fmt::format("{} {} -o {} --name {}", quoted(o.python), quoted((dir / "gpuprobe.py").string()),
                                quoted(yaml.string()), quoted(o.name));
  if (!o.from.empty()) cmd += " --from " + quoted(o.from);
  cmd += " --keep " + quoted(o.keep.empty() ? (dir / "measured").string() : o.keep);
  // The script's progress goes to the terminal; its reason for refusing, to a file.
  int status = std::system((cmd + " 2> " + quoted(errors.string())).c_str());
  if (status == -1 || !WIFEXITED(status))
    throw Error(fmt::format("gpuprobe: cannot run {}: {}", o.python, std::strerror(errno)));
  // pgq's own scratch file, not a user's input.
  std::ifstream in(errors);
  const std::string stderr_text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (WEXITSTATUS(status) == 127)
    throw Error(fmt::format("gpuprobe: cannot run '{}': install Python 3 with PyTorch (and numpy) or name one "
                            "with --python",
                            o.python));
  if (WEXITSTATUS(status) != 0)
    throw Error(fmt::format("gpuprobe: {}", stderr_text.empty() ? fmt::format("{} exited with {}", o.python,
                                                                             WEXITSTATUS(status))
                                                               : lastLine(stderr_text)));
  std::string text = readTextFile(yaml.string(), InputKind::kHardwareModel);
  parseHardwareModel(text, "the model gpuprobe wrote");
  return text;
}

}  // namespace pgq
