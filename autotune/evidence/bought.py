"""What each knob bought: from PyTorch's defaults to the winner, one knob at a time, each step measured.

Users ask "which of these changes matters?" before they touch their training script.
After the race settles a winner that changes several knobs, the study measures the path
from the defaults to it: the knobs the winner changes are added one at a time, in the
order of their effect as the search measured it (:func:`order`), and every point of that
path is measured alternately in one process (:mod:`autotune.trial.paired`), in a few processes,
so that each step's speed-up has the small noise of a ratio inside one process. Knobs
that need a process of their own (threads, loader workers: ``Knob.in_process``) cannot
share those processes; they form the last step, measured between processes (the winner's
own claim against the path's last point).

When the defaults themselves cannot share a process with the path (the host heap at
glibc's default carries one arm into the next: :mod:`autotune.machine.heap`), the winner's
process-wide knobs come *first* instead (``apart_first``): the path starts from the
defaults with them, so every process of it may be shared, and their own step, from the
defaults to that start, is measured between processes (the winner's claim over the winner
against the start, in the path's processes), in :data:`ROUNDS_ALONE` processes.

A step that buys nothing beyond the noise is dropped from the recommendation: the
recommendation is the shortest start of the path that keeps the gain (its speed-up not
below the whole path's beyond the noise, and above the defaults'). A knob that bought
nothing but stands before one that paid cannot be left out of a start of the path: then
the path is measured once more, what paid first (:func:`reordered`). When the
recommendation is not the winner itself, the study measures it once more as a trial of
its own (its memory, a trial number every view can show), and the verdict names it.

This module is the pure part (planning the path, reading the steps from the measured
processes); :mod:`autotune.tuning.phases.bought` measures them and :mod:`autotune.evidence` reports them.
Nothing here imports torch or Optuna.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

from autotune import knobs
from autotune.evidence import stats
from autotune.evidence.stats import Measurement, Noise, Ratio

ABLATION = "ablation:"  # the study attribute of an ablation's plan: ablation:<id>
# processes that each measure the whole path (two give the within-process noise its first degrees of freedom)
ROUNDS = 2
# ... when the path's processes are the study's only shared ones (its process-wide knobs first: the race shared none)
ROUNDS_ALONE = 3


def order(changes: Mapping[str, Any], measured: Sequence[tuple[Mapping[str, Any], float]]) -> list[str]:
    """The knobs of ``changes`` in the order of their effect as the search measured it, largest first.

    A main-effects fit of log(samples/s) over the study's measured configurations
    (``measured``: (configuration, samples/s)), one indicator per knob: "has the winner's
    value". Ridge-regularised, so a knob the search hardly varied gets an effect near 0; ties
    (and a study too small to fit) keep the registry's order. Only the order comes from here:
    every step's figure is measured again, paired.
    """
    names = [k for k in knobs.NAMES if k in changes]
    rows = [(config, rate) for config, rate in measured if rate and rate > 0]
    if len(names) < 2 or len(rows) < 3:
        return names
    import numpy as np

    x = np.array([[1.0 if config.get(k) == changes[k] else 0.0 for k in names] for config, _ in rows])
    y = np.log(np.array([rate for _, rate in rows]))
    x = np.hstack([np.ones((len(rows), 1)), x])
    ridge = 1e-3 * np.eye(x.shape[1])
    ridge[0, 0] = 0.0
    beta = np.linalg.solve(x.T @ x + ridge, x.T @ y)[1:]
    rank = {k: i for i, k in enumerate(names)}
    return sorted(names, key=lambda k: (-round(float(beta[rank[k]]), 6), rank[k]))


def path(base: Mapping[str, Any], changes: Mapping[str, Any], ordered: Sequence[str]) -> list[dict[str, Any]]:
    """The configurations from ``base`` adding ``changes`` one knob at a time in ``ordered`` order (base first)."""
    points = [dict(base)]
    for name in ordered:
        points.append({**points[-1], name: changes[name]})
    return points


def reordered(ab: "Ablation") -> list[str] | None:
    """The path's knobs again, those that paid first (largest first) and those that bought nothing last, when a
    step that bought nothing stands before one that paid; None otherwise.

    The recommendation is a start of the path, so a knob that bought nothing but was added before one that paid
    cannot be left out of it (the search's order of effects was wrong, or the knobs interact). Measuring the path
    once more in this order lets the shortest start that keeps the gain leave it out.
    """
    inside = [s for s in ab.steps if s.within_process]
    pays = [s.pays for s in inside]
    if not any(not p and any(pays[i + 1:]) for i, p in enumerate(pays)):
        return None
    paid = sorted((s for s in inside if s.pays), key=lambda s: -s.bought.estimate)
    return [name for s in paid + [s for s in inside if not s.pays] for name in s.added]


@dataclass(frozen=True)
class Step:
    """One step of the path: what it added, where it got (speed-up over the defaults) and what it bought."""

    added: dict[str, Any]
    key: str
    speedup: Ratio  # this point over the defaults
    bought: Ratio  # this point over the previous one
    within_process: bool  # measured alternately in one process (else: between processes)
    kept: bool = True  # part of the recommendation

    @property
    def pays(self) -> bool:
        return self.bought.above_one()

    @property
    def why_left(self) -> str | None:
        """Why a step is left out of the recommendation, as its figure says it (None: kept)."""
        if self.kept:
            return None
        return "slower beyond the noise" if self.bought.below_one() else "bought nothing beyond the noise"

    def label(self) -> str:
        return " ".join(f"{k}={knobs.KNOBS[k].format(v)}" for k, v in self.added.items() if k in knobs.KNOBS)

    def to_dict(self) -> dict[str, Any]:
        return {"added": dict(self.added), "label": self.label(), "speedup": self.speedup.to_dict(),
                "bought": self.bought.to_dict(), "pays": self.pays, "kept": self.kept, "why_left": self.why_left,
                "within_process": self.within_process}


@dataclass(frozen=True)
class Ablation:
    """The measured path from the defaults to a winner, and the smallest configuration that keeps its gain."""

    ablation_id: str
    winner: int
    steps: tuple[Step, ...]
    minimal_key: str | None  # the recommendation's configuration (None: the path did not confirm a gain)
    minimal: int | None = None  # its trial, once measured on its own
    dropped: dict[str, Any] = field(default_factory=dict)  # knobs of the winner that bought nothing and were left out
    processes: int = 0

    @property
    def settled(self) -> bool:
        return self.minimal_key is not None

    def lines(self) -> list[str]:
        """What each knob bought, one line a step, as the run's closing lines and ``status`` show it."""
        out = []
        for s in self.steps:
            where = "in one process" if s.within_process else "between processes"
            note = "" if s.kept else f"  (left out: {s.why_left})"
            out.append(f"+ {s.label():<40} {s.bought.text():<20} -> {s.speedup.text():<20} ({where}){note}")
        return out

    def text(self) -> str:
        bought = ", ".join(f"{s.label()} {s.bought.text()}" for s in self.steps)
        out = f"what each knob bought, from the defaults: {bought}"
        if self.dropped:
            slower = any(not s.kept and s.bought.below_one() for s in self.steps)
            out += (f"; left out, as they {'were slower beyond' if slower else 'bought nothing beyond'} the noise: "
                    + " ".join(f"{k}={knobs.KNOBS[k].format(v)}" for k, v in self.dropped.items() if k in knobs.KNOBS))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.ablation_id, "winner": self.winner, "steps": [s.to_dict() for s in self.steps],
                "minimal": self.minimal, "minimal_key": self.minimal_key, "dropped": dict(self.dropped),
                "processes": self.processes, "text": self.text()}


