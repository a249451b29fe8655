"""Warm start (autotune/tuning/warmstart.py): a new study first measures the winners of earlier studies of its kind.

The earlier studies are real ones: tuned by the real study loop (autotune.tuning.loop.Tuner) in a real SQLite
store, with a fake measurement whose fastest configuration is known, so each one has a 'gain' verdict
with a known winner.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any, Mapping

import optuna
import pytest

from autotune import knobs
from autotune.knobs import space
from autotune.tuning import preparation
from autotune.tuning import warmstart
from autotune import result as R
from autotune.tuning import loop
from autotune.tuning.phases import Bench, Seeds
from autotune.request import TuneConfig, WorkloadSpec
from autotune.store import LiveStudy, Store, kind
from autotune.store import writing
from autotune.evidence import evidence_of
from autotune.testing import fake as M
from autotune.testing import studies as made_up

CTX = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=2)
SAME = {"device_type": "cpu", "device_name": "Test CPU", "cpu_model": "Test CPU", "cpu_count": 2, "torch": "2.5.0"}
OTHER = {**SAME, "cpu_count": 8}
TARGET = {
    "precision": ["fp32", "bf16"],
    "batch_size": {"low": 16, "high": 128, "step": 16},
    "optimizer_impl": ["default", "foreach"],
    "memory_format": ["contiguous", "channels_last"],
}
# The earlier studies: (name, fingerprint, searched space, the configuration the fake measures fastest, created_at)
EARLIER = [
    ("a", SAME, {"batch_size": [32, 64], "optimizer_impl": ["default", "foreach"]},
     {"batch_size": 64, "optimizer_impl": "foreach"}, "2025-01-01T00:00:00+00:00"),
    ("b", SAME, {"precision": ["fp32", "bf16"], "batch_size": [32, 128]},
     {"precision": "bf16", "batch_size": 128}, "2025-01-02T00:00:00+00:00"),
    ("c", OTHER, {"batch_size": [32, 96], "memory_format": ["contiguous", "channels_last"]},
     {"batch_size": 96, "memory_format": "channels_last"}, "2025-01-03T00:00:00+00:00"),
]


def peaked(best: Mapping[str, Any], calls: list | None = None, interrupt_role: list | None = None):
    """A fake measurement (:mod:`autotune.testing.fake`, no noise): twice as fast for every knob that has its ``best``
    value (so ``best`` wins); ``interrupt_role``: the next measurement is interrupted (Ctrl-C) while it holds one."""
    measure = M.lognormal(lambda c: 2.0 ** sum(1 for k, v in best.items() if c.get(k) == v), 0, 0.0, calls)

    def evaluate(config, dominators=(), margin=None):
        if interrupt_role:
            if calls is not None:
                calls.append(dict(config))
            interrupt_role.pop()
            raise KeyboardInterrupt
        return measure(config)

    return evaluate


def attrs(sp: space.Space, fingerprint: Mapping[str, Any]) -> dict[str, Any]:
    return made_up.description(sp, CTX, fingerprint=dict(fingerprint))


def tuned(store: Store, name: str, fingerprint: Mapping[str, Any], search: Mapping[str, Any], best: Mapping[str, Any],
          created_at: str, trials: int) -> optuna.Study:
    """An earlier study, tuned to the end: its verdict's winner is ``best``."""
    sp = space.parse({"search": dict(search)}, f"{name}.toml", name)
    study, created = store.create_or_check(name, attrs(sp, fingerprint), loop.make_sampler("random", 0))
    assert created
    writing.save(study, created_at=created_at)
    base = loop.base_config(CTX, {}, None)
    eff = space.effective(sp, CTX, base)
    loop.Tuner(LiveStudy(study), Seeds(eff, CTX, base), Bench(peaked(best)),
            loop.Options(trials=trials, race_rounds=0, max_repeats=60)).run()
    return study


@pytest.fixture(scope="module")
def earlier(tmp_path_factory) -> Path:
    """A SQLite file holding the EARLIER studies, made once (each test works on a copy)."""
    path = tmp_path_factory.mktemp("earlier") / "earlier.db"
    store = Store(f"sqlite:///{path}")
    for name, fingerprint, search, best, created_at in EARLIER:
        tuned(store, name, fingerprint, search, best, created_at, trials=4)
        verdict = evidence_of(store.read(name)).verdict()
        assert verdict.recommends, verdict.text  # unraced: each measured once, so recommended but not confirmed
    return path


