#!/usr/bin/env python3
"""Models exported by torch.onnx.export with their loss in the graph, and
PyTorch's own loss and gradients for them (python/tests/test_autodiff.py).

Runs with Debian's python3-torch (`/usr/bin/python3`): writes for each model
OUT/<name>/model.onnx, its inputs and the gradient of every parameter
(.npy), and meta.json naming them.
"""
from __future__ import annotations

import argparse
import copy
import json
import os

import numpy as np
import torch
from torch import nn


class WithLoss(nn.Module):
    def __init__(self, model, loss):
        super().__init__()
        self.model = model
        self.loss = loss

    def forward(self, x, t):
        return self.loss(self.model(x), t)


class MeanSquared(nn.Module):
    """MSE written out (torch 1.13 cannot export aten::mse_loss)."""

    def forward(self, y, t):
        return ((y - t) ** 2).mean()


class Attention(nn.Module):
    """Self-attention, a GELU MLP and a mean over the sequence."""

    def __init__(self, d=16, heads=2, classes=3):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.fc = nn.Linear(d, 2 * d)
        self.out = nn.Linear(2 * d, d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.reshape(b, t, h, d // h).transpose(1, 2)
        k = k.reshape(b, t, h, d // h).transpose(1, 2)
        v = v.reshape(b, t, h, d // h).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-2, -1) / (d // h) ** 0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        x = x + self.out(nn.functional.gelu(self.fc(x)))
        return self.head(x.mean(dim=1))


def models():
    torch.manual_seed(0)
    yield ("mlp_cross_entropy",
           WithLoss(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)),
                    nn.CrossEntropyLoss()),
           torch.randn(6, 16), torch.randint(0, 8, (6,)))
    yield ("mlp_mse",
           WithLoss(nn.Sequential(nn.Linear(10, 20), nn.Tanh(), nn.Linear(20, 4)),
                    MeanSquared()),
           torch.randn(5, 10), torch.randn(5, 4))
    yield ("attention_block", WithLoss(Attention(), nn.CrossEntropyLoss()),
           torch.randn(2, 5, 16), torch.randint(0, 3, (2,)))
    yield ("tanh_classifier",
           WithLoss(nn.Sequential(nn.Linear(12, 24), nn.Sigmoid(), nn.Linear(24, 6),
                                  nn.LogSoftmax(dim=1)),
                    nn.NLLLoss()),
           torch.randn(7, 12), torch.randint(0, 6, (7,)))


class TinyLM(nn.Module):
    """Embedding, a linear head: logits over the vocabulary per position."""

    def __init__(self, vocab=20, d=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        return self.head(torch.tanh(self.emb(ids)))


def flattened_cross_entropy(logits, labels):
    return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                       labels.reshape(-1), ignore_index=-100)


# Inference models for `distopt compile --loss KIND:OUTPUT`: (name, model,
# input, labels, the loss PyTorch computes, the --loss flag).
def bare_models():
    torch.manual_seed(1)
    labels = torch.randint(0, 20, (2, 5))
    labels[0, 1] = labels[1, 4] = -100
    yield ("lm_cross_entropy", TinyLM(), torch.randint(0, 20, (2, 5)), labels,
           flattened_cross_entropy, "cross-entropy:logits")
    yield ("regression_mse", nn.Sequential(nn.Linear(10, 20), nn.Tanh(), nn.Linear(20, 4)),
           torch.randn(5, 10), torch.randn(5, 4), lambda y, t: ((y - t) ** 2).mean(),
           "mse:logits")
    # torchvision's MobileNetV2 building blocks (depthwise and grouped
    # convolutions, ReLU6 as Clip, batch norm in training form): a stem and
    # two inverted residuals, the second with its skip connection.
    from torchvision.models.mobilenetv2 import InvertedResidual
    from torchvision.ops.misc import Conv2dNormActivation
    net = nn.Sequential(
        Conv2dNormActivation(3, 16, stride=2, activation_layer=nn.ReLU6),
        InvertedResidual(16, 24, 2, 6), InvertedResidual(24, 24, 1, 6),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(24, 10))
    net.train()
    yield ("mobilenet_blocks", net, torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,)),
           nn.functional.cross_entropy, "cross-entropy:logits")
    # An encoder-decoder of the kind image-to-image models use: strided
    # convolutions down, nn.ConvTranspose2d up (strided with output_padding,
    # grouped and dilated, 1x1), against an image by MSE.
    class Upsampler(nn.Module):
        def __init__(self):
            super().__init__()
            self.down = nn.Conv2d(3, 8, 3, stride=2, padding=1)
            self.up = nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1)
            # output_padding 1 with stride 1 (allowed by the dilation):
            # the input gradient's convolution reaches past the input.
            self.mix = nn.ConvTranspose2d(6, 4, 2, stride=1, padding=1, groups=2,
                                          dilation=2, output_padding=1, bias=False)
            self.out = nn.ConvTranspose2d(4, 3, 1)

        def forward(self, x):
            h = torch.relu(self.up(torch.relu(self.down(x))))
            return self.out(torch.tanh(self.mix(h)))

    torch.manual_seed(2)
    yield ("upsampler_mse", Upsampler(), torch.randn(2, 3, 10, 12), torch.randn(2, 3, 11, 13),
           lambda y, t: ((y - t) ** 2).mean(), "mse:logits")
    # A 1-D CNN of the kind audio and sequence models use (Conv1d, batch norm
    # over N x C x L, max and average pools, a dilated grouped convolution,
    # ConvTranspose1d): distopt runs 1-D windows as 2-D ones of height 1.
    torch.manual_seed(3)
    net1d = nn.Sequential(
        nn.Conv1d(2, 8, 9, stride=2, padding=4), nn.BatchNorm1d(8), nn.ReLU(),
        nn.MaxPool1d(3, stride=2, padding=1),
        nn.Conv1d(8, 16, 5, dilation=2, groups=2, padding=3), nn.Tanh(),
        nn.AvgPool1d(3, stride=2, padding=1, count_include_pad=False),
        nn.ConvTranspose1d(16, 8, 4, stride=2, padding=1, output_padding=1),
        nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(8, 5))
    net1d.train()
    yield ("conv1d_cross_entropy", net1d, torch.randn(4, 2, 50), torch.randint(0, 5, (4,)),
           nn.functional.cross_entropy, "cross-entropy:logits")
    # A 3-D CNN of the kind video and volume models use (Conv3d strided,
    # dilated in depth and grouped, batch norm over N x C x D x H x W, max and
    # average 3-D pools, a strided ConvTranspose3d with output padding):
    # distopt runs a 3-D (transposed) convolution as 2-D ones, one per tap of
    # the kernel's depth, and 3-D pools as reductions of strided slices.
    torch.manual_seed(5)
    net3d = nn.Sequential(
        nn.Conv3d(2, 8, 3, stride=(1, 2, 2), padding=1), nn.BatchNorm3d(8), nn.ReLU(),
        nn.MaxPool3d(2, stride=2, padding=(1, 0, 0)),
        nn.Conv3d(8, 16, 3, dilation=(2, 1, 1), groups=2, padding=(2, 1, 1)), nn.Tanh(),
        nn.AvgPool3d(3, stride=2, padding=1, count_include_pad=False),
        nn.ConvTranspose3d(16, 8, (2, 3, 3), stride=(2, 1, 2), padding=(0, 1, 1),
                           output_padding=(1, 0, 1)), nn.ReLU(),
        nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(8, 5))
    net3d.train()
    yield ("conv3d_cross_entropy", net3d, torch.randn(4, 2, 6, 12, 12),
           torch.randint(0, 5, (4,)), nn.functional.cross_entropy, "cross-entropy:logits")
    # A small U-Net: strided convolutions down, nn.Upsample back up
    # (bilinear, and nearest; ONNX Resize, which distopt writes as products
    # with constant interpolation matrices), a skip connection concatenated.
    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.down1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
            self.down2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
            self.up1 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
            self.mix = nn.Conv2d(24, 8, 3, padding=1)
            self.up2 = nn.Upsample(scale_factor=2, mode="nearest")
            self.out = nn.Conv2d(8, 3, 1)

        def forward(self, x):
            d1 = torch.relu(self.down1(x))
            d2 = torch.relu(self.down2(d1))
            u = torch.relu(self.mix(torch.cat([self.up1(d2), d1], dim=1)))
            return self.out(self.up2(u))

    torch.manual_seed(6)
    yield ("unet_mse", UNet(), torch.randn(2, 3, 16, 20), torch.randn(2, 3, 16, 20),
           lambda y, t: ((y - t) ** 2).mean(), "mse:logits")
    # nn.LSTM (two layers, bidirectional) and nn.GRU (torch's exporter writes
    # linear_before_reset = 1), batch-first: ONNX LSTM and GRU nodes, the
    # exporter's reordering of torch's gates on the weights in the graph.
    class Recurrent(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Linear(5, 8)
            self.lstm = nn.LSTM(8, 12, num_layers=2, batch_first=True, bidirectional=True)
            self.gru = nn.GRU(24, 6, batch_first=True)
            self.head = nn.Linear(6, 4)

        def forward(self, x):
            y, _ = self.lstm(torch.tanh(self.emb(x)))
            _, h = self.gru(y)
            return self.head(h[-1])

    torch.manual_seed(8)
    yield ("recurrent_cross_entropy", Recurrent(), torch.randn(4, 7, 5),
           torch.randint(0, 4, (4,)), nn.functional.cross_entropy, "cross-entropy:logits")
    # torch.topk (TopK), torch.gather at computed indices (each token's four features from its
    # largest one on: GatherElements), scatter_add pooling tokens into
    # buckets (ScatterElements with reduction add, duplicate indices), and
    # the inverse trigonometric functions torch 1.13 exports (asin, acos,
    # atan; not yet the hyperbolic ones).
    class GatherScatter(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(8, 16)
            self.head = nn.Linear(6 * 4 + 3 * 16 + 6 * 3, 5)

        def forward(self, x):
            h = torch.asin(torch.tanh(self.proj(x)) * 0.9)           # [N, 6, 16]
            idx = (h.argmax(dim=-1, keepdim=True) + torch.arange(4)) % 16
            picked = torch.gather(h, 2, idx)                          # [N, 6, 4]
            bucket = (torch.arange(6) % 3).view(1, 6, 1) + torch.zeros_like(h, dtype=torch.long)
            pooled = h.new_zeros(x.shape[0], 3, 16).scatter_add(1, bucket, torch.acos(h * 0.5))
            top = torch.topk(h, 3, dim=-1).values                     # [N, 6, 3]
            z = torch.cat([picked.flatten(1), pooled.flatten(1), top.flatten(1)], 1)
            return self.head(torch.atan(z))

    torch.manual_seed(7)
    yield ("gather_scatter_cross_entropy", GatherScatter(), torch.randn(4, 6, 8),
           torch.randint(0, 5, (4,)), nn.functional.cross_entropy, "cross-entropy:logits")
    # A flow warp, as optical-flow and spatial-transformer models do:
    # F.grid_sample (GridSample) of features at a base grid moved by a
    # predicted flow -- bilinear with reflection padding, and bicubic with
    # border padding at points beyond the edges -- and torch.prod
    # (ReduceProd).
    class Warp(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Conv2d(3, 4, 3, padding=1)
            self.flow = nn.Conv2d(3, 2, 3, padding=1)
            self.head = nn.Linear(4 * 6 * 6 + 4 * 5 * 5 + 2, 5)

        def forward(self, x):
            f = nn.functional
            h = torch.tanh(self.features(x))                          # [N, 4, 8, 8]
            ys, xs = torch.meshgrid(torch.linspace(-1, 1, 6), torch.linspace(-1, 1, 6),
                                    indexing="ij")
            base = torch.stack([xs, ys], -1)                          # [6, 6, 2]
            flow = torch.tanh(self.flow(x))[:, :, :6, :6].permute(0, 2, 3, 1)
            a = f.grid_sample(h, base + 0.3 * flow, mode="bilinear",
                              padding_mode="reflection", align_corners=False)
            b = f.grid_sample(h, base[:5, :5] * 1.2 + 0.2 * flow[:, :5, :5], mode="bicubic",
                              padding_mode="border", align_corners=True)
            p = torch.prod(torch.sigmoid(h).flatten(2)[:, :2, :6] + 0.5, dim=-1)
            return self.head(torch.cat([a.flatten(1), b.flatten(1), p], 1))

    torch.manual_seed(9)
    yield ("grid_sample_cross_entropy", Warp(), torch.randn(4, 3, 8, 8),
           torch.randint(0, 5, (4,)), nn.functional.cross_entropy, "cross-entropy:logits")
    # torchvision's ResNet-18 (batch norm in training form; 64x64 so that its
    # last stage's statistics cover 32 values, not a handful), small images:
    # residual blocks, where a convolution's input is also summed into by
    # the skip connection's gradient. In float64: in float32 its gradients
    # are ill-conditioned at this input -- scaling the input by 1 + 1e-6
    # noise moves them by 10% (a ReLU or max-pool kink crossed; its last
    # stage sees 2x2 pixels, so one element weighs much), so a float32
    # gradient can only match a reference by luck of rounding.
    import torchvision
    torch.manual_seed(4)
    resnet = torchvision.models.resnet18(num_classes=10)
    resnet.train()
    yield ("resnet18_cross_entropy", resnet.double(), torch.randn(8, 3, 64, 64).double(),
           torch.randint(0, 10, (8,)), nn.functional.cross_entropy, "cross-entropy:logits")


# Bare models also exported with a symbolic batch (model_dyn.onnx).
DYNAMIC_BATCH_EXPORTS = {"gather_scatter_cross_entropy", "recurrent_cross_entropy"}


# Training runs: 20 steps of each optimizer on the same data, from the same
# initial weights (the exported graph's): per-step losses, final weights.
TRAIN_RUNS = {
    "sgd_nesterov": dict(kind="sgd", lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    "sgd_clipped": dict(kind="sgd", lr=0.2, momentum=0.5, weight_decay=0.0, clip_norm=0.5),
    "adam": dict(kind="adam", lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01),
    "adamw": dict(kind="adamw", lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1),
    "adamw_warmup_cosine": dict(kind="adamw", lr=0.02, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=0.01, schedule="cosine", warmup=5),
    "sgd_warmup_linear": dict(kind="sgd", lr=0.2, momentum=0.9, weight_decay=0.0,
                              schedule="linear", warmup=3),
}


def schedule_lambda(cfg, total=20):
    """HuggingFace's get_{cosine,linear}_schedule_with_warmup."""
    import math
    warmup = cfg.get("warmup", 0)

    def f(step):
        if step < warmup:
            return step / max(1, warmup)
        progress = (step - warmup) / max(1, total - warmup)
        if cfg.get("schedule") == "linear":
            return max(0.0, 1.0 - progress)
        if cfg.get("schedule") == "cosine":
            return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
        return 1.0
    return f


BN_RUNS = {
    "bn_sgd": dict(kind="sgd", lr=0.05, momentum=0.9, weight_decay=1e-4),
    # The convolution's bias before a batch norm has a zero gradient in exact
    # arithmetic (the norm subtracts the batch mean): eps as for SEQ_RUNS.
    "bn_adamw": dict(kind="adamw", lr=0.003, betas=(0.9, 0.999), eps=1e-4, weight_decay=0.01),
    # Gradient accumulation as PyTorch users write it: each step runs two
    # batches forward and backward in turn (each normalised by its own
    # statistics, the running ones moved twice), each loss weighted by half,
    # then one optimizer step: 10 steps over the 20 batches.
    "bn_sgd_accumulate2": dict(kind="sgd", lr=0.05, momentum=0.9, weight_decay=1e-4,
                               accumulate=2),
    # GPipe's micro-batches: each batch of 4 runs as 2 halves in turn, each
    # normalised by its own statistics (20 steps).
    "bn_sgd_microbatches2": dict(kind="sgd", lr=0.05, momentum=0.9, weight_decay=1e-4,
                                 microbatches=2),
}

# Attention's key bias has a zero gradient in exact arithmetic (softmax does
# not see a shift of all keys by the same vector): what both frameworks
# compute there is rounding noise, which Adam with a tiny eps turns into
# +-lr steps of random sign. eps = 1e-4 keeps the comparison about the
# optimizer, not the noise.
SEQ_RUNS = {
    "encoder_sgd": dict(kind="sgd", lr=0.05, momentum=0.9, weight_decay=0.0),
    "encoder_adamw": dict(kind="adamw", lr=0.003, betas=(0.9, 0.999), eps=1e-4,
                          weight_decay=0.01),
    # Sequence-first (nn.TransformerEncoder's default layout): the batch is
    # dimension 1 of x [seq, batch, 16] and of the labels [seq, batch].
    "encoder_sf_adamw": dict(kind="adamw", lr=0.003, betas=(0.9, 0.999), eps=1e-4,
                             weight_decay=0.01, batch_dim=1),
    "gpt_sgd": dict(kind="sgd", lr=0.1, momentum=0.9, weight_decay=0.0),
    "gpt_adamw": dict(kind="adamw", lr=0.003, betas=(0.9, 0.999), eps=1e-4, weight_decay=0.01),
}


class Encoder(nn.Module):
    """nn.TransformerEncoder and a token classifier (batch-first, or as
    PyTorch's default is, sequence-first: [seq, batch, features])."""

    def __init__(self, batch_first=True, dropout=0.0):
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=dropout,
                                           batch_first=batch_first)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(16, 6)

    def forward(self, x):
        return self.head(self.enc(x))


class TinyGPT(nn.Module):
    """Embeddings, causal self-attention blocks (bench/gpu_models.py's
    GPTBlock shape), a vocabulary head."""

    def __init__(self, vocab=30, d=16, seq=8):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.register_buffer("mask", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        b, t = ids.shape
        x = self.wte(ids) + self.wpe(torch.arange(t).unsqueeze(0))
        q, k, v = self.qkv(self.ln(x)).split(x.shape[-1], dim=2)
        att = (q @ k.transpose(-2, -1)) / x.shape[-1] ** 0.5
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        return self.head(x + self.proj(att @ v))


CNN_RUNS = {
    "cnn_sgd": dict(kind="sgd", lr=0.05, momentum=0.9, weight_decay=1e-4),
    "cnn_adamw": dict(kind="adamw", lr=0.003, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01),
}


def save_running_stats(model, d: str, prefix: str) -> dict:
    """Batch norm's running statistics as .npy files: {buffer name: file}."""
    files = {}
    for i, (name, v) in enumerate(model.named_buffers()):
        if name.endswith("running_mean") or name.endswith("running_var"):
            f = f"{prefix}.b{i}.npy"
            np.save(os.path.join(d, f), v.numpy())
            files[name] = f
    return files


def train_reference(out: str, cnn: bool = False, bn: bool = False,
                    seq: str = "") -> None:
    d = os.path.join(out, f"train_{seq}" if seq else "train_bn" if bn else
                     "train_cnn" if cnn else "train")
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(3)
    dynamic = None
    if seq == "encoder":
        model = Encoder()
        example, xs = torch.randn(4, 8, 16), torch.randn(20, 4, 8, 16)
        ys = torch.randint(0, 6, (20, 4, 8))
        runs = {k: v for k, v in SEQ_RUNS.items() if k.startswith("encoder_")
                and not k.startswith("encoder_sf")}
    elif seq == "encoder_sf":
        # Exported with a symbolic batch (dimension 1), as the layout says
        # where the samples are; compiled with --dim batch=4. Its twin with
        # dropout (dropout.onnx) is for the micro-batch tests: they compare
        # distopt with itself (the masks are distopt's own).
        model = Encoder(batch_first=False)
        example, xs = torch.randn(8, 4, 16), torch.randn(20, 8, 4, 16)
        ys = torch.randint(0, 6, (20, 8, 4))
        runs = {k: v for k, v in SEQ_RUNS.items() if k.startswith("encoder_sf")}
        dynamic = {"x": {1: "batch"}, "logits": {1: "batch"}}
        # And exported as torch.onnx.export does by default, with fixed
        # shapes: nothing says where the batch is (fixed.onnx).
        torch.onnx.export(Encoder(batch_first=False), (example,),
                          os.path.join(d, "fixed.onnx"), input_names=["x"],
                          output_names=["logits"], opset_version=17,
                          do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
        torch.onnx.export(Encoder(batch_first=False, dropout=0.1).train(), (example,),
                          os.path.join(d, "dropout.onnx"), input_names=["x"],
                          output_names=["logits"], opset_version=17,
                          do_constant_folding=False, dynamic_axes=dynamic,
                          training=torch.onnx.TrainingMode.TRAINING)
    elif seq == "gpt":
        model = TinyGPT()
        example, xs = torch.randint(0, 30, (4, 8)), torch.randint(0, 30, (20, 4, 8))
        ys = torch.randint(0, 30, (20, 4, 8))
        runs = {k: v for k, v in SEQ_RUNS.items() if k.startswith("gpt")}
    elif seq == "gpt_vocab":
        # A vocabulary large enough that the planner splits the loss's
        # logits over tensor-parallel ranks rather than gathering them.
        model = TinyGPT(vocab=2048)
        example = torch.randint(0, 2048, (4, 8))
        xs, ys = torch.randint(0, 2048, (10, 4, 8)), torch.randint(0, 2048, (10, 4, 8))
        ys[0, 0, :3] = -100  # ignored positions count nowhere
        runs = {"vocab_adamw": SEQ_RUNS["gpt_adamw"]}
    elif bn:
        # Batch norm in training form: batch statistics, running statistics.
        # The convolutions feeding a batch norm have no bias (as in
        # torchvision's ResNets): its gradient is zero in exact arithmetic,
        # so both frameworks would train it on their own rounding noise,
        # which differs between CPUs (a 1.5e-4 difference on AMD EPYC).
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8),
                              nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(8, 8, 3, padding=1, bias=False),
                              nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                              nn.Flatten(), nn.Linear(8, 5))
        example, xs = torch.randn(4, 3, 12, 12), torch.randn(20, 4, 3, 12, 12)
        ys = torch.randint(0, 5, (20, 4))
        runs = BN_RUNS
    elif cnn:
        # Convolutions (strided, padded), max pooling, global average pooling.
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 5))
        example, xs = torch.randn(4, 3, 12, 12), torch.randn(20, 4, 3, 12, 12)
        ys = torch.randint(0, 5, (20, 4))
        runs = CNN_RUNS
    else:
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
        example, xs = torch.randn(6, 16), torch.randn(20, 6, 16)
        ys = torch.randint(0, 8, (20, 6))
        runs = TRAIN_RUNS
    model.train()
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    # Exporting traces a forward pass in training mode, which moves batch
    # norm's running statistics: the graph's initializers are those of after
    # it. The starting values are written out for the test to put back.
    initial_buffers = save_running_stats(model, d, "initial")
    torch.onnx.export(model, (example,), os.path.join(d, "model.onnx"),
                      input_names=["x"], output_names=["logits"], opset_version=17,
                      do_constant_folding=False, dynamic_axes=dynamic,
                      training=torch.onnx.TrainingMode.TRAINING)
    np.save(os.path.join(d, "xs.npy"), xs.numpy())
    np.save(os.path.join(d, "ys.npy"), ys.numpy())
    meta = {}
    for run_name, cfg in runs.items():
        model.load_state_dict(initial)
        params = list(model.parameters())
        if cfg["kind"] == "sgd":
            opt = torch.optim.SGD(params, lr=cfg["lr"], momentum=cfg["momentum"],
                                  nesterov=cfg.get("nesterov", False),
                                  weight_decay=cfg["weight_decay"])
        elif cfg["kind"] == "adam":
            opt = torch.optim.Adam(params, lr=cfg["lr"], betas=cfg["betas"], eps=cfg["eps"],
                                   weight_decay=cfg["weight_decay"])
        else:
            opt = torch.optim.AdamW(params, lr=cfg["lr"], betas=cfg["betas"], eps=cfg["eps"],
                                    weight_decay=cfg["weight_decay"])
        sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule_lambda(cfg))
        losses = []
        k = cfg.get("accumulate", 1)
        # Micro-batches: batches, or (microbatches) equal slices of each.
        split = cfg.get("microbatches", 1)
        for step in range(len(xs) // k):
            opt.zero_grad()
            loss = 0.0
            n = len(xs[0]) // split
            micro = [(xs[k * step + m][j * n:(j + 1) * n], ys[k * step + m][j * n:(j + 1) * n])
                     for m in range(k) for j in range(split)]
            for x_m, y_m in micro:
                out_ = model(x_m)
                part = nn.functional.cross_entropy(out_.reshape(-1, out_.shape[-1]),
                                                   y_m.reshape(-1)) / len(micro)
                part.backward()
                loss += float(part)
            if cfg.get("clip_norm"):
                torch.nn.utils.clip_grad_norm_(params, cfg["clip_norm"])
            opt.step()
            sched.step()
            losses.append(float(loss))
        weights = {}
        for i, (name, p) in enumerate(model.named_parameters()):
            f = f"{run_name}.w{i}.npy"
            np.save(os.path.join(d, f), p.detach().numpy())
            weights[name] = f
        buffers = save_running_stats(model, d, run_name)
        meta[run_name] = {"config": cfg, "losses": losses, "weights": weights,
                          "buffers": buffers, "initial_buffers": initial_buffers}
    with open(os.path.join(d, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    for name, module, x, t in models():
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        torch.onnx.export(module, (x, t), os.path.join(d, "model.onnx"),
                          input_names=["x", "t"], output_names=["loss"], opset_version=17,
                          do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
        module.zero_grad()
        loss = module(x, t)
        loss.backward()
        np.save(os.path.join(d, "x.npy"), x.numpy())
        np.save(os.path.join(d, "t.npy"), t.numpy())
        grads = {}
        for i, (pname, p) in enumerate(module.named_parameters()):
            f = f"grad{i}.npy"
            np.save(os.path.join(d, f), p.grad.numpy())
            grads[pname] = f
        with open(os.path.join(d, "meta.json"), "w") as fh:
            json.dump({"inputs": {"x": "x.npy", "t": "t.npy"}, "loss": float(loss),
                       "grads": grads}, fh, indent=1)
    for name, model, x, labels, loss_fn, flag in bare_models():
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        torch.onnx.export(model, (x,), os.path.join(d, "model.onnx"), input_names=["x"],
                          output_names=["logits"], opset_version=17,
                          do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
        if name in DYNAMIC_BATCH_EXPORTS:
            # Also with a symbolic batch, for data-parallel gradients (a
            # fixed-shape export writes batch-sized constants as tensors,
            # which cannot be split).
            torch.onnx.export(model, (x,), os.path.join(d, "model_dyn.onnx"),
                              input_names=["x"], output_names=["logits"], opset_version=17,
                              do_constant_folding=False,
                              training=torch.onnx.TrainingMode.TRAINING,
                              dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
        # The reference in float64 (a float32 model's weights, widened), in
        # the model's type.
        dtype = next(model.parameters()).detach().numpy().dtype
        reference = copy.deepcopy(model).double()
        reference.zero_grad()
        xd = x.double() if x.is_floating_point() else x
        ld = labels.double() if labels.is_floating_point() else labels
        loss = loss_fn(reference(xd), ld)
        loss.backward()
        np.save(os.path.join(d, "x.npy"), x.numpy())
        np.save(os.path.join(d, "labels.npy"), labels.numpy())
        grads = {}
        for i, (pname, p) in enumerate(reference.named_parameters()):
            np.save(os.path.join(d, f"grad{i}.npy"), p.grad.numpy().astype(dtype))
            grads[pname] = f"grad{i}.npy"
        with open(os.path.join(d, "meta.json"), "w") as fh:
            json.dump({"inputs": {"x": "x.npy", "labels": "labels.npy"},
                       "loss": float(loss), "grads": grads, "loss_flag": flag}, fh, indent=1)
    train_reference(args.out)
    train_reference(args.out, cnn=True)
    train_reference(args.out, bn=True)
    train_reference(args.out, seq="encoder")
    train_reference(args.out, seq="encoder_sf")
    train_reference(args.out, seq="gpt")
    train_reference(args.out, seq="gpt_vocab")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
