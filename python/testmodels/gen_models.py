#!/usr/bin/env python3
"""Generate small, deterministic ONNX test models for the distopt importer.

The models are built with onnx.helper + numpy only (no torch), but they imitate
the graphs that ``torch.onnx.export`` (TorchScript exporter) emits: torch-style
node names (``/layers.0/attn/MatMul``), ``<name>_output_<i>`` tensor names,
module-path initializer names (``layers.0.attn.q_proj.weight``), Constant nodes
for scalars, Shape/Gather/Unsqueeze/Concat shape subgraphs feeding Reshape,
``Add(bias, MatMul(...))`` for Linear layers on 3-D inputs, and so on.

Usage:
    python gen_models.py --out DIR [--only NAME ...]

NAME is a model name with or without ``.onnx`` (e.g. ``mlp``, ``gpt.onnx``).
Every run with the same arguments produces byte-identical files.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Producer fields as written by torch.onnx.export.
PRODUCER_NAME = "pytorch"
PRODUCER_VERSION = "2.1.0"

FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64


# --------------------------------------------------------------------------
# Graph builder
# --------------------------------------------------------------------------
class GraphBuilder:
    """Accumulates nodes/initializers, naming them the way torch does.

    Node names are made unique by appending ``_1``, ``_2``... to a repeated
    name (torch does the same per scope); the outputs of node ``N`` are named
    ``N_output_0``, ``N_output_1``... unless explicit output names are given
    (used for graph outputs).
    """

    def __init__(self, external_data: Optional[str] = None) -> None:
        self.nodes: List[onnx.NodeProto] = []
        self.initializers: List[onnx.TensorProto] = []
        self._name_counts: Dict[str, int] = {}
        # When set, weight() records initializers as external data in this
        # file (laid out one after another) without making their values.
        self.external_data = external_data
        self._external_offset = 0

    def _unique(self, name: str) -> str:
        n = self._name_counts.get(name, 0)
        self._name_counts[name] = n + 1
        return name if n == 0 else f"{name}_{n}"

    def node(
        self,
        op_type: str,
        inputs: Sequence[str],
        scope: str = "",
        outputs: Optional[Sequence[str]] = None,
        n_out: int = 1,
        domain: Optional[str] = None,
        **attrs,
    ):
        """Add a node named ``{scope}/{op_type}``; return its output name(s).

        Returns a single string when the node has one output, else a list.
        """
        name = self._unique(f"{scope}/{op_type}")
        if outputs is None:
            outputs = [f"{name}_output_{i}" for i in range(n_out)]
        node = helper.make_node(
            op_type, list(inputs), list(outputs), name=name, domain=domain, **attrs
        )
        self.nodes.append(node)
        return outputs[0] if len(outputs) == 1 else list(outputs)

    def const(self, value, scope: str = "", dtype=None) -> str:
        """Add a torch-style ``Constant`` node holding ``value``; return its output."""
        arr = np.asarray(value, dtype=dtype)
        tensor = numpy_helper.from_array(arr, name="")
        return self.node("Constant", [], scope, value=tensor)

    def init(self, name: str, array: np.ndarray) -> str:
        """Add an initializer (graph weight) and return its name."""
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def weight(self, name: str, shape: Sequence[int], make: Callable[[], np.ndarray],
               dtype: int = TensorProto.FLOAT) -> str:
        """A weight of ``shape``: ``make()``'s value, or in external-data mode a
        reference into ``external_data`` (``make`` is not called)."""
        if self.external_data is None:
            array = make()
            assert tuple(array.shape) == tuple(shape), (name, array.shape, shape)
            return self.init(name, array)
        tensor = external_tensor(name, shape, self.external_data, self._external_offset, dtype)
        self._external_offset += int(np.prod(shape)) * helper.tensor_dtype_to_np_dtype(dtype).itemsize
        self.initializers.append(tensor)
        return name

    def graph(self, name, inputs, outputs) -> onnx.GraphProto:
        return helper.make_graph(
            self.nodes, name, inputs, outputs, initializer=self.initializers
        )


def make_model(graph: onnx.GraphProto, opset: int, extra_opsets=()) -> onnx.ModelProto:
    """Wrap a graph into a ModelProto with the minimal IR version for ``opset``."""
    opsets = [helper.make_opsetid("", opset)] + [
        helper.make_opsetid(d, v) for d, v in extra_opsets
    ]
    model = helper.make_model(
        graph,
        opset_imports=opsets,
        producer_name=PRODUCER_NAME,
        producer_version=PRODUCER_VERSION,
    )
    # helper.make_model stamps the newest IR version known to the installed
    # onnx package; use the smallest one valid for the opset instead (this is
    # what exporters do and what older runtimes accept).
    model.ir_version = helper.find_min_ir_version_for([helper.make_opsetid("", opset)])
    return model


def scope_of(module: str) -> str:
    """Module path -> torch node scope: ``layers.0.attn.q_proj`` -> ``/layers.0/attn/q_proj``.

    torch keeps a ModuleList/Sequential index attached to its parent name.
    """
    parts: List[str] = []
    for part in module.split("."):
        if part.isdigit() and parts:
            parts[-1] += "." + part
        else:
            parts.append(part)
    return "/" + "/".join(parts)


def rng_for(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def linear_weight(rng, out_f: int, in_f: int) -> np.ndarray:
    """torch.nn.Linear-like weight [out, in], scaled by 1/sqrt(in)."""
    return (rng.standard_normal((out_f, in_f)) / math.sqrt(in_f)).astype(np.float32)


def small_bias(rng, n: int) -> np.ndarray:
    return (0.1 * rng.standard_normal(n)).astype(np.float32)


# --------------------------------------------------------------------------
# Reusable exporter patterns
# --------------------------------------------------------------------------
def linear_3d(b: GraphBuilder, rng, x: str, in_f: int, out_f: int, module: str) -> str:
    """nn.Linear applied to a 3-D input, as torch exports it.

    torch emits ``MatMul(x, W^T)`` with the transposed weight constant-folded
    into an initializer of shape [in, out], followed by ``Add(bias, mm)``
    (bias is the FIRST input of the Add).
    """
    scope = scope_of(module)
    w_t = b.weight(f"{module}.weight", (in_f, out_f),
                   lambda: linear_weight(rng, out_f, in_f).T)  # [in, out]
    bias = b.weight(f"{module}.bias", (out_f,), lambda: small_bias(rng, out_f))
    mm = b.node("MatMul", [x, w_t], scope)
    return b.node("Add", [bias, mm], scope)


def unsqueeze0(b: GraphBuilder, scalar: str, scope: str) -> str:
    """Unsqueeze a 0-d tensor to shape [1] (opset 13+: axes is an input)."""
    axes = b.const([0], scope, dtype=np.int64)
    return b.node("Unsqueeze", [scalar, axes], scope)


def shape_dims(b: GraphBuilder, x: str, scope: str, dims: Sequence[int]) -> List[str]:
    """Shape(x) -> Gather(scalar index) per requested dim; returns 0-d int64 tensors."""
    shape = b.node("Shape", [x], scope)
    out = []
    for d in dims:
        idx = b.const(np.array(d, dtype=np.int64), scope)  # 0-d index -> 0-d result
        out.append(b.node("Gather", [shape, idx], scope, axis=0))
    return out


def layer_norm_decomposed(b: GraphBuilder, x: str, d: int, module: str, rng) -> str:
    """LayerNorm as exported before opset 17, with opset-18 ReduceMean (axes input)."""
    scope = scope_of(module)
    gamma = b.weight(f"{module}.weight", (d,),
                     lambda: (1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32))
    beta = b.weight(f"{module}.bias", (d,), lambda: small_bias(rng, d))
    axes = b.const([-1], scope, dtype=np.int64)
    mean = b.node("ReduceMean", [x, axes], scope, keepdims=1)
    diff = b.node("Sub", [x, mean], scope)
    two = b.const(np.array(2.0, dtype=np.float32), scope)
    sq = b.node("Pow", [diff, two], scope)
    axes2 = b.const([-1], scope, dtype=np.int64)
    var = b.node("ReduceMean", [sq, axes2], scope, keepdims=1)
    eps = b.const(np.array(1e-5, dtype=np.float32), scope)
    var_eps = b.node("Add", [var, eps], scope)
    std = b.node("Sqrt", [var_eps], scope)
    norm = b.node("Div", [diff, std], scope)
    scaled = b.node("Mul", [norm, gamma], scope)
    return b.node("Add", [scaled, beta], scope)


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------
def build_mlp(dims: Sequence[int] = (64, 128, 64, 10)) -> onnx.ModelProto:
    """3 x Linear (Gemm transB=1) with Relu in between; symbolic batch dim.
    `dims` are the layer widths (the benchmark builds a larger one)."""
    rng = rng_for(1)
    b = GraphBuilder()
    dims = list(dims)
    h = "x"
    for i in range(3):
        module = f"layers.{i * 2}"  # nn.Sequential(Linear, ReLU, Linear, ReLU, Linear)
        w = b.init(f"{module}.weight", linear_weight(rng, dims[i + 1], dims[i]))
        bias = b.init(f"{module}.bias", small_bias(rng, dims[i + 1]))
        last = i == 2
        h = b.node(
            "Gemm", [h, w, bias], scope_of(f"layers.{module}"),
            outputs=["y"] if last else None, alpha=1.0, beta=1.0, transB=1,
        )
        if not last:
            h = b.node("Relu", [h], scope_of(f"layers.layers.{i * 2 + 1}"))
    graph = b.graph(
        "main_graph",
        [helper.make_tensor_value_info("x", FLOAT, ["batch", dims[0]])],
        [helper.make_tensor_value_info("y", FLOAT, ["batch", dims[-1]])],
    )
    return make_model(graph, 13)


def batch_norm(b: "GraphBuilder", rng, x: str, module: str, c: int) -> str:
    """BatchNormalization (inference form) of `c` channels with random
    parameters and running statistics named after `module`."""
    scale = b.init(f"{module}.weight", (1.0 + 0.1 * rng.standard_normal(c)).astype(np.float32))
    shift = b.init(f"{module}.bias", small_bias(rng, c))
    mean = b.init(f"{module}.running_mean", small_bias(rng, c))
    var = b.init(f"{module}.running_var", rng.uniform(0.5, 1.5, c).astype(np.float32))
    return b.node("BatchNormalization", [x, scale, shift, mean, var], "/" + module,
                  epsilon=1e-5, momentum=0.9, training_mode=0)


def build_cnn() -> onnx.ModelProto:
    """Small CNN: Conv/BN/Relu/MaxPool, grouped Conv/BN/Relu/AvgPool, Conv+bias,
    GlobalAveragePool, Flatten, Gemm."""
    rng = rng_for(2)
    b = GraphBuilder()

    def conv(x, module, c_in, c_out, k, stride, pad, group=1, bias=False):
        w = (rng.standard_normal((c_out, c_in // group, k, k))
             / math.sqrt(c_in // group * k * k)).astype(np.float32)
        inputs = [x, b.init(f"{module}.weight", w)]
        if bias:
            inputs.append(b.init(f"{module}.bias", small_bias(rng, c_out)))
        attrs = dict(kernel_shape=[k, k], pads=[pad] * 4, strides=[stride] * 2)
        if group != 1:
            attrs["group"] = group  # dilations left at the default (absent attribute)
        else:
            attrs["dilations"] = [1, 1]
        return b.node("Conv", inputs, "/" + module, **attrs)

    h = conv("x", "conv1", 3, 16, 3, 1, 1)                     # [N,16,32,32]
    h = batch_norm(b, rng, h, "bn1", 16)
    h = b.node("Relu", [h], "/relu1")
    h = b.node("MaxPool", [h], "/pool1", kernel_shape=[2, 2], pads=[0, 0, 0, 0],
               strides=[2, 2], ceil_mode=0)                     # [N,16,16,16]
    h = conv(h, "conv2", 16, 32, 3, 1, 1, group=2)             # [N,32,16,16]
    h = batch_norm(b, rng, h, "bn2", 32)
    h = b.node("Relu", [h], "/relu2")
    h = b.node("AveragePool", [h], "/pool2", kernel_shape=[2, 2], pads=[0, 0, 0, 0],
               strides=[2, 2], ceil_mode=0, count_include_pad=1)  # [N,32,8,8]
    h = conv(h, "conv3", 32, 64, 3, 2, 1, bias=True)           # [N,64,4,4]
    h = b.node("Relu", [h], "/relu3")
    h = b.node("GlobalAveragePool", [h], "/gap")               # [N,64,1,1]
    h = b.node("Flatten", [h], "/flatten", axis=1)             # [N,64]
    w = b.init("fc.weight", linear_weight(rng, 10, 64))
    bias = b.init("fc.bias", small_bias(rng, 10))
    b.node("Gemm", [h, w, bias], "/fc", outputs=["logits"], alpha=1.0, beta=1.0, transB=1)
    graph = b.graph(
        "main_graph",
        [helper.make_tensor_value_info("x", FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("logits", FLOAT, ["N", 10])],
    )
    return make_model(graph, 15)


def build_dcgan() -> onnx.ModelProto:
    """DCGAN's generator (Radford et al.): a latent [N, 100, 1, 1] up to a
    64x64 image through ConvTranspose (4x4; stride 1 then 2, pad 1) + BN +
    Relu, Tanh at the end."""
    rng = rng_for(9)
    b = GraphBuilder()

    h, channels = "z", [100, 512, 256, 128, 64, 3]
    for i in range(5):
        c_in, c_out = channels[i], channels[i + 1]
        w = (rng.standard_normal((c_in, c_out, 4, 4)) / math.sqrt(c_in * 4)).astype(np.float32)
        h = b.node("ConvTranspose", [h, b.init(f"up{i}.weight", w)], f"/up{i}",
                   kernel_shape=[4, 4], strides=[1, 1] if i == 0 else [2, 2],
                   pads=[0] * 4 if i == 0 else [1] * 4)
        if i < 4:
            h = b.node("Relu", [batch_norm(b, rng, h, f"bn{i}", c_out)], f"/relu{i}")
    b.node("Tanh", [h], "/tanh", outputs=["image"])
    graph = b.graph(
        "main_graph",
        [helper.make_tensor_value_info("z", FLOAT, ["N", 100, 1, 1])],
        [helper.make_tensor_value_info("image", FLOAT, ["N", 3, 64, 64])],
    )
    return make_model(graph, 17)


def build_transformer_encoder(d_model: int = 32, n_heads: int = 4, d_ff: int = 64,
                              n_layers: int = 2) -> onnx.ModelProto:
    """Post-norm transformer encoder (default: d_model=32, 4 heads, ffn 64, 2 layers)."""
    rng = rng_for(3)
    b = GraphBuilder()
    head_dim = d_model // n_heads

    h = "x"
    for layer in range(n_layers):
        lp = f"layers.{layer}"
        ap = f"{lp}.attn"                     # parameter prefix
        scope = scope_of(ap)                  # node scope /layers.0/attn
        x_in = h

        q = linear_3d(b, rng, x_in, d_model, d_model, f"{ap}.q_proj")
        k = linear_3d(b, rng, x_in, d_model, d_model, f"{ap}.k_proj")
        v = linear_3d(b, rng, x_in, d_model, d_model, f"{ap}.v_proj")

        # Head split: reshape to [B, S, H, Dh] with a shape computed at runtime.
        batch, seq = shape_dims(b, x_in, scope, [0, 1])
        batch_u = unsqueeze0(b, batch, scope)
        seq_u = unsqueeze0(b, seq, scope)
        heads_c = b.const([n_heads], scope, dtype=np.int64)
        hdim_c = b.const([head_dim], scope, dtype=np.int64)
        split_shape = b.node("Concat", [batch_u, seq_u, heads_c, hdim_c], scope, axis=0)

        def heads(t):
            r = b.node("Reshape", [t, split_shape], scope)
            return b.node("Transpose", [r], scope, perm=[0, 2, 1, 3])  # [B,H,S,Dh]

        qh, kh, vh = heads(q), heads(k), heads(v)
        kt = b.node("Transpose", [kh], scope, perm=[0, 1, 3, 2])      # [B,H,Dh,S]
        scores = b.node("MatMul", [qh, kt], scope)                      # [B,H,S,S]
        sqrt_d = b.const(np.array(math.sqrt(head_dim), dtype=np.float32), scope)
        scores = b.node("Div", [scores, sqrt_d], scope)
        probs = b.node("Softmax", [scores], scope, axis=-1)
        ratio = b.const(np.array(0.1, dtype=np.float32), scope)
        # Inference Dropout: ratio input given, training_mode absent (=false).
        probs = b.node("Dropout", [probs, ratio], f"{scope}/dropout")
        ctx = b.node("MatMul", [probs, vh], scope)                      # [B,H,S,Dh]
        ctx = b.node("Transpose", [ctx], scope, perm=[0, 2, 1, 3])      # [B,S,H,Dh]

        # Head merge: a second Shape/Gather/Unsqueeze/Concat subgraph.
        batch2, seq2 = shape_dims(b, ctx, scope, [0, 1])
        merge_shape = b.node(
            "Concat",
            [unsqueeze0(b, batch2, scope), unsqueeze0(b, seq2, scope),
             b.const([d_model], scope, dtype=np.int64)],
            scope, axis=0,
        )
        ctx = b.node("Reshape", [ctx, merge_shape], scope)              # [B,S,D]
        attn_out = linear_3d(b, rng, ctx, d_model, d_model, f"{ap}.out_proj")

        h = b.node("Add", [x_in, attn_out], scope_of(lp))  # residual
        h = layer_norm_op(b, rng, h, d_model, f"{lp}.norm1")

        # Feed-forward with exact (erf) GELU.
        ff_in = h
        f = linear_3d(b, rng, ff_in, d_model, d_ff, f"{lp}.linear1")
        fscope = scope_of(f"{lp}.activation")
        sqrt2 = b.const(np.array(math.sqrt(2.0), dtype=np.float32), fscope)
        t = b.node("Div", [f, sqrt2], fscope)
        t = b.node("Erf", [t], fscope)
        one = b.const(np.array(1.0, dtype=np.float32), fscope)
        t = b.node("Add", [t, one], fscope)
        t = b.node("Mul", [f, t], fscope)
        half = b.const(np.array(0.5, dtype=np.float32), fscope)
        f = b.node("Mul", [t, half], fscope)
        f = linear_3d(b, rng, f, d_ff, d_model, f"{lp}.linear2")
        h = b.node("Add", [ff_in, f], scope_of(lp))  # residual
        h = layer_norm_op(b, rng, h, d_model, f"{lp}.norm2",
                          output="y" if layer == n_layers - 1 else None)

    graph = b.graph(
        "main_graph",
        [helper.make_tensor_value_info("x", FLOAT, ["batch", "seq", d_model])],
        [helper.make_tensor_value_info("y", FLOAT, ["batch", "seq", d_model])],
    )
    return make_model(graph, 17)


def layer_norm_op(b: GraphBuilder, rng, x: str, d: int, module: str,
                  output: Optional[str] = None) -> str:
    """Opset-17 LayerNormalization node (axis=-1) with weight/bias initializers."""
    gamma = b.init(f"{module}.weight", (1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32))
    beta = b.init(f"{module}.bias", small_bias(rng, d))
    return b.node("LayerNormalization", [x, gamma, beta], scope_of(module),
                  outputs=[output] if output else None, axis=-1, epsilon=1e-5)


def build_gpt(vocab: int = 100, d: int = 32, n_heads: int = 2, n_layers: int = 2,
              block: int = 16, external_data: Optional[str] = None,
              symbolic_seq: bool = False) -> onnx.ModelProto:
    """nanoGPT-style decoder (default: vocab 100, d_model 32, 2 heads, 2 layers, seq 16).

    ``external_data``: weights reference that file instead of holding values
    (large shapes such as GPT-3). ``symbolic_seq``: the sequence length is a
    symbolic input dimension ``seq`` (at most ``block``), as torch exports
    with dynamic axes.
    """
    rng = rng_for(4)
    b = GraphBuilder(external_data)
    head_dim = d // n_heads

    wte = b.weight("transformer.wte.weight", (vocab, d),
                   lambda: (0.02 * rng.standard_normal((vocab, d))).astype(np.float32))
    wpe = b.weight("transformer.wpe.weight", (block, d),
                   lambda: (0.02 * rng.standard_normal((block, d))).astype(np.float32))

    # Embeddings: tok = wte[input_ids]; pos = wpe[arange(0, T)[None]].
    tok = b.node("Gather", [wte, "input_ids"], "/transformer/wte", axis=0)
    (seq,) = shape_dims(b, "input_ids", "/transformer", [1])
    seq_limit = b.node("Cast", [seq], "/transformer", to=INT64)
    start = b.const(np.array(0, dtype=np.int64), "/transformer")
    delta = b.const(np.array(1, dtype=np.int64), "/transformer")
    pos = b.node("Range", [start, seq_limit, delta], "/transformer")       # [T]
    pos = unsqueeze0(b, pos, "/transformer")                               # [1,T]
    pos_emb = b.node("Gather", [wpe, pos], "/transformer/wpe", axis=0)    # [1,T,D]
    h = b.node("Add", [tok, pos_emb], "/transformer")

    # Causal mask: lower-triangular bool buffer [1,1,block,block], one copy per
    # layer (registered buffer `attn.bias` in nanoGPT).
    tril = (np.tril(np.ones((block, block), dtype=bool)).reshape(1, 1, block, block)
            if external_data is None else np.zeros((1, 1, block, block), dtype=bool))

    for layer in range(n_layers):
        lp = f"transformer.h.{layer}"
        ls = scope_of(lp)                     # /transformer/h.0
        scope = f"{ls}/attn"
        x_in = h
        a = layer_norm_decomposed(b, x_in, d, f"{lp}.ln_1", rng)

        # c_attn: fused QKV projection, then Split with a `split` sizes input.
        qkv = linear_3d(b, rng, a, d, 3 * d, f"{lp}.attn.c_attn")
        split_sizes = b.const([d, d, d], scope, dtype=np.int64)
        q, k, v = b.node("Split", [qkv, split_sizes], scope, n_out=3, axis=2)

        batch, seq = shape_dims(b, a, scope, [0, 1])
        batch_u = unsqueeze0(b, batch, scope)
        seq_u = unsqueeze0(b, seq, scope)
        split_shape = b.node(
            "Concat",
            [batch_u, seq_u, b.const([n_heads], scope, dtype=np.int64),
             b.const([head_dim], scope, dtype=np.int64)],
            scope, axis=0,
        )

        def heads(t):
            r = b.node("Reshape", [t, split_shape], scope)
            return b.node("Transpose", [r], scope, perm=[0, 2, 1, 3])

        qh, kh, vh = heads(q), heads(k), heads(v)
        kt = b.node("Transpose", [kh], scope, perm=[0, 1, 3, 2])
        att = b.node("MatMul", [qh, kt], scope)
        scale = b.const(np.array(1.0 / math.sqrt(head_dim), dtype=np.float32), scope)
        att = b.node("Mul", [att, scale], scope)

        # mask = bias[:, :, :T, :T] -> two Slice nodes whose ends come from T.
        mask = b.weight(f"{lp}.attn.bias", tril.shape, lambda: tril, dtype=TensorProto.BOOL)
        for axis in (2, 3):
            mask = b.node(
                "Slice",
                [mask, b.const([0], scope, dtype=np.int64), unsqueeze0(b, seq, scope),
                 b.const([axis], scope, dtype=np.int64), b.const([1], scope, dtype=np.int64)],
                scope,
            )
        neg_inf = b.const(np.array(-np.inf, dtype=np.float32), scope)
        att = b.node("Where", [mask, att, neg_inf], scope)
        att = b.node("Softmax", [att], scope, axis=-1)
        y = b.node("MatMul", [att, vh], scope)                               # [B,H,T,Dh]
        y = b.node("Transpose", [y], scope, perm=[0, 2, 1, 3])
        merge_shape = b.node(
            "Concat",
            [unsqueeze0(b, batch, scope), unsqueeze0(b, seq, scope),
             b.const([d], scope, dtype=np.int64)],
            scope, axis=0,
        )
        y = b.node("Reshape", [y, merge_shape], scope)
        y = linear_3d(b, rng, y, d, d, f"{lp}.attn.c_proj")
        h = b.node("Add", [x_in, y], ls)                                     # residual

        # MLP with tanh-approximated GELU written out.
        m_in = h
        m = layer_norm_decomposed(b, m_in, d, f"{lp}.ln_2", rng)
        m = linear_3d(b, rng, m, d, 4 * d, f"{lp}.mlp.c_fc")
        gs = f"{ls}/mlp/act"
        cube = b.node("Pow", [m, b.const(np.array(3.0, dtype=np.float32), gs)], gs)
        t = b.node("Mul", [b.const(np.array(0.044715, dtype=np.float32), gs), cube], gs)
        t = b.node("Add", [m, t], gs)
        t = b.node("Mul", [b.const(np.array(math.sqrt(2.0 / math.pi), dtype=np.float32), gs), t], gs)
        t = b.node("Tanh", [t], gs)
        t = b.node("Add", [b.const(np.array(1.0, dtype=np.float32), gs), t], gs)
        half_x = b.node("Mul", [b.const(np.array(0.5, dtype=np.float32), gs), m], gs)
        m = b.node("Mul", [half_x, t], gs)
        m = linear_3d(b, rng, m, 4 * d, d, f"{lp}.mlp.c_proj")
        h = b.node("Add", [m_in, m], ls)                                     # residual

    h = layer_norm_decomposed(b, h, d, "transformer.ln_f", rng)
    # Tied lm_head: logits = h @ wte^T, the transpose kept as a node.
    wte_t = b.node("Transpose", [wte], "/lm_head", perm=[1, 0])
    b.node("MatMul", [h, wte_t], "/lm_head", outputs=["logits"])

    seq_dim = "seq" if symbolic_seq else block
    graph = b.graph(
        "main_graph",
        [helper.make_tensor_value_info("input_ids", INT64, ["batch", seq_dim])],
        [helper.make_tensor_value_info("logits", FLOAT, ["batch", seq_dim, vocab])],
    )
    return make_model(graph, 18)


def build_ops_misc() -> onnx.ModelProto:
    """One static-shape graph touching many elementwise / shape ops (opset 21)."""
    b = GraphBuilder()
    i64 = np.int64
    # x: [2,4,6]
    a, c = b.node("Split", ["x"], "", n_out=2, num_outputs=2, axis=2)             # [2,4,3] x2
    sa = b.node("Sigmoid", [a])
    lc = b.node("LeakyRelu", [c], alpha=0.1)
    g = b.node("Gelu", [sa], approximate="none")                        # opset 20 op

    # Unsqueeze -> Expand -> ReduceSum -> Squeeze round trip.
    u = b.node("Unsqueeze", [g, b.const([1], dtype=i64)])               # [2,1,4,3]
    e = b.node("Expand", [u, b.const([2, 3, 4, 3], dtype=i64)])         # [2,3,4,3]
    rs = b.node("ReduceSum", [e, b.const([1], dtype=i64)], keepdims=1)  # [2,1,4,3]
    sq = b.node("Squeeze", [rs, b.const([1], dtype=i64)])              # [2,4,3]

    # Pad (constant mode, pads/constant_value inputs) -> ReduceMax -> math chain.
    p = b.node("Pad", [lc, b.const([0, 1, 1, 0, 0, 1], dtype=i64),
                       b.const(np.array(0.5, dtype=np.float32))], mode="constant")  # [2,5,5]
    rmax = b.node("ReduceMax", [p, b.const([2], dtype=i64)], keepdims=0)            # [2,5]
    en = b.node("Exp", [b.node("Neg", [rmax])])
    lg = b.node("Log", [en])
    rc = b.node("Reciprocal", [b.node("Sqrt", [en])])
    b.node("Identity", [b.node("Concat", [lg, rc], axis=1)], outputs=["y1"])        # [2,10]

    # Comparisons, Where, Cast.
    lt = b.node("Less", [a, c])
    gt = b.node("Greater", [a, b.const(np.array(0.0, dtype=np.float32))])
    eq = b.node("Equal", [lt, gt])
    w = b.node("Where", [eq, a, c])
    eqf = b.node("Cast", [eq], to=FLOAT)
    # Reverse the last axis: Slice with step -1 (ends = INT64_MIN + 1 as torch emits).
    rev = b.node("Slice", [w, b.const([-1], dtype=i64),
                           b.const([-9223372036854775807], dtype=i64),
                           b.const([2], dtype=i64), b.const([-1], dtype=i64)])
    cat = b.node("Concat", [sq, rev, eqf], axis=2)                      # [2,4,9]
    b.node("LogSoftmax", [cat], axis=-1, outputs=["y0"])

    graph = b.graph(
        "main_graph",
        [helper.make_tensor_value_info("x", FLOAT, [2, 4, 6])],
        [helper.make_tensor_value_info("y0", FLOAT, [2, 4, 9]),
         helper.make_tensor_value_info("y1", FLOAT, [2, 10])],
    )
    return make_model(graph, 21)


def external_tensor(name: str, dims: Sequence[int], location: str, offset: int,
                    dtype: int = FLOAT) -> onnx.TensorProto:
    """An initializer whose bytes live in an external file (not read here)."""
    t = TensorProto()
    t.name = name
    t.data_type = dtype
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    length = int(np.prod(dims)) * helper.tensor_dtype_to_np_dtype(dtype).itemsize
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = t.external_data.add()
        entry.key = key
        entry.value = value
    return t


def build_external(data_file: str, n_layers: int, dim: int, seed: int) -> onnx.ModelProto:
    """x[batch, dim] -> n_layers x (MatMul(external W) + Add(inline bias) + Relu)."""
    rng = rng_for(seed)
    b = GraphBuilder()
    offset = 0
    h = "x"
    for i in range(n_layers):
        module = f"layers.{i}"
        w = f"{module}.weight"
        b.initializers.append(external_tensor(w, [dim, dim], data_file, offset))
        offset += dim * dim * 4
        bias = b.init(f"{module}.bias", small_bias(rng, dim))  # small, stored inline
        h = b.node("MatMul", [h, w], scope_of(module))
        h = b.node("Add", [h, bias], scope_of(module))
        h = b.node("Relu", [h], scope_of(module), outputs=["y"] if i == n_layers - 1 else None)
    graph = b.graph(
        "main_graph",
        [helper.make_tensor_value_info("x", FLOAT, ["batch", dim])],
        [helper.make_tensor_value_info("y", FLOAT, ["batch", dim])],
    )
    return make_model(graph, 17)


BIG_LAYERS, BIG_DIM = 4, 8192
BIG_DATA_SIZE = BIG_LAYERS * BIG_DIM * BIG_DIM * 4  # 1 GiB


def build_unsupported() -> onnx.ModelProto:
    """Valid model containing Bernoulli, NonMaxSuppression and com.example::FancyOp."""
    b = GraphBuilder()
    in_f = 8
    h = b.node("Relu", ["x"], "/relu1")                                   # [4,1,8]
    h = b.node("Sigmoid", [h], "/sigmoid")
    h = b.node("Bernoulli", [h], "/bernoulli", seed=1.0)                  # [4,1,8]
    h = b.node("Relu", [h], "/relu2")
    b.node("FancyOp", [h], "/fancy", outputs=["y"], domain="com.example", alpha=0.5)

    boxes = b.node("Relu", ["boxes"], "/relu3")
    b.node(
        "NonMaxSuppression",
        [boxes, "scores", b.const(np.array([5], dtype=np.int64), "/nms"),
         b.const(np.array([0.5], dtype=np.float32), "/nms"),
         b.const(np.array([0.0], dtype=np.float32), "/nms")],
        "/nms", outputs=["selected"], center_point_box=0,
    )
    graph = b.graph(
        "main_graph",
        [helper.make_tensor_value_info("x", FLOAT, [4, 1, in_f]),
         helper.make_tensor_value_info("boxes", FLOAT, [1, 10, 4]),
         helper.make_tensor_value_info("scores", FLOAT, [1, 1, 10])],
        [helper.make_tensor_value_info("y", FLOAT, [4, 1, in_f]),  # FancyOp: shape-preserving
         helper.make_tensor_value_info("selected", INT64, ["num_selected", 3])],
    )
    return make_model(graph, 17, extra_opsets=[("com.example", 1)])


# --------------------------------------------------------------------------
# Writers
# --------------------------------------------------------------------------
def serialize(model: onnx.ModelProto) -> bytes:
    return model.SerializeToString(deterministic=True)


def write_bytes(out_dir: str, name: str, data: bytes) -> str:
    path = os.path.join(out_dir, name)
    with open(path, "wb") as f:
        f.write(data)
    print(f"wrote {path} ({len(data)} bytes)")
    return path


def write_checked(out_dir: str, name: str, model: onnx.ModelProto) -> str:
    onnx.checker.check_model(model, full_check=True)  # also runs strict shape inference
    return write_bytes(out_dir, name, serialize(model))


def gen_big_external(out_dir: str) -> None:
    data_name = "big_external.onnx.data"
    model = build_external(data_name, BIG_LAYERS, BIG_DIM, seed=6)
    data_path = os.path.join(out_dir, data_name)
    # Sparse file: the weights are all-zero holes, so this takes no disk and no time.
    with open(data_path, "wb") as f:
        f.truncate(BIG_DATA_SIZE)
    print(f"wrote {data_path} ({BIG_DATA_SIZE} bytes, sparse)")
    path = write_bytes(out_dir, "big_external.onnx", serialize(model))
    # The path form of the checker validates external-data references (file
    # exists, offsets in range) without reading the data.
    onnx.checker.check_model(path, full_check=False)


def gen_missing_external(out_dir: str) -> None:
    # References a data file that is never written. No checker here: it
    # rejects external references to files that do not exist, which is the
    # whole point of this model (the structure is the same as big_external).
    model = build_external("missing_external.onnx.data", 1, 16, seed=7)
    write_bytes(out_dir, "missing_external.onnx", serialize(model))


# GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, d_model 12288, 96
# heads, context 2048, with Megatron-LM's padded vocabulary of 51200. The
# weights are external data in a file that is never written (700 GB): the
# planner needs shapes only.
GPT3_175B = dict(vocab=51200, d=12288, n_heads=96, n_layers=96, block=2048)


def gen_gpt3_175b(out_dir: str) -> None:
    model = build_gpt(**GPT3_175B, external_data="gpt3_175b.onnx.data", symbolic_seq=True)
    write_bytes(out_dir, "gpt3_175b.onnx", serialize(model))


def gen_truncated(out_dir: str) -> None:
    data = serialize(build_mlp())
    write_bytes(out_dir, "truncated.onnx", data[: len(data) * 6 // 10])


def gen_garbage(out_dir: str) -> None:
    write_bytes(out_dir, "garbage.onnx", rng_for(8).integers(0, 256, 4096, dtype=np.uint8).tobytes())


# Ordered registry: model name -> generator(out_dir).
GENERATORS: Dict[str, Callable[[str], None]] = {
    "mlp": lambda d: write_checked(d, "mlp.onnx", build_mlp()),
    "cnn": lambda d: write_checked(d, "cnn.onnx", build_cnn()),
    "transformer_encoder": lambda d: write_checked(d, "transformer_encoder.onnx", build_transformer_encoder()),
    "gpt": lambda d: write_checked(d, "gpt.onnx", build_gpt()),
    "ops_misc": lambda d: write_checked(d, "ops_misc.onnx", build_ops_misc()),
    "big_external": gen_big_external,
    "missing_external": gen_missing_external,
    "gpt3_175b": gen_gpt3_175b,
    "empty": lambda d: write_bytes(d, "empty.onnx", b""),
    "truncated": gen_truncated,
    "garbage": gen_garbage,
    "unsupported": lambda d: write_checked(d, "unsupported.onnx", build_unsupported()),
}


def generate(out_dir: str, only: Optional[Sequence[str]] = None) -> None:
    names = list(GENERATORS) if not only else [n[:-5] if n.endswith(".onnx") else n for n in only]
    unknown = [n for n in names if n not in GENERATORS]
    if unknown:
        raise SystemExit(f"unknown model(s): {', '.join(unknown)}; known: {', '.join(GENERATORS)}")
    os.makedirs(out_dir, exist_ok=True)
    for name in names:
        GENERATORS[name](out_dir)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help=f"subset to generate: {', '.join(GENERATORS)}")
    args = parser.parse_args(argv)
    generate(args.out, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
