"""`cmake --install`: an installed distopt compiles and runs bundles with
its own runtime libraries (not the build tree's), says which commit it is,
and records that in every bundle's manifest."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest
from cli import BUILD, DISTOPT, run

import gen_models  # noqa: E402  (python/testmodels, put on the path by cli)

pytestmark = [
    pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built"),
    pytest.mark.skipif(shutil.which("cmake") is None, reason="no cmake"),
]


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    p = tmp_path_factory.mktemp("prefix")
    run("cmake", "--install", BUILD, "--prefix", p)
    return p


def test_layout(prefix):
    for f in ["bin/distopt", "bin/distopt-opt", "lib/libdistopt_runtime.a",
              "lib/libdistopt_runtime_main.a", "lib/libdistopt_runtime_shared.so",
              "include/distopt/Runtime/Runtime.h", "include/distopt/Runtime/ABI.def",
              "share/doc/distopt/README.md", "share/doc/distopt/architecture.md",
              "lib/python3/site-packages/distopt/__init__.py"]:
        assert (prefix / f).exists(), f


def test_version(prefix):
    out = run(prefix / "bin" / "distopt", "--version").stdout.strip()
    assert re.fullmatch(r"distopt \d+\.\d+\.\d+ \(LLVM/MLIR 22\.\d+\.\d+, "
                        r"git ([0-9a-f]{12}(-dirty)?|unknown)\)", out), out
    assert out == run(DISTOPT, "--version").stdout.strip()


@pytest.mark.parametrize("link", ["static", "shared"])
def test_installed_compiles_and_runs(prefix, tmp_path, link):
    gen_models.generate(str(tmp_path), ["mlp"])
    distopt = prefix / "bin" / "distopt"
    bundle = tmp_path / "m.dx"
    run(distopt, "compile", tmp_path / "mlp.onnx", "--dim", "batch=4",
        "--runtime-link", link, "-o", bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["compiler"] == run(distopt, "--version").stdout.strip()
    if link == "shared":
        # The executable loads the installed runtime, not the build tree's.
        ldd = subprocess.run(["ldd", bundle / "m"], capture_output=True, text=True).stdout
        line = next(l for l in ldd.splitlines() if "libdistopt_runtime_shared" in l)
        assert str(prefix / "lib") in line, ldd
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    run(bundle / "m", "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out")
    assert np.isfinite(np.load(tmp_path / "out" / "y.npy")).all()


def test_installed_python_package_finds_installed_distopt(prefix, tmp_path):
    import os
    import sys
    env = {k: v for k, v in os.environ.items() if k not in ("DISTOPT", "PYTHONPATH")}
    env["PATH"] = "/usr/bin:/bin"
    env["PYTHONPATH"] = str(prefix / "lib/python3/site-packages")
    proc = subprocess.run([sys.executable, "-c",
                           "import distopt; print(distopt.__file__); print(distopt.tool())"],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    module, tool = proc.stdout.split()
    assert module.startswith(str(prefix)), module
    assert tool == str(prefix / "bin" / "distopt")
