"""GridSample against ONNX Runtime (which agrees with PyTorch's
grid_sample): every mode, padding and align_corners, 2-D and 3-D, a grid
reaching well beyond the input's edges; float16; on the CPU and under
cuda-emu (the GPU kernels). The gradients are checked against PyTorch
(test_autodiff's grid_sample_cross_entropy) and finite differences."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper

import cli
from cli import DISTOPT

pytestmark = pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")
RNG = np.random.default_rng(13)


def check(x, grid, tmp_path, target="cpu", tol=1e-5, **attrs):
    elt = helper.np_dtype_to_tensor_dtype(x.dtype)
    m = helper.make_model(
        helper.make_graph([helper.make_node("GridSample", ["x", "g"], ["y"], **attrs)], "g",
                          [helper.make_tensor_value_info("x", elt, list(x.shape)),
                           helper.make_tensor_value_info("g", elt, list(grid.shape))],
                          [helper.make_tensor_value_info("y", elt, None)]),
        opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 9
    path = tmp_path / "gs.onnx"
    onnx.save(m, path)
    feeds = {"x": x, "g": grid}
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    cli.compile_and_run(path, feeds, tmp_path, "--target", target)
    got = np.load(tmp_path / "out" / "y.npy")
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("mode,padding,align", list(itertools.product(
    ["linear", "nearest", "cubic"], ["zeros", "border", "reflection"], [0, 1])))
def test_2d_matches_onnx_runtime(mode, padding, align, tmp_path):
    x = RNG.standard_normal((2, 3, 5, 4)).astype(np.float32)
    grid = (RNG.random((2, 6, 7, 2)) * 3.6 - 1.8).astype(np.float32)
    check(x, grid, tmp_path, mode=mode, padding_mode=padding, align_corners=align)


@pytest.mark.parametrize("mode,padding", [("linear", "reflection"), ("nearest", "border"),
                                          ("linear", "zeros")])
def test_3d_matches_onnx_runtime(mode, padding, tmp_path):
    x = RNG.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    grid = (RNG.random((1, 2, 3, 4, 3)) * 3 - 1.5).astype(np.float32)
    check(x, grid, tmp_path, mode=mode, padding_mode=padding, align_corners=0)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_emulated_gpu_and_float16(mode, tmp_path):
    x = RNG.standard_normal((2, 2, 6, 5)).astype(np.float32)
    grid = (RNG.random((2, 4, 3, 2)) * 3 - 1.5).astype(np.float32)
    check(x, grid, tmp_path, "cuda-emu", mode=mode, padding_mode="border")
    check(x.astype(np.float16), grid.astype(np.float16), tmp_path, tol=4e-3, mode=mode,
          padding_mode="zeros", align_corners=1)


@pytest.mark.parametrize("mode,padding", [("linear", "border"), ("cubic", "reflection"),
                                          ("nearest", "zeros")])
def test_nan_grid_positions_give_zero(mode, padding, tmp_path):
    """A NaN grid coordinate samples nothing: 0, as PyTorch's grid_sample
    (ONNX Runtime's result there is undefined); the other positions are
    ONNX Runtime's."""
    x = RNG.standard_normal((1, 2, 4, 5)).astype(np.float32)
    grid = (RNG.random((1, 3, 4, 2)) * 2.4 - 1.2).astype(np.float32)
    grid[0, 1, 2, 0] = np.nan
    grid[0, 2, 0, 1] = np.nan
    m = helper.make_model(
        helper.make_graph([helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode,
                                            padding_mode=padding)], "g",
                          [helper.make_tensor_value_info("x", TP.FLOAT, list(x.shape)),
                           helper.make_tensor_value_info("g", TP.FLOAT, list(grid.shape))],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 20)])
    m.ir_version = 9
    path = tmp_path / "gs.onnx"
    onnx.save(m, path)
    clean = np.nan_to_num(grid)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x, "g": clean})[0]
    cli.compile_and_run(path, {"x": x, "g": grid}, tmp_path)
    got = np.load(tmp_path / "out" / "y.npy")
    nan = np.isnan(grid).any(-1)[0]
    assert (got[0][:, nan] == 0).all()
    np.testing.assert_allclose(got[0][:, ~nan], want[0][:, ~nan], rtol=1e-5, atol=1e-5)
