#!/usr/bin/python3
"""An ONNX interpreter in PyTorch (float64): the next-token loss of an exported language
model and the gradient of every float initializer, as a reference independent of pgq.

    /usr/bin/python3 tests/onnx/modern/torch_eval.py MODEL.onnx --inputs DIR [--out DIR]
        [--check REFDIR]

DIR holds input_ids.npy. The graph's first output is taken as logits [B, T, V]; the loss
is the mean cross-entropy of logits[:, :-1] against input_ids[:, 1:] (what PyTorch's
reference in /work/shared/models/onnx_modern computes). Every float initializer is a leaf
that requires grad; the gradients of those that hold a parameter (exported_graph.py) are
mapped to the parameter's name and layout.

--out writes loss.npy, logits.npy and grads/<parameter>.npy (float64). --check compares
with a PyTorch reference folder (loss.npy, logits.npy, grads/<parameter>.npy): loss within
1e-5 relative, logits and every gradient within 1e-4 of the tensor's largest magnitude;
prints one line per tensor and exits 1 on a failure or a parameter missing on either side.

Each ONNX op is one function in OPS, taking (inputs, attributes, Context); an op not in
the table is refused by name.
"""
import argparse
import collections
import math
import os
import sys

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import exported_graph  # noqa: E402

LOSS_BOUND = 1e-5
TENSOR_BOUND = 1e-4
FLOAT = torch.float64
FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}
BOOL_TYPES = {onnx.TensorProto.BOOL}


class Context(collections.namedtuple("Context", "opset outputs")):
    """What an op needs beyond its operands: the model's opset and the node's output count."""


def dtype_of(onnx_type):
    """Every float type computes in float64, every integer type in int64."""
    if onnx_type in FLOAT_TYPES:
        return FLOAT
    return torch.bool if onnx_type in BOOL_TYPES else torch.int64


def ints(tensor):
    return [int(v) for v in tensor.reshape(-1).tolist()]


def axis_of(axis, rank):
    return axis + rank if axis < 0 else axis


def input_or_attr(inputs, index, attrs, name, opset, since):
    """An operand that moved from an attribute to an input at opset `since` (ReduceMean's and
    Squeeze's axes, Split's split)."""
    if opset >= since:
        return ints(inputs[index]) if len(inputs) > index and inputs[index] is not None else None
    return attrs.get(name)


def binary(fn):
    return lambda inputs, attrs, ctx: [fn(inputs[0], inputs[1])]


def unary(fn):
    return lambda inputs, attrs, ctx: [fn(inputs[0])]


def div(a, b):
    return torch.div(a, b, rounding_mode="trunc") if not a.is_floating_point() else a / b


def gemm(inputs, attrs, ctx):
    a, b = inputs[0], inputs[1]
    a = a.transpose(0, 1) if attrs.get("transA", 0) else a
    b = b.transpose(0, 1) if attrs.get("transB", 0) else b
    out = attrs.get("alpha", 1.0) * (a @ b)  # [M,K] x [K,N] -> [M,N]
    if len(inputs) > 2 and inputs[2] is not None:
        out = out + attrs.get("beta", 1.0) * inputs[2]
    return [out]


def reduce_mean(inputs, attrs, ctx):
    axes = input_or_attr(inputs, 1, attrs, "axes", ctx.opset, 18)
    x = inputs[0]
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return [x]
        axes = list(range(x.dim()))
    return [x.mean(dim=[axis_of(a, x.dim()) for a in axes], keepdim=bool(attrs.get("keepdims", 1)))]


def reshape(inputs, attrs, ctx):
    x, shape = inputs[0], ints(inputs[1])
    if not attrs.get("allowzero", 0):
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return [x.reshape(shape)]


def transpose(inputs, attrs, ctx):
    x = inputs[0]
    return [x.permute(attrs.get("perm", list(reversed(range(x.dim())))))]


