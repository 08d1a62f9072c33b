"""The real-model zoo (see gen_zoo.py): graphs exported by torch.onnx.export
from PyTorch, torchvision and HuggingFace transformers code, checked in
without their large weights. This module (numpy + onnx only) materialises a
model with seeded weights and gives its test shapes and inputs.

    import zoo
    path = zoo.materialize("hf_gpt2", out_dir)     # out_dir/hf_gpt2.onnx + .data
    feeds = zoo.inputs("hf_gpt2", batch=8)         # {"input_ids": ...}
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Dict

import numpy as np
import onnx

ZOO = Path(__file__).resolve().parent / "zoo"

# name -> (symbolic dimensions other than batch, input kinds)
# input kinds: ("seq_first", seq first?, width) | ("image", channels, size)
# | ("video", channels, frames, size) | ("ids", seq) | ("mask", seq)
MODELS: Dict[str, dict] = {
    "torch_encoder_bf": {"dims": {"seq": 8}, "inputs": {"x": ("seq_first", False, 32)}},
    "torch_encoder_sf": {"dims": {"seq": 8}, "inputs": {"x": ("seq_first", True, 32)}},
    "torch_decoder_bf": {"dims": {"seq": 8},
                         "inputs": {"tgt": ("seq_first", False, 32),
                                    "memory": ("seq_first", False, 32)}},
    "torch_decoder_sf": {"dims": {"seq": 8},
                         "inputs": {"tgt": ("seq_first", True, 32),
                                    "memory": ("seq_first", True, 32)}},
    "resnet18": {"dims": {}, "inputs": {"x": ("image", 3, 32)}},
    "mobilenet_v2": {"dims": {}, "inputs": {"x": ("image", 3, 32)}},
    "r3d_18": {"dims": {}, "inputs": {"x": ("video", 3, 4, 32)}},
    "googlenet": {"dims": {}, "inputs": {"x": ("image", 3, 32)}},
    "squeezenet": {"dims": {}, "inputs": {"x": ("image", 3, 32)}},
    "densenet": {"dims": {}, "inputs": {"x": ("image", 3, 32)}},
    "hf_gpt2": {"dims": {"seq": 8}, "inputs": {"input_ids": ("ids", 8)}},
    "hf_bert": {"dims": {"seq": 8},
                "inputs": {"input_ids": ("ids", 8), "attention_mask": ("mask", 8)}},
    "hf_llama": {"dims": {"seq": 8}, "inputs": {"input_ids": ("ids", 8)}},
    "hf_vit": {"dims": {}, "inputs": {"pixel_values": ("image", 3, 32)}},
    # seq 6, not the test batch 8 (as T5's): their [seq, seq] relative
    # positions would look like a batch.
    "hf_gpt_neox": {"dims": {"seq": 6},
                    "inputs": {"input_ids": ("ids", 6), "attention_mask": ("mask", 6)}},
    "hf_deberta_v2": {"dims": {"seq": 6},
                      "inputs": {"input_ids": ("ids", 6), "attention_mask": ("mask", 6)}},
    "hf_roberta": {"dims": {"seq": 8},
                   "inputs": {"input_ids": ("ids", 8), "attention_mask": ("mask", 8)}},
    # seq 6, not the test batch 8: its [seq, seq] position buckets would
    # look like a batch that is not split (the data-parallel check refuses).
    "hf_t5": {"dims": {"seq": 6},
              "inputs": {"input_ids": ("ids", 6), "decoder_input_ids": ("ids", 6)}},
    "hf_swin": {"dims": {}, "inputs": {"pixel_values": ("image", 3, 32)}},
    # A partitioning failure's reproducer (a fused-QKV GPT block cut by Split), written
    # here; not counted among the third-party models.
    "gpt_block_split": {"dims": {"seq": 8}, "inputs": {"input_ids": ("ids", 8)}},
}


def names():
    return list(MODELS)


# Weights that travel as statistics: a model's large float tensors become
# external data (one file), each described by its mean, standard deviation
# and whether it was all positive; seeded_weights draws the file again.
def externalize(model: onnx.ModelProto, data_name: str, inline_bytes: int,
                dtypes=(np.float32,)) -> dict:
    """Moves the float initializers (of `dtypes`) larger than
    `inline_bytes` to external data `data_name`, in order; returns their
    statistics by name. The data file itself is not written."""
    from onnx import numpy_helper
    offset = 0
    stats = {}
    for init in model.graph.initializer:
        arr = numpy_helper.to_array(init)
        if arr.dtype not in dtypes or arr.nbytes <= inline_bytes:
            continue
        stats[init.name] = {
            "mean": float(arr.mean()), "std": float(arr.std()),
            "positive": bool((arr > 0).all()),
        }
        for field in ("raw_data", "float_data", "double_data"):
            init.ClearField(field)
        init.data_location = onnx.TensorProto.EXTERNAL
        del init.external_data[:]
        for k, v in (("location", data_name), ("offset", str(offset)),
                     ("length", str(arr.nbytes))):
            e = init.external_data.add()
            e.key, e.value = k, v
        offset += arr.nbytes
    return stats


def seeded_weights(model: onnx.ModelProto, stats: dict, seed: int = 0) -> bytes:
    """The external data of an externalized model drawn from a seeded normal
    with each tensor's recorded mean and standard deviation (absolute values
    where the exported tensor was all positive, e.g. BatchNorm variances), in
    the tensor's type. Same statistics and seed, same bytes."""
    rng = np.random.default_rng(seed)
    chunks = []
    offset = 0
    for init in model.graph.initializer:
        if init.data_location != onnx.TensorProto.EXTERNAL:
            continue
        ext = {e.key: e.value for e in init.external_data}
        assert int(ext["offset"]) == offset, init.name
        s = stats[init.name]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(init.data_type)
        arr = (s["mean"] + s["std"] * rng.standard_normal(tuple(init.dims))).astype(dtype)
        if s["positive"]:
            arr = np.abs(arr) + dtype.type(1e-3)
        data = arr.tobytes()
        assert len(data) == int(ext["length"]), init.name
        chunks.append(data)
        offset += len(data)
    return b"".join(chunks)


