"""`distopt run` on more than one host: --hosts, --hostfile and Slurm.

The remote path is the one a cluster takes: Open MPI starts its daemon on
each host through its launch agent (ssh), here a stand-in that runs the
command on this machine, for two host names that are not this machine's.
The ranks on the two "hosts" talk over TCP (shared memory is not shared
between Open MPI's two daemons on one machine). Under Slurm, `distopt run`
starts the ranks with srun; a stand-in srun records its arguments and
starts them with mpirun. Results must equal the one-process program's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli import DISTOPT, env, stand_in_hosts

import gen_models  # noqa: E402  (python/testmodels, put on the path by cli)

pytestmark = [
    pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built"),
    pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun"),
]

FAKE_SRUN = """#!/bin/sh
# srun's stand-in: records its arguments, starts the tasks with mpirun.
echo "$@" > "{log}"
[ "$1" = --ntasks ] || exit 90
n=$2; shift 2
[ "$1" = --kill-on-bad-exit=1 ] || exit 91
shift
exec mpirun -np "$n" --oversubscribe --allow-run-as-root "$@"
"""


def script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def launch(*args, extra_env=None):
    e = env()
    e.update(extra_env or {})
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, env=e)


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    """The demo GPT under dp 2 x tp 2 for local:4, its input, and the
    one-process program's logits."""
    d = tmp_path_factory.mktemp("launch")
    gen_models.generate(str(d), ["gpt"])
    ids = np.random.default_rng(0).integers(0, 100, (8, 16)).astype(np.int64)
    np.save(d / "ids.npy", ids)
    for out, flags in (("g.dx", ["--cluster", "local:4", "--dp", 2, "--tp", 2]),
                       ("one.dx", [])):
        p = launch(DISTOPT, "compile", d / "gpt.onnx", "--dim", "batch=8", *flags,
                   "-o", d / out)
        assert p.returncode == 0, p.stderr
    p = launch(d / "one.dx" / "one", "--input", f"input_ids={d / 'ids.npy'}",
               "--output-dir", d / "one")
    assert p.returncode == 0, p.stderr
    return d, np.load(d / "one" / "logits.npy")


def remote_env(tmp_path):
    extra, log = stand_in_hosts(tmp_path)
    return log, extra


@pytest.mark.parametrize("how", ["hosts", "hostfile", "after-bundle"])
def test_two_hosts(gpt, tmp_path, how):
    d, want = gpt
    log, extra = remote_env(tmp_path)
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two nodes\nnode-a slots=2\n\nnode-b:2   # the second\n")
    flags = {"hosts": ["--hosts", "node-a:2,node-b:2"],
             "hostfile": ["--hostfile", hostfile]}
    inputs = ["--input", f"input_ids={d / 'ids.npy'}", "--output-dir", tmp_path / "out"]
    if how == "after-bundle":
        p = launch(DISTOPT, "run", d / "g.dx", f"--hostfile={hostfile}", "-n", 4, *inputs,
                   extra_env=extra)
    else:
        p = launch(DISTOPT, "run", *flags[how], d / "g.dx", *inputs, extra_env=extra)
    assert p.returncode == 0, p.stderr + p.stdout
    # Open MPI started one daemon per host through the launch agent.
    assert sorted(log.read_text().split()) == ["node-a", "node-b"]
    assert "warning" not in p.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "logits.npy"), want)


def test_dry_run_exports_environment(gpt, tmp_path):
    d, _ = gpt
    p = launch(DISTOPT, "run", "--dry-run", "--hosts", "a:2,b:2", d / "g.dx", "--repeat", 3,
               extra_env={"DISTOPT_NUM_THREADS": "2", "OMP_PROC_BIND": "close",
                          "UNRELATED_VARIABLE": "x"})
    assert p.returncode == 0, p.stderr
    args = p.stdout.split("\n")
    assert args[1:7] == ["-np", "4", "--host", "a:2,b:2", "--map-by", "slot"]
    exported = {args[i + 1] for i, a in enumerate(args) if a == "-x"}
    assert {"DISTOPT_NUM_THREADS", "OMP_PROC_BIND"} <= exported
    assert "UNRELATED_VARIABLE" not in exported
    assert args[-4:-1] == [str((d / "g.dx" / "g").resolve()), "--repeat", "3"]


def test_split_tensor_group_warns(gpt, tmp_path):
    d, want = gpt
    _, extra = remote_env(tmp_path)
    p = launch(DISTOPT, "run", "--hosts", "node-a:1,node-b:3", d / "g.dx",
               "--input", f"input_ids={d / 'ids.npy'}", "--output-dir", tmp_path / "out",
               extra_env=extra)
    assert p.returncode == 0, p.stderr
    assert ("warning: ranks 0-1 (a tensor-parallel group) are placed on node-a and node-b: "
            "their collectives cross the network; give each host a multiple of 2 slots"
            ) in p.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "logits.npy"), want)


