#!/usr/bin/python3
"""What python/pgq_profile costs: the time of a training step (forward, backward, AdamW)
of a GPT-2-124M-shaped model in PyTorch, plain and with the collector profiling it.

The model is Hugging Face's GPT-2 layout written out here (no transformers needed): 12
blocks of d_model 768, 12 heads, Conv1D projections (c_attn, c_proj, c_fc, mlp c_proj: W
stored [in, out]), a tied nn.Linear lm_head over 50257 tokens: 124M parameters, 49
linear modules, 147 GEMMs profiled.

    /usr/bin/python3 bench/torch_collector_overhead.py [--batch 1 --seq 512] [--steps 4]
        [--threads 2] [--formats fp8,mxfp8] [--layers 12] [--device cpu|cuda] [--metrics]

--metrics profiles the metrics' statistics too (collect(metrics=True, outputs=True), as
pgq's --profile-metrics --profile-outputs): bias-aware SQNRs, the results' statistics,
the output errors (a quantized GEMM per GEMM and format pair) and the reach.

Plain steps and profiled steps alternate in blocks of --steps (after a warmup step
each), so that a machine that gets busier or quieter affects both alike; the medians
are reported, and their ratio.
"""
import argparse
import math
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
import pgq_profile  # noqa: E402


class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: y = x @ W + b, W [nx, nf]."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf).normal_(0.0, 0.02))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        size = x.size()[:-1] + (self.nf,)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(d)
        self.attn = nn.Module()
        self.attn.c_attn = Conv1D(3 * d, d)
        self.attn.c_proj = Conv1D(d, d)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = nn.Module()
        self.mlp.c_fc = Conv1D(4 * d, d)
        self.mlp.c_proj = Conv1D(d, 4 * d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
        y = (F.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.attn.c_proj(y)
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    def __init__(self, vocab=50257, d=768, layers=12, heads=12, positions=1024):
        super().__init__()
        self.transformer = nn.Module()
        self.transformer.wte = nn.Embedding(vocab, d)
        self.transformer.wpe = nn.Embedding(positions, d)
        self.transformer.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.transformer.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied, as GPT-2
        for emb in (self.transformer.wte, self.transformer.wpe):
            nn.init.normal_(emb.weight, 0.0, 0.02)

    def forward(self, ids, labels):
        t = ids.shape[1]
        x = self.transformer.wte(ids) + self.transformer.wpe(torch.arange(t, device=ids.device))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per block")
    parser.add_argument("--blocks", type=int, default=2, help="blocks of plain and profiled steps")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--formats", default="", help="pgq_profile formats besides int8 per channel")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--metrics", action="store_true", help="also the metrics' statistics (metrics=True, "
                        "outputs=True)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    model = Gpt2(layers=args.layers).to(device)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, 50257, (args.batch, args.seq + 1), device=device)
    x, y = ids[:, :-1], ids[:, 1:]

    def step():
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        model(x, y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - start) * 1e3

    plain, profiled, writes = [], [], []
    out = os.path.join(tempfile.mkdtemp(prefix="pgq_profile_bench."), "profile.yaml")
    for _ in range(args.blocks):
        step()
        plain += [step() for _ in range(args.steps)]
        collector = pgq_profile.collect(model, formats=args.formats, steps=args.steps + 1, out=out,
                                        metrics=args.metrics, outputs=args.metrics)
        with collector:
            step()  # the first profiled step allocates the statistics' buffers
            profiled += [step() for _ in range(args.steps)]
            start = time.perf_counter()
        writes.append((time.perf_counter() - start) * 1e3)
    p, q = statistics.median(plain), statistics.median(profiled)
    print("GPT-2-124M-shaped ({} layers, {:.1f}M parameters, {} GEMMs profiled), batch {} x seq {}, {} threads, {}"
          .format(args.layers, params / 1e6, 3 * len(pgq_profile.linear_modules(model)), args.batch, args.seq,
                  args.threads, args.device))
    print("formats: int8:channel:rtn (+ int8:channel:sr on gradients){}; {}".format(
        ", " + args.formats if args.formats else "",
        "with the metrics' statistics (metrics=True, outputs=True)" if args.metrics else "SQNR statistics only"))
    print("plain step     median {:8.1f} ms  ({})".format(p, ", ".join("{:.0f}".format(v) for v in plain)))
    print("profiled step  median {:8.1f} ms  ({})".format(q, ", ".join("{:.0f}".format(v) for v in profiled)))
    print("ratio {:.2f}x; writing the profile: {:.0f} ms once".format(q / p, statistics.median(writes)))
    with open(out) as f:
        run = [line.strip() for line in f if line.startswith("  step_ms:") or line.startswith("  metrics_step_ms:")]
    print("the last profile's run record: {}".format(", ".join(run)))


if __name__ == "__main__":
    main()
