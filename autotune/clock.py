"""The one clock a study reads: every deadline, time limit, share of a budget and timing decision of a study reads
it, never :mod:`time` directly, so that a whole study can run in simulated time.

A GPU is lent to this project rarely and for minutes, and a study's decisions (when the search's share of the budget
is spent, whether a compiled configuration fits what is left, when a phase must stop, how long a process took) are
where it goes wrong there. Read through one object, the same loop runs against a simulated device in simulated time
(:mod:`autotune.testing.simulated_gpu`): a 4-minute H200 study in a second, hundreds of seeds in a benchmark. The
real clock reads :func:`time.time` (epoch seconds: deadlines stored on a study and compared by other processes and
machines, stamps on records) and :func:`time.monotonic` (durations inside one process). A simulated clock advances
by what a simulated process costs.

The clock in force is this process's (:func:`current`); :func:`using` hands a study another one for the length of a
``with`` block, and every module of the study reads it through :func:`now`, :func:`monotonic` and :func:`sleep`.
What a trial process times inside itself (its windows, its steps) is a measurement, not a decision: it reads
:func:`time.perf_counter` where it runs.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator, Protocol


class Clock(Protocol):
    """What a study reads of time."""

    def time(self) -> float:
        """Seconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (only differences mean anything)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (a simulated clock advances by them)."""
        ...


class RealClock:
    """The machine's clock."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


REAL = RealClock()
_lock = threading.Lock()
_current: Clock = REAL


def current() -> Clock:
    """The clock this process's study reads."""
    return _current


@contextmanager
def using(clock: Clock) -> Iterator[Clock]:
    """Read ``clock`` in this process for the length of the block (a simulated study), then the one before it."""
    global _current
    with _lock:
        before, _current = _current, clock
    try:
        yield clock
    finally:
        with _lock:
            _current = before


def now() -> float:
    """Epoch seconds on the clock in force."""
    return _current.time()


def monotonic() -> float:
    """Monotonic seconds on the clock in force."""
    return _current.monotonic()


def sleep(seconds: float) -> None:
    """Wait on the clock in force."""
    _current.sleep(seconds)
