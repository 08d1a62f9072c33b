"""The compiler: `distopt plan` and `distopt compile`, called as a program
with keyword arguments turned into its flags."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ._base import DistoptError, _run, flags
from ._bundle import Bundle


class _ModelPath:
    """A path to the model: the file given, or an onnx.ModelProto saved in
    a temporary directory for the duration of the call."""

    def __init__(self, model):
        self._tmp = None
        if isinstance(model, (str, os.PathLike)):
            self.path = Path(model)
            if not self.path.exists():
                raise FileNotFoundError(f"no model file '{self.path}'")
        elif hasattr(model, "SerializeToString") and hasattr(model, "graph"):
            import onnx
            self._tmp = tempfile.TemporaryDirectory(prefix="distopt-model-")
            self.path = Path(self._tmp.name) / ((model.graph.name or "model") + ".onnx")
            onnx.save(model, str(self.path))
        else:
            raise TypeError("model must be a path or an onnx.ModelProto, got "
                            f"{type(model).__name__}")

    def __enter__(self) -> Path:
        return self.path

    def __exit__(self, *exc):
        if self._tmp is not None:
            self._tmp.cleanup()


class Plan:
    """A plan `distopt plan` found: its JSON fields as attributes
    (`plan.dp`, `plan.tp`, `plan.pp`, `plan.microbatches`,
    `plan.predicted_step_time_s`, `plan.rejected`, ...)."""

    def __init__(self, data: dict, summary: str, report: str):
        self._data = data
        self._summary = summary
        self._report = report

    def __getattr__(self, name: str):
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(f"a plan has no field '{name}' (fields: "
                                 f"{', '.join(sorted(self._data))})") from None

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._data))

    def __repr__(self) -> str:
        d = self._data
        return (f"Plan(dp={d.get('dp')}, tp={d.get('tp')}, pp={d.get('pp')}, "
                f"microbatches={d.get('microbatches')}, "
                f"predicted_step_time_s={d.get('predicted_step_time_s')})")

    def explain(self) -> str:
        """The readable plan: the chosen split, its predicted time and
        memory, the stages and the rejected alternatives with why."""
        return self._summary

    def to_json(self) -> dict:
        """The plan as `distopt plan --json` writes it."""
        return json.loads(json.dumps(self._data))

    def report_html(self, path) -> Path:
        """Writes the self-contained HTML report (`distopt plan --report`)."""
        Path(path).write_text(self._report)
        return Path(path)


def plan(model, cluster: str, **options) -> Plan:
    """Plans `model` (a path or an onnx.ModelProto) for `cluster` (a preset,
    `local:N`, `NxPRESET` or a YAML file) with `distopt plan`'s options
    (mode, global_batch, seq_len, dp, tp, pp, microbatches, precision,
    optimizer, recompute, schedule, sync, ...)."""
    with _ModelPath(model) as path, tempfile.TemporaryDirectory(prefix="distopt-plan-") as tmp:
        js, html = Path(tmp) / "plan.json", Path(tmp) / "plan.html"
        summary = _run(["plan", str(path), f"--cluster={cluster}", f"--json={js}",
                        f"--report={html}", *flags(options)])
        return Plan(json.loads(js.read_text()), summary, html.read_text())


def compile(model, out=None, **options):
    """Compiles `model` (a path or an onnx.ModelProto) into a bundle with
    `distopt compile`'s options (dims, shapes, cluster, dp, tp, pp, loss,
    optimizer, precision, target, ...) and opens it. `out` defaults to
    `<model>.dx` beside a model file, and a temporary directory for a
    ModelProto."""
    with _ModelPath(model) as path:
        if out is None and isinstance(model, (str, os.PathLike)):
            out = path.with_suffix(".dx")
        elif out is None:
            out = Path(tempfile.mkdtemp(prefix="distopt-bundle-")) / "model.dx"
        # The program also as a shared library, so that Bundle.run runs a
        # single-rank CPU bundle in this process.
        options.setdefault("shared_library", True)
        _run(["compile", str(path), "-o", str(out), *flags(options)])
    return Bundle(out)


def from_torch(module, example_inputs, out=None, *, input_names=None, output_names=None,
               dynamic_batch: bool = False, opset: int = 17, **options):
    """Exports `module` with torch.onnx.export on `example_inputs` (a tensor
    or a tuple of tensors) and compiles the ONNX model with `options`
    (those of compile). Inputs are named `input_names` (default input0,
    input1, ...; one input: "input"), outputs `output_names` (default
    output0, ...; one output: "output"). The model is exported in eval mode
    with the example's static shapes; `dynamic_batch=True` exports
    dimension 0 as a symbol `batch` (bind it with dims={"batch": N})."""
    import torch
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    if input_names is None:
        input_names = (["input"] if len(example_inputs) == 1 else
                       [f"input{i}" for i in range(len(example_inputs))])
    with torch.no_grad():
        probe = module(*example_inputs)
    n_out = len(probe) if isinstance(probe, (tuple, list)) else 1
    if output_names is None:
        output_names = ["output"] if n_out == 1 else [f"output{i}" for i in range(n_out)]
    axes = None
    if dynamic_batch:
        axes = {n: {0: "batch"} for n in [*input_names, *output_names]}
    was_training = module.training
    module.eval()
    try:
        with tempfile.TemporaryDirectory(prefix="distopt-torch-") as tmp:
            path = Path(tmp) / ((type(module).__name__ or "model") + ".onnx")
            torch.onnx.export(module, example_inputs, str(path), input_names=input_names,
                              output_names=output_names, dynamic_axes=axes,
                              opset_version=opset, do_constant_folding=True)
            if out is None:
                out = Path(tempfile.mkdtemp(prefix="distopt-bundle-")) / "model.dx"
            return compile(path, out=out, **options)
    finally:
        module.train(was_training)


def launch(script, ranks: int, *args, hosts=None, hostfile=None, python=None) -> None:
    """Runs the Python `script` (with `args`) as `ranks` ranks of one MPI
    job (mpirun: on this machine, or on `hosts` "a:8,b:8" / `hostfile`),
    each rank running the whole script: a Bundle.run or Bundle.train in it
    runs the bundle's program as that rank (ranks must equal the
    bundle's), and the results come back on rank 0. Raises DistoptError
    when the job fails."""
    import sys
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise DistoptError("mpirun not found on PATH (install openmpi-bin)")
    cmd = [mpirun, "-np", str(int(ranks))]
    if hosts or hostfile:
        cmd += ["--host", hosts] if hosts else ["--hostfile", str(hostfile)]
        cmd += ["--map-by", "slot"]
        cmd += [a for k in os.environ if k.startswith(("DISTOPT_", "OMP_", "PYTHON"))
                for a in ("-x", k)]
    elif int(ranks) > (os.cpu_count() or 1):
        cmd.append("--oversubscribe")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += [python or sys.executable, str(script), *map(str, args)]
    proc = subprocess.run(cmd)
    if proc.returncode != 0:
        raise DistoptError(f"the job {' '.join(cmd)} failed (exit status {proc.returncode})")
