"""The measurement protocol: warm-up to a steady step time, timed windows, peak memory, profile, FLOPs.

Runs inside the trial process. Timing is host wall-clock with the device
synchronised at window edges; throughput is the median over windows, with the
coefficient of variation across them as its spread. Memory on CUDA is the
caching allocator's peak after a reset; on CPU the peak resident memory of the
trial's whole process tree (DataLoader workers counted by their unique pages).

Which peak: what the user's training needs from its start through its steady steps, one-time
costs included (the first step's compilation, max-autotune's kernel benchmarks, cuDNN
benchmark's algorithm search, the warm-up), because the training pays them too and a
memory budget must hold through them. The protocol's own extras are not: the memory is read
at the end of the timed windows (``on_memory_checkpoint``), before the FLOP count (an
extra step on the uncompiled model, which can need more memory than the compiled one) and
the profiled steps. The steady-state peak alone (after warm-up) is read too
(``on_warm``), and kept beside it for whoever asks how much the one-time costs took.
"""

from __future__ import annotations

import dataclasses
import math
import re
import resource
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import psutil
import torch

from autotune.machine.energy import Meter
from autotune.trial.plan import Plan, Stepper
from autotune.request import CUT_MARGIN


@dataclass(frozen=True)
class Settings:
    """How long and how carefully a trial measures."""

    windows: int = 5
    window_s: float = 0.5
    min_warmup_steps: int = 3
    min_warmup_s: float = 0.3
    max_warmup_steps: int = 200
    max_warmup_s: float = 15.0
    steady_tolerance: float = 0.10
    profile_steps: int = 3
    count_flops: bool = True
    cut_after_windows: int = 2  # a dominated trial may stop after this many timed windows
    cut_margin: float = CUT_MARGIN  # ... when a front point is this much faster at no more memory

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def lean(self) -> Settings:
        """For re-measurements (noise floor, race): the same warm-up and windows, without the profile and the
        FLOP count (they describe the configuration, which its first trial did; the figure is the windows')."""
        return dataclasses.replace(self, profile_steps=0, count_flops=False)

    @classmethod
    def quick(cls) -> Settings:
        """For tests and smoke runs: short windows, fewer of them."""
        return cls(windows=3, window_s=0.08, min_warmup_steps=2, min_warmup_s=0.0, max_warmup_s=3.0, profile_steps=2)


WARMUP_CUT_FACTOR = 2.0  # a warm-up rate this many times over must still be dominated to cut during warm-up


class NonFinite(Exception):
    """The loss (or a parameter) became NaN or Inf."""


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cv(values: list[float]) -> float:
    """Coefficient of variation (population standard deviation over mean); 0 for fewer than 2 values."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    return statistics.pstdev(values) / mean if mean else 0.0


# ---------------------------------------------------------------- memory


def self_peak() -> int:
    """This process's peak resident memory, from the kernel: its memory's high-water mark (``VmHWM``).

    Not ``ru_maxrss``: Linux keeps that across ``exec`` and starts it at the memory of the process this one was
    started from, so a trial started as a fresh interpreter by a large parent (a coordinator with a study of
    thousands of trials in memory) reported the parent's peak as its own (800 MB where it used 500 MB, seen in
    tests/test_protocol.py). ``ru_maxrss`` only where /proc is not there."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class MemoryMonitor:
    """Peak resident memory of this process (exact, from the kernel) and of its children.

    Children (DataLoader workers, compile workers) are sampled by a background thread,
    counted by their unique pages; the thread runs only when the trial will have
    children (``watch_children``), so it steals no CPU from a plain step. Reading a
    child's unique pages costs the kernel ~5 ms, so children are sampled twice a
    second: about 1% of one core per DataLoader worker.
    """

    def __init__(self, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.proc = psutil.Process()
        self.peak_tree = 0
        self.peak_children = 0
        self.max_children = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="autotune-memory", daemon=True)

    def start(self, watch_children: bool = True) -> MemoryMonitor:
        self.sample()
        if watch_children:
            self._thread.start()
        return self

    def sample(self) -> None:
        try:
            rss = self.proc.memory_info().rss
            children = self.proc.children(recursive=True)
        except psutil.Error:
            return
        child_mem = 0
        for child in children:
            try:
                child_mem += child.memory_full_info().uss
            except psutil.Error:
                continue
        self.max_children = max(self.max_children, len(children))
        self.peak_children = max(self.peak_children, child_mem)
        self.peak_tree = max(self.peak_tree, rss + child_mem)

    def peak_so_far(self) -> int:
        return max(self.peak_tree, self_peak() + self.peak_children)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def stop(self) -> dict[str, int]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=1.0)
        self.sample()
        peak = self_peak()
        return {
            "peak_tree_rss_bytes": max(self.peak_tree, peak),
            "peak_self_rss_bytes": peak,
            "peak_children_uss_bytes": self.peak_children,
            "max_child_processes": self.max_children,
        }


