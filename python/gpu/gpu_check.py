#!/usr/bin/env python3
"""CUDA bundles checked on a GPU machine, in two steps.

The compiler cannot travel to a GPU machine (libMLIR alone is larger than
what a device run may carry), so:

  prepare KIT   (here, where distopt is built) compiles the bundled example
                models and the model zoo with `--target cuda`, and writes
                their inputs, ONNX Runtime's outputs for the models whose
                weights travel, and a plan of what to run into KIT;
  run KIT       (on the GPU machine; needs numpy, onnx and onnxruntime)
                rebuilds the zoo's weights from their statistics (same seed,
                same bytes), computes the zoo's ONNX Runtime (CPU) references, runs
                every bundle on the GPU (one process; and the multi-rank
                bundles under mpirun, the ranks sharing the GPU through the
                staged collectives), compares, times the bundles against
                their CPU twins, and prints a table (also KIT/results.json).

With `prepare --torch-models DIR` (the output of
python/testmodels/gen_grad_models.py), KIT also holds training steps:
20 steps of torch.optim's reference runs compiled with `--target cuda`,
in one process and under plans whose ranks share the GPU, which `run`
compares with PyTorch's losses and final weights (1e-4, as the CPU tests
do); the gradients of GRADIENTS' exported models against PyTorch's autograd;
and one run asking for NCCL with two ranks on the one GPU, which must be
refused with the runtime's error.

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
import float16  # noqa: E402
import gemm_cases  # noqa: E402
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
# Training steps (gen_grad_models.py's reference runs): key -> (directory,
# run name, plan flags, ranks). The multi-rank ones mirror
# test_cuda_emulation.py's plans.
TRAINING = {
    "train_sgd_nesterov": ("train", "sgd_nesterov", [], 1),
    "train_adamw_cosine": ("train", "adamw_warmup_cosine", [], 1),
    "train_cnn_sgd": ("train_cnn", "cnn_sgd", [], 1),
    "train_bn_adamw": ("train_bn", "bn_adamw", [], 1),
    "train_encoder_adamw": ("train_encoder", "encoder_adamw", [], 1),
    "train_gpt_adamw": ("train_gpt", "gpt_adamw", [], 1),
    # Sequence-first: the batch is dimension 1 of x and of the labels.
    "train_encoder_sf_adamw": ("train_encoder_sf", "encoder_sf_adamw", [], 1),
    "train_gpt_adamw_tp2": ("train_gpt", "gpt_adamw", ["--tp", "2"], 2),
    "train_gpt_adamw_dp2_zero1": ("train_gpt", "gpt_adamw", ["--dp", "2", "--zero", "1"], 2),
    "train_encoder_adamw_dp2tp2": ("train_encoder", "encoder_adamw", ["--dp", "2", "--tp", "2"],
                                   4),
    "train_cnn_sgd_dp2": ("train_cnn", "cnn_sgd", ["--dp", "2"], 2),
    # Batch norm's statistics all-reduced over the replicas (forward and
    # backward: SyncBatchNorm), and the vocabulary-parallel cross-entropy.
    "train_bn_sgd_dp2": ("train_bn", "bn_sgd", ["--dp", "2"], 2),
    "train_gpt_vocab_tp2": ("train_gpt_vocab", "vocab_adamw", ["--tp", "2"], 2),
    "train_sgd_clipped_dp2": ("train", "sgd_clipped", ["--dp", "2"], 2),
    # Pipelines: the stages' activations and gradients go through the CUDA
    # runtime's staged sends and receives.
    "train_gpt_adamw_pp2": ("train_gpt", "gpt_adamw", ["--pp", "2", "--microbatches", "4"], 2),
    # Mixed precision (--precision, the fifth field): 16-bit forward and
    # backward, fp32 master weights; fp16 with dynamic loss scaling. Against
    # PyTorch's fp32 run to 16-bit precision (docs/precision.md).
    "train_gpt_adamw_bf16": ("train_gpt", "gpt_adamw", [], 1, "bf16"),
    "train_gpt_adamw_fp16": ("train_gpt", "gpt_adamw", [], 1, "fp16"),
    "train_cnn_sgd_bf16": ("train_cnn", "cnn_sgd", [], 1, "bf16"),
    "train_gpt_adamw_bf16_dp2tp2": ("train_gpt", "gpt_adamw", ["--dp", "2", "--tp", "2"], 4,
                                    "bf16"),
    "train_gpt_adamw_dp2pp2_zero1": ("train_gpt", "gpt_adamw",
                                     ["--dp", "2", "--pp", "2", "--microbatches", "2",
                                      "--zero", "1"], 4),
    # Parameter servers (2 servers, 2 workers: the all-reduce's run) and
    # one asynchronous worker (one process's run).
    "train_adamw_ps2": ("train", "adamw", ["--sync", "ps", "--servers", "2"], 4),
    "train_adamw_async1": ("train", "adamw", ["--sync", "async"], 2),
}
# Runs that also evaluate every 5 steps (the weights kept on the GPU are
# brought to the host for it): their evaluation losses must equal the CPU
# bundle's (run at prepare time), 1e-4.
EVALUATED = {"train_gpt_adamw": ["--eval-every", "5"],
             # (a pipelined step's evaluation: rank 0 gathers the stages)
             "train_gpt_adamw_pp2": ["--eval-every", "5"]}
# Runs cut in two: 14 steps checkpointing every 7 (nothing else brings the
# state kept on the GPU to the host before the checkpoint at 14), then
# --resume from it to step 20: steps 15-20 and the final weights must be
# torch.optim's, as for one run. (Runs with a constant learning rate: a
# schedule spans --steps, which the first part cuts short.)
RESUMED = {"train_sgd_nesterov", "train_gpt_adamw_dp2_zero1"}
# Gradients of models exported by torch with their loss appended by --loss
# (gen_grad_models.py's bare models), against PyTorch's autograd (1e-4):
# convolutions' forward, backward-filter and backward-data calls (cuDNN),
# transposed convolutions, a skip connection summed into a convolution's
# input (docs/cuda-codegen.md: the to_buffer hazard; torchvision's ResNet-18
# whole, in float64: cuDNN's and cuBLAS's double paths), 1-D and 3-D windows
# (3-D ones as 2-D convolutions per depth tap and strided slices), Resize
# (products with interpolation matrices), an
# embedding and its head; torch.gather, scatter_add and topk (the scatter's
# parallel form), a 2-layer bidirectional LSTM with a GRU, unrolled; and a
# flow warp (F.grid_sample bilinear and bicubic, torch.prod).
GRADIENTS = ["mobilenet_blocks", "upsampler_mse", "conv1d_cross_entropy",
             "conv3d_cross_entropy", "unet_mse", "lm_cross_entropy",
             "resnet18_cross_entropy", "gather_scatter_cross_entropy",
             "recurrent_cross_entropy", "grid_sample_cross_entropy"]
# A model whose weights exceed this many bytes does not travel with them
# (ResNet-18 in float64: 89 MB, and as much again of reference gradients,
# against the 64 MiB a device run carries): its float tensors go as
# statistics (zoo.externalize), are drawn again there (zoo.seeded_weights),
# and its CUDA bundle's loss and gradients are compared with its CPU twin's
# there (the CPU target matches PyTorch's float64 gradients of the same
# model to 1e-14: test_autodiff.py).
GRADIENT_WEIGHTS_CARRIED = 4 << 20
# Asks for NCCL with two ranks on one GPU: the runtime must refuse it.
NCCL_REFUSAL = "train_sgd_clipped_dp2"


# The bundles share one copy of the runtime (KIT/lib, on LD_LIBRARY_PATH
# there): a hundred static executables of ~2 MB would not fit what a GPU
# machine can be sent. The benchmarks (bench/gpu_*.py) keep static ones.
SHARED_RUNTIME = ["--runtime-link", "shared"]


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


def prepare_training(kit: Path, distopt: Path, torch_models: Path, plan: list) -> int:
    """Compiles the training steps of TRAINING for CUDA; their data, flags
    and PyTorch's losses and weights go into KIT and the plan."""
    sys.path.insert(0, str(ROOT / "python" / "tests"))
    from training import reference_model, step_flags, train_flags
    failures = 0
    for key, entry in TRAINING.items():
        sub, run_name, degrees, ranks = entry[:4]
        precision = entry[4] if len(entry) > 4 else None
        d = torch_models / sub
        meta = json.loads((d / "meta.json").read_text())[run_name]
        cfg = meta["config"]
        model_path = reference_model(d, meta, kit / f"{key}.onnx")
        xs, ys = np.load(d / "xs.npy"), np.load(d / "ys.npy")
        flags = step_flags(cfg)
        if precision:
            flags += ["--precision", precision]
        # A batch past dimension 0 (sequence-first) is symbolic in the export.
        bd = cfg.get("batch_dim", 0)
        if bd:
            flags += ["--dim", f"batch={xs.shape[1 + bd]}"]
        one_process = list(flags)
        if ranks > 1:
            flags += ["--cluster", f"local:{ranks}", *degrees]
        bundle = kit / f"{key}.cuda.dx"
        t0 = time.time()
        r = run([str(distopt), "compile", str(model_path), *flags, "--target", "cuda",
                 *SHARED_RUNTIME, "-o", str(bundle)])
        if r.returncode:
            failures += 1
            print(f"{key}: compile failed:\n{r.stderr}")
            continue
        print(f"{key}: compiled in {time.time() - t0:.1f} s")
        # Data files hold one sample after another (training.batches_as_data).
        xs, ys = np.moveaxis(xs, 1 + bd, 1), np.moveaxis(ys, 1 + bd, 1)
        np.save(kit / f"{key}.x.npy", xs.reshape((-1,) + xs.shape[2:]))
        np.save(kit / f"{key}.y.npy", ys.reshape((-1,) + ys.shape[2:]))
        refs = {}
        for kind in ("weights", "buffers"):
            for name, f in meta.get(kind, {}).items():
                dst = f"{key}.ref.{f}"
                (kit / dst).write_bytes((d / f).read_bytes())
                refs.setdefault(kind, {})[name] = dst
        item = {"key": key, "kind": "training", "ranks": ranks,
                "data": {"x": f"{key}.x.npy", "labels": f"{key}.y.npy"},
                "flags": ["--steps", str(len(meta["losses"])), "--no-shuffle",
                          *train_flags(cfg)],
                "losses": meta["losses"], **refs}
        if precision:
            # 16 bits: losses within 0.5% of fp32's, weights within 10%
            # (python/tests/test_precision.py says why).
            item["loss_tol"], item["weights_tol"] = 5e-3, 0.1
        if key in EVALUATED:
            # The same run with evaluation and checkpoints, on the CPU here in
            # one process (the plans' runs equal it, tested in CI): its
            # evaluation losses are the reference.
            item["eval_flags"] = EVALUATED[key]
            cpu = kit / f"{key}.cpu.dx"
            r = run([str(distopt), "compile", str(model_path), *one_process,
                     *SHARED_RUNTIME, "-o", str(cpu)])
            log = kit / f"{key}.cpu.eval.jsonl"
            args = [a for n, f in item["data"].items() for a in ("--data", f"{n}={kit / f}")]
            evals = [a for n, f in item["data"].items()
                     for a in ("--eval-data", f"{n}={kit / f}")]
            r2 = r.returncode or run([str(bundle_exe(cpu)), "train", *args, *evals,
                                      *item["flags"], *EVALUATED[key], "--log",
                                      str(log)]).returncode
            if r.returncode or r2:
                failures += 1
                print(f"{key}: the CPU reference run failed")
                continue
            item["eval_losses"] = [s["eval_loss"] for s in map(json.loads, log.read_text()
                                                               .splitlines()) if "eval_loss" in s]
        item["resume"] = key in RESUMED
        plan.append(item)
    return failures + prepare_gradients(kit, distopt, torch_models, plan)


