"""RNN, GRU and LSTM (unrolled) and Attention (written with other ops)
against ONNX Runtime, beyond the node tests' cases: batch-first layout,
both directions, sequence lengths (a sample of length 0 included), clip,
activations with their parameters (named in any case), GRU's two reset
forms, LSTM's peepholes and coupled gates;
Attention's raw scores under softcap."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper
from onnx.reference import ReferenceEvaluator

import cli
from cli import DISTOPT

pytestmark = pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")
RNG = np.random.default_rng(5)
T, B, I, H = 5, 3, 4, 6

CASES = {
    "lstm_bidirectional_lengths_clip": (
        "LSTM", dict(direction="bidirectional", clip=1.5), [3, 0, 5], True),
    # ONNX Runtime has no batch-first kernels: ONNX's reference instead.
    "lstm_batch_first": ("LSTM", dict(layout=1), None, False),
    "gru_batch_first_bidirectional": ("GRU", dict(layout=1, direction="bidirectional"),
                                      None, False),
    "lstm_peepholes_coupled_activations": (
        "LSTM", dict(input_forget=1, activations=["hardsigmoid", "tanh", "ScaledTanh"],
                     activation_alpha=[0.3, 0.9], activation_beta=[0.4, 1.1]), None, True),
    "gru_reverse_lengths": ("GRU", dict(direction="reverse"), [5, 2, 1], False),
    "gru_linear_before_reset_bidirectional": (
        "GRU", dict(linear_before_reset=1, direction="bidirectional",
                    activations=["Sigmoid", "Relu", "sigmoid", "relu"]), None, False),
    "rnn_affine_bidirectional_lengths": (
        "RNN", dict(direction="bidirectional", activations=["Affine", "LeakyRelu"],
                    activation_alpha=[0.5, 0.2], activation_beta=[0.1]), [4, 5, 0], False),
}


@pytest.mark.parametrize("target", ["cpu", "cuda-emu"])
@pytest.mark.parametrize("case", list(CASES))
def test_recurrent_matches_onnx_runtime(case, target, tmp_path):
    op, attrs, lens, peep = CASES[case]
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    layout = attrs.get("layout", 0)
    xs = [B, T, I] if layout else [T, B, I]
    hs = [B, dirs, H] if layout else [dirs, B, H]
    feeds = {"x": RNG.standard_normal(xs).astype(np.float32),
             "w": (0.5 * RNG.standard_normal([dirs, gates * H, I])).astype(np.float32),
             "r": (0.5 * RNG.standard_normal([dirs, gates * H, H])).astype(np.float32),
             "b": (0.3 * RNG.standard_normal([dirs, 2 * gates * H])).astype(np.float32),
             "h0": RNG.standard_normal(hs).astype(np.float32)}
    inits = []
    names = ["x", "w", "r", "b", "", "h0"]
    if lens is not None:
        inits.append(helper.make_tensor("lens", TP.INT32, [B], lens))
        names[4] = "lens"
    if op == "LSTM":
        feeds["c0"] = RNG.standard_normal(hs).astype(np.float32)
        names.append("c0")
        if peep:
            feeds["p"] = (0.5 * RNG.standard_normal([dirs, 3 * H])).astype(np.float32)
            names.append("p")
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    ys = [B, T, dirs, H] if layout else [T, dirs, B, H]
    node = helper.make_node(op, names, outs, hidden_size=H, **attrs)
    g = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, TP.FLOAT, list(v.shape)) for n, v in feeds.items()],
        [helper.make_tensor_value_info("y", TP.FLOAT, ys)] +
        [helper.make_tensor_value_info(n, TP.FLOAT, hs) for n in outs[1:]], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 9
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    if layout:
        want = ReferenceEvaluator(m).run(None, feeds)
    else:
        want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
            None, feeds)
    cli.compile_and_run(path, feeds, tmp_path, "--target", target)
    for name, w in zip(outs, want):
        got = np.load(tmp_path / "out" / f"{name}.npy")
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-5, err_msg=name)


def test_attention_mode_0_gives_the_raw_scores_under_softcap(tmp_path):
    """qk_matmul_output_mode 0 is the product itself (ONNX's function
    body), not the softcapped one that mode 1 gives."""
    q, k, v = (RNG.standard_normal([1, 2, 3, 4]).astype(np.float32) for _ in range(3))
    outs = []
    for mode in (0, 1):
        node = helper.make_node("Attention", ["q", "k", "v"], ["y", "", "", "qk"],
                                softcap=2.0, qk_matmul_output_mode=mode)
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info(
            n, TP.FLOAT, [1, 2, 3, 4]) for n in "qkv"], [
            helper.make_tensor_value_info("y", TP.FLOAT, [1, 2, 3, 4]),
            helper.make_tensor_value_info("qk", TP.FLOAT, [1, 2, 3, 3])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
        m.ir_version = 10
        d = tmp_path / f"mode{mode}"
        d.mkdir()
        path = d / "m.onnx"
        path.write_bytes(m.SerializeToString())
        cli.compile_and_run(path, {"q": q, "k": k, "v": v}, d)
        outs.append(np.load(d / "out" / "qk.npy"))
    raw = q @ k.transpose(0, 1, 3, 2) / 2.0  # scale 1/sqrt(4)
    np.testing.assert_allclose(outs[0], raw, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[1], 2.0 * np.tanh(raw / 2.0), rtol=1e-5, atol=1e-6)