# ---------------------------------------------------------------- the step loop


@dataclass
class StepLoop:
    """Fetches batches, copies them to the device and runs the step; keeps time and a non-finite flag."""

    plan: Plan
    stepper: Stepper
    batches: Iterator[Any]
    data_s: float = 0.0
    steps: int = 0
    step_s: float = 0.0  # time spent in steps so far (host clock; what a progress report divides by)
    first_step_s: float | None = None  # the first step's time (compilation included), once it is done
    first_done_at: float | None = None  # perf_counter() when the first step ended
    started_at: float | None = None  # perf_counter() when the first step began
    batch_samples: int | None = None  # the samples in the first batch the loader gave (its leading size)
    pinned_batches: bool | None = None  # whether that batch came in page-locked host memory
    #: one rank of several (:class:`autotune.trial.collective.Group`): windows start together and end with the
    #: slowest rank, and what decides the steps is agreed (:meth:`agree`); None: one process
    sync: Any = None
    _bad: torch.Tensor | None = None

    def one(self, stepper: Stepper | None = None) -> None:
        t0 = time.perf_counter()
        if self.started_at is None:
            self.started_at = t0
        host = [next(self.batches) for _ in range(self.plan.accumulation)]
        self.data_s += time.perf_counter() - t0
        if self.batch_samples is None:
            first = first_tensor(host[0])
            if first is not None:
                self.batch_samples = int(first.shape[0]) if first.dim() else 1
                self.pinned_batches = bool(first.is_pinned()) if first.device.type == "cpu" else None
        out = (stepper or self.stepper)([self.plan.to_device(b) for b in host])
        finite = torch.isfinite(out.detach()).all() if out.is_floating_point() else torch.ones((), dtype=torch.bool)
        self._bad = ~finite if self._bad is None else (self._bad | ~finite)
        self.steps += 1
        self.step_s += time.perf_counter() - t0

    def rate(self) -> float | None:
        """Samples per second over the steps after the first (None before two steps)."""
        if self.first_step_s is None or self.steps < 2 or self.step_s <= self.first_step_s:
            return None
        return (self.steps - 1) * self.plan.samples_per_step / (self.step_s - self.first_step_s)

    def agree(self, flag: bool) -> bool:
        """A decision on the steps to run, the same in every rank (true in all where true in any)."""
        return flag if self.sync is None else self.sync.agree(flag)

    def check_finite(self) -> None:
        """Raises NonFinite when any step so far produced a non-finite loss (synchronises)."""
        if self._bad is not None and bool(self._bad):
            raise NonFinite("the loss became NaN or Inf")

    def timed(self, n: int = 1, stepper: Stepper | None = None, meter: Meter | None = None) -> float:
        """Seconds for ``n`` steps, the device synchronised at both edges; ``meter``: the device's energy counter read
        at those edges (:class:`autotune.machine.energy.Meter`)."""
        synchronize(self.plan.device)
        if self.sync is not None:
            self.sync.barrier()
        if meter is not None:
            meter.begin()
        t0 = time.perf_counter()
        for _ in range(n):
            self.one(stepper)
        synchronize(self.plan.device)
        elapsed = time.perf_counter() - t0
        if self.sync is not None:
            elapsed = self.sync.slowest(elapsed)
        if meter is not None:
            meter.end(elapsed, n * self.plan.samples_per_step)
        return elapsed


def first_tensor(batch: Any) -> torch.Tensor | None:
    """The first tensor of a batch (a tensor, a tuple or list of them, a dict), None when it holds none."""
    if isinstance(batch, torch.Tensor):
        return batch
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (tuple, list)) else ()
    for item in items:
        found = first_tensor(item)
        if found is not None:
            return found
    return None


def check_parameters(model: torch.nn.Module) -> None:
    for name, p in model.named_parameters():
        if p.is_floating_point() and not bool(torch.isfinite(p).all()):
            raise NonFinite(f"parameter {name} became NaN or Inf")


# ---------------------------------------------------------------- profile


