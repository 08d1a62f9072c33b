"""`distopt compile` end to end: the four model kinds (MLP, CNN, Transformer
encoder, GPT-style decoder) and the opset-21 op mix are compiled into bundles,
run as native executables on random inputs, and compared with ONNX Runtime
(max relative error <= 1e-4 for fp32). Also checks the bundle layout and the
executable's input errors."""

from __future__ import annotations

import json
import os
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

pytestmark = pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")

CASES = [
    ("mlp", {"batch": 8}),
    ("cnn", {"N": 2}),
    ("transformer_encoder", {"batch": 2, "seq": 16}),
    ("gpt", {"batch": 2}),
    ("ops_misc", {}),
]


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("models")
    gen_models.generate(str(out), ["mlp", "cnn", "transformer_encoder", "gpt", "ops_misc"])
    return out


def compile_model(model: Path, bundle: Path, dims: dict) -> None:
    args = [str(DISTOPT), "compile", str(model), "-o", str(bundle)]
    for k, v in dims.items():
        args += ["--dim", f"{k}={v}"]
    proc = subprocess.run(args, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def random_inputs(sess, dims, rng):
    feeds = {}
    for i in sess.get_inputs():
        shape = [dims[d] if isinstance(d, str) else d for d in i.shape]
        if i.type == "tensor(int64)":
            feeds[i.name] = rng.integers(0, 100, shape, dtype=np.int64)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("name,dims", CASES)
def test_matches_onnxruntime(models, tmp_path, name, dims):
    model = models / f"{name}.onnx"
    bundle = tmp_path / f"{name}.dx"
    compile_model(model, bundle, dims)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["format"] == 1 and manifest["ranks"] == 1
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    for trial in range(2):
        feeds = random_inputs(sess, dims, rng)
        args = []
        for k, v in feeds.items():
            np.save(tmp_path / f"{k}.npy", v)
            args += ["--input", f"{k}={tmp_path / (k + '.npy')}"]
        out_dir = tmp_path / f"out{trial}"
        proc = subprocess.run([str(bundle / bundle.stem), *args, "--output-dir", str(out_dir)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        for o, ref in zip(sess.get_outputs(), sess.run(None, feeds)):
            got = np.load(out_dir / f"{o.name}.npy")
            assert got.shape == ref.shape and got.dtype == ref.dtype
            rel = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
            assert rel <= 1e-4, f"{name}:{o.name} max relative error {rel:.3g}"


def test_bundle_layout_and_input_errors(models, tmp_path):
    bundle = tmp_path / "mlp.dx"
    compile_model(models / "mlp.onnx", bundle, {"batch": 4})
    assert sorted(p.name for p in bundle.iterdir()) == ["manifest.json", "mlp", "weights.bin"]
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["x"]
    assert manifest["inputs"][0]["shape"] == [4, 64]
    assert len(manifest["weights"]) == 6
    exe = str(bundle / "mlp")

    def run(*args):
        return subprocess.run([exe, *args, "--output-dir", str(tmp_path / "o")],
                              capture_output=True, text=True)

    np.save(tmp_path / "x.npy", np.zeros((4, 64), np.float32))
    np.save(tmp_path / "bad_shape.npy", np.zeros((5, 64), np.float32))
    np.save(tmp_path / "bad_dtype.npy", np.zeros((4, 64), np.float64))
    r = run("--input", f"y={tmp_path / 'x.npy'}")
    assert r.returncode == 1 and "x" in r.stderr and "y" in r.stderr
    r = run("--input", f"x={tmp_path / 'bad_shape.npy'}")
    assert r.returncode == 1 and "[5, 64]" in r.stderr and "[4, 64]" in r.stderr
    r = run("--input", f"x={tmp_path / 'bad_dtype.npy'}")
    assert r.returncode == 1 and "float64" in r.stderr and "float32" in r.stderr
    r = run("--input", f"x={tmp_path / 'missing.npy'}")
    assert r.returncode == 1 and "missing.npy" in r.stderr
    r = run()
    assert r.returncode == 1 and "x" in r.stderr
    assert not (tmp_path / "o" / "y.npy").exists()
    r = run("--input", f"x={tmp_path / 'x.npy'}")
    assert r.returncode == 0, r.stderr
    assert np.load(tmp_path / "o" / "y.npy").shape == (4, 10)


def test_compile_errors(models, tmp_path):
    r = subprocess.run([str(DISTOPT), "compile", str(models / "mlp.onnx"), "-o",
                        str(tmp_path / "m.dx")], capture_output=True, text=True)
    assert r.returncode == 1 and "--dim batch=N" in r.stderr
    assert not (tmp_path / "m.dx").exists()
    r = subprocess.run([str(DISTOPT), "compile", str(models / "mlp.onnx"), "--emit=bogus"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "--emit must be graph, linalg, llvm, gpu or ptx" in r.stderr


@pytest.mark.parametrize("stage,marker", [("graph", "dopt.gemm"), ("linalg", "linalg.matmul"),
                                          ("llvm", "i32 @dopt_entry(ptr")])
def test_emit_stages(models, stage, marker):
    r = subprocess.run([str(DISTOPT), "compile", str(models / "mlp.onnx"), "--dim", "batch=2",
                        f"--emit={stage}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert marker in r.stdout
