"""Small reference transformers in plain torch.nn, exported to ONNX for pgq's importer.

Each architecture is written the way its usual PyTorch implementation writes it (GPT-2
as nanoGPT, LLaMA as Hugging Face's modeling_llama, BERT as a post-norm encoder), so the
exported graphs contain the op patterns real exports contain: the fused qkv split, the
tril mask buffer, tanh and erf GELU, both RMSNorm spellings, rotary tables computed from
an inv_freq buffer, grouped-query attention by expand + reshape, SwiGLU.

build(arch) returns a LanguageModel: (input_ids) -> logits [B, T, V], or
(input_ids, labels) -> scalar mean cross-entropy over every position.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = {"gpt2": 96, "llama": 80, "bert": 64}
D_MODEL = {"gpt2": 48, "llama": 64, "bert": 32}
N_HEADS = {"gpt2": 4, "llama": 4, "bert": 2}
N_LAYERS = 2
BATCH = 2
SEQ = 16


class LanguageModel(nn.Module):
    """forward(input_ids) -> logits [B, T, V]; forward(input_ids, labels) -> mean
    cross-entropy over every position. One class for both, so that the loss variant's
    parameters have the same names as the logits variant's."""

    # "sce": F.cross_entropy, exported as SoftmaxCrossEntropyLoss; "nll": log_softmax then
    # nll_loss, exported as LogSoftmax + NegativeLogLikelihoodLoss.
    loss_form = "sce"

    def forward(self, input_ids, labels=None):
        logits = self.logits(input_ids)
        if labels is None:
            return logits
        v = logits.shape[-1]
        if self.loss_form == "nll":
            # The reshape between them keeps the exporter from fusing the pair back into
            # SoftmaxCrossEntropyLoss.
            return F.nll_loss(F.log_softmax(logits, dim=-1).reshape(-1, v), labels.view(-1))
        return F.cross_entropy(logits.view(-1, v), labels.view(-1))


# ---------------------------------------------------------------- GPT-2 (nanoGPT style)

class Gpt2Attention(nn.Module):
    def __init__(self, d, n_heads, seq):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d // n_heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q = q.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
        return self.proj(y)


class Gpt2Block(nn.Module):
    def __init__(self, d, n_heads, seq, gelu_approximate):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = Gpt2Attention(d, n_heads, seq)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate=gelu_approximate), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt2(LanguageModel):
    def __init__(self, vocab, d, n_heads=4, seq=None):
        super().__init__()
        seq = seq or SEQ
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        # Even blocks use the tanh approximation (GPT-2's own), odd ones the exact erf GELU.
        self.blocks = nn.ModuleList([Gpt2Block(d, n_heads, seq, ("tanh", "none")[i % 2]) for i in range(N_LAYERS)])
        self.ln_f = nn.LayerNorm(d)

    def logits(self, input_ids):
        t = input_ids.shape[1]
        pos = torch.arange(t, dtype=torch.long, device=input_ids.device)
        x = self.wte(input_ids) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.T  # tied output embedding


# ---------------------------------------------------------------- LLaMA (HF style)

class RmsNorm(nn.Module):
    def __init__(self, d, eps=1e-6, use_sqrt=False):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps
        self.use_sqrt = use_sqrt

    def forward(self, x):
        if self.use_sqrt:  # the spelling of some ports: divide by sqrt instead of rsqrt
            return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Rotary(nn.Module):
    def __init__(self, head_dim, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, t):
        pos = torch.arange(t, dtype=self.inv_freq.dtype)
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[None, None], emb.sin()[None, None]


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def repeat_kv(x, n_rep):
    b, h, t, hd = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, h, n_rep, t, hd).reshape(b, h * n_rep, t, hd)


