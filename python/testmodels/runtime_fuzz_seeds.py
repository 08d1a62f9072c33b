#!/usr/bin/env python3
"""Seeds of the runtime-readers fuzzer (scripts/fuzz-runtime): valid files of
every format the runtime reads, each prefixed with the byte that picks its
reader (fuzz/RuntimeReaders.h).

Usage: runtime_fuzz_seeds.py OUT_DIR
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
from onnx import numpy_helper

NPY, MAPPED, PROTO, JSON, MANIFEST, CHECKPOINT, TENSOR_FILE = range(7)


def npy(a: np.ndarray) -> bytes:
    f = io.BytesIO()
    np.save(f, a)
    return f.getvalue()


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    seeds: dict[str, bytes] = {}
    arrays = {
        "f32": rng.standard_normal((2, 3)).astype(np.float32),
        "f64_fortran": np.asfortranarray(rng.standard_normal((3, 2))),
        "i64_big_endian": np.arange(6, dtype=">i8").reshape(2, 3),
        "i32": np.arange(5, dtype=np.int32),
        "f16": rng.standard_normal(4).astype(np.float16),
        "bool": np.array([[True, False]]),
        "u8_scalar": np.array(7, dtype=np.uint8),
        "empty": np.zeros((0, 3), np.float32),
    }
    for name, a in arrays.items():
        seeds[f"npy-{name}"] = bytes([NPY]) + npy(a)
        seeds[f"mapped-{name}"] = bytes([MAPPED]) + npy(a)
        seeds[f"tensorfile-npy-{name}"] = bytes([TENSOR_FILE]) + npy(a)
        if name != "f64_fortran":
            proto = numpy_helper.from_array(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("=")),
                                            name=name).SerializeToString()
            seeds[f"proto-{name}"] = bytes([PROTO]) + proto
            seeds[f"tensorfile-proto-{name}"] = bytes([TENSOR_FILE]) + proto
    manifest = {
        "format": 1, "model": "gpt", "ranks": 2, "grid": [1, 2, 1], "codegen": "cpu",
        "accumulate": 2, "step_flops": 1.5e9,
        "inputs": [{"name": "ids", "dtype": "int64", "shape": [2, 16], "batch_dim": 0,
                    "indices": {"low": -100, "high": 99, "use": "ONNX node 'wte' (Gather)"}},
                   {"name": "labels", "dtype": "int64", "shape": [2, 16], "classes": 100}],
        "outputs": [{"name": "loss", "dtype": "float32", "shape": []}],
        "weights": [{"name": "w", "dtype": "float32", "shape": [100, 16], "global_shape": [100, 32],
                     "split_axes": [[], [1]], "file": "weights.bin", "offset": 0, "length": 6400}],
        "pipeline": {"microbatches": 2, "stages": [
            {"inputs": [{"input": 0}], "weights": [0],
             "outputs": [{"dtype": "float32", "shape": [1, 16, 8], "activation": 0}]}]},
        "eval": {"inputs": [{"name": "ids", "dtype": "int64", "shape": [2, 16]}], "weights": [0],
                 "outputs": [{"name": "loss", "dtype": "float32", "shape": []}]},
    }
    text = json.dumps(manifest).encode()
    seeds["manifest"] = bytes([MANIFEST]) + text
    seeds["json"] = bytes([JSON]) + text
    seeds["json-escapes"] = bytes([JSON]) + b'{"a": "\\u00e9\\n", "b": [1e308, -0, 1.5e-7], "c": null}'
    meta = {"step": 3, "weights": {"w": "w.npy"},
            "state": {"s": {"shape": [4], "blocks": [
                {"file": "w.npy", "offset": 0, "split_axes": [[1]], "grid": [1, 2, 1],
                 "coords": [0, 0, 0], "block_parts": 1},
                {"file": "w.npy", "offset": 0, "split_axes": [[1]], "grid": [1, 2, 1],
                 "coords": [0, 1, 0], "block_parts": 1}]}}}
    seeds["checkpoint"] = bytes([CHECKPOINT]) + json.dumps(meta).encode()
    for name, data in seeds.items():
        (out / name).write_bytes(data)
    print(f"runtime_fuzz_seeds: {len(seeds)} seeds in {out}")


if __name__ == "__main__":
    main()
