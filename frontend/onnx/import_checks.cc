// What the ONNX standard forbids, checked before a model is imported: ONNX 1.12's
// checker (onnx::checker::check_model) knows opsets up to 17 only and refuses the ops
// of later ones, so pgq checks the rules a malformed export breaks itself, using 1.12's
// operator schemas for input and output counts where they still hold.
#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <onnx/defs/schema.h>

#include "frontend/onnx/importer_impl.h"
#include "support/errors.h"

namespace pgq::onnx_import {
namespace {

// IR versions: 3 (ONNX 1.0) to 11 (ONNX 1.18; PyTorch 2.11 writes 10).
constexpr int64_t kMinIrVersion = 3;
constexpr int64_t kMaxIrVersion = 11;
// ONNX 1.12's schemas end at opset 17.
constexpr int64_t kLastSchemaOpset = 17;

struct Arity {
  int min_inputs, max_inputs, min_outputs, max_outputs;
};

// Ops whose input or output counts changed after opset 17, or that are newer than ONNX
// 1.12, from the operator changelog: at opsets >= `since`.
struct LaterArity {
  const char* op;
  int since;
  Arity arity;
};
constexpr int kMany = std::numeric_limits<int>::max();
constexpr LaterArity kLaterArity[] = {
    {"ReduceL1", 18, {1, 2, 1, 1}},        {"ReduceL2", 18, {1, 2, 1, 1}},
    {"ReduceLogSum", 18, {1, 2, 1, 1}},    {"ReduceLogSumExp", 18, {1, 2, 1, 1}},
    {"ReduceMax", 18, {1, 2, 1, 1}},       {"ReduceMean", 18, {1, 2, 1, 1}},
    {"ReduceMin", 18, {1, 2, 1, 1}},       {"ReduceProd", 18, {1, 2, 1, 1}},
    {"ReduceSumSquare", 18, {1, 2, 1, 1}}, {"Pad", 18, {2, 4, 1, 1}},
    {"Split", 18, {1, 2, 1, kMany}},       {"Gelu", 20, {1, 1, 1, 1}},
    {"RMSNormalization", 23, {2, 2, 1, 1}}, {"RotaryEmbedding", 23, {3, 4, 1, 1}},
    {"Attention", 23, {3, 6, 1, 4}},
};

std::optional<Arity> arityOf(const std::string& op, int64_t opset) {
  for (const LaterArity& l : kLaterArity)
    if (op == l.op) {
      if (opset >= l.since) return l.arity;
      break;
    }
  const onnx::OpSchema* schema =
      onnx::OpSchemaRegistry::Schema(op, static_cast<int>(std::min(opset, kLastSchemaOpset)), "");
  if (!schema) return std::nullopt;  // not an ONNX op: refused by name when imported
  return Arity{schema->min_input(), schema->max_input(), schema->min_output(), schema->max_output()};
}

// Attributes of ops newer than ONNX 1.12's schemas (or added to an op after opset 17),
// with their types, from the operator changelog. The others are typed by the schemas.
struct LaterAttribute {
  const char* op;
  const char* name;
  onnx::AttributeProto::AttributeType type;
};
constexpr auto kInt = onnx::AttributeProto::INT, kFloat = onnx::AttributeProto::FLOAT,
               kString = onnx::AttributeProto::STRING;
constexpr LaterAttribute kLaterAttributes[] = {
    {"Gelu", "approximate", kString},        {"Cast", "saturate", kInt},
    {"Split", "num_outputs", kInt},          {"Pad", "mode", kString},
    {"RMSNormalization", "axis", kInt},      {"RMSNormalization", "epsilon", kFloat},
    {"RMSNormalization", "stash_type", kInt}, {"RotaryEmbedding", "interleaved", kInt},
    {"RotaryEmbedding", "num_heads", kInt},  {"RotaryEmbedding", "rotary_embedding_dim", kInt},
    {"Attention", "is_causal", kInt},        {"Attention", "kv_num_heads", kInt},
    {"Attention", "q_num_heads", kInt},      {"Attention", "qk_matmul_output_mode", kInt},
    {"Attention", "scale", kFloat},          {"Attention", "softcap", kFloat},
    {"Attention", "softmax_precision", kInt},
};
// The reductions gained `noop_with_empty_axes` at 18 (ReduceSum at 13, in the schemas).
constexpr const char* kReductions18[] = {"ReduceL1",  "ReduceL2",  "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
                                         "ReduceMean", "ReduceMin", "ReduceProd",  "ReduceSumSquare"};

// The type ONNX gives attribute `name` of `op` at `opset`, or nullopt where it has none
// (a name the op does not have: refused by name when imported).
std::optional<onnx::AttributeProto::AttributeType> attributeType(const std::string& op, const std::string& name,
                                                                 int64_t opset) {
  for (const LaterAttribute& l : kLaterAttributes)
    if (op == l.op && name == l.name) return l.type;
  if (name == "noop_with_empty_axes" && std::find(std::begin(kReductions18), std::end(kReductions18), op) !=
                                            std::end(kReductions18))
    return kInt;
  const onnx::OpSchema* schema =
      onnx::OpSchemaRegistry::Schema(op, static_cast<int>(std::min(opset, kLastSchemaOpset)), "");
  if (!schema) return std::nullopt;
  auto it = schema->attributes().find(name);
  if (it == schema->attributes().end()) return std::nullopt;
  return static_cast<onnx::AttributeProto::AttributeType>(it->second.type);
}

std::string typeText(int type) {
  const std::string& name = onnx::AttributeProto::AttributeType_Name(type);
  return name.empty() ? fmt::format("of type {}", type) : name;
}

std::string countText(int lo, int hi) {
  if (lo == hi) return fmt::format("{}", lo);
  if (hi == kMany) return fmt::format("at least {}", lo);
  return fmt::format("{} to {}", lo, hi);
}

}  // namespace

void Importer::checkStructure() const {
  const int64_t ir = model_.ir_version();
  if (ir < kMinIrVersion || ir > kMaxIrVersion)
    throw Error(fmt::format("{}: ir_version {} is not an ONNX IR version pgq reads ({} to {})", file_, ir,
                            kMinIrVersion, kMaxIrVersion));
  int default_opsets = 0;
  for (const onnx::OperatorSetIdProto& o : model_.opset_import())
    default_opsets += o.domain().empty() || o.domain() == "ai.onnx";
  if (default_opsets > 1)
    throw Error(fmt::format("{}: the model imports the default ONNX domain {} times (opset_import lists \"\" or "
                            "\"ai.onnx\" once)",
                            file_, default_opsets));
  // Every value is defined once (SSA), before the nodes that read it.
  const onnx::GraphProto& g = model_.graph();
  std::unordered_set<std::string> defined;
  std::unordered_set<std::string> initializers;
  for (const onnx::TensorProto& t : g.initializer()) {
    if (t.name().empty()) throw Error(fmt::format("{}: an initializer has no name", file_));
    if (!initializers.insert(t.name()).second)
      throw Error(fmt::format("{}: two initializers are named \"{}\"", file_, t.name()));
    defined.insert(t.name());
  }
  // Sparse initializers would be values pgq does not see (a node reading one fails below
  // with less to go on).
  if (g.sparse_initializer_size() > 0)
    throw Error(fmt::format("{}: the graph has {} sparse initializers (sparse_initializer), which pgq does not read; "
                            "export the model with dense weights",
                            file_, g.sparse_initializer_size()));
  std::unordered_set<std::string> outputs;
  for (const onnx::ValueInfoProto& out : g.output())
    if (!outputs.insert(out.name()).second)
      throw Error(fmt::format("{}: two graph outputs are named \"{}\"", file_, out.name()));
  std::unordered_set<std::string> inputs;
  for (const onnx::ValueInfoProto& in : g.input()) {
    if (!inputs.insert(in.name()).second)
      throw Error(fmt::format("{}: two graph inputs are named \"{}\"", file_, in.name()));
    defined.insert(in.name());  // an initializer may be listed as an input too (IR < 4)
  }
  for (const onnx::NodeProto& node : g.node()) {
    for (const std::string& in : node.input())
      if (!in.empty() && !defined.count(in))
        fail(node, fmt::format("input \"{}\" is not a graph input, an initializer or the output of an earlier node "
                               "(an ONNX graph lists its nodes in topological order)",
                               in));
    if (node.domain().empty() || node.domain() == "ai.onnx") {
      if (std::optional<Arity> a = arityOf(node.op_type(), opset_)) {
        if (node.input_size() < a->min_inputs || node.input_size() > a->max_inputs)
          fail(node, fmt::format("has {} inputs; {} takes {} at opset {}", node.input_size(), node.op_type(),
                                 countText(a->min_inputs, a->max_inputs), opset_));
        if (node.output_size() < a->min_outputs || node.output_size() > a->max_outputs)
          fail(node, fmt::format("has {} outputs; {} gives {} at opset {}", node.output_size(), node.op_type(),
                                 countText(a->min_outputs, a->max_outputs), opset_));
      }
    }
    checkAttributes(node);
    for (const std::string& out : node.output())
      if (!out.empty() && !defined.insert(out).second)
        fail(node, fmt::format("output \"{}\" is already defined (each value is produced once)", out));
  }
}

// Each attribute once, of the type ONNX gives it: the readers take the field of the
// expected type, so an axis written as a FLOAT would read as 0 (a softmax over the batch).
void Importer::checkAttributes(const onnx::NodeProto& node) const {
  std::unordered_set<std::string> seen;
  for (const onnx::AttributeProto& a : node.attribute()) {
    if (!seen.insert(a.name()).second) fail(node, fmt::format("attribute {} is given twice", a.name()));
    if (!node.domain().empty() && node.domain() != "ai.onnx") continue;
    std::optional<onnx::AttributeProto::AttributeType> want = attributeType(node.op_type(), a.name(), opset_);
    if (want && a.type() != *want)
      fail(node, fmt::format("attribute {} is {}, but ONNX defines it as {}", a.name(),
                             a.type() == onnx::AttributeProto::UNDEFINED ? "of no type (UNDEFINED)" : typeText(a.type()),
                             typeText(*want)));
  }
}

void Importer::checkDeclaredOutputs() const {
  for (const onnx::ValueInfoProto& o : model_.graph().output()) {
    auto it = values_.find(o.name());
    if (it == values_.end()) continue;  // not computed: the caller says so where it matters
    // The element type, by kind: pgq computes every float type in f32 (a float16 or
    // bfloat16 export trains in f32), but an integer output that computes floats, or the
    // reverse, is a model pgq reads differently from its exporter.
    const int32_t declared_type = o.type().tensor_type().elem_type();
    if (declared_type != onnx::TensorProto::UNDEFINED) {
      const bool computed_float = std::holds_alternative<Node*>(it->second)
                                      ? isFloat(std::get<Node*>(it->second)->dtype())
                                      : std::get<ConstTensor>(it->second).isFloat();
      if (isOnnxFloatType(declared_type) != computed_float)
        throw Error(fmt::format("{}: output \"{}\" is declared {}, but the graph computes {}", file_, o.name(),
                                onnx::TensorProto_DataType_Name(declared_type),
                                computed_float ? "floats" : "integers"));
    }
    if (!o.type().tensor_type().has_shape()) continue;
    const std::vector<int64_t> got = std::holds_alternative<Node*>(it->second)
                                         ? dimsOf(std::get<Node*>(it->second))
                                         : std::get<ConstTensor>(it->second).dims;
    const auto& shape = o.type().tensor_type().shape();
    bool same = shape.dim_size() == static_cast<int>(got.size());
    for (int d = 0; same && d < shape.dim_size(); ++d)
      same = !shape.dim(d).has_dim_value() || shape.dim(d).dim_value() == got[static_cast<size_t>(d)];
    if (same) continue;
    std::vector<std::string> declared;
    for (const auto& d : shape.dim())
      declared.push_back(d.has_dim_value() ? std::to_string(d.dim_value()) : d.dim_param().empty() ? "?" : d.dim_param());
    throw Error(fmt::format("{}: output \"{}\" is declared [{}], but the graph computes {}", file_, o.name(),
                            fmt::join(declared, ", "), shapeText(got)));
  }
}

}  // namespace pgq::onnx_import
