"""Checks pgq's loss and every parameter gradient against PyTorch 1.13 (f32).

Reads the directory written by pgq_parity_dump: the model config, the initial
parameters, one batch, and pgq's loss and gradients. Rebuilds the same transformer in
PyTorch (bench/torch_model.py) from those weights and compares. Relative error of a
tensor: max |pgq - torch| / max |torch|. Exit status 1 when any exceeds the bound.
"""
import os
import sys

import numpy as np
import torch
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import torch_model  # noqa: E402

BOUND = 1e-4


def main(run_dir):
    torch.set_num_threads(1)
    with open(os.path.join(run_dir, "model.yaml")) as f:
        cfg = yaml.safe_load(f)
    params = {}
    for name in sorted(os.listdir(os.path.join(run_dir, "params"))):
        key = name[: -len(".npy")].replace(".", "/")
        params[key] = torch.from_numpy(np.load(os.path.join(run_dir, "params", name))).requires_grad_()
    tokens = torch.from_numpy(np.load(os.path.join(run_dir, "tokens.npy")))
    targets = torch.from_numpy(np.load(os.path.join(run_dir, "targets.npy")))
    loss = torch_model.forward(cfg, params, tokens, targets)
    loss.backward()

    pgq_loss = float(np.load(os.path.join(run_dir, "loss.npy")))
    failures = 0
    rel = abs(pgq_loss - loss.item()) / abs(loss.item())
    print(f"{'loss':<28} pgq {pgq_loss:.7f} torch {loss.item():.7f} rel err {rel:.2e}")
    failures += rel > BOUND
    for key, p in params.items():
        ours = np.load(os.path.join(run_dir, "grads", key.replace("/", ".") + ".npy"))
        theirs = p.grad.numpy()
        rel = np.abs(ours - theirs).max() / max(np.abs(theirs).max(), 1e-30)
        print(f"{key + ' grad':<28} rel err {rel:.2e}{'  FAIL' if rel > BOUND else ''}")
        failures += rel > BOUND
    print(f"{len(params) + 1} tensors compared, {failures} above {BOUND:g}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
