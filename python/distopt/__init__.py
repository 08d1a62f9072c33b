"""distopt from Python: plan, compile and run ONNX models.

    import distopt
    plan = distopt.plan("gpt.onnx", cluster="local:4", global_batch=8, mode="infer")
    print(plan.explain())                     # the summary `distopt plan` prints
    bundle = distopt.compile("gpt.onnx", out="gpt.dx", dims={"batch": 8})
    outputs = bundle.run({"input_ids": ids})  # in this process: dict of numpy arrays

Options are the command line's flags, spelled as keyword arguments
(`grad_dtype="bf16"` is `--grad-dtype bf16`, `dims={"batch": 8}` is
`--dim batch=8`); see `distopt compile --help` and `distopt plan --help`.
The compiler runs as the `distopt` program (found as $DISTOPT, on PATH, or
in the build tree this package sits in); a compiled single-rank CPU program
runs inside this process, others through `distopt run`.
"""

from ._bundle import Bundle, TensorInfo
from ._base import DistoptError, tool, version
from ._tool import Plan, compile, from_torch, launch, plan

__all__ = ["Bundle", "DistoptError", "Plan", "TensorInfo", "compile", "from_torch", "launch",
           "plan", "tool", "version"]