def slice_(inputs, attrs, ctx):
    x = inputs[0]
    starts, ends = ints(inputs[1]), ints(inputs[2])
    axes = ints(inputs[3]) if len(inputs) > 3 and inputs[3] is not None else list(range(len(starts)))
    steps = ints(inputs[4]) if len(inputs) > 4 and inputs[4] is not None else [1] * len(starts)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis, dim = axis_of(axis, x.dim()), x.shape[axis_of(axis, x.dim())]
        start, end = (start + dim if start < 0 else start), (end + dim if end < 0 else end)
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        x = x.index_select(axis, torch.arange(start, end, step, dtype=torch.int64))
    return [x]


def concat(inputs, attrs, ctx):
    return [torch.cat(inputs, dim=attrs["axis"])]


def unsqueeze(inputs, attrs, ctx):
    x = inputs[0]
    axes = ints(inputs[1]) if ctx.opset >= 13 else attrs["axes"]
    rank = x.dim() + len(axes)
    for axis in sorted(axis_of(a, rank) for a in axes):
        x = x.unsqueeze(axis)
    return [x]


def squeeze(inputs, attrs, ctx):
    x = inputs[0]
    axes = input_or_attr(inputs, 1, attrs, "axes", ctx.opset, 13)
    if axes is None:
        return [x.reshape([d for d in x.shape if d != 1])]
    drop = {axis_of(a, x.dim()) for a in axes}
    return [x.reshape([d for i, d in enumerate(x.shape) if i not in drop])]


def expand(inputs, attrs, ctx):
    x = inputs[0]
    return [x.expand(torch.broadcast_shapes(tuple(x.shape), tuple(ints(inputs[1]))))]


def softmax(inputs, attrs, ctx):
    return [torch.softmax(inputs[0], dim=attrs.get("axis", -1 if ctx.opset >= 13 else 1))]


def where(inputs, attrs, ctx):
    return [torch.where(inputs[0].bool(), inputs[1], inputs[2])]


def gather(inputs, attrs, ctx):
    x, indices = inputs[0], inputs[1]
    axis = axis_of(attrs.get("axis", 0), x.dim())
    flat = indices.reshape(-1)
    flat = torch.where(flat < 0, flat + x.shape[axis], flat)
    out = x.index_select(axis, flat)
    return [out.reshape(tuple(x.shape[:axis]) + tuple(indices.shape) + tuple(x.shape[axis + 1:]))]


def gather_nd(inputs, attrs, ctx):
    if attrs.get("batch_dims", 0):
        raise NotImplementedError("GatherND with batch_dims > 0")
    x, indices = inputs[0], inputs[1]
    return [x[tuple(indices[..., i] for i in range(indices.shape[-1]))]]


def split(inputs, attrs, ctx):
    x = inputs[0]
    axis = axis_of(attrs.get("axis", 0), x.dim())
    sizes = input_or_attr(inputs, 1, attrs, "split", ctx.opset, 13)
    if sizes is None:
        count = attrs.get("num_outputs", ctx.outputs)
        chunk = math.ceil(x.shape[axis] / count)
        sizes = [min(chunk, x.shape[axis] - i * chunk) for i in range(count)]
    return list(torch.split(x, sizes, dim=axis))


def layer_norm(inputs, attrs, ctx):
    x, scale = inputs[0], inputs[1]
    dims = list(range(axis_of(attrs.get("axis", -1), x.dim()), x.dim()))
    mean = x.mean(dim=dims, keepdim=True)
    inv_std = 1.0 / torch.sqrt(((x - mean) ** 2).mean(dim=dims, keepdim=True) + attrs.get("epsilon", 1e-5))
    y = (x - mean) * inv_std * scale
    if len(inputs) > 2 and inputs[2] is not None:
        y = y + inputs[2]
    return [y, mean, inv_std]


