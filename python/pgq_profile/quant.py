"""The statistics pgq's stage (i) computes for one GEMM operand, in torch, on the device
where the tensor is: the quantizer arithmetic of kernels/quant_core.h (integer grids),
kernels/float_quant_core.h (FP8 and MX elements) and kernels/quant_stats.cc (the sums).

An operand is a matrix [R, C] whose contracting dimension runs along its columns or its
rows; scales run along the other one (one per channel), per block of `block` elements of a
channel along the contracting dimension, or one per tensor. For x [tokens, K] of a
Linear's forward GEMM, K is along the columns; for x as the weight gradient's operand the
tokens are along the rows.

Definitions, over the finite elements (pgq's kernels/quant_stats.h):
    mean_square  E[x^2]        mse  E[(Q(x) - x)^2]      sqnr  mean_square / mse, capped at 1e12
    underflow    nonzero values whose quantized value is 0
    clipped      values beyond the grid by more than half a step (saturated)

Round to nearest is bit-exact with pgq (same float32 operations in the same order, ties
to even). Stochastic rounding is pgq's fixed-point rounding with torch's random bits
instead of pgq's counter-based stream: the same distribution, other samples.
"""
import math

import torch

SQNR_CAP = 1e12
FLT_MIN = 2.0 ** -126
_MSE_CLIP_STEPS = 40

# Per tensor, format-independent (the first row pgq's statistics node writes).
TENSOR_FIELDS = ("absmax", "mean_square", "zero_fraction", "nonfinite_fraction")
# Per format (bias_sqnr: the bias-aware SQNR, 0 when it was not asked for).
FORMAT_FIELDS = ("sqnr", "mse", "underflow_fraction", "clipped_fraction", "bias_sqnr")



def _chunk_elements(device):
    """Elements per chunk: each chunk is quantized, compared and reduced while it is in the
    CPU's cache (one trip to memory instead of one per operation); a GPU takes big ones."""
    return 1 << 18 if device.type == "cpu" else 1 << 24


class Noise:
    """The 16 random bits per element of stochastic rounding. pgq draws them from a
    counter-based generator keyed by a seed and the element's index; here torch's
    generator draws them (on a CPU, once into a pool that each chunk reads from a random
    place: torch's CPU generator is slower than the rest of the statistics)."""

    _POOL = 1 << 22

    def __init__(self, device, seed):
        self.device = device
        self.generator = torch.Generator(device=device)
        self.generator.manual_seed(seed)
        self.pool = None

    def take(self, n):
        if self.device.type != "cpu":
            return torch.randint(0, 1 << 16, (n,), dtype=torch.int32, device=self.device, generator=self.generator)
        if self.pool is None:
            self.pool = torch.randint(0, 1 << 16, (self._POOL,), dtype=torch.int32, generator=self.generator)
        at = int(torch.randint(0, self._POOL, (1,), generator=self.generator))
        if at + n <= self._POOL:
            return self.pool[at:at + n]
        parts, need = [], n
        while need > 0:
            take = min(need, self._POOL - at)
            parts.append(self.pool[at:at + take])
            need -= take
            at = 0
        return torch.cat(parts)


class TensorSums:
    """The format-independent sums of one operand (0-d float64 tensors on its device).

    pgq's kernels leave NaN and Inf out of every statistic and count them; the collector
    refuses them instead (a step with a non-finite operand is a diverged step, and its
    statistics say nothing a recipe can use), so these sums assume finite values and
    turn NaN or Inf when there are others: the collector checks that after the steps,
    without stopping the device on every tensor. Squares are summed per chunk in float
    and the chunks in double, as pgq sums per block."""

    def __init__(self, x):
        flat = x.reshape(-1)
        self.count = flat.numel()
        step = _chunk_elements(x.device)
        his, los, nonzeros, norms = [], [], [], []
        for a in range(0, self.count, step):
            c = flat[a:a + step]
            his.append(c.max())
            los.append(c.min())
            nonzeros.append(torch.count_nonzero(c))
            norms.append(torch.linalg.vector_norm(c))
        self.absmax = torch.maximum(torch.stack(his).max(), -torch.stack(los).min()).double()
        self.signal = (torch.stack(norms).double() ** 2).sum()
        self.zeros = self.count - torch.stack(nonzeros).sum().double()

    def row(self):
        zero = torch.zeros_like(self.signal)
        return torch.stack([self.absmax, self.signal / self.count, self.zeros / self.count, zero])


