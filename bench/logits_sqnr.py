#!/usr/bin/env python3
"""What makes a GEMM input's int8 SQNR low? pgq's own profiles, swept over the
vocabulary size, the tokens per step and training progress (issue 13, question 1).

For each vocabulary (256 bytes, 2K, 8K, 32K SentencePiece BPE on the English corpus), a
LLaMA-style model of `medium`'s layout at half its width (so the sweep fits a session
on 2 cores) is profiled at initialization and after training; the 8K model is also
profiled at larger batches from its trained checkpoint. Every figure is read back from
the profile CSVs pgq writes (int8 per-channel; round to nearest for every operand,
stochastic rounding for gradients: the formats that run).

    bench/logits_sqnr.py BUILD_DIR OUT_DIR [--steps N] [--vocabs 256,2048,...]

Writes OUT_DIR/summary.md (tables) and OUT_DIR/summary.csv; the runs stay in OUT_DIR.
"""
import argparse
import csv
import math
import os
import subprocess
import sys
import time

MODEL = """name: sweep_v{vocab}
tokenizer: {tokenizer}
vocab: {vocab}
d_model: 256
n_layers: 4
n_heads: 4
n_kv_heads: 2
d_ff: 704
seq_len: 256
batch: {batch}
norm: rmsnorm
activation: swiglu
position: rope
tied_embeddings: false
seed: 1234
"""


def run(cmd, log):
    t0 = time.time()
    with open(log, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}; see {log}")
    return time.time() - t0


def rows(profile_csv):
    with open(profile_csv) as f:
        return list(csv.DictReader(f))


def logits_rows(rows_):
    """SQNR of the logits GEMMs' inputs in the formats that run."""
    out = {}
    for r in rows_:
        if not r["label"].startswith("get_logits"):
            continue
        fmt = r["format"]
        grad = r["role"] == "gradient"
        if (grad and fmt != "int8:channel:sr" and fmt != "int8:channel:rtn") or (not grad and fmt != "int8:channel:rtn"):
            continue
        key = (r["direction"], r["role"], fmt.split(":")[-1])
        out[key] = float(r["sqnr_mean"])
    return out


def lowest(rows_, n=5):
    """The n GEMM inputs with the lowest SQNR in the formats that run (sr for gradients)."""
    best = []
    for r in rows_:
        if r["role"] == "output":
            continue
        want = "int8:channel:sr" if r["role"] == "gradient" else "int8:channel:rtn"
        if r["format"] != want:
            continue
        best.append((float(r["sqnr_mean"]), r["label"], r["direction"], r["role"]))
    best.sort()
    return best[:n]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--vocabs", default="256,2048,8192,32768")
    ap.add_argument("--batches", default="32,64", help="larger batches profiled at vocab 8192")
    ap.add_argument("--corpus", default="english")
    a = ap.parse_args()
    pgq = os.path.join(a.build, "pgq")
    os.makedirs(a.out, exist_ok=True)
    S, P = a.steps, 3
    results = []  # (vocab, batch, when, profile csv)
    for vocab in [int(v) for v in a.vocabs.split(",")]:
        d = os.path.join(a.out, f"v{vocab}")
        os.makedirs(d, exist_ok=True)
        cfg = os.path.join(d, "model.yaml")
        with open(cfg, "w") as f:
            f.write(MODEL.format(vocab=vocab, batch=8, tokenizer="bytes" if vocab == 256 else "sentencepiece"))
        common = [pgq, "train", "--model", cfg, "--corpus", a.corpus, "--no-progress", "--eval-every", "0"]
        init = os.path.join(d, "init.yaml")
        if not os.path.exists(init):
            run(common + ["--steps", str(P), "--profile-steps", str(P), "--profile-out", init, "--out",
                          os.path.join(d, "init_run")], os.path.join(d, "init.log"))
        results.append((vocab, 8, 0, init.replace(".yaml", ".csv")))
        trained = os.path.join(d, "trained.yaml")
        if not os.path.exists(trained):
            secs = run(common + ["--steps", str(S), "--profile-warmup", str(S - P), "--profile-steps", str(P),
                                 "--profile-out", trained, "--out", os.path.join(d, "trained_run")],
                       os.path.join(d, "trained.log"))
            print(f"vocab {vocab}: {S} steps in {secs:.0f} s", flush=True)
        results.append((vocab, 8, S, trained.replace(".yaml", ".csv")))
        if vocab == 8192:
            for batch in [int(b) for b in a.batches.split(",") if b]:
                p = os.path.join(d, f"batch{batch}.yaml")
                if not os.path.exists(p):
                    run(common + ["--batch", str(batch), "--init-from",
                                  os.path.join(d, "trained_run", "checkpoint.pgqckpt"), "--steps", str(S + P),
                                  "--profile-warmup", str(S), "--profile-steps", str(P), "--profile-out", p,
                                  "--out", os.path.join(d, f"batch{batch}_run")], os.path.join(d, f"batch{batch}.log"))
                results.append((vocab, batch, S, p.replace(".yaml", ".csv")))

    cols = [("fwd", "activation", "rtn"), ("fwd", "weight", "rtn"),
            ("bwd_dgrad", "gradient", "rtn"), ("bwd_dgrad", "gradient", "sr"),
            ("bwd_wgrad", "gradient", "rtn"), ("bwd_wgrad", "gradient", "sr"), ("bwd_wgrad", "activation", "rtn")]
    with open(os.path.join(a.out, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["vocab", "batch", "tokens_per_step", "step"] + ["/".join(c) for c in cols])
        md = ["| vocab | tokens/step | step | " + " | ".join("/".join(c) for c in cols) + " |",
              "|---" * (len(cols) + 3) + "|"]
        for vocab, batch, when, p in results:
            lr = logits_rows(rows(p))
            vals = [lr.get(c, float("nan")) for c in cols]
            w.writerow([vocab, batch, batch * 256, when] + [f"{v:.6g}" for v in vals])
            md.append(f"| {vocab} | {batch * 256} | {when} | " + " | ".join(f"{v:.3g}" for v in vals) + " |")
    md += ["", "Lowest five GEMM inputs (int8 per-channel; rtn, sr for gradients), SQNR:", ""]
    for vocab, batch, when, p in results:
        low = lowest(rows(p))
        md.append(f"- vocab {vocab}, {batch * 256} tokens/step, step {when}: " +
                  "; ".join(f"{lab} {d} {role} {s:.3g} (ln1p {math.log1p(s):.2f})" for s, lab, d, role in low))
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write("SQNR of the logits GEMM's inputs (int8 per-channel scales; the column names say "
                "direction/role/rounding)\n\n" + "\n".join(md) + "\n")
    print(open(os.path.join(a.out, "summary.md")).read())


if __name__ == "__main__":
    main()
