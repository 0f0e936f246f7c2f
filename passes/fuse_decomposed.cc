#include "passes/fuse_decomposed.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "passes/fusion_util.h"

namespace pgq {
namespace {

bool near(double value, double want) { return std::abs(value - want) <= 1e-4 * std::abs(want); }

using fusion::isOutput;
using fusion::splatValue;

bool lastDimIn(const std::vector<int64_t>& dims, const Shape& shape) {
  return std::find(dims.begin(), dims.end(), shape.rank() - 1) != dims.end();
}

// A candidate rewrite: `root` becomes op(x){eps}. `inner` lists the other nodes the
// pattern consumed; the rewrite is only valid when nothing outside uses them.
struct Match {
  Node* root = nullptr;
  std::vector<Node*> inner;
  Op op = Op::kSilu;
  Node* x = nullptr;
  double eps = 0;
};

struct Product {
  double scale = 1;
  std::vector<Node*> factors;
};

struct Sum {
  double offset = 0;
  std::vector<Node*> terms;
};

class Matcher {
 public:
  explicit Matcher(const Graph& graph) : graph_(graph) {}

  std::optional<Match> match(Node* root) {
    for (auto matcher : {&Matcher::norm, &Matcher::gelu, &Matcher::silu}) {
      Match m;
      m.root = root;
      if ((this->*matcher)(m) && ownsInner(m)) return m;
    }
    return std::nullopt;
  }

 private:
  // A shared value is a leaf of a product or sum (it is the `x` of most patterns).
  bool mayDescend(const Match& m, const Node* n) const {
    return n == m.root || (n->users().size() == 1 && !isOutput(graph_, n));
  }

  bool ownsInner(const Match& m) const {
    std::unordered_set<const Node*> inside(m.inner.begin(), m.inner.end());
    inside.insert(m.root);
    for (const Node* n : m.inner) {
      if (isOutput(graph_, n)) return false;
      for (const Node* user : n->users())
        if (!inside.count(user)) return false;
    }
    return true;
  }

  // Flattens a tree of muls and divisions by splats into its factors.
  void product(Match& m, Node* n, Product& p) const {
    if (auto c = splatValue(n)) {
      p.scale *= *c;
      return;
    }
    if (mayDescend(m, n)) {
      std::optional<double> divisor;
      if (n->op() == Op::kDiv) divisor = splatValue(n->operand(1));
      if (n->op() == Op::kMul || (divisor && *divisor != 0)) {
        if (n != m.root) m.inner.push_back(n);
        product(m, n->operand(0), p);
        if (divisor) {
          p.scale /= *divisor;
        } else {
          product(m, n->operand(1), p);
        }
        return;
      }
    }
    p.factors.push_back(n);
  }

  // Flattens a tree of adds into its terms.
  void sum(Match& m, Node* n, Sum& s) const {
    if (auto c = splatValue(n)) {
      s.offset += *c;
      return;
    }
    if (n->op() == Op::kAdd && mayDescend(m, n)) {
      if (n != m.root) m.inner.push_back(n);
      sum(m, n->operand(0), s);
      sum(m, n->operand(1), s);
      return;
    }
    s.terms.push_back(n);
  }

  // `n` is `1 + f(arg)` for the unary op f; returns arg.
  Node* onePlus(Match& m, Node* n, Op f) const {
    Sum s;
    if (n->op() != Op::kAdd || !mayDescend(m, n)) return nullptr;
    sum(m, n, s);
    if (!near(s.offset, 1) || s.terms.size() != 1 || s.terms[0]->op() != f) return nullptr;
    m.inner.push_back(s.terms[0]);
    return s.terms[0]->operand(0);
  }

  // c * x^power, the factors in any order.
  bool scaledPower(Match& m, Node* n, Node* x, double c, size_t power) const {
    Product p;
    product(m, n, p);
    return near(p.scale, c) && p.factors.size() == power &&
           std::all_of(p.factors.begin(), p.factors.end(), [&](Node* f) { return f == x; });
  }

  // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) and
  // 0.5 * x * (1 + erf(x / sqrt 2)).
  bool gelu(Match& m) const {
    if (m.root->op() != Op::kMul && m.root->op() != Op::kDiv) return false;
    Product p;
    product(m, m.root, p);
    if (!near(p.scale, 0.5) || p.factors.size() != 2) return false;
    for (int i = 0; i < 2; ++i) {
      Node* x = p.factors[static_cast<size_t>(i)];
      Node* t = p.factors[static_cast<size_t>(1 - i)];
      for (Op f : {Op::kErf, Op::kTanh}) {
        Match g = m;
        Node* arg = onePlus(g, t, f);
        if (!arg || !(f == Op::kErf ? scaledPower(g, arg, x, 1 / std::numbers::sqrt2, 1) : tanhArg(g, arg, x)))
          continue;
        m = std::move(g);
        m.op = f == Op::kErf ? Op::kGeluErf : Op::kGelu;
        m.x = x;
        return true;
      }
    }
    return false;
  }

  // sqrt(2/pi) * (x + 0.044715 x^3).
  bool tanhArg(Match& m, Node* n, Node* x) const {
    Product p;
    product(m, n, p);
    if (!near(p.scale, std::sqrt(2 / std::numbers::pi)) || p.factors.size() != 1) return false;
    Node* inner = p.factors[0];
    if (inner->op() != Op::kAdd || !mayDescend(m, inner)) return false;
    Sum s;
    sum(m, inner, s);
    if (s.offset != 0 || s.terms.size() != 2) return false;
    for (int j = 0; j < 2; ++j) {
      Node* cube = s.terms[static_cast<size_t>(1 - j)];
      if (s.terms[static_cast<size_t>(j)] == x && cube != x && scaledPower(m, cube, x, 0.044715, 3)) return true;
    }
    return false;
  }

