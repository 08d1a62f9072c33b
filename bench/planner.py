#!/usr/bin/env python3
"""Planner benchmark: calibration against Megatron-LM, and planning cost.

1. Calibration. For each published Megatron-LM GPT configuration (Narayanan
   et al., "Efficient Large-Scale Language Model Training on GPU Clusters
   Using Megatron-LM", SC'21, arXiv:2104.04473: Table 1, and §5.1's GPT-3
   175B estimate: 1024 A100s, batch 1536, ~138 TFLOP/s per GPU, ~34 days for
   300B tokens, i.e. ~32 s per iteration) the planner is forced to the
   published degrees (tp, pp, dp, micro-batch 1, fp16, full recomputation)
   on N DGX A100 nodes, and its predicted step time is turned into TFLOP/s
   per GPU with the paper's own FLOP count
       F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)).
   The table prints the published and predicted figures and their error.
2. Planning cost. The unforced search for GPT-3 175B on 128 DGX A100 nodes
   (global batch 1536, train, fp16): wall time and peak memory of `distopt
   plan`, and its plan next to Megatron's.
3. Segment solver. The same searches with each segment's sharding problem
   solved by variable elimination (the default) and by COIN-OR CBC's ILP
   (`--segment-solver ilp`: how every problem with a cycle was solved before
   2026-11-27), for GPT-3 and the zoo's exported models: search time and the
   predicted step time of the plan each finds.

Usage: bench/planner.py [--distopt build/bin/distopt] [--quick]
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python", "testmodels"))
import gen_models  # noqa: E402
import zoo  # noqa: E402

SEQ, VOCAB = 2048, 51200

# name, heads, hidden, layers, tp, pp, gpus, batch, published TFLOP/s per GPU
MEGATRON = [
    ("GPT 18.4B", 48, 6144, 40, 8, 1, 256, 1024, 135),
    ("GPT 39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138),
    ("GPT 76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 140),
    ("GPT 145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148),
    ("GPT 310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 155),
    ("GPT 529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 163),
    ("GPT 1008.0B", 160, 25600, 128, 8, 64, 3072, 3072, 163),
    ("GPT-3 175B (§5.1)", 96, 12288, 96, 8, 16, 1024, 1536, 138),
]


def megatron_flops(batch, layers, hidden):
    return 96 * batch * SEQ * layers * hidden ** 2 * (
        1 + SEQ / (6 * hidden) + VOCAB / (16 * layers * hidden))


def write_model(directory, name, heads, hidden, layers):
    path = os.path.join(directory, name + ".onnx")
    model = gen_models.build_gpt(vocab=VOCAB, d=hidden, n_heads=heads, n_layers=layers,
                                 block=SEQ, external_data=name + ".onnx.data",
                                 symbolic_seq=True)
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    return path


def plan(distopt, model, nodes, batch, extra, shape=None):
    cmd = [distopt, "plan", model, "--cluster",
           nodes if isinstance(nodes, str) else f"{nodes}xdgx-a100x8",
           "--global-batch", str(batch), "--json", "-"]
    cmd += shape if shape is not None else ["--seq-len", str(SEQ), "--precision", "fp16"]
    cmd += extra
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return json.loads(out.stdout), wall, max(peak_kb, before) / 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--distopt", default=os.path.join(ROOT, "build", "bin", "distopt"))
    ap.add_argument("--quick", action="store_true", help="calibration rows only for 175B")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        print("Calibration: Megatron-LM's published runs, degrees forced "
              "(micro-batch 1, fp16, full recomputation, 1F1B)\n")
        header = (f"{'model':<20} {'GPUs':>5} {'tp':>3} {'pp':>3} {'dp':>3} {'batch':>5} "
                  f"{'pub TF/s':>9} {'pred TF/s':>9} {'pub s/it':>9} {'pred s/it':>9} {'error':>7}")
        print(header)
        print("-" * len(header))
        rows = MEGATRON if not args.quick else MEGATRON[-1:]
        errors = []
        for name, heads, hidden, layers, tp, pp, gpus, batch, published in rows:
            model = write_model(tmp, name.split()[-1].strip("()§.").replace(".", "_"),
                                heads, hidden, layers)
            dp = gpus // (tp * pp)
            flops = megatron_flops(batch, layers, hidden)
            result, _, _ = plan(args.distopt, model, gpus // 8, batch,
                                ["--dp", str(dp), "--tp", str(tp), "--pp", str(pp),
                                 "--microbatches", str(batch // dp), "--recompute", "full"])
            predicted = flops / result["predicted_step_time_s"] / gpus / 1e12
            pub_s = flops / (published * 1e12 * gpus)
            err = (predicted - published) / published
            errors.append(err)
            print(f"{name:<20} {gpus:>5} {tp:>3} {pp:>3} {dp:>3} {batch:>5} {published:>9.0f} "
                  f"{predicted:>9.1f} {pub_s:>9.2f} {result['predicted_step_time_s']:>9.2f} "
                  f"{err * 100:>+6.1f}%")
        print(f"\nmean |error| {sum(abs(e) for e in errors) / len(errors) * 100:.1f}%, "
              f"max |error| {max(abs(e) for e in errors) * 100:.1f}%")

        print("\nPlanning GPT-3 175B for 128 x DGX A100 (1024 GPUs), batch 1536, "
              "train, fp16, unforced:")
        model = write_model(tmp, "gpt3_175b", 96, 12288, 96)
        result, wall, peak_mb = plan(args.distopt, model, 128, 1536, [])
        forced, _, _ = plan(args.distopt, model, 128, 1536,
                            ["--dp", "8", "--tp", "8", "--pp", "16", "--microbatches", "192",
                             "--recompute", "full"])
        print(f"  distopt plan: {wall:.1f} s wall, {peak_mb:.0f} MB peak RSS "
              f"({result['search']['candidates']} candidates, "
              f"{result['search']['segment_problems']} segment problems, "
              f"{result['search']['ilp_solves']} of them by CBC)")
        print(f"  {'':<28} {'dp':>3} {'tp':>3} {'pp':>3} {'mb':>4} {'recompute':>10} "
              f"{'step s':>8} {'compute':>8} {'comm':>7} {'bubble':>7} {'mem GiB':>8}")
        for label, r in (("planner's choice", result), ("Megatron-LM (forced)", forced)):
            print(f"  {label:<28} {r['dp']:>3} {r['tp']:>3} {r['pp']:>3} {r['microbatches']:>4} "
                  f"{r['recompute']:>10} {r['predicted_step_time_s']:>8.2f} {r['compute_s']:>8.2f} "
                  f"{r['communication_s']:>7.2f} {r['bubble_s']:>7.2f} "
                  f"{r['peak_memory_bytes_per_device'] / 2**30:>8.1f}")

        print("\nSegment solver: variable elimination (default) against CBC's ILP "
              "(--segment-solver ilp), same search\n")
        header = (f"{'model':<16} {'cluster':<14} {'mode':<6} {'problems':>8} {'by CBC':>7} "
                  f"{'CBC s':>7} {'elim. s':>8} {'speed-up':>8} {'CBC step':>11} "
                  f"{'elim. step':>11}")
        print(header)
        print("-" * len(header))
        cases = [("gpt3_175b", model, 128, 1536, None, "train")]
        if not args.quick:
            for name in ("r3d_18", "hf_swin", "hf_t5", "hf_llama", "resnet18"):
                path = zoo.materialize(name, tmp)
                dims = [str(a) for a in zoo.dim_args(name, 8)]
                for cluster in ("local:4", "dgx-a100x8"):
                    for mode in ("infer", "train"):
                        cases.append((name, path, cluster, 8, dims + ["--mode", mode], mode))
        for name, path, cluster, batch, shape, mode in cases:
            runs = {}
            for solver in ("ilp", "auto"):
                r, wall, _ = plan(args.distopt, path, cluster, batch,
                                  ["--segment-solver", solver], shape)
                runs[solver] = (r, wall)
            (ilp, ilp_wall), (own, own_wall) = runs["ilp"], runs["auto"]
            label = cluster if isinstance(cluster, str) else f"{cluster}xdgx-a100x8"
            print(f"{name:<16} {label:<14} {mode:<6} {own['search']['segment_problems']:>8} "
                  f"{ilp['search']['ilp_solves']:>7} {ilp_wall:>7.2f} {own_wall:>8.2f} "
                  f"{ilp_wall / own_wall:>7.0f}x {seconds(ilp['predicted_step_time_s']):>11} "
                  f"{seconds(own['predicted_step_time_s']):>11}")
    return 0


def seconds(s):
    return f"{s:.3f} s" if s >= 1 else f"{s * 1e3:.3f} ms" if s >= 1e-3 else f"{s * 1e6:.1f} us"


if __name__ == "__main__":
    sys.exit(main())
