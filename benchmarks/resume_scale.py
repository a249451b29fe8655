"""Resume at 10k (issue 17, item 5): `autotune run` resuming a 10,000-trial study, as a user runs it.

    python benchmarks/resume_scale.py [--trials 10000] [--repeat 2] [--sampler gp] [--workdir /tmp/autotune-resume-scale]

1. Builds the study once (kept in ``--workdir``, reused when present): a real `autotune run` of the
   mlp example (``--quick``, 3 trials, no race) in a wide CPU space (batch sizes 8..2048 in steps of
   8: about 15,000 configurations, so that 10,000 trials do not exhaust it), then grown to
   ``--trials`` trials by the Tuner's own code in memory: Optuna's RandomSampler asks, the Tuner's
   ``suggest`` writes the parameters and its ``record`` / ``record_duplicate`` write the attributes
   (a configuration asked again is answered from the cache, as in a real study), with figures from a
   made-up model of the mlp and about 8% failures (oom, error). Only the figures are made up; every
   attribute a trial holds is the one the Tuner writes. The grown study is copied to SQLite.
2. Runs ``autotune run --model autotune.examples:mlp --space WIDE --quick --trials M+1 --confirm 0``
   (M: the measured configurations the study holds, so the run measures one more) on a fresh copy of
   it, ``--repeat`` times, in a fresh process whose only addition is a log of timestamps (when
   ``prepare`` returns, the first ``study.ask``, each ask + the Tuner's ``suggest`` and how long it
   took, the first measurement's start). Reported: time from the process's start to its first trial
   (asked) and to its first measurement (a sampler that proposes configurations measured already
   gets cache answers first, each a trial line), and the suggestion time (ask + suggest) of every
   trial the run asks.
Writes benchmarks/results/resume_scale-<date>.json and .txt (the summary it prints last; ``--no-write``: print only).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import harness
from harness import say

ROOT = harness.ROOT
NAME = "resume"
TARGETS = {"first_trial_s": 10.0, "suggest_s": 1.0}
WIDE = """# A wide CPU space for a 10,000-trial study: batch sizes 8..2048 in steps of 8 (benchmarks/resume_scale.py).
[search]
precision = ["fp32", "bf16"]
batch_size = {low = 8, high = 2048, step = 8}
num_workers = [0, 1, 2]
persistent_workers = [false, true]
threads = [1, 2]
optimizer_impl = ["default", "foreach", "fused"]

[fixed]
"""
BASE_TRIALS = 3


def _cli(workdir: Path, url: str, trials: int, sampler: str | None) -> list[str]:
    """`autotune run`'s arguments (``trials``: the measured configurations the study should hold)."""
    cmd = ["run", "--model", "autotune.examples:mlp", "--space", str(workdir / "wide.toml"), "--quick",
           "--trials", str(trials), "--confirm", "0", "--study", NAME, "--storage", url]
    return cmd + (["--sampler", sampler] if sampler else [])


# ---------------------------------------------------------------- building the study


class _NoEvidence:
    """Stands in for Evidence while the study is grown: a trial line's speed-up is not stored, and computing it
    for each of 10,000 trials (the whole study each time) would take an hour."""

    @classmethod
    def of(cls, study: Any) -> _NoEvidence:
        return cls()

    def speedup(self, number: int) -> None:
        return None

    def samples_per_s(self, number: int) -> None:
        return None


def _made_up(config: dict[str, Any], template: dict[str, Any], rng: random.Random) -> Any:
    """A made-up result of the mlp for ``config`` (figures only; the shape is a real trial's ``result``)."""
    from autotune import result as R

    roll = rng.random()
    if roll < 0.04:
        return R.TrialResult.failure(R.OOM, "CPU out of memory: tried to allocate 2.00 GiB", type="OutOfMemoryError")
    if roll < 0.08:
        return R.TrialResult.failure(R.ERROR, "DataLoader worker (pid 4242) is killed by signal: Killed", type="RuntimeError")
    bs = config["batch_size"]
    rate = 80.0 * bs ** 0.85 * (1.6 if config["precision"] == "bf16" else 1.0)
    rate *= {0: 0.8, 1: 1.0, 2: 0.95}[config["num_workers"]] * {1: 0.85, 2: 1.0}[config["threads"]]
    rate *= {"default": 1.0, "foreach": 1.02, "fused": 1.04}[config["optimizer_impl"]] * rng.gauss(1.0, 0.05)
    peak = int((300 + bs * 0.05 + 60 * config["num_workers"]) * 2**20 * rng.gauss(1.0, 0.01))
    data = {**template, "outcome": R.OK, "samples_per_s": round(rate, 3), "peak_memory_bytes": peak,
            "window_samples_per_s": [round(rate * rng.gauss(1.0, 0.01), 2) for _ in range(5)],
            "wall_s": round(rng.uniform(4.0, 8.0), 2), "samples_per_step": bs, "step_time_s": bs / rate}
    return R.TrialResult.from_dict(data)


