"""The numerics check's trainings, in order, from its plan: the defaults, the defaults again (the floor), the
configuration, each knob reverted when the numerics differ, and under ``--numerics strict`` the next fastest
configurations until one holds.

The study runs it after the verdict (:mod:`autotune.tuning.phases.numerics_check`) and ``autotune verify`` runs it again
on an export (:mod:`autotune.export.verify`: an upgrade can change kernels). Each training is one fresh process
(``numerics``: :meth:`autotune.trial.runner.Runner.numerics`, or a fake in tests; :mod:`autotune.trial.numerics_run` is
the process's side); the defaults' final weights are kept in a temporary folder for the others to be measured
against, so a check is run whole or not at all. :mod:`autotune.evidence.numerics_answer` reads the record it fills.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune import clock
from autotune import knobs
from autotune import result as R
from autotune.evidence import numerics_answer as NU

SEED = 0  # the weights' and the data's seed: any fixed one; the same for every run of a check

#: ``numerics(config, steps, samples_per_step, seed, save_path, references)``: one training in a fresh process.
Numerics = Callable[[Mapping[str, Any], int, int, int, "str | None", Sequence[tuple[str, str]]], R.NumericsResult]


def samples_per_step(a: Mapping[str, Any], b: Mapping[str, Any], global_batch: int | None,
                     changes: Iterable[str] = ()) -> int:
    """The samples each optimizer step takes in every run of a check of ``a`` against the defaults ``b``: the study's
    global batch, else the least common multiple of the steps' samples (a batch in each of a configuration's ranks;
    each run makes it up by gradient accumulation) of both and of ``a`` with each knob of ``changes`` reverted, so
    that every revert the check may run is comparable: two ranks of the defaults' batch take twice its samples, and
    only there does a revert of the batch size tell a BatchNorm's statistics over a smaller batch a rank from the
    ranks themselves."""
    if global_batch:
        return int(global_batch)
    configs = [a, b, *(reverted(a, b, knob) for knob in changes)]
    return math.lcm(*(int(c.get(knobs.BATCH_KNOB) or knobs.KNOBS[knobs.BATCH_KNOB].default_for()) * knobs.ranks_of(c)
                      for c in configs))


def reverted(config: Mapping[str, Any], defaults: Mapping[str, Any], knob: str) -> dict[str, Any]:
    """``config`` with ``knob`` at the defaults' value (left out, where the defaults do not name it)."""
    out = dict(config)
    if knob in defaults:
        out[knob] = defaults[knob]
    else:
        out.pop(knob, None)
    return out


def plan(config: Mapping[str, Any], defaults: Mapping[str, Any], changes: Mapping[str, Any], steps: int, *,
         global_batch: int | None = None, per_step: int | None = None, seed: int = SEED, mode: str = NU.WARN,
         number: int | None = None) -> dict[str, Any]:
    """The record of a check of ``config`` (the defaults with ``changes``) against ``defaults``, before its runs: what
    :func:`check` runs and :func:`autotune.evidence.numerics_answer.judge` reads. Its samples a step are
    :func:`samples_per_step`'s unless given (``per_step``)."""
    per_step = per_step or samples_per_step(config, defaults, global_batch, changes)
    return {"number": number, "mode": mode, "steps": steps, "samples_per_step": per_step, "seed": seed,
            "changes": dict(changes), "config": dict(config), "defaults": dict(defaults), "runs": []}


RUNS = 3  # the runs a check needs for an answer: the defaults, the defaults again (the floor), the recommendation


def check(numerics: Numerics, record: dict[str, Any], on_run: Callable[[], None] | None = None,
          deadline: float | None = None, run_s: float = 0.0) -> dict[str, Any]:
    """Run the check that ``record`` plans (``config``, ``defaults``, ``changes``, ``steps``, ``samples_per_step``,
    ``seed``), adding each run to its ``runs`` (``on_run()`` is told after each), and the reverts when the numerics
    differ; ``done`` once over (``reason`` when the deadline stopped it: the check does not start unless its
    :data:`RUNS` runs, at ``run_s`` seconds each, end before it, no run starts that is expected to end past it, and
    one stopped there is not kept). Returns the record."""
    config, defaults = dict(record["config"]), dict(record["defaults"])
    steps, per_step, seed = int(record["steps"]), int(record["samples_per_step"]), int(record.get("seed") or 0)
    if deadline is not None and clock.now() + RUNS * run_s > deadline:  # a check cut after a run tells nothing
        record["reason"] = "the time budget was spent before the check could finish"
        record["done"] = True
        return record
    with tempfile.TemporaryDirectory(prefix="autotune-numerics-") as tmp:
        saved = str(Path(tmp) / "defaults.pt")
        refs = ((NU.DEFAULTS, saved),)

        def one(label: str, cfg: Mapping[str, Any], save: bool = False) -> bool:
            if deadline is not None and clock.now() + run_s > deadline:
                record["reason"] = "the time budget was spent before the check could finish"
                return False
            result = numerics(cfg, steps, per_step, seed, saved if save else None, () if save else refs)
            if result.outcome == R.OUT_OF_TIME:
                record["reason"] = "the time budget was spent before the check could finish"
                return False
            record["runs"].append({"label": label, **result.to_dict()})
            if on_run is not None:
                on_run()
            return True

        if (one(NU.DEFAULTS, defaults, save=True) and one(NU.FLOOR, defaults) and one(NU.RECOMMENDATION, config)
                and NU.judge(record).state == NU.DIFFER):
            for knob in record.get("changes") or {}:
                if not one(NU.REVERT + knob, reverted(config, defaults, knob)):
                    break
            if record.get("mode") == NU.STRICT and "reason" not in record:
                record["strict_pick"] = strict_pick(record, one)
    record["done"] = True
    return record


def strict_pick(record: dict[str, Any], one: Callable[..., bool]) -> int | None:
    """``--numerics strict``, once the recommendation's numerics differ: the fastest of the planned candidates whose
    numerics hold, each checked in a run of its own until one does; None when none does (the defaults are then
    recommended)."""
    for number, config in (record.get("candidate_configs") or {}).items():
        if not one(NU.CANDIDATE + number, config):
            return None
        if NU.judge(record, int(number)).state == NU.HOLD:
            return int(number)
    return None
