#!/usr/bin/env python3
"""Export the real-model zoo: models users actually export, from code the
project did not write, through ``torch.onnx.export`` (TorchScript exporter).

Runs under Debian's ``/usr/bin/python3`` with ``python3-torch`` (1.13) and
``python3-torchvision``, plus HuggingFace ``transformers`` 4.36 (the last
releases that support torch 1.13); ``scripts/gen-zoo`` sets that up in a
virtualenv that sees the system packages. CI does not run this: it uses the
checked-in graphs in ``python/testmodels/zoo/``.

What is checked in is each model's *graph*: every large float initializer is
moved to external data (``<model>.onnx.data``) that is not checked in, and its
statistics (mean, standard deviation, whether it was all positive) go into
``zoo/weights.json``. ``zoo.py`` (numpy only) re-creates the data file from a
seed with those statistics, so BatchNorm variances stay positive and norm
scales stay near 1 while the repository holds kilobytes, not the 45 MB of a
ResNet-18. Small and integer initializers stay inline, exactly as exported.

Usage:
    /usr/bin/python3 gen_zoo.py [--out DIR] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import onnx
import torch

import zoo  # the statistics format (python/testmodels/zoo.py)

HERE = os.path.dirname(os.path.abspath(__file__))
INLINE_BYTES = 256  # float initializers up to this size stay in the graph


def _transformer_encoder(batch_first: bool):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64,
                                             dropout=0.0, batch_first=batch_first)
    model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    shape = (4, 8, 32) if batch_first else (8, 4, 32)
    axes = {0: "batch", 1: "seq"} if batch_first else {0: "seq", 1: "batch"}
    return model, (torch.randn(*shape),), ["x"], {"x": axes}


def _transformer_decoder(batch_first: bool):
    torch.manual_seed(0)
    layer = torch.nn.TransformerDecoderLayer(d_model=32, nhead=4, dim_feedforward=64,
                                             dropout=0.0, batch_first=batch_first)
    model = torch.nn.TransformerDecoder(layer, num_layers=2)
    shape = (4, 8, 32) if batch_first else (8, 4, 32)
    axes = {0: "batch", 1: "seq"} if batch_first else {0: "seq", 1: "batch"}
    return (model, (torch.randn(*shape), torch.randn(*shape)), ["tgt", "memory"],
            {"tgt": axes, "memory": dict(axes)})


def _resnet18():
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    return model, (torch.randn(2, 3, 32, 32),), ["x"], {"x": {0: "batch"}}


def _mobilenet_v2():
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.mobilenet_v2(num_classes=10, width_mult=0.5)
    return model, (torch.randn(2, 3, 32, 32),), ["x"], {"x": {0: "batch"}}


def _googlenet():
    """torchvision's GoogLeNet: Inception modules concatenate four parallel
    branches (1x1, 3x3, 5x5 convolutions and a pooled projection) along the
    channels."""
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.googlenet(num_classes=10, aux_logits=False,
                                         init_weights=True)
    return model, (torch.randn(2, 3, 32, 32),), ["x"], {"x": {0: "batch"}}


def _squeezenet():
    """torchvision's SqueezeNet 1.1: Fire modules concatenate a 1x1 and a
    3x3 expansion along the channels."""
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.squeezenet1_1(num_classes=10)
    return model, (torch.randn(2, 3, 32, 32),), ["x"], {"x": {0: "batch"}}


def _densenet():
    """torchvision's DenseNet code at a small configuration (growth 12,
    blocks of 2, 2 and 2 layers): every layer concatenates its input with
    its new features."""
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.DenseNet(growth_rate=12, block_config=(2, 2, 2),
                                        num_init_features=16, num_classes=10)
    return model, (torch.randn(2, 3, 32, 32),), ["x"], {"x": {0: "batch"}}


def _r3d_18():
    """torchvision's 3-D ResNet for video (Conv3d, BatchNorm3d, a 3-D
    global average pool): clips of 4 frames of 32x32."""
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.video.r3d_18(num_classes=10)
    return model, (torch.randn(2, 3, 4, 32, 32),), ["x"], {"x": {0: "batch"}}


class _HFWrapper(torch.nn.Module):
    """Calls a transformers model with keyword inputs and returns its first
    output (logits or the last hidden state)."""

    def __init__(self, model, names):
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *args):
        out = self.model(**dict(zip(self.names, args)), return_dict=False)
        return out[0]


def _hf_text(model, with_mask: bool):
    torch.manual_seed(1)
    ids = torch.randint(0, 100, (2, 8))
    names = ["input_ids"] + (["attention_mask"] if with_mask else [])
    args = (ids,) + ((torch.ones(2, 8, dtype=torch.int64),) if with_mask else ())
    axes = {n: {0: "batch", 1: "seq"} for n in names}
    return _HFWrapper(model, names), args, names, axes


def _gpt2():
    import transformers
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=100, n_positions=64, n_embd=32, n_layer=2,
                                  n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
                                  attn_pdrop=0.0, use_cache=False)
    return _hf_text(transformers.GPT2LMHeadModel(cfg).eval(), with_mask=False)


# The BERT-like encoders' tiny configuration, without dropout.
_TINY_ENCODER = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=64,
                     max_position_embeddings=64, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)


def _tiny_encoder(config, model):
    """A BERT-like encoder of `config` and `model` classes at the tiny size,
    without its pooling layer, given an attention mask."""
    torch.manual_seed(0)
    cfg = config(**_TINY_ENCODER)
    return _hf_text(model(cfg, add_pooling_layer=False).eval(), with_mask=True)


def _bert():
    import transformers
    return _tiny_encoder(transformers.BertConfig, transformers.BertModel)


def _llama():
    import transformers
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=64,
                                   use_cache=False)
    return _hf_text(transformers.LlamaForCausalLM(cfg).eval(), with_mask=False)


def _gpt_neox():
    """GPT-NeoX: rotary embeddings on part of each head, parallel attention
    and MLP; its attention mask and rotary terms are built from the inputs'
    shapes (ConstantOfShape over batch x heads)."""
    import transformers
    torch.manual_seed(0)
    cfg = transformers.GPTNeoXConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64,
                                     max_position_embeddings=64, rotary_pct=0.5,
                                     hidden_dropout=0.0, attention_dropout=0.0,
                                     use_cache=False)
    return _hf_text(transformers.GPTNeoXModel(cfg).eval(), with_mask=True)


def _deberta_v2():
    """DeBERTa-v2: disentangled attention with relative positions in
    buckets, gathered (GatherElements) at positions broadcast over batch x
    heads."""
    import transformers
    torch.manual_seed(0)
    cfg = transformers.DebertaV2Config(**_TINY_ENCODER, relative_attention=True,
                                       position_buckets=16, pos_att_type=["p2c", "c2p"])
    return _hf_text(transformers.DebertaV2Model(cfg).eval(), with_mask=True)


def _vit():
    import transformers
    torch.manual_seed(0)
    cfg = transformers.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32,
                                 num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=64, num_labels=10,
                                 hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = transformers.ViTForImageClassification(cfg).eval()
    return (_HFWrapper(model, ["pixel_values"]), (torch.randn(2, 3, 32, 32),),
            ["pixel_values"], {"pixel_values": {0: "batch"}})


def _roberta():
    """RoBERTa's position ids come from the attention mask by a CumSum."""
    import transformers
    return _tiny_encoder(transformers.RobertaConfig, transformers.RobertaModel)


