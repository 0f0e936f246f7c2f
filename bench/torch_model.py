"""The pgq transformer written in PyTorch, op for op, as the reference peer.

Used by the gradient-parity test (tests/parity/torch_parity.py) and by the step-time
comparison (bench/torch_step.py). Weights are loaded by name from pgq's parameter
names, so both sides run exactly the same model.
"""
import math

import torch
import torch.nn.functional as F


def _norm(x, cfg, params, prefix):
    g = params[prefix + "/g"]
    if cfg["norm"] == "rmsnorm":
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg["norm_eps"])
        return y * g
    y = F.layer_norm(x, (x.shape[-1],), eps=cfg["norm_eps"])
    return y * g + params[prefix + "/b"]


def forward(cfg, params, tokens, targets):
    """Mean cross-entropy of the byte-level model; `params` maps pgq names to tensors."""
    B, T = tokens.shape
    D, H = cfg["d_model"], cfg["n_heads"]
    Dh = D // H
    x = params["embed/wte"][tokens.long()] + params["embed/wpe"]
    x = x.reshape(B * T, D)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    for layer in range(cfg["n_layers"]):
        p = f"layer{layer}"
        h = _norm(x, cfg, params, p + "/norm1")

        def heads(w):
            return (h @ params[f"{p}/attn/{w}"]).view(B, T, H, Dh).transpose(1, 2)

        q, k, v = heads("wq"), heads("wk"), heads("wv")
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(Dh))
        probs = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        av = (probs @ v).transpose(1, 2).reshape(B * T, D)
        x = x + av @ params[f"{p}/attn/wo"]
        h2 = _norm(x, cfg, params, p + "/norm2")
        up = h2 @ params[f"{p}/mlp/w_up"]
        act = F.gelu(up, approximate="tanh") if cfg["activation"] == "gelu" else torch.relu(up)
        x = x + act @ params[f"{p}/mlp/w_down"]
    hf = _norm(x, cfg, params, "final_norm")
    if cfg["tied_embeddings"]:
        logits = hf @ params["embed/wte"].t()
    else:
        logits = hf @ params["lm_head"]
    return F.cross_entropy(logits, targets.reshape(-1).long())


def init_params(cfg, seed=0):
    """Random weights with pgq's names and shapes (for benchmarks)."""
    gen = torch.Generator().manual_seed(seed)
    D, F_, V, T = cfg["d_model"], cfg["d_ff"], cfg["vocab"], cfg["seq_len"]

    def normal(*shape):
        return (torch.randn(*shape, generator=gen) * 0.02).requires_grad_()

    params = {"embed/wte": normal(V, D), "embed/wpe": normal(T, D)}
    norms = [f"layer{l}/norm{i}" for l in range(cfg["n_layers"]) for i in (1, 2)] + ["final_norm"]
    for n in norms:
        params[n + "/g"] = torch.ones(D, requires_grad=True)
        if cfg["norm"] == "layernorm":
            params[n + "/b"] = torch.zeros(D, requires_grad=True)
    for l in range(cfg["n_layers"]):
        for w in ("wq", "wk", "wv", "wo"):
            params[f"layer{l}/attn/{w}"] = normal(D, D)
        params[f"layer{l}/mlp/w_up"] = normal(D, F_)
        params[f"layer{l}/mlp/w_down"] = normal(F_, D)
    if not cfg["tied_embeddings"]:
        params["lm_head"] = normal(D, V)
    return params
