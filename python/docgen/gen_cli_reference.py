#!/usr/bin/env python3
"""Writes docs/cli.md, the command-line reference, from the tools' own help:
`distopt --help`, each subcommand's `--help`, and the `--help` of a compiled
training-step bundle's executable (its inference, `train` and `eval`
modes). python/tests/test_docs.py checks that the page equals what the
built tools print; after changing a flag, run scripts/gen-cli-reference.

Usage: gen_cli_reference.py DISTOPT [OUT]   (OUT: stdout when absent)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "testmodels"))
import gen_doc_examples  # noqa: E402

SUBCOMMANDS = ["import", "plan", "compile", "run", "ops"]


def helptext(*cmd) -> str:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(map(str, cmd))} failed: {proc.stderr}")
    return proc.stdout.rstrip() + "\n"


def reference(distopt: Path) -> str:
    parts = ["# Command-line reference\n",
             "Generated from the tools' own `--help` by `scripts/gen-cli-reference`; the\n"
             "guides in this folder say how the options work together.\n",
             "## distopt\n", "```\n" + helptext(distopt, "--help") + "```\n"]
    for sub in SUBCOMMANDS:
        parts += [f"## distopt {sub}\n", "```\n" + helptext(distopt, sub, "--help") + "```\n"]
    with tempfile.TemporaryDirectory(prefix="distopt-cli-") as tmp:
        tmp = Path(tmp)
        gen_doc_examples.write(tmp)
        helptext(distopt, "compile", tmp / "model.onnx", "--dim", "batch=32",
                 "--loss", "cross-entropy:logits", "--optimizer", "adamw", "-o", tmp / "step.dx")
        exe = tmp / "step.dx" / "step"
        here = str(tmp / "step.dx")
        parts += ["## A bundle's executable\n",
                  "A bundle's executable runs the model (`--input`), and for a training step\n"
                  "also trains (`train`) and evaluates (`eval`); this is the help of the\n"
                  "training step `distopt compile model.onnx --dim batch=32 --loss\n"
                  "cross-entropy:logits --optimizer adamw -o step.dx` writes.\n",
                  "```\n" + helptext(exe, "--help").replace(here, "step.dx") + "```\n",
                  "### step.dx/step train\n", "```\n" + helptext(exe, "train", "--help") + "```\n",
                  "### step.dx/step eval\n", "```\n" + helptext(exe, "eval", "--help") + "```\n"]
    return "\n".join(parts)


def main() -> int:
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    text = reference(Path(sys.argv[1]))
    if len(sys.argv) == 3:
        Path(sys.argv[2]).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
