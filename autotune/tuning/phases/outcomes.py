"""A trial's outcome in the search: what the progress display gets (:class:`TrialRecord`), and how the search writes
it on the study and tells Optuna (:class:`Outcomes`): measured, answered from a measured configuration, given up for
want of time, or interrupted.

Why a module of its own: :class:`autotune.tuning.phases.search.Search` asks Optuna for a trial, measures it and runs
the loop; what it then stores and tells is the same for every way a trial ends, and the phases that measure a trial
through the search (:mod:`.minimal`, :mod:`.confirm`) and the tuning loop read the :class:`TrialRecord` it gives.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import optuna
from optuna.trial import TrialState

from autotune import knobs
from autotune import result as R
from autotune.tuning.phases.seeds import Seeds
from autotune.evidence.stats import Ratio
from autotune.store import LiveStudy, StoredTrial
from autotune.store.records import SKIPPED
from autotune.evidence import evidence_of


@dataclass
class TrialRecord:
    """What the progress display gets after each trial."""

    number: int
    role: str
    config: dict[str, Any]
    outcome: str
    samples_per_s: float | None
    peak_memory_bytes: int | None
    speedup: Ratio | None = None
    duplicate_of: int | None = None
    error: str | None = None
    duration_s: float | None = None
    cut_short: bool = False
    over_budget: bool = False  # ok, but its peak memory is over --max-memory: never a candidate
    estimate_s: float | None = None  # on the baseline's record: about how long the rest of the study will take
    # what else ran on the machine while it measured (autotune.machine.load)
    load: dict[str, Any] = field(default_factory=dict)
    note: str | None = None  # a line to print after this trial's: the sampler handed over (GPThenTPE), once per run



class Outcomes:
    """The part of :class:`autotune.tuning.phases.search.Search` that stores a trial's outcome and tells Optuna.
    ``options``: the search's :class:`autotune.tuning.phases.search.SearchOptions` (its memory budget and how
    failures are told)."""

    live: LiveStudy
    seeds: Seeds
    options: Any

    # ------------------------------------------------------------ telling Optuna

    def _memory_violation(self, peak: float | None) -> float:
        budget = self.options.max_memory_bytes
        if not budget or peak is None:
            return 0.0
        return (peak - budget) / budget  # > 0 infeasible

    def _pessimistic_memory(self) -> float:
        """A second value for a trial that has none: twice the worst measured (the study's second objective: peak
        memory, or joules per sample), or a large one before any."""
        peaks = [t.values[1] for t in self.live.trials() if t.measured and t.outcome == R.OK and t.values]
        return 2.0 * max(peaks) if peaks else float(1 << 40)

    def _second(self, result: R.TrialResult) -> float:
        """The trial's second value, by the study's objectives: its peak memory, or its joules per sample (a trial
        whose energy counter could not be read is told as the worst seen twice over: the evidence leaves it off the
        front, autotune.evidence.configs)."""
        if self.live.records().second != "energy":
            return float(result.peak_memory_bytes or 0)
        return float(result.joules_per_sample) if result.joules_per_sample else self._pessimistic_memory()

    def _tell(self, trial: optuna.Trial, ok: bool, values: list[float] | None, memory_violation: float) -> None:
        if not ok and self.options.failures_as == "fail":
            self.live.study.tell(trial, state=TrialState.FAIL)
            return
        trial.set_constraint("failed", 0.0 if ok else 1.0)
        trial.set_constraint("memory", memory_violation)
        self.live.study.tell(trial, values)

    def _record(self, trial: optuna.Trial, role: str, resolved: knobs.Resolved, result: R.TrialResult) -> TrialRecord:
        """Store a measurement on its trial and tell Optuna (the claim wrote its ``role`` and ``config_key``); a trial
        stopped when its phase's time ran out measured nothing: it is recorded as skipped."""
        if result.outcome == R.OUT_OF_TIME:
            return self._skipped(trial, role, resolved, (result.error or {}).get("message") or "out of time",
                                 duration_s=result.wall_s)
        ok = result.ok and result.samples_per_s is not None and math.isfinite(result.samples_per_s)
        compact = {k: v for k, v in result.to_dict().items()
                   if k not in ("config", "not_applicable", "error", "outcome")}
        error = None
        if result.error:
            tail = [line for line in result.error.get("stderr_tail") or [] if line.strip()][-5:]
            error = {"type": result.error.get("type", ""), "message": result.error.get("message", ""),
                     "stderr_tail": tail}
        outcome = result.outcome if ok or result.outcome != R.OK else R.ERROR
        marks: dict[str, Any] = {"outcome": outcome, "config": resolved.config,
                                 "not_applicable": {**resolved.not_applicable, **result.not_applicable},
                                 "result": compact, "duration_s": result.wall_s}
        if error:
            marks["error"] = error
        self.live.mark(trial, **marks)
        if ok:
            values = [float(result.samples_per_s), self._second(result)]  # type: ignore[arg-type]
            self._tell(trial, True, values, self._memory_violation(result.peak_memory_bytes))
        else:
            self._tell(trial, False, [0.0, self._pessimistic_memory()], 0.0)
        return TrialRecord(
            number=trial.number,
            role=role,
            config=resolved.config,
            outcome=outcome,
            samples_per_s=result.samples_per_s if ok else None,
            peak_memory_bytes=result.peak_memory_bytes if ok else None,
            speedup=evidence_of(self.live.view()).speedup(trial.number) if ok else None,
            error=(error or {}).get("message"),
            duration_s=result.wall_s,
            cut_short=bool(result.notes.get("cut_short")),
            over_budget=ok and self._memory_violation(result.peak_memory_bytes) > 0,
            load=dict(result.load or {}),
        )

    def _duplicate(self, trial: optuna.Trial, role: str, resolved: knobs.Resolved, hit: StoredTrial) -> TrialRecord:
        """Answer a trial from a measured one of the same configuration (``duplicate_of``), measuring nothing."""
        marks: dict[str, Any] = {"outcome": hit.outcome, "config": dict(hit.config), "config_key": hit.config_key,
                                 "not_applicable": dict(hit.not_applicable), "result": dict(hit.result)}
        if hit.error is not None:
            marks["error"] = dict(hit.error)
        self.live.mark(trial, **marks, role=role, duplicate_of=hit.number, duration_s=0.0)
        ok = hit.outcome == R.OK
        if hit.state == "fail":
            self.live.study.tell(trial, state=TrialState.FAIL)
        else:
            self._tell(trial, ok, list(hit.values or ()), hit.constraints.get("memory", 0.0) if ok else 0.0)
        ev = evidence_of(self.live.view())
        return TrialRecord(
            number=trial.number,
            role=role,
            config=resolved.config,
            outcome=hit.outcome or "?",
            samples_per_s=ev.samples_per_s(hit.number) if ok else None,
            peak_memory_bytes=self.live.records().peak_memory_of(hit) if ok else None,
            speedup=ev.speedup(hit.number) if ok else None,
            duplicate_of=hit.number,
            over_budget=ok and hit.constraints.get("memory", 0.0) > 0,
        )

    def _skipped(self, trial: optuna.Trial, role: str, resolved: knobs.Resolved, why: str,
                 duration_s: float | None = None) -> TrialRecord:
        """A configuration not started (or stopped) for want of time: recorded as skipped with why, never as a
        failure (nothing is learned of it), not counted in the budget."""
        self._skip(trial, role, why, config=resolved.config, duration_s=duration_s)
        self.seeds.passed.add(trial.number)  # a seed is not queued again in this run (a later one tries it again)
        return TrialRecord(number=trial.number, role=role, config=resolved.config, outcome=SKIPPED,
                           samples_per_s=None, peak_memory_bytes=None, error=why, duration_s=duration_s)

    def _skip(self, trial: optuna.Trial, role: str, why: str, **marks: Any) -> None:
        """Give a trial up without measuring: not counted, not learned from (PRUNED), not queued again."""
        self.live.mark(trial, outcome=SKIPPED, role=role, error={"type": "Skipped", "message": why},
                       **{k: v for k, v in marks.items() if v is not None})
        self.live.study.tell(trial, state=TrialState.PRUNED)

    def _interrupted(self, trial: optuna.Trial, role: str, params: Mapping[str, Any]) -> None:
        self.live.mark(trial, outcome=R.INTERRUPTED, role=role,
                       error={"type": "Interrupted", "message": "stopped by Ctrl-C or SIGTERM"})
        self.live.study.tell(trial, state=TrialState.FAIL)
        self.live.enqueue(params, role=role, requeued_from=trial.number)