class LlamaAttention(nn.Module):
    def __init__(self, d, n_heads, n_kv_heads):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, d // n_heads
        self.q = nn.Linear(d, n_heads * self.head_dim, bias=False)
        self.k = nn.Linear(d, n_kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(d, n_kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(n_heads * self.head_dim, d, bias=False)
        self.rotary = Rotary(self.head_dim)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = self.rotary(t)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.n_heads // self.n_kv_heads
        k, v = repeat_kv(k, rep), repeat_kv(v, rep)
        att = (q @ k.transpose(2, 3)) / math.sqrt(self.head_dim)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        att = torch.where(causal, att, torch.tensor(float("-inf")))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, -1)
        return self.o(y)


class LlamaMlp(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class LlamaBlock(nn.Module):
    def __init__(self, d, n_heads, n_kv_heads, use_sqrt):
        super().__init__()
        self.attn_norm = RmsNorm(d, use_sqrt=use_sqrt)
        self.attn = LlamaAttention(d, n_heads, n_kv_heads)
        self.mlp_norm = RmsNorm(d, use_sqrt=use_sqrt)
        self.mlp = LlamaMlp(d, 3 * d)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class Llama(LanguageModel):
    def __init__(self, vocab, d, n_heads=4, n_kv_heads=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        # Layer 1 spells RMSNorm with sqrt and a division.
        self.blocks = nn.ModuleList([LlamaBlock(d, n_heads, n_kv_heads, use_sqrt=i % 2 == 1) for i in range(N_LAYERS)])
        self.norm = RmsNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def logits(self, input_ids):
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


# ---------------------------------------------------------------- BERT-style encoder

class BertAttention(nn.Module):
    def __init__(self, d, n_heads):
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d // n_heads
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        hd = self.head_dim
        q = self.q(x).view(b, t, self.n_heads, hd).transpose(1, 2)
        k = self.k(x).view(b, t, self.n_heads, hd).transpose(1, 2)
        v = self.v(x).view(b, t, self.n_heads, hd).transpose(1, 2)
        att = F.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1)  # bidirectional
        return self.out((att @ v).transpose(1, 2).reshape(b, t, d))


class BertBlock(nn.Module):
    def __init__(self, d, n_heads):
        super().__init__()
        self.attn = BertAttention(d, n_heads)
        self.ln_attn = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))
        self.ln_mlp = nn.LayerNorm(d)

    def forward(self, x):
        x = self.ln_attn(x + self.attn(x))  # post-norm
        return self.ln_mlp(x + self.mlp(x))


class Bert(LanguageModel):
    def __init__(self, vocab, d, n_heads=2, seq=None):
        super().__init__()
        seq = seq or SEQ
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.ln_emb = nn.LayerNorm(d)
        self.blocks = nn.ModuleList([BertBlock(d, n_heads) for _ in range(N_LAYERS)])
        self.head = nn.Linear(d, vocab)

    def logits(self, input_ids):
        t = input_ids.shape[1]
        x = self.ln_emb(self.tok(input_ids) + self.pos(torch.arange(t, dtype=torch.long)))
        for block in self.blocks:
            x = block(x)
        return self.head(x)


# ---------------------------------------------------------------- losses and inputs

def logits_loss(logits, input_ids):
    """The loss pgq appends to a logits-only model: mean CE of each position predicting
    the next token (the last position predicts nothing)."""
    v = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, v), input_ids[:, 1:].reshape(-1))


ARCHS = ("gpt2", "llama", "bert")


def build(arch, seed=0):
    torch.manual_seed(seed)
    vocab, d = VOCAB[arch], D_MODEL[arch]
    model = {"gpt2": Gpt2, "llama": Llama, "bert": Bert}[arch](vocab, d, n_heads=N_HEADS[arch])
    # Norm gains start at one and biases at zero; perturb every 1-D parameter so that
    # a swapped gain and bias or a wrong broadcast shows in the gradients.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
        # nn.Embedding's N(0, 1) makes GPT-2's tied logits so large that the loss is ~30
        # and the softmax saturates; GPT-2 and BERT initialize embeddings with std 0.02.
        for m in model.modules():
            if isinstance(m, nn.Embedding):
                m.weight.normal_(0.0, 0.02)
    model.eval()
    return model


def make_inputs(arch, seed=1):
    """input_ids [B, T] int64 and labels = input_ids shifted left by one, the last
    position drawn at random."""
    g = torch.Generator().manual_seed(seed)
    vocab = VOCAB[arch]
    stream = torch.randint(0, vocab, (BATCH, SEQ + 1), generator=g, dtype=torch.long)
    return stream[:, :SEQ].contiguous(), stream[:, 1:].contiguous()
