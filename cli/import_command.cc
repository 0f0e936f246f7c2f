// `pgq import`: read an ONNX model, say what pgq made of it, write its training graph,
// and (with --inputs/--grads-out) compute its loss and gradients for a check against
// the framework that exported it; with --profile-out also stage (i)'s statistics of
// that one step, so that a profile of exactly these weights and this batch can be
// compared with another profiler's (python/pgq_profile).
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/number_flags.h"
#include "cli/profile_flags.h"
#include "frontend/onnx/importer.h"
#include "ir/printer.h"
#include "kernels/cpu_isa.h"
#include "passes/compile.h"
#include "runtime/executor.h"
#include "runtime/param_init.h"
#include "runtime/profile_collector.h"
#include "runtime/training_session.h"
#include "support/errors.h"
#include "support/file_io.h"
#include "support/npy.h"
#include "pgq_version.h"

namespace pgq::cli {
namespace {

namespace fs = std::filesystem;

struct ImportArgs {
  OnnxImportOptions onnx;
  std::string out;
  std::string inputs;
  std::string grads_out;
  bool list_ops = false;
  // Stage (i) on the --inputs step: the profile to write and what it measures (the
  // fields of `pgq train` that choose the formats).
  std::string profile_out;
  TrainOptions profile;
};

void printSummary(const ImportedModel& m, const Graph& training) {
  std::map<std::string, int64_t> ops;
  int64_t elements = 0;
  for (const Node* p : m.net.params) elements += p->shape().numElements();
  int64_t const_elements = 0;
  for (const Node* c : m.net.constants) const_elements += c->shape().numElements();
  std::map<std::string, int64_t> gemms;
  double flops = 0;
  for (const Node* n : training.nodes()) {
    ++ops[std::string(opName(n->op()))];
    if (n->op() != Op::kMatMul) continue;
    ++gemms[n->attrs().has(AttrKey::kDirection) ? std::string(nameOf(n->attrs().getDirection(AttrKey::kDirection)))
                                                : std::string("?")];
    if (n->attrs().has(AttrKey::kFlops)) flops += static_cast<double>(n->attrs().getInt(AttrKey::kFlops));
  }
  fmt::print("imported {} (opset {}): batch {}, seq {}, vocab {}\n", m.net.graph->name(), m.opset, m.batch, m.seq_len,
             m.vocab);
  fmt::print("  parameters: {} trainable ({} values), {} constants ({} values)\n", m.net.params.size(), elements,
             m.net.constants.size(), const_elements);
  fmt::print("  inputs:");
  for (const auto& [name, node] : m.inputs) fmt::print(" {} {}", name, node->type().toString());
  fmt::print("\n  training graph: {} nodes;", training.size());
  for (const auto& [dir, n] : gemms) fmt::print(" {} {} GEMMs,", n, dir);
  fmt::print(" {:.3g} GFLOP per step\n  ops:", flops / 1e9);
  for (const auto& [op, n] : ops) fmt::print(" {} {},", op, n);
  fmt::print("\n");
  for (const std::string& note : m.notes) fmt::print("  note: {}\n", note);
}

// DIR/<input name>.npy for every graph input, checked against its type.
std::vector<Tensor> readInputs(const ImportedModel& m, const std::string& dir) {
  std::vector<Tensor> tensors;
  for (const auto& [name, node] : m.inputs) {
    std::string path = (fs::path(dir) / (name + ".npy")).string();
    NpyArray a = readNpy(path);
    if (!std::ranges::equal(a.shape, node->shape().dims()))
      throw Error(fmt::format("{}: shape [{}] does not match input \"{}\" {}", path, fmt::join(a.shape, ", "), name,
                              node->type().toString()));
    Tensor t(node->type());
    if (node->dtype() == DType::kS32) {
      std::vector<int32_t> v = npyAsInt32(a, path);
      // Token ids index the embedding and labels the logits: both are classes.
      for (size_t i = 0; i < v.size(); ++i) {
        if (node == m.net.targets && m.ignore_index && v[i] == *m.ignore_index)
          throw Error(fmt::format("{}: element {} is {}, the loss's ignore_index, which pgq does not support (every "
                                  "label counts)",
                                  path, i, v[i]));
        if (v[i] < 0 || v[i] >= m.vocab)
          throw Error(fmt::format("{}: element {} is {}, outside the vocabulary [0, {})", path, i, v[i], m.vocab));
      }
      std::copy(v.begin(), v.end(), t.data<int32_t>());
    } else {
      std::vector<float> v = npyAsFloats(a, path);
      std::copy(v.begin(), v.end(), t.data<float>());
    }
    tensors.push_back(std::move(t));
  }
  return tensors;
}

// The outputs, checked before any work (and before anything is written) so that a path
// that cannot take them costs no import: -o must name a file in an existing folder;
// --grads-out is a folder (with a grads/ folder in it) that is there or can be made:
// each part of the path that exists is a folder, and the deepest one pgq can write in.
void checkOutputs(const ImportArgs& args) {
  std::error_code ec;
  if (!args.out.empty()) {
    const fs::path file(args.out);
    const fs::path dir = file.parent_path().empty() ? fs::path(".") : file.parent_path();
    if (!fs::is_directory(dir, ec))
      throw Error(fmt::format("-o {}: folder '{}' does not exist; create it first", args.out, dir.string()));
    if (fs::is_directory(file, ec)) throw Error(fmt::format("-o {}: is a folder; give a file such as {}", args.out,
                                                            (file / "train.pgq").string()));
  }
  if (args.grads_out.empty()) return;
  const fs::path grads = fs::path(args.grads_out) / "grads";
  for (fs::path p = grads; !p.empty(); p = p.parent_path()) {
    const fs::file_status st = fs::status(p, ec);
    if (st.type() == fs::file_type::not_found) {
      if (p == p.parent_path()) break;
      continue;
    }
    if (st.type() != fs::file_type::directory)
      throw Error(fmt::format("--grads-out {}: cannot make the folder {}: {} is not a folder", args.grads_out,
                              grads.string(), p.string()));
    if (::access(p.c_str(), W_OK | X_OK) != 0)
      throw Error(fmt::format("--grads-out {}: cannot write in {}: {}", args.grads_out, p.string(), std::strerror(errno)));
    return;
  }
  // A relative path with no existing part: the current folder.
  if (::access(".", W_OK | X_OK) != 0)
    throw Error(fmt::format("--grads-out {}: cannot write in the current folder: {}", args.grads_out,
                            std::strerror(errno)));
}

std::string lossPath(const ImportArgs& args) { return (fs::path(args.grads_out) / "loss.npy").string(); }

// grads/<parameter>.npy, with '/' in the name made '_' (two names that differ only
// there are refused by the output plan).
std::string gradientPath(const ImportArgs& args, std::string name) {
  std::replace(name.begin(), name.end(), '/', '_');
  return (fs::path(args.grads_out) / "grads" / (name + ".npy")).string();
}

// What the command reads (the model, its parameter list, the --inputs arrays) and the
// outputs known before the import: the --grads-out files join once their names are
// known and their folder is made.
OutputPlan outputPlan(const ImportArgs& args) {
  OutputPlan plan;
  plan.reads(args.onnx.path);
  plan.reads(args.onnx.path + ".params.txt");
  std::error_code ec;
  if (!args.inputs.empty())
    for (const fs::directory_entry& e : fs::directory_iterator(args.inputs, ec))
      if (e.path().extension() == ".npy") plan.reads(e.path().string());
  if (!args.out.empty()) plan.writes("-o", args.out);
  if (!args.profile_out.empty())
    plan.writesWithSidecar("--profile-out", args.profile_out, profileCsvPath(args.profile_out));
  return plan;
}

// The profile of the one step run on --inputs: every GEMM operand's statistics in the
// formats `pgq train` would profile with the same flags.
Profile stepProfile(const ImportedModel& m, const ImportArgs& args, const Executor& exec) {
  ProfileCollector collector(*m.net.graph);
  collector.add(exec);
  ProfileRun run;
  run.model = m.net.graph->name();
  run.model_config = "";
  run.corpus = args.inputs;
  run.threads = omp_get_max_threads();
  run.precision = "f32";
  run.pgq_version = PGQ_VERSION_STRING;
  // The CPU the statistics were made on: without VNNI the integer formats include int7
  // (profile_request.h), and readers (the collector's parity check) need to know.
  run.cpu_isa = kernels::int8Caps().isa_name;
  run.vnni = kernels::int8Caps().vnni;
  const ProfileRequest request = profileRequest(args.profile);
  for (const QuantFormat& f : request.formats) run.formats.push_back(f.toString());
  for (const QuantFormat& f : request.gradient_formats) run.gradient_formats.push_back(f.toString());
  run.metrics = request.metrics;
  return collector.profile(std::move(run));
}

void run(const ImportArgs& args) {
  if (args.inputs.empty() != args.grads_out.empty()) throw Error("--inputs and --grads-out go together");
  if (!args.profile_out.empty()) {
    if (args.inputs.empty()) throw Error("--profile-out profiles the step on --inputs: give --inputs and --grads-out too");
    // The checks of `pgq train`'s profile flags, and of the profile and CSV paths.
    TrainOptions profile = args.profile;
    profile.profile_steps = 1;
    profile.profile_out = args.profile_out;
    validateTrainOptions(profile);
    checkProfileOptions(profile);
  } else if (const char* orphan = profileFlagSet(args.profile)) {
    throw Error(fmt::format("{} says what the profile records: give --profile-out FILE (with --inputs and "
                            "--grads-out) too",
                            orphan));
  }
  checkOutputs(args);
  OutputPlan plan = outputPlan(args);
  plan.check();
  ImportedModel m = importOnnx(args.onnx);
  std::vector<Tensor> inputs;
  if (!args.inputs.empty()) inputs = readInputs(m, args.inputs);  // before any work
  if (!args.grads_out.empty()) {
    // The gradients' files, now that their names are known: each its own file, none an
    // input, before the step is run.
    std::error_code ec;
    fs::create_directories(fs::path(args.grads_out) / "grads", ec);
    if (ec) throw Error(fmt::format("--grads-out {}: cannot make the folder: {}", args.grads_out, ec.message()));
    plan.writes("--grads-out", lossPath(args));
    for (const Node* param : m.net.params) {
      const std::string& name = m.onnx_names.at(param->name());
      plan.writes(fmt::format("--grads-out (the gradient of \"{}\")", name), gradientPath(args, name));
    }
    plan.check();
  }
  m.net.constants = m.constants;  // their handles are found again after the pipeline too
  TrainingPipelineOptions pipeline;
  if (!args.profile_out.empty()) pipeline.profile = profileRequest(args.profile);
  compile(m.net, {.pipeline = pipeline});
  printSummary(m, *m.net.graph);
  if (!args.out.empty()) {
    writeFileAtomically(args.out, printGraph(*m.net.graph));
    fmt::print("training graph: {}\n", args.out);
  }
  if (args.grads_out.empty()) return;

  Executor exec(*m.net.graph);
  std::vector<Tensor> values;
  values.reserve(m.net.params.size() + m.net.constants.size());
  for (const std::vector<Node*>* list : {&m.net.params, &m.net.constants})
    for (Node* p : *list) {
      values.emplace_back(p->type());
      initParameter(*p, 0, values.back(), &m.values);
      exec.bind(p, values.back());
    }
  for (size_t i = 0; i < m.inputs.size(); ++i) exec.bind(m.inputs[i].second, inputs[i]);
  exec.run();
  const float loss = exec.outputScalar(0);
  writeNpy(lossPath(args), {}, std::span<const float>(&loss, 1));
  for (size_t i = 0; i < m.net.params.size(); ++i) {
    auto dims = m.net.params[i]->shape().dims();
    writeNpy(gradientPath(args, m.onnx_names.at(m.net.params[i]->name())), {dims.begin(), dims.end()},
             exec.output<float>(i + 1));
  }
  fmt::print("loss {:.6f}; loss.npy and {} gradients in {}\n", loss, m.net.params.size(), args.grads_out);
  if (args.profile_out.empty()) return;
  writeProfile(args.profile_out, stepProfile(m, args, exec));
  fmt::print("profile: {}\n", args.profile_out);
}

}  // namespace

void addImportCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "import", "Import an ONNX model (torch.onnx.export): print a summary, write its training graph, check gradients");
  static ImportArgs args;
  auto* model = cmd->add_option("model", args.onnx.path, "ONNX file");
  auto* list_ops = cmd->add_flag("--list-ops", args.list_ops,
                                 "Print the ONNX ops pgq imports (opsets, differentiable inputs, attributes) and exit");
  model->excludes(list_ops);
  cmd->add_option("-o,--out", args.out, "Write the training graph (pgq IR text) here")->check(kNonEmptyPath);
  cmd->add_option("--batch", args.onnx.batch, "Size of a dynamic batch dim")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--seq", args.onnx.seq_len, "Size of a dynamic sequence dim")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--trainable", args.onnx.trainable, "Also train the initializers matching this RE2 pattern");
  cmd->add_option("--frozen", args.onnx.frozen, "Do not train the initializers matching this RE2 pattern");
  cmd->add_option("--inputs", args.inputs, "Folder with <graph input name>.npy for every graph input");
  cmd->add_option("--grads-out", args.grads_out,
                  "Run forward and backward in f32 on --inputs; write loss.npy and grads/<parameter>.npy here")
      ->check(kNonEmptyPath);
  cmd->add_option("--profile-out", args.profile_out,
                  "Also profile the step on --inputs (stage i's statistics of every GEMM operand) into this YAML "
                  "file (a .csv beside it)")
      ->check(kNonEmptyPath);
  addProfileFormatFlags(cmd, args.profile.profile, "With --profile-out: also profile");
  cmd->callback([cmd] {
    if (args.list_ops) return fmt::print("{}", onnxOpTableText());
    if (args.onnx.path.empty()) throw CLI::RequiredError("model");
    args.profile.profile_flag_given = givenProfileFlag(cmd);
    run(args);
  });
}

}  // namespace pgq::cli
