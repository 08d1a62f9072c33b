"""The ops the importer writes with others (2026-11-27) against ONNX Runtime
on inputs the ONNX node tests leave out: NaN, zeros in products, integer
types, other axes, run-time lengths and write positions, the edges of the
integer quantized ops (NaN, int32 overflow, a large bias). Each case is one
small model compiled for the CPU (the kernels are the ones the node tests
and cuda-emu suites run)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import cli
from cli import DISTOPT

pytestmark = pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")
RNG = np.random.default_rng(17)


def model_of(nodes, feeds, opset, outputs, inits=()):
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
         for k, v in feeds.items()],
        [helper.make_tensor_value_info(o, TP.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def compare(outputs, want, tmp_path, exact, tol):
    """The run's outputs (tmp_path/out) against `want`: exactly for integers
    (or when `exact`), else within tol of the largest magnitude."""
    for name, w in zip(outputs, want):
        got = np.load(tmp_path / "out" / f"{name}.npy")
        assert got.dtype == w.dtype and got.shape == w.shape, name
        if exact or not np.issubdtype(w.dtype, np.floating):
            np.testing.assert_array_equal(got, w, err_msg=name)
        else:
            np.testing.assert_allclose(got, w, rtol=tol, atol=tol * float(np.abs(w).max()),
                                       err_msg=name)


def check(nodes, feeds, tmp_path, opset=21, inits=(), outputs=("y",), exact=False, tol=1e-5):
    """Compiles the graph of `nodes` (inputs `feeds`, constant `inits`),
    runs it, and compares each output with ONNX Runtime's."""
    m = onnx.shape_inference.infer_shapes(model_of(nodes, feeds, opset, outputs, inits))
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    cli.compile_and_run(path, feeds, tmp_path)
    compare(outputs, want, tmp_path, exact, tol)


def test_hardmax_and_argmax_pass_over_nan(tmp_path):
    """A NaN inside a row is passed over (ONNX Runtime's result; with a NaN
    first, its result depends on its loop and is left out)."""
    x = np.array([[1, np.nan, 3, 2], [-1, np.nan, -1, np.nan], [5, 5, 0, 1]], np.float32)
    check([helper.make_node("Hardmax", ["x"], ["y"], axis=1),
           helper.make_node("ArgMax", ["x"], ["i"], axis=1, keepdims=0),
           helper.make_node("ArgMin", ["x"], ["j"], axis=1, keepdims=0)],
          {"x": x}, tmp_path, outputs=("y", "i", "j"))


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_products_with_zeros(dtype, tmp_path):
    x = RNG.integers(-3, 4, (3, 5, 4)).astype(dtype)
    x[1, 2, 3] = 0
    axes = numpy_helper.from_array(np.array([1], np.int64), "ax")
    check([helper.make_node("Constant", [], ["ax"], value=axes),
           helper.make_node("ReduceProd", ["x", "ax"], ["y"], keepdims=0),
           helper.make_node("CumSum", ["x", "ax"], ["s"], reverse=1),
           helper.make_node("ReduceProd", ["x"], ["all"])],
          {"x": x}, tmp_path, opset=18, outputs=("y", "s", "all"))


def test_lp_pool_ceil_mode_and_dilations(tmp_path):
    x = RNG.standard_normal((2, 3, 7, 6)).astype(np.float32)
    check([helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 2],
                            pads=[1, 0, 1, 1], p=3, ceil_mode=1),
           helper.make_node("LpPool", ["x"], ["z"], kernel_shape=[2, 2], dilations=[2, 1],
                            pads=[1, 0, 1, 1])],
          {"x": x}, tmp_path, opset=22, outputs=("y", "z"))


def test_reverse_sequence_run_time_lengths(tmp_path):
    x = RNG.standard_normal((5, 3, 2)).astype(np.float32)
    check([helper.make_node("ReverseSequence", ["x", "n"], ["y"], time_axis=0, batch_axis=1)],
          {"x": x, "n": np.array([5, 1, 3], np.int64)}, tmp_path)


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_kv_cache(mode, tmp_path):
    cache = RNG.standard_normal((2, 3, 8, 4)).astype(np.float32)
    update = RNG.standard_normal((2, 3, 3, 4)).astype(np.float32)
    starts = np.array([5, 1] if mode == "linear" else [6, 7], np.int64)
    check([helper.make_node("TensorScatter", ["c", "u", "w"], ["y"], mode=mode)],
          {"c": cache, "u": update, "w": starts}, tmp_path, opset=24)


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_into_grid_sample(align, tmp_path):
    theta = RNG.standard_normal((2, 2, 3)).astype(np.float32) * 0.5
    x = RNG.standard_normal((2, 3, 5, 6)).astype(np.float32)
    size = numpy_helper.from_array(np.array([2, 3, 4, 7], np.int64), "size")
    check([helper.make_node("Constant", [], ["size"], value=size),
           helper.make_node("AffineGrid", ["t", "size"], ["g"], align_corners=align),
           helper.make_node("GridSample", ["x", "g"], ["y"], align_corners=align)],
          {"t": theta, "x": x}, tmp_path, opset=20, outputs=("g", "y"))


