"""Runs `distopt import` on every file of a directory and reports inputs that
did not end with exit code 0 or 1 (a crash, an abort, a sanitizer report)."""
import pathlib
import subprocess
import sys

tool, directory = sys.argv[1], pathlib.Path(sys.argv[2])
dims = ["--dim", "batch=2", "--dim", "N=2", "--dim", "seq=2"]
crashed = 0
files = sorted(p for p in directory.iterdir() if p.is_file())
for path in files:
    proc = subprocess.run([tool, "import", str(path), *dims, "-o", "/dev/null"],
                          capture_output=True, text=True, timeout=60)
    if proc.returncode not in (0, 1):
        crashed += 1
        print(f"CRASH {path.name}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
print(f"replayed {len(files)} inputs, {crashed} crashed")
