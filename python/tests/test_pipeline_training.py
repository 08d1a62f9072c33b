"""Pipeline-parallel training: a training step compiled with --pp
runs one program per stage over the replica's micro-batches in the GPipe or
1F1B order, activations and their adjoints passed between neighbouring
stages, with or without recomputation, combined with data and tensor
parallelism and ZeRO-1. The trajectory is PyTorch's and the one
process's; checkpoints move between plans; the timeline shows each stage's
order; the errors say what is not built."""
from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cli import DISTOPT, ROOT, run
from training import (REFERENCE_DIRS, assert_faults_end_the_job_and_resume,
                      assert_follows_reference, assert_plans_equal_one_process,
                      assert_run_matches_reference,
                      assert_resumed_runs_continue, batches_as_data, compile_step, rel_err,
                      reference_model, train, train_flags)

pytestmark = [
    pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built"),
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun"),
]

# run name of a torch.optim reference run, plan flags, ranks.
CASES = [("gpt_adamw", ["--pp", "2", "--microbatches", "2"], 2),
         ("gpt_adamw", ["--pp", "2", "--microbatches", "4", "--schedule", "gpipe"], 2),
         ("gpt_adamw", ["--dp", "2", "--pp", "2", "--microbatches", "2"], 4),
         ("gpt_adamw", ["--tp", "2", "--pp", "2", "--microbatches", "2"], 4),
         ("encoder_adamw", ["--pp", "2", "--microbatches", "2", "--recompute", "full"], 2),
         ("cnn_sgd", ["--pp", "2", "--microbatches", "2", "--recompute", "selective"], 2),
         ("sgd_clipped", ["--pp", "2", "--microbatches", "3"], 2)]


@pytest.mark.parametrize("run_name,flags,ranks", CASES,
                         ids=[f"{c[0]}-{'-'.join(f.lstrip('-') for f in c[1])}" for c in CASES])
def test_pipeline_training_matches_pytorch(run_name, flags, ranks, torch_models, tmp_path):
    """20 steps under the pipelined plan equal torch.optim's 20 steps on the
    whole batches (loss at every step and final weights within 1e-4):
    micro-batches weigh by their counted labels, gradients accumulate over
    them, the stages' squares add up in the clipping norm."""
    d = torch_models / REFERENCE_DIRS[run_name]
    meta = json.loads((d / "meta.json").read_text())[run_name]
    cfg = meta["config"]
    extra = ["--nesterov"] if cfg.get("nesterov") else []
    bundle = compile_step(d / "model.onnx", tmp_path / "pp.dx", cfg["kind"], "--cluster",
                          f"local:{ranks}", *flags, *extra)
    m = json.loads((bundle / "manifest.json").read_text())
    assert len(m["pipeline"]["stages"]) == 2
    # Each stage holds its own weights only.
    stage_weights = [set(s["weights"]) for s in m["pipeline"]["stages"]]
    assert stage_weights[0] and stage_weights[1] and not stage_weights[0] & stage_weights[1]
    assert_follows_reference(bundle, ranks, d, meta, tmp_path, f"{run_name} {flags}")


@pytest.mark.parametrize("flags", [[], ["--schedule", "gpipe", "--recompute", "full"]],
                         ids=["1f1b", "gpipe-recompute"])
