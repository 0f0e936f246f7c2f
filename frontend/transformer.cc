#include "frontend/transformer.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "frontend/onnx/import_once.h"
#include "frontend/sharding_rules.h"
#include "ir/builder.h"

namespace pgq {
namespace {

class TransformerBuilder {
 public:
  explicit TransformerBuilder(const ModelConfig& c)
      : c_(c), graph_(std::make_unique<Graph>(c.name)), b_(*graph_) {}

  TransformerGraph build();

 private:
  Node* param(std::string_view name, Shape shape, std::string_view init) {
    Node* p = b_.parameter(name, {DType::kF32, std::move(shape)}, init);
    params_.push_back(p);
    return p;
  }
  // Megatron tensor parallelism: `p` is split along `dim` over the model's devices
  // (with one device too, so that every GEMM's parallel kind is recorded).
  Node* split(Node* p, int64_t dim) {
    p->attrs().set(AttrKey::kSplit, std::vector<int64_t>{dim, c_.tensor_parallel});
    return p;
  }
  std::string normalInit(double std) const { return fmt::format("normal({})", std); }

  // norm(x) * g (+ b): the normalization without affine terms is one fused op.
  Node* norm(Node* x) {
    Op op = c_.norm == NormKind::kRmsNorm ? Op::kRmsNorm : Op::kLayerNorm;
    Node* g = param("g", Shape{c_.d_model}, "ones");
    Node* normed = b_.norm(op, x, c_.norm_eps, "normed");
    if (c_.norm == NormKind::kRmsNorm) return b_.mul(normed, b_.broadcastTrailing(g, x->shape()), "out");
    Node* scaled = b_.mul(normed, b_.broadcastTrailing(g, x->shape()), "scaled");
    return b_.add(scaled, b_.broadcastTrailing(param("b", Shape{c_.d_model}, "zeros"), x->shape()), "out");
  }

  Node* scopedNorm(Node* x, std::string_view scope_name) {
    auto scope = b_.scope(scope_name);
    return norm(x);
  }

  // A GEMM of transformer layer `layer`.
  Node* gemm(Node* lhs, Node* rhs, const DotDims& dims, std::string_view label, std::string_view name,
             int layer) {
    Node* g = b_.matmul(lhs, rhs, dims, label, name);
    g->attrs().set(AttrKey::kLayer, int64_t{layer});
    return g;
  }

  // [N,D] x [D,F] -> [N,F]
  Node* linear(Node* x, Node* w, std::string_view label, int layer) {
    return gemm(x, w, DotDims::matrix(), label, label.substr(label.rfind('/') + 1), layer);
  }

  // [N,heads*Dh] -> [B,heads,T,Dh]
  Node* splitHeads(Node* x, int64_t heads) {
    Node* r = b_.reshape(x, Shape{c_.batch, c_.seq_len, heads, c_.headDim()});
    return b_.transpose(r, {0, 2, 1, 3}, x->name().substr(x->name().rfind('/') + 1) + "_heads");
  }

  // Grouped-query attention: [B,KVH,T,Dh] -> [B,H,T,Dh], kv head j serving query heads
  // j*G .. j*G + G-1 (G = H / KVH), as torch's repeat_interleave(G, dim=1).
  Node* shareKvHeads(Node* x, std::string_view name) {
    const int64_t kv = c_.kvHeads(), group = c_.n_heads / kv;
    if (group == 1) return x;
    Node* repeated = b_.broadcast(x, Shape{c_.batch, kv, group, c_.seq_len, c_.headDim()}, {0, 1, 3, 4});
    return b_.reshape(repeated, Shape{c_.batch, c_.n_heads, c_.seq_len, c_.headDim()}, name);
  }

  Node* attention(Node* x, int layer);
  Node* mlp(Node* x, int layer);

