"""The verdict: the answer a user reads (which configuration to use, by how much, and how sure), as every view shows it.

:meth:`autotune.evidence.Evidence.verdict` reaches it; ``status --json``, an export and the
run's summary carry it as :meth:`Verdict.to_dict`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Mapping

from autotune import knobs
from autotune.errors import Said, said
from autotune.evidence.stats import Ratio


class State(StrEnum):
    """What a verdict says (:attr:`Verdict.state`): stored, exported and compared as its plain value."""

    GAIN = "gain"  # a configuration beats the defaults beyond the noise
    #: a configuration looks faster than the defaults, but too few processes of it were measured for an interval (a
    #: claim needs autotune.evidence.claim.MIN_PROCESSES): recommended, said as not confirmed
    UNCONFIRMED = "unconfirmed"
    NO_GAIN = "no_gain"  # nothing beats the defaults beyond the noise: keep them
    NO_FIT = "no_fit"  # nothing fits the memory budget, the defaults included
    NO_BASELINE = "no_baseline"  # the defaults are not measured yet
    NO_RESULTS = "no_results"  # nothing measured successfully yet


@dataclass(frozen=True)
class Verdict:
    """The answer a user reads: which configuration to use, by how much, and how sure."""

    state: State
    winner: int | None
    leader: int | None
    speedup: Ratio | None  # the winner's (for "no_gain": the leader's) over the baseline
    tied: tuple[int, ...]
    confirmed: bool
    simpler_preferred: bool
    text: str  # all of it, in one line: what is stored, exported, compared (headline; details; the knobs left)
    #: what to do and the claim: the first line a view shows (None: the whole text)
    headline: str | None = None
    #: then, where they apply: the numerics, the machine's state, what else the verdict weighed (one line)
    details: tuple[str, ...] = ()
    #: the knobs the recommendation leaves at the user's setting, each as ``knob: your value``, and what they bought
    #: together: shown below the verdict
    left: tuple[str, ...] = ()
    left_bought: str | None = None
    #: why they are left there, as their figure says it (:data:`LEFT_WHY` unless they measured slower)
    left_why: str | None = None
    #: the recommendation's MFU with the peak it is a fraction of, and its energy per sample, as every view shows them
    #: (autotune.evidence.efficiency.rated: added where a view shows the verdict; None until then)
    mfu: Mapping[str, Any] | None = None
    energy: Mapping[str, Any] | None = None

    @property
    def significant(self) -> bool:
        return self.state == State.GAIN

    @property
    def recommends(self) -> bool:
        """It recommends a change from the defaults (a gain, confirmed or not)."""
        return self.state in (State.GAIN, State.UNCONFIRMED)

    @property
    def unconfirmed(self) -> bool:
        return self.state == State.UNCONFIRMED

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
            "headline": self.headline or self.text,
            "details": list(self.details),
            "left": list(self.left),
            "left_bought": self.left_bought,
            "left_why": self.left_why,
            "simpler_preferred": self.simpler_preferred,
            "text": self.text,
            "mfu": dict(self.mfu) if self.mfu is not None else None,
            "energy": dict(self.energy) if self.energy is not None else None,
        }


def changes_text(changes: Mapping[str, Any]) -> str:
    """``knob=value ...`` of a configuration's changes from the defaults, or ``defaults``."""
    return " ".join(f"{k}={knobs.KNOBS[k].format(v)}" for k, v in changes.items() if k in knobs.KNOBS) or "defaults"


def named(verdict: Verdict) -> list[int]:
    """The trial numbers the verdict's text names (``#N``), in the order it names them, each once."""
    out: list[int] = []
    for n in (int(m) for m in re.findall(r"#(\d+)", verdict.text)):
        if n not in out:
            out.append(n)
    return out


def detailed(verdict: Verdict, *details: str) -> Verdict:
    """The verdict with more details after its headline (the numerics, the machine's state): its text says them, and a
    view shows them on the line below the headline."""
    details = tuple(d for d in details if d)
    if not details:
        return verdict
    text = Said("; ".join([said(verdict.text), *(said(d) for d in details)]))
    return replace(verdict, text=text, headline=verdict.headline or verdict.text,
                   details=(*verdict.details, *(str(Said(said(d))) for d in details)))


#: Why knobs of the race's choice are left at the user's setting: what they bought includes no gain.
LEFT_WHY = "as they bought nothing beyond the noise"
#: ... or they cost speed beyond the noise.
LEFT_SLOWER = "as they were slower beyond the noise"
#: ... or the least change was decided before the rounds that measured both showed what they bought.
LEFT_DECIDED = ("as the least change was decided before the rounds that measured both showed a gain beyond the noise "
                "(too few of them to claim the configuration with them)")


def leaving(verdict: Verdict, lines: tuple[str, ...], bought: str | None, text: str, why: str = LEFT_WHY) -> Verdict:
    """The verdict with the knobs its recommendation leaves at the user's setting (``lines``: ``knob: your value``
    each; ``bought``: what they bought together, in words; ``text``: the knobs with what they bought, for the
    one-line text; ``why``: why they are left, as their figure says it)."""
    if not lines:
        return verdict
    return replace(verdict, text=Said(f"{said(verdict.text)}; left at your setting, {why}: {said(text)}"),
                   headline=verdict.headline or verdict.text, left=lines, left_bought=bought, left_why=why)


def shown(verdict: Mapping[str, Any]) -> list[str]:
    """The verdict as a user reads it (``verdict``: :meth:`Verdict.to_dict`, or a view kept before it had parts): what
    to do and the claim; on the next line the numerics and the machine's state; below, each knob left at the user's
    setting as ``knob: your value``, with what the search's values bought together."""
    out = [f"verdict: {verdict.get('headline') or verdict['text']}"]
    if verdict.get("details"):
        out.append("  " + "; ".join(verdict["details"]))
    if verdict.get("left"):
        out.append(f"left at your setting, {verdict.get('left_why') or LEFT_WHY} ({verdict.get('left_bought')}):")
        out += [f"  {line}" for line in verdict["left"]]
    return out
