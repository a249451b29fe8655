"""The README's main job as a new user runs it: its third line (``autotune run --model autotune.examples:mlp
--trials 20``), read from the README's "Set up, test, run" block, run in an empty folder, its whole output kept.

    python benchmarks/readme_run.py

The README and docs/getting-started.md quote the end of this output (the front table, what each knob bought and
the verdict) and cite the file; tests/test_docs.py holds what they quote to be in it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import time

import harness
from harness import say


def main_job_line() -> str:
    block = (harness.ROOT / "README.md").read_text(encoding="utf-8").split("## Set up, test, run", 1)[1].split("```")[1]
    (line,) = [row.split("#", 1)[0].strip() for row in block.splitlines() if row.strip().startswith("autotune run")]
    return line


def main() -> int:
    args = harness.arguments(__doc__).parse_args()
    line = main_job_line()
    say(f"$ {line}    (in an empty folder, COLUMNS=120)")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "COLUMNS": "120"}
        done = subprocess.run([sys.executable, "-m", "autotune.cli", *shlex.split(line)[1:]], cwd=folder, env=env,
                              capture_output=True, text=True)
    for row in (done.stdout + done.stderr).splitlines():
        say(row.rstrip())
    say(f"exit code {done.returncode}; {time.perf_counter() - started:.0f} s")
    harness.write(args, {"command": line, "returncode": done.returncode, "output": done.stdout + done.stderr})
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
