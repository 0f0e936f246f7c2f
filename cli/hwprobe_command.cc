// `pgq hwprobe`: measure this machine's hardware model.
#include <omp.h>

#include <fmt/format.h>

#include "cli/commands.h"
#include "ir/errors.h"
#include "ir/file_io.h"
#include "runtime/hwprobe.h"

namespace pgq::cli {

void addHwprobeCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("hwprobe", "Measure this machine's peaks, bandwidth and GEMM rates into a hardware model");
  static std::string out, name;
  static int threads = 0;
  static double seconds = 0.3;
  cmd->add_option("-o,--out", out, "Hardware model to write (YAML); printed when absent");
  cmd->add_option("--name", name, "Name of the model (default: probed-<isa>-<threads>t)");
  cmd->add_option("--threads", threads, "OpenMP threads (0: OpenMP's default)")->capture_default_str();
  cmd->add_option("--seconds", seconds, "Wall time per measurement")->capture_default_str()->check(CLI::Range(0.05, 60.0));
  cmd->callback([] {
    if (threads < 0) throw Error(fmt::format("--threads must be >= 0, got {}", threads));
    if (threads > 0) omp_set_num_threads(threads);
    HardwareModel hw = probeHardware({seconds});
    if (!name.empty()) hw.name = name;
    std::string yaml = hardwareToYaml(hw);
    if (out.empty()) {
      fmt::print("{}", yaml);
    } else {
      writeFileAtomically(out, yaml);
      fmt::print("{}hardware model: {}\n", yaml, out);
    }
  });
}

}  // namespace pgq::cli
