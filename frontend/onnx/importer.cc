#include "frontend/onnx/importer.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "frontend/onnx/const_fold.h"
#include "frontend/onnx/onnx_model.h"
#include "ir/builder.h"
#include "support/errors.h"
#include "support/file_io.h"
#include "support/label_pattern.h"

namespace pgq {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMinOpset = 13;
constexpr int64_t kMaxOpset = 17;

// Ops mapped to IR ops; the folder (const_fold.h) evaluates these and more on constants.
const std::vector<std::string>& computeOps() {
  static const std::vector<std::string> ops{
      "Add", "Cast", "Concat", "Constant", "Div", "Dropout", "Erf", "Exp", "Expand", "Flatten", "Gather",
      "Gemm", "Identity", "LayerNormalization", "Log", "LogSoftmax", "MatMul", "Mul", "Neg",
      "NegativeLogLikelihoodLoss", "Pow", "Reciprocal", "ReduceMax", "ReduceMean", "ReduceSum", "Relu",
      "Reshape", "Shape", "Sigmoid", "Slice", "Softmax", "SoftmaxCrossEntropyLoss", "Split", "Sqrt",
      "Squeeze", "Sub", "Tanh", "Tile", "Transpose", "Unsqueeze", "Where"};
  return ops;
}
// Ops that only move or select values: a parameter read through them is still read
// as a parameter (see trainableByDefault).
const std::unordered_set<std::string> kLayoutOps{"Transpose", "Reshape", "Unsqueeze", "Squeeze", "Identity",
                                                 "Cast",      "Slice",   "Gather",    "Split",   "Expand",
                                                 "Tile",      "Flatten", "Concat"};

// Input slots of an op that carry no gradient (indices, shapes, conditions, labels).
bool isDifferentiableSlot(const std::string& op, int slot) {
  if (op == "Gather" || op == "Reshape" || op == "Expand" || op == "Tile" || op == "Unsqueeze" ||
      op == "Squeeze" || op == "Split" || op == "Slice" || op == "Pow" || op == "Dropout" ||
      op == "ReduceSum" || op == "ReduceMean" || op == "ReduceMax")
    return slot == 0;
  if (op == "Where") return slot != 0;
  if (op == "SoftmaxCrossEntropyLoss" || op == "NegativeLogLikelihoodLoss") return slot == 0;
  return true;
}

std::string shapeText(const std::vector<int64_t>& dims) { return fmt::format("[{}]", fmt::join(dims, ", ")); }

// IR names allow letters, digits, '_', '.', '/' and start with a letter or '_'.
std::string irName(std::string_view onnx_name) {
  std::string s;
  for (char c : onnx_name)
    s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/') ? c : '_';
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) s = "v_" + s;
  return s;
}

// "/blocks.0/attn/q/MatMul" -> scope "blocks.0/attn/q", leaf "MatMul".
std::pair<std::string, std::string> splitNodeName(const std::string& name) {
  std::string s = name;
  while (!s.empty() && s.front() == '/') s.erase(s.begin());
  size_t slash = s.rfind('/');
  if (slash == std::string::npos) return {"", s};
  return {s.substr(0, slash), s.substr(slash + 1)};
}

// The transformer layer of a module path: the first component of the form `name.N`
// (blocks.3, h.3, layers.3, layer.3); -1 when there is none.
int64_t layerOf(const std::string& scope) {
  size_t pos = 0;
  while (pos <= scope.size()) {
    size_t end = std::min(scope.find('/', pos), scope.size());
    std::string_view part(scope.data() + pos, end - pos);
    size_t dot = part.rfind('.');
    if (dot != std::string_view::npos && dot > 0 && dot + 1 < part.size() && dot + 8 > part.size() &&
        std::all_of(part.begin() + static_cast<std::ptrdiff_t>(dot) + 1, part.end(),
                    [](char c) { return c >= '0' && c <= '9'; }))
      return std::stoll(std::string(part.substr(dot + 1)));
    pos = end + 1;
  }
  return -1;
}