def prepare_gradients(kit: Path, distopt: Path, torch_models: Path, plan: list,
                      names=GRADIENTS, carried=GRADIENT_WEIGHTS_CARRIED) -> int:
    """Compiles GRADIENTS' models as --gradients steps for CUDA; their
    inputs and PyTorch's gradients (or, past `carried` bytes of weights,
    their weights' statistics and a CPU twin) go into KIT and the plan."""
    import onnx
    failures = 0
    (kit / "models").mkdir(parents=True, exist_ok=True)
    for name in names:
        d = torch_models / name
        meta = json.loads((d / "meta.json").read_text())
        key = f"grad_{name}"
        model = onnx.load(str(d / "model.onnx"))
        item = {"key": key, "kind": "gradients", "ranks": 1, "inputs": {}, "grads": {},
                "loss": meta["loss"]}
        source = d / "model.onnx"
        targets = ["cuda"]
        if sum(len(i.raw_data) for i in model.graph.initializer) > carried:
            # Under models/, whose *.onnx.data scripts/gpu-check leaves out.
            source = kit / "models" / f"{key}.onnx"
            item["model"] = str(source)
            item["weights"] = zoo.externalize(model, source.name + ".data", 1024,
                                              (np.float32, np.float64))
            onnx.save(model, str(source))
            zoo.write_seeded_weights(source, item["weights"])
            targets.append("cpu")
        for target in targets:
            r = run([str(distopt), "compile", str(source), "--gradients", "--loss",
                     meta["loss_flag"], "--target", target, *SHARED_RUNTIME, "-o",
                     str(kit / f"{key}.{target}.dx")])
            if r.returncode:
                break
        if r.returncode:
            failures += 1
            print(f"{key}: compile failed:\n{r.stderr}")
            continue
        for k, f in meta["inputs"].items():
            item["inputs"][k] = f"{key}.in.{f}"
            (kit / item["inputs"][k]).write_bytes((d / f).read_bytes())
        if "weights" not in item:
            for w, f in meta["grads"].items():
                item["grads"][w] = f"{key}.ref.{f}"
                (kit / item["grads"][w]).write_bytes((d / f).read_bytes())
        plan.append(item)
    return failures


