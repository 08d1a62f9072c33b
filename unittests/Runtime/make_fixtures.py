#!/usr/bin/env python3
"""Regenerates Fixtures.inc: .npy and TensorProto bytes written by NumPy and
ONNX themselves, embedded in the runtime's unit tests so the tests need no
Python. Run: /work/main/.venv/bin/python unittests/Runtime/make_fixtures.py
"""
import io
import os

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def npy(arr, version=None):
    b = io.BytesIO()
    if version is None:
        np.save(b, arr)
    else:
        np.lib.format.write_array(b, arr, version=version)
    return b.getvalue()


def arange(shape, dtype):
    n = int(np.prod(shape)) if shape else 1
    return np.arange(n).reshape(shape).astype(dtype)


fixtures = []  # (name, bytes, comment)

# --- .npy --------------------------------------------------------------------
fixtures.append(("npy_f32_2x3", npy(arange((2, 3), np.float32)), "np.save(np.arange(6, dtype=float32).reshape(2, 3))"))
fixtures.append(("npy_f64_3", npy(np.array([0.5, -1.25, 1e300])), "np.save(np.array([0.5, -1.25, 1e300]))"))
fixtures.append(("npy_f16_2x2", npy(np.array([[1.0, -2.0], [0.5, 65504.0]], np.float16)), "float16 [[1, -2], [0.5, 65504]]"))
fixtures.append(("npy_bf16_3", npy(np.array([1.0, -2.0, 0.5], ml_dtypes.bfloat16)), "ml_dtypes.bfloat16 [1, -2, 0.5] (descr '<V2')"))
fixtures.append(("npy_i8_4", npy(np.array([-128, -1, 0, 127], np.int8)), "int8 [-128, -1, 0, 127]"))
fixtures.append(("npy_i16_3", npy(np.array([-32768, 7, 32767], np.int16)), "int16 [-32768, 7, 32767]"))
fixtures.append(("npy_i32_2x2", npy(np.array([[-5, 6], [2**31 - 1, -2**31]], np.int32)), "int32 [[-5, 6], [2**31-1, -2**31]]"))
fixtures.append(("npy_i64_2", npy(np.array([-(2**62), 2**40 + 3], np.int64)), "int64 [-(2**62), 2**40 + 3]"))
fixtures.append(("npy_u8_3", npy(np.array([0, 200, 255], np.uint8)), "uint8 [0, 200, 255]"))
fixtures.append(("npy_bool_2x2", npy(np.array([[True, False], [False, True]])), "bool [[True, False], [False, True]]"))
fixtures.append(("npy_f32_scalar", npy(np.array(3.5, np.float32)), "0-d float32 3.5"))
fixtures.append(("npy_f32_0x3", npy(np.zeros((0, 3), np.float32)), "float32 shape (0, 3)"))
fixtures.append(("npy_f32_fortran_2x3", npy(np.asfortranarray(arange((2, 3), np.float32))), "Fortran-order arange(6).reshape(2, 3)"))
fixtures.append(("npy_f32_fortran_2x3x4", npy(np.asfortranarray(arange((2, 3, 4), np.float32))), "Fortran-order arange(24).reshape(2, 3, 4)"))
fixtures.append(("npy_i32_bigendian_2x2", npy(np.array([[1, -2], [3, 70000]], ">i4")), "big-endian >i4 [[1, -2], [3, 70000]]"))
fixtures.append(("npy_f32_v2_2x3", npy(arange((2, 3), np.float32), version=(2, 0)), "format 2.0, arange(6).reshape(2, 3)"))
fixtures.append(("npy_f32_v3_2x3", npy(arange((2, 3), np.float32), version=(3, 0)), "format 3.0, arange(6).reshape(2, 3)"))
fixtures.append(("npy_u16_2", npy(np.array([1, 65535], np.uint16)), "uint16 [1, 65535]"))
fixtures.append(("npy_u32_2", npy(np.array([0, 2**32 - 1], np.uint32)), "uint32 [0, 2**32-1]"))
fixtures.append(("npy_u64_2", npy(np.array([2**63, 2**64 - 1], np.uint64)), "uint64 [2**63, 2**64-1]"))
fixtures.append(("npy_c64_1", npy(np.array([1 + 2j], np.complex64)), "complex64 (unsupported)"))
fixtures.append(("npy_i8_12345x0", npy(np.zeros((12345, 0), np.int8)), "int8 shape (12345, 0)"))
fixtures.append(("npy_structured_1", npy(np.zeros(1, dtype=[("a", "<f4"), ("b", "<i4")])), "structured (unsupported)"))

# --- TensorProto ---------------------------------------------------------------
def ser(t):
    return t.SerializeToString()

