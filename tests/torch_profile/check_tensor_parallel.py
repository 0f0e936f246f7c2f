#!/usr/bin/python3
"""The collector under tensor parallelism (gloo, 2 processes on this CPU, tensor_parallel=2)
combines the devices' statistics as pgq's MPI stage (i) does (runtime/profile_collector.cc).

Each rank holds a Megatron shard of the LLaMA test model (tests/onnx/models.py, the same
weights): q, k, v, gate and up column-parallel (half the output features, half the query
and key/value heads), o and down row-parallel (half the input features, the partial
results summed by an all-reduce), the embedding, the norms and the head replicated. That
the sharded model computes the unsharded one's loss and gradients (within 1e-5) is
checked first. The reference is made without the collector's combination code: one
process holds both shards of every split layer as separate nn.Linear modules
(`attn.q.shards.0`, `.1`) doing the same arithmetic, and is profiled with
tensor_parallel=1, one profile per step; this script combines the shards' records as
stage (i) does, and the 2-process profile must equal that within 1e-6 relative:

  - per operand and format: the means over devices and steps (absmax_mean, rms,
    fractions, SQNR, MSE, bias-aware SQNR), the min and max of SQNR, absmax the max;
  - the scaling record computed per device from its own absmax series, clip fractions
    averaged over the devices and worst ratios maxed;
  - gemm_shape, flops and bytes the global (unsharded) GEMM's, device_shape and operand
    shapes a device's (its shard's), sharding and devices; labels, directions, layers
    and tensor names those of the unsharded model's profile;
  - with --metrics (metrics=True, outputs=True): each round-to-nearest output error's
    SQNR per step from the devices' parts together (sum of their mean squares over the
    sum of their mean square errors), then its mean and min over the steps; reach and
    gradient_reach over the whole layers (a GEMM reaches a weight gradient when any
    device's part reaches any part of it; elements of the global GEMM, squared norms
    elements x the combined rms^2), and reach equal to the unsharded model's.

Round-to-nearest formats only (stochastic rounding draws other bits). With --pgq, also
`pgq recipe --explain` on the profile: exit 0, and the roofline used the per-device
shapes.

Usage: check_tensor_parallel.py --work DIR [--metrics] [--pgq build/pgq]
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "onnx"))
import models  # noqa: E402
import pgq_profile  # noqa: E402
from pgq_profile.quant import SQNR_CAP  # noqa: E402

# libyaml's parser when there is one: the pure-Python one takes seconds per profile.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

FORMATS = ["fp8", "mxfp8", "int4:block16:rtn:asym"]
STEPS = 2
DEVICES = 2
# How Megatron splits each layer of the test model (its modules are attn.q, k, v, o and
# mlp.gate, up, down: Hugging Face's q_proj ... down_proj), and the collector's sharding.
KINDS = {"q": "column", "k": "column", "v": "column", "o": "row", "gate": "column", "up": "column", "down": "row"}
SHARDING = {r"\.attn\.[qkv]$|\.mlp\.(gate|up)$": "column", r"\.attn\.o$|\.mlp\.down$": "row"}
SHARD = re.compile(r"\.shards\.([0-9]+)(?=$|[:.#])")


def batch(step):
    """Step `step`'s batch (input_ids, labels), the same on every device."""
    g = torch.Generator().manual_seed(100 + step)
    stream = torch.randint(0, models.VOCAB["llama"], (models.BATCH, models.SEQ + 1), generator=g)
    return stream[:, :-1].contiguous(), stream[:, 1:].contiguous()


# ---------------------------------------------------------------- the sharded model

class Copy(torch.autograd.Function):
    """Megatron's f: a column-parallel layer's input; forward identity, backward the sum
    of the devices' input gradients."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(grad)
        return grad


class Reduce(torch.autograd.Function):
    """Megatron's g: a row-parallel layer's output; forward the sum of the devices'
    partial results, backward identity."""

    @staticmethod
    def forward(ctx, partial):
        whole = partial.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(whole)
        return whole

    @staticmethod
    def backward(ctx, grad):
        return grad


class Fork(torch.autograd.Function):
    """Copy for every device in one process (the reference): one view of x per device,
    their gradients summed in the backward before x's other gradients join them, as
    the all-reduce sums them."""

    @staticmethod
    def forward(ctx, x, devices):
        return tuple(x.view_as(x) for _ in range(devices))

    @staticmethod
    def backward(ctx, *grads):
        total = grads[0]
        for g in grads[1:]:
            total = total + g
        return total, None


class Shards(nn.Module):
    """The devices' shards of one split layer as nn.Linear modules of their own (the
    reference process holds every device's)."""

    def __init__(self, linears):
        super().__init__()
        self.shards = nn.ModuleList(linears)


