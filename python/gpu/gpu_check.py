#!/usr/bin/env python3
"""CUDA bundles checked on a GPU machine, in two steps.

The compiler cannot travel to a GPU machine (libMLIR alone is larger than
what a device run may carry), so:

  prepare KIT   (here, where distopt is built) compiles the bundled example
                models and the model zoo with `--target cuda`, and writes
                their inputs and a plan of what to run into KIT;
  run KIT       (on the GPU machine; needs numpy, onnx and onnxruntime)
                rebuilds the zoo's weights from their statistics (same seed,
                same bytes), computes ONNX Runtime (CPU) references, runs
                every bundle on the GPU (one process; and the multi-rank
                bundles under mpirun, the ranks sharing the GPU through the
                staged collectives), compares, times the bundles against
                their CPU twins, and prints a table (also KIT/results.json).

Bundles name their external weights by absolute path: run KIT at the same
absolute path it was prepared at (scripts/gpu-check links it there).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python" / "testmodels"))
import zoo  # noqa: E402

# The bundled examples (gen_models.py): model -> --dim args (inputs follow
# the manifest: random normal floats, token ids below 100).
EXAMPLES = {
    "mlp": ["--dim", "batch=8"],
    "cnn": ["--dim", "N=4"],
    "transformer_encoder": ["--dim", "batch=4", "--dim", "seq=16"],
    "gpt": ["--dim", "batch=4"],
}
# Multi-rank plans (staged collectives, ranks sharing the GPU).
DISTRIBUTED = {
    "gpt_tp2": ("gpt", ["--dim", "batch=4", "--cluster", "local:2", "--tp", "2"], 2),
    "gpt_dp2": ("gpt", ["--dim", "batch=4", "--cluster", "local:2", "--dp", "2"], 2),
    "gpt_pp2": ("gpt", ["--dim", "batch=4", "--cluster", "local:2", "--pp", "2"], 2),
    "mlp_dp2tp2": ("mlp", ["--dim", "batch=8", "--cluster", "local:4", "--dp", "2",
                           "--tp", "2"], 4),
}
ZOO_BATCH = 2


def manifest_inputs(bundle: Path, seed=0):
    """Random inputs of the bundle's (global) input shapes."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    rng = np.random.default_rng(seed)
    out = {}
    for spec in manifest["inputs"]:
        shape = spec.get("global_shape", spec["shape"])
        if spec["dtype"].startswith("int"):
            out[spec["name"]] = rng.integers(0, 100, shape).astype(spec["dtype"])
        else:
            out[spec["name"]] = rng.standard_normal(shape).astype(spec["dtype"])
    return out


def run(cmd, timeout=None, **kw):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        return subprocess.CompletedProcess(cmd, 124, out, err + f"\n(timed out after {timeout} s)")


def prepare(kit: Path, distopt: Path) -> int:
    kit.mkdir(parents=True, exist_ok=True)
    models = kit / "models"
    models.mkdir(exist_ok=True)
    py = sys.executable
    r = run([py, str(ROOT / "python/testmodels/gen_models.py"), "--out", str(models),
             "--only", *EXAMPLES])
    if r.returncode:
        print(r.stderr)
        return 1
    plan = []
    failures = 0

    def compile_one(key, onnx_path, args, inputs, ranks=1, kind="example"):
        nonlocal failures
        for target in ("cuda", "cpu"):
            bundle = kit / f"{key}.{target}.dx"
            cmd = [str(distopt), "compile", str(onnx_path), *args, "-o", str(bundle)]
            if target == "cuda":
                cmd += ["--target", "cuda"]
            t0 = time.time()
            r = run(cmd)
            if r.returncode:
                failures += 1
                print(f"{key} ({target}): compile failed:\n{r.stderr}")
                return
            print(f"{key} ({target}): compiled in {time.time() - t0:.1f} s")
        if inputs is None:
            inputs = manifest_inputs(kit / f"{key}.cpu.dx")
        feeds = {}
        for name, value in inputs.items():
            path = kit / f"{key}.in.{name}.npy"
            np.save(path, value)
            feeds[name] = path.name
        plan.append({"key": key, "model": str(onnx_path), "kind": kind,
                     "ranks": ranks, "inputs": feeds})

    for name, args in EXAMPLES.items():
        compile_one(name, models / f"{name}.onnx", args, None)
    for key, (name, args, ranks) in DISTRIBUTED.items():
        compile_one(key, models / f"{name}.onnx", args, None, ranks=ranks,
                    kind="distributed")
    for name in zoo.names():
        path = zoo.materialize(name, models)
        compile_one(name, path, zoo.dim_args(name, ZOO_BATCH),
                    zoo.inputs(name, ZOO_BATCH), kind="zoo")
    (kit / "plan.json").write_text(json.dumps(plan, indent=1))
    # The GPU machine lacks LLVM's OpenMP runtime, which bundles link.
    lib = kit / "lib"
    lib.mkdir(exist_ok=True)
    for so in ("/usr/lib/llvm-22/lib/libomp.so.5",):
        if os.path.exists(so):
            data = Path(so).read_bytes()
            (lib / Path(so).name).write_bytes(data)
    return 1 if failures else 0


