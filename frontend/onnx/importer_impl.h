#pragma once
// The ONNX importer's internals, shared by importer.cc (reading the model, choosing and
// naming parameters, the loss) and import_ops.cc (one handler per ONNX op, listed in
// onnx_ops.def). Not part of pgq's interface: include importer.h instead.
#include <filesystem>
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "frontend/onnx/importer.h"
#include "frontend/onnx/node_metadata.h"
#include "frontend/onnx/onnx_model.h"
#include "ir/builder.h"
#include "support/errors.h"

namespace pgq::onnx_import {

// The opsets of the default domain pgq imports.
inline constexpr int64_t kMinOpset = 13;
inline constexpr int64_t kMaxOpset = 23;

class Importer;
using OpHandler = void (Importer::*)(const onnx::NodeProto&);

// One row of onnx_ops.def.
struct OpInfo {
  const char* op;
  int64_t first_opset;
  int64_t last_opset;
  OpHandler handler;
  const char* differentiable;  // "*", "-" or input indices "0,2"
  const char* attributes;      // space-separated names
  bool isDifferentiable(int input) const;
  bool allowsAttribute(std::string_view name) const;
};

// The row for `op`, or nullptr when pgq has none.
const OpInfo* findOp(const std::string& op);
const std::vector<OpInfo>& opTable();

std::string shapeText(const std::vector<int64_t>& dims);
// IR names allow letters, digits, '_', '.', '/' and start with a letter or '_'.
std::string irName(std::string_view onnx_name);
std::optional<std::vector<int64_t>> broadcastDims(const std::vector<int64_t>& a, const std::vector<int64_t>& b);
std::vector<int64_t> dimsOf(const Node* n);
std::vector<int64_t> attrInts(const onnx::NodeProto& node, const std::string& name);
std::optional<int64_t> attrInt(const onnx::NodeProto& node, const std::string& name);
std::optional<float> attrFloat(const onnx::NodeProto& node, const std::string& name);
std::optional<std::string> attrString(const onnx::NodeProto& node, const std::string& name);

class Importer {
 public:
  explicit Importer(const OnnxImportOptions& o);
  ImportedModel run();
  // Throws naming the initializer at its first NaN (or infinity, unless allow_inf).
  template <typename It>
  void checkFinite(const std::string& initializer, It begin, It end, std::string_view why, bool allow_inf = false) const;

  // The handlers onnx_ops.def names (import_ops.cc, import_attention.cc).
  void binaryOp(const onnx::NodeProto& node);
  void unaryOp(const onnx::NodeProto& node);
  void reciprocalOp(const onnx::NodeProto& node);
  void powOp(const onnx::NodeProto& node);
  void geluOp(const onnx::NodeProto& node);
  void identityOp(const onnx::NodeProto& node);
  void castOp(const onnx::NodeProto& node);
  void isNanOp(const onnx::NodeProto& node);
  void whereOp(const onnx::NodeProto& node);
  void matmulOp(const onnx::NodeProto& node);
  void gemmOp(const onnx::NodeProto& node);
  void transposeOp(const onnx::NodeProto& node);
  void reshapeOp(const onnx::NodeProto& node);
  void expandOp(const onnx::NodeProto& node);
  void tileOp(const onnx::NodeProto& node);
  void sliceOp(const onnx::NodeProto& node);
  void splitOp(const onnx::NodeProto& node);
  void concatOp(const onnx::NodeProto& node);
  void gatherOp(const onnx::NodeProto& node);
  void shapeOp(const onnx::NodeProto& node);
  void constantOp(const onnx::NodeProto& node);
  void layerNormOp(const onnx::NodeProto& node);
  void rmsNormOp(const onnx::NodeProto& node);
  void softmaxOp(const onnx::NodeProto& node);
  void reduceOp(const onnx::NodeProto& node);
  void attentionOp(const onnx::NodeProto& node);
  void rotaryOp(const onnx::NodeProto& node);
  void crossEntropyOp(const onnx::NodeProto& node);
  void nllOp(const onnx::NodeProto& node);

 private:
  using Value = std::variant<ConstTensor, Node*>;

  [[noreturn]] void fail(const onnx::NodeProto& node, const std::string& what) const {
    throw Error(fmt::format("{}: node {} ({}, opset {}): {}", file_, nodeTitle(node), node.op_type(), opset_, what));
  }
  static std::string nodeTitle(const onnx::NodeProto& node) {
    return node.name().empty() ? fmt::format("producing \"{}\"", node.output_size() ? node.output(0) : "")
                               : fmt::format("\"{}\"", node.name());
  }

  // What the ONNX standard forbids (import_checks.cc): an unknown IR version, two default
  // opsets, duplicate initializers or inputs, a value defined twice or read before it is
  // defined, an op with the wrong number of inputs or outputs.
  void checkStructure() const;
  bool isFloatInitializer(const std::string& name) const;
  void applyTrainablePatterns();
  void checkInitializerMemory(const std::unordered_set<std::string>& read) const;
  void importInitializer(onnx::TensorProto& t, const std::filesystem::path& dir, ExternalData& external);
  // Every attribute of `node` once, of its ONNX type (checkStructure runs it on each node).
  void checkAttributes(const onnx::NodeProto& node) const;
  // A graph output whose declared static dims the graph does not compute.
  void checkDeclaredOutputs() const;
  void readInputs();
  void nameParameters();
  void chooseTrainable();
  void importNode(const onnx::NodeProto& node);
  void checkNode(const onnx::NodeProto& node, const OpInfo* info);
  void findLoss();

