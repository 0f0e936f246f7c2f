// Opset 23's Attention and RotaryEmbedding as the importer lowers them, against an
// independent double-precision implementation of ONNX's definition written here (the
// forward), and their gradients against central differences, through the reference
// evaluator. ONNX 1.12's node test data predates both ops, so there are no upstream
// cases to run; these cover what the exports use and what the spec adds: grouped-query
// heads, 3-D and 4-D forms, scale, soft-capping, causal and additive masks; rotary
// embedding interleaved or not, partial, with position ids.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include "frontend/autodiff.h"
#include "frontend/onnx/importer.h"
#include "ir/builder.h"
#include "ir/verifier.h"
#include "runtime/reference.h"
#include "tests/test_util.h"

namespace pgq {
namespace {

namespace fs = std::filesystem;
using onnx::TensorProto;

struct Tensor64 {
  std::vector<int64_t> dims;
  std::vector<double> data;
  int64_t size() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
};

Tensor64 randomTensor(std::vector<int64_t> dims, uint64_t seed, double scale = 1.0) {
  Tensor64 t{std::move(dims), {}};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  t.data.resize(static_cast<size_t>(t.size()));
  for (double& x : t.data) x = u(rng);
  return t;
}

// A one-node opset-23 model: `floats` are float initializers (the ones named in
// `trained` are the parameters whose gradients are checked; the rest stay constants),
// `ints` int64 initializers; the node's output is the model's output.
struct OneNode {
  onnx::NodeProto node;
  std::map<std::string, Tensor64> floats;
  std::map<std::string, std::vector<int64_t>> ints;  // shaped by int_dims
  std::map<std::string, std::vector<int64_t>> int_dims;
  std::vector<std::string> trained;
};

std::string writeModel(const OneNode& c, const fs::path& path) {
  onnx::ModelProto model;
  model.set_ir_version(10);
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(23);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("one_node");
  *g->add_node() = c.node;
  for (const auto& [name, t] : c.floats) {
    TensorProto* init = g->add_initializer();
    init->set_name(name);
    init->set_data_type(TensorProto::FLOAT);
    for (int64_t d : t.dims) init->add_dims(d);
    for (double x : t.data) init->add_float_data(static_cast<float>(x));
  }
  for (const auto& [name, values] : c.ints) {
    TensorProto* init = g->add_initializer();
    init->set_name(name);
    init->set_data_type(TensorProto::INT64);
    for (int64_t d : c.int_dims.at(name)) init->add_dims(d);
    for (int64_t x : values) init->add_int64_data(x);
  }
  onnx::ValueInfoProto* out = g->add_output();
  out->set_name(c.node.output(0));
  out->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::FLOAT);
  std::ofstream file(path, std::ios::binary);
  model.SerializeToOstream(&file);
  return path.string();
}

onnx::NodeProto makeNode(const std::string& op, std::vector<std::string> inputs,
                         std::vector<std::pair<std::string, double>> attrs) {
  onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name(op);
  for (const std::string& i : inputs) n.add_input(i);
  n.add_output("y");
  for (const auto& [name, v] : attrs) {
    onnx::AttributeProto* a = n.add_attribute();
    a->set_name(name);
    if (name == "scale" || name == "softcap") {
      a->set_type(onnx::AttributeProto::FLOAT);
      a->set_f(static_cast<float>(v));
    } else {
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(static_cast<int64_t>(v));
    }
  }
  return n;
}

class OnnxOpGradients : public test::TempDirTest {
 protected:
  // Imports the model, checks its output against `expected` (computed from the
  // float32-rounded inputs, as the model stores them) and every trained input's
  // gradient of sum(y * w) against central differences.
  void check(const OneNode& c, const Tensor64& expected, double forward_tol = 1e-5) {
    OnnxImportOptions o;
    o.path = writeModel(c, dir_ / fmt::format("{}_{}.onnx", c.node.op_type(), ++models_));
    o.forward_only = true;
    std::string trained;
    for (const std::string& name : c.trained) trained += (trained.empty() ? "" : "|") + name;
    o.trainable = trained;
    ImportedModel m = importOnnx(o);
    Graph& g = *m.net.graph;
    ASSERT_EQ(m.outputs.size(), 1u);
    Node* y = m.outputs[0].second;
    ASSERT_EQ(std::vector<int64_t>(y->shape().dims().begin(), y->shape().dims().end()), expected.dims);
    Builder b(g);
    Node* w = b.input("w_loss", y->type());
    std::vector<int64_t> all;
    for (int64_t i = 0; i < y->shape().rank(); ++i) all.push_back(i);
    Node* loss = b.reduce(Op::kReduceSum, b.mul(y, w), all, "fd_loss");
    g.setOutputs({loss, y});
    // Parameters in the order of `trained`; every other model value is a constant.
    std::vector<Node*> params;
    for (const std::string& name : c.trained) {
      Node* p = nullptr;
      for (Node* q : m.net.params)
        if (m.onnx_names.at(q->name()) == name) p = q;
      ASSERT_NE(p, nullptr) << name << " was not imported as a parameter";
      params.push_back(p);
    }
    std::vector<Node*> grads = appendBackward(g, loss, params);
    verify(g);

    ReferenceEvaluator ref(g);
    for (Node* k : m.constants) {
      const std::vector<float>& v = m.values.at(k->name());
      ref.setInput(k, RefTensor{k->type(), std::vector<double>(v.begin(), v.end())});
    }
    std::vector<RefTensor> values;
    for (size_t i = 0; i < params.size(); ++i) {
      const std::vector<float>& v = m.values.at(params[i]->name());
      values.push_back(RefTensor{params[i]->type(), std::vector<double>(v.begin(), v.end())});
    }
    ref.setInput(w, randomRefTensor(w->type(), 99));
    auto setParams = [&] {
      for (size_t i = 0; i < params.size(); ++i) ref.setInput(params[i], values[i]);
    };
    setParams();
    ref.run();
    const RefTensor& got = ref.value(y);
    ASSERT_EQ(got.data.size(), expected.data.size());
    for (size_t i = 0; i < got.data.size(); ++i)
      ASSERT_NEAR(got.data[i], expected.data[i], forward_tol * std::max(1.0, std::abs(expected.data[i])))
          << "output element " << i;
    std::vector<RefTensor> analytic;
    for (Node* grad : grads) analytic.push_back(ref.value(grad));
    for (size_t p = 0; p < params.size(); ++p) {
      SCOPED_TRACE(c.trained[p]);
      const size_t n = values[p].data.size();
      const size_t stride = std::max<size_t>(1, n / 48);
      for (size_t i = 0; i < n; i += stride) {
        const double x0 = values[p].data[i];
        const double h = 1e-6 * std::max(1.0, std::abs(x0));
        auto lossAt = [&](double x) {
          values[p].data[i] = x;
          setParams();
          ref.run();
          return ref.value(loss).data[0];
        };
        const double numeric = (lossAt(x0 + h) - lossAt(x0 - h)) / (2 * h);
        values[p].data[i] = x0;
        EXPECT_NEAR(analytic[p].data[i], numeric, 1e-6 * std::max(1.0, std::abs(numeric))) << "element " << i;
      }
    }
  }

