// `pgq import` on bad input: each case exits 2 with one line that names the file (and
// the node, where there is one). The models are built here as ModelProtos: a tiny
// language model (Gather from an embedding, MatMul to logits) that imports cleanly,
// broken one way per test. Every IR op the importer emits has a gradient rule
// (frontend/autodiff.cc), so there is no model whose loss is reached through an op
// without one to test.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include "support/file_io.h"

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
    // A unary op reads h only (ONNX's input counts are checked before import).
    const bool unary = middle == "Softplus" || middle == "Softsign";
    addNode(g, middle, "/mix/" + middle, unary ? std::vector<std::string>{"h"} : std::vector<std::string>{"h", "axis"},
            {"m"});
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
                         "pgq import --list-ops"});
  std::string softplus = write("softplus.onnx", lm("Softplus"));
  expectRefused(softplus, {softplus + ": node \"/mix/Softplus\" (Softplus, opset 17): op Softplus is not supported",
                           "pgq import --list-ops"});
}

TEST_F(Import, ADynamicDimensionNeedsItsSize) {
  onnx::ModelProto m = lm();
  auto* dim = m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0);
  dim->set_dim_param("batch");
  std::string path = write("dynamic.onnx", m);
  expectRefused(path, {path + ": input \"tokens\" has a dynamic dimension 0 (\"batch\"); give its size with --batch"});
  EXPECT_EQ(pgqImport(path + " --batch 2").code, 0);
}

// Moves `t`'s values to external data at `location` (its bytes are the caller's to write).
void setExternal(TensorProto* t, const std::string& location) {
  t->clear_float_data();
  t->set_data_location(TensorProto::EXTERNAL);
  auto* entry = t->add_external_data();
  entry->set_key("location");
  entry->set_value(location);
}

TEST_F(Import, MissingExternalDataNamesTheTensorAndTheFile) {
  onnx::ModelProto m = lm();
  setExternal(m.mutable_graph()->mutable_initializer(0), "emb.bin");
  std::string path = write("external.onnx", m);
  expectRefused(path, {path + ": initializer 'emb': missing external data file", "emb.bin"});
}

// A location is a path, which ends at its first NUL: "emb.bin\0junk" would read emb.bin.
TEST_F(Import, AnExternalDataLocationWithANulByteIsRefused) {
  onnx::ModelProto m = lm();
  setExternal(m.mutable_graph()->mutable_initializer(0), std::string("emb.bin\0junk", 12));
  write("emb.bin", std::string(8 * 6 * 4, '\0'));
  std::string path = write("nul.onnx", m);
  expectRefused(path, {path + ": initializer 'emb': external data location holds a NUL byte"});
}

// The parameter list beside a model (<model>.params.txt): one line per initializer, a
// non-empty PARAM, CRLF line ends read like LF; two initializers may name one parameter
// only when they hold the same values (a tied copy).
TEST_F(Import, AParameterListNamesEachInitializerOnceAndTiesOnlyEqualValues) {
  const std::string path = write("lm.onnx", lm());
  write("lm.onnx.params.txt", "emb\r\nhead\r\n");
  Result crlf = pgqImport(path);
  EXPECT_EQ(crlf.code, 0) << crlf.out;
  write("lm.onnx.params.txt", "emb\tA\nemb\tB\n");
  expectRefused(path, {path + ".params.txt:2: \"emb\" is listed again (first on line 1)"});
  write("lm.onnx.params.txt", "emb\t\n");
  expectRefused(path, {path + ".params.txt:1: \"emb\" has an empty PARAM after its tab"});
  // head, transposed, has emb's shape [8, 6] but other values.
  write("lm.onnx.params.txt", "emb\tE\nhead\tE\ttranspose\n");
  expectRefused(path, {path + ": initializers \"emb\" and \"head\" both hold parameter E, but their values differ "
                              "(element 6: 0.06 and 0.01)"});
}

