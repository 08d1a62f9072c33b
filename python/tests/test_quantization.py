"""Quantized models and ops against ONNX Runtime. Models ONNX Runtime's own
quantizer wrote: quantize_static's QDQ format (int8 weights per channel,
uint8 activations) and QOperator format (QLinearConv), and
quantize_dynamic's transformer (DynamicQuantizeLinear, MatMulInteger).
QuantizeLinear and DequantizeLinear alone: halves rounding to even,
saturation, 16-bit types, per-axis and blocked parameters (a block that
does not divide the axis), float16 input. On the CPU and under cuda-emu
(the GPU kernels)."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import cli
from cli import DISTOPT

pytestmark = pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")
RNG = np.random.default_rng(5)


def float_cnn() -> onnx.ModelProto:
    """Conv-Relu-Conv-Relu-GlobalAveragePool-Flatten-Gemm, random weights."""
    w = lambda *s: numpy_helper.from_array(  # noqa: E731
        (RNG.standard_normal(s) / np.sqrt(np.prod(s[1:]))).astype(np.float32))
    inits = []
    for name, arr in [("c1", w(8, 3, 3, 3)), ("b1", w(8)), ("c2", w(16, 8, 3, 3)),
                      ("b2", w(16)), ("fc", w(16, 10)), ("fb", w(10))]:
        arr.name = name
        inits.append(arr)
    nodes = [
        helper.make_node("Conv", ["x", "c1", "b1"], ["h1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["h1"], ["r1"]),
        helper.make_node("Conv", ["r1", "c2", "b2"], ["h2"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["h2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fb"], ["y"]),
    ]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3, 12, 12])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, [2, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    return m


def run_distopt(path, feeds, tmp_path, target):
    cli.compile_and_run(path, feeds, tmp_path, "--target", target)
    return np.load(tmp_path / "out" / "y.npy")


def unoptimized_session(path):
    """ONNX Runtime running the Q and DQ nodes as they are (its optimiser
    would fuse them into integer kernels, which round differently)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


QUANTIZE = """
import sys
import numpy as np
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_dynamic, quantize_static)
rng = np.random.default_rng(1)
if sys.argv[3] == "dynamic":
    quantize_dynamic(sys.argv[1], sys.argv[2], weight_type=QuantType.QInt8)
    sys.exit(0)

class Reader(CalibrationDataReader):
    def __init__(self):
        self.batches = iter([{"x": rng.standard_normal((2, 3, 12, 12)).astype(np.float32)}
                             for _ in range(4)])

    def get_next(self):
        return next(self.batches, None)

quantize_static(sys.argv[1], sys.argv[2], Reader(),
                quant_format=QuantFormat.QDQ if sys.argv[3] == "qdq" else QuantFormat.QOperator,
                per_channel=True, weight_type=QuantType.QInt8,
                activation_type=QuantType.QUInt8)
"""


def quantize(model, tmp_path, kind):
    """`model` quantized by ONNX Runtime's quantizer (`kind`: qdq, qoperator
    or dynamic), in a process of its own: the quantizer imports a module
    named float16, which python/testmodels (on this process's path)
    shadows."""
    float_path, q_path = tmp_path / "float.onnx", tmp_path / f"{kind}.onnx"
    onnx.save(model, float_path)
    cli.run(sys.executable, "-c", QUANTIZE, float_path, q_path, kind)
    return q_path


@pytest.mark.parametrize("target", ["cpu", "cuda-emu"])
def test_onnx_runtime_quantized_cnn(target, tmp_path):
    q_path = quantize(float_cnn(), tmp_path, "qdq")
    ops = {n.op_type for n in onnx.load(q_path).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "Conv"} <= ops
    x = RNG.standard_normal((2, 3, 12, 12)).astype(np.float32)
    want = unoptimized_session(q_path).run(None, {"x": x})[0]
    got = run_distopt(q_path, {"x": x}, tmp_path, target)
    # One quantization step of the output at most, where an accumulation in
    # another order lands on the other side of a rounding boundary; almost
    # everywhere the same.
    m = onnx.load(q_path)
    scales = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    last_dq = [n for n in m.graph.node if n.op_type == "DequantizeLinear" and "y" in n.output]
    step = float(np.max(scales[last_dq[0].input[1]])) if last_dq else 0.05
    err = np.abs(got - want)
    assert err.max() <= step * 1.01 + 1e-5, err.max()
    assert np.mean(err <= 1e-5) >= 0.9


def conv_only(m: onnx.ModelProto) -> onnx.ModelProto:
    """The CNN's convolutions alone (its pooling and Gemm would become
    com.microsoft operators in the QOperator format)."""
    g = m.graph
    nodes = [n for n in g.node if n.op_type in ("Conv", "Relu")]
    nodes[-1].output[0] = "y"
    keep = {i for n in nodes for i in n.input}
    out = helper.make_graph(nodes, "convs", list(g.input),
                            [helper.make_tensor_value_info("y", TP.FLOAT, [2, 16, 6, 6])],
                            [i for i in g.initializer if i.name in keep])
    q = helper.make_model(out, opset_imports=[helper.make_opsetid("", 17)])
    q.ir_version = 9
    return q