def bundle_exe(bundle: Path) -> Path:
    return bundle / bundle.name[: -len(".dx")]


def bundle_command(bundle: Path, feeds, ranks, *extra):
    """The bundle's executable with its inputs, under mpirun for ranks > 1."""
    cmd = [str(bundle_exe(bundle))] + [a for k, v in feeds.items()
                                         for a in ("--input", f"{k}={v}")]
    cmd += [str(e) for e in extra]
    return mpirun(ranks) + cmd if ranks > 1 else cmd


def time_bundle(bundle: Path, feeds, ranks, env, repeat=50):
    r = run(bundle_command(bundle, feeds, ranks, "--repeat", repeat), env=env, timeout=120)
    text = r.stderr + r.stdout
    for line in text.splitlines():
        if "median" in line:
            return line.strip()
    return "?"


def mpirun(n):
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n)]


def run_kit(kit: Path) -> int:
    import onnxruntime as ort
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = f"{kit / 'lib'}:" + env.get("LD_LIBRARY_PATH", "")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("DISTOPT_COMM_TIMEOUT", "30")
    models = kit / "models"
    for name in zoo.names():
        zoo.materialize(name, models)
    plan = json.loads((kit / "plan.json").read_text())
    only = os.environ.get("GPU_CHECK_ONLY")
    if only:
        plan = [p for p in plan if p["key"] in only.split(",")]
    results = []
    failed = 0
    for item in plan:
        key, ranks = item["key"], item["ranks"]
        feeds = {k: str(kit / v) for k, v in item["inputs"].items()}
        arrays = {k: np.load(v) for k, v in feeds.items()}
        try:
            sess = ort.InferenceSession(item["model"],
                                        providers=["CPUExecutionProvider"])
            names = [o.name for o in sess.get_outputs()]
            refs = dict(zip(names, sess.run(None, arrays)))
        except Exception as e:  # noqa: BLE001 - reported in the table
            print(json.dumps({"model": key, "ok": False, "error": f"ONNX Runtime: {e}"}))
            failed += 1
            continue
        out_dir = kit / f"out.{key}"
        bundle = kit / f"{key}.cuda.dx"
        r = run(bundle_command(bundle, feeds, ranks, "--output-dir", out_dir), env=env,
                timeout=120)
        row = {"model": key, "ranks": ranks, "ok": False}
        if r.returncode:
            row["error"] = (r.stderr + r.stdout)[-1500:]
        else:
            worst = 0.0
            manifest = json.loads((bundle / "manifest.json").read_text())
            for out in manifest["outputs"]:
                got = np.load(out_dir / f"{out['name']}.npy") if (
                    out_dir / f"{out['name']}.npy").exists() else None
                ref = refs.get(out["name"])
                if got is None or ref is None:
                    continue
                if got.shape != ref.shape:
                    row["error"] = f"{out['name']}: shape {got.shape} vs {ref.shape}"
                    worst = float("inf")
                    break
                scale = max(1.0, float(np.abs(ref).max()))
                worst = max(worst, float(np.abs(got.astype(np.float64) - ref).max()) / scale)
            row["max_rel_err"] = worst
            row["ok"] = worst <= 1e-3
        row["gpu_time"] = time_bundle(bundle, feeds, ranks, env)
        row["cpu_time"] = time_bundle(kit / f"{key}.cpu.dx", feeds, ranks, env)
        failed += not row["ok"]
        results.append(row)
        print(json.dumps(row), flush=True)
    (kit / "results.json").write_text(json.dumps(results, indent=1))
    print(f"\n{len(results) - failed} of {len(results)} CUDA bundles match ONNX Runtime")
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("kit", type=Path)
    p.add_argument("--distopt", type=Path, default=ROOT / "build/bin/distopt")
    r = sub.add_parser("run")
    r.add_argument("kit", type=Path)
    args = ap.parse_args()
    if args.cmd == "prepare":
        return prepare(args.kit.resolve(), args.distopt)
    return run_kit(args.kit.resolve())


if __name__ == "__main__":
    sys.exit(main())