// numpy broadcasting of two shapes; nullopt when they do not broadcast.
std::optional<std::vector<int64_t>> broadcastDims(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i + a.size() >= r ? a[i + a.size() - r] : 1;
    int64_t db = i + b.size() >= r ? b[i + b.size() - r] : 1;
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> dimsOf(const Node* n) {
  auto d = n->shape().dims();
  return {d.begin(), d.end()};
}

class Importer {
 public:
  explicit Importer(const OnnxImportOptions& o)
      : o_(o), file_(o.path), graph_(std::make_unique<Graph>(irName(fs::path(o.path).stem().string()))), b_(*graph_) {}
  ImportedModel run();

 private:
  using Value = std::variant<ConstTensor, Node*>;

  [[noreturn]] void fail(const onnx::NodeProto& node, const std::string& what) const {
    throw Error(fmt::format("{}: node {} ({}, opset {}): {}", file_, nodeTitle(node), node.op_type(), opset_, what));
  }
  static std::string nodeTitle(const onnx::NodeProto& node) {
    return node.name().empty() ? fmt::format("producing \"{}\"", node.output_size() ? node.output(0) : "")
                               : fmt::format("\"{}\"", node.name());
  }

  void readInputs();
  void chooseTrainable();
  void importNode(const onnx::NodeProto& node);
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
  Node* broadcastTo(Node* x, const std::vector<int64_t>& dims);
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
  Node* whereNode(const onnx::NodeProto& node);
  void gemmMetadata(const onnx::NodeProto& node, Node* g);

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
  // From the parameter list: the module parameter each initializer holds, and whether
  // as its transpose. Initializers holding one parameter become one IR parameter (a
  // tied embedding whose head use torch folded into a transposed copy stays tied).
  struct ParamRef {
    std::string param;
    bool transpose = false;
  };
  std::unordered_map<std::string, ParamRef> param_of_;
  std::unordered_map<std::string, Node*> param_nodes_;
  std::unordered_map<std::string, Node*> materialized_;
  // Values computed by LogSoftmax: the scores they came from (NLL of them is a
  // cross-entropy).
  std::unordered_map<std::string, Node*> log_softmax_of_;
  std::unordered_map<std::string, int> gemms_in_scope_;
  std::unordered_set<std::string> int_inputs_;
  int64_t next_layerless_ = 0;
};

const Importer::Value& Importer::value(const onnx::NodeProto& node, int i) const {
  auto it = values_.find(node.input(i));
  if (it == values_.end()) fail(node, fmt::format("input \"{}\" is not produced by any earlier node", node.input(i)));
  return it->second;
}

const ConstTensor& Importer::requireConstant(const onnx::NodeProto& node, int i, const char* what) const {
  if (!has(node, i)) fail(node, fmt::format("missing {} (input {})", what, i));
  const ConstTensor* c = constant(node, i);
  if (!c) fail(node, fmt::format("{} (input \"{}\") must be known at import, but it depends on the model's inputs",
                                 what, node.input(i)));
  return *c;
}

void Importer::readInputs() {
  const onnx::GraphProto& g = model_.graph();
  for (const onnx::TensorProto& t : g.initializer()) initializers_[t.name()] = &t;
  for (const onnx::ValueInfoProto& in : g.input()) {
    if (initializers_.count(in.name())) continue;  // IR < 4 lists initializers as inputs
    const auto& tt = in.type().tensor_type();
    const int32_t et = tt.elem_type();
    DType dtype;
    if (et == onnx::TensorProto::INT64 || et == onnx::TensorProto::INT32) dtype = DType::kS32;
    else if (et == onnx::TensorProto::FLOAT) dtype = DType::kF32;
    else
      throw Error(fmt::format("{}: graph input \"{}\" has element type {}; pgq takes int64/int32 tokens or float32",
                              file_, in.name(), onnx::TensorProto_DataType_Name(et)));
    std::vector<int64_t> dims;
    for (int d = 0; d < tt.shape().dim_size(); ++d) {
      const auto& dim = tt.shape().dim(d);
      // Integer inputs are tokens or labels: [batch, seq].
      int64_t given = 0;
      const char* flag = "";
      if (dtype == DType::kS32 && d == 0) given = o_.batch, flag = "--batch";
      if (dtype == DType::kS32 && d == 1) given = o_.seq_len, flag = "--seq";
      if (dim.has_dim_value()) {
        if (given && given != dim.dim_value())
          throw Error(fmt::format("{}: input \"{}\" has static dim {} = {}, but {} {} was given; the model was "
                                  "traced at that size: export it again with dynamic axes or drop {}",
                                  file_, in.name(), d, dim.dim_value(), flag, given, flag));
        dims.push_back(dim.dim_value());
      } else if (given) {
        dims.push_back(given);
      } else {
        throw Error(fmt::format("{}: input \"{}\" has a dynamic dimension {} (\"{}\"); give its size with {}", file_,
                                in.name(), d, dim.dim_param(), *flag ? flag : "a static export"));
      }
    }
    Node* n = b_.input(irName(in.name()), {dtype, Shape(dims)});
    values_[in.name()] = n;
    out_.inputs.emplace_back(in.name(), n);
    if (dtype == DType::kS32) int_inputs_.insert(in.name());
  }
  if (int_inputs_.empty() && !o_.forward_only)
    throw Error(fmt::format("{}: the model has no integer input (token ids)", file_));
}

// Which float initializers are trained. With a parameter list beside the model
// (scripts/export_onnx.py writes FILE.onnx.params.txt), those; otherwise every float
// initializer that reaches a differentiable operand of a computation on the inputs
// through layout ops only (a weight, transposed or not; an embedding table; a folded
// slice of one). Buffers computed from before they meet the inputs (rotary tables
// from inv_freq) and masks (conditions carry no gradient) stay constants.
void Importer::chooseTrainable() {
  const onnx::GraphProto& g = model_.graph();
  std::unordered_map<std::string, const onnx::NodeProto*> producer;
  for (const onnx::NodeProto& n : g.node())
    for (const std::string& o : n.output()) producer[o] = &n;

  auto isFloatInit = [&](const std::string& name) {
    auto it = initializers_.find(name);
    return it != initializers_.end() && (it->second->data_type() == onnx::TensorProto::FLOAT ||
                                         it->second->data_type() == onnx::TensorProto::DOUBLE ||
                                         it->second->data_type() == onnx::TensorProto::FLOAT16 ||
                                         it->second->data_type() == onnx::TensorProto::BFLOAT16);
  };

  std::string list_path = o_.path + ".params.txt";
  if (fs::is_regular_file(list_path)) {
    std::string text = readTextFile(list_path, InputKind::kModelConfig);
    size_t line_no = 0, pos = 0;
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      std::string line = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
      pos = end == std::string::npos ? text.size() : end + 1;
      ++line_no;
      if (line.empty() || line[0] == '#') continue;
      // PARAM | ONNX_NAME<TAB>PARAM | ONNX_NAME<TAB>PARAM<TAB>transpose (scripts/export_onnx.py)
      std::vector<std::string> fields;
      for (size_t at = 0;;) {
        size_t tab = line.find('\t', at);
        fields.push_back(line.substr(at, tab == std::string::npos ? std::string::npos : tab - at));
        if (tab == std::string::npos) break;
        at = tab + 1;
      }
      const bool transpose = fields.size() == 3 && fields[2] == "transpose";
      if (fields.size() > 3 || (fields.size() == 3 && !transpose))
        throw Error(fmt::format("{}:{}: expected PARAM, ONNX_NAME<TAB>PARAM or ONNX_NAME<TAB>PARAM<TAB>transpose",
                                list_path, line_no));
      const std::string& name = fields[0];
      if (!isFloatInit(name))
        throw Error(fmt::format("{}:{}: \"{}\" is not a float initializer of {}", list_path, line_no, name, file_));
      if (transpose && initializers_.at(name)->dims_size() != 2)
        throw Error(fmt::format("{}:{}: \"{}\" is not 2-D, so it cannot hold a transpose", list_path, line_no, name));
      trainable_.insert(name);
      param_of_[name] = {fields.size() > 1 ? fields[1] : name, transpose};
    }
    out_.notes.push_back(fmt::format("trainable parameters: the {} listed in {}", trainable_.size(), list_path));
  } else {
    std::unordered_set<std::string> act(int_inputs_.begin(), int_inputs_.end());
    for (const auto& [name, node] : values_)
      if (std::holds_alternative<Node*>(node)) act.insert(name);
    std::function<void(const std::string&, int)> mark = [&](const std::string& name, int depth) {
      if (isFloatInit(name)) {
        trainable_.insert(name);
        return;
      }
      auto p = producer.find(name);
      if (p == producer.end() || depth > 16 || !kLayoutOps.count(p->second->op_type())) return;
      for (int i = 0; i < p->second->input_size(); ++i)
        if (isDifferentiableSlot(p->second->op_type(), i) && !p->second->input(i).empty())
          mark(p->second->input(i), depth + 1);
    };
    for (const onnx::NodeProto& n : g.node()) {
      bool on_inputs = n.op_type() != "Shape" && n.op_type() != "Size" &&
                       std::any_of(n.input().begin(), n.input().end(), [&](const std::string& i) { return act.count(i); });
      if (!on_inputs) continue;
      for (const std::string& o : n.output()) act.insert(o);
      if (kLayoutOps.count(n.op_type()) && n.op_type() != "Concat") continue;  // not where parameters meet inputs
      for (int i = 0; i < n.input_size(); ++i)
        if (!n.input(i).empty() && !act.count(n.input(i)) && isDifferentiableSlot(n.op_type(), i))
          mark(n.input(i), 0);
    }
    out_.notes.push_back(
        fmt::format("trainable parameters: {} float initializers read by the computation (no {} beside the model)",
                    trainable_.size(), list_path));
  }
  auto pattern = [&](const std::string& text, const char* flag) {
    try {
      return LabelPattern(text);
    } catch (const Error& e) {
      throw Error(fmt::format("{} \"{}\": {}", flag, text, e.what()));
    }
  };
  LabelPattern train_re = pattern(o_.trainable, "--trainable"), frozen_re = pattern(o_.frozen, "--frozen");
  // A pattern matches the initializer's name or the module parameter it holds
  // (constant folding renames weights to "onnx::MatMul_233").
  for (const auto& entry : initializers_) {
    const std::string& name = entry.first;  // not a structured binding: clang 14 cannot capture one
    auto ref = param_of_.find(name);
    auto matches = [&](const LabelPattern& re) {
      return re.matches(name) || (ref != param_of_.end() && re.matches(ref->second.param));
    };
    if (!o_.trainable.empty() && isFloatInit(name) && matches(train_re)) trainable_.insert(name);
    if (!o_.frozen.empty() && matches(frozen_re)) trainable_.erase(name);
  }
  if (trainable_.empty() && !o_.forward_only)
    throw Error(fmt::format("{}: no trainable parameters (check --trainable/--frozen)", file_));
}