def _t5():
    """An encoder-decoder; its relative-position buckets (Log, Min, Where)
    and the decoder's causal mask (Tile) are exported from shape code."""
    import transformers
    torch.manual_seed(0)
    cfg = transformers.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                num_heads=4, relative_attention_num_buckets=8,
                                dropout_rate=0.0, use_cache=False)
    torch.manual_seed(1)
    names = ["input_ids", "decoder_input_ids"]
    args = (torch.randint(0, 100, (2, 8)), torch.randint(0, 100, (2, 8)))
    axes = {n: {0: "batch", 1: "seq"} for n in names}
    return _HFWrapper(transformers.T5Model(cfg).eval(), names), args, names, axes


def _swin():
    """Shifted windows: the padding to whole windows is computed with Mod, the
    shifted-window attention mask is built by slice assignments (ScatterND)."""
    import transformers
    torch.manual_seed(0)
    cfg = transformers.SwinConfig(image_size=32, patch_size=2, num_channels=3, embed_dim=16,
                                  depths=[2, 2], num_heads=[2, 4], window_size=4,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                  drop_path_rate=0.0, num_labels=10)
    model = transformers.SwinForImageClassification(cfg).eval()
    return (_HFWrapper(model, ["pixel_values"]), (torch.randn(2, 3, 32, 32),),
            ["pixel_values"], {"pixel_values": {0: "batch"}})