def output_file(name: str) -> str:
    """The file an executable writes output `name` to (--output-dir)."""
    import re
    return re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".npy"


def run_gradients(kit: Path, item: dict, env: dict, bundle: Path | None = None) -> dict:
    """A --gradients bundle's loss and weight gradients against PyTorch's
    (1e-4 relative to the largest, as test_autodiff.py checks on the CPU);
    for a model whose weights travel as statistics, against its CPU twin's
    run here on the weights drawn again."""
    key = item["key"]
    bundle = bundle or kit / f"{key}.cuda.dx"
    feeds = {k: str(kit / v) for k, v in item["inputs"].items()}
    row = {"model": key, "ranks": 1, "kind": "gradients", "ok": False}

    def results(b: Path, out_dir: Path):
        r = run(bundle_command(b, feeds, 1, "--output-dir", out_dir), env=env, timeout=300)
        if r.returncode:
            row["error"] = f"{b.name}: " + (r.stderr + r.stdout)[-1500:]
            return None
        return out_dir

    try:
        if "weights" in item:
            zoo.write_seeded_weights(item["model"], item["weights"])
            want = results(kit / f"{key}.cpu.dx", kit / f"out.{key}.cpu")
            if want is None:
                return row
            ref_loss = float(np.load(want / output_file("loss")))
            refs = {f.name: f for f in want.iterdir() if f.name.startswith("grad_")}
        else:
            ref_loss = item["loss"]
            refs = {output_file("grad:" + w): kit / f for w, f in item["grads"].items()}
        out_dir = results(bundle, kit / f"out.{key}")
        if out_dir is None:
            return row
        loss = float(np.load(out_dir / output_file("loss")))
        row["loss_rel_err"] = abs(loss - ref_loss) / max(1.0, abs(ref_loss))
        worst = 0.0 if refs else float("inf")
        for name, f in refs.items():
            worst = max(worst, rel_err(np.load(out_dir / name), np.load(f)))
        row["grads_rel_err"] = worst
        row["ok"] = row["loss_rel_err"] <= 1e-5 and worst <= 1e-4
    except (OSError, ValueError) as e:
        row["error"] = f"reading the run's results: {type(e).__name__}: {e}"
    return row


