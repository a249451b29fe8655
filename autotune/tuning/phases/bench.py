"""How this process measures: a search trial, a configuration again, several alternately in one process.

Every phase measures through a :class:`Bench` and stores what it measured through the
study's handle (:class:`autotune.store.LiveStudy`), so a phase runs the same whether
``autotune run`` built the bench over the trial runner (:mod:`autotune.tuning.preparation`), a test over
a fake of known truth, or a benchmark over a measurement that sleeps. The bench also
counts what this process measured again (the run's closing line) and tells the progress
display (``on_repeat``).

The writers here turn a :class:`autotune.result.TrialResult` or
:class:`autotune.result.PairedResult` into the stored records every figure is computed
from (``measurement:<round>:<trial>`` and ``paired:<round>``, :mod:`autotune.store.records`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from autotune import result as R
from autotune.store import LiveStudy, StoredStudy
from autotune.store.plans import RoundId
from autotune.store.records import UNCOMPARED, Role
from autotune.trial.trainings import Numerics  # the numerics check's training run (autotune.trial.numerics_run)

#: ``evaluate(config, dominators, cut_margin)`` measures one configuration in a fresh process (a search trial:
#: ``dominators``, the front's (samples/s, peak bytes), cut it short by ``cut_margin`` when it is clearly behind).
Evaluate = Callable[[Mapping[str, Any], Sequence[tuple[float, float]], "float | None"], R.TrialResult]
#: ``measure(config)`` measures one configuration again in a fresh process.
Measure = Callable[[Mapping[str, Any]], R.TrialResult]
#: ``together(configs)`` measures the configurations alternately in one fresh process (:mod:`autotune.trial.paired`).
Together = Callable[[Sequence[Mapping[str, Any]]], R.PairedResult]
#: Told after each re-measurement: (what, trial number or -1, samples/s or None).
OnMeasure = Callable[[str, int, "float | None", bool], None]

SLOW_FACTOR = 3.0  # a trial whose steps run this many times the defaults' whole trial, unfinished, is stopped as slower


@dataclass
class Bench:
    """How this process measures configurations, and what it measured again.

    ``evaluate``: a search trial. ``remeasure``: the noise floor's and the race's measurements
    (default: ``evaluate`` without dominators; ``autotune run``'s leaves out the profile and the
    FLOP count). ``together``: the race's shared processes (without it every race measurement
    takes a process of its own). ``ablate``: what each knob bought's shared processes (default:
    ``together``; without either the knobs are not measured one by one). ``numerics``: the numerics check's
    training runs (without it there is no check). ``on_repeat``: told each re-measurement.
    """

    evaluate: Evaluate | None = None
    remeasure: Measure | None = None
    together: Together | None = None
    ablate: Together | None = None
    numerics: Numerics | None = None
    on_repeat: OnMeasure | None = None
    measurements: int = 0  # configurations this process measured again (an arm of a shared process counts as one)
    processes: int = 0  # ... and the processes it started for them
    #: The end of the time the running phase may take (epoch seconds; None: no limit), set by the tuning loop before
    #: each phase: a bench that starts processes stops them then (autotune run's: the trial runner's ``deadline``), so
    #: that no phase eats the share a time budget keeps for the next (:class:`autotune.tuning.phases.session.Session`).
    until: float | None = None

    def __post_init__(self) -> None:
        if self.ablate is None:
            self.ablate = self.together

    def again(self, live: LiveStudy, trial: int, round_id: str, config: Mapping[str, Any]) -> float | None:
        """Measure trial ``trial``'s configuration again in a process of its own and store it as round ``round_id``;
        returns its samples/s (None when it failed)."""
        if self.remeasure is not None:
            result = self.remeasure(config)
        else:
            assert self.evaluate is not None, "a bench measures with remeasure or evaluate"
            result = self.evaluate(config, (), None)
        self.processes += 1
        return record_measurement(live, trial, round_id, result)

    def shared(self, live: LiveStudy, round_id: str, keys: Sequence[str], trials: Sequence[int | None],
               configs: Sequence[Mapping[str, Any]], *, ablation: str | None = None,
               race: str | None = None) -> tuple[list[float | None], R.PairedResult]:
        """Measure ``configs`` alternately in one process (``ablate``'s for ``ablation=<id>``, else ``together``'s)
        and store it as round ``round_id``; returns each arm's samples/s (None where it failed) and the result."""
        together = self.ablate if ablation is not None else self.together
        assert together is not None, "shared processes need together (or ablate)"
        result = together(configs)
        self.processes += 1
        purpose = {k: v for k, v in (("race", race), ("ablation", ablation)) if v is not None}
        return record_paired(live, round_id, keys, trials, result, **purpose), result

    def told(self, what: str, number: int, rate: float | None, shared: bool = False) -> None:
        """One configuration measured again (``shared``: alternately with others in one process): counted, and told
        to ``on_repeat``."""
        self.measurements += 1
        if self.on_repeat is not None:
            self.on_repeat(what, number, rate, shared)

    def counts(self) -> tuple[int, int]:
        """(configurations measured again, processes they took) so far."""
        return self.measurements, self.processes


