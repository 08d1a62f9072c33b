"""Tests for python/testmodels/gen_models.py.

Generates every test model into a temporary directory and checks that the
output is deterministic, that the valid models pass the ONNX checker and run
in onnxruntime with the expected output shapes, that the big external-data
file is sparse, and that the "bad" files really are bad.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

TESTMODELS_DIR = Path(__file__).resolve().parents[1] / "testmodels"
sys.path.insert(0, str(TESTMODELS_DIR))
import gen_models  # noqa: E402

GEN_SCRIPT = TESTMODELS_DIR / "gen_models.py"

ALL_FILES = [
    "mlp.onnx", "cnn.onnx", "transformer_encoder.onnx", "gpt.onnx", "ops_misc.onnx",
    "big_external.onnx", "big_external.onnx.data", "missing_external.onnx",
    "gpt3_175b.onnx", "empty.onnx", "truncated.onnx", "garbage.onnx", "unsupported.onnx",
]

# Valid, self-contained models: name -> (opset, input feeds builder, expected output shapes).
# Feeds use concrete values for the symbolic dims (batch=2, seq=16, ...).
RUNNABLE = {
    "mlp": (13, lambda r: {"x": r.standard_normal((2, 64), dtype=np.float32)},
            {"y": (2, 10)}),
    "cnn": (15, lambda r: {"x": r.standard_normal((2, 3, 32, 32), dtype=np.float32)},
            {"logits": (2, 10)}),
    "transformer_encoder": (17, lambda r: {"x": r.standard_normal((2, 16, 32), dtype=np.float32)},
                            {"y": (2, 16, 32)}),
    "gpt": (18, lambda r: {"input_ids": r.integers(0, 100, (2, 16), dtype=np.int64)},
            {"logits": (2, 16, 100)}),
    "ops_misc": (21, lambda r: {"x": r.standard_normal((2, 4, 6), dtype=np.float32)},
                 {"y0": (2, 4, 9), "y1": (2, 10)}),
}

BAD = ["empty", "truncated", "garbage"]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("models")
    gen_models.generate(str(out))
    return out


def session(path: Path) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.log_severity_level = 4  # silence expected load errors on bad models
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def test_all_files_written(models_dir: Path):
    assert sorted(os.listdir(models_dir)) == sorted(ALL_FILES)
    for name in ALL_FILES:
        if name not in ("big_external.onnx.data", "empty.onnx"):
            limit = 4 << 20 if name == "gpt3_175b.onnx" else 1 << 20
            assert 0 < (models_dir / name).stat().st_size < limit, name


def test_deterministic(models_dir: Path, tmp_path: Path):
    gen_models.generate(str(tmp_path))
    for name in ALL_FILES:
        if name == "big_external.onnx.data":
            continue  # all holes; size is checked separately
        assert (tmp_path / name).read_bytes() == (models_dir / name).read_bytes(), name


def test_gpt3_175b_shapes(models_dir: Path):
    """GPT-3 175B: 96 layers of d_model 12288, 51200-token vocabulary,
    context 2048; every weight is external data in a file never written."""
    model = onnx.load(str(models_dir / "gpt3_175b.onnx"), load_external_data=False)
    params = 0
    for t in model.graph.initializer:
        assert t.data_location == onnx.TensorProto.EXTERNAL, t.name
        n = 1
        for d in t.dims:
            n *= d
        if t.data_type == onnx.TensorProto.FLOAT:
            params += n
    # 12·l·h² + 13·l·h (weights and biases of the blocks) + (V + 2048)·h
    # (embeddings) + 2·h (final layer norm).
    l, h, v = 96, 12288, 51200
    assert params == 12 * l * h * h + 13 * l * h + (v + 2048) * h + 2 * h
    assert not (models_dir / "gpt3_175b.onnx.data").exists()
    dims = [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", "seq"]


def test_cli_only(tmp_path: Path):
    res = subprocess.run(
        [sys.executable, str(GEN_SCRIPT), "--out", str(tmp_path), "--only", "mlp", "garbage.onnx"],
        check=True, capture_output=True, text=True,
    )
    assert sorted(os.listdir(tmp_path)) == ["garbage.onnx", "mlp.onnx"]
    assert len(res.stdout.strip().splitlines()) == 2  # one line per written file


@pytest.mark.parametrize("name", list(RUNNABLE) + ["unsupported"])
def test_checker(models_dir: Path, name: str):
    model = onnx.load(str(models_dir / f"{name}.onnx"))
    onnx.checker.check_model(model, full_check=True)
    if name in RUNNABLE:
        assert model.opset_import[0].domain == ""
        assert model.opset_import[0].version == RUNNABLE[name][0]


@pytest.mark.parametrize("name", list(RUNNABLE))
def test_onnxruntime(models_dir: Path, name: str):
    _, make_feeds, expected = RUNNABLE[name]
    sess = session(models_dir / f"{name}.onnx")
    out_names = [o.name for o in sess.get_outputs()]
    assert out_names == list(expected)
    outputs = sess.run(None, make_feeds(np.random.default_rng(0)))
    for out_name, value in zip(out_names, outputs):
        assert value.shape == expected[out_name], out_name
        assert value.dtype == np.float32
        assert np.isfinite(value).all(), out_name


def test_symbolic_dims(models_dir: Path):
    def dims(vi):
        return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]

    expect = {
        "mlp": (["batch", 64], ["batch", 10]),
        "cnn": (["N", 3, 32, 32], ["N", 10]),
        "transformer_encoder": (["batch", "seq", 32], ["batch", "seq", 32]),
        "gpt": (["batch", 16], ["batch", 16, 100]),
    }
    for name, (in_dims, out_dims) in expect.items():
        g = onnx.load(str(models_dir / f"{name}.onnx")).graph
        assert dims(g.input[0]) == in_dims, name
        assert dims(g.output[0]) == out_dims, name


def test_mlp_matches_numpy(models_dir: Path):
    model = onnx.load(str(models_dir / "mlp.onnx"))
    w = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    x = np.random.default_rng(1).standard_normal((3, 64), dtype=np.float32)
    h = x
    for i, layer in enumerate([0, 2, 4]):
        h = h @ w[f"layers.{layer}.weight"].T + w[f"layers.{layer}.bias"]
        if i < 2:
            h = np.maximum(h, 0)
    (y,) = session(models_dir / "mlp.onnx").run(None, {"x": x})
    np.testing.assert_allclose(y, h, rtol=1e-5, atol=1e-5)


def test_transformer_dynamic_seq(models_dir: Path):
    # batch and seq are symbolic: other concrete sizes must work too.
    x = np.random.default_rng(2).standard_normal((3, 7, 32), dtype=np.float32)
    (y,) = session(models_dir / "transformer_encoder.onnx").run(None, {"x": x})
    assert y.shape == (3, 7, 32)


def test_gpt_is_causal(models_dir: Path):
    # Changing the last token must not change logits at earlier positions.
    sess = session(models_dir / "gpt.onnx")
    ids = np.random.default_rng(3).integers(0, 100, (1, 16), dtype=np.int64)
    ids2 = ids.copy()
    ids2[0, -1] = (ids[0, -1] + 1) % 100
    (a,) = sess.run(None, {"input_ids": ids})
    (b,) = sess.run(None, {"input_ids": ids2})
    np.testing.assert_allclose(a[:, :-1], b[:, :-1], rtol=1e-5, atol=1e-6)
    assert not np.allclose(a[:, -1], b[:, -1])


def test_big_external(models_dir: Path):
    data = models_dir / "big_external.onnx.data"
    st = data.stat()
    assert st.st_size == gen_models.BIG_DATA_SIZE == 1 << 30
    # Sparse: (almost) nothing allocated on disk.
    assert st.st_blocks * 512 < 1 << 20

    path = models_dir / "big_external.onnx"
    model = onnx.load(str(path), load_external_data=False)
    ext = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert len(ext) == gen_models.BIG_LAYERS
    end = 0
    for t in ext:
        info = {e.key: e.value for e in t.external_data}
        assert info["location"] == "big_external.onnx.data"
        assert int(info["offset"]) == end  # tensors packed back to back
        assert int(info["length"]) == 8192 * 8192 * 4 and list(t.dims) == [8192, 8192]
        assert not t.raw_data
        end += int(info["length"])
    assert end == st.st_size
    # The path form of the checker validates the references without reading data.
    onnx.checker.check_model(str(path), full_check=False)


def test_missing_external(models_dir: Path):
    path = models_dir / "missing_external.onnx"
    model = onnx.load(str(path), load_external_data=False)  # the proto itself is fine
    (w,) = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    assert {e.key: e.value for e in w.external_data}["location"] == "missing_external.onnx.data"
    assert not (models_dir / "missing_external.onnx.data").exists()
    with pytest.raises(Exception):
        onnx.load(str(path))  # loading the data fails
    with pytest.raises(Exception):
        session(path)


@pytest.mark.parametrize("name", BAD)
def test_bad_files_rejected(models_dir: Path, name: str):
    path = models_dir / f"{name}.onnx"
    # onnx.load accepts 0 bytes (an empty ModelProto), so also run the checker.
    with pytest.raises(Exception):
        onnx.checker.check_model(onnx.load(str(path)))
    with pytest.raises(Exception):
        session(path)


def test_bad_file_contents(models_dir: Path):
    assert (models_dir / "empty.onnx").stat().st_size == 0
    mlp = (models_dir / "mlp.onnx").read_bytes()
    trunc = (models_dir / "truncated.onnx").read_bytes()
    assert trunc == mlp[: len(mlp) * 6 // 10]
    assert (models_dir / "garbage.onnx").stat().st_size == 4096


def test_unsupported(models_dir: Path):
    model = onnx.load(str(models_dir / "unsupported.onnx"))
    ops = {(n.domain, n.op_type) for n in model.graph.node}
    assert {("", "Bernoulli"), ("", "NonMaxSuppression"), ("com.example", "FancyOp"),
            ("", "Relu")} <= ops
    # Valid ONNX, but onnxruntime has no kernel for the custom op.
    with pytest.raises(Exception, match="FancyOp"):
        session(models_dir / "unsupported.onnx")