def analyse(
    ablation_id: str,
    plan: Mapping[str, Any],
    rounds: Mapping[str, Sequence[Measurement]],
    noise: Noise,
    winner_speedup: Ratio | None,
    trial_of: Callable[[str], int | None],
    processes: int,
) -> Ablation | None:
    """Read an ablation's steps from its measurements.

    ``plan``: the stored ``ablation:<id>`` record (``winner``, ``path``: [{key, config, added}],
    ``apart``: the winner's knobs that need a process of their own). ``rounds``: config key ->
    the within-process measurements of that configuration (round, samples/s) from every process
    of the study. ``noise``: the within-process noise. ``winner_speedup``: the winner's own claim
    (for the last, between-process step). ``trial_of(key)``: the measured trial of a configuration.
    None until every point of the path has a measurement.
    """
    points = list(plan.get("path") or [])
    if len(points) < 1 or any(not rounds.get(p["key"]) for p in points):
        return None
    apart = dict(plan.get("apart") or {})
    count = len(points) - 1 + (1 if apart else 0)  # the steps compared: each interval is adjusted for them all
    if plan.get("apart_first"):
        return _apart_first(ablation_id, plan, points, apart, count, rounds, noise, winner_speedup, trial_of, processes)
    steps: list[Step] = []
    base_key = points[0]["key"]
    for prev, point in zip(points, points[1:]):
        try:
            cum = stats.ratio_within(rounds[point["key"]], rounds[base_key], noise, count)
            bought = stats.ratio_within(rounds[point["key"]], rounds[prev["key"]], noise, count)
        except ValueError:  # never measured in one process together
            return None
        steps.append(Step(dict(point.get("added") or {}), point["key"], cum, bought, True))
    end = len(steps)  # the path's last point measured in one process
    if apart and winner_speedup is not None:
        last = steps[-1].speedup if steps else Ratio(1.0, 1.0, 1.0)
        bought = stats.combined(winner_speedup, last)
        steps.append(Step(apart, str(plan.get("winner_key") or ""), winner_speedup, bought, False))
    # The recommendation: the end of the path, less what bought nothing beyond the noise.
    if apart and steps and steps[-1].pays:
        minimal_index = len(steps)  # the knobs that need a process of their own pay: the winner itself
    else:
        target = points[end]["key"]
        minimal_index = None
        for j in range(1, end + 1):
            key = points[j]["key"]
            if not steps[j - 1].speedup.above_one():
                continue
            if key == target or not stats.ratio_within(rounds[key], rounds[target], noise, count).below_one():
                minimal_index = j
                break
        if minimal_index is None:
            return Ablation(ablation_id, int(plan["winner"]), tuple(steps), None, None, {}, processes)
    kept_steps = tuple(
        Step(s.added, s.key, s.speedup, s.bought, s.within_process, kept=i < minimal_index) for i, s in enumerate(steps)
    )
    dropped: dict[str, Any] = {}
    for s in kept_steps:
        if not s.kept:
            dropped.update(s.added)
    minimal_key = str(plan.get("winner_key")) if minimal_index == len(steps) and apart else points[minimal_index]["key"]
    return Ablation(ablation_id, int(plan["winner"]), kept_steps, minimal_key, trial_of(minimal_key), dropped,
                    processes)


