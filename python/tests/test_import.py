"""End-to-end checks of `distopt import` on the generated models.

* The result types distopt infers for each model's outputs equal the shapes
  ONNX Runtime produces for the same concrete input shapes (two different
  specialisations each, so a hard-coded shape cannot pass).
* The imported IR is static (no '?') and holds no shape computation.
* Importing the model with 1 GiB of external weights neither reads them nor
  grows memory: the peak RSS of the import process stays small.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DISTOPT_BUILD_DIR", ROOT / "build"))
DISTOPT = BUILD / "bin" / "distopt"

sys.path.insert(0, str(ROOT / "python" / "testmodels"))
import gen_models  # noqa: E402

pytestmark = pytest.mark.skipif(not DISTOPT.exists(),
                                reason=f"{DISTOPT} not built (run scripts/build)")

# model -> list of (dim bindings, ORT feed shapes by input name)
CASES = {
    "mlp": [({"batch": 2}, {"x": (2, 64)}), ({"batch": 5}, {"x": (5, 64)})],
    "cnn": [({"N": 1}, {"x": (1, 3, 32, 32)}), ({"N": 3}, {"x": (3, 3, 32, 32)})],
    "transformer_encoder": [({"batch": 2, "seq": 16}, {"x": (2, 16, 32)}),
                            ({"batch": 3, "seq": 7}, {"x": (3, 7, 32)})],
    "gpt": [({"batch": 1}, {"input_ids": (1, 16)}), ({"batch": 4}, {"input_ids": (4, 16)})],
    "ops_misc": [({}, {"x": (2, 4, 6)})],
}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("models")
    gen_models.generate(str(out))
    return out


def run_import(model: Path, dims: dict) -> str:
    args = [str(DISTOPT), "import", str(model)]
    for k, v in dims.items():
        args += ["--dim", f"{k}={v}"]
    proc = subprocess.run(args, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def result_shapes(ir: str) -> dict:
    """Output name -> shape, from `func.func @main(...) -> (tensor<AxB> {dopt.name = "y"}, ...)`."""
    sig = re.search(r"func\.func @main\(.*\) -> \((.*)\) \{", ir).group(1)
    shapes = {}
    for dims, name in re.findall(r'tensor<([0-9x]*?)x?[a-z]+[0-9]*> \{dopt\.name = "([^"]+)"\}', sig):
        shapes[name] = tuple(int(d) for d in dims.split("x")) if dims else ()
    return shapes


def ort_shapes(model: Path, feeds: dict) -> dict:
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    inputs = {}
    for inp in sess.get_inputs():
        shape = feeds[inp.name]
        if inp.type == "tensor(int64)":
            inputs[inp.name] = rng.integers(0, 100, shape, dtype=np.int64)
        else:
            inputs[inp.name] = rng.standard_normal(shape).astype(np.float32)
    outs = sess.run(None, inputs)
    return {o.name: tuple(v.shape) for o, v in zip(sess.get_outputs(), outs)}


@pytest.mark.parametrize("name,dims,feeds",
                         [(m, d, f) for m, cases in CASES.items() for d, f in cases])
def test_output_shapes_match_onnxruntime(models, name, dims, feeds):
    ir = run_import(models / f"{name}.onnx", dims)
    assert result_shapes(ir) == ort_shapes(models / f"{name}.onnx", feeds)


@pytest.mark.parametrize("name", CASES)
def test_ir_is_static_without_shape_ops(models, name):
    ir = run_import(models / f"{name}.onnx", CASES[name][0][0])
    assert "?" not in ir
    assert "dopt.shape" not in ir
    # Every op line is a dopt op, the function or its return.
    ops = set(re.findall(r"= ([a-z_]+\.[a-z_]+)", ir))
    assert ops and all(op.startswith("dopt.") for op in ops), ops


def test_external_data_is_not_read(models):
    data = models / "big_external.onnx.data"
    assert data.stat().st_size == 1 << 30
    ir = run_import(models / "big_external.onnx", {"batch": 2})
    assert ir.count("location = \"big_external.onnx.data\"") == 4
    # Reading the weights would need 1 GiB; the importer needs a few tens of
    # MiB. Measured in a fresh process whose only child is the import (this
    # process's RUSAGE_CHILDREN is the largest child it ever waited for).
    probe = ("import resource, subprocess, sys; "
             "subprocess.run(sys.argv[1:], capture_output=True, check=True); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", probe, str(DISTOPT), "import",
                          str(models / "big_external.onnx"), "--dim", "batch=2"],
                         capture_output=True, text=True, check=True).stdout
    peak_kib = int(out.strip())
    assert peak_kib < 256 * 1024, f"peak RSS {peak_kib} KiB"


def test_old_opset_model_is_converted(tmp_path):
    """An opset-9 model (Softmax flattening to 2-D at its axis, Pad-2's
    attributes, ReduceSum's axes attribute, Dropout's ratio attribute) with
    its weight in external data: converted to opset 13 by ONNX's version
    converter, with the weight's reference kept, and equal to ONNX Runtime
    running the original."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("Dropout", ["h"], ["d"], ratio=0.3),
         helper.make_node("Softmax", ["d"], ["s"], axis=1),
         helper.make_node("Pad", ["s"], ["p"], pads=[0, 1, 0, 0, 0, 2], value=0.25),
         helper.make_node("ReduceSum", ["p"], ["y"], axes=[1], keepdims=0)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 4
    path = tmp_path / "old.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="old.data",
                    size_threshold=0)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    r = subprocess.run([str(DISTOPT), "compile", str(path), "-o", str(tmp_path / "old.dx")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "opset 9 was converted to 13 by ONNX's version converter" in r.stderr
    np.save(tmp_path / "x.npy", x)
    r = subprocess.run([str(tmp_path / "old.dx" / "old"), "--input", f"x={tmp_path / 'x.npy'}",
                        "--output-dir", str(tmp_path / "out")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), want, rtol=1e-5)
