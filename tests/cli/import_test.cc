// `pgq import` on bad input: each case exits 2 with one line that names the file (and
// the node, where there is one). The models are built here as ModelProtos: a tiny
// language model (Gather from an embedding, MatMul to logits) that imports cleanly,
// broken one way per test. Every IR op the importer emits has a gradient rule
// (frontend/autodiff.cc), so there is no model whose loss is reached through an op
// without one to test.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

namespace {

namespace fs = std::filesystem;
using onnx::TensorProto;

struct Result {
  int code;
  std::string out;  // stdout and stderr together
};

Result pgqImport(const std::string& args) {
  FILE* pipe = popen((std::string(PGQ_BINARY_DIR) + "/pgq import " + args + " 2>&1").c_str(), "r");
  Result r{-1, ""};
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

void addNode(onnx::GraphProto* g, const std::string& op, const std::string& name, std::vector<std::string> inputs,
             std::vector<std::string> outputs) {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const std::string& i : inputs) n->add_input(i);
  for (const std::string& o : outputs) n->add_output(o);
}

void addValue(onnx::ValueInfoProto* v, const std::string& name, int32_t dtype, const std::vector<int64_t>& dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(dtype);
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

TensorProto* addFloatInit(onnx::GraphProto* g, const std::string& name, const std::vector<int64_t>& dims) {
  TensorProto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) t->add_dims(d), n *= d;
  for (int64_t i = 0; i < n; ++i) t->add_float_data(0.01f * static_cast<float>(i % 7));
  return t;
}

// tokens int64 [2, 4] -> Gather(emb [8, 6]) -> MatMul(head [6, 8]) -> logits [2, 4, 8]:
// pgq appends the next-token loss. `middle` is a node between h and the head, reading
// "h" and writing "m" (none: the head reads h).
onnx::ModelProto lm(const std::string& middle = "") {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("lm");
  addValue(g->add_input(), "tokens", TensorProto::INT64, {2, 4});
  addFloatInit(g, "emb", {8, 6});
  addFloatInit(g, "head", {6, 8});
  addNode(g, "Gather", "/embed/Gather", {"emb", "tokens"}, {"h"});
  if (!middle.empty()) {
    TensorProto* axis = g->add_initializer();
    axis->set_name("axis");
    axis->set_data_type(TensorProto::INT64);
    axis->add_int64_data(1);
    addNode(g, middle, "/mix/" + middle, {"h", "axis"}, {"m"});
  }
  addNode(g, "MatMul", "/head/MatMul", {middle.empty() ? "h" : "m", "head"}, {"logits"});
  addValue(g->add_output(), "logits", TensorProto::FLOAT, {2, 4, 8});
  return m;
}

class Import : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("pgq_import_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
    return (dir_ / name).string();
  }
  std::string write(const std::string& name, const onnx::ModelProto& m) { return write(name, m.SerializeAsString()); }

  // An .npy file (format 1.0) of `dtype` ("<i8", "<f4") with raw little-endian `data`.
  std::string writeNpy(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
                       const std::string& data) {
    std::string dims;
    for (int64_t d : shape) dims += std::to_string(d) + ", ";
    std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", dtype, dims);
    header.append(64 - (10 + header.size() + 1) % 64, ' ');
    header += '\n';
    std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
    bytes += static_cast<char>(header.size() & 0xff);
    bytes += static_cast<char>(header.size() >> 8);
    return write(name, bytes + header + data);
  }

  // Runs `pgq import ARGS` and expects exit 2 and one line holding every one of `parts`.
  void expectRefused(const std::string& args, const std::vector<std::string>& parts) {
    Result r = pgqImport(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_EQ(r.out.rfind("pgq: error: ", 0), 0u) << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    for (const std::string& part : parts) EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  }

  fs::path dir_;
};

TEST_F(Import, TheBaseModelImports) {
  Result r = pgqImport(write("lm.onnx", lm()));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("batch 2, seq 4, vocab 8"), std::string::npos) << r.out;
}

TEST_F(Import, ATextFileIsNotAnOnnxModel) {
  std::string path = write("notes.onnx", "these are my notes, not a model\n");
  expectRefused(path, {path + ": not an ONNX model"});
}

TEST_F(Import, ATruncatedModelIsRefused) {
  std::string bytes = lm().SerializeAsString();
  std::string path = write("cut.onnx", bytes.substr(0, bytes.size() / 2));
  expectRefused(path, {path + ": not an ONNX model", "truncated"});
}

