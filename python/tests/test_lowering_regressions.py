"""Lowering bugs found by review, compiled and run against ONNX Runtime (or
ONNX's reference evaluator where ORT has no kernel):
* f16 sums, dot products and normalisation statistics accumulate in f32
  (an f16 running sum stops at 2048);
* integer base ^ float exponent is computed in floating point;
* integer Gemm with fractional alpha/beta;
* a MaxPool window entirely in the padding gives the lowest finite value;
* a graph output listed twice gets two distinct output files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx.reference import ReferenceEvaluator

import cli
from cli import DISTOPT
pytestmark = pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def compile_and_run(tmp: Path, nodes, inputs, outputs, feeds, inits=(), opset=18):
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    path = tmp / "m.onnx"
    onnx.save(model, str(path))
    return model, cli.compile_and_run(path, feeds, tmp)


F16_ONES = np.ones((1, 4096), np.float16)


@pytest.mark.parametrize("case", ["reduce_sum", "reduce_mean", "matmul", "layer_norm"])
def test_f16_accumulates_in_f32(tmp_path, case):
    axes = helper.make_tensor("axes", TP.INT64, [1], [1])
    if case == "reduce_sum":
        nodes, x, extra = [helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)], F16_ONES, {}
        outs, inits = [vi("y", TP.FLOAT16, [1])], [axes]
    elif case == "reduce_mean":
        nodes, x, extra = [helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0)], F16_ONES, {}
        outs, inits = [vi("y", TP.FLOAT16, [1])], [axes]
    elif case == "matmul":
        nodes, x = [helper.make_node("MatMul", ["x", "b"], ["y"])], F16_ONES
        extra, outs, inits = {"b": np.ones((4096, 1), np.float16)}, [vi("y", TP.FLOAT16, [1, 1])], []
    else:
        nodes = [helper.make_node("LayerNormalization", ["x", "b"], ["y"], axis=-1)]
        x = np.tile(np.array([2, 0], np.float16), 2048).reshape(1, 4096)
        extra, outs, inits = {"b": np.ones(4096, np.float16)}, [vi("y", TP.FLOAT16, [1, 4096])], []
    ins = [vi("x", TP.FLOAT16, [1, 4096])] + [vi(k, TP.FLOAT16, list(v.shape)) for k, v in extra.items()]
    feeds = {"x": x, **extra}
    model, _ = compile_and_run(tmp_path, nodes, ins, outs, feeds, inits)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = np.load(tmp_path / "out" / "y.npy")
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=2e-3)


def test_integer_pow_with_float_exponent(tmp_path):
    feeds = {"a": np.array([4, 9, 8], np.int32), "b": np.array([0.5, 0.5, 1 / 3], np.float32)}
    model, _ = compile_and_run(tmp_path, [helper.make_node("Pow", ["a", "b"], ["y"])],
                               [vi("a", TP.INT32, [3]), vi("b", TP.FLOAT, [3])],
                               [vi("y", TP.INT32, [3])], feeds)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), ref)


def test_integer_gemm_fractional_alpha_beta(tmp_path):
    feeds = {"a": np.array([[2, 4]], np.int64), "b": np.array([[1], [1]], np.int64),
             "c": np.array([10], np.int64)}
    model, _ = compile_and_run(tmp_path, [helper.make_node("Gemm", ["a", "b", "c"], ["y"], alpha=0.5, beta=0.5)],
                               [vi("a", TP.INT64, [1, 2]), vi("b", TP.INT64, [2, 1]), vi("c", TP.INT64, [1])],
                               [vi("y", TP.INT64, [1, 1])], feeds)
    ref = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), ref)  # 0.5*6 + 0.5*10 = 8


def test_maxpool_window_in_padding(tmp_path):
    feeds = {"x": np.ones((1, 1, 1, 1), np.float32)}
    model, _ = compile_and_run(
        tmp_path, [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 1], dilations=[2, 1],
                                    pads=[1, 0, 1, 0])],
        [vi("x", TP.FLOAT, [1, 1, 1, 1])], [vi("y", TP.FLOAT, None)], feeds)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), ref)


def test_output_listed_twice(tmp_path):
    feeds = {"x": np.array([-1.0, 2.0], np.float32)}
    _, run = compile_and_run(tmp_path, [helper.make_node("Relu", ["x"], ["y"])],
                             [vi("x", TP.FLOAT, [2])], [vi("y", TP.FLOAT, [2])] * 2, feeds)
    for name in ("y", "y_1"):
        np.testing.assert_array_equal(np.load(tmp_path / "out" / f"{name}.npy"), [0.0, 2.0])
