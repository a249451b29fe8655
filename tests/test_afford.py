"""What the search can afford in the time it has left (autotune.tuning.phases.afford): a trial predicted from the
trials seen, a compile mode's first step above all."""

from __future__ import annotations

import pytest

from autotune import result as R
from autotune.store import StoredTrial
from autotune.tuning.phases import afford


def trial(number: int, role: str = "search", compile: str = "off", outcome: str = R.OK, duration: float = 10.0,
          first: float | None = 1.0) -> StoredTrial:
    result = {"time_to_first_step_s": first} if outcome == R.OK else {}
    return StoredTrial(number, "complete", (100.0, 1e8) if outcome == R.OK else (0.0, 1e9), {}, {}, None, None,
                       role=role, outcome=outcome, config={"compile": compile, "precision": "fp32"},
                       config_key=str(number), result=result, duration_s=duration)


BASE = trial(0, "baseline", duration=10.0, first=1.0)  # 9 s of windows after a 1 s first step


def test_nothing_is_predicted_before_the_defaults_are_measured():
    assert afford.trial_s([], {"compile": "max-autotune"}) == (0.0, "")
    assert afford.why_not([], {"compile": "max-autotune"}, left_s=5.0) is None


def test_an_eager_trial_takes_the_defaults_time_and_each_mode_compiles_at_its_prior_before_any_is_seen():
    assert afford.trial_s([BASE], {"compile": "off"})[0] == 10.0
    expected, why = afford.trial_s([BASE], {"compile": "default"})
    assert expected == 9.0 + afford.PRIOR_S["default"] and "before one is seen here" in why
    assert afford.trial_s([BASE], {"compile": "reduce-overhead"})[0] == 9.0 + afford.PRIOR_S["reduce-overhead"]


def test_max_autotune_is_predicted_from_the_table_until_default_has_compiled_then_costs_a_multiple_of_it():
    expected, why = afford.trial_s([BASE], {"compile": "max-autotune"})
    assert expected == 9.0 + afford.PRIOR_S["max-autotune"] and "before one is seen here" in why
    assert afford.why_not([BASE], {"compile": "max-autotune"}, left_s=1e6) is None
    assert "more than the 1m40s left" in afford.why_not([BASE], {"compile": "max-autotune"}, left_s=100.0)
    assert afford.why_not([BASE], {"compile": "max-autotune"}, left_s=None) is None  # no budget: nothing held back
    compiled = trial(1, compile="default", duration=25.0, first=15.0)
    expected, why = afford.trial_s([BASE, compiled], {"compile": "max-autotune"})
    assert expected == pytest.approx(9.0 + 150.0) and "10x compile=default's 15.0s" in why
    assert afford.trial_s([BASE, compiled], {"compile": "default"})[0] == 9.0 + 15.0  # seen: its own figure


def test_a_mode_stopped_in_its_first_step_took_at_least_that_long():
    stopped = trial(2, compile="max-autotune", outcome=R.SLOWER, duration=188.0, first=None)
    assert afford.first_step_s([BASE, stopped], "max-autotune")[0] == 188.0


def test_a_trial_that_would_outlast_the_time_left_or_the_compile_limit_is_not_started_and_says_why():
    compiled = trial(1, compile="default", duration=25.0, first=15.0)
    trials = [BASE, compiled]
    why = afford.why_not(trials, {"compile": "max-autotune"}, left_s=100.0)
    assert why.startswith("compile=max-autotune: its first step (the compilation) included, a trial is predicted "
                          "to take about 2m39s (10x compile=default's 15.0s here), more than the 1m40s left")
    assert afford.why_not(trials, {"compile": "default"}, left_s=100.0) is None
    assert "past the 1m00s compile limit" in afford.why_not(trials, {"compile": "max-autotune"}, None, 60.0)
    assert afford.why_not(trials, {"compile": "off"}, left_s=5.0).startswith("a trial is predicted to take about 10.0s")
    # before anything compiled here, the first compiled trial (the recipe's) is held back where what is left would
    # not hold its compile mode's prior: started on a hope, it would burn the search's time and teach nothing
    assert "more than the 20.0s left" in afford.why_not([BASE], {"compile": "default"}, left_s=20.0)
    assert afford.why_not([BASE], {"compile": "default"}, left_s=60.0) is None


def test_a_proposal_moves_to_the_most_expensive_mode_that_fits():
    compiled = trial(1, compile="default", duration=25.0, first=15.0)
    trials = [BASE, compiled]

    def fits(left):
        return lambda p: afford.why_not(trials, p, left) is None

    assert afford.cheaper(trials, {"compile": "max-autotune", "precision": "bf16"}, fits(40.0)) == {
        "compile": "reduce-overhead", "precision": "bf16"}  # 9 + 22.5 s fits in 40 s
    assert afford.cheaper(trials, {"compile": "max-autotune"}, fits(30.0)) == {"compile": "default"}
    assert afford.cheaper(trials, {"compile": "max-autotune"}, fits(12.0)) == {"compile": "off"}
    assert afford.cheaper(trials, {"compile": "default"}, fits(100.0)) is None  # it fits as it is
    assert afford.cheaper(trials, {"precision": "bf16"}, fits(1.0)) is None  # no compile mode to move
