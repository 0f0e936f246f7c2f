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
    """SQNR of the logits GEMMs' inputs, by (direction, role, granularity, rounding)."""
    out = {}
    for r in rows_:
        if not r["label"].startswith("get_logits") or r["role"] == "output":
            continue
        bits, granularity, rounding = r["format"].split(":")
        if bits != "int8":
            continue
        out[(r["direction"], r["role"], granularity, rounding)] = float(r["sqnr_mean"])
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


CONFIDENT = """name: confident
vocab: 256
d_model: 128
n_layers: 2
n_heads: 4
d_ff: 512
seq_len: 128
batch: 16
seed: 1234
"""


def confident(a, pgq):
    """A model that becomes confident: a byte-level model trained on one passage repeated
    (the first chapter of Genesis), profiled as its loss falls towards zero."""
    d = os.path.join(a.out, "confident")
    os.makedirs(d, exist_ok=True)
    corpus = os.path.join(d, "corpus.txt")
    if not os.path.exists(corpus):
        text = subprocess.run(["bible", "Gen1:1-Gen1:31"], capture_output=True, text=True, check=True).stdout
        with open(corpus, "w") as f:
            f.write(text * (400000 // len(text) + 1))
    cfg = os.path.join(d, "model.yaml")
    with open(cfg, "w") as f:
        f.write(CONFIDENT)
    out = []
    for steps in [3, 100, 300, 600, 1200]:
        p = os.path.join(d, f"step{steps}.yaml")
        if not os.path.exists(p):
            run([pgq, "train", "--model", cfg, "--corpus", corpus, "--no-progress", "--eval-every", "0",
                 "--profile-granularity", "tensor", "--steps", str(steps), "--warmup", str(min(50, steps)),
                 "--profile-warmup", str(steps - 3), "--profile-steps", "3", "--profile-out", p,
                 "--out", os.path.join(d, f"run{steps}")], os.path.join(d, f"step{steps}.log"))
        with open(os.path.join(d, f"run{steps}", "metrics.csv")) as f:
            last = list(csv.DictReader(f))[-1]
        out.append((steps, float(last["loss"]), p.replace(".yaml", ".csv")))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--vocabs", default="256,2048,8192,32768")
    ap.add_argument("--batches", default="32,64", help="larger batches profiled at vocab 8192")
    ap.add_argument("--corpus", default="english")
    ap.add_argument("--only-confident", action="store_true", help="only the confident-model part")
    a = ap.parse_args()
    pgq = os.path.join(a.build, "pgq")
    os.makedirs(a.out, exist_ok=True)
    S, P = a.steps, 3
    results = []  # (vocab, batch, when, profile csv)
    for vocab in [] if a.only_confident else [int(v) for v in a.vocabs.split(",")]:
        d = os.path.join(a.out, f"v{vocab}")
        os.makedirs(d, exist_ok=True)
        cfg = os.path.join(d, "model.yaml")
        with open(cfg, "w") as f:
            f.write(MODEL.format(vocab=vocab, batch=8, tokenizer="bytes" if vocab == 256 else "sentencepiece"))
        # int8 per-channel is always profiled; per-tensor scales too, to separate the
        # effect of the scale granularity from the rest.
        common = [pgq, "train", "--model", cfg, "--corpus", a.corpus, "--no-progress", "--eval-every", "0",
                  "--profile-granularity", "tensor"]
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

    cols = [("fwd", "activation", "channel", "rtn"), ("fwd", "weight", "channel", "rtn"),
            ("bwd_dgrad", "gradient", "channel", "rtn"), ("bwd_dgrad", "gradient", "channel", "sr"),
            ("bwd_dgrad", "gradient", "tensor", "sr"),
            ("bwd_wgrad", "gradient", "channel", "rtn"), ("bwd_wgrad", "gradient", "channel", "sr"),
            ("bwd_wgrad", "gradient", "tensor", "sr"), ("bwd_wgrad", "activation", "channel", "rtn")]
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
    md += ["", "A model that becomes confident (bytes, one passage repeated): SQNR of the logits GEMM's gradient", "",
           "| step | loss | " + " | ".join("/".join(c) for c in cols if c[1] == "gradient") + " |",
           "|---" * (2 + sum(1 for c in cols if c[1] == "gradient")) + "|"]
    for steps, loss, p in confident(a, pgq):
        lr = logits_rows(rows(p))
        md.append(f"| {steps} | {loss:.4f} | " +
                  " | ".join(f"{lr.get(c, float('nan')):.3g}" for c in cols if c[1] == "gradient") + " |")
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write("SQNR of the logits GEMM's inputs (int8 per-channel scales; the column names say "
                "direction/role/rounding)\n\n" + "\n".join(md) + "\n")
    print(open(os.path.join(a.out, "summary.md")).read())


if __name__ == "__main__":
    main()
