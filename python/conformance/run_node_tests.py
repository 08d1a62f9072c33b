#!/usr/bin/env python3
"""ONNX backend node-test conformance for distopt.

Runs ONNX's backend node tests (the cases defined in onnx.backend.test.case.node,
the same that ship as onnx/backend/test/data/node/*: a model plus input and
expected output tensors) through `distopt compile` and the compiled executable,
and compares with the test's tolerance (rtol 1e-3, atol 1e-7 unless the case
says otherwise; integers and booleans exactly).

In scope are the tests whose every node is an op type distopt imports. Each
prints one line:
    PASS name
    FAIL name: <why: max error, wrong shape, compile or run error>
    UNSUPPORTED name: <the importer's reason (opset, element type, attribute)>
then the totals `N passed, N failed, N skipped`.

    run_node_tests.py [--filter REGEX] [--jobs N] [--expected FILE] [--write-expected FILE]
                      [--target cpu|cuda|cuda-emu|cuda-emu-forward] [--compile-only]
                      [--emulate-orders reverse,forward] [--runtime-link static|shared]

--emulate-orders (cuda-emu): each bundle runs once per thread order, one
compile for both (a test passes when every order does).

--expected FILE: exit 1 if a test listed in FILE does not pass (a regression).
"""

from __future__ import annotations

import argparse
import json
import concurrent.futures as futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]

def supported_ops(distopt: str) -> set[str]:
    """The ONNX op types distopt's importer supports (`distopt ops`)."""
    out = subprocess.run([distopt, "ops"], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def collect(filter_re: str | None, supported: set[str]):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case import node
        cases = node.collect_testcases()
    in_scope, out_of_scope = [], 0
    for case in cases:
        if case.kind != "node" or not case.model:
            continue
        if filter_re and not re.search(filter_re, case.name):
            continue
        if {n.op_type for n in case.model.graph.node} <= supported and all(
                n.domain in ("", "ai.onnx") for n in case.model.graph.node):
            in_scope.append(case)
        else:
            out_of_scope += 1
    return sorted(in_scope, key=lambda c: c.name), out_of_scope


def first_error_line(text: str) -> str:
    for line in text.splitlines():
        if "error:" in line:
            return line.split("error:", 1)[1].strip()
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1] if lines else "(no message)"


def compare(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str | None:
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if want.dtype.kind in "biuU":
        bad = np.count_nonzero(got != want)
        return f"{bad} of {want.size} elements differ" if bad else None
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan_ok = np.isnan(g) == np.isnan(w)
    close = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True) & nan_ok
    if close.all():
        return None
    err = np.abs(g - w)[~close]
    return (f"{np.count_nonzero(~close)} of {want.size} elements off, max abs err "
            f"{np.nanmax(err) if err.size else float('nan'):.3g} (rtol {rtol:g}, atol {atol:g})")