# ---------------------------------------------------------------- what a measurement leaves on the study


def record_measurement(live: LiveStudy, trial: int, round_id: str, result: R.TrialResult) -> float | None:
    """Store one re-measurement of a trial's configuration; returns its samples/s (None when it failed). A process
    stopped because its phase's time ran out (:data:`autotune.result.OUT_OF_TIME`) measured nothing: not stored."""
    if result.outcome == R.OUT_OF_TIME:
        return None
    ok = (result.ok and result.samples_per_s is not None and math.isfinite(result.samples_per_s)
          and result.samples_per_s > 0)
    rate = float(result.samples_per_s) if ok else None  # type: ignore[arg-type]
    live.save_measurement(trial, round_id, samples_per_s=rate,
                          outcome=result.outcome if ok or not result.ok else R.ERROR,
                          peak_memory_bytes=result.peak_memory_bytes if ok else None,
                          other_cores=(result.load or {}).get("other_cores"), cores=(result.load or {}).get("cores"),
                          wall_s=result.wall_s)  # what it cost: the dashboard's time per trial counts it
    return rate


def record_paired(live: LiveStudy, round_id: str, keys: Sequence[str], trials: Sequence[int | None],
                  result: R.PairedResult, **purpose: Any) -> list[float | None]:
    """Store one process's measurements of several configurations (``keys``, the trial each is, if any) taken
    alternately (:mod:`autotune.trial.paired`); returns each arm's samples/s (None where it failed). ``purpose``:
    ``race=<id>`` or ``ablation=<id>``. A process stopped because its phase's time ran out is not stored."""
    if result.outcome == R.OUT_OF_TIME:
        return [None] * len(keys)
    rates = result.rates() if result.ok else [None] * len(keys)
    arms = []
    for key, trial, rate, arm in zip(keys, trials, rates, result.arms or [{}] * len(keys)):
        good = rate is not None and math.isfinite(rate) and rate > 0
        outcome = arm.get("outcome") or result.outcome
        if not good and outcome == R.OK:
            outcome = UNCOMPARED  # it ran, but the process had nothing to compare it with (its reference failed)
        arms.append({"key": key, "trial": trial, "samples_per_s": float(rate) if good else None,  # type: ignore[arg-type]
                     "outcome": R.OK if good else outcome})
    live.save_paired(round_id, arms, other_cores=(result.load or {}).get("other_cores"),
                     cores=(result.load or {}).get("cores"),
                     wall_s=result.wall_s, **purpose)
    return [a["samples_per_s"] for a in arms]


def rounds_begun(view: StoredStudy, kind: str, plan: str, shared: str | None = None) -> int:
    """Rounds of plan ``plan`` (a race's, a claim's: :class:`autotune.store.plans.RoundId` of ``kind``) with any
    measurement stored (a failed one counts, so a failing configuration cannot loop forever); given ``shared``, the
    rounds of its shared processes (of that kind) count too."""
    apart = (RoundId.parse(m.round_id) for m in view.remeasurements())
    begun = {r.k for r in apart if r is not None and r.kind == kind and r.plan == plan}
    if shared is not None:
        together = (RoundId.parse(b.round_id) for b in view.blocks())
        begun |= {r.k for r in together if r is not None and r.kind == shared and r.plan == plan}
    return len(begun)


def slow_limit(live: LiveStudy, config: Mapping[str, Any]) -> float | None:
    """How long a configuration's steps may run before it is stopped as ``slower``: SLOW_FACTOR times the
    baseline's whole trial (None before the baseline is measured, and for the baseline's own configuration,
    which only ``--trial-timeout`` bounds). A configuration that has run three times as long as the whole
    baseline trial without finishing its windows cannot be the answer; waiting longer teaches nothing."""
    base = next((t for t in live.trials() if t.role == Role.BASELINE and t.outcome == R.OK and t.duplicate_of is None),
                None)
    if base is None or not base.duration_s:
        return None
    if dict(base.config) == dict(config):
        return None
    return SLOW_FACTOR * float(base.duration_s)
