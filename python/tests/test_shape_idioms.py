"""The shape idioms exporters write (python/testmodels/gen_shape_idioms.py:
repeat_interleave, expand_as, new_zeros, arange over a size, masked_fill
with a computed mask, torch.where over shapes, views with -1), exported by
Debian's torch 1.13 at opsets 13, 15 and 17 with a dynamic batch: their
shape arithmetic folds at import, and the compiled program matches PyTorch
and ONNX Runtime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import cli
from cli import DISTOPT
from conftest import torch_generated

pytestmark = pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")

IDIOMS = ["repeat_interleave", "expand_as", "new_zeros", "arange_over_size",
          "masked_fill_computed_mask", "where_over_shapes", "view_minus_one"]
OPSETS = [13, 15, 17]


@pytest.fixture(scope="module")
def idioms(tmp_path_factory):
    return torch_generated(tmp_path_factory, "idioms", "gen_shape_idioms.py", "{out}")


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("idiom", IDIOMS)
def test_shape_idiom_compiles_and_matches(idioms, idiom, opset, tmp_path):
    model = idioms / f"{idiom}-opset{opset}.onnx"
    x = np.load(idioms / f"{idiom}.x.npy")
    want = np.load(idioms / f"{idiom}.y.npy")
    cli.compile_and_run(model, {"x": x}, tmp_path, "--dim", f"batch={x.shape[0]}")
    got = np.load(tmp_path / "out" / "y.npy")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    ref = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got, ref[0], rtol=1e-5, atol=1e-6)
