"""GatherElements, ScatterElements and TopK with indices computed at run
time, against ONNX Runtime, on the CPU and under cuda-emu (the GPU
kernels): both lowerings of ScatterElements -- the parallel one (a short
axis, indices spanning the data off it) and the sequential loop (a long
axis, or indices shorter than the data off the axis) -- with duplicate
and negative indices, for every reduction."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx.reference import ReferenceEvaluator

import cli
from cli import DISTOPT

pytestmark = pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")
RNG = np.random.default_rng(11)

# name -> (data shape, indices shape, axis): which lowering each takes.
SHAPES = {
    "parallel": ((3, 6, 4), (3, 9, 4), 1),        # axis 6 <= 256, spans the data
    "long_axis": ((2, 300), (2, 700), 1),          # axis 300 > 256: the loop
    "short_indices": ((4, 5), (7, 3), 0),          # indices narrower off the axis
}


def model(nodes, inputs, outputs):
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs),
                          opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def run_both(m, feeds, tmp_path, target):
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    cli.compile_and_run(path, feeds, tmp_path, "--target", target)
    got = {o.name: np.load(tmp_path / "out" / f"{o.name}.npy") for o in m.graph.output}
    return want, got


@pytest.mark.parametrize("target", ["cpu", "cuda-emu"])
@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_scatter_elements_matches_onnx_runtime(shape, reduction, target, tmp_path):
    (ds, ish, axis) = SHAPES[shape]
    n = ds[axis]
    # Duplicates (more indices than positions) and negative ones.
    idx = RNG.integers(-n, n, ish).astype(np.int64)
    if reduction == "none":
        # ONNX Runtime leaves duplicates undefined for "none": distinct
        # positions per column (as many as the axis holds), in random order,
        # some of them negative.
        m = min(ish[axis], n)
        others = [s for d, s in enumerate(ish) if d != axis]
        cols = np.stack([RNG.permutation(n)[:m] for _ in range(int(np.prod(others)))])
        idx = np.moveaxis(cols.reshape(others + [m]), -1, axis)
        idx = (idx - n * (RNG.random(idx.shape) < 0.3)).astype(np.int64)
    feeds = {"x": RNG.standard_normal(ds).astype(np.float32), "i": idx,
             "u": RNG.standard_normal(idx.shape).astype(np.float32) + 1.5}
    m = model([helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=axis,
                                reduction=reduction)],
              [helper.make_tensor_value_info("x", TP.FLOAT, list(ds)),
               helper.make_tensor_value_info("i", TP.INT64, list(idx.shape)),
               helper.make_tensor_value_info("u", TP.FLOAT, list(idx.shape))],
              [helper.make_tensor_value_info("y", TP.FLOAT, list(ds))])
    want, got = run_both(m, feeds, tmp_path, target)
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", ["cpu", "cuda-emu"])
def test_gather_elements_and_top_k_match_onnx_runtime(target, tmp_path):
    """Run-time indices (negative ones too) and a TopK with ties, both
    largest and smallest first."""
    x = np.round(RNG.standard_normal((3, 40)), 1).astype(np.float32)  # ties
    idx = RNG.integers(-40, 40, (3, 25)).astype(np.int64)
    k = helper.make_tensor("k", TP.INT64, [1], [7])
    m = model([helper.make_node("GatherElements", ["x", "i"], ["g"], axis=1),
               helper.make_node("Constant", [], ["kk"], value=k),
               helper.make_node("TopK", ["x", "kk"], ["v", "vi"], axis=1),
               helper.make_node("TopK", ["x", "kk"], ["s", "si"], axis=1, largest=0)],
              [helper.make_tensor_value_info("x", TP.FLOAT, [3, 40]),
               helper.make_tensor_value_info("i", TP.INT64, [3, 25])],
              [helper.make_tensor_value_info(n, t, s) for n, t, s in [
                  ("g", TP.FLOAT, [3, 25]), ("v", TP.FLOAT, [3, 7]), ("vi", TP.INT64, [3, 7]),
                  ("s", TP.FLOAT, [3, 7]), ("si", TP.INT64, [3, 7])]])
    want, got = run_both(m, {"x": x, "i": idx}, tmp_path, target)
    for name, w in zip(["g", "v", "vi", "s", "si"], want):
        np.testing.assert_array_equal(got[name], w, err_msg=name)


def test_top_k_orders_nan_as_the_largest(tmp_path):
    """NaN is the largest value (ONNX's reference sorts with NumPy): first
    for largest, last for smallest; every output is one of the inputs."""
    x = np.array([[1.0, np.nan, 2.0, np.nan, -1.0]], np.float32)
    k = helper.make_tensor("k", TP.INT64, [1], [5])
    m = model([helper.make_node("Constant", [], ["kk"], value=k),
               helper.make_node("TopK", ["x", "kk"], ["v", "vi"], axis=1),
               helper.make_node("TopK", ["x", "kk"], ["s", "si"], axis=1, largest=0)],
              [helper.make_tensor_value_info("x", TP.FLOAT, [1, 5])],
              [helper.make_tensor_value_info(n, t, [1, 5]) for n, t in [
                  ("v", TP.FLOAT), ("vi", TP.INT64), ("s", TP.FLOAT), ("si", TP.INT64)]])
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    cli.compile_and_run(path, {"x": x}, tmp_path)
    got = {n: np.load(tmp_path / "out" / f"{n}.npy") for n in ["v", "vi", "s", "si"]}
    np.testing.assert_array_equal(got["vi"], [[1, 3, 2, 0, 4]])
    np.testing.assert_array_equal(got["v"], [[np.nan, np.nan, 2, 1, -1]])
    np.testing.assert_array_equal(got["si"], [[4, 0, 2, 1, 3]])
    np.testing.assert_array_equal(got["s"], [[-1, 1, 2, np.nan, np.nan]])


@pytest.mark.parametrize("shape", ["parallel", "long_axis"])
def test_scatter_max_keeps_the_element_for_a_nan_update(shape, tmp_path):
    """As ONNX's reference (Python's max(element, update)): a NaN update
    changes nothing. (ONNX Runtime lets some through, depending on the
    order of duplicates.)"""
    ds, ish, axis = SHAPES[shape]
    idx = RNG.integers(0, ds[axis], ish).astype(np.int64)
    u = RNG.standard_normal(ish).astype(np.float32)
    u[..., ::3] = np.nan
    x = RNG.standard_normal(ds).astype(np.float32)
    m = model([helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=axis,
                                reduction="max")],
              [helper.make_tensor_value_info("x", TP.FLOAT, list(ds)),
               helper.make_tensor_value_info("i", TP.INT64, list(ish)),
               helper.make_tensor_value_info("u", TP.FLOAT, list(ish))],
              [helper.make_tensor_value_info("y", TP.FLOAT, list(ds))])
    feeds = {"x": x, "i": idx, "u": u}
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    cli.compile_and_run(path, feeds, tmp_path)
    got = np.load(tmp_path / "out" / "y.npy")
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("target", ["cpu", "cuda-emu"])
@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_nd_with_run_time_indices_matches_onnx_runtime(reduction, target, tmp_path):
    """`x[rows, cols] = v` (index_put) with indices computed at run time:
    ScatterND as a ScatterElements over the data's rows; duplicates for the
    reductions, negative indices."""
    x = RNG.standard_normal((5, 4, 3)).astype(np.float32)
    if reduction == "none":
        flat = RNG.permutation(20)[:6]
        idx = np.stack([flat // 4, flat % 4], axis=-1).reshape(2, 3, 2)
        idx[0, 0] -= [5, 4]
    else:
        idx = np.stack([RNG.integers(-5, 5, (2, 3)), RNG.integers(0, 4, (2, 3))], axis=-1)
    idx = idx.astype(np.int64)
    u = RNG.standard_normal((2, 3, 3)).astype(np.float32)
    m = model([helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction=reduction)],
              [helper.make_tensor_value_info("x", TP.FLOAT, [5, 4, 3]),
               helper.make_tensor_value_info("i", TP.INT64, [2, 3, 2]),
               helper.make_tensor_value_info("u", TP.FLOAT, [2, 3, 3])],
              [helper.make_tensor_value_info("y", TP.FLOAT, [5, 4, 3])])
    want, got = run_both(m, {"x": x, "i": idx, "u": u}, tmp_path, target)
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd_with_run_time_indices_matches_onnx_runtime(batch_dims, tmp_path):
    x = RNG.standard_normal((3, 4, 5, 2)).astype(np.float32)
    k = 2
    shape = [3, 6, k] if batch_dims else [6, k]
    idx = np.stack([RNG.integers(-4, 4, shape[:-1]) if batch_dims else
                    RNG.integers(-3, 3, shape[:-1]),
                    RNG.integers(0, 4 if not batch_dims else 5, shape[:-1])], axis=-1)
    idx = idx.astype(np.int64)
    out = [3, 6, 2] if batch_dims else [6, 5, 2]
    m = model([helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims)],
              [helper.make_tensor_value_info("x", TP.FLOAT, [3, 4, 5, 2]),
               helper.make_tensor_value_info("i", TP.INT64, shape)],
              [helper.make_tensor_value_info("y", TP.FLOAT, out)])
    want, got = run_both(m, {"x": x, "i": idx}, tmp_path, "cpu")
    np.testing.assert_array_equal(got["y"], want[0])
