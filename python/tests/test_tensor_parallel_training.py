"""Tensor-parallel training: a training step compiled with --tp
(alone or with --dp, and with ZeRO-1) runs each rank on its blocks of the
split weights. Backward all-reduces over the tensor axis what the split ops
contribute to replicated values (distopt-autodiff), the collectives of the
forward are transposed, the global norm counts every block once. The
trajectory is PyTorch's and the one process's; checkpoints are written in
blocks and move between plans."""
from __future__ import annotations

import json
import re
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from cli import DISTOPT, run as run_ok
from training import (REFERENCE_DIRS, assert_follows_reference,
                      assert_plans_equal_one_process, assert_resumed_runs_continue,
                      batches_as_data, compile_step, train, train_flags)

pytestmark = [
    pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built"),
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun"),
]


def split_weights(bundle) -> list[str]:
    """The weights the plan splits over the tensor axis (grid axis 2)."""
    m = json.loads((bundle / "manifest.json").read_text())
    return [w["name"] for w in m["weights"]
            if any(2 in axes for axes in w.get("split_axes", []))]


# run name of a torch.optim reference run, degrees, ranks.
CASES = [("gpt_adamw", ["--tp", "2"], 2), ("gpt_adamw", ["--tp", "4"], 4),
         ("gpt_adamw", ["--dp", "2", "--tp", "2"], 4),
         ("encoder_adamw", ["--tp", "2"], 2), ("encoder_adamw", ["--dp", "2", "--tp", "2"], 4),
         ("cnn_sgd", ["--tp", "2"], 2), ("cnn_sgd", ["--dp", "2", "--tp", "2"], 4)]


@pytest.mark.parametrize("run_name,degrees,ranks", CASES,
                         ids=[f"{c[0]}-{'x'.join(c[1][1::2])}" for c in CASES])
def test_tensor_parallel_training_matches_pytorch(run_name, degrees, ranks, torch_models,
                                                  tmp_path):
    """20 steps under the plan equal torch.optim's 20 steps on the whole
    batches (loss at every step and final weights, 1e-4), and the plan
    really splits weights over the tensor axis."""
    d = torch_models / REFERENCE_DIRS[run_name]
    meta = json.loads((d / "meta.json").read_text())[run_name]
    bundle = compile_step(d / "model.onnx", tmp_path / "tp.dx", meta["config"]["kind"],
                          "--cluster", f"local:{ranks}", *degrees)
    assert split_weights(bundle), "the plan splits no weight over the tensor axis"
    assert_follows_reference(bundle, ranks, d, meta, tmp_path, f"{run_name} {degrees}")


@pytest.mark.parametrize("degrees,ranks,target", [
    (["--tp", "2"], 2, "cpu"), (["--dp", "2", "--tp", "2"], 4, "cpu"),
    (["--tp", "2"], 2, "cuda-emu"), (["--tp", "2", "--pp", "2"], 4, "cpu")])
def test_vocabulary_parallel_cross_entropy_matches_pytorch(degrees, ranks, target,
                                                           torch_models, tmp_path):
    """A GPT with a 2048-word vocabulary: the planner leaves the head's
    logits split over the tensor axis and the loss is vocabulary-parallel
    (Megatron): each rank's log-sum-exp of its words gathered ([rows, tp]),
    the label's score picked where it lives and all-reduced -- no logits
    gathered. 10 steps (ignored positions included) follow torch.optim's
    loss and weights within 1e-4; the evaluation program's loss and
    accuracy equal one process's."""
    d = torch_models / "train_gpt_vocab"
    meta = json.loads((d / "meta.json").read_text())["vocab_adamw"]
    compiled = run_ok(DISTOPT, "compile", d / "model.onnx", "--loss", "cross-entropy:logits",
                      "--optimizer", "adamw", "--cluster", f"local:{ranks}", *degrees,
                      "--target", target, "-o", tmp_path / "v.dx")
    assert "; vocabulary-parallel loss" in compiled.stdout, compiled.stdout
    bundle = tmp_path / "v.dx"
    graph = run_ok(DISTOPT, "compile", d / "model.onnx", "--loss", "cross-entropy:logits",
                   "--optimizer", "adamw", "--cluster", f"local:{ranks}", *degrees,
                   "--emit=graph", "-o", "-").stdout
    assert re.search(r"shard.all_gather .* -> tensor<\d+x2xf32>", graph), \
        "the loss does not gather the rows' log-sum-exps"
    assert not re.search(r"shard.all_gather .* -> tensor<[\dx]*x2048xf32>", graph), \
        "the logits are gathered for the loss"
    steps, saved = train(bundle, ranks, *batches_as_data(d, tmp_path), "--steps", "10",
                         "--no-shuffle", *train_flags(meta["config"]))
    losses = np.array([s["loss"] for s in steps])
    want = np.array(meta["losses"])
    assert np.abs(losses - want).max() <= 1e-4 * np.abs(want).max(), (losses, want)
    for name, f in meta["weights"].items():
        ref = np.load(d / f)
        err = np.abs(np.load(saved / f"{name}.npy") - ref).max() / max(1e-3, np.abs(ref).max())
        assert err <= 1e-4, f"{name}: relative error {err:.3g}"
    data = batches_as_data(d, tmp_path)
    # Evaluation (its accuracy takes the best score over the whole
    # vocabulary: a max all-reduced over the axis) as one process's.
    one = compile_step(d / "model.onnx", tmp_path / "one.dx", "adamw")
    want = json.loads(run_ok(DISTOPT, "run", one, "eval", *data).stdout)
    got = json.loads(run_ok(DISTOPT, "run", "-n", ranks, bundle, "eval", *data).stdout)
    assert got["samples"] == want["samples"] and got["accuracy"] == want["accuracy"]
    assert abs(got["loss"] - want["loss"]) <= 1e-5 * want["loss"], (got, want)


