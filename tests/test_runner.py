"""The isolated trial: every ending becomes a typed result and the parent survives it."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from autotune import result as R
from autotune.errors import SpecError, WorkloadError, in_words
from autotune.trial.runner import Runner, group_alive
from autotune.workloads.contract import WorkloadSpec


def run(model: str, quick, config=None, timeout: float = 120, **spec) -> R.TrialResult:
    return Runner(WorkloadSpec(model, **spec), timeout_s=timeout, settings=quick).measure(config or {})


def test_ok_trial_has_figures(quick):
    res = run("failing_workloads:tiny", quick)
    assert res.outcome == R.OK, res.error
    assert res.samples_per_s > 0 and res.peak_memory_bytes > 0 and res.time_to_first_step_s > 0
    assert res.config["precision"] == "fp32" and res.samples_per_step == 32
    assert res.overhead_s is not None and res.wall_s >= res.overhead_s


def test_oom_is_classified(quick):
    res = run("failing_workloads:oom", quick)
    assert res.outcome == R.OOM
    assert "allocate" in res.error["message"]


def test_nan_is_classified(quick):
    res = run("failing_workloads:nan", quick)
    assert res.outcome == R.NAN


def test_signal_is_crashed(quick):
    res = run("failing_workloads:abort", quick)
    assert res.outcome == R.CRASHED
    assert res.error["signal"] == 6 and "SIGABRT" in res.error["message"]


def test_exit_without_result_is_error(quick):
    res = run("failing_workloads:hard_exit", quick)
    assert res.outcome == R.ERROR and "code 3" in res.error["message"]


@pytest.mark.slow  # 3 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_timeout_kills_the_whole_group(quick):
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    start = time.monotonic()
    runner = Runner(WorkloadSpec("failing_workloads:sleeper"), timeout_s=3, settings=quick)
    seen: list[int] = []
    import threading

    def watch() -> None:  # record the trial's group while it runs
        while time.monotonic() - start < 2.5:
            if runner._current:
                seen.append(runner._current)
            time.sleep(0.1)

    t = threading.Thread(target=watch)
    t.start()
    res = runner.measure({"num_workers": 2})
    t.join()
    assert res.outcome == R.TIMEOUT
    assert time.monotonic() - start < 30
    assert seen, "the trial never started"
    pgid = seen[0]
    deadline = time.monotonic() + 3
    while group_alive(pgid) and time.monotonic() < deadline:  # killed at once; reaped a moment later
        time.sleep(0.05)
    assert not group_alive(pgid), "processes of the timed-out trial survive"
    # nothing new left under this process, other than the fork server itself
    after = {p.pid for p in me.children(recursive=True)} - before
    leftovers = [p for p in after if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    server = [p for p in leftovers if "autotune.trial.forkserver" in " ".join(psutil.Process(p).cmdline())]
    assert set(leftovers) <= set(server)


def test_parent_survives_all_failures(quick):
    for model in ("failing_workloads:oom", "failing_workloads:abort", "failing_workloads:nan"):
        run(model, quick)
    assert run("failing_workloads:tiny", quick).ok


def test_dataloader_workers_are_real_and_counted(quick, tmp_path):
    folder = tmp_path / "pids"
    folder.mkdir()
    res = run(
        "failing_workloads:pid_data",
        quick,
        {"num_workers": 2, "persistent_workers": True},
        model_args=(("folder", str(folder)), ("hold_mb", 64)),
    )
    assert res.ok, res.error
    pids = {int(p.stem) for p in folder.iterdir()} - {res.notes["pid"]}  # the trial read one sample itself
    assert len(pids) == 2, pids  # two worker processes loaded the batches
    assert res.memory["max_child_processes"] >= 2
    # each worker holds 64 MiB of its own: counted in the tree's peak
    assert res.memory["peak_children_uss_bytes"] >= 2 * 60 * 2**20
    assert res.peak_memory_bytes >= res.memory["peak_children_uss_bytes"]


def test_probe_reports_context_and_user_errors(quick):
    info = Runner(WorkloadSpec("autotune.examples:cnn")).probe()
    assert info["context"]["input_rank"] == 4 and info["context"]["task"] == "train"
    assert info["fingerprint"]["torch"]
    with pytest.raises(SpecError, match="no module named"):
        Runner(WorkloadSpec("surely_missing_pkg:x")).probe()
    with pytest.raises(WorkloadError, match="gives no data"):
        Runner(WorkloadSpec("torch.nn:Identity")).probe()


def test_env_knob_reaches_the_trial_process(quick):
    before = os.environ.get("OMP_NUM_THREADS")
    args = (("threads", 1), ("value", "1"), ("var", "OMP_NUM_THREADS"))
    res = run("failing_workloads:env_check", quick, {"threads": 1}, model_args=args)
    assert res.ok, res.error
    assert os.environ.get("OMP_NUM_THREADS") == before  # the parent's environment is untouched
    assert run("failing_workloads:env_check", quick, {"threads": 2}, model_args=args).outcome == R.ERROR


@pytest.mark.slow  # 14 s in a full run on a 2-core CPU
def test_a_trial_slower_than_the_limit_stops_early_as_slower_and_says_how_far_it_got(quick):
    runner = Runner(WorkloadSpec("failing_workloads:slow_above", model_args=(("batch", 32), ("delay", 2.0))),
                    timeout_s=120, settings=quick)
    fast = runner.measure({"batch_size": 32}, limit_s=10)
    assert fast.outcome == R.OK, fast.error  # under the limit: measured as usual
    started = time.monotonic()
    slow = runner.measure({"batch_size": 64}, limit_s=10)
    assert slow.outcome == R.SLOWER, slow.error
    assert time.monotonic() - started < 60  # stopped near its limit, far before the 120 s timeout
    assert slow.error["progress"]["steps"] >= 2 and "samples/s so far" in slow.error["message"]
    assert 0 < slow.notes["samples_per_s_so_far"] < 40  # 64 samples per 2 s step: about 32 a second


@pytest.mark.slow  # 9 s in a full run on a 2-core CPU
def test_the_limit_never_applies_to_the_first_step(quick):
    """Compilation happens in the first step: a first step slower than the limit alone is not 'slower'."""
    first, limit = 8.0, 4.0  # what follows the first step takes about 0.5 s: far under the limit, on a busy machine too
    runner = Runner(WorkloadSpec("failing_workloads:slow_first", model_args=(("first", first),)), timeout_s=120,
                    settings=quick)
    res = runner.measure({}, limit_s=limit)
    assert res.outcome == R.OK, res.error
    assert res.time_to_first_step_s >= first > limit  # the first step really took longer than the limit


@pytest.mark.slow  # 5 s in a full run on a 2-core CPU
def test_a_compiled_configuration_whose_first_step_runs_past_the_compile_limit_is_stopped_as_slower(quick):
    """--compile-limit: a max-autotune first step must not take the study's hour. The first forward sleeps 20 s
    (as a long kernel autotuning would) under a 2 s limit."""
    runner = Runner(WorkloadSpec("failing_workloads:slow_first", model_args=(("first", 20.0),)), timeout_s=120,
                    settings=quick, compile_limit_s=2.0)
    started = time.monotonic()
    res = runner.measure({"compile": "default"})
    assert res.outcome == R.SLOWER, res.error
    assert time.monotonic() - started < 18  # stopped near its limit, not after the sleep
    assert ("first step (the compilation) ran past the 2.0s compile limit (--compile-limit)"
            in in_words(res.error["message"]))


@pytest.mark.slow  # 5 s in a full run on a 2-core CPU
def test_a_trial_running_past_its_phases_end_is_stopped_there_as_out_of_time_not_as_a_failure(quick):
    """--time-budget: a trial (here a first step that sleeps 20 s, as a long compilation would) is stopped when the time
    its phase may take runs out, before the compile limit, and says it measured nothing; past that end it does not
    start at all."""
    runner = Runner(WorkloadSpec("failing_workloads:slow_first", model_args=(("first", 20.0),)), timeout_s=120,
                    settings=quick, compile_limit_s=60.0)
    started = time.monotonic()
    res = runner.measure({"compile": "default"}, deadline=time.time() + 2.0)
    assert res.outcome == R.OUT_OF_TIME, res.error
    assert time.monotonic() - started < 15  # stopped near the end, not after the sleep or at the compile limit
    assert "the compilation, had not finished" in res.error["message"] and res.wall_s > 0
    late = runner.measure({}, deadline=time.time() - 1.0)
    assert late.outcome == R.OUT_OF_TIME and "not started" in late.error["message"] and late.wall_s == 0.0
    assert runner.measure_together([{}, {}], deadline=time.time() - 1.0).outcome == R.OUT_OF_TIME


@pytest.mark.slow  # 5 s in a full run on a 2-core CPU
def test_the_compile_limit_leaves_an_eager_first_step_alone(quick):
    runner = Runner(WorkloadSpec("failing_workloads:slow_first", model_args=(("first", 4.0),)), timeout_s=120,
                    settings=quick, compile_limit_s=1.0)
    res = runner.measure({})
    assert res.outcome == R.OK, res.error
    assert res.time_to_first_step_s >= 4.0


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_a_competing_process_is_measured_and_named(quick, hog):
    """A real CPU-bound process (the hog fixture): the trial records that another process used about a core."""
    res = Runner(WorkloadSpec("failing_workloads:slow", model_args=(("delay", 0.02),)), timeout_s=120,
                 settings=quick).measure({"threads": 1})
    assert res.outcome == R.OK, res.error
    assert res.load["cores"] >= 1 and res.load["wall_s"] > 0
    assert res.load["other_cores"] >= 0.6, res.load  # the hog kept one core busy throughout
