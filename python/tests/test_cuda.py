"""The CUDA target (`distopt compile --target cuda`) without and with a GPU.

Everywhere distopt was built with its CUDA target: every model of the zoo
and every bundled example, one process and multi-rank plans, compiles with
its kernels assembled by ptxas for sm_80 and sm_90 and links into an
executable that needs no libcuda; on a machine without a GPU the executable
says so and writes nothing. Where a GPU is present (tests marked
cuda-device, reported skipped elsewhere), the bundles run and match ONNX
Runtime (python/gpu/gpu_check.py).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper
import pytest

from cli import BUILD, DISTOPT, ROOT, run, save_float_model

import zoo  # noqa: E402  (python/testmodels, via cli)

HAVE_CUDA = (BUILD / "lib" / "Runtime" / "libdistopt_runtime_cuda.a").exists()
pytestmark = pytest.mark.skipif(not HAVE_CUDA, reason="distopt built without its CUDA target "
                                "(no CUDA toolkit at build time)")


def built_with_cudnn() -> bool:
    cache = BUILD / "CMakeCache.txt"
    return cache.exists() and any(
        l.startswith("DISTOPT_CUDNN_INCLUDE_DIR:") and not l.rstrip().endswith("NOTFOUND")
        for l in cache.read_text().splitlines())


needs_cudnn = pytest.mark.skipif(not built_with_cudnn(), reason="distopt built without cuDNN's "
                                 "headers: GPU convolutions stay im2col + GEMM")


def has_device() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


cuda_device = pytest.mark.skipif(not has_device(), reason="REQUIRES: cuda-device (no GPU here)")


def needed_libraries(exe):
    out = subprocess.run(["readelf", "-d", str(exe)], capture_output=True, text=True).stdout
    return [l.split("[")[1].rstrip("]") for l in out.splitlines() if "(NEEDED)" in l]


@pytest.mark.parametrize("name", zoo.names())
def test_zoo_model_compiles_for_cuda(name, tmp_path):
    model = zoo.materialize(name, tmp_path)
    bundle = tmp_path / f"{name}.dx"
    run(DISTOPT, "compile", model, *zoo.dim_args(name, 2), "--target", "cuda",
        "-o", bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["target"] == "cuda"
    libs = needed_libraries(bundle / name)
    assert not any(l.startswith("libcuda.so") for l in libs), libs
    assert any(l.startswith("libcublas.so") for l in libs), libs


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    out = tmp_path_factory.mktemp("models")
    run(sys.executable, ROOT / "python/testmodels/gen_models.py", "--out", out,
        "--only", "mlp", "gpt")
    return out


@pytest.mark.parametrize("plan", [[], ["--cluster", "local:2", "--tp", "2"],
                                  ["--cluster", "local:2", "--dp", "2"],
                                  ["--cluster", "local:2", "--pp", "2"]],
                         ids=["one", "tp2", "dp2", "pp2"])
def test_gpt_plans_compile_for_cuda(plan, examples, tmp_path):
    bundle = tmp_path / "gpt.dx"
    run(DISTOPT, "compile", examples / "gpt.onnx", "--dim", "batch=4", *plan,
        "--target", "cuda", "-o", bundle)
    assert (bundle / "gpt").exists()


@pytest.mark.parametrize("plan", [[], ["--cluster", "local:2", "--dp", "2"],
                                  ["--cluster", "local:2", "--dp", "2", "--zero", "1",
                                   "--grad-dtype", "bf16"],
                                  ["--cluster", "local:2", "--tp", "2"],
                                  ["--cluster", "local:4", "--dp", "2", "--tp", "2"]],
                         ids=["one", "dp2", "dp2-zero1-bf16", "tp2", "dp2-tp2"])
def test_training_steps_compile_for_cuda(plan, examples, tmp_path):
    """Training steps (the GPT-style decoder; an MLP with a training-mode
    Dropout) for the GPU: every kernel assembled by ptxas, the bundle
    linked, under one process, data parallelism, ZeRO-1 with bf16
    gradients, tensor parallelism (the backward's collectives) and both."""
    inits = [numpy_helper.from_array(np.ones((16, 32), np.float32), "w1"),
             numpy_helper.from_array(np.ones((32, 8), np.float32), "w2"),
             numpy_helper.from_array(np.array(0.2, np.float32), "r"),
             numpy_helper.from_array(np.array(True), "t")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]),
             helper.make_node("Dropout", ["h", "r", "t"], ["d"]),
             helper.make_node("MatMul", ["d", "w2"], ["logits"])]
    mlp = tmp_path / "drop.onnx"
    save_float_model(mlp, nodes, {"x": [8, 16]}, {"logits": [8, 8]}, inits)
    for name, model, dims in (("gpt", examples / "gpt.onnx", ["--dim", "batch=4"]),
                              ("drop", mlp, [])):
        bundle = tmp_path / f"{name}.dx"
        run(DISTOPT, "compile", model, *dims, "--loss", "cross-entropy", "--optimizer",
            "adamw", *plan, "--target", "cuda", "-o", bundle)
        assert (bundle / name).exists()