#: What the names of a profile's events say of the knobs in force, counted in calls over the profiled steps: device
#: kernels (cuBLAS, cuDNN, CUTLASS, ATen's), host-side ops and CUDA runtime calls. The evidence that a knob reached
#: the step, from the step itself: TF32, bf16 and fp16 GEMMs and convolutions, NHWC convolutions (and layout
#: conversions to and from NCHW), fused and foreach optimizer kernels, page-locked and pageable host-to-device copies,
#: CUDA graph launches, and the forward ops whose count activation checkpointing raises (they run again in backward).
KERNEL_CLASSES: dict[str, re.Pattern[str]] = {
    # cuBLAS and cuDNN name their TF32 kernels so; CUTLASS's are s1688/s16816 GEMMs on float inputs (not bf16_/fp16_)
    "tf32": re.compile(r"tf32|(?<!bf16_)(?<!fp16_)(?:s1688|s16816)gemm", re.I),
    "bf16": re.compile(r"bf16|bfloat16", re.I),
    "fp16": re.compile(r"(?<![bB])f16|fp16|h1688|h16816|\bhalf", re.I),
    "nhwc": re.compile(r"^(?!.*(nchwtonhwc|nhwctonchw)).*nhwc", re.I),
    "layout_conversions": re.compile(r"nchwtonhwc|nhwctonchw", re.I),
    "fused_optimizer": re.compile(r"_fused_(adam|sgd|adagrad)|fused(adam|sgd)", re.I),
    "foreach_optimizer": re.compile(r"_foreach_|multi_tensor_apply(?!.*fused)", re.I),
    "pinned_copies": re.compile(r"htod \(pinned", re.I),
    "pageable_copies": re.compile(r"htod \(pageable", re.I),
    "graph_launches": re.compile(r"cudaGraphLaunch", re.I),
    "forward_ops": re.compile(r"^aten::(convolution|linear|addmm|bmm|matmul)$"),
}