def test_pipeline_micro_batches_with_their_own_statistics(flags, torch_models, tmp_path):
    """Batch norm in training form, pipelined over 2 micro-batches with
    --microbatch-statistics: each micro-batch is normalised by its own
    statistics (GPipe), the running statistics move once per micro-batch in
    order, on the stage that holds them. 20 steps follow PyTorch running
    each batch as two halves before the optimizer step (bn_sgd_microbatches2):
    losses, weights and running means. Without the flag the plan is
    refused, saying what it would change."""
    d = torch_models / "train_bn"
    meta = json.loads((d / "meta.json").read_text())["bn_sgd_microbatches2"]
    model = reference_model(d, meta, tmp_path / "model.onnx")
    pp = ["--cluster", "local:2", "--pp", "2", "--microbatches", "2"]
    p = run(DISTOPT, "compile", model, "--loss", "cross-entropy:logits", "--optimizer", "sgd",
            *pp, "-o", tmp_path / "e.dx", check=False)
    assert p.returncode == 1 and "--microbatches 2 splits the batch, but node " \
        "'/1/BatchNormalization'" in p.stderr and "add --microbatch-statistics" in p.stderr
    # `plan` says what the flag changes, and refuses it for inference.
    p = run(DISTOPT, "plan", model, "--mode", "train", *pp, "--microbatch-statistics")
    assert "batch statistics are each micro-batch's own (of 2 samples; " \
        "--microbatch-statistics)" in p.stdout, p.stdout
    p = run(DISTOPT, "plan", model, "--mode", "infer", "--cluster", "local:2",
            "--microbatch-statistics", check=False)
    assert p.returncode != 0 and "--microbatch-statistics applies to training" in p.stderr
    bundle = compile_step(model, tmp_path / "pp.dx", "sgd", *pp, "--microbatch-statistics",
                          *flags)
    steps, saved = train(bundle, 2, *batches_as_data(d, tmp_path), "--steps", "20",
                         "--no-shuffle", *train_flags(meta["config"]))
    assert_run_matches_reference(steps, saved, d, meta)


def test_pipeline_equals_one_process_under_every_schedule(torch_models, tmp_path):
    """The GPT-style decoder with global-norm clipping: pp 2 under 1F1B and
    GPipe, with selective and full recomputation, dp 2 x pp 2 with ZeRO-1
    and dp 2 x tp 2 x pp 2 follow one process's losses, gradient norms and
    weights within 1e-5; a plan's run repeats bit for bit."""
    d = torch_models / "train_gpt"
    cfg = json.loads((d / "meta.json").read_text())["gpt_adamw"]["config"]
    data = [*batches_as_data(d, tmp_path), "--steps", "20", "--no-shuffle",
            *train_flags(cfg), "--clip-grad-norm", "0.5"]
    plans = {
        "1f1b": (2, ["--pp", "2", "--microbatches", "4"]),
        "gpipe-sel": (2, ["--pp", "2", "--microbatches", "4", "--schedule", "gpipe",
                          "--recompute", "selective"]),
        "full": (2, ["--pp", "2", "--microbatches", "2", "--recompute", "full"]),
        "dp-zero": (4, ["--dp", "2", "--pp", "2", "--microbatches", "2", "--zero", "1"]),
        "3d": (8, ["--dp", "2", "--tp", "2", "--pp", "2", "--microbatches", "2"]),
    }
    assert_plans_equal_one_process(d / "model.onnx", "adamw", data, plans, tmp_path,
                                   repeat="1f1b")


def test_pipeline_checkpoints_move_between_plans(torch_models, tmp_path):
    """dp 2 x pp 2 with ZeRO-1 writes a checkpoint (each stage's tensors by
    its own ranks, described in one meta.json); tp 2 x pp 2 resumes from
    it, one process from that one's: 18 steps as the straight run's."""
    d = torch_models / "train_gpt"
    cfg = json.loads((d / "meta.json").read_text())["gpt_adamw"]["config"]
    data = [*batches_as_data(d, tmp_path), "--no-shuffle", *train_flags(cfg)]
    one = compile_step(d / "model.onnx", tmp_path / "one.dx", "adamw")
    a_b = compile_step(d / "model.onnx", tmp_path / "a.dx", "adamw", "--cluster", "local:4",
                       "--dp", "2", "--pp", "2", "--microbatches", "2", "--zero", "1")
    b_b = compile_step(d / "model.onnx", tmp_path / "b.dx", "adamw", "--cluster", "local:4",
                       "--tp", "2", "--pp", "2", "--microbatches", "2")
    straight, straight_w = train(one, 1, *data, "--steps", "18")
    ck1, ck2 = tmp_path / "ck1", tmp_path / "ck2"
    a, _ = train(a_b, 4, *data, "--steps", "6", "--checkpoint-dir", ck1)
    meta = json.loads((ck1 / "checkpoint" / "meta.json").read_text())
    m = json.loads((a_b / "manifest.json").read_text())
    assert set(meta["weights"]) == {w["name"] for w in m["weights"]}
    # The last stage's weights were written by its first rank (rank 2).
    last = [m["weights"][w]["name"] for w in m["pipeline"]["stages"][1]["weights"]]
    assert all(meta["weights"][n].endswith(".r2.npy") for n in last), meta["weights"]
    b, _ = train(b_b, 4, *data, "--steps", "12", "--resume", ck1, "--checkpoint-dir", ck2)
    c, w = train(one, 1, *data, "--steps", "18", "--resume", ck2, tag="-resumed")
    assert_resumed_runs_continue([a, b, c], w, straight, straight_w)


