"""Data-parallel training: a training step compiled with
--cluster and --dp N runs on N processes, each on its share of every batch,
with the loss summed over the replicas and the gradients all-reduced in
buckets. The trajectory is PyTorch's (torch.optim on the whole batch), the
same as one process's within float rounding, for the four model kinds;
checkpoints move between plans; the errors say what is not supported."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from cli import DISTOPT, ROOT, run
from training import (REFERENCE_DIRS, assert_faults_end_the_job_and_resume,
                      assert_follows_reference, assert_plans_equal_one_process,
                      assert_run_matches_reference, batches_as_data, compile_step,
                      learnable_data, reference_model, rel_err, train, train_flags)

pytestmark = [
    pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built"),
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun"),
]

# run name (a torch.optim reference of gen_grad_models.py), replicas, bucket
# size in MiB (small ones force several buckets).
CASES = [("sgd_clipped", 2, "0.0005"), ("adamw", 3, "25"), ("cnn_sgd", 2, "0.001"),
         ("encoder_adamw", 2, "0.002"), ("gpt_adamw", 4, "0.004")]


@pytest.mark.parametrize("run_name,dp,bucket_mb", CASES)
def test_data_parallel_training_matches_pytorch(run_name, dp, bucket_mb, torch_models,
                                                tmp_path):
    """20 steps on dp replicas equal torch.optim's 20 steps on the whole
    batches: the loss at every step and the final weights. Clipping by the
    global norm sees the summed gradients, so it clips as PyTorch does."""
    d = torch_models / REFERENCE_DIRS[run_name]
    meta = json.loads((d / "meta.json").read_text())[run_name]
    cfg = meta["config"]
    flags = ["--nesterov"] if cfg.get("nesterov") else []
    bundle = compile_step(d / "model.onnx", tmp_path / "dp.dx", cfg["kind"], "--cluster",
                          f"local:{dp}", "--dp", str(dp), "--bucket-mb", bucket_mb, *flags)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["ranks"] == dp and manifest["grid"] == [1, dp, 1]
    assert_follows_reference(bundle, dp, d, meta, tmp_path, f"{run_name} on {dp} replicas")


@pytest.mark.parametrize("run_name,plan", [
    ("bn_sgd", ["--dp", "2"]), ("bn_adamw", ["--dp", "2", "--zero", "1"]),
    # The GPU kernels (emulated): the statistics' reductions and their
    # all-reduces on device buffers.
    ("bn_sgd", ["--dp", "2", "--target", "cuda-emu"])])
def test_batch_norm_statistics_are_synchronised_over_replicas(run_name, plan, torch_models,
                                                              tmp_path):
    """Batch norm in training form under data parallelism: each replica
    sums its samples and an all-reduce over the replicas completes the
    batch's mean and variance (SyncBatchNorm), and backward all-reduces the
    statistics' adjoint shares -- so 2 replicas follow torch.optim on the
    whole batch (one process), running statistics included."""
    d = torch_models / "train_bn"
    meta = json.loads((d / "meta.json").read_text())[run_name]
    model = reference_model(d, meta, tmp_path / "model.onnx")
    bundle = compile_step(model, tmp_path / "bn.dx", meta["config"]["kind"], "--cluster",
                          "local:2", *plan)
    saved = assert_follows_reference(bundle, 2, d, meta, tmp_path, f"{run_name} {plan}")
    # Running statistics: the mean as PyTorch's; the variance ONNX's
    # population one where PyTorch keeps the unbiased one (close, not equal).
    for name, f in meta["buffers"].items():
        err = rel_err(np.load(saved / f"{name}.npy"), np.load(d / f))
        assert err <= (1e-4 if name.endswith("mean") else 2e-2), f"{name}: {err:.3g}"


def test_accumulated_micro_batches_with_their_own_statistics_on_replicas(torch_models,
                                                                         tmp_path):
    """--accumulate 2 --microbatch-statistics on 2 replicas (DDP with
    SyncBatchNorm and gradient accumulation): micro-batch m of a step is
    the m-th slice of every replica's share, normalised by the statistics
    of those samples across the replicas, the running statistics moved once
    per micro-batch. With the data laid out so that each such micro-batch
    holds one of PyTorch's batches, the 10 steps follow PyTorch's gradient
    accumulation (bn_sgd_accumulate2): losses, weights, running means."""
    d = torch_models / "train_bn"
    meta = json.loads((d / "meta.json").read_text())["bn_sgd_accumulate2"]
    cfg, k, dp = meta["config"], meta["config"]["accumulate"], 2
    model = reference_model(d, meta, tmp_path / "model.onnx")
    bundle = compile_step(model, tmp_path / "acc.dx", cfg["kind"], "--cluster", f"local:{dp}",
                          "--dp", str(dp), "--accumulate", str(k), "--microbatch-statistics")
    xs, ys = np.load(d / "xs.npy"), np.load(d / "ys.npy")
    steps, batch = xs.shape[0] // k, xs.shape[1]
    share = batch // dp
    # Step s's samples: replica r's share, micro-batch m's slice of it, is
    # PyTorch's batch k*s + m, samples [r*share, (r+1)*share).
    order = [(k * s + m, r * share + j) for s in range(steps) for r in range(dp)
             for m in range(k) for j in range(share)]
    np.save(tmp_path / "x.npy", np.stack([xs[b, i] for b, i in order]))
    np.save(tmp_path / "y.npy", np.stack([ys[b, i] for b, i in order]))
    got, saved = train(bundle, dp, "--data", f"x={tmp_path / 'x.npy'}", "--data",
                       f"labels={tmp_path / 'y.npy'}", "--steps", str(steps), "--no-shuffle",
                       *train_flags(cfg))
    assert_run_matches_reference(got, saved, d, meta)


def test_synchronised_batch_norm_under_tensor_and_pipeline_parallelism(torch_models,
                                                                       tmp_path):
    """The batch-norm CNN trained under dp 2 x tp 2 (the statistics'
    adjoint shares of tensor-split ops summed over both axes) and dp 2 x
    pp 2 (the statistics inside the stages) equals one process: losses,
    gradient norms and weights within 1e-5."""
    d = torch_models / "train_bn"
    meta = json.loads((d / "meta.json").read_text())["bn_sgd"]
    model = reference_model(d, meta, tmp_path / "model.onnx")
    data = [*batches_as_data(d, tmp_path), "--steps", "6", "--no-shuffle",
            *train_flags(meta["config"])]
    plans = {"dp2tp2": (4, ["--dp", "2", "--tp", "2"]),
             "dp2pp2": (4, ["--dp", "2", "--pp", "2"])}
    assert_plans_equal_one_process(model, "sgd", data, plans, tmp_path)


def test_loss_in_the_graph_trains_data_parallel_like_one_process(torch_models, tmp_path):
    """A model exported with its loss (nn.CrossEntropyLoss as ONNX's
    SoftmaxCrossEntropyLoss: a mean over the batch) splits over replicas
    too: the mean is each replica's, completed by an all-reduce, and its
    adjoint is the seed's share. 2 replicas equal one process."""
    model = torch_models / "mlp_cross_entropy" / "model.onnx"
    rng = np.random.default_rng(5)
    np.save(tmp_path / "x.npy", rng.standard_normal((24, 16)).astype(np.float32))
    np.save(tmp_path / "t.npy", rng.integers(0, 8, 24).astype(np.int64))
    data = ["--data", f"x={tmp_path / 'x.npy'}", "--data", f"t={tmp_path / 't.npy'}",
            "--steps", "4", "--no-shuffle", "--lr", "0.01"]
    one = compile_step(model, tmp_path / "one.dx", "adamw", loss="output")
    two = compile_step(model, tmp_path / "two.dx", "adamw", "--cluster", "local:2", "--dp",
                       "2", loss="output")
    manifest = json.loads((two / "manifest.json").read_text())
    assert manifest["grid"] == [1, 2, 1]
    base, base_w = train(one, 1, *data)
    steps, saved = train(two, 2, *data)
    for a, b in zip(steps, base):
        assert abs(a["loss"] - b["loss"]) <= 1e-5 * b["loss"], (a, b)
        assert abs(a["grad_norm"] - b["grad_norm"]) <= 1e-5 * b["grad_norm"], (a, b)
    for f in base_w.iterdir():
        assert rel_err(np.load(saved / f.name), np.load(f)) <= 1e-5, f.name


