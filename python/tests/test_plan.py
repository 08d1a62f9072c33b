"""`distopt plan`: the JSON keys a user scripts against, and the HTML report
rendered in headless Chromium (chromium-headless-shell from scripts/setup)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DISTOPT_BUILD_DIR", ROOT / "build"))
DISTOPT = BUILD / "bin" / "distopt"
sys.path.insert(0, str(ROOT / "python" / "testmodels"))
import gen_models  # noqa: E402

pytestmark = pytest.mark.skipif(not DISTOPT.exists(), reason="distopt not built")

REQUIRED = {"dp", "tp", "pp", "microbatches", "predicted_step_time_s", "compute_s",
            "communication_s", "bubble_s", "peak_memory_bytes_per_device", "stages"}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("models")
    gen_models.generate(str(out), ["gpt", "mlp", "gpt3_175b", "cnn", "transformer_encoder"])
    return out


def plan(*args):
    proc = subprocess.run([str(DISTOPT), "plan", *map(str, args)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("mode", ["train", "infer"])
def test_json_keys_and_consistency(models, tmp_path, mode):
    out = tmp_path / "plan.json"
    summary = plan(models / "gpt.onnx", "--cluster", "local:4", "--global-batch", 8,
                   "--mode", mode, "--json", out)
    assert summary.startswith("distopt plan: gpt.onnx on local:4")
    p = json.loads(out.read_text())
    assert REQUIRED <= set(p), REQUIRED - set(p)
    assert p["dp"] * p["tp"] * p["pp"] == p["devices_used"] <= 4
    assert p["predicted_step_time_s"] == pytest.approx(
        p["compute_s"] + p["communication_s"] + p["bubble_s"], rel=1e-9)
    assert len(p["stages"]) == p["pp"]
    covered = [s["segments"] for s in p["stages"]]
    assert covered[0][0] == 0 and covered[-1][1] == p["segments"]
    for a, b in zip(covered, covered[1:]):
        assert a[1] == b[0]
    assert p["peak_memory_bytes_per_device"] == pytest.approx(
        max(s["memory_bytes"]["total"] for s in p["stages"]))
    assert p["mode"] == mode
    for r in p["rejected"]:
        assert r["reason"]


def test_json_to_stdout_is_only_json(models):
    p = json.loads(plan(models / "mlp.onnx", "--cluster", "local:2", "--global-batch", 16,
                        "--json", "-"))
    assert REQUIRED <= set(p)


@pytest.mark.parametrize("model,cluster,mode", [
    ("gpt", "local:4", "train"), ("gpt", "dgx-a100x8", "train"), ("gpt", "local:2", "infer"),
    ("transformer_encoder", "4xdgx-a100x8", "train"), ("cnn", "local:4", "train")])
def test_variable_elimination_plans_as_well_as_the_ilp(models, model, cluster, mode):
    """Segment problems with cycles (attention's Q, K and V rejoining, residual
    blocks) are solved by variable elimination, exactly: the plan is predicted
    no slower than with CBC on every such problem (CBC's tolerances may leave
    it a hair worse), and none of them is left to CBC."""
    common = [models / f"{model}.onnx", "--cluster", cluster, "--global-batch", 16,
              "--dim", "seq=32", "--mode", mode, "--json", "-"]
    own = json.loads(plan(*common))
    ilp = json.loads(plan(*common, "--segment-solver", "ilp"))
    assert ilp["search"]["ilp_solves"] > 0
    assert own["search"]["ilp_solves"] == 0
    assert own["search"]["segment_problems"] == ilp["search"]["segment_problems"]
    assert own["predicted_step_time_s"] <= ilp["predicted_step_time_s"] * (1 + 1e-12)
    assert own["predicted_step_time_s"] == pytest.approx(ilp["predicted_step_time_s"], rel=1e-3)


def test_segment_solver_flag_errors(models):
    proc = subprocess.run([str(DISTOPT), "plan", str(models / "mlp.onnx"), "--cluster",
                           "local:2", "--global-batch", "4", "--segment-solver", "simplex"],
                          capture_output=True, text=True)
    assert proc.returncode != 0
    assert "--segment-solver must be auto, ilp or elimination, got 'simplex'" in proc.stderr


CHROMIUM = shutil.which("chromium-headless-shell") or shutil.which("chromium")


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium (scripts/setup installs it)")
def test_report_renders_in_headless_chromium(models, tmp_path):
    report = tmp_path / "plan.html"
    plan(models / "gpt3_175b.onnx", "--cluster", "128xdgx-a100x8", "--global-batch", 1536,
         "--seq-len", 2048, "--precision", "fp16", "--dp", 8, "--tp", 8, "--pp", 16,
         "--microbatches", 192, "--recompute", "full", "--report", report)
    html = report.read_text()
    assert "http" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")  # self-contained
    common = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
    dom = subprocess.run(common + ["--dump-dom", report.as_uri()], capture_output=True,
                         text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr
    # The browser parsed the page into a DOM with the schedule: 16 stages ×
    # 192 micro-batches × (forward, backward) boxes.
    assert '<h1 id="title">distopt plan: gpt3_175b.onnx' in dom.stdout
    assert dom.stdout.count("<title>forward micro-batch") == 16 * 192
    assert dom.stdout.count("<title>backward micro-batch") == 16 * 192
    assert dom.stdout.count("<svg") == 3
    png = tmp_path / "plan.png"
    shot = subprocess.run(common + [f"--screenshot={png}", "--window-size=1200,900",
                                    report.as_uri()], capture_output=True, text=True, timeout=120)
    assert shot.returncode == 0, shot.stderr
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # A blank 1200×900 page compresses to a few kB; the drawn schedule does not.
    assert len(data) > 30_000, len(data)


def test_gpt3_175b_done_when(models):
    """The planner's headline bar: GPT-3 175B on 128 DGX A100 nodes, batch 1536, train.
    Megatron-LM's published configuration forced is predicted within ±25% of
    the published ~32 s per iteration; the planner's own plan fits memory and
    is predicted no slower."""
    common = [models / "gpt3_175b.onnx", "--cluster", "128xdgx-a100x8", "--global-batch", 1536,
              "--seq-len", 2048, "--precision", "fp16", "--json", "-"]
    forced = json.loads(plan(*common, "--dp", 8, "--tp", 8, "--pp", 16, "--microbatches", 192,
                             "--recompute", "full"))
    assert (forced["dp"], forced["tp"], forced["pp"]) == (8, 8, 16)
    published = 96 * 1536 * 2048 * 96 * 12288**2 * (
        1 + 2048 / (6 * 12288) + 51200 / (16 * 96 * 12288)) / (1024 * 138e12)
    assert published == pytest.approx(31.9, abs=0.1)
    assert 0.75 * published <= forced["predicted_step_time_s"] <= 1.25 * published
    own = json.loads(plan(*common))
    assert own["fits"]
    # Fits with the usable fraction (90%) the planner leaves the runtime.
    assert own["peak_memory_bytes_per_device"] <= 0.9 * own["cluster"]["device_memory_bytes"]
    assert own["predicted_step_time_s"] <= forced["predicted_step_time_s"]
    assert own["devices_used"] <= 1024
