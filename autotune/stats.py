"""The statistics behind every speed claim: noise between processes, speed-up intervals, ties.

Pure functions over throughputs (samples/s), with no Optuna and no storage, so they
are tested against fakes of known truth (tests/test_stats.py, tests/test_race.py).

The model: one process measuring configuration ``c`` sees ``log y = mu_c + e`` with
``e ~ N(0, sigma^2)``; ``sigma`` is the machine's *noise between processes* (10-25%
on the 2-core CI machines, where windows inside one process agree within 3%: the
spread inside a process says nothing about the claim). ``sigma`` is pooled from
every configuration measured in more than one process (``pooled_noise``).

Measurements are labelled with the *round* they were taken in. A speed-up is the
ratio of two configurations' geometric means, paired on the rounds where both were
measured (the race measures the baseline in every round, interleaved with the
candidates), else taken over all their measurements. Its interval is a t interval
on the log ratio, with ``sigma``'s degrees of freedom, at ``LEVEL`` (90%), and
Bonferroni-adjusted when several configurations are compared at once
(``comparisons``), so the chance that *any* reported interval of a race misses
is at most 10%. Using the pooled ``sigma`` for paired rounds is conservative: pairing
can only remove variance.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

LEVEL = 0.90

#: (round id, samples/s): one process's measurement of one configuration.
Measurement = tuple[str, float]


@dataclass(frozen=True)
class Noise:
    """The spread of one configuration's throughput between processes, as a log standard deviation."""

    sigma: float | None
    df: int = 0

    @property
    def known(self) -> bool:
        return self.sigma is not None and self.df > 0

    @property
    def percent(self) -> float | None:
        """The spread as a percentage of the throughput (``exp(sigma) - 1``)."""
        return 100.0 * math.expm1(self.sigma) if self.sigma is not None else None

    def text(self) -> str:
        if not self.known:
            return "noise between processes here: not measured yet"
        return f"noise between processes here: ±{self.percent:.0f}%"

    def to_dict(self) -> dict[str, float | int | None]:
        return {"sigma": self.sigma, "percent": self.percent, "df": self.df}


def pooled_noise(groups: Iterable[Sequence[float]]) -> Noise:
    """Pooled within-configuration log standard deviation over groups of repeated measurements."""
    ss = 0.0
    df = 0
    for group in groups:
        logs = [math.log(x) for x in group if x and x > 0 and math.isfinite(x)]
        if len(logs) < 2:
            continue
        mean = statistics.fmean(logs)
        ss += sum((v - mean) ** 2 for v in logs)
        df += len(logs) - 1
    return Noise(math.sqrt(ss / df) if df else None, df)


@functools.lru_cache(maxsize=4096)
def t_quantile(df: int, level: float = LEVEL, comparisons: int = 1) -> float:
    """Two-sided t quantile at ``level``, Bonferroni-adjusted for ``comparisons`` (cached: a view of a large study
    asks for the same few quantiles thousands of times, and scipy takes ~0.1 ms each)."""
    from scipy.stats import t

    return float(t.ppf(1.0 - (1.0 - level) / (2.0 * max(1, comparisons)), df))


@dataclass(frozen=True)
class Ratio:
    """A speed-up (or any throughput ratio) with its interval and what stands behind it."""

    estimate: float
    low: float | None = None
    high: float | None = None
    processes: int = 1  # measurements behind the numerator
    reference_processes: int = 1  # ... and behind the denominator
    paired: bool = False
    level: float = LEVEL
    comparisons: int = 1

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    def above_one(self) -> bool:
        """The numerator is faster beyond the noise."""
        return self.low is not None and self.low > 1.0

    def below_one(self) -> bool:
        return self.high is not None and self.high < 1.0

    def includes_one(self) -> bool:
        """The evidence does not separate the two (also when the noise is unknown)."""
        return not (self.above_one() or self.below_one())

    def text(self) -> str:
        """``1.05x (0.93-1.18)``; the interval is left out when the noise is unknown."""
        if not self.has_interval:
            return f"{self.estimate:.2f}x"
        return f"{self.estimate:.2f}x ({self.low:.2f}-{self.high:.2f})"

    def to_dict(self) -> dict[str, float | int | bool | None]:
        return {
            "estimate": self.estimate,
            "low": self.low,
            "high": self.high,
            "level": self.level,
            "comparisons": self.comparisons,
            "processes": self.processes,
            "baseline_processes": self.reference_processes,
            "paired": self.paired,
            "significant": self.above_one(),
            "text": self.text(),
        }