def test_data_parallel_equals_one_process_and_buckets_do_not_matter(torch_models, tmp_path):
    """The same step on 1, 2 and 3 replicas, and on 2 with one bucket per
    gradient: the same losses and weights within float rounding (the sums
    are added in another order), with shuffling by seed."""
    d = torch_models / "train"
    data = [*learnable_data(tmp_path, 60, 5),
            "--shuffle", "11", "--steps", "15", "--lr", "0.01", "--weight-decay", "0.01"]
    runs = {}
    for name, dp, extra in [("one", 1, []), ("dp2", 2, []), ("dp3", 3, []),
                            ("dp2b", 2, ["--bucket-mb", "0.0001"])]:
        cluster = ["--cluster", f"local:{dp}", "--dp", str(dp)] if dp > 1 else []
        bundle = compile_step(d / "model.onnx", tmp_path / f"{name}.dx", "adam",
                              *cluster, *extra)
        runs[name] = train(bundle, dp, *data)
    base_steps, base_w = runs["one"]
    for name, (steps, saved) in runs.items():
        for a, b in zip(steps, base_steps):
            assert abs(a["loss"] - b["loss"]) <= 1e-5 * abs(b["loss"]), (name, a, b)
            assert abs(a["grad_norm"] - b["grad_norm"]) <= 1e-5 * b["grad_norm"], (name, a, b)
        for f in base_w.iterdir():
            assert rel_err(np.load(saved / f.name), np.load(f)) <= 1e-5, (name, f.name)
    # One all-reduce per gradient with tiny buckets; by default the MLP's
    # four gradients travel in one bucket.
    ir = run(DISTOPT, "compile", d / "model.onnx", "--loss", "cross-entropy:logits",
             "--optimizer", "adam", "--cluster", "local:2", "--dp", "2", "--emit=linalg",
             "-o", "-").stdout
    assert ir.count("dopt.bucket = ") == 1, ir[:2000]


@pytest.mark.parametrize("dtype,tolerance", [("fp16", 1e-3), ("bf16", 1e-2)])
def test_16_bit_gradients_follow_pytorch_and_converge(dtype, tolerance, torch_models, tmp_path):
    """Gradients sent in 16 bits (scaled by 1/replicas before the sum):
    each summed gradient carries one rounding of its dtype (unit 2^-11 for
    fp16, 2^-8 for bf16) relative to its size, so 20 steps of the clipped
    SGD run stay within 1e-3 (fp16) and 1e-2 (bf16) of PyTorch's fp32
    losses and weights (relative L2) -- and the loss falls as it does
    there."""
    d = torch_models / "train"
    meta = json.loads((d / "meta.json").read_text())["sgd_clipped"]
    cfg = meta["config"]
    bundle = compile_step(d / "model.onnx", tmp_path / "h.dx", cfg["kind"], "--cluster",
                          "local:2", "--dp", "2", "--grad-dtype", dtype)
    steps, saved = train(bundle, 2, *batches_as_data(d, tmp_path), "--steps", "20",
                         "--no-shuffle", *train_flags(cfg))
    losses = np.array([s["loss"] for s in steps])
    assert rel_err(losses, meta["losses"]) <= tolerance, (losses, meta["losses"])
    assert losses[-5:].mean() < losses[:5].mean()
    # Weights as a whole (L2): a single element can differ more where a
    # rounding flipped a ReLU for one sample.
    for name, f in meta["weights"].items():
        got, want = np.load(saved / f"{name}.npy"), np.load(d / f)
        err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
        assert err <= tolerance, f"{name}: relative L2 error {err:.3g}"


def test_planner_prices_16_bit_gradients_and_buckets():
    """fp16 gradients halve the bytes of the data-parallel all-reduce the
    planner predicts (ResNet-18 on two 8-GPU nodes); the plan says what it
    assumed."""
    model = ROOT / "python/testmodels/zoo/resnet18.onnx"
    plans = {}
    for dtype in ("fp32", "fp16"):
        p = run(DISTOPT, "plan", model, "--cluster", "2xdgx-h100x8", "--dp", "16",
                "--global-batch", "64", "--grad-dtype", dtype, "--bucket-mb", "50",
                "--json", "-")
        plans[dtype] = json.loads(p.stdout)
    fp32, fp16 = plans["fp32"], plans["fp16"]
    assert fp32["gradient_dtype"] == "fp32" and fp16["gradient_dtype"] == "fp16"
    assert fp16["gradient_bucket_bytes"] == 50 * 2**20
    assert 0.4 < fp16["data_parallel_sync_total_s"] / fp32["data_parallel_sync_total_s"] < 0.75
    assert fp16["predicted_step_time_s"] < fp32["predicted_step_time_s"]
    text = run(DISTOPT, "plan", model, "--cluster", "2xdgx-h100x8", "--dp", "16",
               "--global-batch", "64", "--grad-dtype", "bf16").stdout
    assert "bf16 gradients in buckets of 25 MiB" in text


