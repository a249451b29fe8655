"""The numerics check: the recommendation trained beside PyTorch's defaults, to say whether it still learns the same.

Runs last, once the verdict is reached (:mod:`autotune.evidence.numerics_answer` says what is compared and why). Three
fresh processes (:mod:`autotune.trial.numerics_run`): the defaults, the defaults again (the floor: what nondeterminism
alone changes) and the recommendation, each from the same seeded weights on the same samples per optimizer step
(as many as every run it may need splits into whole batches, the reverts included, or the study's
``--global-batch``), for as many steps as keep the check within
:data:`autotune.evidence.numerics_answer.COST_SHARE` of the study's time (at least 30). When the numerics
differ, each knob of the recommendation is reverted to the defaults' value in a run of its own, so that the answer
names the knob that causes it; with ``--numerics strict`` the next fastest configurations measured faster than the
defaults are then checked, fastest first, until one holds, and the verdict recommends it (or the defaults, when none
does). The check is a record (``numerics:<id>``) saved after each run; a check a stopped
run left unfinished is run again whole (the weights it compared were in that run's temporary folder).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from autotune import clock
from autotune.evidence import evidence_of
from autotune.evidence import numerics_answer as NU
from autotune.store import LiveStudy
from autotune.trial import trainings
from autotune.tuning.phases.bench import Bench
from autotune.tuning.phases.phase import Phase
from autotune.units import format_duration, plural


RUN_OVERHEAD_S = 2.0  # a run's process start and the workload's build before any trial measured them here


@dataclass
class NumericsReport:
    """What this run's check did: its id, its runs and their time, and its answer."""

    check_id: str
    runs: int
    wall_s: float
    check: NU.Check


def run(live: LiveStudy, bench: Bench, mode: str = NU.WARN, deadline: float | None = None) -> NumericsReport | None:
    """Check the recommendation's numerics against the defaults' (see the module's docstring); nothing when the
    mode is off, the bench cannot run the check, nothing but the defaults is recommended, or this recommendation was
    checked already."""
    if mode == NU.OFF or bench.numerics is None:
        return None
    view = live.view()
    ev = evidence_of(view)
    number, base = ev.to_check(), ev.baseline
    if number is None or base is None or number == base.number:
        return None
    rec, defaults = ev.configs[number], base
    done = [r for _, r in view.numerics_checks() if r.get("number") == number and r.get("done")]
    if done:
        return None
    per_step = trainings.samples_per_step(rec.config, defaults.config, view.global_batch, rec.changes)
    slower = min(c.samples_per_s for c in (rec, defaults) if c.samples_per_s) or 1.0
    first = max(float(t.result.get("time_to_first_step_s") or 0.0) for t in view.trials
                if t.number in (number, defaults.number)) if view.trials else 0.0
    study_s = ev.time_spent()["wall_s"]
    steps = NU.steps_for(study_s, per_step / slower, first + 1.0)
    check_id = uuid.uuid4().hex[:8]
    record = {**trainings.plan(rec.config, defaults.config, rec.changes, steps, per_step=per_step, mode=mode,
                               number=number), "started": clock.now(), "done": False}
    if mode == NU.STRICT:  # the configurations to check next, fastest first, should the recommendation's differ
        faster = [c for c in sorted(ev.ok(), key=lambda c: -c.samples_per_s)
                  if c.number not in (number, defaults.number) and (r := ev.speedup(c.number)) is not None
                  and r.above_one()]
        record["candidates"] = {str(c.number): dict(c.changes) for c in faster[:NU.STRICT_CANDIDATES]}
        record["candidate_configs"] = {str(c.number): dict(c.config) for c in faster[:NU.STRICT_CANDIDATES]}
    live.save_numerics(check_id, record)
    start = clock.monotonic()
    # one run: its process's start, the workload's build and exit (as the trials here took them), compile, its steps
    run_s = first + overhead_s(view) + steps * per_step / slower
    trainings.check(bench.numerics, record, on_run=lambda: live.save_numerics(check_id, record), deadline=deadline,
                    run_s=run_s)
    live.save_numerics(check_id, record)
    return NumericsReport(check_id, len(record["runs"]), clock.monotonic() - start, NU.judge(record))


def overhead_s(view: Any) -> float:
    """A process's time here beside its steps (its start, the workload's build, its exit): the longest the study's
    measured trials took (``overhead_s``: a GPU process's CUDA context takes seconds), else :data:`RUN_OVERHEAD_S`."""
    seen = [float(t.result.get("overhead_s") or 0.0) for t in view.trials if t.ok and t.result]
    return max(seen) if any(seen) else RUN_OVERHEAD_S


def _line(report: NumericsReport | None) -> str:
    return (f"; the numerics checked in {plural(report.runs, 'training run')} ({format_duration(report.wall_s)})"
            if report is not None else "")


#: The numerics check, as the tuning loop runs it, in the run's mode (off: nothing).
PHASE = Phase("numerics", "numerics", lambda ctx: run(ctx.live, ctx.bench, ctx.options.numerics, deadline=ctx.deadline),
              line=_line)
