"""The manual's examples run as printed.

Every ```sh and ```python block of the pages in MANUAL runs, in order, in
a directory holding the example files (python/testmodels/
gen_doc_examples.py: model.onnx, gpt.onnx, x.npy, ...), with `build/` and
`scripts/` of this checkout beside them and the built `distopt` on PATH.
A block may carry one marker on the line before its fence:

  <!-- doc-test: skip (REASON) -->   not run; the reason says why (and
                                     where else it is tested)
  <!-- doc-test: torch -->           a Python block run under Debian's torch
  <!-- doc-test: transformers -->    one run where HuggingFace transformers is
                                     (scripts/zoo-venv: Debian's torch with
                                     transformers 4.36)
  <!-- doc-test: cuda -->            needs the CUDA target (built where a CUDA
                                     toolkit was found)

Commands that reach other hosts run through Open MPI's launch agent
pointed at a stand-in for ssh that starts each host's daemon on this
machine (as test_launch.py). Pages not yet under this test are listed in
NOT_YET with what they need; a new page must be put in one list or the
other.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from cli import BUILD, DISTOPT, ROOT, env, stand_in_hosts

import gen_doc_examples  # noqa: E402  (python/testmodels, put on the path by cli)

MANUAL = ["README.md", "docs/python.md", "docs/distributed.md", "docs/training.md",
          "docs/precision.md", "docs/strategies.md", "docs/cpu-codegen.md",
          "docs/planner.md", "docs/importing-onnx.md", "docs/cost-model.md",
          "docs/cuda-codegen.md"]
NOT_YET = {
    "docs/adding-an-op.md": "no commands",
    "docs/architecture.md": "no commands (diagrams)",
    "docs/benchmarks.md": "benchmark commands that run for minutes",
    "docs/dopt-dialect.md": "no commands",
    "docs/models.md": "no commands (the zoo's table)",
    "docs/index.md": "no commands (the map of the pages)",
    "docs/cli.md": "the tools' help (test_generated_reference compares it)",
    "docs/dopt-ops.md": "generated from the ODS (test_generated_reference)",
    "docs/passes.md": "generated from the passes' definitions (test_generated_reference)",
}

FENCE = re.compile(r"(?:<!-- doc-test: (?P<marker>[^>]*?) -->\n *)?```(?P<lang>sh|python)\n"
                   r"(?P<body>.*?)```", re.S)

def blocks(page: str):
    text = (ROOT / page).read_text()
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start("body"))
        yield m.group("lang"), m.group("body"), (m.group("marker") or "").strip(), line


def test_every_page_is_listed():
    pages = {"README.md"} | {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert pages == set(MANUAL) | set(NOT_YET), (
        "put each page in MANUAL (its examples run) or NOT_YET (why not yet)")


@pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")
@pytest.mark.parametrize("page", MANUAL)
def test_examples_run(page, tmp_path):
    work = tmp_path / "work"
    gen_doc_examples.write(work)
    for name in ("build", "scripts"):
        (work / name).symlink_to(ROOT / name if name == "scripts" else BUILD)
    remote, _ = stand_in_hosts(tmp_path)
    e = env()
    e.update(PATH=f"{BUILD / 'bin'}:{e['PATH']}", HOME=str(work),
             DISTOPT=str(DISTOPT), **remote)
    ran = 0
    for lang, body, marker, line in blocks(page):
        where = f"{page}:{line}"
        if marker.startswith("skip"):
            assert re.fullmatch(r"skip \(.+\)", marker), f"{where}: a skip says why"
            continue
        if marker == "cuda" and not (BUILD / "lib/Runtime/libdistopt_runtime_cuda.a").exists():
            continue
        if lang == "sh":
            cmd = ["bash", "-euo", "pipefail", "-c", body]
        elif marker in ("torch", "transformers"):
            python = "/usr/bin/python3"
            if marker == "transformers":
                python = subprocess.run([str(ROOT / "scripts" / "zoo-venv")], check=True,
                                        capture_output=True, text=True).stdout.strip()
            cmd = [python, "-c", body]
            e["PYTHONPATH"] = str(ROOT / "python")
        else:
            cmd = [str(ROOT / ".venv" / "bin" / "python"), "-c", body]
        proc = subprocess.run(cmd, cwd=work, env=e, capture_output=True, text=True,
                              timeout=900)
        assert proc.returncode == 0, f"{where}: the example fails:\n{body}\n{proc.stderr[-4000:]}"
        ran += 1
    assert ran > 0, f"{page}: no example ran"


@pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")
def test_generated_reference():
    """docs/cli.md is what the built tools print for --help; dopt-ops.md and
    passes.md are what mlir-tblgen made of the ODS and Passes.td files."""
    import sys
    sys.path.insert(0, str(ROOT / "python" / "docgen"))
    import gen_reference
    for name, text in gen_reference.pages(BUILD).items():
        assert (ROOT / "docs" / name).read_text() == text, (
            f"docs/{name} differs from what the build generates: run scripts/gen-reference")
