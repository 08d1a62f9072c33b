"""run_node_tests.py --pack / --run-packed: the path the node tests take to a
GPU machine (scripts/gpu-check), checked here with CPU bundles. The bundles,
inputs and expected outputs are packed, then run from the pack alone; the
CPU's accepted differences (--known) print as KNOWN and do not fail the run,
and a wrong result does."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from cli import BUILD, DISTOPT, ROOT

pytestmark = pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")

SCRIPT = ROOT / "python" / "conformance" / "run_node_tests.py"
KNOWN = ROOT / "python" / "conformance" / "known_differences.txt"


def node_tests(*args):
    return subprocess.run([sys.executable, str(SCRIPT), "--distopt", str(DISTOPT),
                           "--runtime-lib-dir", str(BUILD / "lib" / "Runtime"), *args],
                          capture_output=True, text=True, timeout=600)


def test_packed_node_tests_run_from_the_pack_alone(tmp_path):
    pack = tmp_path / "pack"
    # test_dft_inverse is one of the CPU's known differences (the
    # reference's float32 round-off).
    r = node_tests("--filter", "^test_(abs|dft_inverse)$", "--pack", str(pack), "--jobs", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 passed" in r.stdout, r.stdout
    assert sorted(p.name for p in pack.iterdir()) == ["lib", "test_abs", "test_dft_inverse"]
    assert list((pack / "lib").glob("libdistopt_runtime*_shared.so"))

    r = node_tests("--run-packed", str(pack), "--jobs", "2")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "PASS test_abs" in r.stdout and "FAIL test_dft_inverse: output y" in r.stdout
    assert "1 passed, 1 failed, 0 known differences (packed bundles)" in r.stdout

    r = node_tests("--run-packed", str(pack), "--jobs", "2", "--known", str(KNOWN))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "KNOWN test_dft_inverse: output y" in r.stdout
    assert "1 passed, 0 failed, 1 known differences (packed bundles)" in r.stdout

    # A wrong expected output fails, --known or not.
    want = pack / "test_abs" / "ds0" / "want0.npy"
    np.save(want, np.load(want) + 1)
    r = node_tests("--run-packed", str(pack), "--jobs", "2", "--known", str(KNOWN))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL test_abs: output y" in r.stdout
