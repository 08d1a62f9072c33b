"""Fused attention (dopt.attention): the chain an exporter writes for scaled
dot-product attention, `MatMul(Softmax(Add?(Where?(Mul|Div(MatMul(q,
Transpose(k)))))), v)`, is one op computed over blocks of 256 keys with a
running maximum and sum, so the [.., Tq, Tk] scores are never stored. Each
case is checked against ONNX Runtime running the chain as exported, and the
compiled program is checked to be the fused one (and, past 256 keys, the
loop over blocks)."""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import cli
from cli import DISTOPT, run

pytestmark = pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")


def attention_model(b, h, tq, tk, d, dv, causal=False, bias=False, divide=False):
    """q [b, h, tq, d], k [b, h, tk, d], v [b, h, tk, dv] (and, with `bias`,
    an additive mask [b, 1, 1, tk]) -> y [b, h, tq, dv], as torch exports
    GPT-2's attention: scores scaled by a Mul (or a Div with `divide`), a
    causal mask by Where with -inf, the mask added, softmax over the keys."""
    inputs = [helper.make_tensor_value_info("q", TP.FLOAT, [b, h, tq, d]),
              helper.make_tensor_value_info("k", TP.FLOAT, [b, h, tk, d]),
              helper.make_tensor_value_info("v", TP.FLOAT, [b, h, tk, dv])]
    inits = []
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"])]
    if divide:
        inits.append(numpy_helper.from_array(np.array(np.sqrt(d), np.float32), "c"))
        nodes.append(helper.make_node("Div", ["s", "c"], ["scaled"]))
    else:
        inits.append(numpy_helper.from_array(np.array(1 / np.sqrt(d), np.float32), "c"))
        nodes.append(helper.make_node("Mul", ["s", "c"], ["scaled"]))
    last = "scaled"
    if causal:
        keep = np.tril(np.ones((tq, tk), bool), k=tk - tq)[None, None]
        inits += [numpy_helper.from_array(keep, "keep"),
                  numpy_helper.from_array(np.array(-np.inf, np.float32), "ninf")]
        nodes.append(helper.make_node("Where", ["keep", last, "ninf"], ["masked"]))
        last = "masked"
    if bias:
        inputs.append(helper.make_tensor_value_info("mask", TP.FLOAT, [b, 1, 1, tk]))
        nodes.append(helper.make_node("Add", [last, "mask"], ["biased"]))
        last = "biased"
    nodes += [helper.make_node("Softmax", [last], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["y"])]
    g = helper.make_graph(nodes, "attention", inputs,
                          [helper.make_tensor_value_info("y", TP.FLOAT, [b, h, tq, dv])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def feeds_for(model, rng, padded=0):
    """Random q, k, v; with a mask input, its last `padded` keys of the
    first sample masked (-1e9, as HuggingFace writes padding)."""
    feeds = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.name == "mask":
            m = np.zeros(shape, np.float32)
            if padded:
                m[0, ..., -padded:] = -1e9
            feeds[i.name] = m
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


CASES = {
    # name: (b, h, tq, tk, d, dv, causal, bias, divide)
    "one-block-causal": (2, 2, 16, 16, 8, 8, True, False, False),
    "blocks-and-tail-causal-mask": (1, 2, 600, 600, 16, 8, True, True, False),
    "cross-attention-divide": (2, 3, 5, 300, 8, 4, False, False, True),
    "exactly-two-blocks": (1, 1, 32, 512, 8, 8, False, True, True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_fused_attention_matches_onnxruntime(tmp_path, name):
    b, h, tq, tk, d, dv, causal, bias, divide = CASES[name]
    model = attention_model(b, h, tq, tk, d, dv, causal, bias, divide)
    path = tmp_path / "att.onnx"
    onnx.save(model, path)
    graph = run(DISTOPT, "compile", path, "--emit=graph", "-o", "-").stdout
    assert graph.count("dopt.attention") == 1 and "dopt.softmax" not in graph, graph
    linalg = run(DISTOPT, "compile", path, "--emit=linalg", "-o", "-").stdout
    # Two or more full blocks of 256 keys are a loop; one, and a last
    # partial block, are steps of their own.
    assert ("scf.for" in linalg) == (tk // 256 > 1), name
    feeds = feeds_for(model, np.random.default_rng(3), padded=7 if bias else 0)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    cli.compile_and_run(path, feeds, tmp_path)
    got = np.load(tmp_path / "out" / "y.npy")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_unfused_attention_is_the_same_program_as_exported(tmp_path):
    """--fuse-attention=false (for comparisons) keeps the exported chain, and
    computes the same."""
    model = attention_model(1, 2, 300, 300, 8, 8, causal=True)
    path = tmp_path / "att.onnx"
    onnx.save(model, path)
    graph = run(DISTOPT, "compile", path, "--fuse-attention=false", "--emit=graph",
                "-o", "-").stdout
    assert "dopt.attention" not in graph and "dopt.softmax" in graph
    feeds = feeds_for(model, np.random.default_rng(4))
    cli.compile_and_run(path, feeds, tmp_path / "fused")
    cli.compile_and_run(path, feeds, tmp_path / "plain", "--fuse-attention=false")
    fused = np.load(tmp_path / "fused" / "out" / "y.npy")
    plain = np.load(tmp_path / "plain" / "out" / "y.npy")
    np.testing.assert_allclose(fused, plain, rtol=1e-5, atol=1e-6)


def test_a_row_with_every_key_masked_is_nan_as_unfused(tmp_path):
    """A query whose keys are all masked has no softmax: NaN, in every block,
    as the exported chain gives (and ONNX Runtime); the other rows are
    unaffected by it."""
    model = attention_model(1, 1, 4, 600, 8, 8, causal=False, bias=True)
    # A keep mask false on the whole first query's row, before the additive
    # mask.
    keep = np.ones((1, 1, 4, 600), bool)
    keep[..., 0, :] = False
    g = model.graph
    g.initializer.extend([numpy_helper.from_array(keep, "keep"),
                          numpy_helper.from_array(np.array(-np.inf, np.float32), "ninf")])
    add = next(n for n in g.node if n.op_type == "Add")
    add.input[0] = "masked"
    idx = list(g.node).index(add)
    g.node.insert(idx, helper.make_node("Where", ["keep", "scaled", "ninf"], ["masked"]))
    path = tmp_path / "att.onnx"
    onnx.save(model, path)
    graph = run(DISTOPT, "compile", path, "--emit=graph", "-o", "-").stdout
    assert "dopt.attention" in graph
    feeds = feeds_for(model, np.random.default_rng(5))
    cli.compile_and_run(path, feeds, tmp_path / "fused")
    cli.compile_and_run(path, feeds, tmp_path / "plain", "--fuse-attention=false")
    fused = np.load(tmp_path / "fused" / "out" / "y.npy")
    plain = np.load(tmp_path / "plain" / "out" / "y.npy")
    assert np.isnan(fused[0, 0, 0]).all() and np.isnan(plain[0, 0, 0]).all()
    np.testing.assert_allclose(fused[0, 0, 1:], plain[0, 0, 1:], rtol=1e-5, atol=1e-6)


def test_fused_attention_under_tensor_and_data_parallelism(tmp_path):
    """The planner splits dopt.attention by its rule (heads and batch; the
    keys whole): dp 2 x tp 2 over four ranks computes what one process
    does."""
    model = attention_model(2, 4, 64, 64, 8, 8, causal=True, bias=True)
    path = tmp_path / "att.onnx"
    onnx.save(model, path)
    feeds = feeds_for(model, np.random.default_rng(6), padded=5)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    bundle = tmp_path / "att.dx"
    compiled = run(DISTOPT, "compile", path, "--cluster", "local:4", "--dp", 2, "--tp", 2,
                   "-o", bundle)
    assert "plan dp 2 x tp 2 x pp 1 = 4 ranks" in compiled.stdout
    args = []
    for k, v in feeds.items():
        np.save(tmp_path / f"{k}.npy", v)
        args += ["--input", f"{k}={tmp_path / (k + '.npy')}"]
    run(DISTOPT, "run", bundle, *args, "--output-dir", tmp_path / "out")
    got = np.load(tmp_path / "out" / "y.npy")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_bf16_attention_is_close_to_fp32(tmp_path):
    """In bf16 the products run in 16 bits and the softmax's statistics and
    the carried output in fp32 (FlashAttention's split): within bf16's
    precision of ONNX Runtime's fp32."""
    model = attention_model(1, 2, 300, 300, 16, 16, causal=True)
    path = tmp_path / "att.onnx"
    onnx.save(model, path)
    graph = run(DISTOPT, "compile", path, "--precision", "bf16", "--emit=graph",
                "-o", "-").stdout
    line = next(l for l in graph.splitlines() if "dopt.attention" in l)
    assert "(tensor<1x2x300x16xbf16>" in line and "-> tensor<1x2x300x16xbf16>" in line, line
    feeds = feeds_for(model, np.random.default_rng(7))
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    cli.compile_and_run(path, feeds, tmp_path, "--precision", "bf16")
    got = np.load(tmp_path / "out" / "y.npy")
    assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()


# The zoo's attention models (exported by torch 1.13 from torch and
# HuggingFace code) and how many attention chains each fuses. GPT-NeoX
# reshapes its scores between the scale and the mask, DeBERTa-v2 masks its
# probabilities after the softmax again, and Swin's shifted windows reshape
# theirs to add the window mask: those chains stay as exported.
ZOO_ATTENTION = {
    "torch_encoder_bf": 2, "torch_encoder_sf": 2, "torch_decoder_bf": 4,
    "torch_decoder_sf": 4, "hf_gpt2": 2, "hf_bert": 2, "hf_llama": 2, "hf_vit": 2,
    "hf_roberta": 2, "hf_t5": 6, "hf_swin": 2, "hf_gpt_neox": 0, "hf_deberta_v2": 0,
}


@pytest.mark.parametrize("name", list(ZOO_ATTENTION))
def test_fused_attention_equals_the_unfused_program_on_the_zoo(tmp_path, name):
    """Every zoo model with attention computes the same fused and as
    exported (within 1e-5 of the largest output in fp32), and fuses the
    chains it should."""
    import zoo
    model = zoo.materialize(name, tmp_path)
    dims = zoo.dim_args(name, 2)
    graph = run(DISTOPT, "compile", model, *dims, "--emit=graph", "-o", "-").stdout
    assert graph.count("= dopt.attention ") == ZOO_ATTENTION[name]
    feeds = zoo.inputs(name, 2)
    outs = {}
    for label, flags in (("fused", ()), ("plain", ("--fuse-attention=false",))):
        cli.compile_and_run(model, feeds, tmp_path / label, *dims, *flags)
        outs[label] = {p.name: np.load(p) for p in (tmp_path / label / "out").iterdir()}
    assert outs["fused"].keys() == outs["plain"].keys()
    for file, plain in outs["plain"].items():
        fused = outs["fused"][file]
        scale = max(float(np.abs(plain).max()), 1e-30)
        assert np.abs(fused - plain).max() <= 1e-5 * scale, file


def planned_bytes(model_path, *flags):
    """The bytes a compiled program allocates: the sum of its constant-size
    mallocs in the LLVM IR (the static memory plan's arena and the buffers
    of loops)."""
    ir = run(DISTOPT, "compile", model_path, *flags, "--emit=llvm", "-o", "-").stdout
    return sum(int(n) for n in re.findall(r"@malloc\(i64 (\d+)\)", ir))


def test_memory_grows_linearly_with_the_sequence(tmp_path):
    """Self-attention over T and 4T tokens (4 heads of 64): the fused
    program's memory grows 4x (the scores are held 256 keys at a time), the
    exported chain's 16x (the [4, T, T] scores)."""
    sizes = {}
    for t in (512, 2048):
        path = tmp_path / f"att{t}.onnx"
        onnx.save(attention_model(1, 4, t, t, 64, 64), path)
        sizes[t] = (planned_bytes(path), planned_bytes(path, "--fuse-attention=false"))
    fused, plain = (sizes[2048][i] / sizes[512][i] for i in (0, 1))
    assert 3.5 <= fused <= 4.5, sizes
    assert plain >= 12, sizes
    # And at 2048 tokens the fused program needs a fraction of the memory.
    assert sizes[2048][0] * 4 < sizes[2048][1], sizes


@pytest.mark.parametrize("keys,causal,bias", [(12, True, True), (300, False, True),
                                              (600, True, False)])
def test_fused_attention_gradients_match_finite_differences(tmp_path, keys, causal, bias):
    """The fused op's gradient (its probabilities recomputed from the query
    and key) against central differences of the exported chain in ONNX
    Runtime, for the query, key, value and additive mask as weights of a
    loss sum(y * r): one block, one block and a tail, a loop of blocks."""
    from gradcheck import assert_close, distopt_gradients, numeric_gradients
    rng = np.random.default_rng(keys)
    model = attention_model(1, 2, 8, keys, 4, 3, causal=causal, bias=bias)
    g = model.graph
    weights = {}
    for i in list(g.input):
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        weights[i.name] = (rng.standard_normal(shape) if i.name != "mask"
                           else 0.3 * rng.standard_normal(shape)).astype(np.float32)
        g.input.remove(i)
        g.initializer.append(numpy_helper.from_array(weights[i.name], i.name))
    r = rng.standard_normal((1, 2, 8, 3)).astype(np.float32)
    g.initializer.append(numpy_helper.from_array(r, "r"))
    g.node.extend([helper.make_node("Mul", ["y", "r"], ["yr"]),
                   helper.make_node("ReduceSum", ["yr"], ["loss"], keepdims=0)])
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("loss", TP.FLOAT, []))
    path = tmp_path / "att.onnx"
    onnx.save(model, path)
    graph = run(DISTOPT, "compile", path, "--gradients", "--emit=graph", "-o", "-").stdout
    assert "= dopt.attention " in graph and "dopt.softmax" not in graph
    loss, grads = distopt_gradients(model, {}, tmp_path / "d")
    numeric = numeric_gradients(model, {}, set(weights))
    for name in weights:
        assert grads[name].shape == weights[name].shape
        assert_close(grads[name], numeric[name], what=f"d loss / d {name}")


def onnx_attention_model(kv_heads=4, causal=False, mask=None, tq=16, tk=16):
    """ONNX's own Attention (opset 23): q [2, 4, tq, 8], k and v [2,
    kv_heads, tk, 8] (grouped-query heads when kv_heads < 4), optionally
    causal and with a boolean or float attn_mask [tq, tk]."""
    ins = [helper.make_tensor_value_info("q", TP.FLOAT, [2, 4, tq, 8]),
           helper.make_tensor_value_info("k", TP.FLOAT, [2, kv_heads, tk, 8]),
           helper.make_tensor_value_info("v", TP.FLOAT, [2, kv_heads, tk, 8])]
    names = ["q", "k", "v"]
    if mask is not None:
        ins.append(helper.make_tensor_value_info(
            "mask", TP.BOOL if mask == "bool" else TP.FLOAT, [tq, tk]))
        names.append("mask")
    node = helper.make_node("Attention", names, ["y"], is_causal=int(causal))
    g = helper.make_graph([node], "g", ins,
                          [helper.make_tensor_value_info("y", TP.FLOAT, [2, 4, tq, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    return m


@pytest.mark.parametrize("form", ["plain", "gqa", "causal", "bool-mask", "float-mask",
                                  "causal-long"])
def test_onnx_attention_fuses_and_computes_as_unfused(tmp_path, form):
    """ONNX Attention, as the importer writes it (q and k scaled by the
    square root of the scale; a mask added as a bias, the rows it masks
    whole zeroed after the softmax), fuses into one op, and computes what
    the unfused program does (whose Attention is checked against ONNX's
    reference in test_recurrent_attention.py), including a row whose every
    key the mask hides."""
    tq = tk = 300 if form == "causal-long" else 16
    model = onnx_attention_model(
        kv_heads=2 if form == "gqa" else 4, causal=form.startswith("causal"),
        mask={"bool-mask": "bool", "float-mask": "float"}.get(form), tq=tq, tk=tk)
    path = tmp_path / "att.onnx"
    onnx.save(model, path)
    graph = run(DISTOPT, "compile", path, "--emit=graph", "-o", "-").stdout
    assert graph.count("= dopt.attention ") == 1 and "dopt.softmax" not in graph, graph
    rng = np.random.default_rng(8)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
             .astype(np.float32) for i in model.graph.input if i.name != "mask"}
    if form == "bool-mask":
        feeds["mask"] = rng.random((tq, tk)) > 0.3
        feeds["mask"][3] = False  # a query that sees no key
    elif form == "float-mask":
        feeds["mask"] = np.where(rng.random((tq, tk)) > 0.3, 0.0, -np.inf).astype(np.float32)
        feeds["mask"][5] = -np.inf
    cli.compile_and_run(path, feeds, tmp_path / "fused")
    cli.compile_and_run(path, feeds, tmp_path / "plain", "--fuse-attention=false")
    fused = np.load(tmp_path / "fused" / "out" / "y.npy")
    plain = np.load(tmp_path / "plain" / "out" / "y.npy")
    assert not np.isnan(plain).any()
    np.testing.assert_allclose(fused, plain, rtol=1e-5, atol=1e-5 * np.abs(plain).max())


def test_fused_attention_on_the_gpu_targets(tmp_path):
    """The loop over blocks of keys stays on the host (its products are
    library calls) and launches the kernels of each step: cuda-emu computes
    what ONNX Runtime does, and the CUDA target compiles and assembles it."""
    from test_cuda import HAVE_CUDA
    model = attention_model(1, 2, 600, 600, 16, 8, causal=True, bias=True)
    path = tmp_path / "att.onnx"
    onnx.save(model, path)
    feeds = feeds_for(model, np.random.default_rng(9), padded=7)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    cli.compile_and_run(path, feeds, tmp_path / "emu", "--target", "cuda-emu")
    got = np.load(tmp_path / "emu" / "out" / "y.npy")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    if HAVE_CUDA:
        gpu = run(DISTOPT, "compile", path, "--target", "cuda", "--emit=gpu", "-o", "-").stdout
        loop = gpu[gpu.index("scf.for"):]
        assert "gpu.launch_func" in loop and "call @dort_batch_matmul_f32" in loop
        run(DISTOPT, "compile", path, "--target", "cuda", "-o", tmp_path / "att.dx")
        assert (tmp_path / "att.dx" / "att").exists()
