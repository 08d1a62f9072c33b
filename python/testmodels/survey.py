#!/usr/bin/env python3
"""A survey of models users export: does distopt import, compile and run each
as ONNX Runtime does? Not a CI test (the exports need torch and take minutes;
the zoo, python/testmodels/zoo, holds the ones CI keeps); a way to find what
real exports use that distopt lacks. Weights are random (seeded); HuggingFace
models use small configurations.

    <zoo venv python> survey.py export OUT [NAME ...]   (scripts/zoo-venv)
    <project venv python> survey.py check OUT [--target T] [NAME ...]

`scripts/model-survey` runs both and prints one line per model: OK with the
largest error relative to the largest output, or what failed.
"""
from __future__ import annotations

import argparse
import inspect
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _img(n=1, s=224):
    import torch
    return (torch.randn(n, 3, s, s),)


def torchvision_models():
    import torch
    import torchvision
    tv = torchvision.models
    return {
        "efficientnet_b0": lambda: (tv.efficientnet_b0(), _img()),
        "convnext_tiny": lambda: (tv.convnext_tiny(), _img()),
        "swin_t": lambda: (tv.swin_t(), _img()),
        "maxvit_t": lambda: (tv.maxvit_t(), _img()),
        "regnet_y_400mf": lambda: (tv.regnet_y_400mf(), _img()),
        "shufflenet_v2_x0_5": lambda: (tv.shufflenet_v2_x0_5(), _img()),
        "squeezenet1_0": lambda: (tv.squeezenet1_0(), _img()),
        "densenet121": lambda: (tv.densenet121(), _img()),
        "googlenet": lambda: (tv.googlenet(aux_logits=False, init_weights=True), _img()),
        "inception_v3": lambda: (tv.inception_v3(aux_logits=False, init_weights=True),
                                 _img(1, 299)),
        "mnasnet0_5": lambda: (tv.mnasnet0_5(), _img()),
        "alexnet": lambda: (tv.alexnet(), _img()),
        "mobilenet_v3_small": lambda: (tv.mobilenet_v3_small(), _img()),
        "r2plus1d_18": lambda: (tv.video.r2plus1d_18(), (torch.randn(1, 3, 8, 112, 112),)),
        "deeplabv3_mbv3": lambda: (tv.segmentation.deeplabv3_mobilenet_v3_large(
            weights_backbone=None, aux_loss=False), _img(1, 256)),
        "lraspp_mbv3": lambda: (tv.segmentation.lraspp_mobilenet_v3_large(
            weights_backbone=None), _img(1, 256)),
    }


