#!/usr/bin/env python3
"""The files the manual's examples use (README.md, docs/*.md), written into
one directory, so that every example runs as printed (python/tests/
test_docs.py runs them there):

  model.onnx                 an MLP: x [batch, 256] -> logits [batch, 10]
  model.onnxtxt              one linear layer with that interface, as ONNX text
  model_with_loss.onnx       model.onnx with its loss: inputs x and t (targets),
                             output loss
  gpt.onnx                   the demo GPT-style decoder: input_ids [batch, 16]
                             -> logits [batch, 16, 100]
  cnn.onnx                   a small CNN with batch norm in training mode:
                             x [N, 3, 32, 32] -> logits [N, 10]
  x.npy, labels.npy          32 samples for model.onnx, classes in [0, 10)
  ids.npy, next.npy          8 token sequences for gpt.onnx and their next tokens
  images.npy, classes.npy    32 images for cnn.onnx and their classes
  hosts                      an Open MPI hostfile: node1 and node2, 2 slots each

Usage: python gen_doc_examples.py DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.parser

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_models  # noqa: E402


def linear_text() -> str:
    """model.onnx's interface in ONNX's textual syntax: one linear layer
    (its weights as the text's initializers, in names the syntax takes)."""
    r = np.random.default_rng(3)
    w = r.standard_normal((256, 10)).astype(np.float32) / 16
    values = ", ".join(f"{v:.6g}" for v in w.ravel())
    return ('<ir_version: 8, opset_import: ["" : 13]>\n'
            "linear (float[batch, 256] x) => (float[batch, 10] logits)\n"
            f"<float[256, 10] w = {{{values}}}>\n"
            "{\n    logits = MatMul(x, w)\n}\n")


def training_mode_cnn() -> onnx.ModelProto:
    """The small CNN as torch exports a module in training mode: its batch
    norms normalise by the batch's statistics (training_mode=1, with the
    updated running statistics as extra outputs), so it trains."""
    m = gen_models.build_cnn()
    for n in m.graph.node:
        if n.op_type == "BatchNormalization":
            kept = [a for a in n.attribute if a.name != "training_mode"]
            del n.attribute[:]
            n.attribute.extend(kept + [onnx.helper.make_attribute("training_mode", 1)])
            n.output.extend([f"{n.name}_running_mean", f"{n.name}_running_var"])
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = max(o.version, 15)
    onnx.checker.check_model(m)
    return m


def with_loss(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` exported with its loss, as torch exports a module whose
    forward returns one: SoftmaxCrossEntropyLoss of the logits and the
    targets `t`, the loss the only output."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    g.input.append(onnx.helper.make_tensor_value_info("t", onnx.TensorProto.INT64, ["batch"]))
    g.node.append(onnx.helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "t"], ["loss"],
                                        name="/loss/SoftmaxCrossEntropyLoss", reduction="mean"))
    del g.output[:]
    g.output.append(onnx.helper.make_tensor_value_info("loss", onnx.TensorProto.FLOAT, []))
    onnx.checker.check_model(m)
    return m


def write(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    mlp = gen_models.build_mlp((256, 128, 64, 10))
    for o in mlp.graph.output:
        o.name = "logits"
    for n in mlp.graph.node:
        n.output[:] = ["logits" if v == "y" else v for v in n.output]
    onnx.checker.check_model(mlp)
    onnx.save(mlp, str(out / "model.onnx"))
    (out / "model.onnxtxt").write_text(linear_text())
    onnx.save(gen_models.build_gpt(), str(out / "gpt.onnx"))
    onnx.save(training_mode_cnn(), str(out / "cnn.onnx"))
    onnx.save(with_loss(mlp), str(out / "model_with_loss.onnx"))
    r = np.random.default_rng(0)
    np.save(out / "x.npy", r.standard_normal((32, 256)).astype(np.float32))
    np.save(out / "labels.npy", r.integers(0, 10, 32).astype(np.int64))
    ids = r.integers(0, 100, (8, 16)).astype(np.int64)
    np.save(out / "ids.npy", ids)
    np.save(out / "next.npy", np.roll(ids, -1, axis=1))
    np.save(out / "images.npy", r.standard_normal((32, 3, 32, 32)).astype(np.float32))
    np.save(out / "classes.npy", r.integers(0, 10, 32).astype(np.int64))
    (out / "hosts").write_text("node1 slots=2\nnode2 slots=2\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    write(Path(sys.argv[1]))
