// Forward values of the ONNX importer's IR ops: every node test of ONNX's own test data
// (Debian's libonnx-testdata) whose graph uses only ops the importer maps to IR ops and
// whose data is float32 is imported with forward_only, run by the Executor on
// test_data_set_0's inputs and compared with its outputs. Integer inputs (indices,
// shapes, axes) become initializers: pgq needs them known at import. Labels stay
// inputs: pgq takes them as one, and the IR holds no integer constants. Optional
// outputs pgq does not compute (LayerNormalization's mean and inverse deviation,
// Dropout's mask, SoftmaxCrossEntropyLoss's log_prob) are dropped from the graph, so
// that the main output is still checked.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include "frontend/onnx/importer.h"
#include "frontend/onnx/onnx_model.h"
#include "runtime/executor.h"
#include "runtime/param_init.h"
#include "support/errors.h"

namespace pgq {
namespace {

namespace fs = std::filesystem;
using onnx::TensorProto;

const fs::path kNodeTests = "/usr/share/libonnx-testdata/data/node";

// The ops importer.cc maps to IR ops (its computeOps), Constant and Shape included:
// they are folded on the way to the ops under test.
const std::set<std::string> kIrOps{
    "Add", "Cast", "Concat", "Constant", "Div", "Dropout", "Erf", "Exp", "Expand", "Flatten", "Gather",
    "Gemm", "Identity", "LayerNormalization", "Log", "LogSoftmax", "MatMul", "Mul", "Neg",
    "NegativeLogLikelihoodLoss", "Pow", "Reciprocal", "ReduceMax", "ReduceMean", "ReduceSum", "Relu",
    "Reshape", "Shape", "Sigmoid", "Slice", "Softmax", "SoftmaxCrossEntropyLoss", "Split", "Sqrt",
    "Squeeze", "Sub", "Tanh", "Tile", "Transpose", "Unsqueeze", "Where"};

// Node tests the importer refuses: names matching `tests` whose pgq::Error contains
// `message`. Any other refusal fails the test, and so does an entry nothing matches.
struct Refusal {
  std::string tests;  // a regex over the whole test name
  std::string message;  // part of the importer's message
  std::string why;
};
const std::vector<Refusal> kRefused{
    {"test_(dropout_(default|random)_old|unsqueeze_axis_3|pow_types_(float|int))", "is not supported; pgq imports opsets 13 to 23",
     "opsets before 13 (torch.onnx.export uses 14 to 17)"},
    {"test_(castlike_)?cast_FLOAT_to_BFLOAT16(_expanded)?|test_castlike_FLOAT_to_BFLOAT16_expanded",
     "to BFLOAT16 is not supported", "f32 graphs only: no cast to bf16"},
    {"test_gather_(0|1|2d_indices|negative_indices)", "constant indices must be a contiguous range",
     "no general gather: only an embedding lookup or a contiguous run of constant indices"},
    {"test_layer_normalization_.*", "only normalization over the last dim is supported",
     "the IR's layer_norm normalizes the last dim"},
    {"test_nllloss_.*|test_sce_.*_expanded",
     "only the negative log-likelihood of a LogSoftmax over the classes of [N, C] scores is supported",
     "NLL is imported only as the cross-entropy of a LogSoftmax of [N, C] it reads (through reshapes)"},
    {"test_pow(_bcast_array|_bcast_scalar|_example)?", "the exponent (input \"y\") must be known at import",
     "exponents are constants (1, 2, 3, 0.5, -0.5, -1)"},
    {"test_pow_types_float32_u?int(32|64)", "the exponent must be a scalar", "exponents are scalar constants"},
    {"test_pow_types_int(32|64)_float32", "integer constant \"x\" used as data", "integer data is not computed on"},
    {"test_sce_.*weight.*", "class weights are not supported", "pgq trains on the unweighted mean"},
    {"test_sce_.*(none|sum).*", "is not supported (pgq trains on the mean loss)",
     "reductions none and sum"},
    {"test_shape.*", "is an integer constant (folded at import), which pgq cannot output",
     "shapes are folded at import; the IR outputs no integer constants"},
    {"test_slice_neg_steps", "slices with a step other than 1 are not supported", "the IR's slice has no step"},
    {"test_reshape_allowzero_reordered|test_split_zero_size_splits", "has a dimension 0 < 1",
     "an empty tensor: the IR has none"},
    {"test_slice_start_out_of_bounds", "needs 0 <= start < limit", "an empty slice: the IR has no empty tensors"},
};

// Node tests that import but whose expected values pgq does not compute, on purpose.
const std::map<std::string, std::string> kDifferent{
    {"test_training_dropout", "pgq removes dropout (ONNX applies a random mask in training mode)"},
    {"test_training_dropout_default", "pgq removes dropout (ONNX applies a random mask in training mode)"},
    {"test_training_dropout_default_mask", "pgq removes dropout (ONNX applies a random mask in training mode)"},
    {"test_training_dropout_mask", "pgq removes dropout (ONNX applies a random mask in training mode)"},
    {"test_sce_mean_no_weight_ii", "ignore_index is dropped at import: every label counts"},
    {"test_sce_mean_no_weight_ii_3d", "ignore_index is dropped at import: every label counts"},
    {"test_sce_mean_no_weight_ii_3d_log_prob", "ignore_index is dropped at import: every label counts"},
    {"test_sce_mean_no_weight_ii_4d", "ignore_index is dropped at import: every label counts"},
    {"test_sce_mean_no_weight_ii_4d_log_prob", "ignore_index is dropped at import: every label counts"},
    {"test_sce_mean_no_weight_ii_log_prob", "ignore_index is dropped at import: every label counts"},
};

// The entry of kRefused that allows `test` to be refused with `message`, or null.
const Refusal* allowedRefusal(const std::string& test, const std::string& message) {
  for (const Refusal& r : kRefused)
    if (std::regex_match(test, std::regex(r.tests)) && message.find(r.message) != std::string::npos) return &r;
  return nullptr;
}

bool isIntegerType(int32_t t) {
  switch (t) {
    case TensorProto::INT8: case TensorProto::INT16: case TensorProto::INT32: case TensorProto::INT64:
    case TensorProto::UINT8: case TensorProto::UINT16: case TensorProto::UINT32: case TensorProto::UINT64:
    case TensorProto::BOOL:
      return true;
    default:
      return false;
  }
}

TensorProto readTensorProto(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  TensorProto t;
  if (!t.ParseFromString(std::string((std::istreambuf_iterator<char>(in)), {})))
    throw Error(path.string() + ": not a TensorProto");
  return t;
}

// A node test in scope: its model with integer inputs turned into initializers, and
// the float32 inputs and expected outputs.
struct Case {
  onnx::ModelProto model;
  std::vector<ConstTensor> inputs;  // the inputs left (float data, integer labels), in graph order
  std::vector<ConstTensor> outputs;
  bool erf = false;  // float32 erf implementations differ by up to 1e-5 absolute
};

// The case of `dir`, or nullopt when its graph uses an op without an IR op or its data
// is not float32 (or integers fed as constants).
std::optional<Case> readCase(const fs::path& dir) {
  Case c;
  std::ifstream in(dir / "model.onnx", std::ios::binary);
  if (!c.model.ParseFromString(std::string((std::istreambuf_iterator<char>(in)), {})))
    throw Error((dir / "model.onnx").string() + ": not an ONNX model");
  onnx::GraphProto* g = c.model.mutable_graph();
  if (g->node_size() == 0) return std::nullopt;
  for (const onnx::NodeProto& n : g->node()) {
    if (!(n.domain().empty() || n.domain() == "ai.onnx") || !kIrOps.count(n.op_type())) return std::nullopt;
    c.erf |= n.op_type() == "Erf";
  }
  // Sequences, maps and optionals have no IR value.
  for (const auto* values : {&g->input(), &g->output()})
    for (const onnx::ValueInfoProto& v : *values)
      if (!v.type().has_tensor_type()) return std::nullopt;
  std::set<std::string> labels;
  for (onnx::NodeProto& n : *g->mutable_node()) {
    if ((n.op_type() == "SoftmaxCrossEntropyLoss" || n.op_type() == "NegativeLogLikelihoodLoss") &&
        n.input_size() > 1)
      labels.insert(n.input(1));
    if (n.op_type() == "LayerNormalization" || n.op_type() == "Dropout" || n.op_type() == "SoftmaxCrossEntropyLoss")
      for (int k = 1; k < n.output_size(); ++k) {
        const std::string dropped = n.output(k);
        n.set_output(k, "");
        auto& outs = *g->mutable_output();
        for (int o = 0; o < outs.size(); ++o)
          if (outs[o].name() == dropped) outs.DeleteSubrange(o--, 1);
      }
  }
  std::set<std::string> inits;
  for (const TensorProto& t : g->initializer()) inits.insert(t.name());
  const fs::path data = dir / "test_data_set_0";
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> kept;
  int given = 0;
  for (const onnx::ValueInfoProto& input : g->input()) {
    if (inits.count(input.name())) {
      *kept.Add() = input;
      continue;
    }
    TensorProto t = readTensorProto(data / fmt::format("input_{}.pb", given++));
    // By the declared type: numpy has no bfloat16, so its data is stored as UINT16.
    const int32_t declared = input.type().tensor_type().elem_type();
    if (declared == TensorProto::FLOAT || (labels.count(input.name()) && isIntegerType(declared))) {
      c.inputs.push_back(tensorFromProto(t, data, "input"));
      *kept.Add() = input;
    } else if (isIntegerType(declared)) {
      t.set_name(input.name());
      *g->add_initializer() = t;
    } else {
      return std::nullopt;
    }
  }
  if (std::none_of(c.inputs.begin(), c.inputs.end(), [](const ConstTensor& t) { return t.isFloat(); }))
    return std::nullopt;  // all constants: the folder's job (onnx_fold_test)
  g->mutable_input()->Swap(&kept);
  for (int k = 0; k < g->output_size(); ++k) {
    TensorProto t = readTensorProto(data / fmt::format("output_{}.pb", k));  // the dropped outputs are the last ones
    if (t.data_type() != TensorProto::FLOAT && !isIntegerType(t.data_type())) return std::nullopt;
    c.outputs.push_back(tensorFromProto(t, data, "output"));
  }
  return c;
}

// What the node test's graph is named by in the table: its op, or its ops in order.
std::string opsOf(const onnx::ModelProto& model) {
  std::vector<std::string> ops;
  for (const onnx::NodeProto& n : model.graph().node())
    if (n.op_type() != "Constant" && std::find(ops.begin(), ops.end(), n.op_type()) == ops.end())
      ops.push_back(n.op_type());
  return fmt::format("{}", fmt::join(ops, "+"));
}

// Runs the imported graph on the case's inputs and compares; returns what differs, or "".
std::string runCase(const Case& c, ImportedModel& m) {
  if (m.inputs.size() != c.inputs.size())
    return fmt::format("{} inputs imported, {} given", m.inputs.size(), c.inputs.size());
  Executor exec(*m.net.graph);
  std::vector<Tensor> bound;
  bound.reserve(m.net.params.size() + m.constants.size() + m.inputs.size());
  for (const std::vector<Node*>* list : {&m.net.params, &m.constants})
    for (Node* p : *list) {
      bound.emplace_back(p->type());
      initParameter(*p, 0, bound.back(), &m.values);
      exec.bind(p, bound.back());
    }
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    const Node* n = m.inputs[i].second;
    const ConstTensor& given = c.inputs[i];
    if (!std::ranges::equal(n->shape().dims(), given.dims))
      return fmt::format("input {} imported as {}", i, n->type().toString());
    bound.emplace_back(n->type());
    if (n->dtype() == DType::kS32) {
      std::vector<int64_t> v = given.ints();
      std::copy(v.begin(), v.end(), bound.back().data<int32_t>());
    } else {
      std::vector<float> v = given.floats();
      std::copy(v.begin(), v.end(), bound.back().data<float>());
    }
    exec.bind(n, bound.back());
  }
  exec.run();
  if (m.outputs.size() != c.outputs.size())
    return fmt::format("{} outputs imported, {} expected", m.outputs.size(), c.outputs.size());
  for (size_t k = 0; k < c.outputs.size(); ++k) {
    const Node* n = m.outputs[k].second;
    const ConstTensor& want = c.outputs[k];
    if (!std::ranges::equal(n->shape().dims(), want.dims))
      return fmt::format("output {} is {}, expected shape [{}]", k, n->type().toString(), fmt::join(want.dims, ", "));
    std::vector<double> got;
    if (n->dtype() == DType::kF32) {
      for (float v : exec.output<float>(k)) got.push_back(v);
    } else if (n->dtype() == DType::kS32) {
      for (int32_t v : exec.output<int32_t>(k)) got.push_back(v);
    } else {
      return fmt::format("output {} is {}", k, n->type().toString());
    }
    if (want.isFloat() != (n->dtype() == DType::kF32))
      return fmt::format("output {} is {}, expected {}", k, n->type().toString(), dtypeName(want.dtype));
    const double abs_tol = c.erf ? 1e-5 : 1e-6;
    for (size_t e = 0; e < got.size(); ++e) {
      const double w = want.values[e];
      const bool same = std::isnan(w) ? std::isnan(got[e])
                        : std::isinf(w) ? got[e] == w
                                        : std::abs(got[e] - w) <= 1e-5 * std::abs(w) + abs_tol;
      if (!same) return fmt::format("output {} element {} is {}, expected {}", k, e, got[e], w);
    }
  }
  return "";
}

struct Tally {
  int passed = 0, failed = 0, refused = 0, different = 0;
};

TEST(OnnxNodeTests, ImportedIrOpsMatchOnnx) {
  ASSERT_TRUE(fs::is_directory(kNodeTests)) << kNodeTests << " is missing: install libonnx-testdata";
  std::vector<fs::path> dirs;
  for (const fs::directory_entry& e : fs::directory_iterator(kNodeTests)) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  const fs::path tmp = fs::path(::testing::TempDir()) / fmt::format("pgq_onnx_node_{}", ::getpid());
  fs::create_directories(tmp);
  std::map<std::string, Tally> table;
  std::set<std::string> in_scope;
  std::vector<std::string> failures, refusals;
  std::set<const Refusal*> used;
  int ran = 0;
  for (const fs::path& dir : dirs) {
    const std::string name = dir.filename().string();
    std::optional<Case> c = readCase(dir);
    if (!c) continue;
    in_scope.insert(name);
    Tally& tally = table[opsOf(c->model)];
    const std::string path = (tmp / (name + ".onnx")).string();
    {
      std::ofstream out(path, std::ios::binary);
      ASSERT_TRUE(c->model.SerializeToOstream(&out)) << path;
    }
    OnnxImportOptions options;
    options.path = path;
    options.forward_only = true;
    std::optional<ImportedModel> m;
    try {
      m = importOnnx(options);
    } catch (const Error& e) {
      ++tally.refused;
      const Refusal* allowed = allowedRefusal(name, e.what());
      if (allowed) used.insert(allowed);
      else refusals.push_back(fmt::format("{}: {}", name, e.what()));
      continue;
    } catch (const std::exception& e) {  // anything but pgq::Error is a bug of the importer
      ++tally.failed;
      failures.push_back(fmt::format("{}: import threw {}", name, e.what()));
      continue;
    }
    std::string problem;
    try {
      problem = runCase(*c, *m);
    } catch (const std::exception& e) {
      problem = e.what();
    }
    ++ran;
    if (kDifferent.count(name)) {
      ++tally.different;
      if (problem.empty()) failures.push_back(name + ": matches ONNX, but is listed as different");
    } else if (problem.empty()) {
      ++tally.passed;
    } else {
      ++tally.failed;
      failures.push_back(fmt::format("{}: {}", name, problem));
    }
  }
  fs::remove_all(tmp);
  for (const auto& [name, why] : kDifferent)
    EXPECT_TRUE(in_scope.count(name)) << name << " is listed (" << why << ") but is not a node test in scope";
  for (const Refusal& r : kRefused)
    EXPECT_TRUE(used.count(&r)) << "no test is refused as listed: " << r.tests << " (" << r.why << ")";
  std::cout << fmt::format("{:<60} {:>6} {:>6} {:>7} {:>9}\n", "ops", "passed", "failed", "refused", "different");
  for (const auto& [ops, t] : table)
    std::cout << fmt::format("{:<60} {:>6} {:>6} {:>7} {:>9}\n", ops, t.passed, t.failed, t.refused, t.different);
  std::cout << fmt::format("ONNX node tests in scope: {}; {} ran, {} failed, {} refused\n", in_scope.size(), ran,
                           failures.size(), in_scope.size() - static_cast<size_t>(ran));
  EXPECT_TRUE(failures.empty()) << fmt::format("{}", fmt::join(failures, "\n"));
  EXPECT_TRUE(refusals.empty()) << "refused, not listed in kRefused:\n" << fmt::format("{}", fmt::join(refusals, "\n"));
  // 187 of the 309 in scope import and run (libonnx-testdata 1.12).
  EXPECT_GE(ran, 180);
}

}  // namespace
}  // namespace pgq
