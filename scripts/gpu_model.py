#!/usr/bin/env python3
"""pgq's GPU GEMM, cast and flash-attention model (plan/hardware.cc), its fit to measured
times, and the hardware YAML it writes. Used by scripts/gpuprobe.py (which measures) and
on its own to fit recorded measurements and say how well the model predicts shapes it was
not fitted on (docs/PERFORMANCE.md, "GPU hardware models, measured").

The model, per GEMM [b] x M x K x N in format f (bf16, or fp8 for every 1-byte format):
  tiles = b * ceil(M / tile) * ceil(N / tile)                    output tiles of tile x tile
  sms_used = min(sms, max(tiles, min(split_k_sms_f, tiles * splits)))
      splits = min(max_split_k_f, ceil(K / tile)): split-K (or stream-K) spreads the K loop
      of few output tiles over more SMs, up to what the library's heuristic does
  compute = 2 * tiles * tile^2 * K / sms_used / (gemm_rate_f / sms) + max(1, tiles / sms) * tile_us_f
      padded tiles at the per-SM rate, plus a fixed cost per tile and wave (prologue fill,
      epilogue) that a short K does not hide
  time = launch_us_f + max(compute, bytes / memory_bandwidth)
A cast (one fused pass, as Transformer Engine's delayed scaling): call_overhead_us + 3 bytes
per element at quantize_gbs. Flash attention (causal, tile x tile blocks of scores):
fwd = launch + 4 * Dh flop per computed score at fwd_efficiency of the bf16 peak + 4 tensors'
traffic; bwd the same with 10 * Dh flop and 16 tensor passes.

Usage:
  gpu_model.py fit DIR [--fit-models medium,llama-7b] [--name h100-sxm]
      fit DIR/gemm.csv, DIR/cast2.csv, DIR/attn.csv (the layout of ../shared/gpu) on the
      shapes of the named models (DIR/../shapes.json or --shapes), print the fitted
      constants as a hardware YAML and the errors on the fitted and held-out models.
"""
import argparse
import csv
import json
import math
import os
import sys

FORMATS = ("bf16", "fp8")
OPERAND_BYTES = {"bf16": 2, "fp8": 1}
SPLIT_CHOICES = (1, 2, 3, 4, 6, 8, 12, 16)
TILE = 128


# ---------------------------------------------------------------- the model
def gemm_us(shape, fmt, p):
    """Estimated microseconds of a [b, m, k, n] GEMM in `fmt` with constants `p` (a dict:
    sms, tile, bandwidth_gbs, and per format rate_gflops, max_split_k, split_k_sms, tile_us,
    launch_us). Mirrors plan/hardware.cc gemmUs."""
    b, m, k, n = shape
    f = p[fmt]
    tile, sms = p["tile"], p["sms"]
    tiles = b * math.ceil(m / tile) * math.ceil(n / tile)
    splits = min(f["max_split_k"], math.ceil(k / tile))
    used = min(sms, max(tiles, min(f["split_k_sms"], tiles * splits)))
    per_sm = f["rate_gflops"] / sms
    compute = 2.0 * tiles * tile * tile * k / used / (per_sm * 1e3) + max(1.0, tiles / sms) * f["tile_us"]
    memory = b * (OPERAND_BYTES[fmt] * (m * k + k * n) + 2.0 * m * n) / (p["bandwidth_gbs"] * 1e3)
    return f["launch_us"] + max(compute, memory)


def cast_us(elements, p):
    """One fused cast of a bf16 tensor to FP8 (reads 2 bytes, writes 1)."""
    return p["cast_launch_us"] + 3.0 * elements / (p["cast_gbs"] * 1e3)


def copy_us(elements, p):
    return p["cast_launch_us"] + 4.0 * elements / (p["bandwidth_gbs"] * 1e3)


def attention_us(b, h, t, dh, direction, p):
    """Causal flash attention, forward or backward, of b x h heads of t x dh (bf16)."""
    tile = p["tile"]
    blocks = math.ceil(t / tile)
    scores = b * h * blocks * (blocks + 1) / 2 * tile * tile
    flop, tensors, eff = (4, 4, p["attn_fwd_eff"]) if direction == "fwd" else (10, 16, p["attn_bwd_eff"])
    compute = scores * flop * dh / (eff * p["peak_bf16_gflops"] * 1e3)
    memory = b * h * t * dh * 2.0 * tensors / (p["bandwidth_gbs"] * 1e3)
    return p["bf16"]["launch_us"] + compute + memory