def test_affine_grid_3d(tmp_path):
    theta = RNG.standard_normal((1, 3, 4)).astype(np.float32)
    size = numpy_helper.from_array(np.array([1, 1, 2, 3, 4], np.int64), "size")
    check([helper.make_node("Constant", [], ["size"], value=size),
           helper.make_node("AffineGrid", ["t", "size"], ["y"])],
          {"t": theta}, tmp_path, opset=20)


def test_col2im_strides_dilations_pads(tmp_path):
    # Blocks 2x3 with dilations (2, 1), strides (1, 2), pads over a 5x6 image.
    image = numpy_helper.from_array(np.array([5, 6], np.int64), "image")
    block = numpy_helper.from_array(np.array([2, 3], np.int64), "block")
    hp, wp = 5 + 1 + 0, 6 + 1 + 1
    oh, ow = (hp - (2 * 1 + 1)) // 1 + 1, (wp - 3) // 2 + 1
    x = RNG.standard_normal((2, 2 * 6, oh * ow)).astype(np.float32)
    check([helper.make_node("Constant", [], ["image"], value=image),
           helper.make_node("Constant", [], ["block"], value=block),
           helper.make_node("Col2Im", ["x", "image", "block"], ["y"], dilations=[2, 1],
                            strides=[1, 2], pads=[1, 1, 0, 1])],
          {"x": x}, tmp_path, opset=18)


def test_quantize_nan_saturates_low(tmp_path):
    x = np.array([np.nan, 1.0, -np.inf, np.inf], np.float32)
    check([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"]),
           helper.make_node("QuantizeLinear", ["x", "s", "w"], ["v"])],
          {"x": x}, tmp_path, inits=[("s", np.float32(0.5)), ("z", np.int8(3)),
                                     ("w", np.int16(-4))], outputs=("y", "v"))


@pytest.mark.parametrize("x", [np.zeros(4, np.float32),
                               np.array([np.nan, 2.0, -1.0, np.nan], np.float32),
                               np.array([0.5, 2.0, 7.25, 3.0], np.float32)])
def test_dynamic_quantize_as_onnx_runtime(x, tmp_path):
    check([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])],
          {"x": x}, tmp_path, outputs=("y", "s", "z"), exact=True)


def test_matmul_integer_wraps_past_int32(tmp_path):
    # 40000 products of 255 · 255 pass 2^31: summed exactly (f64), wrapped.
    a = np.full((1, 40000), 255, np.uint8)
    b = np.full((40000, 2), 255, np.uint8)
    b[:5, 1] = 0
    check([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], {"a": a, "b": b}, tmp_path)


@pytest.mark.parametrize("bias,taps", [(16973785, 38), (16973787, 35)])
def test_qlinear_conv_large_bias_stays_exact(bias, taps, tmp_path):
    """A bias past 2^24 plus the taps' sum, requantized: exact in f64."""
    x = np.full((1, taps, 1, 1), 11, np.uint8)
    check([helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "B"],
                            ["y"])],
          {"x": x}, tmp_path, opset=13,
          inits=[("xs", np.float32(1.0)), ("xz", np.uint8(10)),
                 ("w", np.ones((1, taps, 1, 1), np.int8)), ("ws", np.float32(2.0 ** -17)),
                 ("wz", np.int8(0)), ("ys", np.float32(1.0)), ("yz", np.uint8(0)),
                 ("B", np.array([bias], np.int32))])


def dft_model(x_shape, attrs, inputs=("x",), opset=20, axis=None, length=None):
    nodes, names = [], ["x", "", ""]
    if length is not None:
        nodes.append(helper.make_node("Constant", [], ["n"],
                                      value=numpy_helper.from_array(np.array(length, np.int64))))
        names[1] = "n"
    if axis is not None:
        nodes.append(helper.make_node("Constant", [], ["a"],
                                      value=numpy_helper.from_array(np.array(axis, np.int64))))
        names[2] = "a"
    nodes.append(helper.make_node("DFT", names, ["y"], **attrs))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def as_complex(y):
    return y[..., 0] + 1j * y[..., 1] if y.shape[-1] == 2 else y[..., 0]


@pytest.mark.parametrize("case", ["forward_real", "inverse_complex", "rfft_padded",
                                  "rfft_cut", "irfft_odd"])