def hf_models():
    import torch
    import transformers as T

    def ids(s=32):
        return torch.randint(0, 1000, (1, s))

    def mask(s=32):
        return torch.ones(1, s, dtype=torch.long)

    small = dict(vocab_size=1000, hidden_size=128, intermediate_size=256,
                 num_hidden_layers=2, num_attention_heads=4)
    return {
        "t5": lambda: (T.T5Model(T.T5Config(vocab_size=1000, d_model=128, d_kv=32, d_ff=256,
                                            num_layers=2, num_heads=4)),
                       {"input_ids": ids(), "attention_mask": mask(),
                        "decoder_input_ids": ids(16)}),
        "distilbert": lambda: (T.DistilBertModel(T.DistilBertConfig(
            vocab_size=1000, dim=128, hidden_dim=256, n_layers=2, n_heads=4)),
            {"input_ids": ids(), "attention_mask": mask()}),
        "roberta": lambda: (T.RobertaModel(T.RobertaConfig(**small)),
                            {"input_ids": ids(), "attention_mask": mask()}),
        "albert": lambda: (T.AlbertModel(T.AlbertConfig(embedding_size=64, **small)),
                           {"input_ids": ids(), "attention_mask": mask()}),
        "bart": lambda: (T.BartModel(T.BartConfig(
            vocab_size=1000, d_model=128, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=256,
            decoder_ffn_dim=256)),
            {"input_ids": ids(), "attention_mask": mask(), "decoder_input_ids": ids(16)}),
        "wav2vec2": lambda: (T.Wav2Vec2Model(T.Wav2Vec2Config(
            vocab_size=32, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=256, conv_dim=(64,) * 3, conv_stride=(5, 2, 2),
            conv_kernel=(10, 3, 3), num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=4)), {"input_values": torch.randn(1, 4000)}),
        "clip_text": lambda: (T.CLIPTextModel(T.CLIPTextConfig(**small)),
                              {"input_ids": ids()}),
        "gpt_neo": lambda: (T.GPTNeoModel(T.GPTNeoConfig(
            vocab_size=1000, hidden_size=128, num_layers=2, num_heads=4,
            attention_types=[[["global", "local"], 1]], window_size=8)),
            {"input_ids": ids()}),
        "opt": lambda: (T.OPTModel(T.OPTConfig(
            vocab_size=1000, hidden_size=128, ffn_dim=256, num_hidden_layers=2,
            num_attention_heads=4, word_embed_proj_dim=128)), {"input_ids": ids()}),
        "mistral": lambda: (T.MistralModel(T.MistralConfig(
            num_key_value_heads=2, sliding_window=16, **small)), {"input_ids": ids()}),
        "phi": lambda: (T.PhiModel(T.PhiConfig(**small)), {"input_ids": ids()}),
        "electra": lambda: (T.ElectraModel(T.ElectraConfig(embedding_size=64, **small)),
                            {"input_ids": ids()}),
        "segformer": lambda: (T.SegformerForSemanticSegmentation(T.SegformerConfig(
            num_encoder_blocks=2, depths=[1, 1], sr_ratios=[4, 2], hidden_sizes=[32, 64],
            num_attention_heads=[1, 2], decoder_hidden_size=64)),
            {"pixel_values": torch.randn(1, 3, 64, 64)}),
        "mobilevit": lambda: (T.MobileViTModel(T.MobileViTConfig(
            image_size=64, hidden_sizes=[48, 64, 80],
            neck_hidden_sizes=[16, 16, 24, 48, 64, 80, 320])),
            {"pixel_values": torch.randn(1, 3, 64, 64)}),
        "deberta": lambda: (T.DebertaV2Model(T.DebertaV2Config(**small)),
                            {"input_ids": ids()}),
        "convbert": lambda: (T.ConvBertModel(T.ConvBertConfig(embedding_size=128, **small)),
                             {"input_ids": ids()}),
    }


NAMES = ["efficientnet_b0", "convnext_tiny", "swin_t", "maxvit_t", "regnet_y_400mf",
         "shufflenet_v2_x0_5", "squeezenet1_0", "densenet121", "googlenet", "inception_v3",
         "mnasnet0_5", "alexnet", "mobilenet_v3_small", "r2plus1d_18", "deeplabv3_mbv3",
         "lraspp_mbv3", "t5", "distilbert", "roberta", "albert", "bart", "wav2vec2",
         "clip_text", "gpt_neo", "opt", "mistral", "phi", "electra", "segformer",
         "mobilevit", "deberta", "convbert"]


class _Keywords:
    """Wraps a transformers model so that export passes its inputs by name."""

    def __new__(cls, model, names):
        import torch

        class Wrapper(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, *args):
                return self.model(**dict(zip(names, args)), return_dict=False)
        return Wrapper()


