#!/usr/bin/python3
"""Benchmark: compiling a ~100M-parameter GPT-style model for training.

Runs with Debian's python3-torch (/usr/bin/python3). Exports bench/gpu_models.py's
GPT (d 768, 12 heads, 12 layers, vocab 16000, seq 128: ~110M parameters) at
batch 2 with torch.onnx.export (train mode), compiles one AdamW training step
with `distopt compile --loss cross-entropy:logits --optimizer adamw`, and
trains 3 steps. Prints the compile's wall time and peak memory (the issue's
mark: under 60 s and 6 GB), the bundle's size, and the step time and peak
memory of the training run, as a Markdown table.

A second table compiles torchvision's MobileNetV2 (width 0.25, 64x64, batch
8) and ResNet-18 (64x64, batch 16) training steps (batch norm in training
form, SGD) with machine code generated on one thread (`--codegen-threads 1`,
distopt before 2026-11-27) and on every hardware thread (the default), in
alternation, the median of `--repeat` runs each.

A third table (`--only microbatches`) compiles a 4-layer GPT-style decoder
(d 64, 4 heads, seq 32, vocab 512; batch 2 per micro-batch) as an AdamW
step with gradient accumulation (`--accumulate K`) and as a two-stage 1F1B
pipeline (`--pp 2 --microbatches M` on local:2), for K and M in 1 / 8 / 64
/ 192: wall seconds and peak GiB of `distopt compile` (/usr/bin/time), and
the same by an earlier distopt (`--baseline PATH/bin/distopt`, e.g. a git
worktree built before micro-batches became calls; cases over
`--baseline-max` micro-batches are left out for it, "-" in the table).

`--only gpt2-medium` is the first table at GPT-2 medium's shape (d 1024,
16 heads, 24 layers, vocab 50257, seq 1024; the head not tied: 406M
parameters), batch 1, two steps.

A fourth table (`--only depth`) compiles the same decoder at 6 / 12 / 24 /
48 layers as an AdamW step, with repeated layers compiled once (the
default) and with every copy compiled (`--outline-repeats=false`, distopt
before 2026-11-29), in the same run.

`--only gpt3-ranks` compiles one rank of GPT-3 175B (python/testmodels'
generator; its weights are not present: compiling reads shapes) for
`--target cuda` on 128 DGX A100 nodes, batch 1536, seq 2048, fp16, AdamW
state in fp32 (`--optimizer adam`): the planner's own plan and the
Megatron-LM layout of the issue's headline (dp 8 x tp 8 x pp 16, 192
micro-batches), rank 0 (the first stage) and rank 1023 (the last): compile
seconds, peak GiB, and the rank's device memory as compiled against the
plan's prediction (the line `distopt compile` prints).

Usage: bench/training_compile.py [--build build] [--repeat 3]
           [--only gpt|gpt2-medium|threads|microbatches|depth|gpt3-ranks]
           [--baseline OLD/bin/distopt]
           [--baseline-max 64]
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


def threads_table(distopt: Path, repeat: int) -> None:
    import os
    import torchvision
    cases = [("MobileNetV2 (w 0.25), 64x64, batch 8",
              torchvision.models.mobilenet_v2(width_mult=0.25, num_classes=10), 8),
             ("ResNet-18, 64x64, batch 16", torchvision.models.resnet18(num_classes=10), 16)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="distopt-compile-bench-") as tmp:
        tmp = Path(tmp)
        for name, model, batch in cases:
            model.train()
            path = tmp / "m.onnx"
            torch.onnx.export(model, (torch.randn(batch, 3, 64, 64),), str(path),
                              input_names=["x"], output_names=["logits"], opset_version=17,
                              do_constant_folding=False,
                              training=torch.onnx.TrainingMode.TRAINING)
            times = {1: [], 0: []}
            for _ in range(repeat):
                for threads in (1, 0):
                    s, _ = timed([str(distopt), "compile", str(path), "--loss",
                                  "cross-entropy:logits", "--optimizer", "sgd",
                                  "--codegen-threads", str(threads), "-o", str(tmp / "m.dx")])
                    times[threads].append(s)
            one, all_ = float(np.median(times[1])), float(np.median(times[0]))
            rows.append((name, one, all_))
    print(f"\nTraining-step compile, machine code on 1 thread vs {os.cpu_count()} "
          f"(median of {repeat})\n")
    print("| model | 1 thread s | all threads s | speed-up |")
    print("|---|---:|---:|---:|")
    for name, one, all_ in rows:
        print(f"| {name} | {one:.1f} | {all_:.1f} | {one / all_:.2f}x |")


def time_compile(cmd, tmp: Path):
    """Wall seconds and peak RSS (GiB) of one `distopt compile`."""
    report = tmp / "time.txt"
    r = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", str(report), *map(str, cmd)],
                       capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{cmd[0]} failed: {r.stderr[-2000:]}")
    wall, kib = report.read_text().split()[-2:]
    return float(wall), int(kib) / 2**20


def microbatches_table(distopt: Path, baseline, baseline_max: int) -> None:
    torch.manual_seed(0)
    model = gpu_models.GPT(vocab=512, d=64, heads=4, layers=4, seq=32)
    rows = []
    with tempfile.TemporaryDirectory(prefix="distopt-compile-bench-") as tmp:
        tmp = Path(tmp)
        for what in ("accumulate", "pipeline"):
            for m in (1, 8, 64, 192):
                path = tmp / f"gpt{m}.onnx"
                # The exported batch is one micro-batch (--accumulate) or the
                # whole step's (a pipeline cuts it).
                batch = 2 if what == "accumulate" else 2 * m
                model.train()
                torch.onnx.export(model, (torch.randint(0, 512, (batch, 32)),), str(path),
                                  input_names=["x"], output_names=["logits"],
                                  opset_version=17, do_constant_folding=False,
                                  training=torch.onnx.TrainingMode.TRAINING)
                flags = (["--accumulate", str(m)] if what == "accumulate" else
                         ["--cluster", "local:2", "--pp", "2", "--microbatches", str(m),
                          "--schedule", "1f1b"])
                row = [what, m]
                for exe in (distopt, baseline):
                    if exe is None or (exe is baseline and m > baseline_max):
                        row += [None, None]
                        continue
                    row += list(time_compile(
                        [exe, "compile", path, "--loss", "cross-entropy:logits",
                         "--optimizer", "adamw", *flags, "-o", tmp / "m.dx"], tmp))
                rows.append(row)
                print(row, file=sys.stderr)
    fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    print("\nCompile of a 4-layer GPT-style training step (d 64) against its "
          "micro-batches: distopt, and the baseline\n")
    print("| micro-batches by | M or K | compile s | peak GiB | baseline s | baseline GiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for what, m, s, g, bs, bg in rows:
        print(f"| {what} | {m} | {fmt(s, '.1f')} | {fmt(g, '.2f')} | {fmt(bs, '.1f')} "
              f"| {fmt(bg, '.2f')} |")


def depth_table(distopt: Path) -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="distopt-compile-bench-") as tmp:
        tmp = Path(tmp)
        for layers in (6, 12, 24, 48):
            torch.manual_seed(0)
            model = gpu_models.GPT(vocab=512, d=64, heads=4, layers=layers, seq=32)
            model.train()
            path = tmp / f"gpt{layers}.onnx"
            torch.onnx.export(model, (torch.randint(0, 512, (2, 32)),), str(path),
                              input_names=["x"], output_names=["logits"], opset_version=17,
                              do_constant_folding=False,
                              training=torch.onnx.TrainingMode.TRAINING)
            row = [layers]
            for outline in ("true", "false"):
                row += list(time_compile(
                    [distopt, "compile", path, "--loss", "cross-entropy:logits", "--optimizer",
                     "adamw", f"--outline-repeats={outline}", "-o", tmp / "m.dx"], tmp))
            rows.append(row)
            print(row, file=sys.stderr)
    print("\nCompile of a GPT-style training step (d 64, AdamW) against its depth: "
          "layers compiled once, and every copy compiled\n")
    print("| layers | compile s | peak GiB | every copy s | every copy GiB |")
    print("|---:|---:|---:|---:|---:|")
    for layers, s, g, es, eg in rows:
        print(f"| {layers} | {s:.1f} | {g:.2f} | {es:.1f} | {eg:.2f} |")


def gpt3_ranks_table(distopt: Path) -> None:
    rows = []
    with tempfile.TemporaryDirectory(prefix="distopt-compile-bench-") as tmp:
        tmp = Path(tmp)
        # (The generator needs onnx: the project's virtualenv.)
        venv = HERE.parent / ".venv/bin/python"
        subprocess.run([venv if venv.exists() else sys.executable,
                        HERE.parent / "python/testmodels/gen_models.py",
                        "--out", tmp, "--only", "gpt3_175b"], check=True,
                       capture_output=True)
        plans = [("planner's", []),
                 ("dp 8 x tp 8 x pp 16, 192 mb", ["--dp", "8", "--tp", "8", "--pp", "16",
                                                  "--microbatches", "192"])]
        for name, forced in plans:
            for rank in (0, 1023):
                report = tmp / "time.txt"
                cmd = [distopt, "compile", tmp / "gpt3_175b.onnx", "--cluster",
                       "128xdgx-a100x8", "--dim", "batch=1536", "--dim", "seq=2048",
                       "--precision", "fp16", "--loss", "cross-entropy", "--optimizer",
                       "adam", "--target", "cuda", *forced, "--rank", str(rank),
                       "-o", tmp / "r.dx"]
                r = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", str(report),
                                    *map(str, cmd)], capture_output=True, text=True)
                if r.returncode:
                    sys.exit(f"distopt compile failed: {r.stderr[-2000:]}")
                wall, kib = report.read_text().split()[-2:]
                out = (r.stdout + r.stderr).splitlines()
                plan = next(l for l in out if "plan dp" in l)
                memory = next(l for l in out if "memory of a" in l)
                compiled = float(memory.split("device: ")[1].split()[0])
                predicted = float(memory.split("the plan predicted ")[1].split()[0])
                rows.append((name, plan.split("plan ")[1].split(" = ")[0], rank,
                             float(wall), int(kib) / 2**20, compiled, predicted))
                print(rows[-1], file=sys.stderr)
    print("\nOne rank of GPT-3 175B for 1024 A100s (CUDA, fp16), compiled here\n")
    print("| plan | degrees | rank | compile s | peak GiB | device GiB compiled | "
          "device GiB planned |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name, degrees, rank, s, g, c, pl in rows:
        print(f"| {name} | {degrees} | {rank} | {s:.0f} | {g:.2f} | {c:.1f} | {pl:.1f} |")


def gpt_table(distopt: Path, config: dict, batch: int, samples: int, steps_run: int) -> None:
    """Compiles bench/gpu_models.py's GPT of `config` as an AdamW step at
    `batch` and trains `steps_run` steps on `samples` samples."""
    vocab, seq = config["vocab"], config["seq"]
    torch.manual_seed(0)
    model = gpu_models.GPT(**config)
    params = sum(p.numel() for p in model.parameters())
    with tempfile.TemporaryDirectory(prefix="distopt-compile-bench-") as tmp:
        tmp = Path(tmp)
        onnx_path = tmp / "gpt.onnx"
        model.train()
        torch.onnx.export(model, (torch.randint(0, vocab, (batch, seq)),), str(onnx_path),
                          input_names=["x"], output_names=["logits"], opset_version=17,
                          do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
        del model
        bundle = tmp / "gpt.dx"
        compile_s, compile_gib = time_compile(
            [distopt, "compile", onnx_path, "--loss", "cross-entropy:logits",
             "--optimizer", "adamw", "-o", bundle], tmp)
        size = sum(f.stat().st_size for f in bundle.iterdir()) / 2**30
        ids = np.random.default_rng(0).integers(0, vocab, (samples, seq)).astype(np.int64)
        np.save(tmp / "x.npy", ids)
        np.save(tmp / "y.npy", (ids + 1) % vocab)
        log = tmp / "log.jsonl"
        _, train_gib = time_compile([bundle / "gpt", "train", "--data", f"x={tmp / 'x.npy'}",
                                     "--data", f"labels={tmp / 'y.npy'}", "--steps",
                                     str(steps_run), "--lr", "1e-4", "--log", log], tmp)
        steps = [json.loads(line) for line in log.read_text().splitlines()]
    print(f"\nTraining compile of a GPT-style model ({config}), torch {torch.__version__}\n")
    print(f"| parameters | compile s | compile peak GiB | bundle GiB | step s (batch {batch} x {seq}) "
          "| training peak GiB |")
    print("|---:|---:|---:|---:|---:|---:|")
    print(f"| {params / 1e6:.0f} M | {compile_s:.1f} | {compile_gib:.2f} | {size:.2f} | "
          f"{steps[-1]['step_s']:.2f} | {train_gib:.2f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=str(HERE.parent / "build"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=["gpt", "gpt2-medium", "threads", "microbatches",
                                       "depth", "gpt3-ranks"])
    ap.add_argument("--baseline", help="an earlier distopt, for the micro-batches table")
    ap.add_argument("--baseline-max", type=int, default=64)
    args = ap.parse_args()
    distopt = Path(args.build) / "bin" / "distopt"
    if args.only in (None, "microbatches"):
        microbatches_table(distopt, args.baseline, args.baseline_max)
    if args.only in (None, "depth"):
        depth_table(distopt)
    if args.only in (None, "threads"):
        threads_table(distopt, args.repeat)
    if args.only in (None, "gpt"):
        gpt_table(distopt, dict(vocab=16000, d=768, heads=12, layers=12, seq=128), 2, 8, 3)
    if args.only == "gpt3-ranks":
        gpt3_ranks_table(distopt)
    if args.only == "gpt2-medium":
        gpt_table(distopt, dict(vocab=50257, d=1024, heads=16, layers=24, seq=1024), 1, 2, 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
