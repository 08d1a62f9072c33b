"""Randomised differential tests of the CPU code generator against ONNX
Runtime (graph optimisations off, so it computes each op as written).

The loop passes (row fusion, register reductions, parallel loops), the
folding of transposes into matrix products, divisions by constants, the
NCHW convolution and the unrolled pooling windows all rest on assumptions
about shapes, axes and aliasing. Each case here is one seed: a small random
graph of the ops those passes touch (softmax / log-softmax / reductions on
any axis, transposes, layer norm, broadcast elementwise ops, matmuls with
transposed operands), or a random convolution or pooling configuration
(groups, strides, dilations, pads, bias), run with 1-3 threads. A failing
seed reproduces with `pytest -k 'graph and 17'` (for example)."""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DISTOPT_BUILD_DIR", ROOT / "build"))
DISTOPT = BUILD / "bin" / "distopt"

pytestmark = pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")

F32 = np.float32


def _model(nodes, x_shape, outputs, inits, opset=18) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "random",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _compare(tmp: Path, model: onnx.ModelProto, x: np.ndarray, threads: int,
             rtol: float = 1e-4, atol: float = 1e-4) -> None:
    path = tmp / "model.onnx"
    onnx.save(model, str(path))
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    want = sess.run(None, {"x": x})
    np.save(tmp / "x.npy", x)
    bundle = tmp / "m.dx"
    r = subprocess.run([str(DISTOPT), "compile", str(path), "-o", str(bundle)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(bundle / "m"), "--input", f"x={tmp / 'x.npy'}",
                        "--output-dir", str(tmp / "out")],
                       capture_output=True, text=True,
                       env=dict(os.environ, DISTOPT_NUM_THREADS=str(threads)))
    assert r.returncode == 0, r.stderr
    for name, ref in zip(names, want):
        got = np.load(tmp / "out" / f"{name}.npy")
        assert got.shape == ref.shape, name
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol, err_msg=name)


def _random_graph(seed: int):
    """A chain of 2-6 ops on a small tensor with unit and non-unit dims."""
    R = random.Random(seed)
    rng = np.random.default_rng(seed)
    rank = R.choice([2, 3, 3, 4])
    shape = [R.choice([1, 2, 3, 4, 5, 8]) for _ in range(rank)]
    nodes, inits, values = [], [], [("x", list(shape))]
    count = [0]

    def fresh(prefix):
        count[0] += 1
        return f"{prefix}{count[0]}"

    def weight(prefix, array):
        name = fresh(prefix)
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    for _ in range(R.randint(2, 6)):
        v, s = R.choice(values[-2:])
        r, out = len(s), fresh("t")
        op = R.choice(["softmax", "logsoftmax", "reduce", "normalize", "transpose",
                       "div", "broadcast", "layernorm", "matmul", "matmul_t"])
        if op in ("softmax", "logsoftmax"):
            nodes.append(helper.make_node("Softmax" if op == "softmax" else "LogSoftmax",
                                          [v], [out], axis=R.randrange(-r, r)))
            ns = s
        elif op == "reduce":
            axes = sorted(R.sample(range(r), R.randint(1, r)))
            keep = 1 if len(axes) == r else R.choice([0, 1])
            nodes.append(helper.make_node(R.choice(["ReduceSum", "ReduceMean", "ReduceMax"]),
                                          [v, weight("axes", np.array(axes, np.int64))], [out],
                                          keepdims=keep))
            ns = [1 if i in axes else d for i, d in enumerate(s)] if keep else \
                [d for i, d in enumerate(s) if i not in axes]
        elif op == "normalize":
            # x - reduce(x) (or x / max) along one axis: a per-row value.
            m = fresh("m")
            nodes.append(helper.make_node(R.choice(["ReduceMean", "ReduceMax"]),
                                          [v, weight("axes", np.array([R.randrange(r)], np.int64))],
                                          [m], keepdims=1))
            nodes.append(helper.make_node(R.choice(["Sub", "Mul"]), [v, m], [out]))
            ns = s
        elif op == "transpose":
            perm = list(range(r))
            R.shuffle(perm)
            nodes.append(helper.make_node("Transpose", [v], [out], perm=perm))
            ns = [s[p] for p in perm]
        elif op == "div":
            c = R.choice([3.0, -0.5, 7.0, 1e-3, 0.0, float("inf")])
            shape_c = R.choice([[], [1], [1] * r])
            nodes.append(helper.make_node("Div", [v, weight("c", np.full(shape_c, c, F32))], [out]))
            ns = s
        elif op == "broadcast":
            bshape = [d if R.random() < 0.5 else 1 for d in s]
            nodes.append(helper.make_node(R.choice(["Add", "Mul", "Sub", "Max"]),
                                          [v, weight("w", rng.standard_normal(bshape).astype(F32))],
                                          [out]))
            ns = s
        elif op == "layernorm":
            axis = R.randrange(-r, r)
            ps = s[axis:]
            nodes.append(helper.make_node(
                "LayerNormalization",
                [v, weight("g", rng.standard_normal(ps).astype(F32)),
                 weight("b", rng.standard_normal(ps).astype(F32))], [out], axis=axis))
            ns = s
        else:
            n, k = R.choice([1, 3, 6]), s[-1]
            if op == "matmul":
                nodes.append(helper.make_node(
                    "MatMul", [v, weight("W", rng.standard_normal((k, n)).astype(F32))], [out]))
            else:
                # The right operand is a transpose of a [..., n, k] weight.
                bshape = list(s[:-2]) + [n, k] if r >= 3 and R.random() < 0.5 else [n, k]
                perm = list(range(len(bshape)))
                perm[-1], perm[-2] = perm[-2], perm[-1]
                t = fresh("T")
                nodes.append(helper.make_node(
                    "Transpose", [weight("W", rng.standard_normal(bshape).astype(F32))], [t],
                    perm=perm))
                nodes.append(helper.make_node("MatMul", [v, t], [out]))
            ns = list(s[:-1]) + [n]
        values.append((out, ns))
    outputs = [values[-1][0]]
    if len(values) > 2 and R.random() < 0.4:
        outputs.append(values[R.randrange(1, len(values) - 1)][0])
    model = _model(nodes, shape, list(dict.fromkeys(outputs)), inits)
    x = (rng.standard_normal(shape) * 2).astype(F32)
    return model, x, R.choice([1, 2, 3])


