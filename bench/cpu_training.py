#!/usr/bin/python3
"""Benchmark: CPU training step time, distopt vs PyTorch eager, same run.

Runs with Debian's python3-torch (/usr/bin/python3). For each model (an
MLP, nn.TransformerEncoder, a GPT-2-style decoder; bench/gpu_models.py's
modules at CPU sizes), exports the inference graph with torch.onnx.export,
compiles it with `distopt compile --loss cross-entropy:OUTPUT --optimizer
adamw`, trains with the executable's `train` mode, and trains the same
module in PyTorch (AdamW, same batch, same thread count) on the same data.
Prints the median step time of each after warm-up, the ratio, and the
first/last losses of both runs (different initial weights would make them
differ; both start from the exported weights here).

Usage: bench/cpu_training.py [--steps N] [--threads T] [--build build]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import gpu_models  # noqa: E402


def models():
    torch.manual_seed(0)
    yield ("mlp", gpu_models.MLP((784, 1024, 1024, 10)), (64, 784), 10,
           "MLP 784-1024-1024-10, batch 64")
    layer = nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.0, batch_first=True)
    enc = nn.Sequential(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False),
                        nn.Linear(256, 16))
    yield ("transformer_encoder", enc, (8, 64, 256), 16,
           "nn.TransformerEncoder d256 h8 ff1024 x2 + head, seq 64, batch 8")
    yield ("gpt", gpu_models.GPT(vocab=5000, d=256, heads=8, layers=2, seq=64), (8, 64), 5000,
           "GPT-2-style d256 h8 x2, vocab 5000, seq 64, batch 8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--build", default=str(HERE.parent / "build"))
    args = ap.parse_args()
    distopt = Path(args.build) / "bin" / "distopt"
    torch.set_num_threads(args.threads)
    env = dict(os.environ, DISTOPT_NUM_THREADS=str(args.threads))
    rows = []
    with tempfile.TemporaryDirectory(prefix="distopt-train-bench-") as tmp:
        tmp = Path(tmp)
        for name, model, shape, classes, desc in models():
            ids = name == "gpt"
            gen = torch.Generator().manual_seed(1)
            n = shape[0] * args.steps
            if ids:
                x = torch.randint(0, classes, (n,) + shape[1:], generator=gen)
                y = torch.randint(0, classes, (n,) + shape[1:], generator=gen)
            else:
                x = torch.randn((n,) + shape[1:], generator=gen)
                label_shape = (n,) if len(shape) == 2 else (n, shape[1])
                y = torch.randint(0, classes, label_shape, generator=gen)
            path = tmp / f"{name}.onnx"
            model.train()
            torch.onnx.export(model, (x[: shape[0]],), str(path), input_names=["x"],
                              output_names=["logits"], opset_version=17,
                              do_constant_folding=False,
                              training=torch.onnx.TrainingMode.TRAINING)
            bundle = tmp / f"{name}.dx"
            t0 = time.time()
            r = subprocess.run([str(distopt), "compile", str(path), "--loss",
                                "cross-entropy:logits", "--optimizer", "adamw", "-o",
                                str(bundle)], capture_output=True, text=True)
            compile_s = time.time() - t0
            if r.returncode:
                print(f"{name}: compile failed: {r.stderr[-800:]}")
                continue
            np.save(tmp / "x.npy", x.numpy())
            np.save(tmp / "y.npy", y.numpy())
            log = tmp / f"{name}.jsonl"
            r = subprocess.run([str(bundle / name), "train", "--data", f"x={tmp / 'x.npy'}",
                                "--data", f"labels={tmp / 'y.npy'}", "--steps",
                                str(args.steps), "--no-shuffle", "--lr", "1e-3", "--log",
                                str(log)], capture_output=True, text=True, env=env)
            if r.returncode:
                print(f"{name}: train failed: {r.stderr[-800:]}")
                continue
            steps = [json.loads(line) for line in log.read_text().splitlines()]
            ours = statistics.median(b["elapsed_s"] - a["elapsed_s"]
                                     for a, b in zip(steps[4:], steps[5:])) * 1e3
            # PyTorch eager, the same module (from the exported weights), data, order.
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
            times, losses = [], []
            for s in range(args.steps):
                xb = x[s * shape[0]:(s + 1) * shape[0]]
                yb = y[s * shape[0]:(s + 1) * shape[0]]
                t = time.perf_counter()
                opt.zero_grad()
                out = model(xb)
                loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]),
                                                   yb.reshape(-1))
                loss.backward()
                opt.step()
                times.append((time.perf_counter() - t) * 1e3)
                losses.append(float(loss))
            theirs = statistics.median(times[5:])
            rows.append((name, desc, ours, theirs, steps[0]["loss"], steps[-1]["loss"],
                         losses[0], losses[-1], compile_s))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\nCPU training step (AdamW), {args.threads} threads, median of steps 6..{args.steps}, "
          f"torch {torch.__version__}\n")
    print("| model | size | distopt ms/step | PyTorch ms/step | ratio | loss first→last (distopt) "
          "| (PyTorch) | compile s |")
    print("|---|---|---:|---:|---:|---|---|---:|")
    for name, desc, ours, theirs, l0, l1, t0, t1, cs in rows:
        print(f"| {name} | {desc} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f} | "
              f"{l0:.3f}→{l1:.3f} | {t0:.3f}→{t1:.3f} | {cs:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
