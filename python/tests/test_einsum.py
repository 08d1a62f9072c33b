"""Einsum, which the importer writes as transposes, sums and (batched)
matrix products, against ONNX Runtime on the CPU and under cuda-emu, and
its gradients against finite differences. The equations are those real
models use (attention with and without batch axes, MaxViT's grid
attention, bilinear forms), with ellipses, broadcasting, implicit outputs,
summed labels and three operands."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import cli
from cli import DISTOPT
from gradcheck import assert_close, distopt_gradients, numeric_gradients

pytestmark = pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")

# equation -> operand shapes
CASES = {
    "ij,jk->ik": [(2, 3), (3, 4)],
    "bij,bjk->bik": [(2, 3, 4), (2, 4, 5)],
    "B G H I D, B G H J D -> B G H I J": [(1, 2, 3, 4, 5), (1, 2, 3, 6, 5)],
    "bhij,bhjd->bhid": [(2, 3, 4, 5), (2, 3, 5, 6)],
    "i,i->": [(7,), (7,)],
    "i,j->ij": [(3,), (4,)],
    "ij->ji": [(3, 4)],
    "ij->": [(3, 4)],
    "bij->bj": [(2, 3, 4)],
    "...ij,...jk->...ik": [(2, 1, 3, 4), (1, 5, 4, 2)],
    "ij,jk,kl->il": [(2, 3), (3, 4), (4, 5)],
    "ij,jk": [(2, 3), (3, 4)],
    "ba,ca": [(2, 3), (4, 3)],
    "abc,cd->abd": [(2, 3, 4), (4, 5)],
    "ij,ij->ij": [(1, 3), (2, 3)],
    "bn,anm,bm->ba": [(2, 3), (4, 3, 5), (2, 5)],
    "ijk,ikl->jl": [(2, 3, 4), (2, 4, 5)],
    "ij,kj->": [(2, 3), (4, 3)],
}


def model(eq, shapes, dtype=TP.FLOAT):
    names = [f"x{i}" for i in range(len(shapes))]
    g = helper.make_graph(
        [helper.make_node("Einsum", names, ["y"], equation=eq)], "g",
        [helper.make_tensor_value_info(n, dtype, s) for n, s in zip(names, shapes)],
        [helper.make_tensor_value_info("y", dtype, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("target", ["cpu", "cuda-emu"])
@pytest.mark.parametrize("eq", list(CASES))
def test_einsum_matches_onnxruntime(eq, target, tmp_path):
    m = model(eq, CASES[eq])
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    rng = np.random.default_rng(0)
    feeds = {f"x{i}": rng.standard_normal(s).astype(np.float32)
             for i, s in enumerate(CASES[eq])}
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    cli.compile_and_run(path, feeds, tmp_path, "--target", target)
    got = np.load(tmp_path / "out" / "y.npy")
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_integer_einsum_matches_onnxruntime(tmp_path):
    m = model("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], TP.INT64)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    rng = np.random.default_rng(1)
    feeds = {"x0": rng.integers(-9, 9, (2, 3, 4)), "x1": rng.integers(-9, 9, (2, 4, 5))}
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    cli.compile_and_run(path, feeds, tmp_path)
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), want)


@pytest.mark.parametrize("eq", ["bhij,bhjd->bhid", "...ij,...jk->...ik", "bn,anm,bm->ba",
                                "ijk,ikl->jl"])
def test_einsum_gradients_match_finite_differences(eq, tmp_path):
    """Every operand but the first is a weight; loss = sum(einsum · c)."""
    shapes = CASES[eq]
    rng = np.random.default_rng(2)
    want_shape = list(np.einsum(eq, *[np.zeros(s) for s in shapes]).shape)
    names = [f"x{i}" for i in range(len(shapes))]
    g = helper.make_graph(
        [helper.make_node("Einsum", names, ["y"], equation=eq),
         helper.make_node("Mul", ["y", "c"], ["p"]),
         helper.make_node("ReduceSum", ["p"], ["loss"], keepdims=0)], "g",
        [helper.make_tensor_value_info("x0", TP.FLOAT, shapes[0]),
         helper.make_tensor_value_info("c", TP.FLOAT, want_shape)],
        [helper.make_tensor_value_info("loss", TP.FLOAT, [])],
        [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
         for n, s in zip(names[1:], shapes[1:])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x0": rng.standard_normal(shapes[0]).astype(np.float32),
             "c": rng.standard_normal(want_shape).astype(np.float32)}
    loss, grads = distopt_gradients(m, feeds, tmp_path)
    assert set(grads) == set(names[1:])
    numeric = numeric_gradients(m, feeds, set(grads))
    for n in grads:
        assert_close(grads[n], numeric[n], what=f"{eq}: {n}")