def build(n: int, workdir: Path) -> Path:
    """The study of ``n`` trials as a SQLite file in ``workdir`` (built when missing)."""
    import optuna

    from autotune import knobs, tuning
    from autotune import study as S
    from autotune.store import recovery

    done = workdir / f"resume-{n}.db"
    if done.exists():
        return done
    (workdir / "wide.toml").write_text(WIDE)
    base = workdir / "base.db"
    start = time.perf_counter()
    if not base.exists():
        tmp = workdir / ".base.db"
        tmp.unlink(missing_ok=True)
        subprocess.run([sys.executable, "-m", "autotune.cli", *_cli(workdir, f"sqlite:///{tmp}", BASE_TRIALS, None)],
                       cwd=ROOT, check=True, capture_output=True, text=True)
        os.replace(tmp, base)
        say(f"real study of {BASE_TRIALS} trials measured in {time.perf_counter() - start:.0f} s", keep=False)
    # The Tuner exactly as `autotune run` builds it (probe, effective space, defaults), on a copy in memory.
    store = harness.open_store(f"sqlite:///{base}")
    job = tuning.stored_config(store.load(NAME))
    prepared = tuning.prepare(job, NAME, store, "cpu")
    memory = optuna.storages.InMemoryStorage()
    optuna.copy_study(from_study_name=NAME, from_storage=store.storage, to_storage=memory)
    study = optuna.load_study(study_name=NAME, storage=memory, sampler=optuna.samplers.RandomSampler(seed=0))
    t = prepared.tuner
    tuner = S.Tuner(study, t.space, t.ctx, t.base, lambda *a: None, t.options)
    template = next(x.user_attrs["result"] for x in study.get_trials(deepcopy=False) if x.user_attrs.get("role") == "search")
    rng = random.Random(1)
    cache = tuner._cache()
    saved, S.Evidence = S.Evidence, _NoEvidence  # type: ignore[misc]
    try:
        for _ in range(n - len(study.get_trials(deepcopy=False))):
            trial = study.ask()
            study._storage.set_trial_system_attr(trial._trial_id, recovery.OWNER, recovery.owner())
            trial.set_user_attr("placement", t.options.placement)
            resolved = knobs.resolve({**tuner.base, **tuner.suggest(trial)}, tuner.ctx)
            hit = cache.get(resolved.key())
            if hit is not None:
                tuner.record_duplicate(trial, "search", resolved, hit)
                continue
            trial.set_user_attr("measuring_since", time.time())
            tuner.record(trial, "search", resolved, _made_up(resolved.config, template, rng))
            cache[resolved.key()] = study._storage.get_trial(trial._trial_id)
    finally:
        S.Evidence = saved  # type: ignore[misc]
    grown = time.perf_counter()
    tmp = workdir / f".resume-{n}.db"
    tmp.unlink(missing_ok=True)
    optuna.copy_study(from_study_name=NAME, from_storage=memory, to_storage=f"sqlite:///{tmp}")
    os.replace(tmp, done)
    trials = study.get_trials(deepcopy=False)
    distinct = sum(1 for x in trials if x.user_attrs.get("duplicate_of") is None)
    say(f"grew the study to {len(trials)} trials ({distinct} measured configurations, the rest cache answers) in "
        f"{grown - start:.0f} s; copied to SQLite in {time.perf_counter() - grown:.0f} s", keep=False)
    return done


# ---------------------------------------------------------------- one resumed run, timed from outside

# Runs the real CLI; the only addition is a line of timestamps (seconds since the parent started the process).
_WRAPPER = r"""
import json, os, sys, time
T0 = float(os.environ["RESUME_T0"])
def mark(what, **kw):
    print("RESUME_MARK " + json.dumps({"what": what, "t": round(time.time() - T0, 4), **kw}), flush=True)
mark("interpreter")
from autotune import runner, study as S, tuning
ask_s = {}
def wrap_ask(orig):
    def ask(self, *a, **k):
        if not ask_s:
            mark("first_ask")
        s = time.perf_counter(); trial = orig(self, *a, **k); ask_s[trial.number] = time.perf_counter() - s
        return trial
    return ask
import optuna
optuna.Study.ask = wrap_ask(optuna.Study.ask)
orig_suggest = S.Tuner.suggest
def suggest(self, trial):
    s = time.perf_counter(); out = orig_suggest(self, trial); took = time.perf_counter() - s
    mark("suggest", number=trial.number, ask_s=round(ask_s.get(trial.number, 0.0), 4), params_s=round(took, 4),
         sampler=type(self.study.sampler).__name__)
    return out
S.Tuner.suggest = suggest
orig_measure = runner.Runner.measure
def measure(self, *a, **k):
    mark("measure")
    return orig_measure(self, *a, **k)
runner.Runner.measure = measure
orig_prepare = tuning.prepare
def prepare(*a, **k):
    p = orig_prepare(*a, **k); mark("prepared"); return p
tuning.prepare = prepare
from autotune.cli import main
sys.argv = ["autotune", *sys.argv[1:]]
main()
"""


def measured_configurations(db: Path) -> int:
    """The study's measured configurations, as the Tuner counts its budget (a cache answer is not one)."""
    from autotune.evidence import is_measured

    trials = harness.open_store(harness.sqlite_url(db), read_only=True, fresh=True).load(NAME).get_trials(deepcopy=False)
    return sum(1 for t in trials if is_measured(t) and "config_key" in t.user_attrs and t.user_attrs.get("duplicate_of") is None)


