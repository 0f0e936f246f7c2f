#!/usr/bin/python3
"""The collector's quantizer statistics on tensors larger than one chunk (2^18 elements
on a CPU: the parity tests' tensors fit in one): for every granularity, orientation,
rounding, padding and clipping, format_row's SQNR, MSE and bias-aware SQNR must equal
those computed directly from the quantized values it returns (keep=True): errors
e = Q(x) - x, mse = E[e^2], bias-aware SQNR = E[x^2] / (E_lines[(sum_k e_k)^2] / K) with
the lines the non-contracting positions. This checks the chunk bookkeeping (a row or a
block split between chunks, per-tensor chunks of whole rows, padded blocks) and that Q
is reassembled in x's layout. Within 1e-5 relative: format_row sums squares per chunk in
float (the norms of 2^18 elements, ~3e-6 apart from double sums here), the lines in
double; a line or layout mixed up moves them by far more.

Usage: check_quant.py
"""
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
from pgq_profile import formats, quant  # noqa: E402

FORMATS = ["int8:channel:rtn", "int8:channel:sr", "int4:tensor:rtn", "e4m3:tensor:sr", "int4:block16:rtn:asym",
           "int6:block24:sr", "e4m3:block32:rtn:scale=e8m0", "e5m2:block32:sr:scale=two_level",
           "int5:channel:rtn:clip=mse", "int4:channel:rtn:clip=p99", "nvfp4", "e2m1:block16x16:sr:scale=e4m3",
           "mxfp4:sr", "e2m1:channel:rtn", "bf16:tensor:rtn", "bf16:tensor:sr", "e2m1:block32:sr:scale=e8m0:rht",
           "e2m1:block16x16:rtn:scale=e4m3:rht", "e4m3:tensor:rtn:rht"]


def scale_invariance(x, contract_rows, fmt, text, where):
    """Every format's grid is relative to the operand's scales, so x times a power of two
    has the same SQNR and bias-aware SQNR, and its MSE times that power squared: checked
    at 2^60 (values to ~5e18: their squares, and a chunk's sum of them, overflow float;
    the collector refused such operands as NaN, session 16) and 2^-70 (squares below
    float's smallest normal). The same stochastic-rounding bits for each."""
    failures = []
    base = quant.format_row(x, contract_rows, fmt, quant.TensorSums(x), quant.Noise(torch.device("cpu"), 0),
                            bias=True, step=3).tolist()
    for power in (60, -70):
        y = x * 2.0 ** power
        row = quant.format_row(y, contract_rows, fmt, quant.TensorSums(y), quant.Noise(torch.device("cpu"), 0),
                               bias=True, step=3).tolist()
        want = {"sqnr": base[0], "mse": base[1] * 4.0 ** power, "bias_sqnr": base[4]}
        got = {"sqnr": row[0], "mse": row[1], "bias_sqnr": row[4]}
        for key in want:
            d = abs(got[key] - want[key]) / max(abs(want[key]), 1e-300)
            if not d <= 1e-6:
                failures.append("{} times 2^{}: {} {}, {} at scale 1".format(where, power, key, got[key], want[key]))
    return failures


def nvfp4_edge_cases():
    """NVFP4 as Transformer Engine computes it (kernels/float_quant.cc, tests/kernels/
    fp4_quant_test.cc): a block whose E4M3 scale underflows decodes to 0 (it saturated at
    6 * 2^-126), and s_b = e4m3(G * (S * (1/6))) in f32 (rounded twice, it took 192 for
    200.0000075, not 208)."""
    failures = []
    fmt = formats.parse("nvfp4")
    x = torch.zeros(1, 32)
    x[0, 0], x[0, 16], x[0, 17] = 2688.0, 0.001, -0.0005
    _, q = quant.format_row(x, False, fmt, quant.TensorSums(x), quant.Noise(torch.device("cpu"), 0), keep=True)
    if q[0, 0].item() != 2688.0 or q[0, 16:].abs().max().item() != 0.0:
        failures.append("nvfp4 block whose scale underflows: Q = {}, expected 2688 and zeros".format(q[0].tolist()))
    t, g = float.fromhex("0x1.100a6ap+9"), float.fromhex("0x1.e5c974p+7")
    scales = quant._emulated_scales(torch.tensor([t, g], dtype=torch.float32), torch.tensor(t), fmt)
    encode = torch.tensor(2688.0 / t, dtype=torch.float32).double()
    want = float((208.0 / encode).float())
    if scales[1].item() != want:
        failures.append("nvfp4 block scale of G = {}: {}, expected 208 / S = {}".format(g, scales[1].item(), want))
    print("ok   nvfp4 edge cases" if not failures else "FAIL nvfp4 edge cases")
    return failures


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    failures = []
    # 700 x 1000 = 700,000 elements: 3 chunks; rows of 1000 (not a multiple of 24 or of
    # 2^18 / 1000), 700 rows (not a multiple of 24: padded blocks when contracting rows;
    # nor of 16: partial 16x16 tiles both ways). A mean makes round to nearest's errors
    # share a sign along the lines. Formats with rht (a contracting length that is a
    # multiple of 16) take its first 688 x 992 (3 chunks too); their SQNR and MSE are
    # those of H D x, equal to the error of Q(x) = D H Q(H D x) against x up to float
    # rounding (the transform is orthonormal).
    full = (torch.randn(700, 1000) * torch.rand(700, 1) + 0.3).contiguous()
    noise = quant.Noise(torch.device("cpu"), 0)
    checked = 0
    for text in FORMATS:
        fmt = formats.parse(text)
        x = full[:688, :992].contiguous() if fmt.hadamard else full
        sums = quant.TensorSums(x)
        for contract_rows in (False, True):
            row, q = quant.format_row(x, contract_rows, fmt, sums, noise, bias=True, keep=True, step=3)
            sqnr, mse, _, _, bias = row.tolist()
            e = (q.double() - x.double())
            lines = e.sum(dim=0 if contract_rows else 1)
            k = x.shape[0] if contract_rows else x.shape[1]
            signal = float((x.double() ** 2).mean())
            want = {"mse": float((e ** 2).mean()), "sqnr": signal / float((e ** 2).mean()),
                    "bias_sqnr": signal / float((lines ** 2).sum() / k / lines.numel())}
            got = {"mse": mse, "sqnr": sqnr, "bias_sqnr": bias}
            where = "{} contracting {}".format(text, "rows" if contract_rows else "columns")
            for key in want:
                d = abs(got[key] - want[key]) / max(abs(want[key]), 1e-300)
                if d > 1e-5:
                    failures.append("{}: {} {} from format_row, {} from its Q(x)".format(where, key, got[key],
                                                                                       want[key]))
            checked += 1
            print("ok   {:<48} sqnr {:10.4g}  bias-aware {:10.4g}".format(where, sqnr, bias))
            failures += scale_invariance(x, contract_rows, fmt, text, where)
    failures += nvfp4_edge_cases()
    for f in failures:
        print("FAIL " + f)
    print("{} formats x orientations: {}".format(checked, "{} failures".format(len(failures)) if failures else "OK"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
