"""Whether the recommendation still learns what the defaults learn: the numerics check's runs read into one answer.

A faster configuration changes how the model computes (bf16 or fp16 autocast, TF32, compiled kernels, a batch size
that changes BatchNorm's statistics, fused optimizer kernels). The check (:mod:`autotune.tuning.phases.numerics_check`
runs it, :mod:`autotune.trial.numerics_run` is one run) trains the defaults twice and the recommendation once, each in a
fresh process, from the same seeded weights on the same samples per optimizer step, and records per step the loss
and the gradients' norm, and at the end the weights. This module compares them:

- **the loss**: per step, ``|loss - defaults' loss| / |defaults' loss|``; the figure is its median over the second
  half of the steps (the first steps start from the same weights and say little);
- **the weights**: their distance to the defaults' final weights, as a share of how far the defaults' training moved
  them from the start;
- **the floor**: the same two figures for the defaults' second run: what nondeterminism alone changes (zero on a
  CPU, whose kernels are deterministic; not on a GPU with atomics in its kernels).

The numerics **hold** when the loss is within :data:`LOSS_TOLERANCE` (1%) and the weights within
:data:`WEIGHTS_TOLERANCE` (40% of the distance training moved them), or within :data:`FLOOR_TIMES` times the floor
where that is larger. Why these: a user reads a loss curve to 1% (a percent is what separates runs people call
different in a report), and the known-truth models of ``autotune/testing/known_numerics.py`` measured over 20 seeds
at 30 steps on this project's CPU (``python benchmarks/numerics_truth.py``,
benchmarks/results/numerics_truth-2026-11-27.txt)
put ordinary bf16 rounding of an MLP at 0.04-0.13% in the loss and 19-24% in the weights, a layer that needs more
mantissa than bf16 keeps at 5.7-10.9% in the loss, and a BatchNorm model at batch 32 instead of 128 at 0.40-1.12% in
the loss but 61-66% in the weights: the weights see a different training before the loss does. The weights are
measured against the training's own movement because AdamW's normalised steps move
every weight by about the learning rate whatever its gradient, so their absolute distance says nothing alone.

When the numerics differ, the knobs of the recommendation are reverted one at a time and each reverted configuration
checked; those whose revert makes the numerics hold are named as the cause. When the runs cannot be compared (the
factory gives different weights under the same seed, the data does not repeat, a run failed), the answer is "numerics
not checked" with the reason; never a "hold" that was not measured.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune.evidence.verdict import changes_text
from autotune.request import NUMERICS_MODES
from autotune.result import Outcome
from autotune.units import format_percent, plural

LOSS_TOLERANCE = 0.01
WEIGHTS_TOLERANCE = 0.40
FLOOR_TIMES = 3.0
MIN_STEPS = 30
MAX_STEPS = 100
COST_SHARE = 0.10  # the check sizes its steps to cost at most this share of the study's time (never below MIN_STEPS)

OFF, WARN, STRICT = NUMERICS_MODES
HOLD, DIFFER, NOT_CHECKED = "hold", "differ", "not_checked"

DEFAULTS, FLOOR, RECOMMENDATION, REVERT, CANDIDATE = "defaults", "floor", "recommendation", "revert:", "candidate:"
STRICT_CANDIDATES = 3  # --numerics strict: at most this many faster configurations checked after one that differs


@dataclass(frozen=True)
class Run:
    """One numerics run as stored (:class:`autotune.result.NumericsResult`'s figures, under a label: ``defaults``,
    ``floor`` (the defaults again), ``recommendation``, ``revert:<knob>``)."""

    label: str
    config: Mapping[str, Any]
    outcome: str
    losses: tuple[float, ...] = ()
    grad_norms: tuple[float, ...] = ()
    moved: float | None = None
    distance: float | None = None  # to the defaults' final weights
    initial_digest: str | None = None
    data_digest: str | None = None
    dropout_off: int = 0
    wall_s: float | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == Outcome.OK and bool(self.losses)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Run:
        err = d.get("error")
        return cls(str(d.get("label")), dict(d.get("config") or {}), str(d.get("outcome")),
                   tuple(float(x) for x in d.get("losses") or ()), tuple(float(x) for x in d.get("grad_norms") or ()),
                   d.get("moved"), (d.get("distances") or {}).get(DEFAULTS, d.get("distance")),
                   d.get("initial_digest"), d.get("data_digest"), int(d.get("dropout_off") or 0), d.get("wall_s"),
                   (err.get("message") if isinstance(err, Mapping) else err))


@dataclass(frozen=True)
class Gap:
    """How far one run is from the defaults' run: the loss (median relative difference over the second half of the
    steps, and its sign there), the gradients' norm (the same median) and the weights (distance over the movement)."""

    loss: float
    loss_signed: float
    grad_norm: float
    weights: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"loss": self.loss, "loss_signed": self.loss_signed, "grad_norm": self.grad_norm,
                "weights": self.weights}


