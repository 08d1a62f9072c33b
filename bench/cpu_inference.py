#!/usr/bin/env python3
"""Benchmark: CPU inference latency, distopt vs ONNX Runtime, same run.

For each model kind (MLP, CNN, Transformer encoder, GPT-style decoder, a
token embedding alone, torchvision's R3D-18 video model (3-D convolutions),
a DCGAN generator of transposed convolutions) at a
realistic size and batch, compiles the ONNX model with `distopt compile`, runs
the executable with `--repeat N` (the executable times its own runs, excluding
input/output file I/O), and runs ONNX Runtime's CPU provider on the same
inputs with the same thread count, timing `session.run` N times. Prints the
median latency of each and the ratio distopt/ORT (below 1 means distopt is
faster), after checking that both compute the same outputs.

Usage: bench/cpu_inference.py [--repeat N] [--threads T] [--build build] [--only M...] [--batch-one]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python" / "testmodels"))
import gen_models  # noqa: E402
import zoo  # noqa: E402


def zoo_model(name: str, free: dict) -> onnx.ModelProto:
    """A zoo graph (torch.onnx.export of third-party code) with its seeded
    weights, loaded whole; the first input's dimensions in `free` (index ->
    name) made symbolic, so that the bench can run it at a realistic size
    (the zoo exports small test shapes)."""
    with tempfile.TemporaryDirectory() as d:
        model = onnx.load(str(zoo.materialize(name, d)))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for i, param in free.items():
        dims[i].Clear()
        dims[i].dim_param = param
    return model


def build_embedding(vocab: int = 50000, d: int = 64) -> onnx.ModelProto:
    """A token embedding alone (one Gather of [batch, 512] ids from a
    [vocab, d] table): where a run-time index check costs the most, as the
    gather only moves memory."""
    from onnx import TensorProto, helper, numpy_helper
    table = np.random.default_rng(1).standard_normal((vocab, d)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["wte", "input_ids"], ["h"], name="embed")], "embedding",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", 512])],
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, ["batch", 512, d])],
        initializer=[numpy_helper.from_array(table, "wte")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


# name -> (builder, dims for distopt, ORT/NumPy input shapes, description)
MODELS = {
    "mlp": (lambda: gen_models.build_mlp((784, 1024, 1024, 10)), {"batch": 64},
            {"x": (64, 784)}, "784-1024-1024-10, batch 64"),
    "cnn": (gen_models.build_cnn, {"N": 32}, {"x": (32, 3, 32, 32)},
            "3 conv + BN + pools on 3x32x32, batch 32"),
    "transformer_encoder": (lambda: gen_models.build_transformer_encoder(256, 8, 1024, 4),
                            {"batch": 8, "seq": 128}, {"x": (8, 128, 256)},
                            "4 layers, d 256, 8 heads, seq 128, batch 8"),
    "gpt": (lambda: gen_models.build_gpt(5000, 256, 8, 4, 128), {"batch": 4},
            {"input_ids": (4, 128)}, "4 layers, d 256, vocab 5000, seq 128, batch 4"),
    "embedding": (build_embedding, {"batch": 64}, {"input_ids": (64, 512)},
                  "Gather of 64x512 ids from a 50000x64 table"),
    "r3d_18": (lambda: zoo_model("r3d_18", {2: "frames", 3: "height", 4: "width"}),
               {"batch": 1, "frames": 8, "height": 112, "width": 112}, {"x": (1, 3, 8, 112, 112)},
               "torchvision R3D-18 video, 8 frames of 112x112, batch 1"),
    "dcgan": (gen_models.build_dcgan, {"N": 16}, {"z": (16, 100, 1, 1)},
              "DCGAN generator: 5 ConvTranspose + BN, 100 -> 3x64x64, batch 16"),
}


def median_from_stderr(text: str) -> float:
    m = re.search(r"median ([0-9.]+) (us|ms|s)", text)
    if not m:
        raise SystemExit(f"no timing in executable output:\n{text}")
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)]
    return float(m.group(1)) * scale


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--only", nargs="*", help="subset of models")
    ap.add_argument("--batch-one", action="store_true",
                    help="run every model at batch 1 (latency) instead of its realistic batch")
    args = ap.parse_args()
    distopt = Path(args.build) / "bin" / "distopt"
    env = dict(os.environ, DISTOPT_NUM_THREADS=str(args.threads))
    rows = []
    kernels = set()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, (build, dims, shapes, desc) in MODELS.items():
            if args.only and name not in args.only:
                continue
            if args.batch_one:
                # The batch is the first dimension of every input.
                dims = {k: (1 if k in ("batch", "N") else v) for k, v in dims.items()}
                shapes = {k: (1, *shape[1:]) for k, shape in shapes.items()}
                desc = re.sub(r"batch \d+", "batch 1", desc)
                if "batch" not in desc:
                    desc += ", batch 1"
            model = tmp / f"{name}.onnx"
            onnx.save(build(), str(model))
            cmd = [str(distopt), "compile", str(model), "-o", str(tmp / f"{name}.dx")]
            for k, v in dims.items():
                cmd += ["--dim", f"{k}={v}"]
            t0 = time.perf_counter()
            subprocess.run(cmd, check=True)
            compile_s = time.perf_counter() - t0
            rng = np.random.default_rng(0)
            feeds, cli = {}, []
            for k, shape in shapes.items():
                feeds[k] = (rng.integers(0, 5000, shape, dtype=np.int64) if k == "input_ids"
                            else rng.standard_normal(shape).astype(np.float32))
                np.save(tmp / f"{k}.npy", feeds[k])
                cli += ["--input", f"{k}={tmp / (k + '.npy')}"]
            out = tmp / f"{name}.out"
            run = subprocess.run([str(tmp / f"{name}.dx" / name), *cli, "--repeat", str(args.repeat),
                                  "--output-dir", str(out)], env=env, capture_output=True, text=True)
            if run.returncode:
                raise SystemExit(run.stderr)
            ours = median_from_stderr(run.stderr)
            m = re.search(r"OpenBLAS kernels (\S+)\)", run.stderr)
            kernels.add(m.group(1) if m else "unknown")

            so = ort.SessionOptions()
            so.intra_op_num_threads = args.threads
            so.inter_op_num_threads = 1
            sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
            ref = sess.run(None, feeds)  # warm-up, and the reference
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                sess.run(None, feeds)
                times.append(time.perf_counter() - t0)
            theirs = statistics.median(times)
            got = np.load(out / f"{sess.get_outputs()[0].name}.npy")
            err = np.abs(got - ref[0]).max() / max(np.abs(ref[0]).max(), 1e-30)
            rows.append((name, desc, ours, theirs, err, compile_s))

    print(f"CPU inference, median of {args.repeat} runs, {args.threads} threads "
          f"(distopt: OpenMP loops + OpenBLAS GEMM blocks in one pool; ORT {ort.__version__})")
    # OpenBLAS takes its kernels from $OPENBLAS_CORETYPE when it is set (some
    # machine images set it to an older CPU than theirs); ORT's MLAS ignores it.
    forced = os.environ.get("OPENBLAS_CORETYPE")
    print(f"OpenBLAS kernels: {', '.join(sorted(kernels)) or '-'}"
          + (f" ($OPENBLAS_CORETYPE={forced})" if forced else " (chosen by OpenBLAS for this CPU)") + "\n")
    print(f"| {'model':<20} | {'size':<44} | {'distopt ms':>10} | {'ORT ms':>8} | {'ratio':>6} | {'max rel err':>11} | {'compile s':>9} |")
    print(f"|{'-'*22}|{'-'*46}|{'-'*12}|{'-'*10}|{'-'*8}|{'-'*13}|{'-'*11}|")
    for name, desc, ours, theirs, err, cs in rows:
        print(f"| {name:<20} | {desc:<44} | {ours*1e3:10.3f} | {theirs*1e3:8.3f} | {ours/theirs:6.2f} | {err:11.2e} | {cs:9.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
