#!/usr/bin/env python3
"""The fine-tuning table of docs/RESULTS.md from the runs' own files.

Usage: finetune_table.py OUT  (the run.sh output directory with ft_<recipe>_<seed>/)
Loss: mean training loss over the last 40 steps (441-480); validation loss and bits
per byte of the last evaluation; the delta against bf16 of the same seed.
"""
import csv
import os
import sys

RECIPES = [("bf16", "bf16 (every GEMM)"), ("fp8_delayed", "FP8 E4M3/E5M2, delayed scaling (H 16, max), 219 GEMMs"),
           ("fp8_predicted", "FP8, delayed + predicted weight scales, 219 GEMMs"),
           ("mxfp8", "MXFP8 E4M3, block 32, 219 GEMMs"),
           ("mxfp8_bwd100", "MXFP8, backward threshold 100: logits GEMMs kept, 217 GEMMs")]


def summary(path):
    rows = list(csv.DictReader(open(os.path.join(path, "metrics.csv"))))
    last = [float(r["loss"]) for r in rows if 441 <= int(r["step"]) <= 480]
    evals = [r for r in rows if r["val_loss"]]
    ms = [float(r["step_ms"]) for r in rows]
    return sum(last) / len(last), float(evals[-1]["val_loss"]), float(evals[-1]["val_bpb"]), sorted(ms)[len(ms) // 2]


def main():
    out = sys.argv[1]
    seeds = sorted({d.rsplit("_", 1)[1] for d in os.listdir(out) if d.startswith("ft_") and not d.endswith(".log")})
    print("| recipe | seed | loss (steps 441-480) | vs bf16 | val loss | vs bf16 | val bpb |")
    print("|---|---|---|---|---|---|---|")
    for name, text in RECIPES:
        for seed in seeds:
            d = os.path.join(out, f"ft_{name}_{seed}")
            metrics = os.path.join(d, "metrics.csv")
            if not os.path.exists(metrics) or not any(r["step"] == "480" for r in csv.DictReader(open(metrics))):
                continue  # not finished
            loss, val, bpb, ms = summary(d)
            base_loss, base_val, _, _ = summary(os.path.join(out, f"ft_bf16_{seed}"))
            print(f"| {text} | {seed} | {loss:.4f} | {100 * (loss / base_loss - 1):+.3f}% | {val:.4f} | "
                  f"{100 * (val / base_val - 1):+.3f}% | {bpb:.4f} |")


if __name__ == "__main__":
    main()