def test_ptx_for_requested_architectures(examples):
    ptx = run(DISTOPT, "compile", examples / "gpt.onnx", "--dim", "batch=2", "--target",
              "cuda", "--cuda-arch", "sm_90", "--emit=ptx", "-o", "-").stdout
    # The lowest requested architecture is the PTX's target.
    assert ".target sm_90" in ptx
    assert ".extern .func __nv_" not in ptx


def test_bundle_without_a_gpu_says_so(examples, tmp_path):
    if has_device():
        pytest.skip("a GPU is present: the no-device path cannot be shown here")
    bundle = tmp_path / "mlp.dx"
    run(DISTOPT, "compile", examples / "mlp.onnx", "--dim", "batch=2", "--target", "cuda",
        "-o", bundle)
    x = tmp_path / "x.npy"
    np.save(x, np.ones((2, 64), np.float32))
    out = tmp_path / "out"
    proc = run(bundle / "mlp", "--input", f"x={x}", "--output-dir", out, check=False)
    assert proc.returncode == 1
    assert "no usable CUDA device" in proc.stderr
    assert "NVIDIA GPU and its driver" in proc.stderr
    assert not out.exists() or not list(out.iterdir())


@pytest.mark.parametrize("target", ["cpu", "cuda-emu", "cuda"])
def test_shared_runtime_link(examples, target, tmp_path):
    """--runtime-link shared: the bundle loads libdistopt_runtime[_cuda]_shared.so
    (what scripts/gpu-check packs its bundles with) and computes what the
    static bundle computes; a CUDA one without a GPU says so the same way."""
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32))
    outs = {}
    for link in ("static", "shared"):
        bundle = tmp_path / f"{link}.dx"
        run(DISTOPT, "compile", examples / "mlp.onnx", "--dim", "batch=2", "--target", target,
            "--runtime-link", link, "-o", bundle)
        exe = bundle / link
        needed = run("ldd", exe).stdout
        lib = "libdistopt_runtime_cuda_shared.so" if target == "cuda" else \
            "libdistopt_runtime_shared.so"
        assert (lib in needed) == (link == "shared"), needed
        if link == "shared":
            assert exe.stat().st_size < 200_000
        proc = run(exe, "--input", f"x={x}", "--output-dir", tmp_path / link, check=False)
        if target == "cuda" and not has_device():
            assert proc.returncode == 1 and "no usable CUDA device" in proc.stderr
            continue
        assert proc.returncode == 0, proc.stderr
        outs[link] = np.load(tmp_path / link / "y.npy")
    if outs:
        np.testing.assert_array_equal(outs["static"], outs["shared"])
    proc = run(DISTOPT, "compile", examples / "mlp.onnx", "--runtime-link", "dynamic",
               "-o", tmp_path / "bad.dx", check=False)
    assert proc.returncode == 1
    assert "--runtime-link must be static or shared, got 'dynamic'" in proc.stderr


@pytest.mark.parametrize("precision,flags", [
    ("bf16", []), ("fp16", []), ("tf32", []), ("bf16", ["--cluster", "local:2", "--tp", "2"]),
    ("bf16", ["--loss", "cross-entropy", "--optimizer", "adamw"]),
    ("bf16", ["--loss", "cross-entropy", "--optimizer", "adamw", "--cluster", "local:4",
              "--dp", "2", "--tp", "2"])],
    ids=["bf16", "fp16", "tf32", "bf16-tp2", "bf16-step", "bf16-step-dp2-tp2"])
def test_mixed_precision_compiles_for_cuda(precision, flags, examples, tmp_path):
    """--precision for the GPU: 16-bit GEMMs (cuBLASLt) and kernels on
    16-bit storage assembled by ptxas and linked; the manifest carries the
    precision (tf32: the CUDA libraries' TF32 math)."""
    bundle = tmp_path / "gpt.dx"
    run(DISTOPT, "compile", examples / "gpt.onnx", "--dim", "batch=4", "--precision",
        precision, *flags, "--target", "cuda", "-o", bundle)
    assert (bundle / "gpt").exists()
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["precision"] == precision