Node* Importer::materialize(const ConstTensor& c, const std::string& onnx_name, DType dtype) {
  std::string key = onnx_name + (dtype == DType::kS32 ? "#s32" : "#f32");
  if (auto it = materialized_.find(key); it != materialized_.end() && dimsOf(it->second) == c.dims) return it->second;
  TensorType type{dtype, Shape(c.dims)};
  const bool splat = c.numElements() > 0 &&
                     std::all_of(c.values.begin(), c.values.end(), [&](double v) { return v == c.values[0]; });
  Node* n;
  if (splat && dtype == DType::kF32) {
    n = b_.constant(c.values[0], type);
  } else {
    n = b_.parameter("const/" + irName(onnx_name), type, "model");
    std::vector<float>& v = out_.values[n->name()];
    v.assign(c.values.begin(), c.values.end());
    out_.constants.push_back(n);
  }
  materialized_[key] = n;
  return n;
}

Node* Importer::irValue(const onnx::NodeProto& node, int i) {
  const Value& v = value(node, i);
  if (auto* n = std::get_if<Node*>(&v)) return *n;
  const ConstTensor& c = std::get<ConstTensor>(v);
  if (!c.isFloat()) fail(node, fmt::format("integer constant \"{}\" used as data", node.input(i)));
  return materialize(c, node.input(i), DType::kF32);
}

Node* Importer::broadcastTo(Node* x, const std::vector<int64_t>& dims) {
  std::vector<int64_t> xd = dimsOf(x);
  if (xd == dims) return x;
  PGQ_ASSERT(xd.size() <= dims.size(), "broadcast to a lower rank");
  // Drop x's size-1 dims that grow; the rest map onto the trailing dims they align with.
  std::vector<int64_t> kept, map;
  const size_t off = dims.size() - xd.size();
  for (size_t i = 0; i < xd.size(); ++i) {
    if (xd[i] == dims[i + off]) {
      kept.push_back(xd[i]);
      map.push_back(static_cast<int64_t>(i + off));
    } else {
      PGQ_ASSERT(xd[i] == 1, "dims do not broadcast");
    }
  }
  Node* r = reshape(x, kept);
  return b_.broadcast(r, Shape(dims), map);
}

// A scalar or all-equal constant becomes a splat of the result shape; anything else
// an IR value broadcast to it.
Node* Importer::splatOrBroadcast(const onnx::NodeProto& node, int i, const std::vector<int64_t>& dims) {
  if (const ConstTensor* c = constant(node, i)) {
    if (c->numElements() > 0 && std::all_of(c->values.begin(), c->values.end(),
                                            [&](double v) { return v == c->values[0]; }))
      return b_.constant(c->values[0], {DType::kF32, Shape(dims)});
  }
  return broadcastTo(irValue(node, i), dims);
}

Node* Importer::binary(const onnx::NodeProto& node, Op op) {
  auto dims = broadcastDims(shapeOf(value(node, 0)), shapeOf(value(node, 1)));
  if (!dims)
    fail(node, fmt::format("shapes {} and {} do not broadcast", shapeText(shapeOf(value(node, 0))),
                           shapeText(shapeOf(value(node, 1)))));
  return b_.binary(op, splatOrBroadcast(node, 0, *dims), splatOrBroadcast(node, 1, *dims));
}

int64_t Importer::axisOf(const onnx::NodeProto& node, int64_t axis, size_t rank) const {
  const int64_t r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) fail(node, fmt::format("axis {} out of range for rank {}", axis, r));
  return axis < 0 ? axis + r : axis;
}

Node* Importer::sliceAxis(Node* x, int64_t axis, int64_t start, int64_t end) {
  std::vector<int64_t> starts(dimsOf(x).size(), 0), limits = dimsOf(x);
  if (start == 0 && end == limits[static_cast<size_t>(axis)]) return x;
  starts[static_cast<size_t>(axis)] = start;
  limits[static_cast<size_t>(axis)] = end;
  return b_.slice(x, starts, limits);
}

// Transposes `axis` to the last position (or back).
Node* Importer::moveLastAxis(Node* x, int64_t axis, bool to_last) {
  const int64_t r = static_cast<int64_t>(dimsOf(x).size());
  if (axis == r - 1) return x;
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < r; ++i)
    if (i != axis) perm.push_back(i);
  perm.push_back(axis);
  if (!to_last) {
    std::vector<int64_t> inv(perm.size());
    for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
    perm = inv;
  }
  return b_.transpose(x, perm);
}

void Importer::gemmMetadata(const onnx::NodeProto& node, Node* g) {
  auto [scope, leaf] = splitNodeName(node.name());
  std::string label = scope;
  if (label.empty() || gemms_in_scope_[scope]++ > 0 || leaf.find('_') != std::string::npos)
    label = scope.empty() ? leaf : scope + "/" + leaf;
  if (label.empty()) label = fmt::format("gemm{}", next_layerless_++);
  g->attrs().set(AttrKey::kLabel, label);
  int64_t layer = layerOf(scope);
  if (layer >= 0) g->attrs().set(AttrKey::kLayer, layer);
}

