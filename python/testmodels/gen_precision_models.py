#!/usr/bin/env python3
"""Models and PyTorch's mixed-precision outputs for the precision tests.

Runs with Debian's python3-torch (`/usr/bin/python3`, torch 1.13): for each
model writes, into the directory given by --out,
  NAME.onnx       the fp32 model (torch.onnx.export),
  NAME.in.npy     its input,
  NAME.fp32.npy   its eager fp32 output,
  NAME.bf16.npy   its output under torch.autocast("cpu", torch.bfloat16)
                  (PyTorch's CPU mixed precision), as float32.
The four kinds of model distopt's benchmarks use: an MLP, a CNN with batch
norm, torchvision's ResNet-18 and a GPT-style decoder (pre-norm blocks,
causal attention written as PyTorch users write it, GELU MLP)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.h = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        s = q @ k.transpose(-2, -1) / (d // self.h) ** 0.5
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        a = torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab=64, d=32, heads=4, layers=2, seq=16):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1])
        return self.head(self.ln(self.blocks(self.wte(ids) + self.wpe(pos))))


def models():
    torch.manual_seed(0)
    yield "mlp", nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.ReLU(),
                               nn.Linear(64, 10)), torch.randn(8, 32)
    cnn = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
    # Batch norm with statistics that are not the identity's.
    with torch.no_grad():
        cnn[1].running_mean.uniform_(-0.5, 0.5)
        cnn[1].running_var.uniform_(0.5, 2.0)
    yield "cnn", cnn, torch.randn(4, 3, 16, 16)
    from torchvision.models import resnet18
    yield "resnet18", resnet18(num_classes=10), torch.randn(2, 3, 32, 32)
    yield "gpt", GPT(), torch.randint(0, 64, (2, 16))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True, type=Path)
    out = ap.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    for name, model, x in models():
        model.eval()
        with torch.no_grad():
            fp32 = model(x)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                bf16 = model(x)
        torch.onnx.export(model, (x,), str(out / f"{name}.onnx"), input_names=["x"],
                          output_names=["y"], opset_version=14)
        np.save(out / f"{name}.in.npy", x.numpy())
        np.save(out / f"{name}.fp32.npy", fp32.numpy())
        np.save(out / f"{name}.bf16.npy", bf16.float().numpy())


if __name__ == "__main__":
    main()
