#!/usr/bin/env python3
"""Benchmark: compile time of long unrolled programs, distopt against an
earlier distopt, same run.

Recurrences that ONNX writes as one op (LSTM, GRU, LinearAttention) or that
exporters unroll over the sequence become hundreds of small ops, and one
wide Concat gathers their per-step results. Each case is compiled by the
distopt under test and by a baseline build (`--baseline`, e.g. a git
worktree of an earlier commit built with scripts/build), in alternation,
the median of `--repeat` runs each; wall time and peak memory of `distopt
compile` (to a runnable bundle: code generation and linking included):

- concat-T: T slices of the input, each through a sigmoid, concatenated
  (what a per-step output gather looks like);
- linear-attention-T: LinearAttention (gated_delta, 8 heads of 64) over T
  tokens, unrolled token by token (an opset-27 op: the baseline may not
  import it, "-" in the table);
- torch-delta-rule-T: the same recurrence written as a Python loop over
  the tokens in a PyTorch module (8 heads of 32), unrolled by
  torch.onnx.export's tracing;
- lstm-T: torch's 2-layer nn.LSTM (64 -> 128) over T steps, exported by
  torch.onnx.export (needs Debian's python3-torch; skipped without it);
- recurrent-dp2tp2: gen_grad_models.py's bidirectional LSTM + GRU training
  step (SGD) planned for dp 2 x tp 2, whose segments are ILPs.

Usage: .venv/bin/python bench/compile_unrolled.py --baseline OLD/build/bin/distopt
           [--build build] [--repeat 3] [--only NAME]
(the project's virtualenv for onnx; the torch exports run under
/usr/bin/python3.)
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def timed(cmd, tmp: Path):
    """Wall seconds and peak RSS (GiB) of a child process (/usr/bin/time);
    raises on failure."""
    report = tmp / "time.txt"
    proc = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", str(report),
                           *[str(c) for c in cmd]], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed:\n{proc.stderr[-2000:]}")
    wall, kib = report.read_text().split()[-2:]
    return float(wall), int(kib) / 2**20


def onnx_modules():
    import onnx
    from onnx import TensorProto as TP, helper, numpy_helper
    return onnx, TP, helper, numpy_helper


def concat_model(path: Path, steps: int):
    onnx, TP, helper, numpy_helper = onnx_modules()
    nodes, outs = [], []
    inits = [numpy_helper.from_array(np.array([1], np.int64), "axis")]
    for t in range(steps):
        inits += [numpy_helper.from_array(np.array([t], np.int64), f"s{t}"),
                  numpy_helper.from_array(np.array([t + 1], np.int64), f"e{t}")]
        nodes += [helper.make_node("Slice", ["x", f"s{t}", f"e{t}", "axis"], [f"x{t}"]),
                  helper.make_node("Sigmoid", [f"x{t}"], [f"y{t}"])]
        outs.append(f"y{t}")
    nodes.append(helper.make_node("Concat", outs, ["y"], axis=1))
    g = helper.make_graph(nodes, "concat",
                          [helper.make_tensor_value_info("x", TP.FLOAT, [1, steps, 512])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return [path]


def linear_attention_model(path: Path, steps: int):
    onnx, TP, helper, _ = onnx_modules()
    heads, size = 8, 64
    node = helper.make_node("LinearAttention", ["q", "k", "v", "", "g", "b"], ["y", "s"],
                            q_num_heads=heads, kv_num_heads=heads)
    ins = [helper.make_tensor_value_info(n, TP.FLOAT, [1, steps, heads * size])
           for n in ("q", "k", "v")]
    ins += [helper.make_tensor_value_info(n, TP.FLOAT, [1, steps, heads]) for n in ("g", "b")]
    g = helper.make_graph([node], "linear_attention", ins,
                          [helper.make_tensor_value_info("y", TP.FLOAT, None),
                           helper.make_tensor_value_info("s", TP.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 27)])
    m.ir_version = 10
    onnx.save(m, str(path))
    return [path]


LSTM_EXPORT = """
import sys, torch
steps = int(sys.argv[2])
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(64, 128, num_layers=2, batch_first=True)
        self.out = torch.nn.Linear(128, 10)
    def forward(self, x):
        y, _ = self.lstm(x)
        return self.out(y[:, -1])
torch.manual_seed(0)
torch.onnx.export(M(), torch.randn(4, steps, 64), sys.argv[1], input_names=["x"],
                  output_names=["logits"], opset_version=17)
