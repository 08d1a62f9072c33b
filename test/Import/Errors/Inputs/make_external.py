"""Writes a one-MatMul model whose weight 'w' (4x4 float) is external data
with the given location/offset/length, for the importer's error tests."""
import sys

import onnx
from onnx import TensorProto, helper

path, location, offset, length = sys.argv[1:5]
w = TensorProto()
w.name = "w"
w.data_type = TensorProto.FLOAT
w.dims.extend([4, 4])
w.data_location = TensorProto.EXTERNAL
for key, value in (("location", location), ("offset", offset), ("length", length)):
    entry = w.external_data.add()
    entry.key, entry.value = key, value
graph = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])], [w])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
with open(path, "wb") as f:
    f.write(model.SerializeToString())
