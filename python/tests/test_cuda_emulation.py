"""The CUDA target's kernels checked without a GPU (`--target cuda-emu`).

`distopt compile --target cuda-emu` maps the program's loops onto GPU
blocks and threads exactly as `--target cuda` does, then runs each kernel
on this CPU thread by thread (distopt-emulate-gpu-launches): barriers and
all-reduces cut a kernel into phases, the threads of a phase run in reverse
order so a missing barrier reads stale memory. Inference is compared with
ONNX Runtime in test_zoo.py and by run_node_tests.py --target cuda-emu;
here the training steps (forward, backward, optimizer: kernels no GPU has
run yet) follow torch.optim's trajectories under data and tensor
parallelism (one process: test_autodiff.py)."""
from __future__ import annotations

import json
import re
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import gemm_cases  # python/testmodels, via cli
from cli import DISTOPT, ROOT, run
from training import (REFERENCE_DIRS, assert_follows_reference,
                      assert_plans_equal_one_process, batches_as_data, compile_step,
                      train_flags)

pytestmark = [
    pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built"),
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun"),
]

# One process: test_autodiff.py's test_emulated_gpu_training_matches_torch_optim.
CASES = [("gpt_adamw", ["--tp", "2"], 2), ("gpt_adamw", ["--dp", "2", "--zero", "1"], 2),
         ("encoder_adamw", ["--dp", "2", "--tp", "2"], 4), ("cnn_sgd", ["--dp", "2"], 2),
         ("sgd_clipped", ["--dp", "2"], 2)]


@pytest.mark.parametrize("run_name,degrees,ranks", CASES,
                         ids=[f"{c[0]}-{''.join(c[1]).replace('--', '') or 'one'}" for c in CASES])
def test_emulated_gpu_training_matches_pytorch(run_name, degrees, ranks, torch_models,
                                               tmp_path):
    """20 steps of the GPU kernels (emulated) equal torch.optim's 20 steps:
    the loss at every step and the final weights within 1e-4."""
    d = torch_models / REFERENCE_DIRS[run_name]
    meta = json.loads((d / "meta.json").read_text())[run_name]
    flags = ["--cluster", f"local:{ranks}", *degrees]
    bundle = compile_step(d / "model.onnx", tmp_path / "emu.dx", meta["config"]["kind"],
                          *flags, "--target", "cuda-emu")
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["codegen"] == "cuda-emu"
    assert_follows_reference(bundle, ranks, d, meta, tmp_path,
                             f"{run_name} {degrees} (cuda-emu)")


def test_emulated_pipelined_training_equals_one_process(torch_models, tmp_path):
    """Pipelined training steps (1F1B over 4 micro-batches; dp 2 x pp 2 with
    ZeRO-1), whose kernels `--target cuda` cannot run yet, emulated: one
    process's losses, gradient norms and weights within 1e-5."""
    d = torch_models / "train_gpt"
    cfg = json.loads((d / "meta.json").read_text())["gpt_adamw"]["config"]
    data = [*batches_as_data(d, tmp_path), "--steps", "10", "--no-shuffle",
            *train_flags(cfg), "--clip-grad-norm", "0.5"]
    emu = ["--target", "cuda-emu"]
    plans = {"1f1b": (2, ["--pp", "2", "--microbatches", "4", *emu]),
             "dp-zero": (4, ["--dp", "2", "--pp", "2", "--microbatches", "2", "--zero", "1",
                             *emu])}
    assert_plans_equal_one_process(d / "model.onnx", "adamw", data, plans, tmp_path)


def test_emulated_kernels_are_the_gpu_kernels(torch_models):
    """--emit=gpu under cuda-emu prints the kernels before emulation: the
    same gpu.launch mapping as --target cuda (block reductions included)."""
    d = torch_models / "train_gpt"
    out = run(DISTOPT, "compile", d / "model.onnx", "--target", "cuda-emu",
              "--emit=gpu", "-o", "-").stdout
    assert "gpu.launch" in out
    assert "gpu.barrier" in out


