"""The composition behind run, worker, submit and the API: what it hands the search loop."""

from __future__ import annotations

import pytest

from autotune.tuning import preparation
from autotune.request import TuneConfig
from autotune.store import LiveStudy, Store
from autotune.workloads.contract import WorkloadSpec


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_the_race_shares_processes_only_when_asked_and_what_each_knob_bought_by_default(tmp_path, monkeypatch):
    """The race's claims rest on separate processes unless AUTOTUNE_PAIRED=1 asks for shared ones (measured biased
    at glibc's default heap: benchmarks/paths_agree.py); what each knob bought is measured in shared processes by
    default, where knobs.apart lets them be shared (autotune.tuning.phases.bought). Seen through a fake runner: the
    processes each way of measuring starts, as the configurations each one measures."""
    from autotune import result as R

    config = TuneConfig(spec=WorkloadSpec("autotune.examples:mlp"), trials=2, quick=True)
    store = Store.open(f"sqlite:///{tmp_path}/s.db")
    a, b = {"precision": "fp32"}, {"precision": "bf16"}

    def processes(prepared) -> list:
        """The processes the tuner's measurements start from now on, each as [(configuration, settings), ...]."""
        started: list = []

        def measure(config, *args, settings=None, **kwargs):
            started.append([(dict(config), settings)])
            return R.TrialResult(outcome=R.OK, samples_per_s=100.0, peak_memory_bytes=10**8, wall_s=0.01)

        def measure_together(configs, settings=None, unchecked=False, deadline=None):
            started.append([(dict(c), settings) for c in configs])
            return R.PairedResult(outcome=R.OK, arms=[{"config": dict(c), "outcome": R.OK, "samples_per_s": 100.0}
                                                      for c in configs], wall_s=0.01)

        monkeypatch.setattr(prepared.runner, "measure", measure)
        monkeypatch.setattr(prepared.runner, "measure_together", measure_together)
        return started

    monkeypatch.delenv(preparation.PAIRED_ENV, raising=False)
    prepared = preparation.prepare(config, "off", store, "cpu")
    bench, started = prepared.tuner.bench, processes(prepared)
    lean = prepared.runner.settings.lean()
    # the race: nothing to share processes with, so each of its measurements (bench.remeasure) is a process of its own
    assert bench.together is None
    bench.remeasure(a)
    bench.remeasure(b)
    assert started == [[(a, lean)], [(b, lean)]]
    # what each knob bought: the path's configurations measured alternately in one process, lean
    started.clear()
    assert [arm["config"] for arm in bench.ablate([a, b]).arms] == [a, b]
    assert started == [[(a, lean), (b, lean)]]

    monkeypatch.setenv(preparation.PAIRED_ENV, "1")
    prepared = preparation.prepare(config, "on", store, "cpu")
    bench, started = prepared.tuner.bench, processes(prepared)
    assert bench.together is not None
    bench.together([a, b])  # asked for: the race shares a process too
    bench.ablate([a, b])
    assert started == [[(a, lean), (b, lean)], [(a, lean), (b, lean)]]


@pytest.mark.slow  # 3 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_warm_cache_fills_optunas_trial_cache_as_its_own_read_would(tmp_path):
    """A resumed study's trials are read in one pass (autotune.reading) into Optuna's cache, not through its ORM;
    every read after it (Optuna's, incremental) sees what a study read the usual way sees, new trials included."""
    import optuna
    from optuna.trial import TrialState
    from autotune.testing.studies import make_study

    url = f"sqlite:///{tmp_path}/w.db"
    make_study(url, n_trials=30, seed=3, name="w")
    writer = LiveStudy(optuna.load_study(study_name="w", storage=url))
    running = writer.study.ask()
    writer.mark(running, role="search")

    warmed = optuna.load_study(study_name="w", storage=Store.open(url).storage)
    assert LiveStudy(warmed).warm_cache() is True
    assert LiveStudy(warmed).warm_cache() is False  # read already: left to Optuna
    cold = optuna.load_study(study_name="w", storage=url)
    assert warmed.get_trials(deepcopy=False) == cold.get_trials(deepcopy=False)
    assert [t.state for t in warmed.get_trials(deepcopy=False)].count(TrialState.RUNNING) == 1

    # another process finishes the running trial and starts a new one: both reads see it the same way
    writer.mark(running, outcome="ok")
    writer.study.tell(running, [1.0, 2.0])
    writer.mark(writer.study.ask(), role="search")
    fresh = optuna.load_study(study_name="w", storage=url)
    assert warmed.get_trials(deepcopy=False) == fresh.get_trials(deepcopy=False)
    assert len(warmed.get_trials(deepcopy=False)) == 32

    # storages that keep their own state are left alone
    journal = optuna.create_study(storage=Store.open(f"journal:{tmp_path}/j.log").storage,
                                  directions=["maximize", "minimize"])
    assert LiveStudy(journal).warm_cache() is False


def test_warm_cache_reads_with_the_collector_paused_and_freezes_what_it_read(tmp_path, collector_seen):
    """The bulk read of a resumed study runs with Python's cyclic collector paused (its collections walked the growing
    heap again and again) and leaves what it read frozen, out of later collections' walks; the collector
    is on again afterwards, unless the caller had paused it."""
    import gc

    import optuna
    from autotune.testing.studies import make_study
    from autotune.store import reading

    url = f"sqlite:///{tmp_path}/g.db"
    make_study(url, n_trials=10, seed=3, name="g")
    enabled = collector_seen(reading, "all_trials")
    assert LiveStudy(optuna.load_study(study_name="g", storage=Store.open(url).storage)).warm_cache() is True
    assert enabled == [False] and gc.isenabled() and gc.get_freeze_count() > 0
    gc.disable()
    assert LiveStudy(optuna.load_study(study_name="g", storage=Store.open(url).storage)).warm_cache() is True
    assert enabled == [False, False] and not gc.isenabled()


def _opening(searched: list[str]) -> list[str]:
    from types import SimpleNamespace

    prepared = preparation.Prepared(
        config=SimpleNamespace(trials=2, compile_limit_s=180.0), name="cnn",
        store=SimpleNamespace(shown="studies/cnn.db"),
        live=None, created=True, recovered=[], tuner=None, device="cuda:0", space_name="default", configurations=4,
        searched=searched, measured=0, runner=None)  # type: ignore[arg-type]
    return prepared.opening()


def test_run_says_how_long_a_compilation_may_take_where_compile_is_searched(monkeypatch):
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    lines = _opening(["precision", "compile"])
    assert any(line.startswith("compile: a compiled configuration's first step (the compilation, max-autotune's kernel "
                               "benchmarks included) is stopped after 3m00s") for line in lines), lines
    assert not any(line.startswith("compile:") for line in _opening(["precision"]))


def test_run_names_the_shells_variables_that_trials_do_not_inherit(monkeypatch):
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")
    lines = _opening(["precision"])
    assert "not passed to trials: PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128: the knobs set these (at a knob's " \
           "default, PyTorch's default holds)" in lines
    assert preparation.placement("cpu")["not_inherited"] == {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"}
