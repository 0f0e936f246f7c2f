// Opset 23's attention-block ops as pgq IR: Attention (scaled dot-product attention with
// causal or constant masks, grouped-query heads, soft-capping) and RotaryEmbedding.
// Both follow the ONNX reference implementation (onnx/reference/ops/op_attention.py,
// op_rotary_embedding.py) term by term; anything it does that pgq does not (a KV
// cache, a dynamic mask, the extra outputs) is refused by name.
#include <cmath>

#include "frontend/onnx/importer_impl.h"

namespace pgq::onnx_import {

void Importer::attentionOp(const onnx::NodeProto& node) {
  for (int i = 4; i < node.input_size(); ++i)
    if (has(node, i))
      fail(node, fmt::format("input {} (past key/value or nonpad_kv_seqlen): a KV cache is not supported in training", i));
  for (int i = 1; i < node.output_size(); ++i)
    if (!node.output(i).empty()) fail(node, fmt::format("output {} (present key/value, qk_matmul_output) is not supported", i));
  if (auto p = attrInt(node, "softmax_precision"); p && *p != onnx::TensorProto::FLOAT)
    fail(node, fmt::format("attribute softmax_precision = {} is not supported (1: float32, as pgq computes)", *p));
  Node* q = irValue(node, 0);
  Node* k = irValue(node, 1);
  Node* v = irValue(node, 2);
  const size_t rank = dimsOf(q).size();
  if (rank != dimsOf(k).size() || rank != dimsOf(v).size() || (rank != 3 && rank != 4))
    fail(node, "Q, K and V must all be 3-D [batch, seq, hidden] or all 4-D [batch, heads, seq, head size]");
  // 3-D inputs: [B, T, H*D] -> [B, H, T, D].
  auto heads = [&](Node* x, const char* attr) {
    const std::optional<int64_t> h = attrInt(node, attr);
    if (rank == 4) {  // the heads are a dim; an attribute that says otherwise is a broken export
      if (h && *h != dimsOf(x)[1])
        fail(node, fmt::format("attribute {} = {}, but the 4-D input has {} heads", attr, *h, dimsOf(x)[1]));
      return x;
    }
    std::vector<int64_t> d = dimsOf(x);
    if (!h || *h <= 0 || d[2] % *h)
      fail(node, fmt::format("3-D inputs need attribute {} dividing the hidden size {}", attr, d[2]));
    return b_.transpose(reshape(x, {d[0], d[1], *h, d[2] / *h}), {0, 2, 1, 3});
  };
  q = heads(q, "q_num_heads");
  k = heads(k, "kv_num_heads");
  v = heads(v, "kv_num_heads");
  std::vector<int64_t> qd = dimsOf(q), kd = dimsOf(k), vd = dimsOf(v);
  const int64_t B = qd[0], hq = qd[1], tq = qd[2], dh = qd[3], hkv = kd[1], tk = kd[2];
  if (kd[0] != B || vd[0] != B || vd[1] != hkv || vd[2] != tk || kd[3] != dh)
    fail(node, fmt::format("Q {}, K {} and V {} do not fit together", shapeText(qd), shapeText(kd), shapeText(vd)));
  if (hq % hkv) fail(node, fmt::format("{} query heads are not a multiple of {} key/value heads", hq, hkv));
  // Grouped-query attention: query head h reads key/value head h / (hq / hkv).
  auto repeatHeads = [&](Node* x) {
    if (hq == hkv) return x;
    std::vector<int64_t> d = dimsOf(x);
    Node* wide = b_.broadcast(x, Shape{d[0], hkv, hq / hkv, d[2], d[3]}, {0, 1, 3, 4});
    return reshape(wide, {d[0], hq, d[2], d[3]});
  };
  k = repeatHeads(k);
  v = repeatHeads(v);

  // [B,H,Tq,D] x [B,H,Tk,D] -> [B,H,Tq,Tk]
  Node* scores = b_.matmul(q, k, DotDims{{3}, {3}, {0, 1}, {0, 1}});
  gemmMetadata(node, scores, "scores");
  const double scale = attrFloat(node, "scale").value_or(static_cast<float>(1.0 / std::sqrt(static_cast<double>(dh))));
  if (!(scale > 0) || !std::isfinite(scale)) fail(node, fmt::format("attribute scale = {} is not positive", scale));
  scores = b_.scale(scores, scale);
  // Soft-capping comes before the mask (so masked scores stay masked).
  if (const double cap = attrFloat(node, "softcap").value_or(0); cap != 0) {
    if (!(cap > 0)) fail(node, fmt::format("attribute softcap = {} is negative", cap));
    scores = b_.scale(b_.unary(Op::kTanh, b_.scale(scores, 1 / cap)), cap);
  }
  const std::vector<int64_t> sd{B, hq, tq, tk};
  const int64_t is_causal = attrInt(node, "is_causal").value_or(0);
  if (is_causal != 0 && is_causal != 1) fail(node, fmt::format("attribute is_causal = {} is neither 0 nor 1", is_causal));
  bool causal = is_causal == 1;
  if (causal && tq != tk)
    fail(node, fmt::format("attribute is_causal with {} queries and {} keys (a KV cache) is not supported", tq, tk));
  if (has(node, 3)) {
    const ConstTensor* mask = constant(node, 3);
    if (!mask) {
      Node* m = nodeValue(node, 3);
      if (m->dtype() != DType::kF32) fail(node, "a boolean attn_mask computed from the inputs is not supported");
      auto dims = broadcastDims(dimsOf(m), sd);
      if (!dims || *dims != sd) fail(node, fmt::format("attn_mask {} does not broadcast to the scores", shapeText(dimsOf(m))));
      scores = b_.add(scores, broadcastTo(node, m, sd));
    } else {
      auto dims = broadcastDims(mask->dims, sd);
      if (!dims || *dims != sd)
        fail(node, fmt::format("attn_mask {} does not broadcast to the scores {}", shapeText(mask->dims), shapeText(sd)));
      const bool is_bool = mask->dtype == onnx::TensorProto::BOOL;
      if (causalFill(*mask, !is_bool)) {
        causal = true;
      } else {
        // Any other constant mask: added as a bias (a boolean one as 0 / -inf), every
        // row keeping a finite score (a fully masked row is NaN in ONNX's softmax).
        ConstTensor bias = *mask;
        bias.dtype = onnx::TensorProto::FLOAT;
        if (is_bool)
          for (double& x : bias.values) x = x != 0 ? 0.0 : -std::numeric_limits<double>::infinity();
        const int64_t last = bias.dims.empty() ? 1 : bias.dims.back();
        for (size_t row = 0; row * static_cast<size_t>(last) < bias.values.size(); ++row) {
          bool finite = false;
          for (int64_t j = 0; j < last; ++j)
            finite |= std::isfinite(bias.values[row * static_cast<size_t>(last) + static_cast<size_t>(j)]);
          if (!finite) fail(node, "attn_mask masks a whole row of scores");
        }
        scores = b_.add(scores, broadcastTo(node, materialize(bias, node.input(3), DType::kF32), sd));
      }
    }
  }
  if (causal) scores = b_.causalMask(scores, -std::numeric_limits<double>::infinity());
  Node* probs = b_.softmax(scores);
  // [B,H,Tq,Tk] x [B,H,Tk,Dv] -> [B,H,Tq,Dv]
  Node* y = b_.matmul(probs, v, DotDims{{3}, {2}, {0, 1}, {0, 1}});
  gemmMetadata(node, y, "context");
  if (rank == 3) y = reshape(b_.transpose(y, {0, 2, 1, 3}), {B, tq, hq * vd[3]});
  set(node, 0, y);
}

void Importer::rotaryOp(const onnx::NodeProto& node) {
  Node* x = irValue(node, 0);
  std::vector<int64_t> xd = dimsOf(x);
  if (xd.size() != 3 && xd.size() != 4) fail(node, "X must be 3-D [batch, seq, hidden] or 4-D [batch, heads, seq, head size]");
  // To [B, T, H, D], as the reference computes.
  Node* t = nullptr;
  if (xd.size() == 4) {
    t = b_.transpose(x, {0, 2, 1, 3});
  } else {
    const int64_t h = attrInt(node, "num_heads").value_or(0);
    if (h <= 0 || xd[2] % h) fail(node, fmt::format("3-D X needs attribute num_heads dividing {}", xd[2]));
    t = reshape(x, {xd[0], xd[1], h, xd[2] / h});
  }
  std::vector<int64_t> td = dimsOf(t);
  const int64_t B = td[0], T = td[1], H = td[2], D = td[3];
  int64_t r = attrInt(node, "rotary_embedding_dim").value_or(0);
  if (r == 0) r = D;
  if (r < 2 || r > D || r % 2) fail(node, fmt::format("attribute rotary_embedding_dim = {} for head size {}", r, D));
  const int64_t half = r / 2;
  // cos and sin as [B, T, 1, r/2] constants.
  auto table = [&](int slot, const char* what) {
    const ConstTensor& cache = requireConstant(node, slot, what);
    ConstTensor out;
    out.dtype = onnx::TensorProto::FLOAT;
    out.dims = {B, T, 1, half};
    if (has(node, 3)) {
      const ConstTensor& pos = requireConstant(node, 3, "position_ids");
      if (cache.dims.size() != 2 || cache.dims[1] != half || pos.numElements() != B * T)
        fail(node, fmt::format("{} {} with position_ids {} does not give [batch, seq, {}]", what, shapeText(cache.dims),
                               shapeText(pos.dims), half));
      for (int64_t p : pos.ints()) {
        if (p < 0 || p >= cache.dims[0]) fail(node, fmt::format("position id {} is outside {}", p, what));
        out.values.insert(out.values.end(), cache.values.begin() + p * half, cache.values.begin() + (p + 1) * half);
      }
    } else {
      if (cache.dims != std::vector<int64_t>{B, T, half})
        fail(node, fmt::format("{} {} is not [batch, seq, {}]", what, shapeText(cache.dims), half));
      out.values = cache.values;
    }
    return broadcastTo(node, materialize(out, node.input(slot) + "#rope", DType::kF32), {B, T, H, half});
  };
  Node* cos = table(1, "cos_cache");
  Node* sin = table(2, "sin_cache");
  Node* rot = sliceAxis(t, 3, 0, r);
  Node *x1, *x2;
  const bool interleaved = attrInt(node, "interleaved").value_or(0) != 0;
  if (interleaved) {
    Node* pairs = reshape(rot, {B, T, H, half, 2});
    x1 = reshape(sliceAxis(pairs, 4, 0, 1), {B, T, H, half});
    x2 = reshape(sliceAxis(pairs, 4, 1, 2), {B, T, H, half});
  } else {
    x1 = sliceAxis(rot, 3, 0, half);
    x2 = sliceAxis(rot, 3, half, r);
  }
  Node* real = b_.sub(b_.mul(cos, x1), b_.mul(sin, x2));
  Node* imag = b_.add(b_.mul(sin, x1), b_.mul(cos, x2));
  Node* y = interleaved ? reshape(b_.concat(reshape(real, {B, T, H, half, 1}), reshape(imag, {B, T, H, half, 1}), 4),
                                  {B, T, H, r})
                        : b_.concat(real, imag, 3);
  if (r < D) y = b_.concat(y, sliceAxis(t, 3, r, D), 3);
  set(node, 0, xd.size() == 4 ? b_.transpose(y, {0, 2, 1, 3}) : reshape(y, xd));
}

}  // namespace pgq::onnx_import
