"""The verdict: the answer a user reads (which configuration to use, by how much, and how sure), as every view shows it.

:meth:`autotune.evidence.Evidence.verdict` reaches it; ``status --json``, an export and the
run's summary carry it as :meth:`Verdict.to_dict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from autotune import knobs
from autotune.evidence.stats import Ratio


@dataclass(frozen=True)
class Verdict:
    """The answer a user reads: which configuration to use, by how much, and how sure."""

    state: str  # "gain" | "no_gain" | "no_fit" (nothing fits the memory budget) | "no_baseline" | "no_results"
    winner: int | None
    leader: int | None
    speedup: Ratio | None  # the winner's (for "no_gain": the leader's) over the baseline
    tied: tuple[int, ...]
    confirmed: bool
    simpler_preferred: bool
    text: str

    @property
    def significant(self) -> bool:
        return self.state == "gain"

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "significant": self.significant,
            "winner": self.winner,
            "leader": self.leader,
            "speedup": self.speedup.to_dict() if self.speedup else None,
            "tied": list(self.tied),
            "confirmed": self.confirmed,
            "simpler_preferred": self.simpler_preferred,
            "text": self.text,
        }


def changes_text(changes: Mapping[str, Any]) -> str:
    """``knob=value ...`` of a configuration's changes from the defaults, or ``defaults``."""
    return " ".join(f"{k}={knobs.KNOBS[k].format(v)}" for k, v in changes.items() if k in knobs.KNOBS) or "defaults"