def kernel_classes(events: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Calls by class (:data:`KERNEL_CLASSES`) among profile events given as (name, calls)."""
    out = dict.fromkeys(KERNEL_CLASSES, 0)
    for name, calls in events:
        for cls, pattern in KERNEL_CLASSES.items():
            if pattern.search(name):
                out[cls] += int(calls)
    return out


def summarise_profile(prof: Any, device_type: str, top: int = 10) -> dict[str, Any]:
    events = prof.key_averages()
    use_device = device_type == "cuda"

    def self_time(evt: Any) -> float:
        if use_device:
            return float(getattr(evt, "self_device_time_total", 0) or getattr(evt, "self_cuda_time_total", 0) or 0)
        return float(evt.self_cpu_time_total or 0)

    rows = [(evt.key, self_time(evt), evt.count) for evt in events]
    total = sum(t for _, t, _ in rows) or 1.0
    rows.sort(key=lambda r: r[1], reverse=True)
    h2d = sum(t for name, t, _ in rows if "Memcpy HtoD" in name or "HtoD" in name)
    return {
        "clock": "device" if use_device else "cpu",
        "total_self_us": total,
        "top_ops": [
            {"name": name, "self_us": round(t, 1), "calls": calls, "share": round(t / total, 4)}
            for name, t, calls in rows[:top]
            if t > 0
        ],
        "h2d_copy_us": round(h2d, 1) if use_device else None,
        "kernels": kernel_classes((evt.key, int(evt.count)) for evt in events),
    }


def profile_steps(loop: StepLoop, steps: int) -> dict[str, Any]:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if loop.plan.device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    synchronize(loop.plan.device)
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(steps):
            loop.one()
        synchronize(loop.plan.device)
    return summarise_profile(prof, loop.plan.device.type)


# ---------------------------------------------------------------- FLOPs


def count_flops(loop: StepLoop, eager: Stepper) -> float | None:
    """FLOPs of one step (forward and backward), counted on the eager model; runs one real step."""
    try:
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:  # pragma: no cover - very old torch
        return None
    counter = FlopCounterMode(display=False)
    with counter:
        loop.one(eager)
    total = counter.get_total_flops()
    return float(total) if total else None


# ---------------------------------------------------------------- the protocol


@dataclass
class Measurement:
    time_to_first_step_s: float
    warmup_steps: int
    window_samples_per_s: list[float]
    window_steps: int
    data_wait_share: float
    phases_s: dict[str, float] = field(default_factory=dict)
    flops_per_step: float | None = None
    profile: dict[str, Any] = field(default_factory=dict)
    cut_short: bool = False
    cut_in_warmup: bool = False
    #: the energy over the timed windows (:meth:`autotune.machine.energy.Meter.record`), or why there is none
    energy: dict[str, Any] = field(default_factory=dict)

    @property
    def samples_per_s(self) -> float:
        return statistics.median(self.window_samples_per_s)


def warmed_up(times: list[float], elapsed: float, settings: Settings) -> bool:
    """Warm-up is over: the last three step times agree within ``steady_tolerance`` (after the least steps and
    seconds), or its step or time budget is spent."""
    if len(times) >= settings.min_warmup_steps and elapsed >= settings.min_warmup_s:
        last = times[-3:]
        med = statistics.median(last)
        if med > 0 and (max(last) - min(last)) / med <= settings.steady_tolerance:
            return True
    return len(times) >= settings.max_warmup_steps or elapsed >= settings.max_warmup_s


def window_steps(step_s: float, settings: Settings) -> int:
    """Steps per timed window: enough to fill ``window_s`` at this step time (at least one)."""
    return max(1, math.ceil(settings.window_s / max(step_s, 1e-6)))


def run_protocol(
    loop: StepLoop,
    settings: Settings,
    eager: Stepper | None = None,
    on_memory_checkpoint: Callable[[], None] | None = None,
    dominated: Callable[[float], bool] | None = None,
    on_warm: Callable[[], None] | None = None,
    meter: Meter | None = None,
) -> Measurement:
    """First step, warm-up to steady, timed windows, memory, FLOP count, profile. Raises NonFinite.

    ``on_warm()`` runs once warm-up is over, ``on_memory_checkpoint()`` once the timed windows are (or the trial was
    cut): the trial's memory is read there, before the FLOP count and the profile add their own (the module's
    docstring says which peak is measured).

    ``dominated(median_so_far)`` is asked after ``settings.cut_after_windows`` windows;
    when it says yes the remaining windows and the profile are skipped (``cut_short``).
    It is asked during warm-up too, of twice the warm-up rate (``WARMUP_CUT_FACTOR``): a
    configuration that a front point beats even then stops before its windows
    (``cut_in_warmup``; its figure is the warm-up rate).

    ``meter`` reads the device's energy counter at the timed windows' edges (and nowhere else: not the warm-up, the
    FLOP count nor the profile): the measurement's ``energy``.
    """
    phases: dict[str, float] = {}
    samples = loop.plan.samples_per_step

    first = loop.timed(1)
    loop.first_step_s, loop.first_done_at = first, time.perf_counter()
    phases["first_step"] = first
    loop.check_finite()

    flops = None
    warm_start = time.perf_counter()
    times: list[float] = []
    while True:
        times.append(loop.timed(1))
        if loop.agree(warmed_up(times, time.perf_counter() - warm_start, settings)):
            break
        if dominated is not None and len(times) >= settings.min_warmup_steps:
            # Far below the front already: even twice as fast once warm, a front point would still beat it.
            rate = samples / statistics.median(times[-3:])
            if loop.agree(dominated(WARMUP_CUT_FACTOR * rate)):
                loop.check_finite()
                phases["warmup"] = time.perf_counter() - warm_start
                if on_memory_checkpoint is not None:
                    on_memory_checkpoint()
                if settings.count_flops and eager is not None:
                    flops = count_flops(loop, eager)
                return Measurement(time_to_first_step_s=first, warmup_steps=len(times), window_samples_per_s=[rate],
                                   window_steps=min(3, len(times)), data_wait_share=0.0, phases_s=phases,
                                   flops_per_step=flops, profile={}, cut_short=True, cut_in_warmup=True,
                                   energy=meter.record() if meter is not None else {})
    loop.check_finite()
    phases["warmup"] = time.perf_counter() - warm_start
    if on_warm is not None:
        on_warm()

    per_window = window_steps(statistics.median(times[-3:]), settings)
    data_before = loop.data_s
    timed_start = time.perf_counter()
    windows: list[float] = []
    wall = 0.0
    cut = False
    for _ in range(settings.windows):
        elapsed = loop.timed(per_window) if meter is None else loop.timed(per_window, meter=meter)
        wall += elapsed
        windows.append(per_window * samples / elapsed)
        if dominated is not None and len(windows) >= settings.cut_after_windows and len(windows) < settings.windows:
            if loop.agree(dominated(statistics.median(windows))):
                cut = True
                break
    loop.check_finite()
    phases["timed"] = time.perf_counter() - timed_start
    data_share = (loop.data_s - data_before) / wall if wall > 0 else 0.0

    if on_memory_checkpoint is not None:
        on_memory_checkpoint()
    if settings.count_flops and eager is not None:
        flops_start = time.perf_counter()
        flops = count_flops(loop, eager)
        phases["flops"] = time.perf_counter() - flops_start

    profile: dict[str, Any] = {}
    if settings.profile_steps > 0 and not cut:
        prof_start = time.perf_counter()
        profile = profile_steps(loop, settings.profile_steps)
        phases["profile"] = time.perf_counter() - prof_start
        loop.check_finite()
    profile["data_wait_share"] = round(data_share, 4)
    return Measurement(
        time_to_first_step_s=first,
        warmup_steps=len(times),
        window_samples_per_s=windows,
        window_steps=per_window,
        data_wait_share=data_share,
        phases_s=phases,
        flops_per_step=flops,
        profile=profile,
        cut_short=cut,
        energy=meter.record() if meter is not None else {},
    )