// A --trainable or --frozen pattern that selects nothing is a typo, refused.
TEST_F(Import, PatternsThatSelectNothingAreRefused) {
  const std::string path = write("lm.onnx", lm());
  expectRefused(path + " --trainable nomatch", {"--trainable \"nomatch\" matches no float initializer of " + path});
  expectRefused(path + " --frozen he", {"--frozen \"he\" matches no initializer of " + path,
                                         "a pattern matches a whole name"});
  Result ok = pgqImport(path + " --frozen 'he.*'");
  EXPECT_EQ(ok.code, 0) << ok.out;
  EXPECT_NE(ok.out.find("note: --frozen \"he.*\": freezes head"), std::string::npos) << ok.out;
}

// The IR's own refusal of a shape names the file and the initializer.
TEST_F(Import, AnInitializerShapeTooLargeNamesTheFileAndTheInitializer) {
  onnx::ModelProto m = lm();
  TensorProto* head = m.mutable_graph()->mutable_initializer(1);
  head->clear_float_data();
  head->clear_dims();
  for (int64_t d : {int64_t{1} << 62, int64_t{1} << 62, int64_t{0}}) head->add_dims(d);
  std::string path = write("huge.onnx", m);
  expectRefused(path, {path + ": initializer \"head\": ", "more than 2^40 elements"});
}

// Each constant is bounded by itself, their sum by the memory available: frozen
// weights (held as 8-byte doubles) that cannot all fit are refused before any is read
// (here their external files do not even exist).
TEST_F(Import, InitializersThatCannotAllFitInMemoryAreRefusedBeforeAnyIsRead) {
  std::optional<uint64_t> available = pgq::memAvailable();
  ASSERT_TRUE(available.has_value()) << "no MemAvailable in /proc/meminfo";
  constexpr int64_t kElements = int64_t{1} << 28;  // 2 GiB as doubles each
  const int64_t tensors = static_cast<int64_t>(*available / (uint64_t{2} << 30)) + 2;
  onnx::ModelProto m = lm();
  onnx::GraphProto* g = m.mutable_graph();
  for (int64_t k = 0; k < tensors; ++k) {
    TensorProto* t = g->add_initializer();
    t->set_name(fmt::format("big{}", k));
    t->set_data_type(TensorProto::FLOAT);
    t->add_dims(kElements);
    setExternal(t, fmt::format("big{}.bin", k));
    addNode(g, "ReduceMax", fmt::format("/big{}/ReduceMax", k), {t->name()}, {fmt::format("big{}_max", k)});
  }
  std::string path = write("big.onnx", m);
  expectRefused(path, {path + ": its initializers take ", "of frozen constants as 8-byte doubles), more than the ",
                       "of memory available now"});
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

onnx::ModelProto atOpset(onnx::ModelProto m, int64_t opset) {
  m.mutable_opset_import(0)->set_version(opset);
  return m;
}

void addAttribute(onnx::NodeProto* n, const std::string& name, const std::string& s) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(s);
}

TEST_F(Import, OpsetsOutsideThirteenToTwentyThreeAreRefused) {
  std::string path = write("opset24.onnx", atOpset(lm(), 24));
  expectRefused(path, {path + ": opset 24 is not supported; pgq imports opsets 13 to 23"});
  EXPECT_EQ(pgqImport(write("opset20.onnx", atOpset(lm(), 20))).code, 0);
  EXPECT_EQ(pgqImport(write("opset23.onnx", atOpset(lm(), 23))).code, 0);
}

