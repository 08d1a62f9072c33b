"""A gradient-check harness for distopt-autodiff: any ONNX graph whose first
output is a scalar loss, its weights as initializers.

`distopt_gradients` compiles the graph with `distopt compile --gradients`
and runs it; `numeric_gradients` differentiates the same graph numerically
with ONNX Runtime (central differences, the weight made a graph input), so
the two are independent.
"""
from __future__ import annotations

import copy
import re
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from cli import DISTOPT, run


def distopt_gradients(model: onnx.ModelProto, feeds: dict, workdir: Path,
                      extra=()) -> tuple[np.ndarray, dict]:
    """(loss, {weight name: gradient}) from a compiled bundle."""
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "model.onnx"
    onnx.save(model, str(path))
    bundle = workdir / "m.dx"
    run(DISTOPT, "compile", path, "--gradients", *extra, "-o", bundle)
    args = []
    for name, value in feeds.items():
        np.save(workdir / f"{name}.npy", value)
        args += ["--input", f"{name}={workdir / (name + '.npy')}"]
    out = workdir / "out"
    run(bundle / "m", *args, "--output-dir", out)
    loss_name = "loss" if "--loss" in extra else model.graph.output[0].name
    loss = np.load(out / f"{re.sub(r'[^A-Za-z0-9._-]', '_', loss_name)}.npy")
    grads = {}
    for init in model.graph.initializer:
        f = out / (re.sub(r"[^A-Za-z0-9._-]", "_", "grad:" + init.name) + ".npy")
        if f.exists():
            grads[init.name] = np.load(f)
    return loss, grads


def numeric_gradients(model: onnx.ModelProto, feeds: dict, names, eps=1e-3,
                      max_elements=64, seed=0) -> dict:
    """Central differences of the loss with respect to (up to
    `max_elements` sampled elements of) each named weight: {name: (indices,
    values)}."""
    rng = np.random.default_rng(seed)
    m = copy.deepcopy(model)
    weights = {}
    for init in list(m.graph.initializer):
        if init.name in names:
            weights[init.name] = numpy_helper.to_array(init).astype(init_dtype(init))
            m.graph.initializer.remove(init)
            m.graph.input.append(onnx.helper.make_tensor_value_info(
                init.name, init.data_type, list(init.dims)))
    loss_name = m.graph.output[0].name
    try:
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        run = lambda values: sess.run([loss_name], values)[0]  # noqa: E731
    except Exception as e:  # an op or opset ONNX Runtime lacks (CumProd, SwiGLU)
        if "NOT_IMPLEMENTED" not in str(e) and "opset" not in str(e).lower() \
                and "No Op registered" not in str(e):
            raise
        from onnx.reference import ReferenceEvaluator
        evaluator = ReferenceEvaluator(m)
        run = lambda values: evaluator.run([loss_name], values)[0]  # noqa: E731

    def loss(values):
        return float(np.asarray(run({**feeds, **values})).astype(np.float64).sum())

    result = {}
    for name, w in weights.items():
        flat = w.reshape(-1)
        idx = np.arange(flat.size)
        if flat.size > max_elements:
            idx = rng.choice(flat.size, max_elements, replace=False)
        vals = []
        for i in idx:
            plus, minus = flat.copy(), flat.copy()
            plus[i] += eps
            minus[i] -= eps
            lp = loss({**weights, name: plus.reshape(w.shape)})
            lm = loss({**weights, name: minus.reshape(w.shape)})
            vals.append((lp - lm) / (2 * eps))
        result[name] = (idx, np.array(vals))
    return result


def init_dtype(init):
    return onnx.helper.tensor_dtype_to_np_dtype(init.data_type)


def assert_close(analytic: np.ndarray, numeric, rtol=2e-2, what=""):
    idx, vals = numeric
    got = analytic.reshape(-1)[idx].astype(np.float64)
    scale = max(1.0, float(np.abs(vals).max()))
    err = np.abs(got - vals).max() / scale
    assert err <= rtol, f"{what}: max error {err:.3g} (analytic {got[:6]}, numeric {vals[:6]})"
