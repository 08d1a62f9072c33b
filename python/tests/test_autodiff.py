"""distopt-autodiff against finite differences (every gradient rule, one op at
a time) and against PyTorch's autograd (models exported by torch.onnx.export
with their loss), through `distopt compile --gradients` and the CPU bundle.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cli import DISTOPT, ROOT, run
from gradcheck import assert_close, distopt_gradients, numeric_gradients
from training import batches_as_data, reference_model, step_flags, train_flags

RNG = np.random.default_rng(7)


def rand(*shape, lo=None):
    a = RNG.standard_normal(shape).astype(np.float32)
    if lo is not None:  # keep away from a kink or a pole
        a = np.abs(a) + lo
    return a


def with_loss(nodes, inputs, weights, opset=17):
    """The graph of `nodes` (result 'y'), with loss = sum(y * R) for a
    constant random R, so every element of y gets its own adjoint."""
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, n) for n, a in weights.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m = onnx.shape_inference.infer_shapes(m)
    y_shape = [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim]
    r = rand(*y_shape)
    loss_nodes = [
        helper.make_node("Constant", [], ["__r"], value=numpy_helper.from_array(r)),
        helper.make_node("Mul", ["y", "__r"], ["__yr"]),
        helper.make_node("ReduceSum", ["__yr"], ["loss"], keepdims=0),
    ]
    g2 = helper.make_graph(list(m.graph.node) + loss_nodes, "g", list(m.graph.input),
                           [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
                           list(m.graph.initializer))
    return helper.make_model(g2, opset_imports=[helper.make_opsetid("", opset)])


def node(op, ins, **attrs):
    return helper.make_node(op, ins, ["y"], **attrs)


def _const_ints(name, values):
    return helper.make_node("Constant", [], [name],
                            value=numpy_helper.from_array(np.array(values, np.int64)))


def _with_zeros(a, positions):
    for p in positions:
        a[p] = 0.0
    return a


# Each case: (nodes, graph inputs, weights[, opset]).
CASES = {
    "add_broadcast": ([node("Add", ["x", "w"])], {"x": rand(2, 3, 4)}, {"w": rand(3, 1)}),
    "sub": ([node("Sub", ["w", "x"])], {"x": rand(2, 3)}, {"w": rand(3)}),
    "mul_both": ([node("Mul", ["w", "v"])], {}, {"w": rand(2, 1, 4), "v": rand(3, 1)}),
    "div": ([node("Div", ["w", "v"])], {}, {"w": rand(2, 3), "v": rand(3, lo=0.5)}),
    "neg": ([node("Neg", ["w"])], {}, {"w": rand(5)}),
    "exp": ([node("Exp", ["w"])], {}, {"w": rand(2, 3)}),
    "log": ([node("Log", ["w"])], {}, {"w": rand(2, 3, lo=0.5)}),
    "sqrt": ([node("Sqrt", ["w"])], {}, {"w": rand(6, lo=0.5)}),
    "reciprocal": ([node("Reciprocal", ["w"])], {}, {"w": rand(6, lo=0.5)}),
    "tanh": ([node("Tanh", ["w"])], {}, {"w": rand(2, 3)}),
    "sigmoid": ([node("Sigmoid", ["w"])], {}, {"w": rand(2, 3)}),
    "asin": ([node("Asin", ["w"])], {}, {"w": np.tanh(rand(6)) * 0.9}),
    "acos": ([node("Acos", ["w"])], {}, {"w": np.tanh(rand(6)) * 0.9}),
    "atan": ([node("Atan", ["w"])], {}, {"w": rand(6) * 2}),
    "sinh": ([node("Sinh", ["w"])], {}, {"w": rand(6)}),
    "cosh": ([node("Cosh", ["w"])], {}, {"w": rand(6)}),
    "asinh": ([node("Asinh", ["w"])], {}, {"w": rand(6) * 3}),
    "acosh": ([node("Acosh", ["w"])], {}, {"w": rand(6, lo=1.2)}),
    "atanh": ([node("Atanh", ["w"])], {}, {"w": np.tanh(rand(6)) * 0.9}),
    "relu": ([node("Relu", ["w"])], {}, {"w": rand(8, lo=0.1) * np.sign(rand(8))}),
    "leaky_relu": ([node("LeakyRelu", ["w"], alpha=0.2)], {},
                   {"w": rand(8, lo=0.1) * np.sign(rand(8))}),
    "gelu_erf": ([node("Gelu", ["w"])], {}, {"w": rand(10)}, 20),
    "gelu_tanh": ([node("Gelu", ["w"], approximate="tanh")], {}, {"w": rand(10)}, 20),
    "max_broadcast": ([node("Max", ["w", "v"])], {}, {"w": rand(2, 3), "v": rand(3)}),
    "min_broadcast": ([node("Min", ["x", "w"])], {"x": rand(2, 3)}, {"w": rand(2, 1)}),
    "clip_relu6": ([helper.make_node("Constant", [], ["lo"],
                                     value=numpy_helper.from_array(np.float32(0.0))),
                    helper.make_node("Constant", [], ["hi"],
                                     value=numpy_helper.from_array(np.float32(0.6))),
                    node("Clip", ["w", "lo", "hi"])], {}, {"w": rand(12)}),
    "pow_const": ([helper.make_node("Constant", [], ["e"],
                                    value=numpy_helper.from_array(np.float32(3.0))),
                   node("Pow", ["w", "e"])], {}, {"w": rand(5)}),
    "pow_weight": ([node("Pow", ["x", "w"])], {"x": rand(4, lo=0.5)}, {"w": rand(4)}),
    "matmul_batch": ([node("MatMul", ["x", "w"])], {"x": rand(2, 3, 4)}, {"w": rand(4, 5)}),
    "matmul_both": ([node("MatMul", ["w", "v"])], {}, {"w": rand(2, 3, 4), "v": rand(2, 4, 5)}),
    "matmul_vec_lhs": ([node("MatMul", ["w", "x"])], {"x": rand(4, 5)}, {"w": rand(4)}),
    "matmul_vec_rhs": ([node("MatMul", ["x", "w"])], {"x": rand(2, 3, 4)}, {"w": rand(4)}),
    "gemm": ([node("Gemm", ["x", "w", "c"], transB=1, alpha=0.5, beta=2.0)],
             {"x": rand(3, 4)}, {"w": rand(5, 4), "c": rand(5)}),
    "gemm_trans_a": ([node("Gemm", ["w", "x"], transA=1)], {"x": rand(4, 5)}, {"w": rand(4, 3)}),
    "gemm_trans_both": ([node("Gemm", ["w", "v"], transA=1, transB=1, alpha=1.5)], {},
                        {"w": rand(4, 3), "v": rand(5, 4)}),
    "reduce_sum_keep": ([helper.make_node("Constant", [], ["ax"],
                                          value=numpy_helper.from_array(np.array([1], np.int64))),
                         node("ReduceSum", ["w", "ax"], keepdims=1)], {}, {"w": rand(2, 3, 4)}),
    "reduce_max": ([node("ReduceMax", ["w"], axes=[1], keepdims=1)], {}, {"w": rand(2, 5, 3)}),
    "reduce_mean": ([node("ReduceMean", ["w"], axes=[0, 2], keepdims=0)], {}, {"w": rand(2, 3, 4)}),
    "reshape_transpose": ([helper.make_node("Constant", [], ["s"],
                                            value=numpy_helper.from_array(np.array([3, 8], np.int64))),
                           helper.make_node("Reshape", ["w", "s"], ["r"]),
                           node("Transpose", ["r"], perm=[1, 0])], {}, {"w": rand(2, 3, 4)}),
    "expand": ([helper.make_node("Constant", [], ["s"],
                                 value=numpy_helper.from_array(np.array([2, 3, 4], np.int64))),
                node("Expand", ["w", "s"])], {}, {"w": rand(3, 1)}),
    "softmax": ([node("Softmax", ["w"], axis=1)], {}, {"w": rand(2, 5, 3)}),
    "log_softmax": ([node("LogSoftmax", ["w"], axis=-1)], {}, {"w": rand(3, 6)}),
    "where": ([node("Where", ["c", "w", "v"])],
              {"c": RNG.random((2, 3)) > 0.5}, {"w": rand(2, 3), "v": rand(3)}),
    "layer_norm": ([node("LayerNormalization", ["w", "s", "b"], axis=-1, epsilon=1e-5)], {},
                   {"w": rand(3, 6), "s": rand(6), "b": rand(6)}),
    "layer_norm_2axes": ([node("LayerNormalization", ["x", "s"], axis=1)],
                         {"x": rand(2, 3, 4)}, {"s": rand(3, 4)}),
    "gather_embedding": ([node("Gather", ["w", "ids"], axis=0)],
                         {"ids": np.array([[1, 3, -1], [0, 3, 3]], np.int64)}, {"w": rand(5, 4)}),
    "gather_axis1": ([node("Gather", ["w", "ids"], axis=1)],
                     {"ids": np.array([2, 0, 2], np.int32)}, {"w": rand(2, 3, 4)}),
    # torch.gather: duplicates add up in the adjoint; a negative index.
    "gather_elements": ([node("GatherElements", ["w", "ids"], axis=1)],
                        {"ids": np.array([[0, 2, 2], [1, -1, 0], [3, 3, 3]], np.int64)},
                        {"w": rand(3, 4)}),
    "gather_elements_short_indices": ([node("GatherElements", ["w", "ids"], axis=0)],
                                      {"ids": np.array([[2, 0], [2, 1]], np.int32)},
                                      {"w": rand(3, 4)}),
    "top_k": ([helper.make_node("Constant", [], ["k"],
                                value=numpy_helper.from_array(np.array([3], np.int64))),
               helper.make_node("TopK", ["w", "k"], ["y", "yi"], axis=1)], {}, {"w": rand(2, 5)}),
    "top_k_smallest": ([helper.make_node("Constant", [], ["k"],
                                         value=numpy_helper.from_array(np.array([2], np.int64))),
                        helper.make_node("TopK", ["w", "k"], ["y", "yi"], axis=0, largest=0)],
                       {}, {"w": rand(4, 3)}),
    # Attention (opset 23): 3-D inputs split into heads, grouped-query heads,
    # a causal frontier offset by the past keys, softcap; and 4-D with a
    # boolean mask (ONNX Runtime, which takes the finite differences, wants
    # it as long as the keys).
    "attention_gqa_causal_past": (
        [helper.make_node("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "ck", "cv"],
                          q_num_heads=4, kv_num_heads=2, is_causal=1, softcap=3.0)],
        {"pk": rand(2, 2, 2, 3), "pv": rand(2, 2, 2, 3)},
        {"q": rand(2, 3, 12), "k": rand(2, 3, 6), "v": rand(2, 3, 6)}, 23),
    "attention_mask": (
        [helper.make_node("Attention", ["q", "k", "v", "m"], ["y"], scale=0.3)],
        {"m": np.array([[True, False, True, True], [True, True, False, False]])},
        {"q": rand(1, 2, 2, 3), "k": rand(1, 2, 4, 3), "v": rand(1, 2, 4, 2)}, 23),
    # x[rows, cols] and x[rows, cols] = v with run-time indices (GatherND,
    # ScatterND: written as GatherElements and ScatterElements).
    "gather_nd_batch": ([node("GatherND", ["w", "ids"], batch_dims=1)],
                        {"ids": np.array([[[1], [3], [1]], [[0], [-1], [2]]], np.int64)},
                        {"w": rand(2, 4, 3)}),
    "scatter_nd": ([node("ScatterND", ["w", "ids", "v"])],
                   {"ids": np.array([[0, 2], [2, -1]], np.int64)},
                   {"w": rand(3, 4, 2), "v": rand(2, 2)}),
    "scatter_nd_add": ([node("ScatterND", ["w", "ids", "v"], reduction="add")],
                       {"ids": np.array([[1], [0], [1]], np.int64)},
                       {"w": rand(3, 4), "v": rand(3, 4)}, 18),
    # torch.scatter (updates replace: distinct positions) and scatter_add
    # (duplicates add).
    "scatter_elements": ([node("ScatterElements", ["w", "ids", "v"], axis=1)],
                         {"ids": np.array([[1, 3], [0, -2]], np.int64)},
                         {"w": rand(2, 4), "v": rand(2, 2)}),
    "scatter_elements_add": ([node("ScatterElements", ["w", "ids", "v"], axis=0,
                                   reduction="add")],
                             {"ids": np.array([[0, 1], [0, 2], [2, 2]], np.int64)},
                             {"w": rand(3, 2), "v": rand(3, 2)}),
    "slice": ([helper.make_node("Constant", [], ["st"],
                                value=numpy_helper.from_array(np.array([1, 0], np.int64))),
               helper.make_node("Constant", [], ["en"],
                                value=numpy_helper.from_array(np.array([3, 2], np.int64))),
               node("Slice", ["w", "st", "en"])], {}, {"w": rand(4, 5)}),
    "pad": ([helper.make_node("Constant", [], ["p"],
                              value=numpy_helper.from_array(np.array([1, 0, 0, 2], np.int64))),
             node("Pad", ["w", "p"])], {}, {"w": rand(2, 3)}),
    "split_concat": ([helper.make_node("Split", ["w"], ["a", "b2"], axis=1, num_outputs=2),
                      node("Concat", ["b2", "x"], axis=1)], {"x": rand(2, 1)}, {"w": rand(2, 4)}, 18),
    "conv": ([node("Conv", ["x", "w", "b"], pads=[1, 1, 1, 1])],
             {"x": rand(2, 3, 5, 4)}, {"w": rand(4, 3, 3, 3), "b": rand(4)}),
    "conv_strided_dilated": ([node("Conv", ["x", "w"], strides=[2, 3], dilations=[2, 1],
                                   pads=[1, 0, 2, 1])],
                             {"x": rand(2, 2, 9, 8)}, {"w": rand(3, 2, 2, 3)}),
    "conv_input_grad": ([node("Conv", ["w", "k"], strides=[2, 2], pads=[0, 1, 1, 0])],
                        {"k": rand(2, 3, 3, 3)}, {"w": rand(1, 3, 6, 7)}),
    "conv_grouped": ([node("Conv", ["x", "w", "b"], group=2, strides=[2, 1], pads=[1, 0, 0, 1],
                           dilations=[1, 2])],
                     {"x": rand(2, 4, 7, 6)}, {"w": rand(6, 2, 3, 2), "b": rand(6)}),
    "conv_depthwise": ([node("Conv", ["w", "k"], group=3, strides=[2, 2], pads=[1, 1, 1, 1])],
                       {"k": rand(3, 1, 3, 3)}, {"w": rand(2, 3, 6, 5)}),
    "conv_depthwise_weight": ([node("Conv", ["x", "w"], group=4, pads=[1, 1, 1, 1])],
                              {"x": rand(2, 4, 5, 5)}, {"w": rand(8, 1, 3, 3)}),
    "conv_transpose": ([node("ConvTranspose", ["x", "w", "b"], strides=[2, 2],
                             pads=[1, 0, 0, 1], output_padding=[1, 1])],
                       {"x": rand(2, 3, 4, 5)}, {"w": rand(3, 2, 3, 3), "b": rand(2)}),
    "conv_transpose_grouped_dilated": ([node("ConvTranspose", ["x", "w"], group=2,
                                             dilations=[2, 1], strides=[1, 2])],
                                       {"x": rand(1, 4, 3, 4)}, {"w": rand(4, 3, 2, 3)}),
    # The input is the weight here; output_shape one past the natural
    # output (a zero row and column, then the bias).
    "conv_transpose_input_grad": ([node("ConvTranspose", ["w", "k", "b"], strides=[2, 2],
                                        output_shape=[8, 8])],
                                  {"k": rand(2, 3, 3, 3)}, {"w": rand(1, 2, 3, 3), "b": rand(3)}),
    "avg_pool": ([node("AveragePool", ["w"], kernel_shape=[2, 3], strides=[2, 2])], {},
                 {"w": rand(2, 3, 6, 7)}),
    "avg_pool_padded": ([node("AveragePool", ["w"], kernel_shape=[3, 3], strides=[2, 1],
                              pads=[1, 1, 1, 1])], {}, {"w": rand(1, 2, 5, 4)}),
    "avg_pool_padded_counted": ([node("AveragePool", ["w"], kernel_shape=[3, 2], strides=[1, 2],
                                      pads=[1, 0, 1, 1], count_include_pad=1)], {},
                                {"w": rand(1, 2, 4, 5)}),
    "max_pool": ([node("MaxPool", ["w"], kernel_shape=[2, 2], strides=[2, 2])], {},
                 {"w": rand(2, 3, 6, 5)}),
    "max_pool_padded_overlapping": ([node("MaxPool", ["w"], kernel_shape=[3, 2],
                                          strides=[2, 1], pads=[1, 0, 1, 1])], {},
                                    {"w": rand(1, 2, 5, 4)}),
    "global_avg_pool": ([node("GlobalAveragePool", ["w"])], {}, {"w": rand(2, 3, 4, 5)}),
    # Products (CumProd, ReduceProd) through zeros: a tree of halvings and a
    # scan of shifted products, exact where x / y would divide by 0.
    "cum_prod_zero": ([_const_ints("ax", [1]), node("CumProd", ["w", "ax"])], {},
                      {"w": _with_zeros(rand(2, 5), [(0, 2)])}, 26),
    "cum_prod_exclusive_reverse": ([_const_ints("ax", [0]),
                                    node("CumProd", ["w", "ax"], exclusive=1, reverse=1)],
                                   {}, {"w": _with_zeros(rand(5, 2), [(1, 1)])}, 26),
    "reduce_prod_zeros": ([_const_ints("ax", [1, 2]), node("ReduceProd", ["w", "ax"], keepdims=0)],
                          {}, {"w": _with_zeros(rand(3, 5, 2), [(0, 1, 0), (2, 0, 1), (2, 3, 0)])},
                          18),
    "lp_pool_p3": ([node("LpPool", ["w"], kernel_shape=[2, 3], strides=[2, 1], pads=[1, 1, 0, 1],
                         p=3)], {}, {"w": rand(1, 2, 5, 4)}, 18),
    "lp_normalization_l1": ([node("LpNormalization", ["w"], axis=0, p=1)], {},
                            {"w": rand(4, 3, lo=0.1) * np.sign(rand(4, 3))}),
    "lp_normalization_l2": ([node("LpNormalization", ["w"], axis=-1, p=2)], {},
                            {"w": rand(3, 5)}),
    "lrn": ([node("LRN", ["w"], size=3, alpha=0.5, beta=0.6, bias=1.5)], {},
            {"w": rand(2, 5, 2, 3)}),
    "swiglu": ([node("SwiGLU", ["w", "v"], alpha=1.7)], {}, {"w": rand(3, 4), "v": rand(3, 4)},
               28),
    "reverse_sequence": ([node("ReverseSequence", ["w", "lens"], time_axis=1, batch_axis=0)],
                        {"lens": np.array([3, 1, 4], np.int64)}, {"w": rand(3, 4, 2)}),
    "center_crop_pad": ([_const_ints("s", [3, 6]), node("CenterCropPad", ["w", "s"], axes=[1, 2])],
                        {}, {"w": rand(2, 5, 3)}, 18),
    # RotaryEmbedding (opset 23): 3-D with num_heads, a partial rotary
    # dimension, interleaved pairs, the cache rows taken at position_ids;
    # the caches are weights too.
    "rotary_embedding": ([node("RotaryEmbedding", ["w", "c", "s", "pos"], num_heads=2,
                               rotary_embedding_dim=4, interleaved=1)],
                         {"pos": np.array([[0, 3, 1], [2, 2, 0]], np.int64)},
                         {"w": rand(2, 3, 12), "c": rand(4, 2), "s": rand(4, 2)}, 23),
    "rotary_embedding_4d_halves": ([node("RotaryEmbedding", ["w", "c", "s"])], {},
                                   {"w": rand(1, 2, 3, 4), "c": rand(1, 3, 2),
                                    "s": rand(1, 3, 2)}, 23),
    # GridSample: the input's gradient (a scatter-add of the taps) and the
    # grid's (through the interpolation weights, the reflection's folds).
    "grid_sample_linear_zeros": ([node("GridSample", ["w", "v"])], {},
                                 {"w": rand(1, 2, 4, 5),
                                  "v": np.tanh(rand(1, 3, 3, 2)) * 1.3}, 20),
    "grid_sample_cubic_reflection": ([node("GridSample", ["w", "v"], mode="cubic",
                                           padding_mode="reflection", align_corners=1)], {},
                                     {"w": rand(1, 1, 5, 4),
                                      "v": np.tanh(rand(1, 4, 3, 2)) * 1.6}, 20),
    # A spatial transformer's grid (AffineGrid's theta through GridSample),
    # F.fold (Col2Im), a KV cache's update (TensorScatter: the cache's
    # overwritten rows get nothing).
    "affine_grid_sample": ([_const_ints("size", [2, 1, 4, 3]),
                            helper.make_node("AffineGrid", ["t", "size"], ["g"]),
                            node("GridSample", ["x", "g"])],
                           {"x": rand(2, 1, 5, 4)}, {"t": rand(2, 2, 3) * 0.4}, 20),
    "col2im": ([_const_ints("image", [4, 5]), _const_ints("block", [2, 2]),
                node("Col2Im", ["w", "image", "block"], strides=[1, 2], pads=[0, 1, 1, 0])],
               {}, {"w": rand(1, 8, 12)}, 18),
    "tensor_scatter": ([node("TensorScatter", ["w", "u", "pos"], axis=1)],
                       {"pos": np.array([1, 4], np.int64)},
                       {"w": rand(2, 6, 3), "u": rand(2, 2, 3)}, 24),
    # DFT (products with constant cos and sin matrices): a complex
    # inverse transform along axis 1.
    "dft_inverse": ([node("DFT", ["w"], axis=1, inverse=1)], {}, {"w": rand(2, 6, 3, 2)}, 17),
    # CausalConvWithState (opset 27): the taps' products; a carried state
    # (past_state a weight too) and present_state read by the loss.
    # (Both outputs named: ONNX 1.23's shape inference of these ops fails
    # on a node without present_state.)
    "causal_conv_with_state": ([helper.make_node("CausalConvWithState", ["w", "k", "b", "p"],
                                                 ["y", "unused"], activation="silu")], {},
                               {"w": rand(2, 3, 5), "k": rand(3, 1, 3), "b": rand(3),
                                "p": rand(2, 3, 2)}, 27),
    "causal_conv_present_state": ([helper.make_node("CausalConvWithState", ["w", "k"],
                                                    ["o", "s"]),
                                   node("Concat", ["o", "s"], axis=2)], {},
                                  {"w": rand(2, 3, 2), "k": rand(3, 1, 4)}, 27),
    # LinearAttention (opset 27), unrolled: grouped queries, the decay, the
    # update rate, the carried state (all weights), read through the output
    # and through present_state.
    "linear_attention_gated_delta": ([helper.make_node(
        "LinearAttention", ["q", "k", "v", "s", "g", "b"], ["y", "unused"], q_num_heads=4,
        kv_num_heads=2)], {},
                                     {"q": rand(2, 3, 8), "k": rand(2, 3, 4) * 0.5,
                                      "v": rand(2, 3, 6), "s": rand(2, 2, 2, 3),
                                      "g": -np.abs(rand(2, 3, 4)) * 0.3,
                                      "b": 1 / (1 + np.exp(-rand(2, 3, 2)))}, 27),
    "linear_attention_present_state": ([helper.make_node(
        "LinearAttention", ["q", "k", "v", "", "", "b"], ["o", "y"], q_num_heads=2,
        kv_num_heads=2, update_rule="delta")], {"q": rand(1, 3, 4)},
        {"k": rand(1, 3, 4) * 0.5, "v": rand(1, 3, 2),
         "b": 1 / (1 + np.exp(-rand(1, 3, 1)))}, 27),
    "pad_wrap": ([_const_ints("p", [0, 3, 2, 1]), node("Pad", ["w", "p"], mode="wrap")], {},
                 {"w": rand(3, 2)}, 19),
    "cast_roundtrip": ([helper.make_node("Cast", ["w"], ["d"], to=TensorProto.DOUBLE),
                        node("Cast", ["d"], to=TensorProto.FLOAT)], {}, {"w": rand(4)}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_matches_finite_differences(name, tmp_path):
    case = CASES[name]
    nodes, inputs, weights = case[:3]
    opset = case[3] if len(case) > 3 else 17
    model = with_loss(nodes, inputs, weights, opset)
    loss, grads = distopt_gradients(model, inputs, tmp_path)
    numeric = numeric_gradients(model, inputs, set(weights))
    assert set(grads) == set(weights)
    for w in weights:
        assert grads[w].shape == weights[w].shape
        assert_close(grads[w], numeric[w], what=f"{name}: d loss / d {w}")


def test_losses_match_finite_differences(tmp_path):
    """SoftmaxCrossEntropyLoss (weights, ignore_index, mean) over logits a
    weight produces."""
    x = rand(6, 4)
    labels = np.array([0, 2, 1, 3, 2, 1], np.int64)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["logits"]),
             helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "t", "cw"], ["loss"],
                              ignore_index=1)]
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6, 4]),
         helper.make_tensor_value_info("t", TensorProto.INT64, [6])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(rand(4, 5), "w"),
         numpy_helper.from_array(rand(5, lo=0.5), "cw")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": x, "t": labels}
    loss, grads = distopt_gradients(model, feeds, tmp_path, ["--freeze-weights", "^cw$"])
    assert set(grads) == {"w"}
    assert_close(grads["w"], numeric_gradients(model, feeds, {"w"})["w"], what="sce")


def test_constant_node_tensor_is_not_trained(tmp_path):
    """A Constant node's float tensor too large to stay inline (kept out of the
    IR as initializers are) is part of the model, not a parameter: it gets no
    gradient, while the initializer beside it does."""
    table = rand(16, 8)  # 128 floats: more than the importer inlines
    nodes = [helper.make_node("Constant", [], ["table"],
                              value=numpy_helper.from_array(table, "table_value")),
             helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "table"], ["y"]),
             helper.make_node("Mul", ["y", "y"], ["sq"]),
             helper.make_node("ReduceSum", ["sq"], ["loss"], keepdims=0)]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 4])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(rand(4, 8), "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rand(16, 4)}
    path = tmp_path / "c.onnx"
    onnx.save(model, str(path))
    proc = run(DISTOPT, "import", path, check=False)
    assert proc.returncode == 0, proc.stderr
    assert 'name = "table"' in proc.stdout and "constant" in proc.stdout
    loss, grads = distopt_gradients(model, feeds, tmp_path)
    assert set(grads) == {"w"}
    assert_close(grads["w"], numeric_gradients(model, feeds, {"w"})["w"], what="d loss / d w")


def test_missing_rule_names_the_node(tmp_path):
    g = helper.make_graph(
        [helper.make_node("Constant", [], ["pads"],
                          value=numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1],
                                                                 np.int64))),
         helper.make_node("Pad", ["w", "pads"], ["p"], mode="reflect", name="pad1"),
         helper.make_node("ReduceSum", ["p"], ["loss"], keepdims=0)], "g", [],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(rand(1, 1, 4, 4), "w")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    proc = run(DISTOPT, "compile", path, "--gradients", "-o", tmp_path / "m.dx", check=False)
    assert proc.returncode == 1
    assert "'pad1'" in proc.stderr and "no gradient rule for dopt.pad in mode 'reflect'" in proc.stderr


def test_strided_slices_match_finite_differences(tmp_path):
    """Slices with steps > 1 and < 0 (what 3-D pooling and reversals read):
    the adjoint dilated, reversed and padded back."""
    def ints(name, v):
        return helper.make_node("Constant", [], [name],
                                value=numpy_helper.from_array(np.array(v, np.int64)))
    nodes = [ints("st", [1, 7, 0]), ints("en", [6, 0, 9]), ints("ax", [0, 1, 2]),
             ints("sp", [2, -3, 4]),
             helper.make_node("Slice", ["w", "st", "en", "ax", "sp"], ["s"]),
             helper.make_node("Mul", ["s", "c"], ["p"]),
             helper.make_node("ReduceSum", ["p"], ["loss"], keepdims=0)]
    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("c", TensorProto.FLOAT, [3, 3, 3])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(rand(7, 8, 10), "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"c": rand(3, 3, 3)}
    loss, grads = distopt_gradients(model, feeds, tmp_path)
    want = np.zeros((7, 8, 10), np.float32)
    want[1:6:2, 7:0:-3, 0:9:4] = feeds["c"]
    np.testing.assert_allclose(grads["w"], want, rtol=1e-6)


def test_gradients_flag_errors(tmp_path):
    g = helper.make_graph([helper.make_node("Relu", ["w"], ["y"])], "g", [],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
                          [numpy_helper.from_array(rand(3), "w")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    proc = run(DISTOPT, "compile", path, "--gradients", "-o", tmp_path / "a.dx", check=False)
    assert proc.returncode == 1 and "must be one float value" in proc.stderr
    proc = run(DISTOPT, "compile", path, "--freeze-weights", "w", "-o", tmp_path / "b.dx",
               check=False)
    assert proc.returncode == 1 and "--freeze-weights applies to --gradients" in proc.stderr
    proc = run(DISTOPT, "compile", path, "--gradients", "--freeze-weights", "(", "-o",
               tmp_path / "c.dx", check=False)
    assert proc.returncode == 1 and "invalid regular expression" in proc.stderr
    proc = run(DISTOPT, "compile", path, "--gradients", "--cluster", "local:2", "-o",
               tmp_path / "d.dx", check=False)
    # Data-parallel gradients need a batch to split.
    assert proc.returncode == 1 and "the model has no inputs to carry a batch" in proc.stderr


# --- PyTorch: exported models with their loss, against autograd ----------

TORCH_MODELS = ["mlp_cross_entropy", "mlp_mse", "attention_block", "tanh_classifier",
                # inference exports, with the loss appended by --loss:
                "lm_cross_entropy", "regression_mse", "mobilenet_blocks", "upsampler_mse",
                "conv1d_cross_entropy", "conv3d_cross_entropy", "unet_mse",
                "resnet18_cross_entropy", "gather_scatter_cross_entropy",
                "recurrent_cross_entropy", "grid_sample_cross_entropy"]


@pytest.mark.parametrize("name", TORCH_MODELS)
def test_gradients_match_pytorch(name, torch_models, tmp_path):
    check_pytorch_gradients(name, torch_models, tmp_path)


@pytest.mark.parametrize("name", TORCH_MODELS)
def test_emulated_gpu_gradients_match_pytorch(name, torch_models, tmp_path):
    """The same on --target cuda-emu: the GPU's kernels and library calls
    (cuBLAS, cuDNN's forward, backward-filter and backward-data
    convolutions) run by the runtime's CPU twins. MobileNetV2's blocks
    caught a weight gradient reading an activation whose memory a gradient
    sum had reused, ResNet-18 two library calls' buffers merged by CSE
    (docs/cuda-codegen.md)."""
    check_pytorch_gradients(name, torch_models, tmp_path, ["--target", "cuda-emu"])


@pytest.mark.parametrize("name", ["gather_scatter_cross_entropy", "recurrent_cross_entropy"])
def test_gradients_on_two_replicas_match_pytorch(name, torch_models, tmp_path):
    """torch.gather, scatter_add and topk (GatherElements, ScatterElements,
    TopK), and nn.LSTM and nn.GRU unrolled over the sequence, split along
    the batch: each replica works on its own samples, and the all-reduced
    gradients are PyTorch's."""
    d = torch_models / name
    meta = json.loads((d / "meta.json").read_text())
    bundle = tmp_path / "dp.dx"
    batch = np.load(d / "x.npy").shape[0]
    run(DISTOPT, "compile", d / "model_dyn.onnx", "--dim", f"batch={batch}", "--gradients", "--loss",
        meta["loss_flag"], "--cluster", "local:2", "--dp", "2", "-o", bundle)
    out = tmp_path / "out"
    run(DISTOPT, "run", "-n", "2", bundle, "--input", f"x={d / 'x.npy'}",
        "--input", f"labels={d / 'labels.npy'}", "--output-dir", out)
    assert abs(float(np.load(out / "loss.npy")) - meta["loss"]) <= 1e-5 * max(1, meta["loss"])
    for w, f in meta["grads"].items():
        got, want = np.load(out / f"grad_{w}.npy"), np.load(d / f)
        err = float(np.abs(got - want).max()) / max(1e-3, float(np.abs(want).max()))
        assert err <= 1e-4, f"grad of {w}: max relative error {err:.3g}"


