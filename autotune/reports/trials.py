"""Every trial of a study as rows: what ``autotune trials`` prints (a table, ``--json`` or ``--csv``).

What a study holds, trial by trial, without reading Optuna's attributes: its number, state,
role, the knobs it changed from PyTorch's defaults, its outcome, the configuration's
samples/s with the processes behind that figure, its own first measurement, its peak
memory, how long it ran, which trial it repeats (a cache answer) or replaces (queued
again after an interruption), and on the recommendation's own trial what its numerics check
found. The configuration's samples/s is the evidence's figure
(:mod:`autotune.evidence`), the one ``status``, ``export`` and the dashboard show; the
trial's own measurement is kept beside it as ``measured_samples_per_s`` (a configuration
measured again has a figure that rests on those re-measurements, not on its first one).

It reads a :class:`autotune.store.StoredStudy` and imports neither torch nor Optuna.
"""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from autotune.result import Outcome
from autotune.store.records import StoredStudy, StoredTrial
from autotune.evidence import evidence_of


@dataclass(frozen=True)
class TrialRow:
    """One trial as ``autotune trials`` shows it."""

    number: int
    state: str  # complete | fail | running | waiting | pruned
    role: str
    outcome: str | None
    changes: dict[str, Any]  # the knobs whose values differ from the baseline's (PyTorch's defaults)
    samples_per_s: float | None  # the configuration's figure (the evidence's), for an ok trial or a cache answer
    processes: int | None  # the processes behind that figure
    measured_samples_per_s: float | None  # this trial's own first measurement (None for a cache answer)
    peak_memory_bytes: int | None
    duration_s: float | None
    repeat_of: int | None  # a cache answer: the trial that measured this configuration
    requeued_from: int | None  # queued again for this interrupted trial
    config: dict[str, Any]  # every knob's effective value, as it ran
    error: str  # the failure's message, for a trial that did not measure
    numerics: str | None = None  # the recommendation's numerics check (hold, differ, not_checked), on its own trial

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def rows(study: StoredStudy) -> list[TrialRow]:
    """Every trial of ``study``, by number."""
    ev = evidence_of(study)
    reference: Mapping[str, Any] = ev.baseline.config if ev.baseline is not None else {}
    check = ev.numerics()
    return [_row(t, ev, reference, check.state if check is not None and check.number == t.number else None)
            for t in study.trials]


def _row(t: StoredTrial, ev: Any, reference: Mapping[str, Any], numerics: str | None = None) -> TrialRow:
    figure_of = t.duplicate_of if t.duplicate_of is not None else t.number
    config = ev.configs.get(figure_of)
    own = t.samples_per_s if t.duplicate_of is None and t.measured else None
    return TrialRow(
        number=t.number,
        state=t.state,
        role=t.role,
        outcome=t.outcome,
        changes={k: v for k, v in t.config.items() if k in reference and reference[k] != v},
        samples_per_s=config.samples_per_s if config is not None else None,
        processes=config.processes if config is not None else None,
        measured_samples_per_s=own,
        peak_memory_bytes=ev.study.peak_memory_of(t),
        duration_s=t.duration_s,
        repeat_of=t.duplicate_of,
        requeued_from=t.requeued_from,
        config=dict(t.config),
        error=t.error_message if t.outcome not in (None, Outcome.OK) else "",
        numerics=numerics,
    )


#: The columns of ``--csv`` (flat: ``changes`` and ``config`` as ``knob=value`` pairs separated by spaces).
CSV_COLUMNS = [f.name for f in fields(TrialRow)]


def to_csv(table: list[TrialRow]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in table:
        flat = row.to_dict()
        for key in ("changes", "config"):
            flat[key] = " ".join(f"{k}={v}" for k, v in flat[key].items())
        writer.writerow({k: "" if v is None else v for k, v in flat.items()})
    return out.getvalue()