@pytest.mark.parametrize("run_name,dp", [("sgd_clipped", 3), ("gpt_adamw", 4)])
def test_zero_1_matches_pytorch(run_name, dp, torch_models, tmp_path):
    """ZeRO-1: gradients reduce-scattered, each replica updating its chunk
    of every weight with its chunk of the optimizer state, the chunks
    all-gathered. 20 steps equal torch.optim's (3 replicas: chunks padded,
    and clipping adds the chunks' squares over the replicas)."""
    d = torch_models / REFERENCE_DIRS[run_name]
    meta = json.loads((d / "meta.json").read_text())[run_name]
    cfg = meta["config"]
    bundle = compile_step(d / "model.onnx", tmp_path / "z.dx", cfg["kind"], "--cluster",
                          f"local:{dp}", "--dp", str(dp), "--zero", "1")
    m = json.loads((bundle / "manifest.json").read_text())
    weights = {w["name"]: w["shape"] for w in m["weights"]}
    for t in m["inputs"]:
        if ":" in t["name"]:  # optimizer state: one chunk per replica
            n = int(np.prod(weights[t["name"].split(":", 1)[1]]))
            assert t["split_axes"] == [[1]] and t["shape"] == [-(-n // dp)], t
    assert_follows_reference(bundle, dp, d, meta, tmp_path, f"{run_name}, ZeRO-1 on {dp}")


def test_zero_1_checkpoints_are_written_in_blocks_and_move_between_plans(torch_models,
                                                                        tmp_path):
    """Each rank writes its chunks of the optimizer state (no rank gathers
    it); the checkpoint resumes on one process, on another replica count
    with ZeRO-1, and a one-process checkpoint resumes under ZeRO-1 -- the
    run goes on as if never stopped."""
    d = torch_models / "train"
    data = [*learnable_data(tmp_path, 48, 3),
            "--shuffle", "2", "--lr", "0.01"]
    plans = {"one": (1, []), "z3": (3, ["--zero", "1"]), "z2": (2, ["--zero", "1"])}
    bundles = {k: compile_step(d / "model.onnx", tmp_path / f"{k}.dx", "adam",
                               *(["--cluster", f"local:{n}", "--dp", str(n)] if n > 1 else []),
                               *extra)
               for k, (n, extra) in plans.items()}
    straight, straight_w = train(bundles["one"], 1, *data, "--steps", "12")
    for first, second in [("z3", "one"), ("z3", "z2"), ("one", "z3")]:
        ck = tmp_path / f"ck-{first}-{second}"
        a, _ = train(bundles[first], plans[first][0], *data, "--steps", "6",
                     "--checkpoint-dir", ck, tag=f"-{first}{second}a")
        if first == "z3":
            meta = json.loads((ck / "checkpoint" / "meta.json").read_text())
            block = meta["state"]["opt.m:0.weight"]
            assert block["shape"] == [32, 16]
            assert [b["offset"] for b in block["blocks"]] == [0, 171, 342]
            sizes = [np.load(ck / "checkpoint" / b["file"]).size for b in block["blocks"]]
            assert sizes == [171, 171, 170]
        b, w = train(bundles[second], plans[second][0], *data, "--steps", "12", "--resume", ck,
                     tag=f"-{first}{second}b")
        assert [s["step"] for s in a + b] == list(range(1, 13))
        assert np.allclose([s["loss"] for s in a + b], [s["loss"] for s in straight],
                           rtol=1e-5), (first, second)
        for f in straight_w.iterdir():
            assert rel_err(np.load(w / f.name), np.load(f)) <= 1e-5, (first, second, f.name)


def test_planner_shards_the_optimizer_state_when_memory_needs_it(tmp_path):
    """ResNet-18 on 8 replicas of a device with 150 MB: the replicated Adam
    state does not fit, ZeRO-1 does; the planner turns it on by itself, the
    report shows the optimizer state at 1/8. --zero 0 then fails with the
    memory it needs."""
    yaml = (ROOT / "clusters/dgx-h100x8.yaml").read_text()
    yaml = yaml.replace("memory_capacity: 85520809984", "memory_capacity: 150000000")
    cluster = tmp_path / "small.yaml"
    cluster.write_text(yaml)
    model = ROOT / "python/testmodels/zoo/resnet18.onnx"
    args = [DISTOPT, "plan", model, "--cluster", cluster, "--dp", "8", "--tp", "1", "--pp", "1",
            "--global-batch", "64"]
    p = json.loads(run(*args, "--json", "-").stdout)
    assert p["zero_stage"] == 1
    forced = json.loads(run(*args, "--zero", "1", "--json", "-").stdout)
    assert forced["stages"][0]["memory_bytes"] == p["stages"][0]["memory_bytes"]
    mem = p["stages"][0]["memory_bytes"]
    # Adam's 8 bytes per parameter, over 8 replicas; weights and gradients whole.
    assert abs(mem["optimizer_state"] * 8 - 2 * mem["weights"]) <= 1e-6 * mem["weights"]
    text = run(*args).stdout
    assert "optimizer state" in text and "(ZeRO-1: 1/8 of it)" in text
    q = run(*args, "--zero", "0", check=False)
    assert q.returncode == 1 and "does not fit" in q.stderr


def test_checkpoint_moves_between_plans(torch_models, tmp_path):
    """A checkpoint written on 2 replicas resumes on one process (and one
    written by one process on 3 replicas): the run goes on as if never
    stopped."""
    d = torch_models / "train"
    data = [*learnable_data(tmp_path, 48, 9),
            "--shuffle", "4", "--lr", "0.05", "--momentum", "0.9"]
    bundles = {dp: compile_step(d / "model.onnx", tmp_path / f"s{dp}.dx", "sgd",
                                *(["--cluster", f"local:{dp}", "--dp", str(dp)] if dp > 1
                                  else []))
               for dp in (1, 2, 3)}
    straight, straight_w = train(bundles[1], 1, *data, "--steps", "16")
    for first, second in [(2, 1), (1, 3)]:
        ck = tmp_path / f"ck{first}{second}"
        tag = f"-{first}to{second}"
        a, _ = train(bundles[first], first, *data, "--steps", "8", "--checkpoint-dir", ck,
                     tag=tag + "a")
        b, w = train(bundles[second], second, *data, "--steps", "16", "--resume", ck,
                     tag=tag + "b")
        losses = [s["loss"] for s in a + b]
        assert [s["step"] for s in a + b] == list(range(1, 17))
        assert np.allclose(losses, [s["loss"] for s in straight], rtol=1e-5), (first, second)
        for f in straight_w.iterdir():
            assert rel_err(np.load(w / f.name), np.load(f)) <= 1e-5, f.name


def test_distributed_training_errors(torch_models, tmp_path):
    d = torch_models / "train"
    model = d / "model.onnx"

    def compile_(*flags):
        return run(DISTOPT, "compile", model, "--loss", "cross-entropy:logits", "--optimizer",
                   "sgd", *flags, "-o", tmp_path / "e.dx", check=False)

    p = compile_("--cluster", "local:2", "--dp", "2", "--bucket-mb", "0")
    assert p.returncode == 1 and "--bucket-mb must be positive" in p.stderr
    p = compile_("--cluster", "local:2", "--dp", "2", "--grad-dtype", "fp8")
    assert p.returncode == 1 and "--grad-dtype must be fp32, fp16 or bf16, got 'fp8'" in p.stderr
    for flag in (["--bucket-mb", "4"], ["--grad-dtype", "bf16"], ["--zero", "0"]):
        p = run(DISTOPT, "compile", model, *flag, "-o", tmp_path / "f.dx", check=False)
        assert p.returncode == 1
        assert "--bucket-mb, --grad-dtype and --zero apply to --gradients and --optimizer" \
            in p.stderr
    p = compile_("--cluster", "local:2", "--dp", "2", "--zero", "2")
    assert p.returncode == 1
    assert "--zero must be 0 or 1 (ZeRO stages 2 and 3 are not built), got 2" in p.stderr
    p = run(DISTOPT, "compile", model, "--loss", "cross-entropy:logits", "--gradients",
            "--zero", "1", "--cluster", "local:2", "--dp", "2", "-o", tmp_path / "g.dx",
            check=False)
    assert p.returncode == 1 and "--zero 1 shards the optimizer state" in p.stderr
    # Batch norm in training form averages over the batch: replicas of
    # unequal (padded) shares, or micro-batches, would change its statistics.
    bn = torch_models / "train_bn" / "model.onnx"
    p = run(DISTOPT, "compile", bn, "--loss", "cross-entropy:logits", "--optimizer", "sgd",
            "--cluster", "local:3", "--dp", "3", "-o", tmp_path / "bn.dx", check=False)
    assert p.returncode == 1 and "--dp 3 does not divide the global batch of 4, but node " \
        in p.stderr and "it averages over the batch, which padded samples would enter" \
        in p.stderr, p.stderr
    p = run(DISTOPT, "compile", bn, "--loss", "cross-entropy:logits", "--optimizer", "sgd",
            "--cluster", "local:2", "--pp", "2", "--microbatches", "2", "-o",
            tmp_path / "bn.dx", check=False)
    assert p.returncode == 1 and "--microbatches 2 splits the batch, but node " in p.stderr \
        and "(a statistic of a micro-batch is not the batch's); only --microbatches 1" \
        in p.stderr, p.stderr
    # A data-parallel step started on the wrong number of processes.
    bundle = compile_step(model, tmp_path / "dp2.dx", "sgd", "--cluster", "local:2",
                          "--dp", "2")
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((12, 16), np.float32))
    y = tmp_path / "y.npy"
    np.save(y, np.zeros(12, np.int64))
    p = run(bundle / "dp2", "train", "--data", f"x={x}", "--data", f"labels={y}", "--steps",
            "1", check=False)
    assert p.returncode == 1
    assert "compiled for 2 ranks, but it was launched on 1; run it with `mpirun -np 2`" \
        in p.stderr
    # A failure on the ranks ends the job with the message (here: the data).
    p = run(DISTOPT, "run", "-n", "2", bundle, "train", "--data", f"x={x}", "--steps", "1",
            check=False)
    assert p.returncode != 0 and "missing data for input 'labels'" in p.stderr


def test_labels_are_split_like_the_logits(torch_models, tmp_path):
    """The manifest of a data-parallel step: the data inputs are cut along
    the batch over the data axis, everything else is replicated."""
    model = onnx.load(str(torch_models / "train" / "model.onnx"))
    batch = model.graph.input[0].type.tensor_type.shape.dim[0].dim_value
    bundle = compile_step(torch_models / "train" / "model.onnx", tmp_path / "m.dx", "adamw",
                          "--cluster", "local:2", "--dp", "2")
    m = json.loads((bundle / "manifest.json").read_text())
    inputs = {t["name"]: t for t in m["inputs"]}
    assert inputs["x"]["split_axes"] == [[1], []] and inputs["x"]["shape"][0] == batch // 2
    assert inputs["labels"]["split_axes"] == [[1]]
    assert inputs["labels"]["global_shape"] == [batch]
    assert all("split_axes" not in t for n, t in inputs.items() if n.startswith("opt."))
    assert all("split_axes" not in w for w in m["weights"])


def test_log_and_trace_of_a_data_parallel_run(torch_models, tmp_path):
    """The per-step log has the throughput, the achieved FLOP/s and the
    share of the step spent waiting for communication; --trace writes one
    Chrome-trace timeline of both ranks in which every bucket's all-reduce
    is started during backward (the start of bucket 0 comes before the
    gradients of the later buckets exist), runs on the communication thread,
    and is waited for only afterwards, inside its step."""
    d = torch_models / "train_gpt"
    bundle = compile_step(d / "model.onnx", tmp_path / "g.dx", "adamw", "--cluster", "local:2",
                          "--dp", "2", "--bucket-mb", "0.005")
    ir = run(DISTOPT, "compile", d / "model.onnx", "--loss", "cross-entropy:logits",
             "--optimizer", "adamw", "--cluster", "local:2", "--dp", "2", "--bucket-mb",
             "0.005", "--emit=linalg", "-o", "-").stdout
    buckets = ir.count("dopt.bucket = ")
    assert buckets >= 3
    trace_file = tmp_path / "trace.json"
    steps, _ = train(bundle, 2, *batches_as_data(d, tmp_path), "--steps", "4", "--trace",
                     trace_file)
    for s in steps:
        assert s["samples_per_s"] > 0 and s["flops_per_s"] > 0 and s["step_s"] > 0
        assert 0 <= s["comm_wait_s"] <= s["step_s"] and 0 <= s["comm_share"] <= 1
    events = json.loads(trace_file.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    assert names == {0: "rank 0", 1: "rank 1"}
    for rank in (0, 1):
        mine = [e for e in events if e["pid"] == rank and e["ph"] != "M"]
        step_spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in mine if e["cat"] == "step")
        assert len(step_spans) == 4
        for lo, hi in step_spans:
            inside = [e for e in mine if lo <= e["ts"] <= hi and e["cat"] == "comm"]

            def of(prefix, k):
                found = [e for e in inside if e["name"] == f"{prefix} (bucket {k})"]
                assert len(found) == 1, (prefix, k, inside)
                return found[0]

            starts = [of("start", k)["ts"] for k in range(buckets)]
            assert starts == sorted(starts) and starts[0] < starts[-1]
            for k in range(buckets):
                reduce, wait = of("all_reduce", k), of("wait", k)
                assert reduce["tid"] == 1 and reduce["args"]["bytes"] > 0
                assert wait["tid"] == 0
                # Waited for after every bucket has started: the waits sit
                # where the update first reads the gradients.
                assert wait["ts"] >= starts[-1]
                assert reduce["ts"] + reduce["dur"] <= hi + 1


def test_a_dying_or_hanging_rank_ends_the_job_naming_rank_and_step(torch_models, tmp_path):
    """DISTOPT_FAULT makes rank 1 die (SIGKILL) or hang at step 5 of a
    3-replica run checkpointing every 2 steps: the job ends well within 30
    s, the launcher names the dead rank, the others name the step; the last
    complete checkpoint (step 4) resumes and finishes the run as if nothing
    had happened."""
    d = torch_models / "train"
    data = [*learnable_data(tmp_path, 60, 6),
            "--lr", "0.05", "--steps", "10"]
    bundle = compile_step(d / "model.onnx", tmp_path / "f.dx", "sgd", "--cluster", "local:3",
                          "--dp", "3")
    assert_faults_end_the_job_and_resume(bundle, 3, data, "dort_all_reduce")


def test_a_run_is_bit_identical_for_a_fixed_seed_plan_and_rank_count(torch_models, tmp_path):
    """Twice the same 3-replica run (shuffled, buckets on the communication
    thread, 16-bit gradients): the same losses, norms and weights, bit for
    bit."""
    d = torch_models / "train"
    data = [*learnable_data(tmp_path, 60, 8),
            "--shuffle", "5", "--steps", "12", "--lr", "0.01"]
    bundle = compile_step(d / "model.onnx", tmp_path / "b.dx", "adamw", "--cluster", "local:3",
                          "--dp", "3", "--bucket-mb", "0.001", "--grad-dtype", "bf16")
    a, wa = train(bundle, 3, *data, tag="-a")
    b, wb = train(bundle, 3, *data, tag="-b")
    assert [(s["loss"], s["grad_norm"]) for s in a] == [(s["loss"], s["grad_norm"]) for s in b]
    for f in wa.iterdir():
        assert np.array_equal(np.load(f), np.load(wb / f.name)), f.name


def test_eval_on_replicas_equals_one_process(torch_models, tmp_path):
    """The evaluation program is partitioned as the step is: on 2 and 3
    replicas (the last batch padded, the sums and counts all-reduced) it
    reports one process's loss and accuracy."""
    d = torch_models / "train"
    data = learnable_data(tmp_path, 40, 13)
    results = []
    for dp in (1, 2, 3):
        cluster = ["--cluster", f"local:{dp}", "--dp", str(dp)] if dp > 1 else []
        bundle = compile_step(d / "model.onnx", tmp_path / f"e{dp}.dx", "sgd", *cluster)
        results.append(json.loads(run(DISTOPT, "run", "-n", dp, bundle, "eval", *data).stdout))
    for r in results[1:]:
        assert r["samples"] == 40 and r["accuracy"] == results[0]["accuracy"]
        assert abs(r["loss"] - results[0]["loss"]) <= 1e-6 * results[0]["loss"], results


def test_accumulated_micro_batches_equal_one_big_batch(torch_models, tmp_path):
    """--accumulate 2 on the 6-sample MLP step is the 12-sample step: the
    same losses and weights (ignored labels included: each micro-batch
    weighs by its counted labels), in one process and on 2 replicas
    (gradients communicated once per step)."""
    d = torch_models / "train"
    model = onnx.load(str(d / "model.onnx"))
    for v in list(model.graph.input) + list(model.graph.output):
        v.type.tensor_type.shape.dim[0].dim_value = 12
    del model.graph.value_info[:]
    big = tmp_path / "big.onnx"
    onnx.save(model, str(big))
    data = learnable_data(tmp_path, 60, 21)
    y = np.load(tmp_path / "y.npy")
    y[::7] = -100
    np.save(tmp_path / "y.npy", y)
    data += ["--steps", "10", "--lr", "0.1", "--momentum", "0.9", "--no-shuffle"]
    ref, ref_w = train(compile_step(big, tmp_path / "big.dx", "sgd"), 1, *data)
    for dp in (1, 2):
        cluster = ["--cluster", f"local:{dp}", "--dp", str(dp)] if dp > 1 else []
        bundle = compile_step(d / "model.onnx", tmp_path / f"acc{dp}.dx", "sgd",
                              "--accumulate", "2", *cluster)
        m = json.loads((bundle / "manifest.json").read_text())
        x_in = next(t for t in m["inputs"] if t["name"] == "x")
        assert x_in.get("global_shape", x_in["shape"]) == [12, 16]
        steps, w = train(bundle, dp, *data)
        assert np.allclose([s["loss"] for s in steps], [s["loss"] for s in ref], rtol=1e-5)
        for f in ref_w.iterdir():
            assert rel_err(np.load(w / f.name), np.load(f)) <= 1e-5, (dp, f.name)
    # `train --accumulate` restates what the step was compiled for.
    run(bundle / "acc2", "train", *data, "--accumulate", "2", check=False)
    p = run(DISTOPT, "run", "-n", "2", bundle, "train", *data, "--accumulate", "4",
            check=False)
    assert p.returncode != 0 and "this step was compiled for 2 micro-batch(es)" in p.stderr
    p = run(DISTOPT, "compile", d / "model.onnx", "--loss", "cross-entropy:logits",
            "--accumulate", "2", "-o", tmp_path / "e.dx", check=False)
    assert p.returncode == 1 and "--accumulate applies to a training step" in p.stderr
    p = run(DISTOPT, "compile", d / "model.onnx", "--loss", "cross-entropy:logits",
            "--optimizer", "sgd", "--accumulate", "0", "-o", tmp_path / "e.dx", check=False)
    assert p.returncode == 1 and "--accumulate must be at least 1" in p.stderr
    p = run(DISTOPT, "compile", d / "model.onnx", "--loss", "cross-entropy:logits",
            "--optimizer", "sgd", "--microbatch-statistics", "-o", tmp_path / "e.dx",
            check=False)
    assert p.returncode == 1 and \
        "--microbatch-statistics applies to --accumulate with K of 2 or more" in p.stderr


def test_accumulate_refuses_what_micro_batches_would_change(torch_models, tmp_path):
    """--accumulate cuts the batch into micro-batches: a statistic over the
    batch (batch norm in training form) is refused unless
    --microbatch-statistics asks for each micro-batch's own, and an op
    mixing the samples is refused outright."""
    bn = torch_models / "train_bn" / "model.onnx"
    p = run(DISTOPT, "compile", bn, "--loss", "cross-entropy:logits", "--optimizer", "sgd",
            "--accumulate", "2", "-o", tmp_path / "e.dx", check=False)
    assert p.returncode == 1 and "--accumulate 2 cuts the batch into micro-batches, but " \
        "node '/1/BatchNormalization'" in p.stderr and "add --microbatch-statistics" in p.stderr
    assert not (tmp_path / "e.dx").exists()
    # logits = (x^T W)^T: every sample's logits read every sample.
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.eye(4, dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0], name="t1"),
         helper.make_node("MatMul", ["xt", "w"], ["m"], name="mixer"),
         helper.make_node("Transpose", ["m"], ["logits"], perm=[1, 0], name="t2")],
        "mix", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [4, 8])], [w])
    mix = tmp_path / "mix.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(mix))
    p = run(DISTOPT, "compile", mix, "--loss", "cross-entropy:logits", "--optimizer", "sgd",
            "--accumulate", "2", "--microbatch-statistics", "-o", tmp_path / "m.dx", check=False)
    assert p.returncode == 1 and "--accumulate 2 cuts the batch into micro-batches, but " \
        "node 'mixer'" in p.stderr and "the samples of a batch cannot be split" in p.stderr


