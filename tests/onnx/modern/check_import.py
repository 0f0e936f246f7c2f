#!/usr/bin/python3
"""pgq's loss and gradients of a model exported by current PyTorch against a reference.

    /usr/bin/python3 tests/onnx/modern/check_import.py --pgq PGQ --model DIR/model.onnx
        --ref REFDIR --work WORK [--batch 2 --seq 16] [--reference ref|torch]

Runs `PGQ import MODEL --inputs REFDIR --grads-out WORK/pgq [--batch B --seq T]` (REFDIR
holds input_ids.npy; --batch and --seq size a model's symbolic dims and must match it),
which writes WORK/pgq/loss.npy and WORK/pgq/grads/<parameter>.npy, named and laid out as
the PyTorch parameter (model.layers.0.self_attn.q_proj.weight, [out, in]). The reference:
- ref (the default): PyTorch's REFDIR/loss.npy and REFDIR/grads/<parameter>.npy, for
  models whose weights are the ones PyTorch ran (tests/data/onnx_modern/README.md);
- torch: tests/onnx/modern/torch_eval.py's float64 evaluation of MODEL, its gradients
  mapped to parameters through the exporter's metadata, for models with synthetic weights.

The loss must agree within 1e-4 relative and every reference parameter's gradient within
1e-3: max |pgq - ref| / max |ref|, the denominator at least 1e-5 times the model's largest
gradient (a gradient that is zero in exact arithmetic holds only rounding noise). A
parameter without a pgq gradient fails. Prints one line per tensor; exits 1 on a failure.
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_eval  # noqa: E402

LOSS_BOUND = 1e-4
GRAD_BOUND = 1e-3
ZERO_FLOOR = 1e-5  # of the largest gradient: below it a gradient is rounding noise


def load_reference(kind, model, ref_dir):
    """(loss, {parameter: gradient}) of the chosen reference."""
    if kind == "torch":
        loss, _, grads = torch_eval.reference(model, ref_dir)
        return loss, grads
    grad_dir = os.path.join(ref_dir, "grads")
    grads = {f[:-len(".npy")]: np.load(os.path.join(grad_dir, f)) for f in sorted(os.listdir(grad_dir))
             if f.endswith(".npy")}
    return float(np.load(os.path.join(ref_dir, "loss.npy"))), grads


def compare(ref_loss, ref_grads, pgq_dir):
    """Lines of the report and the number of failures."""
    lines, failures = [], 0
    loss_file = os.path.join(pgq_dir, "loss.npy")
    if not os.path.exists(loss_file):
        lines.append(f"{'loss':<48} MISSING {loss_file}  FAIL")
        failures += 1
    else:
        loss = float(np.load(loss_file))
        rel = abs(loss - ref_loss) / max(abs(ref_loss), 1e-30)
        bad = not rel <= LOSS_BOUND  # NaN fails
        lines.append(f"{'loss':<48} pgq {loss:.7f} ref {ref_loss:.7f} rel err {rel:.2e}{'  FAIL' if bad else ''}")
        failures += bad
    floor = ZERO_FLOOR * max(np.abs(g).max() for g in ref_grads.values())
    for name, ref in sorted(ref_grads.items()):
        file = os.path.join(pgq_dir, "grads", name + ".npy")
        if not os.path.exists(file):
            lines.append(f"{name:<48} MISSING {file}  FAIL")
            failures += 1
            continue
        ours = np.load(file)
        if ours.shape != ref.shape:
            lines.append(f"{name:<48} shape {list(ours.shape)}, expected {list(ref.shape)}  FAIL")
            failures += 1
            continue
        rel = np.abs(ours.astype(np.float64) - ref).max() / max(np.abs(ref).max(), floor)
        bad = not rel <= GRAD_BOUND
        lines.append(f"{name:<48} rel err {rel:.2e}{'  FAIL' if bad else ''}")
        failures += bad
    grad_dir = os.path.join(pgq_dir, "grads")
    extra = sorted(f[:-len(".npy")] for f in os.listdir(grad_dir) if f.endswith(".npy")
                   and f[:-len(".npy")] not in ref_grads) if os.path.isdir(grad_dir) else []
    if extra:
        lines.append(f"not compared (no reference parameter): {', '.join(extra)}")
    lines.append(f"{len(ref_grads) + 1} tensors compared, {failures} failed")
    return lines, failures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pgq", required=True, help="the pgq binary")
    parser.add_argument("--model", required=True, help="the ONNX file (its external data beside it)")
    parser.add_argument("--ref", required=True, help="folder with input_ids.npy (and PyTorch's loss and grads)")
    parser.add_argument("--work", required=True, help="pgq writes WORK/pgq here")
    parser.add_argument("--batch", type=int, help="passed to pgq import: size of a dynamic batch dim")
    parser.add_argument("--seq", type=int, help="passed to pgq import: size of a dynamic sequence dim")
    parser.add_argument("--reference", choices=("ref", "torch"), default="ref",
                        help="PyTorch's REFDIR (default) or torch_eval.py's evaluation of MODEL")
    args = parser.parse_args(argv)

    pgq_dir = os.path.join(args.work, "pgq")
    command = [args.pgq, "import", args.model, "--inputs", args.ref, "--grads-out", pgq_dir]
    for flag, value in (("--batch", args.batch), ("--seq", args.seq)):
        if value is not None:
            command += [flag, str(value)]
    shutil.rmtree(pgq_dir, ignore_errors=True)  # a file left by an earlier run is no result
    os.makedirs(args.work, exist_ok=True)
    run = subprocess.run(command, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if run.returncode != 0:
        print(f"{' '.join(command)} exited with status {run.returncode}")
        return 1
    ref_loss, ref_grads = load_reference(args.reference, args.model, args.ref)
    lines, failures = compare(ref_loss, ref_grads, pgq_dir)
    print(f"reference: {'PyTorch ' + args.ref if args.reference == 'ref' else 'torch_eval.py on ' + args.model}")
    print("\n".join(lines))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
