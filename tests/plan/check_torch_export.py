#!/usr/bin/python3
"""`pgq recipe --export-torch` on a model exported from PyTorch: the export names the
model's own nn.Linear modules.

    /usr/bin/python3 tests/plan/check_torch_export.py --pgq build/pgq --arch gpt2|llama|bert --work DIR

Exports ARCH of tests/onnx/models.py (vocabulary 256, to train on pgq's byte corpus)
with scripts/export_onnx.py, profiles 2 training steps (`pgq train --profile-out`),
makes a recipe with tests/plan/torch_export_policy.yaml and --export-torch
DIR/export/recipe.json, imports DIR/export/recipe.py and checks it against the same
model built in PyTorch:
  - every path in PGQ_QUANTIZE and PGQ_KEEP_HIGH_PRECISION is an nn.Linear of
    model.named_modules(), and together they are all of its Linear modules;
  - module_filter_fn, called as torchao's convert_to_float8_training calls it (each
    nn.Linear with its fully qualified name), selects exactly PGQ_QUANTIZE;
  - the JSON agrees with the Python file and with the policy: block 0's MLP kept, the
    rest quantized, block 1's modules noted for their kept wgrad GEMMs, attention's
    batched GEMMs (no nn.Linear) in non_module_gemms.
Prints what it checked; exits 1 on any failure.
"""
import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import export_onnx  # noqa: E402

failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


def run(cmd):
    print("$ " + " ".join(cmd))
    subprocess.run(cmd, check=True, env=dict(os.environ, OMP_NUM_THREADS="1"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pgq", required=True)
    parser.add_argument("--arch", required=True, choices=("gpt2", "llama", "bert"))
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    work = args.work
    shutil.rmtree(work, ignore_errors=True)  # a rerun starts afresh: no stale run or export
    os.makedirs(os.path.join(work, "export"), exist_ok=True)

    export_onnx.main(["--arch", args.arch, "--vocab", "256", "--out", os.path.join(work, "model")])
    model_file = os.path.join(work, "model", "model.onnx")
    profile = os.path.join(work, "profile.yaml")
    run([args.pgq, "train", "--model", model_file, "--steps", "2", "--profile-steps", "2", "--profile-out", profile,
         "--out", os.path.join(work, "run"), "--no-progress", "--eval-every", "0"])
    exported = os.path.join(work, "export", "recipe.json")
    run([args.pgq, "recipe", "--profile", profile, "--hardware", "epyc-zen3-2c", "--policy",
         os.path.join(HERE, "torch_export_policy.yaml"), "--model", model_file, "-o", os.path.join(work, "recipe.yaml"),
         "--export-torch", exported])

    with open(exported) as f:
        recipe = json.load(f)
    spec = importlib.util.spec_from_file_location("pgq_recipe", os.path.join(work, "export", "recipe.py"))
    pgq_recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pgq_recipe)

    # The same model as the ONNX file: export_onnx.main set models' sizes (vocabulary 256).
    model = export_onnx.load_models().build(args.arch)
    linear = {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    quantize, keep = pgq_recipe.PGQ_QUANTIZE, pgq_recipe.PGQ_KEEP_HIGH_PRECISION
    print(f"nn.Linear modules: {sorted(linear)}")
    print(f"PGQ_QUANTIZE: {sorted(quantize)}")
    print(f"PGQ_KEEP_HIGH_PRECISION: {sorted(keep)}")

    check(not (quantize | keep) - set(linear),
          f"every exported module path is an nn.Linear (not: {sorted((quantize | keep) - set(linear))})")
    check(quantize | keep == set(linear), f"every nn.Linear is exported (missing: {sorted(set(linear) - quantize - keep)})")
    check(not quantize & keep, "no module is both quantized and kept")
    selected = {fqn for fqn, m in linear.items() if pgq_recipe.module_filter_fn(m, fqn)}
    check(selected == quantize, "module_filter_fn selects exactly PGQ_QUANTIZE among the nn.Linear modules")

    check(set(recipe["quantize"]) == quantize, "the JSON's quantize list is PGQ_QUANTIZE")
    check(set(recipe["keep_high_precision"]) == keep, "the JSON's keep_high_precision list is PGQ_KEEP_HIGH_PRECISION")
    check(set(recipe["modules"]) == quantize | keep, "the JSON's modules are the quantized and the kept ones")
    check(set(pgq_recipe.PGQ_FORMATS) == quantize | keep, "PGQ_FORMATS has every module")
    check(keep == {p for p in linear if p.startswith("blocks.0.mlp.")}, "the policy's kept forward GEMMs: block 0's MLP")
    for path, m in recipe["modules"].items():
        fwd = m["forward"]
        check(pgq_recipe.PGQ_FORMATS[path] == {k: m[k] for k in ("forward", "dgrad", "wgrad")},
              f"{path}: PGQ_FORMATS agrees with the JSON")
        if path.startswith("blocks.1."):
            check(fwd != "keep" and m["wgrad"] == "keep" and "keeps wgrad in high precision" in (m["note"] or ""),
                  f"{path}: forward {fwd}, wgrad kept, noted")
        elif path.startswith("blocks.0.mlp."):
            check(fwd == "keep" and m["keep_reason"] and "keeps the forward GEMM" in (m["note"] or ""),
                  f"{path}: kept ({m['keep_reason']}), noted")
        else:
            check(fwd != "keep" and m["note"] is None, f"{path}: forward {fwd}, no note")

    others = {g["label"] for g in recipe["non_module_gemms"]}
    print(f"non_module_gemms: {sorted(others)}")
    for block in (0, 1):
        check(f"blocks.{block}/attn" in others, f"block {block}'s q.k^T is a non-module GEMM")
        check(f"blocks.{block}/attn:dgrad_lhs" in others, f"block {block}'s q.k^T gradients are non-module GEMMs")
    check(("get_logits" in others) == (args.arch == "gpt2"), "the tied logits GEMM (GPT-2 only) is a non-module GEMM")

    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print(f"torch export of {args.arch}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