def test_pipeline_timeline_shows_each_stage_order(torch_models, tmp_path):
    """--trace: each stage's forwards and backwards per micro-batch in the
    schedule's order -- 1F1B on 2 stages and 4 micro-batches: stage 0 runs
    F0 F1 B0 F2 B1 F3 B2 B3, stage 1 F0 B0 F1 B1 ...; GPipe: every F, then
    every B -- and the sends and receives between them."""
    d = torch_models / "train_gpt"
    data = [*batches_as_data(d, tmp_path), "--steps", "2", "--no-shuffle"]
    want = {"1f1b": [["F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"],
                     ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"]],
            "gpipe": [["F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3"]] * 2}
    for schedule, orders in want.items():
        bundle = compile_step(d / "model.onnx", tmp_path / f"{schedule}.dx", "sgd",
                              "--cluster", "local:2", "--pp", "2", "--microbatches", "4",
                              "--schedule", schedule)
        trace = tmp_path / f"{schedule}.json"
        train(bundle, 2, *data, "--trace", trace)
        events = json.loads(trace.read_text())["traceEvents"]
        for stage, order in enumerate(orders):
            mine = sorted((e for e in events if e.get("pid") == stage and
                           e.get("cat") in ("forward", "backward")), key=lambda e: e["ts"])
            assert [e["name"] for e in mine] == order * 2, (schedule, stage)
            assert all(e["args"]["stage"] == stage for e in mine)
            names = {e["name"] for e in events if e.get("pid") == stage}
            assert {"send", "recv"} <= names


def dropout_mlp(path):
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 32)) * 0.3).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((32, 32)) * 0.3).astype(np.float32), "w2"),
             numpy_helper.from_array((rng.standard_normal((32, 8)) * 0.3).astype(np.float32), "w3"),
             numpy_helper.from_array(np.array(0.2, np.float32), "r"),
             numpy_helper.from_array(np.array(True), "t")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["a"], name="relu"),
             helper.make_node("Dropout", ["a", "r", "t"], ["d"], name="drop"),
             helper.make_node("MatMul", ["d", "w2"], ["h2"], name="fc2"),
             helper.make_node("Relu", ["h2"], ["a2"], name="relu2"),
             helper.make_node("Dropout", ["a2", "r", "t"], ["d2"], name="drop2"),
             helper.make_node("MatMul", ["d2", "w3"], ["logits"], name="fc3")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [8, 8])],
                          inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    x = rng.standard_normal((80, 16)).astype(np.float32)
    np.save(path.parent / "x.npy", x)
    np.save(path.parent / "y.npy", x[:, :8].argmax(axis=1).astype(np.int64))
    return ["--data", f"x={path.parent / 'x.npy'}", "--data", f"labels={path.parent / 'y.npy'}"]


