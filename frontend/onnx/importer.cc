#include "frontend/onnx/importer.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <sstream>

#include <fmt/ranges.h>

#include "frontend/onnx/const_fold.h"
#include "frontend/onnx/importer_impl.h"
#include "support/file_io.h"
#include "support/label_pattern.h"

namespace pgq {
namespace onnx_import {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- the op table

bool OpInfo::isDifferentiable(int input) const {
  std::string_view d = differentiable;
  if (d == "*") return true;
  if (d == "-") return false;
  for (size_t at = 0; at < d.size();) {
    size_t comma = std::min(d.find(',', at), d.size());
    if (std::stoi(std::string(d.substr(at, comma - at))) == input) return true;
    at = comma + 1;
  }
  return false;
}

bool OpInfo::allowsAttribute(std::string_view name) const {
  std::string_view a = attributes;
  for (size_t at = 0; at < a.size();) {
    size_t space = std::min(a.find(' ', at), a.size());
    if (a.substr(at, space - at) == name) return true;
    at = space + 1;
  }
  return false;
}

const std::vector<OpInfo>& opTable() {
  static const std::vector<OpInfo> kTable{
#define ONNX_OP(op, first, last, handler, diff, attrs) {#op, first, last, &Importer::handler, diff, attrs},
#include "frontend/onnx/onnx_ops.def"
#undef ONNX_OP
  };
  return kTable;
}

const OpInfo* findOp(const std::string& op) {
  static const std::unordered_map<std::string, const OpInfo*> kByName = [] {
    std::unordered_map<std::string, const OpInfo*> m;
    for (const OpInfo& info : opTable()) m[info.op] = &info;
    return m;
  }();
  auto it = kByName.find(op);
  return it == kByName.end() ? nullptr : it->second;
}

// ---------------------------------------------------------------- helpers

std::string shapeText(const std::vector<int64_t>& dims) { return fmt::format("[{}]", fmt::join(dims, ", ")); }

std::string irName(std::string_view onnx_name) {
  std::string s;
  for (char c : onnx_name)
    s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '/') ? c : '_';
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) s = "v_" + s;
  return s;
}

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
std::optional<std::string> attrString(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute())
    if (a.name() == name) return a.s();
  return std::nullopt;
}

namespace {

// The [cols, rows] transpose of row-major [rows, cols] `v`, in 64 x 64 tiles: a 50257 x 768
// embedding's strided writes one element at a time took most of an import.
std::vector<float> transposed(const std::vector<float>& v, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 64;
  std::vector<float> out(v.size());
  for (int64_t i0 = 0; i0 < rows; i0 += kTile)
    for (int64_t j0 = 0; j0 < cols; j0 += kTile)
      for (int64_t i = i0; i < std::min(rows, i0 + kTile); ++i)
        for (int64_t j = j0; j < std::min(cols, j0 + kTile); ++j)
          out[static_cast<size_t>(j * rows + i)] = v[static_cast<size_t>(i * cols + j)];
  return out;
}

// Ops that only move or select values: a parameter read through them is still read
// as a parameter (see chooseTrainable).
const std::unordered_set<std::string> kLayoutOps{"Transpose", "Reshape", "Unsqueeze", "Squeeze", "Identity",
                                                 "Cast",      "Slice",   "Gather",    "Split",   "Expand",
                                                 "Tile",      "Flatten", "Concat"};

bool isDifferentiableSlot(const std::string& op, int slot) {
  const OpInfo* info = findOp(op);
  return info ? info->isDifferentiable(slot) : false;
}

// The transformer layer of a module path: the first all-digit component after a named
// one ("model.layers.3.mlp" and "blocks.3/attn" are layer 3); -1 when there is none.
int64_t layerOf(const std::string& path) {
  size_t pos = 0;
  bool named = false;
  while (pos < path.size()) {
    size_t end = std::min(path.find_first_of("./", pos), path.size());
    std::string_view part(path.data() + pos, end - pos);
    const bool digits = !part.empty() && part.size() < 8 &&
                        std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits && named) return std::stoll(std::string(part));
    named |= !digits && !part.empty();
    pos = end + 1;
  }
  return -1;
}

