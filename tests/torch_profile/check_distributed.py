#!/usr/bin/python3
"""The collector under torch.distributed (gloo, 2 processes on this CPU) combines the
statistics over the processes as pgq's MPI stage (i) does: each rank profiles its half
of every batch, and the profile rank 0 writes must equal the one made from the four
single-process profiles of each (rank, step) batch: means over all 4 of SQNR, MSE, rms
and the fractions, min and max over all, absmax the largest, and the scaling record from
each step's largest absmax over the ranks (the replicas share a scale). Round-to-nearest
formats only (stochastic rounding draws other bits); within 1e-6 relative.

With --metrics (metrics=True, outputs=True everywhere) also: the results' statistics as
the operands'; each bias-aware SQNR the mean over the 4; each round-to-nearest output
error's SQNR the mean over the 4 and its min the min; reach as one process's.

Usage: check_distributed.py --work DIR [--metrics]
"""
import argparse
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "onnx"))
import models  # noqa: E402
import pgq_profile  # noqa: E402

# libyaml's parser when there is one: the pure-Python one takes seconds per profile.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

FORMATS = ["fp8", "mxfp8", "int4:block16:rtn:asym"]
STEPS = 2


def batch(rank, step):
    """Rank `rank`'s half of step `step`'s batch (input_ids, labels)."""
    g = torch.Generator().manual_seed(100 + 10 * step + rank)
    stream = torch.randint(0, models.VOCAB["llama"], (1, models.SEQ + 1), generator=g)
    return stream[:, :-1].contiguous(), stream[:, 1:].contiguous()


def worker(rank, init, out, options):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    model = models.build("llama")
    with pgq_profile.collect(model, formats=FORMATS, steps=STEPS, out=out, **options):
        for step in range(STEPS):
            model(*batch(rank, step)).backward()  # no optimizer step: the weights stay
    dist.barrier()
    dist.destroy_process_group()


def single(work, rank, step, options):
    model = models.build("llama")
    out = os.path.join(work, "single_{}_{}.yaml".format(rank, step))
    with pgq_profile.collect(model, formats=FORMATS, steps=1, out=out, **options):
        model(*batch(rank, step)).backward()
    with open(out) as f:
        return {g["label"]: g for g in yaml.load(f, Loader=LOADER)["gemms"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--metrics", action="store_true", help="with the metrics' statistics")
    args = parser.parse_args()
    options = {"metrics": True, "outputs": True} if args.metrics else {}
    os.makedirs(args.work, exist_ok=True)
    torch.set_num_threads(1)
    out = os.path.join(args.work, "distributed.yaml")
    init = "file://" + os.path.join(tempfile.mkdtemp(dir=args.work), "store")
    mp.spawn(worker, args=(init, out, options), nprocs=2, join=True)
    with open(out) as f:
        doc = yaml.load(f, Loader=LOADER)
    combined = {g["label"]: g for g in doc["gemms"]}
    parts = {(r, s): single(args.work, r, s, options) for r in range(2) for s in range(STEPS)}
    failures = []
    if doc["run"].get("processes") != 2:
        failures.append("run.processes is {}, expected 2".format(doc["run"].get("processes")))

    def close(a, b, what):
        if abs(a - b) > 1e-6 * max(abs(a), abs(b), 1e-30):
            failures.append("{}: {} (2 ranks) vs {} (expected)".format(what, a, b))

    compared = 0
    for label, g in combined.items():
        for side, o in enumerate(g["operands"]):
            mine = [parts[key][label]["operands"][side] for key in sorted(parts)]
            where = "{} {}".format(label, o["side"])
            close(o["absmax"], max(p["absmax"] for p in mine), where + " absmax")
            for key in ("absmax_mean", "rms", "zero_fraction"):
                close(o[key], sum(p[key] for p in mine) / len(mine), where + " " + key)
            for f in o["formats"]:
                if ":sr" in f["format"]:
                    continue
                theirs = [next(x for x in p["formats"] if x["format"] == f["format"]) for p in mine]
                at = "{} {}".format(where, f["format"])
                for key in ("sqnr_mean", "mse", "underflow_fraction", "clipped_fraction") + (
                        ("bias_sqnr_mean",) if args.metrics else ()):
                    close(f[key], sum(t[key] for t in theirs) / len(theirs), at + " " + key)
                close(f["sqnr_min"], min(t["sqnr_min"] for t in theirs), at + " sqnr_min")
                close(f["sqnr_max"], max(t["sqnr_max"] for t in theirs), at + " sqnr_max")
                compared += 1
            series = [max(parts[(r, s)][label]["operands"][side]["absmax"] for r in range(2)) for s in range(STEPS)]
            expected = pgq_profile.profile_file.scaling_stats(series, 16)
            for key, value in expected.items():
                close(o["scaling"][key], value, where + " scaling." + key)
        if args.metrics:
            singles = [parts[key][label] for key in sorted(parts)]
            if "reach" not in g:
                failures.append("{}: no reach".format(label))
            else:
                close(g["reach"], singles[0]["reach"], label + " reach")
            for i, e in enumerate(g["output_errors"]):
                if ":sr" in e["lhs_format"] + e["rhs_format"]:
                    continue
                theirs = [p["output_errors"][i] for p in singles]
                at = "{} output {} x {}".format(label, e["lhs_format"], e["rhs_format"])
                close(e["sqnr_mean"], sum(t["sqnr_mean"] for t in theirs) / len(theirs), at + " sqnr_mean")
                close(e["sqnr_min"], min(t["sqnr_min"] for t in theirs), at + " sqnr_min")
                compared += 1
    for f in failures[:30]:
        print("FAIL " + f)
    print("{} GEMMs, {} round-to-nearest operand formats compared: {}".format(
        len(combined), compared, "{} differences".format(len(failures)) if failures else "OK"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