  // Operand access.
  bool has(const onnx::NodeProto& node, int i) const { return i < node.input_size() && !node.input(i).empty(); }
  const Value& value(const onnx::NodeProto& node, int i) const;
  const ConstTensor* constant(const onnx::NodeProto& node, int i) const {
    return has(node, i) ? std::get_if<ConstTensor>(&value(node, i)) : nullptr;
  }
  const ConstTensor& requireConstant(const onnx::NodeProto& node, int i, const char* what) const;
  std::vector<int64_t> constInts(const onnx::NodeProto& node, int i, const char* what) const {
    return requireConstant(node, i, what).ints();
  }
  // The operand as an IR value of the given float shape or broadcastable to it.
  Node* irValue(const onnx::NodeProto& node, int i);
  Node* materialize(const ConstTensor& c, const std::string& onnx_name, DType dtype);
  std::vector<int64_t> shapeOf(const Value& v) const {
    if (auto* c = std::get_if<ConstTensor>(&v)) return c->dims;
    return dimsOf(std::get<Node*>(v));
  }
  void set(const onnx::NodeProto& node, int out, Value v) { values_[node.output(out)] = std::move(v); }

  // IR building blocks.
  Node* broadcastTo(const onnx::NodeProto& node, Node* x, const std::vector<int64_t>& dims);
  Node* reshape(Node* x, std::vector<int64_t> dims) {
    if (dimsOf(x) == dims) return x;
    return b_.reshape(x, Shape(std::move(dims)));
  }
  Node* binary(const onnx::NodeProto& node, Op op);
  Node* splatOrBroadcast(const onnx::NodeProto& node, int i, const std::vector<int64_t>& dims);
  Node* matmul(const onnx::NodeProto& node, Node* a, Node* b, bool trans_a, bool trans_b);
  Node* sliceAxis(Node* x, int64_t axis, int64_t start, int64_t end);
  Node* moveLastAxis(Node* x, int64_t axis, bool to_last);
  Node* crossEntropy(const onnx::NodeProto& node, Node* scores, Node* labels);
  Node* lastAxisNorm(const onnx::NodeProto& node, Op op);
  // A constant additive mask over [.., Tq, Tk] that is 0 at or below the diagonal and
  // very negative above it: pgq's causal_mask. nullopt for any other constant.
  std::optional<double> causalFill(const ConstTensor& mask, bool additive) const;
  // Operand i as an IR value of any dtype: a constant there (integer data the folder
  // could not fold with it) has no IR form.
  Node* nodeValue(const onnx::NodeProto& node, int i) {
    if (auto* n = std::get_if<Node*>(&value(node, i))) return *n;
    if (std::get<ConstTensor>(value(node, i)).isFloat()) return irValue(node, i);
    fail(node, fmt::format("input \"{}\" is an integer constant used as data, which has no IR form", node.input(i)));
  }
  // The labels operand (input 1): an IR value; the IR holds no integer constants.
  Node* labels(const onnx::NodeProto& node) {
    if (auto* n = std::get_if<Node*>(&value(node, 1))) return *n;
    fail(node, fmt::format("the labels (input \"{}\") are constants; they must be a graph input", node.input(1)));
  }
  int64_t axisOf(const onnx::NodeProto& node, int64_t axis, size_t rank) const;
  // Gives GEMM `g` its label (the user's module path) and layer.
  void gemmMetadata(const onnx::NodeProto& node, Node* g, const std::string& role = "");
  std::string uniqueLabel(std::string label);

  const OnnxImportOptions& o_;
  std::string file_;
  onnx::ModelProto model_;
  int64_t opset_ = 0;
  std::unique_ptr<Graph> graph_;
  Builder b_;
  ImportedModel out_;
  std::unordered_map<std::string, Value> values_;
  std::unordered_map<std::string, const onnx::TensorProto*> initializers_;
  std::set<std::string> trainable_;
  // The module parameter each initializer holds, and whether as its transpose: from the
  // exporter's node metadata, or from a parameter list beside the model. Initializers
  // holding one parameter become one IR parameter (a tied embedding whose head use the
  // exporter folded into a transposed copy stays tied).
  struct ParamRef {
    std::string param;
    bool transpose = false;
  };
  std::unordered_map<std::string, ParamRef> param_of_;
  bool torch_metadata_ = false;  // the nodes carry torch.export's metadata
  std::unordered_map<std::string, Node*> param_nodes_;
  std::unordered_map<std::string, std::string> first_holder_;  // parameter -> the initializer that gave its value
  std::unordered_map<std::string, Node*> materialized_;
  // Values computed by LogSoftmax: the scores they came from (NLL of them is a
  // cross-entropy).
  std::unordered_map<std::string, Node*> log_softmax_of_;
  // IsNaN of an IR value: the ONNX name of that value (only Where(IsNaN(p), 0, p) of a
  // softmax p, the exporter's guard for fully masked rows, is imported).
  std::unordered_map<std::string, std::string> is_nan_of_;
  // GEMMs per (module, FX node), for labels of ops with several GEMMs.
  std::unordered_map<std::string, int> gemms_in_scope_;
  std::unordered_set<std::string> labels_;
  std::unordered_set<std::string> int_inputs_;
  int64_t next_layerless_ = 0;
};

}  // namespace pgq::onnx_import
