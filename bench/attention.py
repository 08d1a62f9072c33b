#!/usr/bin/python3
"""Benchmark: the memory and time of long-sequence attention, fused
(dopt.attention, the default) against the exported chain
(`--fuse-attention=false`, the score matrix stored) and against PyTorch, in
the same run.

The model is torch's nn.MultiheadAttention (self-attention, d 256, 4 heads,
no mask) exported by Debian's torch 1.13 (/usr/bin/python3) at each
sequence length T: its exporter writes q·scale, then MatMul(q, kᵀ), Softmax,
MatMul(p, v), which distopt fuses. For each T:
  * distopt: the executable's peak resident memory (the kernel's
    ru_maxrss of the child) and its median latency over --repeat runs, fused
    and not;
  * PyTorch eager (no_grad), its peak resident memory measured the same way
    in a child process, and its median latency.
Each distopt output is checked against PyTorch's first (1e-4 of the
largest value).

Usage: bench/attention.py [--lengths 1024 4096] [--repeat N] [--threads T]
                          [--build build]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
D, HEADS = 256, 4


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(D, HEADS, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


def measure(cmd, env):
    """Peak RSS (MiB) of `cmd` alone, through a helper process so earlier
    children do not count."""
    probe = [sys.executable, "-c",
             "import resource, subprocess, sys;"
             "p = subprocess.run(sys.argv[1:], capture_output=True);"
             "sys.stderr.buffer.write(p.stderr);"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss);"
             "sys.exit(p.returncode)", *cmd]
    proc = subprocess.run(probe, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"{cmd[0]} failed:\n{proc.stderr}")
    return int(proc.stdout.split()[-1]) / 1024


TORCH_PEAK = """
import sys, torch
torch.set_num_threads(int(sys.argv[3]))
m = torch.nn.MultiheadAttention(%d, %d, batch_first=True)
m.load_state_dict(torch.load(sys.argv[1])); m.eval()
x = torch.load(sys.argv[2])
with torch.no_grad():
    m(x, x, x, need_weights=False)
""" % (D, HEADS)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--build", default=str(ROOT / "build"))
    args = ap.parse_args()
    distopt = Path(args.build) / "bin" / "distopt"
    env = dict(os.environ, DISTOPT_NUM_THREADS=str(args.threads))
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = SelfAttention().eval()
        torch.save(model.mha.state_dict(), tmp / "m.pt")
        for t in args.lengths:
            x = torch.randn(1, t, D)
            torch.save(x, tmp / "x.pt")
            onnx_path = tmp / f"att{t}.onnx"
            torch.onnx.export(model, (x,), str(onnx_path), opset_version=17,
                              input_names=["x"], output_names=["y"])
            np.save(tmp / "x.npy", x.numpy())
            with torch.no_grad():
                want = model(x).numpy()
            torch_times = []
            with torch.no_grad():
                for _ in range(args.repeat):
                    start = time.perf_counter()
                    model(x)
                    torch_times.append(time.perf_counter() - start)
            torch_peak = measure([sys.executable, "-c", TORCH_PEAK, str(tmp / "m.pt"),
                                  str(tmp / "x.pt"), str(args.threads)], env)
            row = {"T": t, "torch_ms": 1e3 * statistics.median(torch_times),
                   "torch_mib": torch_peak}
            for fused in (True, False):
                name = f"att{t}_{int(fused)}"
                bundle = tmp / f"{name}.dx"
                subprocess.run([str(distopt), "compile", str(onnx_path),
                                f"--fuse-attention={'true' if fused else 'false'}",
                                "-o", str(bundle)], check=True, capture_output=True)
                exe = [str(bundle / name), "--input", f"x={tmp / 'x.npy'}",
                       "--output-dir", str(tmp / name)]
                peak = measure(exe, env)
                got = np.load(tmp / name / "y.npy")
                err = np.abs(got - want).max() / np.abs(want).max()
                if err > 1e-4:
                    sys.exit(f"T={t} fused={fused}: off by {err:.2e} of the largest value")
                times = []
                for _ in range(args.repeat):
                    start = time.perf_counter()
                    subprocess.run(exe, check=True, capture_output=True, env=env)
                    times.append(time.perf_counter() - start)
                key = "fused" if fused else "plain"
                row[f"{key}_ms"] = 1e3 * statistics.median(times)
                row[f"{key}_mib"] = peak
            rows.append(row)
    print(f"self-attention, d {D}, {HEADS} heads, batch 1, {args.threads} threads; "
          f"peak resident MiB / median ms per run (distopt: the whole executable run)")
    print(f"| T | distopt fused MiB | distopt unfused MiB | PyTorch MiB | "
          f"distopt fused ms | distopt unfused ms | PyTorch ms |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['T']} | {r['fused_mib']:.0f} | {r['plain_mib']:.0f} | "
              f"{r['torch_mib']:.0f} | {r['fused_ms']:.1f} | {r['plain_ms']:.1f} | "
              f"{r['torch_ms']:.1f} |")


if __name__ == "__main__":
    main()
