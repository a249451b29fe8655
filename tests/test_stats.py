"""The statistics of claims: pooled noise, paired ratios and their intervals, ties and the simpler choice."""

from __future__ import annotations

import math
import random

import pytest

from autotune.evidence import stats


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
    runs = {"a": fast, "b": same}
    choice = stats.choose(["a", "b"], "0", lambda k: stats.ratio(runs[k], ref, noise, 2),
                          lambda k, lead: stats.ratio(runs[k], runs[lead], noise), {"a": 4, "b": 1})
    assert choice.significant and choice.leader == "a" and choice.winner == "b" and choice.simpler_than_leader
    flat = [(r, 101.0) for r in rounds]
    none = stats.choose(["a"], "0", lambda k: stats.ratio(flat, ref, stats.Noise(0.2, 30)),
                        lambda k, lead: stats.ratio(flat, flat, stats.Noise(0.2, 30)), {"a": 2})
    assert not none.significant and none.winner == "0"


def _processes(truth: dict[str, float], n: int, between: float, within: float, seed: int) -> list[dict[str, float]]:
    """``n`` processes each measuring every arm: a process factor shared by its arms (``between``), and each
    arm's own window noise (``within``), lognormal."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        process = math.exp(rng.gauss(0, between))
        out.append({a: 100 * t * process * math.exp(rng.gauss(0, within)) for a, t in truth.items()})
    return out


def test_within_process_noise_sees_the_arms_noise_not_the_process_factor():
    # 20% between processes, 3% per arm: one process's log-ratio of two arms has sd sqrt(2) * 0.03
    blocks = _processes({"base": 1.0, "a": 1.3, "b": 0.9}, 12, 0.20, 0.03, seed=1)
    noise = stats.within_process_noise(blocks)
    assert noise.df == 12 * 3 - (3 + 12 - 1)  # observations less the fit's rank
    assert noise.sigma == pytest.approx(math.sqrt(2) * 0.03, rel=0.35)
    # unbalanced: a process that lost an arm still counts what it has
    blocks[0].pop("b")
    assert stats.within_process_noise(blocks).df == noise.df - 1
    assert not stats.within_process_noise([{"base": 100.0, "a": 120.0}]).known  # one process: no spread to see
    assert not stats.within_process_noise([]).known


def test_a_within_process_ratio_covers_the_truth_with_the_width_of_its_own_noise():
    covered = 0
    widths = []
    for seed in range(40):
        blocks = _processes({"base": 1.0, "a": 1.25}, 3, 0.20, 0.03, seed)
        noise = stats.within_process_noise(blocks)
        rounds = {arm: [(f"p{k}", b[arm]) for k, b in enumerate(blocks)] for arm in ("base", "a")}
        r = stats.ratio_within(rounds["a"], rounds["base"], noise)
        assert r.within and r.paired and r.processes == 3
        covered += r.low <= 1.25 <= r.high
        widths.append(math.log(r.high / r.low))
        apart = stats.ratio([("s1", blocks[0]["a"])], [("s2", blocks[1]["base"]), ("s3", blocks[2]["base"])],
                            stats.Noise(0.20, 20))
        assert math.log(apart.high / apart.low) > 2 * widths[-1]  # the same processes compared apart: far wider
    assert covered >= 32  # a 90% interval: 36 of 40 expected
    with pytest.raises(ValueError):
        stats.ratio_within([("p1", 1.0)], [("p2", 1.0)], stats.Noise(0.05, 4))


def test_looks_widen_an_interval_as_comparisons_do():
    noise = stats.Noise(0.1, 10)
    once = stats.ratio([("a", 120.0)], [("a", 100.0)], noise, comparisons=2)
    thrice = stats.ratio([("a", 120.0)], [("a", 100.0)], noise, comparisons=2, looks=3)
    six = stats.ratio([("a", 120.0)], [("a", 100.0)], noise, comparisons=6)
    assert thrice.low < once.low and thrice.high > once.high
    assert (thrice.low, thrice.high) == pytest.approx((six.low, six.high))
    assert thrice.to_dict()["looks"] == 3


def test_combined_ratios_divide_and_add_their_errors_in_quadrature():
    a = stats.Ratio(1.5, 1.5 / math.exp(0.3), 1.5 * math.exp(0.3))
    b = stats.Ratio(1.2, 1.2 / math.exp(0.4), 1.2 * math.exp(0.4))
    c = stats.combined(a, b)
    assert c.estimate == pytest.approx(1.25)
    assert math.log(c.high / c.estimate) == pytest.approx(0.5)
    assert not stats.combined(a, stats.Ratio(1.2)).has_interval


def test_the_t_quantile_is_scipys_to_the_last_digits():
    """The closed-form quantile for whole degrees of freedom equals scipy.stats.t.ppf, from 1 to 5,000 degrees of
    freedom, at every level and adjustment a view asks for."""
    from scipy.stats import t

    for df in [*range(1, 120), 250, 1000, 5000]:
        for level in (0.5, 0.9, 0.95, 0.99):
            for comparisons in (1, 3, 12, 40):
                expected = float(t.ppf(1 - (1 - level) / (2 * comparisons), df))
                assert (stats.t_quantile(df, level, comparisons)
                        == pytest.approx(expected, rel=1e-9)), (df, level, comparisons)


def test_a_within_process_ratio_on_few_processes_takes_the_bound_of_the_noise_between_processes():
    """Two shared processes give the within-process noise 2 degrees of freedom; the noise between processes, known
    from many, bounds it (the process's factor cancels inside one process): the narrower interval is taken, and it
    still covers the true ratio of seeded fakes 90% of the time (at least 88% of 1000: the sampling error of a
    90% rate over 1000 is 1%; the within-process interval alone covers 89.8-90.2% of 4000 in three seeds)."""
    rng = random.Random(3)
    truth, within_sd, between_sd, trials = 1.3, 0.04, 0.04, 1000  # within ratio sd at its bound: sqrt(2) * 0.04 > 0.04
    covered = narrowed = 0
    for _ in range(trials):
        rounds = [f"p{k}" for k in range(2)]
        base = [(r, 100.0 * math.exp(rng.gauss(0, between_sd))) for r in rounds]  # the process's own speed
        num = [(r, v * truth * math.exp(rng.gauss(0, within_sd))) for r, v in base]
        # the noises as the study estimates them: within from these 2 processes (2 df), between from 20 degrees
        within = stats.Noise(within_sd * math.sqrt(rng.gammavariate(1.0, 2.0) / 2), 2, within=True)
        known = stats.Noise(between_sd * math.sqrt(rng.gammavariate(10.0, 2.0) / 20), 20)
        alone = stats.ratio_within(num, base, within)
        both = stats.ratio_within(num, base, within, between=known)
        assert both.estimate == alone.estimate and both.high / both.low <= alone.high / alone.low
        narrowed += both.high / both.low < alone.high / alone.low
        covered += both.low <= truth <= both.high
    assert narrowed > trials / 3  # the bound narrows about half of them (2 degrees of freedom come out small, or large)
    assert covered >= 0.88 * trials, covered