def split_linear(linear, kind, device):
    """Device `device`'s shard of `linear`: half its output features (column) or its
    input features (row), as a new nn.Linear."""
    w = linear.weight.detach()
    dim = 0 if kind == "column" else 1
    size = w.shape[dim] // DEVICES
    part = w.narrow(dim, device * size, size).clone()
    shard = nn.Linear(part.shape[1], part.shape[0], bias=False)
    shard.weight = nn.Parameter(part)
    return shard


class Parallel(nn.Module):
    """A module whose column and row layers are split over DEVICES devices, holding the
    shards of `parts`: [rank] in a tensor-parallel process (the layers keep their module
    paths), every device in the reference process (`<layer>.shards.<device>`)."""

    def __init__(self, full, names, parts):
        super().__init__()
        self.parts = list(parts)
        for name in names:
            shards = [split_linear(getattr(full, name), KINDS[name], d) for d in self.parts]
            setattr(self, name, shards[0] if len(shards) == 1 else Shards(shards))

    def layer(self, name, i):
        m = getattr(self, name)
        return m.shards[i] if isinstance(m, Shards) else m

    def forward(self, x):
        if len(self.parts) == 1:
            return Reduce.apply(self.part(Copy.apply(x), 0))
        inputs = Fork.apply(x, len(self.parts))
        partials = [self.part(inputs[i], i) for i in range(len(self.parts))]
        total = partials[0]
        for p in partials[1:]:
            total = total + p
        return total


class Attention(Parallel):
    """LlamaAttention over DEVICES devices: each computes n_heads / DEVICES query heads and
    n_kv_heads / DEVICES key/value heads (those its q, k and v rows hold)."""

    def __init__(self, full, parts):
        super().__init__(full, ("q", "k", "v", "o"), parts)
        self.heads, self.kv_heads = full.n_heads // DEVICES, full.n_kv_heads // DEVICES
        self.head_dim = full.head_dim
        self.rotary = full.rotary

    def part(self, x, i):
        b, t, _ = x.shape
        hd = self.head_dim
        q = self.layer("q", i)(x).view(b, t, self.heads, hd).transpose(1, 2)
        k = self.layer("k", i)(x).view(b, t, self.kv_heads, hd).transpose(1, 2)
        v = self.layer("v", i)(x).view(b, t, self.kv_heads, hd).transpose(1, 2)
        cos, sin = self.rotary(t)
        q = q * cos + models.rotate_half(q) * sin
        k = k * cos + models.rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        k, v = models.repeat_kv(k, rep), models.repeat_kv(v, rep)
        att = (q @ k.transpose(2, 3)) / math.sqrt(hd)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        att = F.softmax(torch.where(causal, att, torch.tensor(float("-inf"))), dim=-1)
        return self.layer("o", i)((att @ v).transpose(1, 2).reshape(b, t, -1))


class Mlp(Parallel):
    def __init__(self, full, parts):
        super().__init__(full, ("gate", "up", "down"), parts)

    def part(self, x, i):
        return self.layer("down", i)(F.silu(self.layer("gate", i)(x)) * self.layer("up", i)(x))


def sharded(parts):
    """The LLaMA test model with its layers split over DEVICES devices, holding `parts`'
    shards; the embedding, norms and head replicated."""
    model = models.build("llama")
    for block in model.blocks:
        block.attn = Attention(block.attn, parts)
        block.mlp = Mlp(block.mlp, parts)
    return model


def full_part(name, full_params):
    """The part of the unsharded model's tensor (`full_params` by parameter name) that
    sharded parameter `name` stands for: a split layer's device's slice (the device its
    `.shards.<d>` names, else this rank), a replicated parameter's whole."""
    m = SHARD.search(name)
    base = SHARD.sub("", name)
    whole = full_params[base]
    kind = KINDS.get(base.split(".")[-2])
    if kind is None or not base.startswith("blocks."):
        return whole
    device = int(m.group(1)) if m else dist.get_rank()
    dim = 0 if kind == "column" else 1
    size = whole.shape[dim] // DEVICES
    return whole.narrow(dim, device * size, size)