  int models_ = 0;
};

// float32 rounding of what the model stores, so that the reference starts where pgq does.
Tensor64 asStored(Tensor64 t) {
  for (double& x : t.data) x = static_cast<float>(x);
  return t;
}

// ONNX Attention on 4-D [B, H, T, D] tensors (the spec's reference, in doubles): scores
// = scale * Q K^T, soft-capped (cap * tanh(s / cap)), plus the additive mask, causal
// positions (j > i) at -inf, softmax over keys, times V. Key/value head h / (Hq / Hkv)
// serves query head h.
Tensor64 attentionReference(const Tensor64& q, const Tensor64& k, const Tensor64& v, double scale, double cap,
                            bool causal, const Tensor64* bias) {
  const int64_t B = q.dims[0], hq = q.dims[1], T = q.dims[2], D = q.dims[3];
  const int64_t hkv = k.dims[1], S = k.dims[2], Dv = v.dims[3];
  Tensor64 y{{B, hq, T, Dv}, std::vector<double>(static_cast<size_t>(B * hq * T * Dv))};
  auto at = [](const Tensor64& t, int64_t a, int64_t b, int64_t c, int64_t d) {
    return t.data[static_cast<size_t>(((a * t.dims[1] + b) * t.dims[2] + c) * t.dims[3] + d)];
  };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t kh = h / (hq / hkv);
        std::vector<double> s(static_cast<size_t>(S));
        for (int64_t j = 0; j < S; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += at(q, b, h, i, d) * at(k, b, kh, j, d);
          double x = dot * scale;
          if (cap > 0) x = cap * std::tanh(x / cap);
          if (bias) x += bias->data[static_cast<size_t>(i * S + j)];  // [T, S], broadcast
          if (causal && j > i) x = -INFINITY;
          s[static_cast<size_t>(j)] = x;
        }
        double mx = -INFINITY, sum = 0;
        for (double x : s) mx = std::max(mx, x);
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < S; ++j) acc += s[static_cast<size_t>(j)] / sum * at(v, b, kh, j, e);
          y.data[static_cast<size_t>(((b * hq + h) * T + i) * Dv + e)] = acc;
        }
      }
  return y;
}

