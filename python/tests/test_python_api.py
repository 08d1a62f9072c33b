"""The Python package `distopt`: plan, compile, and run bundles on numpy
arrays, in this process (a single-rank CPU bundle's `<model>.so`) or
through `distopt run` (several ranks), against ONNX Runtime; errors as
Python exceptions with distopt's messages."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from cli import DISTOPT

import distopt
import gen_models  # noqa: E402  (python/testmodels, put on the path by cli)

pytestmark = pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    gen_models.generate(str(d), ["gpt", "mlp", "cnn"])
    return d


def ort_run(path, feeds):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_version():
    assert distopt.version().startswith("distopt ")
    assert "LLVM/MLIR 22" in distopt.version()


@pytest.mark.parametrize("name,dims,feed", [
    ("gpt", {"batch": 4}, lambda r: {"input_ids": r.integers(0, 100, (4, 16)).astype(np.int64)}),
    ("mlp", {"batch": 3}, lambda r: {"x": r.standard_normal((3, 64)).astype(np.float32)}),
    ("cnn", {"N": 2}, lambda r: {"x": r.standard_normal((2, 3, 32, 32)).astype(np.float32)}),
])
def test_compile_and_run_in_process(models, tmp_path, name, dims, feed):
    bundle = distopt.compile(models / f"{name}.onnx", out=tmp_path / "m.dx", dims=dims)
    assert bundle.in_process
    assert [i.name for i in bundle.inputs] == list(feed(np.random.default_rng(0)))
    feeds = feed(np.random.default_rng(1))
    got = bundle.run(feeds)
    want = ort_run(models / f"{name}.onnx", feeds)
    assert list(got) == [o.name for o in bundle.outputs]
    for g, w in zip(got.values(), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    # Runs again with other inputs; outputs are the caller's own arrays.
    feeds2 = feed(np.random.default_rng(2))
    got2 = bundle.run(feeds2)
    for g, w in zip(got2.values(), ort_run(models / f"{name}.onnx", feeds2)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert not np.array_equal(next(iter(got.values())), next(iter(got2.values())))
    bundle.close()


def test_model_proto_and_reopen(models, tmp_path):
    proto = onnx.load(str(models / "mlp.onnx"))
    bundle = distopt.compile(proto, dims={"batch": 2})
    assert (bundle.path / "manifest.json").exists()
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    again = distopt.Bundle(bundle.path)
    np.testing.assert_array_equal(again.run({"x": x})["y"], bundle.run({"x": x})["y"])
    shutil.rmtree(bundle.path.parent)


def test_errors_are_exceptions(models, tmp_path):
    bundle = distopt.compile(models / "gpt.onnx", out=tmp_path / "g.dx", dims={"batch": 2})
    ids = np.zeros((2, 16), np.int64)
    with pytest.raises(ValueError, match="unknown input 'ids'; the model's inputs are 'input_ids'"):
        bundle.run({"ids": ids})
    with pytest.raises(ValueError, match="missing input 'input_ids'"):
        bundle.run({})
    with pytest.raises(TypeError, match="input 'input_ids': wrong dtype: expected int64, got int32"):
        bundle.run({"input_ids": ids.astype(np.int32)})
    with pytest.raises(ValueError, match=r"wrong shape: expected \[2, 16\], got \[16, 2\]"):
        bundle.run({"input_ids": ids.reshape(16, 2)})
    # The runtime's index check: the process lives on, the bundle too.
    bad = ids.copy()
    bad[1, 3] = 100
    with pytest.raises(distopt.DistoptError,
                       match=r"ONNX node '/transformer/wte/Gather' \(Gather\).*index 100 at "
                             r"\[1, 3\] is outside \[-100, 99\]"):
        bundle.run({"input_ids": bad})
    assert np.isfinite(bundle.run({"input_ids": ids})["logits"]).all()
    # Compiler errors carry distopt's message.
    with pytest.raises(distopt.DistoptError, match="Unknown command line argument '--bogus=3'"):
        distopt.compile(models / "gpt.onnx", out=tmp_path / "x.dx", bogus=3)
    with pytest.raises(distopt.DistoptError, match="--precision must be fp32, tf32, bf16 or "
                                                   "fp16, got 'fp8'"):
        distopt.compile(models / "gpt.onnx", out=tmp_path / "x.dx", dims={"batch": 2},
                        precision="fp8")
    with pytest.raises(FileNotFoundError):
        distopt.compile(tmp_path / "none.onnx")
    with pytest.raises(distopt.DistoptError, match="is not a bundle"):
        distopt.Bundle(tmp_path)


def test_multi_rank_bundle_runs_through_distopt_run(models, tmp_path):
    if shutil.which("mpirun") is None:
        pytest.skip("no mpirun")
    bundle = distopt.compile(models / "gpt.onnx", out=tmp_path / "g.dx", dims={"batch": 4},
                             cluster="local:2", dp=2)
    assert bundle.ranks == 2 and not bundle.in_process
    # The whole batch in, the whole outputs out, as `distopt run`'s files.
    assert bundle.inputs[0].shape == (4, 16)
    ids = np.random.default_rng(0).integers(0, 100, (4, 16)).astype(np.int64)
    got = bundle.run({"input_ids": ids})["logits"]
    np.testing.assert_allclose(got, ort_run(models / "gpt.onnx", {"input_ids": ids})[0],
                               rtol=1e-4, atol=1e-5)


def test_plan(models, tmp_path):
    p = distopt.plan(models / "gpt.onnx", cluster="local:4", global_batch=8, mode="infer")
    assert p.dp * p.tp * p.pp == p.devices_used
    assert p.explain().startswith("distopt plan: gpt.onnx on local:4")
    assert p.to_json()["cluster"]["spec"] == "local:4"
    assert json.loads(json.dumps(p.to_json())) == p.to_json()
    html = p.report_html(tmp_path / "plan.html")
    assert html.read_text().startswith("<!DOCTYPE html>")
    forced = distopt.plan(models / "gpt.onnx", cluster="local:4", global_batch=8, mode="infer",
                          dp=2, tp=2)
    assert (forced.dp, forced.tp) == (2, 2)
    with pytest.raises(AttributeError, match="a plan has no field 'bogus'"):
        forced.bogus
    with pytest.raises(distopt.DistoptError, match="--mode must be train or infer, got 'x'"):
        distopt.plan(models / "gpt.onnx", cluster="local:4", global_batch=8, mode="x")


def test_flags():
    from distopt._tool import flags
    assert flags({"dims": {"batch": 8}, "shapes": {"x": (2, 3)}, "grad_dtype": "bf16",
                  "microbatch_statistics": True, "zero": None, "train": False,
                  "cuda_arch": ["sm_80", "sm_90"]}) == [
        "--dim=batch=8", "--shape=x=2x3", "--grad-dtype=bf16", "--microbatch-statistics",
        "--cuda-arch=sm_80,sm_90"]
    with pytest.raises(TypeError, match="dims takes a dict"):
        flags({"dims": 8})


@pytest.fixture(scope="module")
def step(models, tmp_path_factory):
    """The demo GPT as an AdamW training step at batch 4, and a data set of
    24 samples (next-token labels)."""
    d = tmp_path_factory.mktemp("step")
    bundle = distopt.compile(models / "gpt.onnx", out=d / "step.dx", dims={"batch": 4},
                             loss="cross-entropy:logits", optimizer="adamw")
    r = np.random.default_rng(0)
    ids = r.integers(0, 100, (24, 16)).astype(np.int64)
    labels = np.roll(ids, -1, axis=1)
    return bundle, {"input_ids": ids, "labels": labels}


def cli_train(bundle, data, tmp_path, *flags, ranks=1):
    files = []
    for k, v in data.items():
        np.save(tmp_path / f"{k}.npy", v)
        files += ["--data", f"{k}={tmp_path / (k + '.npy')}"]
    log = tmp_path / "cli.jsonl"
    from cli import run
    run(DISTOPT, "run", "-n", ranks, bundle.path, "train", *files, *flags, "--log", log)
    return [json.loads(l) for l in log.read_text().splitlines()]


def test_train_on_a_data_set_as_the_cli(step, tmp_path):
    bundle, data = step
    bundle.reset()
    seen = []
    log = bundle.train(data, steps=8, lr=3e-3, betas=(0.9, 0.95), callback=seen.append)
    assert [r["step"] for r in log] == list(range(1, 9))
    assert seen == log
    want = cli_train(bundle, data, tmp_path, "--steps", 8, "--lr", 3e-3, "--betas", "0.9,0.95")
    assert [r["loss"] for r in log] == [r["loss"] for r in want]
    assert log[-1]["loss"] < log[0]["loss"]


def test_train_on_an_iterable_of_batches(step, tmp_path):
    bundle, data = step

    def batches():  # what a DataLoader gives: one dict of arrays a step
        for i in range(0, 24, 4):
            yield {k: v[i:i + 4] for k, v in data.items()}

    bundle.reset()
    log = bundle.train(batches(), lr=3e-3)
    assert len(log) == 6
    want = cli_train(bundle, data, tmp_path, "--steps", 6, "--lr", 3e-3, "--no-shuffle")
    assert [r["loss"] for r in log] == [r["loss"] for r in want]
    with pytest.raises(ValueError, match="batch 1: 'input_ids' holds 3 samples; a step "
                                         r"takes 4 \(the compiled batch"):
        bundle.train(iter([{k: v[:4] for k, v in data.items()},
                           {k: v[4:7] for k, v in data.items()}]))
    with pytest.raises(ValueError, match="give steps= or epochs="):
        bundle.train(data)
    with pytest.raises(distopt.DistoptError, match="labels"):
        bundle.train({"input_ids": data["input_ids"]}, steps=1)


def test_a_training_step_runs_as_a_function(step):
    """One step run as a function, in process and through `distopt run`:
    every output comes back (the updated weights and moments, which the
    program writes in place), the caller's arrays and the bundle's weights
    stay as they were, so two runs give the same outputs."""
    bundle, data = step
    assert bundle.in_process
    hyper = {"opt.lr": 3e-3, "opt.step": 1.0, "opt.weight_decay": 0.01, "opt.clip_norm": 0.0,
             "opt.beta1": 0.9, "opt.beta2": 0.95, "opt.eps": 1e-8}
    feeds = {}
    for info in bundle.inputs:
        if info.name in data:
            feeds[info.name] = data[info.name][:info.shape[0]]
        elif info.name in hyper:
            feeds[info.name] = np.array(hyper[info.name], dtype=info.dtype)
        else:  # AdamW's moments
            feeds[info.name] = np.zeros(info.shape, info.dtype)
    kept = {k: v.copy() for k, v in feeds.items()}
    first, second = bundle.run(feeds), bundle.run(feeds)
    through_cli = bundle._run_process(bundle._check(feeds))
    assert all(np.array_equal(feeds[k], kept[k]) for k in feeds)
    updates = [n for n in first if n.startswith("update:")]
    assert updates and all(n.replace("update:", "opt.m:") in first for n in updates)
    for name in first:
        np.testing.assert_array_equal(first[name], second[name], err_msg=name)
        np.testing.assert_array_equal(first[name], through_cli[name], err_msg=name)
    assert all(np.abs(first[n.replace("update:", "opt.m:")]).max() > 0 for n in updates)


def test_a_pipelined_training_step_is_not_run_as_a_function(models, tmp_path):
    """A pipelined step's updates are written in place on each stage's
    ranks; run as a function it is refused with what to do instead."""
    if shutil.which("mpirun") is None:
        pytest.skip("no mpirun")
    bundle = distopt.compile(models / "gpt.onnx", out=tmp_path / "pp.dx", dims={"batch": 4},
                             loss="cross-entropy:logits", optimizer="adamw",
                             cluster="local:2", pp=2)
    feeds = {i.name: np.zeros(i.shape, i.dtype) for i in bundle.inputs}
    with pytest.raises(distopt.DistoptError,
                       match="is a pipelined training step's update: run the step with 'train'"):
        bundle.run(feeds)


def test_train_data_parallel(models, step, tmp_path):
    if shutil.which("mpirun") is None:
        pytest.skip("no mpirun")
    _, data = step
    dp = distopt.compile(models / "gpt.onnx", out=tmp_path / "dp.dx", dims={"batch": 4},
                         loss="cross-entropy:logits", optimizer="adamw", cluster="local:2",
                         dp=2)
    step[0].reset()
    one = step[0].train(data, steps=4, lr=3e-3, no_shuffle=True)
    two = dp.train(data, steps=4, lr=3e-3, no_shuffle=True)
    for a, b in zip(one, two):
        assert abs(a["loss"] - b["loss"]) <= 1e-5 * abs(a["loss"])


FROM_TORCH = r"""
import json, sys
import numpy as np, torch, distopt
torch.manual_seed(0)

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2))
        self.encoder = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)
        self.head = torch.nn.Linear(8, 5)
    def forward(self, image, mask_bias):
        x = self.conv(image).flatten(2).transpose(1, 2)     # [B, 16, 8] tokens
        x = self.encoder(x + mask_bias)
        return self.head(x.mean(1)), x

