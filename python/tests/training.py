"""Helpers of the training tests: the train-mode flags of a torch.optim
reference run, and the data files of its batches."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from cli import DISTOPT, run


def train_flags(cfg):
    flags = ["--lr", cfg["lr"], "--weight-decay", cfg["weight_decay"]]
    if cfg["kind"] == "sgd":
        flags += ["--momentum", cfg["momentum"]]
    else:
        flags += ["--betas", f"{cfg['betas'][0]},{cfg['betas'][1]}", "--eps", cfg["eps"]]
    if cfg.get("clip_norm"):
        flags += ["--clip-grad-norm", cfg["clip_norm"]]
    if cfg.get("schedule"):
        flags += ["--lr-schedule", cfg["schedule"], "--warmup-steps", cfg["warmup"]]
    return [str(f) for f in flags]


def batches_as_data(d: Path, out: Path, batch_dim: int = 0) -> list[str]:
    """The batches a reference run trained on (xs.npy, ys.npy: [steps,
    batch, ...], or with the batch in dimension 1 + batch_dim of a
    sequence-first model's [steps, seq, batch, ...]) as one data file per
    input, sample after sample in the order PyTorch took them: the --data
    flags for x and labels."""
    xs, ys = np.load(d / "xs.npy"), np.load(d / "ys.npy")
    xs, ys = np.moveaxis(xs, 1 + batch_dim, 1), np.moveaxis(ys, 1 + batch_dim, 1)
    np.save(out / "x.npy", xs.reshape((-1,) + xs.shape[2:]))
    np.save(out / "y.npy", ys.reshape((-1,) + ys.shape[2:]))
    return ["--data", f"x={out / 'x.npy'}", "--data", f"labels={out / 'y.npy'}"]


def learnable_data(out: Path, samples: int, seed: int) -> list[str]:
    """A learnable task for the 16-feature MLP of the torch.optim runs (the
    label is the argmax of the first 8 features), as x.npy and y.npy in
    `out`: the --data flags of both."""
    x = np.random.default_rng(seed).standard_normal((samples, 16)).astype(np.float32)
    np.save(out / "x.npy", x)
    np.save(out / "y.npy", x[:, :8].argmax(axis=1).astype(np.int64))
    return ["--data", f"x={out / 'x.npy'}", "--data", f"labels={out / 'y.npy'}"]


def step_flags(cfg) -> list[str]:
    """The compile flags of a torch.optim reference run's training step."""
    flags = ["--loss", "cross-entropy:logits", "--optimizer", cfg["kind"]]
    if cfg.get("nesterov"):
        flags.append("--nesterov")
    if cfg.get("accumulate"):
        # The reference's batches are micro-batches of one step: batch norm's
        # statistics are each micro-batch's own there.
        flags += ["--accumulate", str(cfg["accumulate"]), "--microbatch-statistics"]
    return flags


def reference_model(d: Path, meta: dict, out: Path) -> Path:
    """The reference run's model: d/model.onnx, or (batch norm) a copy in
    `out` with the running statistics as they were before the export's
    traced forward pass moved them."""
    if not meta.get("initial_buffers"):
        return d / "model.onnx"
    import onnx
    from onnx import numpy_helper
    model = onnx.load(str(d / "model.onnx"))
    for init in model.graph.initializer:
        if init.name in meta["initial_buffers"]:
            init.CopyFrom(numpy_helper.from_array(
                np.load(d / meta["initial_buffers"][init.name]), init.name))
    onnx.save(model, str(out))
    return out


# The directory of gen_grad_models.py holding each reference run.
REFERENCE_DIRS = {"sgd_clipped": "train", "adamw": "train", "cnn_sgd": "train_cnn",
                  "encoder_adamw": "train_encoder", "gpt_adamw": "train_gpt"}


def compile_step(model: Path, out: Path, optimizer: str, *flags,
                 loss: str = "cross-entropy:logits") -> Path:
    run(DISTOPT, "compile", model, "--loss", loss, "--optimizer", optimizer, *flags,
        "-o", out)
    return out


def train(bundle: Path, ranks: int, *args, tag: str = "") -> tuple[list[dict], Path]:
    """`distopt run -n RANKS BUNDLE train ARGS`: the per-step log and the
    directory of the saved weights (named after the bundle and `tag`)."""
    name = bundle.stem + tag
    log, saved = bundle.parent / f"{name}.jsonl", bundle.parent / f"{name}.w"
    run(DISTOPT, "run", "-n", ranks, bundle, "train", *args, "--log", log,
        "--save-weights", saved)
    return [json.loads(line) for line in log.read_text().splitlines()], saved


def rel_err(got, want) -> float:
    return float(np.abs(np.asarray(got) - np.asarray(want)).max()) / max(
        1e-3, float(np.abs(np.asarray(want)).max()))


def assert_follows_reference(bundle: Path, dp: int, d: Path, meta: dict, tmp_path: Path,
                             what: str):
    """20 steps on dp replicas over the reference run's batches: its loss at
    every step and its final weights, within 1e-4. Returns the directory of
    the saved weights."""
    data = batches_as_data(d, tmp_path, meta["config"].get("batch_dim", 0))
    steps, saved = train(bundle, dp, *data, "--steps", "20", "--no-shuffle",
                         *train_flags(meta["config"]))
    losses = np.array([s["loss"] for s in steps])
    assert rel_err(losses, meta["losses"]) <= 1e-4, (losses, meta["losses"])
    for name, f in meta["weights"].items():
        err = rel_err(np.load(saved / f"{name}.npy"), np.load(d / f))
        assert err <= 1e-4, f"{what}: {name}: relative error {err:.3g}"
    return saved


def assert_run_matches_reference(steps: list[dict], saved: Path, d: Path, meta: dict):
    """A training run's per-step log and saved weights against a reference
    run of gen_grad_models.py: losses and weights within 1e-4; batch norm's
    running means within 1e-4, its variances within 2e-2 (ONNX's population
    variance where PyTorch keeps the unbiased one: close, not equal)."""
    losses = np.array([s["loss"] for s in steps])
    assert rel_err(losses, meta["losses"]) <= 1e-4, (losses, meta["losses"])
    for name, f in meta["weights"].items():
        assert rel_err(np.load(saved / f"{name}.npy"), np.load(d / f)) <= 1e-4, name
    for name, f in meta.get("buffers", {}).items():
        err = rel_err(np.load(saved / f"{name}.npy"), np.load(d / f))
        assert err <= (1e-4 if name.endswith("mean") else 2e-2), f"{name}: {err:.3g}"


def assert_plans_equal_one_process(model: Path, optimizer: str, data: list, plans: dict,
                                   tmp_path: Path, repeat: str = ""):
    """Trains `model` in one process and under each plan ({name: (ranks,
    flags)}); each run's losses, gradient norms and final weights equal one
    process's within 1e-5. The plan named `repeat` runs twice and must
    repeat bit for bit."""
    base = compile_step(model, tmp_path / "one.dx", optimizer)
    base_steps, base_w = train(base, 1, *data)
    for name, (ranks, flags) in plans.items():
        bundle = compile_step(model, tmp_path / f"{name}.dx", optimizer, "--cluster",
                              f"local:{ranks}", *flags)
        steps, saved = train(bundle, ranks, *data)
        for a, b in zip(steps, base_steps):
            assert abs(a["loss"] - b["loss"]) <= 1e-5 * b["loss"], (name, a, b)
            assert abs(a["grad_norm"] - b["grad_norm"]) <= 1e-5 * b["grad_norm"], (name, a, b)
        for f in base_w.iterdir():
            assert rel_err(np.load(saved / f.name), np.load(f)) <= 1e-5, (name, f.name)
        if name == repeat:
            again, saved2 = train(bundle, ranks, *data, tag="-again")
            assert [s["loss"] for s in again] == [s["loss"] for s in steps]
            for f in saved.iterdir():
                assert np.array_equal(np.load(saved2 / f.name), np.load(f)), f.name
    return base_steps


def run_with_fault(bundle: Path, ranks: int, data: list, kind: str, step: int, ck: Path):
    """`mpirun` of `bundle` training with DISTOPT_FAULT=KIND:1:STEP (rank 1
    dies or hangs), a 3 s communication timeout and a checkpoint every 2
    steps in `ck`: (exit status, seconds it took, its output)."""
    import os
    import subprocess
    import time

    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               DISTOPT_FAULT=f"{kind}:1:{step}", DISTOPT_COMM_TIMEOUT="3")
    start = time.monotonic()
    p = subprocess.run(["mpirun", "-x", "DISTOPT_FAULT", "-x", "DISTOPT_COMM_TIMEOUT",
                        "-np", str(ranks), "--oversubscribe", str(bundle / bundle.stem),
                        "train", *data, "--checkpoint-dir", str(ck),
                        "--checkpoint-every", "2"],
                       capture_output=True, text=True, env=env, timeout=60)
    return p.returncode, time.monotonic() - start, p.stdout + p.stderr


