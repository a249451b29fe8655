"""What a running study shows: a rich progress bar (on a terminal or in Jupyter) and one line per trial.

Shared by the command line (``autotune run``, ``autotune worker``) and the Python API
(:func:`autotune.tune`); it imports nothing of either.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from autotune import clock
from autotune import knobs
from autotune.store.records import Role
from autotune.units import clip, format_bytes, format_duration, format_rate


def _isatty() -> bool:
    try:
        return bool(sys.stdout.isatty())
    except (AttributeError, ValueError):  # a replaced or closed stdout
        return False


def _has_widgets() -> bool:
    """rich draws a live bar in Jupyter through ipywidgets; without them, the lines alone."""
    import importlib.util

    return importlib.util.find_spec("ipywidgets") is not None


def console() -> Any:
    """A rich Console: the terminal's width on a terminal, Jupyter's rendering in a notebook, 160 columns otherwise."""
    from rich.console import Console

    out = Console(highlight=False, soft_wrap=False)
    if not _isatty() and not out.is_jupyter:
        out.width = 160
    return out


def trial_line(rec: Any) -> str:
    """One finished trial (a :class:`autotune.tuning.loop.TrialRecord`) as a line."""
    from autotune.result import OK

    head = f"#{rec.number:<4} {rec.role:<8} "
    if rec.outcome == OK and rec.samples_per_s:
        speed = speedup_text(rec.speedup, rec.role)
        body = (f"{'ok':<8} {format_rate(rec.samples_per_s):>9} samples/s {format_bytes(rec.peak_memory_bytes):>10}  "
                f"{speed:<18}")
    else:
        body = f"{rec.outcome:<8} {clip(rec.error or '', 160, '...')}"
    tags = []
    if rec.duplicate_of is not None:
        tags.append(f"(already measured as #{rec.duplicate_of})")
    if rec.cut_short:
        tags.append("(cut short: dominated)")
    if rec.over_budget:
        tags.append("(over the --max-memory budget: not a candidate)")
    other = (getattr(rec, "load", None) or {}).get("other_cores")
    if other is not None:
        from autotune.machine.load import busy_threshold

        cores = rec.load.get("cores") or 1
        if other > busy_threshold(cores):
            tags.append(f"(busy machine: other processes used {other:.1f} of {cores} cores)")
    return f"{head}{body}  {knobs.short(rec.config)} {' '.join(tags)}".rstrip()


SLOW_TRIAL_S = 60.0  # a baseline trial longer than this gets advice with its estimate


def estimate_line(trial_s: float, rest_s: float) -> str:
    """What ``run`` says once the defaults are measured: their trial's time, and the rest of the study at that pace."""
    line = (f"the defaults took {format_duration(trial_s)} per trial here: the rest of the study (trials, noise floor, "
            f"race, claim) will take up to about {format_duration(rest_s)}")
    if trial_s > SLOW_TRIAL_S:
        line += "; to spend less, use --quick, a smaller model or batch, or --time-budget"
    return line


WIDE_INTERVAL = 4.0  # a trial line leaves out an interval whose ends are further apart than this factor


def speedup_text(speedup: Any, role: str = Role.SEARCH) -> str:
    """A trial line's ratio to the defaults: a single measurement as what it is (``1.23x, 1 run``), without the
    interval a claim would need (that comes from repeats: the noise floor and the race); an interval too wide to
    read (a few processes on a noisy machine: ``10.34x (0.09-1172.76)``) is left out the same way, saying why."""
    if speedup is None:
        return "-"
    if role == Role.BASELINE:
        return "1.00x (the defaults)"
    if speedup.processes <= 1:
        return f"{speedup.estimate:.2f}x, 1 run"
    if speedup.has_interval and speedup.low > 0 and speedup.high / speedup.low > WIDE_INTERVAL:
        return f"{speedup.estimate:.2f}x, {speedup.processes} runs (too noisy yet for an interval)"
    return speedup.text()


def _echo(line: str) -> None:
    import click

    click.echo(line)


class Progress:
    """A progress bar (on a terminal, or in Jupyter with ipywidgets) and one line per finished trial.

    Pass it as ``on_trial`` (and ``.repeat`` as ``on_repeat``) to :func:`autotune.tuning.preparation.prepare`.
    ``enabled=False`` shows nothing. Elsewhere (a pipe, a log file, pytest) there is no bar,
    only the lines.
    """

    def __init__(self, total: int, budget_s: float | None, done: int, *, enabled: bool = True,
                 echo: Callable[[str], None] | None = None) -> None:
        self.total = total
        self.budget_s = budget_s
        self.start = clock.monotonic()
        self.done = done
        self.enabled = enabled
        self.echo = echo or _echo
        self.console: Any = None
        self.bar: Any = None
        self.task: Any = None
        if not enabled:
            return
        self.console = console()
        if _isatty() or (self.console.is_jupyter and _has_widgets()):
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            try:
                self.bar = RichProgress(
                    TextColumn("[bold]trials"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.fields[info]}"), console=self.console, transient=True,
                )
                self.task = self.bar.add_task("trials", total=total, completed=done, info="")
                self.bar.start()
            except Exception:  # noqa: BLE001 - a display that cannot draw a bar still gets the lines
                self.bar = None

    def info(self) -> str:
        parts = []
        if self.budget_s is not None:
            left = max(0.0, self.budget_s - (clock.monotonic() - self.start))
            parts.append(f"budget left {format_duration(left)}")
        return ", ".join(parts)

    def print(self, line: str) -> None:
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.console.print(line, markup=False, highlight=False)
        else:
            self.echo(line)

    def __call__(self, rec: Any) -> None:
        if rec.duplicate_of is None:
            self.done += 1
        self.print(trial_line(rec))
        if getattr(rec, "note", None):
            self.print(rec.note)
        if getattr(rec, "estimate_s", None) is not None:
            self.print(estimate_line(rec.duration_s, rec.estimate_s))
        if self.bar is not None:
            self.bar.update(self.task, completed=min(self.done, self.total), info=self.info())

    def repeat(self, what: str, number: int, rate: float | None, shared: bool = False) -> None:
        """A re-measurement (``what``: the noise floor's, a round of the final race; ``shared``: alternately with others
        in one process, :mod:`autotune.trial.paired`)."""
        again = f"{format_rate(rate)} samples/s" if rate is not None else "failed"
        label = what
        if number < 0:  # a configuration of the ablation's path that is no trial of the study
            self.print(f"{label}: {again}")
        elif shared:
            self.print(f"{label}: #{number} {again}")
        else:
            self.print(f"{label}: #{number} measured again in a new process: {again}")
        if self.bar is not None:
            self.bar.update(self.task, info=", ".join(p for p in (label, self.info()) if p))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