// numpy matmul (or Gemm's transposes) as a dot_general.
Node* Importer::matmul(const onnx::NodeProto& node, Node* a, Node* b, bool trans_a, bool trans_b) {
  std::vector<int64_t> ad = dimsOf(a), bd = dimsOf(b);
  if (ad.size() < 2 || bd.size() < 2) fail(node, "operands of rank < 2 are not supported");
  // A transposed 2-D parameter (a Linear weight exported without folding) is read
  // through the contracting dims instead, as the built-in models do.
  if (bd.size() == 2 && b->op() == Op::kTranspose && b->operand(0)->op() == Op::kParameter) {
    b = b->operand(0);
    bd = dimsOf(b);
    trans_b = !trans_b;
  }
  const int64_t ar = static_cast<int64_t>(ad.size()), br = static_cast<int64_t>(bd.size());
  const int64_t a_k = trans_a ? ar - 2 : ar - 1, b_k = trans_b ? br - 1 : br - 2;
  if (ad[static_cast<size_t>(a_k)] != bd[static_cast<size_t>(b_k)])
    fail(node, fmt::format("contracting dims differ: {} x {}", shapeText(ad), shapeText(bd)));
  DotDims dims;
  Node* g;
  if (br == 2 && (!trans_a || ar == 2)) {
    dims = {{a_k}, {b_k}, {}, {}};
    g = b_.matmul(a, b, dims);
  } else {
    if (trans_a) fail(node, "a transposed lhs of rank > 2 is not supported");
    std::vector<int64_t> a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
    auto batch = broadcastDims(a_batch, b_batch);
    if (!batch) fail(node, fmt::format("batch dims {} and {} do not broadcast", shapeText(ad), shapeText(bd)));
    std::vector<int64_t> ta = *batch, tb = *batch;
    ta.insert(ta.end(), ad.end() - 2, ad.end());
    tb.insert(tb.end(), bd.end() - 2, bd.end());
    a = broadcastTo(a, ta);
    b = broadcastTo(b, tb);
    const int64_t nb = static_cast<int64_t>(batch->size());
    std::vector<int64_t> bdims(static_cast<size_t>(nb));
    for (int64_t i = 0; i < nb; ++i) bdims[static_cast<size_t>(i)] = i;
    dims = {{nb + 1}, {trans_b ? nb + 1 : nb}, bdims, bdims};
    g = b_.matmul(a, b, dims);
  }
  gemmMetadata(node, g);
  return g;
}

Node* Importer::crossEntropy(const onnx::NodeProto& node, Node* scores, Node* labels) {
  std::vector<int64_t> sd = dimsOf(scores);
  if (sd.size() >= 3) {  // [N, C, d1...]: classes on axis 1
    scores = moveLastAxis(scores, 1, true);
    sd = dimsOf(scores);
  }
  int64_t v = sd.back(), n = scores->shape().numElements() / v;
  if (labels->dtype() != DType::kS32) fail(node, "labels must be integers");
  if (labels->shape().numElements() != n)
    fail(node, fmt::format("labels {} do not match scores {}", shapeText(dimsOf(labels)), shapeText(sd)));
  if (node.op_type() == "SoftmaxCrossEntropyLoss" || node.op_type() == "NegativeLogLikelihoodLoss") {
    for (const auto& a : node.attribute()) {
      if (a.name() == "reduction" && a.s() != "mean")
        fail(node, fmt::format("reduction \"{}\" is not supported (pgq trains on the mean loss)", a.s()));
      if (a.name() == "ignore_index") {
        out_.ignore_index = a.i();
        out_.notes.push_back(fmt::format("{}: ignore_index {} is not supported: every label must be a class "
                                         "(pgq import --inputs refuses labels equal to it)",
                                         node.name(), a.i()));
      }
    }
    if (has(node, 2)) fail(node, "class weights are not supported");
  }
  return b_.crossEntropy(reshape(scores, {n, v}), reshape(labels, {n}));
}

// Where(cond, x, y) with a constant condition. A causal mask (a fill value above the
// diagonal of the last two dims, the same for every leading index) becomes pgq's
// causal_mask; anything else a select.
Node* Importer::whereNode(const onnx::NodeProto& node) {
  const ConstTensor& cond = requireConstant(node, 0, "the condition");
  auto d1 = broadcastDims(shapeOf(value(node, 1)), shapeOf(value(node, 2)));
  auto dims = d1 ? broadcastDims(cond.dims, *d1) : std::nullopt;
  if (!dims) fail(node, "operand shapes do not broadcast");
  for (int fill_slot : {1, 2}) {
    const ConstTensor* fill = constant(node, fill_slot);
    if (!fill || fill->numElements() != 1 || dims->size() < 2) continue;
    // Where fill is picked: cond true for slot 1, false for slot 2.
    const size_t r = dims->size();
    const int64_t tq = (*dims)[r - 2], tk = (*dims)[r - 1];
    std::vector<int64_t> cd = cond.dims;
    while (cd.size() < r) cd.insert(cd.begin(), 1);
    bool leading_one = true;
    for (size_t i = 0; i + 2 < r; ++i) leading_one &= cd[i] == 1;
    if (!leading_one) continue;
    const int64_t cq = cd[r - 2], ck = cd[r - 1];
    bool causal = true;
    for (int64_t i = 0; i < tq && causal; ++i)
      for (int64_t j = 0; j < tk && causal; ++j) {
        bool c = cond.values[static_cast<size_t>((cq == 1 ? 0 : i) * ck + (ck == 1 ? 0 : j))] != 0;
        bool filled = fill_slot == 1 ? c : !c;
        causal = filled == (j > i + (tk - tq));
      }
    if (!causal) continue;
    Node* x = broadcastTo(irValue(node, 3 - fill_slot), *dims);
    return b_.causalMask(x, fill->values[0]);
  }
  ConstTensor full;
  full.dtype = onnx::TensorProto::FLOAT;
  full.dims = cond.dims;
  full.values = cond.values;
  Node* c = broadcastTo(materialize(full, node.input(0), DType::kF32), *dims);
  return b_.select(c, splatOrBroadcast(node, 1, *dims), splatOrBroadcast(node, 2, *dims));
}

std::vector<int64_t> attrInts(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute())
    if (a.name() == name) return {a.ints().begin(), a.ints().end()};
  return {};
}
std::optional<int64_t> attrInt(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute())
    if (a.name() == name) return a.i();
  return std::nullopt;
}
std::optional<float> attrFloat(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute())
    if (a.name() == name) return a.f();
  return std::nullopt;
}

