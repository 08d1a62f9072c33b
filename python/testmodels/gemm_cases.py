"""GEMM models for the GEMM library calls' rules, for test_cuda_emulation.py
(emulated and on the CPU, against ONNX Runtime) and python/gpu/gpu_check.py
(on a GPU):
- epilogue_cases: GEMMs followed by the steps cuBLASLt's epilogues fuse
  (bias, residual, ReLU, GELU's tanh form), and by steps they do not;
- sixteen_bit_cases: f16 and bf16 GEMMs, whose operands BLAS reads as
  16-bit values (cuBLAS's tensor cores), and those it cannot."""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper


def epilogue_cases():
    """GEMMs followed by the steps cuBLASLt's epilogues fuse, and by steps
    it does not: (name, model, feeds, GEMM calls with an epilogue, plain GEMM
    calls)."""
    from onnx import TensorProto as T
    rng = np.random.default_rng(3)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    init = lambda name, a: numpy_helper.from_array(a, name)  # noqa: E731

    def model(nodes, x_shape, y_shape, inits, opset=17):
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", T.FLOAT, y_shape)],
                              list(inits))
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])

    def gelu_tanh(x, y, p):
        # GPT-2's NewGELU as torch exports it: 0.5 x (1 + tanh(c (x + 0.044715 x^3))).
        return [helper.make_node("Pow", [x, p + "three"], [p + "x3"]),
                helper.make_node("Mul", [p + "x3", p + "k"], [p + "kx3"]),
                helper.make_node("Add", [x, p + "kx3"], [p + "in"]),
                helper.make_node("Mul", [p + "in", p + "c"], [p + "s"]),
                helper.make_node("Tanh", [p + "s"], [p + "t"]),
                helper.make_node("Add", [p + "t", p + "one"], [p + "t1"]),
                helper.make_node("Mul", [x, p + "half"], [p + "h"]),
                helper.make_node("Mul", [p + "h", p + "t1"], [y])]

    def gelu_consts(p):
        return [init(p + n, np.array(v, np.float32)) for n, v in
                [("three", 3.0), ("k", 0.044715), ("c", 0.7978845608), ("one", 1.0),
                 ("half", 0.5)]]

    # An MLP: Gemm (transB) + bias + ReLU twice, then a Gemm with a bias.
    yield ("mlp_relu",
           model([helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
                  helper.make_node("Relu", ["h"], ["r"]),
                  helper.make_node("Gemm", ["r", "w2", "b2"], ["h2"], transB=1),
                  helper.make_node("Relu", ["h2"], ["r2"]),
                  helper.make_node("Gemm", ["r2", "w3", "b3"], ["y"], transB=1)],
                 [6, 40], [6, 10],
                 [init("w1", f(64, 40)), init("b1", f(64)), init("w2", f(32, 64)),
                  init("b2", f(32)), init("w3", f(10, 32)), init("b3", f(10))]),
           {"x": f(6, 40)}, 3, 0)
    # A transformer block's MLP: [2, 5, 24] @ [24, 96] + bias, GELU (tanh),
    # @ [96, 24] + bias + the residual.
    yield ("ffn_gelu_residual",
           model([helper.make_node("MatMul", ["x", "w1"], ["m1"]),
                  helper.make_node("Add", ["m1", "b1"], ["a1"]),
                  *gelu_tanh("a1", "g", "g_"),
                  helper.make_node("MatMul", ["g", "w2"], ["m2"]),
                  helper.make_node("Add", ["b2", "m2"], ["a2"]),
                  helper.make_node("Add", ["x", "a2"], ["y"])],
                 [2, 5, 24], [2, 5, 24],
                 [init("w1", f(24, 96) * 0.3), init("b1", f(96)), init("w2", f(96, 24) * 0.3),
                  init("b2", f(24)), *gelu_consts("g_")]),
           {"x": f(2, 5, 24)}, 2, 0)
    # Llama's projections: no bias, the residual only; and a ReLU without a
    # bias.
    yield ("residual_and_relu_without_bias",
           model([helper.make_node("MatMul", ["x", "w1"], ["m1"]),
                  helper.make_node("Add", ["m1", "x"], ["a1"]),
                  helper.make_node("MatMul", ["a1", "w2"], ["m2"]),
                  helper.make_node("Relu", ["m2"], ["y"])],
                 [7, 16], [7, 12],
                 [init("w1", f(16, 16)), init("w2", f(16, 12))]),
           {"x": f(7, 16)}, 2, 0)
    # Not fused: GELU with erf (not the library's GELU), a bias per row, a
    # scaled product (Gemm alpha), and a product read twice.
    yield ("left_alone",
           model([helper.make_node("MatMul", ["x", "w1"], ["m1"]),
                  helper.make_node("Add", ["m1", "b1"], ["a1"]),
                  helper.make_node("Gelu", ["a1"], ["g"]),
                  helper.make_node("MatMul", ["g", "w2"], ["m2"]),
                  helper.make_node("Add", ["m2", "rb"], ["a2"]),
                  helper.make_node("Gemm", ["a2", "w3", "b3"], ["m3"], alpha=0.5),
                  helper.make_node("Relu", ["m3"], ["r3"]),
                  helper.make_node("Add", ["r3", "m3"], ["y"])],
                 [8, 20], [8, 12],
                 [init("w1", f(20, 30)), init("b1", f(30)), init("w2", f(30, 12)),
                  init("rb", f(8, 1)), init("w3", f(12, 12)), init("b3", f(12))], opset=20),
           {"x": f(8, 20)}, 0, 3)



