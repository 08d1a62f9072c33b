#!/usr/bin/python3
"""Benchmark: distributed training throughput per plan kind, distopt vs PyTorch DDP.

Runs with Debian's python3-torch (/usr/bin/python3). For a GPT-2-style
decoder and a small CNN (bench/gpu_models.py's GPT; convolutions, pooling
and a classifier, no batch norm), exports the inference graph with
torch.onnx.export and, for each rank count N and each plan kind on N ranks
(data parallel dp N; tensor parallel tp N; pipelined pp N with 4
micro-batches, 1F1B; and on 4 ranks dp 2 x tp 2, dp 2 x pp 2, tp 2 x pp 2):

- distopt: `distopt compile --loss cross-entropy:logits --optimizer adamw
  --cluster local:N <degrees>` and `distopt run -n N BUNDLE train`;
- PyTorch: DistributedDataParallel over the gloo backend, N processes, each
  on its 1/N of the same global batch, AdamW, the same threads per process
  (the data-parallel peer; the other plan kinds are compared with it on
  the same ranks and batch);
- the planner: `distopt plan --cluster local:N <degrees>`'s predicted step.

Prints samples/s (global batch / median step time after warm-up) of each,
the ratio, and the planner's prediction, as a Markdown table. Both peers
split the cores among their processes (distopt: DISTOPT_NUM_THREADS; torch:
set_num_threads), so with more ranks than cores the numbers show
oversubscription, not scaling.

Usage: bench/distributed_training.py [--ranks 1,2,4] [--steps N] [--build build]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import gpu_models  # noqa: E402


class CNN(nn.Module):
    """Two convolution blocks and a classifier on 3x32x32 images."""

    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(64 * 8 * 8, classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def models():
    torch.manual_seed(0)
    yield ("gpt", lambda: gpu_models.GPT(vocab=2000, d=128, heads=4, layers=2, seq=32),
           (16, 32), 2000, "GPT-2-style d128 h4 x2, vocab 2000, seq 32, batch 16")
    yield ("cnn", CNN, (32, 3, 32, 32), 10, "CNN 2 conv + fc on 3x32x32, batch 32")


def data(name, shape, classes, steps):
    gen = torch.Generator().manual_seed(1)
    n = shape[0] * steps
    if name == "gpt":
        return (torch.randint(0, classes, (n,) + shape[1:], generator=gen),
                torch.randint(0, classes, (n,) + shape[1:], generator=gen))
    return torch.randn((n,) + shape[1:], generator=gen), torch.randint(0, classes, (n,),
                                                                        generator=gen)


def ddp_worker(rank, world, port, name, state, shape, classes, steps, threads, out):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    factory = dict((m[0], m[1]) for m in models())[name]
    model = factory()
    model.load_state_dict(state)
    # The causal masks (bool buffers gloo cannot broadcast) are constants.
    nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
        model, [k for k, v in model.state_dict().items() if v.dtype == torch.bool])
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
    x, y = data(name, shape, classes, steps)
    per = shape[0] // world
    times = []
    for s in range(steps):
        lo = s * shape[0] + rank * per
        xb, yb = x[lo:lo + per], y[lo:lo + per]
        dist.barrier()
        t = time.perf_counter()
        gpu_models.train_step(ddp, opt, xb, yb)
        times.append(time.perf_counter() - t)
    if rank == 0:
        Path(out).write_text(json.dumps(times))
    dist.destroy_process_group()


def plan_kinds(n):
    """(label, degree flags) of the plans on n ranks."""
    if n == 1:
        return [("one process", [])]
    kinds = [(f"dp {n}", ["--dp", str(n)]), (f"tp {n}", ["--tp", str(n)]),
             (f"pp {n}", ["--pp", str(n), "--microbatches", "4"])]
    if n == 4:
        kinds += [("dp 2 x tp 2", ["--dp", "2", "--tp", "2"]),
                  ("dp 2 x pp 2", ["--dp", "2", "--pp", "2", "--microbatches", "4"]),
                  ("tp 2 x pp 2", ["--tp", "2", "--pp", "2", "--microbatches", "4"])]
    return kinds


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--build", default=str(HERE.parent / "build"))
    args = ap.parse_args()
    distopt = Path(args.build) / "bin" / "distopt"
    cores = os.cpu_count() or 1
    rank_counts = [int(r) for r in args.ranks.split(",")]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    rows = []
    with tempfile.TemporaryDirectory(prefix="distopt-ddp-bench-") as tmp:
        tmp = Path(tmp)
        for name, factory, shape, classes, desc in models():
            model = factory()
            state = {k: v.clone() for k, v in model.state_dict().items()}
            x, y = data(name, shape, classes, args.steps)
            path = tmp / f"{name}.onnx"
            torch.onnx.export(model, (x[: shape[0]],), str(path), input_names=["x"],
                              output_names=["logits"], opset_version=17,
                              do_constant_folding=False,
                              training=torch.onnx.TrainingMode.TRAINING)
            np.save(tmp / "x.npy", x.numpy())
            np.save(tmp / "y.npy", y.numpy())
            for n in rank_counts:
                if shape[0] % n:
                    continue
                threads = max(1, cores // n)
                out = tmp / f"ddp-{name}{n}.json"
                mp.spawn(ddp_worker, args=(n, free_port(), name, state, shape, classes,
                                           args.steps, threads, str(out)), nprocs=n, join=True)
                theirs = statistics.median(json.loads(out.read_text())[5:])
                for kind, degrees in plan_kinds(n):
                    cluster = ["--cluster", f"local:{n}", *degrees] if n > 1 else []
                    bundle = tmp / f"{name}{n}.dx"
                    r = subprocess.run([str(distopt), "compile", str(path), "--loss",
                                        "cross-entropy:logits", "--optimizer", "adamw",
                                        *cluster, "-o", str(bundle)],
                                       capture_output=True, text=True)
                    if r.returncode:
                        print(f"{name} {kind}: compile failed: {r.stderr[-800:]}")
                        rows.append((name, desc, n, kind, threads, None, shape[0] / theirs,
                                     None, None, r.stderr.strip().splitlines()[-1]))
                        continue
                    log = tmp / f"{name}{n}.jsonl"
                    r = subprocess.run([str(distopt), "run", "-n", str(n), str(bundle),
                                        "train", "--data", f"x={tmp / 'x.npy'}", "--data",
                                        f"labels={tmp / 'y.npy'}", "--steps",
                                        str(args.steps), "--no-shuffle", "--lr", "1e-3",
                                        "--log", str(log)],
                                       capture_output=True, text=True,
                                       env=dict(env, DISTOPT_NUM_THREADS=str(threads)))
                    if r.returncode:
                        print(f"{name} {kind}: train failed: {r.stderr[-800:]}")
                        continue
                    steps = [json.loads(line) for line in log.read_text().splitlines()]
                    ours = statistics.median(s["step_s"] for s in steps[5:])
                    share = statistics.median(s["comm_share"] for s in steps[5:])
                    plan = subprocess.run([str(distopt), "plan", str(path), "--cluster",
                                           f"local:{n}", *degrees, "--json", "-"],
                                          capture_output=True, text=True)
                    predicted = (json.loads(plan.stdout)["predicted_step_time_s"]
                                 if plan.returncode == 0 else float("nan"))
                    rows.append((name, desc, n, kind, threads, shape[0] / ours,
                                 shape[0] / theirs, share, shape[0] / predicted, ""))
                    print(json.dumps(rows[-1]), flush=True)
    print(f"\nTraining (AdamW) per plan kind, {cores} cores, median of steps "
          f"6..{args.steps}, torch {torch.__version__} DDP over gloo on the same ranks\n")
    print("| model | size | ranks | plan | threads/rank | distopt samples/s | DDP samples/s | "
          "distopt / DDP | distopt comm wait share | planner's samples/s |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for name, desc, n, kind, threads, ours, theirs, share, predicted, why in rows:
        if ours is None:
            print(f"| {name} | {desc} | {n} | {kind} | {threads} | -- ({why}) | "
                  f"{theirs:.0f} | -- | -- | -- |")
            continue
        print(f"| {name} | {desc} | {n} | {kind} | {threads} | {ours:.0f} | {theirs:.0f} | "
              f"{ours / theirs:.2f} | {share:.2f} | {predicted:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