def assert_resumed_runs_continue(runs: list[list[dict]], final_weights: Path,
                                 straight: list[dict], straight_w: Path):
    """Runs resumed one from the other's checkpoint (each a log) continue
    the straight run: its steps, its losses within 1e-5, its final weights."""
    steps = [s for r in runs for s in r]
    assert [s["step"] for s in steps] == list(range(1, len(straight) + 1))
    assert np.allclose([s["loss"] for s in steps], [s["loss"] for s in straight], rtol=1e-5)
    for f in straight_w.iterdir():
        assert rel_err(np.load(final_weights / f.name), np.load(f)) <= 1e-5, f.name


def assert_faults_end_the_job_and_resume(bundle: Path, ranks: int, data: list,
                                         timed_out: str):
    """Rank 1 dies or hangs at step 5 of a 10-step run checkpointing every 2
    steps: the job ends within 30 s -- the launcher names the dead rank and
    the others the step they were in; a hang times out in `timed_out` (the
    call a peer waits in) -- and the step-4 checkpoint resumes bit for bit."""
    straight, straight_w = train(bundle, ranks, *data, tag="-straight")
    for kind in ("die", "hang"):
        ck = bundle.parent / f"ck-{kind}"
        rc, elapsed, out = run_with_fault(bundle, ranks, data, kind, 5, ck)
        assert rc != 0 and elapsed < 30, (kind, elapsed, out)
        if kind == "die":
            assert "rank 1" in out and "exited on signal 9" in out, out
            assert "terminated during step 5 (another rank failed)" in out, out
        else:
            assert f"step 5: {timed_out} did not complete within 3 s" in out, out
        assert json.loads((ck / "checkpoint" / "meta.json").read_text())["step"] == 4
        resumed, w = train(bundle, ranks, *data, "--resume", ck, tag=f"-{kind}")
        assert [s["step"] for s in resumed] == list(range(5, 11))
        assert [s["loss"] for s in resumed] == [s["loss"] for s in straight[4:]]
        for f in straight_w.iterdir():
            assert np.array_equal(np.load(w / f.name), np.load(f)), (kind, f.name)
