// One handler per ONNX op (onnx_ops.def): each reads its node's operands as IR values or
// constants and builds the IR that computes the same function, refusing (naming the
// node) any attribute value or input form it does not implement exactly.
#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/ranges.h>

#include "frontend/onnx/importer_impl.h"

namespace pgq::onnx_import {
namespace {

// Ops that only move or select values, or whose result has no IR form of its own.
Op unaryIrOp(const std::string& op) {
  static const std::unordered_map<std::string, Op> kOps{{"Neg", Op::kNeg},   {"Exp", Op::kExp},
                                                        {"Log", Op::kLog},   {"Tanh", Op::kTanh},
                                                        {"Relu", Op::kRelu}, {"Sqrt", Op::kSqrt},
                                                        {"Sigmoid", Op::kSigmoid}, {"Erf", Op::kErf}};
  return kOps.at(op);
}

Op binaryIrOp(const std::string& op) {
  static const std::unordered_map<std::string, Op> kOps{
      {"Add", Op::kAdd}, {"Sub", Op::kSub}, {"Mul", Op::kMul}, {"Div", Op::kDiv}};
  return kOps.at(op);
}

}  // namespace

void Importer::binaryOp(const onnx::NodeProto& node) {
  // An additive constant mask on attention scores (the exporter's SDPA lowering adds a
  // folded causal mask before the softmax): pgq's causal_mask.
  if (node.op_type() == "Add") {
    for (int mask_slot : {0, 1}) {
      const ConstTensor* mask = constant(node, mask_slot);
      if (!mask || !std::holds_alternative<Node*>(value(node, 1 - mask_slot))) continue;
      auto dims = broadcastDims(mask->dims, shapeOf(value(node, 1 - mask_slot)));
      if (!dims || *dims != shapeOf(value(node, 1 - mask_slot))) continue;
      if (auto fill = causalFill(*mask, true))
        return set(node, 0, b_.causalMask(std::get<Node*>(value(node, 1 - mask_slot)), *fill));
    }
  }
  set(node, 0, binary(node, binaryIrOp(node.op_type())));
}

void Importer::unaryOp(const onnx::NodeProto& node) {
  set(node, 0, b_.unary(unaryIrOp(node.op_type()), irValue(node, 0)));
}

void Importer::reciprocalOp(const onnx::NodeProto& node) {
  Node* x = irValue(node, 0);
  set(node, 0, b_.div(b_.constant(1.0, x->type()), x));
}

void Importer::powOp(const onnx::NodeProto& node) {
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

void Importer::geluOp(const onnx::NodeProto& node) {
  const std::string approximate = attrString(node, "approximate").value_or("none");
  if (approximate != "none" && approximate != "tanh")
    fail(node, fmt::format("attribute approximate = \"{}\" is not one of \"none\", \"tanh\"", approximate));
  set(node, 0, b_.unary(approximate == "tanh" ? Op::kGelu : Op::kGeluErf, irValue(node, 0)));
}

void Importer::identityOp(const onnx::NodeProto& node) {
  if (node.op_type() == "Dropout") {
    if (node.output_size() > 1 && !node.output(1).empty()) fail(node, "the dropout mask output is not supported");
    out_.notes.push_back(fmt::format("{}: dropout removed (pgq trains without dropout)", node.name()));
  }
  set(node, 0, value(node, 0));
}

void Importer::castOp(const onnx::NodeProto& node) {
  const int64_t to = attrInt(node, "to").value_or(0);
  Node* x = nodeValue(node, 0);
  const bool to_int = to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32;
  const bool to_float = to == onnx::TensorProto::FLOAT;
  if ((x->dtype() == DType::kS32 && to_int) || (x->dtype() == DType::kF32 && to_float)) return set(node, 0, x);
  fail(node, fmt::format("cast of {} to {} is not supported", x->type().toString(),
                         onnx::TensorProto_DataType_Name(static_cast<int>(to))));
}

// IsNaN of an IR value has no IR form; it is remembered for the Where that consumes it.
void Importer::isNanOp(const onnx::NodeProto& node) {
  if (!std::holds_alternative<Node*>(value(node, 0))) fail(node, "cannot be evaluated at import");
  is_nan_of_[node.output(0)] = node.input(0);
}

void Importer::whereOp(const onnx::NodeProto& node) {
  // Where(IsNaN(p), 0, p): torch's guard on the softmax of attention scores for rows
  // that are masked entirely. pgq's masks leave every row a finite score (causal_mask
  // keeps the diagonal; constant masks are checked when imported), so p has no NaN
  // and the Where is p itself.
  if (auto nan = is_nan_of_.find(node.input(0)); nan != is_nan_of_.end()) {
    const ConstTensor* fill = constant(node, 1);
    Node* p = std::get<Node*>(values_.at(nan->second));
    Node* softmax = p;
    while (softmax->op() == Op::kTranspose || softmax->op() == Op::kReshape) softmax = softmax->operand(0);
    if (node.input(2) != nan->second || !fill || fill->numElements() != 1 || fill->values[0] != 0 ||
        softmax->op() != Op::kSoftmax)
      fail(node, "IsNaN is only imported as Where(IsNaN(p), 0, p) of a softmax p (the exporter's guard for fully "
                 "masked attention rows)");
    return set(node, 0, p);
  }
  const ConstTensor& cond = requireConstant(node, 0, "the condition");
  if (cond.dtype != onnx::TensorProto::BOOL)
    fail(node, fmt::format("the condition is {}; Where's condition is BOOL", dtypeName(cond.dtype)));
  auto d1 = broadcastDims(shapeOf(value(node, 1)), shapeOf(value(node, 2)));
  auto dims = d1 ? broadcastDims(cond.dims, *d1) : std::nullopt;
  if (!dims) fail(node, "operand shapes do not broadcast");
  // Where(causal, x, fill) or Where(not causal, fill, x): pgq's causal_mask.
  for (int fill_slot : {1, 2}) {
    const ConstTensor* fill = constant(node, fill_slot);
    if (!fill || fill->numElements() != 1 || dims->size() < 2) continue;
    ConstTensor keep = cond;  // 1 where x is kept
    if (fill_slot == 1)
      for (double& v : keep.values) v = v != 0 ? 0 : 1;
    if (!causalFill(keep, false)) continue;
    Node* x = broadcastTo(node, irValue(node, 3 - fill_slot), *dims);
    return set(node, 0, b_.causalMask(x, fill->values[0]));
  }
  ConstTensor full;
  full.dtype = onnx::TensorProto::FLOAT;
  full.dims = cond.dims;
  full.values = cond.values;
  Node* c = broadcastTo(node, materialize(full, node.input(0), DType::kF32), *dims);
  set(node, 0, b_.select(c, splatOrBroadcast(node, 1, *dims), splatOrBroadcast(node, 2, *dims)));
}

void Importer::matmulOp(const onnx::NodeProto& node) {
  set(node, 0, matmul(node, irValue(node, 0), irValue(node, 1), false, false));
}

void Importer::gemmOp(const onnx::NodeProto& node) {
  Node* y = matmul(node, irValue(node, 0), irValue(node, 1), attrInt(node, "transA").value_or(0) != 0,
                   attrInt(node, "transB").value_or(0) != 0);
  const double alpha = attrFloat(node, "alpha").value_or(1.0f), beta = attrFloat(node, "beta").value_or(1.0f);
  if (alpha != 1) y = b_.scale(y, alpha);
  if (has(node, 2)) {
    Node* c = splatOrBroadcast(node, 2, dimsOf(y));
    y = b_.add(y, beta == 1 ? c : b_.scale(c, beta));
  }
  set(node, 0, y);
}

void Importer::transposeOp(const onnx::NodeProto& node) {
  Node* x = irValue(node, 0);
  std::vector<int64_t> perm = attrInts(node, "perm");
  const int64_t r = static_cast<int64_t>(dimsOf(x).size());
  if (perm.empty())
    for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < static_cast<int64_t>(sorted.size()); ++i)
    if (sorted.size() != static_cast<size_t>(r) || sorted[static_cast<size_t>(i)] != i)
      fail(node, fmt::format("attribute perm = [{}] is not a permutation of {} dims", fmt::join(perm, ", "), r));
  set(node, 0, b_.transpose(x, perm));
}

void Importer::reshapeOp(const onnx::NodeProto& node) {
  const std::string& op = node.op_type();
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
      if (out[i] == -1) {
        if (infer >= 0) fail(node, "the target shape has more than one -1");
        infer = static_cast<int64_t>(i);
      } else if (out[i] < 0) {
        fail(node, fmt::format("the target shape has a negative dim {}", out[i]));
      } else {
        known *= out[i];
      }
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
    std::vector<int64_t> axes = has(node, 1) ? constInts(node, 1, "the axes") : std::vector<int64_t>{};
    if (op == "Unsqueeze") {
      const size_t r = in.size() + axes.size();
      std::vector<bool> inserted(r, false);
      for (int64_t a : axes) {
        size_t at = static_cast<size_t>(axisOf(node, a, r));
        if (inserted[at]) fail(node, fmt::format("axis {} is repeated", a));
        inserted[at] = true;
      }
      for (size_t i = 0, j = 0; i < r; ++i) out.push_back(inserted[i] ? 1 : in[j++]);
    } else {
      std::vector<bool> drop(in.size(), axes.empty());
      for (int64_t a : axes) {
        size_t at = static_cast<size_t>(axisOf(node, a, in.size()));
        if (in[at] != 1) fail(node, fmt::format("axis {} has size {}, not 1", a, in[at]));
        drop[at] = true;
      }
      for (size_t i = 0; i < in.size(); ++i)
        if (!(drop[i] && in[i] == 1)) out.push_back(in[i]);
    }
  }
  int64_t n = 1;
  for (int64_t d : out) n *= d;
  if (n != x->shape().numElements()) fail(node, fmt::format("cannot reshape {} to {}", shapeText(in), shapeText(out)));
  // A reshape that keeps the class dim keeps a LogSoftmax a LogSoftmax (for the NLL
  // after it).
  if (auto ls = log_softmax_of_.find(node.input(0));
      ls != log_softmax_of_.end() && !out.empty() && !in.empty() && out.back() == in.back())
    log_softmax_of_[node.output(0)] = reshape(ls->second, out);
  set(node, 0, reshape(x, out));
}

