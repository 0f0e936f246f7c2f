#include "passes/tag_metadata.h"

#include <charconv>
#include <string_view>
#include <unordered_set>

#include <fmt/format.h>

#include "ir/analysis.h"
#include "ir/dot_dims.h"
#include "support/errors.h"

namespace pgq {
namespace {

bool isGemm(const Node& node) { return node.op() == Op::kMatMul || node.op() == Op::kQMatMul; }

// N of a label that starts "layer<N>/", else -1.
int64_t layerOf(std::string_view label) {
  constexpr std::string_view kPrefix = "layer";
  if (!label.starts_with(kPrefix)) return -1;
  std::string_view rest = label.substr(kPrefix.size());
  size_t digits = rest.find_first_not_of("0123456789");
  if (digits == 0 || digits == std::string_view::npos || rest[digits] != '/') return -1;
  int64_t layer = -1;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + digits, layer);
  if (ec != std::errc())
    throw Error(fmt::format("GEMM label '{}': layer number {} does not fit in 64 bits", label, rest.substr(0, digits)));
  return layer;
}

bool isGradientSource(Op op) {
  return op == Op::kCrossEntropyGrad || op == Op::kSoftmaxGrad || op == Op::kGeluGrad ||
         op == Op::kReluGrad || op == Op::kRmsNormGrad || op == Op::kLayerNormGrad ||
         op == Op::kScatterAdd;
}

// Values computed from a loss gradient: the gradient sources and everything after them.
std::unordered_set<const Node*> gradientValues(const Graph& graph) {
  std::unordered_set<const Node*> grads;
  for (const Node* node : graph.postOrder()) {
    bool g = isGradientSource(node->op());
    for (const Node* operand : node->operands()) g = g || grads.count(operand);
    if (g) grads.insert(node);
  }
  return grads;
}

std::string directionFromLabel(const std::string& label) {
  size_t colon = label.rfind(':');
  if (colon == std::string::npos) return "fwd";
  std::string suffix = label.substr(colon + 1);
  if (suffix.starts_with("wgrad")) return "bwd_wgrad";
  if (suffix.starts_with("dgrad")) return "bwd_dgrad";
  return "fwd";
}

// "layer2/mlp/up:dgrad" -> "up"
std::string baseName(const std::string& label) {
  std::string base = label.substr(0, label.rfind(':') == std::string::npos ? label.size() : label.rfind(':'));
  return base.substr(base.rfind('/') == std::string::npos ? 0 : base.rfind('/') + 1);
}

std::string shardingKind(const std::string& label) {
  std::string base = baseName(label);
  if (base == "q" || base == "k" || base == "v" || base == "up" || base == "get_logits") return "column";
  if (base == "out" || base == "down") return "row";
  if (base == "scores" || base == "av") return "heads";
  return "replicated";
}

// Which of [batch, M, K, N] a tensor-parallel split divides (see the header).
int splitIndex(const std::string& kind, const std::string& direction, const std::vector<std::string>& roles) {
  enum { kBatch = 0, kM = 1, kK = 2, kN = 3 };
  auto freeDimOf = [&](const char* role) { return roles[0] == role ? kM : kN; };
  if (kind == "heads") return kBatch;
  if (kind == "column") {
    if (direction == "fwd") return kN;
    if (direction == "bwd_dgrad") return kK;
    return freeDimOf("gradient");
  }
  if (kind == "row") {
    if (direction == "fwd") return kK;
    if (direction == "bwd_dgrad") return freeDimOf("weight");
    return freeDimOf("activation");
  }
  return -1;
}

}  // namespace

bool TagMetadata::run(Graph& graph, PassContext&) {
  std::unordered_set<const Node*> grads = gradientValues(graph);
  bool changed = false;
  for (Node* node : graph.postOrder()) {
    if (!isGemm(*node)) continue;
    Attrs before = node->attrs();
    Attrs& a = node->attrs();
    if (!a.has(AttrKey::kLabel)) a.set(AttrKey::kLabel, node->name());
    const std::string label = a.getString(AttrKey::kLabel);
    if (!a.has(AttrKey::kDirection)) a.set(AttrKey::kDirection, directionFromLabel(label));
    if (!a.has(AttrKey::kRoles)) {
      std::vector<std::string> roles;
      for (int i = 0; i < 2; ++i) {
        const Node* operand = node->operand(i);
        roles.push_back(isWeightValue(operand) ? "weight" : grads.count(operand) ? "gradient" : "activation");
      }
      a.set(AttrKey::kRoles, roles);
    }
    a.set(AttrKey::kLayer, layerOf(label));

    const Node& lhs = *node->operand(0);
    const Node& rhs = *node->operand(1);
    GemmSizes g = gemmSizes(lhs.shape(), rhs.shape(), DotDims::fromAttrs(a));
    std::vector<int64_t> shape{g.batch, g.m, g.k, g.n};
    a.set(AttrKey::kGemmShape, shape);
    a.set(AttrKey::kFlops, static_cast<int64_t>(g.flops()));
    a.set(AttrKey::kBytes, static_cast<int64_t>(lhs.shape().numElements() * dtypeSize(lhs.dtype()) +
                                                rhs.shape().numElements() * dtypeSize(rhs.dtype()) +
                                                node->shape().numElements() * dtypeSize(node->dtype())));

    std::string kind = shardingKind(label);
    int split = splitIndex(kind, a.getString(AttrKey::kDirection), a.getStrings(AttrKey::kRoles));
    int64_t p = options_.tensor_parallel;
    if (split < 0 || shape[static_cast<size_t>(split)] % p != 0) {
      kind = "replicated";
      split = -1;
    }
    std::vector<int64_t> device = shape;
    if (split >= 0) device[static_cast<size_t>(split)] /= p;
    a.set(AttrKey::kSharding, kind);
    a.set(AttrKey::kDevices, p);
    a.set(AttrKey::kDeviceShape, device);
    changed |= !(before == a);
  }
  return changed;
}

}  // namespace pgq
