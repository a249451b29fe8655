"""The statistics of claims: pooled noise, paired ratios and their intervals, ties and the simpler choice."""

from __future__ import annotations

import math
import random

import pytest

from autotune import stats


def test_pooled_noise_recovers_the_spread_between_processes():
    rng = random.Random(0)
    groups = [[100 * k * math.exp(rng.gauss(0, 0.15)) for _ in range(6)] for k in (1, 2, 3, 4, 5)]
    noise = stats.pooled_noise(groups)
    assert noise.df == 25 and noise.sigma == pytest.approx(0.15, abs=0.04)
    assert "±" in noise.text() and noise.percent == pytest.approx(100 * math.expm1(noise.sigma))
    assert not stats.pooled_noise([[1.0], [2.0]]).known
    assert "not measured" in stats.pooled_noise([]).text()


def test_ratio_pairs_on_common_rounds_and_ignores_the_rest():
    noise = stats.Noise(0.1, 20)
    num = [("search-5", 300.0), ("r1", 150.0), ("r2", 160.0)]  # the search measurement is not in a common round
    ref = [("r1", 100.0), ("r2", 100.0), ("floor-1", 50.0)]
    r = stats.ratio(num, ref, noise)
    assert r.paired and r.processes == 2
    assert r.estimate == pytest.approx(math.sqrt(1.5 * 1.6))
    assert r.low < r.estimate < r.high and r.above_one()
    unpaired = stats.ratio([("a", 200.0)], [("b", 100.0), ("c", 100.0)], noise)
    assert not unpaired.paired and unpaired.estimate == pytest.approx(2.0)
    half = stats.t_quantile(20) * 0.1 * math.sqrt(1 + 1 / 2)
    assert math.log(unpaired.high) - math.log(unpaired.estimate) == pytest.approx(half)


def test_more_comparisons_widen_the_interval_and_unknown_noise_gives_none():
    noise = stats.Noise(0.1, 10)
    one = stats.ratio([("a", 120.0)], [("a", 100.0)], noise)
    five = stats.ratio([("a", 120.0)], [("a", 100.0)], noise, comparisons=5)
    assert five.low < one.low and five.high > one.high
    blind = stats.ratio([("a", 120.0)], [("a", 100.0)], stats.Noise(None))
    assert not blind.has_interval and blind.includes_one() and blind.text() == "1.20x"
    assert one.text() == f"1.20x ({one.low:.2f}-{one.high:.2f})"


def test_choose_prefers_the_simpler_of_tied_candidates_and_the_reference_when_nothing_separates():
    noise = stats.Noise(0.05, 30)
    rounds = [f"r{i}" for i in range(6)]
    ref = [(r, 100.0) for r in rounds]
    fast = [(r, 150.0 * (1.01 if i % 2 else 0.99)) for i, r in enumerate(rounds)]
    same = [(r, 148.0 * (1.01 if i % 2 else 0.99)) for i, r in enumerate(rounds)]
    choice = stats.choose({"a": fast, "b": same}, "0", ref, {"a": 4, "b": 1}, noise, 2)
    assert choice.significant and choice.leader == "a" and choice.winner == "b" and choice.simpler_than_leader
    flat = [(r, 101.0) for r in rounds]
    none = stats.choose({"a": flat}, "0", ref, {"a": 2}, stats.Noise(0.2, 30), 1)
    assert not none.significant and none.winner == "0"