@pytest.mark.parametrize("plan", ["one", "dp2", "pp2"])
def test_sequence_first_training_follows_pytorch(torch_models, tmp_path, plan):
    """nn.TransformerEncoder in PyTorch's default layout (x [seq, batch,
    16], labels [seq, batch]; exported with a symbolic batch in dimension
    1): data files hold one sample after another, and the loader places
    them along the model's batch dimension (the manifest's batch_dim), in
    one process, on 2 replicas (each its block of dimension 1) and on 2
    pipeline stages (micro-batches cut along dimension 1). 20 AdamW steps
    follow torch.optim's within 1e-4."""
    d = torch_models / "train_encoder_sf"
    meta = json.loads((d / "meta.json").read_text())["encoder_sf_adamw"]
    dp = 2 if plan != "one" else 1
    cluster = {"one": [], "dp2": ["--cluster", "local:2", "--dp", "2"],
               "pp2": ["--cluster", "local:2", "--pp", "2", "--microbatches", "2"]}[plan]
    bundle = compile_step(d / "model.onnx", tmp_path / f"sf{plan}.dx", "adamw",
                          "--dim", "batch=4", *cluster)
    m = json.loads((bundle / "manifest.json").read_text())
    specs = {t["name"]: t for t in m["inputs"]}
    assert specs["x"]["batch_dim"] == 1 and specs["labels"]["batch_dim"] == 1
    assert specs["x"].get("global_shape", specs["x"]["shape"]) == [8, 4, 16]
    assert_follows_reference(bundle, dp, d, meta, tmp_path, f"seq-first, {plan}")
    # The evaluation program reads them alike: over the first batch, with
    # the bundle's (initial) weights, its loss is PyTorch's first step's.
    np.save(tmp_path / "x4.npy", np.load(tmp_path / "x.npy")[:4])
    np.save(tmp_path / "y4.npy", np.load(tmp_path / "y.npy")[:4])
    p = run(DISTOPT, "run", "-n", dp, bundle, "eval", "--data", f"x={tmp_path / 'x4.npy'}",
            "--data", f"labels={tmp_path / 'y4.npy'}")
    result = json.loads(p.stdout.strip().splitlines()[-1])
    assert result["samples"] == 4 and abs(result["loss"] - meta["losses"][0]) <= \
        1e-5 * meta["losses"][0], (result, meta["losses"][0])

    def evaluate(rows):
        x, y = np.load(tmp_path / "x.npy")[rows], np.load(tmp_path / "y.npy")[rows]
        np.save(tmp_path / "xe.npy", x)
        np.save(tmp_path / "ye.npy", y)
        p = run(DISTOPT, "run", "-n", dp, bundle, "eval", "--data",
                f"x={tmp_path / 'xe.npy'}", "--data", f"labels={tmp_path / 'ye.npy'}")
        return json.loads(p.stdout.strip().splitlines()[-1])["loss"]

    # 6 samples: the second batch is 2 samples and 2 of padding, whose
    # labels (every position of the padded samples, wherever the model's
    # layout puts them) are ignored: the mean over the 6 samples' labels.
    # Samples 4 and 5 repeat 0 and 1, so it is (4 e(0..3) + 2 e(0, 1)) / 6.
    e6, e4, e01 = evaluate([0, 1, 2, 3, 0, 1]), evaluate([0, 1, 2, 3]), evaluate([0, 1, 0, 1])
    assert abs(e6 - (4 * e4 + 2 * e01) / 6) <= 1e-5 * e6, (e6, e4, e01)
    if plan == "one":
        # A data file in the model's layout ([seq, samples, 16]) is not
        # samples along axis 0: refused, saying what is expected.
        x = np.load(tmp_path / "x.npy")
        np.save(tmp_path / "x_model_layout.npy", np.moveaxis(x, 0, 1))
        p = run(bundle / bundle.stem, "train", "--data",
                f"x={tmp_path / 'x_model_layout.npy'}", "--data",
                f"labels={tmp_path / 'y.npy'}", "--steps", "1", check=False)
        assert p.returncode == 1 and "expected float32 [N, 8, 16] (samples along axis 0; " \
            "the model takes them along its dimension 1, [8, 4, 16] a step)" in p.stderr, \
            p.stderr


