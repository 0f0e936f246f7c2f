"""What an ONNX file written by PyTorch's torch.export-based exporter (torch >= 2.9) says
about the model it came from: the parameter each initializer holds.

The exporter records, beside the ONNX graph:
- the ExportedProgram's graph signature (graph metadata_props), one line per placeholder:
  `p_model_norm_weight: PARAMETER target='model.norm.weight'`;
- on every node (NodeProto field 9, metadata_props, which onnx 1.12 does not know and
  keeps as an unknown field) the FX node it lowers, e.g.
  `%linear : [...] = call_function[target=torch.ops.aten.linear.default](args = (%mul_3,
  %p_model_layers_0_self_attn_q_proj_weight), kwargs = {})`.

An initializer holds a parameter in one of two ways: it carries the parameter's own name
(norm gains, biases, embeddings, GPT-2's Conv1D weights), or the onnxscript optimizer
folded `aten.linear`'s transpose into it (`val_93` = q_proj.weight^T, read by a MatMul as
its right operand), so that the parameter's gradient is the initializer's transposed.
Every other float initializer (rotary tables, causal masks, GPT-2's folded slice of the
position table) belongs to no parameter.
"""
import re

import onnx

NODE_METADATA_FIELD = 9
GRAPH_METADATA_FIELD = 16
SIGNATURE_KEY = "pkg.torch.export.ExportedProgram.graph_signature"
FX_NODE_KEY = "pkg.torch.onnx.fx_node"
LINEAR = "torch.ops.aten.linear.default"


def _entries(unknown_fields, field_number):
    out = {}
    for field in unknown_fields:
        if field.field_number == field_number:
            entry = onnx.StringStringEntryProto()
            entry.ParseFromString(field.data)
            out[entry.key] = entry.value
    return out


def node_metadata(node):
    """A NodeProto's metadata_props (pkg.torch.onnx.name_scopes, .class_hierarchy, .fx_node)."""
    return _entries(node.UnknownFields(), NODE_METADATA_FIELD)


def signature_parameters(model):
    """{placeholder: parameter name} from the graph signature, e.g. p_lm_head_weight: lm_head.weight."""
    text = _entries(model.graph.UnknownFields(), GRAPH_METADATA_FIELD).get(SIGNATURE_KEY, "")
    return dict(re.findall(r"^(\w+): PARAMETER target='([^']+)'", text, re.MULTILINE))


def fx_call(node):
    """(target, [%operand names]) of the FX node a node lowers, or (None, [])."""
    fx = node_metadata(node).get(FX_NODE_KEY, "")
    match = re.search(r"target=([^\]]+)\]\(args = \((.*)\), kwargs = ", fx)
    if not match:
        return None, []
    return match.group(1), re.findall(r"%(\w+)", match.group(2))


def float_initializers(model):
    return [t for t in model.graph.initializer if t.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE,
                                                                   onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)]


def parameters_held(model):
    """{initializer name: (parameter name, transposed)} for every initializer that holds a
    parameter; transposed means the initializer is the parameter's transpose."""
    placeholders = signature_parameters(model)
    names = set(placeholders.values())
    held = {}
    for init in float_initializers(model):
        if init.name in names:
            held[init.name] = (init.name, False)
    for node in model.graph.node:
        # [*, in] x [in, out] -> [*, out]: the folded weight is aten.linear's W^T.
        if node.op_type != "MatMul" or len(node.input) < 2 or node.input[1] in held:
            continue
        target, operands = fx_call(node)
        if target == LINEAR and len(operands) >= 2 and operands[1] in placeholders:
            held[node.input[1]] = (placeholders[operands[1]], True)
    return {name: held[name] for name in (t.name for t in float_initializers(model)) if name in held}
