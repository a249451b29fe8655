"""A study's measured configurations: each successful trial with every measurement of its configuration.

A configuration's measurements come from the stored study (:class:`autotune.store.StoredStudy`):

- its trial's own measurement (the trial's first objective value), round ``search-<n>``;
- its re-measurements in processes of their own (:meth:`~autotune.store.StoredStudy.remeasurements`):
  the baseline's noise-floor repeats (``floor-<k>``), the race's rounds (``race-<id>-<k>``, the
  baseline measured in every round, interleaved) and the ``confirmations`` of studies made before
  the race existed (``confirm-<k>``);
- the processes that measured several configurations alternately (:mod:`autotune.trial.paired`,
  :meth:`~autotune.store.StoredStudy.blocks`): the race's rounds for configurations that can share
  a process with the defaults (``pair-<id>-<k>``) and the ablation's (``abl-<id>-<k>``); their arms
  name configurations by key, so a configuration measured as a trial later (the ablation's
  recommendation) finds its measurements.

A configuration's *claim* rests on its re-measurements when it has any, and drops its first
measurement then: a configuration reaches the race *because* its first measurement was high, so
that one is biased upwards (the winner's curse). The baseline was never selected, so all of its
measurements count. This module gathers; :class:`autotune.evidence.Evidence` compares.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from autotune import knobs
from autotune import result as R
from autotune.evidence import stats
from autotune.store.records import UNCOMPARED, Block, Role, StoredStudy, StoredTrial
from autotune.evidence.stats import Measurement


@dataclass
class Measured:
    """One measured, successful configuration and every measurement of it."""

    number: int
    role: str
    config: dict[str, Any]
    peak_memory_bytes: int
    feasible: bool
    first: Measurement
    repeats: list[Measurement] = field(default_factory=list)
    failed_repeats: int = 0
    changes: dict[str, Any] = field(default_factory=dict)
    loads: dict[str, float] = field(default_factory=dict)  # round -> cores other processes used meanwhile
    slices: dict[str, int] = field(default_factory=dict)  # round -> the cores its process could run on, where recorded
    left_out: frozenset[str] = frozenset()  # rounds much busier than the baseline's: not part of the claim
    key: str = ""  # the configuration's key (knobs.Resolved.key)
    together: list[Measurement] = field(default_factory=list)  # measured alternately with others in one process
    figure: float | None = None  # samples/s from a within-process speed-up over the baseline (Evidence sets it)
    # the raced configuration its figure rests on, when it shared processes with it, not the baseline
    via: int | None = None
    # the front's second axis, the trial's second value (the study's objectives): its peak memory, or its joules per
    # sample (None where its energy counter could not be read: off a speed,energy front)
    second: float | None = None
    # (claim, samples/s) once Evidence has set every field above (seal): a view of a large study asks for them
    # millions of times
    sealed: tuple[list[Measurement], float] | None = field(default=None, repr=False, compare=False)

    @property
    def is_baseline(self) -> bool:
        return self.role == Role.BASELINE

    def seal(self) -> None:
        self.sealed = None
        self.sealed = (self.claim, self.samples_per_s)

    @property
    def claim(self) -> list[Measurement]:
        """The measurements a claim about this configuration rests on (see the module docstring), less those
        taken while the machine was much busier than during the baseline's (unless that would leave none)."""
        if self.sealed is not None:
            return self.sealed[0]
        if self.is_baseline:
            taken = [self.first, *self.repeats]
        else:
            taken = list(self.repeats) if self.repeats else [self.first]
        kept = [m for m in taken if m[0] not in self.left_out]
        return kept or taken

    @property
    def busy_only(self) -> bool:
        """Every measurement of its claim was taken on a machine much busier than during the baseline's."""
        return bool(self.left_out) and all(m[0] in self.left_out for m in self.claim)

    @property
    def samples_per_s(self) -> float:
        if self.sealed is not None:
            return self.sealed[1]
        return self.figure if self.figure is not None else stats.geomean(v for _, v in self.claim)

    @property
    def processes(self) -> int:
        return len(self.together) if self.figure is not None else len(self.claim)

    @property
    def confirmed(self) -> bool:
        return bool(self.repeats) or bool(self.together)