def rms_norm(inputs, attrs, ctx):
    x, scale = inputs[0], inputs[1]
    dims = list(range(axis_of(attrs.get("axis", -1), x.dim()), x.dim()))
    return [x / torch.sqrt((x * x).mean(dim=dims, keepdim=True) + attrs.get("epsilon", 1e-5)) * scale]


def attention(inputs, attrs, ctx):
    """ONNX Attention (opset 23), as onnx's reference implementation computes it: scores =
    (Q*sqrt(scale)) (K*sqrt(scale))^T, softcapped, plus the mask (bool: True attends; float:
    added) and the causal bias (key j <= query i); GQA repeats each kv head for the
    consecutive q heads it serves. Without past_key/past_value."""
    q, k, v = inputs[0], inputs[1], inputs[2]
    mask = inputs[3] if len(inputs) > 3 else None
    if len(inputs) > 4 and any(t is not None for t in inputs[4:]):
        raise NotImplementedError("Attention with past_key/past_value or nonpad_kv_seqlen")
    three_d = q.dim() == 3
    if three_d:
        def heads(t, n):
            return t.reshape(t.shape[0], t.shape[1], n, t.shape[2] // n).transpose(1, 2)
        q, k, v = heads(q, attrs["q_num_heads"]), heads(k, attrs["kv_num_heads"]), heads(v, attrs["kv_num_heads"])
    scale = attrs.get("scale") or 1.0 / math.sqrt(q.shape[-1])
    if q.shape[1] != k.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    scores = (q * math.sqrt(scale)) @ (k * math.sqrt(scale)).transpose(-1, -2)
    softcap = attrs.get("softcap", 0.0)
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    q_len, kv_len = scores.shape[-2], scores.shape[-1]
    if mask is not None:
        if mask.dtype == torch.bool:
            mask = torch.zeros(mask.shape, dtype=FLOAT).masked_fill(~mask, float("-inf"))
        if mask.shape[-1] < kv_len:
            mask = torch.nn.functional.pad(mask, (0, kv_len - mask.shape[-1]), value=float("-inf"))
        scores = scores + mask
    if attrs.get("is_causal", 0):
        allowed = torch.ones(q_len, kv_len, dtype=torch.bool).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    y = torch.softmax(scores, dim=-1) @ v
    if three_d:
        y = y.transpose(1, 2).reshape(y.shape[0], y.shape[2], -1)
    return [y]


def shape(inputs, attrs, ctx):
    dims = list(inputs[0].shape)
    return [torch.tensor(dims[attrs.get("start", 0):attrs.get("end", len(dims))], dtype=torch.int64)]


def range_(inputs, attrs, ctx):
    start, limit, delta = (t.item() for t in inputs)
    return [torch.arange(start, limit, delta, dtype=inputs[0].dtype)]


def cast(inputs, attrs, ctx):
    return [inputs[0].to(dtype_of(attrs["to"]))]


def cumsum(inputs, attrs, ctx):
    x, axis = inputs[0], int(inputs[1].item())
    if attrs.get("reverse", 0):
        x = x.flip(axis)
    out = x.cumsum(axis)
    if attrs.get("exclusive", 0):
        out = out - x
    return [out.flip(axis) if attrs.get("reverse", 0) else out]


def variadic(fn):
    def apply(inputs, attrs, ctx):
        out = inputs[0]
        for t in inputs[1:]:
            out = fn(out, t)
        return [out]
    return apply


def trilu(inputs, attrs, ctx):
    k = int(inputs[1].item()) if len(inputs) > 1 and inputs[1] is not None else 0
    return [torch.triu(inputs[0], k) if attrs.get("upper", 1) else torch.tril(inputs[0], k)]


def einsum(inputs, attrs, ctx):
    equation = attrs["equation"]
    return [torch.einsum(equation.decode() if isinstance(equation, bytes) else equation, *inputs)]


def constant_value(attrs):
    if "value" in attrs:
        return tensor_of(attrs["value"], requires_grad=False)
    for name, dtype in (("value_float", FLOAT), ("value_int", torch.int64)):
        if name in attrs:
            return torch.tensor(attrs[name], dtype=dtype)
    for name, dtype in (("value_floats", FLOAT), ("value_ints", torch.int64)):
        if name in attrs:
            return torch.tensor(list(attrs[name]), dtype=dtype)
    raise NotImplementedError(f"Constant with attributes {sorted(attrs)}")


def constant_of_shape(inputs, attrs, ctx):
    value = constant_value(attrs) if "value" in attrs else torch.zeros(1, dtype=FLOAT)
    return [value.reshape(-1)[0].expand(ints(inputs[0])).clone()]


OPS = {
    # elementwise, broadcasting
    "Add": binary(torch.add), "Sub": binary(torch.sub), "Mul": binary(torch.mul), "Div": binary(div),
    "Pow": binary(torch.pow), "Max": variadic(torch.maximum), "Min": variadic(torch.minimum),
    "Equal": binary(torch.eq), "Less": binary(torch.lt), "LessOrEqual": binary(torch.le),
    "Greater": binary(torch.gt), "GreaterOrEqual": binary(torch.ge),
    "And": binary(torch.logical_and), "Or": binary(torch.logical_or), "Not": unary(torch.logical_not),
    "Sqrt": unary(torch.sqrt), "Reciprocal": unary(torch.reciprocal), "Neg": unary(torch.neg),
    "Exp": unary(torch.exp), "Erf": unary(torch.erf), "Relu": unary(torch.relu), "Sigmoid": unary(torch.sigmoid),
    "Tanh": unary(torch.tanh), "Cos": unary(torch.cos), "Sin": unary(torch.sin), "IsNaN": unary(torch.isnan),
    "Where": where, "Cast": cast, "Identity": unary(lambda x: x),
    # contractions, reductions, normalizations
    "MatMul": binary(torch.matmul), "Gemm": gemm, "Einsum": einsum, "ReduceMean": reduce_mean, "CumSum": cumsum,
    "Softmax": softmax, "LayerNormalization": layer_norm, "RMSNormalization": rms_norm, "Attention": attention,
    # layout and indexing
    "Reshape": reshape, "Transpose": transpose, "Slice": slice_, "Concat": concat, "Split": split,
    "Unsqueeze": unsqueeze, "Squeeze": squeeze, "Expand": expand, "Gather": gather, "GatherND": gather_nd,
    "Trilu": trilu,
    # shapes and constants
    "Shape": shape, "Range": range_, "ConstantOfShape": constant_of_shape,
    "Constant": lambda inputs, attrs, ctx: [constant_value(attrs)],
}


def tensor_of(proto, requires_grad):
    array = numpy_helper.to_array(proto)
    tensor = torch.from_numpy(np.array(array)).to(dtype_of(proto.data_type))
    return tensor.requires_grad_(requires_grad and tensor.is_floating_point())


def evaluate(model, input_ids):
    """(loss, logits, {initializer: gradient}) of a loaded model (external data loaded)."""
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    leaves = {t.name: tensor_of(t, requires_grad=True) for t in model.graph.initializer}
    values = dict(leaves)
    values[model.graph.input[0].name] = torch.from_numpy(input_ids).to(torch.int64)
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx") or node.op_type not in OPS:
            raise NotImplementedError(f"{node.name or node.output[0]}: no rule for {node.domain}::{node.op_type}")
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        inputs = [values[name] if name else None for name in node.input]
        outputs = OPS[node.op_type](inputs, attrs, Context(opset, len(node.output)))
        for name, value in zip(node.output, outputs):
            if name:
                values[name] = value
    logits = values[model.graph.output[0].name]
    labels = torch.from_numpy(input_ids[:, 1:]).reshape(-1)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels)
    floats = [name for name, leaf in leaves.items() if leaf.requires_grad]
    grads = torch.autograd.grad(loss, [leaves[name] for name in floats], allow_unused=True)
    grads = {name: (g if g is not None else torch.zeros_like(leaves[name])).numpy() for name, g in zip(floats, grads)}
    return float(loss), logits.detach().numpy(), grads


