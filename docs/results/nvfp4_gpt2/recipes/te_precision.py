"""Transformer Engine quantizer factories for pgq recipe pgq_budget (model gpt2-124m, hardware b200, policy pgq_budget).

Written by `pgq recipe --export-megatron`. TE's CustomRecipe(qfactory=f) calls f(role) for each
tensor a module quantizes: role.tensor_type is "input", "weight" or "grad_output" (TE's
QuantizerRole; older TE passes "<scope>:<tensor>" strings). f returns a quantizer, or None
to keep that tensor in high precision. PGQ_TENSOR_FORMATS maps each Megatron module and
tensor role to the format pgq chose for that operand: input and weight are the forward
GEMM's operands, grad_output the backward GEMMs' gradient; rht (random Hadamard transform)
and sr (stochastic rounding) are per tensor, as TE's NVFP4Quantizer takes them.
Quantizer arguments follow TE's transformer_engine/pytorch/custom_recipes/
quantization_recipes_base.py (nvfp4_quantizer_factory, mxfp8_quantizer_factory,
current_scaling_quantizer_factory).
"""

PGQ_TENSOR_FORMATS = {
    "decoder.layers.0.self_attention.linear_qkv": {  # layer0/attn/q, layer0/attn/k, layer0/attn/v
        "input": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": False, "sr": True},
    },
    "decoder.layers.0.self_attention.linear_proj": {  # layer0/attn/out
        "input": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": False, "sr": True},
    },
    "decoder.layers.0.mlp.linear_fc1": {  # layer0/mlp/up
        "input": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": False, "sr": True},
    },
    "decoder.layers.0.mlp.linear_fc2": {  # layer0/mlp/down
        "input": None,
        "weight": None,
        "grad_output": None,
    },
    "decoder.layers.1.self_attention.linear_qkv": {  # layer1/attn/q, layer1/attn/k, layer1/attn/v
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.1.self_attention.linear_proj": {  # layer1/attn/out
        "input": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": False, "sr": True},
    },
    "decoder.layers.1.mlp.linear_fc1": {  # layer1/mlp/up
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.1.mlp.linear_fc2": {  # layer1/mlp/down
        "input": None,
        "weight": None,
        "grad_output": None,
    },
    "decoder.layers.2.self_attention.linear_qkv": {  # layer2/attn/q, layer2/attn/k, layer2/attn/v
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.2.self_attention.linear_proj": {  # layer2/attn/out
        "input": None,
        "weight": None,
        "grad_output": None,
    },
    "decoder.layers.2.mlp.linear_fc1": {  # layer2/mlp/up
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.2.mlp.linear_fc2": {  # layer2/mlp/down
        "input": None,
        "weight": None,
        "grad_output": None,
    },
    "decoder.layers.3.self_attention.linear_qkv": {  # layer3/attn/q, layer3/attn/k, layer3/attn/v
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.3.self_attention.linear_proj": {  # layer3/attn/out
        "input": None,
        "weight": None,
        "grad_output": None,
    },
    "decoder.layers.3.mlp.linear_fc1": {  # layer3/mlp/up
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.3.mlp.linear_fc2": {  # layer3/mlp/down
        "input": None,
        "weight": None,
        "grad_output": None,
    },
    "decoder.layers.4.self_attention.linear_qkv": {  # layer4/attn/q, layer4/attn/k, layer4/attn/v
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.4.self_attention.linear_proj": {  # layer4/attn/out
        "input": None,
        "weight": None,
        "grad_output": None,
    },
    "decoder.layers.4.mlp.linear_fc1": {  # layer4/mlp/up
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.4.mlp.linear_fc2": {  # layer4/mlp/down
        "input": None,
        "weight": None,
        "grad_output": None,
    },
    "decoder.layers.5.self_attention.linear_qkv": {  # layer5/attn/q, layer5/attn/k, layer5/attn/v
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.5.self_attention.linear_proj": {  # layer5/attn/out
        "input": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": False, "sr": True},
    },
    "decoder.layers.5.mlp.linear_fc1": {  # layer5/mlp/up
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.5.mlp.linear_fc2": {  # layer5/mlp/down
        "input": None,
        "weight": None,
        "grad_output": None,
    },
    "decoder.layers.6.self_attention.linear_qkv": {  # layer6/attn/q, layer6/attn/k, layer6/attn/v
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.6.self_attention.linear_proj": {  # layer6/attn/out
        "input": None,
        "weight": None,
        "grad_output": None,
    },
    "decoder.layers.6.mlp.linear_fc1": {  # layer6/mlp/up
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.6.mlp.linear_fc2": {  # layer6/mlp/down
        "input": None,
        "weight": None,
        "grad_output": None,
    },
    "decoder.layers.7.self_attention.linear_qkv": {  # layer7/attn/q, layer7/attn/k, layer7/attn/v
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.7.self_attention.linear_proj": {  # layer7/attn/out
        "input": None,
        "weight": None,
        "grad_output": None,
    },
    "decoder.layers.7.mlp.linear_fc1": {  # layer7/mlp/up
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.7.mlp.linear_fc2": {  # layer7/mlp/down
        "input": None,
        "weight": None,
        "grad_output": None,
    },
    "decoder.layers.8.self_attention.linear_qkv": {  # layer8/attn/q, layer8/attn/k, layer8/attn/v
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.8.self_attention.linear_proj": {  # layer8/attn/out
        "input": None,
        "weight": None,
        "grad_output": None,
    },
    "decoder.layers.8.mlp.linear_fc1": {  # layer8/mlp/up
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.8.mlp.linear_fc2": {  # layer8/mlp/down
        "input": None,
        "weight": None,
        "grad_output": None,
    },
    "decoder.layers.9.self_attention.linear_qkv": {  # layer9/attn/q, layer9/attn/k, layer9/attn/v
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.9.self_attention.linear_proj": {  # layer9/attn/out
        "input": None,
        "weight": None,
        "grad_output": None,
    },
    "decoder.layers.9.mlp.linear_fc1": {  # layer9/mlp/up
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.9.mlp.linear_fc2": {  # layer9/mlp/down
        "input": None,
        "weight": None,
        "grad_output": None,
    },
    "decoder.layers.10.self_attention.linear_qkv": {  # layer10/attn/q, layer10/attn/k, layer10/attn/v
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.10.self_attention.linear_proj": {  # layer10/attn/out
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.10.mlp.linear_fc1": {  # layer10/mlp/up
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.10.mlp.linear_fc2": {  # layer10/mlp/down
        "input": None,
        "weight": None,
        "grad_output": None,
    },
    "decoder.layers.11.self_attention.linear_qkv": {  # layer11/attn/q, layer11/attn/k, layer11/attn/v
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.11.self_attention.linear_proj": {  # layer11/attn/out
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.11.mlp.linear_fc1": {  # layer11/mlp/up
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
    "decoder.layers.11.mlp.linear_fc2": {  # layer11/mlp/down
        "input": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": False},
        "weight": {"family": "nvfp4", "element": "e2m1", "rht": False, "two_d": True, "sr": False},
        "grad_output": {"family": "nvfp4", "element": "e2m1", "rht": True, "two_d": False, "sr": True},
    },
}


def _tensor_type(role):
    if isinstance(role, str):
        return role.rsplit(":", 1)[-1]
    return getattr(role, "tensor_type", "")


def _quantizer(spec):
    import transformer_engine_torch as tex

    if spec["family"] == "nvfp4":
        from transformer_engine.pytorch.tensor.nvfp4_tensor import NVFP4Quantizer

        return NVFP4Quantizer(
            fp4_dtype=tex.DType.kFloat4E2M1,
            rowwise=True,
            columnwise=True,
            with_rht=spec["rht"],
            with_post_rht_amax=spec["rht"],
            with_2d_quantization=spec["two_d"],
            stochastic_rounding=spec["sr"],
            with_random_sign_mask=True,
        )
    dtype = tex.DType.kFloat8E4M3 if spec["element"] == "e4m3" else tex.DType.kFloat8E5M2
    if spec["family"] == "mxfp8":
        from transformer_engine.pytorch.tensor.mxfp8_tensor import MXFP8Quantizer

        return MXFP8Quantizer(fp8_dtype=dtype)
    import torch
    from transformer_engine.pytorch.tensor.float8_tensor import Float8CurrentScalingQuantizer

    return Float8CurrentScalingQuantizer(fp8_dtype=dtype, device=torch.device("cuda"))


def _factory_for(module):
    formats = PGQ_TENSOR_FORMATS[module]

    def factory(role):
        spec = formats.get(_tensor_type(role))
        return None if spec is None else _quantizer(spec)

    factory.__name__ = "pgq_factory"
    factory.__doc__ = "The quantizers of " + module + "."
    return factory


# One factory per module, as Megatron's custom_recipe_factory names them.
pgq_factory_0 = _factory_for("decoder.layers.0.self_attention.linear_qkv")
pgq_factory_1 = _factory_for("decoder.layers.0.self_attention.linear_proj")
pgq_factory_2 = _factory_for("decoder.layers.0.mlp.linear_fc1")
pgq_factory_3 = _factory_for("decoder.layers.0.mlp.linear_fc2")
pgq_factory_4 = _factory_for("decoder.layers.1.self_attention.linear_qkv")
pgq_factory_5 = _factory_for("decoder.layers.1.self_attention.linear_proj")
pgq_factory_6 = _factory_for("decoder.layers.1.mlp.linear_fc1")
pgq_factory_7 = _factory_for("decoder.layers.1.mlp.linear_fc2")
pgq_factory_8 = _factory_for("decoder.layers.2.self_attention.linear_qkv")
pgq_factory_9 = _factory_for("decoder.layers.2.self_attention.linear_proj")
pgq_factory_10 = _factory_for("decoder.layers.2.mlp.linear_fc1")
pgq_factory_11 = _factory_for("decoder.layers.2.mlp.linear_fc2")
pgq_factory_12 = _factory_for("decoder.layers.3.self_attention.linear_qkv")
pgq_factory_13 = _factory_for("decoder.layers.3.self_attention.linear_proj")
pgq_factory_14 = _factory_for("decoder.layers.3.mlp.linear_fc1")
pgq_factory_15 = _factory_for("decoder.layers.3.mlp.linear_fc2")
pgq_factory_16 = _factory_for("decoder.layers.4.self_attention.linear_qkv")
pgq_factory_17 = _factory_for("decoder.layers.4.self_attention.linear_proj")
pgq_factory_18 = _factory_for("decoder.layers.4.mlp.linear_fc1")
pgq_factory_19 = _factory_for("decoder.layers.4.mlp.linear_fc2")
pgq_factory_20 = _factory_for("decoder.layers.5.self_attention.linear_qkv")
pgq_factory_21 = _factory_for("decoder.layers.5.self_attention.linear_proj")
pgq_factory_22 = _factory_for("decoder.layers.5.mlp.linear_fc1")
pgq_factory_23 = _factory_for("decoder.layers.5.mlp.linear_fc2")
pgq_factory_24 = _factory_for("decoder.layers.6.self_attention.linear_qkv")
pgq_factory_25 = _factory_for("decoder.layers.6.self_attention.linear_proj")
pgq_factory_26 = _factory_for("decoder.layers.6.mlp.linear_fc1")
pgq_factory_27 = _factory_for("decoder.layers.6.mlp.linear_fc2")
pgq_factory_28 = _factory_for("decoder.layers.7.self_attention.linear_qkv")
pgq_factory_29 = _factory_for("decoder.layers.7.self_attention.linear_proj")
pgq_factory_30 = _factory_for("decoder.layers.7.mlp.linear_fc1")
pgq_factory_31 = _factory_for("decoder.layers.7.mlp.linear_fc2")
pgq_factory_32 = _factory_for("decoder.layers.8.self_attention.linear_qkv")
pgq_factory_33 = _factory_for("decoder.layers.8.self_attention.linear_proj")
pgq_factory_34 = _factory_for("decoder.layers.8.mlp.linear_fc1")
pgq_factory_35 = _factory_for("decoder.layers.8.mlp.linear_fc2")
pgq_factory_36 = _factory_for("decoder.layers.9.self_attention.linear_qkv")
pgq_factory_37 = _factory_for("decoder.layers.9.self_attention.linear_proj")
pgq_factory_38 = _factory_for("decoder.layers.9.mlp.linear_fc1")
pgq_factory_39 = _factory_for("decoder.layers.9.mlp.linear_fc2")
pgq_factory_40 = _factory_for("decoder.layers.10.self_attention.linear_qkv")
pgq_factory_41 = _factory_for("decoder.layers.10.self_attention.linear_proj")
pgq_factory_42 = _factory_for("decoder.layers.10.mlp.linear_fc1")
pgq_factory_43 = _factory_for("decoder.layers.10.mlp.linear_fc2")
pgq_factory_44 = _factory_for("decoder.layers.11.self_attention.linear_qkv")
pgq_factory_45 = _factory_for("decoder.layers.11.self_attention.linear_proj")
pgq_factory_46 = _factory_for("decoder.layers.11.mlp.linear_fc1")
pgq_factory_47 = _factory_for("decoder.layers.11.mlp.linear_fc2")


def pgq_quantizer_factory(role):
    """A factory for modules named after Megatron's (te.Linear(name=...)): by role.name."""
    name = getattr(role, "name", "")
    if name not in PGQ_TENSOR_FORMATS:
        return None
    return _factory_for(name)(role)


def pgq_custom_recipe(module):
    """CustomRecipe for one module, for use with TE's autocast around it."""
    from transformer_engine.common.recipe import CustomRecipe

    return CustomRecipe(qfactory=_factory_for(module))
