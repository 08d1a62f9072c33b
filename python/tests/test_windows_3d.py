"""3-D convolutions and pools, and dilated average pooling, against ONNX
Runtime on the CPU and under cuda-emu.

distopt runs a 3-D Conv as 2-D convolutions, one per tap of the kernel's
depth, over the input's depth slices taken as a batch (the importer's
conv3dByDepth), and 3-D or dilated pools as reductions of strided slices
(poolBySlices): the cases cover strides, pads (explicit and auto_pad),
dilations, groups, bias, ceil_mode and count_include_pad in each
dimension, where those decompositions could go wrong. Gradients: the
conv3d_cross_entropy model of test_autodiff.py, against PyTorch."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
DISTOPT = Path(os.environ.get("DISTOPT_BUILD_DIR", ROOT / "build")) / "bin" / "distopt"
pytestmark = pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")

CASES = {
    "conv": (dict(op="Conv"), [2, 3, 5, 6, 7], [4, 3, 3, 3, 3]),
    "conv_strided_padded_dilated_bias": (
        dict(op="Conv", strides=[2, 1, 2], pads=[1, 0, 1, 2, 1, 0], dilations=[2, 1, 1],
             bias=True), [2, 3, 9, 6, 7], [4, 3, 3, 2, 3]),
    "conv_grouped_same_upper": (
        dict(op="Conv", group=2, auto_pad="SAME_UPPER", strides=[2, 2, 2]),
        [1, 4, 5, 6, 7], [6, 2, 3, 3, 3]),
    "conv_depthwise_1xkxk": (dict(op="Conv", group=4, pads=[0, 1, 1, 0, 1, 1]),
                             [1, 4, 5, 6, 7], [4, 1, 1, 3, 3]),
    "maxpool_ceil": (dict(op="MaxPool", kernel_shape=[2, 3, 2], strides=[2, 2, 1],
                          pads=[1, 1, 0, 0, 1, 1], ceil_mode=1), [2, 3, 7, 6, 5], None),
    "maxpool_dilated": (dict(op="MaxPool", kernel_shape=[2, 2, 2], dilations=[2, 1, 2]),
                        [1, 2, 7, 6, 8], None),
    "avgpool_count_pad": (dict(op="AveragePool", kernel_shape=[3, 3, 3], strides=[2, 2, 2],
                               pads=[1, 1, 1, 1, 1, 1], count_include_pad=1),
                          [2, 3, 7, 6, 5], None),
    "avgpool_ceil_no_count_pad": (dict(op="AveragePool", kernel_shape=[2, 3, 3],
                                       strides=[2, 2, 2], pads=[0, 1, 1, 1, 0, 1],
                                       ceil_mode=1), [1, 2, 6, 7, 6], None),
    "avgpool_2d_dilated_ceil": (dict(op="AveragePool", kernel_shape=[3, 3], strides=[1, 2],
                                     dilations=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
                                [2, 3, 9, 8], None),
    "avgpool_1d_dilated_count_pad": (dict(op="AveragePool", kernel_shape=[3], dilations=[2],
                                          pads=[2, 1], count_include_pad=1), [2, 3, 9], None),
}


@pytest.mark.parametrize("target", ["cpu", "cuda-emu"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_window_matches_onnxruntime(case, target, tmp_path):
    attrs, x_shape, w_shape = CASES[case]
    attrs = dict(attrs)
    op, bias = attrs.pop("op"), attrs.pop("bias", False)
    rng = np.random.default_rng(0)
    inits, inputs = [], ["x"]
    if w_shape:
        inits.append(numpy_helper.from_array(rng.standard_normal(w_shape).astype(np.float32), "w"))
        inputs.append("w")
        if bias:
            inits.append(numpy_helper.from_array(
                rng.standard_normal(w_shape[0]).astype(np.float32), "b"))
            inputs.append("b")
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"], **attrs)], "g",
                              [helper.make_tensor_value_info("x", TP.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    x = rng.standard_normal(x_shape).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    r = subprocess.run([str(DISTOPT), "compile", str(path), "--target", target,
                        "-o", str(tmp_path / "m.dx")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    np.save(tmp_path / "x.npy", x)
    r = subprocess.run([str(tmp_path / "m.dx" / "m"), "--input", f"x={tmp_path / 'x.npy'}",
                        "--output-dir", str(tmp_path / "out")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = np.load(tmp_path / "out" / "y.npy")
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_conv_transpose_3d_is_refused(tmp_path):
    graph = helper.make_graph(
        [helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up3d")], "g",
        [helper.make_tensor_value_info("x", TP.FLOAT, [1, 2, 3, 4, 5])],
        [helper.make_tensor_value_info("y", TP.FLOAT, None)],
        [numpy_helper.from_array(np.ones((2, 3, 2, 2, 2), np.float32), "w")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    r = subprocess.run([str(DISTOPT), "compile", str(path), "-o", str(tmp_path / "m.dx")],
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert "'up3d'" in r.stderr and "3-D transposed convolutions are not supported" in r.stderr