TEST_F(Import, AnOpWithoutAnIrOpOnActivationsNamesTheNodeAndListsTheOps) {
  // CumSum is folded on constants but has no IR op; Softplus is not known at all.
  std::string cumsum = write("cumsum.onnx", lm("CumSum"));
  expectRefused(cumsum, {cumsum + ": node \"/mix/CumSum\" (CumSum, opset 17)", "depend on the model's inputs",
                         "ops on the model's inputs: Add, Cast, Concat"});
  std::string softplus = write("softplus.onnx", lm("Softplus"));
  expectRefused(softplus, {softplus + ": node \"/mix/Softplus\" (Softplus, opset 17): op Softplus is not supported",
                           "supported: Abs, Add, And"});
}

TEST_F(Import, ADynamicDimensionNeedsItsSize) {
  onnx::ModelProto m = lm();
  auto* dim = m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0);
  dim->set_dim_param("batch");
  std::string path = write("dynamic.onnx", m);
  expectRefused(path, {path + ": input \"tokens\" has a dynamic dimension 0 (\"batch\"); give its size with --batch"});
  EXPECT_EQ(pgqImport(path + " --batch 2").code, 0);
}

TEST_F(Import, MissingExternalDataNamesTheTensorAndTheFile) {
  onnx::ModelProto m = lm();
  TensorProto* emb = m.mutable_graph()->mutable_initializer(0);
  emb->clear_float_data();
  emb->set_data_location(TensorProto::EXTERNAL);
  auto* location = emb->add_external_data();
  location->set_key("location");
  location->set_value("emb.bin");
  std::string path = write("external.onnx", m);
  expectRefused(path, {path + ": initializer 'emb': missing external data file", "emb.bin"});
}

TEST_F(Import, FeaturesAreNeitherALossNorLogits) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("features");
  addValue(g->add_input(), "tokens", TensorProto::INT64, {2, 4});
  addFloatInit(g, "emb", {8, 6});
  addFloatInit(g, "proj", {6, 6});
  addNode(g, "Gather", "/embed/Gather", {"emb", "tokens"}, {"h"});
  addNode(g, "MatMul", "/proj/MatMul", {"h", "proj"}, {"p"});
  addNode(g, "ReduceMean", "/pool/ReduceMean", {"p"}, {"pooled"});
  onnx::AttributeProto* axes = g->mutable_node(2)->add_attribute();
  axes->set_name("axes");
  axes->set_type(onnx::AttributeProto::INTS);
  axes->add_ints(1);
  onnx::AttributeProto* keep = g->mutable_node(2)->add_attribute();
  keep->set_name("keepdims");
  keep->set_type(onnx::AttributeProto::INT);
  keep->set_i(0);
  addValue(g->add_output(), "pooled", TensorProto::FLOAT, {2, 6});
  std::string path = write("features.onnx", m);
  expectRefused(path, {path + ": no scalar cross-entropy loss and no logits output"});
}

TEST_F(Import, InputsOfTheWrongShapeOrDtypeAreRefusedBeforeAnyWork) {
  std::string model = write("lm.onnx", lm());
  std::string grads = (dir_ / "grads").string();
  fs::create_directories(dir_ / "short");
  std::string tokens_short = writeNpy("short/tokens.npy", "<i8", {2, 3}, std::string(2 * 3 * 8, '\0'));
  expectRefused(model + " --inputs " + (dir_ / "short").string() + " --grads-out " + grads,
                {tokens_short + ": shape [2, 3] does not match input \"tokens\" s32[2,4]"});
  fs::create_directories(dir_ / "floats");
  std::string tokens_float = writeNpy("floats/tokens.npy", "<f4", {2, 4}, std::string(2 * 4 * 4, '\0'));
  expectRefused(model + " --inputs " + (dir_ / "floats").string() + " --grads-out " + grads, {tokens_float + ": the array is <f4, expected int32 (<i4) or int64 (<i8)"});
  EXPECT_FALSE(fs::exists(grads));
  // The right input runs.
  fs::create_directories(dir_ / "good");
  writeNpy("good/tokens.npy", "<i8", {2, 4}, std::string(2 * 4 * 8, '\0'));
  Result ok = pgqImport(model + " --inputs " + (dir_ / "good").string() + " --grads-out " + grads);
  EXPECT_EQ(ok.code, 0) << ok.out;
}

}  // namespace
