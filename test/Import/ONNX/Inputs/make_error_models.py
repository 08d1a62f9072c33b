"""Builds the models of errors-protobuf.test, which ONNX's text syntax
cannot express: a Constant with a sparse_value and a Split node without
outputs. Usage: make_error_models.py OUTDIR"""
import os
import sys

from onnx import TensorProto, helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def save(name, nodes, inputs, outputs, opset=13):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    with open(os.path.join(out, name), "wb") as f:
        f.write(model.SerializeToString())


x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])

sparse = helper.make_sparse_tensor(
    helper.make_tensor("values", TensorProto.FLOAT, [1], [1.0]),
    helper.make_tensor("indices", TensorProto.INT64, [1], [2]),
    [4])
save("constant-sparse.onnx",
     [helper.make_node("Constant", [], ["c"], name="sparse_const", sparse_value=sparse),
      helper.make_node("Add", ["x", "c"], ["y"])],
     [x], [y])

save("split-no-outputs.onnx",
     [helper.make_node("Split", ["x"], [], name="split_nothing"),
      helper.make_node("Relu", ["x"], ["y"])],
     [x], [y])
