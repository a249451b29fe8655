"""One run of the loop: its wall time, kept on the study, and when each of its phases must stop.

Every view reports the time a study took from its sessions (``session:<id>``, one per run,
saved after each trial), so a run stopped half-way still counts. The run's time limits
(``--time-budget``, from the run's start; a fleet's stored deadline) are read here by every
phase. A time budget is shared out (:class:`Shares`, :meth:`autotune.tuning.loop.Options.shares`): the search
takes what the race's first rounds, the claim measured apart and the numerics check leave it, and each of those
keeps its own share (:meth:`Session.ends`), so no phase eats the next one's.

A phase starts a process only when it is expected to end before the phase's end (:func:`fits`, with
:func:`process_s`: what such processes took before), and the bench stops one that runs past it
(:attr:`autotune.tuning.phases.bench.Bench.until`): a study under ``--time-budget`` ends within its budget, with
the processes it measured, rather than past it.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from typing import Iterable

from autotune import clock
from autotune.store import LiveStudy, StoredStudy
from autotune.store.records import Role
from autotune.units import iso


@dataclass(frozen=True)
class Shares:
    """What a time budget keeps, in seconds, for each phase after the search: the race's first rounds (with what each
    knob bought and the least change), the claim measured apart, the numerics check."""

    race_s: float = 0.0
    claim_s: float = 0.0
    numerics_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.race_s + self.claim_s + self.numerics_s

    def scaled(self, to_s: float) -> Shares:
        """The same shares, scaled to ``to_s`` in all (when the budget cannot keep all they ask)."""
        if self.total_s <= to_s or self.total_s <= 0:
            return self
        k = to_s / self.total_s
        return Shares(self.race_s * k, self.claim_s * k, self.numerics_s * k)


@dataclass(frozen=True)
class Ends:
    """When each phase must stop (epoch seconds; None: no limit): the search, the race (and what each knob bought, the
    least change), the claim, the numerics check (the run's end)."""

    search: float | None = None
    race: float | None = None
    claim: float | None = None
    numerics: float | None = None


class Session:
    """This run's wall time on the study, and its time limits (``time_budget_s`` from now, ``deadline`` in epoch s)."""

    def __init__(self, live: LiveStudy, time_budget_s: float | None = None, deadline: float | None = None) -> None:
        self.live = live
        self.id = uuid.uuid4().hex[:8]
        self.time_budget_s = time_budget_s
        self.deadline = deadline
        self.start = clock.monotonic()
        self.started_at = clock.now()
        self.started = iso(self.started_at)
        self.shares = Shares()  # of the time budget, kept for what follows the search

    @property
    def elapsed_s(self) -> float:
        return clock.monotonic() - self.start

    @property
    def reserve_s(self) -> float:
        """What the time budget keeps for the phases after the search."""
        return self.shares.total_s

    def spent(self, next_s: float = 0.0) -> bool:
        """The search's share of the time budget is spent, or the deadline passed, or what is left of them would not
        hold a trial of ``next_s`` seconds (the shortest the search expects): no trial starts now."""
        return not fits(self.ends().search, next_s)

    def end(self) -> float | None:
        """The earlier of the deadline and the end of the time budget (epoch seconds; None: neither)."""
        ends = [d for d in (self.deadline, self.started_at + self.time_budget_s if self.time_budget_s else None) if d]
        return min(ends) if ends else None

    def ends(self) -> Ends:
        """When each phase must stop: the run's end less the shares of the phases after it."""
        end = self.end()
        if end is None:
            return Ends()
        s = self.shares
        return Ends(end - s.total_s, end - s.claim_s - s.numerics_s, end - s.numerics_s, end)

    def left_s(self, until: float | None) -> float | None:
        """Seconds from now to ``until`` (epoch seconds; None: no limit)."""
        return None if until is None else until - clock.now()

    def save(self) -> None:
        self.live.save_session(self.id, {"host": socket.gethostname(), "pid": os.getpid(), "started": self.started,
                                         "started_at": self.started_at, "elapsed_s": round(self.elapsed_s, 3)})


def fits(until: float | None, expected_s: float = 0.0) -> bool:
    """A process expected to take ``expected_s`` seconds, started now, ends by ``until`` (epoch seconds; None: no
    limit)."""
    return until is None or clock.now() + max(0.0, expected_s) <= until


def process_s(view: StoredStudy, numbers: Iterable[int | None]) -> float:
    """About how long one fresh process that measures the configurations of trials ``numbers`` takes (a shared process:
    the sum of its arms): for each, the longest of its earlier re-measurements' walls, else its trial's own (a search
    trial also profiles and counts FLOPs: longer), else the baseline's (None: a configuration no trial measured). 0
    when nothing was measured yet."""
    walls: dict[int, float] = {}
    for m in view.remeasurements():
        if m.wall_s:
            walls[m.trial] = max(walls.get(m.trial, 0.0), float(m.wall_s))
    trials = {t.number: t for t in view.trials}
    base = next((t.number for t in view.trials if t.role == Role.BASELINE and t.ok and t.duplicate_of is None), None)

    def one(n: int | None) -> float:
        for k in (n, base):
            if k is None:
                continue
            if k in walls:
                return walls[k]
            t = trials.get(k)
            if t is not None and t.duration_s:
                return float(t.duration_s)
        return 0.0

    return sum(one(n) for n in numbers)
