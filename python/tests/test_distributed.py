"""Distributed inference end to end: the four model kinds compiled
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
from pathlib import Path

import numpy as np
import pytest
from cli import DISTOPT, ROOT, env, run

import gen_models  # noqa: E402  (python/testmodels, put on the path by cli)

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
    # -n right after the bundle is the launcher's too (as docs and users
    # write it), in any of its spellings.
    for n in (["-n", "2"], ["-n2"], ["-n=2"]):
        p = run(DISTOPT, "run", bundle, *n, *inputs, check=False)
        assert p.returncode != 0
        assert "the bundle was compiled for 4 ranks; -n 2 does not match" in p.stderr, p.stderr
    p = run(DISTOPT, "run", bundle, "-n", "four", *inputs, check=False)
    assert p.returncode != 0
    assert "-n after the bundle takes a rank count, got 'four'" in p.stderr
    p = run(DISTOPT, "run", "-n", 4, bundle, "-n", 2, *inputs, check=False)
    assert p.returncode != 0
    assert "-n 4 and -n 2 disagree" in p.stderr
    run(DISTOPT, "run", bundle, "-n", 4, *inputs, "--output-dir", tmp_path / "o4")
    assert (tmp_path / "o4" / "y.npy").exists()
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
    assert ("--dp 4 exceeds the batch of 2 (the batch dimension of the model inputs): a "
            "replica would get no samples") in p.stderr
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


def test_plan_ir_compiles_and_a_vocabulary_split_embedding(tmp_path):
    """`distopt compile plan.mlir` compiles a planned IR (here written by
    hand): an embedding table split over its rows on tp 2 (Megatron's
    vocabulary-parallel embedding: each rank looks up its rows, zeros
    elsewhere, all-reduce) gives the single-process numbers."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    table = rng.standard_normal((64, 16)).astype(np.float32)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
         helper.make_node("MatMul", ["e", "w"], ["y"])],
        "emb",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [8, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 4, 8])],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx_path = tmp_path / "emb.onnx"
    onnx.save(model, onnx_path)
    ids = rng.integers(0, 64, (8, 4)).astype(np.int64)
    np.save(tmp_path / "ids.npy", ids)

    ir = f'''module attributes {{dopt.source = "{onnx_path}", dopt.plan = {{dp = 1 : i64, microbatch_size = 8 : i64, microbatches = 1 : i64, pp = 1 : i64, recompute = "off", tp = 2 : i64}}}} {{
  shard.grid @dopt_grid(shape = 1x1x2)
  func.func @main(%ids: tensor<8x4xi64> {{dopt.name = "ids"}}) -> (tensor<8x4x8xf32> {{dopt.name = "y"}}) {{
    %rep = shard.sharding @dopt_grid split_axes = [[]] : !shard.sharding
    %rows = shard.sharding @dopt_grid split_axes = [[2]] : !shard.sharding
    %idss = shard.shard %ids to %rep : tensor<8x4xi64>
    %t = dopt.weight {{name = "table", type = tensor<64x16xf32>}} : () -> tensor<64x16xf32>
    %ts = shard.shard %t to %rows : tensor<64x16xf32>
    %g = dopt.gather %ts, %idss {{axis = 0 : i64}} : (tensor<64x16xf32>, tensor<8x4xi64>) -> tensor<8x4x16xf32>
    %gs = shard.shard %g to %rep {{dopt.partial = "sum"}} : tensor<8x4x16xf32>
    %gr = shard.shard %gs to %rep annotate_for_users : tensor<8x4x16xf32>
    %w = dopt.weight {{name = "w", type = tensor<16x8xf32>}} : () -> tensor<16x8xf32>
    %ws = shard.shard %w to %rep : tensor<16x8xf32>
    %y = dopt.matmul %gr, %ws : (tensor<8x4x16xf32>, tensor<16x8xf32>) -> tensor<8x4x8xf32>
    %ys = shard.shard %y to %rep : tensor<8x4x8xf32>
    return %ys : tensor<8x4x8xf32>
  }}
}}
'''
    (tmp_path / "plan.mlir").write_text(ir)
    run(DISTOPT, "compile", tmp_path / "plan.mlir", "-o", tmp_path / "p.dx")
    manifest = json.loads((tmp_path / "p.dx" / "manifest.json").read_text())
    assert manifest["ranks"] == 2 and manifest["grid"] == [1, 1, 2]
    run(DISTOPT, "run", tmp_path / "p.dx", f"--input=ids={tmp_path / 'ids.npy'}",
        "--output-dir", tmp_path / "out")
    got = np.load(tmp_path / "out" / "y.npy")
    want = table[ids] @ w
    assert np.abs(got - want).max() / np.abs(want).max() <= 1e-5
    # A planned IR carries its plan: --cluster is refused.
    p = run(DISTOPT, "compile", tmp_path / "plan.mlir", "--cluster", "local:2", "-o",
            tmp_path / "q.dx", check=False)
    assert p.returncode != 0
    assert "a planned IR carries its plan" in p.stderr