def test_plan_prices_the_vocabulary_parallel_loss(torch_models):
    """`distopt plan --loss cross-entropy` offers the split logits and says
    what the loss moves; without --loss (or for a 30-word vocabulary, where
    three latency-bound collectives cost more than gathering the logits)
    the output is gathered."""
    def plan(model, *flags):
        return run_ok(DISTOPT, "plan", torch_models / model / "model.onnx", "--cluster",
                      "local:2", "--tp", "2", *flags).stdout
    out = plan("train_gpt_vocab", "--loss", "cross-entropy:logits")
    assert "loss: vocabulary-parallel over the 2 tensor-parallel ranks" in out, out
    assert "loss: vocabulary-parallel" not in plan("train_gpt_vocab")
    assert "loss: vocabulary-parallel" not in plan("train_gpt", "--loss", "cross-entropy:logits")


def test_tensor_parallel_equals_one_process(torch_models, tmp_path):
    """The GPT-style decoder under tp 2, tp 4, dp 2 x tp 2 and dp 2 x tp 2
    with ZeRO-1, with global-norm clipping (each block's squares counted
    once): the losses, gradient norms and final weights of one process
    within 1e-5; a second run of a plan is identical bit for bit."""
    d = torch_models / "train_gpt"
    cfg = json.loads((d / "meta.json").read_text())["gpt_adamw"]["config"]
    data = [*batches_as_data(d, tmp_path), "--steps", "20", "--no-shuffle",
            *train_flags(cfg), "--clip-grad-norm", "0.5"]
    plans = {"tp2": (2, ["--tp", "2"]), "tp4": (4, ["--tp", "4"]),
             "dp2tp2": (4, ["--dp", "2", "--tp", "2"]),
             "dp2tp2z": (4, ["--dp", "2", "--tp", "2", "--zero", "1"])}
    base = assert_plans_equal_one_process(d / "model.onnx", "adamw", data, plans, tmp_path,
                                          repeat="dp2tp2")
    assert any(s["grad_norm"] > 0.5 for s in base)  # clipping acts