void Importer::expandOp(const onnx::NodeProto& node) {
  Node* x = irValue(node, 0);
  auto dims = broadcastDims(dimsOf(x), constInts(node, 1, "the shape"));
  if (!dims) fail(node, "the shape does not broadcast");
  set(node, 0, broadcastTo(node, x, *dims));
}

void Importer::tileOp(const onnx::NodeProto& node) {
  Node* x = irValue(node, 0);
  std::vector<int64_t> reps = constInts(node, 1, "the repeats"), in = dimsOf(x);
  if (reps.size() != in.size()) fail(node, "repeats must have one entry per dim");
  // out[k*d + j] = x[j]: broadcast to [r0, d0, r1, d1, ...], then merge the pairs.
  std::vector<int64_t> wide, map, out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (reps[i] < 1) fail(node, fmt::format("repeat {} is not positive", reps[i]));
    wide.push_back(reps[i]);
    wide.push_back(in[i]);
    map.push_back(static_cast<int64_t>(2 * i + 1));
    out.push_back(reps[i] * in[i]);
  }
  set(node, 0, reshape(b_.broadcast(x, Shape(wide), map), out));
}

void Importer::sliceOp(const onnx::NodeProto& node) {
  Node* x = nodeValue(node, 0);
  std::vector<int64_t> in = dimsOf(x);
  std::vector<int64_t> starts = constInts(node, 1, "starts"), ends = constInts(node, 2, "ends");
  std::vector<int64_t> axes = has(node, 3) ? constInts(node, 3, "axes") : std::vector<int64_t>{};
  std::vector<int64_t> steps = has(node, 4) ? constInts(node, 4, "steps") : std::vector<int64_t>{};
  if (ends.size() != starts.size() || (!axes.empty() && axes.size() != starts.size()) ||
      (!steps.empty() && steps.size() != starts.size()))
    fail(node, "starts, ends, axes and steps differ in length");
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
  set(node, 0, lo == std::vector<int64_t>(in.size(), 0) && hi == in ? x : b_.slice(x, lo, hi));
}