void Importer::importNode(const onnx::NodeProto& node) {
  const std::string& op = node.op_type();
  if (!node.domain().empty() && node.domain() != "ai.onnx")
    fail(node, fmt::format("domain \"{}\" is not supported (only the default ONNX domain)", node.domain()));

  // Constants: folded whenever every input is known. Shape and Size of an IR value are
  // known too: shapes are static.
  if (op == "Shape" || op == "Size") {
    if (auto* n = std::get_if<Node*>(&value(node, 0))) {
      ConstTensor s;
      s.dtype = onnx::TensorProto::INT64;
      std::vector<int64_t> d = dimsOf(*n);
      if (op == "Size") {
        s.values = {static_cast<double>((*n)->shape().numElements())};
      } else {
        int64_t r = static_cast<int64_t>(d.size());
        int64_t start = attrInt(node, "start").value_or(0), end = attrInt(node, "end").value_or(r);
        if (start < 0) start += r;
        if (end < 0) end += r;
        start = std::clamp<int64_t>(start, 0, r);
        end = std::clamp<int64_t>(end, start, r);
        for (int64_t i = start; i < end; ++i) s.values.push_back(static_cast<double>(d[static_cast<size_t>(i)]));
        s.dims = {end - start};
      }
      set(node, 0, std::move(s));
      return;
    }
  }
  if (op == "Constant") {
    if (node.attribute_size() != 1) fail(node, "a Constant needs exactly one value attribute");
    set(node, 0, attributeTensor(node.attribute(0), fs::path(o_.path).parent_path(), file_, node.name()));
    return;
  }
  {
    std::vector<const ConstTensor*> ins;
    bool all_const = true;
    for (int i = 0; i < node.input_size(); ++i) {
      if (node.input(i).empty()) {
        ins.push_back(nullptr);
        continue;
      }
      const ConstTensor* c = constant(node, i);
      all_const &= c != nullptr;
      ins.push_back(c);
    }
    if (all_const) {
      if (auto folded = foldNode(node, ins, opset_, file_)) {
        for (size_t i = 0; i < folded->size() && static_cast<int>(i) < node.output_size(); ++i)
          set(node, static_cast<int>(i), std::move((*folded)[i]));
        return;
      }
      if (std::find(computeOps().begin(), computeOps().end(), op) == computeOps().end())
        fail(node, "cannot be evaluated at import");
    }
  }

  auto unary = [&](Op irop) { set(node, 0, b_.unary(irop, irValue(node, 0))); };
  if (op == "Add") return set(node, 0, binary(node, Op::kAdd));
  if (op == "Sub") return set(node, 0, binary(node, Op::kSub));
  if (op == "Mul") return set(node, 0, binary(node, Op::kMul));
  if (op == "Div") return set(node, 0, binary(node, Op::kDiv));
  if (op == "Neg") return unary(Op::kNeg);
  if (op == "Exp") return unary(Op::kExp);
  if (op == "Log") return unary(Op::kLog);
  if (op == "Tanh") return unary(Op::kTanh);
  if (op == "Relu") return unary(Op::kRelu);
  if (op == "Sqrt") return unary(Op::kSqrt);
  if (op == "Sigmoid") return unary(Op::kSigmoid);
  if (op == "Erf") return unary(Op::kErf);
  if (op == "Reciprocal") {
    Node* x = irValue(node, 0);
    return set(node, 0, b_.div(b_.constant(1.0, x->type()), x));
  }
  if (op == "Pow") {
    Node* x = irValue(node, 0);
    const ConstTensor& e = requireConstant(node, 1, "the exponent");
    if (e.numElements() != 1) fail(node, "the exponent must be a scalar");
    const double p = e.values[0];
    if (p == 1) return set(node, 0, x);
    if (p == 2) return set(node, 0, b_.mul(x, x));
    if (p == 3) return set(node, 0, b_.mul(b_.mul(x, x), x));
    if (p == 0.5) return set(node, 0, b_.unary(Op::kSqrt, x));
    if (p == -0.5) return set(node, 0, b_.unary(Op::kRsqrt, x));
    if (p == -1) return set(node, 0, b_.div(b_.constant(1.0, x->type()), x));
    fail(node, fmt::format("exponent {} is not supported (1, 2, 3, 0.5, -0.5 and -1 are)", p));
  }
  if (op == "Identity" || op == "Dropout") {
    if (op == "Dropout" && node.output_size() > 1 && !node.output(1).empty())
      fail(node, "the dropout mask output is not supported");
    if (op == "Dropout")
      out_.notes.push_back(fmt::format("{}: dropout removed (pgq trains without dropout)", node.name()));
    return set(node, 0, value(node, 0));
  }
  if (op == "Cast") {
    const int64_t to = attrInt(node, "to").value_or(0);
    Node* x = nodeValue(node, 0);
    const bool to_int = to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32;
    const bool to_float = to == onnx::TensorProto::FLOAT;
    if ((x->dtype() == DType::kS32 && to_int) || (x->dtype() == DType::kF32 && to_float)) return set(node, 0, x);
    fail(node, fmt::format("cast of {} to {} is not supported", x->type().toString(),
                           onnx::TensorProto_DataType_Name(static_cast<int>(to))));
  }
  if (op == "MatMul") return set(node, 0, matmul(node, irValue(node, 0), irValue(node, 1), false, false));
  if (op == "Gemm") {
    Node* y = matmul(node, irValue(node, 0), irValue(node, 1), attrInt(node, "transA").value_or(0) != 0,
                     attrInt(node, "transB").value_or(0) != 0);
    const double alpha = attrFloat(node, "alpha").value_or(1.0f), beta = attrFloat(node, "beta").value_or(1.0f);
    if (alpha != 1) y = b_.scale(y, alpha);
    if (has(node, 2)) {
      Node* c = splatOrBroadcast(node, 2, dimsOf(y));
      y = b_.add(y, beta == 1 ? c : b_.scale(c, beta));
    }
    return set(node, 0, y);
  }
  if (op == "Transpose") {
    Node* x = irValue(node, 0);
    std::vector<int64_t> perm = attrInts(node, "perm");
    if (perm.empty())
      for (int64_t i = static_cast<int64_t>(dimsOf(x).size()) - 1; i >= 0; --i) perm.push_back(i);
    return set(node, 0, b_.transpose(x, perm));
  }
  if (op == "Reshape" || op == "Unsqueeze" || op == "Squeeze" || op == "Flatten") {
    Node* x = nodeValue(node, 0);
    std::vector<int64_t> in = dimsOf(x), out;
    if (op == "Reshape") {
      out = constInts(node, 1, "the target shape");
      const bool allowzero = attrInt(node, "allowzero").value_or(0) != 0;
      int64_t known = 1, infer = -1;
      for (size_t i = 0; i < out.size(); ++i) {
        if (out[i] == 0 && !allowzero) {
          if (i >= in.size()) fail(node, "0 in the shape refers to a missing input dim");
          out[i] = in[i];
        }
        if (out[i] == -1) infer = static_cast<int64_t>(i);
        else known *= out[i];
      }
      if (infer >= 0) out[static_cast<size_t>(infer)] = known ? x->shape().numElements() / known : 0;
    } else if (op == "Flatten") {
      // axis is in [-r, r]; a negative one counts from r.
      int64_t axis = attrInt(node, "axis").value_or(1);
      if (axis < 0) axis += static_cast<int64_t>(in.size());
      if (axis < 0 || axis > static_cast<int64_t>(in.size()))
        fail(node, fmt::format("axis {} out of range for rank {}", attrInt(node, "axis").value_or(1), in.size()));
      int64_t a = 1, b = 1;
      for (size_t i = 0; i < in.size(); ++i) (static_cast<int64_t>(i) < axis ? a : b) *= in[i];
      out = {a, b};
    } else {
      std::vector<int64_t> axes = has(node, 1) ? constInts(node, 1, "the axes") : attrInts(node, "axes");
      if (op == "Unsqueeze") {
        const size_t r = in.size() + axes.size();
        std::vector<bool> inserted(r, false);
        for (int64_t a : axes) inserted[static_cast<size_t>(axisOf(node, a, r))] = true;
        for (size_t i = 0, j = 0; i < r; ++i) out.push_back(inserted[i] ? 1 : in[j++]);
      } else {
        std::vector<bool> drop(in.size(), axes.empty());
        for (int64_t a : axes) drop[static_cast<size_t>(axisOf(node, a, in.size()))] = true;
        for (size_t i = 0; i < in.size(); ++i)
          if (!(drop[i] && in[i] == 1)) out.push_back(in[i]);
      }
    }
    int64_t n = 1;
    for (int64_t d : out) n *= d;
    if (n != x->shape().numElements())
      fail(node, fmt::format("cannot reshape {} to {}", shapeText(in), shapeText(out)));
    // A reshape that keeps the class dim keeps a LogSoftmax a LogSoftmax (for the NLL
    // after it).
    if (auto ls = log_softmax_of_.find(node.input(0));
        ls != log_softmax_of_.end() && !out.empty() && !in.empty() && out.back() == in.back())
      log_softmax_of_[node.output(0)] = reshape(ls->second, out);
    return set(node, 0, reshape(x, out));
  }
  if (op == "Expand") {
    Node* x = irValue(node, 0);
    auto dims = broadcastDims(dimsOf(x), constInts(node, 1, "the shape"));
    if (!dims) fail(node, "the shape does not broadcast");
    return set(node, 0, broadcastTo(x, *dims));
  }
  if (op == "Tile") {
    Node* x = irValue(node, 0);
    std::vector<int64_t> reps = constInts(node, 1, "the repeats"), in = dimsOf(x);
    if (reps.size() != in.size()) fail(node, "repeats must have one entry per dim");
    // out[k*d + j] = x[j]: broadcast to [r0, d0, r1, d1, ...], then merge the pairs.
    std::vector<int64_t> wide, map, out;
    for (size_t i = 0; i < in.size(); ++i) {
      wide.push_back(reps[i]);
      wide.push_back(in[i]);
      map.push_back(static_cast<int64_t>(2 * i + 1));
      out.push_back(reps[i] * in[i]);
    }
    return set(node, 0, reshape(b_.broadcast(x, Shape(wide), map), out));
  }
  if (op == "Slice") {
    Node* x = nodeValue(node, 0);
    std::vector<int64_t> in = dimsOf(x);
    std::vector<int64_t> starts = constInts(node, 1, "starts"), ends = constInts(node, 2, "ends");
    std::vector<int64_t> axes = has(node, 3) ? constInts(node, 3, "axes") : std::vector<int64_t>{};
    std::vector<int64_t> steps = has(node, 4) ? constInts(node, 4, "steps") : std::vector<int64_t>{};
    std::vector<int64_t> lo(in.size(), 0), hi = in;
    for (size_t i = 0; i < starts.size(); ++i) {
      const size_t a = static_cast<size_t>(axisOf(node, axes.empty() ? static_cast<int64_t>(i) : axes[i], in.size()));
      if (!steps.empty() && steps[i] != 1) fail(node, "slices with a step other than 1 are not supported");
      int64_t s = starts[i], e = ends[i], d = in[a];
      if (s < 0) s += d;
      if (e < 0) e += d;
      lo[a] = std::clamp<int64_t>(s, 0, d);
      hi[a] = std::clamp<int64_t>(e, lo[a], d);
    }
    return set(node, 0, lo == std::vector<int64_t>(in.size(), 0) && hi == in ? x : b_.slice(x, lo, hi));
  }
  if (op == "Split") {
    Node* x = irValue(node, 0);
    std::vector<int64_t> in = dimsOf(x);
    const int64_t axis = axisOf(node, attrInt(node, "axis").value_or(0), in.size());
    std::vector<int64_t> sizes = has(node, 1) ? constInts(node, 1, "the split sizes") : attrInts(node, "split");
    if (sizes.empty()) {
      const int64_t parts = node.output_size(), d = in[static_cast<size_t>(axis)];
      if (d % parts) fail(node, fmt::format("dim {} does not split into {} equal parts", d, parts));
      sizes.assign(static_cast<size_t>(parts), d / parts);
    }
    if (static_cast<int>(sizes.size()) != node.output_size()) fail(node, "split sizes do not match the outputs");
    int64_t at = 0;
    for (int i = 0; i < node.output_size(); ++i) {
      set(node, i, sliceAxis(x, axis, at, at + sizes[static_cast<size_t>(i)]));
      at += sizes[static_cast<size_t>(i)];
    }
    if (at != in[static_cast<size_t>(axis)]) fail(node, "split sizes do not add up to the dim");
    return;
  }
  if (op == "Concat") {
    const size_t r = shapeOf(value(node, 0)).size();
    const int64_t axis = axisOf(node, attrInt(node, "axis").value_or(0), r);
    Node* acc = nullptr;
    for (int i = 0; i < node.input_size(); ++i) {
      Node* v = irValue(node, i);
      if (v->shape().dim(static_cast<int>(axis)) == 0) continue;
      acc = acc ? b_.concat(acc, v, axis) : v;
    }
    if (!acc) fail(node, "every input is empty");
    return set(node, 0, acc);
  }
  if (op == "Gather") {
    const int64_t axis_attr = attrInt(node, "axis").value_or(0);
    const ConstTensor* idx = constant(node, 1);
    std::vector<int64_t> dd = shapeOf(value(node, 0));
    const int64_t axis = axisOf(node, axis_attr, dd.size());
    if (idx) {
      // Constant indices: a contiguous run is a slice (positions 0..T-1 of a table).
      std::vector<int64_t> ids = idx->ints();
      const int64_t d = dd[static_cast<size_t>(axis)];
      for (int64_t& i : ids) i = i < 0 ? i + d : i;
      bool run = !ids.empty();
      for (size_t i = 1; i < ids.size(); ++i) run &= ids[i] == ids[0] + static_cast<int64_t>(i);
      if (!run || ids[0] < 0 || ids.back() >= d) fail(node, "constant indices must be a contiguous range in bounds");
      Node* s = sliceAxis(irValue(node, 0), axis, ids[0], ids.back() + 1);
      std::vector<int64_t> out(dd.begin(), dd.begin() + axis);
      out.insert(out.end(), idx->dims.begin(), idx->dims.end());
      out.insert(out.end(), dd.begin() + axis + 1, dd.end());
      return set(node, 0, reshape(s, out));
    }
    Node* indices = nodeValue(node, 1);
    if (axis != 0 || dd.size() != 2 || indices->dtype() != DType::kS32)
      fail(node, "only an embedding lookup (a 2-D table indexed by token ids along axis 0) is supported");
    return set(node, 0, b_.gather(irValue(node, 0), indices));
  }
  if (op == "LayerNormalization") {
    Node* x = irValue(node, 0);
    const size_t r = dimsOf(x).size();
    if (axisOf(node, attrInt(node, "axis").value_or(-1), r) != static_cast<int64_t>(r) - 1)
      fail(node, "only normalization over the last dim is supported");
    for (int i = 1; i < node.output_size(); ++i)
      if (!node.output(i).empty()) fail(node, "the mean and inverse deviation outputs are not supported");
    Node* y = b_.norm(Op::kLayerNorm, x, attrFloat(node, "epsilon").value_or(1e-5f));
    y = b_.mul(y, splatOrBroadcast(node, 1, dimsOf(x)));
    if (has(node, 2)) y = b_.add(y, splatOrBroadcast(node, 2, dimsOf(x)));
    return set(node, 0, y);
  }
  if (op == "Softmax" || op == "LogSoftmax") {
    Node* x = irValue(node, 0);
    const int64_t axis = axisOf(node, attrInt(node, "axis").value_or(-1), dimsOf(x).size());
    Node* y = moveLastAxis(b_.softmax(moveLastAxis(x, axis, true)), axis, false);
    if (op == "LogSoftmax") {
      // Remembered for a NegativeLogLikelihoodLoss of [N, C] (classes last).
      if (axis == static_cast<int64_t>(dimsOf(x).size()) - 1) log_softmax_of_[node.output(0)] = x;
      y = b_.unary(Op::kLog, y);
    }
    return set(node, 0, y);
  }
  if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax") {
    Node* x = irValue(node, 0);
    std::vector<int64_t> in = dimsOf(x);
    std::vector<int64_t> axes = (op == "ReduceSum" && has(node, 1)) ? constInts(node, 1, "the axes")
                                                                    : attrInts(node, "axes");
    if (axes.empty()) {
      if (attrInt(node, "noop_with_empty_axes").value_or(0)) return set(node, 0, x);
      for (size_t i = 0; i < in.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    }
    for (int64_t& a : axes) a = axisOf(node, a, in.size());
    std::sort(axes.begin(), axes.end());
    Op irop = op == "ReduceMean" ? Op::kReduceMean : op == "ReduceSum" ? Op::kReduceSum : Op::kReduceMax;
    Node* y = b_.reduce(irop, x, axes);
    if (attrInt(node, "keepdims").value_or(1)) {
      std::vector<int64_t> kept = in;
      for (int64_t a : axes) kept[static_cast<size_t>(a)] = 1;
      y = reshape(y, kept);
    }
    return set(node, 0, y);
  }
  if (op == "Where") return set(node, 0, whereNode(node));
  if (op == "SoftmaxCrossEntropyLoss") {
    if (node.output_size() > 1 && !node.output(1).empty()) fail(node, "the log_prob output is not supported");
    return set(node, 0, crossEntropy(node, irValue(node, 0), labels(node)));
  }
  if (op == "NegativeLogLikelihoodLoss") {
    auto it = log_softmax_of_.find(node.input(0));
    if (it == log_softmax_of_.end() || it->second->shape().rank() != 2)
      fail(node, "only the negative log-likelihood of a LogSoftmax over the classes of [N, C] scores is supported");
    return set(node, 0, crossEntropy(node, it->second, labels(node)));
  }
  std::vector<std::string> all = supportedOnnxOps();
  if (std::find(all.begin(), all.end(), op) != all.end())
    fail(node, fmt::format("it has no IR op, so its inputs must be constants at import, but they depend on the "
                           "model's inputs; ops on the model's inputs: {}",
                           fmt::join(computeOps(), ", ")));
  fail(node, fmt::format("op {} is not supported; supported: {}", op, fmt::join(all, ", ")));
}

