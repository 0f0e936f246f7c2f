#include "cli/model_flags.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace pgq::cli {

void addModelFlags(CLI::App* cmd, ModelFlags& flags) {
  cmd->add_option("--model", flags.spec,
                  fmt::format("Preset name ({}), model YAML file, or ONNX file (FILE.onnx)",
                              fmt::join(modelPresetNames(), ", ")))
      ->capture_default_str();
  cmd->add_option("--batch", flags.overrides.batch, "Batch size (overrides the model's; sizes a dynamic ONNX dim)")
      ->check(CLI::Range(int64_t{1}, kMaxModelSize));
  cmd->add_option("--seq", flags.overrides.seq_len,
                  "Sequence length (overrides the model's; sizes a dynamic ONNX dim)")
      ->check(CLI::Range(int64_t{2}, kMaxModelSize));
  cmd->add_option("--tensor-parallel", flags.overrides.tensor_parallel,
                  "Devices that split the model (Megatron layout; overrides the model's tensor_parallel). pgq train "
                  "under mpirun -np N runs N / T data-parallel replicas of T devices each")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  cmd->add_option("--sharding-rules", flags.overrides.sharding_rules,
                  "ONNX models: YAML rules (regex on parameter names -> split dim) for --tensor-parallel");
  cmd->add_option("--trainable", flags.overrides.trainable,
                  "ONNX models: also train the initializers whose name matches this RE2 pattern");
  cmd->add_option("--frozen", flags.overrides.frozen,
                  "ONNX models: do not train the initializers whose name matches this RE2 pattern (wins over --trainable)");
}

}  // namespace pgq::cli