def test_tensor_parallel_checkpoints_are_blocks_and_move_between_plans(torch_models, tmp_path):
    """dp 2 x tp 2 with ZeRO-1 writes each weight block once (from the first
    replica) and each chunk of each block's optimizer state from the rank
    holding it; tp 4 resumes from it, one process from tp 4's, and the 24
    steps are the straight run's."""
    d = torch_models / "train_gpt"
    cfg = json.loads((d / "meta.json").read_text())["gpt_adamw"]["config"]
    data = [*batches_as_data(d, tmp_path), "--no-shuffle", *train_flags(cfg)]
    one = compile_step(d / "model.onnx", tmp_path / "one.dx", "adamw")
    zero = compile_step(d / "model.onnx", tmp_path / "z.dx", "adamw", "--cluster", "local:4",
                        "--dp", "2", "--tp", "2", "--zero", "1")
    tp4 = compile_step(d / "model.onnx", tmp_path / "tp4.dx", "adamw", "--cluster", "local:4",
                       "--tp", "4")
    straight, straight_w = train(one, 1, *data, "--steps", "18")
    ck1, ck2 = tmp_path / "ck1", tmp_path / "ck2"
    a, _ = train(zero, 4, *data, "--steps", "6", "--checkpoint-dir", ck1)
    meta = json.loads((ck1 / "checkpoint" / "meta.json").read_text())
    split = split_weights(zero)
    assert "qkv.weight" in split
    entry = meta["weights"]["qkv.weight"]
    assert entry["shape"] == [48, 16]
    assert [b["coords"] for b in entry["blocks"]] == [[0, 0, 0], [0, 0, 1]]
    for b in entry["blocks"]:
        assert np.load(ck1 / "checkpoint" / b["file"]).size == 24 * 16
    state = meta["state"]["opt.m:qkv.weight"]
    assert sorted((b["coords"][1], b["coords"][2], b["offset"]) for b in state["blocks"]) == \
        [(0, 0, 0), (0, 1, 0), (1, 0, 192), (1, 1, 192)]
    b, _ = train(tp4, 4, *data, "--steps", "12", "--resume", ck1, "--checkpoint-dir", ck2)
    c, w = train(one, 1, *data, "--steps", "18", "--resume", ck2, tag="-resumed")
    assert_resumed_runs_continue([a, b, c], w, straight, straight_w)


def test_tensor_parallel_saves_whole_weights(torch_models, tmp_path):
    """--save-onnx and --save-weights of a tp 2 run hold the whole weights
    (gathered from the blocks): ONNX Runtime runs the saved model, and its
    initializers are the saved .npy files."""
    d = torch_models / "train_gpt"
    cfg = json.loads((d / "meta.json").read_text())["gpt_adamw"]["config"]
    bundle = compile_step(d / "model.onnx", tmp_path / "tp.dx", "adamw", "--cluster",
                          "local:2", "--tp", "2")
    out = tmp_path / "trained.onnx"
    _, saved = train(bundle, 2, *batches_as_data(d, tmp_path), "--steps", "5",
                     "--no-shuffle", *train_flags(cfg), "--save-onnx", out)
    model = onnx.load(out)
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    for name in split_weights(bundle):
        got = np.load(saved / f"{name}.npy")
        assert got.shape == inits[name].shape and np.array_equal(got, inits[name]), name
    x = np.load(d / "xs.npy")[0]
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    (logits,) = sess.run(None, {sess.get_inputs()[0].name: x})
    assert np.isfinite(logits).all() and logits.shape[-1] == 30


@pytest.mark.parametrize("name", ["hf_bert", "hf_llama", "hf_gpt2"])
def test_huggingface_models_train_tensor_parallel_like_one_process(name, tmp_path):
    """HuggingFace BERT, LLaMA and GPT-2 (the zoo's exports: layer norms'
    means split over the tensor axis and averaged, RoPE, SwiGLU, GQA; GPT-2's
    fused QKV with a bias the exporter shares between its layers, sliced
    into its block layout) given an MSE loss on their first output: 3 SGD
    steps under tp 2 equal one process's losses within 1e-5."""
    import sys

    from cli import ROOT
    sys.path.insert(0, str(ROOT / "python" / "testmodels"))
    import zoo

    model = zoo.materialize(name, tmp_path)
    dims = [str(a) for a in zoo.dim_args(name, 4)]
    data = []
    for k, v in zoo.inputs(name, 4).items():
        np.save(tmp_path / f"{k}.npy", np.concatenate([v] * 3))
        data += ["--data", f"{k}={tmp_path / f'{k}.npy'}"]
    losses = {}
    for tag, ranks, plan in (("one", 1, []), ("tp2", 2, ["--cluster", "local:2", "--tp", "2"])):
        bundle = compile_step(model, tmp_path / f"{tag}.dx", "sgd", *dims, *plan,
                              loss="mse:0")
        if tag == "tp2":
            assert split_weights(bundle)
        labels = tmp_path / "labels.npy"
        if not labels.exists():
            m = json.loads((bundle / "manifest.json").read_text())
            spec = next(t for t in m["inputs"] if t["name"] == "labels")
            shape = spec.get("global_shape", spec["shape"])
            np.save(labels, np.random.default_rng(0).standard_normal(
                [shape[0] * 3] + shape[1:]).astype(np.float32))
        steps, _ = train(bundle, ranks, *data, "--data", f"labels={labels}", "--steps", "3",
                         "--no-shuffle", "--lr", "0.01", tag=tag)
        losses[tag] = [s["loss"] for s in steps]
    assert np.allclose(losses["tp2"], losses["one"], rtol=1e-5), losses
