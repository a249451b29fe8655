"""What else runs on the machine: the CPU other processes use while a trial measures (and, on a GPU, who else is on it).

A speed-up measured while other work competes for the cores is a claim about that
minute, not about the user's training tomorrow: fewer threads suffer less from
other processes, so on a busy machine ``threads=1`` wins and then loses on a quiet
one. So every measurement records how busy the machine was (:class:`Meter`), the
evidence names a busy study and leaves out measurements much busier than the
baseline's (:mod:`autotune.evidence`), and ``run`` warns when the machine is
already busy before it starts (:func:`other_cores_now`).

Other processes' CPU is the machine's busy CPU time minus that of the measuring
process tree (the trial and its DataLoader workers), over the same wall time, in
cores: 1.0 means another process kept one core busy on average.

psutil is imported where a meter reads it: the read commands use :func:`busy_threshold` only,
and import nothing they do not use (issue 27).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psutil

BUSY_MIN_CORES = 0.5  # other processes using at least this many cores (or a quarter of them) make a measurement busy


def busy_threshold(cores: int) -> float:
    """Other processes' cores above which a measurement counts as taken on a busy machine."""
    return max(BUSY_MIN_CORES, 0.25 * max(1, cores))


def _busy_cpu_s() -> float:
    import psutil

    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


def _tree_cpu_s(process: psutil.Process) -> float:
    """CPU seconds of a process, its children that ended (reaped) and those still alive."""
    import psutil

    total = 0.0
    try:
        t = process.cpu_times()
        total += t.user + t.system + t.children_user + t.children_system
        for child in process.children(recursive=True):
            try:
                c = child.cpu_times()
                total += c.user + c.system
            except psutil.Error:
                pass
    except psutil.Error:
        pass
    return total


class Meter:
    """Measures other processes' CPU while this process tree works: ``start()``, work, ``stop()``."""

    def __init__(self, pid: int | None = None) -> None:
        import psutil

        self.process = psutil.Process(pid or os.getpid())
        self.start_wall = 0.0
        self.start_busy = 0.0
        self.start_tree = 0.0

    def start(self) -> Meter:
        self.start_wall = time.monotonic()
        self.start_busy = _busy_cpu_s()
        self.start_tree = _tree_cpu_s(self.process)
        return self

    def stop(self) -> dict[str, Any]:
        import psutil

        wall = time.monotonic() - self.start_wall
        busy = _busy_cpu_s() - self.start_busy
        tree = _tree_cpu_s(self.process) - self.start_tree
        other = max(0.0, (busy - tree) / wall) if wall > 0 else 0.0
        return {"other_cores": round(other, 3), "cores": psutil.cpu_count() or 1, "wall_s": round(wall, 3)}


def other_cores_now(seconds: float = 0.5) -> dict[str, Any]:
    """How many cores other processes use right now (this process excluded), over ``seconds``."""
    meter = Meter().start()
    time.sleep(seconds)
    return meter.stop()


def gpu_others(device: Any) -> int | None:
    """Processes other than this one on a CUDA device (None when it cannot be told)."""
    try:
        import torch

        text = torch.cuda.list_gpu_processes(device)
    except Exception:  # noqa: BLE001 - no pynvml, no driver: unknown
        return None
    pids = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "process" and parts[1].isdigit():
            pids.append(int(parts[1]))
    if not pids and "no processes" not in text and "process" not in text:
        return None
    return len([p for p in pids if p != os.getpid()])


def text(other_cores: float, cores: int) -> str:
    return f"other processes used {other_cores:.1f} of {cores} cores"