TEST_F(Import, AnOpIsImportedOnlyAtTheOpsetsOfItsTableRow) {
  // Gelu exists from opset 20: at 17 the file is invalid, at 20 both approximations import.
  std::string early = write("gelu17.onnx", lm("Gelu"));
  expectRefused(early, {early + ": node \"/mix/Gelu\" (Gelu, opset 17): pgq imports Gelu at opsets 20 to 23"});
  onnx::ModelProto m = atOpset(lm("Gelu"), 20);
  m.mutable_graph()->mutable_node(1)->mutable_input()->RemoveLast();  // Gelu has one input
  EXPECT_EQ(pgqImport(write("gelu20.onnx", m)).code, 0);
  addAttribute(m.mutable_graph()->mutable_node(1), "approximate", "tanh");
  Result tanh = pgqImport(write("gelu20tanh.onnx", m) + " -o " + (dir_ / "tanh.pgq").string());
  EXPECT_EQ(tanh.code, 0) << tanh.out;
  std::ifstream ir(dir_ / "tanh.pgq");
  std::string text((std::istreambuf_iterator<char>(ir)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(" gelu("), std::string::npos);
  EXPECT_EQ(text.find("gelu_erf("), std::string::npos);
  m.mutable_graph()->mutable_node(1)->mutable_attribute(0)->set_s("fast");
  std::string fast = write("gelufast.onnx", m);
  expectRefused(fast, {fast + ": node \"/mix/Gelu\" (Gelu, opset 20): attribute approximate = \"fast\""});
}

TEST_F(Import, AnAttributeOutsideTheTableIsRefusedByName) {
  onnx::ModelProto m = atOpset(lm("Softmax"), 20);
  m.mutable_graph()->mutable_node(1)->mutable_input()->RemoveLast();
  addAttribute(m.mutable_graph()->mutable_node(1), "temperature", "2");
  std::string path = write("softmax.onnx", m);
  expectRefused(path, {path + ": node \"/mix/Softmax\" (Softmax, opset 20): attribute temperature is not supported"});
}

TEST_F(Import, AnAttributeOfTheWrongTypeOrGivenTwiceIsRefused) {
  // A reader takes the field of the type ONNX defines: axis as FLOAT -1.0 read as INT
  // would be 0, a softmax over the batch, silently.
  auto softmax = [&](onnx::AttributeProto::AttributeType type) {
    onnx::ModelProto m = atOpset(lm("Softmax"), 20);
    onnx::NodeProto* node = m.mutable_graph()->mutable_node(1);
    node->mutable_input()->RemoveLast();
    onnx::AttributeProto* axis = node->add_attribute();
    axis->set_name("axis");
    axis->set_type(type);
    axis->set_i(-1);
    axis->set_f(-1.0f);
    return m;
  };
  EXPECT_EQ(pgqImport(write("softmax_int.onnx", softmax(onnx::AttributeProto::INT))).code, 0);
  std::string as_float = write("softmax_float.onnx", softmax(onnx::AttributeProto::FLOAT));
  expectRefused(as_float, {as_float + ": node \"/mix/Softmax\" (Softmax, opset 20): attribute axis is FLOAT, but ONNX "
                                      "defines it as INT"});
  std::string untyped = write("softmax_untyped.onnx", softmax(onnx::AttributeProto::UNDEFINED));
  expectRefused(untyped, {untyped + ": node \"/mix/Softmax\"", "attribute axis is of no type (UNDEFINED)"});
  // An op newer than ONNX 1.12's schemas: its attributes are typed from the changelog.
  onnx::ModelProto gelu = atOpset(lm("Gelu"), 20);
  gelu.mutable_graph()->mutable_node(1)->mutable_input()->RemoveLast();
  onnx::AttributeProto* approximate = gelu.mutable_graph()->mutable_node(1)->add_attribute();
  approximate->set_name("approximate");
  approximate->set_type(onnx::AttributeProto::INT);
  std::string gelu_int = write("gelu_int.onnx", gelu);
  expectRefused(gelu_int, {gelu_int + ": node \"/mix/Gelu\" (Gelu, opset 20): attribute approximate is INT, but ONNX "
                                      "defines it as STRING"});
  onnx::ModelProto twice = softmax(onnx::AttributeProto::INT);
  *twice.mutable_graph()->mutable_node(1)->add_attribute() = twice.graph().node(1).attribute(0);
  std::string path = write("softmax_twice.onnx", twice);
  expectRefused(path, {path + ": node \"/mix/Softmax\" (Softmax, opset 20): attribute axis is given twice"});
}

TEST_F(Import, ANodeOfAnotherDomainIsRefused) {
  onnx::ModelProto m = atOpset(lm("Gelu"), 20);
  m.mutable_graph()->mutable_node(1)->mutable_input()->RemoveLast();
  m.mutable_graph()->mutable_node(1)->set_domain("com.microsoft");
  std::string path = write("contrib.onnx", m);
  expectRefused(path, {path + ": node \"/mix/Gelu\" (Gelu, opset 20): domain \"com.microsoft\" is not supported"});
}

TEST_F(Import, AxesGivenAsAnAttributeWhereTheOpsetWantsAnInputAreRefused) {
  // ReduceMean's axes are an attribute up to opset 17 and input 1 from 18.
  onnx::ModelProto m = atOpset(lm("ReduceMean"), 18);
  onnx::NodeProto* mean = m.mutable_graph()->mutable_node(1);
  mean->mutable_input()->RemoveLast();
  onnx::AttributeProto* axes = mean->add_attribute();
  axes->set_name("axes");
  axes->set_type(onnx::AttributeProto::INTS);
  axes->add_ints(-1);
  std::string path = write("mean18.onnx", m);
  expectRefused(path, {path + ": node \"/mix/ReduceMean\" (ReduceMean, opset 18): attribute axes: at opset 18 the axes "
                              "are input 1"});
}

TEST_F(Import, SparseInitializersAndDuplicateOutputsAreRefused) {
  onnx::ModelProto sparse = lm();
  onnx::SparseTensorProto* s = sparse.mutable_graph()->add_sparse_initializer();
  s->add_dims(8);
  s->mutable_values()->set_name("sparse_w");
  s->mutable_values()->set_data_type(TensorProto::FLOAT);
  std::string path = write("sparse.onnx", sparse);
  expectRefused(path, {path + ": the graph has 1 sparse initializers (sparse_initializer), which pgq does not read"});
  onnx::ModelProto twice = lm();
  *twice.mutable_graph()->add_output() = twice.graph().output(0);
  path = write("twice.onnx", twice);
  expectRefused(path, {path + ": two graph outputs are named \"logits\""});
}

TEST_F(Import, AnEmbeddingReadOnlyThroughGatherTrainsByDefault) {
  // No parameter list and no exporter metadata: the untied embedding (read only by the
  // token lookup) and the head both train.
  Result r = pgqImport(write("lm.onnx", lm()));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("parameters: 2 trainable"), std::string::npos) << r.out;
}

