"""Indices that come from data are checked when the program runs: an index
outside ONNX's range ends the run with an error naming the ONNX node, the
index and its position, a non-zero exit and no outputs written -- on the
CPU and under cuda-emu (the GPU kernels and the CUDA runtime's contract),
in one process and across ranks, in inference and in training. The same
bundles run indices in range as ONNX Runtime does."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper

import cli
import gen_models  # noqa: E402  (python/testmodels, put on the path by cli)
from cli import DISTOPT

pytestmark = pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")
RNG = np.random.default_rng(5)


def model(nodes, inputs, outputs, initializers=()):
    m = helper.make_model(
        helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers)),
        opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def vi(name, elt, shape):
    return helper.make_tensor_value_info(name, elt, list(shape))


def gather():
    return model([helper.make_node("Gather", ["x", "i"], ["y"], name="embed", axis=0)],
                 [vi("x", TP.FLOAT, (100, 4)), vi("i", TP.INT64, (2, 3))],
                 [vi("y", TP.FLOAT, (2, 3, 4))])


def gather_elements():
    return model([helper.make_node("GatherElements", ["x", "i"], ["y"], name="pick",
                                   axis=1)],
                 [vi("x", TP.FLOAT, (3, 5)), vi("i", TP.INT32, (3, 2))],
                 [vi("y", TP.FLOAT, (3, 2))])


def scatter_elements():
    return model([helper.make_node("ScatterElements", ["x", "i", "u"], ["y"],
                                   name="put", axis=0, reduction="add")],
                 [vi("x", TP.FLOAT, (4, 3)), vi("i", TP.INT64, (2, 3)),
                  vi("u", TP.FLOAT, (2, 3))],
                 [vi("y", TP.FLOAT, (4, 3))])


def gather_nd():
    return model([helper.make_node("GatherND", ["x", "i"], ["y"], name="rows")],
                 [vi("x", TP.FLOAT, (3, 4, 2)), vi("i", TP.INT64, (5, 2))],
                 [vi("y", TP.FLOAT, (5, 2))])


def scatter_nd():
    return model([helper.make_node("ScatterND", ["x", "i", "u"], ["y"], name="assign")],
                 [vi("x", TP.FLOAT, (6, 3)), vi("i", TP.INT64, (2, 1)),
                  vi("u", TP.FLOAT, (2, 3))],
                 [vi("y", TP.FLOAT, (6, 3))])


def nll_loss():
    return model([helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["y"],
                                   name="nll", reduction="mean", ignore_index=-1)],
                 [vi("x", TP.FLOAT, (4, 5)), vi("t", TP.INT64, (4,))],
                 [vi("y", TP.FLOAT, ())])


def reverse_sequence():
    return model([helper.make_node("ReverseSequence", ["x", "n"], ["y"], name="rev",
                                   time_axis=1, batch_axis=0)],
                 [vi("x", TP.FLOAT, (3, 5)), vi("n", TP.INT64, (3,))],
                 [vi("y", TP.FLOAT, (3, 5))])


def floats(shape):
    return RNG.standard_normal(shape).astype(np.float32)


# name -> (model, inputs in range, the bad input's name, its value with one
# index out of range, the message's node, index, position and range).
CASES = {
    "gather": (gather, {"x": floats((100, 4)), "i": np.array([[0, 99, -100], [5, 6, 7]])},
               "i", np.array([[0, 99, -100], [5, 100, 7]]),
               "'embed' (Gather)", 100, "[1, 1]", "[-100, 99]"),
    "gather_huge": (gather, {"x": floats((100, 4)), "i": np.array([[0, 1, 2], [3, 4, 5]])},
                    "i", np.array([[0, 1, 2], [3, 4, 2 ** 40]]),
                    "'embed' (Gather)", 2 ** 40, "[1, 2]", "[-100, 99]"),
    "gather_negative": (gather, {"x": floats((100, 4)), "i": np.array([[1, 2, 3], [4, 5, 6]])},
                        "i", np.array([[1, -101, 3], [4, 5, 6]]),
                        "'embed' (Gather)", -101, "[0, 1]", "[-100, 99]"),
    "gather_elements": (gather_elements,
                        {"x": floats((3, 5)), "i": np.array([[0, 4], [-5, 1], [2, 3]], np.int32)},
                        "i", np.array([[0, 4], [1, 2], [5, 3]], np.int32),
                        "'pick' (GatherElements)", 5, "[2, 0]", "[-5, 4]"),
    "scatter_elements": (scatter_elements,
                         {"x": floats((4, 3)), "i": np.array([[0, 3, -4], [1, 2, 3]]),
                          "u": floats((2, 3))},
                         "i", np.array([[0, 3, -5], [1, 2, 3]]),
                         "'put' (ScatterElements)", -5, "[0, 2]", "[-4, 3]"),
    "gather_nd": (gather_nd,
                  {"x": floats((3, 4, 2)), "i": np.array([[0, 0], [2, 3], [-3, -4], [1, 2], [0, 1]])},
                  "i", np.array([[0, 0], [2, 3], [1, 4], [1, 2], [0, 1]]),
                  "'rows' (GatherND)", 4, "[2, 0]", "[-4, 3]"),
    "scatter_nd": (scatter_nd,
                   {"x": floats((6, 3)), "i": np.array([[5], [-6]]), "u": floats((2, 3))},
                   "i", np.array([[5], [6]]),
                   "'assign' (ScatterND)", 6, "[1, 0]", "[-6, 5]"),
    "nll_target": (nll_loss, {"x": floats((4, 5)), "t": np.array([0, 4, -1, 2])},
                   "t", np.array([0, 4, 5, 2]),
                   "'nll' (NegativeLogLikelihoodLoss)", 5, "[2]", "[0, 4]"),
    "reverse_sequence": (reverse_sequence, {"x": floats((3, 5)), "n": np.array([5, 0, 2])},
                         "n", np.array([5, 6, 2]),
                         "'rev' (ReverseSequence)", 6, "[1]", "[0, 5]"),
}


def run_bundle(bundle, exe, feeds, tmp, out, *launcher):
    args = []
    for k, v in feeds.items():
        np.save(tmp / f"{k}.npy", v)
        args += ["--input", f"{k}={tmp / (k + '.npy')}"]
    cmd = [*launcher, bundle] if launcher else [bundle / exe]
    return cli.run(*cmd, *args, "--output-dir", out, check=False)


@pytest.mark.parametrize("target", ["cpu", "cuda-emu"])
@pytest.mark.parametrize("case", list(CASES))
def test_index_out_of_range_fails_naming_node_index_and_position(case, target, tmp_path):
    build, good, bad_name, bad, node, value, position, bounds = CASES[case]
    m = build()
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    bundle = tmp_path / "m.dx"
    cli.run(DISTOPT, "compile", path, "--target", target, "-o", bundle)

    # In range (the range's ends and negative indices too): ONNX Runtime's
    # answer.
    proc = run_bundle(bundle, "m", good, tmp_path, tmp_path / "good")
    assert proc.returncode == 0, proc.stderr
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, good)
    got = np.load(tmp_path / "good" / "y.npy")
    np.testing.assert_allclose(got, want[0], rtol=1e-5, atol=1e-6)

    # One index out: the run fails, naming it; nothing is written.
    feeds = dict(good)
    feeds[bad_name] = bad.astype(good[bad_name].dtype)
    proc = run_bundle(bundle, "m", feeds, tmp_path, tmp_path / "bad")
    assert proc.returncode != 0
    err = proc.stderr
    assert f"ONNX node {node}" in err, err
    assert f"index {value} at {position} is outside {bounds}" in err, err
    assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").iterdir())


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpt")
    gen_models.generate(str(out), ["gpt"])
    return out / "gpt.onnx"


def embedding_node(path):
    import onnx
    m = onnx.load(str(path))
    return next(n.name for n in m.graph.node
                if n.op_type == "Gather" and "wte" in n.input[0])


@pytest.mark.parametrize("ranks", [1, 2])
def test_gpt_token_outside_the_vocabulary_fails(gpt, ranks, tmp_path):
    """The bundled GPT (a 100-token vocabulary) given token 100, in one
    process and under dp 2: the embedding's Gather is named."""
    bundle = tmp_path / "gpt.dx"
    flags = ["--dim", "batch=4"] + (["--cluster", "local:2", "--dp", "2"] if ranks > 1 else [])
    cli.run(DISTOPT, "compile", gpt, *flags, "-o", bundle)
    ids = RNG.integers(0, 100, (4, 16))
    ids[3, 7] = 100
    np.save(tmp_path / "ids.npy", ids)
    launcher = [DISTOPT, "run", bundle] if ranks > 1 else [bundle / "gpt"]
    proc = cli.run(*launcher, "--input", f"input_ids={tmp_path / 'ids.npy'}",
                   "--output-dir", tmp_path / "out", check=False)
    assert proc.returncode != 0
    err = proc.stderr + proc.stdout
    assert f"ONNX node '{embedding_node(gpt)}' (Gather)" in err, err
    # Under dp 2 the second rank holds samples 2 and 3: position [1, 7].
    where = "[3, 7]" if ranks == 1 else "[1, 7]"
    assert f"index 100 at {where} is outside [-100, 99]" in err, err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.parametrize("ranks", [1, 2])
