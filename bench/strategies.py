#!/usr/bin/env python3
"""Benchmark: gradient-synchronisation strategies on a real data set.

Runs in the project's virtualenv (.venv/bin/python: numpy, onnx,
scikit-learn). Trains the same MLP (64 -> 128 -> 10, ReLU; an ONNX graph
written here with onnx.helper, weights seeded) on scikit-learn's
`load_digits` (1797 hand-written 8x8 digits; 1437 to train, 360 held out,
split by a seeded permutation) with SGD (momentum 0.9), a global batch of
40 per step, on `local:5` CPU ranks, under each strategy:

  all-reduce     4 data-parallel replicas (ring all-reduce; 4 ranks)
  sync PS        1 parameter server + 4 workers (--sync ps)
  backup         1 server + 4 workers, 1 a backup: each step applies the
                 first 3 gradients (--backup-workers 1)
  async          1 server + 4 asynchronous workers (--sync async)
  async + cure   --stale-lr, --drop-stale 2, --sync-warmup 50,
                 --delay-compensation 0.5, --max-staleness 1

each without and with a straggler (DISTOPT_STRAGGLER: the last worker sleeps
20 ms before sending each gradient). It evaluates the held-out set every
10 steps (train --eval-data) and reports, per run: the steps and seconds to
reach the target test accuracy, the final test accuracy, samples/s, and for
the servers the gradients dropped and the mean staleness -- a Markdown
table on stdout. With --plots DIR it writes the loss against step and
against wall-clock time per strategy as SVG (no plotting library needed).

Timings on a 2-core machine with 5 ranks oversubscribed are noisy; the
shape of the results (who waits for whom) is what the table shows.

Usage: bench/strategies.py [--steps 300] [--target 0.9] [--plots DIR]
                           [--build build] [--only NAME,...]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
BATCH = 40
STRAGGLER_S = 0.02

STRATEGIES = [
    # name, ranks, compile flags, train flags
    ("all-reduce", 4, ["--cluster", "local:4", "--dp", "4"], []),
    ("sync PS", 5, ["--cluster", "local:5", "--sync", "ps", "--servers", "1"], []),
    ("backup (1 of 4)", 5, ["--cluster", "local:5", "--sync", "ps", "--servers", "1",
                            "--backup-workers", "1"], []),
    ("async", 5, ["--cluster", "local:5", "--sync", "async", "--servers", "1"], []),
    ("async + stale-lr", 5, ["--cluster", "local:5", "--sync", "async", "--servers", "1"],
     ["--stale-lr"]),
    ("async + drop-stale 2", 5, ["--cluster", "local:5", "--sync", "async", "--servers", "1"],
     ["--drop-stale", "2"]),
    ("async + sync-warmup 50", 5, ["--cluster", "local:5", "--sync", "async", "--servers",
                                   "1"], ["--sync-warmup", "50"]),
    ("async + DC-ASGD 0.5", 5, ["--cluster", "local:5", "--sync", "async", "--servers", "1"],
     ["--delay-compensation", "0.5"]),
    ("async + max-staleness 1", 5, ["--cluster", "local:5", "--sync", "async", "--servers",
                                    "1"], ["--max-staleness", "1"]),
]


def digits(out: Path) -> dict:
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    perm = np.random.default_rng(0).permutation(len(x))
    test, train = perm[:360], perm[360:]
    files = {}
    for name, rows in (("train", train), ("test", test)):
        np.save(out / f"{name}_x.npy", x[rows])
        np.save(out / f"{name}_y.npy", y[rows])
        files[name] = (out / f"{name}_x.npy", out / f"{name}_y.npy")
    return files


def mlp(path: Path, hidden: int = 128):
    rng = np.random.default_rng(1)

    def init(fan_in, shape):
        bound = 1 / np.sqrt(fan_in)
        return rng.uniform(-bound, bound, shape).astype(np.float32)

    inits = [numpy_helper.from_array(init(64, (hidden, 64)), "fc1.weight"),
             numpy_helper.from_array(init(64, (hidden,)), "fc1.bias"),
             numpy_helper.from_array(init(hidden, (10, hidden)), "fc2.weight"),
             numpy_helper.from_array(init(hidden, (10,)), "fc2.bias")]
    nodes = [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], transB=1,
                              name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["logits"], transB=1,
                              name="fc2")]
    g = helper.make_graph(nodes, "digits_mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, 64])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                                         [BATCH, 10])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def run_strategy(distopt: Path, model: Path, files, work: Path, name, ranks, cflags, tflags,
                 steps, straggler: bool):
    tag = name.replace(" ", "_").replace("+", "").replace("(", "").replace(")", "")
    bundle = work / f"{tag}.dx"
    if not bundle.exists():
        subprocess.run([distopt, "compile", model, "--loss", "cross-entropy:logits",
                        "--optimizer", "sgd", *cflags, "-o", bundle], check=True,
                       capture_output=True)
    log = work / f"{tag}{'-straggler' if straggler else ''}.jsonl"
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if straggler:
        env["DISTOPT_STRAGGLER"] = f"{ranks - 1}:{STRAGGLER_S}"
    tx, ty = files["train"]
    ex, ey = files["test"]
    p = subprocess.run([distopt, "run", "-n", str(ranks), bundle, "train",
                        "--data", f"x={tx}", "--data", f"labels={ty}",
                        "--eval-data", f"x={ex}", "--eval-data", f"labels={ey}",
                        "--eval-every", "10", "--steps", str(steps), "--lr", "0.05",
                        "--momentum", "0.9", "--shuffle", "3", "--log", log, *tflags],
                       capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise SystemExit(f"{name}: {p.stderr[-2000:]}")
    return [json.loads(line) for line in log.read_text().splitlines()]


def summarize(lines, target):
    steps = [s for s in lines if "step" in s]
    totals = next((s for s in lines if s.get("summary")), {})
    evals = [s for s in steps if "eval_accuracy" in s]
    reached = next((s for s in evals if s["eval_accuracy"] >= target), None)
    last = steps[-1]
    return {
        "steps_to_target": reached["step"] if reached else None,
        "seconds_to_target": reached["elapsed_s"] if reached else None,
        "final_accuracy": evals[-1]["eval_accuracy"] if evals else float("nan"),
        "final_loss": float(np.mean([s["loss"] for s in steps[-10:]])),
        "loss_noise": float(np.std(np.diff([s["loss"] for s in steps]))),
        "samples_per_s": last["step"] * BATCH / last["elapsed_s"],
        "dropped": totals.get("dropped", 0),
        "staleness": totals.get("staleness_mean", 0.0),
        "steps": steps,
    }


def svg_plot(path: Path, series: dict, xkey: str, title: str, xlabel: str):
    """Loss curves as a self-contained SVG: one polyline per series."""
    w, h, m = 720, 420, 60
    xs = [s[xkey] for pts in series.values() for s in pts]
    ys = [s["loss"] for pts in series.values() for s in pts]
    x0, x1 = 0.0, max(xs)
    y0, y1 = 0.0, min(max(ys), 3.0)
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
              "#7f7f7f", "#bcbd22", "#17becf"]

    def px(x, y):
        return (m + (x - x0) / (x1 - x0 or 1) * (w - 2 * m),
                h - m - (min(y, y1) - y0) / (y1 - y0 or 1) * (h - 2 * m))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{m}" y1="{h - m}" x2="{w - m}" y2="{h - m}" stroke="black"/>',
           f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h - m}" stroke="black"/>',
           f'<text x="{w / 2}" y="{h - 20}" text-anchor="middle">{xlabel}</text>',
           f'<text x="15" y="{h / 2}" transform="rotate(-90 15 {h / 2})" '
           f'text-anchor="middle">training loss</text>']
    for k in range(5):
        xv, yv = x0 + (x1 - x0) * k / 4, y0 + (y1 - y0) * k / 4
        px_, _ = px(xv, y0)
        _, py_ = px(x0, yv)
        out.append(f'<text x="{px_}" y="{h - m + 15}" text-anchor="middle">{xv:.3g}</text>')
        out.append(f'<text x="{m - 5}" y="{py_ + 4}" text-anchor="end">{yv:.2g}</text>')
    for i, (name, pts) in enumerate(series.items()):
        c = colors[i % len(colors)]
        path_pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in (px(s[xkey], s["loss"]) for s in pts))
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.2" points="{path_pts}"/>')
        out.append(f'<text x="{w - m - 150}" y="{m + 14 * i}" fill="{c}">{name}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--plots", type=Path)
    ap.add_argument("--build", type=Path, default=ROOT / "build")
    ap.add_argument("--only", default="", help="comma-separated strategy names")
    args = ap.parse_args()
    distopt = args.build / "bin" / "distopt"
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        files = digits(work)
        model = work / "digits_mlp.onnx"
        mlp(model)
        results = {}
        for straggler in (False, True):
            for name, ranks, cflags, tflags in STRATEGIES:
                if only and name not in only:
                    continue
                lines = run_strategy(distopt, model, files, work, name, ranks, cflags, tflags,
                                     args.steps, straggler)
                results[(name, straggler)] = summarize(lines, args.target)
                print(f"  {name}{' + straggler' if straggler else ''}: done", file=sys.stderr)
    print(f"digits MLP, {args.steps} steps of {BATCH} samples, SGD lr 0.05 momentum 0.9, "
          f"target test accuracy {args.target:.0%}; straggler: the last worker +"
          f"{STRAGGLER_S * 1000:.0f} ms per gradient\n")
    print("| strategy | straggler | steps to target | s to target | final test acc | "
          "samples/s | loss noise | dropped | mean staleness |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (name, straggler), r in results.items():
        def opt(v, fmt):
            return "not reached" if v is None else fmt.format(v)
        print(f"| {name} | {'yes' if straggler else 'no'} | "
              f"{opt(r['steps_to_target'], '{}')} | {opt(r['seconds_to_target'], '{:.2f}')} | "
              f"{r['final_accuracy']:.3f} | {r['samples_per_s']:.0f} | {r['loss_noise']:.3f} | "
              f"{r['dropped']} | {r['staleness']:.2f} |")
    if args.plots:
        args.plots.mkdir(parents=True, exist_ok=True)
        for straggler in (False, True):
            series = {n: r["steps"] for (n, s), r in results.items() if s == straggler}
            suffix = "-straggler" if straggler else ""
            what = " (straggler)" if straggler else ""
            svg_plot(args.plots / f"loss-vs-step{suffix}.svg", series, "step",
                     f"digits MLP: loss per step{what}", "step")
            svg_plot(args.plots / f"loss-vs-time{suffix}.svg", series, "elapsed_s",
                     f"digits MLP: loss against wall-clock{what}", "seconds")


if __name__ == "__main__":
    main()
