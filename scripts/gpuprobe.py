#!/usr/bin/env python3
"""Measure this machine's GPU and write a hardware model pgq loads (`pgq gpuprobe` runs
this script; it also runs on its own). Times bf16 and FP8 GEMMs (torch.mm and
torch._scaled_mm: E4M3 operands, per-tensor scales, fast accumulation; MXFP8 where
_scaled_mm takes E8M0 block scales) over a grid of shapes, fused FP8 casts (Triton, as
Transformer Engine's delayed scaling), bf16 copies and causal flash attention (SDPA);
fits scripts/gpu_model.py's model to them and writes the YAML with the measured GEMMs.

Usage:
  gpuprobe.py -o hw.yaml [--name NAME] [--keep DIR]   measure the GPU (CUDA device 0)
  gpuprobe.py -o hw.yaml --from DIR                   fit recorded measurements instead:
      DIR holds gemm.csv, cast2.csv, attn.csv and env.json as ../shared/gpu's scripts
      (and --keep) write them.
Exit code 2, with one line on stderr, when there is nothing to measure (no PyTorch, no
CUDA device, no FP8 GEMM).
"""
import argparse
import csv
import datetime
import json
import math
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_model  # noqa: E402

# Dense datasheet peaks (GFLOP/s; f32 the non-tensor rate), by what torch calls the GPU.
KNOWN_PEAKS = {
    "H100 80GB HBM3": dict(f32=66900, bf16=989500, int8=1979000, fp8=1979000),
    "H100 SXM": dict(f32=66900, bf16=989500, int8=1979000, fp8=1979000),
    "H100 PCIe": dict(f32=51200, bf16=756000, int8=1513000, fp8=1513000),
    "H100 NVL": dict(f32=60000, bf16=835000, int8=1670000, fp8=1670000),
    "H200": dict(f32=66900, bf16=989500, int8=1979000, fp8=1979000),
    "B200": dict(f32=80000, bf16=2250000, int8=4500000, fp8=4500000, mxfp8=4500000),
    "L40S": dict(f32=91600, bf16=362000, int8=733000, fp8=733000),
}


def refuse(message):
    print("gpuprobe: " + message, file=sys.stderr)
    sys.exit(2)


def peaks_of(gpu_name, gemms):
    for key, peaks in KNOWN_PEAKS.items():
        # The whole name, not a variant of it: "H200" is no "H200 NVL" (lower clocks and
        # peaks), "B200" no "GB200"; a variant the table lacks takes the measured rates.
        if re.search(r"(?<![A-Za-z0-9])%s(?![A-Za-z0-9]| NVL| PCIe)" % re.escape(key), gpu_name):
            return dict(peaks), "datasheet (dense)"
    # Unknown: the best measured rates at the 70% of peak large GEMMs reach.
    best = {f: max(2.0 * math.prod(g["shape"]) / g[f] / 1e3 for g in gemms if g[f]) for f in ("bf16", "fp8")}
    return (dict(f32=best["bf16"] / 0.7 / 8, bf16=best["bf16"] / 0.7, int8=best["fp8"] / 0.7, fp8=best["fp8"] / 0.7),
            "unknown GPU: best measured rate / 0.7")


# ---------------------------------------------------------------- measuring
def grid():
    """GEMM shapes: every combination of 512, 2048, 8192, 32768 for M, K and N under 2
    TFLOP (tall, wide, long-K and square), the launch floor, and batched attention-like
    GEMMs (memory-bound)."""
    dims = (512, 2048, 8192, 32768)
    shapes = [(1, 64, 64, 64), (1, 256, 256, 256)]
    shapes += [(1, m, k, n) for m in dims for k in dims for n in dims if 2.0 * m * k * n <= 2e12]
    shapes += [(1024, 256, 256, 64), (256, 2048, 2048, 64), (128, 2048, 128, 2048)]
    return shapes


