"""The speed the user's own training reaches, said once, beside what the study measured for the configuration.

A claim is about the user's training, not about the minute a trial measured it: their data pipeline, their sequence
lengths, their neighbours on the machine may differ. So wherever an exported configuration runs (the step that
``load_config(...).apply`` returns, and the Hugging Face and Lightning callbacks an export passes its figures to), a
:class:`Meter` times the training's own steps once they are warm and says one line, once::

    autotune: 412 samples/s in this training; the study measured 398 for this configuration here (2.9x the defaults,
    claimed 2.7-3.1x)

When the training runs below what the claim's interval implies for it (the study's figure times low/estimate), the
line names the cause the study knows how to see: the steps waited on data (the time between one step's end and the
next one's start, the loader's and the user's own code), or other processes used the machine
(:class:`autotune.machine.load.Meter`). The figure stays on the meter (:attr:`Meter.samples_per_s`) for the
trainer's own logs. The window: after :data:`WARMUP_STEPS` steps and :data:`WARMUP_S` seconds (compilation, the
allocator, the loader's first batches), then :data:`WINDOW_STEPS` steps and :data:`WINDOW_S` seconds; a CUDA device
is synchronised at the window's two ends only.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

WARMUP_STEPS, WARMUP_S = 10, 5.0
WINDOW_STEPS, WINDOW_S = 20, 10.0
DATA_SHARE = 0.10  # the steps waited on data this share of the window or more: named as the cause
BUSY_SHARE = 0.25  # other processes used this share of the cores or more: named as the cause


@dataclass(frozen=True)
class Expected:
    """What the study measured for the configuration: its samples/s and its speed-up claim over the defaults
    (``estimate``, ``low``, ``high``), from an export (:mod:`autotune.export.document`)."""

    samples_per_s: float | None = None
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    where: str = "here"

    @classmethod
    def of(cls, doc: Mapping[str, Any] | None, same_machine: bool = True) -> Expected | None:
        """From an export's document (None when it carries no figure); ``same_machine``: this machine is the one
        the study measured on (the line then says "here")."""
        if not doc:
            return None
        measured = (doc.get("measured") or {}).get("samples_per_s")
        speedup = doc.get("speedup") or {}
        if not measured:
            return None
        return cls(float(measured), speedup.get("estimate"), speedup.get("low"), speedup.get("high"),
                   "here" if same_machine else "on the study's machine")

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def floor(self) -> float | None:
        """The samples/s the claim's lower end implies for this configuration."""
        if not self.samples_per_s or not self.low or not self.estimate:
            return None
        return self.samples_per_s * self.low / self.estimate


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Meter:
    """Times a training's steps (:meth:`begin` and :meth:`end` around each, with its samples) and says one line
    once the window is over (``say``: default, standard error). ``sync``: waits for the device at the window's ends.
    ``warmup`` and ``window``: (steps, seconds), both to be reached (default: the module's); ``clock``: seconds."""

    def __init__(self, expected: Expected | None = None, *, say: Callable[[str], Any] | None = None,
                 sync: Callable[[], Any] | None = None, warmup: tuple[int, float] | None = None,
                 window: tuple[int, float] | None = None, clock: Callable[[], float] = time.perf_counter) -> None:
        self.expected = expected
        self.clock = clock
        self.warmup = warmup or (WARMUP_STEPS, WARMUP_S)
        self.window_size = window or (WINDOW_STEPS, WINDOW_S)
        self.say = say or _stderr
        self.sync = sync
        self.steps = 0
        self.started: float | None = None
        self.last_end: float | None = None
        self.window: dict[str, Any] | None = None
        self.samples_per_s: float | None = None
        self.line: str | None = None
        self._load: Any = None

    @property
    def done(self) -> bool:
        return self.line is not None

    def begin(self) -> None:
        if self.done:
            return
        now = self.clock()
        if self.started is None:
            self.started = now
        if self.window is not None and self.last_end is not None:
            self.window["data_s"] += now - self.last_end

    def end(self, samples: int) -> None:
        if self.done:
            return
        now = self.clock()
        self.steps += 1
        if self.window is None:
            if self.steps >= self.warmup[0] and now - (self.started or now) >= self.warmup[1]:
                self._open()
        else:
            self.window["steps"] += 1
            self.window["samples"] += int(samples)
            if (self.window["steps"] >= self.window_size[0]
                    and self.clock() - self.window["t0"] >= self.window_size[1]):
                self._close()
        self.last_end = self.clock()

    def _open(self) -> None:
        from autotune.machine.load import Meter as LoadMeter

        if self.sync is not None:
            self.sync()
        self._load = LoadMeter().start()
        self.window = {"t0": self.clock(), "steps": 0, "samples": 0, "data_s": 0.0}

    def _close(self) -> None:
        assert self.window is not None
        if self.sync is not None:
            self.sync()
        wall = self.clock() - self.window["t0"]
        load = self._load.stop() if self._load is not None else {}
        self.samples_per_s = self.window["samples"] / wall if wall > 0 else None
        self.line = self.text(self.samples_per_s or 0.0, self.window["data_s"] / wall if wall > 0 else 0.0,
                              float(load.get("other_cores") or 0.0), int(load.get("cores") or 1))
        self.say(self.line)

    def text(self, rate: float, data_share: float, other_cores: float, cores: int) -> str:
        """The line: this training's samples/s, the study's for the configuration, and, below the claim, why."""
        from autotune.units import format_rate

        out = f"autotune: {format_rate(rate)} samples/s in this training"
        e = self.expected
        if e is None or not e.samples_per_s:
            return out
        claim = ""
        if e.estimate:
            claim = f" ({e.estimate:.2f}x the defaults" + (f", claimed {e.low:.2f}-{e.high:.2f}x)" if e.low and e.high
                                                           else ")")
        out += f"; the study measured {format_rate(e.samples_per_s)} for this configuration {e.where}{claim}"
        floor = e.floor()
        if floor is not None and rate < floor:
            causes = []
            if data_share >= DATA_SHARE:
                causes.append(f"the steps waited on data {100 * data_share:.0f}% of the time")
            if other_cores >= max(0.5, BUSY_SHARE * cores):
                causes.append(f"other processes used {other_cores:.1f} of {cores} cores")
            out += ("; below the claim: " + " and ".join(causes) if causes
                    else "; below the claim, and neither waiting on data nor another process explains it")
        return out