def _grouped(x, contract_rows, fmt):
    """x [R, C] as [G1, L, G2]: group (g1, g2) holds the L elements x[g1, :, g2] that share
    a scale. Returns the view and the number of zeros added to complete the last block of
    a channel (pgq's last block may be shorter; zeros change no range, error or sum)."""
    r, c = x.shape
    if fmt.granularity == "tensor":
        return x.reshape(1, r * c, 1), 0
    if fmt.granularity == "channel":
        return (x.reshape(1, r, c), 0) if contract_rows else (x.reshape(r, c, 1), 0)
    b = fmt.block
    if contract_rows:
        pad = (-r) % b
        if pad:
            x = torch.cat([x, x.new_zeros(pad, c)])
        return x.reshape((r + pad) // b, b, c), pad * c
    pad = (-c) % b
    if pad:
        x = torch.cat([x, x.new_zeros(r, pad)], dim=1)
    return x.reshape(r * (c + pad) // b, b, 1), pad * r


def _ranges(g):
    """Each group's [lo, hi], widened to contain 0 (kernels/quantize.cc groupRanges)."""
    return torch.clamp(g.amin(dim=1, keepdim=True), max=0.0), torch.clamp(g.amax(dim=1, keepdim=True), min=0.0)


def _int_params(lo, hi, fmt):
    """Scale and zero point per group (quantize.cc paramsFromRange): computed in double,
    the scale rounded to float once and at least FLT_MIN; the zero point rounded to
    nearest even and clamped to the grid."""
    lo, hi = lo.double(), hi.double()
    if not fmt.asymmetric:
        qmax = float((1 << (fmt.bits - 1)) - 1)
        return torch.clamp(torch.maximum(-lo, hi) / qmax, min=FLT_MIN).float(), None
    levels = float((1 << fmt.bits) - 1)
    scale = torch.clamp((hi - lo) / levels, min=FLT_MIN).float()
    zero = torch.clamp(torch.round(-lo / scale.double()), 0.0, levels).float()
    return scale, zero


def _grid(fmt):
    if fmt.asymmetric:
        return 0.0, float((1 << fmt.bits) - 1)
    qmax = float((1 << (fmt.bits - 1)) - 1)
    return -qmax, qmax


def _clip_ranges(g, lo, hi, fmt):
    """The clipped range of each group (kernels/quant_clip.cc clipRange)."""
    length = g.shape[1]
    if fmt.clipping == "percentile":
        rank = min(max(math.ceil(fmt.percentile / 100.0 * length) - 1, 0), length - 1)
        if not fmt.asymmetric:
            c = torch.kthvalue(g.abs(), rank + 1, dim=1, keepdim=True).values
            return -c, c
        upper = torch.kthvalue(g, rank + 1, dim=1, keepdim=True).values
        lower = torch.kthvalue(g, length - rank, dim=1, keepdim=True).values
        return torch.clamp(lower, max=0.0), torch.clamp(upper, min=0.0)
    # MSE search over the ratios 1, 0.98, ...: round-to-nearest error of each group's
    # values; the first (largest) ratio wins ties.
    grid_lo, grid_hi = _grid(fmt)
    best_mse = best_ratio = None
    for step in range(_MSE_CLIP_STEPS):
        ratio = 1.0 - 0.02 * step
        scale, zero = _int_params(lo.double() * ratio, hi.double() * ratio, fmt)
        t = torch.round(g * (1.0 / scale))
        if zero is not None:
            t += zero
            t.clamp_(grid_lo, grid_hi).sub_(zero)
        else:
            t.clamp_(grid_lo, grid_hi)
        mse = ((t * scale - g).double() ** 2).sum(dim=1, keepdim=True)
        if best_mse is None:
            best_mse, best_ratio = mse, torch.full_like(mse, ratio)
        else:
            better = mse < best_mse
            best_mse = torch.where(better, mse, best_mse)
            best_ratio = torch.where(better, torch.full_like(mse, ratio), best_ratio)
    return lo.double() * best_ratio, hi.double() * best_ratio


def _emulated_scales(absmax, tensor_absmax, fmt):
    """Each group's f32 scale from its absmax (kernels/float_quant.cc computeEmulatedScales;
    `tensor_absmax` only for two-level scales)."""
    emax_value, _, emax, _ = fmt.limits()
    if fmt.scale == "e8m0":
        # 2^clamp(floor(log2 absmax) - emax, -126, 127) from the float's exponent field.
        field = (absmax.view(torch.int32) >> 23) & 0xFF
        exponent = torch.clamp(field - 127 - emax, -126, 127)
        return ((exponent + 127) << 23).view(torch.float32)
    if fmt.scale == "f32":
        return torch.clamp(absmax.double() / emax_value, min=FLT_MIN).float()
    # Two-level (MOSS): the tensor scale times 2^ceil(log2(group absmax / tensor absmax)).
    group = absmax.double()
    tensor = torch.maximum(tensor_absmax.double(), group.max())
    global_scale = torch.clamp(tensor / emax_value, min=FLT_MIN).float().double()
    mg, eg = torch.frexp(group)
    mt, et = torch.frexp(tensor)
    c = (eg - et) + (mg > mt).to(eg.dtype)
    scale = torch.clamp(torch.ldexp(global_scale, c), min=FLT_MIN, max=3.4028234663852886e38)
    return torch.where(group == 0, global_scale, scale).float()


def _capped_ratio(signal, noise):
    return torch.where(noise > 0, torch.clamp(signal / torch.clamp(noise, min=1e-300), max=SQNR_CAP),
                       torch.full_like(noise, SQNR_CAP))


class _Sink:
    """The sums of one format over the chunks: squared error (per chunk in float, the
    chunks in double), nonzero quantized values, clipped values; with `bias`, the errors
    summed along the contracting dimension (per row of x [R, C] contracting along its
    columns, per column contracting along its rows; in double, as
    kernels/quant_stats.cc coherentErrorMeanSquare)."""

    def __init__(self, bias):
        self.noise, self.nonzero, self.clipped = [], [], []
        self.bias = [] if bias else None

    def result(self, sums, pad, count_clipped, shape, contract_rows):
        noise = (torch.stack(self.noise).double() ** 2).sum()
        n = float(sums.count)
        # Q(x) = 0 for the zeros, the padding and the underflow.
        underflow = (n + pad - torch.stack(self.nonzero).sum().double() - pad - sums.zeros) / n
        clipped = torch.stack(self.clipped).sum().double() / n if count_clipped else torch.zeros_like(noise)
        sqnr = _capped_ratio(sums.signal, noise)
        bias = torch.zeros_like(noise)
        if self.bias is not None:
            r, c = shape
            if contract_rows:
                lines, k = torch.stack(self.bias).sum(dim=0), r      # [C]
            else:
                lines, k = torch.cat(self.bias).reshape(r, -1).sum(dim=1), c  # [R]
            coherent = (lines ** 2).sum() / k / lines.numel()
            bias = _capped_ratio(sums.signal / n, coherent)
        return torch.stack([sqnr, noise / n, underflow, clipped, bias])

    def add(self, q, c, keep, contract_rows, columns, per_tensor):
        """Q(x) of a chunk (in q, overwritten by the error) and the chunk x itself."""
        self.nonzero.append(torch.count_nonzero(q))
        if keep is not None:
            keep.copy_(q)
        q -= c
        self.noise.append(torch.linalg.vector_norm(q))
        if self.bias is None:
            return
        if per_tensor:
            # One group: the chunk is whole rows of x.
            q = q.reshape(-1, columns)
            self.bias.append(q.sum(dim=0 if contract_rows else 1, dtype=torch.float64))
            return
        s = q.sum(dim=1, dtype=torch.float64)  # [groups, G2]: each group's error along its length
        self.bias.append(s.reshape(-1, columns).sum(dim=0) if contract_rows else s.reshape(-1))


def _int_chunk(c, scale, zero, fmt, count_clipped, noise, bufs, sink):
    """One chunk of an integer grid with f32 scales (quant_core.h): t = round(x * inv) + z
    (ties to even), or stochastic rounding in 16.16 fixed point, clamped to the grid; then
    Q(x) = (t - z) * s."""
    fbuf, ibuf, _ = bufs
    grid_lo, grid_hi = _grid(fmt)
    v = torch.mul(c, 1.0 / scale, out=fbuf)
    if count_clipped:
        w = v + zero if zero is not None else v
        sink.clipped.append(torch.count_nonzero(w > grid_hi + 0.5) + torch.count_nonzero(w < grid_lo - 0.5))
        del w
    if fmt.rounding == "rtn":
        v.round_()
        if zero is not None:
            v += zero
        # A symmetric grid scaled by the absmax cannot overflow; zero points and clipping can.
        if zero is not None or fmt.clipping is not None:
            v.clamp_(grid_lo, grid_hi)
    else:
        # T = (x * inv + z) * 2^16 rounded once (x * inv rounded, times a power of two),
        # clamped, truncated; plus 16 noise bits; floored back by an arithmetic shift.
        v *= 65536.0
        if zero is not None:
            v += zero * 65536.0
        v.clamp_(grid_lo * 65536.0, grid_hi * 65536.0)
        ibuf.copy_(v)
        ibuf += noise.take(ibuf.numel()).view(ibuf.shape)
        ibuf >>= 16
        v.copy_(ibuf)
    if zero is not None:
        v -= zero
    v *= scale
    return v


def _emulated_chunk(c, scale, fmt, count_clipped, noise, bufs, sink):
    """One chunk of an FP8/MX/MOSS format (float_quant_core.h): v = x * inv clamped to the
    element's range, rounded to its grid (FP8: step q = 2^(max(exponent, emin) - m);
    int elements: 1), then Q(x) = s * that."""
    fbuf, ibuf, qbuf = bufs
    emax_value, emin, emax, mantissa = fmt.limits()
    v = torch.mul(c, 1.0 / scale, out=fbuf)
    if count_clipped:
        edge = emax_value + (2.0 ** (emax - mantissa - 1) if fmt.is_float else 0.5)
        sink.clipped.append(torch.count_nonzero(v > edge) + torch.count_nonzero(v < -edge))
    v.clamp_(-emax_value, emax_value)
    q = None
    if fmt.is_float:
        # The step from the exponent field, raised to emin's: exact powers of two, so
        # v / q and the product back are exact.
        torch.bitwise_and(v.view(torch.int32), 0x7F800000, out=qbuf)
        qbuf.clamp_(min=(emin + 127) << 23)
        qbuf -= mantissa << 23
        q = qbuf.view(torch.float32)
        v /= q
    if fmt.rounding == "rtn":
        v.round_()
    else:
        v *= 65536.0
        ibuf.copy_(v)
        ibuf += noise.take(ibuf.numel()).view(ibuf.shape)
        ibuf >>= 16
        v.copy_(ibuf)
    if q is not None:
        v *= q
    v *= scale
    return v


def format_row(x2d, contract_rows, fmt, sums, noise, bias=False, keep=False):
    """[sqnr, mse, underflow_fraction, clipped_fraction, bias_sqnr] (0-d float64 tensors
    stacked) of the operand x2d [R, C] (contiguous float32, TensorSums `sums`) in format
    `fmt`, its contracting dimension along the rows or the columns; bias_sqnr (the
    bias-aware SQNR, E[x^2] / (E_lines[(sum_k e_k)^2] / K)) only with `bias`, else 0.
    With `keep`, returns (row, Q(x) [R, C]): the values a GEMM reading x in `fmt` reads."""
    r, c_cols = x2d.shape
    g, pad = _grouped(x2d, contract_rows, fmt)
    g1, length, g2 = g.shape
    # Only MX scales (an absmax in (max, 2^(emax+1)) x scale), clipping and zero points
    # can leave values beyond the grid; f32 and two-level scales put the absmax on it.
    count_clipped = fmt.scale == "e8m0" or fmt.clipping is not None
    # Chunks of whole groups along dim 0 compute their own scales; otherwise (one group
    # spans the tensor's rows: per tensor, per column, or clipping) the scales come first.
    whole = g1 == 1 or fmt.clipping is not None
    params = None
    if whole:
        lo, hi = _ranges(g)
        if fmt.emulated:
            params = (_emulated_scales(torch.maximum(-lo, hi), sums.absmax, fmt), None)
        else:
            if fmt.clipping is not None:
                lo, hi = _clip_ranges(g, lo, hi, fmt)
            params = _int_params(lo, hi, fmt)
    target = _chunk_elements(g.device)
    per_tensor = fmt.granularity == "tensor"
    if g1 > 1:
        per = max(1, target // (length * g2))
        chunks = [(g[a:a + per], slice(a, a + per), (slice(a, a + per),)) for a in range(0, g1, per)]
    else:
        # Per tensor: whole rows of x per chunk (the bias sums run along them).
        per = max(1, target // c_cols) * c_cols if per_tensor else max(1, target // g2)
        chunks = [(g[:, a:a + per], slice(None), (slice(None), slice(a, a + per))) for a in range(0, length, per)]
    biggest = max(c.numel() for c, _, _ in chunks)
    buffers = [torch.empty(biggest, dtype=dtype, device=g.device)
               for dtype in (torch.float32, torch.int32, torch.int32)]
    kept = torch.empty(g.shape, dtype=torch.float32, device=g.device) if keep else None
    sink = _Sink(bias)
    for c, rows, where in chunks:
        bufs = [b[:c.numel()].view(c.shape) for b in buffers]
        if params is not None:
            scale, zero = params[0][rows], (params[1][rows] if params[1] is not None else None)
        elif fmt.emulated:
            lo, hi = _ranges(c)
            scale, zero = _emulated_scales(torch.maximum(-lo, hi), sums.absmax, fmt), None
        else:
            scale, zero = _int_params(*_ranges(c), fmt)
        if fmt.emulated:
            q = _emulated_chunk(c, scale, fmt, count_clipped, noise, bufs, sink)
        else:
            q = _int_chunk(c, scale, zero, fmt, count_clipped, noise, bufs, sink)
        sink.add(q, c, kept[where] if keep else None, contract_rows, c_cols, per_tensor)
    row = sink.result(sums, pad, count_clipped, (r, c_cols), contract_rows)
    if not keep:
        return row
    return row, _ungrouped(kept, r, c_cols, contract_rows, fmt)


def _ungrouped(g, r, c, contract_rows, fmt):
    """The inverse of _grouped: x [R, C] from its groups (the padding dropped)."""
    if fmt.granularity != "block":
        return g.reshape(r, c)
    if contract_rows:
        return g.reshape(-1, c)[:r]
    return g.reshape(r, -1)[:, :c]
