"""Do claims travel from a busy machine to a quiet one? Issue 18's targets, measured.

    python benchmarks/busy_machine.py [--trials 30] [--repeat 5] [--parts quiet busy midway hf] [--hf-limit-s 900]

- ``quiet``: the README's cnn job (``autotune run --model autotune.examples:cnn --trials N``) on
  this machine as it is (run it when nothing else runs); the verdict's configuration is then
  measured again against the defaults, alternately, in fresh processes.
- ``busy``: the same job beside two CPU-bound processes (as many as this machine's cores);
  they are stopped before the re-measurement, which is quiet. Target: the verdict's
  configuration is not slower than the defaults on the quiet machine.
- ``midway``: the job with one CPU-bound process started once the noise floor is measured
  (mid-study). Target: the verdict names the busy machine, and its claimed interval covers the
  speed-up measured afterwards on the quiet machine.
- ``hf``: ``--model hf:gpt2`` (2 layers, 128 wide, 2 heads, 64 tokens, GPT-2's vocabulary), 6
  trials. Target: it finishes in under 5 minutes on a quiet 2-core machine (stopped as Ctrl-C
  stops it after ``--hf-limit-s``, and reported as unfinished).

Every study runs through the real command line in a temporary folder. Prints one block per part
and writes benchmarks/results/busy_machine-<date>.json and .txt (what it printed) after each part.
"""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
from harness import say

from autotune.api import measure
from autotune.evidence import Evidence, evidence_of
from autotune.evidence.stats import geomean

CNN = ["--model", "autotune.examples:cnn"]
HF = ["--model", "hf:gpt2", "--model-arg", "n_layer=2", "--model-arg", "n_embd=128", "--model-arg", "n_head=2",
      "--seq-len", "64"]


def hogs(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
        p.wait()


def run(folder: Path, study: str, model: list[str], trials: int, during: Any = None,
        limit_s: float | None = None) -> tuple[float, Evidence]:
    """``autotune run`` as a user types it; ``during(store)`` is called while it runs (polled each second).
    Past ``limit_s`` the run is stopped as Ctrl-C stops it (its study keeps what it measured)."""
    cmd = [sys.executable, "-m", "autotune.cli", "run", *model, "--trials", str(trials), "--study", study]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    stopped = False
    while proc.poll() is None and (during is not None or limit_s is not None):
        if during is not None:
            during(folder / "studies" / f"{study}.db")
        if limit_s is not None and time.monotonic() - start > limit_s and not stopped:
            proc.send_signal(signal.SIGINT)
            stopped = True
        time.sleep(1.0)
    out, _ = proc.communicate()
    elapsed = time.monotonic() - start
    if stopped:
        say(f"   stopped after {elapsed:.0f} s (limit {limit_s:.0f} s), unfinished")
    elif proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{out[-3000:]}")
    stored = harness.open_store(harness.sqlite_url(folder / "studies" / f"{study}.db"), read_only=True).read(study)
    return elapsed, evidence_of(stored)


def remeasure(model: list[str], config: dict[str, Any], repeats: int) -> float:
    """The configuration against the defaults, alternately, each in a fresh process: the ratio of geometric means."""
    spec = model[1]
    args = {}
    if "--model-arg" in model:
        args = dict(a.split("=", 1) for a in model[model.index("--model-arg") + 1 :: 2] if "=" in a)
    mine, defaults = [], []
    for _ in range(repeats):
        defaults.append(measure(spec, {}, model_args={k: int(v) for k, v in args.items()} or None).samples_per_s)
        mine.append(measure(spec, config, model_args={k: int(v) for k, v in args.items()} or None).samples_per_s)
    return geomean(mine) / geomean(defaults)


def report(part: str, elapsed: float, ev: Evidence, again: float | None, trials: int) -> dict[str, Any]:
    v = ev.verdict()
    c = ev.configs.get(v.winner) if v.winner is not None else None
    s = v.speedup
    inside = s is not None and s.low is not None and again is not None and s.low <= again <= s.high
    say(f"== {part}: {trials} trials in {elapsed:.0f} s; {ev.noise.text()}")
    say(f"   {ev.load.text()}")
    say(f"   verdict: {v.text}")
    if again is not None:
        say(f"   re-measured on the quiet machine: {again:.2f}x the defaults"
            + (f" -> {'inside' if inside else 'OUTSIDE'} the claimed {s.text()}"
               if s is not None and v.state == 'gain' else ""))
    return {"elapsed_s": elapsed, "verdict": v.to_dict(), "load": ev.load.to_dict(), "noise": ev.noise.to_dict(),
            "config": dict(c.changes) if c else {}, "remeasured_speedup": again,
            "inside": inside if v.state == "gain" else None}


def main() -> None:
    ap = harness.arguments(__doc__, trials=30, repeat=5)
    ap.add_argument("--hf-limit-s", type=float, default=900.0, help="stop the hf part (as Ctrl-C does) after this long")
    ap.add_argument("--parts", nargs="*", default=["quiet", "busy", "midway", "hf"])
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    say(f"machine: {platform.processor() or platform.machine()}, {cores} cores; {time.strftime('%Y-%m-%d %H:%M')}")
    out: dict[str, Any] = {}

    def save() -> None:  # after every part, so that a long run stopped midway keeps what it measured
        harness.write(args, out)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if "quiet" in args.parts:
            elapsed, ev = run(folder, "quiet", CNN, args.trials)
            v = ev.verdict()
            again = remeasure(CNN, ev.configs[v.winner].changes, args.repeat) if v.state == "gain" else None
            out["quiet"] = report("cnn, quiet machine", elapsed, ev, again, args.trials)
            save()
        if "busy" in args.parts:
            load = hogs(cores)
            try:
                elapsed, ev = run(folder, "busy", CNN, args.trials)
            finally:
                stop(load)
            v = ev.verdict()
            again = remeasure(CNN, ev.configs[v.winner].changes, args.repeat) if v.state == "gain" else None
            out["busy"] = report(f"cnn beside {cores} CPU-bound processes", elapsed, ev, again, args.trials)
            out["busy"]["not_slower_on_a_quiet_machine"] = again is None or again >= 1.0
            save()
        if "midway" in args.parts:
            started: list[subprocess.Popen] = []

            def start_when_floored(db: Path) -> None:
                if started or not db.exists():
                    return
                try:
                    study = harness.open_store(harness.sqlite_url(db), read_only=True).read("midway")
                except Exception:  # noqa: BLE001 - the study is being created
                    return
                if sum(1 for m in study.remeasurements() if m.round_id.startswith("floor-")) >= 2:
                    started.extend(hogs(1))

            try:
                elapsed, ev = run(folder, "midway", CNN, args.trials, during=start_when_floored)
            finally:
                stop(started)
            v = ev.verdict()
            again = remeasure(CNN, ev.configs[v.winner].changes, args.repeat) if v.state == "gain" else None
            out["midway"] = report("cnn, one CPU-bound process started after the noise floor", elapsed, ev, again,
                                   args.trials)
            out["midway"]["names_the_busy_machine"] = "busy machine" in v.text
            save()
        if "hf" in args.parts:
            elapsed, ev = run(folder, "hf", HF, 6, limit_s=args.hf_limit_s)
            finished = sum(1 for c in ev.configs.values())
            out["hf"] = report(f"hf:gpt2 (2 layers, 128 wide), 6 trials ({finished} measured)", elapsed, ev, None, 6)
            out["hf"]["under_5_minutes"] = elapsed < 300
            save()


if __name__ == "__main__":
    main()