  // x * sigmoid(x).
  bool silu(Match& m) const {
    if (m.root->op() != Op::kMul) return false;
    for (int i = 0; i < 2; ++i) {
      Node* s = m.root->operand(1 - i);
      if (s->op() == Op::kSigmoid && s->operand(0) == m.root->operand(i)) {
        m.inner.push_back(s);
        m.op = Op::kSilu;
        m.x = m.root->operand(i);
        return true;
      }
    }
    return false;
  }

  // Follows reshapes (which keep the row-major order) and a broadcast along the last
  // dim of `full` back to a value with one element per row of `full`.
  Node* rowValue(Match& m, Node* n, const Shape& full) const {
    const int64_t rows = full.product(0, full.rank() - 1);
    while (true) {
      if (n->op() == Op::kReshape && n->shape().numElements() == rows) {
        m.inner.push_back(n);
        n = n->operand(0);
      } else if (n->op() == Op::kBroadcast && n->shape() == full && n->operand(0)->shape().numElements() == rows &&
                 !lastDimIn(n->attrs().getInts(AttrKey::kDims), full)) {
        m.inner.push_back(n);
        n = n->operand(0);
      } else {
        return n;
      }
    }
  }

  // reduce_mean(v * v) over the last dim of v (with any reshapes after it); returns v.
  Node* meanOfSquare(Match& m, Node* n, const Shape& full) const {
    n = rowValue(m, n, full);
    if (n->op() != Op::kReduceMean || !(n->operand(0)->shape() == full) ||
        n->attrs().getInts(AttrKey::kAxes) != std::vector<int64_t>{full.rank() - 1})
      return nullptr;
    Node* sq = n->operand(0);
    if (sq->op() != Op::kMul || sq->operand(0) != sq->operand(1)) return nullptr;
    m.inner.push_back(n);
    m.inner.push_back(sq);
    return sq->operand(0);
  }

  // y = v / sqrt(mean(v * v) + eps) (or v * rsqrt(..), v * (1 / sqrt(..))) over the last
  // dim: rms_norm(v), or layer_norm(x) when v = x - mean(x) and v is the pattern's own.
  bool norm(Match& m) const {
    Node* y = m.root;
    const Shape& full = y->shape();
    if (full.rank() == 0 || (y->op() != Op::kMul && y->op() != Op::kDiv)) return false;
    for (int i = 0; i < (y->op() == Op::kMul ? 2 : 1); ++i) {
      Match t = m;
      Node* r = rowValue(t, y->operand(1 - i), full);
      Node* sqrt_arg = nullptr;
      if ((y->op() == Op::kDiv && r->op() == Op::kSqrt) || (y->op() == Op::kMul && r->op() == Op::kRsqrt)) {
        sqrt_arg = r->operand(0);
      } else if (y->op() == Op::kMul && r->op() == Op::kDiv && r->operand(1)->op() == Op::kSqrt) {
        auto one = splatValue(r->operand(0));
        if (!one || !near(*one, 1)) continue;
        t.inner.push_back(r->operand(1));
        sqrt_arg = r->operand(1)->operand(0);
      }
      if (!sqrt_arg || sqrt_arg->op() != Op::kAdd) continue;
      t.inner.push_back(r);
      t.inner.push_back(sqrt_arg);
      for (int j = 0; j < 2; ++j) {
        auto eps = splatValue(sqrt_arg->operand(1 - j));
        Match n = t;
        Node* v = y->operand(i);
        if (!eps || !(*eps > 0) || !std::isfinite(*eps) || meanOfSquare(n, sqrt_arg->operand(j), full) != v)
          continue;
        n.eps = *eps;
        if (!layerNormOf(n, v)) {
          n.op = Op::kRmsNorm;
          n.x = v;
        }
        m = std::move(n);
        return true;
      }
    }
    return false;
  }


  // v = x - broadcast(mean(x)) over the last dim, v used by the pattern alone.
  bool layerNormOf(Match& m, Node* v) const {
    if (v->op() != Op::kSub) return false;
    Match lm = m;
    lm.inner.push_back(v);
    Node* x = v->operand(0);
    Node* mean = rowValue(lm, v->operand(1), v->shape());
    if (mean->op() != Op::kReduceMean || mean->operand(0) != x ||
        mean->attrs().getInts(AttrKey::kAxes) != std::vector<int64_t>{x->shape().rank() - 1})
      return false;
    lm.inner.push_back(mean);
    if (!ownsInner(lm)) return false;
    m = lm;
    m.op = Op::kLayerNorm;
    m.x = x;
    return true;
  }

  const Graph& graph_;
};

}  // namespace

bool FuseDecomposed::run(Graph& graph, PassContext&) {
  Matcher matcher(graph);
  bool changed = false;
  // Operands first: a pattern is matched at its last node, after the nodes inside it,
  // and a fused value is in place before its users are matched.
  for (Node* node : graph.postOrder()) {
    if (fusion::isDead(graph, node)) continue;
    std::optional<Match> m = matcher.match(node);
    if (!m || !(m->x->type() == m->root->type())) continue;
    Attrs attrs;
    if (m->op == Op::kRmsNorm || m->op == Op::kLayerNorm) attrs.set(AttrKey::kEps, m->eps);
    Node* fused =
        graph.create(m->op, {m->x}, std::move(attrs), std::nullopt, fusion::fusedName(graph, m->root, opName(m->op)));
    graph.replaceAllUsesWith(m->root, fused);
    changed = true;
  }
  return changed;
}

}  // namespace pgq