def ort_outputs(onnx_path, arrays: dict) -> dict:
    """ONNX Runtime's (CPU) outputs of the model on `arrays`, by name."""
    import onnxruntime as ort
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    return dict(zip((o.name for o in sess.get_outputs()), sess.run(None, arrays)))


def reference_outputs(kit: Path, key: str, onnx_path: Path, feeds: dict) -> dict:
    """ONNX Runtime's outputs of ONNX_PATH on the inputs FEEDS names in KIT,
    saved as KIT/<key>.ref.<n>.npy; returns name -> file."""
    refs = {}
    outs = ort_outputs(onnx_path, {k: np.load(kit / f) for k, f in feeds.items()})
    for n, (name, value) in enumerate(outs.items()):
        refs[name] = f"{key}.ref.{n}.npy"
        np.save(kit / refs[name], value)
    return refs


def prepare(kit: Path, distopt: Path, torch_models: Path | None = None) -> int:
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
            cmd = [str(distopt), "compile", str(onnx_path), *args, *SHARED_RUNTIME,
                   "-o", str(bundle)]
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
        item = {"key": key, "model": str(onnx_path), "kind": kind, "ranks": ranks,
                "inputs": feeds}
        if kind != "zoo":
            # ONNX Runtime's outputs, computed here: a GPU machine's ONNX
            # Runtime may be older than the onnx package that wrote the model
            # (an H100's 2026-11-27 read IR version 13, not 14). The zoo's
            # weights are drawn again there, so its references are made there.
            item["refs"] = reference_outputs(kit, key, onnx_path, feeds)
        plan.append(item)

    for name, args in EXAMPLES.items():
        compile_one(name, models / f"{name}.onnx", args, None)
    for key, (name, args, ranks) in DISTRIBUTED.items():
        compile_one(key, models / f"{name}.onnx", args, None, ranks=ranks,
                    kind="distributed")
    for name in zoo.names():
        path = zoo.materialize(name, models)
        compile_one(name, path, zoo.dim_args(name, ZOO_BATCH),
                    zoo.inputs(name, ZOO_BATCH), kind="zoo")
    # cuBLASLt's epilogues: each kind fused, and steps left alone; 16-bit
    # GEMMs (tensor cores), and the GPT example in fp16.
    import onnx
    for name, model, feeds, _, _ in gemm_cases.epilogue_cases():
        path = models / f"epilogue_{name}.onnx"
        onnx.save(model, str(path))
        compile_one(f"epilogue_{name}", path, [], feeds, kind="epilogue")
    for name, model, feeds, _, _ in gemm_cases.sixteen_bit_cases():
        if name == "linear_bf16":
            continue  # no ONNX Runtime kernel to compare with
        path = models / f"gemm16_{name}.onnx"
        onnx.save(model, str(path))
        compile_one(f"gemm16_{name}", path, [], feeds, kind="fp16")
    gpt16 = models / "gpt_f16.onnx"
    onnx.save(float16.to_float16(onnx.load(str(models / "gpt.onnx"))), str(gpt16))
    compile_one("gpt_f16", gpt16, EXAMPLES["gpt"], None, kind="fp16")
    # Mixed precision: the fp32 GPT compiled --precision bf16|fp16, against
    # ONNX Runtime's fp32 run to 16-bit precision.
    for p in ("bf16", "fp16"):
        compile_one(f"gpt_autocast_{p}", models / "gpt.onnx",
                    [*EXAMPLES["gpt"], "--precision", p], None, kind=f"autocast_{p}")
    if torch_models is not None:
        failures += prepare_training(kit, distopt, torch_models, plan)
    (kit / "plan.json").write_text(json.dumps(plan, indent=1))
    # The GPU machine lacks LLVM's OpenMP runtime, which bundles link, and
    # the bundles' shared runtime (SHARED_RUNTIME).
    lib = kit / "lib"
    lib.mkdir(exist_ok=True)
    runtime_dir = distopt.resolve().parents[1] / "lib" / "Runtime"
    for so in ["/usr/lib/llvm-22/lib/libomp.so.5",
               *map(str, runtime_dir.glob("libdistopt_runtime*_shared.so"))]:
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
    # The outputs go beside the bundle (by default they would land in the
    # working directory: the repository's root under scripts/gpu-check).
    r = run(bundle_command(bundle, feeds, ranks, "--repeat", repeat, "--output-dir",
                           bundle.with_suffix(".timed")), env=env, timeout=120)
    text = r.stderr + r.stdout
    for line in text.splitlines():
        if "median" in line:
            return line.strip()
    return "?"


