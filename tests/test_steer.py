"""Steering a long study's sampler off measured configurations (autotune.tuning.phases.steer), and the search that uses
it past the default sampler's hand-over (autotune.tuning.phases.search.Search.steer); the Gaussian process is never
steered."""

from __future__ import annotations

import pytest

from autotune import knobs
from autotune.knobs import space
from autotune import result as R
from autotune.tuning import loop
from autotune.tuning.phases import Bench, Seeds, steer
from autotune.testing import studies as made_up

DIMS = {"precision": space.Dimension("precision", ("fp32", "bf16")),
        "batch_size": space.Dimension("batch_size", low=16, high=64, step=16)}


def test_moves_are_one_step_within_the_space():
    near = list(steer.moves({"precision": "fp32", "batch_size": 16}, DIMS))
    assert near == [{"precision": "bf16", "batch_size": 16}, {"precision": "fp32", "batch_size": 32}]
    assert list(steer.moves({"precision": "fp32", "batch_size": 40}, DIMS)) == [{"precision": "bf16", "batch_size": 40}]


def test_nearest_moves_a_measured_proposal_to_the_closest_configuration_not_measured():
    measured = {("fp32", 32), ("bf16", 32), ("fp32", 16), ("fp32", 48)}
    is_measured = lambda p: (p["precision"], p["batch_size"]) in measured  # noqa: E731
    # one step from (fp32, 32): bf16 32 (measured), 16 (measured), 48 (measured); two steps: bf16 16
    assert (steer.nearest({"precision": "fp32", "batch_size": 32}, DIMS, is_measured)
            == {"precision": "bf16", "batch_size": 16})
    assert steer.nearest({"precision": "bf16", "batch_size": 64}, DIMS, is_measured) is None  # not measured: kept
    assert steer.nearest({"precision": "fp32"}, DIMS, is_measured) is None  # a knob missing: kept
    assert steer.nearest({"precision": "fp32", "batch_size": 32}, DIMS, lambda p: True) is None  # all measured
    assert steer.nearest({"precision": "fp32", "batch_size": 32}, DIMS, is_measured, limit=2) is None  # looked at 2


CTX = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=2)
SMALL = space.parse({"search": {"precision": ["fp32", "bf16"], "batch_size": {"low": 16, "high": 128, "step": 16}}},
                    "small.toml", "small")  # 16 configurations


def _search(tmp_path, limit):
    """A Tuner over SMALL with the default sampler handing over to TPE past ``limit`` complete trials."""
    sampler = loop.make_sampler("gp", seed=0, n_startup_trials=2, gp_max_trials=limit)
    live = made_up.live_study(f"sqlite:///{tmp_path}/s.db", "s", SMALL, CTX, sampler=sampler)
    base = loop.base_config(CTX, SMALL.fixed, None)
    eff = space.effective(SMALL, CTX, base)

    def evaluate(config, dominators=(), margin=None):  # bigger and bf16 is faster: TPE keeps coming back to it
        speed = config["batch_size"] * (2.0 if config["precision"] == "bf16" else 1.0)
        return R.TrialResult(outcome=R.OK, samples_per_s=speed, samples_per_s_cv=0.01,
                             peak_memory_bytes=int(config["batch_size"] * 1e6), wall_s=0.01)

    return loop.Tuner(live, Seeds(eff, CTX, base), Bench(evaluate),
                   loop.Options(trials=14, race_rounds=0, floor_repeats=0)), live


def test_past_the_hand_over_tpe_is_steered_off_measured_configurations(tmp_path):
    """A long study (here past a hand-over at 4 complete trials) in a space of 16 configurations: TPE proposes the
    fast ones again and again; steered, no trial after the hand-over is a cache answer and the budget is reached."""
    tuner, live = _search(tmp_path, limit=4)
    summary = tuner.run()
    switch = live.sampler.switched_at
    assert switch is not None
    after = [t for t in live.trials() if t.number >= switch and t.role == "search"]
    assert after and not [t.number for t in after if t.duplicate_of is not None]
    assert summary.measured == 14


@pytest.mark.slow  # 14 s in a full run on a 2-core CPU
def test_the_gaussian_process_is_never_steered(tmp_path):
    """Under the hand-over the Gaussian process suggests exactly as it would without steering: never consulted."""
    tuner, live = _search(tmp_path, limit=50)
    asked: list = []
    steered = live.sampler.steer
    live.sampler.steer = lambda proposal: asked.append(proposal) or steered(proposal)
    tuner.run()
    assert live.sampler.switched_at is None and asked == []