// [B, H, T, D] <-> [B, T, H * D]
Tensor64 to3d(const Tensor64& t) {
  const int64_t B = t.dims[0], H = t.dims[1], T = t.dims[2], D = t.dims[3];
  Tensor64 out{{B, T, H * D}, std::vector<double>(t.data.size())};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t d = 0; d < D; ++d)
          out.data[static_cast<size_t>(((b * T + i) * H + h) * D + d)] =
              t.data[static_cast<size_t>(((b * H + h) * T + i) * D + d)];
  return out;
}

TEST_F(OnnxOpGradients, AttentionGroupedQueryCausalScaledSoftCapped) {
  const int64_t B = 2, hq = 4, hkv = 2, T = 5, D = 3;
  OneNode c;
  c.floats["q"] = asStored(randomTensor({B, hq, T, D}, 1));
  c.floats["k"] = asStored(randomTensor({B, hkv, T, D}, 2));
  c.floats["v"] = asStored(randomTensor({B, hkv, T, D}, 3));
  c.trained = {"q", "k", "v"};
  c.node = makeNode("Attention", {"q", "k", "v"}, {{"is_causal", 1}, {"scale", 0.7}, {"softcap", 1.5}});
  check(c, attentionReference(c.floats["q"], c.floats["k"], c.floats["v"], 0.7, 1.5, true, nullptr));
}

TEST_F(OnnxOpGradients, AttentionWithAnAdditiveMaskAndItsGradient) {
  const int64_t B = 1, H = 2, T = 4, D = 4;
  OneNode c;
  c.floats["q"] = asStored(randomTensor({B, H, T, D}, 4));
  c.floats["k"] = asStored(randomTensor({B, H, T, D}, 5));
  c.floats["v"] = asStored(randomTensor({B, H, T, D}, 6));
  c.floats["bias"] = asStored(randomTensor({T, T}, 7, 2.0));  // a learned bias (ALiBi-like), trained too
  c.trained = {"q", "k", "v", "bias"};
  c.node = makeNode("Attention", {"q", "k", "v", "bias"}, {});
  check(c, attentionReference(c.floats["q"], c.floats["k"], c.floats["v"], 1 / std::sqrt(4.0), 0, false,
                              &c.floats["bias"]));
}

TEST_F(OnnxOpGradients, AttentionThreeDimensional) {
  const int64_t B = 2, hq = 2, hkv = 1, T = 3, D = 4;
  Tensor64 q = asStored(randomTensor({B, hq, T, D}, 8)), k = asStored(randomTensor({B, hkv, T, D}, 9)),
           v = asStored(randomTensor({B, hkv, T, D}, 10));
  OneNode c;
  c.floats["q"] = to3d(q);
  c.floats["k"] = to3d(k);
  c.floats["v"] = to3d(v);
  c.trained = {"q", "k", "v"};
  c.node = makeNode("Attention", {"q", "k", "v"}, {{"q_num_heads", hq}, {"kv_num_heads", hkv}, {"is_causal", 1}});
  check(c, to3d(attentionReference(q, k, v, 1 / std::sqrt(4.0), 0, true, nullptr)));
}

