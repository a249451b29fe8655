"""Resume at 10k (issue 17, item 5): `autotune run` resuming a 10,000-trial study, as a user runs it.

    python benchmarks/resume_scale.py [--trials 10000] [--repeat 2] [--sampler gp]
                                      [--workdir /tmp/autotune-resume-scale]

1. Builds the study once (kept in ``--workdir``, reused when present): a real `autotune run` of the
   mlp example (``--quick``, 3 trials, no race) in a wide CPU space (batch sizes 8..2048 in steps of
   8: about 15,000 configurations, so that 10,000 trials do not exhaust it), then grown to
   ``--trials`` trials in memory: Optuna's RandomSampler draws each configuration through the
   search's own ``suggest`` (autotune.tuning.phases.Search as `autotune run` builds it: tuning.prepare),
   and each trial is written as the search records one, as a typed trial
   (autotune.store.StoredTrial: role, configuration and its key, the compact result, duration,
   placement, owner; a configuration drawn again is a cache answer, ``duplicate_of`` the trial that
   measured it), with figures from a made-up model of the mlp and about 8% failures (oom, error),
   all added in one write (autotune.store.writing.add_trials). Only the figures are made up. The
   grown study is copied to SQLite.
2. Runs ``autotune run --model autotune.examples:mlp --space WIDE --quick --trials M+1 --confirm 0``
   (M: the measured configurations the study holds, so the run measures one more) on a fresh copy of
   it, ``--repeat`` times, as a user runs it, with ``AUTOTUNE_TRACE=1`` (the search prints each step
   of each trial on stderr as it ends: autotune.tuning.phases.search), its output read line by line as it
   arrives. Reported: time from the process's start to the study prepared (its opening line
   arrives), to its first trial (the first ``ask`` began) and to its first measurement (a sampler
   that proposes configurations measured already gets cache answers first, each a trial line), and
   the suggestion time (ask + suggest) of every trial the run asks.
3. Beside each resumed run (issue 27), the same command on an empty storage (a fresh study: same model, space and
   flags), timed the same way and stopped once its first measurement (the defaults, the baseline) has ended; the
   ratio of the resumed run's first measurement to the fresh one's, each run and of the medians, against the
   target (resumed within 1.5x of fresh). Fresh and resumed runs alternate, so both see the same machine.
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
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import harness
from harness import say

ROOT = harness.ROOT
NAME = "resume"
TARGETS = {"first_trial_s": 10.0, "suggest_s": 1.0, "resumed_over_fresh": 1.5}
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


def _made_up(config: dict[str, Any], template: dict[str, Any], rng: random.Random) -> Any:
    """A made-up result of the mlp for ``config`` (figures only; the shape is a real trial's ``result``)."""
    from autotune import result as R

    roll = rng.random()
    if roll < 0.04:
        return R.TrialResult.failure(R.OOM, "CPU out of memory: tried to allocate 2.00 GiB", type="OutOfMemoryError")
    if roll < 0.08:
        return R.TrialResult.failure(R.ERROR, "DataLoader worker (pid 4242) is killed by signal: Killed",
                                     type="RuntimeError")
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

    from autotune.tuning import preparation

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
    # The search exactly as `autotune run` builds it (probe, effective space, defaults), over a copy in memory.
    store = harness.open_store(f"sqlite:///{base}")
    job = preparation.stored_config(store.read(NAME))
    prepared = preparation.prepare(job, NAME, store, "cpu")
    memory = optuna.storages.InMemoryStorage()
    optuna.copy_study(from_study_name=NAME, from_storage=store.storage, to_storage=memory)
    study = optuna.load_study(study_name=NAME, storage=memory)
    _grow(study, n, prepared.tuner.search, prepared.tuner.options.placement)
    grown = time.perf_counter()
    tmp = workdir / f".resume-{n}.db"
    tmp.unlink(missing_ok=True)
    optuna.copy_study(from_study_name=NAME, from_storage=memory, to_storage=f"sqlite:///{tmp}")
    os.replace(tmp, done)
    trials = harness.open_store(harness.sqlite_url(done), read_only=True, fresh=True).read(NAME).trials
    distinct = sum(1 for x in trials if x.duplicate_of is None)
    say(f"grew the study to {len(trials)} trials ({distinct} measured configurations, the rest cache answers) in "
        f"{grown - start:.0f} s; copied to SQLite in {time.perf_counter() - grown:.0f} s", keep=False)
    return done


def _grow(study: Any, n: int, search: Any, placement: dict[str, Any]) -> None:
    """Grow ``study`` to ``n`` trials: each configuration drawn by RandomSampler through ``search.suggest`` (the
    search's own define-by-run space) on a scratch study, and written as the search records a trial, measured or
    answered from the cache (autotune.tuning.phases.search), all in one write (writing.add_trials)."""
    import math

    import optuna

    from autotune import knobs
    from autotune import result as R
    from autotune.store import LiveStudy, StoredTrial, writing

    have = LiveStudy(study).trials()
    seeds = search.seeds
    template = (next((dict(t.result) for t in have if t.role == "search" and t.outcome == R.OK), None)
                or next(dict(t.result) for t in have if t.outcome == R.OK))
    cache = {t.config_key: t for t in have if t.measured and t.config_key}
    peaks = [t.values[1] for t in have if t.measured and t.outcome == R.OK and t.values]
    scratch = optuna.create_study(directions=["maximize", "minimize"], sampler=optuna.samplers.RandomSampler(seed=0))
    rng = random.Random(1)
    me = writing.owner()
    distributions: dict[str, Any] = {}
    added: list[StoredTrial] = []
    for number in range(len(have), n):
        asked = scratch.ask()
        params = search.suggest(asked)
        distributions.update(asked.distributions)
        scratch.tell(asked, state=optuna.trial.TrialState.FAIL)
        resolved = knobs.resolve({**seeds.base, **params}, seeds.ctx)
        key = resolved.key()
        common: dict[str, Any] = dict(number=number, state="complete", params=params, started=None, completed=None,
                                      role="search", placement=placement, owner=me)
        hit = cache.get(key)
        if hit is not None:  # a cache answer, as the search writes one: the measured trial's marks, nothing measured
            ok = hit.outcome == R.OK
            added.append(StoredTrial(
                **common, values=hit.values,
                constraints={"failed": 0.0 if ok else 1.0, "memory": hit.constraints.get("memory", 0.0) if ok else 0.0},
                outcome=hit.outcome, config=hit.config, config_key=hit.config_key, not_applicable=hit.not_applicable,
                result=hit.result, error=hit.error, duration_s=0.0, duplicate_of=hit.number))
            continue
        # a measured trial, as the search records one (no --max-memory)
        result = _made_up(resolved.config, template, rng)
        ok = result.ok and result.samples_per_s is not None and math.isfinite(result.samples_per_s)
        compact = {k: v for k, v in result.to_dict().items()
                   if k not in ("config", "not_applicable", "error", "outcome")}
        error = ({"type": result.error.get("type", ""), "message": result.error.get("message", ""), "stderr_tail": []}
                 if result.error else None)
        values = ((float(result.samples_per_s), float(result.peak_memory_bytes or 0)) if ok  # type: ignore[arg-type]
                  else (0.0, 2.0 * max(peaks) if peaks else float(1 << 40)))
        trial = StoredTrial(
            **common, values=values, constraints={"failed": 0.0 if ok else 1.0, "memory": 0.0},
            outcome=result.outcome if ok or result.outcome != R.OK else R.ERROR, config=resolved.config,
            config_key=key, not_applicable={**resolved.not_applicable, **result.not_applicable}, result=compact,
            error=error, duration_s=result.wall_s, measuring_since=time.time())
        if ok:
            peaks.append(values[1])
        cache[key] = trial
        added.append(trial)
    writing.add_trials(study, added, distributions)


# ---------------------------------------------------------------- one resumed run, timed from outside

TRACE = "autotune-trace "  # the lines AUTOTUNE_TRACE=1 adds on stderr (autotune.tuning.phases.search)


def measured_configurations(db: Path) -> int:
    """The study's measured configurations, as the Tuner counts its budget (a cache answer is not one)."""
    trials = harness.open_store(harness.sqlite_url(db), read_only=True, fresh=True).read(NAME).trials
    return sum(1 for t in trials if t.measured and t.config_key is not None and t.duplicate_of is None)


def resume_once(db: Path | None, workdir: Path, n: int, sampler: str | None, timeout_s: float) -> dict[str, Any]:
    """`autotune run` resuming a fresh copy of the study, as a user runs it (with AUTOTUNE_TRACE=1), timed from
    outside: each line of its output stamped as it arrives; its trace lines say when each step began.

    ``db`` None: the same command on an empty storage (a fresh study), stopped (SIGTERM, as Ctrl-C) once its first
    measurement has ended: its budget of ``n + 1`` configurations would take hours."""
    run_db = workdir / ("run.db" if db is not None else "fresh.db")
    run_db.unlink(missing_ok=True)
    if db is not None:
        shutil.copyfile(db, run_db)
    env = {**os.environ, "AUTOTUNE_TRACE": "1", "PYTHONUNBUFFERED": "1"}
    t0 = time.time()
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "autotune.cli",
                             *_cli(workdir, f"sqlite:///{run_db}", n + 1, sampler)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    arrived: list[tuple[float, str]] = []  # (seconds after the start, line)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            arrived.append((time.time() - t0, line.rstrip("\n")))
            if db is None and line.startswith(TRACE) and '"step": "measure"' in line:
                proc.terminate()  # a fresh study: its first measurement has ended, the rest is not timed

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    rc: int | None
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        rc = None
    reader.join(timeout=30)
    wall = time.perf_counter() - start
    steps = [json.loads(line[len(TRACE):]) for _, line in arrived if line.startswith(TRACE)]
    text = [(t, line) for t, line in arrived if not line.startswith(TRACE)]
    suggests, asked = [], 0.0
    for step in steps:
        if step["step"] == "ask":
            asked = step["s"]
        elif step["step"] == "suggest":
            suggests.append({"s": round(asked + step["s"], 4), "sampler": step["sampler"]})
    first = {name: next((round(x["began"] - t0, 4) for x in steps if x["step"] == name), None)
             for name in ("ask", "measure")}
    row = {"rc": rc, "wall_s": round(wall, 2), "timed_out": rc is None,
           "prepared_s": next((round(t, 4) for t, line in text
                               if line.startswith(("resuming study", "new study"))), None),
           "first_trial_s": first["ask"], "first_measure_s": first["measure"],
           "cache_answers_before": sum(1 for _, line in text if "(already measured as #" in line),
           "suggest_s": [x["s"] for x in suggests], "samplers": sorted({x["sampler"] for x in suggests}),
           "output": [line for _, line in text if line.strip()][:12]}
    if rc not in (0, None) and not (db is None and first["measure"] is not None):
        row["output_tail"] = [line for _, line in text][-30:]
    return row


def main(argv: list[str] | None = None) -> int:
    parser = harness.arguments(__doc__, trials=10000, repeat=2)
    parser.add_argument("--sampler", default=None, help="passed to autotune run (default: the run's own default, gp)")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="seconds a resumed run may take before it is stopped")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/autotune-resume-scale"),
                        help="where the grown study is kept and reused")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    args.workdir.mkdir(parents=True, exist_ok=True)
    db = build(args.trials, args.workdir)
    measured = measured_configurations(db)  # the run's --trials: one configuration more than the study holds
    runs, fresh_runs = [], []
    for k in range(args.repeat):
        fresh = resume_once(None, args.workdir, measured, args.sampler, args.timeout)
        fresh_runs.append(fresh)
        say(f"fresh {k + 1}: first trial asked {fresh['first_trial_s']} s after the process started (prepared at "
            f"{fresh['prepared_s']} s); first measurement started at {fresh['first_measure_s']} s", keep=False)
        row = resume_once(db, args.workdir, measured, args.sampler, args.timeout)
        runs.append(row)
        say(f"run {k + 1}: first trial asked {row['first_trial_s']} s after the process started (prepared at "
            f"{row['prepared_s']} s); first measurement started at {row['first_measure_s']} s, after "
            f"{row['cache_answers_before']} cache answers; suggestions {row['suggest_s']} s "
            f"({', '.join(row['samplers'])}); "
            f"whole run {row['wall_s']} s{' (stopped: timeout)' if row['timed_out'] else ''}", keep=False)
        for line in row["output"][:4]:
            say("    | " + line, keep=False)
    firsts = [r["first_trial_s"] for r in runs if r["first_trial_s"] is not None]
    measures = [r["first_measure_s"] for r in runs if r["first_measure_s"] is not None]
    suggests = [s for r in runs for s in r["suggest_s"]]
    first = statistics.median(firsts) if len(firsts) == len(runs) else None
    first_measure = statistics.median(measures) if len(measures) == len(runs) else None
    worst = max(suggests) if suggests else None
    fresh_measures = [r["first_measure_s"] for r in fresh_runs if r["first_measure_s"] is not None]
    fresh_measure = statistics.median(fresh_measures) if fresh_runs and len(fresh_measures) == len(fresh_runs) else None
    ratio = first_measure / fresh_measure if first_measure is not None and fresh_measure else None
    ratios = [round(r["first_measure_s"] / f["first_measure_s"], 2) if r["first_measure_s"] and f["first_measure_s"]
              else None for r, f in zip(runs, fresh_runs)]
    limit = TARGETS["resumed_over_fresh"]

    def verdict(value: float | None, limit: float) -> str:
        if value is None:
            return f"not reached (no trial started within {args.timeout:.0f} s): MISSED"
        return f"{value:.2f} s < {limit:g} s: {'met' if value < limit else 'MISSED'}"

    head = harness.header()
    lines = [f"resume_scale: `autotune run` resuming a {args.trials}-trial study (SQLite; {measured} measured "
             f"configurations, --trials {measured + 1}: one more), median of {args.repeat} runs"
             + (f" [{args.label}]" if args.label else ""),
             f"machine: {head['host']}, {head['cores']} CPUs, {(harness.memory_bytes() or 0) / 2**30:.0f} GiB, "
             f"Python {head['python']}",
             f"first trial asked: {verdict(first, TARGETS['first_trial_s'])} (each run: {firsts})",
             f"first measurement starts: {verdict(first_measure, TARGETS['first_trial_s'])} (each run: {measures}; "
             f"cache answers before it: {[r['cache_answers_before'] for r in runs]}, each a trial line)",
             f"a fresh study's first measurement (the same command, empty storage) starts: "
             f"{fresh_measure if fresh_measure is None else round(fresh_measure, 2)} s (each run: {fresh_measures}; "
             f"first trial asked: {[r['first_trial_s'] for r in fresh_runs]})",
             "resumed/fresh, first measurement: " + (f"{ratio:.2f}x < {limit:g}x: "
                                                     f"{'met' if ratio < limit else 'MISSED'}"
                                                     if ratio is not None else "not measured: MISSED")
             + f" (each run, resumed over the fresh run just before it: {ratios})",
             f"slowest suggestion (ask + suggest): {verdict(worst, TARGETS['suggest_s'])} (all: {suggests}; sampler "
             f"{', '.join(sorted({s for r in runs for s in r['samplers']})) or '-'})"]
    opening = next((r["output"] for r in runs if r["output"]), [])
    lines += ["the run's opening lines:"] + ["    " + line for line in opening[:4]]
    for line in lines:
        say(line)
    harness.write(args, {"label": args.label, "trials": args.trials, "measured": measured, "targets": TARGETS,
                         "first_trial_s": first, "first_measure_s": first_measure, "slowest_suggest_s": worst,
                         "runs": runs,
                         "fresh_first_measure_s": fresh_measure, "resumed_over_fresh": ratio, "ratios": ratios,
                         "fresh_runs": fresh_runs,
                         "cpus": os.cpu_count()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
