"""Every model kind x every plan kind of distributed training, against one
process (scripts/training-sweep; a seeded sample runs in CI through
test_pipeline_training.py).

The models are the torch.optim references of gen_grad_models.py (exported
by torch.onnx.export): the MLP, the CNN, nn.TransformerEncoder and the
GPT-style decoder. Each plan trains 20 steps on the reference batches with
global-norm clipping; its losses and final weights must equal one process's
within 1e-5 (relative). A plan the planner cannot make for a model (a
degree that does not divide it) is reported, not failed."""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli import DISTOPT, ROOT, run  # noqa: E402
from training import batches_as_data, compile_step, rel_err, train, train_flags  # noqa: E402

MODELS = {"mlp": ("train", "adamw"), "cnn": ("train_cnn", "cnn_adamw"),
          "encoder": ("train_encoder", "encoder_adamw"), "gpt": ("train_gpt", "gpt_adamw")}

PLANS = {"dp 2": ["--dp", "2"], "dp 4": ["--dp", "4"], "tp 2": ["--tp", "2"],
         "tp 4": ["--tp", "4"], "pp 2 1f1b": ["--pp", "2", "--schedule", "1f1b"],
         "pp 2 gpipe": ["--pp", "2", "--schedule", "gpipe"],
         "dp 2 x tp 2": ["--dp", "2", "--tp", "2"],
         "dp 2 x pp 2": ["--dp", "2", "--pp", "2"],
         "tp 2 x pp 2": ["--tp", "2", "--pp", "2"]}


def variants(plan: str) -> list[tuple[str, list[str]]]:
    """The plan as it is, with recomputation (pipelines) and with ZeRO-1
    (data parallelism)."""
    out = [("", [])]
    if "pp" in plan:
        out.append(("recompute full", ["--recompute", "full"]))
    if "dp" in plan:
        out.append(("ZeRO-1", ["--zero", "1"]))
    return out


def all_runs() -> list[tuple[str, str, str]]:
    return [(m, p, v) for m in MODELS for p in PLANS for v, _ in variants(p)]


def ranks_of(flags: list[str]) -> int:
    n = 1
    for k in ("--dp", "--tp", "--pp"):
        if k in flags:
            n *= int(flags[flags.index(k) + 1])
    return n


def microbatches(model_dir: Path, flags: list[str]) -> list[str]:
    """Pipelined plans run 2 micro-batches (every reference batch is even)."""
    return ["--microbatches", "2"] if "--pp" in flags else []


class Sweep:
    def __init__(self, models: Path, tmp: Path, target: str = "cpu"):
        """`target`: what the plans are compiled for (cpu, or cuda-emu: the GPU
        kernels run on the CPU); the one-process baseline is the CPU's."""
        self.models, self.tmp, self.target = models, tmp, target
        self.baselines: dict[str, tuple[list[dict], Path]] = {}

    def data(self, model: str) -> tuple[Path, dict, list[str]]:
        d = self.models / MODELS[model][0]
        meta = json.loads((d / "meta.json").read_text())[MODELS[model][1]]
        work = self.tmp / model
        work.mkdir(exist_ok=True)
        return d, meta, [*batches_as_data(d, work), "--steps", "20", "--no-shuffle",
                         *train_flags(meta["config"]), "--clip-grad-norm", "0.5"]

    def baseline(self, model: str):
        if model not in self.baselines:
            d, meta, data = self.data(model)
            bundle = compile_step(d / "model.onnx", self.tmp / model / "one.dx",
                                  meta["config"]["kind"])
            self.baselines[model] = train(bundle, 1, *data)
        return self.baselines[model]

    def check(self, model: str, plan: str, variant: str) -> tuple[str, float]:
        """("ok" | "differs" | "no plan: ...", worst relative error)."""
        d, meta, data = self.data(model)
        flags = PLANS[plan] + dict(variants(plan))[variant]
        flags = flags + microbatches(d, flags)
        n = ranks_of(flags)
        tag = f"{plan} {variant}".replace(" ", "_")
        bundle = self.tmp / model / f"{tag}.dx"
        p = run(DISTOPT, "compile", d / "model.onnx", "--loss", "cross-entropy:logits",
                "--optimizer", meta["config"]["kind"], "--cluster", f"local:{n}", *flags,
                "--target", self.target, "-o", bundle, check=False)
        if p.returncode:
            return "no plan: " + p.stderr.strip().splitlines()[-1].split("error: ")[-1], 0.0
        steps, saved = train(bundle, n, *data)
        base_steps, base_w = self.baseline(model)
        worst = max(abs(a["loss"] - b["loss"]) / abs(b["loss"])
                    for a, b in zip(steps, base_steps))
        for f in base_w.iterdir():
            worst = max(worst, rel_err(np.load(saved / f.name), np.load(f)))
        return ("ok" if worst <= 1e-5 else "differs"), worst


def generate_models(out: Path) -> None:
    proc = subprocess.run(["/usr/bin/python3", str(ROOT / "python/testmodels/gen_grad_models.py"),
                           "--out", str(out)], capture_output=True, text=True)
    if proc.returncode:
        sys.exit("generating the reference models failed:\n" + proc.stderr[-2000:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", type=int, default=0, help="run N random runs only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", default="cpu", choices=["cpu", "cuda-emu"],
                    help="compile the plans for this target (cuda-emu: the GPU kernels, "
                         "emulated); the baseline is one CPU process")
    args = ap.parse_args()
    runs = all_runs()
    if args.sample:
        runs = random.Random(args.seed).sample(runs, args.sample)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="distopt-sweep-") as tmp:
        tmp = Path(tmp)
        generate_models(tmp / "models")
        sweep = Sweep(tmp / "models", tmp, args.target)
        print("| model | plan | variant | result | worst relative error |")
        print("|---|---|---|---|---:|")
        for model, plan, variant in runs:
            result, worst = sweep.check(model, plan, variant)
            failed += result == "differs"
            print(f"| {model} | {plan} | {variant or '-'} | {result} | {worst:.1e} |",
                  flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("DISTOPT_BUILD_DIR", str(ROOT / "build"))
    sys.exit(main())
