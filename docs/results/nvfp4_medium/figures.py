#!/usr/bin/env python3
"""The figures of issue 33's NVFP4 section of docs/RESULTS.md, drawn with gnuplot.

Usage: figures.py HERE EVERY_RECIPE LAYERS
HERE holds ft_<recipe>_<seed>.csv and recipes/; EVERY_RECIPE is `pgq recipe` with
every_gemm.yaml (each GEMM's default metric in its reason). Writes into HERE:
  finetune_deltas.png  each recipe's training loss per step against bf16's of the same
                       seed (%), one panel per seed: the noise floor the table speaks of;
  metric_by_block.png  each block GEMM's default metric by block and direction (log
                       scale; lower = worse), NVIDIA's bf16 blocks shaded, pgq's kept
                       GEMMs ringed.
"""
import csv
import os
import subprocess
import sys
import tempfile

import yaml

from ranking import METRIC, block, direction, kept, linear

RECIPES = ["nvfp4_all", "nvidia_rule", "pgq_budget", "random_1", "random_2", "random_3"]
TITLES = {"nvfp4_all": "every block GEMM in NVFP4", "nvidia_rule": "NVIDIA's rule", "pgq_budget": "pgq, same budget",
          "random_1": "random draw 1", "random_2": "random draw 2", "random_3": "random draw 3"}


def losses(path):
    return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(open(path))}


def deltas(here, tmp):
    plots = []
    for seed in (1234, 1235):
        base = losses(os.path.join(here, f"ft_bf16_{seed}.csv"))
        lines = []
        for r in RECIPES:
            mine = losses(os.path.join(here, f"ft_{r}_{seed}.csv"))
            dat = os.path.join(tmp, f"{r}_{seed}.dat")
            with open(dat, "w") as f:
                for step in sorted(mine):
                    f.write(f"{step} {100 * (mine[step] / base[step] - 1):.5f}\n")
            width = 3 if r in ("pgq_budget", "nvidia_rule") else 1
            lines.append(f"'{dat}' using 1:2 with linespoints lw {width} pt 7 ps 0.5 title \"{TITLES[r]}\"")
        plots.append(f"set title 'seed {seed}: training loss against bf16 (same batches)'\n"
                     "plot 0 with lines lc rgb 'black' notitle, " + ", ".join(lines))
    return ("set terminal pngcairo size 1100,800 font ',11'\n"
            f"set output '{os.path.join(here, 'finetune_deltas.png')}'\n"
            "set multiplot layout 2,1\nset grid\nset key outside right\nset xlabel 'step'\n"
            "set ylabel 'loss vs bf16 (%)'\n" + "\n".join(plots) + "\nunset multiplot\n")


def by_block(here, every, layers, tmp):
    gemms = yaml.safe_load(open(every))["gemms"]
    pgq = kept(os.path.join(here, "recipes", "pgq_budget.yaml"))
    rule = {block(l) for l in kept(os.path.join(here, "recipes", "nvidia_rule.yaml")) if linear(l)}
    plots = []
    for d, name, offset in (("fwd", "forward (min SQNR)", -0.2), ("bwd_dgrad", "data gradient (effect)", 0.0),
                            ("bwd_wgrad", "weight gradient (effect)", 0.2)):
        dat, ring = os.path.join(tmp, f"{d}.dat"), os.path.join(tmp, f"{d}_kept.dat")
        with open(dat, "w") as f, open(ring, "w") as g:
            for e in gemms:
                if not linear(e["label"]) or direction(e["label"]) != d:
                    continue
                x, value = block(e["label"]) + offset, float(METRIC.search(e["reason"]).group(1))
                f.write(f"{x} {value}\n")
                if e["label"] in pgq:
                    g.write(f"{x} {value}\n")
        plots.append(f"'{dat}' using 1:2 with points pt 7 ps 0.8 title '{name}'")
        plots.append(f"'{ring}' using 1:2 with points pt 6 ps 2 lc rgb 'black' "
                     + ("title 'kept by pgq (same budget)'" if d == "fwd" else "notitle"))
    shade = "".join(f"set object rect from {b - 0.5},graph 0 to {b + 0.5},graph 1 fc rgb '#e8e8e8' fs solid "
                    "noborder behind\n" for b in sorted(rule))
    return ("set terminal pngcairo size 1100,650 font ',11'\n"
            f"set output '{os.path.join(here, 'metric_by_block.png')}'\n"
            "set logscale y\nset grid\nset key outside right\n"
            f"set xrange [-0.6:{layers - 0.4}]\nset xtics 1\nset xlabel \"block (shaded: NVIDIA's rule keeps it in bf16)\"\n"
            "set ylabel 'default metric in NVFP4 (lower = worse)'\n"
            "set title 'Each block GEMM by the profile (NVFP4, stochastic rounding on gradients, transform on wgrad)'\n"
            + shade + "plot " + ", ".join(plots) + "\n")


def main():
    here, every, layers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with tempfile.TemporaryDirectory() as tmp:
        for script in (deltas(here, tmp), by_block(here, every, layers, tmp)):
            subprocess.run(["gnuplot"], input=script.encode(), check=True)


if __name__ == "__main__":
    main()
