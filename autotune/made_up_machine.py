"""Made-up machines: measurements of known truth with the noise real machines show, for the statistics' tests and the
race-cost benchmark (as :mod:`autotune.made_up` makes studies). Nothing in the product imports it.

Each factory returns what a :class:`autotune.phases.Bench` measures with: ``truth(config)`` is the configuration's
true speed-up over the defaults; a measurement is ``100 * truth * noise`` samples/s. The noise:

- :func:`lognormal`: independent between processes, ``exp(N(0, sigma))`` (what the statistics assume);
- :func:`drifting`: the same, on a machine whose speed wanders (a random walk of ``drift`` per process);
- :func:`heavy_tailed`: a t distribution of 3 degrees of freedom at the lognormal's scale;
- :func:`second_is_slower`: the second process of each round runs ``order`` times as fast;
- :func:`shared`: processes that measure several configurations alternately (:mod:`autotune.paired`): the
  process's factor, each arm's own factor beside it (``arm``, which does not cancel) and the within-process noise.

The same seed gives the same measurements, so a statistic is checked over seeds against the truth it should find.
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable, Mapping, Sequence

from autotune import knobs
from autotune import result as R

Truth = Callable[[Mapping[str, Any]], float]

NOISE = 0.15  # between processes: the 2-core machines' 10-25% (DESIGN.md)
WITHIN = 0.03  # each arm's own noise inside one process
DRIFT = 0.02  # a random walk of 2% per process (about 9% over 20 processes)
ORDER = 0.9  # the second process of a round runs 10% slower (what the first left behind: caches, clocks)


def result(rate: float) -> R.TrialResult:
    """A successful measurement of ``rate`` samples/s."""
    return R.TrialResult(outcome=R.OK, samples_per_s=rate, samples_per_s_cv=0.01, peak_memory_bytes=10**8, wall_s=0.01)


def lognormal(truth: Truth, seed: int, sigma: float = NOISE, calls: list | None = None, offset: int = 0):
    """Independent lognormal noise between processes (``calls``: each measured configuration is appended)."""
    rng = random.Random(offset + seed)

    def evaluate(config, dominators=(), margin=None):
        if calls is not None:
            calls.append(dict(config))
        return result(100.0 * truth(config) * math.exp(rng.gauss(0.0, sigma)))

    return evaluate


def drifting(truth: Truth, seed: int, sigma: float = NOISE, drift: float = DRIFT):
    """Lognormal noise on a machine whose speed drifts slowly: measurements close in time are alike."""
    rng = random.Random(20_000 + seed)
    level = [0.0]

    def evaluate(config, dominators=(), margin=None):
        level[0] += rng.gauss(0.0, drift)
        return result(100.0 * truth(config) * math.exp(level[0] + rng.gauss(0.0, sigma)))

    return evaluate


def heavy_tailed(truth: Truth, seed: int, sigma: float = NOISE):
    """Now and then a process several times the usual spread off: t of 3 degrees of freedom at scale ``sigma``."""
    rng = random.Random(30_000 + seed)

    def evaluate(config, dominators=(), margin=None):
        t3 = rng.gauss(0.0, 1.0) / math.sqrt(rng.gammavariate(1.5, 2.0) / 3)  # chi-squared of 3 degrees: gamma(1.5, 2)
        return result(100.0 * truth(config) * math.exp(sigma * t3))

    return evaluate


def second_is_slower(truth: Truth, seed: int, context: knobs.Context, sigma: float = NOISE, order: float = ORDER):
    """Lognormal noise, and the second process of each round runs ``order`` times as fast. A round is a run of
    measurements of distinct configurations: one of a configuration already measured in it begins the next."""
    rng = random.Random(40_000 + seed)
    this_round: list[str] = []

    def evaluate(config, dominators=(), margin=None):
        key = knobs.resolve(config, context).key()
        if key in this_round:
            this_round.clear()
        this_round.append(key)
        factor = order if len(this_round) == 2 else 1.0
        return result(100.0 * truth(config) * factor * math.exp(rng.gauss(0.0, sigma)))

    return evaluate


def shared(truth: Truth, seed: int, sigma: float = NOISE, arm: float = 0.0, within: float = WITHIN,
           calls: list | None = None, offset: int = 10_000):
    """Processes that measure configurations alternately: the process's factor (``sigma``), each arm's own
    (``arm``: 0 cancels exactly) and the within-process noise of each arm."""
    rng = random.Random(offset + seed)

    def together(configs: Sequence[Mapping[str, Any]]) -> R.PairedResult:
        if calls is not None:
            calls.append([dict(c) for c in configs])
        process = rng.gauss(0.0, sigma)
        arms = []
        for c in configs:
            own = rng.gauss(0.0, arm) if arm else 0.0
            arms.append({"config": dict(c), "outcome": R.OK,
                         "samples_per_s": 100.0 * truth(c) * math.exp(process + own + rng.gauss(0.0, within))})
        return R.PairedResult(outcome=R.OK, arms=arms, wall_s=0.01)

    return together