fixtures.append(("pb_f32_2x3_raw", ser(numpy_helper.from_array(arange((2, 3), np.float32), name="x")), "from_array(arange(6, float32).reshape(2, 3), name='x'): raw_data"))
fixtures.append(("pb_f32_2x2_float_data", ser(helper.make_tensor("f", TensorProto.FLOAT, [2, 2], [1.0, -2.0, 3.5, 4.0])), "make_tensor FLOAT [2, 2]: packed float_data"))
fixtures.append(("pb_i64_3_int64_data", ser(helper.make_tensor("i", TensorProto.INT64, [3], [-7, 0, 2**40])), "make_tensor INT64 [3]: packed int64_data"))
fixtures.append(("pb_i32_3_int32_data", ser(helper.make_tensor("j", TensorProto.INT32, [3], [-1, 2**31 - 1, -2**31])), "make_tensor INT32 [3]: packed int32_data"))
fixtures.append(("pb_i8_2_int32_data", ser(helper.make_tensor("k", TensorProto.INT8, [2], [-128, 5])), "make_tensor INT8 [2]: int32_data"))
fixtures.append(("pb_bool_3_int32_data", ser(helper.make_tensor("b", TensorProto.BOOL, [3], [True, False, True])), "make_tensor BOOL [3]: int32_data"))
fixtures.append(("pb_f16_2_int32_data", ser(helper.make_tensor("h", TensorProto.FLOAT16, [2], np.array([1.0, -2.0], np.float16))), "make_tensor FLOAT16 [2]: bit patterns in int32_data"))
fixtures.append(("pb_bf16_2_int32_data", ser(helper.make_tensor("g", TensorProto.BFLOAT16, [2], [1.0, -2.0])), "make_tensor BFLOAT16 [2]: bit patterns in int32_data"))
fixtures.append(("pb_f64_2_double_data", ser(helper.make_tensor("d", TensorProto.DOUBLE, [2], [0.25, -1e300])), "make_tensor DOUBLE [2]: packed double_data"))
fixtures.append(("pb_i16_2x2_raw", ser(helper.make_tensor("r", TensorProto.INT16, [2, 2], np.array([1, -2, 3, -4], np.int16).tobytes(), raw=True)), "make_tensor INT16 [2, 2] raw=True"))
fixtures.append(("pb_i64_scalar_raw", ser(numpy_helper.from_array(np.array(42, np.int64))), "from_array 0-d int64 42 (no name)"))
fixtures.append(("pb_f32_0_raw", ser(numpy_helper.from_array(np.zeros((0,), np.float32), name="e")), "from_array float32 shape (0,)"))
fixtures.append(("pb_bool_2_raw", ser(numpy_helper.from_array(np.array([True, False]), name="bb")), "from_array bool [True, False]"))
fixtures.append(("pb_u8_3_raw", ser(numpy_helper.from_array(np.array([1, 2, 255], np.uint8), name="u")), "from_array uint8 [1, 2, 255]"))
ext = helper.make_tensor("w", TensorProto.FLOAT, [2], [0.0, 0.0])
ext.ClearField("float_data")
ext.data_location = TensorProto.EXTERNAL
e = ext.external_data.add(); e.key = "location"; e.value = "weights.bin"
fixtures.append(("pb_external", ser(ext), "FLOAT [2] with data_location=EXTERNAL"))
fixtures.append(("pb_string", ser(helper.make_tensor("s", TensorProto.STRING, [1], [b"hi"])), "STRING tensor (unsupported)"))
fixtures.append(("pb_u16_raw", ser(numpy_helper.from_array(np.array([1, 65535], np.uint16), name="q")), "from_array uint16 [1, 65535]"))
fixtures.append(("pb_u16_2_int32_data", ser(helper.make_tensor("q", TensorProto.UINT16, [2], [7, 65535])), "make_tensor UINT16 [2]: int32_data"))
fixtures.append(("pb_u32_2_uint64_data", ser(helper.make_tensor("v", TensorProto.UINT32, [2], [0, 2**32 - 1])), "make_tensor UINT32 [2]: uint64_data"))
fixtures.append(("pb_u64_2_uint64_data", ser(helper.make_tensor("z", TensorProto.UINT64, [2], [2**63, 2**64 - 1])), "make_tensor UINT64 [2]: uint64_data"))
big = TensorProto(name="o", data_type=TensorProto.UINT32, dims=[1])
big.uint64_data.append(2**32)
fixtures.append(("pb_u32_out_of_range", ser(big), "UINT32 [1] whose uint64_data holds 2**32"))
fixtures.append(("pb_c64_raw", ser(numpy_helper.from_array(np.array([1 + 2j], np.complex64), name="c")), "COMPLEX64 tensor (unsupported)"))

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "Fixtures.inc")
with open(out, "w") as f:
    f.write("// Generated by make_fixtures.py (numpy %s, onnx %s, ml_dtypes %s); do not edit.\n"
            % (np.__version__, onnx.__version__, ml_dtypes.__version__))
    for name, data, comment in fixtures:
        f.write("\n// %s\n" % comment)
        f.write("static const unsigned char %s[] = {" % name)
        for i, byte in enumerate(data):
            if i % 16 == 0:
                f.write("\n   ")
            f.write(" 0x%02x," % byte)
        f.write("\n};\n")
print("wrote", out, len(fixtures), "fixtures")
