"""The model kinds of bench/gpu_inference.py as PyTorch modules.

Plain torch (and torchvision's ResNet-18), so the same code builds the
model that is exported to ONNX (torch 1.13, where distopt compiles) and the
PyTorch peer timed on the GPU machine (torch 2.x there).
"""
from __future__ import annotations

import math

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, sizes=(1024, 4096, 4096, 1024)):
        super().__init__()
        layers = []
        for i in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
            if i + 2 < len(sizes):
                layers.append(nn.GELU())
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class GPTBlock(nn.Module):
    """GPT-2's block: pre-norm, fused QKV, causal attention, GELU MLP."""

    def __init__(self, d, heads, seq):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.reshape(b, t, h, d // h).transpose(1, 2)
        k = k.reshape(b, t, h, d // h).transpose(1, 2)
        v = v.reshape(b, t, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(nn.functional.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=8192, d=768, heads=12, layers=6, seq=128):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(GPTBlock(d, heads, seq) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        x = self.wte(ids) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def build(name: str):
    """(module, example input, description) at the benchmark's size."""
    torch.manual_seed(0)
    if name == "mlp":
        return MLP(), torch.randn(128, 1024), "MLP 1024-4096-4096-1024, batch 128"
    if name == "cnn":
        import torchvision
        return (torchvision.models.resnet18(num_classes=1000), torch.randn(8, 3, 224, 224),
                "torchvision ResNet-18, 224x224, batch 8")
    if name == "transformer_encoder":
        layer = nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0, batch_first=True)
        return (nn.TransformerEncoder(layer, 6, enable_nested_tensor=False),
                torch.randn(8, 128, 512),
                "nn.TransformerEncoder d512 h8 ff2048 x6, seq 128, batch 8")
    if name == "gpt":
        return (GPT(), torch.randint(0, 8192, (8, 128)),
                "GPT-2-style d768 h12 x6, vocab 8192, seq 128, batch 8")
    if name == "dcgan":
        # DCGAN's generator (Radford et al.): transposed convolutions, which
        # distopt runs as cuDNN's backward-data convolutions.
        layers, channels = [], [100, 512, 256, 128, 64, 3]
        for i in range(5):
            layers.append(nn.ConvTranspose2d(channels[i], channels[i + 1], 4,
                                             1 if i == 0 else 2, 0 if i == 0 else 1,
                                             bias=False))
            layers += [nn.BatchNorm2d(channels[i + 1]), nn.ReLU()] if i < 4 else [nn.Tanh()]
        return (nn.Sequential(*layers), torch.randn(64, 100, 1, 1),
                "DCGAN generator (5 ConvTranspose2d + BN + ReLU), 100 -> 3x64x64, batch 64")
    raise ValueError(name)


NAMES = ["mlp", "cnn", "transformer_encoder", "gpt", "dcgan"]


def train_step(model: nn.Module, opt, x, y):
    """One optimizer step of `model` on a batch: the cross-entropy of its
    logits (the last axis) against the labels `y`. Returns the loss."""
    opt.zero_grad()
    logits = model(x)
    loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss.backward()
    opt.step()
    return loss