// Attribute values a broken export could hold are refused, not read approximately: an
// is_causal other than 0 or 1, head counts that contradict 4-D inputs.
TEST_F(OnnxOpGradients, AttentionRefusesAttributesThatContradictItsInputs) {
  auto refusal = [&](std::vector<std::pair<std::string, double>> attributes) {
    OneNode c;
    c.floats["q"] = asStored(randomTensor({1, 2, 3, 4}, 11));
    c.floats["k"] = asStored(randomTensor({1, 2, 3, 4}, 12));
    c.floats["v"] = asStored(randomTensor({1, 2, 3, 4}, 13));
    c.trained = {"q", "k", "v"};
    c.node = makeNode("Attention", {"q", "k", "v"}, attributes);
    OnnxImportOptions o;
    o.path = writeModel(c, dir_ / fmt::format("refused_{}.onnx", ++models_));
    o.forward_only = true;
    o.trainable = "q|k|v";
    return test::errorOf([&] { importOnnx(o); });
  };
  EXPECT_NE(refusal({{"is_causal", 2}}).find("attribute is_causal = 2 is neither 0 nor 1"), std::string::npos);
  EXPECT_NE(refusal({{"q_num_heads", -4}}).find("attribute q_num_heads = -4, but the 4-D input has 2 heads"),
            std::string::npos);
  EXPECT_EQ(refusal({{"q_num_heads", 2}, {"kv_num_heads", 2}, {"is_causal", 1}}), "no error");
}

// ONNX RotaryEmbedding (the spec's reference): on [B, T, H, D] (4-D inputs are
// [B, H, T, D]), the first r = rotary_embedding_dim channels turn by the angle whose cos
// and sin the caches give for the token's position; pairs are (i, i + r/2), or
// (2i, 2i + 1) when interleaved; the rest pass through.
Tensor64 rotaryReference(const Tensor64& x4, const Tensor64& cos, const Tensor64& sin,
                         const std::vector<int64_t>& pos, int64_t r, bool interleaved) {
  const int64_t B = x4.dims[0], H = x4.dims[1], T = x4.dims[2], D = x4.dims[3], half = r / 2;
  Tensor64 y = x4;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t p = pos[static_cast<size_t>(b * T + t)];
        auto idx = [&](int64_t d) { return static_cast<size_t>(((b * H + h) * T + t) * D + d); };
        for (int64_t i = 0; i < half; ++i) {
          const double c = cos.data[static_cast<size_t>(p * half + i)], s = sin.data[static_cast<size_t>(p * half + i)];
          const int64_t i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + half;
          const double x1 = x4.data[idx(i1)], x2 = x4.data[idx(i2)];
          y.data[idx(i1)] = c * x1 - s * x2;
          y.data[idx(i2)] = s * x1 + c * x2;
        }
      }
  return y;
}

TEST_F(OnnxOpGradients, RotaryEmbeddingInterleavedOrNotPartialWithPositionIds) {
  const int64_t B = 2, H = 2, T = 3, D = 6, positions = 8;
  for (const bool interleaved : {false, true})
    for (const int64_t r : {int64_t{6}, int64_t{4}}) {
      SCOPED_TRACE(fmt::format("interleaved {}, rotary dim {}", interleaved, r));
      OneNode c;
      c.floats["x"] = asStored(randomTensor({B, H, T, D}, 11));
      Tensor64 angles = randomTensor({positions, r / 2}, 12, 3.0);
      Tensor64 cos = angles, sin = angles;
      for (double& a : cos.data) a = static_cast<float>(std::cos(a));
      for (double& a : sin.data) a = static_cast<float>(std::sin(a));
      c.floats["cos_cache"] = cos;
      c.floats["sin_cache"] = sin;
      std::vector<int64_t> pos{5, 0, 7, 1, 2, 3};
      c.ints["position_ids"] = pos;
      c.int_dims["position_ids"] = {B, T};
      c.trained = {"x"};
      c.node = makeNode("RotaryEmbedding", {"x", "cos_cache", "sin_cache", "position_ids"},
                        {{"interleaved", interleaved ? 1 : 0}, {"rotary_embedding_dim", static_cast<double>(r)}});
      check(c, rotaryReference(c.floats["x"], cos, sin, pos, r, interleaved));
    }
}

}  // namespace
}  // namespace pgq