TEST_F(Import, IsNanIsOnlyTheSoftmaxGuard) {
  // Where(IsNaN(h), 0, h) of an embedding (no softmax): not the exporter's guard.
  onnx::ModelProto m = atOpset(lm(), 20);
  onnx::GraphProto* g = m.mutable_graph();
  TensorProto* zero = g->add_initializer();
  zero->set_name("zero");
  zero->set_data_type(TensorProto::FLOAT);
  zero->add_float_data(0);
  addNode(g, "IsNaN", "/guard/IsNaN", {"h"}, {"nan"});
  addNode(g, "Where", "/guard/Where", {"nan", "zero", "h"}, {"hg"});
  g->mutable_node()->SwapElements(1, 3);  // Gather, IsNaN, Where, MatMul
  g->mutable_node()->SwapElements(1, 2);
  g->mutable_node(3)->set_input(0, "hg");
  std::string path = write("isnan.onnx", m);
  expectRefused(path, {path + ": node \"/guard/Where\" (Where, opset 20): IsNaN is only imported as Where(IsNaN(p), 0, p) "
                              "of a softmax p"});
}

// Issue 29, 9: defects that used to surface at step 1 as a NaN loss blamed on --lr.
TEST_F(Import, NanOrInfinityInAWeightIsRefusedAtImport) {
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    onnx::ModelProto m = lm();
    m.mutable_graph()->mutable_initializer(1)->set_float_data(5, bad);  // head
    std::string path = write("bad_weight.onnx", m);
    expectRefused(path, {path + ": initializer \"head\" holds " + (std::isnan(bad) ? "nan" : "inf") + " at element 5",
                         "a parameter must be finite"});
  }
  // A frozen constant may hold -inf (an additive mask), never NaN.
  onnx::ModelProto m = lm();
  m.mutable_graph()->mutable_initializer(1)->set_float_data(5, std::nanf(""));
  std::string path = write("bad_constant.onnx", m);
  expectRefused(path + " --frozen head", {path + ": initializer \"head\" holds nan at element 5"});
}

TEST_F(Import, AFloatGraphInputNothingFeedsIsRefused) {
  onnx::ModelProto m = lm();
  addValue(m.mutable_graph()->add_input(), "temperature", TensorProto::FLOAT, {1});
  std::string path = write("float_input.onnx", m);
  expectRefused(path, {path + ": graph input \"temperature\" is float32", "nothing would feed it"});
}