void Importer::splitOp(const onnx::NodeProto& node) {
  Node* x = irValue(node, 0);
  std::vector<int64_t> in = dimsOf(x);
  const int64_t axis = axisOf(node, attrInt(node, "axis").value_or(0), in.size());
  const int64_t d = in[static_cast<size_t>(axis)];
  std::vector<int64_t> sizes = has(node, 1) ? constInts(node, 1, "the split sizes") : std::vector<int64_t>{};
  const std::optional<int64_t> num_outputs = attrInt(node, "num_outputs");
  if (num_outputs && opset_ < 18) fail(node, "attribute num_outputs exists from opset 18 on");
  if (num_outputs && !sizes.empty()) fail(node, "both the split input and num_outputs are given");
  if (sizes.empty()) {
    // num_outputs (or, without it, the outputs) parts of ceil(d / parts), the last smaller.
    const int64_t parts = num_outputs.value_or(node.output_size());
    if (parts < 1 || parts != node.output_size())
      fail(node, fmt::format("num_outputs {} does not match the {} outputs", parts, node.output_size()));
    if (!num_outputs && d % parts) fail(node, fmt::format("dim {} does not split into {} equal parts", d, parts));
    const int64_t chunk = (d + parts - 1) / parts;
    for (int64_t i = 0; i < parts; ++i) sizes.push_back(std::max<int64_t>(0, std::min(chunk, d - i * chunk)));
  }
  if (static_cast<int>(sizes.size()) != node.output_size()) fail(node, "split sizes do not match the outputs");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) fail(node, fmt::format("split size {} is negative", s));
    total += s;
  }
  if (total != d) fail(node, "split sizes do not add up to the dim");
  int64_t at = 0;
  for (int i = 0; i < node.output_size(); ++i) {
    set(node, i, sliceAxis(x, axis, at, at + sizes[static_cast<size_t>(i)]));
    at += sizes[static_cast<size_t>(i)];
  }
}