@pytest.fixture
def url(earlier, tmp_path) -> str:
    path = tmp_path / "store.db"
    shutil.copy(earlier, path)
    return f"sqlite:///{path}"


def winner_config(store: Store, name: str) -> dict[str, Any]:
    study = store.read(name)
    verdict = evidence_of(study).verdict()
    return dict(study.trials[verdict.winner].config)


def new_target(store: Store, name: str, fingerprint: Mapping[str, Any] = SAME, search: Mapping[str, Any] = TARGET,
               enabled: bool = True) -> tuple[optuna.Study, loop.Tuner, list[warmstart.Seed]]:
    """A new study, its Tuner and its seeds, the way tuning.prepare makes them."""
    sp = space.parse({"search": dict(search)}, "target.toml", "target")
    study, created = store.create_or_check(name, attrs(sp, fingerprint), loop.make_sampler("random", 1))
    base = loop.base_config(CTX, {}, None)
    eff = space.effective(sp, CTX, base)
    options = loop.Options(trials=5, race_rounds=0, max_repeats=60)
    tuner = loop.Tuner(LiveStudy(study), Seeds(eff, CTX, base), Bench(peaked({"batch_size": 112})), options)
    seeds = warmstart.seeds(store, study, created, enabled, fingerprint, tuner.seeds)
    tuner.seeds.warm = [(s.params, s.attrs()) for s in seeds]
    return study, tuner, seeds


@pytest.mark.slow  # 4 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_a_new_study_of_the_same_kind_measures_the_earlier_winners_after_the_baseline_and_the_recipe(url):
    store = Store(url)
    study, tuner, seeds = new_target(store, "target")
    # the newest first; 'c' ran on another kind of machine
    assert [(s.study, s.trial) for s in seeds] == [("b", evidence_of(store.read("b")).verdict().winner),
                                                    ("a", evidence_of(store.read("a")).verdict().winner)]
    assert seeds[0].params == {"precision": "bf16", "batch_size": 128, "optimizer_impl": "default",
                               "memory_format": "contiguous"}
    assert seeds[1].params == {"precision": "fp32", "batch_size": 64, "optimizer_impl": "foreach",
                               "memory_format": "contiguous"}
    # stored: workers and resumes queue the same
    assert store.read("target").warm_start == [s.to_dict() for s in seeds]
    tuner.run()
    trials = store.read("target").trials
    assert [t.role for t in trials[:4]] == ["baseline", "recipe", "warm", "warm"]
    assert [t.warm_from for t in trials[2:4]] == [{"study": s.study, "trial": s.trial} for s in seeds]
    for t, seed in zip(trials[2:4], seeds):
        assert {k: t.config[k] for k in TARGET} == seed.params
        assert t.duplicate_of is None  # measured, not a cache answer
    # the rest are the search's own: its opening configurations, the sampler's, and in its last third the leader's
    # one-knob neighbours
    assert {t.role for t in trials[4:]} <= {"opening", "search", "neighbour"}
    assert warmstart.line(seeds, tuner.seeds.base) == (
        f"warm start: 2 winners of earlier studies on this kind of machine: #{seeds[0].trial} of 'b' "
        f"(precision=bf16 batch_size=128), #{seeds[1].trial} of 'a' (batch_size=64 optimizer_impl=foreach)")


def test_a_study_on_another_kind_of_machine_gets_no_seeds(url):
    store = Store(url)
    alone = {**SAME, "device_name": "Another CPU", "cpu_model": "Another CPU"}
    assert kind(alone) != kind(SAME)
    study, tuner, seeds = new_target(store, "elsewhere", fingerprint=alone)
    assert seeds == [] and store.read("elsewhere").warm_start == []
    tuner.run()
    assert not any(t.role == "warm" for t in store.read("elsewhere").trials)
    # and 'c''s kind gets 'c''s winner only
    _, _, theirs = new_target(store, "eight-cores", fingerprint=OTHER)
    assert [s.study for s in theirs] == ["c"]