// Issue 29, 11: a parameter list beside the model that is not a regular file.
TEST_F(Import, AParameterListThatIsNotAFileIsRefused) {
  std::string path = write("listed.onnx", lm());
  fs::create_directories(path + ".params.txt");
  expectRefused(path, {path + ".params.txt: is a directory, expected a regular file"});
  fs::remove(path + ".params.txt");
  ASSERT_EQ(::mkfifo((path + ".params.txt").c_str(), 0644), 0);
  expectRefused(path, {path + ".params.txt: is a FIFO, expected a regular file"});
  fs::remove(path + ".params.txt");
  fs::create_symlink("/dev/zero", path + ".params.txt");
  expectRefused(path, {path + ".params.txt: is a character device, expected a regular file"});
}

// Issue 29, 6: outputs are checked before any work.
TEST_F(Import, OutputsThatCannotBeWrittenAreRefusedBeforeWork) {
  std::string path = write("lm.onnx", lm());
  std::string file = write("a_file", "x");
  expectRefused(path + " --inputs " + dir_.string() + " --grads-out " + file,
                {"--grads-out " + file + ": cannot make the folder " + file + "/grads: " + file + " is not a folder"});
  expectRefused(path + " --inputs " + dir_.string() + " --grads-out /dev/null/sub",
                {"--grads-out /dev/null/sub: cannot make the folder /dev/null/sub/grads: /dev/null is not a folder"});
  expectRefused(path + " -o " + (dir_ / "missing" / "g.pgq").string(), {"folder '" + (dir_ / "missing").string() + "' does not exist"});
  expectRefused(path + " -o " + dir_.string(), {"-o " + dir_.string() + ": is a folder"});
}

// An output never replaces the model or another output (issue 34's bug hunt): -o or
// --profile-out naming the model, the profile's CSV on -o, -o inside --grads-out, and
// two parameters whose gradient files would share a name ('/' is written '_').
TEST_F(Import, OutputsThatAreInputsOrEachOtherAreRefused) {
  const std::string model = write("lm.onnx", lm());
  const std::string bytes = lm().SerializeAsString();
  fs::create_directories(dir_ / "in");
  const std::string tokens = writeNpy("in/tokens.npy", "<i8", {2, 4}, std::string(2 * 4 * 8, '\0'));
  const std::string inputs = " --inputs " + (dir_ / "in").string() + " --grads-out " + (dir_ / "g").string();
  expectRefused(model + " -o " + model, {"-o " + model + " is " + model + ", which this command reads"});
  expectRefused(model + inputs + " --profile-out " + model, {"--profile-out " + model + " is " + model});
  expectRefused(model + inputs + " -o " + tokens, {"-o " + tokens + " is " + tokens + ", which this command reads"});
  const std::string csv = (dir_ / "p.csv").string();
  expectRefused(model + inputs + " -o " + csv + " --profile-out " + (dir_ / "p.yaml").string(),
                {"-o " + csv + " and --profile-out " + csv + " (written beside "});
  const std::string loss = (dir_ / "g" / "loss.npy").string();
  fs::create_directories(dir_ / "g");
  expectRefused(model + inputs + " -o " + loss, {"-o " + loss + " and --grads-out " + loss + " are one file"});
  std::ifstream in(model, std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), {}), bytes);
  EXPECT_FALSE(fs::exists(loss));
  // "a/b" and "a_b" would both write grads/a_b.npy.
  onnx::ModelProto m = lm();
  onnx::GraphProto* g = m.mutable_graph();
  g->mutable_initializer(0)->set_name("a/b");
  g->mutable_initializer(1)->set_name("a_b");
  g->mutable_node(0)->set_input(0, "a/b");
  g->mutable_node(1)->set_input(1, "a_b");
  const std::string twins = write("twins.onnx", m);
  expectRefused(twins + inputs, {"--grads-out (the gradient of \"a_b\") " + (dir_ / "g/grads/a_b.npy").string(),
                                 "--grads-out (the gradient of \"a/b\") " + (dir_ / "g/grads/a_b.npy").string(),
                                 "are one file"});
}