def test_two_dimensional_resharding_across_processes(models, tmp_path):
    """Reshardings on a 2-D grid (data x tensor) with several steps, from a
    hand-written plan: [[1],[2]] -> replicated, -> [[2],[1]], -> [[1,2]] ->
    replicated, run on 4 processes against numpy."""
    ir_src = (ROOT / "test" / "Distributed" / "Partition" / "reshard-2d.mlir").read_text()
    body = ir_src[ir_src.index("module {"):ir_src.index("// CHECK")]
    source = models / "mlp.onnx"  # any model: this program has no weights
    ir = body.replace("module {", f'module attributes {{dopt.source = "{source}"}} {{', 1)
    ir = ir.replace("%x: tensor<8x4xf32>)", '%x: tensor<8x4xf32> {dopt.name = "x"})')
    (tmp_path / "plan.mlir").write_text(ir)
    run(DISTOPT, "compile", tmp_path / "plan.mlir", "-o", tmp_path / "r.dx")
    x = np.random.default_rng(5).standard_normal((8, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    run(DISTOPT, "run", tmp_path / "r.dx", f"--input=x={tmp_path / 'x.npy'}",
        "--output-dir", tmp_path / "out")
    outs = sorted((tmp_path / "out").iterdir())
    assert len(outs) == 2
    got = {p.name: np.load(p) for p in outs}
    want = [-x, np.tanh(np.exp(x))]
    for (name, g), w in zip(sorted(got.items()), want):
        assert np.abs(g - w).max() <= 1e-5 * np.abs(w).max(), name


UNEVEN = [
    ("mlp", {"batch": 10}, {"x": (10, 64)}, (4, 1, 1, 1)),
    ("gpt", {"batch": 6}, {"input_ids": (6, 16)}, (4, 1, 1, 1)),
    ("transformer_encoder", {"batch": 5, "seq": 16}, {"x": (5, 16, 32)}, (2, 2, 1, 1)),
    ("cnn", {"N": 3}, {"x": (3, 3, 32, 32)}, (2, 1, 2, 2)),
]


@pytest.mark.parametrize("name,dims,shapes,plan", UNEVEN, ids=[u[0] for u in UNEVEN])
def test_uneven_batch_splits(models, tmp_path, name, dims, shapes, plan):
    """A batch that the data-parallel degree does not divide: replicas run
    ceil(B/dp) samples, the last padded (gpt: batch 6 on dp 4 leaves a
    replica with padding only), and the outputs equal the single process."""
    dp, tp, pp, mb = plan
    rng = np.random.default_rng(0)
    inputs = []
    for k, s in shapes.items():
        v = (rng.integers(0, 100, s).astype(np.int64) if k == "input_ids"
             else rng.standard_normal(s).astype(np.float32))
        np.save(tmp_path / f"{k}.npy", v)
        inputs.append(f"--input={k}={tmp_path / f'{k}.npy'}")
    run(DISTOPT, "compile", models / f"{name}.onnx", *dim_args(dims), "-o", tmp_path / "one.dx")
    run(DISTOPT, "run", tmp_path / "one.dx", *inputs, "--output-dir", tmp_path / "one")
    run(DISTOPT, "compile", models / f"{name}.onnx", *dim_args(dims), "--cluster", "local:4",
        "--dp", dp, "--tp", tp, "--pp", pp, "--microbatches", mb, "-o", tmp_path / "m.dx")
    run(DISTOPT, "run", tmp_path / "m.dx", *inputs, "--output-dir", tmp_path / "out")
    for f in (tmp_path / "one").iterdir():
        want, got = np.load(f), np.load(tmp_path / "out" / f.name)
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-5 * max(np.abs(want).max(), 1e-30), f.name


@pytest.mark.parametrize("model,shape,plan", [
    *[("upsampler_mse", (2, 3, 11, 13), p) for p in ("dp2", "tp2", "pp2")],
    # Its batch norm is in training form (statistics over the batch): the
    # replicas all-reduce them under dp; micro-batches are refused (two
    # stages, one micro-batch).
    *[("conv1d_cross_entropy", (4, 5), p) for p in ("dp2", "tp2", "pp2mb1")]])
def test_transposed_convolutions_distributed(torch_models, tmp_path, plan, model, shape):
    """Models exported by torch under forced plans on local:2: the same
    outputs as one process. An encoder-decoder (nn.Conv2d down,
    nn.ConvTranspose2d up: strided with output_padding, grouped and dilated,
    1x1) and a 1-D CNN (Conv1d, batch norm, pools, ConvTranspose1d: windows
    of height 1 between reshapes). tp splits the transposed convolutions'
    output channels (their weight's second dimension) or their input
    channels (a partial sum)."""
    dp, tp, pp, mb = PLANS[plan] if plan in PLANS else (1, 1, 2, 1)
    d = torch_models / model
    x = np.load(d / "x.npy")
    np.save(tmp_path / "x.npy", x)
    inputs = [f"--input=x={tmp_path / 'x.npy'}"]
    run(DISTOPT, "compile", d / "model.onnx", "-o", tmp_path / "one.dx")
    run(DISTOPT, "run", tmp_path / "one.dx", *inputs, "--output-dir", tmp_path / "one")
    compiled = run(DISTOPT, "compile", d / "model.onnx", "--cluster", "local:2", "--dp", dp,
                   "--tp", tp, "--pp", pp, "--microbatches", mb, "-o", tmp_path / "m.dx")
    assert f"plan dp {dp} x tp {tp} x pp {pp} = 2 ranks" in compiled.stdout
    run(DISTOPT, "run", tmp_path / "m.dx", *inputs, "--output-dir", tmp_path / "out")
    want = np.load(tmp_path / "one" / "logits.npy")
    got = np.load(tmp_path / "out" / "logits.npy")
    assert got.shape == want.shape == shape
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