def test_emulation_refuses_ptx(torch_models):
    p = run(DISTOPT, "compile", torch_models / "train_gpt" / "model.onnx", "--target",
            "cuda-emu", "--emit=ptx", "-o", "-", check=False)
    assert p.returncode == 1
    assert "--emit=ptx needs --target cuda" in p.stderr, p.stderr


def reduction_cases():
    """Models whose reductions take each of the GPU mapping's shapes: a
    softmax over one long row (a reduction in registers, one block), row
    sums along rows (a block per row), a reduction over every axis (a loop
    nest to one block), batch-norm-style statistics over N, H, W (the nest
    normalised: a block per channel), column sums (a thread per column),
    long column sums (split into chunks), a layer norm over two axes (a
    nest inside a row), and 64-bit and integer accumulators."""
    from onnx import TensorProto as T
    rng = np.random.default_rng(0)

    def model(nodes, ins, out, inits=()):
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s)
                                           for n, t, s in ins],
                              [helper.make_tensor_value_info("y", out[0], out[1])],
                              list(inits))
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    axes = lambda *a: numpy_helper.from_array(np.array(a, np.int64), "axes")  # noqa: E731
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    yield ("softmax_one_row", model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)],
                                    [("x", T.FLOAT, [1, 1000])], (T.FLOAT, [1, 1000])),
           {"x": f(1, 1000) * 4})
    yield ("row_sums", model([helper.make_node("ReduceSum", ["x", "axes"], ["y"])],
                             [("x", T.FLOAT, [300, 517])], (T.FLOAT, [300, 1]), [axes(1)]),
           {"x": f(300, 517)})
    yield ("sum_all", model([helper.make_node("ReduceSum", ["x", "axes"], ["y"],
                                              keepdims=0)],
                            [("x", T.FLOAT, [6, 40, 50])], (T.FLOAT, []), [axes(0, 1, 2)]),
           {"x": f(6, 40, 50)})
    yield ("channel_mean", model([helper.make_node("ReduceMean", ["x"], ["y"],
                                                   axes=[0, 2, 3])],
                                 [("x", T.FLOAT, [8, 16, 10, 10])], (T.FLOAT, [1, 16, 1, 1])),
           {"x": f(8, 16, 10, 10)})
    yield ("column_sums", model([helper.make_node("ReduceSum", ["x", "axes"], ["y"])],
                                [("x", T.FLOAT, [64, 1024])], (T.FLOAT, [1, 1024]),
                                [axes(0)]),
           {"x": f(64, 1024)})
    # A bias gradient's shape: few columns, long: split into chunks summed in
    # parallel (62 of 65 rows, the last of 35), then the chunks' sums folded
    # per column.
    yield ("column_sums_long", model([helper.make_node("ReduceSum", ["x", "axes"], ["y"])],
                                     [("x", T.FLOAT, [4000, 384])], (T.FLOAT, [1, 384]),
                                     [axes(0)]),
           {"x": f(4000, 384)})
    # ... and with fewer columns than a block (split too, rather than a block
    # per column reading down it).
    yield ("column_sums_narrow", model([helper.make_node("ReduceSum", ["x", "axes"], ["y"])],
                                       [("x", T.FLOAT, [4096, 96])], (T.FLOAT, [1, 96]),
                                       [axes(0)]),
           {"x": f(4096, 96)})
    # A layer norm over the last two axes: each row's statistics are a
    # two-deep loop nest, flattened into the one loop the row's block shares.
    ln_scale = numpy_helper.from_array(f(16, 64), "scale")
    ln_bias = numpy_helper.from_array(f(16, 64), "bias")
    yield ("layer_norm_2d", model([helper.make_node("LayerNormalization",
                                                    ["x", "scale", "bias"], ["y"], axis=-2)],
                                  [("x", T.FLOAT, [8, 16, 64])], (T.FLOAT, [8, 16, 64]),
                                  [ln_scale, ln_bias]),
           {"x": f(8, 16, 64) * 3 + 1})
    # A reduction to a scalar long enough to split over the GPU (a gradient's
    # sum of squares for the global norm): 2812 threads each folding every
    # 2812th square into a partial sum, then one block folding the partials.
    yield ("long_sum_of_squares", model([helper.make_node("Mul", ["x", "x"], ["sq"]),
                                         helper.make_node("ReduceSum", ["sq", "axes"], ["y"],
                                                          keepdims=0)],
                                        [("x", T.FLOAT, [600, 300])], (T.FLOAT, []),
                                        [axes(0, 1)]),
           {"x": f(600, 300)})
    yield ("max_f64", model([helper.make_node("ReduceMax", ["x"], ["y"], axes=[1])],
                            [("x", T.DOUBLE, [5, 333])], (T.DOUBLE, [5, 1])),
           {"x": rng.standard_normal((5, 333))})
    yield ("sum_i64", model([helper.make_node("ReduceSum", ["x", "axes"], ["y"])],
                            [("x", T.INT64, [3, 999])], (T.INT64, [3, 1]), [axes(1)]),
           {"x": rng.integers(-1000, 1000, (3, 999))})


