"""The fleet at 64 workers, by simulation (issue 17, item 4): coordination per trial, connections, trials/hour.

    python benchmarks/fleet_scale.py [--workers 1,8,32,64] [--storages postgresql,journal] [--step 2]
                                     [--rounds 4] [--sampler random] [--sizes 100,200,300,1000] [--no-sampler]

1. The fleet: K worker processes (K = 1, 8, 32, 64), each the search phase as ``autotune worker
   --no-race`` runs it (autotune.tuning.phases.Search over a LiveStudy: ``create_or_check``, stale-trial
   recovery, ask, suggest, claim through the storage, heartbeats on PostgreSQL, tell, the evidence
   read for each trial line and for cutting dominated trials, the session record) with one change:
   the measurement is a
   sleep of ``--step`` seconds x U(1 - ``--jitter``, 1 + ``--jitter``) (a trial process would be forked
   there; trials differ in length, so the workers fall out of lockstep as a real fleet's do), so the
   ideal throughput is known, K x 3600 / the mean measurement, and the CPUs are not spent on measuring. The study's
   budget is K x ``--rounds`` configurations (the noise floor's two extra measurements of the baseline, once per
   study, are left out: they are start-up, not coordination). All workers start together once every one has opened its
   store (start-up, 1-3 s each on 2 cores, is not counted). Per trial each worker times, as the
   search tells its steps (``Search(on_step=)``): ask (the trial's creation), suggest (the sampler
   and the parameter writes), claim (the configuration's claim through the storage), tell (the
   result's attributes and Optuna's tell), and the loop's own reads between trials (budget, seeds,
   recovery, session; its idle waits while others measure the rest of the budget left out);
   coordination = the trial's wall time less the measurement, plus the loop's reads before it. SQL statements per
   trial are counted (SQLAlchemy's cursor events). On PostgreSQL, pg_stat_activity is polled every 0.5 s for the
   connections each worker holds (each worker's application_name is its own), and the CPU time of the server's
   processes is read from /proc. Trials/hour: the share of the K workers' time spent measuring, from
   the start until the first worker finds the budget spent (the tail, where a finite budget runs out
   one worker at a time, is left out), times the ideal. The machine's CPU use over the run is reported:
   on a 2-core machine 64 workers' coordination competes for the same 2 cores as the database
   server, which a real fleet (a machine per worker) does not.
   The default sampler for the fleet is ``random`` so the coordination is timed alone (the sampler's
   own cost is part 2); ``--sampler gp`` times the default one.
2. The sampler's suggestion time as the study grows: studies of ``--sizes`` complete trials
   (autotune/testing/studies.py: the cpu space's 9 knobs, two objectives, two constraints; past 1,000
   trials jittered copies), a suggestion = ``ask`` + the suggestions of every knob, median of
   ``--repeat`` (the first, which imports and compiles, left out), for GP, TPE and the default
   (``gp``: GP then TPE past autotune.tuning.phases.sampler.GP_MAX_TRIALS).
3. Memory: each worker's proportional set size (PSS) once started and at the end; how many workers
   this machine's memory holds at that size.

Needs AUTOTUNE_TEST_POSTGRES_URL for PostgreSQL (``eval "$(.ci/postgres.sh start)"``); without it the
PostgreSQL rows are left out and say so. Writes benchmarks/results/fleet_scale-<date>.json and .txt
(the summary it prints last).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import harness
from harness import say

ROOT = harness.ROOT
TARGETS = {"coordination_ms_64_postgresql": 50.0, "throughput_within": 0.15}
START_BATCH = 8
WORKER_MB = 300  # a worker's resident size once started (it imports torch, as `autotune worker` does), with margin
NAME = "fleet"
SPACE_DICT = {"search": {
    "precision": ["fp32", "bf16"],
    "batch_size": {"low": 8, "high": 4096, "step": 8},
    "num_workers": [0, 1, 2],
    "threads": [1, 2],
    "optimizer_impl": ["default", "foreach", "fused"],
}}


def _space() -> tuple[Any, Any, dict[str, Any], Any]:
    from autotune import knobs
    from autotune.knobs import space
    from autotune.tuning.phases.seeds import base_config

    ctx = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=2)
    sp = space.parse(SPACE_DICT, "fleet.toml", "fleet")
    base = base_config(ctx, sp.fixed, None)
    return ctx, sp, base, space.effective(sp, ctx, base)


def _attrs(sp: Any, ctx: Any) -> dict[str, Any]:
    return {"workload": {"model": "fleet:sleep"}, "space": sp.to_dict(), "space_hash": sp.hash(),
            "fingerprint": {"device_type": "cpu", "torch": "2"}, "device": "cpu", "context": ctx.to_dict(),
            "global_batch": None}


# ---------------------------------------------------------------- one worker (a child process)


def child(url: str, budget: int, step: float, sampler: str, folder: Path, index: int, jitter: float = 0.0) -> None:
    """One worker: the search phase on the shared study, every step of each trial timed; writes worker-<index>.json."""
    import random

    from autotune import result as R
    from autotune.tuning import preparation
    from autotune.tuning.phases import Bench, Search, SearchOptions, Seeds, Session
    from autotune.tuning.phases.sampler import make_sampler
    from autotune.request import DEFAULT_TRIAL_TIMEOUT_S, stale_grace
    from autotune.store import LiveStudy

    ctx, sp, base, eff = _space()
    store = harness.open_store(url)
    study, _ = store.create_or_check(NAME, _attrs(sp, ctx), make_sampler(sampler, None))
    live = LiveStudy(study, grace_s=stale_grace(DEFAULT_TRIAL_TIMEOUT_S))
    live.warm_cache()
    live.recover_stale()
    trials: list[dict[str, Any]] = []
    parts: dict[str, float] = {}  # the steps of the trial under way, and its measurement's start and end
    statements = [0]
    if hasattr(store.storage, "engine"):  # a database: count the SQL statements this process sends
        import sqlalchemy

        def count(*a: Any) -> None:
            statements[0] += 1

        sqlalchemy.event.listen(store.storage.engine, "before_cursor_execute", count)
    idle = [0.0]  # the loop's waits while other workers measure the rest of the budget: not coordination
    last_end = [0.0]

    rng = random.Random(index)

    def evaluate(config: dict[str, Any], dominators: Any = (), margin: Any = None) -> Any:
        parts["measure_from"] = time.time()
        time.sleep(step * rng.uniform(1 - jitter, 1 + jitter))
        parts["measure_to"] = time.time()
        rate = 100.0 + config["batch_size"] * (2 if config["precision"] == "bf16" else 1) * (
            1 + 0.05 * config["num_workers"])
        return R.TrialResult(outcome=R.OK, samples_per_s=rate, samples_per_s_cv=0.01,
                             peak_memory_bytes=10**8 + config["batch_size"] * 10**5,
                             wall_s=step)

    def on_step(name: str, seconds: float) -> None:
        if name == "wait":
            idle[0] += seconds
            return
        if name != "trial":
            parts[name] = parts.get(name, 0.0) + seconds
            return
        end = time.perf_counter()
        start = end - seconds
        loop = start - last_end[0] - idle[0]  # the loop's own reads since the last trial, less the idle polls
        idle[0] = 0.0
        last_end[0] = end
        measure = parts.get("measure", 0.0)
        row = {k: (v if k.startswith("measure_") else round(v, 5)) for k, v in parts.items()}
        row.update(start=start, end=end, loop=round(loop, 5), wall=round(seconds, 5),
                   coordination=round(seconds - measure + loop, 5),
                   kind="measured" if "measure" in parts else "none")  # a cache answer: told below
        trials.append(row)
        parts.clear()

    def on_trial(rec: Any) -> None:
        if rec.duplicate_of is not None:
            trials[-1]["kind"] = "duplicate"

    # As `autotune worker --no-race` runs, less the noise floor (two extra measurements of the baseline, once per
    # study: start-up of a study, not coordination, and a 4-trial budget would count them as a third of the work).
    options = SearchOptions(trials=budget, poll_s=0.25, placement=preparation.placement("cpu"))
    search = Search(live, Seeds(eff, ctx, base), Bench(evaluate), options, on_trial=on_trial, check=store.check_alive,
                    on_step=on_step)
    pss_start = _pss(os.getpid())
    (folder / f"ready-{index}").write_text("")
    go = folder / "go"
    while not go.exists():
        time.sleep(0.02)
    t_go = time.perf_counter()
    last_end[0] = t_go
    wall_go = time.time()
    cpu_go = sum(os.times()[:2])
    statements[0] = 0
    report = search.run(Session(live))
    cpu_s = sum(os.times()[:2]) - cpu_go
    out = {"index": index, "go": wall_go,
           "trials": [{**r, "start": r["start"] - t_go + wall_go, "end": r["end"] - t_go + wall_go}
                      for r in trials],
           "cpu_s": cpu_s, "statements": statements[0], "pss_start": pss_start, "pss_end": _pss(os.getpid()),
           "reason": report.reason, "sampler": type(live.sampler).__name__}
    (folder / f"worker-{index}.json").write_text(json.dumps(out))


def _pss(pid: int) -> int | None:
    """Proportional set size (bytes): shared pages counted once across the processes that share them."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _cpu_times() -> tuple[float, float]:
    with open("/proc/stat") as fh:
        parts = [float(x) for x in fh.readline().split()[1:]]
    idle = parts[3] + parts[4]
    return sum(parts) - idle, sum(parts)