def test_without_warm_start_no_seeds_are_chosen_or_queued(url):
    store = Store(url)
    study, tuner, seeds = new_target(store, "cold", enabled=False)
    assert seeds == [] and store.read("cold").warm_start == []
    tuner.run()
    roles = [t.role for t in store.read("cold").trials]
    assert roles[:2] == ["baseline", "recipe"] and "warm" not in roles


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_values_the_space_does_not_hold_are_mapped_or_left_out(url):
    store = Store(url)
    wide = {"batch_size": [32, 256], "optimizer_impl": ["default", "fused"], "threads": [1, 2]}
    tuned(store, "wide", SAME, wide, {"batch_size": 256, "optimizer_impl": "fused", "threads": 1},
          "2025-02-01T00:00:00+00:00", trials=8)
    won = winner_config(store, "wide")
    assert (won["batch_size"], won["optimizer_impl"], won["threads"]) == (256, "fused", 1)
    study, tuner, seeds = new_target(store, "narrow")
    assert [s.study for s in seeds] == ["wide", "b", "a"]
    # 256 is above the range: the nearest batch there is; 'fused' is no choice here: the baseline's value;
    # threads is not searched here: left out
    assert seeds[0].params == {"precision": "fp32", "batch_size": 128, "optimizer_impl": "default",
                               "memory_format": "contiguous"}
    for seed in seeds:
        assert set(seed.params) == set(tuner.seeds.space.search)
        assert all(tuner.seeds.space.search[k].contains(v) for k, v in seed.params.items())
    # a seed that fits to a configuration already queued (the baseline, the recipe, an earlier seed) is dropped
    base = loop.base_config(CTX, {}, None)
    sp = tuner.seeds.space
    assert warmstart.fit({"batch_size": 4096, "optimizer_impl": "fused", "threads": 1}, sp, base) == {
        "precision": "fp32", "batch_size": 128, "optimizer_impl": "default", "memory_format": "contiguous"}
    assert warmstart.choose(store, "narrow2", SAME, sp, base, CTX, taken=[seeds[0].params]) == seeds[1:]
    assert warmstart.choose(store, "narrow2", SAME, sp, base, CTX, limit=1) == seeds[:1]


@pytest.mark.slow  # 3 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_a_resumed_study_queues_its_seeds_once_and_looks_for_no_new_ones(url):
    store = Store(url)
    calls: list = []
    interrupt: list = []
    study, tuner, seeds = new_target(store, "resumed")
    assert len(seeds) == 2
    tuner.bench.evaluate = peaked({"batch_size": 112}, calls, interrupt)
    tuner.options.trials = 3  # baseline, recipe, the first seed
    tuner.run()
    # the second seed's trial is stopped by Ctrl-C: it is recorded as interrupted and queued again
    tuner.options.trials = 5
    interrupt.append(True)
    with pytest.raises(KeyboardInterrupt):
        tuner.run()
    # a newer winner appears meanwhile: a resumed study does not look for new ones
    tuned(store, "newer", SAME, {"optimizer_impl": ["default", "foreach"], "precision": ["fp32", "bf16"]},
          {"optimizer_impl": "foreach", "precision": "bf16"}, "2025-03-01T00:00:00+00:00", trials=4)
    again = optuna.load_study(study_name="resumed", storage=url)
    assert warmstart.seeds(store, again, False, True, SAME, tuner.seeds) == seeds
    resumed = loop.Tuner(LiveStudy(again),
                      Seeds(tuner.seeds.space, CTX, tuner.seeds.base, [(s.params, s.attrs()) for s in seeds]),
                      Bench(peaked({"batch_size": 112}, calls)), loop.Options(trials=7, race_rounds=0, max_repeats=60))
    resumed.run()
    trials = LiveStudy(again).trials()
    warm = [t for t in trials if t.role == "warm"]
    measured = [t for t in warm if t.measured]
    assert [t.outcome for t in warm].count(R.INTERRUPTED) == 1
    assert len(measured) == 2 and not any(t.duplicate_of is not None for t in warm)
    def params(items):
        return sorted(tuple(sorted(p.items())) for p in items)

    assert params(t.params for t in measured) == params(s.params for s in seeds)
    roles = [t.role for t in trials if t.measured]
    assert roles.count("baseline") == 1 and roles.count("recipe") == 1 and roles.count("warm") == 2