def _apart_first(ablation_id: str, plan: Mapping[str, Any], points: Sequence[Mapping[str, Any]], apart: dict[str, Any],
                 count: int, rounds: Mapping[str, Sequence[Measurement]], noise: Noise, winner_speedup: Ratio | None,
                 trial_of: Callable[[str], int | None], processes: int) -> Ablation | None:
    """A path whose process-wide knobs come first (``apart_first``: the defaults' own process could not share,
    e.g. the host heap at its default): its first step, the defaults to the path's first point, is measured between
    processes (the winner's claim over the winner against that point in the path's processes); every later point's
    speed-up over the defaults is the winner's claim over the winner against it, and what it bought is measured in
    one process against the point before. The path's last point is the winner."""
    if winner_speedup is None:
        return None
    last = points[-1]["key"]
    try:
        def over_defaults(key: str) -> Ratio:
            return winner_speedup if key == last else stats.combined(
                winner_speedup, stats.ratio_within(rounds[last], rounds[key], noise, count))

        first = over_defaults(points[0]["key"])
        steps = [Step(apart, points[0]["key"], first, first, False)]
        for prev, point in zip(points, points[1:]):
            bought = stats.ratio_within(rounds[point["key"]], rounds[prev["key"]], noise, count)
            steps.append(Step(dict(point.get("added") or {}), point["key"], over_defaults(point["key"]), bought, True))
    except ValueError:  # never measured in one process together
        return None
    # The recommendation: the shortest start of the path (the process-wide knobs always in it) above the defaults and
    # not below the winner beyond the noise.
    minimal_index = None
    for j, point in enumerate(points):
        if not steps[j].speedup.above_one():
            continue
        if point["key"] == last or not stats.ratio_within(rounds[point["key"]], rounds[last], noise, count).below_one():
            minimal_index = j
            break
    if minimal_index is None:
        return Ablation(ablation_id, int(plan["winner"]), tuple(steps), None, None, {}, processes)
    kept = tuple(Step(s.added, s.key, s.speedup, s.bought, s.within_process, kept=i <= minimal_index)
                 for i, s in enumerate(steps))
    dropped = {k: v for s in kept if not s.kept for k, v in s.added.items()}
    key = points[minimal_index]["key"]
    return Ablation(ablation_id, int(plan["winner"]), kept, key, trial_of(key), dropped, processes)


def as_recommended(ab: Ablation, reverted: Mapping[str, Any]) -> Ablation:
    """The path as the recommendation settled it: once the claim's rounds decided which of the winner's knobs go
    back to the user's setting (``reverted``), a step is kept when its knobs are all in the recommendation, and the
    knobs left out are those reverted. The path's own judgement proposed the least change; the claim measured it,
    and every view shows one answer (a step marked kept whose knob the verdict left out would be two)."""
    steps = tuple(replace(s, kept=not any(k in reverted for k in s.added)) for s in ab.steps)
    dropped = {k: v for s in steps if not s.kept for k, v in s.added.items()}
    return replace(ab, steps=steps, dropped=dropped)