def test_pipelined_dropout_draws_the_one_process_masks(tmp_path):
    """Dropout in training form under pp 2 and dp 2 x pp 2 (recomputing
    the forward in backward): each micro-batch draws the masks of its rows
    of the whole batch, so the trajectory is the one process's."""
    path = tmp_path / "mlp.onnx"
    data = [*dropout_mlp(path), "--steps", "15", "--lr", "0.01"]
    one = compile_step(path, tmp_path / "one.dx", "adam")
    base, _ = train(one, 1, *data)
    for ranks, flags in [(2, ["--pp", "2", "--microbatches", "2"]),
                         (4, ["--dp", "2", "--pp", "2", "--microbatches", "2",
                              "--recompute", "full"])]:
        bundle = compile_step(path, tmp_path / f"p{ranks}.dx", "adam", "--cluster",
                              f"local:{ranks}", *flags)
        steps, _ = train(bundle, ranks, *data)
        assert np.allclose([s["loss"] for s in steps], [s["loss"] for s in base],
                           rtol=1e-5), flags


def test_pipelined_step_evaluates_as_one_process(torch_models, tmp_path):
    """A pipelined step's evaluation program is the whole model: rank 0
    gathers the stages' weights (and their tensor-parallel blocks) and runs
    it. `train --eval-data` on pp 2, dp 2 x pp 2 and tp 2 x pp 2 logs the
    evaluation losses and accuracies of one process's run, and `eval` under
    the pipeline's ranks equals one process's."""
    d = torch_models / "train_gpt"
    data = batches_as_data(d, tmp_path)
    evaluation = [f.replace("--data", "--eval-data") for f in data]
    flags = [*data, "--steps", "4", "--no-shuffle", "--lr", "0.01", *evaluation,
             "--eval-every", "2"]
    one = compile_step(d / "model.onnx", tmp_path / "one.dx", "adamw")
    base, _ = train(one, 1, *flags)
    assert [s["step"] for s in base if "eval_loss" in s] == [2, 4]
    want_eval = json.loads(run(DISTOPT, "run", one, "eval", *data).stdout)
    for ranks, plan in ((2, ["--pp", "2", "--microbatches", "2"]),
                        (4, ["--dp", "2", "--pp", "2", "--microbatches", "2"]),
                        (4, ["--tp", "2", "--pp", "2", "--microbatches", "2"])):
        name = "-".join(f.strip("-") for f in plan[:-2])
        bundle = compile_step(d / "model.onnx", tmp_path / f"{name}.dx", "adamw",
                              "--cluster", f"local:{ranks}", *plan)
        steps, _ = train(bundle, ranks, *flags)
        assert len(steps) == len(base), (plan, steps)
        for a, b in zip(steps, base):
            assert ("eval_loss" in a) == ("eval_loss" in b), (a, b)
            if "eval_loss" in b:
                assert abs(a["eval_loss"] - b["eval_loss"]) <= 1e-5 * b["eval_loss"], (a, b)
                assert a["eval_accuracy"] == b["eval_accuracy"], (a, b)
        got = json.loads(run(DISTOPT, "run", "-n", ranks, bundle, "eval", *data).stdout)
        assert got["samples"] == want_eval["samples"]
        assert abs(got["loss"] - want_eval["loss"]) <= 1e-5 * want_eval["loss"], (got, want_eval)


def test_pipeline_training_errors(torch_models, tmp_path):
    d = torch_models / "train_gpt"
    model = d / "model.onnx"

    def compile_(*flags):
        return run(DISTOPT, "compile", model, *flags, "-o", tmp_path / "e.dx", check=False)

    pp = ["--cluster", "local:2", "--pp", "2", "--microbatches", "2"]
    p = compile_("--loss", "cross-entropy:logits", "--gradients", *pp)
    assert p.returncode == 1
    assert "a pipelined plan trains whole steps: --pp needs --loss and --optimizer " \
           "(not --gradients alone)" in p.stderr
    p = compile_("--loss", "cross-entropy:logits", "--optimizer", "sgd", "--accumulate", "2",
                 *pp)
    assert p.returncode == 1
    assert "--accumulate does not combine with --pp: a pipelined step already runs its " \
           "batch as micro-batches (--microbatches)" in p.stderr
    p = compile_("--loss", "cross-entropy:logits", "--optimizer", "sgd", "--schedule", "zigzag",
                 *pp)
    assert p.returncode == 1 and "--schedule must be 1f1b or gpipe, got 'zigzag'" in p.stderr
    p = compile_("--loss", "cross-entropy:logits", "--optimizer", "sgd", "--recompute", "some",
                 *pp)
    assert p.returncode == 1
    assert "--recompute must be off, selective or full, got 'some'" in p.stderr
    p = compile_("--schedule", "gpipe", *pp)
    assert p.returncode == 1
    assert "--schedule applies to training (plan --mode train, compile --optimizer)" in p.stderr
    # An inference pipeline does not train.
    data = batches_as_data(d, tmp_path)
    infer = tmp_path / "i.dx"
    run(DISTOPT, "compile", model, *pp, "-o", infer)
    p = run(DISTOPT, "run", "-n", "2", infer, "train", *data, "--steps", "1", check=False)
    assert p.returncode != 0
    assert "this is a pipelined inference bundle: compile the model with --loss and " \
           "--optimizer to train it" in p.stderr


