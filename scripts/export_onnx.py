#!/usr/bin/python3
"""Exports a PyTorch module to ONNX for `pgq import`. With PyTorch >= 2.9 it calls
torch.onnx.export's default exporter (opset 20, weights as external data) and needs
nothing else: pgq reads parameter names and module paths from the exporter's node
metadata. With older PyTorch (Debian's 1.13, /usr/bin/python3) it uses the TorchScript
exporter and writes the list of trainable parameters beside the model. Needs no `onnx`
package.

Library:
    from export_onnx import export
    export(module, (input_ids,), "model.onnx", opset=17)

CLI (the test models of tests/onnx/models.py):
    /usr/bin/python3 scripts/export_onnx.py --arch gpt2|llama|bert --opset 14|17
        [--no-fold] [--loss|--logits] [--reference] [--vocab V --d-model D --layers L
        --heads H --seq T --batch B] --out DIR
writes DIR/model.onnx, DIR/model.onnx.params.txt, DIR/inputs/<graph input>.npy (int64
input_ids, and labels with --loss) and, with --reference, PyTorch's DIR/ref/loss.npy and
DIR/ref/grads/<ONNX initializer name>.npy (float32). --loss puts F.cross_entropy over
every position inside the model (exported as SoftmaxCrossEntropyLoss, opset >= 12);
--logits (the default) exports logits [B, T, V] only and the reference loss is the one
pgq appends: mean CE(logits[:, :-1], input_ids[:, 1:]).

How torch 1.13 exports, and why these settings:
  - training=TrainingMode.TRAINING, always. In EVAL (and PRESERVE of a module in eval
    mode) the exporter merges initializers with equal *values*
    (_jit_pass_onnx_deduplicate_initializers): every LayerNorm gain is 1 at
    initialization, so they all became one initializer and their gradients would be
    lost. TRAINING merges only tensors that are the same storage (tied weights, which
    are one parameter anyway). It also exports Dropout in training form: a module with
    dropout should have p=0 for a deterministic gradient check.
  - do_constant_folding folds parameters even in TRAINING mode: nn.Linear on a 3-D input
    exports as MatMul(x, Transpose(W)), and folding stores W.T as a new initializer
    named like "onnx::MatMul_233"; an embedding gathered at constant positions
    (wpe(arange(T))) becomes "onnx::Add_232". The export maps such initializers back to
    their parameters by value (see the params file); a parameter folded beyond that is
    an error, and --no-fold (do_constant_folding=False) keeps every parameter as an
    initializer under its own name.
  - Node names record module scopes: "/blocks.0/attn/qkv/MatMul", "/head/MatMul",
    "/blocks.0/mlp/mlp.0/MatMul" (nn.Sequential children by index); a computation in
    the module's own forward is "/blocks.0/attn/MatMul_1"; the top module's is "/MatMul".
    Values are named "<node name>_output_<i>".
  - Unfolded parameters keep their named_parameters() names ("blocks.0.attn.qkv.weight");
    buffers used by the graph are initializers under their buffer names: GPT-2's tril
    mask "blocks.0.attn.mask" (f32 [1,1,T,T], then Slice, Equal, Where), or with folding
    one bool "onnx::Where_<n>" per layer; LLaMA's "blocks.0.attn.rotary.inv_freq" stays
    either way and cos/sin are computed (Einsum of positions and inv_freq, Concat,
    Cos/Sin), as is its mask (ConstantOfShape, Trilu, Where).

The params file, PATH.params.txt: one line per trainable parameter, in named_parameters()
order (a tied parameter once), in one of these forms:
    PARAM                              the initializer named PARAM is the parameter
    ONNX_NAME<TAB>PARAM                the initializer ONNX_NAME holds the parameter
    ONNX_NAME<TAB>PARAM<TAB>transpose  the initializer ONNX_NAME holds its transpose (2-D)
A parameter has several lines when the graph holds it in several initializers (a tied
embedding whose output-head use was folded into a transposed copy); pgq trains those as
separate tensors, and the parameter's gradient is the sum of theirs mapped back.
"""
import argparse
import os
import sys
import warnings

import numpy as np
import torch

# ---------------------------------------------------------------- reading ONNX files
# A protobuf wire-format reader for the few ModelProto fields used here, since Debian's
# python3-torch comes without the `onnx` package.