def mpirun(n):
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n)]


def run_kit(kit: Path) -> int:
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
        if item["kind"] == "gradients":
            row = run_gradients(kit, item, env)
            failed += not row["ok"]
            results.append(row)
            print(json.dumps(row), flush=True)
            continue
        if item["kind"] == "training":
            row = run_training(kit, item, env)
            failed += not row["ok"]
            results.append(row)
            print(json.dumps(row), flush=True)
            if item["key"] == NCCL_REFUSAL:
                row = run_training(kit, item, dict(env, DISTOPT_CUDA_COMM="nccl"),
                                   expect_refusal="needs a GPU per rank")
                failed += not row["ok"]
                results.append(row)
                print(json.dumps(row), flush=True)
            continue
        key, ranks = item["key"], item["ranks"]
        feeds = {k: str(kit / v) for k, v in item["inputs"].items()}
        try:
            if "refs" in item:
                refs = {k: np.load(kit / f) for k, f in item["refs"].items()}
            else:
                refs = ort_outputs(item["model"], {k: np.load(v) for k, v in feeds.items()})
        except Exception as e:  # noqa: BLE001 - reported in the table
            print(json.dumps({"model": key, "ok": False, "error": f"ONNX Runtime: {e}"}))
            failed += 1
            continue
        out_dir = kit / f"out.{key}"
        bundle = kit / f"{key}.cuda.dx"
        # Under DISTOPT_CUDA_GRAPH=1 the outputs checked are those of a
        # third run: a replay of the graph the second captured.
        again = ["--repeat", "3"] if os.environ.get("DISTOPT_CUDA_GRAPH") == "1" else []
        r = run(bundle_command(bundle, feeds, ranks, "--output-dir", out_dir, *again),
                env=env, timeout=120)
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
            # fp16 models: against ONNX Runtime's fp16 run, to fp16's
            # precision; fp32 models compiled in 16 bits: to theirs.
            row["ok"] = worst <= {"fp16": 5e-3, "autocast_fp16": 5e-3,
                                  "autocast_bf16": 3e-2}.get(item["kind"], 1e-3)
        row["gpu_time"] = time_bundle(bundle, feeds, ranks, env)
        row["cpu_time"] = time_bundle(kit / f"{key}.cpu.dx", feeds, ranks, env)
        failed += not row["ok"]
        results.append(row)
        print(json.dumps(row), flush=True)
    (kit / "results.json").write_text(json.dumps(results, indent=1))
    print(f"\n{len(results) - failed} of {len(results)} CUDA runs pass (inference against "
          "ONNX Runtime, training and gradients against PyTorch)")
    return 1 if failed else 0