def test_a_fixed_shape_sequence_first_export_is_warned_about(torch_models, tmp_path):
    """Exported with fixed shapes (torch.onnx.export's default), nothing
    says the encoder's batch is dimension 1: a training step takes dimension
    0 for the samples. Its attention mixes along dimension 0, so the compile
    warns, naming the node and the cure; batch-first models and symbolic
    batches compile without it."""
    d = torch_models / "train_encoder_sf"
    flags = ["--loss", "cross-entropy:logits", "--optimizer", "adamw"]
    p = run(DISTOPT, "compile", d / "fixed.onnx", *flags, "-o", tmp_path / "f.dx")
    assert "warning: the model has no symbolic batch dimension, so a training step takes " \
        "dimension 0 of its inputs for the samples, but node '/enc/layers.0/self_attn/" in \
        p.stderr and "export it with that dimension symbolic" in p.stderr, p.stderr
    for model, extra in ((d / "model.onnx", ["--dim", "batch=4"]),
                         (torch_models / "train_encoder" / "model.onnx", [])):
        p = run(DISTOPT, "compile", model, *flags, *extra, "-o", tmp_path / "g.dx")
        assert "warning" not in p.stderr, p.stderr
    # A planned IR of the sequence-first model (distopt plan --emit=ir) is
    # not read for where the batch lies: its training step is refused.
    ir = tmp_path / "p.mlir"
    ir.write_text(run(DISTOPT, "plan", d / "model.onnx", "--dim", "batch=4", "--mode", "train",
                      "--cluster", "local:2", "--dp", "2", "--emit=ir").stdout)
    p = run(DISTOPT, "compile", ir, *flags, "-o", tmp_path / "p.dx", check=False)
    assert p.returncode == 1 and "input 0 carries its batch in dimension 1; a training step " \
        "of such a model compiles from the ONNX model, not from a planned IR, yet" in p.stderr, \
        p.stderr


