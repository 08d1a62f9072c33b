"""Parameter servers: `--sync ps|async --servers K` splits a
training step into workers (the data-parallel step's loss and gradients)
and servers (the trained weights in shards, updated by the optimizer).
Synchronous servers train as the all-reduce does; one asynchronous worker
trains as one process; backup workers, staleness and its cures behave as
their rules say; failures end the job naming the rank; the planner
compares servers with the ring all-reduce; every error is tested."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import numpy as np
import pytest

from cli import DISTOPT, run
from training import (batches_as_data, compile_step, learnable_data, rel_err, train,
                      train_flags)

pytestmark = [
    pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built"),
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun"),
]


def summary(bundle, tag=""):
    """The last line of a parameter-server run's log (its totals)."""
    lines = (bundle.parent / f"{bundle.stem}{tag}.jsonl").read_text().splitlines()
    last = json.loads(lines[-1])
    assert last.get("summary") is True, last
    return last


def steps_of(log):
    return [s for s in log if "step" in s]


def assert_same_run(a, a_w, b, b_w, tol=1e-5):
    a, b = steps_of(a), steps_of(b)
    assert [s["step"] for s in a] == [s["step"] for s in b]
    for key in ("loss", "grad_norm"):
        assert rel_err([s[key] for s in a], [s[key] for s in b]) <= tol, key
    for f in b_w.iterdir():
        assert rel_err(np.load(a_w / f.name), np.load(f)) <= tol, f.name


@pytest.mark.parametrize("optimizer,servers,extra", [
    ("sgd", 1, ["--clip-grad-norm", "0.5"]),
    ("adamw", 2, ["--clip-grad-norm", "0.5"]),
    ("sgd", 3, ["--backup-workers", "0"]),
])
def test_synchronous_servers_equal_all_reduce(optimizer, servers, extra, torch_models,
                                              tmp_path):
    """K servers and 2 workers train as 2 all-reduce replicas: the same
    loss and global norm (clipping needs the norm summed over the servers)
    at every step and the same weights, within 1e-5."""
    d = torch_models / "train"
    cfg = json.loads((d / "meta.json").read_text())["sgd_nesterov" if optimizer == "sgd"
                                                    else "adamw"]["config"]
    clip = [f for f in extra if f != "--backup-workers" and f != "0"]
    backup = [f for f in extra if f not in clip]
    data = [*batches_as_data(d, tmp_path), "--steps", "20", "--no-shuffle",
            *train_flags(cfg), *clip]
    ar = compile_step(d / "model.onnx", tmp_path / "ar.dx", optimizer, "--cluster", "local:2",
                      "--dp", "2")
    ps = compile_step(d / "model.onnx", tmp_path / "ps.dx", optimizer, "--cluster",
                      f"local:{servers + 2}", "--sync", "ps", "--servers", str(servers),
                      *backup)
    manifest = json.loads((ps / "manifest.json").read_text())
    assert manifest["ranks"] == servers + 2 and manifest["grid"] == [1, 2, 1]
    section = manifest["parameter_servers"]
    assert section["servers"] == servers and section["workers"] == 2
    # Every element of every trained weight lives on exactly one server.
    weights = manifest["weights"]
    covered = {w: np.zeros(int(np.prod(weights[w]["shape"])), int) for w in range(len(weights))}
    for p in section["pieces"]:
        covered[p["weight"]][p["offset"]:p["offset"] + p["length"]] += 1
    assert all((c == 1).all() for c in covered.values())
    a, a_w = train(ar, 2, *data)
    b, b_w = train(ps, servers + 2, *data)
    assert_same_run(b, b_w, a, a_w)
    totals = summary(ps)
    assert totals["updates"] == 20 and totals["dropped"] == 0
    assert totals["staleness_histogram"] == {"0": 40}
    # Each server receives one push from each worker per step (and a
    # goodbye at the end) and sends one reply back (and the first pull):
    # its padded shard plus a 64-byte header each.
    message = 4 * section["shard_length"] + 64
    traffic = np.array(totals["server_bytes_per_step"])
    assert traffic.shape == (servers, 2)
    assert np.allclose(traffic, 2 * message * 21 / 20)


def test_one_asynchronous_worker_equals_one_process(torch_models, tmp_path):
    """Async with one worker: every gradient is applied on the weights it
    was computed on (staleness 0), so the run is one process's."""
    d = torch_models / "train"
    data = [*learnable_data(tmp_path, 60, 3), "--shuffle", "7", "--steps", "15",
            "--lr", "0.01"]
    one = compile_step(d / "model.onnx", tmp_path / "one.dx", "adam")
    asy = compile_step(d / "model.onnx", tmp_path / "async.dx", "adam", "--cluster",
                       "local:2", "--sync", "async")
    a, a_w = train(one, 1, *data)
    b, b_w = train(asy, 2, *data)
    assert_same_run(b, b_w, a, a_w)
    assert summary(asy)["staleness_histogram"] == {"0": 15}


