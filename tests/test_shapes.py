"""Every way of running a study ends in a verdict that agrees with itself: made-up workloads of known truth (one knob
pays, nothing pays, only a combination pays, a configuration that crashes or runs out of memory) x the shapes a user
runs a study in, through the tuning loop (autotune.tuning.loop) over a real store:

- SQLite, the journal and PostgreSQL;
- two workers whose share of the cores leaves some knob values out, then the process that races and claims (the
  parent of ``autotune run --workers 2``) over the whole space; two workers of a device each (``--devices``, each
  over the whole space, simulated on the CPU);
- a run stopped (Ctrl-C) in the search, the noise floor, the race, the claim or the numerics check, then resumed;
- ``--time-budget``, ``--confirm 0``, ``--numerics strict``, a measurement taken on a busy machine.

Each cell ends in a verdict, with no trial left RUNNING, and that verdict agrees with the table and every view
(tests/test_deciding.py's invariants). The quick loop runs one cell of each kind; the slow suite the matrix.
"""

from __future__ import annotations

import multiprocessing

import pytest
from test_deciding import check

from autotune import knobs
from autotune import result as R
from autotune.evidence import evidence_of
from autotune.knobs import space
from autotune.store import Store
from autotune.testing import fake as M
from autotune.testing import studies as made_up
from autotune.tuning import loop
from autotune.tuning.phases import Bench, Seeds

#: The parent's machine: 2 cores; each of two workers sees 1 (``threads`` then has fewer values there).
CTX = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=2)
WORKER_CTX = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=1)
SPACE = space.parse({"search": {"precision": ["fp32", "bf16"], "optimizer_impl": ["default", "fused"],
                                "memory_format": ["contiguous", "channels_last"], "threads": [1, 2]}},
                    "shapes.toml", "shapes")
TRIALS = 8


def one_pays(c):
    return 1.5 if c["memory_format"] == "channels_last" else 1.0


def nothing_pays(c):
    return 1.0


def combination(c):
    return 1.5 if c["precision"] == "bf16" and c["optimizer_impl"] == "fused" else 1.0


def crashes(c):
    return 1.4 if c["optimizer_impl"] == "fused" else 1.0


WORKLOADS = {
    "one knob pays": (one_pays, None),
    "nothing pays": (nothing_pays, None),
    "a combination pays": (combination, None),
    "one configuration crashes": (crashes, lambda c: R.ERROR if c["precision"] == "bf16"
                                  and c["memory_format"] == "channels_last" else None),
    "one configuration runs out of memory": (crashes, lambda c: R.OOM if c["precision"] == "bf16" else None),
}
STOPS = ("search", "floor", "race", "claim", "numerics")  # where a run is stopped (Ctrl-C), then resumed
SHAPES = ("one worker", "two workers", "two devices", "time budget", "confirm 0", "numerics strict", "busy measurement",
          *(f"stopped in the {stop}" for stop in STOPS))


