"""What each knob bought: the path from PyTorch's defaults to the race's winner, one knob at a time, each step measured.

Only for a winner that beats the defaults and changes several knobs, some of which can share
a process (:func:`autotune.knobs.per_arm`): every point of the path is measured alternately
in each of a few shared processes (``bench.ablate``), so each step's speed-up has the small
noise of a ratio inside one process; the knobs that cannot share one are the path's last step
(or, where the defaults' host heap keeps history, its first: ``apart_first``). The plan is a
record of its own (``ablation:<id>``), each of its processes another (``paired:abl-<id>-<k>``),
so a run stopped half-way resumes. The pure part (the order, the path, reading the steps) is
:mod:`autotune.evidence.bought`; the evidence reports it; the recommendation it leads to is measured
on its own by :mod:`autotune.tuning.phases.minimal`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from autotune import clock
from autotune.store.plans import RoundId
from autotune.evidence import bought as A
from autotune import knobs
from autotune.evidence import Evidence, evidence_of
from autotune.tuning.phases.bench import Bench
from autotune.tuning.phases.sharing import owned_elsewhere
from autotune.tuning.phases.phase import Phase
from autotune.units import plural
from autotune.tuning.phases.session import fits, process_s
from autotune.store import LiveStudy
from autotune.store.writing import owner


@dataclass
class AblationReport:
    """What this run measured of a path: its plan (``ablation_id``), the winner, the knobs in their order."""

    ablation_id: str
    winner: int
    path: list[str]  # the knobs, in the order they were added
    processes: int = 0  # processes this run started (each measured the whole path)
    stopped: str = ""


def run(live: LiveStudy, bench: Bench, ctx: knobs.Context, rounds: int = A.ROUNDS,
        deadline: float | None = None) -> AblationReport | None:
    """Measure what each knob of the race's winner bought (see the module's docstring): the path from the
    defaults to the winner, one knob at a time, every point of it in each of ``rounds`` shared processes
    (``bench.ablate``; without it, nothing). Resumes an unfinished path of the same winner; does nothing once it
    is done. ``deadline`` (epoch seconds): no process starts after it.
    """
    if bench.ablate is None:
        return None
    view = live.view()
    ev = evidence_of(view)
    chosen = ev.chosen()
    if chosen is None or ev.baseline is None:
        return None
    winner = ev.configs[chosen]
    inside, apart = knobs.per_arm(winner.changes)
    if len(winner.changes) < 2 or not inside:
        return None
    base = ev.baseline.config
    if knobs.apart([base, {**base, **inside}]) is None:
        first = False  # the path from the defaults shares processes; the process-wide knobs are its last step
    elif apart and knobs.apart([{**base, **apart}, {**base, **apart, **inside}]) is None:
        first = True  # only with the winner's process-wide knobs (the host heap retained): they are its first step
        rounds = max(rounds, A.ROUNDS_ALONE)
    else:
        return None
    plans = [(i, p) for i, p in view.ablation_plans() if p.get("winner_key") == winner.key]  # oldest first
    report: AblationReport | None = None
    if plans:
        ablation_id, plan = plans[-1]
        if owned_elsewhere(live, plan.get("owner") or {}) and not plan.get("done"):
            return None
        if not plan.get("done"):
            report = _measure_path(live, bench, ablation_id, plan, ev, winner.number, rounds, deadline)
    else:
        ordered = A.order(inside, [(c.config, c.samples_per_s) for c in ev.configs.values()])
        ablation_id, plan = _plan(live, ev, winner, inside, apart, ordered, ctx, rounds, apart_first=first)
        report = _measure_path(live, bench, ablation_id, plan, ev, winner.number, rounds, deadline)
    spent = not fits(deadline)
    if (report is None or report.stopped == "done") and not plan.get("reordered_from") and not spent:
        # once, for a path that could not leave out a knob that bought nothing: measured again, what paid first
        ab = evidence_of(live.view()).ablation()
        again = A.reordered(ab) if ab is not None and ab.ablation_id == ablation_id else None
        if again is not None:
            new_id, new_plan = _plan(live, ev, winner, inside, apart, again, ctx, rounds, reordered_from=ablation_id,
                                     apart_first=bool(plan.get("apart_first")))
            more = _measure_path(live, bench, new_id, new_plan, evidence_of(live.view()), winner.number, rounds,
                                 deadline)
            if report is not None:
                more.processes += report.processes
            report = more
    return report


def _plan(live: LiveStudy, ev: Evidence, winner: Any, inside: Mapping[str, Any], apart: Mapping[str, Any],
          ordered: Sequence[str], ctx: knobs.Context, rounds: int, **extra: Any) -> tuple[str, dict[str, Any]]:
    """A new ablation's plan, stored: the path from the defaults adding ``inside``'s knobs in ``ordered`` order
    (with ``apart_first``, from the defaults with the winner's process-wide knobs)."""
    base = ev.baseline.config if not extra.get("apart_first") else {**ev.baseline.config, **apart}  # type: ignore[union-attr]
    points = A.path(base, inside, ordered)
    ablation_id = uuid.uuid4().hex[:8]
    plan = {
        "winner": winner.number, "winner_key": winner.key,
        "path": [{"key": knobs.resolve(p, ctx).key(), "config": p, "added": {n: inside[n]} if i else {}}
                 for i, (n, p) in enumerate(zip([None, *ordered], points))],
        "apart": dict(apart), "order": list(ordered), "rounds": rounds, "started": clock.now(), "done": False,
        "owner": owner(), **extra,
    }
    live.save_ablation_plan(ablation_id, plan)
    return ablation_id, plan


def _measure_path(live: LiveStudy, bench: Bench, ablation_id: str, plan: Mapping[str, Any], ev: Evidence,
                  winner: int, rounds: int, deadline: float | None) -> AblationReport:
    """Measure an ablation's path in each of ``rounds`` shared processes (resuming those already stored)."""
    keys = [p["key"] for p in plan["path"]]
    configs = [p["config"] for p in plan["path"]]
    report = AblationReport(ablation_id, winner, list(plan.get("order") or []))
    done = live.records().rounds_done(RoundId.prefix(RoundId.ABLATION, ablation_id))
    for k in range(done, rounds):
        if not fits(deadline, process_s(live.view(), [ev.trial_of.get(key) for key in keys])):
            report.stopped = "time budget spent (--time-budget)"
            break
        rates, _ = bench.shared(live, RoundId(RoundId.ABLATION, ablation_id, k + 1).format(), keys,
                                [ev.trial_of.get(key) for key in keys], configs, ablation=ablation_id)
        report.processes += 1
        for point, rate in zip(plan["path"], rates):
            added = " ".join(f"{n}={knobs.KNOBS[n].format(v)}" for n, v in point["added"].items()) or "the defaults"
            bench.told(f"what each knob bought, process {k + 1} of {rounds}, in one process: +{added}", -1, rate,
                       shared=True)
    else:
        report.stopped = "done"
        live.save_ablation_plan(ablation_id, {**plan, "done": True})
    return report


def _line(report: AblationReport | None) -> str:
    return f"; each knob's step measured in {plural(report.processes, 'shared process')}" if report is not None else ""


#: What each knob bought, as the tuning loop runs it: when the bench can measure several configurations in one process.
PHASE = Phase("ablation", "race", lambda ctx: run(ctx.live, ctx.bench, ctx.search.seeds.ctx, deadline=ctx.deadline),
              wanted=lambda ctx: ctx.bench.ablate is not None, line=_line)