// Issue 29, 15: what the ONNX standard forbids (ONNX 1.12's checker stops at opset 17).
TEST_F(Import, FilesTheStandardForbidsAreRefused) {
  {
    onnx::ModelProto m = lm();
    *m.mutable_graph()->add_initializer() = m.graph().initializer(1);
    std::string path = write("dup_init.onnx", m);
    expectRefused(path, {path + ": two initializers are named \"head\""});
  }
  {
    onnx::ModelProto m = lm();
    m.mutable_graph()->mutable_node(1)->add_input("emb");
    std::string path = write("matmul3.onnx", m);
    expectRefused(path, {path + ": node \"/head/MatMul\" (MatMul, opset 17): has 3 inputs; MatMul takes 2 at opset 17"});
  }
  {
    onnx::ModelProto m = lm();
    m.add_opset_import()->set_domain("ai.onnx");
    m.mutable_opset_import(1)->set_version(17);
    std::string path = write("two_opsets.onnx", m);
    expectRefused(path, {path + ": the model imports the default ONNX domain 2 times"});
  }
  for (int64_t ir : {0, 99}) {
    onnx::ModelProto m = lm();
    m.set_ir_version(ir);
    std::string path = write("ir.onnx", m);
    expectRefused(path, {fmt::format("{}: ir_version {} is not an ONNX IR version pgq reads (3 to 11)", path, ir)});
  }
  {
    onnx::ModelProto m = lm();
    *m.mutable_graph()->add_input() = m.graph().input(0);
    std::string path = write("dup_input.onnx", m);
    expectRefused(path, {path + ": two graph inputs are named \"tokens\""});
  }
  {
    onnx::ModelProto m = lm();
    m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(2)->set_dim_value(9);
    std::string path = write("declared.onnx", m);
    expectRefused(path, {path + ": output \"logits\" is declared [2, 4, 9], but the graph computes [2, 4, 8]"});
  }
  {
    // Session 15: a declared element type of the other kind was accepted; a float of
    // another width is what pgq computes in f32.
    onnx::ModelProto m = lm();
    m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::INT64);
    std::string path = write("declared_type.onnx", m);
    expectRefused(path, {path + ": output \"logits\" is declared INT64, but the graph computes floats"});
    m.mutable_graph()->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT16);
    Result half = pgqImport(write("declared_half.onnx", m));
    EXPECT_EQ(half.code, 0) << half.out;
  }
  {
    onnx::ModelProto m = lm();
    m.mutable_graph()->mutable_node(1)->set_input(0, "later");
    std::string path = write("order.onnx", m);
    expectRefused(path, {path + ": node \"/head/MatMul\" (MatMul, opset 17): input \"later\" is not a graph input"});
  }
  {
    // Where's condition must be BOOL: an int64 one is refused, not taken as truthiness.
    onnx::ModelProto m = lm();
    onnx::GraphProto* g = m.mutable_graph();
    TensorProto* cond = g->add_initializer();
    cond->set_name("cond");
    cond->set_data_type(TensorProto::INT64);
    for (int i = 0; i < 6; ++i) cond->add_int64_data(i % 2);
    cond->add_dims(6);
    TensorProto* zero = g->add_initializer();
    zero->set_name("zero");
    zero->set_data_type(TensorProto::FLOAT);
    zero->add_float_data(0);
    g->mutable_node(1)->set_input(0, "w");
    onnx::NodeProto where;
    where.set_op_type("Where");
    where.set_name("/mask/Where");
    where.add_input("cond");
    where.add_input("h");
    where.add_input("zero");
    where.add_output("w");
    *g->mutable_node()->Add() = where;
    g->mutable_node()->SwapElements(1, 2);
    std::string path = write("where_int.onnx", m);
    expectRefused(path, {path + ": node \"/mask/Where\" (Where, opset 17): the condition is INT64; Where's condition is BOOL"});
  }
}

// Issue 29, 14: a shape the IR refuses names the file and the input.
TEST_F(Import, AnInputShapeTooLargeNamesTheFileAndTheInput) {
  onnx::ModelProto m = lm();
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_value(
      1000000000000);
  std::string path = write("huge.onnx", m);
  expectRefused(path, {path + ": input \"tokens\": ", "more than 2^40 elements"});
}

}  // namespace
