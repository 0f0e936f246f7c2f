"""The export and reference half of check_grads.py, before pgq can import: for every
architecture, opset, folding and loss placement, the params file names every parameter
once or more, each named initializer exists with the parameter's shape (or its
transpose), and each has a float32 reference gradient of that shape.

    /usr/bin/python3 tests/onnx/export_test.py WORK_DIR
"""
import itertools
import os
import sys
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import export_onnx  # noqa: E402

models = export_onnx.load_models()


def check(work, arch, opset, fold, loss):
    args = ["--arch", arch, "--opset", str(opset), "--reference", "--out", work, "--loss" if loss else "--logits"]
    export_onnx.main(args + ([] if fold else ["--no-fold"]))
    graph = export_onnx.OnnxGraph(os.path.join(work, "model.onnx"))
    assert graph.opset == opset, graph.opset
    assert graph.inputs == (["input_ids", "labels"] if loss else ["input_ids"]), graph.inputs
    assert ("SoftmaxCrossEntropyLoss" in graph.op_types()) == loss
    params = dict(models.build(arch).named_parameters())
    entries = export_onnx.read_params(os.path.join(work, "model.onnx.params.txt"))
    assert {e[1] for e in entries} == set(params), "every parameter is listed"
    for onnx_name, param, transform in entries:
        shape = params[param].shape[::-1] if transform == "transpose" else params[param].shape
        assert graph.initializers[onnx_name].shape == tuple(shape), onnx_name
        grad = np.load(os.path.join(work, "ref", "grads", onnx_name + ".npy"))
        assert grad.dtype == np.float32 and grad.shape == tuple(shape), onnx_name
        if not fold:
            assert onnx_name == param and transform is None, "no folding keeps every name"
    ids = np.load(os.path.join(work, "inputs", "input_ids.npy"))
    assert ids.dtype == np.int64 and ids.shape == (models.BATCH, models.SEQ)
    if loss:
        labels = np.load(os.path.join(work, "inputs", "labels.npy"))
        assert (labels[:, :-1] == ids[:, 1:]).all(), "labels are the next tokens"
    ref_loss = float(np.load(os.path.join(work, "ref", "loss.npy")))
    assert 0.5 * np.log(models.VOCAB[arch]) < ref_loss < 2 * np.log(models.VOCAB[arch]), ref_loss
    return " ".join(graph.op_types())


def main(work):
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
    for arch, opset, fold, loss in itertools.product(models.ARCHS, (14, 17), (True, False), (True, False)):
        variant = f"{arch} opset {opset} {'fold' if fold else 'no-fold'} {'loss' if loss else 'logits'}"
        ops = check(os.path.join(work, variant.replace(" ", "_")), arch, opset, fold, loss)
        print(f"{variant:<32} {ops}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
