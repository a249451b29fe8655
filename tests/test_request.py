"""The one typed request: validated once, every default in one place, the same rules for the CLI and the API."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from click.testing import CliRunner

from autotune import api, cli, request
from autotune import study as S
from autotune.errors import KnobError, SpecError
from autotune.request import TuneConfig, WorkloadSpec

SPEC = WorkloadSpec(model="autotune.examples:mlp")


def test_every_default_is_written_once_and_every_face_uses_it():
    job = TuneConfig(spec=SPEC)
    assert (job.trials, job.confirm, job.sampler, job.trial_timeout_s) == (
        request.DEFAULT_TRIALS, request.DEFAULT_CONFIRM, request.DEFAULT_SAMPLER, request.DEFAULT_TRIAL_TIMEOUT_S)
    tune = inspect.signature(api.tune).parameters
    assert (tune["trials"].default, tune["confirm"].default, tune["sampler"].default, tune["trial_timeout"].default) == (
        job.trials, job.confirm, job.sampler, job.trial_timeout_s)
    assert inspect.signature(api.measure).parameters["trial_timeout"].default == job.trial_timeout_s
    options = {p.name: p for p in cli.run.params}
    assert (options["trials"].default, options["confirm"].default, options["sampler"].default) == (job.trials, job.confirm, job.sampler)
    assert options["trial_timeout"].type.convert(options["trial_timeout"].default, None, None) == job.trial_timeout_s
    tuner = S.Options()
    assert (tuner.trials, tuner.race_rounds, tuner.stale_grace_s) == (job.trials, job.confirm, job.stale_grace_s)
    from autotune.runner import Runner

    assert inspect.signature(Runner).parameters["timeout_s"].default == job.trial_timeout_s


def test_the_stale_grace_derives_from_the_trial_timeout():
    assert TuneConfig(spec=SPEC, trial_timeout_s=100).stale_grace_s == 260
    options = S.Options.of(TuneConfig(spec=SPEC, trial_timeout_s=100, confirm=3), max_memory_bytes=None)
    assert (options.stale_grace_s, options.race_rounds) == (260, 3)
    assert S.Options.of(TuneConfig(spec=SPEC, confirm=3), max_memory_bytes=None, race=False).race_rounds == 0


@pytest.mark.parametrize("field, value, message", [
    ("trials", 0, "trial budget"), ("trials", 2.5, "trial budget"), ("trials", True, "trial budget"),
    ("confirm", 51, "race's rounds"), ("confirm", -1, "race's rounds"),
    ("max_memory_bytes", 0, "memory budget"), ("max_memory_bytes", -5, "memory budget"),
    ("time_budget_s", 0, "time budget"), ("trial_timeout_s", -1, "trial timeout"), ("trial_timeout_s", float("nan"), "trial timeout"),
    ("global_batch", 0, "global batch"), ("sampler", "cmaes", "sampler"), ("seed", "0", "seed"), ("space", "", "space"),
    ("quick", "yes", "quick"),
])
def test_a_bad_value_is_refused_once_with_both_names(field, value, message):
    with pytest.raises(KnobError, match=message):
        TuneConfig(spec=SPEC, **{field: value})


def test_a_config_is_frozen_and_round_trips_through_a_study():
    job = TuneConfig(spec=WorkloadSpec(model="m:f", model_args=(("width", 8),)), trials=5, max_memory_bytes=1 << 30, seed=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.trials = 6  # type: ignore[misc]
    assert TuneConfig.from_dict(job.to_dict()) == job
    assert TuneConfig.from_dict({**job.to_dict(), "a_field_from_a_newer_version": 1}) == job


@pytest.mark.parametrize("spec, message", [({"model": ""}, "model"), ({"model": "m:f", "num_classes": 1}, "classes"),
                                           ({"model": "m:f", "task": "finetune"}, "task")])
def test_a_bad_workload_is_refused(spec, message):
    with pytest.raises((KnobError, SpecError), match=message):
        WorkloadSpec(**spec)


def test_the_cli_and_the_api_refuse_a_zero_memory_budget_alike(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(cli.main, ["run", "--model", "autotune.examples:mlp", "--max-memory", "0"])
    assert out.exit_code == 2 and "--max-memory" in out.output and "must be positive" in out.output
    assert out.output.strip().count("\n") == 0
    with pytest.raises(KnobError, match="must be positive"):
        api.tune("autotune.examples:mlp", max_memory=0, progress=False)
    assert list(tmp_path.iterdir()) == []
