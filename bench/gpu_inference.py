#!/usr/bin/env python3
"""Benchmark: GPU inference latency, distopt (--target cuda) vs PyTorch eager.

The four model kinds and a DCGAN generator (transposed convolutions) at
realistic sizes (bench/gpu_models.py), in two steps, as
the compiler cannot travel to a GPU machine:

  export KIT    (/usr/bin/python3 with Debian's torch) exports each model
                with torch.onnx.export, weights as external data;
  prepare KIT   (the project's venv) compiles each with
                `distopt compile --target cuda`, and the MLP, the encoder
                and the GPT converted to fp16 too (float16.py: what
                `model.half()` exports), then drops the weight files
                (the GPU machine writes random weights of the same layout:
                latency does not depend on their values);
  run KIT       (on the GPU machine, its python3 with torch) writes the
                weights, runs each bundle with --repeat (median, end to end:
                inputs uploaded and outputs downloaded every run), as is and
                with DISTOPT_CUDA_GRAPH=1 (replayed as a CUDA graph), and the
                same architecture in PyTorch eager on the same GPU, timed the
                same way (host tensors in, host tensors out) and on device
                tensors (the fp16 rows: `model.half()`), and with --torch-compile also `torch.compile`d
                (default mode, on device tensors; its compile time is
                reported, not timed), and prints a table.

Run KIT at the absolute path it was prepared at (bundles name their weight
files by absolute path).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

DIMS = {"mlp": ["--dim", "batch=128"], "cnn": ["--dim", "batch=8"],
        "transformer_encoder": ["--dim", "batch=8"], "gpt": ["--dim", "batch=8"],
        "dcgan": ["--dim", "batch=64"]}
# Also timed in fp16 (16-bit GEMMs on tensor cores): "<name>_f16".
FP16 = ("mlp", "transformer_encoder", "gpt")


def export(kit: Path) -> int:
    import torch
    import gpu_models
    kit.mkdir(parents=True, exist_ok=True)
    meta = {}
    for name in gpu_models.NAMES:
        model, example, desc = gpu_models.build(name)
        model.eval()
        in_name = "ids" if name == "gpt" else "x"
        path = kit / f"{name}.onnx"
        # Not under no_grad: PyTorch's fused inference fast path
        # (_transformer_encoder_layer_fwd) has no ONNX export.
        torch.onnx.export(model, (example,), str(path), input_names=[in_name],
                          output_names=["y"], opset_version=17,
                          dynamic_axes={in_name: {0: "batch"}, "y": {0: "batch"}})
        meta[name] = {"desc": desc, "input": in_name, "shape": list(example.shape),
                      "dtype": "int64" if name == "gpt" else "float32"}
        print(f"exported {name}: {desc}")
    (kit / "meta.json").write_text(json.dumps(meta, indent=1))
    return 0


def prepare(kit: Path, distopt: Path, flags=lambda name: DIMS[name], fp16=FP16) -> int:
    """Compiles each exported model of KIT for CUDA (`distopt compile
    --target cuda` with flags(name)), and those named in `fp16` converted to
    fp16 too, its weights moved to an external file first and dropped after
    (bench/gpu_training.py's prepare too, without fp16 models)."""
    import onnx
    sys.path.insert(0, str(ROOT / "python" / "testmodels"))
    import float16
    meta = json.loads((kit / "meta.json").read_text())
    for name in list(meta):
        if name in fp16:
            half = f"{name}_f16"
            onnx.save(float16.to_float16(onnx.load(str(kit / f"{name}.onnx"))),
                      str(kit / f"{half}.onnx"))
            meta[half] = dict(meta[name], half=True,
                              dtype="int64" if meta[name]["dtype"] == "int64" else "float16")
    for name in meta:
        path = kit / f"{name}.onnx"
        model = onnx.load(str(path))
        onnx.save_model(model, str(path), save_as_external_data=True,
                        all_tensors_to_one_file=True, location=f"{name}.onnx.data",
                        size_threshold=1024)
        t0 = time.time()
        r = subprocess.run([str(distopt), "compile", str(path),
                            *flags(name.removesuffix("_f16")), "--target",
                            "cuda", "-o", str(kit / f"{name}.dx")],
                           capture_output=True, text=True)
        if r.returncode:
            print(f"{name}: compile failed:\n{r.stderr}")
            return 1
        meta[name]["compile_s"] = round(time.time() - t0, 1)
        print(f"{name}: compiled in {meta[name]['compile_s']} s")
        (kit / f"{name}.onnx.data").unlink()
    (kit / "meta.json").write_text(json.dumps(meta, indent=1))
    return 0


def write_random_weights(path: Path):
    """Random values at every external initializer's place, of its type
    (float32 or float16)."""
    import numpy as np
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data
    model = onnx.load(str(path), load_external_data=False)
    rng = np.random.default_rng(0)
    end = 0
    spans = []
    for init in model.graph.initializer:
        if uses_external_data(init):
            info = ExternalDataInfo(init)
            dtype = np.float16 if init.data_type == onnx.TensorProto.FLOAT16 else np.float32
            spans.append((info.offset or 0, info.length, dtype))
            end = max(end, (info.offset or 0) + info.length)
    data = np.zeros(end, dtype=np.uint8)
    for off, length, dtype in spans:
        size = np.dtype(dtype).itemsize
        vals = (rng.standard_normal(length // size) * 0.02).astype(dtype)
        data[off:off + length] = vals.view(np.uint8)
    data.tofile(str(path) + ".data")


def median_us(text: str) -> float:
    m = re.search(r"median ([0-9.]+) (us|ms|s)", text)
    if not m:
        return float("nan")
    scale = {"us": 1, "ms": 1e3, "s": 1e6}[m.group(2)]
    return float(m.group(1)) * scale


def run(kit: Path, repeat: int, torch_compile: bool = False) -> int:
    import numpy as np
    import torch
    import gpu_models
    meta = json.loads((kit / "meta.json").read_text())
    env = dict(os.environ)
    lib = ROOT / ".gpu" / "lib"
    env["LD_LIBRARY_PATH"] = f"{lib}:" + env.get("LD_LIBRARY_PATH", "")
    dev = torch.device("cuda")
    rows = []
    for name, m in meta.items():
        write_random_weights(kit / f"{name}.onnx")
        rng = np.random.default_rng(0)
        if m["dtype"] == "int64":
            x = rng.integers(0, 8192, m["shape"]).astype(np.int64)
        else:
            x = rng.standard_normal(m["shape"]).astype(m["dtype"])
        xin = kit / f"{name}.in.npy"
        np.save(xin, x)
        exe = kit / f"{name}.dx" / name
        timings = {}
        # As is, and replayed as a CUDA graph (DISTOPT_CUDA_GRAPH=1: the
        # second run is captured, later ones replay it).
        for tag, extra in (("distopt_us", {}), ("distopt_graph_us", {"DISTOPT_CUDA_GRAPH": "1"})):
            r = subprocess.run([str(exe), "--input", f"{m['input']}={xin}", "--repeat",
                                str(repeat)], capture_output=True, text=True,
                               env=dict(env, **extra), timeout=300)
            timings[tag] = median_us(r.stderr + r.stdout) if r.returncode == 0 else float("nan")
            if r.returncode:
                print(f"{name} ({tag}): distopt failed: {(r.stderr + r.stdout)[-600:]}")
        ours = timings["distopt_us"]
        model, _, _ = gpu_models.build(name.removesuffix("_f16"))
        model = model.to(dev).eval()
        if m.get("half"):
            model = model.half()
        xt = torch.from_numpy(x)

        def timed(fn):
            with torch.no_grad():
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                ts = []
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    fn()
                    torch.cuda.synchronize()
                    ts.append((time.perf_counter() - t0) * 1e6)
            return statistics.median(ts)

        eager_host = timed(lambda: model(xt.to(dev)).cpu())
        xd = xt.to(dev)
        eager_dev = timed(lambda: model(xd))
        row = {"model": name, "desc": m["desc"] + (" (fp16)" if m.get("half") else ""),
               "distopt_us": ours,
               "distopt_graph_us": timings["distopt_graph_us"],
               "torch_eager_host_us": eager_host, "torch_eager_device_us": eager_dev,
               "compile_s": m.get("compile_s")}
        if torch_compile:
            try:
                t0 = time.perf_counter()
                compiled = torch.compile(model)
                with torch.no_grad():
                    compiled(xd)
                torch.cuda.synchronize()
                row["torch_compile_s"] = round(time.perf_counter() - t0, 1)
                row["torch_compile_host_us"] = timed(lambda: compiled(xt.to(dev)).cpu())
                row["torch_compile_device_us"] = timed(lambda: compiled(xd))
            except Exception as e:  # noqa: BLE001 - reported in the table
                row["torch_compile_error"] = f"{type(e).__name__}: {e}"[:300]
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"median of {repeat} runs, fp32 (fp16 where marked)\n")
    ms = lambda r, k: f"{r[k] / 1e3:.3f}" if k in r else "-"  # noqa: E731
    print("| model | size | distopt ms | distopt ms (CUDA graph) | PyTorch eager ms "
          "(host in/out) | ratio | PyTorch eager ms (device tensors) | torch.compile ms "
          "(host in/out) | torch.compile ms (device tensors) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        ratio = r["distopt_us"] / r["torch_eager_host_us"]
        print(f"| {r['model']} | {r['desc']} | {r['distopt_us'] / 1e3:.3f} | "
              f"{r['distopt_graph_us'] / 1e3:.3f} | "
              f"{r['torch_eager_host_us'] / 1e3:.3f} | {ratio:.2f} | "
              f"{r['torch_eager_device_us'] / 1e3:.3f} | {ms(r, 'torch_compile_host_us')} | "
              f"{ms(r, 'torch_compile_device_us')} |")
        if "torch_compile_error" in r:
            print(f"  torch.compile failed on {r['model']}: {r['torch_compile_error']}")
    (kit / "results.json").write_text(json.dumps(rows, indent=1))
    return 0


def kit_main(description: str, add_run_args, export, prepare, run) -> int:
    """A kit's command line: export, prepare or run a kit directory.
    `add_run_args(parser)` adds the run command's own options, which
    `run(kit, args)` reads."""
    ap = argparse.ArgumentParser(description=description)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for c in ("export", "prepare", "run"):
        p = sub.add_parser(c)
        p.add_argument("kit", type=Path)
        if c == "prepare":
            p.add_argument("--distopt", type=Path, default=ROOT / "build/bin/distopt")
        if c == "run":
            add_run_args(p)
    a = ap.parse_args()
    kit = a.kit.resolve()
    if a.cmd == "export":
        return export(kit)
    if a.cmd == "prepare":
        return prepare(kit, a.distopt)
    return run(kit, a)


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--torch-compile", action="store_true",
                   help="also time torch.compile (default mode)")


def main() -> int:
    return kit_main(__doc__.splitlines()[0], _add_run_args, export, prepare,
                    lambda kit, a: run(kit, a.repeat, a.torch_compile))

if __name__ == "__main__":
    sys.exit(main())
