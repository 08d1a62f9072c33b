"""Dropout in training form: masks from a counter-based generator
keyed by (seed, step, the element's position in the whole tensor), checked
bit for bit against a NumPy model of the generator; the same mask on one
process and split over data-parallel replicas; its gradient; training runs
that are reproducible and equal across plans."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cli import DISTOPT, run, save_float_model

pytestmark = pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")

GAMMA = 0x9E3779B97F4A7C15
M64 = (1 << 64) - 1


def mix(z):
    """SplitMix64's output function on uint64 arrays."""
    z = np.asarray(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def step_key(seed: int, step: int) -> int:
    """The runtime's key of step `step` (lib/Runtime/Train.cpp, stepKey)."""
    a = int(mix(np.uint64((seed + GAMMA) & M64)))
    return int(mix(np.uint64((a + step * GAMMA) & M64)))


def keep_mask(key: int, stream: int, shape, ratio: float) -> np.ndarray:
    """dopt.dropout's mask: u >= ratio, u from SplitMix64 at counter
    (stream << 40) + g + 1, g the row-major position in the whole tensor."""
    g = np.arange(int(np.prod(shape)), dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(key) + (g + np.uint64((stream << 40) + 1)) * np.uint64(GAMMA)
    u = (mix(z) >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -24)
    return (u >= np.float32(ratio)).reshape(shape)


def dropout_model(path: Path, shape, ratios, weight=True):
    """y = Dropout_k(...Dropout_1(x)...) * w (training mode), w [last dim]."""
    nodes, prev = [], "x"
    inits = [numpy_helper.from_array(np.array(True), "train")]
    for k, r in enumerate(ratios):
        inits.append(numpy_helper.from_array(np.array(r, np.float32), f"r{k}"))
        nodes.append(helper.make_node("Dropout", [prev, f"r{k}", "train"], [f"d{k}"],
                                      name=f"drop{k}"))
        prev = f"d{k}"
    if weight:
        inits.append(numpy_helper.from_array(
            np.linspace(0.5, 1.5, shape[-1]).astype(np.float32), "w"))
        nodes.append(helper.make_node("Mul", [prev, "w"], ["y"], name="scale"))
    else:
        nodes.append(helper.make_node("Identity", [prev], ["y"]))
    save_float_model(path, nodes, {"x": shape}, {"y": shape}, inits)


def run_with_key(bundle: Path, x: np.ndarray, key: int, tmp: Path, ranks=1) -> np.ndarray:
    np.save(tmp / "x.npy", x)
    np.save(tmp / "key.npy", np.array(np.uint64(key).astype(np.int64)))
    out = tmp / f"out-{bundle.stem}"
    run(DISTOPT, "run", "-n", ranks, bundle, "--input", f"x={tmp / 'x.npy'}", "--input",
        f"rng.key={tmp / 'key.npy'}", "--output-dir", out)
    return np.load(out / "y.npy")


def test_masks_match_the_generator_bit_for_bit_and_do_not_depend_on_the_split(tmp_path):
    """Two dropouts (0.3, 0.5) on [8, 6]: the output equals NumPy's model of
    the generator exactly, in one process and on 2 and 4 data-parallel
    replicas (each draws its block of the one-process mask)."""
    shape, ratios = [8, 6], [0.3, 0.5]
    model = tmp_path / "m.onnx"
    dropout_model(model, shape, ratios)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    key = step_key(7, 3)
    w = np.linspace(0.5, 1.5, shape[-1]).astype(np.float32)
    want = x.copy()
    for stream, r in enumerate(ratios):
        want = np.where(keep_mask(key, stream, shape, r),
                        want * np.float32(1.0 / (1.0 - r)), np.float32(0))
    want = want * w
    for ranks in (1, 2, 4):
        cluster = ["--cluster", f"local:{ranks}", "--dp", str(ranks)] if ranks > 1 else []
        bundle = tmp_path / f"d{ranks}.dx"
        run(DISTOPT, "compile", model, *cluster, "-o", bundle)
        got = run_with_key(bundle, x, key, tmp_path, ranks)
        assert np.array_equal(got == 0, want == 0), ranks
        assert np.allclose(got, want, rtol=1e-6, atol=0), ranks


def test_mask_statistics_and_keys(tmp_path):
    """On 20000 elements the share dropped is the ratio (within 4 standard
    deviations), the kept ones are scaled by 1/(1 - ratio), another key
    draws another mask."""
    shape, ratio = [100, 200], 0.25
    model = tmp_path / "m.onnx"
    dropout_model(model, shape, [ratio], weight=False)
    bundle = tmp_path / "s.dx"
    run(DISTOPT, "compile", model, "-o", bundle)
    x = np.ones(shape, np.float32)
    a = run_with_key(bundle, x, step_key(0, 1), tmp_path)
    b = run_with_key(bundle, x, step_key(0, 2), tmp_path)
    n = a.size
    dropped = float((a == 0).mean())
    assert abs(dropped - ratio) <= 4 * np.sqrt(ratio * (1 - ratio) / n), dropped
    assert np.allclose(a[a != 0], 1 / (1 - ratio))
    assert 0.2 < float(((a == 0) != (b == 0)).mean()) < 0.5


def test_dropout_gradient_is_the_same_mask(tmp_path):
    """loss = sum(Dropout(x) * w): d loss / d w is the column sum of the
    dropped-out x, with the mask of the key the bundle is given."""
    shape, ratio = [6, 5], 0.4
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    inits = [numpy_helper.from_array(np.array(ratio, np.float32), "r"),
             numpy_helper.from_array(np.array(True), "t"),
             numpy_helper.from_array(np.ones(shape[-1], np.float32), "w")]
    nodes = [helper.make_node("Dropout", ["x", "r", "t"], ["d"], name="drop"),
             helper.make_node("Mul", ["d", "w"], ["m"], name="mul"),
             helper.make_node("ReduceSum", ["m"], ["loss"], keepdims=0, name="sum")]
    path = tmp_path / "g.onnx"
    save_float_model(path, nodes, {"x": shape}, {"loss": []}, inits)
    bundle = tmp_path / "g.dx"
    run(DISTOPT, "compile", path, "--gradients", "-o", bundle)
    key = step_key(1, 5)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "key.npy", np.array(np.uint64(key).astype(np.int64)))
    run(bundle / "g", "--input", f"x={tmp_path / 'x.npy'}", "--input",
        f"rng.key={tmp_path / 'key.npy'}", "--output-dir", tmp_path / "out")
    dropped = np.where(keep_mask(key, 0, shape, ratio), x / np.float32(1 - ratio), 0)
    assert np.allclose(np.load(tmp_path / "out" / "grad_w.npy"), dropped.sum(axis=0),
                       rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun")
def test_training_with_dropout_is_reproducible_and_plan_independent(tmp_path):
    """An MLP with Dropout(0.2) between its layers, trained 15 steps: the
    loss falls; twice the same run is bit-identical; on 2 data-parallel
    replicas the losses equal one process's within float rounding (the
    masks are the same), and another seed gives other masks."""
    rng = np.random.default_rng(4)
    w1 = (rng.standard_normal((16, 32)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((32, 8)) * 0.3).astype(np.float32)
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
             numpy_helper.from_array(np.array(0.2, np.float32), "r"),
             numpy_helper.from_array(np.array(True), "t")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["a"], name="relu"),
             helper.make_node("Dropout", ["a", "r", "t"], ["d"], name="drop"),
             helper.make_node("MatMul", ["d", "w2"], ["logits"], name="fc2")]
    path = tmp_path / "mlp.onnx"
    save_float_model(path, nodes, {"x": [8, 16]}, {"logits": [8, 8]}, inits)
    x = rng.standard_normal((80, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", x[:, :8].argmax(axis=1).astype(np.int64))
    data = ["--data", f"x={tmp_path / 'x.npy'}", "--data", f"labels={tmp_path / 'y.npy'}",
            "--steps", "15", "--lr", "0.01"]

    def train(bundle, ranks, tag, *extra):
        log = tmp_path / f"{tag}.jsonl"
        run(DISTOPT, "run", "-n", ranks, bundle, "train", *data, *extra, "--log", log)
        return [json.loads(line)["loss"] for line in log.read_text().splitlines()]

    flags = ["--loss", "cross-entropy:logits", "--optimizer", "adam"]
    one = tmp_path / "one.dx"
    run(DISTOPT, "compile", path, *flags, "-o", one)
    two = tmp_path / "two.dx"
    run(DISTOPT, "compile", path, *flags, "--cluster", "local:2", "--dp", "2", "-o", two)
    a, b = train(one, 1, "a"), train(one, 1, "b")
    assert a == b
    assert np.mean(a[-5:]) < np.mean(a[:5])
    c = train(two, 2, "c")
    assert np.allclose(c, a, rtol=1e-5), (a, c)
    d = train(one, 1, "d", "--shuffle", "9")
    e = train(one, 1, "e", "--shuffle", "10")
    assert d != e


def test_accumulated_micro_batches_draw_the_big_batch_masks(tmp_path):
    """Dropout on the 4-sample step with --accumulate 2 draws the masks of
    the 8-sample step (micro-batch k's positions follow the k before it):
    the same losses."""
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((16, 8)) * 0.3).astype(np.float32)

    def model(batch):
        inits = [numpy_helper.from_array(w, "w"),
                 numpy_helper.from_array(np.array(0.3, np.float32), "r"),
                 numpy_helper.from_array(np.array(True), "t")]
        nodes = [helper.make_node("Dropout", ["x", "r", "t"], ["d"], name="drop"),
                 helper.make_node("MatMul", ["d", "w"], ["logits"], name="fc")]
        path = tmp_path / f"m{batch}.onnx"
        save_float_model(path, nodes, {"x": [batch, 16]}, {"logits": [batch, 8]}, inits)
        return path

    x = rng.standard_normal((40, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", x[:, :8].argmax(axis=1).astype(np.int64))
    losses = []
    for batch, extra in ((8, []), (4, ["--accumulate", "2"])):
        bundle = tmp_path / f"b{batch}.dx"
        run(DISTOPT, "compile", model(batch), "--loss", "cross-entropy:logits", "--optimizer",
            "sgd", *extra, "-o", bundle)
        log = tmp_path / f"{batch}.jsonl"
        run(bundle / f"b{batch}", "train", "--data", f"x={tmp_path / 'x.npy'}", "--data",
            f"labels={tmp_path / 'y.npy'}", "--steps", "5", "--lr", "0.1", "--log", log)
        losses.append([json.loads(line)["loss"] for line in log.read_text().splitlines()])
    assert np.allclose(losses[0], losses[1], rtol=1e-5), losses


def test_dropout_errors(tmp_path):
    """A ratio of 1 and a used mask output of a training-mode Dropout are
    errors naming the node."""
    def model(ratio, mask):
        inits = [numpy_helper.from_array(np.array(ratio, np.float32), "r"),
                 numpy_helper.from_array(np.array(True), "t")]
        outs = ["y", "mask"] if mask else ["y"]
        g = helper.make_graph(
            [helper.make_node("Dropout", ["x", "r", "t"], outs, name="drop")], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT if o == "y" else TensorProto.BOOL,
                                           [2, 3]) for o in outs], inits)
        path = tmp_path / f"e{ratio}{mask}.onnx"
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
        return path

    p = run(DISTOPT, "import", model(1.0, False), check=False)
    assert p.returncode == 1 and "'drop'" in p.stderr and "ratio must be in [0, 1)" in p.stderr
    p = run(DISTOPT, "import", model(0.5, True), check=False)
    assert p.returncode == 1 and "the mask output of a training-mode Dropout" in p.stderr
