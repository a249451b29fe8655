"""The loop's stored plans, typed: a race's (``race:<id>``) and a claim's (``confirm:<id>``), each with its state
and why it stopped.

The race (:mod:`autotune.tuning.phases.race`) and the claim (:mod:`autotune.tuning.phases.confirm`) write them through
the store (:class:`autotune.store.LiveStudy`) and read them back to resume what a stopped run left; the fleet reads
whether a study's race is done; the evidence reads a race's looks and a claim's configurations. Every decision on
them is taken on their typed fields (:class:`RaceStop`, :class:`ConfirmStop`), never on their words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Mapping


@dataclass(frozen=True)
class RoundId:
    """A round of re-measurements as they are stored (``measurement:<round>:<trial>``, ``paired:<round>``): made
    (:meth:`format`) and read (:meth:`parse`, :meth:`number`) here only; its kind read by :meth:`prefix`.

    ``race-<id>-<k>``: a process of its own in round ``k`` (from 1, two digits) of race ``<id>``; ``pair-<id>-<k>-<g>``:
    its ``g``-th shared process in that round; ``confirm-<id>-<k>``: round ``k`` of a claim measured apart (a study
    made before the race existed has ``confirm-<k>``); ``abl-<id>-<k>``: process ``k`` of what each knob bought. Two
    kinds are not of that shape: ``floor-<k>-<hex>``, the defaults' ``k``-th process of the noise floor (``hex`` keeps
    two processes' ids apart), and ``verify-<k>``, a round of ``autotune verify`` (never stored)."""

    RACE: ClassVar[str] = "race"
    PAIR: ClassVar[str] = "pair"
    CLAIM: ClassVar[str] = "confirm"
    ABLATION: ClassVar[str] = "abl"
    FLOOR: ClassVar[str] = "floor"
    VERIFY: ClassVar[str] = "verify"

    kind: str  # RACE | PAIR | CLAIM | ABLATION
    plan: str  # the race's, claim's or ablation's id
    k: int
    group: int | None = None  # PAIR: the shared process within the round

    def format(self) -> str:
        return f"{self.kind}-{self.plan}-{self.k:02d}" + ("" if self.group is None else f"-{self.group}")

    @staticmethod
    def prefix(kind: str, plan: str | None = None) -> str:
        """What the round ids of this kind (of this plan, with ``plan``) begin with."""
        return f"{kind}-" if plan is None else f"{kind}-{plan}-"

    @classmethod
    def floor(cls, k: int, tag: str) -> str:
        """The id of the noise floor's ``k``-th process of the defaults (``tag``: what keeps two processes apart)."""
        return f"{cls.FLOOR}-{k}-{tag}"

    @classmethod
    def verify(cls, k: int) -> str:
        """The id of ``autotune verify``'s round ``k``."""
        return f"{cls.VERIFY}-{k}"

    @classmethod
    def parse(cls, round_id: str) -> RoundId | None:
        """The round a round id names (None: not a race's, a claim's or an ablation's of the shape above)."""
        kind, _, rest = round_id.partition("-")
        plan, _, rest = rest.partition("-")
        k, _, group = rest.partition("-")
        if (kind not in (cls.RACE, cls.PAIR, cls.CLAIM, cls.ABLATION) or not plan or not k.isdigit()
                or (group and not group.isdigit())):
            return None
        return cls(kind, plan, int(k), int(group) if group else None)

    @classmethod
    def is_of(cls, kind: str, round_id: str) -> bool:
        """Whether ``round_id`` is a round of this kind."""
        return round_id.startswith(cls.prefix(kind))

    @staticmethod
    def number(round_id: str) -> int:
        """The round a claim's round id names: ``confirm-<id>-<k>``, and an older study's ``confirm-<k>``, -> k."""
        return int(round_id.rsplit("-", 1)[1])


class RaceStop(str, Enum):
    """Why a race stopped: a decision the race and a resumed run take on its value, never on its words."""

    CHOSEN = "chosen"  # the race chose: no candidate left could be more than the indifference zone faster
    SETTLED = "settled"  # (before the claim was measured apart) a winner beat the defaults beyond the noise
    FUTILE = "futile"  # at this rate the fastest would not separate from the defaults within the budget
    SLOWER = "slower"  # every candidate is slower than the defaults beyond the noise
    FAILED = "failed"  # every candidate failed when measured again
    ROUNDS = "rounds"  # its budget of rounds was spent (--confirm): a later run with more rounds goes on with it
    TIME = "time"  # the time budget was spent (--time-budget)