def write_seeded_weights(model_path, stats: dict, seed: int = 0) -> None:
    """Writes the external data of the externalized model at `model_path`
    (MODEL.data beside it) drawn by seeded_weights; nothing when it has none."""
    model_path = Path(model_path)
    data = seeded_weights(onnx.load(str(model_path), load_external_data=False), stats, seed)
    if data:
        model_path.with_name(model_path.name + ".data").write_bytes(data)


def materialize(name: str, out_dir, seed: int = 0) -> Path:
    """Copies the graph to out_dir and writes its external weights there
    (seeded_weights with the zoo's recorded statistics). Same name and seed,
    same bytes."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    src = ZOO / f"{name}.onnx"
    dst = out_dir / f"{name}.onnx"
    shutil.copyfile(src, dst)
    write_seeded_weights(dst, json.loads((ZOO / "weights.json").read_text())[name], seed)
    return dst


def inputs(name: str, batch: int, seed: int = 0) -> Dict[str, np.ndarray]:
    """Random inputs at the model's test shapes for the given batch."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for input_name, kind in MODELS[name]["inputs"].items():
        if kind[0] == "seq_first":
            seq_first, width = kind[1], kind[2]
            seq = MODELS[name]["dims"]["seq"]
            shape = (seq, batch, width) if seq_first else (batch, seq, width)
            feeds[input_name] = rng.standard_normal(shape).astype(np.float32)
        elif kind[0] == "image":
            feeds[input_name] = rng.standard_normal((batch, kind[1], kind[2], kind[2])).astype(
                np.float32)
        elif kind[0] == "video":
            feeds[input_name] = rng.standard_normal(
                (batch, kind[1], kind[2], kind[3], kind[3])).astype(np.float32)
        elif kind[0] == "ids":
            feeds[input_name] = rng.integers(0, 100, (batch, kind[1])).astype(np.int64)
        elif kind[0] == "mask":
            # Padding at the end of every other sequence: the mask matters.
            mask = np.ones((batch, kind[1]), dtype=np.int64)
            mask[1::2, kind[1] - 3:] = 0
            feeds[input_name] = mask
        else:
            raise ValueError(kind)
    return feeds


def dim_args(name: str, batch: int):
    """distopt's --dim flags for the model at this batch."""
    dims = {"batch": batch, **MODELS[name]["dims"]}
    return [a for k, v in dims.items() for a in ("--dim", f"{k}={v}")]
