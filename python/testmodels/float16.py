"""An fp32 ONNX model as fp16 (what `model.half()` exports): float
initializers, Constant values, graph inputs and outputs and Cast targets
become float16; intermediate value_info is dropped (shape inference
recomputes it). Integer tensors are left alone.

Used by bench/gpu_inference.py (the fp16 rows) and the tests of 16-bit
GEMMs on exported models."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper


def _half(t: onnx.TensorProto) -> onnx.TensorProto:
    if t.data_type != TensorProto.FLOAT:
        return t
    if t.HasField("data_location") and t.data_location == TensorProto.EXTERNAL:
        raise ValueError(f"{t.name}: load external data before converting")
    out = numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name)
    return out


def to_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for i, t in enumerate(list(g.initializer)):
        g.initializer[i].CopyFrom(_half(t))
    for v in list(g.input) + list(g.output):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.FLOAT16
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                a.t.CopyFrom(_half(a.t))
            if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.FLOAT16
    del g.value_info[:]
    return m