def sixteen_bit_cases():
    """(name, model, feeds, 16-bit GEMM calls, f32 GEMM calls). bf16 models
    have no ONNX Runtime kernels on the CPU: their reference is numpy's (see
    reference())."""
    from onnx import TensorProto as T
    rng = np.random.default_rng(5)

    def model(nodes, ins, outs, inits, ty):
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, ty, s)
                                           for n, s in ins],
                              [helper.make_tensor_value_info(n, ty, s) for n, s in outs],
                              list(inits))
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    f16 = lambda *s: rng.standard_normal(s).astype(np.float16)  # noqa: E731
    init = lambda name, a: numpy_helper.from_array(a, name)  # noqa: E731
    # An MLP (the second layer reads the first's ReLU, written in place of
    # its product), and x^T x (a transposed 16-bit operand).
    yield ("mlp_f16",
           model([helper.make_node("MatMul", ["x", "w1"], ["m"]),
                  helper.make_node("Add", ["m", "b1"], ["a"]),
                  helper.make_node("Relu", ["a"], ["r"]),
                  helper.make_node("MatMul", ["r", "w2"], ["m2"]),
                  helper.make_node("Add", ["m2", "b2"], ["y"]),
                  helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0]),
                  helper.make_node("MatMul", ["xt", "x"], ["z"])],
                 [("x", [8, 64])], [("y", [8, 16]), ("z", [64, 64])],
                 [init("w1", f16(64, 32) * 0.2), init("b1", f16(32)),
                  init("w2", f16(32, 16) * 0.2), init("b2", f16(16))], T.FLOAT16),
           {"x": f16(8, 64)}, 3, 0)
    # Attention's batched GEMMs: softmax(q k^T) v over [2, 3] heads.
    yield ("attention_f16",
           model([helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
                  helper.make_node("MatMul", ["q", "kt"], ["s"]),
                  helper.make_node("Softmax", ["s"], ["p"], axis=-1),
                  helper.make_node("MatMul", ["p", "v"], ["y"])],
                 [("q", [2, 3, 8, 16]), ("k", [2, 3, 8, 16]), ("v", [2, 3, 8, 16])],
                 [("y", [2, 3, 8, 16])], [], T.FLOAT16),
           {"q": f16(2, 3, 8, 16), "k": f16(2, 3, 8, 16), "v": f16(2, 3, 8, 16)}, 2, 0)
    # bf16 weights and activations.
    bits = lambda a: (np.asarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16)  # noqa: E731
    w = rng.standard_normal((24, 12)).astype(np.float32)
    wt = helper.make_tensor("w", T.BFLOAT16, [24, 12], bits(w).tobytes(), raw=True)
    yield ("linear_bf16",
           model([helper.make_node("MatMul", ["x", "w"], ["m"]),
                  helper.make_node("Relu", ["m"], ["y"])],
                 [("x", [5, 24])], [("y", [5, 12])], [wt], T.BFLOAT16),
           {"x": bits(rng.standard_normal((5, 24)))}, 1, 0)
    # A GEMM of an f16 and an f32 operand (Cast): stays f32.
    yield ("mixed_f32",
           model([helper.make_node("Cast", ["x"], ["xf"], to=T.FLOAT),
                  helper.make_node("MatMul", ["xf", "w"], ["m"]),
                  helper.make_node("Cast", ["m"], ["y"], to=T.FLOAT16)],
                 [("x", [4, 8])], [("y", [4, 6])],
                 [init("w", rng.standard_normal((8, 6)).astype(np.float32))], T.FLOAT16),
           {"x": f16(4, 8)}, 0, 1)


def bf16_to_f32(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """Round to nearest even, as distopt's truncf."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def reference(name, model, feeds):
    """The expected outputs: ONNX Runtime's, or for bf16 models (no CPU
    kernels there) numpy's in f32 rounded to bf16."""
    if name == "linear_bf16":
        w = next(i for i in model.graph.initializer if i.name == "w")
        wv = bf16_to_f32(np.frombuffer(w.raw_data, np.uint16).reshape(24, 12))
        m = f32_to_bf16(bf16_to_f32(feeds["x"]) @ wv)
        return {"y": f32_to_bf16(np.maximum(bf16_to_f32(m), 0))}
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds)))
