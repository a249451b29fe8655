"""What else runs on the machine: measured with real competing processes, and named before a run starts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from autotune.machine import load
from autotune.tuning import preparation


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_another_process_using_a_core_is_measured(hog):
    seen = load.other_cores_now(1.0)
    assert seen["other_cores"] >= 0.6 and seen["cores"] >= 1, seen  # the hog keeps one core busy


def test_a_busy_machine_is_a_quarter_of_the_cores_and_at_least_half_a_core():
    assert load.busy_threshold(2) == 0.5 and load.busy_threshold(8) == 2.0 and load.busy_threshold(1) == 0.5


def _opening(busy: dict) -> list[str]:
    prepared = preparation.Prepared(
        config=SimpleNamespace(trials=2), name="cnn", store=SimpleNamespace(shown="studies/cnn.db"), live=None,
        created=True, recovered=[], tuner=None, device="cpu", space_name="cpu", configurations=4, searched=["threads"],
        measured=0, runner=None, busy=busy)  # type: ignore[arg-type]
    return prepared.opening()


@pytest.mark.slow  # 3 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_run_warns_before_it_starts_on_a_busy_machine(hog):
    lines = _opening(load.other_cores_now(1.0))
    assert any(line.startswith("warning: the machine is busy: other processes used") for line in lines), lines
    assert not any("busy" in line for line in _opening({"other_cores": 0.1, "cores": 2}))


def _measured_on(core: int) -> dict:
    """``other_cores_now`` in a process pinned to one core (as a worker of ``run --workers`` is)."""
    import ast
    import subprocess
    import sys

    code = (f"import os; os.sched_setaffinity(0, {{{core}}}); from autotune.machine import load; "
            "print(load.other_cores_now(1.0))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return ast.literal_eval(done.stdout.strip())


@pytest.mark.slow  # 4 s: the quick loop (-m 'not slow') has a test of this part that takes less
@pytest.mark.skipif(len(__import__("os").sched_getaffinity(0)) < 2, reason="needs two cores")
def test_a_process_on_other_cores_is_not_a_trials_other_process(hog):
    """The study's other workers run on their own cores: a trial counts only what runs on its own."""
    hog.cpu_affinity([0])
    beside = _measured_on(1)
    assert beside["other_cores"] < 0.3 and beside["cores"] == 1 and beside["machine_cores"] >= 2, beside
    on_it = _measured_on(0)
    assert on_it["other_cores"] >= 0.6, on_it


def test_gpu_processes_are_counted_without_the_trials_own_in_a_pid_namespace_or_not():
    assert load.others_on_gpu([100, 200, 300], {200, 201}) == 2  # the trial seen under its own pid
    assert load.others_on_gpu([200], {200}) == 0  # a quiet GPU
    # a container: NVML lists the host's pids, none of them ours, yet the trial holds a context: one of them is it
    assert load.others_on_gpu([81234], {17}) == 0
    assert load.others_on_gpu([81234, 90001], {17}) == 1
    assert load.others_on_gpu([], {17}) is None  # NVML shows nothing from here: unknown, never "quiet"
    assert load.others_on_gpu(None, {17}) is None