def _second_half(a: Sequence[float], b: Sequence[float]) -> list[tuple[float, float]]:
    n = min(len(a), len(b))
    return list(zip(a[n // 2:n], b[n // 2:n]))


def gap(run: Run, defaults: Run) -> Gap:
    """How far ``run`` is from ``defaults`` (both ok)."""
    pairs = _second_half(run.losses, defaults.losses)
    rel = [(x - d) / abs(d) if d else (0.0 if x == d else math.inf) for x, d in pairs]
    grads = [abs(x - d) / abs(d) if d else 0.0 for x, d in _second_half(run.grad_norms, defaults.grad_norms)]
    weights = (run.distance / defaults.moved if run.distance is not None and defaults.moved else
               (0.0 if run.distance == 0 else None))
    return Gap(statistics.median(abs(r) for r in rel) if rel else 0.0, statistics.median(rel) if rel else 0.0,
               statistics.median(grads) if grads else 0.0, weights)


def within(g: Gap, floor: Gap) -> bool:
    """Whether a gap is within the tolerances (or a few times the floor, where that is larger)."""
    loss_ok = g.loss <= max(LOSS_TOLERANCE, FLOOR_TIMES * floor.loss)
    weights_ok = g.weights is None or g.weights <= max(WEIGHTS_TOLERANCE, FLOOR_TIMES * (floor.weights or 0.0))
    return loss_ok and weights_ok


def steps_for(study_s: float, step_s: float, overhead_s: float, runs: int = 3) -> int:
    """How many optimizer steps each run takes: as many as keep ``runs`` runs (each ``overhead_s`` to start, build and
    compile, plus its steps at ``step_s``) within :data:`COST_SHARE` of the study's time, from MIN_STEPS to
    MAX_STEPS."""
    if step_s <= 0:
        return MIN_STEPS
    budget = COST_SHARE * study_s / max(runs, 1) - overhead_s
    return int(min(MAX_STEPS, max(MIN_STEPS, math.floor(budget / step_s))))


@dataclass(frozen=True)
class Check:
    """The numerics check's answer about the recommendation (``number``, a trial): ``state`` hold, differ or
    not_checked, the gaps to the defaults and of the floor, the cause named by reverting knobs, the mode it ran in
    and what it cost."""

    state: str
    number: int | None
    mode: str
    steps: int = 0
    gap: Gap | None = None
    floor: Gap | None = None
    causes: tuple[str, ...] = ()
    reverted: Mapping[str, bool] = field(default_factory=dict)  # knob -> whether its revert holds
    unrun: Mapping[str, str] = field(default_factory=dict)  # knob -> why its revert could not run
    reason: str | None = None
    dropout_off: int = 0
    cost_s: float = 0.0
    changes: Mapping[str, Any] = field(default_factory=dict)
    curves: Mapping[str, Sequence[float]] = field(default_factory=dict)  # the loss per step, by run label
    samples_per_step: int | None = None
    seed: int = 0

    @property
    def holds(self) -> bool:
        return self.state == HOLD

    def text(self) -> str:
        """One line: "numerics hold: ...", "numerics differ: ...", or "numerics not checked: ..."."""
        if self.state == NOT_CHECKED or self.gap is None or self.floor is None:
            return f"numerics not checked: {self.reason or 'no check ran'}"
        g, f = self.gap, self.floor
        loss, floor = (format_percent(x, digits=None, none="?") for x in (g.loss, f.loss))
        weights = f", weights {format_percent(g.weights, digits=None, none='?')} apart" if g.weights is not None else ""
        off = f"; dropout off for the check ({plural(self.dropout_off, 'module')})" if self.dropout_off else ""
        if self.state == HOLD:
            return (f"numerics hold: loss within {loss} of the defaults over {self.steps} steps "
                    f"(floor {floor}){weights}{off}")
        side = "above" if g.loss_signed >= 0 else "below"
        cause = (changes_text({k: self.changes[k] for k in self.causes if k in self.changes}) if self.causes
                 else "no one knob alone: " + (changes_text(self.changes) if self.changes else "the configuration")
                 + "".join(f" ({k}'s revert could not run: {why})" for k, why in self.unrun.items()))
        return (f"numerics differ: loss {loss} {side} the defaults over steps {self.steps // 2 + 1}-{self.steps} "
                f"(floor {floor}){weights}: {cause}{off}")

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "number": self.number, "mode": self.mode, "steps": self.steps,
                "gap": self.gap.to_dict() if self.gap else None, "floor": self.floor.to_dict() if self.floor else None,
                "causes": list(self.causes), "reverted": dict(self.reverted), "unrun": dict(self.unrun),
                "reason": self.reason,
                "dropout_off": self.dropout_off, "cost_s": self.cost_s, "text": self.text(),
                "samples_per_step": self.samples_per_step, "seed": self.seed,
                "tolerance": {"loss": LOSS_TOLERANCE, "weights": WEIGHTS_TOLERANCE, "floor_times": FLOOR_TIMES},
                "curves": {k: list(v) for k, v in self.curves.items()}}


def unusable(defaults: Run | None, floor: Run | None, run: Run | None) -> str | None:
    """Why the runs cannot be compared, or None when they can."""
    for r, what in ((defaults, "the defaults' run"), (floor, "the defaults' second run"),
                    (run, "the recommendation's run")):
        if r is None:
            return f"{what} is missing"
        if not r.ok:
            return f"{what} ended {r.outcome}" + (f": {r.error}" if r.error else "")
    assert defaults is not None and floor is not None and run is not None
    if len({defaults.initial_digest, floor.initial_digest, run.initial_digest}) != 1:
        return "the model factory gives different initial weights under the same seed (it cannot be seeded)"
    if len({defaults.data_digest, floor.data_digest, run.data_digest}) != 1:
        return "the data does not repeat: two runs read different samples at the same positions"
    return None


def judge(record: Mapping[str, Any], candidate: int | None = None) -> Check:
    """The check's answer from its stored record (``numerics:<id>``: ``number``, ``mode``, ``steps``, ``changes``,
    ``runs``); with ``candidate``, the answer about that configuration's run (``candidate:<number>``, checked by
    ``--numerics strict`` after the recommendation's numerics differed) instead."""
    runs = {r.label: r for r in (Run.from_dict(d) for d in record.get("runs") or ())}
    number, mode, steps = record.get("number"), str(record.get("mode") or WARN), int(record.get("steps") or 0)
    changes = dict(record.get("changes") or {})
    if candidate is not None:
        label = f"{CANDIDATE}{candidate}"
        runs = {k: v for k, v in runs.items() if k in (DEFAULTS, FLOOR)} | (
            {RECOMMENDATION: runs[label]} if label in runs else {})
        number, changes = candidate, dict((record.get("candidates") or {}).get(str(candidate)) or {})
    cost = sum(float(r.wall_s or 0.0) for r in runs.values())
    curves = {label: r.losses for label, r in runs.items()}
    base = dict(number=number, mode=mode, steps=steps, cost_s=cost, changes=changes, curves=curves,
                samples_per_step=record.get("samples_per_step"), seed=int(record.get("seed") or 0))
    d, f, r = runs.get(DEFAULTS), runs.get(FLOOR), runs.get(RECOMMENDATION)
    why = unusable(d, f, r)
    if why is not None:
        if d is None or f is None or r is None:  # stopped before its three runs: by the deadline, or not over yet
            why = str(record.get("reason") or ("the check did not finish" if record.get("done") is False else why))
        return Check(NOT_CHECKED, reason=why, **base)  # type: ignore[arg-type]
    assert d is not None and f is not None and r is not None
    floor, g = gap(f, d), gap(r, d)
    holds = within(g, floor)
    reverted = {label[len(REVERT):]: within(gap(x, d), floor) for label, x in runs.items()
                if label.startswith(REVERT) and x.ok and x.initial_digest == d.initial_digest
                and x.data_digest == d.data_digest}
    causes = tuple(k for k, ok in reverted.items() if ok)
    unrun = {label[len(REVERT):]: x.error or x.outcome for label, x in runs.items()
             if label.startswith(REVERT) and not x.ok}
    return Check(HOLD if holds else DIFFER, gap=g, floor=floor, causes=() if holds else causes, reverted=reverted,
                 unrun={} if holds else unrun, dropout_off=r.dropout_off, **base)  # type: ignore[arg-type]
