"""The result of one trial: a typed outcome and the measured figures, as a dataclass that round-trips JSON."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any, Mapping


class Outcome(StrEnum):
    """How a trial, a re-measurement or an arm of a shared process ended: stored, shown and compared as its plain
    value."""

    OK = "ok"
    OOM = "oom"
    NAN = "nan"
    ERROR = "error"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    NOT_APPLICABLE = "not_applicable"
    INTERRUPTED = "interrupted"
    #: stopped: ran k times the defaults' whole trial without finishing (autotune.tuning.phases.bench.SLOW_FACTOR)
    SLOWER = "slower"
    #: stopped (or never started) because the time its phase may take ran out (--time-budget): nothing was measured,
    #: and nothing is learned of the configuration (a search trial is recorded as skipped, a re-measurement not at all)
    OUT_OF_TIME = "out_of_time"
    # those the store itself writes (autotune.store.records)
    SKIPPED = "skipped"  # given up because another process measures the configuration, or the budget is full
    UNCOMPARED = "uncompared"  # an arm of a shared process whose reference arm failed: it compares with nothing


# the outcomes by the names the package has always used
OK, OOM, NAN, ERROR, TIMEOUT = Outcome.OK, Outcome.OOM, Outcome.NAN, Outcome.ERROR, Outcome.TIMEOUT
CRASHED, NOT_APPLICABLE, INTERRUPTED = Outcome.CRASHED, Outcome.NOT_APPLICABLE, Outcome.INTERRUPTED
SLOWER, OUT_OF_TIME = Outcome.SLOWER, Outcome.OUT_OF_TIME

OUTCOMES = (OK, OOM, NAN, ERROR, TIMEOUT, CRASHED, NOT_APPLICABLE, INTERRUPTED, SLOWER, OUT_OF_TIME)


@dataclass
class TrialResult:
    """What one trial measured. Figures are None when the trial did not get that far."""

    outcome: str
    config: dict[str, Any] = field(default_factory=dict)
    not_applicable: dict[str, str] = field(default_factory=dict)
    samples_per_s: float | None = None
    samples_per_s_cv: float | None = None
    window_samples_per_s: list[float] = field(default_factory=list)
    step_time_s: float | None = None
    samples_per_step: int | None = None
    peak_memory_bytes: int | None = None
    memory: dict[str, Any] = field(default_factory=dict)
    time_to_first_step_s: float | None = None
    warmup_steps: int | None = None
    timed_steps: int | None = None
    flops_per_sample: float | None = None
    achieved_flops: float | None = None
    mfu: float | None = None
    # the device's energy over the timed windows (autotune.machine.energy): joules per sample, and the record it comes
    # from: {"joules", "seconds", "samples", "source": "nvml"}, or {"unreadable": why} (a CPU: "no energy counter: CPU")
    joules_per_sample: float | None = None
    energy: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)
    phases_s: dict[str, float] = field(default_factory=dict)
    wall_s: float | None = None
    overhead_s: float | None = None
    device: str | None = None
    error: dict[str, Any] | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    load: dict[str, Any] = field(default_factory=dict)  # what else ran on the machine meanwhile (autotune.machine.load)
    # the configuration as the trial process found it in force (autotune.trial.arm.Arm.state): flags read back from
    # torch, the batches the step got, the optimizer's kernels, the weights' layout, the allocator's segments
    applied: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.outcome == OK

    @property
    def user_error(self) -> bool:
        """True when the trial failed because of the user's input (a bad spec or factory)."""
        return bool(self.error and self.error.get("user"))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrialResult:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @classmethod
    def failure(cls, outcome: str, message: str, **error: Any) -> TrialResult:
        return cls(outcome=outcome, error={"message": message, **error})


@dataclass
class PairedResult:
    """What one process measured of several configurations timed alternately (:mod:`autotune.trial.paired`).

    ``arms`` (one dict per configuration, in the order asked): ``config`` (as resolved where it ran),
    ``outcome``, ``samples_per_s`` (the median of its windows), ``window_samples_per_s``, ``error``,
    ``not_applicable`` and ``state`` (the process-wide state it ran under: threads, backend flags, autocast).
    The outcome is ``ok`` when the first arm (the reference) and at least one other were measured; else the
    way the process ended.
    """

    outcome: str
    arms: list[dict[str, Any]] = field(default_factory=list)
    load: dict[str, Any] = field(default_factory=dict)
    wall_s: float | None = None
    error: dict[str, Any] | None = None
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.outcome == OK

    def rates(self) -> list[float | None]:
        """Each arm's samples/s (None where it failed), in the order asked."""
        return [a.get("samples_per_s") if a.get("outcome") == OK else None for a in self.arms]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PairedResult:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @classmethod
    def failure(cls, outcome: str, message: str, arms: int, **error: Any) -> PairedResult:
        """A process that gave no result: every arm failed the same way."""
        return cls(outcome=outcome, arms=[{"outcome": outcome} for _ in range(arms)],
                   error={"message": message, **error})


def op_name(raw: str) -> str:
    """A profiler event as a reader knows it: ``## Call CompiledFxGraph fgqrddoohho5...`` -> ``compiled graph``;
    generated hashes dropped, long names cut (the run's, ``measure``'s and the dashboard's profile tables)."""
    name = re.sub(r"^#+\s*Call\s+", "", raw.strip())
    if name.startswith("CompiledFxGraph"):
        return "compiled graph"
    name = re.sub(r"\s+[a-z0-9]{16,}.*$", "", name)  # generated hashes
    return name if len(name) <= 48 else name[:45] + "..."


@dataclass
class NumericsResult:
    """What one numerics run recorded (:mod:`autotune.trial.numerics_run`): per optimizer step, the mean loss over its
    samples and the gradients' global norm; at the end, how far training moved the weights (``moved``, the L2 norm
    of final minus initial), their norm, and their L2 distance to each reference run's final weights
    (``distances``, by label; None where the shapes differ). ``initial_digest`` and ``data_digest`` say whether two
    runs started from the same weights and saw the same samples; ``dropout_off``: the dropout modules turned off."""

    outcome: str
    config: dict[str, Any] = field(default_factory=dict)
    device: str | None = None
    losses: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    moved: float | None = None
    weights_norm: float | None = None
    distances: dict[str, float | None] = field(default_factory=dict)
    initial_digest: str | None = None
    data_digest: str | None = None
    dropout_off: int = 0
    accumulation: int | None = None
    samples_per_step: int | None = None
    ranks: int = 1  # the processes that trained it (DDP), each on its share of every step's samples
    wall_s: float | None = None
    error: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == OK

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NumericsResult:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @classmethod
    def failure(cls, outcome: str, message: str, **error: Any) -> NumericsResult:
        return cls(outcome=outcome, error={"message": message, **error})