void Importer::findLoss() {
  const onnx::GraphProto& g = model_.graph();
  Node* logits = nullptr;
  for (const onnx::ValueInfoProto& o : g.output()) {
    auto it = values_.find(o.name());
    if (it == values_.end()) continue;
    Node* const* n = std::get_if<Node*>(&it->second);
    if (!n) continue;
    if ((*n)->type() == TensorType{DType::kF32, Shape()} && (*n)->op() == Op::kCrossEntropy) {
      out_.net.loss = *n;
      Node* labels = (*n)->operand(1);
      while (labels->op() == Op::kReshape) labels = labels->operand(0);
      if (labels->op() == Op::kInput) out_.net.targets = labels;
      break;
    }
    if (!logits && (*n)->shape().rank() == 3 && (*n)->dtype() == DType::kF32) logits = *n;
  }
  // Tokens: the integer input the embedding reads (the first one if none does).
  for (const auto& [name, node] : out_.inputs)
    if (node->dtype() == DType::kS32 && node != out_.net.targets) {
      out_.net.tokens = node;
      break;
    }
  for (Node* n : graph_->nodes())
    if (n->op() == Op::kGather && n->operand(1)->op() == Op::kInput) out_.net.tokens = n->operand(1);
  if (!out_.net.loss) {
    if (!logits)
      throw Error(fmt::format("{}: no scalar cross-entropy loss and no logits output [batch, seq, vocab] among the "
                              "graph outputs",
                              file_));
    // Next-token loss: logits at positions 0..T-2 against tokens 1..T-1.
    Node* tokens = out_.net.tokens;
    std::vector<int64_t> ld = dimsOf(logits), td = dimsOf(tokens);
    if (td.size() != 2 || ld[0] != td[0] || ld[1] != td[1])
      throw Error(fmt::format("{}: logits {} do not match the tokens {}", file_, shapeText(ld), shapeText(td)));
    const int64_t B = ld[0], T = ld[1], V = ld[2];
    if (T < 2) throw Error(fmt::format("{}: a next-token loss needs a sequence of at least 2", file_));
    Node* l = b_.reshape(b_.slice(logits, {0, 0, 0}, {B, T - 1, V}), Shape{B * (T - 1), V});
    Node* t = b_.reshape(b_.slice(tokens, {0, 1}, {B, T}), Shape{B * (T - 1)});
    out_.net.loss = b_.crossEntropy(l, t, "loss");
    out_.notes.push_back("loss: mean cross-entropy of the logits output against the next tokens (appended by pgq)");
  }
  Node* lg = out_.net.loss->operand(0);
  while (lg->op() == Op::kReshape || lg->op() == Op::kSlice || lg->op() == Op::kTranspose) lg = lg->operand(0);
  out_.vocab = lg->shape().dim(lg->shape().rank() - 1);
  // The logits GEMM is the one feeding the loss (through a bias add). It keeps the
  // user's module path as its label ("head", "lm_head"); a head computed in the top
  // module's own forward (a tied `x @ wte.weight.T`, node "/MatMul") has no module
  // path and takes the paper's name, get_logits.
  Node* head = lg;
  if (head->op() == Op::kAdd)
    for (Node* operand : head->operands())
      if (operand->op() == Op::kMatMul) head = operand;
  if (head->op() == Op::kMatMul) {
    std::string label = head->attrs().getStringOr(AttrKey::kLabel, "");
    if (label.find('/') == std::string::npos && label.rfind("MatMul", 0) == 0) {
      label = "get_logits";
      head->attrs().set(AttrKey::kLabel, label);
    }
    out_.notes.push_back(fmt::format("logits GEMM: {}", label));
  }
  graph_->setOutputs({out_.net.loss});
}