def _server_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each PostgreSQL process on this machine so far (none without /proc access)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/comm") as fh:
                if fh.read().strip() not in ("postgres", "postmaster"):
                    continue
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            out[int(pid)] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            continue
    return out


def _mem_available() -> int:
    return harness.memory_bytes(available=True) or 0


# ---------------------------------------------------------------- one fleet run (the parent)


def fresh_url(kind: str, folder: Path, pg: str | None, tag: str) -> str:
    if kind == "journal":
        return f"journal:{folder}/{tag}.log"
    assert pg is not None
    return harness.fresh_postgres(pg, tag)


def fleet_run(kind: str, workers: int, step: float, args: argparse.Namespace, pg: str | None,
              folder: Path) -> dict[str, Any]:
    from autotune.tuning.phases.sampler import make_sampler

    tag = f"fleet_{kind}_{workers}_{int(step * 1000)}"
    run_dir = folder / tag
    run_dir.mkdir()
    url = fresh_url(kind, folder, pg, tag)
    ctx, sp, _, _ = _space()
    # as `autotune submit` would
    harness.open_store(url).create_or_check(NAME, _attrs(sp, ctx), make_sampler(args.sampler, 0))
    budget = workers * args.rounds
    procs: list[subprocess.Popen[bytes]] = []
    started = time.monotonic()
    # Started 8 at a time, each batch once the one before is ready: 64 interpreters importing torch at once need
    # several GB more at their peak than once started (an earlier run of this benchmark lost every process that way).
    for first in range(0, workers, START_BATCH):
        for i in range(first, min(workers, first + START_BATCH)):
            env = {**os.environ, "PGAPPNAME": f"fleet-w{i}"}
            procs.append(subprocess.Popen([sys.executable, __file__, "--child", url, str(budget), str(step),
                                           args.sampler, str(run_dir), str(i), str(args.jitter)], env=env, cwd=ROOT,
                                          stdout=subprocess.DEVNULL, stderr=open(run_dir / f"stderr-{i}", "w")))
        while sum(1 for i in range(len(procs)) if (run_dir / f"ready-{i}").exists()) < len(procs):
            if any(p.poll() not in (None, 0) for p in procs):
                bad = next(i for i, p in enumerate(procs) if p.poll() not in (None, 0))
                for p in procs:
                    p.kill()
                raise SystemExit(f"worker {bad} failed to start:\n{(run_dir / f'stderr-{bad}').read_text()[-3000:]}")
            if time.monotonic() - started > args.start_timeout:
                for p in procs:
                    p.kill()
                raise SystemExit(f"{workers} workers did not all start within {args.start_timeout:.0f} s")
            time.sleep(0.1)
    startup_s = time.monotonic() - started
    pss_ready = [_pss(p.pid) or 0 for p in procs]
    conns: dict[str, int] = {}
    total_max = 0
    monitor = None
    if kind == "postgresql":
        import psycopg2

        monitor = psycopg2.connect(pg)
        monitor.autocommit = True
    cpu0 = _cpu_times()
    server0 = _server_cpu() if kind == "postgresql" else {}
    server = dict(server0)  # each process's CPU when last seen (a backend's CPU is counted up to its last poll)
    (run_dir / "go").write_text("")
    t0 = time.time()
    deadline = time.monotonic() + args.run_timeout
    while any(p.poll() is None for p in procs):
        if monitor is not None:
            server.update(_server_cpu())
            with monitor.cursor() as cur:
                cur.execute("SELECT application_name, count(*) FROM pg_stat_activity WHERE datname = %s GROUP BY 1",
                            (tag,))
                rows = cur.fetchall()
            total_max = max(total_max, sum(n for app, n in rows if app.startswith("fleet-w")))
            for app, n in rows:
                if app.startswith("fleet-w"):
                    conns[app] = max(conns.get(app, 0), n)
        if time.monotonic() > deadline:
            for p in procs:
                p.kill()
            raise SystemExit(f"{kind} x{workers}: the fleet did not finish within {args.run_timeout:.0f} s")
        time.sleep(0.5)
    cpu1 = _cpu_times()
    if kind == "postgresql":
        server.update(_server_cpu())
    server_s = sum(v - server0.get(pid, 0.0) for pid, v in server.items()) if kind == "postgresql" else None
    if monitor is not None:
        monitor.close()
    failed = [i for i, p in enumerate(procs) if p.returncode != 0]
    if failed:
        raise SystemExit(f"worker {failed[0]} failed:\n{(run_dir / f'stderr-{failed[0]}').read_text()[-3000:]}")
    reports = [json.loads((run_dir / f"worker-{i}.json").read_text()) for i in range(workers)]
    rows = [r for rep in reports for r in rep["trials"]]
    measured_rows = [r for r in rows if r["kind"] == "measured"]
    study = harness.open_store(url).read(NAME)
    measured = [t for t in study.trials if t.measured and t.duplicate_of is None and t.config_key is not None]
    last = max(r["end"] for r in measured_rows)
    wall = last - t0
    # Steady state: from the start until the first worker found no budget left (its last measurement's end), the
    # share of the K workers' time spent measuring; the ideal is K x 3600 / the mean measurement. (The tail, where the
    # budget runs out one worker at a time, is a finite budget's, not coordination's.)
    window_end = min(max(r["measure_to"] for r in rep["trials"] if r["kind"] == "measured") for rep in reports
                     if any(r["kind"] == "measured" for r in rep["trials"]))
    busy_s = sum(max(0.0, min(r["measure_to"], window_end) - max(r["measure_from"], t0)) for r in measured_rows)
    utilisation = busy_s / (workers * max(1e-9, window_end - t0))
    mean_step = statistics.mean(r["measure"] for r in measured_rows)
    ideal = workers * 3600.0 / mean_step
    per_hour = utilisation * ideal

    def ms(key: str, pool: list[dict[str, Any]], q: float = 0.5) -> float:
        values = sorted(r.get(key, 0.0) for r in pool)
        return round(1000 * values[min(len(values) - 1, int(q * len(values)))], 1) if values else 0.0

    busy = (cpu1[0] - cpu0[0]) / max(1e-9, cpu1[1] - cpu0[1])
    out = {
        "storage": kind, "workers": workers, "budget": budget, "step_s": step, "sampler": args.sampler,
        "startup_s": round(startup_s, 1), "wall_s": round(wall, 2), "measured": len(measured_rows),
        "measured_in_study": len(measured), "trials_asked": len(rows),
        "duplicates": sum(1 for r in rows if r["kind"] == "duplicate"),
        "given_up": sum(1 for r in rows if r["kind"] == "none"),
        "trials_per_hour": round(per_hour), "ideal_per_hour": round(ideal), "of_ideal": round(utilisation, 3),
        "whole_run_per_hour": round(3600.0 * len(measured_rows) / wall), "steady_window_s": round(window_end - t0, 1),
        "jitter": args.jitter,
        "coordination_ms": {"median": ms("coordination", rows), "p90": ms("coordination", rows, 0.9),
                            "median_measured": ms("coordination", measured_rows)},
        "parts_ms_median": {k: ms(k, rows) for k in ("ask", "suggest", "claim", "tell", "loop")},
        "parts_ms_p90": {k: ms(k, rows, 0.9) for k in ("ask", "suggest", "claim", "tell", "loop")},
        "cpu_busy": round(busy, 3),
        "statements_per_trial": round(sum(r["statements"] for r in reports) / max(1, len(rows)), 1),
        "worker_cpu_ms_per_trial": round(1000 * sum(r["cpu_s"] for r in reports) / max(1, len(rows)), 1),
        "server_cpu_ms_per_trial": round(1000 * server_s / max(1, len(rows)), 1) if server_s is not None else None,
        "run_s": round(time.time() - t0, 1),
        "pss_mb_ready": round(statistics.median(pss_ready) / 2**20, 1),
        "pss_mb_end": round(statistics.median([r["pss_end"] or 0 for r in reports]) / 2**20, 1),
        "samplers": sorted({r["sampler"] for r in reports}),
    }
    if kind == "postgresql":
        per = [conns.get(f"fleet-w{i}", 0) for i in range(workers)]
        out["connections"] = {"per_worker_max": max(per), "per_worker_median": statistics.median(per),
                              "total_max": total_max}
    return out


