#!/usr/bin/env python3
"""Policies with the same high-precision budget as NVIDIA's rule (issue 33's recipes 3 and 4).

Usage: budget_policies.py ALL_RECIPE NVIDIA_RECIPE BASE_POLICY OUT_DIR
ALL_RECIPE: the recipe with every eligible block GEMM in NVFP4 (from BASE_POLICY), whose
reasons carry each GEMM's metric (forward: min SQNR; backward: pgq's default, effect).
NVIDIA_RECIPE: the recipe of NVIDIA's rule; its kept block GEMMs set the budget, per
direction (forward, dgrad, wgrad), so every recipe keeps as many GEMMs of each.
Writes OUT_DIR/pgq_budget_policy.yaml (keep the lowest-metric GEMMs of each direction) and
OUT_DIR/random_<k>_policy.yaml for k = 1..3 (keep a uniform draw, seeds 1..3): BASE_POLICY
with one exact keep rule per chosen GEMM, ahead of its own rules.
"""
import random
import re
import sys

import yaml

METRIC = re.compile(r"(?:effect|min SQNR) ([0-9.e+-]+)")


def entries(path):
    return yaml.safe_load(open(path))["gemms"]


def direction(label):
    return "bwd_dgrad" if ":dgrad" in label else "bwd_wgrad" if ":wgrad" in label else "fwd"


def main():
    all_recipe, nvidia_recipe, base_policy, out = sys.argv[1:5]
    eligible = {e["label"]: e for e in entries(all_recipe) if e["decision"] == "nvfp4"}
    kept = [e["label"] for e in entries(nvidia_recipe) if e["decision"] == "keep" and e["label"] in eligible]
    budget = {d: sum(direction(l) == d for l in kept) for d in ("fwd", "bwd_dgrad", "bwd_wgrad")}
    metric = {l: float(METRIC.search(e["reason"]).group(1)) for l, e in eligible.items()}
    base = open(base_policy).read()

    def write(name, labels):
        rules = "".join(f'  - label: "{re.escape(l)}"\n    action: keep\n' for l in sorted(labels))
        text = re.sub(r"^name: .*$", f"name: {name}", base, flags=re.M)
        text = text.replace("rules:\n", "rules:\n" + rules, 1)
        open(f"{out}/{name}_policy.yaml", "w").write(text)

    chosen = []
    for d, n in budget.items():
        in_d = sorted((l for l in eligible if direction(l) == d), key=lambda l: metric[l])
        chosen += in_d[:n]
    write("pgq_budget", chosen)
    for k in (1, 2, 3):
        rng = random.Random(k)
        draw = []
        for d, n in budget.items():
            draw += rng.sample(sorted(l for l in eligible if direction(l) == d), n)
        write(f"random_{k}", draw)
    print("budget per direction:", budget)
    print("pgq keeps:", ", ".join(sorted(chosen)))


if __name__ == "__main__":
    main()
