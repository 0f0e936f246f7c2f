#!/usr/bin/env python3
"""The NVFP4 fine-tuning table of docs/RESULTS.md from the runs' own files.

Usage: finetune_table.py HERE END [RULE]  (HERE holds ft_<recipe>_<seed>.csv and recipes/;
RULE names the blocks NVIDIA's rule keeps, default "layers 0 and 7" as on medium)
Loss: mean training loss over the last 10 steps (END-9 .. END); validation loss of the
last evaluation; deltas against bf16 of the same seed. GEMMs in bf16: the recipe's kept
block GEMMs (logits and attention are kept in every recipe); B200 speedup: the GEMM time
estimate of `pgq recipe --explain` at 16x the profiled tokens (recipes/<name>_x16.txt).
"""
import csv
import os
import re
import sys

import yaml

RECIPES = [("bf16", "bf16 everywhere (reference)"), ("nvfp4_all", "every block GEMM in NVFP4"),
           ("nvidia_rule", "NVIDIA's rule: layers 0 and 7 in bf16"),
           ("pgq_budget", "pgq: same budget, lowest default metric"), ("random_1", "random, same budget (draw 1)"),
           ("random_2", "random, same budget (draw 2)"), ("random_3", "random, same budget (draw 3)")]
ESTIMATE = re.compile(r"estimated GEMM time on b200: [0-9.]+ ms -> [0-9.]+ ms \(([0-9.]+)x\)")


def summary(path, end):
    rows = list(csv.DictReader(open(path)))
    last = [float(r["loss"]) for r in rows if end - 9 <= int(r["step"]) <= end]
    evals = [r for r in rows if r["val_loss"]]
    return sum(last) / len(last), float(evals[-1]["val_loss"])


def recipe_facts(here, name):
    if name == "bf16":
        return "all", "1.00x"
    gemms = yaml.safe_load(open(os.path.join(here, "recipes", name + ".yaml")))["gemms"]
    kept = sum(e["decision"] == "keep" for e in gemms)
    m = ESTIMATE.search(open(os.path.join(here, "recipes", name + "_x16.txt")).read())
    return f"{kept} of {len(gemms)}", m.group(1) + "x"


def main():
    here, end = sys.argv[1], int(sys.argv[2])
    rule = sys.argv[3] if len(sys.argv) > 3 else "layers 0 and 7"
    print(f"| recipe | GEMMs in bf16 | est. B200 GEMM speedup | seed | loss (steps {end - 9}-{end}) | vs bf16 | "
          "val loss | vs bf16 |")
    print("|---|---|---|---|---|---|---|---|")
    for name, text in RECIPES:
        text = text.replace("layers 0 and 7", rule)
        for seed in (1234, 1235):
            path = os.path.join(here, f"ft_{name}_{seed}.csv")
            base = os.path.join(here, f"ft_bf16_{seed}.csv")
            if not os.path.exists(path) or not os.path.exists(base):
                continue
            loss, val = summary(path, end)
            base_loss, base_val = summary(base, end)
            kept, speedup = recipe_facts(here, name)
            print(f"| {text} | {kept} | {speedup} | {seed} | {loss:.4f} | {100 * (loss / base_loss - 1):+.3f}% | "
                  f"{val:.4f} | {100 * (val / base_val - 1):+.3f}% |")


if __name__ == "__main__":
    main()
