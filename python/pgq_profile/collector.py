"""The collector: hooks on a model's linear layers that compute, during a few steps of the
user's own training loop, the statistics pgq's stage (i) computes, then the profile."""
import os
import re
import warnings
import weakref

import torch

from . import formats as formats_mod
from . import profile_file
from .quant import TENSOR_FIELDS, Noise, TensorSums, format_row

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


class _Operand:
    """One GEMM operand's statistics over the steps: a row [TENSOR_FIELDS, FORMAT_FIELDS per
    format] per step (0-d tensors stacked on the device, read once at the end)."""

    def __init__(self, side, role, tensor, shape, contract_dims, formats):
        self.side, self.role, self.tensor = side, role, tensor
        self.shape, self.contract_dims, self.formats = list(shape), list(contract_dims), formats
        self.rows = []


class _Gemm:
    def __init__(self, label, direction, layer, shape, operands, grad_of=None):
        self.label, self.direction, self.layer = label, direction, layer
        self.grad_of = grad_of  # a backward GEMM: the label of the forward GEMM it differentiates
        self.shape = shape  # [batch, M, K, N] on this device
        self.operands = operands  # [lhs, rhs]


class _Step:
    """The statistics of one step until it is known to be complete (its backward ran)."""

    def __init__(self, index):
        self.index = index
        self.rows = {}       # (label, side) -> row tensor
        self.pending = 0     # backward hooks registered and not yet run
        self.backward = False
        self.closed = False
        self.calls = {}      # module path -> forward calls this step
        # tensor key -> (weak reference to the tensor, TensorSums, {(contract_rows, format): row}):
        # statistics of a tensor several GEMMs read (q, k and v read one x), without
        # keeping the tensor alive (activations and gradients are freed as usual).
        self.cache = {}
        self.names = {}      # tensor key -> the name of the first GEMM operand that read it
        self.lr = {}         # weight name -> (lr, rigorous bound) of the update after this step