@pytest.mark.parametrize("target", ["cpu", "cuda-emu"])
def test_onnx_runtime_qoperator_convolutions(target, tmp_path):
    """QLinearConv (ReLU folded in, per-channel int8 weights, int32 bias)
    between a QuantizeLinear and a DequantizeLinear: ONNX Runtime's integer
    kernels against distopt's exact float accumulation, requantized as
    ONNX's reference does (a rounding may differ by one step)."""
    q_path = quantize(conv_only(float_cnn()), tmp_path, "qoperator")
    ops = {n.op_type for n in onnx.load(q_path).graph.node}
    assert "QLinearConv" in ops and "Conv" not in ops
    x = RNG.standard_normal((2, 3, 12, 12)).astype(np.float32)
    want = ort.InferenceSession(str(q_path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = run_distopt(q_path, {"x": x}, tmp_path, target)
    m = onnx.load(q_path)
    scales = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    dq = [n for n in m.graph.node if n.op_type == "DequantizeLinear" and "y" in n.output][0]
    step = float(np.max(scales[dq.input[1]]))
    err = np.abs(got - want)
    assert err.max() <= step * 1.01, err.max()
    assert np.mean(err <= 1e-6) >= 0.99


@pytest.mark.parametrize("target", ["cpu", "cuda-emu"])
def test_onnx_runtime_dynamic_quantized_transformer(target, tmp_path):
    """quantize_dynamic's transformer encoder: each MatMul with a weight
    becomes DynamicQuantizeLinear of the activations (their range found at
    run time), MatMulInteger with the int8 weight (exact int32 sums), and
    the scales' product."""
    import gen_models
    q_path = quantize(gen_models.build_transformer_encoder(), tmp_path, "dynamic")
    ops = {n.op_type for n in onnx.load(q_path).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops
    x = RNG.standard_normal((2, 5, 32)).astype(np.float32)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(str(q_path), so, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    out = onnx.load(q_path).graph.output[0].name
    cli.compile_and_run(q_path, {"x": x}, tmp_path, "--target", target, "--dim", "batch=2",
                        "--dim", "seq=5")
    got = np.load(tmp_path / "out" / f"{out}.npy")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def qmodel(nodes, inputs, out_type, out_shape, opset=21):
    m = helper.make_model(
        helper.make_graph(nodes, "g", inputs,
                          [helper.make_tensor_value_info("y", out_type, out_shape)]),
        opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


@pytest.mark.parametrize("target", ["cpu", "cuda-emu"])
@pytest.mark.parametrize("qtype", [TP.INT8, TP.UINT8, TP.INT16, TP.UINT16])
def test_quantize_per_axis_rounds_to_even_and_saturates(qtype, target, tmp_path):
    np_type = helper.tensor_dtype_to_np_dtype(qtype)
    info = np.iinfo(np_type)
    scale = np.array([0.5, 2.0, 0.25], np.float32)
    zp = np.array([info.min + 3, (int(info.min) + int(info.max)) // 2, info.max - 3], np_type)
    # Halves (k + 0.5 steps), values far past the range on both sides.
    x = np.stack([np.concatenate([(np.arange(-4, 4) + 0.5) * s, [1e9, -1e9]])
                  for s in scale], 1).astype(np.float32)[None]          # [1, 10, 3]
    m = qmodel([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=2)],
               [helper.make_tensor_value_info("x", TP.FLOAT, list(x.shape)),
                helper.make_tensor_value_info("s", TP.FLOAT, [3]),
                helper.make_tensor_value_info("z", qtype, [3])], qtype, list(x.shape))
    path = tmp_path / "q.onnx"
    onnx.save(m, path)
    feeds = {"x": x, "s": scale, "z": zp}
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = run_distopt(path, feeds, tmp_path, target)
    assert got.dtype == np_type
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("target", ["cpu", "cuda-emu"])
def test_blocked_dequantize_and_float16_quantize(target, tmp_path):
    """DequantizeLinear with blocks of 3 along an axis of 7 (the last block
    short), and a float16 QuantizeLinear with a scalar scale, chained;
    against ONNX's reference (ONNX Runtime has no blocked int16 kernels)."""
    q = RNG.integers(-300, 300, (2, 7, 4)).astype(np.int16)
    s = (RNG.random((2, 3, 4)) * 0.1 + 0.01).astype(np.float32)
    z = RNG.integers(-20, 20, (2, 3, 4)).astype(np.int16)
    m = qmodel([helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], axis=1,
                                 block_size=3),
                helper.make_node("Cast", ["d"], ["h"], to=TP.FLOAT16),
                helper.make_node("Constant", [], ["hs"],
                                 value=numpy_helper.from_array(np.float16(0.03))),
                helper.make_node("QuantizeLinear", ["h", "hs"], ["y"], output_dtype=TP.INT8)],
               [helper.make_tensor_value_info("q", TP.INT16, [2, 7, 4]),
                helper.make_tensor_value_info("s", TP.FLOAT, [2, 3, 4]),
                helper.make_tensor_value_info("z", TP.INT16, [2, 3, 4])], TP.INT8, [2, 7, 4])
    path = tmp_path / "b.onnx"
    onnx.save(m, path)
    feeds = {"q": q, "s": s, "z": z}
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    got = run_distopt(path, feeds, tmp_path, target)
    # The f16 quotient is computed in f32 here (as ONNX Runtime does), in
    # f16 by the reference: a halfway case may round the other way.
    assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
    assert np.mean(got == want) >= 0.95
