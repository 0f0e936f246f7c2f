// `pgq hwprobe`: measure this machine's hardware model.
#include <fmt/format.h>

#include "app/hwprobe.h"
#include "cli/commands.h"
#include "cli/number_flags.h"
#include "support/file_io.h"

namespace pgq::cli {

void addHwprobeCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("hwprobe", "Measure this machine's peaks, bandwidth and GEMM rates into a hardware model");
  static std::string out, name;
  static ProbeOptions options;
  cmd->add_option("-o,--out", out, "Hardware model to write (YAML); printed when absent")->check(kNonEmptyPath);
  cmd->add_option("--name", name, "Name of the model (default: probed-<isa>-<threads>t)");
  addThreadsFlag(cmd);
  addNumber(cmd, ranges::kProbeSeconds, options.seconds_per_test, "Wall time per measurement in seconds");
  cmd->callback([] {
    if (!out.empty()) {  // before the measurements, which take seconds to a minute
      OutputPlan plan;
      plan.writes("-o", out);
      plan.check();
    }
    HardwareModel hw = probeHardware(options);
    if (!name.empty()) hw.name = name;
    std::string yaml = hardwareToYaml(hw);
    if (out.empty()) {
      fmt::print("{}", yaml);
    } else {
      writeFileAtomically(out, yaml);
      // Where it went, on stderr: -o /dev/stdout has the model alone on standard output
      // (printing it again there made a file with every field twice).
      fmt::print(stderr, "hardware model: {}\n", out);
    }
  });
}

}  // namespace pgq::cli
