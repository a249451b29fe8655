"""The verdict: the answer a user reads (which configuration to use, by how much, and how sure), as every view shows it.

:meth:`autotune.evidence.Evidence.verdict` reaches it; ``status --json``, an export and the
run's summary carry it as :meth:`Verdict.to_dict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from autotune import knobs
from autotune.evidence.stats import Ratio


GAIN = "gain"  # a configuration beats the defaults beyond the noise
#: a configuration looks faster than the defaults, but too few processes of it were measured for an interval (a claim
#: needs autotune.evidence.claim.MIN_PROCESSES): recommended, said as not confirmed
UNCONFIRMED = "unconfirmed"
NO_GAIN = "no_gain"  # nothing beats the defaults beyond the noise: keep them
NO_FIT = "no_fit"  # nothing fits the memory budget, the defaults included
NO_BASELINE = "no_baseline"  # the defaults are not measured yet
NO_RESULTS = "no_results"  # nothing measured successfully yet


@dataclass(frozen=True)
class Verdict:
    """The answer a user reads: which configuration to use, by how much, and how sure."""

    state: str  # GAIN | UNCONFIRMED | NO_GAIN | NO_FIT | NO_BASELINE | NO_RESULTS (above)
    winner: int | None
    leader: int | None
    speedup: Ratio | None  # the winner's (for "no_gain": the leader's) over the baseline
    tied: tuple[int, ...]
    confirmed: bool
    simpler_preferred: bool
    text: str

    @property
    def significant(self) -> bool:
        return self.state == GAIN

    @property
    def recommends(self) -> bool:
        """It recommends a change from the defaults (a gain, confirmed or not)."""
        return self.state in (GAIN, UNCONFIRMED)

    @property
    def unconfirmed(self) -> bool:
        return self.state == UNCONFIRMED

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "significant": self.significant,
            "winner": self.winner,
            "leader": self.leader,
            "speedup": self.speedup.to_dict() if self.speedup else None,
            "tied": list(self.tied),
            "confirmed": self.confirmed,
            "unconfirmed": self.unconfirmed,  # recommended on too few processes for an interval
            "simpler_preferred": self.simpler_preferred,
            "text": self.text,
        }


def changes_text(changes: Mapping[str, Any]) -> str:
    """``knob=value ...`` of a configuration's changes from the defaults, or ``defaults``."""
    return " ".join(f"{k}={knobs.KNOBS[k].format(v)}" for k, v in changes.items() if k in knobs.KNOBS) or "defaults"