@pytest.mark.parametrize("case", list(reduction_cases()), ids=lambda c: c[0])
def test_emulated_reductions_match_onnxruntime(case, tmp_path):
    import onnxruntime as ort
    name, model, feeds = case
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    gpu = run(DISTOPT, "compile", path, "--target", "cuda-emu", "--emit=gpu", "-o",
              "-").stdout
    # Every launch has more than one thread a block (a block size of the
    # constant 1 prints as %c1 or %c1_N).
    assert "gpu.launch" in gpu
    one_thread = re.findall(r"threads\([^)]*\) in \(%\w+ = %c1(?:_\d+)?,", gpu)
    assert not one_thread, f"{name}: a kernel runs on one thread"
    bundle = tmp_path / f"{name}.dx"
    run(DISTOPT, "compile", path, "--target", "cuda-emu", "-o", bundle)
    args = []
    for k, v in feeds.items():
        np.save(tmp_path / f"{k}.npy", v)
        args.append(f"{k}={tmp_path / f'{k}.npy'}")
    run(bundle / name, *[a for x in args for a in ("--input", x)], "--output-dir",
        tmp_path / "out")
    got = np.load(tmp_path / "out" / "y.npy")
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    if np.issubdtype(want.dtype, np.integer):
        assert np.array_equal(got, want)
    else:
        assert np.abs(got - want).max() <= 1e-5 * max(1.0, np.abs(want).max()), name


@pytest.fixture(scope="module")
def gpu_bench_models(tmp_path_factory):
    """bench/gpu_models.py's models at the GPU benchmark's sizes, exported
    by torch.onnx.export (bench/gpu_inference.py export)."""
    from conftest import TORCH_PY, torch_available
    if not torch_available():
        pytest.skip("Debian's python3-torch is not installed (scripts/setup installs it)")
    kit = tmp_path_factory.mktemp("gpu_bench")
    run(TORCH_PY, ROOT / "bench" / "gpu_inference.py", "export", kit)
    return kit


