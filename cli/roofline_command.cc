// `pgq roofline`: stage (ii) on paper for a model split over tensor-parallel devices, or
// for the GEMMs of a CSV file on a GPU (--gemms).
#include <fmt/format.h>

#include "app/gemm_table.h"
#include "app/roofline.h"
#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/number_flags.h"
#include "support/errors.h"

namespace pgq::cli {

void addRooflineCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "roofline", "Estimate, without running, which GEMMs the roofline runs in int8 at a tensor-parallel size, and "
                  "the step speedup (per-device shapes, interconnect-costed collectives)");
  static ModelFlags model;
  static std::string hardware, precision = "f32", gemms;
  static double min_speedup = 1.0;
  addModelFlags(cmd, model);
  cmd->add_option("--hardware", hardware,
                  "Hardware model: a preset or a YAML file; an `interconnect` entry costs the collectives")
      ->required();
  cmd->add_option("--precision", precision,
                  "The high-precision GEMM dtype: f32 or bf16 (default: the hardware model's high_precision)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd->add_option("--min-speedup", min_speedup, "Estimated int8 speedup a GEMM needs to run in int8")
      ->check(CLI::Range(0.01, 100.0))
      ->capture_default_str();
  cmd->add_option("--gemms", gemms,
                  "Instead of a model: a CSV with columns m,k,n (optionally b) whose GEMMs to estimate on a GPU "
                  "hardware model; prints bf16_us, fp8_us (operands already FP8), a_cast_us, b_cast_us per row")
      ->check(kNonEmptyPath);
  cmd->callback([cmd] {
    if (gemms.empty() && model.spec.empty())
      throw Error("give --model (a preset, model YAML or ONNX file) or --gemms (a CSV of GEMM shapes)");
    if (!gemms.empty()) {
      if (!model.spec.empty()) throw Error("--gemms estimates the GEMMs of a CSV file: give it or --model, not both");
      // The CSV's rows are the shapes: the flags that shape or judge a model's GEMMs
      // would be ignored silently.
      for (const char* flag : {"--batch", "--seq", "--tensor-parallel", "--sharding-rules", "--trainable", "--frozen",
                               "--precision", "--min-speedup"})
        if (cmd->count(flag))
          throw Error(fmt::format("{} applies to --model; --gemms estimates the CSV's shapes as they are (bf16 and "
                                  "FP8 times per row)",
                                  flag));
    }
    HardwareModel hw = loadHardwareModel(hardware);
    if (!gemms.empty()) {
      writeGemmEstimatesCsv(hw, readGemmShapes(gemms), [](const std::string& line) { fmt::print("{}", line); });
      return;
    }
    // Without --precision, the hardware's own high precision (bf16 on a GPU), as pgq
    // recipe keeps its GEMMs.
    const bool bf16 = cmd->count("--precision") ? precision == "bf16" : hw.high_precision == DType::kBF16;
    RooflineReport r = analyzeRoofline(loadModel(model), hw, bf16 ? Precision::kBf16 : Precision::kF32, min_speedup);
    fmt::print("{}", rooflineText(r));
  });
}

}  // namespace pgq::cli
