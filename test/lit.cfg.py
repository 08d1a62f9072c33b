# -*- Python -*-
import os
import shutil

import lit.formats
from lit.llvm import llvm_config

config.name = "distopt"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".onnxtxt", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.distopt_obj_root, "test")

llvm_config.with_system_environment(["HOME", "TMPDIR"])
llvm_config.use_default_substitutions()

config.substitutions.append(("%models", config.distopt_models_dir))
config.substitutions.append(("%onnxpy", config.python_executable))
config.substitutions.append(("%srcroot", config.distopt_src_root))

tool_dirs = [config.distopt_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(["distopt", "distopt-opt"], tool_dirs)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

if shutil.which("mpirun"):
    config.available_features.add("mpi")
    # More ranks than cores, as root (CI runs as root), quiet about both.
    config.substitutions.append(
        ("%mpirun", "mpirun --oversubscribe --allow-run-as-root --mca btl self,vader"))
config.substitutions.append(
    ("%unittests", os.path.join(config.distopt_obj_root, "unittests")))
# Running lowered IR with mlir-runner against distopt's runtime.
config.substitutions.append(
    ("%runtime_shared",
     os.path.join(config.distopt_obj_root, "lib", "Runtime", "libdistopt_runtime_shared.so")))
config.substitutions.append(
    ("%mlir_c_runner_utils",
     os.path.join(config.llvm_tools_dir, "..", "lib", "libmlir_c_runner_utils.so")))
# cuda: distopt was built with its CUDA target and runtime (a toolkit was
# found), so CUDA bundles compile, assemble and link here. cuda-device: a
# GPU and its driver are present, so they also run (elsewhere such tests
# are reported unsupported, never passed).
if config.distopt_have_cuda in ("ON", "1", "TRUE", "True"):
    config.available_features.add("cuda")
import subprocess
try:
    if subprocess.run(["nvidia-smi", "-L"], capture_output=True, timeout=20).returncode == 0:
        config.available_features.add("cuda-device")
except (OSError, subprocess.TimeoutExpired):
    pass
