"""A compiled bundle: its inputs and outputs from the manifest, and runs of
its program on numpy arrays, in this process where the bundle is one CPU
program (its `<model>.so`, Runtime/BundleAPI.h), else through `distopt
run`."""

from __future__ import annotations

import ctypes
import json
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping, Union

import numpy as np

from ._base import DistoptError, flags, tool


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
        # Training continues between train() calls: the last call's weights
        # and optimizer state (a checkpoint) and its step count.
        self._state = None
        self._steps = 0

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
        CPU bundle with its shared-library program, outside an MPI job)."""
        return (self.path / f"{self.name}.so").exists() and mpi_rank() is None

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
            # (np.ascontiguousarray makes a scalar 1-d: keep its shape.)
            arrays.append(np.ascontiguousarray(a).reshape(a.shape))
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
        """Releases the program, the mapped weights and the training state
        (also on deletion)."""
        if self._handle is not None:
            self._lib.dort_bundle_close(self._handle)
            self._handle = None
        self.reset()

    def reset(self):
        """Forgets the training state: the next train() starts from the
        bundle's weights at step 0."""
        import shutil
        if self._state is not None:
            shutil.rmtree(self._state, ignore_errors=True)
        self._state, self._steps = None, 0

    @property
    def steps_trained(self) -> int:
        """The steps train() has run since the bundle was opened (or reset)."""
        return self._steps

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

    def train(self, data: Data, steps=None, epochs=None,
              callback: Callable[[dict], None] | None = None, **hyper) -> list[dict]:
        """Trains a training-step bundle (compiled with a loss and an
        optimizer) as `distopt run BUNDLE train` does, and returns its log:
        one dict a step (`step`, `loss`, `lr`, `grad_norm`,
        `samples_per_s`, ...), each also passed to `callback` as the step
        ends. `data` is the whole data set (name -> array, samples along
        axis 0; shuffled per epoch unless `no_shuffle=True`) or an
        iterable of batches (name -> array in the model's layout, e.g. a
        torch DataLoader's), one step each, in order. `hyper` are the
        train mode's flags (`lr`, `betas=(0.9, 0.95)`, `weight_decay`,
        `clip_grad_norm`, `lr_schedule`, `warmup_steps`, `checkpoint_dir`,
        `checkpoint_every`, `resume`, `save_weights`, `save_onnx`, ...:
        docs/training.md). Several ranks run under `distopt run`'s launcher.
        A further call continues where the last one stopped (its weights,
        optimizer state and step count; `reset()` starts over), unless
        `checkpoint_dir` or `resume` is given."""
        return train(self, data, steps, epochs, callback, **hyper)

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
            proc = subprocess.run(bundle_command(self, *args, f"--output-dir={tmp / 'out'}"),
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise DistoptError(proc.stderr.strip() or proc.stdout.strip())
            if mpi_rank() not in (None, 0):
                return {}  # rank 0 writes the outputs
            out = {}
            for info, name in zip(self.outputs, _output_files(i.name for i in self.outputs)):
                if not (tmp / "out" / name).exists():
                    raise DistoptError(f"the run wrote no output '{info.name}' ({name})")
                out[info.name] = np.load(tmp / "out" / name)
            return out


def mpi_rank():
    """This process's rank when it is one rank of an MPI job (started by
    mpirun, or by srun with several tasks), else None."""
    import os
    for size, rank in (("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),
                       ("PMI_SIZE", "PMI_RANK"), ("PMIX_SIZE", "PMIX_RANK")):
        if size in os.environ and rank in os.environ:
            return int(os.environ[rank])
    if "SLURM_STEP_ID" in os.environ and int(os.environ.get("SLURM_STEP_NUM_TASKS", "1")) > 1:
        return int(os.environ.get("SLURM_PROCID", "0"))
    return None


_rank_taken = False


def bundle_command(bundle: "Bundle", *args: str) -> list[str]:
    """The command that runs `bundle` with its executable's `args`: `distopt
    run` (which launches its ranks), or, inside an MPI job, the executable
    itself, which takes this process's place as the job's rank (each rank
    runs the same script: the bundle's ranks are the job's)."""
    global _rank_taken
    if mpi_rank() is not None:
        if _rank_taken:
            raise DistoptError(
                "inside an MPI job this process has already run a bundle as its rank; "
                "a job's rank can start MPI once, so run one program per job (or "
                "call Bundle.run/train outside mpirun, where distopt run launches them)")
        _rank_taken = True
        return [str(bundle.path / bundle.name), *args]
    return [str(tool()), "run", str(bundle.path), *args]


Data = Union[Mapping[str, np.ndarray], Iterable[Mapping[str, np.ndarray]]]


def _data_files(bundle: "Bundle", data: Data, directory: Path, first_step: int = 0):
    """Writes the training data as one .npy file per data input, samples
    along axis 0 (the train mode's layout). A dict is the whole data set;
    an iterable gives batches in the model's layout (its batch dimension
    from the manifest), one step each, in order: the run starting at step
    `first_step` takes batch j at step first_step + j, which without
    shuffling reads the file's batch (first_step + j) mod batches. Returns
    the --data flags, the number of batches of an iterable (else None) and
    the samples one step takes."""
    batch_dims = {t["name"]: t.get("batch_dim", 0) for t in bundle.manifest.get("inputs", [])}
    batch_dims = {k: (0 if v < 0 else v) for k, v in batch_dims.items()}
    # Samples a step takes: the data input's batch (times the micro-batches
    # one step accumulates).
    per_step = {}
    for t in bundle.manifest.get("inputs", []):
        shape = t.get("global_shape", t["shape"])
        if shape:
            per_step[t["name"]] = (shape[batch_dims[t["name"]]] *
                                   int(bundle.manifest.get("accumulate", 1)))
    if isinstance(data, Mapping):
        arrays, batches = {k: np.asarray(v) for k, v in data.items()}, None
    else:
        parts: dict[str, list[np.ndarray]] = {}
        batches = 0
        for i, batch in enumerate(data):
            if not isinstance(batch, Mapping):
                raise TypeError(f"batch {i}: expected a dict of arrays, got "
                                f"{type(batch).__name__}")
            if parts and set(batch) != set(parts):
                raise ValueError(f"batch {i} holds {sorted(batch)}, batch 0 held "
                                 f"{sorted(parts)}")
            for k, v in batch.items():
                v = np.asarray(v.numpy() if hasattr(v, "numpy") else v)
                v = np.moveaxis(v, batch_dims.get(k, 0), 0) if v.ndim else v
                if k in per_step and (v.ndim == 0 or v.shape[0] != per_step[k]):
                    got = v.shape[0] if v.ndim else "no"
                    raise ValueError(f"batch {i}: '{k}' holds {got} samples; a step takes "
                                     f"{per_step[k]} (the compiled batch; a DataLoader's last "
                                     f"batch needs drop_last=True)")
                parts.setdefault(k, []).append(v)
            batches += 1
        if not batches:
            raise ValueError("the data iterable gave no batch")
        shift = first_step % batches
        arrays = {k: np.concatenate(v[batches - shift:] + v[:batches - shift])
                  for k, v in parts.items()}
    args = []
    for i, (name, a) in enumerate(arrays.items()):
        f = directory / f"data{i}.npy"
        np.save(f, np.ascontiguousarray(a))
        args.append(f"--data={name}={f}")
    samples = next((per_step[k] for k in arrays if k in per_step), 0)
    return args, batches, samples, (len(next(iter(arrays.values()))) if arrays else 0)


def _read_log(path: Path, seen: int, callback, records: list) -> int:
    if not path.exists():
        return seen
    lines = path.read_text().splitlines()
    # A line is complete when followed by another, or when the run ended.
    for line in lines[seen:]:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            break
        records.append(record)
        seen += 1
        if callback is not None:
            callback(record)
    return seen


def train(bundle: "Bundle", data: Data, steps=None, epochs=None,
          callback: Callable[[dict], None] | None = None, **hyper) -> list[dict]:
    # Continue from the previous call (its checkpoint) unless the caller
    # manages checkpoints, or a job's rank runs its one program.
    carry = ("checkpoint_dir" not in hyper and "resume" not in hyper
             and mpi_rank() is None)
    done = bundle._steps if carry else 0
    with tempfile.TemporaryDirectory(prefix="distopt-train-") as tmp:
        tmp = Path(tmp)
        args, batches, per_step, samples = _data_files(bundle, data, tmp, done)
        if batches is not None:
            # Batches as given, in their order, one a step.
            hyper.setdefault("no_shuffle", True)
            if steps is None and epochs is None:
                steps = batches
        if steps is None and epochs is None:
            raise ValueError("give steps= or epochs= (or an iterable of batches)")
        if epochs is not None and done:
            # --steps counts from step 0 when resuming: epochs as steps.
            steps, epochs = epochs * (samples // max(per_step, 1)), None
        if steps is not None:
            steps += done
        if carry:
            if bundle._state is None:
                bundle._state = Path(tempfile.mkdtemp(prefix="distopt-state-"))
            hyper["checkpoint_dir"] = str(bundle._state)
            if done:
                hyper["resume"] = str(bundle._state)
        log = tmp / "log.jsonl"
        cmd = [*bundle_command(bundle, "train"), *args,
               *([f"--steps={steps}"] if steps is not None else []),
               *([f"--epochs={epochs}"] if epochs is not None else []),
               f"--log={log}", *flags(hyper)]
        # The trainer's output goes to a file: a pipe nobody reads while the
        # log is followed would fill (a progress line a step) and stop it.
        with open(tmp / "output.txt", "w+") as output:
            proc = subprocess.Popen(cmd, stdout=output, stderr=subprocess.STDOUT, text=True)
            records: list[dict] = []
            seen = 0
            while proc.poll() is None:
                seen = _read_log(log, seen, callback, records)
                time.sleep(0.05)
            seen = _read_log(log, seen, callback, records)
            output.seek(0)
            stderr = output.read()
        if proc.returncode != 0:
            raise DistoptError("\n".join(l for l in stderr.splitlines()
                                          if "error" in l.lower()) or stderr.strip())
        if carry and records:
            bundle._steps = int(records[-1]["step"])
        return records


def _output_files(names) -> list[str]:
    """The files the runtime writes the outputs `names` to: its
    outputFileNames (lib/Runtime/Bundle.cpp) -- each byte other than ASCII
    letters, digits, '.', '_' and '-' as '_', a leading '.' as '_', at most
    200 bytes, and "_2", "_3", ... after a stem an earlier output took."""
    files, taken = [], set()
    for name in names:
        stem = "".join(chr(b) if chr(b).isascii() and (chr(b).isalnum() or chr(b) in "._-")
                       else "_" for b in name.encode()) or "output"
        stem = ("_" + stem[1:] if stem.startswith(".") else stem)[:200]
        candidate, i = stem, 2
        while candidate in taken:
            candidate, i = f"{stem}_{i}", i + 1
        taken.add(candidate)
        files.append(candidate + ".npy")
    return files