def as_array(value) -> np.ndarray:
    """Test data is NumPy arrays or TensorProtos (Cast tests)."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic):  # NumPy scalar
        return np.asarray(value)
    from onnx import TensorProto, numpy_helper
    if isinstance(value, TensorProto):
        return numpy_helper.to_array(value)
    raise TypeError(f"test data of type {type(value).__name__} is not a tensor")


def run_case(case, distopt: str, workdir: Path, target: str = "cpu",
             compile_only: bool = False, pack: Path | None = None,
             orders: tuple[str, ...] = (), runtime_link: str = "static") -> tuple[str, str, str]:
    d = workdir / case.name
    d.mkdir(parents=True, exist_ok=True)
    model_path = d / "model.onnx"
    model_path.write_bytes(case.model.SerializeToString())
    graph = case.model.graph
    inits = {t.name for t in graph.initializer}
    input_names = [i.name for i in graph.input if i.name not in inits]
    output_names = [o.name for o in graph.output]
    frozen_names: list[str] = []
    for ds, (inputs, outputs) in enumerate(case.data_sets):
        try:
            inputs = [as_array(a) for a in inputs]
            outputs = [as_array(a) for a in outputs]
        except TypeError as e:
            return case.name, "UNSUPPORTED", str(e)
        files = {}
        for i, (name, a) in enumerate(zip(input_names, inputs)):
            files[name] = d / f"in{ds}_{i}.npy"
            np.save(files[name], a)
        shapes = []
        for name, a in zip(input_names, inputs):
            dims = "x".join(str(s) for s in a.shape) if a.ndim else "scalar"
            shapes += ["--shape", f"{name}={dims}"]
        bundle = d / f"m{ds}.dx"
        # cuda-emu-forward: the emulated kernels with each block's threads in
        # increasing order between barriers (distopt's default is reverse).
        target_flags = (["--target", "cuda-emu", "--emulate-threads", "forward"]
                        if target == "cuda-emu-forward" else ["--target", target])
        # Packed bundles share one runtime library (pack/lib): a thousand
        # static ones would not fit what a GPU machine can be sent.
        link = ["--runtime-link", "shared" if pack is not None else runtime_link]

        def compile_(shape_flags, frozen_flags):
            return subprocess.run([distopt, "compile", str(model_path), *shape_flags,
                                   *frozen_flags, *target_flags, *link, "-o", str(bundle)],
                                  capture_output=True, text=True, timeout=300)

        frozen = []
        comp = compile_(shapes, frozen)
        if comp.returncode != 0:
            # Why: the importer's refusal (unsupported), a shape input to
            # freeze, or a compile failure. `distopt import` tells them apart.
            imp = subprocess.run([distopt, "import", str(model_path), *shapes, "-o", os.devnull],
                                 capture_output=True, text=True, timeout=120)
            if imp.returncode != 0 and "after shape folding" in imp.stderr:
                # ONNX lets axes/pads/shape targets (and Resize's scales and
                # roi) be runtime inputs; distopt compiles static shapes, so
                # bind the integer inputs, the float scalars (Range's start)
                # and the small 1-D float ones after the first to the test's
                # values at compile time (`--freeze`) and retry.
                frozen_names = [n for i, (n, a) in enumerate(zip(input_names, inputs))
                                if a.dtype.kind in "iu"
                                or (a.dtype.kind == "f" and a.ndim == 0)
                                or (i > 0 and a.dtype.kind == "f" and a.ndim <= 1
                                    and a.size <= 64)]
                for n in frozen_names:
                    frozen += ["--freeze", f"{n}={files[n]}"]
                shapes = [a for n, a in zip(input_names, inputs) if n not in frozen_names
                          for a in ["--shape", f"{n}=" + ("x".join(map(str, a.shape))
                                                          if a.ndim else "scalar")]]
                imp = subprocess.run([distopt, "import", str(model_path), *shapes, *frozen,
                                      "-o", os.devnull],
                                     capture_output=True, text=True, timeout=120)
            if imp.returncode != 0:
                return case.name, "UNSUPPORTED", first_error_line(imp.stderr)
            if frozen:
                comp = compile_(shapes, frozen)
        if comp.returncode != 0:
            return case.name, "FAIL", "compile: " + first_error_line(comp.stderr)
        args = []
        for name in input_names:
            if name not in frozen_names:
                args += ["--input", f"{name}={files[name]}"]
        if pack is not None:
            # For a machine without the compiler: the bundle, its inputs and
            # the expected outputs (run there with --run-packed).
            dst = pack / case.name / f"ds{ds}"
            shutil.copytree(bundle, dst / "m.dx" , dirs_exist_ok=True)
            (dst / "m.dx" / bundle.stem).rename(dst / "m.dx" / "m")
            ins = {}
            for name in input_names:
                if name not in frozen_names:
                    shutil.copy(files[name], dst / files[name].name)
                    ins[name] = files[name].name
            outs = {}
            for i, (name, want) in enumerate(zip(output_names, outputs)):
                np.save(dst / f"want{i}.npy", want)
                outs[name] = f"want{i}.npy"
            (dst / "case.json").write_text(json.dumps(
                {"inputs": ins, "outputs": outs, "rtol": case.rtol, "atol": case.atol}))
        if compile_only or pack is not None:
            continue
        # An emulating bundle runs once per thread order asked for
        # (DISTOPT_EMULATE_THREADS): one compile checks both.
        for order in orders or (None,):
            out_dir = d / f"out{ds}" / (order or "")
            where = f" ({order} thread order)" if order else ""
            # The tests run side by side (--jobs), and each model is tiny: one
            # thread each, so that no executable's threads spin on a core
            # another test needs.
            env = dict(os.environ, DISTOPT_NUM_THREADS="1")
            if order:
                env["DISTOPT_EMULATE_THREADS"] = order
            run = subprocess.run([str(bundle / bundle.stem), *args, "--output-dir", str(out_dir)],
                                 capture_output=True, text=True, timeout=120, env=env)
            if run.returncode != 0:
                return (case.name, "FAIL",
                        f"run{where} (exit {run.returncode}): " + first_error_line(run.stderr))
            for name, want in zip(output_names, outputs):
                outs = list(out_dir.glob(re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".npy"))
                if not outs:
                    return case.name, "FAIL", f"output {name} missing{where}"
                got = np.load(outs[0])
                if want.dtype.name == "bfloat16" and got.dtype.kind == "V":
                    got = got.view(want.dtype)
                why = compare(got, want, case.rtol, case.atol)
                if why:
                    return case.name, "FAIL", f"output {name}{where}: {why}"
    note = f"inputs frozen at compile time: {', '.join(frozen_names)}" if frozen_names else ""
    if compile_only or pack is not None:
        note = "compiled only" + (f"; {note}" if note else "")
    return case.name, "PASS", note


def packed_env(pack: Path) -> dict:
    """The environment packed bundles run in: their shared runtime first."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = f"{pack / 'lib'}:" + env.get("LD_LIBRARY_PATH", "")
    return env


