"""Distributed inference end to end (issue 5): the four model kinds compiled
for local:4 under forced plans dp 2, dp 4, tp 2, tp 4, dp 2 x tp 2, pp 2,
dp 2 x pp 2 and tp 2 x pp 2 (pipelines on 2 micro-batches), run
across processes with `distopt run` (mpirun underneath), give the same
numbers as the single-process program (max relative error <= 1e-5). Also
the errors: wrong rank counts, plans the shapes cannot take."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DISTOPT_BUILD_DIR", ROOT / "build"))
DISTOPT = BUILD / "bin" / "distopt"
sys.path.insert(0, str(ROOT / "python" / "testmodels"))
import gen_models  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built"),
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun"),
]

MODELS = {
    "mlp": ({"batch": 8}, lambda r: {"x": r.standard_normal((8, 64)).astype(np.float32)}),
    "cnn": ({"N": 4}, lambda r: {"x": r.standard_normal((4, 3, 32, 32)).astype(np.float32)}),
    "transformer_encoder": ({"batch": 4, "seq": 16},
                            lambda r: {"x": r.standard_normal((4, 16, 32)).astype(np.float32)}),
    "gpt": ({"batch": 8}, lambda r: {"input_ids": r.integers(0, 100, (8, 16)).astype(np.int64)}),
}
# plan kind -> (dp, tp, pp, micro-batches)
PLANS = {"dp2": (2, 1, 1, 1), "dp4": (4, 1, 1, 1), "tp2": (1, 2, 1, 1), "tp4": (1, 4, 1, 1),
         "dp2xtp2": (2, 2, 1, 1), "pp2": (1, 1, 2, 2), "dp2xpp2": (2, 1, 2, 2),
         "tp2xpp2": (1, 2, 2, 2)}


def env():
    e = dict(os.environ)
    e.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    e.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return e


def run(*args, check=True):
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env())
    if check:
        assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("models")
    gen_models.generate(str(out), list(MODELS))
    return out


def dim_args(dims):
    return [a for k, v in dims.items() for a in ("--dim", f"{k}={v}")]


@pytest.fixture(scope="module")
def reference(models, tmp_path_factory):
    """Single-process outputs and the input files, per model."""
    out = {}
    for name, (dims, feeds) in MODELS.items():
        d = tmp_path_factory.mktemp(name)
        inputs = []
        for k, v in feeds(np.random.default_rng(0)).items():
            np.save(d / f"{k}.npy", v)
            inputs.append(f"--input={k}={d / f'{k}.npy'}")
        run(DISTOPT, "compile", models / f"{name}.onnx", *dim_args(dims), "-o", d / "one.dx")
        run(DISTOPT, "run", d / "one.dx", *inputs, "--output-dir", d / "one")
        out[name] = (d, inputs, {p.name: np.load(p) for p in (d / "one").iterdir()})
    return out


@pytest.mark.parametrize("plan", list(PLANS))
@pytest.mark.parametrize("name", list(MODELS))
def test_distributed_matches_single_process(models, reference, tmp_path, name, plan):
    dp, tp, pp, mb = PLANS[plan]
    dims, _ = MODELS[name]
    d, inputs, expected = reference[name]
    bundle = tmp_path / "m.dx"
    compiled = run(DISTOPT, "compile", models / f"{name}.onnx", *dim_args(dims),
                   "--cluster", "local:4", "--dp", dp, "--tp", tp, "--pp", pp,
                   "--microbatches", mb, "-o", bundle)
    n = dp * tp * pp
    assert f"plan dp {dp} x tp {tp} x pp {pp} = {n} ranks" in compiled.stdout
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["ranks"] == n and manifest["grid"] == [pp, dp, tp]
    if pp > 1:
        assert len(manifest["pipeline"]["stages"]) == pp
        assert manifest["pipeline"]["microbatches"] == mb
    run(DISTOPT, "run", bundle, *inputs, "--output-dir", tmp_path / "out")
    for file, want in expected.items():
        got = np.load(tmp_path / "out" / file)
        assert got.shape == want.shape
        err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
        assert err <= 1e-5, (file, err)


def test_rank_count_errors(models, reference, tmp_path):
    dims, _ = MODELS["mlp"]
    d, inputs, _ = reference["mlp"]
    bundle = tmp_path / "m.dx"
    run(DISTOPT, "compile", models / "mlp.onnx", *dim_args(dims), "--cluster", "local:4",
        "--dp", 4, "--pp", 1, "-o", bundle)
    # The launcher checks before starting anything.
    p = run(DISTOPT, "run", "-n", 2, bundle, *inputs, check=False)
    assert p.returncode != 0
    assert "the bundle was compiled for 4 ranks; -n 2 does not match" in p.stderr
    # The executable itself, started on the wrong number of ranks.
    mpirun = ["mpirun", "--oversubscribe", "--allow-run-as-root"]
    p = run(*mpirun, "-np", 2, bundle / "m", *inputs, "--output-dir", tmp_path / "o", check=False)
    assert p.returncode != 0
    assert "compiled for 4 ranks, but it was launched on 2" in p.stderr
    assert not (tmp_path / "o" / "y.npy").exists()
    # A single-rank bundle under mpirun would run the model N times over.
    p = run(*mpirun, "-np", 2, d / "one.dx" / "one", *inputs, "--output-dir", tmp_path / "o2",
            check=False)
    assert p.returncode != 0
    assert "compiled for 1 rank, but it was launched on 2" in p.stderr


def test_plans_the_shapes_cannot_take(models, tmp_path):
    # dp 4 on a batch of 2: the error names the dimension.
    p = run(DISTOPT, "compile", models / "gpt.onnx", "--dim", "batch=2", "--cluster", "local:4",
            "--dp", 4, "-o", tmp_path / "g.dx", check=False)
    assert p.returncode != 0
    assert "--dp 4 does not divide the batch of 2 (dimension 0 of the model inputs)" in p.stderr
    p = run(DISTOPT, "compile", models / "mlp.onnx", "--dim", "batch=8", "--cluster", "local:4",
            "--pp", 4, "-o", tmp_path / "g.dx", check=False)
    assert p.returncode != 0
    assert "--pp 4 exceeds the 3 segments the model can be cut into" in p.stderr
    p = run(DISTOPT, "compile", models / "mlp.onnx", "--dim", "batch=8", "--cluster", "local:4",
            "--pp", 2, "--dp", 2, "--microbatches", 3, "-o", tmp_path / "g.dx", check=False)
    assert p.returncode != 0
    assert "--microbatches 3 does not divide the per-replica batch" in p.stderr
    p = run(DISTOPT, "compile", models / "gpt.onnx", "--dim", "batch=8", "--dp", 2,
            "-o", tmp_path / "g.dx", check=False)
    assert p.returncode != 0
    assert "--dp/--tp/--pp/--microbatches need --cluster" in p.stderr
    assert not (tmp_path / "g.dx").exists()


def test_a_killed_rank_ends_the_job(models, reference, tmp_path):
    """Failure injection: one rank of a running tp 2 x dp 2 job is killed
    (SIGKILL); every rank is gone within 30 s, the failure names the rank,
    and no output file is left looking complete."""
    import signal
    import time

    dims, _ = MODELS["gpt"]
    d, inputs, _ = reference["gpt"]
    bundle = tmp_path / "g.dx"
    run(DISTOPT, "compile", models / "gpt.onnx", *dim_args(dims), "--cluster", "local:4",
        "--dp", 2, "--tp", 2, "--pp", 1, "-o", bundle)
    exe = str(bundle / "g")
    out = tmp_path / "out"
    job = subprocess.Popen([str(DISTOPT), "run", str(bundle), *inputs, "--repeat", "10000000",
                            "--output-dir", str(out)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=env())
    try:
        ranks = []
        deadline = time.time() + 30
        while len(ranks) < 4 and time.time() < deadline:
            time.sleep(0.5)
            ps = subprocess.run(["pgrep", "-f", exe], capture_output=True, text=True)
            ranks = [int(p) for p in ps.stdout.split() if int(p) != job.pid]
        assert len(ranks) >= 4, f"the 4 ranks did not start: {ranks}"
        time.sleep(1.0)  # let them get into their collectives
        victim = sorted(ranks)[1]
        os.kill(victim, signal.SIGKILL)
        killed_at = time.time()
        _, err = job.communicate(timeout=60)
        took = time.time() - killed_at
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode != 0
    assert took < 30, took
    assert "signal 9" in err or "killed" in err.lower(), err
    assert "rank" in err, err
    # Nobody is left running, and no output was written.
    time.sleep(0.5)
    ps = subprocess.run(["pgrep", "-f", exe], capture_output=True, text=True)
    assert ps.stdout.strip() == "", ps.stdout
    assert not (out / "logits.npy").exists()