net = Net().eval()
image, bias = torch.randn(2, 3, 8, 8), torch.randn(2, 16, 8)
bundle = distopt.from_torch(net, (image, bias), sys.argv[1], input_names=["image", "bias"],
                            output_names=["logits", "tokens"])
got = bundle.run({"image": image.numpy(), "bias": bias.numpy()})
with torch.no_grad():
    want = net(image, bias)
err = {k: float(np.abs(got[k] - w.numpy()).max()) for k, w in zip(["logits", "tokens"], want)}
batch = distopt.from_torch(net, (image, bias), sys.argv[1] + "5", dynamic_batch=True,
                           dims={"batch": 5})
print(json.dumps({"err": err, "inputs": [list(i.shape) for i in batch.inputs],
                  "in_process": bundle.in_process, "training": net.training}))
"""


def test_from_torch(tmp_path):
    from conftest import TORCH_PY, torch_available
    if not torch_available():
        pytest.skip("Debian's python3-torch is not installed")
    import os
    import subprocess
    from cli import ROOT
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"), DISTOPT=str(DISTOPT))
    proc = subprocess.run([TORCH_PY, "-c", FROM_TORCH, str(tmp_path / "net.dx")],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["in_process"] and not result["training"]
    assert result["err"]["logits"] < 1e-4 and result["err"]["tokens"] < 1e-4, result
    assert result["inputs"] == [[5, 3, 8, 8], [5, 16, 8]]


RANK_SCRIPT = r"""
import json, sys
import numpy as np, distopt
bundle = distopt.Bundle(sys.argv[1])
data = {k: np.load(f"{sys.argv[2]}/{k}.npy") for k in ("input_ids", "labels")}
log = bundle.train(data, steps=3, lr=3e-3, no_shuffle=True)
from distopt._bundle import mpi_rank
with open(f"{sys.argv[3]}/rank{mpi_rank()}.json", "w") as f:
    json.dump([r["loss"] for r in log], f)