  const ModelConfig& c_;
  std::unique_ptr<Graph> graph_;
  Builder b_;
  std::vector<Node*> params_;
};

Node* TransformerBuilder::attention(Node* x, int layer) {
  auto scope = b_.scope("attn");
  std::string prefix = fmt::format("layer{}/attn/", layer);
  Shape dd{c_.d_model, c_.d_model};
  Shape dkv{c_.d_model, c_.kvHeads() * c_.headDim()};
  // GPT-2 scales the init of projections that write into the residual stream.
  double out_std = c_.init_std / std::sqrt(2.0 * static_cast<double>(c_.n_layers));
  // q, k and v are column-parallel (each device computes some heads), the output
  // projection row-parallel: the weights split along their output and input dims.
  Node* wq = split(param("wq", dd, normalInit(c_.init_std)), 1);
  Node* wk = split(param("wk", dkv, normalInit(c_.init_std)), 1);
  Node* wv = split(param("wv", dkv, normalInit(c_.init_std)), 1);
  Node* wo = split(param("wo", dd, normalInit(out_std)), 0);
  Node* q = splitHeads(linear(x, wq, prefix + "q", layer), c_.n_heads);
  Node* k = splitHeads(linear(x, wk, prefix + "k", layer), c_.kvHeads());
  Node* v = splitHeads(linear(x, wv, prefix + "v", layer), c_.kvHeads());
  if (c_.position == Position::kRope) {
    // Rotated before the kv heads are shared: the same rotation, on fewer heads.
    q = b_.rope(q, c_.rope_theta, RopeRotation::kForward, "q_rope");
    k = b_.rope(k, c_.rope_theta, RopeRotation::kForward, "k_rope");
  }
  k = shareKvHeads(k, "k_shared");
  v = shareKvHeads(v, "v_shared");
  // [B,H,T,Dh] x [B,H,T,Dh]^T -> [B,H,T,T]
  Node* scores = gemm(q, k, {{3}, {3}, {0, 1}, {0, 1}}, prefix + "scores", "scores", layer);
  Node* scaled = b_.scale(scores, 1.0 / std::sqrt(static_cast<double>(c_.headDim())), "scaled");
  Node* masked = b_.causalMask(scaled, -std::numeric_limits<double>::infinity(), "masked");
  Node* probs = b_.softmax(masked, "probs");
  // [B,H,T,T] x [B,H,T,Dh] -> [B,H,T,Dh]
  Node* av = gemm(probs, v, {{3}, {2}, {0, 1}, {0, 1}}, prefix + "av", "av", layer);
  Node* merged = b_.reshape(b_.transpose(av, {0, 2, 1, 3}), Shape{c_.tokens(), c_.d_model}, "merged");
  return linear(merged, wo, prefix + "out", layer);
}

Node* TransformerBuilder::mlp(Node* x, int layer) {
  auto scope = b_.scope("mlp");
  std::string prefix = fmt::format("layer{}/mlp/", layer);
  double out_std = c_.init_std / std::sqrt(2.0 * static_cast<double>(c_.n_layers));
  // Column-parallel gate and up, row-parallel down: the hidden activation stays split.
  Shape df{c_.d_model, c_.d_ff};
  Node* w_gate = nullptr;
  if (c_.activation == Activation::kSwiGlu) w_gate = split(param("w_gate", df, normalInit(c_.init_std)), 1);
  Node* w_up = split(param("w_up", df, normalInit(c_.init_std)), 1);
  Node* w_down = split(param("w_down", Shape{c_.d_ff, c_.d_model}, normalInit(out_std)), 0);
  Node* act;
  if (w_gate) {
    // SwiGLU: silu(x w_gate) * (x w_up).
    Node* gate = b_.unary(Op::kSilu, linear(x, w_gate, prefix + "gate", layer), "gate_act");
    act = b_.mul(gate, linear(x, w_up, prefix + "up", layer), "act");
  } else {
    Node* up = linear(x, w_up, prefix + "up", layer);
    act = b_.unary(c_.activation == Activation::kGelu ? Op::kGelu : Op::kRelu, up, "act");
  }
  return linear(act, w_down, prefix + "down", layer);
}

TransformerGraph TransformerBuilder::build() {
  TransformerGraph out;
  Shape bt{c_.batch, c_.seq_len};
  out.tokens = b_.input("tokens", {DType::kS32, bt});
  out.targets = b_.input("targets", {DType::kS32, bt});
  Node* x;
  {
    auto scope = b_.scope("embed");
    // Vocab-parallel: with tied embeddings the logits GEMM is column-parallel.
    Node* wte = split(param("wte", Shape{c_.vocab, c_.d_model}, normalInit(c_.init_std)), 0);
    // With rope, positions enter in attention instead.
    Node* wpe = c_.position == Position::kLearned
                    ? param("wpe", Shape{c_.seq_len, c_.d_model}, normalInit(c_.init_std / 2))
                    : nullptr;
    Node* tok = b_.gather(wte, out.tokens, "tok");
    if (wpe) tok = b_.add(tok, b_.broadcast(wpe, Shape{c_.batch, c_.seq_len, c_.d_model}, {1, 2}, "pos"));
    x = b_.reshape(tok, Shape{c_.tokens(), c_.d_model}, "x");
  }
  for (int l = 0; l < c_.n_layers; ++l) {
    auto scope = b_.scope(fmt::format("layer{}", l));
    x = b_.add(x, attention(scopedNorm(x, "norm1"), l), "resid_attn");
    x = b_.add(x, mlp(scopedNorm(x, "norm2"), l), "resid_mlp");
  }
  Node* h = scopedNorm(x, "final_norm");
  Node* logits;
  if (c_.tied_embeddings) {
    // [N,D] x [V,D]^T -> [N,V]
    logits = b_.matmul(h, params_.front(), {{1}, {1}, {}, {}}, "get_logits", "logits");
  } else {
    Node* head = split(param("lm_head", Shape{c_.d_model, c_.vocab}, normalInit(c_.init_std)), 1);
    logits = b_.matmul(h, head, DotDims::matrix(), "get_logits", "logits");
  }
  Node* targets = b_.reshape(out.targets, Shape{c_.tokens()}, "targets_flat");
  out.loss = b_.crossEntropy(logits, targets, "loss");
  graph_->addOutput(out.loss);
  out.params = params_;
  out.graph = std::move(graph_);
  return out;
}

}  // namespace

TransformerGraph buildTransformer(const ModelConfig& config) {
  return TransformerBuilder(config).build();
}

TransformerGraph buildModel(const ModelConfig& config, bool initial_values) {
  if (!config.imported()) return buildTransformer(config);
  TransformerGraph t =
      importedGraph({config.onnx, config.batch, config.seq_len, config.trainable, config.frozen}, initial_values);
  if (config.tensor_parallel > 1)
    applyShardingRules(loadShardingRules(config.sharding_rules), t.params, config.tensor_parallel);
  return t;
}

}  // namespace pgq