// "/blocks.0/attn/q/MatMul" -> scope "blocks.0/attn/q", leaf "MatMul" (the old
// exporter's node names).
std::pair<std::string, std::string> splitNodeName(const std::string& name) {
  std::string s = name;
  while (!s.empty() && s.front() == '/') s.erase(s.begin());
  size_t slash = s.rfind('/');
  if (slash == std::string::npos) return {"", s};
  return {s.substr(0, slash), s.substr(slash + 1)};
}

}  // namespace

// ---------------------------------------------------------------- the importer

Importer::Importer(const OnnxImportOptions& o)
    : o_(o), file_(o.path), graph_(std::make_unique<Graph>(irName(fs::path(o.path).stem().string()))), b_(*graph_) {}

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
    // Training feeds token ids and labels; a float input would be fed nothing (found at
    // step 1 as a NaN loss, blamed on the learning rate).
    if (dtype == DType::kF32 && !o_.forward_only)
      throw Error(fmt::format("{}: graph input \"{}\" is float32, but pgq feeds a training model only integer inputs "
                              "(token ids, labels): nothing would feed it. Make it an initializer (a weight) or "
                              "export the model without it",
                              file_, in.name()));
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
    Node* n = nullptr;
    try {
      n = b_.input(irName(in.name()), {dtype, Shape(dims)});
    } catch (const Error& e) {  // the IR's own checks (a shape too large) know no file or input
      throw Error(fmt::format("{}: input \"{}\": {}", file_, in.name(), e.what()));
    }
    values_[in.name()] = n;
    out_.inputs.emplace_back(in.name(), n);
    if (dtype == DType::kS32) int_inputs_.insert(in.name());
  }
  if (int_inputs_.empty() && !o_.forward_only)
    throw Error(fmt::format("{}: the model has no integer input (token ids)", file_));
}

// Which float initializers are trained. With a parameter list beside the model

// Which parameter each initializer holds, from torch.export's record on the nodes that
// read it (PyTorch >= 2.5 exports): an initializer named as the parameter is that
// parameter; one the exporter's optimizer folded (a Linear weight's transpose,
// "val_93") is the parameter the node's FX call passed in that place, transposed when
// the call is aten.linear (x @ W.T) and the node reads it as MatMul's or Gemm's (transB
// 0) right operand. A parameter read by a module other than its own (a tied head) keeps
// its own name. Files without the record keep today's rule (chooseTrainable).
void Importer::nameParameters() {
  const onnx::GraphProto& g = model_.graph();
  std::unordered_map<std::string, std::string> dotted_of;  // placeholder -> dotted name
  for (const auto& entry : initializers_) dotted_of[torchPlaceholderName(entry.first)] = entry.first;
  struct Use {
    std::string init, placeholder;
    bool transpose;
    std::vector<std::string> scopes;
  };
  std::vector<Use> uses;
  for (const onnx::NodeProto& n : g.node()) {
    TorchNodeInfo info = torchNodeInfo(n);
    if (info.empty()) continue;
    torch_metadata_ = true;
    for (int i = 0; i < n.input_size(); ++i) {
      auto it = initializers_.find(n.input(i));
      if (it == initializers_.end() || !isOnnxFloatType(it->second->data_type())) continue;
      const std::string& init = n.input(i);
      const std::string direct = torchPlaceholderName(init);
      if (std::find(info.param_args.begin(), info.param_args.end(), direct) != info.param_args.end()) {
        uses.push_back({init, direct, false, info.scopes});
        continue;
      }
      // A folded parameter: aten.linear(x, W, b) read as MatMul(x, W.T) (+ b).
      const bool gemm_rhs = i == 1 && (n.op_type() == "MatMul" || (n.op_type() == "Gemm" && !attrInt(n, "transB").value_or(0)));
      if (info.target.starts_with("aten.linear") && gemm_rhs && info.args.size() >= 2 &&
          info.args[1].starts_with("%p_") && it->second->dims_size() == 2)
        uses.push_back({init, info.args[1].substr(1), true, info.scopes});
    }
  }
  if (!torch_metadata_) return;
  // A placeholder's dotted name: an initializer of that name, else a module path of the
  // reading node followed by the rest ("p_model_layers_0_q_proj_weight" read in module
  // "model.layers.0.q_proj" is "model.layers.0.q_proj.weight").
  for (const Use& u : uses) {
    std::string param;
    if (auto d = dotted_of.find(u.placeholder); d != dotted_of.end()) param = d->second;
    for (auto s = u.scopes.rbegin(); param.empty() && s != u.scopes.rend(); ++s) {
      const std::string prefix = torchPlaceholderName(*s) + "_";
      if (u.placeholder.starts_with(prefix)) param = *s + "." + u.placeholder.substr(prefix.size());
    }
    if (param.empty()) param = u.placeholder.substr(2);
    auto [it, fresh] = param_of_.try_emplace(u.init, ParamRef{param, u.transpose});
    if (!fresh && (it->second.param != param || it->second.transpose != u.transpose))
      throw Error(fmt::format("{}: initializer \"{}\" is read as parameter {}{} and as {}{}", file_, u.init,
                              it->second.param, it->second.transpose ? " (transposed)" : "", param,
                              u.transpose ? " (transposed)" : ""));
  }
  size_t folded = 0;
  for (const auto& [init, ref] : param_of_) folded += init != ref.param;
  out_.notes.push_back(fmt::format("parameter names: {} initializers hold PyTorch parameters, {} of them under a "
                                   "folded name (from the exporter's node metadata)",
                                   param_of_.size(), folded));
}