def test_sequence_first_micro_batches_draw_the_whole_batch_masks(torch_models, tmp_path):
    """The sequence-first encoder with dropout 0.1: --accumulate 2 at batch
    4 is the batch-8 step (the micro-batches cut dimension 1, and every
    dropout continues its mask positions along the dimension that holds its
    batch: [seq, batch, 16] after the layers, [batch * heads, seq, seq] in
    attention), in one process and on 2 replicas; pipeline stages over 2
    micro-batches equal one process. Distopt against itself: the masks are
    its own. The key projection's bias is left out: its gradient is zero in
    exact arithmetic (a softmax does not see a constant added to every
    score), so AdamW steps it on rounding noise, which the summation order
    decides."""
    model = torch_models / "train_encoder_sf" / "dropout.onnx"
    x = np.random.default_rng(5).standard_normal((48, 8, 16)).astype(np.float32)
    y = np.random.default_rng(6).integers(0, 6, (48, 8))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    data = ["--data", f"x={tmp_path / 'x.npy'}", "--data", f"labels={tmp_path / 'y.npy'}",
            "--steps", "6", "--lr", "0.003", "--no-shuffle"]
    big = compile_step(model, tmp_path / "big.dx", "adamw", "--dim", "batch=8")
    ref, ref_w = train(big, 1, *data)
    # The masks are live: another seed (the data still in file order) draws
    # others.
    other, _ = train(big, 1, *data, "--shuffle", "7", "--no-shuffle", tag="-seed7")
    assert abs(other[0]["loss"] - ref[0]["loss"]) > 1e-4 * ref[0]["loss"], (other[0], ref[0])
    for dp in (1, 2):
        cluster = ["--cluster", f"local:{dp}", "--dp", str(dp)] if dp > 1 else []
        bundle = compile_step(model, tmp_path / f"acc{dp}.dx", "adamw", "--dim", "batch=4",
                              "--accumulate", "2", *cluster)
        steps, w = train(bundle, dp, *data)
        assert np.allclose([s["loss"] for s in steps], [s["loss"] for s in ref], rtol=1e-5)
        assert_weights_equal(w, ref_w, dp)
    one, one_w = train(compile_step(model, tmp_path / "one.dx", "adamw", "--dim", "batch=4"),
                       1, *data)
    pp = compile_step(model, tmp_path / "pp.dx", "adamw", "--dim", "batch=4", "--cluster",
                      "local:2", "--pp", "2", "--microbatches", "2")
    steps, w = train(pp, 2, *data)
    assert np.allclose([s["loss"] for s in steps], [s["loss"] for s in one], rtol=1e-5)
    assert_weights_equal(w, one_w, "pp 2")