@pytest.mark.parametrize("name", ["mlp", "cnn", "transformer_encoder", "gpt", "dcgan"])
def test_emulated_gpu_benchmark_models_match_onnxruntime(name, gpu_bench_models, tmp_path):
    """The GPU benchmark's models (MLP 1024-4096-4096-1024, ResNet-18 at
    224x224, a 6-layer d512 encoder, a 6-layer d768 GPT with an 8192-word
    vocabulary, a DCGAN generator; batch 2) through the emulated GPU kernels:
    the mapping at realistic sizes (vector loads, block reductions over rows
    of 512 to 8192), against ONNX Runtime."""
    import onnxruntime as ort
    info = json.loads((gpu_bench_models / "meta.json").read_text())[name]
    shape = [2] + info["shape"][1:]
    rng = np.random.default_rng(0)
    x = (rng.integers(0, 8000, shape) if info["dtype"] == "int64"
         else rng.standard_normal(shape).astype(np.float32))
    np.save(tmp_path / "x.npy", x)
    model = gpu_bench_models / f"{name}.onnx"
    bundle = tmp_path / "m.dx"
    run(DISTOPT, "compile", model, "--dim", "batch=2", "--target", "cuda-emu", "-o", bundle)
    run(bundle / "m", "--input", f"{info['input']}={tmp_path / 'x.npy'}", "--output-dir",
        tmp_path / "out")
    got = np.load(tmp_path / "out" / "y.npy")
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"]).run(
        None, {info["input"]: x})[0]
    assert got.shape == want.shape
    err = np.abs(got - want).max() / np.abs(want).max()
    assert err <= 1e-5, (name, err)


