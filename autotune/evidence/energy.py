"""Energy per sample of a configuration, from its stored trials: the one figure every view shows beside MFU.

Each trial on an NVIDIA GPU read the device's energy counter over its timed windows (:mod:`autotune.machine.energy`)
and stored the joules, seconds and samples (``TrialResult.energy``), or why it could not (``{"unreadable": why}``;
a CPU: ``no energy counter: CPU``). A configuration's figure pools every measured trial of it that read the counter
(the joules over the samples, never a mean of ratios); a configuration none of whose trials read it says why, in the
words its trial stored, never as a zero. ``status`` (and ``--json``), the end of ``run``, ``export``, the dashboard
and the Python API's ``TuneResult`` show this one figure. Pure computation over the stored study: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from autotune.result import Outcome
from autotune.store.records import StoredStudy

#: What a configuration measured before trials recorded energy says.
NOT_RECORDED = "no energy recorded (measured before autotune read energy counters)"


@dataclass(frozen=True)
class Energy:
    """A configuration's energy over the timed windows of its trials (``trials``: those that read the counter), or
    ``missing``: why there is no figure."""

    number: int
    joules: float | None = None
    seconds: float | None = None
    samples: int | None = None
    source: str | None = None
    trials: tuple[int, ...] = ()
    missing: str | None = None

    @property
    def joules_per_sample(self) -> float | None:
        return self.joules / self.samples if self.joules is not None and self.samples else None

    @property
    def watts(self) -> float | None:
        """The device's mean power over those windows."""
        return self.joules / self.seconds if self.joules is not None and self.seconds else None

    @property
    def text(self) -> str:
        """``0.42 J/sample (310 W over 12.5 s of timed windows, NVML)``, or why there is none."""
        if self.joules_per_sample is None:
            return self.missing or "no energy measured"
        return (f"{joules(self.joules_per_sample)}/sample ({self.watts:.0f} W over {self.seconds:.1f} s of timed "
                f"windows, {str(self.source).upper()})")

    def to_dict(self) -> dict[str, Any]:
        return {"trial": self.number, "joules_per_sample": self.joules_per_sample, "joules": self.joules,
                "seconds": self.seconds, "samples": self.samples, "watts": self.watts, "source": self.source,
                "trials": list(self.trials), "missing": self.missing, "text": self.text}


def energy(study: StoredStudy, number: int) -> Energy:
    """The energy per sample of configuration ``number``: its trial's and every other measured trial of the same
    configuration's (its key) that read the counter, pooled (see the module docstring)."""
    trial = study.trial(number)
    if trial is None:
        return Energy(number, missing=f"no trial #{number}")
    key = trial.config_key
    same = [t for t in study.trials if t.number == number
            or (key and t.config_key == key and t.duplicate_of is None and t.measured and t.outcome == Outcome.OK)]
    read: list[tuple[int, Mapping[str, Any]]] = []
    why: str | None = None
    for t in same:
        rec = t.result.get("energy") if isinstance(t.result, Mapping) else None
        if isinstance(rec, Mapping) and _counted(rec):
            read.append((t.number, rec))
        elif isinstance(rec, Mapping) and rec.get("unreadable") and (why is None or t.number == number):
            why = str(rec["unreadable"])
    if not read:
        return Energy(number, missing=why or NOT_RECORDED)
    return Energy(number, joules=sum(float(r["joules"]) for _, r in read),
                  seconds=sum(float(r["seconds"]) for _, r in read), samples=sum(int(r["samples"]) for _, r in read),
                  source=str(read[0][1].get("source") or "nvml"), trials=tuple(n for n, _ in read))


def of_result(result: Mapping[str, Any]) -> float | None:
    """A single trial's joules per sample, from its stored result (the second objective of a ``speed,energy`` study)."""
    rec = result.get("energy")
    return float(rec["joules"]) / int(rec["samples"]) if isinstance(rec, Mapping) and _counted(rec) else None


def _counted(rec: Mapping[str, Any]) -> bool:
    j, s, n = rec.get("joules"), rec.get("seconds"), rec.get("samples")
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in (j, s, n))


def joules(j: float) -> str:
    """``0.42 J``, ``3.1 mJ``, ``12 J``: three significant figures at most, in J or mJ."""
    if j < 0.1:
        return f"{float(f'{j * 1000:.3g}'):g} mJ"
    return f"{float(f'{j:.3g}'):g} J"
