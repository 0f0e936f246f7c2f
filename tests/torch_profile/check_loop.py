#!/usr/bin/python3
"""The collector in the training loops users write: what counts as a step, and which
GEMMs exist. Each case's profile is compared with a reference profile of the same
weights and batches (round-to-nearest statistics to 1e-6 relative, the same GEMMs):

  - activation checkpointing, reentrant and not: each layer's forward GEMM once;
  - evaluation forwards under torch.no_grad() between training steps: not steps;
  - warmup: the steps before it are not profiled;
  - the hooks come off when the step after the last profiled one starts;
  - Hugging Face's Conv1D (W [in, out], y = x W + b) gives the statistics of the
    nn.Linear holding W^T;
  - a frozen weight has no wgrad GEMM, a layer whose input needs no gradient no dgrad;
  - a weight tied to an embedding (GPT-2's lm_head) is profiled as the Linear's weight.

With --metrics every profile also has the metrics' statistics (metrics=True,
outputs=True), and their round-to-nearest values are compared the same way: each
operand's bias-aware SQNR, each GEMM's output errors, reach and gradient_reach (which
reentrant checkpointing leaves out: it recomputes the layers outside the step's
autograd graph, and the collector must say so).

Usage: check_loop.py --work DIR [--metrics]
"""
import argparse
import os
import sys
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml
from torch.utils.checkpoint import checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
import pgq_profile  # noqa: E402

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
FORMATS = ["fp8", "mxfp8", "int4:block16:rtn:asym"]
failures = []
OPTIONS = {}  # more collect() options for every profile (--metrics)


class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.1)
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(x.size()[:-1] + (self.nf,))


class Block(nn.Module):
    def __init__(self, d, conv=False):
        super().__init__()
        self.up = Conv1D(4 * d, d) if conv else nn.Linear(d, 4 * d)
        self.down = Conv1D(d, 4 * d) if conv else nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(x)))


class Net(nn.Module):
    def __init__(self, d=32, vocab=50, conv=False, checkpointing=None):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, conv) for _ in range(2))
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        self.checkpointing = checkpointing

    def forward(self, ids):
        x = self.wte(ids)
        for block in self.blocks:
            if self.checkpointing is None:
                x = block(x)
            else:
                x = checkpoint(block, x, use_reentrant=self.checkpointing == "reentrant")
        return F.cross_entropy(self.lm_head(x).flatten(0, 1), ids.flatten())


def batches(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 50, (4, 16), generator=g) for _ in range(n)]


def profile(model, out, steps, loop, warned=None, **options):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pgq_profile.collect(model, formats=FORMATS, steps=steps, out=out, **dict(OPTIONS, **options)) as collector:
            loop(model)
    if warned is not None:
        warned.extend(str(w.message) for w in caught)
    with open(out) as f:
        return {g["label"]: g for g in yaml.load(f, Loader=LOADER)["gemms"]}, collector


def train(model, data):
    for ids in data:
        model(ids).backward()


def metric_pairs(a, b, reach=True):
    """The metrics' round-to-nearest values of GEMM records a and b, paired."""
    pairs = []
    for x, y in zip(a["operands"], b["operands"]):
        fy = {f["format"]: f for f in y["formats"]}
        pairs += [(f["bias_sqnr_mean"], fy[f["format"]]["bias_sqnr_mean"]) for f in x["formats"]
                  if ":sr" not in f["format"]]
    ea, eb = a.get("output_errors", []), b.get("output_errors", [])
    if [(e["lhs_format"], e["rhs_format"]) for e in ea] != [(e["lhs_format"], e["rhs_format"]) for e in eb] or \
            not ea:
        pairs.append((1.0, 2.0))
    pairs += [(x["sqnr_mean"], y["sqnr_mean"]) for x, y in zip(ea, eb) if ":sr" not in x["lhs_format"] + x["rhs_format"]]
    if reach:
        for key in ("reach", "gradient_reach"):
            pairs.append((a.get(key, -1.0), b.get(key, -2.0)))
    elif "reach" in a or "gradient_reach" in a:
        pairs.append((1.0, 2.0))
    return pairs


