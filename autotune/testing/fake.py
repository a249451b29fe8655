"""Made-up machines: measurements of known truth with the noise real machines show, for the statistics' tests and the
race-cost benchmark (as :mod:`autotune.testing.studies` makes studies). Nothing in the product imports it.

Each factory returns what a :class:`autotune.tuning.phases.Bench` measures with: ``truth(config)`` is the
configuration's true speed-up over the defaults; a measurement is ``100 * truth * noise`` samples/s. The noise:

- :func:`lognormal`: independent between processes, ``exp(N(0, sigma))`` (what the statistics assume);
- :func:`unequal`: the same, with a spread of each configuration's own (a GPU's steady defaults, its noisy fast ones);
- :func:`drifting`: the same, on a machine whose speed wanders (a random walk of ``drift`` per process);
- :func:`heavy_tailed`: a t distribution of 3 degrees of freedom at the lognormal's scale;
- :func:`second_is_slower`: the second process of each round runs ``order`` times as fast;
- :func:`shared`: processes that measure several configurations alternately (:mod:`autotune.trial.paired`): the
  process's factor, each arm's own factor beside it (``arm``, which does not cancel) and the within-process noise.

The same seed gives the same measurements, so a statistic is checked over seeds against the truth it should find.
Every draw is ``random.normalvariate``, never ``random.gauss``: gauss makes its normals in pairs that share one
radius (Box-Muller) and hands out the second of a pair on the next call, so two consecutive measurements were not
independent, and where a decision looked at the first (a reduction refused on a low draw) the second ran high:
claims of a truly 1.5x configuration covered 1.5 in 12 of 18 seeds with the defaults measured in every claim round,
and in 20 of 20 with independent draws.
:class:`Runner` measures with them where the preparation of a study wants a runner (its probe too).
"""

from __future__ import annotations

import math
import random
from typing import Any, Callable, Mapping, Sequence

from autotune import knobs
from autotune import result as R

Truth = Callable[[Mapping[str, Any]], float]

NOISE = 0.15  # between processes: the 2-core machines' 10-25% (benchmarks/results/paired_noise.txt)
WITHIN = 0.03  # each arm's own noise inside one process
DRIFT = 0.02  # a random walk of 2% per process (about 9% over 20 processes)
ORDER = 0.9  # the second process of a round runs 10% slower (what the first left behind: caches, clocks)
FAILURES = {R.OOM: "out of memory (made up)"}  # what a made-up failure says


def result(rate: float, peak: int = 10**8, other_cores: float | None = None, config: Mapping[str, Any] | None = None,
           watts: float | None = None) -> R.TrialResult:
    """A successful measurement of ``rate`` samples/s (``peak``: its peak memory; ``other_cores``: what other processes
    used meanwhile, on a machine of 2 cores; ``watts``: the made-up power a GPU's energy counter read over its
    windows, :func:`made_up_energy`; None: a CPU's, no counter)."""
    load = {"other_cores": other_cores, "cores": 2} if other_cores is not None else {}
    return R.TrialResult(outcome=R.OK, config=dict(config or {}), samples_per_s=rate, samples_per_s_cv=0.01,
                         peak_memory_bytes=peak, wall_s=0.01, load=load,
                         **(made_up_energy(watts, rate) if watts is not None else {}))


#: The seconds of timed windows a made-up trial read the energy counter over.
TIMED_S = 2.5


def made_up_energy(watts: float | None, samples_per_s: float) -> dict[str, Any]:
    """A made-up trial's ``energy`` and ``joules_per_sample`` (autotune.result.TrialResult): ``watts`` over
    :data:`TIMED_S` of windows at its speed; None: a CPU's (no counter, said as a CPU trial says it)."""
    if watts is None:
        return {"energy": {"unreadable": "no energy counter: CPU"}, "joules_per_sample": None}
    samples = max(1, round(samples_per_s * TIMED_S))
    joules = watts * TIMED_S
    return {"energy": {"joules": joules, "seconds": TIMED_S, "samples": samples, "source": "nvml"},
            "joules_per_sample": joules / samples}


def lognormal(truth: Truth, seed: int, sigma: float = NOISE, calls: list | None = None, offset: int = 0, *,
              peak: Callable[[Mapping[str, Any]], int] | None = None,
              fail: Callable[[Mapping[str, Any]], str | None] | None = None,
              other_cores: float | None = None):
    """Independent lognormal noise between processes (``sigma`` 0: none, the truth exactly). ``calls``: each measured
    configuration is appended; ``peak(config)``: its peak memory (10**8 bytes by default); ``fail(config)``: the
    outcome it fails with (None: it runs); ``other_cores``: the load other processes put on the machine meanwhile."""
    rng = random.Random(offset + seed)

    def evaluate(config, dominators=(), margin=None, **_: Any):
        if calls is not None:
            calls.append(dict(config))
        outcome = fail(config) if fail is not None else None
        if outcome is not None:
            return R.TrialResult.failure(outcome, FAILURES.get(outcome, f"{outcome} (made up)"))
        noise = math.exp(rng.normalvariate(0.0, sigma)) if sigma else 1.0
        return result(100.0 * truth(config) * noise, peak(config) if peak is not None else 10**8, other_cores, config)

    return evaluate