# A rank starts MPI once a job: a second program is refused, clearly.
try:
    bundle.train(data, steps=1)
except distopt.DistoptError as e:
    open(f"{sys.argv[3]}/second{mpi_rank()}.txt", "w").write(str(e))
"""


def test_the_same_script_on_every_rank(models, step, tmp_path):
    """distopt.launch runs a script as the ranks of one MPI job; each rank's
    Bundle.train runs the bundle's executable as that rank, and rank 0
    gets the log: the losses `distopt run` gives."""
    if shutil.which("mpirun") is None:
        pytest.skip("no mpirun")
    _, data = step
    for k, v in data.items():
        np.save(tmp_path / f"{k}.npy", v)
    dp = distopt.compile(models / "gpt.onnx", out=tmp_path / "dp.dx", dims={"batch": 4},
                         loss="cross-entropy:logits", optimizer="adamw", cluster="local:2",
                         dp=2)
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    distopt.launch(script, 2, dp.path, tmp_path, tmp_path)
    want = [r["loss"] for r in dp.train(data, steps=3, lr=3e-3, no_shuffle=True)]
    for r in (0, 1):
        assert "has already run a bundle as its rank" in (tmp_path / f"second{r}.txt").read_text()
    assert json.loads((tmp_path / "rank0.json").read_text()) == want
    assert json.loads((tmp_path / "rank1.json").read_text()) == []
    # The wrong number of ranks: the bundle's executable refuses.
    with pytest.raises(distopt.DistoptError, match="failed"):
        distopt.launch(script, 3, dp.path, tmp_path, tmp_path)


def test_train_continues_between_calls(step, tmp_path):
    """Two calls train as one run of both: the second resumes from the
    first's weights, optimizer state and step (for a data set: its
    shuffled order too; for batches: the batches given, in order)."""
    bundle, data = step
    bundle.reset()
    first = bundle.train(data, steps=3, lr=3e-3)
    second = bundle.train(data, steps=3, lr=3e-3)
    assert [r["step"] for r in first + second] == list(range(1, 7))
    assert bundle.steps_trained == 6
    want = cli_train(bundle, data, tmp_path, "--steps", 6, "--lr", 3e-3)
    assert [r["loss"] for r in first + second] == [r["loss"] for r in want]

    def batches(lo, hi):
        for i in range(lo, hi, 4):
            yield {k: v[i:i + 4] for k, v in data.items()}

    bundle.reset()
    log = bundle.train(batches(0, 12), lr=3e-3) + bundle.train(batches(12, 24), lr=3e-3)
    want = cli_train(bundle, data, tmp_path, "--steps", 6, "--lr", 3e-3, "--no-shuffle")
    assert [r["loss"] for r in log] == [r["loss"] for r in want]
    bundle.reset()
    assert bundle.train(data, steps=1, lr=3e-3, no_shuffle=True)[0]["loss"] == want[0]["loss"]


@pytest.mark.parametrize("flags,tol", [({"precision": "bf16"}, 2e-2), ({"precision": "fp16"}, 3e-3),
                                       ({"target": "cuda-emu"}, 1e-5)])
def test_in_process_other_programs(models, tmp_path, flags, tol):
    """16-bit programs and the CUDA target's kernels on the CPU run in this
    process as well, on the same float32 inputs."""
    bundle = distopt.compile(models / "gpt.onnx", out=tmp_path / "g.dx", dims={"batch": 2},
                             **flags)
    assert bundle.in_process
    ids = np.random.default_rng(0).integers(0, 100, (2, 16)).astype(np.int64)
    got = bundle.run({"input_ids": ids})["logits"].astype(np.float32)
    want = ort_run(models / "gpt.onnx", {"input_ids": ids})[0]
    assert np.abs(got - want).max() <= tol * np.abs(want).max()


def test_outputs_through_files_keep_their_names(tmp_path):
    """A bundle run through `distopt run` finds each output in the file the
    runtime names it (torch-style names, names alike once sanitized)."""
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3])
            for n in ("out/a", "out:a", ".hidden")]
    nodes = [helper.make_node("Neg", ["x"], ["out/a"]), helper.make_node("Abs", ["x"], ["out:a"]),
             helper.make_node("Relu", ["x"], [".hidden"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], outs),
                              opset_imports=[helper.make_opsetid("", 17)])
    bundle = distopt.compile(model, out=tmp_path / "m.dx", shared_library=False)
    assert not bundle.in_process
    v = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    got = bundle.run({"x": v})
    np.testing.assert_array_equal(got["out/a"], -v)
    np.testing.assert_array_equal(got["out:a"], np.abs(v))
    np.testing.assert_array_equal(got[".hidden"], np.maximum(v, 0))
