#!/usr/bin/python3
"""Benchmark: compiling a ~100M-parameter GPT-style model for training.

Runs with Debian's python3-torch (/usr/bin/python3). Exports bench/gpu_models.py's
GPT (d 768, 12 heads, 12 layers, vocab 16000, seq 128: ~110M parameters) at
batch 2 with torch.onnx.export (train mode), compiles one AdamW training step
with `distopt compile --loss cross-entropy:logits --optimizer adamw`, and
trains 3 steps. Prints the compile's wall time and peak memory (the issue's
mark: under 60 s and 6 GB), the bundle's size, and the step time and peak
memory of the training run, as a Markdown table.

Usage: bench/training_compile.py [--build build]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import gpu_models  # noqa: E402


def timed(cmd):
    """Wall seconds and the peak RSS (GiB) of a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode:
        sys.exit(f"{cmd[0]} failed: {r.stderr[-2000:]}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # ru_maxrss of children is the largest so far: measure one child per run.
    return wall, max(peak, before) / 2**20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=str(HERE.parent / "build"))
    args = ap.parse_args()
    distopt = Path(args.build) / "bin" / "distopt"
    torch.manual_seed(0)
    model = gpu_models.GPT(vocab=16000, d=768, heads=12, layers=12, seq=128)
    params = sum(p.numel() for p in model.parameters())
    with tempfile.TemporaryDirectory(prefix="distopt-compile-bench-") as tmp:
        tmp = Path(tmp)
        onnx_path = tmp / "gpt.onnx"
        model.train()
        torch.onnx.export(model, (torch.randint(0, 16000, (2, 128)),), str(onnx_path),
                          input_names=["x"], output_names=["logits"], opset_version=17,
                          do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
        bundle = tmp / "gpt.dx"
        compile_s, compile_gib = timed([str(distopt), "compile", str(onnx_path), "--loss",
                                        "cross-entropy:logits", "--optimizer", "adamw",
                                        "-o", str(bundle)])
        size = sum(f.stat().st_size for f in bundle.iterdir()) / 2**30
        ids = np.random.default_rng(0).integers(0, 16000, (8, 128)).astype(np.int64)
        np.save(tmp / "x.npy", ids)
        np.save(tmp / "y.npy", (ids + 1) % 16000)
        log = tmp / "log.jsonl"
        _, train_gib = timed([str(bundle / "gpt"), "train", "--data", f"x={tmp / 'x.npy'}",
                              "--data", f"labels={tmp / 'y.npy'}", "--steps", "3", "--lr",
                              "1e-4", "--log", str(log)])
        steps = [json.loads(line) for line in log.read_text().splitlines()]
    print(f"\nTraining compile of a GPT-style model, torch {torch.__version__}\n")
    print("| parameters | compile s | compile peak GiB | bundle GiB | step s (batch 2 x 128) "
          "| training peak GiB |")
    print("|---:|---:|---:|---:|---:|---:|")
    print(f"| {params / 1e6:.0f} M | {compile_s:.1f} | {compile_gib:.2f} | {size:.2f} | "
          f"{steps[-1]['step_s']:.2f} | {train_gib:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