void Importer::concatOp(const onnx::NodeProto& node) {
  const size_t r = shapeOf(value(node, 0)).size();
  const int64_t axis = axisOf(node, attrInt(node, "axis").value_or(0), r);
  Node* acc = nullptr;
  for (int i = 0; i < node.input_size(); ++i) {
    Node* v = irValue(node, i);
    if (dimsOf(v).size() != r) fail(node, "inputs differ in rank");
    if (v->shape().dim(static_cast<int>(axis)) == 0) continue;
    acc = acc ? b_.concat(acc, v, axis) : v;
  }
  if (!acc) fail(node, "every input is empty");
  set(node, 0, acc);
}

void Importer::gatherOp(const onnx::NodeProto& node) {
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
  set(node, 0, b_.gather(irValue(node, 0), indices));
}

// Shape and Size of an IR value are constants: shapes are static.
void Importer::shapeOp(const onnx::NodeProto& node) {
  Node* n = std::get<Node*>(value(node, 0));  // a constant operand was folded
  ConstTensor s;
  s.dtype = onnx::TensorProto::INT64;
  std::vector<int64_t> d = dimsOf(n);
  if (node.op_type() == "Size") {
    s.values = {static_cast<double>(n->shape().numElements())};
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
}

void Importer::constantOp(const onnx::NodeProto& node) {
  if (node.attribute_size() != 1) fail(node, "a Constant needs exactly one value attribute");
  std::filesystem::path dir = std::filesystem::path(o_.path).parent_path();
  set(node, 0, attributeTensor(node.attribute(0), dir.empty() ? "." : dir, file_, node.name()));
}

// LayerNormalization and RMSNormalization over the last dim, with scale (and bias).
Node* Importer::lastAxisNorm(const onnx::NodeProto& node, Op op) {
  Node* x = irValue(node, 0);
  const size_t r = dimsOf(x).size();
  if (axisOf(node, attrInt(node, "axis").value_or(-1), r) != static_cast<int64_t>(r) - 1)
    fail(node, "only normalization over the last dim is supported (attribute axis)");
  // stash_type 1 computes the statistics in float32, as pgq does; others name a lower
  // precision, which would change the result.
  if (int64_t stash = attrInt(node, "stash_type").value_or(1); stash != 1)
    fail(node, fmt::format("attribute stash_type = {} is not supported (1: float32 statistics)", stash));
  for (int i = 1; i < node.output_size(); ++i)
    if (!node.output(i).empty()) fail(node, "the mean and inverse deviation outputs are not supported");
  const float eps = attrFloat(node, "epsilon").value_or(1e-5f);
  if (!(eps >= 0)) fail(node, fmt::format("attribute epsilon = {} is negative", eps));
  Node* y = b_.norm(op, x, eps);
  y = b_.mul(y, splatOrBroadcast(node, 1, dimsOf(x)));
  if (has(node, 2)) y = b_.add(y, splatOrBroadcast(node, 2, dimsOf(x)));
  return y;
}

void Importer::layerNormOp(const onnx::NodeProto& node) { set(node, 0, lastAxisNorm(node, Op::kLayerNorm)); }

void Importer::rmsNormOp(const onnx::NodeProto& node) {
  if (has(node, 2)) fail(node, "RMSNormalization has two inputs");
  set(node, 0, lastAxisNorm(node, Op::kRmsNorm));
}

void Importer::softmaxOp(const onnx::NodeProto& node) {
  Node* x = irValue(node, 0);
  const int64_t axis = axisOf(node, attrInt(node, "axis").value_or(-1), dimsOf(x).size());
  Node* y = moveLastAxis(b_.softmax(moveLastAxis(x, axis, true)), axis, false);
  if (node.op_type() == "LogSoftmax") {
    // Remembered for a NegativeLogLikelihoodLoss of [N, C] (classes last).
    if (axis == static_cast<int64_t>(dimsOf(x).size()) - 1) log_softmax_of_[node.output(0)] = x;
    y = b_.unary(Op::kLog, y);
  }
  set(node, 0, y);
}

void Importer::reduceOp(const onnx::NodeProto& node) {
  const std::string& op = node.op_type();
  Node* x = irValue(node, 0);
  std::vector<int64_t> in = dimsOf(x);
  // ReduceSum takes its axes as an input from opset 13, the others from opset 18.
  const bool axes_input = op == "ReduceSum" || opset_ >= 18;
  if (axes_input && !attrInts(node, "axes").empty())
    fail(node, fmt::format("attribute axes: at opset {} the axes are input 1", opset_));
  if (!axes_input && has(node, 1)) fail(node, fmt::format("input 1: at opset {} the axes are an attribute", opset_));
  std::vector<int64_t> axes = axes_input ? (has(node, 1) ? constInts(node, 1, "the axes") : std::vector<int64_t>{})
                                         : attrInts(node, "axes");
  if (axes.empty()) {
    if (attrInt(node, "noop_with_empty_axes").value_or(0)) return set(node, 0, x);
    for (size_t i = 0; i < in.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  for (int64_t& a : axes) a = axisOf(node, a, in.size());
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) fail(node, "an axis is repeated");
  Op irop = op == "ReduceMean" ? Op::kReduceMean : op == "ReduceSum" ? Op::kReduceSum : Op::kReduceMax;
  Node* y = b_.reduce(irop, x, axes);
  if (attrInt(node, "keepdims").value_or(1)) {
    std::vector<int64_t> kept = in;
    for (int64_t a : axes) kept[static_cast<size_t>(a)] = 1;
    y = reshape(y, kept);
  }
  set(node, 0, y);
}

void Importer::crossEntropyOp(const onnx::NodeProto& node) {
  if (node.output_size() > 1 && !node.output(1).empty()) fail(node, "the log_prob output is not supported");
  set(node, 0, crossEntropy(node, irValue(node, 0), labels(node)));
}

void Importer::nllOp(const onnx::NodeProto& node) {
  auto it = log_softmax_of_.find(node.input(0));
  if (it == log_softmax_of_.end() || it->second->shape().rank() != 2)
    fail(node, "only the negative log-likelihood of a LogSoftmax over the classes of [N, C] scores is supported");
  set(node, 0, crossEntropy(node, it->second, labels(node)));
}

}  // namespace pgq::onnx_import