@dataclass(frozen=True)
class RaceRecord:
    """A race's plan and state (``race:<id>``): its candidates (those measured alternately with the defaults in
    shared processes among them, ``within``), the trials measured when it began, its rounds and looks, its owner,
    and once done why it stopped (``stop``, with ``stopped``, the reason in words), the rounds it ran and why each
    candidate left. A record stored before ``stop`` existed reads with ``stop`` None."""

    candidates: tuple[int, ...]
    measured: int
    rounds: int
    started: float
    within: tuple[int, ...] = ()
    min_rounds: int | None = None
    looks: int = 1
    done: bool = False
    owner: Mapping[str, Any] = field(default_factory=dict)
    stop: RaceStop | None = None
    stopped: str = ""
    rounds_run: int = 0
    eliminated: Mapping[int, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"candidates": list(self.candidates), "within": list(self.within), "measured": self.measured,
                "rounds": self.rounds, "min_rounds": self.min_rounds, "looks": self.looks, "started": self.started,
                "done": self.done, "owner": dict(self.owner), "stop": self.stop.value if self.stop else None,
                "stopped": self.stopped, "rounds_run": self.rounds_run,
                "eliminated": {str(k): v for k, v in self.eliminated.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RaceRecord:
        stop = d.get("stop")
        return cls(tuple(int(n) for n in d.get("candidates") or ()), int(d.get("measured") or 0),
                   int(d.get("rounds") or 0), float(d.get("started") or 0.0),
                   tuple(int(n) for n in d.get("within") or ()),
                   int(d["min_rounds"]) if d.get("min_rounds") else None, max(1, int(d.get("looks") or 1)),
                   bool(d.get("done")), dict(d.get("owner") or {}),
                   _stop(stop), str(d.get("stopped") or ""),
                   int(d.get("rounds_run") or 0), {int(k): str(v) for k, v in (d.get("eliminated") or {}).items()})


def _stop(value: Any) -> RaceStop | None:
    try:
        return RaceStop(value) if value is not None else None
    except ValueError:  # a stop a later version wrote
        return None


class ConfirmStop(str, Enum):
    """Why a claim's measurement stopped."""

    PROCESSES = "processes"  # it has the processes its plan asked for (autotune.evidence.claim.processes_needed)
    # (claims planned before the number of processes was) its interval was as narrow as the noise allows
    WIDTH = "width"
    ROUNDS = "rounds"  # its rounds are spent
    TIME = "time"  # the time budget was spent (--time-budget)
    FAILED = "failed"  # the configuration failed when measured again


@dataclass(frozen=True)
class ConfirmRecord:
    """A claim measured apart (``confirm:<id>``): the configuration the race chose (``chosen``, a trial), the
    reduced one proposed for it (``reduced``: a trial, or None when nothing was left out) and the knobs it reverts
    (``reverted``: name -> the chosen value), the race it follows, its rounds and target width, and once done why
    it stopped and whether the reduction held (``reduction``: None while undecided), and the round by which its claim's
    rounds had decided it (``decided_at``: the reduced configuration's processes up to it chose it, so its claim rests
    on those after it; None when decided without them). ``processes``: the fresh processes of the recommendation the
    claim measures (0: a claim planned before that, which stops at its ``width``)."""

    chosen: int
    race_id: str
    started: float
    reduced: int | None = None
    reverted: Mapping[str, Any] = field(default_factory=dict)
    rounds: int = 0
    width: float = 1.4
    owner: Mapping[str, Any] = field(default_factory=dict)
    done: bool = False
    stop: ConfirmStop | None = None
    reduction: bool | None = None
    decided_at: int | None = None
    processes: int = 0
    unreduced: str | None = None  # why no least change was proposed though the search showed knobs that buy nothing
    fastest: bool = False  # the race chose nothing: the claim bounds the fastest configuration (Evidence.fastest)

    def to_dict(self) -> dict[str, Any]:
        return {"chosen": self.chosen, "race_id": self.race_id, "started": self.started, "reduced": self.reduced,
                "reverted": dict(self.reverted), "rounds": self.rounds, "width": self.width, "owner": dict(self.owner),
                "done": self.done, "stop": self.stop.value if self.stop else None, "reduction": self.reduction,
                "decided_at": self.decided_at, "processes": self.processes, "unreduced": self.unreduced,
                "fastest": self.fastest}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ConfirmRecord:
        try:
            stop = ConfirmStop(d["stop"]) if d.get("stop") else None
        except ValueError:  # a stop a later version wrote
            stop = None
        reduced = d.get("reduced")
        return cls(int(d["chosen"]), str(d.get("race_id") or ""), float(d.get("started") or 0.0),
                   int(reduced) if reduced is not None else None, dict(d.get("reverted") or {}),
                   int(d.get("rounds") or 0), float(d.get("width") or 1.4), dict(d.get("owner") or {}),
                   bool(d.get("done")), stop, d.get("reduction"),
                   int(d["decided_at"]) if d.get("decided_at") is not None else None, int(d.get("processes") or 0),
                   d.get("unreduced"), bool(d.get("fastest")))
