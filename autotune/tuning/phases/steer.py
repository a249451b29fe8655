"""Steering a long study's sampler off configurations it has measured: the nearest one not measured yet.

A study past the default sampler's hand-over (:data:`autotune.tuning.phases.sampler.GP_MAX_TRIALS` complete trials:
TPE suggests) holds thousands of measured configurations, and TPE keeps proposing the best of them again: a
resumed 10,000-trial study answered 0 to 9 trials from the cache before its first measurement, each a whole
trial (TPE's suggestion over the history, its writes, its record): most of the time the resumed run took to
start measuring (benchmarks/results/resume_scale.txt). Past the hand-over, a proposal whose
configuration is measured is moved to the nearest configuration that is not (:func:`nearest`), inside the
same suggestion: TPE still decides where to look, and no trial is spent on an answer the study already holds.
Before the hand-over (the Gaussian process, studies of the usual size) nothing is steered: what a study decides
there is unchanged.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Iterator, Mapping

from autotune.knobs.space import Dimension

#: The most configurations looked at for one proposal (a space nearly exhausted around it: the proposal stays as
#: it is, and the search answers it from the cache as before).
LIMIT = 2000


def moves(params: Mapping[str, Any], space: Mapping[str, Dimension]) -> Iterator[dict[str, Any]]:
    """The configurations one step from ``params``, in the space's order: a range one step down, then up; a list of
    choices, each other choice in its order. A knob whose value is outside its dimension is not moved."""
    for name, dim in space.items():
        if name not in params or not dim.contains(params[name]):
            continue
        value = params[name]
        if dim.choices is None:
            steps = [value - dim.step, value + dim.step]
            near = [v for v in steps if dim.contains(v)]
        else:
            near = [c for c in dim.choices if c != value]
        for v in near:
            yield {**params, name: v}


def nearest(proposal: Mapping[str, Any], space: Mapping[str, Dimension], measured: Callable[[Mapping[str, Any]], bool],
            limit: int = LIMIT) -> dict[str, Any] | None:
    """The configuration nearest ``proposal`` (fewest one-step moves: :func:`moves`, breadth first) for which
    ``measured`` is false; None when ``proposal`` itself is not measured, when a knob of ``space`` is missing from
    it, or when none is found among ``limit`` configurations."""
    if any(name not in proposal for name in space):
        return None
    start = {name: proposal[name] for name in space}
    if not measured(start):
        return None
    seen = {tuple(start.values())}
    frontier = deque([start])
    while frontier:
        for near in moves(frontier.popleft(), space):
            key = tuple(near.values())
            if key in seen:
                continue
            if not measured(near):
                return near
            if len(seen) >= limit:
                return None
            seen.add(key)
            frontier.append(near)
    return None