def measured(study: StoredStudy, max_memory_bytes: int | None) -> dict[int, Measured]:
    """Every successful measured trial of ``study`` as a :class:`Measured`, with its re-measurements in processes of
    their own and the load during each (not yet joined with the shared processes: :func:`join`)."""
    repeats, failed, loads, slices = _repeats(study)
    configs: dict[int, Measured] = {}
    for t in study.trials:
        if not t.ok:
            continue
        energy = study.second == "energy"
        peak = (study.peak_memory_of(t) or 0) if energy else int(t.values[1])  # type: ignore[index]
        counted = not energy or "joules" in ((t.result.get("energy") if t.result else None) or {})
        feasible = all(v <= 0 for v in t.constraints.values())
        if max_memory_bytes:
            feasible = feasible and peak <= max_memory_bytes
        configs[t.number] = Measured(
            number=t.number,
            role=t.role,
            config=dict(t.config),
            peak_memory_bytes=peak,
            feasible=feasible,
            first=(f"search-{t.number}", float(t.values[0])),  # type: ignore[index]
            repeats=repeats.get(t.number, []),
            failed_repeats=failed.get(t.number, 0),
            loads=_first_load(t) | loads.get(t.number, {}),
            slices=_first_slice(t) | slices.get(t.number, {}),
            key=str(t.config_key or ""),
            second=float(t.values[1]) if counted else None,  # type: ignore[index]
        )
    return configs


def set_changes(configs: Iterable[Measured], baseline: Measured | None) -> None:
    """Each configuration's knobs that differ from the baseline's (from PyTorch's defaults before it is measured)."""
    reference = baseline.config if baseline else knobs.defaults()
    for c in configs:
        c.changes = {k: v for k, v in c.config.items() if k in reference and reference[k] != v}


def join(configs: dict[int, Measured], blocks: Iterable[Block],
         trial_of: dict[str, int]) -> dict[str, list[Measurement]]:
    """Join each arm of the processes that measured several configurations alternately to its configuration (by
    key, ``trial_of``); returns every key's within-process measurements, trials or not."""
    within: dict[str, list[Measurement]] = {}
    for b in blocks:
        for key, rate in b.rates.items():
            number = trial_of.get(key)
            if rate:
                within.setdefault(key, []).append((b.round_id, float(rate)))
                if number is not None:
                    configs[number].together.append((b.round_id, float(rate)))
            elif number is not None and b.outcomes.get(key) not in (R.OOM, UNCOMPARED):
                # out of memory beside the other arms (or a reference that failed) says nothing of the
                # configuration alone: not a failure of it
                configs[number].failed_repeats += 1
            if number is not None and b.other_cores is not None:
                configs[number].loads[b.round_id] = float(b.other_cores)
            if number is not None and b.cores:
                configs[number].slices[b.round_id] = int(b.cores)
    return within


def _first_load(t: StoredTrial) -> dict[str, float]:
    other = (t.result.get("load") or {}).get("other_cores")
    return {f"search-{t.number}": float(other)} if other is not None else {}


def _first_slice(t: StoredTrial) -> dict[str, int]:
    cores = (t.result.get("load") or {}).get("cores")
    return {f"search-{t.number}": int(cores)} if cores else {}


def _repeats(study: StoredStudy) -> tuple[dict[int, list[Measurement]], dict[int, int], dict[int, dict[str, float]],
                                           dict[int, dict[str, int]]]:
    """Re-measurements by trial (and legacy ``confirmations``), the failed ones counted, and the load during each
    and the cores its process could run on."""
    out: dict[int, list[Measurement]] = {}
    failed: dict[int, int] = {}
    loads: dict[int, dict[str, float]] = {}
    slices: dict[int, dict[str, int]] = {}
    for m in study.remeasurements():
        if m.other_cores is not None:
            loads.setdefault(m.trial, {})[m.round_id] = float(m.other_cores)
        if m.cores:
            slices.setdefault(m.trial, {})[m.round_id] = int(m.cores)
        if m.samples_per_s:
            out.setdefault(m.trial, []).append((m.round_id, float(m.samples_per_s)))
        else:
            failed[m.trial] = failed.get(m.trial, 0) + 1
    for values in out.values():
        values.sort(key=lambda m: m[0])
    return out, failed, loads, slices
