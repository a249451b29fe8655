"""One run of the loop: its wall time, kept on the study, and when it must stop.

Every view reports the time a study took from its sessions (``session:<id>``, one per run,
saved after each trial), so a run stopped half-way still counts. The run's time limits
(``--time-budget``, from the run's start; a fleet's stored deadline) are read here by every
phase: the search starts no trial once they are spent, less the share a time budget keeps for the race and
the claim (``reserve_s``, :meth:`autotune.tuning.loop.Options.reserve_s`); the race, what each knob bought and
the claim start no process after the earlier of the two (:meth:`Session.end`).
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
import uuid

from autotune.store import LiveStudy


class Session:
    """This run's wall time on the study, and its time limits (``time_budget_s`` from now, ``deadline`` in epoch s)."""

    def __init__(self, live: LiveStudy, time_budget_s: float | None = None, deadline: float | None = None) -> None:
        self.live = live
        self.id = uuid.uuid4().hex[:8]
        self.time_budget_s = time_budget_s
        self.deadline = deadline
        self.start = time.monotonic()
        self.started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        self.started_at = time.time()
        self.reserve_s = 0.0  # of the time budget, kept for what follows the search (the race and the claim)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.start

    def spent(self) -> bool:
        """The search's share of the time budget is spent, or the deadline passed: no trial starts now."""
        return ((self.time_budget_s is not None and self.elapsed_s >= self.time_budget_s - self.reserve_s)
                or (self.deadline is not None and time.time() >= self.deadline))

    def end(self) -> float | None:
        """The earlier of the deadline and the end of the time budget (epoch seconds; None: neither)."""
        ends = [d for d in (self.deadline, self.started_at + self.time_budget_s if self.time_budget_s else None) if d]
        return min(ends) if ends else None

    def save(self) -> None:
        self.live.save_session(self.id, {"host": socket.gethostname(), "pid": os.getpid(), "started": self.started,
                                         "started_at": self.started_at, "elapsed_s": round(self.elapsed_s, 3)})
