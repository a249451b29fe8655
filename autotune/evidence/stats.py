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

Two kinds of pairs, each with the noise that belongs to it:

- *between processes*: rounds whose measurements ran in separate processes, one after
  the other (the noise floor, the race's rounds for configurations that need a process
  of their own). Their noise is ``sigma`` above.
- *within one process*: configurations measured alternately in one process
  (:mod:`autotune.trial.paired`), where the process's own speed cancels in their ratio. The
  model: ``log y[a, k] = mu[a] + pi[k] + e`` for arm ``a`` in process ``k``; the residual
  spread is pooled over every such process of the study (``within_process_noise``, a
  two-way fit), and its ``sigma`` is that of one process's log-ratio of two arms
  (``sqrt(2)`` times the residual's). Measured here 0.03-0.05, against 0.14-0.23 between
  processes (benchmarks/paired_noise.py).

A race looks at its evidence after several rounds and stops when a claim separates; each
look is a chance to stop on a lucky round. So a claim the race stopped on is adjusted
for its planned looks too (``looks``: Bonferroni over comparisons x looks), which keeps
the chance that any reported interval misses at most 10% whenever the race stopped.
"""

from __future__ import annotations

import functools
import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

LEVEL = 0.90

#: (round id, samples/s): one process's measurement of one configuration.
Measurement = tuple[str, float]


@dataclass(frozen=True)
class Noise:
    """The spread of one configuration's throughput between processes, as a log standard deviation."""

    sigma: float | None
    df: int = 0
    within: bool = False  # the noise of a ratio within one process (within_process_noise), not between processes

    @property
    def known(self) -> bool:
        return self.sigma is not None and self.df > 0

    @property
    def percent(self) -> float | None:
        """The spread as a percentage of the throughput (``exp(sigma) - 1``)."""
        return 100.0 * math.expm1(self.sigma) if self.sigma is not None else None

    def text(self) -> str:
        what = "noise of a speed-up measured within one process" if self.within else "noise between processes"
        if not self.known:
            return f"{what} here: not measured yet"
        return f"{what} here: ±{self.percent:.{1 if self.within and self.percent < 10 else 0}f}%"

    def to_dict(self) -> dict[str, float | int | bool | None]:
        return {"sigma": self.sigma, "percent": self.percent, "df": self.df, "within_process": self.within}


def interval_label(speedup: Mapping[str, Any]) -> str:
    """`` (90% interval)`` after a speed-up's text (:meth:`Ratio.to_dict`), or nothing when it has no interval."""
    if speedup.get("low") is None or speedup.get("high") is None:
        return ""
    return f" ({int(round(100 * float(speedup.get('level') or LEVEL)))}% interval)"


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


def own_noise(values: Iterable[float]) -> Noise:
    """One configuration's own spread between processes: the standard deviation of its log throughputs, with
    ``n - 1`` degrees of freedom (unknown below two processes)."""
    return pooled_noise([list(values)])


#: Below this p-value the configurations' spreads are taken as unequal (:func:`unequal_spreads`): each then has its own.
UNEQUAL_LEVEL = 0.01


def unequal_spreads(groups: Iterable[Sequence[float]]) -> bool:
    """Whether configurations measured in several processes each spread unequally between processes (Bartlett's test
    on their log throughputs, p < :data:`UNEQUAL_LEVEL`): then one pooled noise would lend the steadiest one's spread to
    the others. Measured on an H200: the defaults of a GPU-bound step spread 1% between processes, a launch-bound
    compiled configuration of the same model 25%. Needs two configurations of two processes or more."""
    stats_ = [(len(logs) - 1, statistics.variance(logs)) for logs in
              ([math.log(x) for x in g if x and x > 0 and math.isfinite(x)] for g in groups) if len(logs) >= 2]
    stats_ = [(df, v) for df, v in stats_ if v > 0]
    if len(stats_) < 2:
        return False
    n_df = sum(df for df, _ in stats_)
    pooled = sum(df * v for df, v in stats_) / n_df
    k = len(stats_)
    statistic = (n_df * math.log(pooled) - sum(df * math.log(v) for df, v in stats_)) / (
        1.0 + (sum(1.0 / df for df, _ in stats_) - 1.0 / n_df) / (3.0 * (k - 1)))
    return _chi2_sf(statistic, k - 1) < UNEQUAL_LEVEL


def _chi2_sf(x: float, df: int) -> float:
    """The upper tail of the chi-squared distribution (Wilson-Hilferty: within 0.01 of the exact tail at these sizes;
    spares a read command importing scipy)."""
    if x <= 0:
        return 1.0
    z = ((x / df) ** (1.0 / 3.0) - (1.0 - 2.0 / (9.0 * df))) / math.sqrt(2.0 / (9.0 * df))
    return 1.0 - statistics.NormalDist().cdf(z)


def welch(numerator: Sequence[Measurement], reference: Sequence[Measurement], numerator_noise: Noise,
          reference_noise: Noise, comparisons: int = 1, level: float = LEVEL, looks: int = 1) -> Ratio:
    """``numerator / reference`` throughput when the two spread unequally between processes: the ratio of their
    geometric means, unpaired, with a t interval of half-width ``t * sqrt(s1^2/n + s2^2/m)`` on Welch-Satterthwaite's
    degrees of freedom (rounded down: the honest side), each side with its own noise. Without a known noise on
    either side, no interval."""
    num = [math.log(v) for _, v in numerator if v and v > 0]
    ref = [math.log(v) for _, v in reference if v and v > 0]
    if not num or not ref:
        raise ValueError("a ratio needs at least one measurement on each side")
    log_ratio = statistics.fmean(num) - statistics.fmean(ref)
    n, m = len(num), len(ref)
    if not (numerator_noise.known and reference_noise.known):
        return Ratio(math.exp(log_ratio), None, None, n, m, False, level, comparisons, looks)
    a = numerator_noise.sigma ** 2 / n  # type: ignore[operator]
    b = reference_noise.sigma ** 2 / m  # type: ignore[operator]
    if a + b <= 0:
        df = min(numerator_noise.df, reference_noise.df)
    else:
        df = int(max(1, math.floor((a + b) ** 2 / (a * a / numerator_noise.df + b * b / reference_noise.df))))
    half = t_quantile(df, level, comparisons * looks) * math.sqrt(a + b)
    return Ratio(math.exp(log_ratio), math.exp(log_ratio - half), math.exp(log_ratio + half), n, m, False, level,
                 comparisons, looks, df=df)


def paired(numerator: Sequence[Measurement], reference: Sequence[Measurement], level: float = LEVEL) -> Ratio:
    """``numerator / reference`` over the rounds that measured both, each in a process of its own, when their noises
    differ: the mean of the rounds' log-ratios, with a t interval from those log-ratios' own spread (``n - 1`` degrees
    of freedom; none from one round)."""
    num = {r: v for r, v in numerator if v and v > 0}
    ref = {r: v for r, v in reference if v and v > 0}
    diffs = [math.log(num[r]) - math.log(ref[r]) for r in num if r in ref]
    if not diffs:
        raise ValueError("a paired ratio needs rounds that measured both")
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return Ratio(math.exp(mean), None, None, 1, 1, True, level)
    half = t_quantile(len(diffs) - 1, level) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return Ratio(math.exp(mean), math.exp(mean - half), math.exp(mean + half), len(diffs), len(diffs), True, level,
                 df=len(diffs) - 1)


@functools.lru_cache(maxsize=4096)
def t_quantile(df: int, level: float = LEVEL, comparisons: int = 1) -> float:
    """Two-sided t quantile at ``level``, Bonferroni-adjusted for ``comparisons`` (cached: a view of a large study
    asks for the same few quantiles thousands of times).

    Degrees of freedom here are whole numbers (counts of measurements), for which Student's distribution has a
    closed form (:func:`_t_central`); the quantile is found by bisection to the last bit. It equals scipy's
    ``stats.t.ppf`` to 1e-9 (tests/test_stats.py), and spares every read command importing scipy (0.2-0.7 s of
    the 1 s a status should take)."""
    p = 1.0 - (1.0 - level) / (2.0 * max(1, comparisons))  # the upper tail's quantile
    target = 2.0 * p - 1.0  # P(|T| < t)
    low, high = 0.0, 1.0
    while _t_central(high, df) < target:
        high *= 2.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if mid in (low, high):
            break
        if _t_central(mid, df) < target:
            low = mid
        else:
            high = mid
    return 0.5 * (low + high)


def _t_central(t: float, df: int) -> float:
    """P(-t < T < t) for Student's t with ``df`` (a whole number) degrees of freedom: the finite sums of
    Abramowitz & Stegun 26.7.3 and 26.7.4 in theta = atan(t / sqrt(df))."""
    theta = math.atan(t / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    term, total = 1.0, 1.0
    if df % 2 == 0:  # sin(theta) (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ... up to cos^(df-2))
        for k in range(2, df, 2):
            term *= c2 * (k - 1) / k
            total += term
        return s * total
    if df == 1:
        return 2.0 * theta / math.pi
    # 2/pi (theta + sin(theta) cos(theta) (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ... up to cos^(df-3)))
    for k in range(3, df - 1, 2):
        term *= c2 * (k - 1) / k
        total += term
    return 2.0 / math.pi * (theta + s * math.cos(theta) * total)


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
    looks: int = 1  # a race's planned looks at its evidence (the interval is adjusted for them too)
    within: bool = False  # paired within one process (autotune.trial.paired), with that kind of pair's noise
    df: int = 0  # the degrees of freedom of the noise behind the interval

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
            "looks": self.looks,
            "within_process": self.within,
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
    looks: int = 1,
) -> Ratio:
    """``numerator / reference`` throughput, paired on common rounds when there are any (rounds of separate
    processes: ``noise`` is the noise between processes)."""
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
        log_ratio = (statistics.fmean(math.log(v) for v in num.values())
                     - statistics.fmean(math.log(v) for v in ref.values()))
        n, m = len(num), len(ref)
    if not noise.known:
        return Ratio(math.exp(log_ratio), None, None, n, m, bool(common), level, comparisons, looks)
    assert noise.sigma is not None
    half = t_quantile(noise.df, level, comparisons * looks) * noise.sigma * math.sqrt(1.0 / n + 1.0 / m)
    return Ratio(math.exp(log_ratio), math.exp(log_ratio - half), math.exp(log_ratio + half), n, m, bool(common), level,
                 comparisons, looks, df=noise.df)


def within_process_noise(blocks: Iterable[Mapping[str, float]]) -> Noise:
    """The noise of a speed-up measured within one process, from every process that measured several arms.

    ``blocks``: one mapping per process, arm key -> samples/s. Fits ``log y = arm + process``
    by least squares over all of them (unbalanced designs too) and pools the residuals: the
    returned ``sigma`` is the standard deviation of one process's log-ratio of two arms
    (``sqrt(2)`` times the residual's), with the residual degrees of freedom (observations
    less the rank of the fit). Unknown (df 0) until some pair of arms was measured together
    in at least two processes.
    """
    rows: list[tuple[str, int, float]] = []
    for k, block in enumerate(blocks):
        logs = {a: math.log(v) for a, v in block.items() if v and v > 0 and math.isfinite(v)}
        if len(logs) >= 2:
            rows.extend((a, k, y) for a, y in logs.items())
    if not rows:
        return Noise(None, 0, within=True)
    import numpy as np

    arms = sorted({a for a, _, _ in rows})
    procs = sorted({k for _, k, _ in rows})
    col = {a: i for i, a in enumerate(arms)}
    pcol = {k: len(arms) + i for i, k in enumerate(procs)}
    x = np.zeros((len(rows), len(arms) + len(procs)))
    y = np.array([v for _, _, v in rows])
    for r, (a, k, _) in enumerate(rows):
        x[r, col[a]] = 1.0
        x[r, pcol[k]] = 1.0
    beta, _, rank, _ = np.linalg.lstsq(x, y, rcond=None)
    df = len(rows) - int(rank)
    if df <= 0:
        return Noise(None, 0, within=True)
    rss = float(np.sum((y - x @ beta) ** 2))
    return Noise(math.sqrt(2.0 * rss / df), df, within=True)


def ratio_within(
    numerator: Sequence[Measurement],
    reference: Sequence[Measurement],
    noise: Noise,
    comparisons: int = 1,
    level: float = LEVEL,
    looks: int = 1,
    between: Noise | None = None,
) -> Ratio:
    """``numerator / reference`` from the processes that measured both alternately (their common rounds), with
    the noise of a within-process ratio (:func:`within_process_noise`): the mean log-ratio, and a t interval
    of half-width ``t * sigma / sqrt(processes)``.

    ``between``: the noise between processes. Inside one process the process's own speed cancels, so a
    within-process ratio is no noisier than a ratio of two separate processes (``sqrt(2)`` times ``between``);
    when the within-process noise rests on few processes (two give it 2 degrees of freedom, whose t quantile
    alone is several times a large sample's), that bound gives the narrower interval, and it is taken. Both
    intervals are centred on the same estimate, so the narrower is their intersection."""
    num = {r: v for r, v in numerator if v and v > 0}
    ref = {r: v for r, v in reference if v and v > 0}
    common = [r for r in num if r in ref]
    if not common:
        raise ValueError("a within-process ratio needs processes that measured both")
    log_ratio = statistics.fmean(math.log(num[r]) - math.log(ref[r]) for r in common)
    n = len(common)
    if not noise.known:
        return Ratio(math.exp(log_ratio), None, None, n, n, True, level, comparisons, looks, within=True)
    assert noise.sigma is not None
    half = t_quantile(noise.df, level, comparisons * looks) * noise.sigma / math.sqrt(n)
    df = noise.df
    if between is not None and between.known and between.sigma is not None:
        # two intervals, each at half the miss rate (Bonferroni), so that their intersection keeps the level
        own = t_quantile(noise.df, level, 2 * comparisons * looks) * noise.sigma / math.sqrt(n)
        bound = t_quantile(between.df, level, 2 * comparisons * looks) * math.sqrt(2.0) * between.sigma / math.sqrt(n)
        if min(own, bound) < half:
            half, df = min(own, bound), (noise.df if own <= bound else between.df)
    return Ratio(math.exp(log_ratio), math.exp(log_ratio - half), math.exp(log_ratio + half), n, n, True, level,
                 comparisons, looks, within=True, df=df)


def combined(numerator: Ratio, reference: Ratio) -> Ratio:
    """``numerator / reference`` for two ratios to a common third with independent errors (each against the
    defaults, measured in different processes): the estimates divide, the log half-widths add in quadrature."""
    estimate = numerator.estimate / reference.estimate
    common = dict(level=numerator.level, comparisons=max(numerator.comparisons, reference.comparisons),
                  looks=max(numerator.looks, reference.looks))
    if not (numerator.has_interval and reference.has_interval):
        return Ratio(estimate, None, None, numerator.processes, reference.processes, False, **common)
    half_n = (math.log(numerator.high) - math.log(numerator.low)) / 2  # type: ignore[arg-type, operator]
    half_r = (math.log(reference.high) - math.log(reference.low)) / 2  # type: ignore[arg-type, operator]
    half = math.hypot(half_n, half_r)
    return Ratio(estimate, estimate * math.exp(-half), estimate * math.exp(half), numerator.processes,
                 reference.processes, False, **common)


@dataclass(frozen=True)
class Choice:
    """The outcome of comparing candidates through the noise."""

    winner: str  # a candidate key, or the reference's when nothing beats it
    leader: str  # the fastest point estimate
    tied: tuple[str, ...]  # candidates the evidence does not separate from the leader
    significant: bool  # the winner beats the reference beyond the noise
    simpler_than_leader: bool  # the winner was preferred over a faster-looking leader for changing fewer knobs


def choose(
    keys: Sequence[str],
    reference_key: str,
    speed: Callable[[str], Ratio],
    versus: Callable[[str, str], Ratio],
    changes: Mapping[str, int],
) -> Choice:
    """The configuration to recommend among ``keys``.

    ``speed(k)`` is k's speed-up over the reference (the claim: adjusted for the comparisons
    and looks); ``versus(k, leader)`` k's plain 90% ratio to the leader (the race's own rule
    for staying in the race: not a claim, so not adjusted). The leader is the fastest
    estimate; candidates whose ratio to the leader includes 1 are tied with it; among the
    tied ones that beat the reference beyond the noise, the one that changes the fewest
    knobs wins (then the faster). When the leader does not beat the reference beyond the
    noise, the reference wins: "no gain beyond the noise".
    """
    if not keys:
        return Choice(reference_key, reference_key, (), False, False)
    fast = {k: speed(k) for k in keys}
    leader = max(keys, key=lambda k: (fast[k].estimate, -changes.get(k, 0)))
    tied = tuple(k for k in keys if k == leader or not versus(k, leader).below_one())
    if not fast[leader].above_one():
        return Choice(reference_key, leader, tied, False, False)
    good = [k for k in tied if fast[k].above_one()]
    winner = min(good, key=lambda k: (changes.get(k, 0), -fast[k].estimate))
    return Choice(winner, leader, tied, True, winner != leader and changes.get(winner, 0) < changes.get(leader, 0))