def test_slurm(gpt, tmp_path):
    d, want = gpt
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "srun.log"
    script(bin_dir / "srun", FAKE_SRUN.format(log=log))
    slurm = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "42",
             "SLURM_NTASKS": "4"}
    inputs = ["--input", f"input_ids={d / 'ids.npy'}", "--output-dir", tmp_path / "out"]
    p = launch(DISTOPT, "run", d / "g.dx", *inputs, extra_env=slurm)
    assert p.returncode == 0, p.stderr + p.stdout
    args = log.read_text().split()
    assert args[:3] == ["--ntasks", "4", "--kill-on-bad-exit=1"]
    assert args[3] == str((d / "g.dx" / "g").resolve())
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "logits.npy"), want)
    # Too small an allocation is refused before anything starts.
    p = launch(DISTOPT, "run", d / "g.dx", *inputs, extra_env={**slurm, "SLURM_NTASKS": "2"})
    assert p.returncode != 0
    assert ("the Slurm allocation has 2 tasks (SLURM_NTASKS); this bundle needs 4 "
            "(sbatch --ntasks 4)") in p.stderr
    # Hosts go with mpirun, not srun.
    p = launch(DISTOPT, "run", "--launcher", "srun", "--hosts", "a:4", d / "g.dx", *inputs,
               extra_env=slurm)
    assert p.returncode != 0
    assert "--hosts and --hostfile go with mpirun" in p.stderr
    # --launcher mpirun inside an allocation runs on this machine.
    log.unlink()
    p = launch(DISTOPT, "run", "--launcher=mpirun", d / "g.dx", *inputs, extra_env=slurm)
    assert p.returncode == 0, p.stderr
    assert not log.exists()


def test_launch_errors(gpt, tmp_path):
    d, _ = gpt
    bad = tmp_path / "bad-hosts"
    cases = [
        (["--hosts", "a:2,b:x"], "--hosts: 'b:x' is not HOST or HOST:SLOTS"),
        (["--hosts", "a:0"], "--hosts: 'a:0' is not HOST or HOST:SLOTS"),
        (["--hosts", "a:1,b:2"], "the hosts offer 3 slots; this bundle needs 4 ranks"),
        (["--hostfile", tmp_path / "none"], f"cannot read hostfile '{tmp_path / 'none'}'"),
        (["--hostfile", bad], f"{bad}:3: 'cpus=4' is not slots=N or max_slots=N"),
        (["--launcher", "ssh"], "--launcher must be auto, mpirun or srun, got 'ssh'"),
    ]
    bad.write_text("a slots=2\n# b\nb cpus=4\n")
    for flags, message in cases:
        p = launch(DISTOPT, "run", *flags, d / "g.dx")
        assert p.returncode != 0, flags
        assert "distopt run: error: " + message in p.stderr, (flags, p.stderr)
    empty = tmp_path / "empty-hosts"
    empty.write_text("# nobody\n")
    p = launch(DISTOPT, "run", "--hostfile", empty, d / "g.dx")
    assert p.returncode != 0
    assert f"hostfile '{empty}' names no host" in p.stderr
    # No srun in a Slurm allocation.
    p = launch(DISTOPT, "run", d / "g.dx", extra_env={"SLURM_JOB_ID": "1", "PATH": "/nonexistent"})
    assert p.returncode != 0
    assert "srun not found on PATH; this bundle needs 4 ranks" in p.stderr


def test_plan_for_the_hosts(gpt, tmp_path):
    """A cluster spec made of the hostfile the job runs on: the plan keeps
    tensor groups inside a host, and the bundle runs there."""
    d, want = gpt
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node-a slots=2\nnode-b slots=2\n")
    p = launch(DISTOPT, "plan", d / "gpt.onnx", "--cluster", f"hostfile:{hostfile}",
               "--dim", "batch=8", "--mode", "infer", "--tp", 2)
    assert p.returncode == 0, p.stderr
    assert f"on hostfile:{hostfile} (4 x CPU core" in p.stdout and "2 nodes" in p.stdout, p.stdout
    bundle = tmp_path / "h.dx"
    p = launch(DISTOPT, "compile", d / "gpt.onnx", "--cluster", f"hostfile:{hostfile}",
               "--dim", "batch=8", "--tp", 2, "-o", bundle)
    assert p.returncode == 0, p.stderr
    _, extra = remote_env(tmp_path)
    p = launch(DISTOPT, "run", "--hostfile", hostfile, bundle, "--input",
               f"input_ids={d / 'ids.npy'}", "--output-dir", tmp_path / "out", extra_env=extra)
    assert p.returncode == 0, p.stderr
    assert "warning" not in p.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out" / "logits.npy"), want,
                               rtol=1e-5, atol=1e-6)
    p = launch(DISTOPT, "plan", d / "gpt.onnx", "--cluster", "hosts:a:2,b:4", "--dim", "batch=8")
    assert p.returncode != 0
    assert "host a has 2 slots and b 4; the planner's nodes are alike" in p.stderr
