"""PyTorch 1.13 eager f32 peer of bench/train_step_bench.cc: one full training step
(forward, backward, gradient clipping, AdamW) of the same transformer (torch_model.py),
same batch size, on 1 and 2 cores.

torch's own thread pool and OpenBLAS's threads add up, so each core budget is tried
in every split (torch threads x OpenBLAS threads) in a fresh process (OpenBLAS reads
its thread count at import) and the best is reported, as docs/PERFORMANCE.md asks.

    /usr/bin/python3 bench/torch_step.py [--model small|tiny|llama | --config M.yaml] [--steps 20]

`llama` is `small` with LLaMA's block (rope, grouped-query attention, SwiGLU, untied
head); --config reads a pgq model YAML (keys it leaves out take pgq's defaults).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SMALL = dict(vocab=256, d_model=256, n_layers=4, n_heads=4, d_ff=1024, seq_len=128, batch=16,
             norm="rmsnorm", norm_eps=1e-5, activation="gelu", tied_embeddings=True)
TINY = dict(SMALL, d_model=32, n_layers=2, n_heads=2, d_ff=64, seq_len=16, batch=4)
# SwiGLU's three matrices at about the parameters of gelu's two: d_ff ~ 2/3 x 4 x d_model.
LLAMA = dict(SMALL, n_kv_heads=2, d_ff=688, activation="swiglu", position="rope", rope_theta=10000.0,
             tied_embeddings=False)
MODELS = {"small": SMALL, "tiny": TINY, "llama": LLAMA}
DEFAULTS = dict(vocab=256, norm="rmsnorm", norm_eps=1e-5, activation="gelu", tied_embeddings=True)


def load_config(path):
    import yaml
    with open(path) as f:
        return dict(DEFAULTS, **yaml.safe_load(f))


def measure(cfg, steps):
    import torch
    sys.path.insert(0, HERE)
    import torch_model
    torch.manual_seed(0)
    params = torch_model.init_params(cfg)
    opt = torch.optim.AdamW(params.values(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    B, T = cfg["batch"], cfg["seq_len"]
    tokens = torch.randint(0, 256, (B, T), dtype=torch.int32)
    targets = torch.randint(0, 256, (B, T), dtype=torch.int32)
    times = []
    for i in range(steps + 3):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch_model.forward(cfg, params, tokens, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
        opt.step()
        if i >= 3:
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="small", choices=sorted(MODELS))
    ap.add_argument("--config", help="a pgq model YAML instead of --model")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    cfg = load_config(args.config) if args.config else MODELS[args.model]
    model = args.config or args.model
    if args.child:
        import torch
        torch.set_num_threads(args.child[0])
        print(json.dumps({"ms": measure(cfg, args.steps)}))
        return
    print(f"torch step time, model {model}, median of {args.steps} steps")
    print("| cores | torch threads | OpenBLAS threads | step ms |")
    print("|---|---|---|---|")
    for cores in (1, 2):
        best = None
        for torch_threads in range(1, cores + 1):
            for blas_threads in range(1, cores + 1):
                if cores == 2 and torch_threads == 1 and blas_threads == 1:
                    continue  # that is the 1-core configuration
                env = dict(os.environ, OPENBLAS_NUM_THREADS=str(blas_threads), OMP_NUM_THREADS=str(torch_threads))
                which = ["--config", args.config] if args.config else ["--model", args.model]
                out = subprocess.run([sys.executable, __file__, *which, "--steps", str(args.steps),
                                      "--child", str(torch_threads), str(blas_threads)],
                                     env=env, capture_output=True, text=True, check=True)
                ms = json.loads(out.stdout.strip().splitlines()[-1])["ms"]
                print(f"| {cores} | {torch_threads} | {blas_threads} | {ms:.1f} |", flush=True)
                best = ms if best is None else min(best, ms)
        print(f"| {cores} | best | | **{best:.1f}** |")


if __name__ == "__main__":
    main()