def parameter_grads(model, grads):
    """{parameter name: gradient in the parameter's layout}; initializers holding the same
    parameter add up."""
    out = {}
    for name, (param, transposed) in exported_graph.parameters_held(model).items():
        grad = grads[name].T if transposed else grads[name]
        out[param] = out[param] + grad if param in out else grad
    return out


def reference(model_file, inputs_dir):
    """(loss, logits, {parameter: gradient}) of an ONNX file on inputs_dir/input_ids.npy."""
    model = onnx.load(model_file)
    loss, logits, grads = evaluate(model, np.load(os.path.join(inputs_dir, "input_ids.npy")))
    return loss, logits, parameter_grads(model, grads)


def relative(ours, ref):
    return float(np.abs(np.asarray(ours, np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30))


def check(loss, logits, grads, ref_dir):
    """Lines of the comparison with a PyTorch reference folder, and the number of failures."""
    lines, failures = [], 0
    ref_loss = float(np.load(os.path.join(ref_dir, "loss.npy")))
    rel = abs(loss - ref_loss) / abs(ref_loss)
    bad = not rel <= LOSS_BOUND
    lines.append(f"{'loss':<48} torch_eval {loss:.7f} ref {ref_loss:.7f} rel err {rel:.2e}{'  FAIL' if bad else ''}")
    failures += bad
    logits_file = os.path.join(ref_dir, "logits.npy")
    if os.path.exists(logits_file):
        rel = relative(logits, np.load(logits_file))
        bad = not rel <= TENSOR_BOUND
        lines.append(f"{'logits':<48} rel err {rel:.2e}{'  FAIL' if bad else ''}")
        failures += bad
    grad_dir = os.path.join(ref_dir, "grads")
    ref_names = sorted(f[:-len(".npy")] for f in os.listdir(grad_dir) if f.endswith(".npy"))
    for name in sorted(set(ref_names) | set(grads)):
        if name not in grads or name not in ref_names:
            lines.append(f"{name:<48} MISSING in {'torch_eval' if name not in grads else ref_dir}  FAIL")
            failures += 1
            continue
        ref = np.load(os.path.join(grad_dir, name + ".npy"))
        if ref.shape != grads[name].shape:
            lines.append(f"{name:<48} shape {grads[name].shape}, ref {ref.shape}  FAIL")
            failures += 1
            continue
        rel = relative(grads[name], ref)
        bad = not rel <= TENSOR_BOUND
        lines.append(f"{name:<48} rel err {rel:.2e}{'  FAIL' if bad else ''}")
        failures += bad
    lines.append(f"{len(ref_names) + 2} tensors compared, {failures} failed")
    return lines, failures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model")
    parser.add_argument("--inputs", required=True, help="folder with input_ids.npy")
    parser.add_argument("--out", help="write loss.npy, logits.npy, grads/<parameter>.npy here")
    parser.add_argument("--check", help="compare with this PyTorch reference folder")
    args = parser.parse_args(argv)
    loss, logits, grads = reference(args.model, args.inputs)
    print(f"{args.model}: loss {loss:.7f}, {len(grads)} parameters")
    if args.out:
        os.makedirs(os.path.join(args.out, "grads"), exist_ok=True)
        np.save(os.path.join(args.out, "loss.npy"), np.array(loss))
        np.save(os.path.join(args.out, "logits.npy"), logits)
        for name, grad in grads.items():
            np.save(os.path.join(args.out, "grads", name + ".npy"), grad)
    if args.check:
        lines, failures = check(loss, logits, grads, args.check)
        print("\n".join(lines))
        return 1 if failures else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