def _varint(buf, i):
    value = shift = 0
    while True:
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _fields(buf):
    """(field number, value) pairs of one message: int for varints, bytes otherwise."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        wire = key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        elif wire == 2:
            n, i = _varint(buf, i)
            value, i = buf[i:i + n], i + n
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield key >> 3, value


# TensorProto.DataType -> numpy dtype, for the initializers torch writes (raw_data).
_ONNX_DTYPES = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 11: np.float64}


def _tensor(buf):
    dims, dtype, name, raw = [], None, "", None
    for field, value in _fields(buf):
        if field == 1:
            dims.append(value)
        elif field == 2:
            dtype = value
        elif field == 8:
            name = value.decode()
        elif field == 9:
            raw = value
    if raw is None or dtype not in _ONNX_DTYPES:
        return name, None  # a layout this reader does not need
    return name, np.frombuffer(raw, dtype=_ONNX_DTYPES[dtype]).reshape(dims)


class OnnxGraph:
    """What a model file's main graph holds: nodes as (op_type, name, inputs, outputs),
    initializers by name (numpy arrays), input and output names, and the default-domain
    opset."""

    def __init__(self, path):
        with open(path, "rb") as f:
            model = f.read()
        self.opset = None
        graph = b""
        for field, value in _fields(model):
            if field == 7:
                graph = value
            elif field == 8:
                opset = dict(_fields(value))
                if opset.get(1, b"") in (b"", b"ai.onnx"):
                    self.opset = opset.get(2)
        self.nodes, self.initializers, self.inputs, self.outputs = [], {}, [], []
        for field, value in _fields(graph):
            if field == 1:
                node = {"inputs": [], "outputs": [], "name": "", "op_type": ""}
                for f, v in _fields(value):
                    if f == 1:
                        node["inputs"].append(v.decode())
                    elif f == 2:
                        node["outputs"].append(v.decode())
                    elif f == 3:
                        node["name"] = v.decode()
                    elif f == 4:
                        node["op_type"] = v.decode()
                self.nodes.append(node)
            elif field == 5:
                name, array = _tensor(value)
                self.initializers[name] = array
            elif field in (11, 12):
                name = next(v.decode() for f, v in _fields(value) if f == 1)
                (self.inputs if field == 11 else self.outputs).append(name)

    def op_types(self):
        return sorted({n["op_type"] for n in self.nodes})


# ---------------------------------------------------------------- export


def _parameter_initializers(module, graph):
    """[(onnx_name, param_name, transform)] for every parameter, by exact value: the
    initializer of the same name, or one equal to the parameter or its transpose.
    Raises when a parameter has no initializer or an initializer matches two."""
    params = dict(module.named_parameters())  # tied parameters once
    found = {name: [] for name in params}
    for onnx_name, array in graph.initializers.items():
        if onnx_name in params:
            found[onnx_name].append((onnx_name, onnx_name, None))
            continue
        if array is None or array.dtype != np.float32:
            continue
        matches = []
        for name, p in params.items():
            value = p.detach().numpy()
            if array.shape == value.shape and np.array_equal(array, value):
                matches.append((onnx_name, name, None))
            elif value.ndim == 2 and array.shape == value.T.shape and np.array_equal(array, value.T):
                matches.append((onnx_name, name, "transpose"))
        if len(matches) > 1:
            raise ValueError(f"initializer {onnx_name} equals several parameters: "
                             f"{', '.join(m[1] for m in matches)}; give them distinct values")
        for m in matches:
            found[m[1]].append(m)
    missing = [name for name, where in found.items() if not where]
    if missing:
        raise ValueError(f"constant folding left no initializer for {', '.join(missing)}; "
                         "export with do_constant_folding=False (--no-fold)")
    return [entry for name in params for entry in found[name]]


def _write_params(path, entries):
    lines = []
    for onnx_name, param, transform in entries:
        fields = [param] if onnx_name == param and transform is None else [onnx_name, param]
        if transform:
            fields.append(transform)
        lines.append("\t".join(fields))
    with open(path, "w") as f:
        f.write("".join(line + "\n" for line in lines))


def read_params(path):
    """The params file as [(onnx_name, param_name, transform or None)]."""
    entries = []
    with open(path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if len(fields) == 1:
                fields = [fields[0], fields[0]]
            entries.append((fields[0], fields[1], fields[2] if len(fields) > 2 else None))
    return entries


def _torch_version():
    return tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def export(module, example_inputs, path, opset=None, do_constant_folding=True, input_names=None,
           output_names=None, dynamic_axes=None):
    """Exports `module` called on `example_inputs` (a tuple) to the ONNX file `path`.

    PyTorch >= 2.9: torch.onnx.export's default (torch.export-based) exporter, at `opset`
    or its default (20); the weights go to `path`.data (ONNX external data) and no
    params file is written: pgq names and chooses parameters from the exporter's node
    metadata. `dynamic_axes` ({input: {dim: name}}) becomes dynamic_shapes.
    Older PyTorch (Debian's 1.13): the TorchScript exporter at `opset` (default 17), and
    `path`.params.txt (format in the module docstring).
    Returns the OnnxGraph."""
    if _torch_version() >= (2, 9):
        dynamic_shapes = None
        if dynamic_axes:
            names = input_names or [f"input_{i}" for i in range(len(example_inputs))]
            dynamic_shapes = tuple({d: torch.export.Dim(n) for d, n in dynamic_axes.get(name, {}).items()} or None
                                   for name in names)
        kwargs = {} if opset is None else {"opset_version": opset}
        torch.onnx.export(module, tuple(example_inputs), path, input_names=input_names, output_names=output_names,
                          dynamic_shapes=dynamic_shapes, external_data=True, **kwargs)
        return OnnxGraph(path)
    opset = 17 if opset is None else opset
    was_training = module.training
    with warnings.catch_warnings():
        # Its advice against folding in TRAINING mode is handled: folded parameters are
        # mapped back below, or refused.
        warnings.filterwarnings("ignore", message="It is recommended that constant folding be turned off")
        torch.onnx.export(
            module, tuple(example_inputs), path,
            export_params=True,
            keep_initializers_as_inputs=False,
            training=torch.onnx.TrainingMode.TRAINING,  # no merging by value: see above
            opset_version=opset,
            do_constant_folding=do_constant_folding,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes,
        )
    module.train(was_training)
    graph = OnnxGraph(path)
    _write_params(path + ".params.txt", _parameter_initializers(module, graph))
    return graph


# ---------------------------------------------------------------- the CLI


def load_models():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "onnx"))
    import models  # noqa: E402
    return models


def reference(model, models, input_ids, labels, loss_inside, entries, out_dir):
    """PyTorch's loss and the gradient of every parameter initializer (in the
    initializer's own layout) on one batch, as float32 .npy files."""
    model.zero_grad()
    loss = model(input_ids, labels) if loss_inside else models.logits_loss(model(input_ids), input_ids)
    loss.backward()
    os.makedirs(os.path.join(out_dir, "grads"), exist_ok=True)
    np.save(os.path.join(out_dir, "loss.npy"), np.array(loss.item(), dtype=np.float32))
    params = dict(model.named_parameters())
    for onnx_name, param, transform in entries:
        grad = params[param].grad.numpy()
        if transform == "transpose":
            grad = grad.T
        np.save(os.path.join(out_dir, "grads", onnx_name + ".npy"), np.ascontiguousarray(grad, dtype=np.float32))
    return loss.item()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", required=True, choices=("gpt2", "llama", "bert"))
    parser.add_argument("--opset", type=int, default=None,
                        help="ONNX opset (default: 17 on PyTorch < 2.9, the exporter's default, 20, after)")
    parser.add_argument("--no-fold", action="store_true", help="do_constant_folding=False")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--loss", action="store_true", help="cross-entropy inside the model")
    parser.add_argument("--nll", action="store_true",
                        help="with --loss: log_softmax + nll_loss (LogSoftmax + NegativeLogLikelihoodLoss)")
    kind.add_argument("--logits", action="store_true", help="logits only (the default)")
    parser.add_argument("--reference", action="store_true", help="also write PyTorch's loss and gradients")
    parser.add_argument("--ops", action="store_true", help="print the sorted ONNX op types")
    parser.add_argument("--vocab", type=int, help="vocabulary size (256 to train on pgq's byte corpora)")
    parser.add_argument("--d-model", type=int, help="model width")
    parser.add_argument("--layers", type=int, help="number of blocks")
    parser.add_argument("--heads", type=int, help="attention heads (they must divide --d-model)")
    parser.add_argument("--seq", type=int, help="sequence length")
    parser.add_argument("--batch", type=int, help="batch size")
    parser.add_argument("--dynamic-batch", action="store_true",
                        help="leave the batch dim dynamic (pgq sizes it: --batch, data parallelism)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    torch.set_num_threads(1)
    models = load_models()
    # Sizes other than the test models' (for example a model to train with pgq).
    if args.vocab:
        models.VOCAB[args.arch] = args.vocab
    if args.d_model:
        models.D_MODEL[args.arch] = args.d_model
    if args.layers:
        models.N_LAYERS = args.layers
    if args.heads:
        models.N_HEADS[args.arch] = args.heads
    if args.seq:
        models.SEQ = args.seq
    if args.batch:
        models.BATCH = args.batch
    model = models.build(args.arch)
    if args.nll:
        model.loss_form = "nll"
    input_ids, labels = models.make_inputs(args.arch)
    inputs = {"input_ids": input_ids, "labels": labels} if args.loss else {"input_ids": input_ids}
    os.makedirs(os.path.join(args.out, "inputs"), exist_ok=True)
    path = os.path.join(args.out, "model.onnx")
    output = "loss" if args.loss else "logits"
    dynamic = None
    if args.dynamic_batch:
        dynamic = {name: {0: "batch"} for name in inputs}
        if not args.loss:
            dynamic[output] = {0: "batch"}
    graph = export(model, tuple(inputs.values()), path, opset=args.opset, do_constant_folding=not args.no_fold,
                   input_names=list(inputs), output_names=[output], dynamic_axes=dynamic)
    for name, value in inputs.items():
        np.save(os.path.join(args.out, "inputs", name + ".npy"), value.numpy())
    if args.reference:
        reference(model, models, input_ids, labels, args.loss, read_params(path + ".params.txt"),
                  os.path.join(args.out, "ref"))
    if args.ops:
        print(" ".join(graph.op_types()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
