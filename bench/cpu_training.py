#!/usr/bin/python3
"""Benchmark: CPU training step time, distopt vs PyTorch eager, same run.

Runs with Debian's python3-torch (/usr/bin/python3). For each model (an
MLP, nn.TransformerEncoder, a GPT-2-style decoder; bench/gpu_models.py's
modules at CPU sizes), exports the inference graph with torch.onnx.export,
compiles it with `distopt compile --loss cross-entropy:OUTPUT --optimizer
adamw`, trains with the executable's `train` mode, and trains the same
module in PyTorch (AdamW, same batch, same thread count) on the same data.
Prints the median step time of each after warm-up, the ratio, the peak
memory (maximum resident set) of each run -- both run as processes of their
own, measured by /usr/bin/time; PyTorch's includes the interpreter and the
torch library, about 0.3 GiB before any model -- and the first/last losses
of both runs (both start from the exported weights).

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
    import torchvision
    yield ("cnn", torchvision.models.resnet18(num_classes=10), (16, 3, 64, 64), 10,
           "torchvision ResNet-18 (batch norm in training form), 64x64, batch 16")
    layer = nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.0, batch_first=True)
    enc = nn.Sequential(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False),
                        nn.Linear(256, 16))
    yield ("transformer_encoder", enc, (8, 64, 256), 16,
           "nn.TransformerEncoder d256 h8 ff1024 x2 + head, seq 64, batch 8")
    yield ("gpt", gpu_models.GPT(vocab=5000, d=256, heads=8, layers=2, seq=64), (8, 64), 5000,
           "GPT-2-style d256 h8 x2, vocab 5000, seq 64, batch 8")


def peak_of(cmd, env=None):
    """Runs `cmd` under /usr/bin/time: (completed process, peak RSS GiB)."""
    r = subprocess.run(["/usr/bin/time", "-f", "PEAK_KB %M", *cmd], capture_output=True,
                       text=True, env=env)
    peak = 0.0
    for line in r.stderr.splitlines():
        if line.startswith("PEAK_KB "):
            peak = int(line.split()[1]) / 2**20
    return r, peak


def torch_run(args) -> int:
    """The PyTorch peer in a process of its own: trains the saved module on
    the saved data, prints the step times and losses as JSON."""
    torch.set_num_threads(args.threads)
    d = Path(args.torch_run)
    model = torch.load(d / "model.pt")
    model.train()
    x = torch.tensor(np.load(d / "x.npy"))
    y = torch.tensor(np.load(d / "y.npy"))
    batch = args.batch
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times, losses = [], []
    for s in range(args.steps):
        xb, yb = x[s * batch:(s + 1) * batch], y[s * batch:(s + 1) * batch]
        t = time.perf_counter()
        loss = gpu_models.train_step(model, opt, xb, yb)
        times.append((time.perf_counter() - t) * 1e3)
        losses.append(float(loss))
    print(json.dumps({"times": times, "losses": losses}))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--build", default=str(HERE.parent / "build"))
    ap.add_argument("--torch-run", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_run:
        return torch_run(args)
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
                label_shape = (n, shape[1]) if len(shape) == 3 else (n,)
                y = torch.randint(0, classes, label_shape, generator=gen)
            path = tmp / f"{name}.onnx"
            model.train()
            torch.save(model, tmp / "model.pt")  # before export: the same weights
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
            r, ours_peak = peak_of([str(bundle / name), "train", "--data",
                                    f"x={tmp / 'x.npy'}", "--data", f"labels={tmp / 'y.npy'}",
                                    "--steps", str(args.steps), "--no-shuffle", "--lr", "1e-3",
                                    "--log", str(log)], env=env)
            if r.returncode:
                print(f"{name}: train failed: {r.stderr[-800:]}")
                continue
            steps = [json.loads(line) for line in log.read_text().splitlines()]
            ours = statistics.median(s["step_s"] for s in steps[5:]) * 1e3
            # PyTorch eager, the same module (its exported weights), data, order.
            r, theirs_peak = peak_of([sys.executable, __file__, "--torch-run", str(tmp),
                                      "--steps", str(args.steps), "--threads",
                                      str(args.threads), "--batch", str(shape[0])])
            if r.returncode:
                print(f"{name}: PyTorch run failed: {r.stderr[-800:]}")
                continue
            torch_out = json.loads(r.stdout)
            theirs = statistics.median(torch_out["times"][5:])
            losses = torch_out["losses"]
            rows.append((name, desc, ours, theirs, ours_peak, theirs_peak, steps[0]["loss"],
                         steps[-1]["loss"], losses[0], losses[-1], compile_s))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\nCPU training step (AdamW), {args.threads} threads, median of steps 6..{args.steps}, "
          f"torch {torch.__version__}\n")
    print("| model | size | distopt ms/step | PyTorch ms/step | ratio | distopt peak GiB "
          "| PyTorch peak GiB | loss first→last (distopt) | (PyTorch) | compile s |")
    print("|---|---|---:|---:|---:|---:|---:|---|---|---:|")
    for name, desc, ours, theirs, op, tp, l0, l1, t0, t1, cs in rows:
        print(f"| {name} | {desc} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f} | "
              f"{op:.2f} | {tp:.2f} | {l0:.3f}→{l1:.3f} | {t0:.3f}→{t1:.3f} | {cs:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
