"""The CUDA target's kernels checked without a GPU (`--target cuda-emu`).

`distopt compile --target cuda-emu` maps the program's loops onto GPU
blocks and threads exactly as `--target cuda` does, then runs each kernel
on this CPU thread by thread (distopt-emulate-gpu-launches): barriers and
all-reduces cut a kernel into phases, the threads of a phase run in reverse
order so a missing barrier reads stale memory. Inference is compared with
ONNX Runtime in test_zoo.py and by run_node_tests.py --target cuda-emu;
here the training steps (forward, backward, optimizer: kernels no GPU has
run yet) follow torch.optim's trajectories under data and tensor
parallelism (one process: test_autodiff.py)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from cli import DISTOPT, run
from training import REFERENCE_DIRS, assert_follows_reference, compile_step

pytestmark = [
    pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built"),
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun"),
]

# One process: test_autodiff.py's test_emulated_gpu_training_matches_torch_optim.
CASES = [("gpt_adamw", ["--tp", "2"], 2), ("gpt_adamw", ["--dp", "2", "--zero", "1"], 2),
         ("encoder_adamw", ["--dp", "2", "--tp", "2"], 4), ("cnn_sgd", ["--dp", "2"], 2),
         ("sgd_clipped", ["--dp", "2"], 2)]


@pytest.mark.parametrize("run_name,degrees,ranks", CASES,
                         ids=[f"{c[0]}-{''.join(c[1]).replace('--', '') or 'one'}" for c in CASES])
def test_emulated_gpu_training_matches_pytorch(run_name, degrees, ranks, torch_models,
                                               tmp_path):
    """20 steps of the GPU kernels (emulated) equal torch.optim's 20 steps:
    the loss at every step and the final weights within 1e-4."""
    d = torch_models / REFERENCE_DIRS[run_name]
    meta = json.loads((d / "meta.json").read_text())[run_name]
    flags = ["--cluster", f"local:{ranks}", *degrees]
    bundle = compile_step(d / "model.onnx", tmp_path / "emu.dx", meta["config"]["kind"],
                          *flags, "--target", "cuda-emu")
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["codegen"] == "cuda-emu"
    assert_follows_reference(bundle, ranks, d, meta, tmp_path,
                             f"{run_name} {degrees} (cuda-emu)")


def test_emulated_kernels_are_the_gpu_kernels(torch_models):
    """--emit=gpu under cuda-emu prints the kernels before emulation: the
    same gpu.launch mapping as --target cuda (block reductions included)."""
    d = torch_models / "train_gpt"
    out = run(DISTOPT, "compile", d / "model.onnx", "--target", "cuda-emu",
              "--emit=gpu", "-o", "-").stdout
    assert "gpu.launch" in out
    assert "gpu.barrier" in out


def test_emulation_refuses_ptx(torch_models):
    p = run(DISTOPT, "compile", torch_models / "train_gpt" / "model.onnx", "--target",
            "cuda-emu", "--emit=ptx", "-o", "-", check=False)
    assert p.returncode == 1
    assert "--emit=ptx needs --target cuda" in p.stderr, p.stderr
