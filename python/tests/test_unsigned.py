"""Unsigned integer tensors (uint8/16/32/64) at the top of their range.

ONNX's node tests for uint16/32/64 use small values, which signed and
unsigned arithmetic treat alike. Here most values are at or above the
type's signed limit (2^7, 2^15, 2^31, 2^63), next to small ones, where
division, comparisons, max/min, clipping, reductions and casts to and from
floats differ between the two readings: distopt's output
must equal NumPy's, on the CPU and under cuda-emu (the GPU kernels run on
the host). A constant operand (an initializer) goes through the importer's
folds too."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import cli
from cli import DISTOPT
pytestmark = pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")

TYPES = {np.uint8: onnx.TensorProto.UINT8, np.uint16: onnx.TensorProto.UINT16,
         np.uint32: onnx.TensorProto.UINT32, np.uint64: onnx.TensorProto.UINT64}


def high_values(dtype, n, seed):
    """n values in [signed max + 1, max] (and the extremes)."""
    info = np.iinfo(dtype)
    half = info.max // 2 + 1
    rng = np.random.default_rng(seed)
    v = rng.integers(0, half, n, dtype=np.uint64).astype(dtype) + dtype(half)
    v[0], v[1] = info.max, half
    return v


def run_graph(tmp: Path, target: str, nodes, inputs, outputs, feeds, inits=()):
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, list(inits)),
                              opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    path = tmp / "m.onnx"
    onnx.save(model, str(path))
    cli.compile_and_run(path, feeds, tmp, "--target", target)
    return {o.name: np.load(tmp / "out" / f"{o.name}.npy") for o in outputs}


@pytest.mark.parametrize("target", ["cpu", "cuda-emu"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64],
                         ids=lambda d: np.dtype(d).name)
def test_unsigned_arithmetic_at_the_top_of_the_range(tmp_path, dtype, target):
    n = 64
    # High values against small ones, where a signed reading flips the
    # order; small divisors, so that quotients are not all 0 or 1.
    small = np.arange(1, n // 2 + 1, dtype=dtype)
    a, b = high_values(dtype, n, 1), high_values(dtype, n, 2)
    a[2:8] = small[:6]
    b[n // 2:] = small
    c = high_values(dtype, n, 3)  # an initializer: the folds see it
    c[::2] = small
    t = TYPES[dtype]
    vi = helper.make_tensor_value_info
    nodes = [
        helper.make_node("Div", ["a", "b"], ["div"]),
        helper.make_node("Max", ["a", "b"], ["max"]),
        helper.make_node("Min", ["a", "b"], ["min"]),
        helper.make_node("Less", ["a", "b"], ["less"]),
        helper.make_node("Greater", ["a", "c"], ["greater"]),
        helper.make_node("Sub", ["a", "b"], ["sub"]),  # wraps around
        helper.make_node("Cast", ["a"], ["to_double"], to=onnx.TensorProto.DOUBLE),
        helper.make_node("Cast", ["to_double"], ["round_trip"], to=t),
        helper.make_node("ReduceMax", ["a"], ["reduce_max"], keepdims=0),
        helper.make_node("Div", ["c", "c2"], ["const_div"]),
        helper.make_node("Clip", ["a", "lo", "hi"], ["clip"]),
        helper.make_node("Abs", ["a"], ["abs"]),
    ]
    c2 = np.full(n, 3, dtype)
    lo, hi = np.sort(high_values(dtype, 2, 4))
    inits = [numpy_helper.from_array(c, "c"), numpy_helper.from_array(c2, "c2"),
             numpy_helper.from_array(np.array(lo, dtype), "lo"),
             numpy_helper.from_array(np.array(hi, dtype), "hi")]
    outputs = [vi(name, t, [n]) for name in ["div", "max", "min", "sub", "round_trip",
                                             "const_div", "clip", "abs"]]
    outputs += [vi("less", onnx.TensorProto.BOOL, [n]), vi("greater", onnx.TensorProto.BOOL, [n]),
                vi("to_double", onnx.TensorProto.DOUBLE, [n]), vi("reduce_max", t, [])]
    got = run_graph(tmp_path, target, nodes, [vi("a", t, [n]), vi("b", t, [n])], outputs,
                    {"a": a, "b": b}, inits)
    want = {
        "div": a // b, "max": np.maximum(a, b), "min": np.minimum(a, b),
        "less": a < b, "greater": a > c, "sub": a - b,
        "to_double": a.astype(np.float64),
        # Through a double: exact up to 2^53, then the nearest double,
        # which for the top of uint64 is 2^64, out of range; ONNX leaves
        # such a cast undefined, so only values a double holds exactly.
        "round_trip": a.astype(np.float64).astype(dtype) if dtype != np.uint64 else None,
        "reduce_max": np.array(a.max(), dtype), "const_div": c // c2,
        "clip": np.clip(a, lo, hi), "abs": a,
    }
    for name, ref in want.items():
        if ref is None:
            continue
        np.testing.assert_array_equal(got[name], ref, err_msg=name)
        assert got[name].dtype == ref.dtype, name
