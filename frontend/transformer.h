#pragma once
// Builds the forward graph of a decoder-only transformer (pre-norm; GPT-2 layout by
// default, LLaMA's with the options below) from a model config:
//
//   x = wte[tokens] (+ wpe with learned positions)          [B,T,D] -> [N,D], N = B*T
//   per layer l:  x += attn(norm(x)),  x += mlp(norm(x))
//   logits = norm(x) x wte^T (tied) or x lm_head            label "get_logits"
//   loss = cross_entropy(logits, targets)
//
// The options of a LLaMA block, each independent of the others:
// - position: rope rotates q and k per head ([B,H,T,Dh], op `rope`) instead of adding
//   a learned position table (there is no wpe then).
// - n_kv_heads < n_heads (grouped-query attention): wk and wv are [D, n_kv_heads*Dh];
//   k and v are split into n_kv_heads heads, then each is broadcast to the
//   n_heads / n_kv_heads consecutive query heads it serves (torch's repeat_interleave
//   in HF LLaMA) before the scores and av GEMMs.
// - activation: swiglu computes down(silu(x w_gate) * (x w_up)) with w_gate and w_up
//   [D, d_ff].
//
// Every GEMM carries a stable label for people and recipes:
// layer{l}/attn/{q,k,v,scores,av,out}, layer{l}/mlp/{gate,up,down}, get_logits; the
// GEMMs of layer l also carry `layer = l`. The weights carry Megatron tensor-parallel
// `split` annotations over ModelConfig::tensor_parallel devices: wq, wk, wv, w_gate
// and w_up along their output dim (column-parallel), wo and w_down along their input
// dim (row-parallel), the embedding and the logits weight along the vocabulary.
#include "frontend/model_config.h"
#include "frontend/model_graph.h"

namespace pgq {

TransformerGraph buildTransformer(const ModelConfig& config);

// The forward graph of a run's model: buildTransformer, or the import of config.onnx
// (once per process, frontend/onnx/import_once.h). `initial_values`: an imported model's
// graph also carries its parameters' values (TransformerGraph::values); a graph whose
// parameters are bound to tensors initialized from another (evaluation, profiling,
// analysis) needs none.
TransformerGraph buildModel(const ModelConfig& config, bool initial_values = true);

}  // namespace pgq