def same(name, ours, ref, rename=lambda label: label, reach=True):
    ref = {rename(k): v for k, v in ref.items()}
    if set(ours) != set(ref):
        failures.append("{}: GEMMs {} vs {}".format(name, sorted(set(ours) ^ set(ref)), ""))
        return
    worst = 0.0
    for label, g in ours.items():
        r = ref[label]
        for a, b in zip(g["operands"], r["operands"]):
            pairs = [(a["absmax"], b["absmax"]), (a["rms"], b["rms"])]
            fb = {f["format"]: f for f in b["formats"]}
            pairs += [(f[k], fb[f["format"]][k]) for f in a["formats"] if ":sr" not in f["format"]
                      for k in ("sqnr_mean", "sqnr_min", "underflow_fraction", "clipped_fraction")]
            if a.get("scaling") != b.get("scaling"):
                pairs.append((1.0, 2.0))
            for x, y in pairs:
                d = abs(x - y) / max(abs(x), abs(y), 1e-30)
                worst = max(worst, d)
                if d > 1e-6:
                    failures.append("{}: {} {}: {} vs {}".format(name, label, a["side"], x, y))
                    return
        if OPTIONS:
            for x, y in metric_pairs(g, r, reach):
                d = abs(x - y) / max(abs(x), abs(y), 1e-30)
                worst = max(worst, d)
                if d > 1e-6:
                    failures.append("{}: {} metrics: {} vs {}".format(name, label, x, y))
                    return
    print("ok   {:<52} {} GEMMs, largest difference {:.2g}".format(name, len(ours), worst))


