#!/usr/bin/env python3
"""Distributed inference of a GPT-style model: measured vs predicted.

For 1, 2 and 4 ranks of this machine (`local:N`) and each plan kind (data
parallel, tensor parallel, both), the model is compiled with `distopt compile
--cluster local:N --dp D --tp T`, run with `distopt run --repeat R`
(median time per step from rank 0), and planned with `distopt plan --mode
infer --json` under the same forced degrees. The table prints the measured
and predicted step times and throughputs side by side, so the cost model's
error on `local:N` is visible. Peer: the same model compiled for one process.

Usage: bench/distributed_inference.py [--distopt build/bin/distopt] [--repeat 20]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python", "testmodels"))
import gen_models  # noqa: E402

BATCH, SEQ = 16, 64
GPT = dict(vocab=2048, d=256, n_heads=4, n_layers=4, block=SEQ)
# (dp, tp, pp); pipelines run 4 micro-batches
PLANS = [(1, 1, 1), (2, 1, 1), (1, 2, 1), (1, 1, 2), (4, 1, 1), (1, 4, 1), (2, 2, 1),
         (2, 1, 2), (1, 1, 4)]


def env():
    e = dict(os.environ)
    e.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    e.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    return e


def median_ms(stderr):
    m = re.search(r"median ([0-9.]+) (ms|us)", stderr)
    if not m:
        raise SystemExit("no timing in:\n" + stderr)
    v = float(m.group(1))
    return v / 1000 if m.group(2) == "us" else v


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--distopt", default=os.path.join(ROOT, "build", "bin", "distopt"))
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    d = args.distopt
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "gpt.onnx")
        with open(model, "wb") as f:
            f.write(gen_models.build_gpt(**GPT).SerializeToString())
        ids = os.path.join(tmp, "ids.npy")
        np.save(ids, np.random.default_rng(0).integers(0, GPT["vocab"], (BATCH, SEQ)).astype(np.int64))
        print(f"GPT-style decoder: vocab {GPT['vocab']}, d {GPT['d']}, {GPT['n_heads']} heads, "
              f"{GPT['n_layers']} layers, seq {SEQ}, batch {BATCH}; {os.cpu_count()} cores, "
              f"step time from {args.repeat} extra runs\n")
        hdr = (f"{'plan':<14} {'ranks':>5} {'measured ms':>12} {'predicted ms':>13} "
               f"{'samples/s':>10} {'pred samples/s':>15} {'pred/meas':>10}")
        print(hdr)
        print("-" * len(hdr))
        for dp, tp, pp in PLANS:
            n = dp * tp * pp
            mb = 4 if pp > 1 else 1
            bundle = os.path.join(tmp, f"g{dp}x{tp}.dx")
            cmd = [d, "compile", model, "--dim", f"batch={BATCH}", "-o", bundle]
            if n > 1:
                cmd += ["--cluster", f"local:{n}", "--dp", str(dp), "--tp", str(tp), "--pp",
                        str(pp), "--microbatches", str(mb)]
            subprocess.run(cmd, check=True, capture_output=True, env=env())
            def wall(repeat):
                start = time.perf_counter()
                r = subprocess.run([d, "run", bundle, f"--input=input_ids={ids}", "--repeat",
                                    str(repeat), "--output-dir", os.path.join(tmp, "out")],
                                   capture_output=True, text=True, env=env())
                if r.returncode:
                    raise SystemExit(r.stderr)
                return time.perf_counter() - start
            wall(2)  # warm the page cache
            ms = (wall(2 * args.repeat) - wall(args.repeat)) / args.repeat * 1000
            plan = subprocess.run([d, "plan", model, "--cluster", f"local:{n}", "--mode", "infer",
                                   "--global-batch", str(BATCH), "--dp", str(dp), "--tp", str(tp),
                                   "--pp", str(pp), "--microbatches", str(mb), "--json", "-"],
                                  check=True, capture_output=True, text=True, env=env())
            pred = json.loads(plan.stdout)["predicted_step_time_s"] * 1000
            parts = [f"{k} {v}" for k, v in (("dp", dp), ("tp", tp), ("pp", pp)) if v > 1]
            label = " x ".join(parts) if parts else "single"
            print(f"{label:<14} {n:>5} {ms:>12.2f} {pred:>13.2f} {BATCH / ms * 1000:>10.0f} "
                  f"{BATCH / pred * 1000:>15.0f} {pred / ms:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
