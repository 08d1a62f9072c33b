"""Shared fixtures: the PyTorch reference models and training runs (made by
Debian's python3-torch under /usr/bin/python3, once per test session)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cli import ROOT

TORCH_PY = "/usr/bin/python3"


def torch_available() -> bool:
    if not Path(TORCH_PY).exists():
        return False
    return subprocess.run([TORCH_PY, "-c", "import torch"], capture_output=True).returncode == 0


def torch_generated(tmp_path_factory, name: str, script: str, *args) -> Path:
    """Runs python/testmodels/SCRIPT under Debian's torch with ARGS (the
    directory it writes, made here, in place of "{out}"): that directory.
    Skips when torch is missing."""
    if not torch_available():
        pytest.skip("Debian's python3-torch is not installed (scripts/setup installs it)")
    out = tmp_path_factory.mktemp(name)
    proc = subprocess.run([TORCH_PY, str(ROOT / "python/testmodels" / script),
                           *[str(out) if a == "{out}" else a for a in args]],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def torch_models(tmp_path_factory):
    return torch_generated(tmp_path_factory, "torch_grad", "gen_grad_models.py",
                           "--out", "{out}")