def test_seeded_sample_of_the_training_sweep(torch_models, tmp_path):
    """Four runs drawn (seeded by the date's day of the year, so CI covers
    the whole matrix over time) from scripts/training-sweep's matrix of
    every model kind x plan kind x recomputation/ZeRO-1: each that the
    planner can make equals one process within 1e-5."""
    import datetime
    import random

    from training_sweep import Sweep, all_runs

    seed = datetime.date.today().timetuple().tm_yday
    sweep = Sweep(torch_models, tmp_path)
    for model, plan, variant in random.Random(seed).sample(all_runs(), 4):
        result, worst = sweep.check(model, plan, variant)
        assert result != "differs", (seed, model, plan, variant, worst)


def test_a_dying_or_hanging_stage_ends_the_job_naming_rank_and_step(torch_models, tmp_path):
    """DISTOPT_FAULT makes the last stage's rank die (SIGKILL) or hang at
    step 5 of a pp 2 run checkpointing every 2 steps: the job ends well
    within 30 s -- the launcher names the dead rank and the other stage the
    step it was in; a hang is caught by the first stage's receive timing
    out -- and the last complete checkpoint (step 4) resumes bit for bit."""
    d = torch_models / "train_gpt"
    data = [*batches_as_data(d, tmp_path), "--no-shuffle", "--lr", "0.01", "--steps", "10"]
    bundle = compile_step(d / "model.onnx", tmp_path / "f.dx", "sgd", "--cluster", "local:2",
                          "--pp", "2", "--microbatches", "2")
    assert_faults_end_the_job_and_resume(bundle, 2, data, "dort_recv")


