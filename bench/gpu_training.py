#!/usr/bin/env python3
"""Benchmark: one GPU training step, distopt (--target cuda) vs PyTorch eager.

A training step is forward, backward and AdamW's update, with the
cross-entropy of the model's output against integer labels. The models are
bench/gpu_models.py's (the inference benchmark's) at the same sizes, in
three steps, as the compiler cannot travel to a GPU machine:

  export KIT    (/usr/bin/python3 with Debian's torch) exports each model
                with torch.onnx.export in training mode, weights as
                external data;
  prepare KIT   (the project's venv) compiles each as a training step with
                `distopt compile --loss cross-entropy:y --optimizer adamw
                --target cuda`, then drops the weight files (the GPU machine
                writes random ones of the same layout);
  run KIT       (on the GPU machine, its python3 with torch) writes the
                weights and a data set of 4 batches, runs the bundle's
                `train` mode for --steps steps twice -- with the weights and
                optimizer state kept on the GPU between steps (the default)
                and with DISTOPT_CUDA_RESIDENT=0 (uploaded and downloaded every
                step, as before 2026-11-26), both again with cuDNN's heuristic
                algorithm choice (DISTOPT_CUDNN_ALGO=heuristic: the same in
                both processes, so their losses must be equal), and that once
                more replayed as a CUDA graph (DISTOPT_CUDA_GRAPH=1, the same
                losses again) -- and the same
                model in PyTorch
                eager with torch.optim.AdamW on the same GPU, batches copied
                from host memory every step as distopt's are, and prints a
                table of median step times (the first 3 steps left out);
                with --profile, also each bundle's device time by kernel
                (DISTOPT_CUDA_PROFILE=1).

fp32 throughout (TF32 off on both sides). Run KIT at the absolute path it
was prepared at (bundles name their weight files by absolute path).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import gpu_inference  # noqa: E402
from gpu_inference import write_random_weights  # noqa: E402

# Model -> (classes of its output's last axis, label shape from the input's).
MODELS = {"mlp": 1024, "cnn": 1000, "gpt": 8192}
WARMUP = 3
BATCHES = 4


def export(kit: Path) -> int:
    import torch
    import gpu_models
    kit.mkdir(parents=True, exist_ok=True)
    meta = {}
    for name in MODELS:
        model, example, desc = gpu_models.build(name)
        model.train()
        in_name = "ids" if name == "gpt" else "x"
        torch.onnx.export(model, (example,), str(kit / f"{name}.onnx"),
                          input_names=[in_name], output_names=["y"], opset_version=17,
                          do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
        meta[name] = {"desc": desc, "input": in_name, "shape": list(example.shape),
                      "dtype": "int64" if name == "gpt" else "float32"}
        print(f"exported {name}: {desc}")
    (kit / "meta.json").write_text(json.dumps(meta, indent=1))
    return 0


def prepare(kit: Path, distopt: Path) -> int:
    return gpu_inference.prepare(
        kit, distopt, lambda name: ["--loss", "cross-entropy:y", "--optimizer", "adamw"],
        fp16=())


def batches(m: dict, classes: int):
    """BATCHES batches of inputs and labels (labels shaped as the output
    without its class axis)."""
    import numpy as np
    rng = np.random.default_rng(0)
    shape = [BATCHES * m["shape"][0]] + m["shape"][1:]
    if m["dtype"] == "int64":
        x = rng.integers(0, classes, shape).astype(np.int64)
        labels = rng.integers(0, classes, shape).astype(np.int64)
    else:
        x = rng.standard_normal(shape).astype(np.float32)
        labels = rng.integers(0, classes, shape[:1]).astype(np.int64)
    return x, labels


def median_step(log: Path) -> float:
    steps = [json.loads(line) for line in log.read_text().splitlines()]
    steps = [s for s in steps if "step_s" in s][WARMUP:]
    return statistics.median(s["step_s"] for s in steps) * 1e3 if steps else float("nan")


def run(kit: Path, steps: int, profile: bool = False) -> int:
    import numpy as np
    import torch
    import gpu_models
    meta = json.loads((kit / "meta.json").read_text())
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = f"{ROOT / '.gpu' / 'lib'}:" + env.get("LD_LIBRARY_PATH", "")
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows = []
    for name, m in meta.items():
        classes = MODELS[name]
        write_random_weights(kit / f"{name}.onnx")
        x, labels = batches(m, classes)
        np.save(kit / f"{name}.x.npy", x)
        np.save(kit / f"{name}.labels.npy", labels)
        row = {"model": name, "desc": m["desc"], "compile_s": m.get("compile_s")}
        exe = kit / f"{name}.dx" / name
        # cuDNN picks convolution algorithms by timing them, and timings
        # differ between processes: the runs compared for equality take its
        # heuristic ranking (the same algorithms in both).
        heuristic = {"DISTOPT_CUDNN_ALGO": "heuristic"}
        runs = [("resident", {}), ("copied", {"DISTOPT_CUDA_RESIDENT": "0"}),
                ("heuristic", heuristic),
                ("heuristic_copied", dict(heuristic, DISTOPT_CUDA_RESIDENT="0")),
                ("graph", dict(heuristic, DISTOPT_CUDA_GRAPH="1")),
                ("graph_timed", {"DISTOPT_CUDA_GRAPH": "1"})]
        if profile:
            runs.append(("profile", {"DISTOPT_CUDA_PROFILE": "1"}))
        for tag, extra in runs:
            log = kit / f"{name}.{tag}.jsonl"
            r = subprocess.run([str(exe), "train", "--data", f"{m['input']}={kit / f'{name}.x.npy'}",
                                "--data", f"labels={kit / f'{name}.labels.npy'}",
                                "--steps", str(steps), "--no-shuffle", "--lr", "1e-4",
                                "--log", str(log)],
                               capture_output=True, text=True, env=dict(env, **extra),
                               timeout=600)
            if r.returncode:
                row[f"distopt_{tag}_error"] = (r.stderr + r.stdout)[-600:]
                print(f"{name} ({tag}): distopt failed: {row[f'distopt_{tag}_error']}")
                row[f"distopt_{tag}_ms"] = float("nan")
            elif tag == "profile":
                # Where the device time goes (the runtime's table, on stderr).
                at = r.stderr.find("distopt CUDA profile")
                text = r.stderr[at:] if at >= 0 else "(no profile printed)\n" + r.stderr[-600:]
                (kit / f"{name}.profile.txt").write_text(text)
                print(f"{name}: {text}")
                continue
            else:
                row[f"distopt_{tag}_ms"] = median_step(log)
                row[f"distopt_{tag}_losses"] = [
                    json.loads(line)["loss"] for line in log.read_text().splitlines()]
        model, _, _ = gpu_models.build(name)
        model = model.to(dev).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        xs = torch.from_numpy(x).split(m["shape"][0])
        ys = torch.from_numpy(labels).split(m["shape"][0])

        def step(i):
            xb, yb = xs[i % BATCHES].to(dev), ys[i % BATCHES].to(dev)
            opt.zero_grad(set_to_none=True)
            out = model(xb)
            loss = torch.nn.functional.cross_entropy(out.reshape(-1, classes), yb.reshape(-1))
            loss.backward()
            opt.step()
            return loss

        ts = []
        for i in range(steps):
            t0 = time.perf_counter()
            step(i)
            torch.cuda.synchronize()
            ts.append((time.perf_counter() - t0) * 1e3)
        row["torch_eager_ms"] = statistics.median(ts[WARMUP:])
        # The state kept on the GPU must not change the run: the same losses
        # as copying it every step (compared where both processes run the
        # same convolution algorithms).
        a, b = row.get("distopt_heuristic_losses"), row.get("distopt_heuristic_copied_losses")
        same = lambda a, b: bool(a and b and len(a) == len(b) and all(  # noqa: E731
            abs(x - y) <= 1e-6 * max(1.0, abs(y)) for x, y in zip(a, b)))
        row["resident_equals_copied"] = same(a, b)
        # Replaying the step as a CUDA graph must not change it either.
        row["graph_equals_resident"] = same(a, row.get("distopt_graph_losses"))
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{torch.cuda.get_device_name(0)}, torch {torch.__version__}, fp32 (TF32 off), "
          f"AdamW, median step of {steps - WARMUP} (after {WARMUP})\n")
    print("| model | size | distopt ms (state on the GPU) | distopt ms (that, as a CUDA "
          "graph) | distopt ms (cuDNN's heuristic algorithms) | distopt ms (those, as a CUDA "
          "graph) | distopt ms (state copied every step) | PyTorch eager ms | ratio "
          "(resident / eager) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['model']} | {r['desc']} | {r['distopt_resident_ms']:.2f} | "
              f"{r['distopt_graph_timed_ms']:.2f} | "
              f"{r['distopt_heuristic_ms']:.2f} | {r['distopt_graph_ms']:.2f} | "
              f"{r['distopt_copied_ms']:.2f} | {r['torch_eager_ms']:.2f} | "
              f"{r['distopt_resident_ms'] / r['torch_eager_ms']:.2f} |")
    (kit / "results.json").write_text(json.dumps(rows, indent=1))
    failed = [r["model"] for r in rows if not r["resident_equals_copied"]
              or not r["graph_equals_resident"] or any(k.endswith("_error") for k in r)]
    if failed:
        print(f"\nfailed (a run failed, or state on the GPU or a CUDA graph changed the "
              f"losses): "
              f"{', '.join(failed)}")
    return 1 if failed else 0


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=int, default=13)
    p.add_argument("--profile", action="store_true",
                   help="also run each bundle with DISTOPT_CUDA_PROFILE=1 and "
                        "print where its device time goes")


def main() -> int:
    return gpu_inference.kit_main(__doc__.splitlines()[0], _add_run_args, export,
                                  prepare, lambda kit, a: run(kit, a.steps, a.profile))

if __name__ == "__main__":
    sys.exit(main())
