#!/usr/bin/python3
"""Builds tests/data/onnx_modern from the shared exports of current PyTorch.

    /usr/bin/python3 tests/onnx/modern/assemble.py [--shared /work/shared/models/onnx_modern]
        [--out tests/data/onnx_modern]

Why: every model.onnx in the shared set (README.md there) keeps its weights in an external
data file (`llama_dynamo.onnx.data`, `gpt2_dynamo.onnx.data`, `dyn.onnx.data`, ...) that
was never shipped; only llama_variants/external/model.onnx.data exists. This script writes
each missing file under the name and at the offsets its model.onnx expects:

- llama_variants: external/ (graph and data) and ref/ are copied; model_dynamic.onnx is
  copied and its dyn.onnx.data is written from external/model.onnx.data's parameters.
- llama: the opset-20 and opset-23 graphs take llama_variants' parameters (external and
  the five inline norm gains, which llama's files hold with llama's own values), so each
  is the llama_variants model and its reference is llama_variants/ref; llama's own ref/
  matches no weights that exist and is not copied. Buffers come from llama_variants where
  it holds one of the same name, type and shape (rotary tables, the float causal mask);
  the opset-23 boolean mask is computed.
- gpt2, qwen2, phi3, olmo2: their weights are lost. The graphs are copied unchanged (their
  inline parameters are the real ones) and the external ones are synthetic: parameters
  normal with std 0.02 seeded by the initializer's name; buffers computed from
  config.json (see buffer_value); GPT-2's folded slice of the position table random like
  a parameter. PyTorch's ref/ does not match these weights: only ref/input_ids.npy is
  copied, and tests compare pgq with tests/onnx/modern/torch_eval.py instead.

An initializer's parameter is found through the exporter's metadata (exported_graph.py);
a buffer's role through the graph's structure (what reads it).
"""
import argparse
import hashlib
import json
import os
import shutil
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import exported_graph  # noqa: E402

SHARED = "/work/shared/models/onnx_modern"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "onnx_modern")
PARAM_STD = 0.02
SYNTHETIC = ("gpt2", "qwen2", "phi3", "olmo2")


def seeded_normal(name, shape, std):
    seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
    return (np.random.default_rng(seed).standard_normal(shape) * std).astype(np.float32)


def rotary_tables(config, seq, width):
    """HF's default rotary embedding, rotate-half convention: emb = cat(freqs, freqs) over the
    rotary width, computed in float32 as transformers does. Returns (cos, sin), [seq, width]."""
    rope = config.get("rope_parameters") or {}
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"rope_type {rope['rope_type']!r}: only 'default' is computed")
    theta = rope.get("rope_theta", config.get("rope_theta", 10000.0))
    partial = rope.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0))
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    dim = int(head_dim * partial)
    if dim != width:
        raise ValueError(f"rotary table width {width}, config gives {dim} (head_dim {head_dim} x {partial})")
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    freqs = torch.arange(seq, dtype=torch.int64).float()[:, None] * inv_freq[None, :]
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().numpy(), emb.sin().numpy()


def consumers(model):
    out = {}
    for node in model.graph.node:
        for i, name in enumerate(node.input):
            out.setdefault(name, []).append((node, i))
    return out


def buffer_value(model, init, config):
    """The value of a non-parameter initializer, from what reads it:
    - an operand of Attention's attn_mask (bool): causal, True where key j <= query i;
    - an operand of an Add feeding a Softmax: the additive causal mask, 0 where j <= i and
      float32's lowest value above (what the exporter bakes from SDPA's boolean mask);
    - a [1, 1, T, D] operand of a Mul: a rotary table, sin where the other operand is the
      rotate-half Concat, cos otherwise;
    - a [1, T, D] operand of an Add whose other operand is a Gather (the token embedding):
      GPT-2's folded position-table slice, random like a parameter."""
    shape = tuple(init.dims)
    users = consumers(model)
    producer = {out: node for node in model.graph.node for out in node.output}
    for node, slot in users.get(init.name, []):
        if node.op_type == "Attention" and slot == 3 and init.data_type == onnx.TensorProto.BOOL:
            t = shape[-1]
            return np.broadcast_to(np.tril(np.ones((t, t), dtype=bool)), shape).copy()
        if node.op_type == "Add" and any(n.op_type == "Softmax" for n, _ in users.get(node.output[0], [])):
            t = shape[-1]
            mask = np.where(np.tril(np.ones((t, t), dtype=bool)), 0.0, np.finfo(np.float32).min).astype(np.float32)
            return np.broadcast_to(mask, shape).copy()
        other = node.input[1 - slot] if len(node.input) == 2 else None
        other_op = producer[other].op_type if other in producer else None
        if node.op_type == "Mul" and len(shape) == 4 and shape[:2] == (1, 1):
            cos, sin = rotary_tables(config, shape[2], shape[3])
            return (sin if other_op == "Concat" else cos).reshape(shape)
        if node.op_type == "Add" and len(shape) == 3 and shape[0] == 1 and other_op == "Gather":
            return seeded_normal(init.name, shape, PARAM_STD)
    raise ValueError(f"{init.name} {list(shape)}: no rule gives this buffer's value")