def test_a_micro_batch_without_counted_labels_adds_nothing(torch_models, tmp_path):
    """A micro-batch whose labels are all ignored (-100) has no mean (0/0):
    it adds nothing to the step's loss and gradients -- under pp 2 with 2
    micro-batches the run equals one process's, not NaN; so does
    --accumulate 2 against the step compiled at twice the batch."""
    d = torch_models / "train_gpt"
    xs, ys = np.load(d / "xs.npy"), np.load(d / "ys.npy")
    ys = ys.copy()
    ys[0, :2] = -100  # step 1: the first micro-batch's two samples
    x, y = tmp_path / "x.npy", tmp_path / "y.npy"
    np.save(x, xs.reshape((-1,) + xs.shape[2:]))
    np.save(y, ys.reshape((-1,) + ys.shape[2:]))
    data = ["--data", f"x={x}", "--data", f"labels={y}", "--steps", "5", "--no-shuffle",
            "--lr", "0.01", "--eps", "1e-4"]
    base, base_w = train(compile_step(d / "model.onnx", tmp_path / "one.dx", "adamw"), 1, *data)
    steps, saved = train(compile_step(d / "model.onnx", tmp_path / "pp.dx", "adamw", "--cluster",
                                      "local:2", "--pp", "2", "--microbatches", "2"), 2, *data)
    assert np.allclose([s["loss"] for s in steps], [s["loss"] for s in base], rtol=1e-5)
    for f in base_w.iterdir():
        assert rel_err(np.load(saved / f.name), np.load(f)) <= 1e-5, f.name

    # --accumulate 2: a linear classifier at batch 4 (twice) against batch 8.
    w = np.random.default_rng(3).standard_normal((16, 8)).astype(np.float32)

    def linear(batch):
        g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["logits"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                                             [batch, 8])],
                              [numpy_helper.from_array(w, "w")])
        path = tmp_path / f"linear{batch}.onnx"
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
        return path

    lx = np.random.default_rng(4).standard_normal((40, 16)).astype(np.float32)
    ly = lx[:, :8].argmax(axis=1).astype(np.int64)
    ly[:4] = -100  # step 1's first micro-batch
    np.save(tmp_path / "lx.npy", lx)
    np.save(tmp_path / "ly.npy", ly)
    ldata = ["--data", f"x={tmp_path / 'lx.npy'}", "--data", f"labels={tmp_path / 'ly.npy'}",
             "--steps", "5", "--no-shuffle", "--lr", "0.05"]
    whole, whole_w = train(compile_step(linear(8), tmp_path / "l8.dx", "sgd"), 1, *ldata)
    acc, acc_w = train(compile_step(linear(4), tmp_path / "l4.dx", "sgd", "--accumulate", "2"),
                       1, *ldata)
    assert np.allclose([s["loss"] for s in acc], [s["loss"] for s in whole], rtol=1e-5)
    assert rel_err(np.load(acc_w / "w.npy"), np.load(whole_w / "w.npy")) <= 1e-5


def test_one_rank_bundles_of_a_plan_train_together(torch_models, tmp_path):
    """`compile --rank R` generates only the program rank R runs: for dp 2 x
    pp 2 (ranks 0-1 run stage 0, ranks 2-3 stage 1), a bundle for rank 1
    and one for rank 2 hold one stage's entry each and the same manifest
    (every rank's buffers). Started together under one mpirun (MPMD), they
    train as the whole bundle does: 20 steps follow torch.optim. A bundle
    started on a rank of another stage says which bundle to build; --rank
    outside the plan and with parameter servers are refused."""
    d = torch_models / REFERENCE_DIRS["gpt_adamw"]
    meta = json.loads((d / "meta.json").read_text())["gpt_adamw"]
    plan = ["--cluster", "local:4", "--dp", "2", "--pp", "2", "--microbatches", "2"]
    bundles = {r: compile_step(d / "model.onnx", tmp_path / f"r{r}.dx", "adamw", *plan,
                               "--rank", str(r)) for r in (1, 2)}
    manifests = {r: json.loads((b / "manifest.json").read_text()) for r, b in bundles.items()}
    assert manifests[1].pop("rank") == 1 and manifests[2].pop("rank") == 2
    assert manifests[1] == manifests[2]
    for r, stage in ((1, 0), (2, 1)):
        symbols = {parts[2] for parts in map(str.split, run("nm", bundles[r] / f"r{r}")
                                                 .stdout.splitlines())
                   if len(parts) == 3 and parts[1] in "Tt"}  # defined functions
        assert f"dopt_entry_{stage}" in symbols and f"dopt_entry_{1 - stage}" not in symbols
        # Rank 0 evaluates a pipelined step: its stage's bundle holds the
        # evaluation program.
        assert ("dopt_eval_entry" in symbols) == (stage == 0)
    data = batches_as_data(d, tmp_path, meta["config"].get("batch_dim", 0))
    log, saved = tmp_path / "mpmd.jsonl", tmp_path / "mpmd.w"
    # (Every rank takes the same arguments: saving gathers the stages'
    # weights.)
    args = ["train", *data, "--steps", "20", "--no-shuffle", *train_flags(meta["config"]),
            "--log", log, "--save-weights", saved]
    run("mpirun", "--oversubscribe", "-np", "2", bundles[1] / "r1", *args,
        ":", "-np", "2", bundles[2] / "r2", *args)
    steps = [json.loads(line) for line in log.read_text().splitlines()]
    assert_run_matches_reference(steps, saved, d, meta)

    p = run("mpirun", "--oversubscribe", "-np", "4", bundles[2] / "r2", *args[:-4],
            check=False)
    assert p.returncode != 0
    assert ("this bundle holds the program of pipeline stage 1 (compiled with --rank 2), "
            "but rank 0 runs stage 0: compile a bundle for it (distopt compile --rank 0)"
            in p.stdout + p.stderr)
    # `distopt run` starts one bundle on every rank: it says what to do instead.
    p = run(DISTOPT, "run", "-n", "4", bundles[2], *args[:-4], check=False)
    assert p.returncode != 0
    assert ("holds the program of one pipeline stage (compiled with --rank 2); start every "
            "stage's bundle under one mpirun") in p.stderr, p.stderr
    for flags, message in (
            ([*plan, "--rank", "4"], "--rank 4: the plan has 4 ranks (0 to 3)"),
            (["--cluster", "local:3", "--sync", "ps", "--servers", "1", "--rank", "0"],
             "--rank: a parameter-server bundle holds the servers' and the workers' "
             "programs together")):
        p = run(DISTOPT, "compile", d / "model.onnx", "--loss", "cross-entropy:logits",
                "--optimizer", "adamw", *flags, "-o", tmp_path / "bad.dx", check=False)
        assert p.returncode != 0 and message in p.stderr, p.stderr


