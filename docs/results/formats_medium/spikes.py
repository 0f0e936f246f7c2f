#!/usr/bin/env python3
"""Activation spikes in a profile, per forward GEMM input, and what recipes decided.

Usage: spikes.py PROFILE.csv [RECIPE.yaml ...]
Prints a markdown table of the forward activation inputs, highest crest factor
(absmax / rms, max over the logged steps over mean rms) first, with their SQNR in int8
per channel, per-tensor FP8 E4M3 and MXFP8 E4M3, their rank in each (1 = lowest of
the forward activation inputs) and each recipe's decision for the GEMM. Standard
library only (plain python3).
"""
import csv
import re
import sys

FORMATS = [("int8", "int8:channel:rtn"), ("fp8", "e4m3:tensor:rtn"), ("mxfp8", "e4m3:block32:rtn:scale=e8m0")]


def decisions(path):
    out, label = {}, None
    for line in open(path):
        m = re.match(r"\s*- label: (.*)$", line)
        if m:
            label = m.group(1).strip()
        m = re.match(r"\s*decision: (\S+)", line)
        if m and label:
            out[label] = m.group(1)
            label = None
    return out


def main():
    rows = {}
    for r in csv.DictReader(open(sys.argv[1])):
        if r["direction"] != "fwd" or r["role"] != "activation":
            continue
        key = (r["label"], r["side"])
        e = rows.setdefault(key, {"crest": float(r["absmax"]) / max(float(r["rms"]), 1e-30),
                                  "absmax": float(r["absmax"]), "tensor": r["tensor"]})
        for name, fmt in FORMATS:
            if r["format"] == fmt:
                e[name] = float(r["sqnr_mean"])
    rows = {k: v for k, v in rows.items() if all(n in v for n, _ in FORMATS)}
    for name, _ in FORMATS:
        for rank, key in enumerate(sorted(rows, key=lambda k: rows[k][name]), 1):
            rows[key][name + "_rank"] = rank
    recipes = [(p.split("/")[-1].replace(".yaml", ""), decisions(p)) for p in sys.argv[2:]]
    head = "| GEMM input | tensor | absmax / rms | " + " | ".join(f"{n} SQNR (rank)" for n, _ in FORMATS)
    head += "".join(f" | {name}" for name, _ in recipes) + " |"
    print(f"{len(rows)} forward activation inputs, highest crest factor first\n")
    print(head)
    print("|" + "---|" * (3 + len(FORMATS) + len(recipes)))
    for key in sorted(rows, key=lambda k: -rows[k]["crest"]):
        e = rows[key]
        cells = [f"{key[0]} {key[1]}", e["tensor"], f"{e['crest']:.1f}"]
        cells += [f"{e[n]:.4g} ({e[n + '_rank']})" for n, _ in FORMATS]
        cells += [d.get(key[0], "-") for _, d in recipes]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