// initializer that reaches a differentiable operand of a computation on the inputs
// through layout ops only (a weight, transposed or not; an embedding table; a folded
// slice of one). Buffers computed from before they meet the inputs (rotary tables
// from inv_freq) and masks (conditions carry no gradient) stay constants.
void Importer::chooseTrainable() {
  const onnx::GraphProto& g = model_.graph();
  std::unordered_map<std::string, const onnx::NodeProto*> producer;
  for (const onnx::NodeProto& n : g.node())
    for (const std::string& o : n.output()) producer[o] = &n;


  std::string list_path = o_.path + ".params.txt";
  // Present means read: a FIFO, a directory or a device there is refused (readTextFile
  // says what it is), never skipped, which would silently change what trains.
  std::error_code ec;
  if (fs::exists(fs::symlink_status(list_path, ec))) {
    std::string text = readTextFile(list_path, InputKind::kModelConfig);
    size_t line_no = 0, pos = 0;
    std::unordered_map<std::string, size_t> listed_on;  // ONNX name -> line
    while (pos < text.size()) {
      size_t end = text.find('\n', pos);
      std::string line = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
      pos = end == std::string::npos ? text.size() : end + 1;
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();  // written on Windows
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
      if (!isFloatInitializer(name))
        throw Error(fmt::format("{}:{}: \"{}\" is not a float initializer of {}", list_path, line_no, name, file_));
      if (transpose && initializers_.at(name)->dims_size() != 2)
        throw Error(fmt::format("{}:{}: \"{}\" is not 2-D, so it cannot hold a transpose", list_path, line_no, name));
      if (fields.size() > 1 && fields[1].empty())
        throw Error(fmt::format("{}:{}: \"{}\" has an empty PARAM after its tab", list_path, line_no, name));
      if (auto [at, fresh] = listed_on.try_emplace(name, line_no); !fresh)
        throw Error(fmt::format("{}:{}: \"{}\" is listed again (first on line {})", list_path, line_no, name,
                                at->second));
      trainable_.insert(name);
      param_of_[name] = {fields.size() > 1 ? fields[1] : name, transpose};
    }
    out_.notes.push_back(fmt::format("trainable parameters: the {} listed in {}", trainable_.size(), list_path));
  } else {
    std::unordered_set<std::string> act(int_inputs_.begin(), int_inputs_.end());
    for (const auto& [name, node] : values_)
      if (std::holds_alternative<Node*>(node)) act.insert(name);
    std::function<void(const std::string&, int)> mark = [&](const std::string& name, int depth) {
      if (isFloatInitializer(name)) {
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
      // Layout ops are not where parameters meet inputs, but for a lookup of the inputs
      // (an embedding table read only through Gather).
      const bool lookup = n.op_type() == "Gather" && n.input_size() > 1 && act.count(n.input(1));
      if (kLayoutOps.count(n.op_type()) && n.op_type() != "Concat" && !lookup) continue;
      for (int i = 0; i < n.input_size(); ++i)
        if (!n.input(i).empty() && !act.count(n.input(i)) && isDifferentiableSlot(n.op_type(), i))
          mark(n.input(i), 0);
    }
    if (!torch_metadata_) {
      out_.notes.push_back(
          fmt::format("trainable parameters: {} float initializers read by the computation (no {} beside the model)",
                      trainable_.size(), list_path));
    } else {
      // torch.export's record says which initializers are PyTorch parameters: those
      // train; buffers and values the exporter folded (rotary tables, masks, a sliced
      // position table) stay constants.
      std::vector<std::string> folded;
      for (const std::string& name : trainable_) {
        const onnx::TensorProto& t = *initializers_.at(name);
        const bool scalar = std::all_of(t.dims().begin(), t.dims().end(), [](int64_t d) { return d == 1; });
        if (!param_of_.count(name) && !scalar) folded.push_back(name);  // scalars are the exporter's constants
      }
      trainable_.clear();
      for (const auto& entry : param_of_) trainable_.insert(entry.first);
      out_.notes.push_back(fmt::format("trainable parameters: the {} initializers that hold PyTorch parameters",
                                       trainable_.size()));
      if (!folded.empty())
        out_.notes.push_back(fmt::format("frozen: {} float initializers the computation reads that hold no parameter "
                                         "(buffers or values the exporter folded; --trainable trains them): {}",
                                         folded.size(), fmt::join(folded, ", ")));
    }
  }
  applyTrainablePatterns();
}

bool Importer::isFloatInitializer(const std::string& name) const {
  auto it = initializers_.find(name);
  return it != initializers_.end() && isOnnxFloatType(it->second->data_type());
}

// --trainable and --frozen over what chooseTrainable decided: a pattern matches an
// initializer's name or the module parameter it holds (constant folding renames weights
// to "onnx::MatMul_233").
void Importer::applyTrainablePatterns() {
  auto pattern = [&](const std::string& text, const char* flag) {
    try {
      return LabelPattern(text);
    } catch (const Error& e) {
      throw Error(fmt::format("{} \"{}\": {}", flag, text, e.what()));
    }
  };
  LabelPattern train_re = pattern(o_.trainable, "--trainable"), frozen_re = pattern(o_.frozen, "--frozen");
  // A pattern that selects nothing is a typo, not a choice: refused, as the notes would
  // otherwise say what trains without it.
  std::vector<std::string> made_trainable, made_frozen;
  for (const auto& entry : initializers_) {
    const std::string& name = entry.first;  // not a structured binding: clang 14 cannot capture one
    auto ref = param_of_.find(name);
    auto matches = [&](const LabelPattern& re) {
      return re.matches(name) || (ref != param_of_.end() && re.matches(ref->second.param));
    };
    if (!o_.trainable.empty() && isFloatInitializer(name) && matches(train_re)) {
      made_trainable.push_back(name);
      trainable_.insert(name);
    }
    if (!o_.frozen.empty() && matches(frozen_re)) {
      made_frozen.push_back(name);
      trainable_.erase(name);
    }
  }
  if (!o_.trainable.empty() && made_trainable.empty())
    throw Error(fmt::format("--trainable \"{}\" matches no float initializer of {} (a pattern matches a whole "
                            "name, or the whole parameter name it holds); pgq import {} lists them",
                            o_.trainable, file_, file_));
  if (!o_.frozen.empty() && made_frozen.empty())
    throw Error(fmt::format("--frozen \"{}\" matches no initializer of {} (a pattern matches a whole name, or "
                            "the whole parameter name it holds); pgq import {} lists them",
                            o_.frozen, file_, file_));
  std::sort(made_trainable.begin(), made_trainable.end());
  std::sort(made_frozen.begin(), made_frozen.end());
  if (!made_trainable.empty())
    out_.notes.push_back(fmt::format("--trainable \"{}\": trains {}", o_.trainable, fmt::join(made_trainable, ", ")));
  if (!made_frozen.empty())
    out_.notes.push_back(fmt::format("--frozen \"{}\": freezes {}", o_.frozen, fmt::join(made_frozen, ", ")));
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


Node* Importer::broadcastTo(const onnx::NodeProto& node, Node* x, const std::vector<int64_t>& dims) {
  std::vector<int64_t> xd = dimsOf(x);
  if (xd == dims) return x;
  auto fits = broadcastDims(xd, dims);
  if (xd.size() > dims.size() || !fits || *fits != dims)
    fail(node, fmt::format("{} does not broadcast to {}", shapeText(xd), shapeText(dims)));
  // Drop x's size-1 dims that grow; the rest map onto the trailing dims they align with.
  std::vector<int64_t> kept, map;
  const size_t off = dims.size() - xd.size();
  for (size_t i = 0; i < xd.size(); ++i) {
    if (xd[i] == dims[i + off]) {
      kept.push_back(xd[i]);
      map.push_back(static_cast<int64_t>(i + off));
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
  return broadcastTo(node, irValue(node, i), dims);
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

std::string Importer::uniqueLabel(std::string label) {
  if (labels_.insert(label).second) return label;
  for (int i = 2;; ++i) {
    std::string next = fmt::format("{}_{}", label, i);
    if (labels_.insert(next).second) {
      out_.notes.push_back(fmt::format("GEMM label {} is taken: this GEMM is {}", label, next));
      return next;
    }
  }
}

// A GEMM's label is the module path of the user's code: the exporter's record
// ("model.layers.0.self_attn.q_proj"; an op with several GEMMs adds its role or FX name:
// "model.layers.0.self_attn/scores"), else the old exporter's node name
// ("blocks.0/attn/q"). Labels are made unique (a note says so).
void Importer::gemmMetadata(const onnx::NodeProto& node, Node* g, const std::string& role) {
  TorchNodeInfo info = torchNodeInfo(node);
  std::string label, module;
  if (!info.empty()) {
    module = info.modulePath();
    const std::string key = module + "|" + info.fxName();
    const int nth = gemms_in_scope_[key]++;
    std::string part = role;
    if (part.empty() && info.target.find("scaled_dot_product_attention") != std::string::npos)
      part = nth == 0 ? "scores" : "context";
    const bool linear = info.target.starts_with("aten.linear") || info.target.starts_with("aten.addmm") ||
                        info.target.starts_with("aten.mm") || info.target.starts_with("aten.matmul");
    if (part.empty() && !(linear && nth == 0 && !module.empty())) part = nth == 0 ? info.fxName() : fmt::format("{}_{}", info.fxName(), nth);
    label = part.empty() ? module : module.empty() ? part : module + "/" + part;
  } else {
    auto [scope, leaf] = splitNodeName(node.name());
    module = scope;
    label = scope;
    if (label.empty() || gemms_in_scope_[scope]++ > 0 || leaf.find('_') != std::string::npos)
      label = scope.empty() ? leaf : scope + "/" + leaf;
    if (!role.empty()) label = scope.empty() ? role : scope + "/" + role;
  }
  if (label.empty()) label = fmt::format("gemm{}", next_layerless_++);
  g->attrs().set(AttrKey::kLabel, uniqueLabel(label));
  int64_t layer = layerOf(module);
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
    a = broadcastTo(node, a, ta);
    b = broadcastTo(node, b, tb);
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

std::optional<double> Importer::causalFill(const ConstTensor& mask, bool additive) const {
  const size_t r = mask.dims.size();
  if (r < 2 || mask.values.empty()) return std::nullopt;
  const int64_t tq = mask.dims[r - 2], tk = mask.dims[r - 1];
  if (tq < 1 || tk < tq) return std::nullopt;
  const size_t block = static_cast<size_t>(tq * tk);
  std::optional<double> fill;
  for (size_t base = 0; base < mask.values.size(); base += block)
    for (int64_t i = 0; i < tq; ++i)
      for (int64_t j = 0; j < tk; ++j) {
        const double v = mask.values[base + static_cast<size_t>(i * tk + j)];
        const bool masked = j > i + (tk - tq);  // pgq's causal_mask, aligned bottom-right
        if (!additive) {
          if ((v != 0) == masked) return std::nullopt;
          continue;
        }
        if (!masked) {
          if (v != 0) return std::nullopt;
        } else if (!(v <= -1e9) || (fill && *fill != v)) {  // -inf or a dtype's lowest
          return std::nullopt;
        } else {
          fill = v;
        }
      }
  if (!additive) return -std::numeric_limits<double>::infinity();
  return fill ? fill : std::optional<double>(-std::numeric_limits<double>::infinity());
}

// Checks a node against its row of the op table before anything is built: the op at
// this opset, its domain, every attribute by name.
void Importer::checkNode(const onnx::NodeProto& node, const OpInfo* info) {
  if (!node.domain().empty() && node.domain() != "ai.onnx")
    fail(node, fmt::format("domain \"{}\" is not supported (only the default ONNX domain); pgq import --list-ops "
                           "lists what is",
                           node.domain()));
  if (!info) return;
  if (opset_ < info->first_opset || opset_ > info->last_opset)
    fail(node, fmt::format("pgq imports {} at opsets {} to {}", node.op_type(), info->first_opset, info->last_opset));
  for (const onnx::AttributeProto& a : node.attribute())
    if (!info->allowsAttribute(a.name()))
      fail(node, fmt::format("attribute {} is not supported (pgq import --list-ops lists what is)", a.name()));
}

void Importer::importNode(const onnx::NodeProto& node) {
  const std::string& op = node.op_type();
  const OpInfo* info = findOp(op);
  checkNode(node, info);
  // Constants: folded whenever every input is known.
  std::vector<const ConstTensor*> ins;
  bool all_const = true;
  for (int i = 0; i < node.input_size(); ++i) {
    if (node.input(i).empty() || is_nan_of_.count(node.input(i))) {  // IsNaN of a value: not a constant
      all_const &= node.input(i).empty();
      ins.push_back(nullptr);
      continue;
    }
    const ConstTensor* c = constant(node, i);
    all_const &= c != nullptr;
    ins.push_back(c);
  }
  if (op == "Constant") return constantOp(node);  // its value may be external data
  if (all_const) {
    if (auto folded = foldNode(node, ins, opset_, file_)) {
      for (size_t i = 0; i < folded->size() && static_cast<int>(i) < node.output_size(); ++i)
        set(node, static_cast<int>(i), std::move((*folded)[i]));
      return;
    }
    if (!info) fail(node, "cannot be evaluated at import");
  }
  if (!info) {
    const auto& folded = foldableOps();
    if (std::find(folded.begin(), folded.end(), op) != folded.end())
      fail(node, "it has no IR op, so its inputs must be constants at import, but they depend on the model's inputs "
                 "(pgq import --list-ops lists the ops on the model's inputs)");
    fail(node, fmt::format("op {} is not supported (pgq import --list-ops lists the ops pgq imports)", op));
  }
  (this->*(info->handler))(node);
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

template <typename It>
void Importer::checkFinite(const std::string& initializer, It begin, It end, std::string_view why,
                           bool allow_inf) const {
  for (It it = begin; it != end; ++it) {
    const double v = static_cast<double>(*it);
    if (std::isnan(v) || (!allow_inf && std::isinf(v)))
      throw Error(fmt::format("{}: initializer \"{}\" holds {} at element {}{}{}; export the model again from "
                              "finite weights",
                              file_, initializer, v, it - begin, why.empty() ? "" : ": ", why));
  }
}

// The bytes the initializers the nodes read take once decoded (parameters as floats,
// frozen constants as 8-byte doubles), against the memory available, before any is
// decoded: each tensor is bounded by itself (onnx_model.cc), but not their sum, and many
// large frozen weights would otherwise end in an allocation failure naming nothing.
void Importer::checkInitializerMemory(const std::unordered_set<std::string>& read) const {
  uint64_t params = 0, constants = 0;
  std::unordered_set<std::string> counted_params;
  for (const onnx::TensorProto& t : model_.graph().initializer()) {
    if (!read.count(t.name())) continue;
    uint64_t count = 1;
    for (int64_t d : t.dims()) {
      const uint64_t u = d < 0 ? 0 : static_cast<uint64_t>(d);  // a negative dim is refused when it is read
      count = u != 0 && count > UINT64_MAX / 16 / u ? UINT64_MAX / 16 : count * u;
    }
    if (!trainable_.count(t.name())) {
      constants = std::min(UINT64_MAX / 4, constants + count * sizeof(double));
      continue;
    }
    auto ref = param_of_.find(t.name());
    if (counted_params.insert(ref == param_of_.end() ? t.name() : ref->second.param).second)
      params = std::min(UINT64_MAX / 4, params + count * sizeof(float));
  }
  const std::optional<uint64_t> available = memAvailable();
  if (available && params + constants > *available)
    throw Error(fmt::format("{}: its initializers take {} once read ({} of parameters as floats, {} of frozen "
                            "constants as 8-byte doubles), more than the {} of memory available now",
                            file_, byteSizeText(params + constants), byteSizeText(params), byteSizeText(constants),
                            byteSizeText(*available)));
}

// One initializer a node reads: a parameter (its first holder gives the value; a tied
// copy must equal it) or a constant.
void Importer::importInitializer(onnx::TensorProto& t, const fs::path& dir, ExternalData& external) {
  if (trainable_.count(t.name())) {
    auto ref = param_of_.find(t.name());
    const std::string param = ref == param_of_.end() ? t.name() : ref->second.param;
    const bool transpose = ref != param_of_.end() && ref->second.transpose;
    Node*& p = param_nodes_[param];
    std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    if (transpose) dims = {dims[1], dims[0]};  // nameParameters checked that it is 2-D
    if (!p) {
      // The first initializer holding the parameter gives its value; another (a tied
      // embedding's transposed copy) is the same parameter and is not read.
      std::vector<float> v = floatsFromProto(t, dir, file_, &external, nullptr);
      checkFinite(t.name(), v.begin(), v.end(), "a parameter must be finite to train");
      if (transpose) v = transposed(v, dims[1], dims[0]);  // stored in its module's layout
      p = b_.parameter(irName(param), {DType::kF32, Shape(dims)}, "model");
      out_.values[p->name()] = std::move(v);
      out_.onnx_names[p->name()] = param;
      out_.net.params.push_back(p);
      first_holder_[param] = t.name();
    } else if (dimsOf(p) != dims) {
      throw Error(fmt::format("{}: initializer \"{}\" holds parameter {} with shape {}, but it has shape {}", file_,
                              t.name(), param, shapeText(dims), shapeText(dimsOf(p))));
    } else {
      // A tied copy must be the same values: two different weights named one parameter
      // (a mistyped .params.txt) would otherwise train as one, silently.
      std::vector<float> v = floatsFromProto(t, dir, file_, &external, nullptr);
      if (transpose) v = transposed(v, dims[1], dims[0]);
      const std::vector<float>& first = out_.values.at(p->name());
      auto differ = std::mismatch(v.begin(), v.end(), first.begin(), [](float a, float b) {
        return std::memcmp(&a, &b, sizeof a) == 0;
      });
      if (differ.first != v.end())
        throw Error(fmt::format("{}: initializers \"{}\" and \"{}\" both hold parameter {}, but their values differ "
                                "(element {}: {} and {}); only a tied parameter's equal copies may share a name",
                                file_, first_holder_.at(param), t.name(), param, differ.first - v.begin(),
                                *differ.second, *differ.first));
    }
    values_[t.name()] = transpose ? b_.transpose(p, {1, 0}) : p;
  } else {
    ConstTensor c = tensorFromProto(t, dir, file_, &external);
    // -inf is a mask's value; NaN is no constant's.
    if (c.isFloat()) checkFinite(t.name(), c.values.begin(), c.values.end(), "", /*allow_inf=*/true);
    values_[t.name()] = std::move(c);
  }
  std::string().swap(*t.mutable_raw_data());  // a small one's bytes, parsed with the model
}

ImportedModel Importer::run() {
  // The model file's and each external data file's bytes are read once, by the tensor
  // that needs them; the weights are held once, as the values decoded.
  ExternalData external;
  model_ = readOnnxModel(o_.path, &out_.fingerprint, &external);
  opset_ = defaultOpset(model_, file_);
  if (opset_ < kMinOpset || opset_ > kMaxOpset)
    throw Error(fmt::format("{}: opset {} is not supported; pgq imports opsets {} to {} (torch.onnx.export writes "
                            "20 by default since PyTorch 2.9; export again with opset_version between them)",
                            file_, opset_, kMinOpset, kMaxOpset));
  out_.opset = opset_;
  checkStructure();

  readInputs();
  nameParameters();
  chooseTrainable();
  fs::path dir = fs::path(o_.path).parent_path();
  if (dir.empty()) dir = ".";  // a model in the current folder
  // Initializers, in file order so that parameters keep the model's order; one that no
  // node reads is not read at all (its bytes may be large, or external).
  std::unordered_set<std::string> read;
  for (const onnx::NodeProto& node : model_.graph().node())
    for (const std::string& in : node.input()) read.insert(in);
  for (const onnx::ValueInfoProto& o : model_.graph().output()) read.insert(o.name());
  checkInitializerMemory(read);
  for (onnx::TensorProto& t : *model_.mutable_graph()->mutable_initializer()) {
    if (!read.count(t.name())) continue;
    try {
      importInitializer(t, dir, external);
    } catch (const Error& e) {  // the IR builder's own checks (a shape too large) know no file or initializer
      if (std::string_view(e.what()).starts_with(file_ + ": ")) throw;
      throw Error(fmt::format("{}: initializer \"{}\": {}", file_, t.name(), e.what()));
    }
  }
  // A folded constant is freed after the last node that reads it: the masks exporters
  // compute from the sequence length hold seq^2 elements each, as doubles (a dynamic
  // LLaMA export at --seq 8192 took 2.6 GB with every one kept to the end).
  const auto& nodes = model_.graph().node();
  std::unordered_map<std::string, int> last_use;
  for (int i = 0; i < nodes.size(); ++i)
    for (const std::string& in : nodes[i].input()) last_use[in] = i;
  for (const onnx::ValueInfoProto& o : model_.graph().output()) last_use[o.name()] = nodes.size();
  for (int i = 0; i < nodes.size(); ++i) {
    const onnx::NodeProto& node = nodes[i];
    try {
      importNode(node);
    } catch (const Error& e) {  // the IR builder's own checks (an empty tensor) know no file or node
      if (std::string_view(e.what()).starts_with(file_ + ": ")) throw;
      fail(node, e.what());
    }
    for (const std::string& in : node.input())
      if (auto it = values_.find(in); it != values_.end() && last_use[in] == i &&
                                      std::holds_alternative<ConstTensor>(it->second))
        values_.erase(it);
  }
  checkDeclaredOutputs();
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

}  // namespace onnx_import

ImportedModel importOnnx(const OnnxImportOptions& options) { return onnx_import::Importer(options).run(); }

std::vector<std::string> supportedOnnxOps() {
  std::set<std::string> all;
  for (const onnx_import::OpInfo& info : onnx_import::opTable()) all.insert(info.op);
  all.insert(foldableOps().begin(), foldableOps().end());
  return {all.begin(), all.end()};
}

std::string onnxOpTableText() {
  std::string out = fmt::format("{:<26} {:<8} {:<12} {}\n", "op", "opsets", "gradient", "attributes");
  for (const onnx_import::OpInfo& info : onnx_import::opTable()) {
    std::string_view d = info.differentiable;
    std::string grad = d == "*" ? "all inputs" : d == "-" ? "none" : fmt::format("inputs {}", d);
    out += fmt::format("{:<26} {:<8} {:<12} {}\n", info.op, fmt::format("{}-{}", info.first_opset, info.last_opset), grad,
                       *info.attributes ? info.attributes : "-");
  }
  std::vector<std::string> fold_only;
  for (const std::string& op : foldableOps())
    if (!onnx_import::findOp(op)) fold_only.push_back(op);
  out += fmt::format("\nfolded when every input is a constant (shape arithmetic, masks, rotary tables):\n  {}\n",
                     fmt::join(fold_only, ", "));
  return out;
}

bool isOnnxModelPath(const std::string& spec) {
  if (spec.size() <= 5) return false;
  std::string ext = spec.substr(spec.size() - 5);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".onnx";  // m.ONNX too
}

}  // namespace pgq
