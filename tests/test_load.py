"""What else runs on the machine: measured with real competing processes, and named before a run starts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from autotune import load, tuning


def test_another_process_using_a_core_is_measured(hog):
    seen = load.other_cores_now(1.0)
    assert seen["other_cores"] >= 0.6 and seen["cores"] >= 1, seen  # the hog keeps one core busy


def test_a_busy_machine_is_a_quarter_of_the_cores_and_at_least_half_a_core():
    assert load.busy_threshold(2) == 0.5 and load.busy_threshold(8) == 2.0 and load.busy_threshold(1) == 0.5


def _opening(busy: dict) -> list[str]:
    prepared = tuning.Prepared(
        config=SimpleNamespace(trials=2), name="cnn", store=SimpleNamespace(shown="studies/cnn.db"), live=None,
        created=True, recovered=[], tuner=None, device="cpu", space_name="cpu", configurations=4, searched=["threads"],
        measured=0, runner=None, busy=busy)  # type: ignore[arg-type]
    return prepared.opening()


def test_run_warns_before_it_starts_on_a_busy_machine(hog):
    lines = _opening(load.other_cores_now(1.0))
    assert any(line.startswith("warning: the machine is busy: other processes used") for line in lines), lines
    assert not any("busy" in line for line in _opening({"other_cores": 0.1, "cores": 2}))