def test_emulated_global_norm_of_long_gradients(tmp_path):
    """A training step whose gradient is long enough for the global norm's
    sum of squares to be split over the GPU (a 1024x1024 weight: 1 M
    squares, 16384 partial sums folded by one block): the step's gradient norm under
    cuda-emu equals the float64 norm of the gradient that `--gradients`
    computes on the CPU, within 1e-6 (a sequential float32 sum of 1 M
    squares can be off by 1e-3)."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array((rng.standard_normal((1024, 1024)) * 0.05).astype(np.float32),
                                "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["logits"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 1024])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                                         [16, 1024])], [w])
    path = tmp_path / "wide.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    x = rng.standard_normal((16, 1024)).astype(np.float32)
    labels = rng.integers(0, 1024, 16).astype(np.int64)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "labels.npy", labels)
    gpu = run(DISTOPT, "compile", path, "--loss", "cross-entropy:logits", "--optimizer", "sgd",
              "--target", "cuda-emu", "--emit=gpu", "-o", "-").stdout
    assert "memref<16384xf32>" in gpu, "the norm's sum of squares is not split"
    step = tmp_path / "step.dx"
    run(DISTOPT, "compile", path, "--loss", "cross-entropy:logits", "--optimizer", "sgd",
        "--target", "cuda-emu", "-o", step)
    log = tmp_path / "log.jsonl"
    run(step / "step", "train", "--data", f"x={tmp_path / 'x.npy'}", "--data",
        f"labels={tmp_path / 'labels.npy'}", "--steps", "1", "--lr", "0.1", "--log", log)
    norm = json.loads(log.read_text().splitlines()[0])["grad_norm"]
    grads = tmp_path / "grads.dx"
    run(DISTOPT, "compile", path, "--loss", "cross-entropy:logits", "--gradients", "-o", grads)
    run(grads / "grads", "--input", f"x={tmp_path / 'x.npy'}", "--input",
        f"labels={tmp_path / 'labels.npy'}", "--output-dir", tmp_path / "out")
    grad = np.load(tmp_path / "out" / "grad_w.npy").astype(np.float64)
    want = float(np.sqrt((grad * grad).sum()))
    assert abs(norm - want) <= 1e-6 * want, (norm, want)


@pytest.mark.parametrize("case", list(gemm_cases.epilogue_cases()), ids=lambda c: c[0])
def test_emulated_gemm_epilogues_match_onnxruntime(case, tmp_path):
    """A GEMM and the bias, residual and activation step after it become one
    call (cuBLASLt's epilogues on a GPU; the CPU runtime's twin here), only
    where the library computes the same thing; every case against ONNX
    Runtime."""
    import onnxruntime as ort
    name, model, feeds, fused, plain = case
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    gpu = run(DISTOPT, "compile", path, "--target", "cuda-emu", "--emit=gpu", "-o",
              "-").stdout
    assert len(re.findall(r"call @dort_matmul_epilogue_f32\(", gpu)) == fused, name
    assert len(re.findall(r"call @dort_(?:batch_)?matmul_f32\(", gpu)) == plain, name
    bundle = tmp_path / f"{name}.dx"
    run(DISTOPT, "compile", path, "--target", "cuda-emu", "-o", bundle)
    np.save(tmp_path / "x.npy", feeds["x"])
    run(bundle / name, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out")
    got = np.load(tmp_path / "out" / "y.npy")
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, feeds)[0]
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-5 * max(1.0, np.abs(want).max()), name


# ConvTranspose configurations beyond ONNX's node tests: (name, input shape,
# weight shape, bias, attributes).
CONV_TRANSPOSE_CASES = [
    # symmetric pads, output padding below the stride: cuDNN's dx directly
    ("strided", [2, 4, 5, 6], [4, 3, 3, 3], True,
     dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 0], group=2)),
    # uneven pads: the full result computed, cut and padded (an output
    # padding past the stride, which ONNX allows with a dilation and ONNX
    # Runtime refuses, is checked against PyTorch in test_autodiff.py)
    ("uneven_dilated", [1, 3, 5, 4], [3, 2, 3, 2], False,
     dict(strides=[2, 1], dilations=[1, 2], pads=[2, 1, 1, 0], output_padding=[1, 0])),
    # a begin pad past the whole result: only output-padding zeros, and the
    # bias
    ("only_padding", [1, 2, 1, 1], [2, 3, 1, 1], True,
     dict(strides=[3, 3], pads=[2, 2, 0, 0], output_padding=[2, 2])),
    # depthwise, SAME_LOWER
    ("depthwise_same_lower", [2, 3, 4, 5], [3, 1, 3, 3], True,
     dict(strides=[2, 2], group=3, auto_pad="SAME_LOWER")),
    # 1-D (a 2-D window of height 1): grouped, dilated, uneven pads
    ("one_d", [2, 4, 7], [4, 3, 3], True,
     dict(strides=[3], pads=[1, 2], dilations=[2], output_padding=[1], group=2)),
]


@pytest.mark.parametrize("target", ["cpu", "cuda-emu"])
@pytest.mark.parametrize("case", CONV_TRANSPOSE_CASES, ids=lambda c: c[0])
def test_transposed_convolutions_match_onnxruntime(case, target, tmp_path):
    """ConvTranspose on the CPU and under cuda-emu (the backward-data call
    cuDNN runs on a GPU; the runtime's GEMM + col2im here) against ONNX
    Runtime, including the shapes the library's dx cannot take directly."""
    import onnxruntime as ort
    name, xs, ws, bias, attrs = case
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal(ws).astype(np.float32), "w")]
    inputs = ["x", "w"]
    if bias:
        m = ws[1] * attrs.get("group", 1)
        inits.append(numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b"))
        inputs.append("b")
    g = helper.make_graph([helper.make_node("ConvTranspose", inputs, ["y"], **attrs)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, xs)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    path = tmp_path / f"{name}.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    x = rng.standard_normal(xs).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    ir = run(DISTOPT, "compile", path, "--target", target, "--emit=linalg", "-o", "-").stdout
    assert "call @dort_conv2d_backward_data_f32(" in ir
    bundle = tmp_path / f"{name}.dx"
    run(DISTOPT, "compile", path, "--target", target, "-o", bundle)
    run(bundle / name, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out")
    got = np.load(tmp_path / "out" / "y.npy")
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-5 * max(1.0, np.abs(want).max()), name


@pytest.mark.parametrize("target", ["cpu", "cuda-emu"])
@pytest.mark.parametrize("case", list(gemm_cases.sixteen_bit_cases()), ids=lambda c: c[0])
def test_sixteen_bit_gemms_match_reference(case, target, tmp_path):
    """f16 and bf16 GEMMs read their operands as 16-bit values (cuBLAS's
    GemmEx with tensor cores on a GPU; widened into OpenBLAS here), where
    both operands are: the calls counted, every output against ONNX Runtime
    (numpy for bf16) within 16-bit rounding."""
    name, model, feeds, narrow, wide = case
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    emit = "gpu" if target == "cuda-emu" else "llvm"
    ir = run(DISTOPT, "compile", path, "--target", target, f"--emit={emit}", "-o", "-").stdout
    if target == "cuda-emu":
        # GEMMs by operand type: 16-bit (plain, or with its epilogue fused)
        # or f32.
        calls = re.findall(r"call @dort_(?:batch_)?matmul_(?:epilogue_)?(\w+?)\(", ir)
        assert sum(c != "f32" for c in calls) == narrow, (name, calls)
        assert calls.count("f32") == wide, (name, calls)
    bundle = tmp_path / f"{name}.dx"
    run(DISTOPT, "compile", path, "--target", target, "-o", bundle)
    args = []
    for k, v in feeds.items():
        # bf16 as the runtime's .npy files hold it (2-byte void).
        np.save(tmp_path / f"{k}.npy", v.view("V2") if v.dtype == np.uint16 else v)
        args += ["--input", f"{k}={tmp_path / f'{k}.npy'}"]
    run(bundle / name, *args, "--output-dir", tmp_path / "out")
    for out, want in gemm_cases.reference(name, model, feeds).items():
        got = np.load(tmp_path / "out" / f"{out}.npy")
        if got.dtype == np.dtype("V2"):
            got = got.view(np.uint16)
        assert got.shape == want.shape and got.dtype == want.dtype, (out, got.dtype)
        if name == "linear_bf16":
            got, want = gemm_cases.bf16_to_f32(got), gemm_cases.bf16_to_f32(want)
            tol = 2 ** -7
        else:
            tol = 2 ** -10
        got, want = got.astype(np.float64), want.astype(np.float64)
        err = np.abs(got - want).max() / max(1.0, np.abs(want).max())
        assert err <= 2 * tol, (name, out, err)


def test_exported_gpt_in_fp16_uses_16_bit_gemms(tmp_path):
    """The GPT example (torch.onnx.export) converted to fp16 (as
    `model.half()` exports it): every one of its 13 GEMMs reads 16-bit
    operands, 9 with their epilogue, and the emulated GPU's logits match
    ONNX Runtime's fp16 run within fp16's precision."""
    import sys
    import onnxruntime as ort
    import float16  # python/testmodels, via cli
    run(sys.executable, ROOT / "python/testmodels/gen_models.py", "--out", tmp_path,
        "--only", "gpt")
    path = tmp_path / "gpt16.onnx"
    onnx.save(float16.to_float16(onnx.load(str(tmp_path / "gpt.onnx"))), str(path))
    gpu = run(DISTOPT, "compile", path, "--dim", "batch=2", "--target", "cuda-emu",
              "--emit=gpu", "-o", "-").stdout
    calls = re.findall(r"call @dort_(?:batch_)?matmul_(?:epilogue_)?(\w+?)\(", gpu)
    assert len(calls) == 13 and set(calls) <= {"f16_f32", "f16"}, calls
    # Its projections' bias and residual, its MLP's bias and GELU (its
    # constants in f16) and the LM head's rounding to f16 go with their
    # GEMMs (16-bit epilogues); attention's 4 batched GEMMs stay plain.
    assert calls.count("f16") == 9, calls
    bundle = tmp_path / "gpt16.dx"
    run(DISTOPT, "compile", path, "--dim", "batch=2", "--target", "cuda-emu", "-o", bundle)
    ids = np.random.default_rng(0).integers(0, 100, (2, 16)).astype(np.int64)
    np.save(tmp_path / "ids.npy", ids)
    run(bundle / "gpt16", "--input", f"input_ids={tmp_path / 'ids.npy'}", "--output-dir",
        tmp_path / "out")
    got = np.load(next((tmp_path / "out").glob("*.npy")))
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"input_ids": ids})[0]
    assert got.dtype == np.float16 and got.shape == want.shape
    err = np.abs(got.astype(np.float32) - want).max() / np.abs(want).max()
    assert err <= 5e-3, err