def check_pytorch_gradients(name, torch_models, tmp_path, flags=()):
    d = torch_models / name
    meta = json.loads((d / "meta.json").read_text())
    model = onnx.load(str(d / "model.onnx"))
    feeds = {k: np.load(d / f) for k, f in meta["inputs"].items()}
    extra = ["--loss", meta["loss_flag"]] if "loss_flag" in meta else []
    loss, grads = distopt_gradients(model, feeds, tmp_path, extra + list(flags))
    assert abs(float(loss) - meta["loss"]) <= 1e-5 * max(1.0, abs(meta["loss"]))
    assert set(grads) == set(meta["grads"]), (sorted(grads), sorted(meta["grads"]))
    for w, f in meta["grads"].items():
        want = np.load(d / f)
        got = grads[w]
        scale = max(1e-3, float(np.abs(want).max()))
        err = float(np.abs(got - want).max()) / scale
        assert err <= 1e-4, f"{name}: grad of {w}: max relative error {err:.3g}"


def linear_model(tmp_path, input_name: str) -> Path:
    """logits = input @ w, input [2, 3]: a model to give a loss to."""
    g = helper.make_graph([helper.make_node("MatMul", [input_name, "w"], ["logits"])], "g",
                          [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 4])],
                          [numpy_helper.from_array(rand(3, 4), "w")])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_loss_flag_errors(tmp_path):
    path = linear_model(tmp_path, "labels")

    def compile_(*flags):
        return run(DISTOPT, "compile", path, *flags, "-o", tmp_path / "x.dx", check=False)

    p = compile_("--loss", "hinge")
    assert p.returncode == 1 and "unknown loss 'hinge'" in p.stderr
    p = compile_("--loss", "cross-entropy:probs")
    assert p.returncode == 1 and "no output 'probs' (its outputs: logits)" in p.stderr
    p = compile_("--loss", "cross-entropy:logits")
    assert p.returncode == 1 and "already has an input named 'labels'" in p.stderr
    p = compile_("--loss", "output:logits")
    assert p.returncode == 1 and "not one value" in p.stderr
    p = compile_("--labels", "y")
    assert p.returncode == 1 and "--labels applies to --loss" in p.stderr
    # Named otherwise, the labels are fine.
    p = compile_("--loss", "cross-entropy:logits", "--labels", "targets", "--gradients")
    assert p.returncode == 0, p.stderr
    manifest = json.loads((tmp_path / "x.dx" / "manifest.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["labels", "targets"]
    assert [o["name"] for o in manifest["outputs"]] == ["loss", "grad:w"]


def test_gpt_decoder_gradients_match_finite_differences(tmp_path):
    """A whole GPT-style decoder (embeddings, layer norms, causal attention,
    GELU MLPs, tied head) given a cross-entropy by --loss, against central
    differences of the same loss written in ONNX."""
    run(__import__("sys").executable, ROOT / "python/testmodels/gen_models.py", "--out",
        tmp_path, "--only", "gpt")
    model = onnx.load(str(tmp_path / "gpt.onnx"))
    # Fix the batch (the graph's inputs are symbolic) for ONNX Runtime.
    ids = RNG.integers(0, 100, (2, 16)).astype(np.int64)
    labels = RNG.integers(0, 100, (2, 16)).astype(np.int64)
    labels[0, 3] = -100
    logits = model.graph.output[0].name
    vocab = 100
    consts = [
        helper.make_node("Constant", [], ["__s"],
                         value=numpy_helper.from_array(np.array([-1, vocab], np.int64))),
        helper.make_node("Constant", [], ["__s1"],
                         value=numpy_helper.from_array(np.array([-1], np.int64))),
        helper.make_node("Reshape", [logits, "__s"], ["__flat"]),
        helper.make_node("Reshape", ["labels", "__s1"], ["__lab"]),
        helper.make_node("SoftmaxCrossEntropyLoss", ["__flat", "__lab"], ["loss"],
                         ignore_index=-100),
    ]
    g = model.graph
    loss_graph = helper.make_graph(
        list(g.node) + consts, "g",
        list(g.input) + [helper.make_tensor_value_info("labels", TensorProto.INT64, [2, 16])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], list(g.initializer))
    loss_model = helper.make_model(loss_graph, opset_imports=list(model.opset_import))
    _, grads = distopt_gradients(model, {"input_ids": ids, "labels": labels}, tmp_path / "d",
                                 ["--dim", "batch=2", "--loss", f"cross-entropy:{logits}"])
    names = {i.name for i in g.initializer if i.data_type == TensorProto.FLOAT}
    assert set(grads) == names
    numeric = numeric_gradients(loss_model, {"input_ids": ids, "labels": labels}, names,
                                eps=1e-2, max_elements=6)
    for name in sorted(names):
        assert_close(grads[name], numeric[name], rtol=3e-2, what=f"gpt: d loss / d {name}")


# --- Training: the executable's train mode against torch.optim ---------

@pytest.mark.parametrize("run_name", ["sgd_nesterov", "sgd_clipped", "adam", "adamw",
                                      "adamw_warmup_cosine", "sgd_warmup_linear",
                                      "cnn_sgd", "cnn_adamw", "bn_sgd", "bn_adamw",
                                      "bn_sgd_accumulate2", "encoder_sgd",
                                      "encoder_adamw", "gpt_sgd", "gpt_adamw"])
def test_training_matches_torch_optim(run_name, torch_models, tmp_path):
    """20 steps of `model train` on the batches PyTorch trained on (in file
    order): the same loss at every step and the same final weights. The four
    model kinds: an MLP, CNNs (convolutions, max and global average pooling,
    batch norm), nn.TransformerEncoder, a GPT-style decoder."""
    check_torch_optim(run_name, torch_models, tmp_path)


@pytest.mark.parametrize("run_name", ["sgd_clipped", "cnn_adamw", "bn_sgd", "encoder_adamw",
                                      "gpt_adamw"])
def test_emulated_gpu_training_matches_torch_optim(run_name, torch_models, tmp_path):
    """The same with the CUDA target's kernels run on this CPU (--target
    cuda-emu, test_cuda_emulation.py): batch norm's statistics (a reduction
    over N, H and W), bias gradients (sums over the batch), softmax and
    layer norm rows as a GPU computes them."""
    check_torch_optim(run_name, torch_models, tmp_path, "cuda-emu")


@pytest.mark.parametrize("run_name,target", [("bn_adamw", "cpu"), ("gpt_adamw", "cpu"),
                                             ("encoder_adamw", "cuda-emu")])
def test_steps_split_into_functions_match_torch_optim(run_name, target, torch_models, tmp_path):
    """The same with every program's loop nests split into functions of
    about 250 operations (`--outline-ops 0`; by default only programs of
    8000 and more, large training steps, are split, to bound LLVM's time):
    arguments, results carried out of a function, views of the arena
    recomputed in each, and the step and evaluation programs of one
    bundle, each with its own functions."""
    check_torch_optim(run_name, torch_models, tmp_path, target, ["--outline-ops", "0"])


@pytest.mark.parametrize("run_name,target", [("bn_adamw", "cpu"), ("gpt_adamw", "cpu")])
def test_steps_compiled_in_parts_match_torch_optim(run_name, target, torch_models, tmp_path):
    """The same with machine code generated in parts on threads
    (`--codegen-threads 3`, every program however small): the functions of
    one program in three objects, their local symbols made hidden globals
    under a name per program (the step's and the evaluation program's
    pieces share names until then), linked into one executable."""
    check_torch_optim(run_name, torch_models, tmp_path, target,
                      ["--outline-ops", "0", "--codegen-threads", "3",
                       "--codegen-split-min", "0"])
    symbols = subprocess.run(["nm", tmp_path / "step.dx" / "step"], capture_output=True,
                             text=True, check=True).stdout
    for program in ("dopt.m0.", "dopt.m1."):
        assert f"{program}dopt_main_part0" in symbols, program


def check_torch_optim(run_name, torch_models, tmp_path, target="cpu", extra=()):
    prefix = run_name.split("_")[0]
    d = torch_models / {"cnn": "train_cnn", "bn": "train_bn", "encoder": "train_encoder",
                        "gpt": "train_gpt"}.get(prefix, "train")
    meta = json.loads((d / "meta.json").read_text())[run_name]
    cfg = meta["config"]
    flags = step_flags(cfg)
    model_path = reference_model(d, meta, tmp_path / "model.onnx")
    bundle = tmp_path / "step.dx"
    run(DISTOPT, "compile", model_path, *flags, "--target", target, *extra, "-o", bundle)
    log, saved = tmp_path / "log.jsonl", tmp_path / "weights"
    n = len(meta["losses"])
    run(bundle / "step", "train", *batches_as_data(d, tmp_path), "--steps", str(n),
        "--no-shuffle", *train_flags(cfg), "--log", log, "--save-weights", saved)
    steps = [json.loads(line) for line in log.read_text().splitlines()]
    assert [s["step"] for s in steps] == list(range(1, n + 1))
    losses, want = np.array([s["loss"] for s in steps]), np.array(meta["losses"])
    assert np.abs(losses - want).max() <= 1e-4 * np.abs(want).max(), (losses, want)
    for name, f in meta["weights"].items():
        ref = np.load(d / f)
        got = np.load(saved / f"{name}.npy")
        err = np.abs(got - ref).max() / max(1e-3, float(np.abs(ref).max()))
        assert err <= 1e-4, f"{run_name}: {name}: relative error {err:.3g}"
    # Batch norm's running statistics: the mean as PyTorch's; the variance
    # as ONNX defines it (population variance of the batch), where PyTorch
    # uses the unbiased one -- close, not equal.
    for name, f in meta.get("buffers", {}).items():
        ref = np.load(d / f)
        got = np.load(saved / f"{name}.npy")
        err = np.abs(got - ref).max() / max(1e-3, float(np.abs(ref).max()))
        assert err <= (1e-4 if name.endswith("mean") else 2e-2), f"{name}: {err:.3g}"


def compile_step(torch_models, tmp_path, optimizer, name="step") -> Path:
    """The MLP of the torch.optim runs compiled as a training step: its
    executable."""
    bundle = tmp_path / f"{name}.dx"
    run(DISTOPT, "compile", torch_models / "train" / "model.onnx", "--loss",
        "cross-entropy:logits", "--optimizer", optimizer, "-o", bundle)
    return bundle / name


def argmax_data(tmp_path, samples):
    """A learnable task for that MLP (the label is the argmax of the first 8
    of 16 features): the features, and the --data flags of both files."""
    x = RNG.standard_normal((samples, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", x[:, :8].argmax(axis=1).astype(np.int64))
    return x, ["--data", f"x={tmp_path / 'x.npy'}", "--data", f"labels={tmp_path / 'y.npy'}"]


def test_training_shuffles_by_seed_and_loss_falls(torch_models, tmp_path):
    step = compile_step(torch_models, tmp_path, "adamw")
    _, data = argmax_data(tmp_path, 240)

    def train(seed, log):
        run(step, "train", *data, "--epochs", "5", "--shuffle", seed, "--lr", "0.01",
            "--log", log)
        return [json.loads(line)["loss"] for line in log.read_text().splitlines()]

    a = train(1, tmp_path / "a.jsonl")
    b = train(1, tmp_path / "b.jsonl")
    c = train(2, tmp_path / "c.jsonl")
    assert len(a) == 5 * (240 // 6)
    assert a == b  # the same seed, bit for bit
    assert a != c
    assert np.mean(a[-10:]) < 0.6 * np.mean(a[:10])


def test_trained_model_saved_as_onnx_runs_in_onnx_runtime(torch_models, tmp_path):
    import onnxruntime as ort
    d = torch_models / "train"
    step = compile_step(torch_models, tmp_path, "sgd")
    x, data = argmax_data(tmp_path, 60)
    run(step, "train", *data, "--steps", "10", "--lr", "0.1",
        "--save-weights", tmp_path / "w", "--save-onnx", tmp_path / "trained.onnx")
    w = {n: np.load(tmp_path / "w" / f"{n}.npy") for n in ["0.weight", "0.bias", "2.weight", "2.bias"]}
    original = onnx.load(str(d / "model.onnx"))
    assert not np.allclose(numpy_helper.to_array(original.graph.initializer[0]),
                           w[original.graph.initializer[0].name])  # it did train
    sess = ort.InferenceSession(str(tmp_path / "trained.onnx"), providers=["CPUExecutionProvider"])
    probe = x[:6]
    got = sess.run(None, {"x": probe})[0]
    want = np.maximum(probe @ w["0.weight"].T + w["0.bias"], 0) @ w["2.weight"].T + w["2.bias"]
    assert np.abs(got - want).max() <= 1e-5 * max(1.0, float(np.abs(want).max()))
    # The same with the weights as ONNX external data (what a model past
    # 2 GB gets): trained.onnx.data beside the model, loadable by ORT.
    out = tmp_path / "ext"
    out.mkdir()
    run(step, "train", *data, "--steps", "10", "--lr", "0.1", "--save-onnx",
        out / "trained.onnx", "--save-onnx-external-data")
    model = onnx.load(str(out / "trained.onnx"), load_external_data=False)
    stored = {i.name: i for i in model.graph.initializer}
    assert all(stored[n].data_location == onnx.TensorProto.EXTERNAL for n in w)
    assert (out / "trained.onnx.data").stat().st_size >= sum(a.nbytes for a in w.values())
    sess = ort.InferenceSession(str(out / "trained.onnx"), providers=["CPUExecutionProvider"])
    assert np.abs(sess.run(None, {"x": probe})[0] - want).max() <= \
        1e-5 * max(1.0, float(np.abs(want).max()))
    p = run(step, "train", *data, "--steps", "1", "--save-onnx-external-data", check=False)
    assert p.returncode == 2 and "--save-onnx-external-data needs --save-onnx" in p.stderr


def test_updates_are_written_in_place_and_a_step_runs_as_a_function(torch_models, tmp_path):
    """A training step writes its updated weights and Adam moments into their
    own buffers (the manifest's in-place outputs: no buffer of their own).
    Run once as a function (no `train`), the step still writes every output
    and leaves its inputs and the bundle's weights as they were: two runs
    give the same updates, equal bit for bit to one step of the train loop."""
    step = compile_step(torch_models, tmp_path, "adam")
    manifest = json.loads((step.parent / "manifest.json").read_text())
    weights = [w["name"] for w in manifest["weights"]]
    in_place = {o["name"]: o.get("in_place") for o in manifest["outputs"]}
    assert in_place["loss"] is None and in_place["grad_norm"] is None
    for w in weights:
        assert in_place[f"update:{w}"] == w
        assert in_place[f"opt.m:{w}"] == f"opt.m:{w}"
        assert in_place[f"opt.v:{w}"] == f"opt.v:{w}"
    x, data = argmax_data(tmp_path, 48)
    run(step, "train", *data, "--steps", "1", "--no-shuffle", "--lr", "0.01",
        "--save-weights", tmp_path / "trained")
    feeds = {"opt.lr": 0.01, "opt.step": 1.0, "opt.weight_decay": 0.0,
             "opt.clip_norm": 0.0, "opt.beta1": 0.9, "opt.beta2": 0.999, "opt.eps": 1e-8}
    inputs = []
    for spec in manifest["inputs"]:
        name, f = spec["name"], tmp_path / f"in_{len(inputs)}.npy"
        if name == "x":
            value = x[:spec["shape"][0]]
        elif name == "labels":
            value = x[:spec["shape"][0], :8].argmax(axis=1).astype(np.int64)
        elif name in feeds:
            value = np.array(feeds[name], dtype=np.float32)
        else:  # Adam's moments, zero before the first step
            value = np.zeros(spec["shape"], np.float32)
        np.save(f, value)
        inputs += ["--input", f"{name}={f}"]
    before = (step.parent / "weights.bin").read_bytes()
    # The second run's outputs: had the first written into its inputs (the
    # moments) or weights, the second would start elsewhere.
    run(step, *inputs, "--repeat", "2", "--output-dir", tmp_path / "out")
    assert (step.parent / "weights.bin").read_bytes() == before
    for w in weights:
        got = np.load(tmp_path / "out" / f"update_{w}.npy")
        assert np.array_equal(got, np.load(tmp_path / "trained" / f"{w}.npy")), w
        assert np.abs(np.load(tmp_path / "out" / f"opt.m_{w}.npy")).max() > 0, w
    # A manifest whose update lands in another buffer than the one it
    # updates is refused before any step.
    for o in manifest["outputs"]:
        if o["name"] == f"opt.m:{weights[0]}":
            o["in_place"] = f"opt.v:{weights[0]}"
    (step.parent / "manifest.json").write_text(json.dumps(manifest))
    p = run(step, "train", *data, "--steps", "1", check=False)
    assert p.returncode == 1, p.stderr
    assert (f"optimizer state 'opt.m:{weights[0]}': its update is written in place of "
            f"'opt.v:{weights[0]}'") in p.stderr


def test_checkpoint_resume_is_bit_identical(torch_models, tmp_path):
    """20 steps straight equal 10 steps, stop, resume from the checkpoint, 10
    more -- bit for bit, with shuffling and Adam's state."""
    step = compile_step(torch_models, tmp_path, "adam")
    _, data = argmax_data(tmp_path, 48)
    data += ["--shuffle", "3", "--lr", "0.01"]

    def losses(log):
        return [json.loads(line)["loss"] for line in log.read_text().splitlines()]

    run(step, "train", *data, "--steps", "20", "--log", tmp_path / "a.jsonl",
        "--save-weights", tmp_path / "wa")
    run(step, "train", *data, "--steps", "10", "--checkpoint-dir", tmp_path / "ck",
        "--log", tmp_path / "b1.jsonl")
    assert (tmp_path / "ck" / "checkpoint" / "meta.json").exists()
    assert not (tmp_path / "ck" / "checkpoint.tmp").exists()
    run(step, "train", *data, "--steps", "20", "--resume", tmp_path / "ck",
        "--log", tmp_path / "b2.jsonl", "--save-weights", tmp_path / "wb")
    assert losses(tmp_path / "a.jsonl") == losses(tmp_path / "b1.jsonl") + losses(tmp_path / "b2.jsonl")
    for f in (tmp_path / "wa").iterdir():
        assert np.array_equal(np.load(f), np.load(tmp_path / "wb" / f.name)), f.name
    # A checkpoint of another optimizer does not fit.
    other = compile_step(torch_models, tmp_path, "sgd", name="sgd")
    p = run(other, "train", *data, "--steps", "20", "--resume", tmp_path / "ck",
            check=False)
    assert p.returncode == 1 and "the checkpoint has no 'opt.momentum:0.weight'" in p.stderr
    p = run(other, "train", *data, "--steps", "20", "--resume", tmp_path / "nowhere",
            check=False)
    assert p.returncode == 1 and "no checkpoint in" in p.stderr


def test_training_data_mapped_or_converted(torch_models, tmp_path):
    """Data files are mapped in place (.npy, little-endian C order); big-endian
    and Fortran-order .npy files are converted on reading: the same run."""
    step = compile_step(torch_models, tmp_path, "sgd")
    x, data = argmax_data(tmp_path, 36)
    np.save(tmp_path / "xbe.npy", x.astype(">f4"))
    np.save(tmp_path / "xf.npy", np.asfortranarray(x))
    logs = []
    for name in ("x.npy", "xbe.npy", "xf.npy"):
        flags = list(data)
        flags[1] = f"x={tmp_path / name}"
        log = tmp_path / f"{name}.jsonl"
        run(step, "train", *flags, "--steps", "6", "--lr", "0.1", "--log", log)
        logs.append([json.loads(line)["loss"] for line in log.read_text().splitlines()])
    assert logs[0] == logs[1] == logs[2]


def test_eval_matches_onnx_runtime_and_pads_the_last_batch(torch_models, tmp_path):
    """`eval` over 50 samples (batch 6: the last batch padded with ignored
    labels) gives ONNX Runtime's mean cross-entropy and accuracy over all
    50; after training, `train --eval-data` reports the same as `eval
    --checkpoint` of the run."""
    import onnxruntime as ort
    d = torch_models / "train"
    step = compile_step(torch_models, tmp_path, "adamw")
    rng = np.random.default_rng(12)
    x = rng.standard_normal((50, 16)).astype(np.float32)
    y = x[:, :8].argmax(axis=1).astype(np.int64)
    y[3] = -100
    np.save(tmp_path / "ex.npy", x)
    np.save(tmp_path / "ey.npy", y)
    evald = ["--data", f"x={tmp_path / 'ex.npy'}", "--data", f"labels={tmp_path / 'ey.npy'}"]
    got = json.loads(run(step, "eval", *evald).stdout)
    sess = ort.InferenceSession(str(d / "model.onnx"), providers=["CPUExecutionProvider"])
    logits = np.concatenate([sess.run(None, {"x": x[i:i + 6]})[0] if i + 6 <= 50 else
                             sess.run(None, {"x": np.concatenate(
                                 [x[i:], np.zeros((i + 6 - 50, 16), np.float32)])})[0][:50 - i]
                             for i in range(0, 50, 6)])
    keep = y != -100
    logp = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True)) \
        - logits.max(1, keepdims=True)
    want_loss = float(-logp[keep, y[keep]].mean())
    want_acc = float((logits[keep].argmax(1) == y[keep]).mean())
    assert got["samples"] == 50
    assert abs(got["loss"] - want_loss) <= 1e-5 * want_loss, (got, want_loss)
    assert abs(got["accuracy"] - want_acc) < 1e-9, (got, want_acc)
    _, data = argmax_data(tmp_path, 60)
    log = tmp_path / "log.jsonl"
    run(step, "train", *data, "--steps", "20", "--lr", "0.01", "--eval-data",
        f"x={tmp_path / 'ex.npy'}", "--eval-data", f"labels={tmp_path / 'ey.npy'}",
        "--eval-every", "10", "--log", log, "--checkpoint-dir", tmp_path / "ck")
    steps = [json.loads(line) for line in log.read_text().splitlines()]
    assert [s["step"] for s in steps if "eval_loss" in s] == [10, 20]
    after = json.loads(run(step, "eval", *evald, "--checkpoint", tmp_path / "ck").stdout)
    assert after["loss"] == steps[-1]["eval_loss"]
    assert after["accuracy"] == steps[-1]["eval_accuracy"]
    assert after["loss"] < got["loss"]


def test_eval_uses_running_statistics_and_no_dropout(torch_models, tmp_path):
    """Batch norm evaluates with its running statistics (so a sample's loss
    does not depend on the batch it is in: two halves average to the
    whole), dropout is off (no random key; twice the same)."""
    d = torch_models / "train_bn"
    bundle = tmp_path / "bn.dx"
    run(DISTOPT, "compile", d / "model.onnx", "--loss", "cross-entropy:logits", "--optimizer",
        "sgd", "-o", bundle)
    m = json.loads((bundle / "manifest.json").read_text())
    assert [t["name"] for t in m["eval"]["inputs"]] == ["x", "labels"]
    xs, ys = np.load(d / "xs.npy"), np.load(d / "ys.npy")
    batch = xs.shape[1]
    x = xs.reshape((-1,) + xs.shape[2:])[:4 * batch]
    y = ys.reshape(-1)[:4 * batch]

    def evaluate(lo, hi, tag):
        np.save(tmp_path / f"x{tag}.npy", x[lo:hi])
        np.save(tmp_path / f"y{tag}.npy", y[lo:hi])
        return json.loads(run(bundle / "bn", "eval", "--data", f"x={tmp_path / f'x{tag}.npy'}",
                              "--data", f"labels={tmp_path / f'y{tag}.npy'}").stdout)

    whole = evaluate(0, 4 * batch, "w")
    a, b = evaluate(0, 2 * batch, "a"), evaluate(2 * batch, 4 * batch, "b")
    assert abs((a["loss"] + b["loss"]) / 2 - whole["loss"]) <= 1e-5 * whole["loss"]
    assert evaluate(0, 4 * batch, "w2") == whole


def test_eval_errors(torch_models, tmp_path):
    step = compile_step(torch_models, tmp_path, "sgd")
    p = run(step, "eval", check=False)
    assert p.returncode == 2 and "eval needs --data NAME=FILE" in p.stderr
    p = run(step, "eval", "--data", "x=a.npy", "--steps", "3", check=False)
    assert p.returncode == 2 and "unknown option '--steps' for eval" in p.stderr
    _, data = argmax_data(tmp_path, 12)
    p = run(step, "train", *data, "--steps", "2", "--eval-every", "2", check=False)
    assert p.returncode == 2 and "--eval-every needs --eval-data" in p.stderr
    p = run(step, "train", *data, "--steps", "2", "--eval-data", f"x={tmp_path / 'x.npy'}",
            check=False)
    assert p.returncode == 1 and "--eval-data: missing data for input 'labels'" in p.stderr
    p = run(step, "eval", "--data", f"x={tmp_path / 'x.npy'}", "--data",
            f"labels={tmp_path / 'y.npy'}", "--checkpoint", tmp_path / "none", check=False)
    assert p.returncode == 1 and "--checkpoint: no checkpoint in" in p.stderr
    run(DISTOPT, "compile", torch_models / "train" / "model.onnx", "-o", tmp_path / "inf.dx")
    p = run(tmp_path / "inf.dx" / "inf", "eval", "--data", f"x={tmp_path / 'x.npy'}",
            check=False)
    assert p.returncode == 1 and "this bundle has no evaluation program" in p.stderr


def test_training_errors(torch_models, tmp_path):
    d = torch_models / "train"
    step = compile_step(torch_models, tmp_path, "sgd")
    x = tmp_path / "x.npy"
    np.save(x, RNG.standard_normal((12, 16)).astype(np.float32))
    y = tmp_path / "y.npy"
    np.save(y, np.zeros(12, np.int64))
    y5 = tmp_path / "y5.npy"
    np.save(y5, np.zeros(5, np.int64))
    xbad = tmp_path / "xbad.npy"
    np.save(xbad, np.zeros((12, 15), np.float32))
    yout = tmp_path / "yout.npy"
    np.save(yout, np.array([0, 3, -100, 7, 8, 1, 0, 0, 0, 0, 0, 0], np.int64))

    def train(*args):
        return run(step, "train", *args, check=False)

    cases = [
        (["--data", f"x={x}", "--steps", "2"], "missing data for input 'labels'"),
        (["--data", f"x={x}", "--data", f"labels={y}", "--data", f"z={y}", "--steps", "2"],
         "unknown data 'z'"),
        (["--data", f"x={x}", "--data", f"labels={y5}", "--steps", "2"],
         "has 5 samples, but 'x' has 12"),
        (["--data", f"x={xbad}", "--data", f"labels={y}", "--steps", "2"],
         "expected float32 [N, 16]"),
        (["--data", f"x={x}", "--data", f"labels={yout}", "--steps", "2"],
         "data 'labels': sample 4 has label 8, outside [0, 8) (the model's classes) and "
         "not the ignore index -100"),
        (["--data", f"x={x}", "--data", f"labels={y}"], "exactly one of --steps N and --epochs E"),
        (["--data", f"x={x}", "--data", f"labels={y}", "--steps", "2", "--lr", "fast"],
         "--lr expects a number"),
        (["--data", f"x={x}", "--data", f"labels={y}", "--steps", "3", "--lr", "1e30"],
         "at step"),
        (["--data", f"x={x}", "--data", f"labels={y}", "--steps", "4", "--lr", "1e30",
          "--checkpoint-dir", str(tmp_path / "nanck"), "--checkpoint-every", "1"],
         "; stopped; the last good checkpoint is step "),
    ]
    for args, message in cases:
        p = train(*args)
        assert p.returncode != 0, args
        assert message in p.stderr, (args, p.stderr)
    # An inference bundle has no train mode.
    run(DISTOPT, "compile", d / "model.onnx", "-o", tmp_path / "infer.dx")
    p = run(tmp_path / "infer.dx" / "infer", "train", "--data", f"x={x}", "--steps", "1",
            check=False)
    assert p.returncode == 1 and "is not a training step" in p.stderr


def test_train_flag(torch_models, tmp_path):
    """`distopt compile --train --loss ... --optimizer ...` (the issue's
    spelling) compiles the step; --train alone says what it needs."""
    model = torch_models / "train" / "model.onnx"
    run(DISTOPT, "compile", model, "--train", "--loss", "cross-entropy:logits", "--optimizer",
        "sgd", "-o", tmp_path / "t.dx")
    assert json.loads((tmp_path / "t.dx" / "manifest.json").read_text())["accumulate"] == 1
    p = run(DISTOPT, "compile", model, "--train", "-o", tmp_path / "u.dx", check=False)
    assert p.returncode == 1 and "--train compiles a training step: it needs --loss" in p.stderr


def test_optimizer_flag_errors(tmp_path):
    path = linear_model(tmp_path, "x")

    def compile_(*flags):
        return run(DISTOPT, "compile", path, "--loss", "cross-entropy", *flags, "-o",
                   tmp_path / "x.dx", check=False)

    p = compile_("--optimizer", "lamb")
    assert p.returncode == 1 and "unknown optimizer 'lamb'" in p.stderr
    p = compile_("--optimizer", "adam", "--nesterov")
    assert p.returncode == 1 and "--nesterov applies to --optimizer sgd" in p.stderr
    p = compile_("--optimizer", "sgd", "--freeze-weights", ".")
    assert p.returncode == 1 and "no gradients to apply" in p.stderr


@pytest.mark.parametrize("op,attrs", [
    ("Elu", {"alpha": 0.7}), ("Celu", {"alpha": 1.5}), ("Selu", {}), ("Softplus", {}),
    ("Softsign", {}), ("Mish", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("HardSwish", {}), ("ThresholdedRelu", {"alpha": 0.2}), ("PRelu", {}),
    ("ReduceLogSumExp", {}), ("ReduceL2", {}), ("ReduceMin", {}), ("ReduceSumSquare", {}),
    ("Sin", {}), ("Cos", {})])
def test_composed_ops_match_finite_differences(op, attrs, tmp_path):
    """Ops the importer writes with others (activations, reductions): their
    gradients come from the rules of the ops they are written with."""
    inputs = ["h"] + (["slope"] if op == "PRelu" else [])
    extra = {}
    if op.startswith("Reduce"):
        nodes = [helper.make_node("Constant", [], ["axes"],
                                  value=numpy_helper.from_array(np.array([1], np.int64))),
                 helper.make_node(op, ["h", "axes"], ["a"], keepdims=1)]
    else:
        nodes = [helper.make_node(op, inputs, ["a"], **attrs)]
        if op == "PRelu":
            extra["slope"] = numpy_helper.from_array(rand(5) * 0.3, "slope")
    nodes = ([helper.make_node("MatMul", ["x", "w"], ["h"])] + nodes +
             [helper.make_node("Mul", ["a", "c"], ["m"]),
              helper.make_node("ReduceSum", ["m"], ["loss"], keepdims=0)])
    out_cols = 1 if op.startswith("Reduce") else 5
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, [4, out_cols])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(rand(3, 5), "w"), *extra.values()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    feeds = {"x": rand(4, 3), "c": rand(4, out_cols)}
    loss, grads = distopt_gradients(model, feeds, tmp_path)
    numeric = numeric_gradients(model, feeds, set(grads))
    for name in grads:
        assert_close(grads[name], numeric[name], what=f"{op}: {name}")


@pytest.mark.parametrize("op", ["Elu", "Celu", "Selu"])
def test_exponential_branch_gradient_is_finite_for_large_inputs(op, tmp_path):
    """where(x < 0, alpha·(exp(x) − 1), x) computed with exp(x) would give
    NaN gradients where exp(x) overflows and the branch is not taken
    (0 · inf): the importer bounds it with exp(min(x, 0))."""
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node(op, ["h"], ["a"]),
         helper.make_node("ReduceSum", ["a"], ["loss"], keepdims=0)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.full((3, 4), 100.0, np.float32), "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    x = np.abs(rand(2, 3)) + 1.0  # h = x @ w >= 300: exp(h) is inf in f32
    loss, grads = distopt_gradients(model, {"x": x}, tmp_path)
    scale = 1.05070102214813232421875 if op == "Selu" else 1.0
    want = scale * x.T @ np.ones((2, 4), np.float32)
    np.testing.assert_allclose(grads["w"], want, rtol=1e-6)


def _ints(name, values):
    return helper.make_node("Constant", [], [name],
                            value=numpy_helper.from_array(np.array(values, np.int64)))


# op -> (nodes reading h [4, 5] and writing a, a's shape, extra initializers)
STRUCTURAL = {
    "CumSum": (lambda: [_ints("ax", 1), helper.make_node("CumSum", ["h", "ax"], ["a"])],
               [4, 5], {}),
    "CumSum-exclusive-reverse": (
        lambda: [_ints("ax", 0),
                 helper.make_node("CumSum", ["h", "ax"], ["a"], exclusive=1, reverse=1)],
        [4, 5], {}),
    "Tile": (lambda: [_ints("rep", [2, 3]), helper.make_node("Tile", ["h", "rep"], ["a"])],
             [8, 15], {}),
    "InstanceNormalization": (
        lambda: [_ints("s3", [2, 2, 5]), helper.make_node("Reshape", ["h", "s3"], ["h3"]),
                 helper.make_node("InstanceNormalization", ["h3", "scale", "bias"], ["a"],
                                  epsilon=1e-3)],
        [2, 2, 5], {"scale": [2], "bias": [2]}),
    "GroupNormalization": (
        lambda: [_ints("s3", [1, 4, 5]), helper.make_node("Reshape", ["h", "s3"], ["h3"]),
                 helper.make_node("GroupNormalization", ["h3", "scale", "bias"], ["a"],
                                  num_groups=2, epsilon=1e-3)],
        [1, 4, 5], {"scale": [2], "bias": [2]}),  # opset 18: per group
    "DepthToSpace": (
        lambda: [_ints("s4", [1, 4, 5, 1]), helper.make_node("Reshape", ["h", "s4"], ["h4"]),
                 helper.make_node("DepthToSpace", ["h4"], ["a"], blocksize=2, mode="CRD")],
        [1, 1, 10, 2], {}),
    "MeanVarianceNormalization": (
        lambda: [_ints("s4", [1, 4, 5, 1]), helper.make_node("Reshape", ["h", "s4"], ["h4"]),
                 helper.make_node("MeanVarianceNormalization", ["h4"], ["a"])],
        [1, 4, 5, 1], {}),
    "ScatterND": (
        lambda: [_ints("idx", [[3], [0]]),
                 helper.make_node("Slice", ["h", "st", "en"], ["rows"]),
                 helper.make_node("Mul", ["rows", "rows"], ["upd"]),
                 helper.make_node("ScatterND", ["h", "idx", "upd"], ["a"])],
        [4, 5], {}),
    # Reductions, a row receiving two updates (combined in layers).
    **{f"ScatterND-{r}": (
        lambda r=r: [_ints("idx", [[3], [0], [3]]),
                     helper.make_node("Slice", ["h", "st0", "en3"], ["rows"]),
                     helper.make_node("Mul", ["rows", "rows"], ["upd"]),
                     helper.make_node("ScatterND", ["h", "idx", "upd"], ["a"], reduction=r)],
        [4, 5], {}) for r in ("add", "mul", "max", "min")},
}


@pytest.mark.parametrize("case", list(STRUCTURAL))
def test_structural_ops_match_finite_differences(case, tmp_path):
    """Tile, CumSum, Instance/GroupNormalization, DepthToSpace,
    MeanVarianceNormalization and ScatterND (with its reductions) are
    written with reshapes,
    transposes, broadcasts, pads, slices, reductions and where: their
    gradients come from those ops' rules, checked here against finite
    differences."""
    build, out_shape, extra = STRUCTURAL[case]
    nodes = ([helper.make_node("MatMul", ["x", "w"], ["h"]),
              _ints("st", [1]), _ints("en", [3]), _ints("st0", [0]), _ints("en3", [3])] +
             build() +
             [helper.make_node("Mul", ["a", "c"], ["m"]),
              helper.make_node("ReduceSum", ["m"], ["loss"], keepdims=0)])
    inits = [numpy_helper.from_array(rand(3, 5), "w")]
    inits += [numpy_helper.from_array(rand(*shape, lo=0.5), name)
              for name, shape in extra.items()]
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, out_shape)],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    feeds = {"x": rand(4, 3), "c": rand(*out_shape)}
    loss, grads = distopt_gradients(model, feeds, tmp_path)
    assert set(grads) == {"w", *extra}
    numeric = numeric_gradients(model, feeds, set(grads))
    for name in grads:
        assert_close(grads[name], numeric[name], what=f"{case}: {name}")


def test_rounding_passes_no_gradient(tmp_path):
    """Floor, Ceil and Round are piecewise constant: the loss's gradient
    comes only through the path around them (PyTorch's is zero through
    them); a float Mod's (fmod) is 1 for the dividend and -trunc(a / b) for
    the divisor, as PyTorch's fmod has it."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Floor", ["h"], ["f"]), helper.make_node("Ceil", ["h"], ["c1"]),
             helper.make_node("Round", ["h"], ["r"]),
             helper.make_node("Mod", ["h", "d"], ["m"], fmod=1),
             helper.make_node("Sum", ["f", "c1", "r", "m", "h"], ["s"]),
             helper.make_node("Mul", ["s", "c"], ["p"]),
             helper.make_node("ReduceSum", ["p"], ["loss"], keepdims=0)]
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3]),
         helper.make_tensor_value_info("c", TensorProto.FLOAT, [4, 5])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(rand(3, 5), "w"),
         numpy_helper.from_array(np.full([5], 0.75, np.float32), "d")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    x, c = rand(4, 3), rand(4, 5)
    loss, grads = distopt_gradients(model, {"x": x, "c": c}, tmp_path)
    assert set(grads) == {"w", "d"}
    # d loss / d h = 2c (h itself and the Mod's dividend), so d / d w = 2 x^T c.
    np.testing.assert_allclose(grads["w"], 2 * x.T @ c, rtol=1e-5, atol=1e-6)
    h = x @ numpy_helper.to_array(g.initializer[0])
    np.testing.assert_allclose(grads["d"], -(c * np.trunc(h / 0.75)).sum(axis=0),
                               rtol=1e-5, atol=1e-5)
