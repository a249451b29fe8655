"""The model of the search's measurements (autotune/evidence/model.py), on made-up truths with seeded noise.

Each configuration is measured once at ``100 * truth * exp(N(0, sigma))`` samples/s, the baseline (the reference of
every knob) in three processes; the truth is either additive in log (one effect per knob value, what the model
assumes) or has a strong interaction (what its residual must give away)."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from autotune import stats
from autotune.evidence import model as M
from autotune.evidence.configs import Config

KNOBS = {"precision": ["fp32", "bf16"], "optimizer_impl": ["default", "foreach", "fused"], "num_workers": [0, 1],
         "threads": [2, 1]}  # the first value of each: the reference (the baseline's)
EFFECTS = {("precision", "bf16"): math.log(1.5), ("optimizer_impl", "foreach"): math.log(1.1),
           ("optimizer_impl", "fused"): math.log(0.9), ("num_workers", 1): 0.0, ("threads", 1): math.log(1.05)}
ALL = [dict(zip(KNOBS, values)) for values in itertools.product(*KNOBS.values())]


def changes(config: dict) -> dict:
    return {k: v for k, v in config.items() if v != KNOBS[k][0]}


def additive(config: dict) -> float:
    return math.exp(sum(EFFECTS[(k, v)] for k, v in changes(config).items()))


def interacting(config: dict) -> float:
    """2x only with bf16 and a worker together; nothing otherwise."""
    return 2.0 if config["precision"] == "bf16" and config["num_workers"] == 1 else 1.0


def measured(truth, seed: int, sigma: float, n: int = 16) -> list[Config]:
    """The baseline (three processes) and ``n`` other configurations drawn without replacement, measured once."""
    rng = random.Random(seed)
    base, others = ALL[0], rng.sample(ALL[1:], n)

    def rate(config: dict) -> float:
        return 100.0 * truth(config) * math.exp(rng.gauss(0.0, sigma))

    out = [Config(0, "baseline", dict(base), 10**8, True, ("search-0", rate(base)),
                  repeats=[(f"floor-{k}", rate(base)) for k in (1, 2)])]
    for i, config in enumerate(others, start=1):
        first = (f"search-{i}", rate(config))
        out.append(Config(i, "search", dict(config), 10**8, True, first, changes=changes(config)))
    return out


def test_each_knobs_effect_is_recovered_within_its_90_percent_interval_at_the_stated_rate():
    covered = total = 0
    sigmas = []
    for seed in range(200):
        fit = M.fit(measured(additive, seed, 0.15))
        assert fit is not None
        t = stats.t_quantile(int(fit.df), 0.90)
        for (knob, value), truth in EFFECTS.items():
            estimate, se = fit.effect(knob, value), fit.effect_se(knob, value, fit.residual_sigma)
            if estimate is None:  # the value was not drawn in this seed
                continue
            total += 1
            covered += abs(estimate - truth) <= t * se
        sigmas.append(fit.residual_sigma)
    assert total >= 900
    assert 0.86 <= covered / total <= 0.94, f"90% intervals covered {covered} of {total}"
    assert abs(statistics.median(sigmas) / 0.15 - 1) < 0.1  # the residual estimates the noise when the model holds


def test_predictions_pool_the_configurations_that_share_a_knob_value():
    """A configuration's prediction has a far smaller error than its single measurement, and it is unbiased."""
    errors, ses = [], []
    for seed in range(100):
        fit = M.fit(measured(additive, seed, 0.15))
        assert fit is not None
        for c in measured(additive, seed, 0.15)[1:]:
            errors.append(fit.predicted(c.number) - math.log(100.0 * additive(c.config)))
            ses.append(fit.se(c.number, 0.15))
    assert abs(statistics.fmean(errors)) < 0.01
    assert statistics.median(ses) < 0.15 / 1.5
    assert 0.8 < statistics.pstdev(errors) / statistics.fmean(ses) < 1.2


def test_a_strong_interaction_is_detected_as_a_poor_fit_and_an_additive_truth_is_not():
    """±3% between processes; the noise floor's sigma at the truth, with the two degrees of freedom of three
    processes."""

    def fits(truth, seed: int) -> bool:
        fit = M.fit(measured(truth, seed, 0.03))
        assert fit is not None
        return fit.fits(0.03, 2)

    poor = [not fits(interacting, seed) for seed in range(100)]
    good = [fits(additive, seed) for seed in range(100)]
    assert sum(poor) >= 95, f"the interaction was seen in only {sum(poor)} of 100 seeds"
    assert sum(good) >= 95, f"the additive truth fitted in only {sum(good)} of 100 seeds"


def test_without_a_residual_to_check_there_is_no_model_and_a_ridge_keeps_a_collinear_design_defined():
    assert M.fit(measured(additive, 0, 0.15, n=4)) is None  # 5 rows, up to 6 coefficients: nothing left to check
    configs = measured(additive, 1, 0.15, n=12)
    for c in configs:  # threads always changed with the workers: their columns are one column twice
        if c.config["num_workers"] == 1:
            c.config["threads"] = 1
        else:
            c.config["threads"] = 2
        c.changes = changes(c.config)
    fit = M.fit(configs)
    assert fit is not None and fit.df == pytest.approx(len(configs) - 5, abs=1e-3)
    assert all(math.isfinite(fit.predicted(c.number)) and math.isfinite(fit.se(c.number, 0.15)) for c in configs)
    both = fit.effect("num_workers", 1) + fit.effect("threads", 1)  # type: ignore[operator]
    assert abs(both - EFFECTS[("threads", 1)]) < 0.3  # only their sum is known, and it is estimated