@pytest.fixture(scope="module")
def async3(torch_models, tmp_path_factory):
    """One server and three asynchronous workers of the MLP."""
    out = tmp_path_factory.mktemp("async3")
    d = torch_models / "train"
    bundle = compile_step(d / "model.onnx", out / "a3.dx", "sgd", "--cluster", "local:4",
                          "--sync", "async", "--servers", "1")
    data = [*learnable_data(out, 120, 4), "--shuffle", "1", "--steps", "20", "--lr", "0.05"]
    return bundle, data


def test_asynchronous_staleness_and_cures(async3):
    """Three asynchronous workers: gradients are stale; --drop-stale 0 keeps
    only fresh ones; --max-staleness 0 keeps the workers in step, bounding
    the staleness by the workers' count; --sync-warmup 5 runs 5 synchronous
    steps first; --stale-lr and --delay-compensation train. The log's
    totals add up."""
    bundle, data = async3
    log, _ = train(bundle, 4, *data, tag="-plain")
    totals = summary(bundle, "-plain")
    assert sum(totals["staleness_histogram"].values()) == 60
    assert totals["updates"] + totals["dropped"] == 60
    assert sum(s["applied"] for s in steps_of(log)) == totals["updates"]

    train(bundle, 4, *data, "--drop-stale", "0", tag="-drop")
    t = summary(bundle, "-drop")
    stale = sum(n for k, n in t["staleness_histogram"].items() if int(k) > 0)
    assert t["dropped"] == stale and t["updates"] == t["staleness_histogram"].get("0", 0)

    train(bundle, 4, *data, "--max-staleness", "0", tag="-ssp")
    assert summary(bundle, "-ssp")["staleness_max"] <= 3

    log, _ = train(bundle, 4, *data, "--sync-warmup", "5", tag="-warm")
    first = steps_of(log)[:5]
    # All three gradients averaged into one update per step.
    assert [s["applied"] for s in first] == [3] * 5
    assert all(s["staleness_max"] == 0 for s in first)
    assert summary(bundle, "-warm")["updates"] + summary(bundle, "-warm")["dropped"] == 5 + 45

    # (Whether they help is measured by bench/strategies.py: an
    # asynchronous run's order depends on timing, so its loss is not
    # asserted here.)
    for cure in (["--stale-lr"], ["--delay-compensation", "0.5"]):
        log, w = train(bundle, 4, *data, *cure, tag="-cure")
        losses = [s["loss"] for s in steps_of(log)]
        assert len(losses) == 20 and all(np.isfinite(losses)), (cure, losses)
        t = summary(bundle, "-cure")
        assert t["updates"] == 60 and t["dropped"] == 0, (cure, t)


def test_backup_workers_apply_the_first_to_arrive(torch_models, tmp_path):
    """3 workers, 1 a backup, one of them a straggler: every step applies 2
    gradients; the straggler's arrive late and are dropped (it goes on from
    the newest weights); the loss falls."""
    d = torch_models / "train"
    bundle = compile_step(d / "model.onnx", tmp_path / "bk.dx", "sgd", "--cluster",
                          "local:4", "--sync", "ps", "--backup-workers", "1", "--servers", "1")
    data = [*learnable_data(tmp_path, 120, 4), "--steps", "12", "--lr", "0.05"]
    # Every worker takes 20 ms a step, the straggler (rank 3) 100 ms.
    os.environ["DISTOPT_STRAGGLER"] = "1:0.02,2:0.02,3:0.1"
    try:
        log, _ = train(bundle, 4, *data)
    finally:
        del os.environ["DISTOPT_STRAGGLER"]
    steps = steps_of(log)
    assert all(s["applied"] == 2 for s in steps)
    totals = summary(bundle)
    assert totals["dropped"] >= 1 and totals["updates"] == 12
    assert steps[-1]["loss"] < steps[0]["loss"]


@pytest.mark.parametrize("who", ["server", "worker"])
def test_a_killed_rank_ends_the_job(who, torch_models, tmp_path):
    """A server (rank 0) or a worker (rank 2) killed at step 3 ends the job
    within 30 s, the launcher naming the rank."""
    d = torch_models / "train"
    bundle = compile_step(d / "model.onnx", tmp_path / "k.dx", "sgd", "--cluster", "local:3",
                          "--sync", "ps", "--servers", "1")
    rank = 0 if who == "server" else 2
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               DISTOPT_FAULT=f"die:{rank}:3", DISTOPT_COMM_TIMEOUT="5")
    start = time.monotonic()
    p = subprocess.run(["mpirun", "-x", "DISTOPT_FAULT", "-x", "DISTOPT_COMM_TIMEOUT", "-np",
                        "3", "--oversubscribe", str(bundle / bundle.stem), "train",
                        *learnable_data(tmp_path, 60, 1), "--steps", "10"],
                       capture_output=True, text=True, env=env, timeout=60)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and time.monotonic() - start < 30, out
    assert f"rank {rank}" in out and "exited on signal 9" in out, out