def test_whole_model_evaluation_is_left_out_where_it_exceeds_a_device(tmp_path):
    """A pipelined step's evaluation program runs the whole model on rank 0:
    for GPT-3 175B (650 GiB of fp32 weights) on A100s of 80 GB it is not
    compiled, and compile says so (the model's weights are not present:
    compiling reads shapes only)."""
    run(sys.executable, ROOT / "python/testmodels/gen_models.py", "--out", tmp_path,
        "--only", "gpt3_175b")
    p = run(DISTOPT, "compile", tmp_path / "gpt3_175b.onnx", "--cluster", "128xdgx-a100x8",
            "--dim", "batch=1536", "--dim", "seq=2048", "--precision", "fp16", "--loss",
            "cross-entropy", "--optimizer", "adam", "--target", "cuda", "--rank", "0",
            "--emit", "graph", "-o", tmp_path / "g.mlir")
    assert ("the evaluation program is not compiled: it runs the whole model on rank 0, "
            "whose weights (650.9 GiB) exceed one device (80.0 GiB)") in p.stderr, p.stderr
    assert "dp 16 x tp 8 x pp 8 = 1024 ranks" in p.stderr + p.stdout


def test_compile_reports_each_compiled_ranks_memory_against_the_plan(torch_models, tmp_path):
    """A training step compiled for a plan prints, for each stage it
    generates code for, the device memory as compiled (the runtime's
    buffers by role, the memory plan's arenas) beside the plan's prediction:
    the weights and AdamW's two moments held are what the plan counted."""
    import re
    d = torch_models / REFERENCE_DIRS["gpt_adamw"]
    p = run(DISTOPT, "compile", d / "model.onnx", "--loss", "cross-entropy:logits",
            "--optimizer", "adamw", "--cluster", "local:2", "--pp", "2", "--microbatches", "2",
            "--rank", "1", "-o", tmp_path / "s1.dx")
    lines = [l for l in (p.stdout + p.stderr).splitlines() if "memory of a" in l]
    assert len(lines) == 1 and "memory of a stage-1 device: " in lines[0], p.stderr
    number = r"([0-9.]+)"
    m = re.search(rf"weights {number} \+ optimizer state {number} .* the plan predicted "
                  rf"{number} \w+ \(weights {number}, gradients {number}, optimizer state "
                  rf"{number}, activations {number}\)", lines[0])
    assert m, lines[0]
    weights, state, _, planned_weights, _, planned_state, _ = map(float, m.groups())
    assert weights == planned_weights and state == planned_state, lines[0]