class _FusedQKVBlock(torch.nn.Module):
    """A partitioning failure's reproducer, not third-party code: a pre-norm GPT block whose
    fused QKV projection (one nn.Linear) is cut with ``qkv(x).split(D, 2)``
    (ONNX Split), then causal attention and an MLP."""

    def __init__(self, d=32, heads=4, vocab=100):
        super().__init__()
        self.heads = heads
        self.emb = torch.nn.Embedding(vocab, d)
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, 4 * d)
        self.fc2 = torch.nn.Linear(4 * d, d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        x = x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))
        return self.head(x)


def _gpt_block_split():
    torch.manual_seed(0)
    return _FusedQKVBlock(), (torch.randint(0, 100, (2, 8)),), ["input_ids"], {
        "input_ids": {0: "batch", 1: "seq"}}


# name -> (builder, opset)
MODELS = {
    "torch_encoder_bf": (lambda: _transformer_encoder(True), 17),
    "torch_encoder_sf": (lambda: _transformer_encoder(False), 14),
    "torch_decoder_bf": (lambda: _transformer_decoder(True), 16),
    "torch_decoder_sf": (lambda: _transformer_decoder(False), 15),
    "resnet18": (_resnet18, 15),
    "mobilenet_v2": (_mobilenet_v2, 16),
    "r3d_18": (_r3d_18, 17),
    "googlenet": (_googlenet, 17),
    "squeezenet": (_squeezenet, 13),
    "densenet": (_densenet, 15),
    "hf_gpt2": (_gpt2, 14),
    "hf_bert": (_bert, 15),
    "hf_llama": (_llama, 16),
    "hf_vit": (_vit, 17),
    "hf_gpt_neox": (_gpt_neox, 17),
    "hf_deberta_v2": (_deberta_v2, 17),
    "hf_roberta": (_roberta, 17),
    "hf_t5": (_t5, 17),
    "hf_swin": (_swin, 17),
    "gpt_block_split": (_gpt_block_split, 17),
}


def export(name: str, out_dir: str, stats: dict) -> None:
    build, opset = MODELS[name]
    model, args, input_names, axes = build()
    model.eval()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.onnx")
        # Not under no_grad: PyTorch's fused inference fast path
        # (aten::_transformer_encoder_layer_fwd) has no ONNX export.
        torch.onnx.export(model, args, path, opset_version=opset,
                          input_names=input_names, output_names=["y"],
                          dynamic_axes={**axes, "y": {0: "batch"}}, do_constant_folding=True)
        m = onnx.load(path)
    m.producer_name = "pytorch"
    m.doc_string = f"distopt zoo model {name}: torch {torch.__version__}, opset {opset}"
    stats[name] = zoo.externalize(m, f"{name}.onnx.data", INLINE_BYTES)
    onnx.save(m, os.path.join(out_dir, f"{name}.onnx"))
    external = sum(int(e.value) for i in m.graph.initializer for e in i.external_data
                   if e.key == "length")
    print(f"{name}: opset {opset}, {len(m.graph.node)} nodes, "
          f"{external / 1e6:.2f} MB of external weights", file=sys.stderr)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=os.path.join(HERE, "zoo"))
    p.add_argument("--only", nargs="*", default=None)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    stats_path = os.path.join(a.out, "weights.json")
    stats = {}
    if os.path.exists(stats_path):
        with open(stats_path) as f:
            stats = json.load(f)
    for name in a.only or list(MODELS):
        export(name, a.out, stats)
    with open(stats_path, "w") as f:
        json.dump(stats, f, indent=1, sort_keys=True)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