def rel_err(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        return float("inf")
    return float(np.abs(got - want).max()) / max(1e-3, float(np.abs(want).max()))


def run_training(kit: Path, item: dict, env: dict, expect_refusal: str = "") -> dict:
    """20 training steps of a CUDA bundle against PyTorch's (loss at every
    step, final weights: 1e-4; batch norm's running variance 2e-2, as ONNX
    defines it with the biased estimate), in one run or (RESUMED) two; or,
    with `expect_refusal`, a run that must fail saying so."""
    key, ranks = item["key"], item["ranks"]
    tag = ".nccl" if expect_refusal else ""
    row = {"model": key + (" (DISTOPT_CUDA_COMM=nccl, 2 ranks on one GPU)" if tag else "") +
           (" (resumed at step 14)" if item.get("resume") else ""),
           "ranks": ranks, "kind": "training", "ok": False}
    log, saved = kit / f"{key}{tag}.log.jsonl", kit / f"{key}{tag}.weights"
    ckpt = kit / f"{key}.ckpt"
    data = [a for n, f in item["data"].items() for a in ("--data", f"{n}={kit / f}")]
    if item.get("eval_flags") and not expect_refusal:
        data += [a for n, f in item["data"].items() for a in ("--eval-data", f"{n}={kit / f}")]
        data += item["eval_flags"]

    def train(*extra, log=log):
        cmd = [str(bundle_exe(kit / f"{key}.cuda.dx")), "train", *data, *item["flags"],
               *extra, "--log", str(log), "--save-weights", str(saved)]
        if ranks > 1:
            cmd = mpirun(ranks) + ["-x", "DISTOPT_CUDA_COMM"] * ("DISTOPT_CUDA_COMM" in env) + cmd
        return run(cmd, env=env, timeout=180)

    t0 = time.time()
    if item.get("resume") and not expect_refusal:
        first = kit / f"{key}.first.log.jsonl"
        r = train("--steps", "14", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "7",
                  log=first)
        if r.returncode == 0:
            r = train("--resume", str(ckpt))
        logs = [first, log]
    else:
        r = train()
        logs = [log]
    row["seconds"] = round(time.time() - t0, 2)
    text = r.stderr + r.stdout
    if expect_refusal:
        row["ok"] = r.returncode != 0 and expect_refusal in text
        row["error" if not row["ok"] else "refused"] = [
            ln for ln in text.splitlines() if "error" in ln.lower()][:2] or text[-800:]
        return row
    if r.returncode:
        row["error"] = text[-1500:]
        return row
    try:
        # Parameter servers end their log with a summary record.
        steps = [s for f in logs for s in map(json.loads, f.read_text().splitlines())
                 if "step" in s]
        if [s["step"] for s in steps] != list(range(1, len(item["losses"]) + 1)):
            row["error"] = f"steps logged: {[s['step'] for s in steps]}"
            return row
        row["loss_rel_err"] = rel_err([s["loss"] for s in steps], item["losses"])
        worst = 0.0
        for name, f in item.get("weights", {}).items():
            worst = max(worst, rel_err(np.load(saved / f"{name}.npy"), np.load(kit / f)))
        row["weights_rel_err"] = worst
        buffers_ok = True
        for name, f in item.get("buffers", {}).items():
            err = rel_err(np.load(saved / f"{name}.npy"), np.load(kit / f))
            buffers_ok &= err <= (1e-4 if name.endswith("mean") else 2e-2)
        row["ok"] = (row["loss_rel_err"] <= item.get("loss_tol", 1e-4) and
                     worst <= item.get("weights_tol", 1e-4) and buffers_ok)
        if "eval_losses" in item:
            got = [s["eval_loss"] for s in steps if "eval_loss" in s]
            row["eval_rel_err"] = rel_err(got, item["eval_losses"])
            row["ok"] = row["ok"] and row["eval_rel_err"] <= 1e-4
    except (OSError, ValueError, KeyError, TypeError) as e:
        row["ok"] = False
        row["error"] = f"reading the run's results: {type(e).__name__}: {e}"
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("kit", type=Path)
    p.add_argument("--distopt", type=Path, default=ROOT / "build/bin/distopt")
    p.add_argument("--torch-models", type=Path,
                   help="gen_grad_models.py's output: also compile its training steps")
    r = sub.add_parser("run")
    r.add_argument("kit", type=Path)
    args = ap.parse_args()
    if args.cmd == "prepare":
        return prepare(args.kit.resolve(), args.distopt,
                       args.torch_models.resolve() if args.torch_models else None)
    return run_kit(args.kit.resolve())


if __name__ == "__main__":
    sys.exit(main())
