"""The collector: hooks on a model's linear layers that compute, during a few steps of the
user's own training loop, the statistics pgq's stage (i) computes, then the profile."""
import collections
import contextlib
import functools
import os
import re
import time
import warnings
import weakref

import torch

from . import formats as formats_mod
from . import profile_file
from .quant import FORMAT_FIELDS, SQNR_CAP, TENSOR_FIELDS, Noise, TensorSums, format_row, sum_squares

# The version of the profiles this collector writes (pgq refuses newer ones: plan/profile.h
# kCollectorVersion). Raise it when the meaning of a field changes.
COLLECTOR_VERSION = 1
DEFAULT_AMAX_HISTORY = 16  # pgq train --profile-amax-history's default


class ProfileError(ValueError):
    """Bad input to the collector, or a run it cannot profile; the message says what and where."""


class NonFiniteStatisticsError(ProfileError):
    """An operand held NaN or Inf in a profiled step (the message names the module, the
    GEMM operand and the step)."""


def _is_conv1d(module):
    # Hugging Face's Conv1D (GPT-2 and relatives): y = x @ W + b with W [in, out].
    return type(module).__name__ == "Conv1D" and getattr(module, "weight", None) is not None and \
        module.weight.dim() == 2 and getattr(module, "nf", None) == module.weight.shape[1]


def linear_modules(model):
    """(module path, module, weight stored [out, in]?) of every nn.Linear and Conv1D."""
    found = []
    for path, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            found.append((path, module, True))
        elif _is_conv1d(module):
            found.append((path, module, False))
    return found


def _autocast_dtype(device_type):
    """The dtype autocast runs GEMMs in on this device type, or None when it is off."""
    if hasattr(torch, "get_autocast_dtype"):  # torch >= 2.4
        return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None
    if device_type == "cuda":
        return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None
    if device_type == "cpu":
        return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None
    return None


def layer_of(path):
    """The transformer layer of a module path: the first all-digit component after a named
    one (model.layers.3.mlp -> 3), -1 when there is none (pgq's importer, layerOf)."""
    named = False
    for part in path.split("."):
        digits = part.isdigit() and len(part) < 8
        if digits and named:
            return int(part)
        named = named or (not digits and part != "")
    return -1


ERROR_FIELDS = ("sqnr", "mean_square", "mse")  # per output error pair and step


@functools.lru_cache(maxsize=None)
def _hadamard(text):
    """Whether the format text has the random Hadamard transform (rht)."""
    return formats_mod.parse(text).hadamard


class _Operand:
    """One GEMM operand's statistics over the steps: a row [TENSOR_FIELDS, FORMAT_FIELDS per
    format] per step (0-d tensors stacked on the device, read once at the end). The GEMM's
    result (side "out", with outputs=True) is one too."""

    def __init__(self, side, role, tensor, shape, contract_dims, formats):
        self.side, self.role, self.tensor = side, role, tensor
        self.shape, self.contract_dims = list(shape), list(contract_dims)
        # Formats with the random Hadamard transform only where the contracting length is a
        # multiple of its block (passes/instrument_stats.cc addAll).
        k = 1
        for d in contract_dims:
            k *= shape[d]
        self.formats = [f for f in formats if k % formats_mod.HADAMARD_BLOCK == 0 or not _hadamard(f)]
        self.rows = []


class _Gemm:
    def __init__(self, label, direction, layer, shape, operands, grad_of=None, pairs=()):
        self.label, self.direction, self.layer = label, direction, layer
        self.grad_of = grad_of  # a backward GEMM: the label of the forward GEMM it differentiates
        self.shape = shape  # [batch, M, K, N] on this device
        self.operands = operands  # [lhs, rhs] (and out with outputs=True)
        self.pairs = list(pairs)  # the (lhs format, rhs format) of its output errors
        self.errors = []  # per step: [ERROR_FIELDS per pair]


class _Sink:
    """A parameter gradient the metrics' reach counts: a Linear call's weight gradient
    (its wgrad GEMM) or an Embedding call's (pgq's scatter-add)."""

    def __init__(self, label, elements):
        self.label, self.elements = label, elements
        self.rows = []  # per step: [mean square of the gradient] (embeddings; wgrads have their out operand)


class _Step:
    """The statistics of one step until it is known to be complete (its backward ran)."""

    def __init__(self, index, number):
        self.index = index
        # The training step it is (warmup steps included, from 0), as pgq's step counter
        # (RunContext::step) numbers it: the signs of the random Hadamard transform.
        self.number = number
        self.rows = {}       # (label, side) -> row tensor
        self.pending = 0     # backward hooks registered and not yet run
        self.waiting = set()  # labels of the modules whose output's gradient has not come
        self.backward = False
        self.closed = False
        self.calls = {}      # module path -> forward calls this step
        # tensor key -> (weak reference to the tensor, TensorSums, {(contract_rows, format): row}):
        # statistics of a tensor several GEMMs read (q, k and v read one x), without
        # keeping the tensor alive (activations and gradients are freed as usual).
        self.cache = {}
        # tensor key -> (weak reference, {(orientation, format): Q}) of the last two tensors
        # quantized for output errors (x, then each of q, k and v's weights, then x again).
        self.quantized = collections.OrderedDict()
        self.names = {}      # tensor key -> the name of the first GEMM operand that read it
        self.lr = {}         # weight name -> (lr, rigorous bound) of the update after this step
        self.error_rows = {}  # GEMM label -> its output errors' row
        self.sink_rows = {}   # embedding sink label -> its row
        self.started = None   # time.perf_counter() at the step's first forward
        # The autograd graph of the step, for the reach (metrics, first profiled step only):
        self.graph = None


class _Unsound(Exception):
    """Why the reach cannot be derived from this model's autograd graph."""


@contextlib.contextmanager
def _exact_matmuls():
    """f32 GEMMs in f32 (not TF32) for the output errors' reference and quantized products."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def _tensors(value):
    """The tensors in a model's output (tensors, sequences, mappings)."""
    if torch.is_tensor(value):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _grad_fns(value, into):
    """The grad_fn of every tensor in a model's output (tensors, sequences, mappings)."""
    into.extend(t.grad_fn for t in _tensors(value) if t.grad_fn is not None)
    return into