"""


DELTA_EXPORT = """
import sys, torch
steps = int(sys.argv[2])
class DeltaRule(torch.nn.Module):
    def forward(self, q, k, v, g, b):
        n, t, h, d = q.shape
        s = torch.zeros(n, h, d, d)
        outs = []
        for i in range(t):
            s = s * torch.exp(g[:, i])[..., None, None]
            k_i = k[:, i]
            read = torch.matmul(k_i.unsqueeze(2), s).squeeze(2)
            v_i = b[:, i][..., None] * (v[:, i] - read)
            s = s + k_i[..., :, None] * v_i[..., None, :]
            outs.append(torch.matmul(q[:, i].unsqueeze(2), s).squeeze(2))
        return torch.stack(outs, 1)
x = torch.randn(1, steps, 8, 32)
gate = torch.randn(1, steps, 8)
torch.onnx.export(DeltaRule(), (x, x, x, gate, gate), sys.argv[1],
                  input_names=["q", "k", "v", "g", "b"], opset_version=17)
"""


def torch_export(script: str):
    """A case whose model `script` exports under Debian's python3-torch
    (arguments: the path, the steps); skipped (None) where it cannot."""
    def make(path: Path, steps: int):
        proc = subprocess.run(["/usr/bin/python3", "-c", script, str(path), str(steps)],
                              capture_output=True, text=True)
        return [path] if proc.returncode == 0 else None
    return make


def recurrent_training(path: Path, _steps: int):
    out = path.parent / "grad_models"
    proc = subprocess.run(["/usr/bin/python3", str(ROOT / "python/testmodels/gen_grad_models.py"),
                           "--out", str(out)], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    return [out / "recurrent_cross_entropy" / "model_dyn.onnx", "--dim", "batch=4", "--loss",
            "cross-entropy:logits", "--optimizer", "sgd", "--cluster", "local:4", "--dp", "2",
            "--tp", "2"]


CASES = [("concat-256", concat_model, 256), ("linear-attention-64", linear_attention_model, 64),
         ("linear-attention-256", linear_attention_model, 256),
         ("torch-delta-rule-64", torch_export(DELTA_EXPORT), 64),
         ("torch-delta-rule-256", torch_export(DELTA_EXPORT), 256),
         ("lstm-64", torch_export(LSTM_EXPORT), 64),
         ("lstm-256", torch_export(LSTM_EXPORT), 256), ("recurrent-dp2tp2", recurrent_training, 0)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", required=True, help="an earlier build's bin/distopt")
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    new = Path(args.build) / "bin" / "distopt"
    old = Path(args.baseline)
    for b in (new, old):
        if not b.exists():
            sys.exit(f"no distopt at {b}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for name, make, steps in CASES:
            if args.only and args.only not in name:
                continue
            spec = make(tmp / f"{name}.onnx", steps)
            if spec is None:
                print(f"{name}: skipped (python3-torch not available)", file=sys.stderr)
                continue
            times = {"old": [], "new": []}
            peaks = {"old": 0.0, "new": 0.0}
            for _ in range(args.repeat):
                for tag, exe in (("old", old), ("new", new)):
                    if tag == "old" and times["old"] is None:
                        continue
                    try:
                        wall, peak = timed([exe, "compile", *spec, "-o",
                                            tmp / f"{name}-{tag}.dx"], tmp)
                    except RuntimeError:
                        if tag == "new":
                            raise
                        times["old"] = None  # the baseline does not compile it
                        continue
                    times[tag].append(wall)
                    peaks[tag] = max(peaks[tag], peak)
            o = statistics.median(times["old"]) if times["old"] else None
            n = statistics.median(times["new"])
            rows.append((name, o, n, peaks["old"], peaks["new"]))
            print(f"{name}: {o if o is None else round(o, 1)} s -> {n:.1f} s", file=sys.stderr)
    print(f"\ndistopt compile, median of {args.repeat} (baseline {old})\n")
    print("| program | baseline s | distopt s | speed-up | baseline GiB | distopt GiB |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, o, n, po, pn in rows:
        if o is None:
            print(f"| {name} | - | {n:.1f} | - | - | {pn:.2f} |")
        else:
            print(f"| {name} | {o:.1f} | {n:.1f} | {o / n:.1f}x | {po:.2f} | {pn:.2f} |")


if __name__ == "__main__":
    main()
