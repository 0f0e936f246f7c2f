#!/usr/bin/python3
"""pgq recipe --explain's per-GEMM estimates against the H100's measured GEMM times."""
import csv, re, statistics, sys
explain, table = sys.argv[1], sys.argv[2]
meas = {}
for r in csv.DictReader(open(table)):
    if r["error"]: continue
    key = (int(r["b"]), int(r["m"]), int(r["k"]), int(r["n"]))
    fp8 = r["fp8_fast_us"]
    meas[key] = (float(r["bf16_us"]), float(fp8) if fp8 else None)
rows = []
for line in open(explain):
    m = re.match(r"\s{4}(\S+)\s+((?:\d+x)?\d+,\d+,\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x\s+(\S+)", line)
    if not m: continue
    shape = m.group(2)
    b = 1
    if "x" in shape:
        b, shape = shape.split("x", 1); b = int(b)
    mm, k, n = map(int, shape.split(","))
    rows.append((m.group(1), (b, mm, k, n), float(m.group(3)), float(m.group(4))))
# Batched GEMMs (attention's scores and values) are charged as one flash-attention
# kernel on GPUs, not as the batched GEMMs the table measured: left out.
found = [(l, s, hp, q, meas[s]) for l, s, hp, q in rows if s in meas and s[0] == 1]
distinct = {}
for f in found: distinct.setdefault(f[1], f)
found = list(distinct.values())
print(f"{len(rows)} GEMM rows in the explanation; {len(found)} distinct unbatched shapes, each measured")
def ape(p, m): return abs(p - m) / m * 100
narrow = [f for f in found if min(f[1][1:]) <= 1024]
bf = [ape(hp, mb) for _, _, hp, _, (mb, _) in narrow]
fp = [ape(q, mf) for _, _, _, q, (_, mf) in narrow if mf]
print(f"narrow (some dim <= 1024): {len(narrow)} rows; bf16 MAPE {statistics.median(bf):.1f}%, FP8 MAPE {statistics.median(fp):.1f}%")
sp = sorted(ape(hp / q, mb / mf) for _, _, hp, q, (mb, mf) in found if mf and q > 0)
print(f"all rows: FP8/bf16 speedup error p90 {sp[int(0.9 * (len(sp) - 1))]:.1f}% (max {sp[-1]:.1f}%)")
for l, s, hp, q, (mb, mf) in found[:6]:
    print(f"  {l:28} {s}  bf16 {hp:8.1f} vs {mb:8.1f} us   fp8 {q:8.1f} vs {mf or 0:8.1f} us")
