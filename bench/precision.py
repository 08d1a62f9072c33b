#!/usr/bin/python3
"""Benchmark: fp32 vs bf16 on the CPU, distopt vs PyTorch, same run.

Runs with Debian's python3-torch (/usr/bin/python3, torch 1.13, whose CPU
autocast computes bf16). For each model (an MLP, torchvision's ResNet-18, a
GPT-2-style decoder, a LLaMA-style decoder -- RMSNorm, rotary positions,
SwiGLU -- at T = 2048):
  * inference: `distopt compile --precision fp32|bf16`, the executable's
    median latency over --repeat runs; PyTorch eager under no_grad, fp32 and
    under torch.autocast("cpu", torch.bfloat16), timed alike;
  * training (not the T = 2048 decoder: --train-long adds it):
    `--loss cross-entropy --optimizer adamw --precision fp32|bf16`, the
    median step time of the `train` mode; PyTorch's AdamW step, fp32 and
    under autocast (bf16 forward and backward, fp32 master weights).
Prints a table. Each bf16 output is checked against fp32 first (within 3%
of the output's largest value).

Usage: bench/precision.py [--repeat N] [--steps N] [--threads T] [--build build]
                          [--only M...] [--train-long]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
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


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def rotate(x, cos, sin):
    a, b = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return x * cos + torch.cat([-b, a], dim=-1) * sin


class LlamaBlock(nn.Module):
    def __init__(self, d, heads, ff):
        super().__init__()
        self.h = heads
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(d, ff, bias=False), nn.Linear(d, ff, bias=False)
        self.down = nn.Linear(ff, d, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, d = x.shape
        y = self.n1(x)
        q, k, v = (p(y).reshape(b, t, self.h, d // self.h).transpose(1, 2)
                   for p in (self.q, self.k, self.v))
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.h) + mask
        a = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.o(a)
        y = self.n2(x)
        return x + self.down(nn.functional.silu(self.gate(y)) * self.up(y))


class Llama(nn.Module):
    def __init__(self, vocab=4096, d=256, heads=4, ff=688, layers=2, seq=2048):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(LlamaBlock(d, heads, ff) for _ in range(layers))
        self.norm, self.head = RMSNorm(d), nn.Linear(d, vocab, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, d // heads, 2).float() / (d // heads)))
        ang = torch.outer(torch.arange(seq).float(), inv)
        self.register_buffer("cos", torch.cat([ang.cos(), ang.cos()], -1))
        self.register_buffer("sin", torch.cat([ang.sin(), ang.sin()], -1))
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, ids):
        t = ids.shape[1]
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x, self.cos[:t], self.sin[:t], self.mask[:t, :t])
        return self.head(self.norm(x))


def models():
    torch.manual_seed(0)
    yield ("mlp", gpu_models.MLP((784, 1024, 1024, 10)), (64, 784), 10, True,
           "MLP 784-1024-1024-10, batch 64")
    import torchvision
    yield ("resnet18", torchvision.models.resnet18(num_classes=10), (16, 3, 64, 64), 10, True,
           "torchvision ResNet-18, 64x64, batch 16")
    yield ("gpt", gpu_models.GPT(vocab=5000, d=256, heads=8, layers=2, seq=64), (8, 64), 5000,
           True, "GPT-2-style d256 h8 x2, vocab 5000, seq 64, batch 8")
    yield ("llama_2048", Llama(), (1, 2048), 4096, False,
           "LLaMA-style d256 h4 ff688 x2, vocab 4096, T 2048, batch 1")


def median_ms(text: str) -> float:
    m = re.search(r"median ([0-9.]+) (us|ms|s)", text)
    return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]


def torch_latency(model, x, repeat: int, bf16: bool) -> tuple[float, np.ndarray]:
    model.eval()
    times = []
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        out = model(x)
        for _ in range(repeat):
            t = time.perf_counter()
            model(x)
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), out.float().numpy()


def torch_step(model, x, y, steps: int, bf16: bool) -> float:
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    times = []
    for s in range(steps):
        t = time.perf_counter()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(x)
            loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]).float(),
                                               y.reshape(-1))
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times[3:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--build", default=str(HERE.parent / "build"))
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--train-long", action="store_true")
    args = ap.parse_args()
    distopt = Path(args.build) / "bin" / "distopt"
    torch.set_num_threads(args.threads)
    env = dict(os.environ, DISTOPT_NUM_THREADS=str(args.threads))
    rows = []
    with tempfile.TemporaryDirectory(prefix="distopt-precision-bench-") as tmp:
        tmp = Path(tmp)
        for name, model, shape, classes, train, desc in models():
            if args.only and name not in args.only:
                continue
            ids = name in ("gpt", "llama_2048")
            gen = torch.Generator().manual_seed(1)
            x = (torch.randint(0, classes, shape, generator=gen) if ids
                 else torch.randn(shape, generator=gen))
            y = torch.randint(0, classes, shape if ids else (shape[0],), generator=gen)
            path = tmp / f"{name}.onnx"
            model.eval()
            torch.onnx.export(model, (x,), str(path), input_names=["x"],
                              output_names=["logits"], opset_version=17)
            np.save(tmp / "x.npy", x.numpy())
            row = {"model": name, "desc": desc}
            outs = {}
            for p in ["fp32", "bf16"]:
                bundle = tmp / f"{name}-{p}.dx"
                r = subprocess.run([str(distopt), "compile", str(path), "--precision", p,
                                    "-o", str(bundle)], capture_output=True, text=True)
                if r.returncode:
                    print(f"{name} {p}: compile failed: {r.stderr[-800:]}")
                    continue
                out = tmp / f"out-{p}"
                r = subprocess.run([str(bundle / bundle.stem), "--input", f"x={tmp / 'x.npy'}",
                                    "--repeat", str(args.repeat), "--output-dir", str(out)],
                                   capture_output=True, text=True, env=env)
                if r.returncode:
                    print(f"{name} {p}: run failed: {r.stderr[-800:]}")
                    continue
                row[f"ours_{p}"] = median_ms(r.stderr)
                outs[p] = np.load(out / "logits.npy")
            if "fp32" in outs and "bf16" in outs:
                err = np.abs(outs["bf16"] - outs["fp32"]).max() / np.abs(outs["fp32"]).max()
                row["bf16_err"] = float(err)
                assert err <= 0.03, f"{name}: bf16 output {err:.3g} from fp32"
            row["torch_fp32"], _ = torch_latency(model, x, args.repeat, False)
            row["torch_bf16"], _ = torch_latency(model, x, args.repeat, True)
            if train or args.train_long:
                np.save(tmp / "xs.npy", x.repeat(args.steps, *([1] * (x.dim() - 1))).numpy())
                np.save(tmp / "ys.npy", y.repeat(args.steps, *([1] * (y.dim() - 1))).numpy())
                for p in ["fp32", "bf16"]:
                    bundle = tmp / f"{name}-{p}-step.dx"
                    r = subprocess.run([str(distopt), "compile", str(path), "--loss",
                                        "cross-entropy:logits", "--optimizer", "adamw",
                                        "--precision", p, "-o", str(bundle)],
                                       capture_output=True, text=True)
                    if r.returncode:
                        print(f"{name} {p} step: compile failed: {r.stderr[-800:]}")
                        continue
                    log = tmp / f"{name}-{p}.jsonl"
                    r = subprocess.run([str(bundle / bundle.stem), "train", "--data",
                                        f"x={tmp / 'xs.npy'}", "--data",
                                        f"labels={tmp / 'ys.npy'}", "--steps", str(args.steps),
                                        "--no-shuffle", "--lr", "1e-3", "--log", str(log)],
                                       capture_output=True, text=True, env=env)
                    if r.returncode:
                        print(f"{name} {p} step: train failed: {r.stderr[-800:]}")
                        continue
                    steps = [json.loads(line) for line in log.read_text().splitlines()]
                    row[f"ours_step_{p}"] = statistics.median(s["step_s"] for s in steps[3:]) * 1e3
                    row[f"torch_step_{p}"] = torch_step(model, x, y, args.steps, p == "bf16")
            rows.append(row)
            print(json.dumps(row), flush=True)
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    flags = Path("/proc/cpuinfo").read_text()
    print(f"\nCPU fp32 vs bf16, {args.threads} threads, {cpu} "
          f"(avx512_bf16: {'yes' if 'avx512_bf16' in flags else 'no'}, "
          f"amx_bf16: {'yes' if 'amx_bf16' in flags else 'no'}), torch {torch.__version__}\n")
    print("| model | size | distopt fp32 ms | distopt bf16 ms | PyTorch fp32 ms | "
          "PyTorch autocast bf16 ms | distopt bf16 vs fp32 | step: distopt fp32 | "
          "distopt bf16 | PyTorch fp32 | PyTorch bf16 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    def f(r, k):
        return f"{r[k]:.2f}" if k in r else "—"
    for r in rows:
        print(f"| {r['model']} | {r['desc']} | {f(r, 'ours_fp32')} | {f(r, 'ours_bf16')} | "
              f"{f(r, 'torch_fp32')} | {f(r, 'torch_bf16')} | "
              f"{r['ours_bf16'] / r['ours_fp32']:.2f}x | " if 'ours_bf16' in r and 'ours_fp32' in r
              else f"| {r['model']} | {r['desc']} | — | — | — | — | — | ", end="")
        print(f"{f(r, 'ours_step_fp32')} | {f(r, 'ours_step_bf16')} | "
              f"{f(r, 'torch_step_fp32')} | {f(r, 'torch_step_bf16')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
