"""The speed the user's own training reaches (autotune/export/training_speed.py): the line a Meter says once, beside
what the study measured, and why a training runs below the claim; the meter in apply()'s step."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from autotune.export import training_speed
from autotune.export.training_speed import Expected, Meter

STUDY = Expected(398.0, 2.9, 2.7, 3.1)


def test_the_line_sets_the_trainings_figure_beside_the_studys():
    assert Meter(STUDY).text(412.0, 0.01, 0.0, 2) == (
        "autotune: 412.0 samples/s in this training; the study measured 398.0 for this configuration here (2.90x the "
        "defaults, claimed 2.70-3.10x)")
    assert Meter(None).text(412.0, 0.0, 0.0, 2) == "autotune: 412.0 samples/s in this training"
    elsewhere = Expected(398.0, 2.9, 2.7, 3.1, "on the study's machine")
    assert "for this configuration on the study's machine (" in Meter(elsewhere).text(412.0, 0.0, 0.0, 2)


@pytest.mark.parametrize("data, other, cause", [
    (0.40, 0.0, "; below the claim: the steps waited on data 40% of the time"),
    (0.01, 1.2, "; below the claim: other processes used 1.2 of 2 cores"),
    (0.40, 1.2, "; below the claim: the steps waited on data 40% of the time and other processes used 1.2 of 2 cores"),
    (0.01, 0.0, "; below the claim, and neither waiting on data nor another process explains it")])
def test_below_the_claims_interval_the_line_names_the_cause_it_can_see(data, other, cause):
    """398 x 2.7 / 2.9 = 370 samples/s: the least the claim implies for this configuration."""
    assert Meter(STUDY).text(300.0, data, other, 2).endswith(cause)
    assert "below the claim" not in Meter(STUDY).text(375.0, data, other, 2)


class Clock:
    """A clock the test moves: the meter's seconds, without sleeping."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_meter_says_one_line_once_after_its_warm_up_and_window():
    said: list[str] = []
    clock = Clock()
    meter = Meter(STUDY, say=said.append, warmup=(3, 0.0), window=(5, 0.05), clock=clock)
    for _ in range(40):
        meter.begin()
        clock.now += 0.004  # a step of 8 samples in 4 ms
        meter.end(8)
    assert len(said) == 1 and said[0].startswith("autotune: ") and meter.done
    assert meter.samples_per_s == pytest.approx(8 / 0.004)
    assert meter.steps == 3 + meter.window["steps"] and meter.window["steps"] >= 5


def test_the_time_between_steps_is_counted_as_waiting_on_data():
    clock = Clock()
    meter = Meter(Expected(1000.0, 2.0, 1.9, 2.1), say=lambda line: None, warmup=(1, 0.0), window=(10, 0.0),
                  clock=clock)
    for _ in range(12):
        clock.now += 0.010  # the loader
        meter.begin()
        clock.now += 0.002
        meter.end(1)
    assert "the steps waited on data 83% of the time" in meter.line
    assert meter.samples_per_s == pytest.approx(1 / 0.012, rel=0.15) and meter.samples_per_s < 1000 * 1.9 / 2.0


def test_apply_says_the_trainings_speed_once_and_keeps_it_unless_turned_off(tmp_path, monkeypatch, capsys):
    from autotune.export.config import load_config

    monkeypatch.setattr(training_speed, "WARMUP_S", 0.0)
    monkeypatch.setattr(training_speed, "WINDOW_S", 0.0)
    doc = {"schema": "autotune.config/2", "knobs": {"batch_size": 8}, "task": "train", "device": "cpu",
           "measured": {"samples_per_s": 398.0}, "speedup": {"estimate": 2.9, "low": 2.7, "high": 3.1}}
    path = tmp_path / "best.json"
    path.write_text(json.dumps(doc))
    cfg = load_config(path, check_hardware=False)
    data = [(torch.randn(4), torch.tensor(1)) for _ in range(8 * 40)]
    model, loader, step = cfg.apply(nn.Linear(4, 2), data)
    for batch in loader:
        step(batch)
    err = capsys.readouterr().err.splitlines()
    said = [line for line in err if line.startswith("autotune: ")]
    assert (len(said) == 1
            and " samples/s in this training; the study measured 398.0 for this configuration here" in said[0])
    assert cfg.meter is not None and cfg.meter.samples_per_s > 0
    model, loader, step = cfg.apply(nn.Linear(4, 2), data, report_speed=False)
    for batch in loader:
        step(batch)
    assert cfg.meter is None and not [line for line in capsys.readouterr().err.splitlines()
                                      if line.startswith("autotune:")]