def resume_once(db: Path, workdir: Path, n: int, sampler: str | None, timeout_s: float) -> dict[str, Any]:
    run_db = workdir / "run.db"
    shutil.copyfile(db, run_db)
    env = {**os.environ, "RESUME_T0": repr(time.time())}
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", _WRAPPER, *_cli(workdir, f"sqlite:///{run_db}", n + 1, sampler)],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
        out, rc = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out, rc = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or ""), None
    wall = time.perf_counter() - start
    marks = [json.loads(line.split(" ", 1)[1]) for line in out.splitlines() if line.startswith("RESUME_MARK ")]
    text = [line for line in out.splitlines() if not line.startswith("RESUME_MARK ")]
    first = next((m["t"] for m in marks if m["what"] == "measure"), None)
    suggests = [m for m in marks if m["what"] == "suggest"]
    row = {"rc": rc, "wall_s": round(wall, 2), "timed_out": rc is None,
           "interpreter_s": next((m["t"] for m in marks if m["what"] == "interpreter"), None),
           "prepared_s": next((m["t"] for m in marks if m["what"] == "prepared"), None),
           "first_trial_s": next((m["t"] for m in marks if m["what"] == "first_ask"), None),
           "first_measure_s": first, "cache_answers_before": sum(1 for line in text if "(already measured as #" in line),
           "suggest_s": [round(m["ask_s"] + m["params_s"], 4) for m in suggests],
           "samplers": sorted({m["sampler"] for m in suggests}),
           "output": [line for line in text if line.strip()][:12]}
    if rc not in (0, None):
        row["stderr"] = proc.stderr[-2000:]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = harness.arguments(__doc__, trials=10000, repeat=2)
    parser.add_argument("--sampler", default=None, help="passed to autotune run (default: the run's own default, gp)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds a resumed run may take before it is stopped")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/autotune-resume-scale"),
                        help="where the grown study is kept and reused")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    args.workdir.mkdir(parents=True, exist_ok=True)
    db = build(args.trials, args.workdir)
    measured = measured_configurations(db)  # the run's --trials: one configuration more than the study holds
    runs = []
    for k in range(args.repeat):
        row = resume_once(db, args.workdir, measured, args.sampler, args.timeout)
        runs.append(row)
        say(f"run {k + 1}: first trial asked {row['first_trial_s']} s after the process started (prepared at "
            f"{row['prepared_s']} s); first measurement started at {row['first_measure_s']} s, after "
            f"{row['cache_answers_before']} cache answers; suggestions {row['suggest_s']} s ({', '.join(row['samplers'])}); "
            f"whole run {row['wall_s']} s{' (stopped: timeout)' if row['timed_out'] else ''}", keep=False)
        for line in row["output"][:4]:
            say("    | " + line, keep=False)
    firsts = [r["first_trial_s"] for r in runs if r["first_trial_s"] is not None]
    measures = [r["first_measure_s"] for r in runs if r["first_measure_s"] is not None]
    suggests = [s for r in runs for s in r["suggest_s"]]
    first = statistics.median(firsts) if len(firsts) == len(runs) else None
    first_measure = statistics.median(measures) if len(measures) == len(runs) else None
    worst = max(suggests) if suggests else None

    def verdict(value: float | None, limit: float) -> str:
        if value is None:
            return f"not reached (no trial started within {args.timeout:.0f} s): MISSED"
        return f"{value:.2f} s < {limit:g} s: {'met' if value < limit else 'MISSED'}"

    head = harness.header()
    lines = [f"resume_scale: `autotune run` resuming a {args.trials}-trial study (SQLite; {measured} measured configurations, "
             f"--trials {measured + 1}: one more), median of {args.repeat} runs"
             + (f" [{args.label}]" if args.label else ""),
             f"machine: {head['host']}, {head['cores']} CPUs, {(harness.memory_bytes() or 0) / 2**30:.0f} GiB, Python {head['python']}",
             f"first trial asked: {verdict(first, TARGETS['first_trial_s'])} (each run: {firsts})",
             f"first measurement starts: {verdict(first_measure, TARGETS['first_trial_s'])} (each run: {measures}; "
             f"cache answers before it: {[r['cache_answers_before'] for r in runs]}, each a trial line)",
             f"slowest suggestion (ask + suggest): {verdict(worst, TARGETS['suggest_s'])} (all: {suggests}; sampler "
             f"{', '.join(sorted({s for r in runs for s in r['samplers']})) or '-'})"]
    opening = next((r["output"] for r in runs if r["output"]), [])
    lines += ["the run's opening lines:"] + ["    " + line for line in opening[:4]]
    for line in lines:
        say(line)
    harness.write(args, {"label": args.label, "trials": args.trials, "measured": measured, "targets": TARGETS,
                         "first_trial_s": first, "first_measure_s": first_measure, "slowest_suggest_s": worst, "runs": runs,
                         "cpus": os.cpu_count()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
