#!/usr/bin/env python3
"""Benchmark: importing a model with 1 GiB of external-data weights.

distopt references external weights instead of reading them, so `distopt
import` should cost the same whether the model holds 1 MiB or 1 GiB. Peers,
measured in the same run on the same files:
  * onnx.load(path)                          - the ONNX Python loader, which reads
                                               external data by default;
  * onnx.load(path, load_external_data=False) - the same loader, graph only;
  * onnxruntime.InferenceSession(path)        - a full runtime that must read the
                                               weights.
Prints a table of median wall time and peak RSS per tool.

Usage: bench/import_external.py [--repeat N] [--build build]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def measure(cmd: list[str], repeat: int) -> tuple[float, float]:
    """Median wall seconds and max peak RSS (MiB) of `cmd` run in a fresh process."""
    times, peaks = [], []
    for _ in range(repeat):
        wrapper = ("import resource,subprocess,sys,time,json;"
                   "t=time.perf_counter();r=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL);"
                   "dt=time.perf_counter()-t;"
                   "print(json.dumps([r.returncode,dt,resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))")
        out = subprocess.run([PY, "-c", wrapper, *cmd], capture_output=True, text=True, check=True)
        rc, dt, rss_kib = json.loads(out.stdout)
        if rc != 0:
            raise SystemExit(f"command failed: {' '.join(cmd)}")
        times.append(dt)
        peaks.append(rss_kib / 1024)
    return statistics.median(times), max(peaks)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--build", default=str(ROOT / "build"))
    args = ap.parse_args()
    distopt = Path(args.build) / "bin" / "distopt"
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([PY, str(ROOT / "python/testmodels/gen_models.py"), "--out", tmp,
                        "--only", "big_external"], check=True, stdout=subprocess.DEVNULL)
        model = os.path.join(tmp, "big_external.onnx")
        data = model + ".data"
        # Materialise the sparse data file so that peers really read 1 GiB.
        with open(data, "r+b") as f:
            size = os.path.getsize(data)
            chunk = b"\x01" * (1 << 24)
            for _ in range(size // len(chunk)):
                f.write(chunk)
        rows = [
            ("distopt import", [str(distopt), "import", model, "--dim", "batch=8", "-o", os.devnull]),
            ("onnx.load (graph only)", [PY, "-c", f"import onnx; onnx.load({model!r}, load_external_data=False)"]),
            ("onnx.load (with data)", [PY, "-c", f"import onnx; onnx.load({model!r})"]),
            ("onnxruntime session", [PY, "-c", "import onnxruntime as o; o.InferenceSession("
                                     f"{model!r}, providers=['CPUExecutionProvider'])"]),
        ]
        results = [(name, *measure(cmd, args.repeat)) for name, cmd in rows]
    base = results[0][1]
    print(f"Import of a model with {size / 2**30:.2f} GiB of external weights "
          f"(median of {args.repeat} runs, fresh process each)\n")
    print(f"| {'tool':<24} | {'wall s':>8} | {'peak RSS MiB':>12} | {'vs distopt':>10} |")
    print(f"|{'-' * 26}|{'-' * 10}|{'-' * 14}|{'-' * 12}|")
    for name, t, rss in results:
        print(f"| {name:<24} | {t:8.3f} | {rss:12.1f} | {t / base:9.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
