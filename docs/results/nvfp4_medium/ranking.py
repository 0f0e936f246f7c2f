#!/usr/bin/env python3
"""Which GEMMs the profile puts last at 4 bits, and whether they are NVIDIA's last blocks.

Usage: ranking.py EVERY_RECIPE NVIDIA_RECIPE PGQ_RECIPE LAYERS [PROFILE]
EVERY_RECIPE: `pgq recipe` with every_gemm.yaml (every GEMM in NVFP4; its reasons carry
each GEMM's default metric: min SQNR forward, effect backward; lower = worse).
NVIDIA_RECIPE / PGQ_RECIPE: the two budget recipes; their kept block GEMMs are compared.
Prints, per direction, the ten lowest GEMMs, where the LM head (get_logits) ranks, and
how many of pgq's kept GEMMs fall in the blocks NVIDIA's rule keeps, against chance.
With PROFILE: where the logits gradient (the LM head's gradient operands) ranks among
every GEMM input by SQNR in each format with an e2m1 or FP8 element (the ranking in which
it came first at 8 bits, docs/RESULTS.md's formats section).
"""
import re
import sys
from collections import Counter

import yaml

METRIC = re.compile(r"(?:effect|min SQNR) ([0-9.e+-]+)")


def direction(label):
    return "bwd_dgrad" if ":dgrad" in label else "bwd_wgrad" if ":wgrad" in label else "fwd"


def block(label):
    m = re.match(r"layer(\d+)/", label)
    return int(m.group(1)) if m else None


def linear(label):  # a block's linear layer: what either budget recipe may keep
    return block(label) is not None and "/attn/scores" not in label and "/attn/av" not in label


def kept(path):
    return {e["label"] for e in yaml.safe_load(open(path))["gemms"] if e["decision"] == "keep"}


def main():
    every, nvidia, pgq, layers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    gemms = yaml.safe_load(open(every))["gemms"]
    metric = {e["label"]: float(METRIC.search(e["reason"]).group(1)) for e in gemms if METRIC.search(e["reason"])}
    missing = [e["label"] for e in gemms if e["label"] not in metric]
    if missing:
        sys.exit(f"{every}: no metric in the reasons of {', '.join(missing)}")
    nvidia_blocks = {block(l) for l in kept(nvidia) if linear(l)}
    pgq_kept = {l for l in kept(pgq) if linear(l)}
    print(f"NVIDIA's rule keeps blocks {sorted(nvidia_blocks)} of {layers}")
    for d, name in (("fwd", "min SQNR"), ("bwd_dgrad", "effect"), ("bwd_wgrad", "effect")):
        ranked = sorted((l for l in metric if direction(l) == d), key=lambda l: metric[l])
        print(f"\n{d} ({len(ranked)} GEMMs, by {name}, lowest first):")
        for i, l in enumerate(ranked[:10], 1):
            print(f"  {i:2d}. {l:28s} {metric[l]:10.4g}")
        lin = [l for l in ranked if linear(l)]
        print(f"  lowest linear GEMMs: " + ", ".join(lin[:10]))
        for i, l in enumerate(ranked, 1):
            if l.startswith("get_logits"):
                print(f"  LM head {l}: rank {i} of {len(ranked)} ({metric[l]:.4g})")
        mine = [l for l in pgq_kept if direction(l) == d]
        eligible = [l for l in ranked if linear(l)]
        inside = sum(block(l) in nvidia_blocks for l in mine)
        chance = len(mine) * sum(block(l) in nvidia_blocks for l in eligible) / max(len(eligible), 1)
        per_block = Counter(block(l) for l in mine)
        print(f"  pgq keeps {len(mine)}: {inside} in NVIDIA's blocks (chance {chance:.1f}); per block "
              + ", ".join(f"{b}: {per_block.get(b, 0)}" for b in range(layers)))
    if len(sys.argv) > 5:
        sqnr_ranks(sys.argv[5])


def sqnr_ranks(path):
    """Rank of the logits gradient among every GEMM input by SQNR, per profiled format."""
    operands = [(g["label"], o) for g in yaml.safe_load(open(path))["gemms"] for o in g["operands"]
                if o["side"] != "out"]
    names = sorted({f["format"] for _, o in operands for f in o["formats"]})
    print("\nlogits gradient by input SQNR (rank 1 = lowest of every GEMM input):")
    for name in names:
        if not name.startswith(("e2m1", "e4m3", "e5m2")):
            continue
        ranked = sorted(((f["sqnr_mean"], label, o["side"]) for label, o in operands for f in o["formats"]
                         if f["format"] == name))
        mine = [(i, s, l, side) for i, (s, l, side) in enumerate(ranked, 1)
                if l.startswith("get_logits:") and any(o["side"] == side and o["role"] == "gradient"
                                                        for lab, o in operands if lab == l)]
        lowest = ranked[0]
        print(f"  {name}: " + ", ".join(f"{l}:{side} rank {i} of {len(ranked)} ({s:.4g})" for i, s, l, side in mine)
              + f"; lowest {lowest[1]}:{lowest[2]} ({lowest[0]:.4g})")


if __name__ == "__main__":
    main()