def test_dft_matches_numpy(case, tmp_path):
    """DFT against numpy.fft: real and complex inputs, inverse, one-sided
    with dft_length padding or cutting the signal, the inverse one-sided
    transform (irfft) of odd length."""
    real = RNG.standard_normal((2, 12, 3, 1)).astype(np.float32)
    cplx = RNG.standard_normal((2, 12, 3, 2)).astype(np.float32)
    spec = {
        "forward_real": (real, {}, 1, None, lambda z: np.fft.fft(z, axis=1)),
        "inverse_complex": (cplx, {"inverse": 1}, 2, None, lambda z: np.fft.ifft(z, axis=2)),
        "rfft_padded": (real, {"onesided": 1}, 1, 16, lambda z: np.fft.rfft(z, n=16, axis=1)),
        "rfft_cut": (real, {"onesided": 1}, -3, 10, lambda z: np.fft.rfft(z, n=10, axis=1)),
        "irfft_odd": (cplx[:, :7], {"inverse": 1, "onesided": 1}, 1, 9,
                      lambda z: np.fft.irfft(z, n=9, axis=1)),
    }[case]
    x, attrs, axis, length, fn = spec
    m = dft_model(list(x.shape), attrs, axis=axis, length=length)
    path = tmp_path / "dft.onnx"
    onnx.save(m, path)
    cli.compile_and_run(path, {"x": x}, tmp_path)
    got = as_complex(np.load(tmp_path / "out" / "y.npy").astype(np.float64))
    want = fn(as_complex(x.astype(np.float64)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("window", [True, False])
def test_stft_matches_onnx_runtime(window, tmp_path):
    signal = RNG.standard_normal((2, 200, 1)).astype(np.float32)
    step = numpy_helper.from_array(np.array(24, np.int64), "step")
    nodes = [helper.make_node("Constant", [], ["step"], value=step)]
    if window:
        hann = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(64) / 64)).astype(np.float32)
        nodes += [helper.make_node("Constant", [], ["w"], value=numpy_helper.from_array(hann)),
                  helper.make_node("STFT", ["s", "step", "w"], ["y"], onesided=1)]
    else:
        nodes += [helper.make_node("Constant", [], ["len"],
                                   value=numpy_helper.from_array(np.array(50, np.int64))),
                  helper.make_node("STFT", ["s", "step", "", "len"], ["y"], onesided=0)]
    check(nodes, {"s": signal}, tmp_path, opset=17, tol=1e-4)


def check_reference(nodes, feeds, tmp_path, opset, outputs=("y",), tol=1e-5, flags=(),
                    exact=False):
    """As `check`, against ONNX's reference evaluator: for what ONNX Runtime
    1.32 does not have (the opset-27 ops, BitCast of booleans)."""
    from onnx.reference import ReferenceEvaluator
    m = model_of(nodes, feeds, opset, outputs)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    want = ReferenceEvaluator(m).run(None, feeds)
    cli.compile_and_run(path, feeds, tmp_path, *flags)
    compare(outputs, want, tmp_path, exact, tol)


@pytest.mark.parametrize("dtype,to", [
    (np.float16, TP.INT16), (np.uint64, TP.DOUBLE), (np.int32, TP.UINT32),
    (np.bool_, TP.INT8), (np.uint8, TP.BOOL)])
def test_bitcast_as_onnx_runtime(dtype, to, tmp_path):
    """The bits unchanged: NaN payloads, the sign bit, -0, the top bit of an
    unsigned value; a boolean's byte (ONNX Runtime has no BitCast of
    booleans: those against ONNX's reference, NumPy's view)."""
    if dtype == np.float16:
        x = np.array([[1.0, -0.0, np.inf], [np.nan, -2.5, 65504]], np.float16)
    elif dtype == np.bool_:
        x = np.array([[True, False, True], [False, False, True]])
    elif dtype == np.uint8:
        x = np.array([[0, 1, 0], [1, 1, 0]], np.uint8)
    else:
        x = RNG.integers(0, np.iinfo(dtype).max, (2, 3), dtype=dtype, endpoint=True)
    node = helper.make_node("BitCast", ["x"], ["y"], to=to)
    if x.dtype == np.bool_ or to == TP.BOOL:
        check_reference([node], {"x": x}, tmp_path, opset=26, exact=True)
    else:
        check([node], {"x": x}, tmp_path, opset=26, exact=True)


@pytest.mark.parametrize("periodic,dtype", [(1, TP.DOUBLE), (0, TP.FLOAT16), (1, TP.INT32)])
def test_windows_as_onnx_runtime(periodic, dtype, tmp_path):
    n = numpy_helper.from_array(np.array(10, np.int64), "n")
    check([helper.make_node("Constant", [], ["n"], value=n),
           helper.make_node("HannWindow", ["n"], ["y"], periodic=periodic, output_datatype=dtype),
           helper.make_node("HammingWindow", ["n"], ["h"], periodic=periodic,
                            output_datatype=dtype),
           helper.make_node("BlackmanWindow", ["n"], ["b"], periodic=periodic,
                            output_datatype=dtype)],
          {}, tmp_path, opset=17, outputs=("y", "h", "b"), tol=1e-3 if dtype == TP.FLOAT16 else 1e-6)