def test_training_data_with_a_token_outside_the_vocabulary_is_refused(gpt, ranks, tmp_path):
    """Training data holding a token outside the embedding is refused when
    it is loaded, naming the file, the sample and the node -- before any
    step, instead of training on whatever memory lies there (the loss
    turned NaN a step later). The same data in range trains."""
    bundle = tmp_path / "step.dx"
    flags = ["--cluster", "local:2", "--dp", "2"] if ranks > 1 else []
    cli.run(DISTOPT, "compile", gpt, "--dim", "batch=4", "--loss", "cross-entropy:logits",
            "--optimizer", "adamw", *flags, "-o", bundle)
    ids = RNG.integers(0, 100, (12, 16))
    labels = RNG.integers(0, 100, (12, 16))
    np.save(tmp_path / "y.npy", labels)
    data = ["--data", f"input_ids={tmp_path / 'x.npy'}", "--data", f"labels={tmp_path / 'y.npy'}",
            "--steps", "2", "--no-shuffle"]
    launch = [DISTOPT, "run", bundle, "train"] if ranks > 1 else [bundle / "step", "train"]
    np.save(tmp_path / "x.npy", ids)
    proc = cli.run(*launch, *data, check=False)
    assert proc.returncode == 0, proc.stderr
    ids[9, 2] = 123
    np.save(tmp_path / "x.npy", ids)
    proc = cli.run(*launch, *data, check=False)
    assert proc.returncode != 0
    err = proc.stderr + proc.stdout
    assert (f"data 'input_ids': file '{tmp_path / 'x.npy'}': sample 9 holds 123 at [2], "
            "outside [-100, 99] (ONNX node '/transformer/wte/Gather' (Gather)") in err, err
    assert "step 1" not in err, err