class Collector:
    """Profiles `steps` training steps of `model` (see pgq_profile.collect)."""

    def __init__(self, model, formats=(), steps=5, out="profile.yaml", *, warmup=0, name=None,
                 amax_history=DEFAULT_AMAX_HISTORY, optimizer=None, tensor_parallel=1, sharding=None,
                 group=None, seed=0, metrics=False, outputs=False):
        if not isinstance(model, torch.nn.Module):
            raise ProfileError("pgq_profile: model must be a torch.nn.Module, got {}".format(type(model).__name__))
        for key, value, low in (("steps", steps, 1), ("warmup", warmup, 0), ("amax_history", amax_history, 1),
                                ("tensor_parallel", tensor_parallel, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ProfileError("pgq_profile: {} must be an integer >= {}, got {!r}".format(key, low, value))
        for key, value in (("metrics", metrics), ("outputs", outputs)):
            if not isinstance(value, bool):
                raise ProfileError("pgq_profile: {} must be True or False, got {!r}".format(key, value))
        # Checked here, not when a backward hook or the writer first meets them.
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 63:
            raise ProfileError("pgq_profile: seed must be an integer in [0, 2^63), got {!r}".format(seed))
        if name is not None and (not isinstance(name, str) or not name):
            raise ProfileError("pgq_profile: name must be a non-empty string, got {!r}".format(name))
        if optimizer is not None and not isinstance(getattr(optimizer, "param_groups", None), list):
            raise ProfileError("pgq_profile: optimizer must be a torch.optim.Optimizer (its param_groups and state "
                               "bound the weights' next scales), got {!r}".format(optimizer))
        if formats is None or not isinstance(formats, (str, list, tuple)):
            raise ProfileError("pgq_profile: formats must be a list of format schemes or formats (or a comma-"
                               "separated string), got {!r}".format(formats))
        if isinstance(formats, str):
            formats = [f for f in formats.split(",") if f]
        try:
            self.formats, self.gradient_formats = formats_mod.profile_formats(list(formats))
        except formats_mod.FormatError as e:
            raise ProfileError("pgq_profile: {}".format(e)) from None
        self._parsed = {t: formats_mod.parse(t) for t in self.formats + self.gradient_formats}
        self.metrics, self.outputs = metrics, outputs
        self._pairs = formats_mod.output_pairs(list(formats)) if metrics else []
        if not isinstance(out, (str, os.PathLike)) or not str(out):
            raise ProfileError("pgq_profile: out must be a file path, got {!r}".format(out))
        out = os.fspath(out)
        # The profile and the CSV beside it, before any step runs.
        for what, path in (("out", out), ("the CSV beside out", profile_file.csv_path(out))):
            problem = profile_file.output_problem(path)
            if problem:
                raise ProfileError("pgq_profile: {} {}: {}".format(what, path, problem))
        if os.path.realpath(out) == os.path.realpath(profile_file.csv_path(out)):
            raise ProfileError("pgq_profile: out {} and the CSV beside it are one file".format(out))
        self.model, self.steps, self.out, self.warmup = model, steps, out, warmup
        self.name = name or type(model).__name__
        self.amax_history, self.optimizer, self.seed = amax_history, optimizer, seed
        self.tensor_parallel, self.group = tensor_parallel, group
        # DDP and torch.compile wrap the user's model; its paths are the inner model's.
        inner = model
        while hasattr(inner, "module") and type(inner).__name__ in ("DistributedDataParallel", "DataParallel"):
            inner = inner.module
        inner = getattr(inner, "_orig_mod", inner)
        self._linears = linear_modules(inner)
        # nn.Linear(32, 0) has no multiply-add to measure (and pgq's profiles refuse a zero
        # dim): left out, said once.
        empty = [path for path, module, _ in self._linears if module.weight.numel() == 0]
        if empty:
            warnings.warn("pgq_profile: {} {} an empty weight: no GEMM to profile, left out".format(
                ", ".join(p or type(inner).__name__ for p in empty), "has" if len(empty) == 1 else "have"))
            self._linears = [e for e in self._linears if e[1].weight.numel() > 0]
        self._embeddings = [(path, m) for path, m in inner.named_modules() if isinstance(m, torch.nn.Embedding)]
        self._inner = inner
        if not self._linears:
            raise ProfileError("pgq_profile: model {} has no nn.Linear or Conv1D module: there is no GEMM to "
                               "profile".format(type(inner).__name__))
        self._sharding = []
        for pattern, kind in (sharding or {}).items():
            if kind not in ("column", "row", "replicated"):
                raise ProfileError("pgq_profile: sharding[{!r}] is {!r}; expected column, row or replicated".format(
                    pattern, kind))
            try:
                self._sharding.append((re.compile(pattern), kind))
            except re.error as e:
                raise ProfileError("pgq_profile: sharding pattern {!r}: {}".format(pattern, e)) from None
        if self._sharding and tensor_parallel == 1:
            raise ProfileError("pgq_profile: sharding says how layers split over tensor_parallel devices; give "
                               "tensor_parallel > 1 too")
        if tensor_parallel > 1:
            import torch.distributed as dist
            if not (dist.is_available() and dist.is_initialized()):
                raise ProfileError("pgq_profile: tensor_parallel {} needs torch.distributed initialized (the "
                                   "processes of each model replica); without it every GEMM is one device's "
                                   "whole".format(tensor_parallel))
        self._weight_names = {id(p): n for n, p in inner.named_parameters()}
        self._gemms = {}          # label -> _Gemm, in the order of first appearance
        self._step = None
        self._forwards = 0        # grad-enabled forwards of the model so far
        self._committed = 0
        self._dropped = 0
        self._gradless = set()    # modules whose output got no gradient in some profiled step
        self._second_backward = False
        self._handles = []
        self._noises = {}
        self._precision = "f32"
        self._updates = {}        # weight name -> [(lr, bound)], one per profiled step
        self._sinks = {}          # sink label -> _Sink, in the order of first appearance
        self._reach = None        # ([sink labels], {GEMM label: bits of the sinks its result reaches})
        self._reach_unsound = None  # why the reach is left out, once known
        self._step_ms = {"plain": [], "profiled": []}
        self._last_start = None   # (time, "plain" or "profiled", forward index) of the last step's start
        self._cuda = None
        self.profile_path = None

    # ------------------------------------------------------------------ hooks

    def __enter__(self):
        if self._handles or self._forwards:
            raise ProfileError("pgq_profile: a collector profiles one `with` block; make another for another profile")
        self._cuda = any(p.is_cuda for p in self.model.parameters())
        self._handles.append(self.model.register_forward_pre_hook(self._on_model_forward))
        for path, module, out_in in self._linears:
            self._handles.append(module.register_forward_hook(
                lambda m, i, o, path=path, out_in=out_in: self._on_linear(path, m, out_in, i, o)))
        self._handles.append(self.model.register_forward_hook(self._on_model_output))
        if self.metrics:
            for path, module in self._embeddings:
                self._handles.append(module.register_forward_hook(
                    lambda m, i, o, path=path: self._on_embedding(path, m, i, o)))
        return self

    def __exit__(self, exc_type, exc, tb):
        self._remove_hooks()
        if exc_type is not None:
            return False
        self._time_step(None)
        self._close_step()
        self.profile_path = self._finish()
        return False

    def _remove_hooks(self):
        for h in self._handles:
            h.remove()
        self._handles = []

    def _now(self):
        if self._cuda:
            torch.cuda.synchronize()  # the device's time, not the host's
        return time.perf_counter()

    def _time_step(self, profiled):
        """Ends the timing of the last step and starts the next (profiled: True, False for
        a plain (warmup) one, None for no next): a step's time runs from its model forward
        to the next training step's (the user's backward, optimizer step, data loading and
        evaluation forwards in between count), or to the end of the `with` block."""
        now = self._now()
        if self._last_start is not None:
            start, kind, index = self._last_start
            self._step_ms[kind].append((index, (now - start) * 1e3))
        self._last_start = None if profiled is None else (now, "profiled" if profiled else "plain", self._forwards)

    def _on_model_forward(self, module, inputs):
        if not torch.is_grad_enabled():
            return  # evaluation: no backward, not a training step
        self._close_step()
        index = self._forwards
        profiled = index >= self.warmup and self._committed < self.steps
        if index >= self.warmup and not profiled:
            self._time_step(None)
            self._remove_hooks()
            return
        self._time_step(profiled)
        self._forwards += 1
        if not profiled:
            return
        self._step = _Step(index - self.warmup, index)
        if self.metrics and self._reach is None and self._reach_unsound is None:
            self._step.graph = {"gemms": {}, "sinks": {}, "outputs": []}

    def _close_step(self):
        step = self._step
        if step is None:
            return
        self._step = None
        step.closed = True
        if step.backward and step.waiting:
            # The backward ran, but these modules' outputs got no gradient (an output the
            # loss does not read: BERT's pooler, an unused head): the step counts, and their
            # backward GEMMs are left out of the profile (_finish).
            for label in step.waiting:
                self._gradless.add(label)
                for side in ("lhs", "rhs", "out"):
                    for gemm in (label + ":dgrad", label + ":wgrad"):
                        step.rows.pop((gemm, side), None)
            step.pending -= len(step.waiting)
            step.waiting.clear()
        if step.pending or not step.backward:
            self._dropped += 1
            warnings.warn("pgq_profile: step {} of {} had no complete backward (each forward of the model must be "
                          "followed by its backward before the next one); it is not in the profile".format(
                              step.index + 1, self.name))
            return
        for (label, side), row in step.rows.items():
            g = self._gemms[label]
            g.operands[{"lhs": 0, "rhs": 1, "out": 2}[side]].rows.append(row)
        for label, row in step.error_rows.items():
            self._gemms[label].errors.append(row)
        for label, row in step.sink_rows.items():
            self._sinks[label].rows.append(row)
        for key, bound in step.lr.items():
            self._updates.setdefault(key, []).append(bound)
        self._committed += 1
        if step.graph is not None:
            try:
                self._reach = self._reach_of(step.graph)
            except _Unsound as e:
                self._reach_unsound = str(e)
                warnings.warn("pgq_profile: the profile has no reach or gradient_reach (the metrics 'reach' and "
                              "'effect'; pgq recipe's default metric falls back to SQNR): {}".format(e))

    def _noise(self, device):
        n = self._noises.get(device)
        if n is None:
            n = Noise(device, self.seed)
            self._noises[device] = n
        return n

    def _sums(self, step, key, source, tensor):
        """The cache entry of `tensor` (computed from `source`, the module's own tensor):
        found again while `source` is alive; memory reused by another tensor misses."""
        entry = step.cache.get(key)
        if entry is None or entry[0]() is not source:
            entry = (weakref.ref(source), TensorSums(tensor), {})
            step.cache[key] = entry
        return entry

    def _stats(self, step, label, side, key, source, tensor, contract_rows, keep=()):
        """The row of one operand (GEMM `label`'s lhs, rhs or out): the tensor's sums, then
        each of the operand's formats' (computed once per tensor, orientation and format in
        a step: q, k and v read one x). Returns {format: Q(tensor)} for the formats in
        `keep` (the quantized values a GEMM reads; those of the last two tensors are kept
        for the next GEMMs reading them)."""
        fmts = self._gemms[label].operands[{"lhs": 0, "rhs": 1, "out": 2}[side]].formats
        _, sums, rows = self._sums(step, key, source, tensor)
        parts = [sums.row()]
        kept = {}
        last = step.quantized.get(key) if keep else None
        if keep and (last is None or last[0]() is not source):
            last = step.quantized[key] = (weakref.ref(source), {})
            while len(step.quantized) > 2:
                step.quantized.popitem(last=False)
        elif keep:
            step.quantized.move_to_end(key)
        transformed = {}  # H D tensor and its sums, for the formats with rht
        for text in fmts:
            fmt = self._parsed[text]
            # Per-tensor scales do not depend on which dim is contracted (the bias-aware
            # SQNR, summing the errors along it, and the Hadamard transform, along it, do).
            rk = (None if fmt.granularity == "tensor" and not self.metrics and not fmt.hadamard else contract_rows,
                  text)
            row = rows.get(rk)
            if text in keep:
                q = last[1].get(rk)
                if q is None:
                    computed, q = format_row(tensor, contract_rows, fmt, sums, self._noise(tensor.device),
                                             bias=self.metrics, keep=True, step=step.number, transformed=transformed)
                    last[1][rk] = q
                    if row is None:
                        row = rows[rk] = computed
                kept[text] = q
            if row is None:
                row = format_row(tensor, contract_rows, fmt, sums, self._noise(tensor.device), bias=self.metrics,
                                 step=step.number, transformed=transformed)
                rows[rk] = row
            parts.append(row)
        step.rows[(label, side)] = torch.cat(parts)
        return kept

    @staticmethod
    def _errors(reference, products):
        """[sqnr, mean_square, mse] per product (a function computing it) against reference
        (kernels/reduce.cc errorStats), concatenated; each product is overwritten."""
        n = float(reference.numel())
        signal = sum_squares(reference) / n
        rows = []
        for product in products:
            noise = sum_squares(product().sub_(reference)) / n
            sqnr = torch.where(noise > 0, torch.clamp(signal / torch.clamp(noise, min=1e-300), max=SQNR_CAP),
                               torch.full_like(noise, SQNR_CAP))
            rows.append(torch.stack([sqnr, signal, noise]))
        return torch.cat(rows)

    def _gemm(self, label, direction, layer, shape, operands, grad_of=None, out_shape=None):
        g = self._gemms.get(label)
        if g is None:
            # The result: the formats of an operand, a gradient's in the backward (its own
            # contracting length, its last dim, decides about rht).
            fmts = self.formats if direction == "fwd" else self.formats + [
                f for f in self.gradient_formats if f not in self.formats]
            if self.outputs:
                operands = operands + [_Operand("out", "output", label + ":output", out_shape, [len(out_shape) - 1],
                                                fmts)]
            # Each pair gives a gradient operand its gradient format, the others its operand
            # format; a GEMM gets each distinct (lhs, rhs) once (passes/instrument_stats.cc).
            pairs = []
            for operand, gradient in self._pairs:
                pair = tuple(gradient if o.role == "gradient" else operand for o in operands[:2])
                if pair not in pairs:
                    pairs.append(pair)
            g = _Gemm(label, direction, layer, shape, operands, grad_of, pairs)
            self._gemms[label] = g
        elif g.shape != shape:
            raise ProfileError("pgq_profile: GEMM {} changed shape from {} to {} between steps ([batch, M, K, N]); "
                               "profile steps of one batch size and sequence length".format(label, g.shape, shape))
        return g

    @staticmethod
    def _key(t):
        return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, t._version)

    @staticmethod
    def _call_label(step, path):
        """The label of this call of module `path` in `step` (`path`, then `path#2`, ...),
        or None for a forward recomputed in the backward by activation checkpointing (the
        non-reentrant kind; the reentrant kind runs the first forward without gradients,
        so its recomputation is the call that counts)."""
        calls = step.calls.get(path, 0)
        if calls and step.backward:
            return None
        step.calls[path] = calls + 1
        return path if calls == 0 else "{}#{}".format(path, calls + 1)

    def _on_linear(self, path, module, out_in, inputs, output):
        step = self._step
        if step is None or step.closed or not torch.is_grad_enabled() or not inputs:
            return
        x = inputs[0]
        weight = module.weight
        if not torch.is_tensor(x) or x.numel() == 0 or weight.numel() == 0 or not torch.is_tensor(output):
            return
        label = self._call_label(step, path)
        if label is None:
            return
        with torch.no_grad():
            self._forward_stats(step, label, module, weight, out_in, x, output)

    def _forward_stats(self, step, label, module, weight, out_in, x, output):
        n_out, k_in = weight.shape if out_in else (weight.shape[1], weight.shape[0])
        x2 = x.detach().reshape(-1, k_in)
        if x2.dtype != torch.float32:
            x2 = x2.float()
        w = weight.detach()
        w = w if w.dtype == torch.float32 else w.float()
        m = x2.shape[0]
        self._note_precision(x, weight)
        layer = layer_of(label.split("#")[0])
        x_key, w_key = self._key(x), self._key(weight)
        x_name = step.names.setdefault(x_key, label + ":input")
        w_name = self._weight_names.get(id(weight), label + ".weight")
        x_rank = x.dim()
        x_shape = list(x.shape)
        # nn.Linear stores W [out, in] (the forward contracts its dim 1, dgrad its dim 0);
        # Conv1D stores [in, out].
        w_fwd, w_bwd = ([1], [0]) if out_in else ([0], [1])
        fmts = self.formats
        acts = [_Operand("lhs", "activation", x_name, x_shape, [x_rank - 1], fmts),
                _Operand("rhs", "weight", w_name, list(weight.shape), w_fwd, fmts)]
        g = self._gemm(label, "fwd", layer, [1, m, k_in, n_out], acts, out_shape=list(output.shape))
        keep_x = {p[0] for p in g.pairs}
        keep_w = {p[1] for p in g.pairs}
        qx = self._stats(step, label, "lhs", x_key, x, x2, False, keep_x)
        qw = self._stats(step, label, "rhs", w_key, weight, w, not out_in, keep_w)
        # W as the forward's rhs [K, N]: y = x W^T (Linear) or x W (Conv1D).
        as_rhs = (lambda t: t.t()) if out_in else (lambda t: t)
        if self.metrics or self.outputs:
            # The GEMM's result without the bias, as pgq's matmul has it.
            with _exact_matmuls():
                y = torch.mm(x2, as_rhs(w))
                if self.outputs:
                    self._stats(step, label, "out", ("out", label), y, y, False)
                if g.pairs:
                    step.error_rows[label] = self._errors(y, [lambda lf=lf, rf=rf: torch.mm(qx[lf], as_rhs(qw[rf]))
                                                              for lf, rf in g.pairs])
            del y, qx, qw
        dgrad = x.requires_grad
        wgrad = weight.requires_grad
        if step.graph is not None:
            step.graph["gemms"][label] = {"x": x.grad_fn if dgrad else None, "y": output.grad_fn, "wgrad": wgrad,
                                          "dgrad": dgrad, "late": step.backward}
        if not (dgrad or wgrad) or not output.requires_grad:
            return
        grad_fmts = self.formats + [f for f in self.gradient_formats if f not in self.formats]
        y_name = label + ":grad_output"
        y_shape = list(output.shape)
        # With the metrics or the results, both operands of each backward GEMM are read in
        # the backward (x is then held until the backward; autograd saves it anyway when
        # the weight needs a gradient).
        late = self.metrics or self.outputs
        gd = gw = None
        if dgrad:
            gd = self._gemm(label + ":dgrad", "bwd_dgrad", layer, [1, m, n_out, k_in],
                            [_Operand("lhs", "gradient", y_name, y_shape, [len(y_shape) - 1], grad_fmts),
                             _Operand("rhs", "weight", w_name, list(weight.shape), w_bwd, fmts)], grad_of=label,
                            out_shape=x_shape)
            if not late:
                self._stats(step, label + ":dgrad", "rhs", w_key, weight, w, out_in)
        if wgrad:
            gw = self._gemm(label + ":wgrad", "bwd_wgrad", layer, [1, n_out, m, k_in],
                            [_Operand("lhs", "gradient", y_name, y_shape, list(range(len(y_shape) - 1)), grad_fmts),
                             _Operand("rhs", "activation", x_name, x_shape, list(range(x_rank - 1)), fmts)],
                            grad_of=label, out_shape=[n_out, k_in])
            if self.metrics and label not in self._sinks:
                self._sinks[label] = _Sink(label, weight.numel())
            if not late:
                self._stats(step, label + ":wgrad", "rhs", x_key, x, x2, True)
        step.pending += 1
        step.waiting.add(label)
        held = (x, x2) if late and wgrad else (None, None)

        def on_grad(grad, step=step, label=label, n_out=n_out, dgrad=dgrad, wgrad=wgrad, weight=weight, held=held):
            if step.closed:
                return None
            step.backward = True
            if label not in step.waiting:
                # A second backward through the same forward (backward(retain_graph=True),
                # then another loss): the first gradient's statistics stay.
                if not self._second_backward:
                    self._second_backward = True
                    warnings.warn("pgq_profile: a second backward through one forward of {} (retain_graph=True): "
                                  "only the first backward's gradients are profiled".format(self.name))
                return None
            step.waiting.discard(label)
            step.pending -= 1
            with torch.no_grad():
                g = grad.detach().reshape(-1, n_out)
                if g.dtype != torch.float32:
                    g = g.float()
                key = ("grad", label)
                if not late:
                    if dgrad:
                        self._stats(step, label + ":dgrad", "lhs", key, grad, g, False)
                    if wgrad:
                        self._stats(step, label + ":wgrad", "lhs", key, grad, g, True)
                else:
                    self._backward_metrics(step, label, gd, gw, grad, g, weight, out_in, held)
                if wgrad and self.optimizer is not None:
                    self._note_update(step, weight)
            return None
        output.register_hook(on_grad)

    def _backward_metrics(self, step, label, gd, gw, grad, g, weight, out_in, held):
        """The backward GEMMs' operands, results and output errors (metrics or outputs)."""
        key = ("grad", label)
        w = weight.detach()
        w = w if w.dtype == torch.float32 else w.float()
        w_key = self._key(weight)
        with _exact_matmuls():
            if gd is not None:
                # dx = dy W (Linear, W [out, in]) or dy W^T (Conv1D).
                as_rhs = (lambda t: t) if out_in else (lambda t: t.t())
                qg = self._stats(step, gd.label, "lhs", key, grad, g, False, {p[0] for p in gd.pairs})
                qw = self._stats(step, gd.label, "rhs", w_key, weight, w, out_in, {p[1] for p in gd.pairs})
                dx = torch.mm(g, as_rhs(w))
                if self.outputs:
                    self._stats(step, gd.label, "out", ("out", gd.label), dx, dx, False)
                if gd.pairs:
                    step.error_rows[gd.label] = self._errors(
                        dx, [lambda lf=lf, rf=rf: torch.mm(qg[lf], as_rhs(qw[rf])) for lf, rf in gd.pairs])
                del qg, qw, dx
            if gw is not None:
                x, x2 = held
                qg = self._stats(step, gw.label, "lhs", key, grad, g, True, {p[0] for p in gw.pairs})
                qx = self._stats(step, gw.label, "rhs", self._key(x), x, x2, True, {p[1] for p in gw.pairs})
                dw = torch.mm(g.t(), x2)  # [out, in]
                if self.outputs:
                    self._stats(step, gw.label, "out", ("out", gw.label), dw, dw, False)
                if gw.pairs:
                    step.error_rows[gw.label] = self._errors(
                        dw, [lambda lf=lf, rf=rf: torch.mm(qg[lf].t(), qx[rf]) for lf, rf in gw.pairs])

    def _on_embedding(self, path, module, inputs, output):
        """An Embedding call: a parameter gradient the reach counts (pgq's scatter-add),
        and with outputs=True that gradient's squared norm."""
        step = self._step
        if step is None or step.closed or not torch.is_grad_enabled() or not module.weight.requires_grad or \
                not torch.is_tensor(output) or not output.requires_grad or not inputs:
            return
        label = self._call_label(step, path)
        if label is None:
            return
        if label not in self._sinks:
            self._sinks[label] = _Sink(label, module.weight.numel())
        if step.graph is not None:
            step.graph["sinks"][label] = output.grad_fn
        if not self.outputs:
            return
        ids = inputs[0].detach()
        rows, padding = module.weight.shape[0], module.padding_idx
        padding = -1 if padding is None else padding
        scale = bool(module.scale_grad_by_freq)

        def on_grad(grad, step=step, label=label):
            if step.closed:
                return None
            with torch.no_grad():
                dw = torch.ops.aten.embedding_dense_backward(grad.detach().float(), ids, rows, padding, scale)
                square = sum_squares(dw) / dw.numel()
                step.sink_rows[label] = square.reshape(1)
            return None
        output.register_hook(on_grad)

    def _on_model_output(self, module, inputs, output):
        step = self._step
        if step is None or step.closed or not torch.is_grad_enabled():
            return
        if step.graph is not None:
            _grad_fns(output, step.graph["outputs"])
        # The backward started from an output: a step whose Linear layers need no gradient
        # (frozen weights, an input without one: BitFit) has its backward all the same.
        for t in _tensors(output):
            if t.requires_grad:
                t.register_hook(lambda grad, step=step: setattr(step, "backward", True))

    def _reach_of(self, graph):
        """For each GEMM, the parameter gradients (sinks) its result flows into, from the
        autograd graph of one step (runtime/profile_collector.cc fillReach on pgq's graph):
        a wgrad's result reaches its own weight's gradient; a dgrad's result dx reaches the
        gradient of every sink whose output x depends on; a forward GEMM's result reaches
        every sink (the loss's gradient depends on the logits, which depend on it). Sound
        only when every matrix parameter is read by hooked modules alone: raises _Unsound
        (saying why) otherwise."""
        gemms, outputs = graph["gemms"], graph["outputs"]
        late = [label for label, info in gemms.items() if info["late"]]
        if late:
            raise _Unsound("{} first ran in the backward (reentrant activation checkpointing recomputes layers "
                           "outside the step's autograd graph)".format(late[0]))
        if not outputs:
            raise _Unsound("the model's output holds no tensor with a gradient, so its autograd graph cannot be "
                           "walked")
        labels = list(self._sinks)
        bit = {label: 1 << i for i, label in enumerate(labels)}
        own = {}  # node -> bits of the sinks whose output it makes
        for label, info in gemms.items():
            if info["wgrad"] and label in bit:
                own[info["y"]] = own.get(info["y"], 0) | bit[label]
        for label, node in graph["sinks"].items():
            own[node] = own.get(node, 0) | bit[label]
        # The nodes inside each hooked call (from its output back to its input).
        inside = set()
        starts = [(info["y"], info["x"]) for info in gemms.values()] + [(n, None) for n in graph["sinks"].values()]
        for start, stop in starts:
            stack = [start]
            while stack:
                node = stack.pop()
                if node is None or node is stop or node in inside:
                    continue
                inside.add(node)
                if not hasattr(node, "variable"):
                    stack.extend(child for child, _ in node.next_functions)
        matrices = {id(p): name for name, p in self._inner.named_parameters() if p.dim() >= 2 and p.requires_grad}
        foreign = set()
        bits = {}
        roots = outputs + [info["x"] for info in gemms.values() if info["x"] is not None]
        for root in roots:
            stack = [(root, False)]
            while stack:
                node, expanded = stack.pop()
                if node is None or (node in bits and not expanded):
                    continue
                children = [child for child, _ in node.next_functions] if not hasattr(node, "variable") else []
                if not expanded:
                    bits[node] = None  # in progress (autograd graphs have no cycles)
                    stack.append((node, True))
                    stack.extend((child, False) for child in children if child is not None and child not in bits)
                    for child in children:
                        if child is not None and hasattr(child, "variable") and id(child.variable) in matrices \
                                and node not in inside:
                            foreign.add(matrices[id(child.variable)])
                    continue
                b = own.get(node, 0)
                for child in children:
                    if child is not None:
                        b |= bits.get(child) or 0
                bits[node] = b
        if foreign:
            raise _Unsound("parameter(s) {} are read outside nn.Linear, Conv1D and nn.Embedding modules (e.g. a tied "
                           "output layer written as x @ W.T), so the GEMMs reading them are not hooked and their share "
                           "of the gradients is unknown".format(", ".join(sorted(foreign))))
        every = (1 << len(labels)) - 1
        reach = {}
        for label, info in gemms.items():
            reach[label] = every
            if info["dgrad"]:
                reach[label + ":dgrad"] = bits.get(info["x"]) or 0
            if info["wgrad"] and label in bit:
                reach[label + ":wgrad"] = bit[label]
        return labels, reach

    def _note_precision(self, x, weight):
        """bf16 when the GEMM runs in a 16-bit float (under autocast, or on 16-bit tensors):
        the profile's precision, and the bytes the roofline counts."""
        low = (torch.bfloat16, torch.float16)
        dtype = _autocast_dtype(x.device.type)
        if dtype in low or (dtype is None and x.dtype in low and weight.dtype in low):
            self._precision = "bf16"

    def _note_update(self, step, weight):
        """The bound of the optimizer update that follows this step for `weight`: its
        group's lr (read in the backward, before optimizer.step() and any scheduler step)
        and, for Adam-type optimizers, AdamW's exact bound at its next step."""
        for group in self.optimizer.param_groups:
            if any(p is weight for p in group["params"]):
                lr = float(group["lr"])
                bound = 1.0
                betas = group.get("betas")
                if betas is not None:
                    state = self.optimizer.state.get(weight, {})
                    done = state.get("step", 0)
                    done = int(done.item()) if torch.is_tensor(done) else int(done)
                    bound = profile_file.adam_update_bound(float(betas[0]), float(betas[1]), done + 1)
                step.lr[self._weight_names.get(id(weight), str(id(weight)))] = (lr, bound)
                return

    # ------------------------------------------------------------------ the profile

    def _finish(self):
        if self._committed == 0:
            raise ProfileError("pgq_profile: no complete training step of {} ran inside the `with` block (a step is "
                               "one forward of the model with gradients enabled, then its backward){}".format(
                                   self.name, "" if not self.warmup else
                                   "; {} warmup step(s) come first".format(self.warmup)))
        if self._committed < self.steps:
            warnings.warn("pgq_profile: {} of the {} requested steps were profiled".format(self._committed, self.steps))
        gemms = list(self._gemms.values())
        if self._gradless:
            warnings.warn("pgq_profile: the outputs of {} got no gradient in a profiled step (the loss does not read "
                          "them): their backward GEMMs are not in the profile".format(", ".join(sorted(self._gradless))))
            gemms = [g for g in gemms if g.grad_of not in self._gradless]
        sinks = list(self._sinks.values())
        # One tensor per operand, per GEMM's output errors and per embedding's gradient:
        # [steps, fields], read from the device once.
        local, layout = [], []
        width = len(TENSOR_FIELDS)
        for g in gemms:
            for o in g.operands:
                local.append(self._stacked(o.rows, width + len(FORMAT_FIELDS) * len(o.formats)))
                layout.append((g.label, o.side, len(o.rows), len(o.formats)))
        for g in gemms:
            if g.pairs:
                local.append(self._stacked(g.errors, len(ERROR_FIELDS) * len(g.pairs)))
                layout.append((g.label, "output_errors", len(g.errors), len(g.pairs)))
        for sink in sinks:
            local.append(self._stacked(sink.rows, 1))
            layout.append((sink.label, "gradient", len(sink.rows), 1))
        world, rank, everything = self._gather(layout, local)
        self._check_finite(gemms, everything)
        if rank == 0:
            run = self._run_record(world)
            records = self._records(gemms, everything, world)
            if self.metrics:
                self._metric_records(gemms, sinks, records, everything, world)
            profile_file.write_atomically(self.out, profile_file.profile_yaml(run, records))
            profile_file.write_atomically(profile_file.csv_path(self.out), profile_file.profile_csv(records))
        return self.out

    @staticmethod
    def _stacked(rows, width):
        return torch.stack(rows).double().cpu() if rows else torch.zeros(0, width, dtype=torch.float64)

    def _check_finite(self, gemms, everything):
        """Raises NonFiniteStatisticsError for the first operand and step (of any rank) whose
        statistics are not finite; every rank raises the same."""
        i = 0
        for g in gemms:
            for o in g.operands:
                per_rank = everything[i]
                i += 1
                for rank, rows in enumerate(per_rank):
                    bad = (~torch.isfinite(rows)).any(dim=1).nonzero()
                    if not bad.numel():
                        continue
                    module = g.label.split(":")[0].split("#")[0]
                    gemm = {"fwd": "forward", "bwd_dgrad": "dgrad", "bwd_wgrad": "wgrad"}[g.direction]
                    where = " on rank {}".format(rank) if len(per_rank) > 1 else ""
                    raise NonFiniteStatisticsError(
                        "pgq_profile: module {} had NaN or Inf values at profiled step {} of {}{}: the {} operand of "
                        "its {} GEMM ({} {}, tensor {}); its statistics are not finite (the step diverged, or values "
                        "beyond 1.8e19 overflow float32 squares), so no profile was written".format(
                            module, int(bad[0]) + 1, rows.shape[0], where, o.role, gemm, g.label, o.side, o.tensor))

    def _gather(self, layout, local):
        """Every process's rows (world = 1 without torch.distributed)."""
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            return 1, 0, [[rows] for rows in local]
        world = dist.get_world_size(self.group)
        rank = dist.get_rank(self.group)
        if world % self.tensor_parallel:
            raise ProfileError("pgq_profile: tensor_parallel {} does not divide the {} processes".format(
                self.tensor_parallel, world))
        layouts = [None] * world
        dist.all_gather_object(layouts, layout, group=self.group)
        for r, theirs in enumerate(layouts):
            if theirs != layout:
                diff = next((a, b) for a, b in zip(layout + [None] * len(theirs), theirs + [None] * len(layout))
                            if a != b)
                raise ProfileError("pgq_profile: rank {} profiled other GEMMs or steps than rank {}: {} there, {} "
                                   "here (every process must run the same model and steps)".format(
                                       r, rank, diff[1], diff[0]))
        flat = torch.cat([rows.reshape(-1) for rows in local]) if local else torch.zeros(0, dtype=torch.float64)
        device = torch.device("cpu")
        if dist.get_backend(self.group) == "nccl":
            device = torch.device("cuda", torch.cuda.current_device())
        flat = flat.to(device)
        parts = [torch.empty_like(flat) for _ in range(world)]
        dist.all_gather(parts, flat, group=self.group)
        parts = [p.cpu() for p in parts]
        out, at = [], 0
        for rows in local:
            size = rows.numel()
            out.append([p[at:at + size].reshape(rows.shape) for p in parts])
            at += size
        return world, rank, out

    def _sharding_of(self, label):
        path = label.split(":")[0].split("#")[0]
        for pattern, kind in self._sharding:
            if pattern.search(path):
                return kind
        return "replicated"

    def _records(self, gemms, everything, world):
        """The GEMM records of the profile, combined over every process as pgq's MPI stage (i)
        does (runtime/profile_collector.cc): sums and extremes over all; each operand's
        absmax per step as the max over the data-parallel replicas (which share a scale),
        the scaling strategies per tensor-parallel device, their fractions averaged and
        worst ratios maxed over the devices."""
        t = self.tensor_parallel
        split_dims = {"column": {"fwd": 3, "bwd_dgrad": 2, "bwd_wgrad": 1},
                      "row": {"fwd": 2, "bwd_dgrad": 3, "bwd_wgrad": 3}}
        records, i = [], 0
        nt = len(TENSOR_FIELDS)
        for g in gemms:
            kind = self._sharding_of(g.label)
            device_shape = list(g.shape)
            gemm_shape = list(g.shape)
            if kind != "replicated":
                gemm_shape[split_dims[kind][g.direction]] *= t
            b, m, k, n = gemm_shape
            esize_in = 2 if self._precision == "bf16" else 4
            rec = {"label": g.label, "direction": g.direction, "layer": g.layer, "gemm_shape": gemm_shape,
                   "flops": 2 * b * m * k * n, "bytes": esize_in * b * (m * k + k * n) + 4 * b * m * n,
                   "sharding": kind, "devices": t, "device_shape": device_shape, "operands": []}
            if g.grad_of is not None:
                rec["grad_of"] = g.grad_of
            for o in g.operands:
                per_rank = everything[i]
                i += 1
                rows = torch.cat(per_rank)  # [world * steps, fields]
                count = rows.shape[0]
                op = {"side": o.side, "role": o.role, "tensor": o.tensor, "shape": o.shape,
                      "contract_dims": o.contract_dims, "batch_dims": [],
                      "absmax": float(rows[:, 0].max()), "absmax_mean": float(rows[:, 0].sum()) / count,
                      "rms": float(rows[:, 1].sqrt().sum()) / count, "zero_fraction": float(rows[:, 2].sum()) / count,
                      "nonfinite_fraction": float(rows[:, 3].sum()) / count, "formats": []}
                nf = len(FORMAT_FIELDS)
                for f, text in enumerate(o.formats):
                    c = rows[:, nt + nf * f: nt + nf * f + nf]
                    stats = {"format": text, "sqnr_mean": float(c[:, 0].sum()) / count,
                             "sqnr_min": float(c[:, 0].min()), "sqnr_max": float(c[:, 0].max()),
                             "mse": float(c[:, 1].sum()) / count,
                             "underflow_fraction": float(c[:, 2].sum()) / count,
                             "clipped_fraction": float(c[:, 3].sum()) / count}
                    if self.metrics:
                        stats["bias_sqnr_mean"] = float(c[:, 4].sum()) / count
                    op["formats"].append(stats)
                op["scaling"] = self._scaling(o, per_rank, world)
                rec["operands"].append(op)
            records.append(rec)
        return records

    def _metric_records(self, gemms, sinks, records, everything, world):
        """Each GEMM's output errors, reach and gradient reach (pgq's --profile-metrics;
        runtime/profile_collector.cc outputErrors and fillReach)."""
        t = self.tensor_parallel
        at = sum(len(g.operands) for g in gemms)
        by_label = {r["label"]: r for r in records}
        for g in gemms:
            if not g.pairs:
                continue
            per_rank = everything[at]
            at += 1
            rec = by_label[g.label]
            rec["output_errors"] = []
            for i, (lf, rf) in enumerate(g.pairs):
                total, low, replicas = 0.0, None, 0
                for first in range(0, world, t):
                    # One replica: its devices' parts of the result (their sums), per step.
                    parts = [per_rank[r][:, 3 * i: 3 * i + 3] for r in range(first, first + t)]
                    if t == 1:
                        sqnr = parts[0][:, 0]
                    else:
                        ms, mse = sum(p[:, 1] for p in parts), sum(p[:, 2] for p in parts)
                        sqnr = torch.where(mse > 0, torch.clamp(ms / torch.clamp(mse, min=1e-300), max=SQNR_CAP),
                                           torch.full_like(mse, SQNR_CAP))
                    total += float(sqnr.sum())
                    low = float(sqnr.min()) if low is None else min(low, float(sqnr.min()))
                    replicas += sqnr.numel()
                rec["output_errors"].append({"lhs_format": lf, "rhs_format": rf, "sqnr_mean": total / replicas,
                                             "sqnr_min": low})
        if self._reach is None:
            return
        labels, reach = self._reach
        # Each sink's elements and squared norm (elements x rms^2, the rms the mean over
        # steps and processes): a Linear's from its wgrad's result, an embedding's from
        # its own statistics.
        elements, squares = {}, {}
        norms = self.outputs
        embedding_rows = {s.label: everything[at + i] for i, s in enumerate(sinks)}
        for label in labels:
            wgrad = by_label.get(label + ":wgrad")
            if wgrad is not None:
                b, m, _, n = wgrad["gemm_shape"]
                elements[label] = float(b * m * n)
                if norms:
                    rms = wgrad["operands"][2]["rms"]
                    squares[label] = elements[label] * rms * rms
            else:
                elements[label] = float(self._sinks[label].elements)
                rows = torch.cat(embedding_rows[label])
                if norms and rows.shape[0]:
                    rms = float(rows[:, 0].sqrt().sum()) / rows.shape[0]
                    squares[label] = elements[label] * rms * rms
                else:
                    norms = False
        total_elements = sum(elements.values())
        total_squares = sum(squares.values()) if norms else 0.0
        if total_elements == 0:
            # No hooked weight gets a gradient (BitFit): no share of them to reach.
            warnings.warn("pgq_profile: no profiled weight of {} gets a gradient: the profile has no reach or "
                          "gradient_reach".format(self.name))
            return
        for rec in records:
            bits = reach.get(rec["label"])
            if bits is None:
                continue
            reached = [label for i, label in enumerate(labels) if bits >> i & 1]
            rec["reach"] = sum(elements[label] for label in reached) / total_elements
            if norms and total_squares > 0:
                rec["gradient_reach"] = sum(squares[label] for label in reached) / total_squares

    def _scaling(self, o, per_rank, world):
        steps = per_rank[0].shape[0]
        if steps < 2:
            return None
        t = self.tensor_parallel
        updates = None
        if o.role == "weight" and self.optimizer is not None:
            updates = self._updates.get(o.tensor)
            if updates is not None and len(updates) != steps:
                updates = None
        stats = []
        for p in range(t):
            series = torch.stack([per_rank[r][:, 0] for r in range(p, world, t)]).max(dim=0).values.tolist()
            stats.append(profile_file.scaling_stats(series, self.amax_history, updates))
        s = dict(stats[0])
        for key in s:
            if key in ("steps", "delayed_history"):
                continue
            values = [x[key] for x in stats]
            s[key] = max(values) if key.endswith("worst_ratio") else sum(values) / len(values)
        return s

    def _run_record(self, world):
        import numpy
        params = sum(p.numel() for p in self.model.parameters())
        device = "cpu"
        for p in self.model.parameters():
            device = str(p.device)
            break
        where = device
        if device.startswith("cuda"):
            where = "cuda ({})".format(torch.cuda.get_device_name(torch.device(device)))
        config = "\n".join([
            "source: pgq_profile",
            "collector_version: {}".format(COLLECTOR_VERSION),
            "torch: {}".format(torch.__version__),
            "numpy: {}".format(numpy.__version__),
            "module: {}".format(type(self.model).__name__),
            "parameters: {}".format(params),
            "linear_modules: {}".format(len(self._linears)),
            "device: {}".format(where),
            "processes: {}".format(world),
            "tensor_parallel: {}".format(self.tensor_parallel),
            "steps_dropped: {}".format(self._dropped),
        ])
        return {"model": self.name, "model_config": config, "corpus": "pytorch training loop",
                "corpus_fingerprint": "", "seed": self.seed, "warmup_steps": self.warmup,
                "profile_steps": self._committed, "processes": world, "threads": torch.get_num_threads(),
                "precision": self._precision,
                "pgq_version": "pgq_profile/{} (torch {})".format(COLLECTOR_VERSION, torch.__version__),
                "cpu_isa": "pytorch " + where, "vnni": False, "formats": self.formats,
                "gradient_formats": self.gradient_formats, "step_ms": self._mean_ms("plain"),
                "metrics": self.metrics, "metrics_step_ms": self._mean_ms("profiled")}

    def _mean_ms(self, kind):
        """The mean time of the block's plain (warmup) or profiled steps, in ms, the first
        of each kind left out when there are others (it carries one-time costs: memory
        allocation and kernel selection for the first step, the collector's set-up, its
        random bits and the walk of the autograd graph for the first profiled one); 0
        when none was timed."""
        times = [ms for _, ms in self._step_ms[kind]]
        times = times[1:] if len(times) > 1 else times
        return sum(times) / len(times) if times else 0.0
