"""Binding a trial's process to a compact set of cores, and reading back where its threads may run.

Why: the knob ``core_binding`` runs a CPU trial on the fewest neighbouring cores its threads
need, one thread a core, instead of letting the scheduler move threads across every core the
process may use (what PyTorch's CPU launcher, ``torch.backends.xeon.run_cpu``, does with
``numactl -C`` or ``taskset -c``). :func:`compact_cpus` picks the cores (one logical CPU of each
physical core first, in order), :func:`command` is the prefix that starts a process bound to them
(``numactl --physcpubind`` where installed, else ``taskset -c``, else none: the process binds
itself with ``os.sched_setaffinity``), and :func:`thread_cpus` reads back, from ``/proc``, the CPUs
each of the process's threads may run on: the proof a trial records. OpenMP's own binding
(``OMP_PROC_BIND``, ``OMP_PLACES``) is read once, when its library loads, so it too takes effect
only in a process started with it. Nothing here imports torch.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterable


def allowed() -> list[int]:
    """The CPUs this process may run on, in order."""
    return sorted(os.sched_getaffinity(0))


def _core_of(cpu: int) -> tuple[int, int]:
    """(package, core) of a logical CPU; the CPU itself where the system does not say."""
    topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
    try:
        return (int((topology / "physical_package_id").read_text()), int((topology / "core_id").read_text()))
    except (OSError, ValueError):
        return (0, cpu)


def compact_cpus(count: int, cpus: Iterable[int] | None = None) -> list[int]:
    """``count`` CPUs of ``cpus`` (default: those this process may run on) for ``count`` threads, packed together:
    the first logical CPU of each physical core in order, then their siblings; all of them when ``count`` is more."""
    cpus = sorted(cpus) if cpus is not None else allowed()
    first: list[int] = []
    siblings: list[int] = []
    seen: set[tuple[int, int]] = set()
    for cpu in cpus:
        core = _core_of(cpu)
        (siblings if core in seen else first).append(cpu)
        seen.add(core)
    return sorted((first + siblings)[:max(1, count)])


def rank_cpus(cpus: Iterable[int], rank: int, threads: int) -> list[int]:
    """The cores of rank ``rank`` of a training whose ranks run ``threads`` threads each, bound together to ``cpus``:
    its own slice, a core a thread, so that no two ranks share one (all of ``cpus`` where they are too few)."""
    ordered, per = sorted(cpus), max(1, threads)
    return ordered[rank * per:(rank + 1) * per] or ordered


def cpu_list(cpus: Iterable[int]) -> str:
    """CPUs as ``taskset -c`` and ``numactl --physcpubind`` take them: ``0,1,4``."""
    return ",".join(str(c) for c in sorted(cpus))


def command(cpus: Iterable[int]) -> tuple[str, ...]:
    """The prefix that starts a command bound to ``cpus``: ``numactl --physcpubind=...`` where installed, else
    ``taskset -c ...``, else none (the process then binds itself: :func:`bind`)."""
    listed = cpu_list(cpus)
    if shutil.which("numactl"):
        return ("numactl", f"--physcpubind={listed}")
    if shutil.which("taskset"):
        return ("taskset", "-c", listed)
    return ()


def bind(cpus: Iterable[int]) -> None:
    """Bind this process (threads it starts later too) to ``cpus``."""
    os.sched_setaffinity(0, set(cpus))


def thread_cpus(pid: int | str = "self") -> dict[str, list[int]]:
    """Each thread of process ``pid``, by its id: the CPUs it may run on (``Cpus_allowed_list`` in ``/proc``)."""
    out: dict[str, list[int]] = {}
    for status in sorted(Path(f"/proc/{pid}/task").glob("*/status")):
        try:
            text = status.read_text()
        except OSError:  # the thread ended meanwhile
            continue
        for line in text.splitlines():
            if line.startswith("Cpus_allowed_list:"):
                out[status.parent.name] = parse_list(line.split(":", 1)[1])
    return out


def parse_list(text: str) -> list[int]:
    """A kernel CPU list (``0-3,8``) as CPUs."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if "-" in part:
            low, high = part.split("-")
            cpus.extend(range(int(low), int(high) + 1))
        elif part.strip():
            cpus.append(int(part))
    return cpus


#: What a user writes to start a training script bound as a trial was.
HOW = ("OMP_PROC_BIND=close OMP_PLACES=cores numactl --physcpubind=<N cores> python train.py (or taskset -c "
       "<N cores>), N the intra-op thread count, one logical CPU of each physical core in order")