def agreement(model):
    """Worst relative difference of the sharded model's loss and gradients from the
    unsharded model's on batch 0: {"loss": r, "grad": r, "where": parameter}."""
    full = models.build("llama")
    ref = full(*batch(0))
    ref.backward()
    loss = model(*batch(0))
    loss.backward()
    grads = {n: p.grad for n, p in full.named_parameters()}
    out = {"loss": abs(float(loss) - float(ref)) / abs(float(ref)), "grad": 0.0, "where": ""}
    for name, p in model.named_parameters():
        expected = full_part(name, grads)
        r = float((p.grad - expected).norm() / expected.norm())
        if r >= out["grad"]:
            out["grad"], out["where"] = r, name
    model.zero_grad(set_to_none=True)
    return out


# ---------------------------------------------------------------- the runs

def worker(rank, init, work, options):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=DEVICES)
    model = sharded([rank])
    with open(os.path.join(work, "agreement_{}.json".format(rank)), "w") as f:
        json.dump(agreement(model), f)
    with pgq_profile.collect(model, formats=FORMATS, steps=STEPS, out=os.path.join(work, "tensor_parallel.yaml"),
                             tensor_parallel=DEVICES, sharding=SHARDING, **options):
        for step in range(STEPS):
            model(*batch(step)).backward()  # no optimizer step: the weights stay
    dist.barrier()
    dist.destroy_process_group()


def gemms_of(path):
    with open(path) as f:
        doc = yaml.load(f, Loader=LOADER)
    return doc, {g["label"]: g for g in doc["gemms"]}


def reference(work, options):
    """One profile per step of the model holding every device's shards, the embedding
    gradient's rms per step, and the reach sets (sink labels, {GEMM: bits}) of its
    collector's autograd walk (None without the metrics)."""
    model = sharded(range(DEVICES))
    check = agreement(model)
    profiles, embed_rms, reach = [], [], None
    for step in range(STEPS):
        out = os.path.join(work, "reference_{}.yaml".format(step))
        collector = pgq_profile.collect(model, formats=FORMATS, steps=1, out=out, **options)
        with collector:
            model(*batch(step)).backward()
        profiles.append(gemms_of(out)[1])
        embed_rms.append(float(model.embed.weight.grad.double().pow(2).mean().sqrt()))
        model.zero_grad(set_to_none=True)
        if step == 0 and options:
            reach = collector._reach  # the single-process walk: labels of the shards
    return check, profiles, embed_rms, reach, model.embed.weight.numel()


def unsharded(work, options):
    model = models.build("llama")
    out = os.path.join(work, "unsharded.yaml")
    with pgq_profile.collect(model, formats=FORMATS, steps=STEPS, out=out, **options):
        for step in range(STEPS):
            model(*batch(step)).backward()
    return gemms_of(out)


# ---------------------------------------------------------------- the combination

def parts_of(label):
    """The reference's labels of the devices' parts of GEMM `label` (a replicated GEMM's
    devices each compute the whole)."""
    path, _, suffix = label.partition(":")
    if KINDS.get(path.split(".")[-1]) is None or not path.startswith("blocks."):
        return [label] * DEVICES
    return ["{}.shards.{}{}".format(path, d, ":" + suffix if suffix else "") for d in range(DEVICES)]


def sharding_of(label):
    path = label.split(":")[0]
    return KINDS[path.split(".")[-1]] if path.startswith("blocks.") else "replicated"


def mean(values):
    values = list(values)
    return sum(values) / len(values)


def combined_operand(per_step, parts, side):
    """Stage (i)'s combination of one operand over devices and steps: per_step[s][label]."""
    ops = [[per_step[s][p]["operands"][side] for s in range(STEPS)] for p in parts]  # [device][step]
    every = [o for device in ops for o in device]
    out = {"absmax": max(o["absmax"] for o in every)}
    for key in ("absmax_mean", "rms", "zero_fraction", "nonfinite_fraction"):
        out[key] = mean(o[key] for o in every)
    out["formats"] = {}
    for f in every[0]["formats"]:
        text = f["format"]
        theirs = [next(x for x in o["formats"] if x["format"] == text) for o in every]
        stats = {key: mean(t.get(key, 0.0) for t in theirs)
                 for key in ("sqnr_mean", "mse", "underflow_fraction", "clipped_fraction", "bias_sqnr_mean")}
        stats["sqnr_min"] = min(t["sqnr_min"] for t in theirs)
        stats["sqnr_max"] = max(t["sqnr_max"] for t in theirs)
        out["formats"][text] = stats
    # Each device scales its own part: its own series; fractions averaged, worst ratios maxed.
    per_device = [pgq_profile.profile_file.scaling_stats([o["absmax"] for o in device], 16) for device in ops]
    scaling = dict(per_device[0])
    scaling["delayed_clip_fraction"] = mean(s["delayed_clip_fraction"] for s in per_device)
    scaling["delayed_worst_ratio"] = max(s["delayed_worst_ratio"] for s in per_device)
    out["scaling"] = scaling
    return out