def test_plan_compares_servers_with_all_reduce(torch_models):
    """`distopt plan` of a data-parallel training plan prices parameter
    servers on the same devices and says which wins and why; with --sync
    ps it picks the server count and shows each server's bytes."""
    model = torch_models / "train" / "model.onnx"
    out = run(DISTOPT, "plan", model, "--cluster", "local:4", "--dp", "4").stdout
    assert "gradient synchronisation on 4 devices" in out
    assert "ring all-reduce, 4 replicas" in out and "1 server + 3 workers" in out
    assert "all-reduce wins" in out or "parameter servers would be faster" in out
    out = run(DISTOPT, "plan", model, "--cluster", "local:5", "--sync", "ps").stdout
    assert "synchronous parameter servers:" in out and "chosen:" in out
    assert "bytes each server receives and sends per step: [0]" in out
    plan = json.loads(run(DISTOPT, "plan", model, "--cluster", "local:4", "--sync", "ps",
                          "--servers", "2", "--json", "-").stdout)
    assert plan["sync"] == "ps" and plan["servers"] == 2 and plan["dp"] == 2
    assert len(plan["server_bytes_per_step"]) == 2


def test_errors(torch_models, tmp_path):
    model = torch_models / "train" / "model.onnx"
    base = ["compile", model, "--loss", "cross-entropy:logits", "--optimizer", "sgd"]

    def fails(args, message):
        p = run(DISTOPT, *args, check=False)
        assert p.returncode != 0 and message in p.stderr, p.stderr

    fails([*base, "--cluster", "local:3", "--servers", "1"],
          "--servers applies to parameter servers")
    fails([*base, "--cluster", "local:3", "--sync", "sometimes"],
          "--sync must be allreduce, ps or async")
    fails([*base, "--cluster", "local:4", "--sync", "async", "--backup-workers", "1"],
          "--backup-workers applies to synchronous parameter servers")
    fails([*base, "--cluster", "local:4", "--sync", "ps", "--tp", "2"],
          "--tp and --pp must be 1")
    fails([*base, "--cluster", "local:3", "--sync", "ps", "--servers", "3"],
          "leaves no worker")
    fails([*base, "--cluster", "local:3", "--sync", "ps", "--zero", "1"],
          "parameter servers already hold it")
    fails(["compile", model, "--gradients", "--cluster", "local:3", "--sync", "ps"],
          "needs --loss and --optimizer")
    # A mean over the batch in the model (its own loss; batch norm's
    # statistics) needs the replicas' all-reduce, which workers do not run.
    fails(["compile", torch_models / "mlp_cross_entropy" / "model.onnx", "--loss", "output",
           "--optimizer", "sgd", "--cluster", "local:3", "--sync", "async"],
          "parameter-server workers run apart, but node ")
    data = learnable_data(tmp_path, 60, 1)
    ar = compile_step(model, tmp_path / "ar.dx", "sgd", "--cluster", "local:2", "--dp", "2")
    p = run(DISTOPT, "run", "-n", "2", ar, "train", *data, "--steps", "2", "--stale-lr",
            check=False)
    assert p.returncode != 0 and "cures for asynchronous" in p.stderr, p.stderr
    asy = compile_step(model, tmp_path / "as.dx", "sgd", "--cluster", "local:4", "--sync",
                       "async", "--servers", "2")
    for flags, message in [(["--clip-grad-norm", "1"], "asynchronous servers apply their"),
                           (["--checkpoint-dir", str(tmp_path / "ck")], "not built for"),
                           (["--drop-stale", "x"], "expects a non-negative integer")]:
        p = run(DISTOPT, "run", "-n", "4", asy, "train", *data, "--steps", "2", *flags,
                check=False)
        assert p.returncode != 0 and message in p.stderr + p.stdout, (flags, p.stderr)
    p = run("mpirun", "-np", "3", "--oversubscribe", asy / asy.stem, "train", *data,
            "--steps", "2", check=False)
    assert p.returncode != 0 and "launched on 3" in p.stderr + p.stdout, p.stderr
    env = dict(os.environ, DISTOPT_STRAGGLER="two:1")
    p = subprocess.run([str(DISTOPT), "run", "-n", "4", str(asy), "train", *data, "--steps",
                        "2"], capture_output=True, text=True, env=env)
    assert p.returncode != 0 and "DISTOPT_STRAGGLER must be" in p.stderr + p.stdout
