"""The batch-size ceiling as a study stores it: the largest batch that fits, how it was found, and its words.

The probe that finds it runs trials (:mod:`autotune.tuning.ceiling_probe`); what it found is a record of the study
(``batch_ceiling``), which ``status``, its JSON and the dashboard show as :func:`describe` words it. Here, below
the views and apart from the trial side, so a read command shows it without importing the probe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune import knobs
from autotune.result import Outcome
from autotune.store.records import StoredStudy

#: What stopped the ceiling, besides a probe's outcome (Outcome.OOM, CRASHED, ...): a peak over --max-memory, or the
#: top of the searched range fitting.
MAX_MEMORY = "max_memory"
SPACE = "space"
TIME = "time"  # its share of the time budget spent: the largest batch seen to fit, the rest unprobed


@dataclass
class Ceiling:
    """The largest batch found to fit, and how it was found.

    ``batch_size``: the ceiling (None: not even the smallest batch fits); ``limit``: what
    stopped it (``oom``, ``max_memory``, another outcome such as ``crashed``, or ``space``
    when the space's top fits); ``first_failing``: the smallest batch seen not to fit;
    ``probes``: (batch, outcome, peak bytes) in the order run; ``seconds``: their wall time.

    ``graphs``: the probes run after those with CUDA graphs, where the search tries them
    (:func:`autotune.tuning.ceiling_probe.probe_graphs`); empty where it does not. Where they ran, the fields above
    are the ceiling both fit: the graphs' where some batch fits with them (``limit`` and ``first_failing`` theirs
    when one did not fit), and the first probes' ceiling, said without the graphs, where none does.
    """

    batch_size: int | None
    limit: str
    first_failing: int | None = None
    probes: list[tuple[int, str, int | None]] = field(default_factory=list)
    seconds: float = 0.0
    graphs: list[tuple[int, str, int | None]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {knobs.BATCH_KNOB: self.batch_size, "limit": self.limit, "first_failing": self.first_failing,
                "probes": [list(p) for p in self.probes], "seconds": round(self.seconds, 1),
                **({"graphs": [list(p) for p in self.graphs]} if self.graphs else {})}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Ceiling:
        return cls(d.get(knobs.BATCH_KNOB), str(d.get("limit", "")), d.get("first_failing"),
                   [(int(b), str(o), p) for b, o, p in d.get("probes", [])], float(d.get("seconds", 0.0)),
                   [(int(b), str(o), p) for b, o, p in d.get("graphs", [])])

    def text(self) -> str:
        """One line for people: ``192 (224 ran out of memory; 6 probes, 14 s)``; with CUDA graphs probed, ``128
        (192 ran out of memory with CUDA graphs; without them 224 did; 8 probes, 60 s)``."""
        n = len(self.probes) + len(self.graphs)
        cost = f"{n} probe{'s' if n != 1 else ''}, {self.seconds:.0f} s"
        if self.batch_size is None and self.limit == TIME:
            return f"not found: its share of the time budget was spent before a probe finished ({cost})"
        if self.graphs:
            return self._with_graphs(cost)
        if self.batch_size is None:
            return f"none: the smallest batch, {self.first_failing}, does not fit ({_why(self.limit)}; {cost})"
        if self.limit == SPACE:
            return f"{self.batch_size} (the top of the searched range fits; {cost})"
        if self.limit == TIME:
            return f"{self.batch_size} (the largest seen to fit when its share of the time budget was spent; {cost})"
        return f"{self.batch_size} ({self.first_failing} {_why(self.limit)}; {cost})"

    def _eager_reason(self) -> str:
        """Why the ceiling is where it is, in the fields' own terms (the eager probes' where the graphs' did not
        settle it)."""
        if self.limit == SPACE:
            return "the top of the searched range fits"
        return f"{self.first_failing} {_why(self.limit)}"

    def _with_graphs(self, cost: str) -> str:
        failed = [(b, o) for b, o, _ in self.probes if o != Outcome.OK]
        without = (f"without them {min(failed)[0]} {_why(min(failed)[1])}" if failed
                   else "without them the top of the searched range fits")
        last_batch, last = self.graphs[-1][:2]
        if last not in (Outcome.OK, Outcome.OOM, MAX_MEMORY):
            return (f"{self.batch_size} ({self._eager_reason()}; with CUDA graphs not settled: {last_batch} "
                    f"{_why(last)}; {cost})")
        if not any(o == Outcome.OK for _, o, _ in self.graphs):
            smallest = min(b for b, _, _ in self.graphs)
            return (f"{self.batch_size} ({self._eager_reason()}; no batch fits with CUDA graphs: {smallest} "
                    f"{_why(next(o for b, o, _ in self.graphs if b == smallest))}; {cost})")
        if any(o != Outcome.OK for _, o, _ in self.graphs):
            return f"{self.batch_size} ({self.first_failing} {_why(self.limit)} with CUDA graphs; {without}; {cost})"
        return f"{self.batch_size} (with CUDA graphs too; {without}; {cost})"


def _why(limit: str) -> str:
    return {Outcome.OOM: "ran out of memory", MAX_MEMORY: "needs more than --max-memory",
            Outcome.OUT_OF_TIME: "was stopped when the ceiling's share of the time budget ran out"}.get(
        limit, f"failed: {limit}")


def describe(raw: StoredStudy | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A study's ceiling (:attr:`autotune.store.StoredStudy.batch_ceiling`, or the study itself) as every view
    shows it (``status``, ``status --json``, the dashboard): its fields and ``text``; None when it did not probe."""
    if isinstance(raw, StoredStudy):
        raw = raw.batch_ceiling
    if not isinstance(raw, Mapping):
        return None
    found = Ceiling.from_dict(raw)
    return {**found.to_dict(), "text": found.text()}