# ---------------------------------------------------------------- through tuning.prepare (the wiring of run and tune())


def test_prepare_queues_the_seeds_of_a_new_study_and_says_so_unless_warm_start_is_off(url, tmp_path, monkeypatch):
    # no processes: the probe says this machine is of SAME's kind
    monkeypatch.setattr(preparation, "Runner", M.Runner.factory(
        peaked({"batch_size": 112}), {"context": CTX.to_dict(), "workload": {}, "fingerprint": dict(SAME)}))
    monkeypatch.setattr("autotune.machine.load.other_cores_now", lambda *a, **k: {})  # no half-second wait
    toml = tmp_path / "target.toml"
    toml.write_text("[search]\nprecision = ['fp32', 'bf16']\nbatch_size = { low = 16, high = 128, step = 16 }\n"
                    "optimizer_impl = ['default', 'foreach']\nmemory_format = ['contiguous', 'channels_last']\n")
    job = TuneConfig(spec=WorkloadSpec(model="x:y"), space=str(toml), trials=5, confirm=0, warm_start=True)
    store = Store(url)
    prepared = preparation.prepare(job, "via-prepare", store, "cpu")
    assert [(s.study, s.params["batch_size"]) for s in prepared.warm] == [("b", 128), ("a", 64)]
    assert prepared.tuner.seeds.warm == [(s.params, s.attrs()) for s in prepared.warm]
    said = "warm start: 2 winners of earlier studies on this kind of machine: #"
    assert sum(line.startswith(said) for line in prepared.opening()) == 1
    prepared.run()
    assert [t.role for t in store.read("via-prepare").trials][:4] == ["baseline", "recipe", "warm", "warm"]
    assert store.read("via-prepare").job["warm_start"] is True
    # resumed: the stored seeds, none queued again
    again = preparation.prepare(dataclasses.replace(job, trials=6), "via-prepare", store, "cpu")
    assert again.warm == prepared.warm
    again.run()
    assert [t.role for t in store.read("via-prepare").trials].count("warm") == 2

    cold = preparation.prepare(dataclasses.replace(job, warm_start=False), "cold", store, "cpu")
    assert cold.warm == [] and cold.tuner.seeds.warm == []
    assert not any(line.startswith("warm start") for line in cold.opening())
    assert store.read("cold").warm_start == [] and store.read("cold").job["warm_start"] is False


def test_warm_start_is_off_by_default_part_of_the_job_and_old_jobs_load():
    """Off by default: across models it bought nothing (docs/results.md, benchmarks/results/warm_start.txt)."""
    job = TuneConfig(spec=WorkloadSpec(model="x:y"))
    assert job.warm_start is False
    stored = TuneConfig(spec=WorkloadSpec(model="x:y"), warm_start=True).to_dict()
    assert stored["warm_start"] is True
    del stored["warm_start"]  # a job stored before the option existed
    assert TuneConfig.from_dict(stored).warm_start is False
    assert TuneConfig.from_dict({**stored, "warm_start": False}).warm_start is False
    from autotune.errors import KnobError

    with pytest.raises(KnobError, match="warm_start= must be True or False"):
        TuneConfig(spec=job.spec, warm_start="no")  # type: ignore[arg-type]


def test_run_and_submit_take_no_warm_start(tmp_path):
    from click.testing import CliRunner

    from autotune import cli

    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    for flag, expected in (("--no-warm-start", False), ("--warm-start", True), (None, False)):  # off by default
        name = f"job-{expected}-{flag is None}"
        args = ["submit", "--model", "autotune.examples:mlp", "--storage", url, "--study", name]
        args += [flag] if flag else []
        out = CliRunner().invoke(cli.main, args)
        assert out.exit_code == 0, out.output
        assert preparation.stored_config(Store(url).read(name)).warm_start is expected
    help_text = CliRunner().invoke(cli.main, ["run", "--help"]).output
    assert "--warm-start / --no-warm-start" in help_text
