"""The statistics pgq's stage (i) computes for one GEMM operand, in torch, on the device
where the tensor is: the quantizer arithmetic of kernels/quant_core.h (integer grids),
kernels/float_quant_core.h (FP8, FP4 and bf16 elements; MX, MOSS and NVFP4 scales),
kernels/emulated_forms.h (2-D tiles), kernels/hadamard.cc (the random Hadamard
transform) and kernels/quant_stats.cc (the sums).

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
FLT_MAX = float.fromhex("0x1.fffffep127")
HADAMARD_BLOCK = 16
_M64 = (1 << 64) - 1
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


def _inverse(absmax):
    """1 / absmax (0-d float32) kept where a float holds it and its multiples by values up
    to absmax: x * _inverse(absmax(x)) is in [-1, 1], or [-34, 34] beyond 1e37."""
    return torch.reciprocal(torch.clamp(absmax, min=1e-30, max=1e37))


def _chunk_squares(c, buf):
    """(min, max, sum of (c / absmax)^2 in float, 1 / absmax) of a chunk c of a flat
    tensor, through buf (float32, at least c's size)."""
    lo, hi = torch.aminmax(c)
    inverse = _inverse(torch.maximum(hi, -lo))
    scaled = torch.mul(c, inverse, out=buf[:c.numel()])
    return lo, hi, torch.dot(scaled, scaled), inverse


def _undo(squares, inverses):
    """The sum in double of each chunk's squares with its division by absmax undone."""
    return (torch.stack(squares).double() / torch.stack(inverses).double() ** 2).sum()


def sum_squares(t):
    """The sum of squares of t's elements (0-d float64), as TensorSums sums them; no double
    copy of the tensor, no float overflow."""
    flat = t.reshape(-1)
    step = _chunk_elements(t.device)
    buf = torch.empty(min(step, flat.numel()), dtype=torch.float32, device=t.device)
    squares, inverses = [], []
    for a in range(0, flat.numel(), step):
        _, _, square, inverse = _chunk_squares(flat[a:a + step], buf)
        squares.append(square)
        inverses.append(inverse)
    return _undo(squares, inverses)


class TensorSums:
    """The format-independent sums of one operand (0-d float64 tensors on its device).

    pgq's kernels leave NaN and Inf out of every statistic and count them; the collector
    refuses them instead (a step with a non-finite operand is a diverged step, and its
    statistics say nothing a recipe can use), so these sums assume finite values and
    turn NaN or Inf when there are others: the collector checks that after the steps,
    without stopping the device on every tensor. Squares are summed per chunk in float
    and the chunks in double, as pgq sums per block; each chunk is first divided by its
    absmax (and a format's errors by the tensor's, `inverse`), so that no finite value
    overflows a float square (|x| above ~1e19, or a chunk's sum above float's 3.4e38:
    an rms of 3.6e16 did) and small ones do not underflow (pgq redoes such blocks in
    double). The division is undone in double."""

    def __init__(self, x):
        flat = x.reshape(-1)
        self.count = flat.numel()
        step = _chunk_elements(x.device)
        his, los, nonzeros, squares, inverses = [], [], [], [], []
        buf = torch.empty(min(step, self.count), dtype=torch.float32, device=x.device)
        for a in range(0, self.count, step):
            c = flat[a:a + step]
            lo, hi, square, inverse = _chunk_squares(c, buf)
            his.append(hi)
            los.append(lo)
            nonzeros.append(torch.count_nonzero(c))
            squares.append(square)
            inverses.append(inverse)
        # abs(): a tensor of zeros that are -0.0 (a Hadamard sign flip, 0 * a negative
        # gradient) would give absmax -0.0, and the e4m3 scale 448 * 6 / -0 = -inf.
        self.absmax = torch.maximum(torch.stack(his).max(), -torch.stack(los).min()).abs().double()
        self.inverse = _inverse(self.absmax.float())
        self.signal = _undo(squares, inverses)
        self.zeros = self.count - torch.stack(nonzeros).sum().double()

    def row(self):
        zero = torch.zeros_like(self.signal)
        return torch.stack([self.absmax, self.signal / self.count, self.zeros / self.count, zero])


def hadamard_signs(step):
    """The 16 signs (+1 / -1) of `step`'s transform (kernels/hadamard.cc hadamardSigns):
    sign j is -1 where bit j of splitmix64's finalizer of the step is set."""
    z = (step + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    z ^= z >> 31
    return [-1.0 if (z >> j) & 1 else 1.0 for j in range(HADAMARD_BLOCK)]


def hadamard(x, contract_rows, step, inverse=False):
    """H D x along the contracting dimension of x [R, C] (kernels/hadamard.cc
    hadamardTransform), or its inverse D H y: every run of 16 consecutive contracting
    elements is multiplied by the step's signs, then by the 16x16 Sylvester-Hadamard
    matrix as the same butterflies in float (x + y, x - y for h = 1, 2, 4, 8), then by
    0.25; bit-exact with pgq's. The contracting length must be a multiple of 16."""
    r, c = x.shape
    k = r if contract_rows else c
    if k % HADAMARD_BLOCK:
        raise ValueError("a Hadamard transform needs a contracting length that is a multiple of {}, got {}".format(
            HADAMARD_BLOCK, k))
    # [groups, 16, width]: 16 consecutive rows across all columns, or 16 scalars of a row.
    v = x.reshape(r // HADAMARD_BLOCK, HADAMARD_BLOCK, c) if contract_rows else \
        x.reshape(r * (c // HADAMARD_BLOCK), HADAMARD_BLOCK, 1)
    shape = v.shape
    signs = torch.tensor(hadamard_signs(step), dtype=torch.float32, device=x.device).view(1, HADAMARD_BLOCK, 1)
    if not inverse:
        v = v * signs
    h = 1
    while h < HADAMARD_BLOCK:
        w = v.reshape(shape[0], HADAMARD_BLOCK // (2 * h), 2, h, shape[2])
        a, b = w[:, :, 0], w[:, :, 1]
        v = torch.stack((a + b, a - b), dim=2).reshape(shape)
        h *= 2
    v = v * 0.25
    if inverse:
        v = v * signs
    return v.reshape(r, c)


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


def _tile_scales(absmax, shape, contract_rows, fmt, tensor_absmax):
    """The scale of each 1-D group of a 2-D format (block<N>x<N>) from its groups' absmax
    [G1, 1, G2] (as _grouped lays them out): each N x N tile of x [R, C] takes the largest
    absmax of its channels' blocks (kernels/float_quant.cc groupAbsmaxRanges, tiles
    partial at the edges), its scale from that, and every block of the tile that scale
    (kernels/emulated_forms.h tileOfGroup, expandTileParams)."""
    r, c = shape
    b = fmt.block
    if contract_rows:
        # Group (j, col): block j of rows of column col; tiles of N columns.
        a = absmax.reshape(absmax.shape[0], c)
        pad = (-c) % b
        if pad:
            a = torch.cat([a, a.new_zeros(a.shape[0], pad)], dim=1)
        tiles = a.reshape(a.shape[0], -1, b).amax(dim=2)
        scales = _emulated_scales(tiles, tensor_absmax, fmt)
        return scales.repeat_interleave(b, dim=1)[:, :c].reshape(absmax.shape[0], 1, c)
    # Group (row, j): block j of columns of row `row`; tiles of N rows.
    a = absmax.reshape(r, -1)
    pad = (-r) % b
    if pad:
        a = torch.cat([a, a.new_zeros(pad, a.shape[1])])
    tiles = a.reshape(-1, b, a.shape[1]).amax(dim=1)
    scales = _emulated_scales(tiles, tensor_absmax, fmt)
    return scales.repeat_interleave(b, dim=0)[:r].reshape(-1, 1, 1)


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


def _round_e4m3(v):
    """v (float32, >= 0) rounded to E4M3 to nearest, ties to even, saturating at 448
    (kernels/float_quant.cc roundToElement for e4m3:tensor:rtn): the step 2^(max(e, -6) - 3)
    from the exponent field, so v / step and the product back are exact."""
    c = torch.clamp(v, max=448.0)
    e = torch.clamp(torch.bitwise_and(c.view(torch.int32), 0x7F800000), min=(-6 + 127) << 23)
    step = (e - (3 << 23)).view(torch.float32)
    return torch.round(c / step) * step


def _emulated_scales(absmax, tensor_absmax, fmt):
    """Each group's f32 scale from its absmax (kernels/float_quant.cc computeEmulatedScales
    and scaleFromAbsmax; `tensor_absmax` only for two-level and e4m3 scales)."""
    emax_value, _, emax, _ = fmt.limits()
    if fmt.element == "bf16":
        # f32's exponent range: no scale.
        return torch.ones_like(absmax, dtype=torch.float32)
    if fmt.scale == "e4m3":
        # NVFP4, as Transformer Engine: the tensor's encode scale S = 448 * 6 / T in f32,
        # each block's decode scale s_b = e4m3(G * (S * (1/6))) computed in f32 in that
        # order (rounded to nearest, ties to even, saturating), the group's scale s_b / S.
        # An all-zero block gets FLT_MIN; a block whose s_b underflows E4M3 decodes to 0,
        # which a huge scale, 2^125, gives (every |x| <= G over it rounds to 0; an
        # infinity saturates at 6 * 2^125, finite).
        group = absmax.double().abs()  # magnitudes: a -0.0 here would give -inf below
        tensor = torch.maximum(tensor_absmax.double().abs(), group)
        encode32 = torch.clamp(448.0 * emax_value / tensor, max=FLT_MAX).float()
        inverse_max = torch.tensor(1.0 / emax_value, dtype=torch.float32)
        block = _round_e4m3(torch.clamp(group.float() * (encode32 * inverse_max), max=FLT_MAX))
        scale = torch.clamp(block.double() / encode32.double(), min=FLT_MIN).float()
        scale = torch.where(block == 0, torch.full_like(scale, 2.0 ** 125), scale)
        return torch.where(group == 0, torch.full_like(scale, FLT_MIN), scale)
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

    def __init__(self, bias, inverse):
        self.noise, self.nonzero, self.clipped = [], [], []
        self.bias = [] if bias else None
        self.inverse = inverse  # the errors are at most ~absmax: squared as error * inverse

    def result(self, sums, pad, count_clipped, shape, contract_rows):
        noise = torch.stack(self.noise).double().sum() / self.inverse.double() ** 2
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
        if self.bias is not None:
            if per_tensor:
                # One group: the chunk is whole rows of x.
                self.bias.append(q.reshape(-1, columns).sum(dim=0 if contract_rows else 1, dtype=torch.float64))
            else:
                s = q.sum(dim=1, dtype=torch.float64)  # [groups, G2]: each group's error along its length
                self.bias.append(s.reshape(-1, columns).sum(dim=0) if contract_rows else s.reshape(-1))
        q = q.reshape(-1)
        q *= self.inverse
        self.noise.append(torch.dot(q, q))


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
    """One chunk of an FP8/FP4/MX/MOSS/NVFP4 format (float_quant_core.h): v = x * inv
    clamped to the element's range, rounded to its grid (FP8 and E2M1: step
    q = 2^(max(exponent, emin) - m); int elements: 1), then Q(x) = s * that; bf16: x
    rounded on its float bits (kBf16), not clamped."""
    fbuf, ibuf, qbuf = bufs
    emax_value, emin, emax, mantissa = fmt.limits()
    v = torch.mul(c, 1.0 / scale, out=fbuf)
    if count_clipped:
        # The emulated grid's clip_edge (float_quant.cc emulatedGridOf): beyond the max by
        # more than half the step there (bf16: those round to Inf).
        edge = emax_value + (2.0 ** (emax - mantissa - 1) if fmt.is_float else 0.5)
        sink.clipped.append(torch.count_nonzero(v > edge) + torch.count_nonzero(v < -edge))
    if fmt.element == "bf16":
        return _bf16_chunk(v, fmt, noise, qbuf)
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


def _bf16_chunk(v, fmt, noise, add):
    """v rounded to bf16 in place on its float bits (float_quant_core.h roundElementLanes,
    kBf16): round to nearest even adds 0x7FFF plus the kept lowest bit, stochastic
    rounding 16 noise bits (65535 - r on negative values, as the signed fixed point
    draws), then the low half is dropped; beyond bf16's max the carry reaches Inf. A
    stochastic zero is +0. (x.to(torch.bfloat16) rounds the same way on CPUs, but pgq's
    bits are spelled out here so that no device's conversion can differ.)"""
    bits = v.view(torch.int32)
    add.copy_(bits)
    if fmt.rounding == "rtn":
        add >>= 16
        add &= 1
        add += 0x7FFF
    else:
        add >>= 31
        add &= 0xFFFF
        add ^= noise.take(add.numel()).view(add.shape)
    bits += add
    bits &= -65536
    if fmt.rounding != "rtn":
        v += 0.0
    return v


def _plain(fmt):
    """fmt without the transform (emulated_forms.h rowFormat keeps its tiles)."""
    plain = fmt.with_rounding(fmt.rounding)
    plain.hadamard = False
    return plain


def _coherent_error(x2d, q, contract_rows):
    """E_lines[(sum_k (q_k - x_k))^2] / K over x2d [R, C] and its quantized values q, the
    errors in double (kernels/quant_stats.cc coherentErrorMeanSquare); by chunks of rows."""
    r, c = x2d.shape
    per = max(1, _chunk_elements(x2d.device) // c)
    lines = torch.zeros(c, dtype=torch.float64, device=x2d.device) if contract_rows else []
    for a in range(0, r, per):
        e = q[a:a + per].double() - x2d[a:a + per].double()
        if contract_rows:
            lines += e.sum(dim=0)
        else:
            lines.append(e.sum(dim=1))
    if not contract_rows:
        lines = torch.cat(lines)
    return (lines ** 2).sum() / (r if contract_rows else c) / lines.numel()


def _hadamard_row(x2d, contract_rows, fmt, sums, noise, bias, keep, step, transformed):
    """format_row of a format with rht (kernels/quant_stats.cc quantStatsWithParams): the
    statistics of Q(H D x) against H D x (y's sums: its squares, its zeros), the scales
    from y; the bias-aware SQNR from E[y^2] and the errors of the values the GEMM reads,
    D H Q(y) against x (coherentErrorMeanSquare through fakeQuantize), as Q(x) with keep."""
    if transformed is not None and step in transformed:
        y, ysums = transformed[step]
    else:
        y = hadamard(x2d, contract_rows, step)
        ysums = TensorSums(y)
        if transformed is not None:
            transformed[step] = (y, ysums)
    plain = _plain(fmt)
    if not (bias or keep):
        return format_row(y, contract_rows, plain, ysums, noise)
    row, qy = format_row(y, contract_rows, plain, ysums, noise, keep=True)
    del y
    q = hadamard(qy, contract_rows, step, inverse=True)
    del qy
    if bias:
        coherent = _coherent_error(x2d, q, contract_rows)
        row = torch.cat([row[:4], _capped_ratio(ysums.signal / ysums.count, coherent).reshape(1)])
    return (row, q) if keep else row


def format_row(x2d, contract_rows, fmt, sums, noise, bias=False, keep=False, step=0, transformed=None):
    """[sqnr, mse, underflow_fraction, clipped_fraction, bias_sqnr] (0-d float64 tensors
    stacked) of the operand x2d [R, C] (contiguous float32, TensorSums `sums`) in format
    `fmt`, its contracting dimension along the rows or the columns; bias_sqnr (the
    bias-aware SQNR, E[x^2] / (E_lines[(sum_k e_k)^2] / K)) only with `bias`, else 0.
    With `keep`, returns (row, Q(x) [R, C]): the values a GEMM reading x in `fmt` reads.
    `step`: the training step whose signs a format with rht uses (the contracting length
    must then be a multiple of 16); `transformed`: a dict the caller keeps while it asks
    for several formats of x2d in one orientation, to transform x2d once for them."""
    if fmt.hadamard:
        return _hadamard_row(x2d, contract_rows, fmt, sums, noise, bias, keep, step, transformed)
    r, c_cols = x2d.shape
    g, pad = _grouped(x2d, contract_rows, fmt)
    g1, length, g2 = g.shape
    # Only MX scales (an absmax in (max, 2^(emax+1)) x scale), NVFP4's E4M3 block scales
    # (rounded down, or underflowing E4M3), bf16 (beyond its max: Inf), clipping and zero
    # points can leave values beyond the grid; f32 and two-level scales put the absmax on it.
    count_clipped = fmt.scale in ("e8m0", "e4m3") or fmt.element == "bf16" or fmt.clipping is not None
    # Chunks of whole groups along dim 0 compute their own scales; otherwise (one group
    # spans the tensor's rows: per tensor, per column, clipping, or 2-D tiles) the scales
    # come first.
    whole = g1 == 1 or fmt.clipping is not None or fmt.block2d
    params = None
    if whole:
        lo, hi = _ranges(g)
        if fmt.block2d:
            params = (_tile_scales(torch.maximum(-lo, hi), (r, c_cols), contract_rows, fmt, sums.absmax), None)
        elif fmt.emulated:
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
    sink = _Sink(bias, sums.inverse)
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