@pytest.mark.parametrize("bins,dft,rate,lo,hi", [
    (8, 64, 16000, 0.0, 8000.0), (20, 512, 22050, 30.0, 7600.0), (3, 16, 8000, 100.0, 1000.0)])
def test_mel_weight_matrix_as_onnx_runtime(bins, dft, rate, lo, hi, tmp_path):
    consts = [("m", np.array(bins, np.int64)), ("d", np.array(dft, np.int64)),
              ("r", np.array(rate, np.int64)), ("lo", np.array(lo, np.float32)),
              ("hi", np.array(hi, np.float32))]
    check([helper.make_node("Constant", [], [k], value=numpy_helper.from_array(v, k))
           for k, v in consts] +
          [helper.make_node("MelWeightMatrix", [k for k, _ in consts], ["y"])],
          {}, tmp_path, opset=17, exact=True)


@pytest.mark.parametrize("k,past,act,dtype", [(4, True, "silu", np.float64), (2, False, "none", np.float32),
                                              (6, True, "none", np.float32)])
def test_causal_conv_with_state_as_reference(k, past, act, dtype, tmp_path):
    """Other kernels, f64, and a state carried: present_state is the last
    k - 1 positions of [past, input]."""
    feeds = {"x": RNG.standard_normal((3, 5, 7)).astype(dtype),
             "w": RNG.standard_normal((5, 1, k)).astype(dtype),
             "b": RNG.standard_normal(5).astype(dtype)}
    if past:
        feeds["p"] = RNG.standard_normal((3, 5, k - 1)).astype(dtype)
    check_reference([helper.make_node("CausalConvWithState", ["x", "w", "b", "p" if past else ""],
                                      ["y", "s"], activation=act)],
                    feeds, tmp_path, opset=27, outputs=("y", "s"))


@pytest.mark.parametrize("rule,heads,decay,beta,past,target", [
    ("gated_delta", (6, 2), "head", "one", True, "cpu"),
    ("delta", (4, 4), None, "heads", False, "cpu"),
    ("gated", (4, 1), "key", None, True, "cpu"),
    ("linear", (2, 2), None, None, True, "cpu"),
    ("gated_delta", (4, 2), "key", "heads", True, "cuda-emu")])
def test_linear_attention_as_reference(rule, heads, decay, beta, past, target, tmp_path):
    """Seven tokens (a prefill), grouped queries, per-head decay, beta per
    head or shared, a carried state; and under cuda-emu (its batched
    products are GPU kernels)."""
    hq, hkv = heads
    b, t, dk, dv = 2, 7, 4, 3
    feeds = {"q": RNG.standard_normal((b, t, hq * dk)).astype(np.float32),
             "k": (RNG.standard_normal((b, t, hkv * dk)) / 2).astype(np.float32),
             "v": RNG.standard_normal((b, t, hkv * dv)).astype(np.float32)}
    names = ["q", "k", "v", "", "", ""]
    if past:
        feeds["s"] = RNG.standard_normal((b, hkv, dk, dv)).astype(np.float32)
        names[3] = "s"
    if decay:
        feeds["g"] = -RNG.random((b, t, hkv * dk if decay == "key" else hkv)).astype(np.float32)
        names[4] = "g"
    if beta:
        feeds["be"] = RNG.random((b, t, hkv if beta == "heads" else 1)).astype(np.float32)
        names[5] = "be"
    while names[-1] == "":
        names.pop()
    flags = ("--target", target) if target != "cpu" else ()
    check_reference([helper.make_node("LinearAttention", names, ["y", "state"], update_rule=rule,
                                      q_num_heads=hq, kv_num_heads=hkv)],
                    feeds, tmp_path, opset=27, outputs=("y", "state"), tol=1e-4, flags=flags)


def test_pad_wrap_as_onnx_runtime(tmp_path):
    """Circular padding (opset 19): pads beyond the extent wrap again, on
    the axes given (one negative)."""
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    pads = numpy_helper.from_array(np.array([4, 1, 0, 5], np.int64), "p")
    axes = numpy_helper.from_array(np.array([1, -1], np.int64), "a")
    check([helper.make_node("Constant", [], ["p"], value=pads),
           helper.make_node("Constant", [], ["a"], value=axes),
           helper.make_node("Pad", ["x", "p", "", "a"], ["y"], mode="wrap")],
          {"x": x}, tmp_path, opset=21, exact=True)
