"""A model of the search's own measurements: log-throughput as one additive effect per knob value.

Why: under ±15% noise between processes, one measurement of a configuration separates it from
little, so the race (:mod:`autotune.phases.race`) used to start with every configuration whose
interval overlapped the fastest's, and re-measure them round after round. But the search measured
many configurations that share knob values: what bf16 buys is seen in every bf16 configuration.
Fitted on every successful configuration, ``log(samples/s) = intercept + sum of the effects of
the knob values it changes`` (the baseline's value of each knob the reference level) pools them,
and predicts each measured configuration with a standard error far below a single measurement's.

Its residual is the check: where the knobs interact in ways one effect per value cannot say, the
residual between processes comes out larger than the noise floor's beyond chance (:meth:`Fit.fits`),
and the model must not be used. It is meant to choose what the race re-measures, never a figure or
a claim; nothing uses it yet. Choosing the race's candidates with it (issue 26) did not pay without
losing coverage on the made-up machines: keeping only its leader, the simplest configuration it
could not separate from it and the fastest by its own measurement cut the extra processes per search
trial by a fifth to a half, but 8 of tests/test_race.py's promises broke (all equal: "no gain" in 15 of
20 seeds, where 18 are promised; the 1.5x configuration claimed and covered in 14 and 16 of 20 under
drifting noise and arms apart; the tests of resuming, the heap, what each knob bought and the
indifference zone failed too),
and only leaving out of today's candidates those it puts clearly below its leader saved nothing. A
floor of three processes (two degrees of freedom) also leaves the fit check weak: it sees a residual
only over about 4.4 times the floor's sigma (F at 95% with 2 degrees of freedom below).

Least squares weighted by each configuration's processes (its figure is their geometric mean);
when the columns outnumber the rows or are collinear, a small ridge penalty (not on the
intercept) keeps the fit defined, and the residual degrees of freedom are then ``n - trace(H)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from autotune.evidence.configs import Config

RIDGE = 1e-6  # the penalty when the design is rank-deficient, relative to the mean diagonal of X'WX
MIN_DF = 2.0  # residual degrees of freedom below which the fit cannot be checked: no model
FIT_LEVEL = 0.95  # a residual larger than the noise floor's beyond this level is a poor fit (interactions it misses)


@dataclass(frozen=True)
class Fit:
    """The fitted model: each configuration's predicted log-throughput and each knob value's effect.

    ``residual_sigma``: the residual standard deviation of one process (rows weighted by their processes),
    with ``df`` degrees of freedom; ``columns``: (knob, value) for each effect, in the design's order."""

    numbers: tuple[int, ...]
    columns: tuple[tuple[str, Any], ...]
    beta: Any  # np.ndarray: the intercept, then one effect per column
    cov: Any  # np.ndarray: the covariance of beta for a sigma of 1 (the sandwich, with the ridge)
    design: Any  # np.ndarray: one row per configuration (of numbers)
    observed: Any  # np.ndarray: log(samples/s) of each row
    weights: Any  # np.ndarray: processes behind each row
    leverage: Any  # np.ndarray: the hat matrix's diagonal
    residual_sigma: float
    df: float
    index: dict[int, int] = field(default_factory=dict, repr=False, compare=False)  # number -> row

    def __post_init__(self) -> None:
        self.index.update((n, i) for i, n in enumerate(self.numbers))

    def _row(self, number: int) -> Any:
        return self.design[self.index[number]]

    def predicted(self, number: int) -> float:
        """The model's log(samples/s) of a configuration it was fitted on."""
        return float(self._row(number) @ self.beta)

    def se(self, number: int, sigma: float) -> float:
        """The standard error of :meth:`predicted`, at a noise of ``sigma`` per process."""
        x = self._row(number)
        return sigma * math.sqrt(max(0.0, float(x @ self.cov @ x)))

    def se_difference(self, a: int, b: int, sigma: float) -> float:
        """The standard error of ``predicted(a) - predicted(b)`` (the effects they share cancel)."""
        x = self._row(a) - self._row(b)
        return sigma * math.sqrt(max(0.0, float(x @ self.cov @ x)))

    def standardized_residual(self, number: int, sigma: float) -> float:
        """How far a configuration's own figure lies above its prediction, in its residual's standard errors."""
        i = self.index[number]
        r = float(self.observed[i] - self.design[i] @ self.beta)
        spread = sigma * math.sqrt(max(1e-12, (1.0 - float(self.leverage[i])) / float(self.weights[i])))
        return r / spread

    def effect(self, knob: str, value: Any) -> float | None:
        """The log-effect of setting ``knob`` to ``value`` instead of the reference (None: never measured)."""
        for j, (k, v) in enumerate(self.columns):
            if k == knob and v == value:
                return float(self.beta[1 + j])
        return None

    def effect_se(self, knob: str, value: Any, sigma: float) -> float | None:
        for j, (k, v) in enumerate(self.columns):
            if k == knob and v == value:
                return sigma * math.sqrt(max(0.0, float(self.cov[1 + j, 1 + j])))
        return None

    def fits(self, noise_sigma: float | None, noise_df: int) -> bool:
        """The additive model describes the measurements: its residual variance is not larger than the noise
        floor's (``noise_sigma`` with ``noise_df`` degrees of freedom) beyond chance, an F test at ``FIT_LEVEL``
        (a truth of one effect per knob value passes it that often); unknown without a noise floor."""
        if noise_sigma is None or noise_sigma <= 0 or noise_df < 1:
            return False
        from scipy.stats import f  # only the race asks, once: no view imports scipy (tests/test_imports.py)

        return bool((self.residual_sigma / noise_sigma) ** 2 <= f.ppf(FIT_LEVEL, self.df, noise_df))


def fit(configs: Sequence[Config]) -> Fit | None:
    """Fit the model on these configurations (each with its ``changes`` from the baseline set, and a figure);
    None when it cannot be checked (residual degrees of freedom below ``MIN_DF``)."""
    rows = [c for c in configs if c.samples_per_s and c.samples_per_s > 0 and math.isfinite(c.samples_per_s)]
    columns: list[tuple[str, Any]] = []
    for c in rows:
        for k, v in sorted(c.changes.items(), key=lambda kv: kv[0]):
            if not any(k == ck and v == cv for ck, cv in columns):
                columns.append((k, v))
    n, p = len(rows), 1 + len(columns)
    if n - MIN_DF < 1:
        return None
    X = np.zeros((n, p))
    X[:, 0] = 1.0
    for i, c in enumerate(rows):
        for j, (k, v) in enumerate(columns):
            if k in c.changes and c.changes[k] == v:
                X[i, 1 + j] = 1.0
    y = np.array([math.log(c.samples_per_s) for c in rows])
    w = np.array([max(1, c.processes) for c in rows], dtype=float)
    xtwx = X.T @ (X * w[:, None])
    penalty = np.zeros((p, p))
    if np.linalg.matrix_rank(X) < p:
        penalty[1:, 1:] = np.eye(p - 1) * RIDGE * max(1e-12, float(np.trace(xtwx)) / p)
    inverse = np.linalg.inv(xtwx + penalty)
    beta = inverse @ (X.T @ (w * y))
    cov = inverse @ xtwx @ inverse
    leverage = np.einsum("ij,jk,ik->i", X, inverse, X) * w
    df = n - float(leverage.sum())
    if df < MIN_DF:
        return None
    residual = y - X @ beta
    sigma = math.sqrt(float(np.sum(w * residual**2)) / df)
    return Fit(tuple(c.number for c in rows), tuple(columns), beta, cov, X, y, w, leverage, sigma, df)