def export(out: Path, names) -> int:
    import torch
    out.mkdir(parents=True, exist_ok=True)
    builders = {**torchvision_models(), **hf_models()}
    failed = 0
    for name in names:
        torch.manual_seed(0)
        try:
            model, args = builders[name]()
            model.eval()
            if isinstance(args, dict):
                if hasattr(model.config, "use_cache"):
                    model.config.use_cache = False
                input_names = list(args)
                model, args = _Keywords(model, input_names), tuple(args.values())
            else:
                input_names = [f"input_{i}" for i in range(len(args))]
            torch.onnx.export(model, args, str(out / f"{name}.onnx"), opset_version=17,
                              input_names=input_names, do_constant_folding=True)
            print(f"exported {name}", flush=True)
        except Exception as e:  # noqa: BLE001 - reported, the survey goes on
            failed += 1
            print(f"EXPORT-FAIL {name}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    return 1 if failed else 0


def check(out: Path, names, target: str) -> int:
    import numpy as np
    import onnx
    import onnxruntime as ort
    distopt = ROOT / "build" / "bin" / "distopt"
    failed = 0
    for name in names:
        path = out / f"{name}.onnx"
        if not path.exists():
            failed += 1
            print(f"NOT-EXPORTED {name}", flush=True)
            continue
        work = out / f"{name}.{target}"
        work.mkdir(exist_ok=True)
        m = onnx.load(str(path), load_external_data=False)
        inits = {i.name for i in m.graph.initializer}
        rng = np.random.default_rng(0)
        feeds = {}
        for vi in m.graph.input:
            if vi.name in inits:
                continue
            t = vi.type.tensor_type
            shape = [d.dim_value for d in t.shape.dim]
            dt = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
            if np.issubdtype(dt, np.integer):
                feeds[vi.name] = (np.ones(shape, dt) if "mask" in vi.name
                                  else rng.integers(0, 100, shape).astype(dt))
            else:
                feeds[vi.name] = rng.standard_normal(shape).astype(dt)
        t0 = time.time()
        r = subprocess.run([str(distopt), "compile", str(path), "--target", target, "-o",
                            str(work / "m.dx")], capture_output=True, text=True)
        if r.returncode:
            failed += 1
            print(f"COMPILE-FAIL {name}: {r.stderr.strip()[:600]}", flush=True)
            continue
        args = []
        for k, v in feeds.items():
            np.save(work / f"{k}.npy", v)
            args += ["--input", f"{k}={work / (k + '.npy')}"]
        r = subprocess.run([str(work / "m.dx" / "m"), *args, "--output-dir", str(work / "out")],
                           capture_output=True, text=True)
        if r.returncode:
            failed += 1
            print(f"RUN-FAIL {name}: {r.stderr.strip()[:600]}", flush=True)
            continue
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        worst, bad = 0.0, []
        for o, want in zip(sess.get_outputs(), sess.run(None, feeds)):
            f = work / "out" / (o.name.replace(":", "_").replace("/", "_") + ".npy")
            if not f.exists():
                bad.append(f"{o.name} missing")
                continue
            got = np.load(f)
            if got.shape != want.shape:
                bad.append(f"{o.name}: shape {got.shape} vs {want.shape}")
            elif want.dtype.kind == "f":
                err = float(np.max(np.abs(got - want)) / (1e-3 + np.abs(want).max())) \
                    if want.size else 0.0
                worst = max(worst, err)
                if not err < 1e-3:
                    bad.append(f"{o.name}: relative error {err:.2e}")
            elif not np.array_equal(got, want):
                bad.append(f"{o.name} differs")
        failed += bool(bad)
        print(("OK" if not bad else "MISMATCH"), name, f"{time.time() - t0:.1f}s",
              f"worst={worst:.1e}", "; ".join(bad), flush=True)
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", choices=["export", "check"])
    ap.add_argument("out", type=Path)
    ap.add_argument("names", nargs="*", default=NAMES)
    ap.add_argument("--target", default="cpu", choices=["cpu", "cuda-emu"])
    a = ap.parse_intermixed_args()
    unknown = [n for n in a.names if n not in NAMES]
    if unknown:
        ap.error(f"unknown models {unknown}; known: {' '.join(NAMES)}")
    if a.step == "export":
        return export(a.out, a.names)
    return check(a.out, a.names, a.target)


if __name__ == "__main__":
    sys.exit(main())