def numerics_run(differs):
    """The numerics check's training run, of known figures: the loss 10% above the defaults' where ``differs``."""

    def run(config, steps, per_step, seed, save, references):
        shift = 1.1 if differs(config) else 1.0
        losses = [2.0] * (steps // 2) + [2.0 * shift] * (steps - steps // 2)
        return R.NumericsResult("ok", dict(config), losses=losses, grad_norms=[1.0] * steps, moved=1.0,
                                distances={label: 0.0 for label, _ in references}, initial_digest="w",
                                data_digest="d", wall_s=0.01)

    return run


class StoppingBench(Bench):
    """A bench whose run is stopped (KeyboardInterrupt) once, at the first measurement of one phase."""

    stop_in: str | None = None

    def again(self, live, trial, round_id, config):
        prefix = {"floor": "floor-", "race": "race-", "claim": "confirm-"}.get(self.stop_in or "")
        if prefix and round_id.startswith(prefix):
            self.stop_in = None
            raise KeyboardInterrupt
        return super().again(live, trial, round_id, config)


def bench(workload: str, seed: int, shape: str, offset: int = 0) -> Bench:
    truth, fail = WORKLOADS[workload]
    measure = M.lognormal(truth, seed, 0.15, fail=fail, offset=offset)
    if shape == "busy measurement":
        measure = M.busy_once(measure)  # the fifth process ran beside another's 1.6 cores

    stop = shape.removeprefix("stopped in the ") if shape.startswith("stopped in the ") else None
    if stop == "search":
        plain_search, calls_search = measure, [0]

        def measure(config, dominators=(), margin=None, **kw):
            calls_search[0] += 1
            if calls_search[0] == 3:
                raise KeyboardInterrupt
            return plain_search(config, dominators, margin)

    numerics = numerics_run(lambda c: c["precision"] == "bf16")
    if stop == "numerics":
        plain_numerics, numerics_calls = numerics, [0]

        def numerics(*args):
            numerics_calls[0] += 1
            if numerics_calls[0] == 2:
                raise KeyboardInterrupt
            return plain_numerics(*args)

    made = StoppingBench(measure, numerics=numerics)
    made.stop_in = stop
    return made


def options(shape: str, ctx: knobs.Context = CTX, **over) -> loop.Options:
    kw: dict = {"trials": TRIALS, "max_repeats": 500, "numerics": "warn"}
    if shape == "time budget":
        kw["time_budget_s"] = 60.0
    if shape == "confirm 0":
        kw["race_rounds"] = 0
    if shape == "numerics strict":
        kw["numerics"] = "strict"
    return loop.Options(**{**kw, **over})


def tuner(url: str, name: str, workload: str, seed: int, shape: str, ctx: knobs.Context = CTX, offset: int = 0,
          **over) -> loop.Tuner:
    live = made_up.live_study(url, name, SPACE, ctx, seed=seed, grace_s=None)
    base = loop.base_config(ctx, SPACE.fixed, None)
    return loop.Tuner(live, Seeds(space.effective(SPACE, ctx, base), ctx, base), bench(workload, seed, shape, offset),
                   options(shape, ctx, **over))


def worker(url: str, name: str, workload: str, seed: int, k: int, shape: str) -> None:
    """A worker of ``--workers 2`` (its share of the cores) or of ``--devices`` (a device of its own, the whole space):
    the search only (the race, the claim and the numerics check are the parent's)."""
    ctx = WORKER_CTX if shape == "two workers" else CTX
    tuner(url, name, workload, seed + 1000 * (k + 1), shape, ctx, offset=1000 * (k + 1), race_rounds=0,
          numerics="off").run(poll_s=0.01)


def run_cell(url: str, workload: str, shape: str, seed: int):
    """Run one cell as a user would (stopped and resumed, or with its workers): the study's view, the last run's
    summary, and whether a run was stopped."""
    name = "-".join(f"{workload} {shape} {seed}".split())
    stopped = False
    if shape in ("two workers", "two devices"):
        # the parent makes the study, then its workers
        made_up.live_study(url, name, SPACE, CTX, seed=seed, grace_s=None)
        spawn = multiprocessing.get_context("spawn")  # processes, as autotune run starts them: each its own owner
        workers = [spawn.Process(target=worker, args=(url, name, workload, seed, k, shape)) for k in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(timeout=300)
        assert [w.exitcode for w in workers] == [0, 0], f"{name}: the workers exited {[w.exitcode for w in workers]}"
        summary = tuner(url, name, workload, seed, shape).run(poll_s=0.01)
    elif shape.startswith("stopped in the "):
        first = tuner(url, name, workload, seed, shape)
        try:
            first.run(poll_s=0.01)
        except KeyboardInterrupt:
            stopped = True  # a study whose run never reaches that phase (nothing chosen: no claim) is not stopped
        summary = tuner(url, name, workload, seed, "resumed", offset=500).run(poll_s=0.01)
    else:
        summary = tuner(url, name, workload, seed, shape).run(poll_s=0.01)
    return Store(url).read(name), summary, stopped


def assert_ends_in_a_verdict(url: str, workload: str, shape: str, seed: int, stops: bool = False) -> None:
    """The cell ends in a verdict, nothing RUNNING, the verdict agreeing with itself (``stops``: and a run of a
    "stopped in the ..." shape was stopped there)."""
    where = f"{workload}, {shape}, seed {seed}"
    view, summary, stopped = run_cell(url, workload, shape, seed)
    assert stopped or not (stops and shape.startswith("stopped in the ")), f"{where}: the run never reached its stop"
    verdict = evidence_of(view).verdict()
    assert summary.verdict is not None and verdict.state in ("gain", "no_gain", "unconfirmed"), \
        f"{where}: {verdict.state}: {verdict.text}"
    running = [t.number for t in view.trials if t.state == "running"]
    assert not running, f"{where}: trials {running} left RUNNING"
    check(view, summary, where)


QUICK = [("one knob pays", "two workers", 0), ("a combination pays", "two devices", 10),
         ("a combination pays", "time budget", 1),
         ("nothing pays", "confirm 0", 2), ("one configuration runs out of memory", "numerics strict", 3),
         ("one knob pays", "busy measurement", 4), ("one configuration crashes", "stopped in the search", 5),
         ("a combination pays", "stopped in the race", 6), ("one knob pays", "stopped in the claim", 7),
         ("nothing pays", "stopped in the floor", 8), ("a combination pays", "stopped in the numerics", 9)]


@pytest.mark.parametrize("workload,shape,seed", QUICK)
def test_a_shape_ends_in_a_verdict_that_agrees_with_itself_on_sqlite(tmp_path, workload, shape, seed):
    assert_ends_in_a_verdict(f"sqlite:///{tmp_path / 'studies.db'}", workload, shape, seed, stops=True)


@pytest.mark.parametrize("workload,shape,seed", [("one knob pays", "stopped in the claim", 11),
                                                 ("a combination pays", "two workers", 12)])
def test_a_shape_ends_in_a_verdict_on_every_storage(store_url, workload, shape, seed):
    assert_ends_in_a_verdict(store_url, workload, shape, seed, stops=True)


@pytest.mark.slow  # 5 workloads x 12 shapes x 2 seeds: a few minutes on a 2-core CPU
def test_every_shape_and_workload_ends_in_a_verdict_that_agrees_with_itself(tmp_path):
    failures = []
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    cells = [(w, s, seed) for w in WORKLOADS for s in SHAPES for seed in (20, 21)]
    for workload, shape, seed in cells:
        try:
            assert_ends_in_a_verdict(url, workload, shape, seed)
        except (AssertionError, Exception) as exc:  # noqa: BLE001 - every cell is tried, the failures listed
            failures.append(f"{workload}, {shape}, seed {seed}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
    assert not failures, f"{len(failures)} of {len(cells)} cells: " + "; ".join(failures[:6])
