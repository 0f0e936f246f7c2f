#!/usr/bin/python3
"""Stands in for `pgq import MODEL --inputs DIR --grads-out OUT [--batch B --seq T]` to test
check_import.py itself: writes torch_eval.py's loss and parameter gradients (float32) as
pgq would, then damages them as the environment asks, so that a test can assert that
check_import.py reports exactly that damage:
    FAKE_PGQ_SCALE="param=factor"  multiplies that parameter's gradient
    FAKE_PGQ_DROP="param"          writes no gradient for that parameter
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_eval  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("import",))
    parser.add_argument("model")
    parser.add_argument("--inputs", required=True)
    parser.add_argument("--grads-out", required=True)
    parser.add_argument("--batch", type=int)
    parser.add_argument("--seq", type=int)
    args = parser.parse_args(argv)
    loss, _, grads = torch_eval.reference(args.model, args.inputs)
    scale = os.environ.get("FAKE_PGQ_SCALE")
    if scale:
        name, factor = scale.split("=")
        grads[name] = grads[name] * float(factor)
    grads.pop(os.environ.get("FAKE_PGQ_DROP", ""), None)
    os.makedirs(os.path.join(args.grads_out, "grads"), exist_ok=True)
    np.save(os.path.join(args.grads_out, "loss.npy"), np.array(loss, dtype=np.float32))
    for name, grad in grads.items():
        np.save(os.path.join(args.grads_out, "grads", name + ".npy"), grad.astype(np.float32))
    return 0


if __name__ == "__main__":
    sys.exit(main())
