#!/usr/bin/env python3
"""The shape idioms exporters write (torch.onnx.export of small modules under
Debian's torch 1.13), each at opsets 13, 15 and 17, with the batch dynamic so
that their shapes travel through the graph as Shape -> Gather -> ... chains:
repeat_interleave (grouped-query attention's key/value heads), expand_as,
new_zeros, arange over a size, masked_fill with a computed mask, torch.where
over shapes, views with -1. Writes <idiom>-opset<N>.onnx and, for each, the
input and PyTorch's output as .npy.

Usage (Debian's python3 with python3-torch): gen_shape_idioms.py OUT_DIR
"""

from __future__ import annotations

import os
import sys

import numpy as np
import torch


class RepeatInterleave(torch.nn.Module):
    """Grouped-query attention's key heads repeated for the query heads."""

    def forward(self, k):                       # [b, 2, 4, 8]
        return torch.repeat_interleave(k, 2, dim=1) * 2.0


class ExpandAs(torch.nn.Module):
    def forward(self, x):                       # [b, 4, 8]
        bias = x.mean(dim=1, keepdim=True)
        return x - bias.expand_as(x)


class NewZeros(torch.nn.Module):
    def forward(self, x):                       # [b, 4, 8]
        pad = x.new_zeros(x.shape[0], 2, x.shape[2])
        return torch.cat([pad, x], dim=1)


class ArangeOverSize(torch.nn.Module):
    """Positions of a sequence from its length (a learned position table)."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(16, 8))

    def forward(self, x):                       # [b, 4, 8]
        pos = torch.arange(x.shape[1], device=x.device)
        return x + self.table[pos].unsqueeze(0)


class MaskedFillComputedMask(torch.nn.Module):
    """A causal mask from the sequence length, applied with masked_fill."""

    def forward(self, s):                       # [b, 4, 4] scores
        t = s.shape[-1]
        i = torch.arange(t)
        mask = i.unsqueeze(0) > i.unsqueeze(1)
        return torch.softmax(s.masked_fill(mask, float("-inf")), dim=-1)


class WhereOverShapes(torch.nn.Module):
    def forward(self, x):                       # [b, 4, 8]
        rows = torch.arange(x.shape[1]).unsqueeze(-1)
        keep = rows < (x.shape[1] // 2)
        return torch.where(keep, x, torch.zeros_like(x))


class ViewMinusOne(torch.nn.Module):
    def forward(self, x):                       # [b, 4, 8]
        y = x.view(x.shape[0], -1, 2, 4).transpose(1, 2)
        return y.reshape(x.shape[0], -1)


IDIOMS = {
    "repeat_interleave": (RepeatInterleave, (2, 2, 4, 8)),
    "expand_as": (ExpandAs, (2, 4, 8)),
    "new_zeros": (NewZeros, (2, 4, 8)),
    "arange_over_size": (ArangeOverSize, (2, 4, 8)),
    "masked_fill_computed_mask": (MaskedFillComputedMask, (2, 4, 4)),
    "where_over_shapes": (WhereOverShapes, (2, 4, 8)),
    "view_minus_one": (ViewMinusOne, (2, 4, 8)),
}
OPSETS = (13, 15, 17)


def main() -> int:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, (cls, shape) in IDIOMS.items():
        torch.manual_seed(0)
        module = cls().eval()
        x = torch.randn(*shape)
        np.save(os.path.join(out, f"{name}.x.npy"), x.numpy())
        with torch.no_grad():
            np.save(os.path.join(out, f"{name}.y.npy"), module(x).numpy())
        for opset in OPSETS:
            torch.onnx.export(module, (x,), os.path.join(out, f"{name}-opset{opset}.onnx"),
                              opset_version=opset, input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
