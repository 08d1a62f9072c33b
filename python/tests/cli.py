"""Running distopt and its executables from the tests: where the build is,
the environment OpenMPI needs as root, and one subprocess call that
captures the output. Also puts python/testmodels on the import path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DISTOPT_BUILD_DIR", ROOT / "build"))
DISTOPT = BUILD / "bin" / "distopt"
sys.path.insert(0, str(ROOT / "python" / "testmodels"))


def env():
    e = dict(os.environ)
    e.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    e.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return e


def run(*args, check=True):
    """Runs a command; with `check`, asserts it succeeded (showing its
    output)."""
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env())
    if check:
        assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc


def compile_and_run(model_path, feeds, tmp, *compile_flags):
    """Compiles the ONNX model at `model_path` into tmp/<stem>.dx (with
    `compile_flags`), runs it on `feeds` (saved as .npy in tmp) and asserts
    both succeeded; the outputs are in tmp/out. Returns the run."""
    tmp, model_path = Path(tmp), Path(model_path)
    bundle = tmp / f"{model_path.stem}.dx"
    run(DISTOPT, "compile", model_path, *compile_flags, "-o", bundle)
    args = []
    for k, v in feeds.items():
        np.save(tmp / f"{k}.npy", v)
        args += ["--input", f"{k}={tmp / (k + '.npy')}"]
    return run(bundle / model_path.stem, *args, "--output-dir", tmp / "out")


STAND_IN_SSH = """#!/bin/sh
# ssh's stand-in for Open MPI's launch agent: drops the options, notes the
# host in {log}, and runs the command here with a session directory of the
# host's own and over TCP (two daemons on one machine share neither).
while [ $# -gt 0 ]; do case "$1" in -*) shift;; *) break;; esac; done
echo "$1" >> "{log}"
export OMPI_MCA_orte_tmpdir_base="{sessions}/$1" OMPI_MCA_btl=self,tcp
mkdir -p "$OMPI_MCA_orte_tmpdir_base"
shift
exec /bin/sh -c "$*"
"""


def stand_in_hosts(directory: Path):
    """An environment in which mpirun reaches "other hosts" by starting
    their daemons on this machine, and the file the hosts it reached are
    noted in, one a line."""
    log = directory / "hosts.log"
    agent = directory / "fake-ssh"
    agent.write_text(STAND_IN_SSH.format(log=log, sessions=directory / "sessions"))
    agent.chmod(0o755)
    return {"OMPI_MCA_plm_rsh_agent": str(agent)}, log


def save_float_model(path, nodes, inputs: dict, outputs: dict, inits=()):
    """Saves `nodes` as an ONNX model (opset 17, graph "g") at `path`:
    `inputs` and `outputs` name float tensors and give their shapes."""
    import onnx
    from onnx import TensorProto, helper

    def infos(tensors):
        return [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
                for n, shape in tensors.items()]

    g = helper.make_graph(nodes, "g", infos(inputs), infos(outputs), list(inits))
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
