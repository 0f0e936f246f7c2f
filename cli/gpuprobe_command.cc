// `pgq gpuprobe`: measure this machine's GPU into a hardware model (app/gpuprobe.h).
#include <filesystem>

#include <fmt/format.h>

#include "app/gpuprobe.h"
#include "cli/commands.h"
#include "cli/number_flags.h"
#include "support/errors.h"
#include "support/file_io.h"

namespace pgq::cli {

void addGpuprobeCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "gpuprobe", "Measure this machine's GPU (bf16/FP8 GEMMs over a grid of shapes, casts, copies, flash attention) "
                  "with Python and PyTorch, fit pgq's GPU model and write a hardware model");
  static std::string out;
  static GpuProbeOptions options;
  cmd->add_option("-o,--out", out, "Hardware model to write (YAML); printed when absent")->check(kNonEmptyPath);
  cmd->add_option("--name", options.name, "Name of the model")->capture_default_str();
  cmd->add_option("--python", options.python, "Python interpreter with PyTorch")->capture_default_str();
  cmd->add_option("--from", options.from,
                  "Fit recorded measurements instead of measuring: a folder with gemm.csv, cast2.csv, attn.csv and "
                  "env.json (as --keep writes them; needs no GPU)")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--keep", options.keep, "Folder to keep the measurements in (CSV)")->check(kNonEmptyPath);
  cmd->callback([] {
    // Every output before any measuring or fitting (a GPU's measurements take minutes):
    // -o may not be one of the measurements it is fitted from, and --keep must be a folder
    // (or one to make) and means nothing with --from.
    if (!options.from.empty() && !options.keep.empty())
      throw Error(fmt::format("--keep {} keeps new measurements; --from {} fits recorded ones: give one of them",
                              options.keep, options.from));
    if (!options.keep.empty()) {
      std::error_code ec;
      if (std::filesystem::exists(options.keep, ec) && !std::filesystem::is_directory(options.keep, ec))
        throw Error(fmt::format("--keep {}: is not a folder; give a folder (made when missing) for the CSVs",
                                options.keep));
    }
    if (!out.empty()) {
      OutputPlan plan;
      if (!options.from.empty())
        for (const char* file : {"gemm.csv", "cast2.csv", "attn.csv", "env.json"})
          plan.reads((std::filesystem::path(options.from) / file).string());
      plan.writes("-o", out);
      plan.check();
    }
    std::string yaml = probeGpu(options);
    if (out.empty()) {
      fmt::print("{}", yaml);
    } else {
      writeFileAtomically(out, yaml);
      fmt::print("hardware model: {}\n", out);
    }
  });
}

}  // namespace pgq::cli
