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


def _options(cfg):
    """The LLaMA options with pgq's defaults, for configs that leave them out."""
    rope = cfg.get("position", "learned") == "rope"
    return rope, cfg.get("rope_theta", 10000.0), cfg.get("n_kv_heads", 0) or cfg["n_heads"]


def _rope_tables(T, Dh, theta):
    """cos and sin [T, Dh/2] of t * theta^(-2i/Dh), computed in double and stored as f32
    as pgq's kernel does (HF LLaMA computes the angles in f32)."""
    i = torch.arange(Dh // 2, dtype=torch.float64)
    angles = torch.arange(T, dtype=torch.float64)[:, None] * theta ** (-2.0 * i / Dh)
    return angles.cos().float(), angles.sin().float()


def _rope(x, cos, sin):
    """HF LLaMA's rotate-half pairing: dims i and i + Dh/2 turn together."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def forward(cfg, params, tokens, targets):
    """Mean cross-entropy of the byte-level model; `params` maps pgq names to tensors."""
    B, T = tokens.shape
    D, H = cfg["d_model"], cfg["n_heads"]
    Dh = D // H
    rope, theta, KVH = _options(cfg)
    x = params["embed/wte"][tokens.long()]
    if not rope:
        x = x + params["embed/wpe"]
    x = x.reshape(B * T, D)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    if rope:
        cos, sin = _rope_tables(T, Dh, theta)
    for layer in range(cfg["n_layers"]):
        p = f"layer{layer}"
        h = _norm(x, cfg, params, p + "/norm1")

        def heads(w, n):
            return (h @ params[f"{p}/attn/{w}"]).view(B, T, n, Dh).transpose(1, 2)

        q, k, v = heads("wq", H), heads("wk", KVH), heads("wv", KVH)
        if rope:
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        if KVH != H:  # grouped-query attention: each kv head serves H / KVH consecutive query heads
            k, v = k.repeat_interleave(H // KVH, dim=1), v.repeat_interleave(H // KVH, dim=1)
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(Dh))
        probs = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        av = (probs @ v).transpose(1, 2).reshape(B * T, D)
        x = x + av @ params[f"{p}/attn/wo"]
        h2 = _norm(x, cfg, params, p + "/norm2")
        up = h2 @ params[f"{p}/mlp/w_up"]
        if cfg["activation"] == "swiglu":
            act = F.silu(h2 @ params[f"{p}/mlp/w_gate"]) * up
        elif cfg["activation"] == "gelu":
            act = F.gelu(up, approximate="tanh")
        else:
            act = torch.relu(up)
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

    rope, _, KVH = _options(cfg)
    params = {"embed/wte": normal(V, D)}
    if not rope:
        params["embed/wpe"] = normal(T, D)
    norms = [f"layer{l}/norm{i}" for l in range(cfg["n_layers"]) for i in (1, 2)] + ["final_norm"]
    for n in norms:
        params[n + "/g"] = torch.ones(D, requires_grad=True)
        if cfg["norm"] == "layernorm":
            params[n + "/b"] = torch.zeros(D, requires_grad=True)
    KV = KVH * (D // cfg["n_heads"])
    for l in range(cfg["n_layers"]):
        for w, width in (("wq", D), ("wk", KV), ("wv", KV), ("wo", D)):
            params[f"layer{l}/attn/{w}"] = normal(D, width)
        if cfg["activation"] == "swiglu":
            params[f"layer{l}/mlp/w_gate"] = normal(D, F_)
        params[f"layer{l}/mlp/w_up"] = normal(D, F_)
        params[f"layer{l}/mlp/w_down"] = normal(F_, D)
    if not cfg["tied_embeddings"]:
        params["lm_head"] = normal(D, V)
    return params
