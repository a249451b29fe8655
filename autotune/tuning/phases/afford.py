"""What the search can afford in the time it has left: a configuration's trial, predicted from the trials seen.

A time budget is only kept if no trial starts that will outlast it. Most trials take about as long as the defaults'
(their windows are timed, not counted), but a compiled configuration's first step holds its compilation, and that is
where a budget goes: on an H200 a GPT-2-shaped model's ``compile=default`` took 6-33 s, its ``max-autotune`` had not
finished after 188 s. So a trial is predicted as the defaults' trial without its first step, plus the first step its
compile mode is expected to take: the longest seen for that mode here; else a multiple of ``default``'s seen here
(:data:`FACTORS`: ``max-autotune`` benchmarks kernel choices on top of what ``default`` compiles); before any
compiled configuration ran here, :data:`PRIOR_S`, a table by mode of what the GPU runs measured on a fresh machine.
A compiled configuration is started only when what is left holds that prediction (the recipe's included): started
on a hope, a compilation would burn the rest of the search's time and be stopped at its end with nothing learned.

The search asks :func:`why_not` before it starts a trial (a configuration that would not fit is recorded as
skipped, with the reason, never as a failure) and :func:`cheaper` to move a sampler's proposal to the nearest compile
mode that fits. Pure computation over the study's trials.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from autotune import knobs
from autotune.knobs import registry
from autotune import result as R
from autotune.store import StoredTrial
from autotune.store.records import Role
from autotune.units import format_duration

COMPILE = registry.COMPILE.name
#: A compile mode's first step as a multiple of ``default``'s (the modes the registry knows; others: ``default``'s).
FACTORS = {"default": 1.0, "reduce-overhead": 1.5, "max-autotune-no-cudagraphs": 8.0, "max-autotune": 10.0}
#: A compile mode's first step before any compiled configuration was measured here: the GPU runs' figures on a fresh
#: machine (an H200's LM: default 33 s with a cold inductor cache; an H100's cnn: reduce-overhead 1.25x default's;
#: max-autotune past 125 s on the cnn and 188 s on the LM), rounded up.
PRIOR_S = {"default": 30.0, "reduce-overhead": 40.0, "max-autotune-no-cudagraphs": 150.0, "max-autotune": 190.0}
#: Cheapest first: where a proposal's mode does not fit, the next cheaper one is tried.
BY_COST = ("off", "default", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")


def _mode(config: Mapping[str, Any]) -> str:
    return str(config.get(COMPILE) or "off")


def first_step_s(trials: Sequence[StoredTrial], mode: str) -> tuple[float | None, str]:
    """The first step (the compilation) a trial of ``mode`` is expected to take here, and where that figure comes
    from, in words (None: not predicted yet, with why)."""
    seen = _seen(trials, mode)
    if seen is not None:
        return seen, f"seen here for compile={mode}"
    if mode == "off":
        return None, "no trial measured yet"
    default = _seen(trials, "default")
    factor = FACTORS.get(mode, 1.0)
    if default is not None:
        return default * factor, f"{factor:g}x compile=default's {format_duration(default)} here"
    prior = PRIOR_S.get(mode, PRIOR_S["default"] * factor)
    return prior, f"compile={mode}'s first step is about {format_duration(prior)} before one is seen here"


def _seen(trials: Sequence[StoredTrial], mode: str) -> float | None:
    """The longest first step measured here for ``mode`` (a trial stopped in its first step counts what it ran)."""
    seen: list[float] = []
    stopped: list[float] = []  # stopped in their first step: it takes at least that long
    for t in trials:
        if t.duplicate_of is not None or not t.measured or _mode(t.config) != mode:
            continue
        first = t.result.get("time_to_first_step_s")
        if t.outcome == R.OK and first:
            seen.append(float(first))
        elif t.outcome in (R.SLOWER, R.TIMEOUT) and t.duration_s and t.result.get("time_to_first_step_s") is None:
            stopped.append(float(t.duration_s))
    return max(seen + stopped) if seen or stopped else None


def trial_s(trials: Sequence[StoredTrial], config: Mapping[str, Any]) -> tuple[float | None, str]:
    """The wall time a trial of ``config`` is expected to take here (None: not predicted, with why): the defaults'
    trial without its first step, plus the first step ``config``'s compile mode is expected to take. (0, "") before
    the defaults' trial is measured: nothing to predict from."""
    base = next((t for t in trials if t.role == Role.BASELINE and t.ok and t.duplicate_of is None and t.duration_s),
                None)
    if base is None:
        return 0.0, ""
    whole = float(base.duration_s or 0.0)
    mode = _mode(config)
    if mode == "off" or not knobs.compiles(config):
        return whole, "the defaults' trial"
    first, why = first_step_s(trials, mode)
    if first is None:
        return None, why
    steady = max(0.0, whole - float(base.result.get("time_to_first_step_s") or 0.0))
    return steady + first, why


def why_not(trials: Sequence[StoredTrial], config: Mapping[str, Any], left_s: float | None,
            compile_limit_s: float | None = None) -> str | None:
    """Why a trial of ``config`` is not started with ``left_s`` seconds left of the search's time (None: it may be):
    its first step is not predicted yet (``max-autotune`` before ``default`` compiled), or the prediction is longer
    than what is left, or than the compile limit (it would be stopped there as slower)."""
    if left_s is None and compile_limit_s is None:
        return None
    expected, basis = trial_s(trials, config)
    mode = _mode(config)
    if expected is None:
        return basis if left_s is not None else None
    if compile_limit_s is not None and mode != "off" and knobs.compiles(config):
        first, _ = first_step_s(trials, mode)
        if first is not None and first > compile_limit_s and basis != f"seen here for compile={mode}":
            return (f"compile={mode}: its first step (the compilation) is predicted to take about "
                    f"{format_duration(first)} ({basis}), past the {format_duration(compile_limit_s)} compile limit")
    if left_s is not None and expected > left_s:
        what = (f"compile={mode}: its first step (the compilation) included, a trial is predicted to take about "
                f"{format_duration(expected)} ({basis})" if mode != "off" and knobs.compiles(config)
                else f"a trial is predicted to take about {format_duration(expected)} ({basis})")
        return f"{what}, more than the {format_duration(max(0.0, left_s))} left of the search's time"
    return None


def cheaper(trials: Sequence[StoredTrial], params: Mapping[str, Any], fits: Callable[[Mapping[str, Any]], bool]
            ) -> dict[str, Any] | None:
    """``params`` with its compile mode moved to the most expensive cheaper mode for which ``fits(params)`` holds
    (None: it fits as it is, has no compile mode, or no cheaper mode fits either)."""
    mode = params.get(COMPILE)
    if mode is None or fits(params):
        return None
    order = [m for m in BY_COST if m in BY_COST[:BY_COST.index(mode)]] if mode in BY_COST else list(BY_COST[:2])
    for other in reversed(order):
        moved = {**params, COMPILE: other}
        if fits(moved):
            return moved
    return None
