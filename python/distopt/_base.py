"""What the package's modules share: the `distopt` program, its errors,
keyword arguments as its flags."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Mapping


class DistoptError(RuntimeError):
    """A distopt command or a compiled program failed; the message is
    distopt's own (it names the ONNX node, the flag or the input)."""


def tool() -> Path:
    """The `distopt` program: $DISTOPT, else `distopt` on PATH, else the one
    installed with this package (`cmake --install`: <prefix>/bin beside
    <prefix>/lib/python3/site-packages), else the build tree beside this
    package's sources."""
    if os.environ.get("DISTOPT"):
        return Path(os.environ["DISTOPT"])
    found = shutil.which("distopt")
    if found:
        return Path(found)
    here = Path(__file__).resolve()
    for candidate in (here.parents[4] / "bin" / "distopt",
                      here.parents[2] / "build" / "bin" / "distopt"):
        if candidate.exists():
            return candidate
    raise DistoptError("the distopt program was not found: set DISTOPT, put it on PATH, "
                       "or build it (scripts/build)")


def version() -> str:
    """`distopt --version`: version, git commit, LLVM/MLIR."""
    return _run(["--version"]).strip()


def _run(args: list[str]) -> str:
    proc = subprocess.run([str(tool()), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        message = proc.stderr.strip() or proc.stdout.strip()
        raise DistoptError(message or f"distopt {args[0]} failed ({proc.returncode})")
    return proc.stdout


def flags(options: Mapping[str, Any]) -> list[str]:
    """Keyword arguments as command-line flags: `name=value` is
    `--name=value` with `_` as `-`; True is the bare flag, False and None
    are left out; `dims`, `shapes` and `freeze` take dicts (`--dim k=v`
    each; a shape is a sequence of sizes)."""
    out: list[str] = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        if key in ("dims", "shapes", "freeze"):
            if not isinstance(value, Mapping):
                raise TypeError(f"{key} takes a dict, got {type(value).__name__}")
            flag = {"dims": "--dim", "shapes": "--shape", "freeze": "--freeze"}[key]
            for name, v in value.items():
                if key == "shapes":
                    v = "x".join(str(int(d)) for d in v)
                out.append(f"{flag}={name}={v}")
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            out.append(f"{flag}={','.join(str(v) for v in value)}")
        else:
            out.append(f"{flag}={value}")
    return out