# ---------------------------------------------------------------- the sampler as the study grows


def sampler_growth(sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    import optuna
    from autotune.testing.studies import SEARCH, grow, make_study

    from autotune.tuning.phases.sampler import GPThenTPE, make_sampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = []
    for n in sizes:
        study = make_study(optuna.storages.InMemoryStorage(), n_trials=min(n, 1000), seed=0, name=f"g{n}")
        grow(study, n - min(n, 1000))
        complete = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))
        row: dict[str, Any] = {"trials": n, "complete": complete, "seconds": {}}
        for name in ("gp-only", "tpe", "gp"):
            if name == "gp-only" and n > 1000:
                row["seconds"][name] = None  # minutes a suggestion, and gigabytes: not run
                continue
            sampler = make_sampler("gp", 0, gp_max_trials=10**9) if name == "gp-only" else make_sampler(name, 0)
            study.sampler = sampler
            times = []
            for _ in range(repeat + 1):
                start = time.perf_counter()
                trial = study.ask()
                for knob, spec in SEARCH.items():
                    if "choices" in spec:
                        trial.suggest_categorical(knob, spec["choices"])
                    else:
                        trial.suggest_int(knob, spec["low"], spec["high"], step=spec["step"])
                times.append(time.perf_counter() - start)
                study.tell(trial, state=optuna.trial.TrialState.FAIL)  # not part of the history the next one sees
            row["seconds"][name] = round(statistics.median(times[1:]), 3)
            if name == "gp":
                row["default_uses"] = ("tpe" if isinstance(sampler, GPThenTPE) and sampler.switched_at is not None
                                       else "gp")
        rows.append(row)
        say(f"sampler at {n:>6} trials: "
            + ", ".join(f"{k} {('-' if v is None else f'{v:.3f} s')}" for k, v in row["seconds"].items())
            + f" (default uses {row.get('default_uses')})", keep=False)
    return rows


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = harness.arguments(__doc__, repeat=3)
    parser.add_argument("--workers", default="1,8,32,64")
    parser.add_argument("--storages", default="postgresql,journal")
    parser.add_argument("--step", type=float, default=2.0, help="seconds each measurement sleeps")
    parser.add_argument("--rounds", type=int, default=4,
                        help="configurations per worker: the budget is workers x rounds")
    parser.add_argument("--long-step", type=float, default=20.0,
                        help="then the most workers on PostgreSQL again with this measurement (0: not)")
    parser.add_argument("--sampler", default="random", help="the fleet's sampler (random: coordination alone)")
    parser.add_argument("--sizes", default="100,200,300,1000,10000",
                        help="study sizes for the sampler's suggestion time")
    parser.add_argument("--no-sampler", action="store_true", help="leave out the sampler's suggestion time")
    parser.add_argument("--no-fleet", action="store_true", help="leave out the fleet runs")
    parser.add_argument("--start-timeout", type=float, default=300.0)
    parser.add_argument("--run-timeout", type=float, default=600.0)
    parser.add_argument("--jitter", type=float, default=0.25,
                        help="each measurement sleeps step x U(1-j, 1+j): trials of different lengths, so the workers "
                             "do not all coordinate at the same instant as they would in lockstep")
    parser.add_argument("--child", nargs=7, metavar=("URL", "BUDGET", "STEP", "SAMPLER", "FOLDER", "INDEX", "JITTER"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    if args.child:
        url, budget, step, sampler, folder, index, jitter = args.child
        child(url, int(budget), float(step), sampler, Path(folder), int(index), float(jitter))
        return 0
    pg = os.environ.get("AUTOTUNE_TEST_POSTGRES_URL")
    kinds = [k for k in args.storages.split(",") if k]
    notes = []
    if "postgresql" in kinds and not pg:
        kinds.remove("postgresql")
        notes.append("PostgreSQL left out: AUTOTUNE_TEST_POSTGRES_URL is not set (eval \"$(.ci/postgres.sh start)\")")
    if pg:
        import psycopg2

        conn = psycopg2.connect(pg)
        with conn.cursor() as cur:
            cur.execute("SHOW max_connections")
            max_conn = int(cur.fetchone()[0])
            cur.execute("SELECT version()")
            pg_version = cur.fetchone()[0].split(",")[0]
        conn.close()
    runs = []
    if not args.no_fleet:
        with tempfile.TemporaryDirectory(prefix="fleet-scale-") as tmp:
            for kind in kinds:
                for workers in [int(w) for w in args.workers.split(",") if w]:
                    fits = int(_mem_available() / 2**20 // WORKER_MB)
                    if workers > fits:
                        notes.append(f"{kind} x{workers} not run: {_mem_available() / 2**30:.1f} GiB available "
                                     f"holds about {fits} workers of {WORKER_MB} MB")
                        say(notes[-1], keep=False)
                        continue
                    runs.append(fleet_run(kind, workers, args.step, args, pg, Path(tmp)))
                    _print_run(runs[-1])
            if args.long_step and "postgresql" in kinds:
                # The most workers again with a long measurement: the machine's 2 cores no longer run out, so what
                # is left is the coordination itself against a shared database (a real fleet has a machine per worker).
                runs.append(fleet_run("postgresql", max(int(w) for w in args.workers.split(",") if w), args.long_step,
                                      args, pg, Path(tmp)))
                _print_run(runs[-1])
    growth = [] if args.no_sampler else sampler_growth([int(s) for s in args.sizes.split(",") if s], args.repeat)
    memory = _memory(runs)
    for line in _text(runs, growth, memory, args, notes, pg_version if pg else None, max_conn if pg else None):
        say(line)
    harness.write(args, {"label": args.label, "step_s": args.step, "rounds": args.rounds, "sampler": args.sampler,
                         "targets": TARGETS, "machine": _machine(), "runs": runs, "sampler_growth": growth,
                         "memory": memory, "notes": notes})
    return 0


def _print_run(r: dict[str, Any]) -> None:
    conn_text = (f"; connections per worker max {r['connections']['per_worker_max']} "
                 f"(total {r['connections']['total_max']})"
                 if "connections" in r else "")
    say(f"{r['storage']:<10} x{r['workers']:<3} step {r['step_s']:g} s: "
        f"coordination {r['coordination_ms']['median']:.0f} ms/trial (p90 {r['coordination_ms']['p90']:.0f}; "
        f"ask {r['parts_ms_median']['ask']:.0f}, suggest {r['parts_ms_median']['suggest']:.0f}, "
        f"claim {r['parts_ms_median']['claim']:.0f}, tell {r['parts_ms_median']['tell']:.0f}, "
        f"loop {r['parts_ms_median']['loop']:.0f}); {r['trials_per_hour']} trials/h = {100 * r['of_ideal']:.0f}% "
        f"of {r['ideal_per_hour']} ideal; CPU {100 * r['cpu_busy']:.0f}% "
        f"busy{conn_text}; {r['run_s']:.0f} s after a {r['startup_s']:.0f} s start", keep=False)


def _machine() -> dict[str, Any]:
    head = harness.header()
    return {"node": head["host"], "cpus": head["cores"], "memory_gib": head["memory_gib"], "python": head["python"],
            "cpu": head["cpu"]}


def _memory(runs: list[dict[str, Any]]) -> dict[str, Any]:
    if not runs:
        return {}
    most = max(r["workers"] for r in runs)
    pss = max(r["pss_mb_end"] for r in runs if r["workers"] == most)  # shared pages spread over the most workers
    available = _mem_available() / 2**20
    return {"pss_mb_per_worker": pss, "available_mb": round(available),
            "workers_fit": int(available // pss) if pss else None}


def _text(runs: list[dict[str, Any]], growth: list[dict[str, Any]], memory: dict[str, Any], args: argparse.Namespace,
          notes: list[str], pg_version: str | None, max_conn: int | None) -> list[str]:
    from autotune.tuning.phases.sampler import GP_MAX_TRIALS

    m = _machine()
    lines = [f"fleet_scale: K worker processes (the search loop, a measurement that sleeps `step` s), sampler "
             f"{args.sampler}, budget K x {args.rounds}" + (f" [{args.label}]" if args.label else ""),
             f"machine: {m['node']}, {m['cpus']} CPUs ({m['cpu']}), {m['memory_gib']} GiB; Python {m['python']}"
             + (f"; {pg_version} on the same machine, max_connections {max_conn}" if pg_version else ""),
             *notes]
    if runs:
        lines.append(f"{'storage':<10} {'K':>3} {'step':>4} {'coord ms':>8} {'p90':>6} {'ask':>5} {'sugg':>5} "
                     f"{'claim':>5} {'tell':>5} {'loop':>5} {'trials/h':>9} {'ideal':>7} {'of ideal':>8} {'CPU':>5} "
                     f"{'wCPU':>5} {'dbCPU':>5} {'conn/w':>6} {'PSS MB':>7}")
        for r in runs:
            p = r["parts_ms_median"]
            conn = str(r["connections"]["per_worker_max"]) if "connections" in r else "-"
            db = "-" if r["server_cpu_ms_per_trial"] is None else f"{r['server_cpu_ms_per_trial']:.0f}"
            lines.append(f"{r['storage']:<10} {r['workers']:>3} {r['step_s']:>4g} "
                         f"{r['coordination_ms']['median']:>8.0f} {r['coordination_ms']['p90']:>6.0f} "
                         f"{p['ask']:>5.0f} {p['suggest']:>5.0f} {p['claim']:>5.0f} {p['tell']:>5.0f} "
                         f"{p['loop']:>5.0f} {r['trials_per_hour']:>9} {r['ideal_per_hour']:>7} "
                         f"{100 * r['of_ideal']:>7.0f}% {100 * r['cpu_busy']:>4.0f}% "
                         f"{r['worker_cpu_ms_per_trial']:>5.0f} {db:>5} "
                         f"{conn:>6} {r['pss_mb_end']:>7.0f}")
        lines.append("coord: median coordination per trial asked (its wall time less the measurement, plus the loop's "
                     "reads before it); parts are medians; CPU: the whole machine's, during the run; wCPU / dbCPU: "
                     "CPU ms per trial asked, of the worker and of the PostgreSQL server")
        for r in runs:
            if r["storage"] == "postgresql" and r["server_cpu_ms_per_trial"]:
                per_core = 1000.0 / r["server_cpu_ms_per_trial"]
                lines.append(f"  postgresql x{r['workers']} (step {r['step_s']:g} s): {r['statements_per_trial']:.0f} "
                             f"SQL statements per trial; one core of the database server serves about {per_core:.0f} "
                             f"trials/s at {r['server_cpu_ms_per_trial']:.1f} ms each "
                             f"({per_core * r['step_s']:.0f} workers at {r['step_s']:g} s per trial); "
                             f"each worker spends {r['worker_cpu_ms_per_trial']:.0f} ms of its own CPU per trial")
        for r in runs:
            if r["duplicates"] or r["given_up"]:
                lines.append(f"  {r['storage']} x{r['workers']} (step {r['step_s']:g} s): {r['trials_asked']} trials "
                             f"asked for {r['measured']} measured "
                             f"({r['duplicates']} cache answers, {r['given_up']} given up to another worker's claim)")
        target = TARGETS["coordination_ms_64_postgresql"]
        pg64 = [r for r in runs if r["storage"] == "postgresql" and r["workers"] == 64]
        for r in pg64:
            c = r["coordination_ms"]["median"]
            lines.append(f"target: coordination < {target:g} ms/trial at 64 workers on PostgreSQL "
                         f"(step {r['step_s']:g} s, CPU {100 * r['cpu_busy']:.0f}% busy): {c:.0f} ms: "
                         f"{'met' if c < target else 'MISSED'}")
        if not pg64:
            lines.append("target: coordination at 64 workers on PostgreSQL: not measured in this run")
        most = max(x["workers"] for x in runs)
        for r in runs:
            if r["workers"] == most:
                ok = r["of_ideal"] >= 1 - TARGETS["throughput_within"]
                lines.append(f"target: trials/hour within 15% of linear at {r['workers']} workers on {r['storage']} "
                             f"(step {r['step_s']:g} s): {100 * r['of_ideal']:.0f}% of ideal: "
                             f"{'met' if ok else 'MISSED'}")
    if memory:
        lines.append(f"memory: {memory['pss_mb_per_worker']:.0f} MB (PSS) per worker process, "
                     f"{memory['available_mb']} MB available: this machine holds about {memory['workers_fit']} such "
                     "workers (a real worker also forks a trial process with torch while it measures)")
    if growth:
        lines.append(f"sampler suggestion time (ask + every knob's suggestion, median of {args.repeat}; 9 knobs, "
                     f"2 objectives, 2 constraints); the default gp hands over to tpe at {GP_MAX_TRIALS} "
                     "complete trials:")
        lines.append(f"{'trials':>7} {'gp alone':>9} {'tpe':>7} {'default':>8} {'default uses':>13}")
        for g in growth:
            s = g["seconds"]
            gp = "-" if s["gp-only"] is None else f"{s['gp-only']:.3f}"
            lines.append(f"{g['trials']:>7} {gp:>9} {s['tpe']:>7.3f} {s['gp']:>8.3f} {g.get('default_uses', '-'):>13}")
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