# ---------------------------------------------------------------- reading measurements
class MeasurementError(Exception):
    """A measurement file pgq cannot fit, as FILE:LINE: field 'NAME': what is wrong."""


def _rows(path):
    """The data rows of CSV file `path` as (line, {column: text}); a row whose field
    count differs from the header's (a file cut short) is refused."""
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if not header:
            raise MeasurementError("%s:1: empty file; expected a header line" % path)
        for fields in reader:
            if not fields:
                continue
            if len(fields) != len(header):
                raise MeasurementError("%s:%d: %d fields, the header has %d (a row cut short?)" % (
                    path, reader.line_num, len(fields), len(header)))
            yield reader.line_num, dict(zip(header, fields))


def _value(path, line, row, field, kind=float, optional=False):
    """Field `field` of `row`: a finite number > 0 (an integer for kind=int); None when
    optional and empty."""
    if field not in row:
        raise MeasurementError("%s:1: no column '%s'" % (path, field))
    text = row[field].strip()
    if optional and not text:
        return None
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value <= 0:
        raise MeasurementError("%s:%d: field '%s': expected a positive %s, got %r" % (
            path, line, field, "integer" if kind is int else "number", text))
    return value


def read_gemms(path, model_of=None):
    rows, lines = [], {}
    for line, r in _rows(path):
        if r.get("error"):
            continue
        shape = tuple(_value(path, line, r, x, int) for x in ("b", "m", "k", "n"))
        if shape in lines:
            raise MeasurementError("%s:%d: shape %s is measured again (first on line %d)" % (
                path, line, list(shape), lines[shape]))
        lines[shape] = line
        rows.append({"shape": shape, "bf16": _value(path, line, r, "bf16_us"),
                     "fp8": _value(path, line, r, "fp8_fast_us", optional=True) if "fp8_fast_us" in r else None,
                     "model": (model_of or {}).get(shape, "probe")})
    return rows


def read_casts(path, model_of_operand=None):
    rows = []
    for line, r in _rows(path):
        if r.get("error") or not r.get("delayed_us"):
            continue
        shape = (_value(path, line, r, "rows", int), _value(path, line, r, "cols", int))
        rows.append({"shape": shape, "elements": shape[0] * shape[1], "cast": _value(path, line, r, "delayed_us"),
                     "copy": _value(path, line, r, "copy_us"), "models": (model_of_operand or {}).get(shape, {"probe"})})
    if len({c["elements"] for c in rows}) < 2:
        raise MeasurementError("%s: casts of at least two sizes are needed to fit bandwidth and launch time, got %d" % (
            path, len({c["elements"] for c in rows})))
    return rows


def read_attention(path):
    rows = []
    for line, r in _rows(path):
        fwd, both = _value(path, line, r, "sdpa_fwd_us"), _value(path, line, r, "sdpa_fwd_bwd_us")
        if both <= fwd:
            raise MeasurementError("%s:%d: field 'sdpa_fwd_bwd_us': %r is not above sdpa_fwd_us %r" % (
                path, line, both, fwd))
        rows.append({"case": r.get("case", ""), "bhtd": tuple(_value(path, line, r, x, int) for x in ("B", "H", "T", "Dh")),
                     "fwd": fwd, "bwd": both - fwd})
    return rows


def read_env(path):
    """env.json: an object; `sms` (the GPU's multiprocessors) an integer in [1, 1024]."""
    try:
        with open(path) as f:
            env = json.load(f)
    except ValueError as e:
        raise MeasurementError("%s: not JSON: %s" % (path, e))
    if not isinstance(env, dict):
        raise MeasurementError("%s: expected a JSON object, got %s" % (path, type(env).__name__))
    sms = env.get("sms", 132)
    if isinstance(sms, bool) or not isinstance(sms, int) or not 1 <= sms <= 1024:
        raise MeasurementError("%s: field 'sms': expected an integer in [1, 1024], got %r" % (path, sms))
    return env


# The attention cases of gpu_cast.py, by model (shapes.json's names).
ATTENTION_MODEL = {"medium": "medium", "gpt2": "gpt2-124m", "llama1b": "llama-1b", "llama7b": "llama-7b"}


def models_of(shapes_path):
    """GEMM shape -> model, and operand shape -> set of models, from shapes.json."""
    gemm, operand = {}, {}
    with open(shapes_path) as f:
        for r in json.load(f):
            shape = (r["b"], r["m"], r["k"], r["n"])
            gemm[shape] = r["model"]
            if r["b"] == 1:
                for op in ((r["m"], r["k"]), (r["k"], r["n"]), (r["m"], r["n"])):
                    operand.setdefault(op, set()).add(r["model"])
    return gemm, operand