def combined_errors(per_step, parts):
    """Each output error pair's (sqnr_mean, sqnr_min) over the steps, a step's SQNR that
    of the devices' parts together: sum of mean squares (the result's rms^2) over the
    sum of mses (mean square / the part's SQNR)."""
    out = []
    for i, e in enumerate(per_step[0][parts[0]]["output_errors"]):
        sqnrs = []
        for s in range(STEPS):
            ms = [per_step[s][p]["operands"][2]["rms"] ** 2 for p in parts]
            mse = [m / per_step[s][p]["output_errors"][i]["sqnr_mean"] for m, p in zip(ms, parts)]
            sqnrs.append(min(sum(ms) / sum(mse), SQNR_CAP) if sum(mse) > 0 else SQNR_CAP)
        out.append((e["lhs_format"], e["rhs_format"], mean(sqnrs), min(sqnrs)))
    return out


def expected_reach(labels, per_step, expected, reach, embed_rms, embed_elements):
    """{GEMM label: (reach, gradient_reach)} over the whole layers, from the reference's
    shard-level reach sets."""
    sink_labels, bits = reach
    whole = [SHARD.sub("", s) for s in sink_labels]
    sinks = list(dict.fromkeys(whole))
    elements, squares = {}, {}
    for sink in sinks:
        if sink + ":wgrad" in expected:
            shape = per_step[0][parts_of(sink + ":wgrad")[0]]["gemm_shape"]
            elements[sink] = float(shape[0] * shape[1] * shape[3] * (DEVICES if sharding_of(sink) != "replicated"
                                                                     else 1))
            rms = expected[sink + ":wgrad"]["operands"][2]["rms"]
        else:
            elements[sink], rms = float(embed_elements), mean(embed_rms)
        squares[sink] = elements[sink] * rms * rms
    out = {}
    for label in labels:
        reached = set()
        for p in dict.fromkeys(parts_of(label)):
            reached |= {whole[i] for i in range(len(sink_labels)) if bits[p] >> i & 1}
        out[label] = (sum(elements[s] for s in reached) / sum(elements.values()),
                      sum(squares[s] for s in reached) / sum(squares.values()))
    return out


# ---------------------------------------------------------------- the checks

def shape_text(s):
    return "{}x{},{},{}".format(*s) if s[0] > 1 else "{},{},{}".format(*s[1:])