def unusual_steps(out, fresh, data):
    """Steps that are not one forward and one backward through every Linear: an output
    without gradient, two backwards, no Linear needing a gradient, all-zero operands."""
    # An output the loss does not read (BERT's pooler) gets no gradient: its backward
    # GEMMs are left out, the steps count (session 15: every step was dropped). A second
    # backward through one forward (retain_graph=True) keeps the first's statistics.
    class Pooled(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.pooler = nn.Linear(8, 8), nn.Linear(8, 8)

        def forward(self, x):
            h = self.body(x)
            return h, self.pooler(h[:, 0])
    torch.manual_seed(0)
    pooled, caught = Pooled(), []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pgq_profile.collect(pooled, steps=2, out=out, **OPTIONS):
            for _ in range(2):
                h, _ = pooled(torch.randn(4, 3, 8, requires_grad=True))
                h.pow(2).mean().backward()
    with open(out) as f:
        got = sorted(g["label"] for g in yaml.load(f, Loader=LOADER)["gemms"])
    if got != ["body", "body:dgrad", "body:wgrad", "pooler"] or not any("pooler" in str(w.message) for w in caught):
        failures.append("an output without gradient: GEMMs {}, warnings {}".format(got, [str(w.message) for w in caught]))
    else:
        print("ok   {:<52} pooler forward only".format("an output the loss does not read"))
    torch.manual_seed(0)
    twice = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pgq_profile.collect(twice, steps=2, out=out, **OPTIONS):
            for _ in range(2):
                y = twice(torch.randn(5, 8, requires_grad=True))
                y.pow(2).mean().backward(retain_graph=True)
                y.sum().backward()
    with open(out) as f:
        got = len(yaml.load(f, Loader=LOADER)["gemms"])
    if got != 6 or not any("second backward" in str(w.message) for w in caught):
        failures.append("two backwards per forward: {} GEMMs, warnings {}".format(got, [str(w.message) for w in caught]))
    else:
        print("ok   {:<52} 6 GEMMs, the second backward said".format("two backwards through one forward"))

    # No Linear needs a gradient (BitFit: a frozen weight, its input without one): the
    # backward still ran, so the step counts (session 15: "no complete training step").
    torch.manual_seed(0)
    bitfit = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8))
    bitfit[0].weight.requires_grad_(False)
    with pgq_profile.collect(bitfit, steps=2, out=out, **OPTIONS):
        for _ in range(2):
            bitfit(torch.randn(4, 8)).pow(2).mean().backward()
    with open(out) as f:
        got = sorted(g["label"] for g in yaml.load(f, Loader=LOADER)["gemms"])
    if got != ["0"]:
        failures.append("no Linear needing a gradient: GEMMs {}".format(got))
    else:
        print("ok   {:<52} the forward GEMM".format("no Linear needing a gradient (BitFit)"))

    # All-zero operands in NVFP4 (LoRA's zero-initialized B, a loss scaled by 0): their
    # zeros can be -0.0 (a Hadamard sign flip, 0 times a negative gradient), which once
    # gave the e4m3 scale 448 * 6 / -0 = -inf, NaN statistics and no profile.
    model = fresh()
    with torch.no_grad():
        model.blocks[0].down.weight.zero_()
    try:
        with pgq_profile.collect(model, formats=["nvfp4"], steps=2, out=out):
            for ids in data[:2]:
                (model(ids) * 0.0).backward()
        with open(out) as f:
            zero = {g["label"]: g for g in yaml.load(f, Loader=LOADER)["gemms"]}
        print("ok   {:<52} {} GEMMs".format("all-zero operands in nvfp4 (a zero weight, a zero loss)", len(zero)))
    except pgq_profile.ProfileError as e:
        failures.append("all-zero operands in nvfp4: {}".format(e))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--metrics", action="store_true", help="profile the metrics' statistics too")
    args = parser.parse_args()
    if args.metrics:
        OPTIONS.update(metrics=True, outputs=True)
    os.makedirs(args.work, exist_ok=True)
    torch.set_num_threads(1)
    out = os.path.join(args.work, "p.yaml")
    data = batches(3)

    def fresh(**kw):
        torch.manual_seed(0)
        return Net(**kw)

    ref, _ = profile(fresh(), out, 3, lambda m: train(m, data))
    expected = {"{}{}".format(p, s) for p in ("blocks.0.up", "blocks.0.down", "blocks.1.up", "blocks.1.down",
                                              "lm_head") for s in ("", ":dgrad", ":wgrad")}
    if set(ref) != expected:
        failures.append("plain loop: GEMMs {}".format(sorted(ref)))
    for kind in ("reentrant", "non-reentrant"):
        warned = []
        ours, _ = profile(fresh(checkpointing=kind), out, 3, lambda m: train(m, data), warned)
        same("activation checkpointing ({})".format(kind), ours, ref, reach=kind != "reentrant")
        if args.metrics and kind == "reentrant" and not any("reentrant activation checkpointing" in w for w in warned):
            failures.append("reentrant checkpointing: no warning that the reach is left out ({})".format(warned))

    def with_eval(m):
        for ids in data:
            with torch.no_grad():
                m(ids)
            m(ids).backward()
            with torch.no_grad():
                m(batches(1, seed=7)[0])
    ours, _ = profile(fresh(), out, 3, with_eval)
    same("evaluation forwards between steps", ours, ref)

    ours, _ = profile(fresh(), out, 3, lambda m: train(m, batches(2, seed=5) + data), warmup=2)
    same("warmup=2", ours, ref)

    # Step times: a step runs from its forward to the next one's, so the 40 ms each step
    # sleeps after its backward count; the warmup steps are the plain ones (step_ms), the
    # profiled ones give metrics_step_ms (written with the metrics' statistics only).
    def sleepy(m):
        for ids in batches(2, seed=5) + data:
            m(ids).backward()
            time.sleep(0.04)
    profile(fresh(), out, 3, sleepy, warmup=2)
    with open(out) as f:
        run = yaml.load(f, Loader=LOADER)["run"]
    plain, profiled = run["step_ms"], run.get("metrics_step_ms")
    if plain < 40 or (OPTIONS and (profiled is None or profiled < 40)) or (not OPTIONS and "metrics" in run):
        failures.append("step times: step_ms {}, metrics_step_ms {} (each step sleeps 40 ms; metrics_step_ms only "
                        "with metrics)".format(plain, profiled))
    else:
        print("ok   {:<52} step_ms {:.1f}, metrics_step_ms {}".format(
            "step times (40 ms sleep per step)", plain, "{:.1f}".format(profiled) if profiled else "not written"))

    def longer(m):
        train(m, data)
        train(m, batches(2, seed=9))  # the first of these forwards takes the hooks off
        if collector_of[0]._handles:
            failures.append("the hooks are still on after the last profiled step")
    collector_of = []
    model = fresh()
    c = pgq_profile.collect(model, formats=FORMATS, steps=3, out=out, **OPTIONS)
    collector_of.append(c)
    with c:
        longer(model)
    with open(out) as f:
        ours = {g["label"]: g for g in yaml.load(f, Loader=LOADER)["gemms"]}
    same("steps beyond the profiled ones", ours, ref)

    # Conv1D holding W^T of each Linear: the same GEMMs, the same statistics.
    linear = fresh()
    conv = fresh(conv=True)
    with torch.no_grad():
        for lb, cb in zip(linear.blocks, conv.blocks):
            for name in ("up", "down"):
                getattr(cb, name).weight.copy_(getattr(lb, name).weight.t())
                getattr(cb, name).bias.copy_(getattr(lb, name).bias)
    ref_linear, _ = profile(linear, out, 3, lambda m: train(m, data))
    ours, _ = profile(conv, out, 3, lambda m: train(m, data))
    same("Conv1D (W [in, out])", ours, ref_linear)

    # A frozen weight: no wgrad; the first layer's input needs no gradient when the
    # embedding is frozen too: no dgrad.
    model = fresh()
    model.blocks[1].down.weight.requires_grad_(False)
    model.wte.weight.requires_grad_(False)
    ours, _ = profile(model, out, 1, lambda m: train(m, data[:1]))
    missing = {"blocks.1.down:wgrad", "blocks.0.up:dgrad", "lm_head:wgrad"}
    if set(ours) != expected - missing:
        failures.append("frozen weights: GEMMs {} (expected all but {})".format(sorted(ours), sorted(missing)))
    else:
        print("ok   {:<52} no {}".format("frozen weights and inputs without gradients", ", ".join(sorted(missing))))
    tied = ours["lm_head"]["operands"][1]["tensor"]
    if tied != "wte.weight":
        failures.append("the tied lm_head weight is named {}, not wte.weight".format(tied))

    unusual_steps(out, fresh, data)

    for f in failures:
        print("FAIL " + f)
    print("{} failures".format(len(failures)) if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