# ---------------------------------------------------------------- fitting
def nelder_mead(f, x0, step=0.3, iters=500, tol=1e-12):
    """Minimizes f from x0 (no scipy on every machine pgq runs on)."""
    n = len(x0)
    pts = [list(x0)] + [[x + (step if i == j else 0.0) for j, x in enumerate(x0)] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = sorted(range(n + 1), key=lambda i: vals[i])
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if vals[-1] - vals[0] < tol:
            break
        c = [sum(p[j] for p in pts[:-1]) / n for j in range(n)]
        xr = [2 * c[j] - pts[-1][j] for j in range(n)]
        fr = f(xr)
        if fr < vals[0]:
            xe = [3 * c[j] - 2 * pts[-1][j] for j in range(n)]
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = [(c[j] + pts[-1][j]) / 2 for j in range(n)]
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0]] + [[(pts[0][j] + p[j]) / 2 for j in range(n)] for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    i = min(range(n + 1), key=lambda i: vals[i])
    return pts[i], vals[i]


def sig(x, digits=3):
    """x rounded to `digits` significant digits: the constants a YAML file holds."""
    if x == 0:
        return 0.0
    return round(x, digits - 1 - int(math.floor(math.log10(abs(x)))))


def fit_line(xs, ys):
    """Least squares y = a + b x, minimizing relative error (weights 1/y^2)."""
    w = [1.0 / (y * y) for y in ys]
    sw, sx, sy = sum(w), sum(wi * x for wi, x in zip(w, xs)), sum(wi * y for wi, y in zip(w, ys))
    sxx, sxy = sum(wi * x * x for wi, x in zip(w, xs)), sum(wi * x * y for wi, x, y in zip(w, xs, ys))
    slope = (sw * sxy - sx * sy) / (sw * sxx - sx * sx)
    return (sy - slope * sx) / sw, slope


def fit(gemms, casts, attention, sms, peak_bf16_gflops):
    """The model's constants from measured rows (every row given is fitted)."""
    p = {"sms": sms, "tile": TILE, "peak_bf16_gflops": peak_bf16_gflops}
    # Memory: a bf16 copy reads and writes 2 bytes per element; the launch is the cast's.
    a, slope = fit_line([4.0 * c["elements"] for c in casts], [c["copy"] for c in casts])
    p["bandwidth_gbs"] = sig(1e-3 / slope)
    a, slope = fit_line([3.0 * c["elements"] for c in casts], [c["cast"] for c in casts])
    p["cast_gbs"], p["cast_launch_us"] = sig(1e-3 / slope), round(a, 2)
    for fmt in FORMATS:
        rows = [g for g in gemms if g[fmt]]
        best = None
        for splits in SPLIT_CHOICES:
            for split_sms in range(16, sms + 1, 8) if sms > 16 else [sms]:
                def loss(x):
                    p[fmt] = {"rate_gflops": math.exp(x[0]), "tile_us": math.exp(x[1]), "launch_us": math.exp(x[2]),
                              "max_split_k": splits, "split_k_sms": split_sms}
                    return sum(math.log(gemm_us(g["shape"], fmt, p) / g[fmt]) ** 2 for g in rows)
                x0 = [math.log(sms * (5000 if fmt == "bf16" else 10000)), math.log(0.5), math.log(5.0)]
                x, v = nelder_mead(loss, x0, iters=300)
                if best is None or v < best[0]:
                    best = (v, splits, split_sms, x)
        _, splits, split_sms, x = best
        p[fmt] = {"rate_gflops": sig(math.exp(x[0])), "tile_us": round(math.exp(x[1]), 2),
                  "launch_us": round(math.exp(x[2]), 2), "max_split_k": splits, "split_k_sms": split_sms}
    for direction in ("fwd", "bwd"):
        key = "attn_%s_eff" % direction
        p["attn_fitted"] = bool(attention)
        if not attention:
            p[key] = 0.5
            continue
        def loss(x):
            p[key] = math.exp(x[0])
            return sum(math.log(attention_us(*a["bhtd"], direction, p) / a[direction]) ** 2 for a in attention)
        x, _ = nelder_mead(loss, [math.log(0.5)])
        p[key] = round(min(math.exp(x[0]), 1.0), 3)
    return p


# ---------------------------------------------------------------- errors
def median(xs):
    s = sorted(xs)
    n = len(s)
    return (s[(n - 1) // 2] + s[n // 2]) / 2 if n else float("nan")


def percentile(xs, q):
    """numpy's default (linear) percentile, as the C++ test computes it."""
    s = sorted(xs)
    if not s:
        return float("nan")
    pos = (len(s) - 1) * q / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def errors(gemms, casts, p):
    """The validation figures of tests/plan/gpu_model_test.cc for these rows."""
    narrow = [g for g in gemms if min(g["shape"][1:]) <= 1024]
    out = {
        "narrow_bf16": median([abs(gemm_us(g["shape"], "bf16", p) / g["bf16"] - 1) for g in narrow]),
        "narrow_fp8": median([abs(gemm_us(g["shape"], "fp8", p) / g["fp8"] - 1) for g in narrow if g["fp8"]]),
        "speedup_p90": percentile([abs(gemm_us(g["shape"], "bf16", p) / gemm_us(g["shape"], "fp8", p) /
                                       (g["bf16"] / g["fp8"]) - 1) for g in gemms if g["fp8"]], 90),
        "all_bf16": median([abs(gemm_us(g["shape"], "bf16", p) / g["bf16"] - 1) for g in gemms]),
        "all_fp8": median([abs(gemm_us(g["shape"], "fp8", p) / g["fp8"] - 1) for g in gemms if g["fp8"]]),
        "casts_max": max([abs(cast_us(c["elements"], p) / c["cast"] - 1) for c in casts if c["elements"] > 1 << 20],
                         default=float("nan")),
    }
    out["n_gemms"], out["n_narrow"] = len(gemms), len(narrow)
    return out


# ---------------------------------------------------------------- the YAML pgq reads
def hardware_yaml(p, name, source, peaks, gemm_rows=None, comment="", mxfp8_rate=None):
    """A hardware model pgq loads (plan/hardware.cc): datasheet peaks and the fitted model
    (with an MXFP8 GEMM rate where the GPU runs MXFP8)."""
    bw = p["bandwidth_gbs"]
    mx_peak = ", mxfp8: %.10g" % peaks.get("mxfp8", peaks["fp8"]) if mxfp8_rate else ""
    mx_rate = ", mxfp8: %.10g" % mxfp8_rate if mxfp8_rate else ""
    lines = [comment.rstrip("\n")] if comment else []
    lines += [
        # Double-quoted, escaped (a JSON string is a YAML one): a name such as "a: b" or with
        # a newline would otherwise change the file's fields.
        "name: %s" % json.dumps(name),
        "source: %s" % json.dumps(source),
        "threads: 1",
        "high_precision: bf16",
        "formats: [int8, fp8%s]" % (", mxfp8" if mxfp8_rate else ""),
        "# Transformer Engine casts a tensor once per step (with its transpose) for every GEMM",
        "# that reads it: the roofline divides that cast among them.",
        "cast_once: true",
        "peak_gflops: {f32: %.10g, bf16: %.10g, int8: %.10g, fp8: %.10g%s}" % (
            peaks["f32"], peaks["bf16"], peaks["int8"], peaks["fp8"], mx_peak),
        "# What large GEMMs achieve (fitted: the per-SM rate times the SMs). int8 runs on the FP8",
        "# tensor cores and is given their rate (not measured); f32 is 70% of its peak, assumed and",
        "# unused (GEMMs run in bf16 when not quantized).",
        "gemm_gflops: {f32: %.10g, bf16: %.10g, int8: %.10g, fp8: %.10g%s}" % (
            sig(peaks["f32"] * 0.7), p["bf16"]["rate_gflops"], p["fp8"]["rate_gflops"], p["fp8"]["rate_gflops"], mx_rate),
        "# Fitted to bf16 copies (2 + 2 bytes per element): what a kernel streams, not the datasheet's.",
        "memory_bandwidth_gbs: %g" % bw,
        "ridge_flop_per_byte: {f32: %.4g, bf16: %.4g, int8: %.4g, fp8: %.4g}" % (
            peaks["f32"] / bw, peaks["bf16"] / bw, peaks["int8"] / bw, peaks["fp8"] / bw),
        "# A fused cast (scale, saturate, E4M3, amax): 3 bytes per element, and its launch.",
        "quantize_gbs: {rtn: %g, sr: %g}" % (p["cast_gbs"], p["cast_gbs"]),
        "call_overhead_us: %g" % p["cast_launch_us"],
        "int8: {vnni: true, max_bits_one: 8, max_bits_both: 8}",
        "# How a GEMM's time depends on its shape (docs/FORMATS.md, fitted): output tiles of",
        "# tile x tile over the SMs; few tiles split K over at most max_split_k x tiles and",
        "# split_k_sms SMs; tile_us per wave of tiles (pipeline fill, epilogue), launch_us per GEMM.",
        "# fp8 also times int8 (1-byte operands on the same tensor cores).",
        "gemm_model:",
        "  sms: %d" % p["sms"],
        "  tile: %d" % p["tile"],
    ]
    for fmt in FORMATS:
        f = p[fmt]
        lines.append("  %s: {max_split_k: %d, split_k_sms: %d, tile_us: %g, launch_us: %g}" % (
            fmt, f["max_split_k"], f["split_k_sms"], f["tile_us"], f["launch_us"]))
    lines += [
        "# Causal attention as one flash-attention kernel each way, not six batched GEMMs: the",
        "# fraction of the bf16 peak its score blocks run at (%s)." % (
            "fitted to PyTorch SDPA, attn.csv" if p.get("attn_fitted", True) else
            "not measured: no attn.csv; 0.5 each way, assumed"),
        "attention: {fused: true, fwd_efficiency: %g, bwd_efficiency: %g}" % (p["attn_fwd_eff"], p["attn_bwd_eff"]),
    ]
    if gemm_rows:
        lines.append("# The measured GEMMs, us (fp8_us 0: not measured); pgq flags shapes outside their range.")
        lines.append("measured_gemms:")
        for g in gemm_rows:
            lines.append("  - {b: %d, m: %d, k: %d, n: %d, bf16_us: %.4g, fp8_us: %.4g}" % (
                *g["shape"], g["bf16"], g["fp8"] or 0))
    return "\n".join(lines) + "\n"


def table_us(shape, fmt, table):
    """The alternative to the model: a lookup table of measured achieved rates, interpolated
    by inverse squared distance in log(b, m, k, n) (torchao's roofline_utils looks rates up
    in a measured table the same way)."""
    x = [math.log(v) for v in shape]
    num = den = 0.0
    for g in table:
        if not g[fmt]:
            continue
        d2 = sum((a - math.log(b)) ** 2 for a, b in zip(x, g["shape"])) + 1e-9
        num += math.log(2.0 * math.prod(g["shape"]) / g[fmt]) / d2
        den += 1.0 / d2
    return 2.0 * math.prod(shape) / math.exp(num / den)


def datasheet_us(shape, fmt, peaks, bandwidth_gbs, launch_us=5.0):
    """pgq's model before the measurements: 70% of the dense peak, the datasheet bandwidth."""
    b, m, k, n = shape
    rate = 0.7 * peaks[fmt]
    memory = b * (OPERAND_BYTES[fmt] * (m * k + k * n) + 2.0 * m * n) / (bandwidth_gbs * 1e3)
    return launch_us + max(2.0 * b * m * k * n / (rate * 1e3), memory)


def scored(rows, predict):
    """Issue 31's figures for any predictor predict(shape, fmt)."""
    narrow = [g for g in rows if min(g["shape"][1:]) <= 1024]
    return (median([abs(predict(g["shape"], "bf16") / g["bf16"] - 1) for g in narrow]),
            median([abs(predict(g["shape"], "fp8") / g["fp8"] - 1) for g in narrow if g["fp8"]]),
            percentile([abs(predict(g["shape"], "bf16") / predict(g["shape"], "fp8") / (g["bf16"] / g["fp8"]) - 1)
                        for g in rows if g["fp8"]], 90))


def load_dir(directory, shapes_path):
    gemm_models, operand_models = models_of(shapes_path) if shapes_path and os.path.exists(shapes_path) else ({}, {})
    gemms = read_gemms(os.path.join(directory, "gemm.csv"), gemm_models)
    casts = read_casts(os.path.join(directory, "cast2.csv"), operand_models)
    attn_path = os.path.join(directory, "attn.csv")
    attention = read_attention(attn_path) if os.path.exists(attn_path) else []
    env_path = os.path.join(directory, "env.json")
    env = read_env(env_path) if os.path.exists(env_path) else {}
    return gemms, casts, attention, env


def split(rows, fit_models, key):
    """Rows fitted on (the fit models' and the probe's own shapes) and held out."""
    fitted = [r for r in rows if key(r) & (fit_models | {"probe"})]
    return fitted, [r for r in rows if not key(r) & (fit_models | {"probe"})]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fit")
    f.add_argument("dir")
    f.add_argument("--shapes", help="shapes.json (default: DIR/../shapes.json)")
    f.add_argument("--fit-models", default="medium,llama-7b")
    f.add_argument("--yaml", help="write the fitted hardware model here (datasheet peaks from --peaks)")
    f.add_argument("--name", default="probed-gpu")
    f.add_argument("--source", default="")
    f.add_argument("--peaks", default="f32=66900,bf16=989500,int8=1979000,fp8=1979000",
                   help="dense datasheet peaks, GFLOP/s (H100 SXM and H200 by default)")
    c = sub.add_parser("compare", help="held-out errors of the model and of a lookup table, every pair of models")
    c.add_argument("dir")
    c.add_argument("--shapes")
    c.add_argument("--datasheet-bandwidth", type=float, default=3350.0)
    args = ap.parse_args(argv)
    if args.cmd == "compare":
        return compare(args)
    shapes = args.shapes or os.path.join(args.dir, "..", "shapes.json")
    gemms, casts, attention, env = load_dir(args.dir, shapes)
    fit_models = set(args.fit_models.split(","))
    g_fit, g_held = split(gemms, fit_models, lambda g: {g["model"]})
    c_fit, c_held = split(casts, fit_models, lambda c: c["models"])
    a_fit = [a for a in attention if ATTENTION_MODEL.get(a["case"].split("@")[0]) in fit_models]
    peaks = {kv.split("=")[0]: float(kv.split("=")[1]) for kv in args.peaks.split(",")}
    p = fit(g_fit, c_fit, a_fit, int(env.get("sms", 132)), peaks["bf16"])
    print(json.dumps(p, indent=1, sort_keys=True))
    for label, g, c in (("fitted", g_fit, c_fit), ("held out", g_held, c_held), ("all", gemms, casts)):
        g = [x for x in g if x["model"] != "probe"]
        e = errors(g, c, p)
        print("%-8s %2d GEMMs (%2d narrow): narrow MAPE bf16 %.1f%% fp8 %.1f%%; FP8 speedup p90 %.1f%%; "
              "all MAPE bf16 %.1f%% fp8 %.1f%%; casts > 1M max %.1f%%" % (
                  label, e["n_gemms"], e["n_narrow"], 100 * e["narrow_bf16"], 100 * e["narrow_fp8"],
                  100 * e["speedup_p90"], 100 * e["all_bf16"], 100 * e["all_fp8"], 100 * e["casts_max"]))
    if args.yaml:
        with open(args.yaml, "w") as out:
            out.write(hardware_yaml(p, args.name, args.source, peaks, gemms))
    for a in attention:
        print("attention %-12s fwd %+.1f%% bwd %+.1f%%" % (
            a["case"], 100 * (attention_us(*a["bhtd"], "fwd", p) / a["fwd"] - 1),
            100 * (attention_us(*a["bhtd"], "bwd", p) / a["bwd"] - 1)))


def compare(args):
    """Fit on each pair of the four models, score the other two: the shape model against a
    lookup table of the same measurements, and pgq's datasheet model (nothing fitted)."""
    gemms, casts, attention, env = load_dir(args.dir, args.shapes or os.path.join(args.dir, "..", "shapes.json"))
    models = sorted({g["model"] for g in gemms} - {"probe"})
    peaks = {"bf16": 989500.0, "fp8": 1979000.0}
    print("fitted on              held out                model: narrow bf16 / fp8, speedup p90   "
          "table: narrow bf16 / fp8, speedup p90   datasheet: narrow bf16 / fp8, speedup p90")
    for i in range(len(models)):
        for j in range(i + 1, len(models)):
            fit_models = {models[i], models[j]}
            g_fit, g_held = split(gemms, fit_models, lambda g: {g["model"]})
            c_fit, _ = split(casts, fit_models, lambda c: c["models"])
            p = fit(g_fit, c_fit, [], int(env.get("sms", 132)), peaks["bf16"])
            results = [scored(g_held, lambda s, f: gemm_us(s, f, p)), scored(g_held, lambda s, f: table_us(s, f, g_fit)),
                       scored(g_held, lambda s, f: datasheet_us(s, f, peaks, args.datasheet_bandwidth))]
            print("%-22s %-22s %s" % (",".join(sorted(fit_models)), ",".join(m for m in models if m not in fit_models),
                                      "   ".join("%5.1f%% / %5.1f%%, %5.1f%%" % tuple(100 * x for x in r)
                                                 for r in results)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