ImportedModel Importer::run() {
  model_ = readOnnxModel(o_.path, &out_.fingerprint);
  opset_ = defaultOpset(model_, file_);
  if (opset_ < kMinOpset || opset_ > kMaxOpset)
    throw Error(fmt::format("{}: opset {} is not supported; pgq imports opsets {} to {} (torch.onnx.export "
                            "opset_version=14..17)",
                            file_, opset_, kMinOpset, kMaxOpset));
  out_.opset = opset_;

  readInputs();
  chooseTrainable();
  const fs::path dir = fs::path(o_.path).parent_path();
  // Initializers, in file order so that parameters keep the model's order.
  for (const onnx::TensorProto& t : model_.graph().initializer()) {
    ConstTensor c = tensorFromProto(t, dir, file_);
    if (trainable_.count(t.name())) {
      auto ref = param_of_.find(t.name());
      const std::string param = ref == param_of_.end() ? t.name() : ref->second.param;
      const bool transpose = ref != param_of_.end() && ref->second.transpose;
      Node*& p = param_nodes_[param];
      std::vector<float> v = c.floats();
      std::vector<int64_t> dims = c.dims;
      if (transpose) {  // store the parameter in its module's layout
        const int64_t rows = dims[0], cols = dims[1];
        std::vector<float> tv(v.size());
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) tv[static_cast<size_t>(j * rows + i)] = v[static_cast<size_t>(i * cols + j)];
        v = std::move(tv);
        dims = {cols, rows};
      }
      if (!p) {
        p = b_.parameter(irName(param), {DType::kF32, Shape(dims)}, "model");
        out_.values[p->name()] = std::move(v);
        out_.onnx_names[p->name()] = param;
        out_.net.params.push_back(p);
      } else if (dimsOf(p) != dims) {
        throw Error(fmt::format("{}: initializer \"{}\" holds parameter {} with shape {}, but it has shape {}", file_,
                                t.name(), param, shapeText(dims), shapeText(dimsOf(p))));
      }
      values_[t.name()] = transpose ? b_.transpose(p, {1, 0}) : p;
    } else {
      values_[t.name()] = std::move(c);
    }
  }
  for (const onnx::NodeProto& node : model_.graph().node()) {
    try {
      importNode(node);
    } catch (const Error& e) {  // the IR builder's own checks (an empty tensor) know no file or node
      if (std::string_view(e.what()).starts_with(file_ + ": ")) throw;
      fail(node, e.what());
    }
  }
  if (o_.forward_only) {
    std::vector<Node*> outs;
    for (const onnx::ValueInfoProto& o : model_.graph().output()) {
      auto it = values_.find(o.name());
      if (it == values_.end()) throw Error(fmt::format("{}: output \"{}\" is not computed", file_, o.name()));
      Node* n = nullptr;
      if (auto* c = std::get_if<ConstTensor>(&it->second)) {
        if (!c->isFloat())  // the IR holds integer values only as inputs
          throw Error(fmt::format("{}: output \"{}\" is an integer constant (folded at import), which pgq cannot "
                                  "output",
                                  file_, o.name()));
        n = materialize(*c, o.name(), DType::kF32);
      } else {
        n = std::get<Node*>(it->second);
      }
      outs.push_back(n);
      out_.outputs.emplace_back(o.name(), n);
    }
    graph_->setOutputs(outs);
    out_.net.graph = std::move(graph_);
    return std::move(out_);
  }
  findLoss();
  // Parameters the loss does not read (an unused initializer) are not trained.
  std::vector<Node*> live = graph_->postOrder();
  std::unordered_set<const Node*> used(live.begin(), live.end());
  std::erase_if(out_.net.params, [&](Node* p) { return !used.count(p); });
  std::erase_if(out_.constants, [&](Node* p) { return !used.count(p); });

  out_.batch = dimsOf(out_.net.tokens)[0];
  out_.seq_len = dimsOf(out_.net.tokens).size() > 1 ? dimsOf(out_.net.tokens)[1] : 1;
  out_.net.graph = std::move(graph_);
  return std::move(out_);
}

}  // namespace

ImportedModel importOnnx(const OnnxImportOptions& options) { return Importer(options).run(); }

std::vector<std::string> supportedOnnxOps() {
  std::set<std::string> all(computeOps().begin(), computeOps().end());
  all.insert(foldableOps().begin(), foldableOps().end());
  return {all.begin(), all.end()};
}

bool isOnnxModelPath(const std::string& spec) {
  return spec.size() > 5 && spec.compare(spec.size() - 5, 5, ".onnx") == 0;
}

}  // namespace pgq
