#pragma once
// Reverse-mode differentiation over the IR. The backward graph is built in the same
// graph, with one gradient rule per op (all rules in one switch, ggml-style).
//
// Each backward GEMM is its own matmul node, labelled after the forward GEMM and the
// gradient it computes: "layer2/mlp/up:dgrad" (gradient of the activation input),
// "layer2/mlp/up:wgrad" (gradient of the weight); when both inputs are activations
// (attention) "layer0/attn/scores:dgrad_lhs" / ":dgrad_rhs". Labels are for people;
// what a GEMM is, is recorded as structure: every forward GEMM gets an id (`gemm`), and
// each backward GEMM names the forward GEMM it differentiates (`grad_of`) and the
// operand whose gradient it computes (`wrt`: lhs or rhs). tag_metadata derives
// directions and operand roles from these.
#include <span>
#include <vector>

#include "ir/graph.h"

namespace pgq {

// Appends the gradient of the scalar `loss` with respect to each of `params` and
// makes the graph's outputs [loss, d loss/d params[0], ...]. Returns the gradient
// nodes in the order of `params`. A parameter the loss does not depend on gets a
// zero gradient. Throws pgq::Error for an op without a gradient rule.
std::vector<Node*> appendBackward(Graph& graph, Node* loss, std::span<Node* const> params);

}  // namespace pgq
