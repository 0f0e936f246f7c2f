#!/usr/bin/python3
"""pgq's loss and gradients of an imported ONNX model against PyTorch's.

    /usr/bin/python3 tests/onnx/check_grads.py --pgq build/pgq --arch gpt2 --opset 17
        [--no-fold] [--loss|--logits] --work DIR

Exports the model with scripts/export_onnx.py (DIR/model.onnx, DIR/inputs, PyTorch's
DIR/ref), runs `pgq import DIR/model.onnx --inputs DIR/inputs --grads-out DIR/pgq`, and
compares DIR/pgq/loss.npy (relative error at most 1e-4) and, for every parameter,
DIR/pgq/grads/<initializer>.npy (max |pgq - torch| / max |torch| at most 1e-3). A
parameter held in several initializers (see the params file format in
scripts/export_onnx.py) is compared as the sum of their gradients mapped back to the
parameter's layout. A gradient that is zero in exact arithmetic (a key bias: softmax
is unchanged by adding q.b to every score of a query) holds only rounding noise, so the
denominator is at least 1e-5 times the largest gradient of the model. Prints one line
per tensor; exits 1 on any failure or missing file.

--export-only stops after the export and prints the sorted ONNX op types of the model.
"""
import argparse
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import export_onnx  # noqa: E402

LOSS_BOUND = 1e-4
GRAD_BOUND = 1e-3
ZERO_FLOOR = 1e-5  # of the largest gradient: below it a gradient is rounding noise


def to_param_layout(grad, transform):
    return grad.T if transform == "transpose" else grad


def compare(work):
    """Lines of the report and the number of failures."""
    lines, failures = [], 0
    ref_loss = float(np.load(os.path.join(work, "ref", "loss.npy")))
    pgq_loss_file = os.path.join(work, "pgq", "loss.npy")
    if not os.path.exists(pgq_loss_file):
        lines.append(f"{'loss':<40} MISSING {pgq_loss_file}")
        failures += 1
    else:
        pgq_loss = float(np.load(pgq_loss_file))
        rel = abs(pgq_loss - ref_loss) / max(abs(ref_loss), 1e-30)
        bad = not rel <= LOSS_BOUND  # NaN fails
        lines.append(f"{'loss':<40} pgq {pgq_loss:.7f} torch {ref_loss:.7f} rel err {rel:.2e}{'  FAIL' if bad else ''}")
        failures += bad

    by_param = {}
    for onnx_name, param, transform in export_onnx.read_params(os.path.join(work, "model.onnx.params.txt")):
        by_param.setdefault(param, []).append((onnx_name, transform))
    # Every initializer's reference holds the whole parameter's gradient: the first's is used.
    refs = {param: to_param_layout(np.load(os.path.join(work, "ref", "grads", held[0][0] + ".npy")), held[0][1])
            for param, held in by_param.items()}
    floor = ZERO_FLOOR * max(np.abs(ref).max() for ref in refs.values())
    for param, held in by_param.items():
        ref = refs[param]
        ours, missing = np.zeros_like(ref), []
        # pgq trains the initializers that hold one parameter as that parameter and
        # writes its gradient under the parameter's name, in the module's layout.
        whole = os.path.join(work, "pgq", "grads", param + ".npy")
        if os.path.exists(whole):
            held = [(param, "")]
        for onnx_name, transform in held:
            file = os.path.join(work, "pgq", "grads", onnx_name + ".npy")
            if not os.path.exists(file):
                missing.append(file)
                continue
            grad = to_param_layout(np.load(file), transform)
            if grad.shape != ref.shape:
                missing.append(f"{file} (shape {grad.shape}, expected {ref.shape})")
                continue
            ours += grad
        label = param if len(held) == 1 and held[0][0] == param else f"{param} ({', '.join(h[0] for h in held)})"
        if missing:
            lines.append(f"{label:<40} MISSING {', '.join(missing)}")
            failures += 1
            continue
        rel = np.abs(ours - ref).max() / max(np.abs(ref).max(), floor)
        bad = not rel <= GRAD_BOUND
        lines.append(f"{label:<40} rel err {rel:.2e}{'  FAIL' if bad else ''}")
        failures += bad
    lines.append(f"{len(by_param) + 1} tensors compared, {failures} failed")
    return lines, failures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pgq", help="the pgq binary (not needed with --export-only)")
    parser.add_argument("--arch", required=True, choices=("gpt2", "llama", "bert"))
    parser.add_argument("--opset", type=int, default=17)
    parser.add_argument("--no-fold", action="store_true")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--loss", action="store_true")
    kind.add_argument("--logits", action="store_true")
    parser.add_argument("--nll", action="store_true", help="with --loss: LogSoftmax + NegativeLogLikelihoodLoss")
    parser.add_argument("--export-only", action="store_true")
    parser.add_argument("--work", required=True)
    args = parser.parse_args(argv)
    if not args.export_only and not args.pgq:
        parser.error("--pgq is required unless --export-only")

    export_args = ["--arch", args.arch, "--opset", str(args.opset), "--reference", "--out", args.work]
    export_args += ["--no-fold"] * args.no_fold + ["--loss" if args.loss else "--logits"] + ["--nll"] * args.nll
    export_onnx.main(export_args)
    if args.export_only:
        print(" ".join(export_onnx.OnnxGraph(os.path.join(args.work, "model.onnx")).op_types()))
        return 0

    command = [args.pgq, "import", os.path.join(args.work, "model.onnx"), "--inputs",
               os.path.join(args.work, "inputs"), "--grads-out", os.path.join(args.work, "pgq")]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = subprocess.run(command, env=env)
    if run.returncode != 0:
        print(f"{' '.join(command)} exited with status {run.returncode}")
        return 1
    lines, failures = compare(args.work)
    print("\n".join(lines))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
