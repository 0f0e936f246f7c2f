"""pgq_profile: pgq's stage (i) inside your own PyTorch training loop.

Two lines around a few steps of the loop you already have::

    import pgq_profile
    with pgq_profile.collect(model, formats=["fp8", "mxfp8"], steps=5, out="profile.yaml"):
        for batch in batches:                    # your loop, unchanged
            loss = model(**batch).loss
            loss.backward()
            optimizer.step(); optimizer.zero_grad()

then let pgq decide, for your GPU, which GEMMs to quantize::

    pgq recipe --profile profile.yaml --hardware h100-sxm --policy recipes/policies/gpu-auto.yaml \\
        -o recipe.yaml --explain --export-torch recipe.json

What it measures. Every nn.Linear (and Hugging Face Conv1D) computes three GEMMs per
training step, and the collector hooks each of them as pgq's instrument_stats pass does in
its own training graph:

    forward  y  = x W^T     lhs x (activation, contracting in), rhs W (weight)
    dgrad    dx = dy W      lhs dy (gradient, contracting out), rhs W
    wgrad    dW = dy^T x    lhs dy (gradient, contracting tokens), rhs x (activation)

For each operand and format it computes on the operand's device the statistics of pgq's
profiles with pgq's quantizers' arithmetic (scales per tensor, per channel along the
non-contracting dim, per block along the contracting one or per 2-D tile; round to
nearest bit-exact, stochastic rounding with torch's random bits; FP8, MX, MOSS, FP4
(NVFP4, MXFP4, the random Hadamard transform) and bf16 grids): SQNR
(E[x^2] / E[(Q(x) - x)^2]) mean, min and max over the steps, MSE, absmax, rms, zero,
underflow and clipping fractions, and how often delayed (and, given the optimizer,
predicted) scales would have clipped. GEMMs are labelled by module path
(`model.layers.0.self_attn.q_proj`, `...:dgrad`, `...:wgrad`) with this device's shapes;
the file is pgq's profile format (plan/profile.cc), so `pgq recipe`, `pgq sqnr-table` and
`--export-torch` work on it without a model file.

With metrics=True (pgq's --profile-metrics) it also records the statistics of the
metrics beyond SQNR (docs/METRICS.md): each operand's bias-aware SQNR per format, each
GEMM's output error (the GEMM computed from both inputs quantized, for the format pairs
pgq's stage (i) measures, against the f32 result) and where each GEMM's result goes
(reach, from the step's autograd graph); with outputs=True (--profile-outputs) the
statistics of each GEMM's result, and the gradient reach that `pgq recipe`'s default
metric for backward GEMMs (effect) needs.

A step is one forward of the model with gradients enabled followed by its backward (a
micro-batch under gradient accumulation); forwards without gradients (evaluation) are
ignored. Under torch.distributed every process profiles its own part of the batch and
the statistics are combined over the processes as pgq's MPI stage (i) combines them;
rank 0 writes the file. Dependencies: torch (1.13 or 2.x) and numpy.

docs/PROFILING.md ("Profiling a PyTorch model") has the details and the cost.
"""
from .collector import COLLECTOR_VERSION, Collector, NonFiniteStatisticsError, ProfileError, linear_modules
from . import profile_file
from .formats import SCHEMES, Format, FormatError, parse as parse_format, profile_formats

__all__ = ["collect", "Collector", "ProfileError", "NonFiniteStatisticsError", "FormatError", "COLLECTOR_VERSION",
           "SCHEMES", "parse_format", "profile_formats", "linear_modules"]
__version__ = "{}".format(COLLECTOR_VERSION)


def collect(model, formats=(), steps=5, out="profile.yaml", **options):
    """Profile `steps` training steps of `model` into the pgq profile `out` (and a CSV beside it).

    Use it as a context manager around your training loop; the profile is written when the
    block ends (rank 0 under torch.distributed). Every argument is checked here, before any
    step runs, and a bad one raises ProfileError.

    model            the torch.nn.Module your loop calls (a DDP or torch.compile wrapper is fine)
    formats          what to measure besides int8 per channel (always): pgq's format schemes
                     (int8, fp8, fp8_e4m3, mxfp8, mxint8, moss_fp8, nvfp4, mxfp4, bf16: the
                     scheme's operand and weight formats with round to nearest, its gradient
                     format with both roundings; nvfp4 and mxfp4 also with the random Hadamard
                     transform) or formats in pgq's text form ("e4m3:block32:rtn:scale=e8m0",
                     "int4:channel:sr", "nvfp4"), as `pgq train --profile-formats`; a list or a
                     comma-separated string
    steps            training steps to profile (>= 1)
    out              the profile to write (YAML; its .csv beside it)

    Keyword options:
    warmup           steps to let pass before profiling (default 0)
    name             the model's name in the profile (default: its class name)
    amax_history     the delayed-scaling history H the scaling record uses (default 16)
    optimizer        the torch.optim optimizer of the loop: with it, weights also get
                     predicted-scale records (MOSS) from each step's learning rate
    tensor_parallel  devices that split each layer (consecutive ranks), default 1
    sharding         {module path regex: "column" | "row"}: how those layers are split
                     (Megatron layout), so that the profile records global and per-device
                     shapes; layers no pattern matches are replicated
    group            the torch.distributed process group to combine over (default: all)
    seed             seed of the stochastic-rounding bits
    metrics          also the metrics' statistics: bias_sqnr_mean, output_errors, reach (default
                     False). reach is left out, with a warning saying why, when a matrix
                     parameter is read outside nn.Linear/Conv1D/nn.Embedding modules (a tied
                     head written as x @ W.T) or a layer first runs in the backward (reentrant
                     activation checkpointing): then the gradients it would count are unknown
    outputs          also each GEMM's result's statistics (an "out" operand), and with metrics
                     the gradient_reach (default False)

    The profile's run record has step_ms, the mean time of a warmup step (0 without
    warmup steps), and with metrics metrics_step_ms, the mean time of a profiled one:
    from a step's forward to the next one's (synchronized on CUDA), the first of each
    kind left out when there are others.

    Raises ProfileError (a model without linear layers, an unknown format, steps < 1, a
    path that cannot be written, metrics or outputs not a bool; no complete step in the
    block) and
    NonFiniteStatisticsError (an operand with NaN or Inf, naming module, operand and step).
    """
    return Collector(model, formats, steps, out, **options)