def measure(keep):
    try:
        import torch
    except ImportError as e:
        refuse("cannot import torch (%s): install PyTorch with CUDA, or fit recorded times with --from DIR" % e)
    if not torch.cuda.is_available():
        refuse("no CUDA device (torch %s sees none): run it on a machine with an NVIDIA GPU, or fit recorded "
               "times with --from DIR" % torch.__version__)
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    env = dict(torch=torch.__version__, cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0),
               sms=props.multi_processor_count, date=datetime.date.today().isoformat())
    try:
        import triton
        from triton.testing import do_bench
        env["triton"] = triton.__version__

        def bench(fn):
            return do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e3
    except ImportError:
        triton = None

        def bench(fn):
            for _ in range(5):
                fn()
            times = []
            for _ in range(20):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b) * 1e3)
            return sorted(times)[len(times) // 2]

    e4m3 = torch.float8_e4m3fn
    one = torch.tensor(1.0, device=dev)
    gemms = []
    for (b, m, k, n) in grid():
        row = {"b": b, "m": m, "k": k, "n": n}
        if b == 1:
            a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            w = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
            row["bf16_us"] = bench(lambda: torch.mm(a, w))
            a8, w8 = a.to(e4m3), w.t().contiguous().to(e4m3).t()  # B column-major, as cuBLASLt needs
            try:
                row["fp8_fast_us"] = bench(lambda: torch._scaled_mm(a8, w8, scale_a=one, scale_b=one,
                                                                    out_dtype=torch.bfloat16, use_fast_accum=True))
            except (RuntimeError, AttributeError) as e:
                refuse("this GPU runs no FP8 GEMM (torch._scaled_mm: %s)" % str(e).splitlines()[0])
            del a, w, a8, w8
        else:
            a = torch.randn(b, m, k, device=dev, dtype=torch.bfloat16)
            w = torch.randn(b, k, n, device=dev, dtype=torch.bfloat16)
            row["bf16_us"] = bench(lambda: torch.bmm(a, w))
            del a, w
        gemms.append(row)
        print("gemm %s: bf16 %.1f us, fp8 %s us" % ((b, m, k, n), row["bf16_us"], row.get("fp8_fast_us", "-")),
              flush=True)
    env["mxfp8"] = mxfp8_ratio(torch, dev, bench)

    casts = []
    cast = fused_cast(triton) if triton else None
    env["cast"] = "triton fused (scale, saturate, E4M3, amax)" if cast else "torch, unfused (no triton)"
    for rows, cols in [(64, 64), (512, 512), (1024, 1024), (2048, 2048), (4096, 4096), (8192, 8192),
                       (16384, 8192), (16384, 16384), (32768, 8192), (32768, 32768)]:
        x = torch.randn(rows, cols, device=dev, dtype=torch.bfloat16)
        y = torch.empty(rows, cols, device=dev, dtype=e4m3)
        scale, amax = torch.ones(1, device=dev), torch.zeros(1, device=dev)
        if cast:
            us = bench(lambda: cast(x, y, scale, amax))
        else:
            us = bench(lambda: (torch.amax(torch.abs(x)), (x.float() * scale).clamp(-448, 448).to(e4m3)))
        casts.append({"rows": rows, "cols": cols, "copy_us": bench(lambda: x.clone()), "delayed_us": us})
        del x, y
    attention = []
    for (name, bq, h, t, dh) in [("medium@32k", 128, 8, 256, 64), ("gpt2@32k", 64, 12, 512, 64),
                                 ("llama1b@16k", 8, 32, 2048, 64), ("llama7b@8k", 4, 32, 2048, 128)]:
        q = torch.randn(bq, h, t, dh, device=dev, dtype=torch.bfloat16, requires_grad=True)
        k_, v = torch.randn_like(q, requires_grad=True), torch.randn_like(q, requires_grad=True)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        fwd = bench(lambda: sdpa(q, k_, v, is_causal=True))
        g = torch.randn_like(q)
        fb = bench(lambda: torch.autograd.grad(sdpa(q, k_, v, is_causal=True), (q, k_, v), g))
        attention.append({"case": name, "B": bq, "H": h, "T": t, "Dh": dh, "sdpa_fwd_us": fwd, "sdpa_fwd_bwd_us": fb})
        del q, k_, v, g
    write_csvs(keep, gemms, casts, attention, env)
    return keep


def mxfp8_ratio(torch, dev, bench):
    """MXFP8 / FP8 GEMM time on one large shape where _scaled_mm takes E8M0 block scales of
    32 (Blackwell); None where it does not."""
    try:
        m = k = n = 8192
        a8 = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        w8 = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()
        sa = torch.ones(m, k // 32, device=dev).to(torch.float8_e8m0fnu)
        sb = torch.ones(n, k // 32, device=dev).to(torch.float8_e8m0fnu)
        mx = bench(lambda: torch._scaled_mm(a8, w8, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16))
        one = torch.tensor(1.0, device=dev)
        fp8 = bench(lambda: torch._scaled_mm(a8, w8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16,
                                             use_fast_accum=True))
        return mx / fp8
    except Exception:  # noqa: BLE001 - any failure means: no MXFP8 here
        return None


def fused_cast(triton):
    import triton.language as tl

    @triton.jit
    def cast_amax(x_ptr, y_ptr, scale_ptr, amax_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        y = tl.clamp(x * tl.load(scale_ptr), -448.0, 448.0)
        tl.store(y_ptr + offs, y.to(tl.float8e4nv), mask=mask)
        tl.atomic_max(amax_ptr, tl.max(tl.abs(x), 0))

    def run(x, y, scale, amax):
        n = x.numel()
        cast_amax[(triton.cdiv(n, 4096),)](x, y, scale, amax, n, BLOCK=4096)
    return run


def write_csvs(folder, gemms, casts, attention, env):
    os.makedirs(folder, exist_ok=True)
    tables = [("gemm.csv", gemms, ["b", "m", "k", "n", "bf16_us", "fp8_fast_us"]),
              ("cast2.csv", casts, ["rows", "cols", "copy_us", "delayed_us"]),
              ("attn.csv", attention, ["case", "B", "H", "T", "Dh", "sdpa_fwd_us", "sdpa_fwd_bwd_us"])]
    for name, rows, keys in tables:
        with open(os.path.join(folder, name), "w", newline="") as f:
            w = csv.DictWriter(f, keys)
            w.writeheader()
            for r in rows:
                w.writerow(r)
    with open(os.path.join(folder, "env.json"), "w") as f:
        json.dump(env, f, indent=1)


# ---------------------------------------------------------------- fitting and writing
def fit_and_write(folder, out, name):
    for needed in ("gemm.csv", "cast2.csv", "env.json"):
        if not os.path.exists(os.path.join(folder, needed)):
            refuse("%s: no %s (expected gemm.csv, cast2.csv, env.json and optionally attn.csv)" % (folder, needed))
    try:
        gemms, casts, attention, env = gpu_model.load_dir(folder, None)
    except gpu_model.MeasurementError as e:
        refuse(str(e))
    if not any(g["fp8"] for g in gemms):
        refuse("%s/gemm.csv: no FP8 times (fp8_fast_us): pgq's GPU model needs them" % folder)
    bad = [g for g in gemms if not (g["bf16"] > 0 and (g["fp8"] is None or g["fp8"] > 0))]
    if bad:
        refuse("%s/gemm.csv: a time that is not a positive number, shape %s" % (folder, list(bad[0]["shape"])))
    gpu = env.get("gpu", "unknown GPU")
    peaks, peak_source = peaks_of(gpu, gemms)
    p = gpu_model.fit(gemms, casts, attention, int(env.get("sms", 132)), peaks["bf16"])
    e = gpu_model.errors(gemms, casts, p)
    software = ", ".join("%s %s" % (k, env[k]) for k in ("torch", "cuda", "triton") if env.get(k))
    source = "measured by pgq gpuprobe on one %s%s (%s); peaks: %s; median error bf16 %.1f%%, fp8 %.1f%%" % (
        gpu, ", " + env["date"] if env.get("date") else "", software, peak_source, 100 * e["all_bf16"],
        100 * e["all_fp8"])
    comment = ("# Written by pgq gpuprobe (scripts/gpuprobe.py) from %d GEMMs, %d casts and %d attention shapes.\n"
               "# The model and its fit: docs/FORMATS.md, scripts/gpu_model.py.\n" % (
                   len(gemms), len(casts), len(attention)))
    mxfp8_rate = None
    if env.get("mxfp8"):
        comment += "# MXFP8 ran at %.2fx FP8's time on an 8192^3 GEMM: its rate is FP8's over that.\n" % env["mxfp8"]
        mxfp8_rate = gpu_model.sig(p["fp8"]["rate_gflops"] / env["mxfp8"])
    text = gpu_model.hardware_yaml(p, name, source, peaks, gemms, comment, mxfp8_rate)
    with open(out, "w") as f:
        f.write(text)
    print("fitted %d GEMMs: median error bf16 %.1f%%, fp8 %.1f%%" % (len(gemms), 100 * e["all_bf16"], 100 * e["all_fp8"]))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-o", "--out", required=True, help="hardware model to write (YAML)")
    ap.add_argument("--name", default="probed-gpu")
    ap.add_argument("--from", dest="source", help="fit the recorded measurements in this folder instead")
    ap.add_argument("--keep", help="write the measurements here (default: beside --out, OUT.d)")
    args = ap.parse_args(argv)
    folder = args.source or measure(args.keep or args.out + ".d")
    start = time.time()
    fit_and_write(folder, args.out, args.name)
    print("fit: %.0f s" % (time.time() - start))


if __name__ == "__main__":
    main(sys.argv[1:])