def check_recipe(pgq, path, gemms, failures):
    """pgq recipe --explain on the tensor-parallel profile: exit 0, and the roofline's
    shapes each GEMM's device_shape."""
    cmd = [pgq, "recipe", "--profile", path, "--hardware", "h100-sxm", "--policy", "F+B", "--explain",
           "-o", os.path.join(os.path.dirname(path), "recipe.yaml")]
    run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    if run.returncode != 0:
        failures.append("{} exited {}:\n{}".format(" ".join(cmd), run.returncode, run.stdout))
        return
    text = run.stdout
    if "tensor parallel over {} devices; the roofline used per-device shapes".format(DEVICES) not in text:
        failures.append("pgq recipe --explain does not say it used per-device shapes:\n" + text)
    for kind in ("column", "row", "replicated"):
        count = sum(1 for g in gemms.values() if g["sharding"] == kind)
        if not re.search(r"^ +{} +{} GEMMs, e\.g\. ".format(kind, count), text, re.M):
            failures.append("pgq recipe --explain: no line '{} {} GEMMs, e.g. ...'".format(kind, count))
    estimates = text.split("per-GEMM estimates", 1)[-1]
    for label, g in gemms.items():
        m = re.search(r"^ +{} +(\S+) ".format(re.escape(label)), estimates, re.M)
        if not m or m.group(1) != shape_text(g["device_shape"]):
            failures.append("pgq recipe --explain: {} estimated at {}, its device_shape is {}".format(
                label, m.group(1) if m else "(no line)", shape_text(g["device_shape"])))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--metrics", action="store_true", help="with the metrics' statistics")
    parser.add_argument("--pgq", help="the pgq binary: also check pgq recipe --explain on the profile")
    args = parser.parse_args()
    options = {"metrics": True, "outputs": True} if args.metrics else {}
    os.makedirs(args.work, exist_ok=True)
    torch.set_num_threads(1)
    init = "file://" + os.path.join(tempfile.mkdtemp(dir=args.work), "store")
    mp.spawn(worker, args=(init, args.work, options), nprocs=DEVICES, join=True)
    path = os.path.join(args.work, "tensor_parallel.yaml")
    doc, gemms = gemms_of(path)
    check, per_step, embed_rms, reach, embed_elements = reference(args.work, options)
    _, plain = unsharded(args.work, options)
    failures = []

    checks = [("reference process", check)]
    for rank in range(DEVICES):
        with open(os.path.join(args.work, "agreement_{}.json".format(rank))) as f:
            checks.append(("rank {}".format(rank), json.load(f)))
    for who, c in checks:
        if c["loss"] > 1e-5 or c["grad"] > 1e-5:
            failures.append("the sharded model ({}) is not the unsharded one: loss {:.3g} relative, gradient of {} "
                            "{:.3g}".format(who, c["loss"], c["where"], c["grad"]))
    if doc["run"].get("processes") != DEVICES:
        failures.append("run.processes is {}, expected {}".format(doc["run"].get("processes"), DEVICES))
    if list(gemms) != list(plain):
        failures.append("labels differ from the unsharded model's: {} vs {}".format(list(gemms), list(plain)))

    def close(a, b, what):
        if abs(a - b) > 1e-6 * max(abs(a), abs(b), 1e-30):
            failures.append("{}: {} (2 devices) vs {} (expected)".format(what, a, b))

    def same(a, b, what):
        if a != b:
            failures.append("{}: {} (2 devices) vs {} (expected)".format(what, a, b))

    expected = {label: {"operands": [combined_operand(per_step, parts_of(label), side)
                                     for side in range(len(g["operands"]))]}
                for label, g in gemms.items()}
    reaches = {}
    if args.metrics and reach is None:
        failures.append("the reference profile has no reach (the collector's warning says why)")
    elif reach:
        reaches = expected_reach(list(gemms), per_step, expected, reach, embed_rms, embed_elements)
    compared = 0
    for label, g in gemms.items():
        one = plain.get(label)
        shard = per_step[0][parts_of(label)[0]]
        if one is None:
            continue
        for key in ("direction", "layer", "grad_of", "gemm_shape", "flops", "bytes"):
            same(g.get(key), one.get(key), "{} {} (unsharded)".format(label, key))
        same(g["sharding"], sharding_of(label), label + " sharding")
        same(g["devices"], DEVICES, label + " devices")
        same(g["device_shape"], shard["gemm_shape"], label + " device_shape (a device's GEMM)")
        for side, o in enumerate(g["operands"]):
            where = "{} {}".format(label, o["side"])
            same(o["tensor"], one["operands"][side]["tensor"], where + " tensor (unsharded)")
            for key in ("side", "role", "shape", "contract_dims", "batch_dims"):
                same(o[key], shard["operands"][side][key], "{} {} (a device's)".format(where, key))
            want = expected[label]["operands"][side]
            for key in ("absmax", "absmax_mean", "rms", "zero_fraction", "nonfinite_fraction"):
                close(o[key], want[key], where + " " + key)
            for f in o["formats"]:
                if ":sr" in f["format"]:
                    continue
                at = "{} {}".format(where, f["format"])
                for key, value in want["formats"][f["format"]].items():
                    close(f.get(key, 0.0), value, at + " " + key)
                compared += 1
            for key, value in want["scaling"].items():
                close(o["scaling"][key], value, where + " scaling." + key)
        if args.metrics:
            errors = combined_errors(per_step, parts_of(label))
            same([(e["lhs_format"], e["rhs_format"]) for e in g.get("output_errors", [])],
                 [e[:2] for e in errors], label + " output error pairs")
            for e, (lf, rf, sqnr_mean, sqnr_min) in zip(g.get("output_errors", []), errors):
                if ":sr" in lf + rf:
                    continue
                at = "{} output {} x {}".format(label, lf, rf)
                close(e["sqnr_mean"], sqnr_mean, at + " sqnr_mean")
                close(e["sqnr_min"], sqnr_min, at + " sqnr_min")
                compared += 1
            if label not in reaches:
                continue
            if "reach" not in g or "gradient_reach" not in g:
                failures.append("{}: no reach or gradient_reach".format(label))
                continue
            close(g["reach"], reaches[label][0], label + " reach")
            close(g["gradient_reach"], reaches[label][1], label + " gradient_reach")
            close(g["reach"], one["reach"], label + " reach (unsharded)")
    if args.pgq:
        check_recipe(args.pgq, path, gemms, failures)
    for f in failures[:30]:
        print("FAIL " + f)
    print("{} GEMMs, {} round-to-nearest operand formats compared: {}".format(
        len(gemms), compared, "{} differences".format(len(failures)) if failures else "OK"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
