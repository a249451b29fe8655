"""The noise floor: right after the baseline trial, the defaults measured again in processes of their own.

Before the study compares anything it learns its machine's noise between processes: the
baseline is measured in ``repeats`` more processes (rounds ``floor-<k>``), early, so that the
cut margin of early stopping and every interval rest on it. The process that measured the
baseline takes them (two processes starting on one study do not both measure the floor);
another takes over only when that one is gone.
"""

from __future__ import annotations

import uuid

from autotune.store.plans import RoundId
from autotune.tuning.phases.bench import Bench
from autotune.tuning.phases.session import fits, process_s
from autotune.store import LiveStudy, StoredStudy, StoredTrial
from autotune.evidence import evidence_of

FLOOR_REPEATS = 2  # the baseline is measured in 1 + this many processes early


def missing(live: LiveStudy, repeats: int = FLOOR_REPEATS, *, anyone: bool = False,
            view: StoredStudy | None = None) -> int:
    """How many noise-floor measurements of the baseline are still for this process to take (``anyone``: for any
    process: the floor is complete at 0). ``view``: the study, just read."""
    view = view or live.view()
    base = evidence_of(view).baseline
    if base is None:
        return 0
    taken = sum(1 for r, _ in base.repeats if RoundId.is_of(RoundId.FLOOR, r)) + base.failed_repeats
    left = max(0, repeats - taken)
    if left and not anyone and not _is_mine(live, view.trial(base.number)):
        return 0
    return left


def _is_mine(live: LiveStudy, trial: StoredTrial | None) -> bool:
    """This process measured the baseline trial, or the process that did is gone (same host: its pid;
    another host: it finished longer ago than the study's grace)."""
    who = trial.owner if trial is not None else {}
    if not who or live.is_mine(who):
        return True
    assert trial is not None
    finished = trial.completed.timestamp() if trial.completed else float(who.get("started", 0))
    return live.is_gone(who, since=finished)


def run(live: LiveStudy, bench: Bench, repeats: int = FLOOR_REPEATS) -> int:
    """Measure the baseline again until it has ``repeats`` floor measurements (those that are this process's to
    take); returns how many processes it took."""
    view = live.view()
    base = evidence_of(view).baseline
    if base is None:
        return 0
    taken = 0
    for _ in range(missing(live, repeats, view=view)):
        if not fits(bench.until, process_s(view, [base.number])):  # within the search's time
            break
        done = sum(1 for r, _ in evidence_of(live.view()).baseline.repeats if RoundId.is_of(RoundId.FLOOR, r))
        rate = bench.again(live, base.number, RoundId.floor(done + 1, uuid.uuid4().hex[:6]), base.config)
        bench.told("noise floor: baseline", base.number, rate)
        taken += 1
    return taken


class Floor:
    """The floor as the search loop measures it: before each trial, what is missing (:func:`run`), until it is
    complete for every process; then it is not read again (the evidence of the whole study, 0.15 s at 10,000
    trials)."""

    def __init__(self, live: LiveStudy, bench: Bench, repeats: int = FLOOR_REPEATS) -> None:
        self.live = live
        self.bench = bench
        self.repeats = repeats
        self.done = not repeats

    def __call__(self) -> int:
        """Measure what is this process's to take now; returns the processes it took."""
        if self.done:
            return 0
        view = self.live.view()
        if missing(self.live, self.repeats, view=view):
            return run(self.live, self.bench, self.repeats)
        if evidence_of(view).baseline is not None and not missing(self.live, self.repeats, anyone=True, view=view):
            self.done = True  # complete (whoever measured it): it never goes missing again
        return 0
