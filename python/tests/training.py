"""Helpers of the training tests: the train-mode flags of a torch.optim
reference run, and the data files of its batches."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def train_flags(cfg):
    flags = ["--lr", cfg["lr"], "--weight-decay", cfg["weight_decay"]]
    if cfg["kind"] == "sgd":
        flags += ["--momentum", cfg["momentum"]]
    else:
        flags += ["--betas", f"{cfg['betas'][0]},{cfg['betas'][1]}", "--eps", cfg["eps"]]
    if cfg.get("clip_norm"):
        flags += ["--clip-grad-norm", cfg["clip_norm"]]
    if cfg.get("schedule"):
        flags += ["--lr-schedule", cfg["schedule"], "--warmup-steps", cfg["warmup"]]
    return [str(f) for f in flags]


def batches_as_data(d: Path, out: Path) -> list[str]:
    """The batches a reference run trained on (xs.npy, ys.npy: [steps,
    batch, ...]) as one data file per input, in the order PyTorch took them:
    the --data flags for x and labels."""
    xs, ys = np.load(d / "xs.npy"), np.load(d / "ys.npy")
    np.save(out / "x.npy", xs.reshape((-1,) + xs.shape[2:]))
    np.save(out / "y.npy", ys.reshape((-1,) + ys.shape[2:]))
    return ["--data", f"x={out / 'x.npy'}", "--data", f"labels={out / 'y.npy'}"]


def learnable_data(out: Path, samples: int, seed: int) -> list[str]:
    """A learnable task for the 16-feature MLP of the torch.optim runs (the
    label is the argmax of the first 8 features), as x.npy and y.npy in
    `out`: the --data flags of both."""
    x = np.random.default_rng(seed).standard_normal((samples, 16)).astype(np.float32)
    np.save(out / "x.npy", x)
    np.save(out / "y.npy", x[:, :8].argmax(axis=1).astype(np.int64))
    return ["--data", f"x={out / 'x.npy'}", "--data", f"labels={out / 'y.npy'}"]