def assert_weights_equal(got: Path, want: Path, what):
    """Saved weights within 1e-5, but for the key projection's bias (the
    middle third of in_proj_bias), which trains on rounding noise."""
    for f in want.iterdir():
        a, b = np.load(got / f.name), np.load(f)
        if f.name.endswith("in_proj_bias.npy"):
            d = a.size // 3
            a, b = np.delete(a, np.s_[d:2 * d]), np.delete(b, np.s_[d:2 * d])
        assert rel_err(a, b) <= 1e-5, (what, f.name)


def test_data_inputs_must_agree_on_the_batch(tmp_path):
    """A second input whose samples per step differ from the first's (a
    [2, 8] side input next to x [4, 8]) cannot be read from files of
    samples: `train` says which and how many, instead of reading past the
    end of a file."""
    from onnx import TensorProto, helper, numpy_helper
    inits = [numpy_helper.from_array(np.ones((8, 5), np.float32), "w"),
             numpy_helper.from_array(np.ones((8, 5), np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="mx"),
             helper.make_node("ReduceMean", ["b"], ["bm"], axes=[0], keepdims=1, name="mean"),
             helper.make_node("MatMul", ["bm", "w2"], ["c"], name="mb"),
             helper.make_node("Add", ["a", "c"], ["logits"], name="add")]
    graph = helper.make_graph(
        nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8]),
                       helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [4, 5])], inits)
    path = tmp_path / "two.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    bundle = compile_step(path, tmp_path / "two.dx", "sgd")
    for name, shape in (("x", (8, 8)), ("b", (8, 8))):
        np.save(tmp_path / f"{name}.npy", np.ones(shape, np.float32))
    np.save(tmp_path / "y.npy", np.zeros(8, np.int64))
    p = run(bundle / "two", "train", "--data", f"x={tmp_path / 'x.npy'}", "--data",
            f"b={tmp_path / 'b.npy'}", "--data", f"labels={tmp_path / 'y.npy'}", "--steps", "1",
            check=False)
    assert p.returncode == 1 and "data 'b' takes 2 samples a step, but 'x' takes 4 (every " \
        "data input holds the batch)" in p.stderr, p.stderr


def test_micro_batches_refuse_a_dropout_over_a_spread_batch(tmp_path):
    """A dropout on [seq * batch, 6] with the sequence outermost (a
    sequence-first input flattened): the batch is not one block of that
    dimension, so no micro-batch's mask is the whole batch's; --accumulate
    is refused naming the node, and the step without it compiles."""
    from onnx import TensorProto, helper, numpy_helper
    inits = [numpy_helper.from_array(np.ones((6, 5), np.float32), "w"),
             numpy_helper.from_array(np.array([-1, 6], np.int64), "flat_shape"),
             numpy_helper.from_array(np.array([3, 4, 5], np.int64), "back_shape"),
             numpy_helper.from_array(np.array(0.2, np.float32), "ratio"),
             numpy_helper.from_array(np.array(True), "training")]
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2], name="to_seq_first"),
             helper.make_node("Reshape", ["xt", "flat_shape"], ["flat"], name="flatten"),
             helper.make_node("Dropout", ["flat", "ratio", "training"], ["dropped"],
                              name="spread_dropout"),
             helper.make_node("MatMul", ["dropped", "w"], ["m"], name="mm"),
             helper.make_node("Reshape", ["m", "back_shape"], ["mr"], name="unflatten"),
             helper.make_node("Transpose", ["mr"], ["logits"], perm=[1, 0, 2], name="back")]
    graph = helper.make_graph(
        nodes, "spread", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3, 6])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [4, 3, 5])], inits)
    path = tmp_path / "spread.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    flags = ["--loss", "cross-entropy:logits", "--optimizer", "sgd"]
    p = run(DISTOPT, "compile", path, *flags, "--accumulate", "2", "-o", tmp_path / "a.dx",
            check=False)
    assert p.returncode == 1 and "'spread_dropout': error: --accumulate 2 cuts the batch " \
        "into micro-batches, but this dropout's input holds the batch spread over a " \
        "dimension with other data" in p.stderr, p.stderr
    assert not (tmp_path / "a.dx").exists()
    run(DISTOPT, "compile", path, *flags, "-o", tmp_path / "s.dx")