def unequal(truth: Truth, seed: int, spread: Callable[[Mapping[str, Any]], float], calls: list | None = None):
    """Lognormal noise whose spread between processes depends on the configuration (``spread(config)``): as on an
    H200, where a GPU-bound step (the defaults) spread 1% between processes and a launch-bound compiled one 25%."""
    rng = random.Random(50_000 + seed)

    def evaluate(config, dominators=(), margin=None, **_: Any):
        if calls is not None:
            calls.append(dict(config))
        return result(100.0 * truth(config) * math.exp(rng.normalvariate(0.0, spread(config))), config=config)

    return evaluate


def drifting(truth: Truth, seed: int, sigma: float = NOISE, drift: float = DRIFT):
    """Lognormal noise on a machine whose speed drifts slowly: measurements close in time are alike."""
    rng = random.Random(20_000 + seed)
    level = [0.0]

    def evaluate(config, dominators=(), margin=None):
        level[0] += rng.normalvariate(0.0, drift)
        return result(100.0 * truth(config) * math.exp(level[0] + rng.normalvariate(0.0, sigma)))

    return evaluate


def heavy_tailed(truth: Truth, seed: int, sigma: float = NOISE):
    """Now and then a process several times the usual spread off: t of 3 degrees of freedom at scale ``sigma``."""
    rng = random.Random(30_000 + seed)

    def evaluate(config, dominators=(), margin=None):
        # chi-squared of 3 degrees: gamma(1.5, 2)
        t3 = rng.normalvariate(0.0, 1.0) / math.sqrt(rng.gammavariate(1.5, 2.0) / 3)
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
        return result(100.0 * truth(config) * factor * math.exp(rng.normalvariate(0.0, sigma)))

    return evaluate


def busy_once(evaluate: Callable[..., R.TrialResult], at: int = 5, other_cores: float = 1.6, cores: int = 2):
    """``evaluate`` whose ``at``-th process (counting from 1) ran beside other processes' ``other_cores`` cores (a
    measurement taken on a busy machine, once)."""
    calls = [0]

    def measure(config, dominators=(), margin=None, **_: Any):
        calls[0] += 1
        result = evaluate(config, dominators, margin)
        if calls[0] == at and result.ok:
            result.load = {"other_cores": other_cores, "cores": cores}
        return result

    return measure


def shared(truth: Truth, seed: int, sigma: float = NOISE, arm: float = 0.0, within: float = WITHIN,
           calls: list | None = None, offset: int = 10_000):
    """Processes that measure configurations alternately: the process's factor (``sigma``), each arm's own
    (``arm``: 0 cancels exactly) and the within-process noise of each arm."""
    rng = random.Random(offset + seed)

    def together(configs: Sequence[Mapping[str, Any]]) -> R.PairedResult:
        if calls is not None:
            calls.append([dict(c) for c in configs])
        process = rng.normalvariate(0.0, sigma)
        arms = []
        for c in configs:
            own = rng.normalvariate(0.0, arm) if arm else 0.0
            arms.append({"config": dict(c), "outcome": R.OK,
                         "samples_per_s": 100.0 * truth(c) * math.exp(process + own + rng.normalvariate(0.0, within))})
        return R.PairedResult(outcome=R.OK, arms=arms, wall_s=0.01)

    return together


class Runner:
    """A :class:`autotune.trial.runner.Runner` without processes, for what prepares a study: ``probe`` answers
    ``probed`` (the workload's context, facts and the machine's fingerprint), ``measure`` measures with ``measure``
    (a measurement of this module), ``measure_together`` with ``together``; ``numerics``, the numerics check's
    training run, is the one given (None: the study runs no numerics check). :meth:`factory` stands in for the class
    where the preparation builds its runner."""

    def __init__(self, measure: Callable[..., R.TrialResult], probed: Mapping[str, Any],
                 together: Callable[[Sequence[Mapping[str, Any]]], R.PairedResult] | None = None,
                 settings: Any = None, numerics: Callable[..., R.NumericsResult] | None = None) -> None:
        from autotune.trial.protocol import Settings

        self._measure, self.probed, self._together = measure, dict(probed), together
        self.numerics = numerics
        self.settings = settings or Settings()  # as Runner's: the floor and the race measure again with settings.lean()

    @classmethod
    def factory(cls, measure: Callable[..., R.TrialResult], probed: Mapping[str, Any],
                **kwargs: Any) -> Callable[..., Runner]:
        """Something that builds this runner whatever the real one is built with (a spec, a device, a timeout...)."""
        return lambda *args, **kw: cls(measure, probed, **kwargs)

    def probe(self, timeout_s: float | None = None) -> dict[str, Any]:
        return dict(self.probed)

    def measure(self, config: Mapping[str, Any], dominators: Any = (), cut_margin: float | None = None, **_: Any
                ) -> R.TrialResult:
        return self._measure(config, dominators, cut_margin)

    def measure_together(self, configs: Sequence[Mapping[str, Any]], **_: Any) -> R.PairedResult:
        assert self._together is not None, "this fake measures no configurations together"
        return self._together(configs)
