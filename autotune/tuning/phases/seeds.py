"""The configurations a study measures first, queued just in time: PyTorch's defaults, the guides' recipe, earlier
winners, the recipe's variants along what pays most on a GPU; and the one-knob neighbours of the leader.

The baseline (PyTorch's defaults, the workload's batch and the space's fixed values) is
queued first and every speed-up is a ratio to it; the recipe ("every trick on", fitted to
the space) once the baseline is measured; then the warm-start seeds (:mod:`autotune.tuning.warmstart`),
one at a time; then the opening (:meth:`Seeds.opening_params`): the recipe at the top batch the ceiling allows, with
CUDA graphs, its precision alone, so that the first trials go to the precision, the compile mode and the batch size
(on an H200 a random start never tried bf16 or compile in a 4-minute study). Near the end of the search, the search
queues the leader's one-knob neighbours (:meth:`Seeds.neighbours`), the twin of the least change that the claim
measures: a knob the leader leaves at a worse value is found there. Each is queued only when no trial of its role is
queued, running or answered,
so a resumed study always measures its baseline first, and processes sharing a study queue
each seed once. When the defaults fail, the study cannot compare anything: the loop stops
with :func:`baseline_failure`'s line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Iterator, Mapping, Sequence

from autotune import knobs
from autotune.knobs import registry
from autotune import result as R
from autotune.errors import either
from autotune.request import option
from autotune.knobs.space import Space
from autotune.store import LiveStudy, StoredTrial
from autotune.store.records import Role

PRECISION = registry.PRECISION.name
COMPILE = registry.COMPILE.name
CUDA_GRAPHS = "reduce-overhead"  # the compile mode that captures the step in CUDA graphs
#: What pays most on a GPU, tried first: the precision, the compile mode, the batch size.
FIRST = (PRECISION, COMPILE, knobs.BATCH_KNOB)


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
    #: trials this run skipped for want of time: their seeds count as answered in this run (a later run, with time of
    #: its own, queues them again)
    passed: set[int] = field(default_factory=set)

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
        return [(Role.BASELINE, baseline), (Role.RECIPE, recipe)]

    def opening_params(self) -> list[dict[str, Any]]:
        """After the recipe, its variants along what pays most on a GPU (:data:`FIRST`), so that the first trials go
        there rather than to random ones: the recipe at the top batch the ceiling allows; with CUDA graphs
        (``compile=reduce-overhead``, where the space has it: a launch-bound step is where they pay); the recipe's
        precision alone (should the recipe's other knobs fail together); CUDA graphs at the top batch. Each only where
        it differs from what came before."""
        recipe = dict(self.seed_params())[Role.RECIPE]
        baseline = dict(self.seed_params())[Role.BASELINE]
        batch, compiled = self.space.search.get(knobs.BATCH_KNOB), self.space.search.get(COMPILE)
        top = max(batch.values()) if batch is not None else None
        graphs = CUDA_GRAPHS if compiled is not None and CUDA_GRAPHS in compiled.values() else None
        variants: list[dict[str, Any]] = []
        if top is not None:
            variants.append({**recipe, knobs.BATCH_KNOB: top})
        if graphs is not None:
            variants.append({**recipe, COMPILE: graphs})
        if PRECISION in self.space.search:
            variants.append({**baseline, PRECISION: recipe[PRECISION]})
        if graphs is not None and top is not None:
            variants.append({**recipe, COMPILE: graphs, knobs.BATCH_KNOB: top})
        out: list[dict[str, Any]] = []
        for v in variants:
            if v not in out and v != recipe and v != baseline:
                out.append(v)
        return out

    def neighbours(self, params: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
        """The one-knob neighbours of a configuration (its searched knobs' values, ``params``), what pays most on a GPU
        first (:data:`FIRST`), then the space's order: every other choice of a knob; for a range, the next value down
        and up, half and twice the value, and the top."""
        order = [k for k in FIRST if k in self.space.search] + [k for k in self.space.search if k not in FIRST]
        for name in order:
            dim, here = self.space.search[name], params.get(name)
            if here is None:
                continue
            if dim.choices is not None:
                others = [v for v in dim.choices if v != here]
            else:
                values = dim.values()
                others = [v for v in (here - dim.step, here + dim.step, here // 2, here * 2, max(values))
                          if v in values and v != here]
            for v in dict.fromkeys(others):
                yield {**params, name: v}

    def enqueue(self, live: LiveStudy, trials: Sequence[StoredTrial]) -> bool:
        """Queue the next seed, just in time: the baseline first; the recipe once the baseline is measured;
        then the warm-start seeds, then the opening (:meth:`opening_params`), one at a time. ``trials``: the study's,
        just read (one read for every test). Returns whether one is queued now (this call's or an earlier one)."""
        if any(t.state == "waiting" for t in trials):
            return True  # one queued at a time: the next trial takes it (nothing is left queued for a later phase)
        seeds = dict(self.seed_params())
        if not seeded(trials, Role.BASELINE):
            live.enqueue(seeds[Role.BASELINE], role=Role.BASELINE)
            return True
        if not baseline_measured(trials):
            return False
        if not seeded(trials, Role.RECIPE, passed=self.passed):
            live.enqueue(seeds[Role.RECIPE], role=Role.RECIPE)
            return True
        for params, marks in self.warm:
            if not seeded(trials, marks["role"], passed=self.passed, **{k: v for k, v in marks.items() if k != "role"}):
                live.enqueue(params, **marks)
                return True
        opening = self.opening_params()
        done = seeded_count(trials, Role.OPENING, self.passed)
        if done < len(opening):
            live.enqueue(opening[done], role=Role.OPENING)
            return True
        return False


def seeded(trials: Sequence[StoredTrial], role: str, passed: Collection[int] = (), **match: Any) -> bool:
    """A trial of this role (and these marks, or queued again for one that had them) is queued, running, or has
    been answered (measured, failed, or a cache answer), or is one of ``passed`` (skipped in this run for want of
    time)."""
    matched: set[int] = set()
    for t in trials:
        if t.role != role:
            continue
        if any(getattr(t, k) != v for k, v in match.items()) and t.requeued_from not in matched:
            continue
        matched.add(t.number)
        if t.state in ("waiting", "running", "complete") or t.number in passed:
            return True
        if t.state == "fail" and t.outcome not in (None, R.INTERRUPTED):
            return True
    return False


def seeded_count(trials: Sequence[StoredTrial], role: str, passed: Collection[int] = ()) -> int:
    """How many trials of this role are queued, running or answered (or were skipped in this run: ``passed``)."""
    return sum(1 for t in trials if t.role == role and (t.state in ("waiting", "running", "complete")
                                                        or t.number in passed
                                                        or t.state == "fail"
                                                        and t.outcome not in (None, R.INTERRUPTED)))


def baseline_measured(trials: Sequence[StoredTrial]) -> bool:
    """The baseline trial has been measured (successfully or not)."""
    return any(t.role == Role.BASELINE and t.measured for t in trials)


def baseline(trials: Sequence[StoredTrial]) -> StoredTrial | None:
    """The baseline's successful trial (not a cache answer), if any."""
    return next((t for t in trials if t.role == Role.BASELINE and t.outcome == R.OK and t.duplicate_of is None), None)


def failed_baseline(trials: Sequence[StoredTrial]) -> StoredTrial | None:
    """The baseline trial, when it was measured and failed and no other measurement of the defaults succeeded."""
    failed = None
    for t in trials:
        if t.role != Role.BASELINE or not t.measured:
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
    }.get(outcome, f"fix the model or its data ({either('autotune measure --model ...', 'autotune.measure(model)')} "
                   "shows the whole error)")
    where = "this study measured them" if again else "measured"
    fresh = (f"; then start a new study ({option('study', 'NAME-2')}): this one holds the failed defaults" if again
             else "")
    detail = f": {message}" if message else ""
    return (f"PyTorch's defaults failed when {where} (trial #{number}, {outcome}{detail}), and every speed-up is a "
            f"ratio to them: {advice}{fresh}")