def test_uneven_data_parallel_batch_pads_with_ignored_labels(torch_models, tmp_path):
    """4 replicas on batches of 6: each replica runs 2 samples, the last
    replica's rows all padding. The padding's labels are ignored (not class
    0), so 10 steps equal one process's within 1e-5 (found by
    scripts/training-sweep)."""
    d = torch_models / "train"
    data = [*batches_as_data(d, tmp_path), "--steps", "10", "--no-shuffle", "--lr", "0.01",
            "--clip-grad-norm", "0.5"]
    one, one_w = train(compile_step(d / "model.onnx", tmp_path / "one.dx", "adamw"), 1, *data)
    four, four_w = train(compile_step(d / "model.onnx", tmp_path / "four.dx", "adamw",
                                      "--cluster", "local:4", "--dp", "4"), 4, *data)
    assert np.allclose([s["loss"] for s in four], [s["loss"] for s in one], rtol=1e-5)
    for f in one_w.iterdir():
        assert rel_err(np.load(four_w / f.name), np.load(f)) <= 1e-5, f.name


def test_recurrent_model_trains_alike_under_every_plan(torch_models, tmp_path):
    """A 2-layer bidirectional nn.LSTM and an nn.GRU, unrolled over the
    sequence with a product per gate: dp 2 x tp 2 (each gate's hidden
    columns split, the recurrent products' partial sums reduced every step)
    and pp 2 (2 micro-batches) train as one process does. (Before the
    product per gate, tp 2 failed to plan: the gates sliced from one
    product looked like a fused QKV block layout.)"""
    d = torch_models / "recurrent_cross_entropy"
    model = onnx.load(str(d / "model_dyn.onnx"))
    for v in [*model.graph.input, *model.graph.output]:
        for dim in v.type.tensor_type.shape.dim:
            if dim.dim_param == "batch":
                dim.dim_value = 4
    path = tmp_path / "recurrent.onnx"
    onnx.save(model, str(path))
    data = ["--data", f"x={d / 'x.npy'}", "--data", f"labels={d / 'labels.npy'}",
            "--steps", "6", "--no-shuffle", "--lr", "0.5"]
    plans = {"pp2": (2, ["--pp", "2", "--microbatches", "2"]),
             "dp2tp2": (4, ["--dp", "2", "--tp", "2"])}
    assert_plans_equal_one_process(path, "sgd", data, plans, tmp_path)


def gated_deltanet_model(path: Path, batch=4, seq=5, dim=8, heads=2, head=4, classes=3):
    """A Gated DeltaNet block written with the opset-27 ops (what exporters
    of Qwen3.5-style models write): a causal depthwise convolution with SiLU
    over the sequence, then q, k, v, a per-head decay -softplus(x·Wg) and an
    update rate sigmoid(x·Wb) into LinearAttention (gated_delta), a residual
    projection, and the last token's class logits."""
    from onnx import TensorProto as TP, helper, numpy_helper
    rng = np.random.default_rng(5)

    def w(name, *shape, scale=0.4):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                       name)

    n = helper.make_node
    nodes = [
        n("Transpose", ["x"], ["xc"], perm=[0, 2, 1]),
        n("CausalConvWithState", ["xc", "conv_w", "conv_b"], ["hc", "conv_state"],
          activation="silu"),
        n("Transpose", ["hc"], ["h"], perm=[0, 2, 1]),
        n("MatMul", ["h", "wq"], ["q"]), n("MatMul", ["h", "wk"], ["k0"]),
        n("LpNormalization", ["k0"], ["k"], axis=-1, p=2),
        n("MatMul", ["h", "wv"], ["v"]),
        n("MatMul", ["h", "wg"], ["g0"]), n("Softplus", ["g0"], ["g1"]), n("Neg", ["g1"], ["g"]),
        n("MatMul", ["h", "wb"], ["b0"]), n("Sigmoid", ["b0"], ["beta"]),
        n("LinearAttention", ["q", "k", "v", "", "g", "beta"], ["a", "state"],
          q_num_heads=heads, kv_num_heads=heads),
        n("MatMul", ["a", "wo"], ["o"]), n("Add", ["x", "o"], ["r"]),
        n("Gather", ["r", "last"], ["t"], axis=1),
        n("MatMul", ["t", "wc"], ["logits"]),
    ]
    inits = [w("conv_w", dim, 1, 4), w("conv_b", dim), w("wq", dim, heads * head),
             w("wk", dim, heads * head), w("wv", dim, heads * head), w("wg", dim, heads),
             w("wb", dim, heads), w("wo", heads * head, dim), w("wc", dim, classes),
             numpy_helper.from_array(np.array(seq - 1, np.int64), "last")]
    g = helper.make_graph(nodes, "gated_deltanet",
                          [helper.make_tensor_value_info("x", TP.FLOAT, [batch, seq, dim])],
                          [helper.make_tensor_value_info("logits", TP.FLOAT, [batch, classes])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 27)])
    m.ir_version = 10
    onnx.save(m, str(path))
    return path


def test_linear_attention_model_trains_alike_under_every_plan(tmp_path):
    """A Gated DeltaNet block (CausalConvWithState, LinearAttention
    unrolled over the sequence) trains under dp 2, tp 2 and pp 2 (2
    micro-batches) as in one process: losses, gradient norms and weights."""
    path = gated_deltanet_model(tmp_path / "gdn.onnx")
    rng = np.random.default_rng(11)
    x = rng.standard_normal((16, 5, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", (x[:, :, :3].sum(axis=1).argmax(axis=1)).astype(np.int64))
    data = ["--data", f"x={tmp_path / 'x.npy'}", "--data", f"labels={tmp_path / 'y.npy'}",
            "--steps", "4", "--no-shuffle", "--lr", "0.3"]
    plans = {"dp2": (2, ["--dp", "2"]), "tp2": (2, ["--tp", "2"]),
             "pp2": (2, ["--pp", "2", "--microbatches", "2"])}
    steps = assert_plans_equal_one_process(path, "sgd", data, plans, tmp_path)
    assert all(np.isfinite(s["loss"]) for s in steps)