def parameter_values(model):
    """{parameter name: array in the parameter's layout} of a model whose data is loaded."""
    values = {}
    for name, (param, transposed) in exported_graph.parameters_held(model).items():
        array = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == name))
        values[param] = array.T if transposed else array
    return values


def np_dtype(init):
    return onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[init.data_type]


def set_inline(init, array):
    init.raw_data = np.ascontiguousarray(array, dtype=np_dtype(init)).tobytes()
    del init.float_data[:]


def initializer_value(model, init, held, config, donor):
    """What to write for an initializer, or None to keep the graph's own value. With a donor
    ((parameters by name, buffers by initializer name) of a model whose data exists) every
    parameter takes the donor's, and a buffer the donor's tensor of the same name, type and
    shape; without one, a parameter in the data file is synthetic. Other buffers in the
    data file are computed (buffer_value)."""
    external = init.data_location == onnx.TensorProto.EXTERNAL
    donor_params, donor_buffers = donor or ({}, {})
    if init.name in held:
        param, transposed = held[init.name]
        if donor:
            return donor_params[param].T if transposed else donor_params[param]
        return seeded_normal(init.name, tuple(init.dims), PARAM_STD) if external else None
    if not external:
        return None
    same = donor_buffers.get(init.name)
    if same is not None and same.shape == tuple(init.dims) and same.dtype == np_dtype(init):
        return same
    return buffer_value(model, init, config)


def assemble(src_model, dst_model, config=None, donor=None):
    """Writes dst_model (src_model's graph, its inline parameters replaced when a donor gives
    them) and the external data file it names; returns that file's name."""
    model = onnx.load(src_model, load_external_data=False)
    held = exported_graph.parameters_held(model)
    blobs, location = [], None
    for init in model.graph.initializer:
        value = initializer_value(model, init, held, config, donor)
        if value is None:
            continue
        if init.data_location != onnx.TensorProto.EXTERNAL:
            set_inline(init, value)
            continue
        info = {e.key: e.value for e in init.external_data}
        if location not in (None, info["location"]):
            raise ValueError(f"{src_model}: initializers in both {location} and {info['location']}")
        location = info["location"]
        data = np.ascontiguousarray(value, dtype=np_dtype(init)).tobytes()
        if len(data) != int(info["length"]) or tuple(np.shape(value)) != tuple(init.dims):
            raise ValueError(f"{src_model}: {init.name} has {len(data)} bytes {np.shape(value)}, expected "
                             f"{info['length']} {list(init.dims)}")
        blobs.append((int(info["offset"]), data))
    os.makedirs(os.path.dirname(dst_model), exist_ok=True)
    with open(dst_model, "wb") as f:
        f.write(model.SerializeToString())
    out = bytearray(max(offset + len(data) for offset, data in blobs))
    for offset, data in blobs:
        out[offset:offset + len(data)] = data
    with open(os.path.join(os.path.dirname(dst_model), location), "wb") as f:
        f.write(out)
    return location


def copy(src, dst):
    if os.path.isdir(src):  # files only: the shared tree is read-only, the copy must not be
        for name in os.listdir(src):
            copy(os.path.join(src, name), os.path.join(dst, name))
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(src, dst)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", default=SHARED, help="the shared exports (default %(default)s)")
    parser.add_argument("--out", default=OUT,
                        help="where to write (default tests/data/onnx_modern); its model folders are replaced")
    args = parser.parse_args(argv)
    src, out = args.shared, os.path.abspath(args.out)
    for folder in ("llama_variants", "llama") + SYNTHETIC:
        shutil.rmtree(os.path.join(out, folder), ignore_errors=True)

    variants = os.path.join(src, "llama_variants")
    copy(os.path.join(variants, "external"), os.path.join(out, "llama_variants", "external"))
    copy(os.path.join(variants, "ref"), os.path.join(out, "llama_variants", "ref"))
    shipped = onnx.load(os.path.join(variants, "external", "model.onnx"))
    held = exported_graph.parameters_held(shipped)
    donor = (parameter_values(shipped),
             {t.name: numpy_helper.to_array(t) for t in shipped.graph.initializer if t.name not in held})
    written = [assemble(os.path.join(variants, "model_dynamic.onnx"),
                        os.path.join(out, "llama_variants", "model_dynamic.onnx"), donor=donor)]

    llama_config = json.load(open(os.path.join(src, "llama", "config.json")))
    copy(os.path.join(src, "llama", "config.json"), os.path.join(out, "llama", "config.json"))
    for name in ("model.onnx", "model_opset23.onnx"):
        written.append(assemble(os.path.join(src, "llama", name), os.path.join(out, "llama", name),
                                config=llama_config, donor=donor))

    for arch in SYNTHETIC:
        config_file = os.path.join(src, arch, "config.json")
        copy(config_file, os.path.join(out, arch, "config.json"))
        copy(os.path.join(src, arch, "ref", "input_ids.npy"), os.path.join(out, arch, "ref", "input_ids.npy"))
        written.append(assemble(os.path.join(src, arch, "model.onnx"), os.path.join(out, arch, "model.onnx"),
                                config=json.load(open(config_file))))
    print(f"wrote {out}: {', '.join(written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
