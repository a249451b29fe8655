"""What else runs on the machine: the CPU other processes use while a trial measures (and, on a GPU, who else is on it).

A speed-up measured while other work competes for the cores is a claim about that
minute, not about the user's training tomorrow: fewer threads suffer less from
other processes, so on a busy machine ``threads=1`` wins and then loses on a quiet
one. So every measurement records how busy the machine was (:class:`Meter`), the
evidence names a busy study and leaves out measurements much busier than the
baseline's (:mod:`autotune.evidence`), and ``run`` warns when the machine is
already busy before it starts (:func:`other_cores_now`).

Other processes' CPU is the busy CPU time of the cores the trial may run on (its
affinity: a worker of ``run --workers`` is pinned to its share of the machine) minus that
of the measuring process tree (the trial and its DataLoader workers), over the same wall
time, in cores: 1.0 means another process kept one of those cores busy on average. The
study's other workers, on their own cores, are not "other processes" of a trial; and a
trial measured on a share of the machine says so (``cores`` of ``machine_cores``), since its
figure holds for such a share.

psutil is imported where a meter reads it: the read commands use :func:`busy_threshold` only,
and import nothing they do not use.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence

from autotune import clock
from autotune.clock import REAL, Clock

if TYPE_CHECKING:
    import psutil

BUSY_MIN_CORES = 0.5  # other processes using at least this many cores (or a quarter of them) make a measurement busy


def busy_threshold(cores: int) -> float:
    """Other processes' cores above which a measurement counts as taken on a busy machine."""
    return max(BUSY_MIN_CORES, 0.25 * max(1, cores))


def _busy(t: Any) -> float:
    return float(sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0))


def _busy_cpu_s(cores: Sequence[int] | None = None) -> float:
    """Busy CPU seconds of these cores (all of them for None; all too where the kernel lists fewer CPUs than there are,
    some offline, so that a list index is no core number)."""
    import psutil

    if cores is not None:
        per = psutil.cpu_times(percpu=True)
        if len(per) == (os.cpu_count() or 0):
            return sum(_busy(per[i]) for i in cores if i < len(per))
    return _busy(psutil.cpu_times())


def cpu_count() -> int:
    """CPUs this process may run on (affinity-aware)."""
    return len(own_cores())


def own_cores() -> list[int]:
    """The cores this process may run on (its affinity)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def _tree(process: psutil.Process) -> tuple[float, int]:
    """CPU seconds of a process, its children that ended (reaped) and those still alive; and how many processes the
    tree holds now (0: the process is gone)."""
    import psutil

    total, count = 0.0, 0
    try:
        t = process.cpu_times()
        total += t.user + t.system + t.children_user + t.children_system
        children = process.children(recursive=True)
        count = 1 + len(children)
        for child in children:
            try:
                c = child.cpu_times()
                total += c.user + c.system
            except psutil.Error:
                pass
    except psutil.Error:
        pass
    return total, count


class Meter:
    """Measures other processes' CPU while this process tree works: ``start()``, work, ``stop()``."""

    def __init__(self, pid: int | None = None, clock: Clock = REAL) -> None:
        import psutil

        self.clock = clock  # the wall it divides by (a trial process times on the machine's)
        self.process = psutil.Process(pid or os.getpid())
        self.cores = own_cores()
        self.start_wall = 0.0
        self.start_busy = 0.0
        self.start_tree = 0.0

    def start(self) -> Meter:
        self.start_wall = self.clock.monotonic()
        self.start_busy = _busy_cpu_s(self.cores)
        self.start_tree = _tree(self.process)[0]
        return self

    def stop(self) -> dict[str, Any]:
        import psutil

        wall = self.clock.monotonic() - self.start_wall
        busy = _busy_cpu_s(self.cores) - self.start_busy
        tree, own = _tree(self.process)  # own: the processes counted as this work's (several ranks: the agent, each)
        tree -= self.start_tree
        other = max(0.0, (busy - tree) / wall) if wall > 0 else 0.0
        return {"other_cores": round(other, 3), "cores": len(self.cores), "machine_cores": psutil.cpu_count() or 1,
                "wall_s": round(wall, 3), "own_processes": own}


def other_cores_now(seconds: float = 0.5) -> dict[str, Any]:
    """How many cores other processes use right now (this process excluded), over ``seconds`` of the study's clock
    (:mod:`autotune.clock`: a simulated study waits no real time, and its simulated machine is quiet)."""
    meter = Meter(clock=clock.current()).start()
    clock.sleep(seconds)
    return meter.stop()


def others_on_gpu(pids: list[int] | None, ours: set[int]) -> int | None:
    """How many of the processes NVML lists on this trial's GPU (``pids``; None: unknown) are not the trial's own
    (``ours``: its process tree, as this process numbers them).

    NVML numbers processes as the host does. Inside a container (a PID namespace of its own) this process is
    listed under a number it cannot know: none of ``ours`` is among ``pids``. It holds a context on the GPU it
    measures on, so it is one of them, and the others are the rest. Where NVML lists none at all, it cannot see
    the processes from here: unknown, never "none"."""
    if pids is None or not pids:
        return None
    if ours & set(pids):
        return len([p for p in pids if p not in ours])
    return len(pids) - 1


def own_tree() -> list[Any]:
    """This process and its descendants (psutil processes)."""
    import psutil

    me = psutil.Process()
    try:
        return [me, *me.children(recursive=True)]
    except psutil.Error:
        return [me]


def text(other_cores: float, cores: int) -> str:
    return f"other processes used {other_cores:.1f} of {cores} cores"
