"""How long the honest answer takes: the README's main job, and the issues' Hugging Face study, end to end.

    python benchmarks/main_job.py [--jobs cnn hf bert] [--repeat 1] [--out main_job]

Runs each job exactly as a user types it (``autotune run ...`` in a fresh, empty folder, in
a process of its own), times it from start to the last line it prints, and reads its study
for what the answer cost beyond the search: the noise floor, the race and the ablation
(processes, configurations measured, seconds) per search trial, the verdict with what
each knob bought, and the numerics check's time as a share of the study's (issue 36: at most
10%). Run it on a quiet machine: the first line says how busy it was.

- ``cnn``: ``autotune run --model autotune.examples:cnn --trials 30`` (the README's main job;
  issue 17's target: under 5 minutes, everything it prints included);
- ``hf``: ``autotune run --model hf:gpt2 --model-arg n_layer=2 --model-arg n_embd=128
  --model-arg n_head=2 --seq-len 64 --trials 6`` (GPT-2's own 50,257-token vocabulary;
  issue 18's target: under 5 minutes with the same or a better verdict);
- ``cnn90``: ``autotune run --model autotune.examples:cnn --time-budget 90s`` (issue 42's target: it ends within 5% of
  its budget, plus a few seconds of process exit, with a claim measured apart from at least 3 processes);
- ``bert``: ``autotune run --model hf:bert`` with 2 layers 128 wide (2 heads, 512 inner), ``--seq-len 64
  --trials 10`` (issue 26's small BERT: extra processes per search trial at most 0.5).

Writes benchmarks/results/main_job-<date>.json and .txt (what it printed; ``--out`` names them).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness
from harness import say
from autotune.evidence import evidence_of
from autotune.machine import identity
from autotune.units import parse_duration

JOBS = {
    "cnn": ["--model", "autotune.examples:cnn", "--trials", "30"],
    "hf": ["--model", "hf:gpt2", "--model-arg", "n_layer=2", "--model-arg", "n_embd=128", "--model-arg", "n_head=2",
           "--seq-len", "64", "--trials", "6"],
    "cnn90": ["--model", "autotune.examples:cnn", "--time-budget", "90s"],
    "bert": ["--model", "hf:bert", "--model-arg", "num_hidden_layers=2", "--model-arg", "hidden_size=128",
             "--model-arg", "num_attention_heads=2", "--model-arg", "intermediate_size=512", "--seq-len", "64",
             "--trials", "10"],
}


def run(name: str) -> dict:
    from calibration import extras

    with tempfile.TemporaryDirectory() as folder:
        cmd = [sys.executable, "-m", "autotune.cli", "run", *JOBS[name]]
        start = time.monotonic()
        proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, check=False)
        wall = time.monotonic() - start
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                             f"{proc.stderr[-3000:]}")
        db = next(Path(folder, "studies").glob("*.db"))
        study = harness.open_store(harness.sqlite_url(db), read_only=True).read(db.stem)
        ev = evidence_of(study)
        cost = extras(study)
        trials = [t for t in study.trials if t.duplicate_of is None and t.outcome is not None and t.role != "minimal"]
        trial_s = sum(float(t.duration_s or 0.0) for t in trials)
        ablation = ev.ablation()
        check = ev.numerics()
        study_s = ev.time_spent()["wall_s"]
        args = JOBS[name]
        budget = parse_duration(args[args.index("--time-budget") + 1]) if "--time-budget" in args else None
        conf = ev.confirmation
        return {
            "command": "autotune run " + " ".join(JOBS[name]),
            "wall_s": wall,
            "budget_s": budget,
            # the claim measured apart: the recommendation's fresh processes, and why the claim stopped
            "claim_processes": conf.claim.processes if conf is not None and conf.claim is not None else 0,
            "claim_stop": conf.record.stop.value if conf is not None and conf.record.stop else None,
            "summary_line": next((line for line in proc.stdout.splitlines() if line.startswith("done: ")), None),
            "search_trials": len(trials),
            "trials_s": trial_s,
            "extras": cost,
            "extra_processes_per_trial": cost["processes"] / max(1, len(trials)),
            "verdict": ev.verdict().to_dict(),
            "ablation": ablation.to_dict() if ablation else None,
            "noise": ev.noise.to_dict(),
            "within_process_noise": ev.within_noise.to_dict(),
            "load": ev.load.to_dict(),
            "study_s": study_s,
            # the numerics check (issue 36: at most 10% of the study's time): its runs' wall time over the study's
            "numerics": check.to_dict() if check is not None else None,
            "numerics_share": check.cost_s / study_s if check is not None and study_s else None,
            "closing_lines": proc.stdout.splitlines()[-40:],
        }


def main() -> None:
    from autotune.machine import hardware
    from autotune.machine import load

    ap = harness.arguments(__doc__, repeat=1)
    ap.add_argument("--jobs", nargs="*", default=list(JOBS))
    args = ap.parse_args()
    busy = load.other_cores_now(2.0)
    say(f"machine: {identity.short(hardware.fingerprint('cpu'))}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M')}; "
        f"other processes used {busy['other_cores']:.1f} cores at the start")
    out: dict[str, list[dict]] = {}
    for name in args.jobs:
        for k in range(args.repeat):
            r = run(name)
            out.setdefault(name, []).append(r)
            c = r["extras"]
            say()
            say(f"== {name}: {r['command']}")
            say(f"   {r['wall_s']:.0f} s from start to its last line ({r['wall_s'] / 60:.1f} min; target under 5 min); "
                f"{r['search_trials']} search trials took {r['trials_s']:.0f} s")
            say(f"   extra: {c['processes']} processes ({c['floor']} floor, {c['race_processes']} race of which "
                f"{c['race_shared']} shared, {c['ablation_processes']} ablation, {c['minimal_trials']} recommendation "
                f"alone), {c['configurations']} configurations, {c['seconds']:.0f} s: "
                f"{r['extra_processes_per_trial']:.2f} processes per search trial")
            say(f"   noise: between processes ±{r['noise']['percent'] or 0:.0f}%, a ratio within one process "
                f"±{(r['within_process_noise']['percent'] or 0):.0f}%; {r['load']['text']}")
            if r["budget_s"]:
                b = r["budget_s"]
                say(f"   time budget: {r['wall_s']:.1f} s from start to its last line against {b:.0f} s "
                    f"({100 * (r['wall_s'] / b - 1):+.1f}%; {'within' if r['wall_s'] <= 1.05 * b + 5 else 'OVER'} 5% "
                    f"+ 5 s of exit); the claim measured apart in {r['claim_processes']} processes of the "
                    f"recommendation (stopped: {r['claim_stop']})")
                say(f"   {r['summary_line']}")
            say(f"   verdict: {r['verdict']['text']}")
            n = r["numerics"]
            say(f"   numerics check: {n['cost_s']:.1f} s of the study's {r['study_s']:.0f} s = "
                f"{100 * r['numerics_share']:.1f}% (target at most 10%), {n['steps']} steps: {n['text']}" if n else
                "   numerics check: none (nothing but the defaults recommended)")
    harness.write(args, out)


if __name__ == "__main__":
    main()