@pytest.mark.parametrize("seed", range(40))
def test_graph(tmp_path, seed):
    model, x, threads = _random_graph(seed)
    try:
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except Exception:  # noqa: BLE001 - an invalid draw (e.g. matmul of a reduced scalar)
        pytest.skip("the random draw is not a valid ONNX graph")
    _compare(tmp_path, model, x, threads)


def _random_conv(seed: int):
    R = random.Random(1000 + seed)
    rng = np.random.default_rng(1000 + seed)
    while True:
        n, g = R.choice([1, 2, 3]), R.choice([1, 2, 3, 4, 8, 9, 16])
        cg, mg = R.choice([1, 2, 3]), R.choice([1, 2, 3])
        h, w = R.randint(1, 12), R.randint(1, 12)
        kh, kw = R.randint(1, 4), R.randint(1, 4)
        st, dl = [R.randint(1, 3), R.randint(1, 3)], [R.randint(1, 3), R.randint(1, 3)]
        pads = [R.randint(0, 3) for _ in range(4)]
        ho = (h + pads[0] + pads[2] - dl[0] * (kh - 1) - 1) // st[0] + 1
        wo = (w + pads[1] + pads[3] - dl[1] * (kw - 1) - 1) // st[1] + 1
        if ho >= 1 and wo >= 1:
            break
    x = rng.standard_normal((n, g * cg, h, w)).astype(F32)
    inits = [numpy_helper.from_array(rng.standard_normal((g * mg, cg, kh, kw)).astype(F32), "W")]
    ins = ["x", "W"]
    if R.random() < 0.6:
        inits.append(numpy_helper.from_array(rng.standard_normal(g * mg).astype(F32), "B"))
        ins.append("B")
    nodes = [helper.make_node("Conv", ins, ["c"], group=g, strides=st, dilations=dl,
                              pads=pads, kernel_shape=[kh, kw])]
    # A batch norm and ReLU after it (fused per row), sometimes a pooling.
    c = g * mg
    for name, arr in (("s", rng.standard_normal(c)), ("b", rng.standard_normal(c)),
                      ("mean", rng.standard_normal(c)), ("var", rng.random(c) + 0.5)):
        inits.append(numpy_helper.from_array(arr.astype(F32), name))
    nodes.append(helper.make_node("BatchNormalization", ["c", "s", "b", "mean", "var"], ["bn"]))
    nodes.append(helper.make_node("Relu", ["bn"], ["r"]))
    pool = R.choice([None, "MaxPool", "AveragePool"])
    k = [R.randint(1, min(3, ho)), R.randint(1, min(3, wo))]
    if pool:
        attrs = dict(kernel_shape=k, strides=[R.randint(1, 2), R.randint(1, 2)])
        if pool == "AveragePool":
            attrs["count_include_pad"] = R.choice([0, 1])
        nodes.append(helper.make_node(pool, ["r"], ["y"], **attrs))
    else:
        nodes.append(helper.make_node("Identity", ["r"], ["y"]))
    return _model(nodes, x.shape, ["y"], inits, opset=17), x, R.choice([1, 2, 3])


@pytest.mark.parametrize("seed", range(40))
def test_conv_bn_pool(tmp_path, seed):
    model, x, threads = _random_conv(seed)
    _compare(tmp_path, model, x, threads)
