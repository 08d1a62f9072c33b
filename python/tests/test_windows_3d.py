"""3-D convolutions, transposed convolutions and pools, and dilated average
pooling, against ONNX Runtime on the CPU and under cuda-emu.

distopt runs a 3-D Conv or ConvTranspose as 2-D ones, one per tap of the
kernel's depth, over the input's depth slices taken as a batch (the
importer's conv3dByDepth, convTranspose3dByDepth), and 3-D or dilated pools
as reductions of strided slices (poolBySlices): the cases cover strides, pads (explicit and auto_pad),
dilations, groups, bias, ceil_mode and count_include_pad in each
dimension, where those decompositions could go wrong. Gradients: the
conv3d_cross_entropy model of test_autodiff.py, against PyTorch."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import cli
from cli import DISTOPT
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
    "conv_transpose": (dict(op="ConvTranspose"), [2, 3, 3, 4, 5], [3, 4, 2, 3, 3]),
    "conv_transpose_strided_padded_dilated_bias": (
        dict(op="ConvTranspose", strides=[2, 2, 1], pads=[1, 0, 1, 0, 1, 1],
             dilations=[2, 1, 2], output_padding=[1, 1, 0], bias=True),
        [1, 3, 4, 4, 5], [3, 2, 3, 3, 2]),
    "conv_transpose_grouped_same_lower": (
        dict(op="ConvTranspose", group=2, strides=[2, 1, 2], auto_pad="SAME_LOWER"),
        [1, 4, 3, 4, 5], [4, 3, 3, 2, 3]),
    "conv_transpose_output_shape": (
        dict(op="ConvTranspose", strides=[2, 2, 2], output_shape=[5, 6, 3]),
        [1, 2, 3, 3, 2], [2, 3, 2, 2, 2]),
    "conv_transpose_output_shape_beyond": (
        # An output_shape past the natural [6, 6, 4]: negative pads (ONNX's
        # split: depth [0, -1], height [-1, -1], width [0, -1]), zeros grown
        # around the result, the bias added after them. ONNX Runtime and
        # ONNX's reference evaluator refuse it; the reference is the natural
        # output, grown so.
        dict(op="ConvTranspose", strides=[2, 2, 2], output_shape=[7, 8, 5], bias=True,
             reference=((0, 1), (1, 1), (0, 1))),
        [1, 2, 3, 3, 2], [2, 3, 2, 2, 2]),
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
    reference = attrs.pop("reference", "onnxruntime")
    rng = np.random.default_rng(0)
    inits, inputs = [], ["x"]
    if w_shape:
        inits.append(numpy_helper.from_array(rng.standard_normal(w_shape).astype(np.float32), "w"))
        inputs.append("w")
        if bias:
            m = w_shape[1] * attrs.get("group", 1) if op == "ConvTranspose" else w_shape[0]
            inits.append(numpy_helper.from_array(
                rng.standard_normal(m).astype(np.float32), "b"))
            inputs.append("b")
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"], **attrs)], "g",
                              [helper.make_tensor_value_info("x", TP.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    x = rng.standard_normal(x_shape).astype(np.float32)
    if isinstance(reference, tuple):
        natural = helper.make_model(helper.make_graph(
            [helper.make_node(op, ["x", "w"], ["y"], strides=attrs["strides"])], "g",
            list(graph.input), list(graph.output), inits[:1]),
            opset_imports=[helper.make_opsetid("", 19)])
        natural.ir_version = 9
        want = ort.InferenceSession(natural.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        bias_values = numpy_helper.to_array(inits[1]).reshape(-1, 1, 1, 1)
        want = np.pad(want, ((0, 0), (0, 0), *reference)) + bias_values
    else:
        want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
            None, {"x": x})[0]
    cli.compile_and_run(path, {"x": x}, tmp_path, "--target", target)
    got = np.load(tmp_path / "out" / "y.npy")
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
