"""A phase after the search as a unit: when a run takes it, how it runs, what it records and its words in the run's
last line.

The tuning loop (:class:`autotune.tuning.loop.Tuner`) searches, then walks :data:`autotune.tuning.loop.PHASES`, a
list of :class:`Phase`: each is asked whether this run takes it (:attr:`Phase.wanted`), runs over a
:class:`Context` (the study, the bench, the search, the run's options, and the moment it must stop by), and leaves
its report in the run's :class:`autotune.tuning.loop.Summary` under its name. The trials a phase measured as trials
of their own are shown and counted as the search's are (:attr:`Phase.records`); its report's part of the run's last
line is :attr:`Phase.line`. Adding a phase is one module that defines its ``PHASE`` and one line in that list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from autotune.store import LiveStudy
from autotune.tuning.phases.bench import Bench
from autotune.tuning.phases.search import Search, TrialRecord


@dataclass(frozen=True)
class Context:
    """What a phase runs over: the study (every write goes through it), how this process measures, the search (a
    phase that measures a trial of its own measures it as the search does), the run's options
    (:class:`autotune.tuning.loop.Options`) and when this phase must stop (epoch seconds; None: no limit)."""

    live: LiveStudy
    bench: Bench
    search: Search
    options: Any
    deadline: float | None = None


def _always(ctx: Context) -> bool:
    return True


def _nothing(report: Any) -> Sequence[TrialRecord]:
    return ()


def _silent(report: Any) -> str:
    return ""


@dataclass(frozen=True)
class Phase:
    """One phase after the search.

    ``name`` is the attribute of the run's summary that holds its report; ``until`` which of the session's
    :class:`autotune.tuning.phases.session.Ends` stops it (the bench's limit while it runs, and its context's
    deadline); ``run(ctx)`` measures and returns its report (None: nothing to do); ``wanted(ctx)`` says whether this
    run takes it; ``records(report)`` the trials it measured as trials of their own; ``line(report)`` its part of
    the run's last line ("" for none)."""

    name: str
    until: str
    run: Callable[[Context], Any]
    wanted: Callable[[Context], bool] = _always
    records: Callable[[Any], Sequence[TrialRecord]] = _nothing
    line: Callable[[Any], str] = _silent