class Collector:
    """Profiles `steps` training steps of `model` (see pgq_profile.collect)."""

    def __init__(self, model, formats=(), steps=5, out="profile.yaml", *, warmup=0, name=None,
                 amax_history=DEFAULT_AMAX_HISTORY, optimizer=None, tensor_parallel=1, sharding=None,
                 group=None, seed=0):
        if not isinstance(model, torch.nn.Module):
            raise ProfileError("pgq_profile: model must be a torch.nn.Module, got {}".format(type(model).__name__))
        for key, value, low in (("steps", steps, 1), ("warmup", warmup, 0), ("amax_history", amax_history, 1),
                                ("tensor_parallel", tensor_parallel, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ProfileError("pgq_profile: {} must be an integer >= {}, got {!r}".format(key, low, value))
        if isinstance(formats, str):
            formats = [f for f in formats.split(",") if f]
        try:
            self.formats, self.gradient_formats = formats_mod.profile_formats(list(formats))
        except formats_mod.FormatError as e:
            raise ProfileError("pgq_profile: {}".format(e)) from None
        self._parsed = {t: formats_mod.parse(t) for t in self.formats + self.gradient_formats}
        if not isinstance(out, (str, os.PathLike)) or not str(out):
            raise ProfileError("pgq_profile: out must be a file path, got {!r}".format(out))
        out = os.fspath(out)
        folder = os.path.dirname(os.path.abspath(out))
        if not os.path.isdir(folder):
            raise ProfileError("pgq_profile: out {}: folder '{}' does not exist; create it first".format(out, folder))
        if os.path.isdir(out):
            raise ProfileError("pgq_profile: out {}: is a folder; give a file such as {}".format(
                out, os.path.join(out, "profile.yaml")))
        if not os.access(folder, os.W_OK):
            raise ProfileError("pgq_profile: out {}: cannot write in folder '{}'".format(out, folder))
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
        self._weight_names = {id(p): n for n, p in inner.named_parameters()}
        self._gemms = {}          # label -> _Gemm, in the order of first appearance
        self._step = None
        self._forwards = 0        # grad-enabled forwards of the model so far
        self._committed = 0
        self._dropped = 0
        self._handles = []
        self._noises = {}
        self._precision = "f32"
        self._updates = {}        # weight name -> [(lr, bound)], one per profiled step
        self.profile_path = None

    # ------------------------------------------------------------------ hooks

    def __enter__(self):
        if self._handles or self._forwards:
            raise ProfileError("pgq_profile: a collector profiles one `with` block; make another for another profile")
        self._handles.append(self.model.register_forward_pre_hook(self._on_model_forward))
        for path, module, out_in in self._linears:
            self._handles.append(module.register_forward_hook(
                lambda m, i, o, path=path, out_in=out_in: self._on_linear(path, m, out_in, i, o)))
        return self

    def __exit__(self, exc_type, exc, tb):
        self._remove_hooks()
        if exc_type is not None:
            return False
        self._close_step()
        self.profile_path = self._finish()
        return False

    def _remove_hooks(self):
        for h in self._handles:
            h.remove()
        self._handles = []

    def _on_model_forward(self, module, inputs):
        if not torch.is_grad_enabled():
            return  # evaluation: no backward, not a training step
        self._close_step()
        index = self._forwards
        self._forwards += 1
        if index < self.warmup:
            return
        if self._committed >= self.steps:
            self._remove_hooks()
            return
        self._step = _Step(index - self.warmup)

    def _close_step(self):
        step = self._step
        if step is None:
            return
        self._step = None
        step.closed = True
        if step.pending or not step.backward:
            self._dropped += 1
            warnings.warn("pgq_profile: step {} of {} had no complete backward (each forward of the model must be "
                          "followed by its backward before the next one); it is not in the profile".format(
                              step.index + 1, self.name))
            return
        for (label, side), row in step.rows.items():
            g = self._gemms[label]
            g.operands[0 if side == "lhs" else 1].rows.append(row)
        for key, bound in step.lr.items():
            self._updates.setdefault(key, []).append(bound)
        self._committed += 1

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

    def _stats(self, step, label, side, key, source, tensor, contract_rows, fmts):
        """The row of one operand: the tensor's sums, then each format's (computed once per
        tensor, orientation and format in a step: q, k and v read one x)."""
        _, sums, rows = self._sums(step, key, source, tensor)
        parts = [sums.row()]
        for text in fmts:
            fmt = self._parsed[text]
            # Per-tensor scales do not depend on which dim is contracted.
            rk = (None if fmt.granularity == "tensor" else contract_rows, text)
            row = rows.get(rk)
            if row is None:
                row = format_row(tensor, contract_rows, fmt, sums, self._noise(tensor.device))
                rows[rk] = row
            parts.append(row)
        step.rows[(label, side)] = torch.cat(parts)

    def _gemm(self, label, direction, layer, shape, operands, grad_of=None):
        g = self._gemms.get(label)
        if g is None:
            g = _Gemm(label, direction, layer, shape, operands, grad_of)
            self._gemms[label] = g
        elif g.shape != shape:
            raise ProfileError("pgq_profile: GEMM {} changed shape from {} to {} between steps ([batch, M, K, N]); "
                               "profile steps of one batch size and sequence length".format(label, g.shape, shape))
        return g

    @staticmethod
    def _key(t):
        return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, t._version)

    def _on_linear(self, path, module, out_in, inputs, output):
        step = self._step
        if step is None or step.closed or not torch.is_grad_enabled() or not inputs:
            return
        x = inputs[0]
        weight = module.weight
        if not torch.is_tensor(x) or x.numel() == 0 or not torch.is_tensor(output):
            return
        calls = step.calls.get(path, 0)
        if calls and step.backward:
            # The forward recomputed in the backward by activation checkpointing (the
            # non-reentrant kind; the reentrant kind runs the first forward without
            # gradients, so its recomputation is the call that counts).
            return
        step.calls[path] = calls + 1
        label = path if calls == 0 else "{}#{}".format(path, calls + 1)
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
        self._gemm(label, "fwd", layer, [1, m, k_in, n_out], acts)
        self._stats(step, label, "lhs", x_key, x, x2, False, fmts)
        self._stats(step, label, "rhs", w_key, weight, w, not out_in, fmts)
        dgrad = x.requires_grad
        wgrad = weight.requires_grad
        if not (dgrad or wgrad) or not output.requires_grad:
            return
        grad_fmts = self.formats + [f for f in self.gradient_formats if f not in self.formats]
        y_name = label + ":grad_output"
        y_shape = list(output.shape)
        if dgrad:
            self._gemm(label + ":dgrad", "bwd_dgrad", layer, [1, m, n_out, k_in],
                       [_Operand("lhs", "gradient", y_name, y_shape, [len(y_shape) - 1], grad_fmts),
                        _Operand("rhs", "weight", w_name, list(weight.shape), w_bwd, fmts)], grad_of=label)
            self._stats(step, label + ":dgrad", "rhs", w_key, weight, w, out_in, fmts)
        if wgrad:
            self._gemm(label + ":wgrad", "bwd_wgrad", layer, [1, n_out, m, k_in],
                       [_Operand("lhs", "gradient", y_name, y_shape, list(range(len(y_shape) - 1)), grad_fmts),
                        _Operand("rhs", "activation", x_name, x_shape, list(range(x_rank - 1)), fmts)], grad_of=label)
            self._stats(step, label + ":wgrad", "rhs", x_key, x, x2, True, fmts)
        step.pending += 1

        def on_grad(grad, step=step, label=label, n_out=n_out, dgrad=dgrad, wgrad=wgrad, weight=weight):
            if step.closed:
                return None
            step.backward = True
            step.pending -= 1
            with torch.no_grad():
                g = grad.detach().reshape(-1, n_out)
                if g.dtype != torch.float32:
                    g = g.float()
                key = ("grad", label)
                if dgrad:
                    self._stats(step, label + ":dgrad", "lhs", key, grad, g, False, grad_fmts)
                if wgrad:
                    self._stats(step, label + ":wgrad", "lhs", key, grad, g, True, grad_fmts)
                if wgrad and self.optimizer is not None:
                    self._note_update(step, weight)
            return None
        output.register_hook(on_grad)

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
        # One tensor per operand: [steps, fields], read from the device once.
        local = []
        for g in gemms:
            for o in g.operands:
                rows = torch.stack(o.rows).double().cpu() if o.rows else torch.zeros(0, 4 + 4 * len(o.formats))
                local.append(rows)
        world, rank, everything = self._gather(gemms, local)
        self._check_finite(gemms, everything)
        if rank == 0:
            run = self._run_record(world)
            records = self._records(gemms, everything, world)
            profile_file.write_atomically(self.out, profile_file.profile_yaml(run, records))
            profile_file.write_atomically(profile_file.csv_path(self.out), profile_file.profile_csv(records))
        return self.out

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

    def _gather(self, gemms, local):
        """Every process's rows (world = 1 without torch.distributed)."""
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            return 1, 0, [[rows] for rows in local]
        world = dist.get_world_size(self.group)
        rank = dist.get_rank(self.group)
        if world % self.tensor_parallel:
            raise ProfileError("pgq_profile: tensor_parallel {} does not divide the {} processes".format(
                self.tensor_parallel, world))
        layout = [(g.label, o.side, len(o.rows), len(o.formats)) for g in gemms for o in g.operands]
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
                for f, text in enumerate(o.formats):
                    c = rows[:, nt + 4 * f: nt + 4 * f + 4]
                    op["formats"].append({"format": text, "sqnr_mean": float(c[:, 0].sum()) / count,
                                          "sqnr_min": float(c[:, 0].min()), "sqnr_max": float(c[:, 0].max()),
                                          "mse": float(c[:, 1].sum()) / count,
                                          "underflow_fraction": float(c[:, 2].sum()) / count,
                                          "clipped_fraction": float(c[:, 3].sum()) / count})
                op["scaling"] = self._scaling(o, per_rank, world)
                rec["operands"].append(op)
            records.append(rec)
        return records

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
                "gradient_formats": self.gradient_formats, "step_ms": 0.0}
