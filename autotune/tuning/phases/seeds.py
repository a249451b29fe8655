"""The configurations a study measures first, queued just in time: PyTorch's defaults, the guides' recipe, earlier winners.

The baseline (PyTorch's defaults, the workload's batch and the space's fixed values) is
queued first and every speed-up is a ratio to it; the recipe ("every trick on", fitted to
the space) once the baseline is measured; then the warm-start seeds (:mod:`autotune.tuning.warmstart`),
one at a time. Each is queued only when no trial of its role is queued, running or answered,
so a resumed study always measures its baseline first, and processes sharing a study queue
each seed once. When the defaults fail, the study cannot compare anything: the loop stops
with :func:`baseline_failure`'s line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from autotune import knobs
from autotune import result as R
from autotune.errors import either
from autotune.request import option
from autotune.knobs.space import Space
from autotune.store import LiveStudy, StoredTrial


def base_config(ctx: knobs.Context, fixed: Mapping[str, Any], batch_size: int | None) -> dict[str, Any]:
    """PyTorch's defaults, the workload's batch size, and the space's fixed values."""
    base = knobs.defaults(ctx)
    if batch_size:
        base[knobs.BATCH_KNOB] = batch_size
    base.update(fixed)
    return knobs.resolve(base, ctx).config


@dataclass
class Seeds:
    """What is searched (``space`` in ``ctx``, every configuration over ``base``: the defaults) and the seeds queued
    first. ``warm``: (parameters, marks) of earlier studies' winners, queued after the recipe, each once."""

    space: Space
    ctx: knobs.Context
    base: dict[str, Any]
    warm: list[tuple[Mapping[str, Any], Mapping[str, Any]]] = field(default_factory=list)

    def seed_params(self) -> list[tuple[str, dict[str, Any]]]:
        """Baseline and recipe as parameters of the searched knobs (validated against the space)."""
        baseline = {name: self.base[name] for name in self.space.search}
        recipe_config = knobs.recipe(self.ctx, self.base)
        recipe: dict[str, Any] = {}
        for name, dim in self.space.search.items():
            value = recipe_config[name]
            if not dim.contains(value):
                candidates = dim.values()
                if knobs.KNOBS[name].is_range:
                    value = min(candidates, key=lambda v: (abs(v - value), -v))
                else:
                    value = self.base[name]
            recipe[name] = value
        return [("baseline", baseline), ("recipe", recipe)]

    def enqueue(self, live: LiveStudy, trials: Sequence[StoredTrial]) -> None:
        """Queue the next seed, just in time: the baseline first; the recipe once the baseline is measured;
        then the warm-start seeds, one at a time. ``trials``: the study's, just read (one read for every test)."""
        seeds = dict(self.seed_params())
        if not seeded(trials, "baseline"):
            live.enqueue(seeds["baseline"], role="baseline")
        elif baseline_measured(trials) and not seeded(trials, "recipe"):
            live.enqueue(seeds["recipe"], role="recipe")
        elif baseline_measured(trials):
            for params, marks in self.warm:
                if not seeded(trials, marks["role"], **{k: v for k, v in marks.items() if k != "role"}):
                    live.enqueue(params, **marks)
                    break


def seeded(trials: Sequence[StoredTrial], role: str, **match: Any) -> bool:
    """A trial of this role (and these marks, or queued again for one that had them) is queued, running, or has
    been answered (measured, failed, or a cache answer)."""
    matched: set[int] = set()
    for t in trials:
        if t.role != role:
            continue
        if any(getattr(t, k) != v for k, v in match.items()) and t.requeued_from not in matched:
            continue
        matched.add(t.number)
        if t.state in ("waiting", "running", "complete"):
            return True
        if t.state == "fail" and t.outcome not in (None, R.INTERRUPTED):
            return True
    return False


def baseline_measured(trials: Sequence[StoredTrial]) -> bool:
    """The baseline trial has been measured (successfully or not)."""
    return any(t.role == "baseline" and t.measured for t in trials)


def baseline(trials: Sequence[StoredTrial]) -> StoredTrial | None:
    """The baseline's successful trial (not a cache answer), if any."""
    return next((t for t in trials if t.role == "baseline" and t.outcome == R.OK and t.duplicate_of is None), None)


def failed_baseline(trials: Sequence[StoredTrial]) -> StoredTrial | None:
    """The baseline trial, when it was measured and failed and no other measurement of the defaults succeeded."""
    failed = None
    for t in trials:
        if t.role != "baseline" or not t.measured:
            continue
        if t.outcome == R.OK:
            return None
        failed = failed or t
    return failed


def baseline_failure(number: int, outcome: str, message: str, again: bool = False) -> str:
    """Why a study cannot go on when PyTorch's defaults fail, and what to do (one line, for a WorkloadError: the
    options it names are terms, :func:`autotune.request.option`)."""
    advice = {
        R.TIMEOUT: f"raise {option('trial_timeout')} (or use {option('quick')}, a smaller model or batch)",
        R.OOM: f"fix a smaller batch in the space's [fixed] (or {option('max_memory')}), or a smaller model",
        R.NAN: "the model's loss is not finite with PyTorch's defaults: fix the model or its data",
    }.get(outcome, f"fix the model or its data ({either('autotune measure --model ...', 'autotune.measure(model)')} shows the "
                   "whole error)")
    where = "this study measured them" if again else "measured"
    fresh = (f"; then start a new study ({option('study', 'NAME-2')}): this one holds the failed defaults" if again
             else "")
    detail = f": {message}" if message else ""
    return (f"PyTorch's defaults failed when {where} (trial #{number}, {outcome}{detail}), and every speed-up is a "
            f"ratio to them: {advice}{fresh}")
