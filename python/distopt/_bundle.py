"""A compiled bundle: its inputs and outputs from the manifest, and runs of
its program on numpy arrays, in this process where the bundle is one CPU
program (its `<model>.so`, Runtime/BundleAPI.h), else through `distopt
run`."""

from __future__ import annotations

import ctypes
import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from ._tool import DistoptError, tool


def _numpy_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    if name == "bool":
        return np.dtype(np.bool_)
    return np.dtype(name)


@dataclass(frozen=True)
class TensorInfo:
    """An input or output of a bundle: its name, dtype and static shape."""
    name: str
    dtype: np.dtype
    shape: tuple


class Bundle:
    """A bundle directory written by `distopt compile` (or `distopt.compile`)."""

    def __init__(self, path):
        self.path = Path(path)
        manifest = self.path / "manifest.json"
        if not manifest.exists():
            raise DistoptError(f"'{self.path}' is not a bundle (no manifest.json): "
                               "compile one with distopt.compile")
        self.manifest = json.loads(manifest.read_text())
        self.name = self.path.resolve().stem
        self.ranks = int(self.manifest.get("ranks", 1))
        self.inputs = [self._info(t) for t in self.manifest.get("inputs", [])]
        self.outputs = [self._info(t) for t in self.manifest.get("outputs", [])]
        self._lib = None
        self._handle = None

    @staticmethod
    def _info(t) -> TensorInfo:
        # A multi-rank bundle's ranks each see a block; run() takes and
        # gives the whole tensor (as `distopt run`'s files hold it).
        return TensorInfo(t["name"], _numpy_dtype(t["dtype"]),
                          tuple(t.get("global_shape", t["shape"])))

    def __repr__(self) -> str:
        return f"Bundle('{self.path}', ranks={self.ranks})"

    @property
    def in_process(self) -> bool:
        """Whether run() runs the program in this process (a single-rank
        CPU bundle with its shared-library program)."""
        return (self.path / f"{self.name}.so").exists()

    def _check(self, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        names = [i.name for i in self.inputs]
        unknown = [k for k in inputs if k not in names]
        if unknown:
            raise ValueError(f"unknown input {', '.join(map(repr, unknown))}; the model's "
                             f"inputs are {', '.join(map(repr, names))}")
        missing = [n for n in names if n not in inputs]
        if missing:
            raise ValueError(f"missing input {', '.join(map(repr, missing))}")
        arrays = []
        for info in self.inputs:
            a = np.asarray(inputs[info.name])
            if a.dtype != info.dtype:
                raise TypeError(f"input '{info.name}': wrong dtype: expected {info.dtype}, "
                                f"got {a.dtype}")
            if a.shape != info.shape:
                raise ValueError(f"input '{info.name}': wrong shape: expected "
                                 f"{list(info.shape)}, got {list(a.shape)}")
            arrays.append(np.ascontiguousarray(a))
        return arrays

    def _open(self):
        if self._handle is not None:
            return
        lib = ctypes.CDLL(str((self.path / f"{self.name}.so").resolve()))
        lib.dort_bundle_open.restype = ctypes.c_void_p
        lib.dort_bundle_open.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        lib.dort_bundle_run.restype = ctypes.c_int32
        lib.dort_bundle_run.argtypes = [ctypes.c_void_p, ctypes.c_int32,
                                        ctypes.POINTER(ctypes.c_void_p),
                                        ctypes.POINTER(ctypes.c_void_p),
                                        ctypes.POINTER(ctypes.c_int32)]
        lib.dort_bundle_output.restype = ctypes.c_void_p
        lib.dort_bundle_output.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        lib.dort_bundle_close.argtypes = [ctypes.c_void_p]
        lib.dort_bundle_last_error.restype = ctypes.c_char_p
        entry = ctypes.cast(lib.dopt_entry, ctypes.c_void_p)
        handle = lib.dort_bundle_open(str(self.path).encode(), entry)
        if not handle:
            raise DistoptError(lib.dort_bundle_last_error().decode())
        self._lib, self._handle = lib, handle

    def close(self):
        """Releases the program and the mapped weights (also on deletion)."""
        if self._handle is not None:
            self._lib.dort_bundle_close(self._handle)
            self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Runs the program once on `inputs` (name -> array of the input's
        dtype and shape) and returns its outputs by name. A failure (an
        index out of range, a kernel error) raises DistoptError with the
        runtime's message."""
        arrays = self._check(inputs)
        if not self.in_process:
            return self._run_process(arrays)
        self._open()
        n = len(arrays)
        data = (ctypes.c_void_p * n)(*[a.ctypes.data for a in arrays])
        shapes_keep = [(ctypes.c_int64 * max(a.ndim, 1))(*a.shape) for a in arrays]
        shapes = (ctypes.c_void_p * n)(*[ctypes.addressof(s) for s in shapes_keep])
        ranks = (ctypes.c_int32 * n)(*[a.ndim for a in arrays])
        if self._lib.dort_bundle_run(self._handle, n, data, shapes, ranks) != 0:
            raise DistoptError(self._lib.dort_bundle_last_error().decode())
        out = {}
        for i, info in enumerate(self.outputs):
            size = int(np.prod(info.shape, dtype=np.int64)) * info.dtype.itemsize
            ptr = self._lib.dort_bundle_output(self._handle, i)
            raw = ctypes.string_at(ptr, size) if size else b""
            out[info.name] = np.frombuffer(raw, dtype=info.dtype).reshape(info.shape).copy()
        return out

    def _run_process(self, arrays: list[np.ndarray]) -> dict[str, np.ndarray]:
        """`distopt run` on .npy files (a bundle of several ranks, a
        pipeline or a GPU program)."""
        with tempfile.TemporaryDirectory(prefix="distopt-run-") as tmp:
            tmp = Path(tmp)
            args = []
            for info, a in zip(self.inputs, arrays):
                f = tmp / f"in{len(args)}.npy"
                np.save(f, a)
                args.append(f"--input={info.name}={f}")
            proc = subprocess.run([str(tool()), "run", str(self.path), *args,
                                   f"--output-dir={tmp / 'out'}"],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise DistoptError(proc.stderr.strip() or proc.stdout.strip())
            files = sorted((tmp / "out").glob("*.npy"))
            out = {}
            for info in self.outputs:
                f = _output_file(tmp / "out", info.name, files)
                out[info.name] = np.load(f)
            return out


def _output_file(directory: Path, name: str, files) -> Path:
    """The file the runtime wrote output `name` to (sanitized: characters
    other than letters, digits, '.', '_', '-' as '_')."""
    stem = "".join(c if (c.isascii() and (c.isalnum() or c in "._-")) else "_" for c in name)
    if stem.startswith("."):
        stem = "_" + stem[1:]
    f = directory / f"{stem or 'output'}.npy"
    if not f.exists():
        raise DistoptError(f"the run wrote no output '{name}' ({f.name})")
    return f