@cuda_device
def test_bundles_match_onnx_runtime_on_the_gpu(torch_models, tmp_path):
    """On a GPU: the examples, plans and zoo against ONNX Runtime, and the
    training steps (one process, tp, dp with ZeRO-1, pipelines, parameter
    servers; weights and optimizer state kept on the GPU, evaluated and
    checkpointed) against torch.optim (python/gpu/gpu_check.py)."""
    kit = tmp_path / "kit"
    run(sys.executable, ROOT / "python/gpu/gpu_check.py", "prepare", kit, "--torch-models",
        torch_models)
    proc = run(sys.executable, ROOT / "python/gpu/gpu_check.py", "run", kit, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_gpu_check_kit_holds_mixed_precision_steps(torch_models, tmp_path, monkeypatch):
    """The GPU check's mixed-precision training steps (bf16, fp16 with loss
    scaling, dp 2 x tp 2 in bf16) compile for CUDA into its kit, with the
    16-bit tolerances their run is held to."""
    sys.path.insert(0, str(ROOT / "python" / "gpu"))
    import gpu_check
    mixed = {k: v for k, v in gpu_check.TRAINING.items() if len(v) > 4}
    assert {v[4] for v in mixed.values()} == {"bf16", "fp16"}
    monkeypatch.setattr(gpu_check, "TRAINING", mixed)
    monkeypatch.setattr(gpu_check, "prepare_gradients", lambda *a, **k: 0)
    plan = []
    assert gpu_check.prepare_training(tmp_path, DISTOPT, torch_models, plan) == 0
    assert sorted(item["key"] for item in plan) == sorted(mixed)
    for item in plan:
        manifest = json.loads((tmp_path / f"{item['key']}.cuda.dx" / "manifest.json")
                              .read_text())
        assert manifest["precision"] == mixed[item["key"]][4]
        assert (item["loss_tol"], item["weights_tol"]) == (5e-3, 0.1)


def test_gpu_check_gradient_kits(torch_models, tmp_path):
    """gpu_check's gradients kind, checked here with CPU bundles standing in
    for the CUDA ones: a model that travels with its weights against
    PyTorch's gradients, and one whose weights travel as statistics (drawn
    again where it runs) against its CPU twin; a wrong gradient fails."""
    sys.path.insert(0, str(ROOT / "python" / "gpu"))
    import gpu_check
    kit = tmp_path / "kit"
    plan = []
    names = ["conv1d_cross_entropy", "upsampler_mse"]
    # The upsampler's weights (2.9 kB) travel; the 1-D CNN's (4.3 kB) do not.
    assert gpu_check.prepare_gradients(kit, DISTOPT, torch_models, plan, names,
                                       carried=3500) == 0
    by_key = {item["key"]: item for item in plan}
    shipped, drawn = by_key["grad_upsampler_mse"], by_key["grad_conv1d_cross_entropy"]
    assert shipped["grads"] and "weights" not in shipped
    assert drawn["weights"] and not drawn["grads"]
    data = Path(drawn["model"] + ".data")
    data.unlink()  # as scripts/gpu-check leaves it out of the kit
    for item in (shipped, drawn):
        cpu = kit / f"{item['key']}.cpu.dx"
        if not cpu.exists():
            run(DISTOPT, "compile", torch_models / "upsampler_mse" / "model.onnx",
                "--gradients", "--loss", "mse:logits", "-o", cpu)
        row = gpu_check.run_gradients(kit, item, dict(os.environ), bundle=cpu)
        assert row["ok"], row
    # Against its own twin, on the same weights: exact.
    assert row["grads_rel_err"] == 0 and row["loss_rel_err"] == 0, row
    assert data.exists()
    # A gradient off by 1% fails the comparison.
    ref = next(iter(shipped["grads"].values()))
    g = np.load(kit / ref)
    np.save(kit / ref, g * 1.01)
    row = gpu_check.run_gradients(kit, shipped, dict(os.environ),
                                  bundle=kit / "grad_upsampler_mse.cpu.dx")
    assert not row["ok"] and row["grads_rel_err"] > 1e-3, row


def test_pipelined_and_server_training_steps_compile_for_cuda(examples, tmp_path):
    """Pipelined training steps (1F1B; dp 2 x pp 2 with ZeRO-1) and
    parameter-server steps (synchronous, asynchronous) for the GPU: every
    kernel assembled, the bundle linked (the stages' sends and receives
    call the CUDA runtime's staged point-to-point twins). They ran on an
    H200 against torch.optim (docs/cuda-codegen.md); here the executable
    says there is no GPU."""
    plans = {"pp2": ["--cluster", "local:2", "--pp", "2", "--microbatches", "2"],
             "dp2pp2": ["--cluster", "local:4", "--dp", "2", "--pp", "2", "--microbatches",
                        "2", "--zero", "1"],
             "ps": ["--cluster", "local:3", "--sync", "ps", "--servers", "1"],
             "async": ["--cluster", "local:2", "--sync", "async"]}
    for name, plan in plans.items():
        bundle = tmp_path / f"{name}.dx"
        run(DISTOPT, "compile", examples / "gpt.onnx", "--dim", "batch=4", "--loss",
            "cross-entropy", "--optimizer", "adamw", *plan, "--target", "cuda", "-o", bundle)
        manifest = json.loads((bundle / "manifest.json").read_text())
        assert manifest["target"] == "cuda", name
        assert (bundle / name).exists(), name
    if has_device():
        return
    ids = tmp_path / "ids.npy"
    np.save(ids, np.random.default_rng(0).integers(0, 100, (8, 16)).astype(np.int64))
    proc = run("mpirun", "--oversubscribe", "-np", "2", tmp_path / "pp2.dx" / "pp2", "train",
               "--data", f"input_ids={ids}", "--data", f"labels={ids}", "--steps", "1",
               check=False)
    assert proc.returncode != 0
    assert "no usable CUDA device" in proc.stderr + proc.stdout

@needs_cudnn
def test_convolutions_go_to_cudnn(tmp_path):
    """On the GPU a convolution is one call of the runtime's
    dort_conv2d_f32, which the CUDA device runs with cuDNN (loaded with
    dlopen at the first one: the
    executable does not need libcudnn to start); on CPUs it stays im2col +
    GEMM. Every Conv of torchvision's ResNet-18 becomes one call."""
    name = "resnet18"
    model = zoo.materialize(name, tmp_path)
    convs = sum(n.op_type == "Conv" for n in onnx.load(str(model)).graph.node)
    assert convs == 20
    gpu = run(DISTOPT, "compile", model, *zoo.dim_args(name, 2), "--target", "cuda",
              "--emit=linalg", "-o", "-").stdout
    assert gpu.count("call @dort_conv2d_f32(") == convs
    cpu = run(DISTOPT, "compile", model, *zoo.dim_args(name, 2), "--emit=linalg",
              "-o", "-").stdout
    assert "dort_conv2d" not in cpu and "linalg.batch_matmul" in cpu
    bundle = tmp_path / f"{name}.dx"
    run(DISTOPT, "compile", model, *zoo.dim_args(name, 2), "--target", "cuda", "-o", bundle)
    assert not any("cudnn" in l for l in needed_libraries(bundle / name))
    symbols = subprocess.run(["nm", "-C", str(bundle / name)], capture_output=True,
                             text=True).stdout
    assert " T distopt::runtime::cuda::detail::CudaDevice::conv2d_f32(" in symbols


@needs_cudnn
def test_training_step_convolutions_go_to_cudnn(tmp_path):
    """A CNN's training step on the GPU: the forward convolutions and their
    weight gradients are dort_conv2d calls (the runtime runs a weight
    gradient as cuDNN's backward-filter convolution when cuDNN times it
    faster), their input gradients dort_conv2d_backward_data calls (cuDNN's
    backward data); no im2col GEMM is left."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((8,)).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.standard_normal((4, 10)).astype(np.float32), "fc")]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], group=2, pads=[0, 1, 1, 0]),
             helper.make_node("GlobalAveragePool", ["c2"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["logits"])]
    model = tmp_path / "cnn.onnx"
    save_float_model(model, nodes, {"x": [4, 3, 16, 16]}, {"logits": [4, 10]}, inits)
    gpu = run(DISTOPT, "compile", model, "--loss", "cross-entropy", "--optimizer", "sgd",
              "--target", "cuda", "--emit=linalg", "-o", "-").stdout
    assert "linalg.batch_matmul" not in gpu
    # The step: two forward convolutions, two weight gradients, one input
    # gradient (none for the data input, dead code the lowering drops); the
    # evaluation program: the two forward convolutions.
    programs = gpu.split("\nmodule")
    calls = [p.count("call @dort_conv2d_f32(") for p in programs]
    assert [c for c in calls if c] == [4, 2], calls
    data = [p.count("call @dort_conv2d_backward_data_f32(") for p in programs]
    assert [c for c in data if c] == [1], data
    bundle = tmp_path / "cnn.dx"
    run(DISTOPT, "compile", model, "--loss", "cross-entropy", "--optimizer", "sgd",
        "--target", "cuda", "-o", bundle)
    assert (bundle / "cnn").exists()
    symbols = subprocess.run(["nm", "-C", str(bundle / "cnn")], capture_output=True,
                             text=True).stdout
    assert (" T distopt::runtime::cuda::detail::CudaDevice::conv2d_backward_data_f32("
            in symbols)