def geomean(values: Iterable[float]) -> float:
    logs = [math.log(v) for v in values if v and v > 0]
    return math.exp(statistics.fmean(logs)) if logs else float("nan")


def ratio(
    numerator: Sequence[Measurement],
    reference: Sequence[Measurement],
    noise: Noise,
    comparisons: int = 1,
    level: float = LEVEL,
) -> Ratio:
    """``numerator / reference`` throughput, paired on common rounds when there are any."""
    num = {r: v for r, v in numerator if v and v > 0}
    ref = {r: v for r, v in reference if v and v > 0}
    if not num or not ref:
        raise ValueError("a ratio needs at least one measurement on each side")
    common = [r for r in num if r in ref]
    if common:
        diffs = [math.log(num[r]) - math.log(ref[r]) for r in common]
        log_ratio = statistics.fmean(diffs)
        n, m = len(common), len(common)
    else:
        log_ratio = statistics.fmean(math.log(v) for v in num.values()) - statistics.fmean(math.log(v) for v in ref.values())
        n, m = len(num), len(ref)
    if not noise.known:
        return Ratio(math.exp(log_ratio), None, None, n, m, bool(common), level, comparisons)
    assert noise.sigma is not None
    half = t_quantile(noise.df, level, comparisons) * noise.sigma * math.sqrt(1.0 / n + 1.0 / m)
    return Ratio(math.exp(log_ratio), math.exp(log_ratio - half), math.exp(log_ratio + half), n, m, bool(common), level, comparisons)


@dataclass(frozen=True)
class Choice:
    """The outcome of comparing candidates through the noise."""

    winner: str  # a candidate key, or the reference's when nothing beats it
    leader: str  # the fastest point estimate
    tied: tuple[str, ...]  # candidates the evidence does not separate from the leader
    significant: bool  # the winner beats the reference beyond the noise
    simpler_than_leader: bool  # the winner was preferred over a faster-looking leader for changing fewer knobs


def choose(
    candidates: Mapping[str, Sequence[Measurement]],
    reference_key: str,
    reference: Sequence[Measurement],
    changes: Mapping[str, int],
    noise: Noise,
    comparisons: int = 1,
) -> Choice:
    """The configuration to recommend.

    The leader is the fastest estimate. Candidates whose plain 90% ratio to the leader
    includes 1 are tied with it (the race's own rule for staying in the race: not a
    claim, so not adjusted); among the tied ones that beat the reference beyond the noise
    (a claim, adjusted for ``comparisons``),
    the one that changes the fewest knobs wins (then the faster). When the leader does
    not beat the reference beyond the noise, the reference wins: "no gain beyond the noise".
    """
    speed = {k: ratio(v, reference, noise, comparisons) for k, v in candidates.items()}
    if not speed:
        return Choice(reference_key, reference_key, (), False, False)
    leader = max(speed, key=lambda k: (speed[k].estimate, -changes.get(k, 0)))
    tied = tuple(
        k for k in speed if k == leader or not ratio(candidates[k], candidates[leader], noise, 1).below_one()
    )
    if not speed[leader].above_one():
        return Choice(reference_key, leader, tied, False, False)
    good = [k for k in tied if speed[k].above_one()]
    winner = min(good, key=lambda k: (changes.get(k, 0), -speed[k].estimate))
    return Choice(winner, leader, tied, True, winner != leader and changes.get(winner, 0) < changes.get(leader, 0))