def run_packed_case(case_dir: Path) -> tuple[str, str]:
    for ds in sorted(case_dir.glob("ds*")):
        meta = json.loads((ds / "case.json").read_text())
        args = [a for n, f in meta["inputs"].items() for a in ("--input", f"{n}={ds / f}")]
        out_dir = ds / "out"
        try:
            run = subprocess.run([str(ds / "m.dx" / "m"), *args, "--output-dir", str(out_dir)],
                                 capture_output=True, text=True, timeout=120,
                                 env=packed_env(case_dir.parent))
        except subprocess.TimeoutExpired:
            return "FAIL", "run: timeout"
        if run.returncode != 0:
            return "FAIL", f"run (exit {run.returncode}): " + first_error_line(run.stderr)
        for name, f in meta["outputs"].items():
            want = np.load(ds / f)
            outs = list(out_dir.glob(re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".npy"))
            if not outs:
                return "FAIL", f"output {name} missing"
            got = np.load(outs[0])
            if want.dtype.kind == "V" and want.dtype.itemsize == 2:
                # bfloat16, saved as raw 16-bit values on both sides.
                widen = lambda a: (a.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
                got, want = widen(got), widen(want)
            try:
                why = compare(got, want, meta["rtol"], meta["atol"])
            except (TypeError, ValueError) as e:
                why = f"cannot compare ({got.dtype} vs {want.dtype}): {e}"
            if why:
                return "FAIL", f"output {name}: {why}"
    return "PASS", ""


def read_known(path: str | None) -> dict[str, str]:
    """The --known file: test name -> the accepted difference."""
    known = {}
    if path:
        for line in Path(path).read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                name, _, reason = line.strip().partition(" ")
                known[name] = reason.strip()
    return known


def run_packed(pack: Path, jobs: int, known: dict[str, str]) -> int:
    """Runs the bundles --pack wrote (on a machine without the compiler); a
    failure listed in KNOWN is printed as KNOWN and does not fail the run."""
    cases = sorted(p for p in pack.iterdir() if p.is_dir() and p.name != "lib")
    results = {}
    # Each result is printed as it comes (a run cut short by a time limit
    # still says what passed), then the others again, sorted, above the count.
    with futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        running = {pool.submit(run_packed_case, c): c.name for c in cases}
        for done in futures.as_completed(running):
            name = running[done]
            status, why = done.result()
            if status == "FAIL" and name in known:
                status, why = "KNOWN", f"{why} [{known[name]}]"
            results[name] = (status, why)
            print(f"{status} {name}" + (f": {why}" if why else ""), flush=True)
    print()
    for name, (status, why) in sorted(results.items()):
        if status != "PASS":
            print(f"{status} {name}: {why}")
    count = {k: sum(s == k for s, _ in results.values()) for k in ("PASS", "FAIL", "KNOWN")}
    print(f"\n{count['PASS']} passed, {count['FAIL']} failed, "
          f"{count['KNOWN']} known differences (packed bundles)")
    return 1 if count["FAIL"] else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--distopt", default=str(ROOT / "build" / "bin" / "distopt"))
    ap.add_argument("--filter", help="only tests whose name matches this regex")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--expected", help="file of test names that must pass")
    ap.add_argument("--write-expected", help="write the names of passing tests here")
    ap.add_argument("--known", help="file of tests that fail by an accepted difference "
                                    "(name, reason): printed as KNOWN, not FAIL")
    ap.add_argument("--keep", help="keep work files in this directory")
    ap.add_argument("--target", default="cpu", choices=["cpu", "cuda", "cuda-emu", "cuda-emu-forward"],
                    help="what the bundles are compiled for (distopt compile --target)")
    ap.add_argument("--emulate-orders", default="",
                    help="with --target cuda-emu: run each bundle once per thread order "
                         "listed (reverse,forward; DISTOPT_EMULATE_THREADS), one compile "
                         "for all; default: the compiled order")
    ap.add_argument("--runtime-link", default="static", choices=["static", "shared"],
                    help="how the bundles get distopt's runtime (distopt compile "
                         "--runtime-link; shared links faster)")
    ap.add_argument("--compile-only", action="store_true",
                    help="compile (for cuda: assemble every kernel with ptxas) but do not run")
    ap.add_argument("--pack", type=Path,
                    help="write bundles, inputs and expected outputs here instead of running "
                         "them (run them elsewhere with --run-packed)")
    ap.add_argument("--run-packed", type=Path, help="run the bundles --pack wrote and compare")
    ap.add_argument("--runtime-lib-dir", default=str(ROOT / "build" / "lib" / "Runtime"),
                    help="where --pack finds the shared runtime libraries")
    args = ap.parse_args()
    known = read_known(args.known)
    if args.run_packed:
        return run_packed(args.run_packed, args.jobs, known)
    if args.pack:
        # The packed bundles load the shared runtime (--runtime-link shared)
        # from pack/lib, where --run-packed puts it on LD_LIBRARY_PATH.
        (args.pack / "lib").mkdir(parents=True, exist_ok=True)
        libs = sorted(Path(args.runtime_lib_dir).glob("libdistopt_runtime*_shared.so"))
        if not libs:
            print(f"no shared runtime in {args.runtime_lib_dir}", file=sys.stderr)
            return 1
        for lib in libs:
            shutil.copy(lib, args.pack / "lib" / lib.name)

    orders = tuple(o for o in args.emulate_orders.split(",") if o)
    if orders and (args.target != "cuda-emu" or args.compile_only or args.pack
                   or any(o not in ("reverse", "forward") for o in orders)):
        print("--emulate-orders takes reverse and/or forward, with --target cuda-emu "
              "and bundles that run here", file=sys.stderr)
        return 2

    cases, out_of_scope = collect(args.filter, supported_ops(args.distopt))
    workdir = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="distopt-conformance-"))
    results = {}
    with futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        jobs = {pool.submit(run_case, c, args.distopt, workdir, args.target,
                            args.compile_only, args.pack, orders,
                            args.runtime_link): c.name for c in cases}
        for job in futures.as_completed(jobs):
            try:
                name, status, why = job.result()
            except subprocess.TimeoutExpired as e:
                name, status, why = jobs[job], "FAIL", f"timeout: {' '.join(map(str, e.cmd[:2]))}"
            results[name] = (status, why)
    for name in sorted(results):
        status, why = results[name]
        if status == "FAIL" and name in known:
            status, why = "KNOWN", f"{why} [{known[name]}]"
        sep = " (" if status == "PASS" else ": "
        end = ")" if status == "PASS" else ""
        print(f"{status} {name}" + (f"{sep}{why}{end}" if why else ""))
    for name in sorted(known):
        if results.get(name, ("",))[0] == "PASS" and not (args.compile_only or args.pack):
            print(f"note: {name} passes now; remove it from {args.known}")
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)

    passed = sorted(n for n, (s, _) in results.items() if s == "PASS")
    failed = [n for n, (s, _) in results.items() if s == "FAIL" and n not in known]
    accepted = [n for n, (s, _) in results.items() if s == "FAIL" and n in known]
    skipped = [n for n, (s, _) in results.items() if s == "UNSUPPORTED"]
    print(f"\n{len(cases)} node tests use only ops distopt imports; "
          f"{out_of_scope} others are out of scope.")
    if args.write_expected:
        Path(args.write_expected).write_text("".join(n + "\n" for n in passed))
    rc = 0
    if args.expected:
        expected = [l.strip() for l in Path(args.expected).read_text().splitlines()
                    if l.strip() and not l.startswith("#")]
        if args.filter:  # only the selected tests can be checked
            expected = [n for n in expected if re.search(args.filter, n)]
        regressed = [n for n in expected if results.get(n, ("MISSING",))[0] != "PASS"]
        new = [n for n in passed if n not in set(expected)]
        for n in regressed:
            print(f"REGRESSION {n}: expected to pass, got {results.get(n, ('MISSING', ''))}")
        if new:
            print(f"{len(new)} tests pass that are not in {args.expected} (add them): {' '.join(new[:20])}")
        rc = 1 if regressed else 0
    print(f"{len(passed)} passed, {len(failed)} failed, "
          + (f"{len(accepted)} known differences, " if accepted else "")
          + f"{len(skipped)} skipped")
    return rc


if __name__ == "__main__":
    sys.exit(main())
