"""The device's energy counter, read over a trial's timed windows: joules per sample, or why there is none.

Why a module of its own: the figure needs a counter that only NVIDIA GPUs expose (NVML's total energy consumption
since the driver loaded, in millijoules: ``nvmlDeviceGetTotalEnergyConsumption``, Volta and newer), read through the
maintained binding (``nvidia-ml-py``, imported as ``pynvml``: the ``gpu`` extra), which is imported here, when a CUDA
trial asks for a counter, never when the package is imported. Everything that reads a counter goes through
:class:`Counter` (``millijoules()``), so a test on a CPU hands the :class:`Meter` a made-up one.

A counter that cannot be read says so in one line (``{"unreadable": why}``), never as a zero: a CPU has none
(:data:`CPU`), the binding may be missing, the GPU may not support the call, and a counter that did not move over
the windows measured nothing. The counter is the whole GPU's: another process on the same GPU meanwhile is counted
too (the trial's ``load`` says whether there was one). How often the driver updates the counter, and so how closely a
0.5 s window's reading follows the window, is not measured yet: only the CPU side has run (the binding's calls, a
missing library said in one line); a GPU has yet to show the readings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

#: What a CPU trial records: no energy counter is read there (the one way every view says it).
CPU = "no energy counter: CPU"
SOURCE = "nvml"
INSTALL = "pip install 'autotune[gpu]'"


class Unreadable(Exception):
    """The device's energy counter cannot be read; the message says why, in one line."""


class Counter(Protocol):
    """A device's cumulative energy counter."""

    def millijoules(self) -> float:
        """The energy the device used since some fixed moment, in millijoules (raises :class:`Unreadable`)."""
        ...


@dataclass
class Nvml:
    """NVML's total energy counter of one GPU (``handle``: NVML's device handle)."""

    handle: Any
    nvml: Any = field(repr=False)

    def millijoules(self) -> float:
        try:
            return float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        except self.nvml.NVMLError as exc:
            raise Unreadable(f"NVML's energy counter: {exc}") from None


def nvml(index: int | None, uuid: str | None = None) -> Counter:
    """The NVML energy counter of CUDA device ``index`` (found by its ``uuid`` where given: NVML numbers the GPUs
    without ``CUDA_VISIBLE_DEVICES``); :class:`Unreadable` when the binding is missing, NVML does not start or the
    GPU has no such counter (read once here, so a trial learns it before its windows)."""
    try:
        import pynvml
    except ImportError:
        raise Unreadable(f"no energy counter: nvidia-ml-py is not installed ({INSTALL})") from None
    try:
        pynvml.nvmlInit()
        handle = None
        if uuid:
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")
            except pynvml.NVMLError:
                handle = None
        if handle is None:
            handle = pynvml.nvmlDeviceGetHandleByIndex(_nvml_index(index or 0))
        counter = Nvml(handle, pynvml)
    except pynvml.NVMLError as exc:
        raise Unreadable(f"NVML: {exc}") from None
    counter.millijoules()  # a GPU before Volta, or a driver without it: unreadable now, not in the windows
    return counter


def _nvml_index(index: int) -> int:
    """NVML's number of CUDA device ``index``, where ``CUDA_VISIBLE_DEVICES`` lists GPUs by number."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if index < len(visible) and visible[index].isdigit():
        return int(visible[index])
    return index


#: How a trial finds its device's counter (``device_type``, ``index``, ``uuid``): replaced in tests with a made-up one.
Finder = Callable[[str, "int | None", "str | None"], Counter]


def find(device_type: str, index: int | None = None, uuid: str | None = None) -> Counter:
    """The energy counter of a device, or :class:`Unreadable` saying why there is none (a CPU: :data:`CPU`)."""
    if device_type == "cpu":
        raise Unreadable(CPU)
    if device_type != "cuda":
        raise Unreadable(f"no energy counter: {device_type}")
    return nvml(index, uuid)


class Meter:
    """Energy over a trial's timed windows: the counter read at each window's edges (after the device is
    synchronised), summed with the windows' seconds and samples. ``counter`` None: ``why`` says why there is none."""

    def __init__(self, counter: Counter | None, why: str | None = None) -> None:
        self.counter = counter
        self.why = why
        self.millijoules = 0.0
        self.seconds = 0.0
        self.samples = 0
        self._at: float | None = None

    @classmethod
    def of(cls, device_type: str, index: int | None = None, uuid: str | None = None,
           finder: Finder | None = None) -> Meter:
        """The meter of a device: its counter (``finder``, :func:`find` by default), or why there is none."""
        try:
            return cls((finder or find)(device_type, index, uuid))
        except Unreadable as exc:
            return cls(None, str(exc))

    def begin(self) -> None:
        """A timed window starts (the device synchronised)."""
        if self.counter is None:
            return
        try:
            self._at = self.counter.millijoules()
        except Unreadable as exc:
            self.counter, self.why = None, str(exc)

    def end(self, seconds: float, samples: int) -> None:
        """The window ends (the device synchronised): ``seconds`` long, ``samples`` processed."""
        if self.counter is None or self._at is None:
            return
        try:
            now = self.counter.millijoules()
        except Unreadable as exc:
            self.counter, self.why = None, str(exc)
            return
        self.millijoules += now - self._at
        self.seconds += seconds
        self.samples += samples
        self._at = None

    def record(self) -> dict[str, Any]:
        """What the trial stores (``TrialResult.energy``): ``{"joules", "seconds", "samples", "source"}``, or
        ``{"unreadable": why}``."""
        if self.counter is None:
            return {"unreadable": self.why or "no energy counter"}
        if not self.samples or self.seconds <= 0:
            return {"unreadable": "no timed window measured (the trial was cut during warm-up)"}
        if self.millijoules <= 0:
            return {"unreadable": f"the energy counter did not move over {self.seconds:.2f} s of timed windows"}
        return {"joules": self.millijoules / 1000.0, "seconds": self.seconds, "samples": self.samples,
                "source": SOURCE}

    @property
    def joules_per_sample(self) -> float | None:
        rec = self.record()
        return rec["joules"] / rec["samples"] if "joules" in rec else None
