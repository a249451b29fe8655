"""How a trial's process must be started: the environment and core binding that take effect only in a process started
with them, decided from the configuration in the parent, and proved from inside the trial process.

Why: trials are forks of a warm interpreter (:mod:`autotune.trial.forkserver`), and most knobs
are set in the fork before anything reads them. A few cannot be: a library named in
``LD_PRELOAD`` is loaded by the dynamic linker when a process starts, and OpenMP reads
``OMP_PROC_BIND``/``OMP_PLACES`` once, when torch loads it. A knob says which of its values
need that (``started_with``); :func:`launch_for` turns a configuration's into a
:class:`Launch` (the variables, the cores to bind to), and the runner forks such a trial from an
interpreter started with it (the default one has none). Inside the trial, :func:`prove` reads the
process's own memory map and affinity: a trial that asked for jemalloc runs on jemalloc, or
fails with :class:`LaunchNotInForce`, and its result's notes say what was found.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from autotune import knobs
from autotune.knobs import effects as fx
from autotune.machine import binding, preload


class LaunchNotInForce(RuntimeError):
    """A trial process was not started as its configuration asks (its library not mapped, its cores not bound)."""


@dataclass(frozen=True)
class Launch:
    """How a trial process is started: environment variables set before it starts, and the cores it is bound to
    (none: unbound). The default launch (neither) is the warm interpreter's."""

    environment: tuple[tuple[str, str], ...] = ()
    cpus: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.environment or self.cpus)

    def command(self) -> tuple[str, ...]:
        """The prefix a command is started under: bound to :attr:`cpus` (numactl, taskset, or Python itself)."""
        if not self.cpus:
            return ()
        prefix = binding.command(self.cpus)
        if prefix:
            return prefix
        return (sys.executable, "-c", f"import os, sys; os.sched_setaffinity(0, {set(self.cpus)!r}); "
                "os.execvp(sys.argv[1], sys.argv[1:])")


def _started(config: Mapping[str, Any], device_type: str) -> Iterator[tuple[knobs.Knob, Any]]:
    """(knob, value) of each knob of ``config`` at a value that takes effect only in a process started with it, and
    that applies here (a library that is not installed does not: the trial says so, not applicable)."""
    ctx = knobs.Context(device_type=device_type, libraries=preload.found())
    for knob in knobs.REGISTRY:
        value = config.get(knob.name, knob.default_for())
        if value in knob.started_with and knob.not_applicable(value, ctx, config) is None:
            yield knob, value


def threads_of(config: Mapping[str, Any]) -> int:
    """The intra-op thread count ``config`` runs with (its knob's default: the usable CPUs)."""
    for knob in knobs.REGISTRY:
        if any(isinstance(e, fx.NumThreads) for e in knob.effects):
            return int(config.get(knob.name, knob.default_for()))
    return len(binding.allowed())


def launch_for(config: Mapping[str, Any], device_type: str) -> Launch:
    """How a process measuring ``config`` on a device of ``device_type`` must be started."""
    env: dict[str, str] = {}
    cpus: tuple[int, ...] = ()
    for knob, value in _started(config, device_type):
        for effect in knob.effects:
            if isinstance(effect, fx.Env) and not knobs.bound_per_rank(knob, value, config):
                env.update(effect.variables(value))
            elif isinstance(effect, fx.BindCores) and value == effect.on:
                # a core a thread of every rank: the ranks' threads together stay on compact cores
                cpus = tuple(binding.compact_cpus(threads_of(config) * knobs.ranks_of(config)))
    return Launch(tuple(sorted(env.items())), cpus)


def prove(config: Mapping[str, Any], device_type: str, bound_cpus: tuple[int, ...]) -> dict[str, Any]:
    """In the trial process: that it was started as ``config`` asks (``bound_cpus``: the cores its launch bound it
    to). Returns what it found, for the result's notes (the library's path as mapped, the CPUs the process may run
    on); raises :class:`LaunchNotInForce` where the memory map or the affinity says otherwise."""
    notes: dict[str, Any] = {}
    for knob, value in _started(config, device_type):
        for effect in knob.effects:
            if isinstance(effect, fx.Preload) and value in effect.libraries:
                library = effect.libraries[value]
                path = preload.loaded(library)
                if path is None:
                    raise LaunchNotInForce(
                        f"{knob.name}={knob.format(value)}: {library} is not in this trial process's memory map "
                        f"(/proc/self/maps): it was not started with LD_PRELOAD={preload.find(library)}")
                notes["preloaded"] = path
            elif isinstance(effect, fx.BindCores) and value == effect.on:
                affinity = sorted(os.sched_getaffinity(0))
                notes["affinity"] = affinity
                notes["bound_cpus"] = list(bound_cpus)
                if not bound_cpus or not set(affinity) <= set(bound_cpus):
                    raise LaunchNotInForce(
                        f"{knob.name}={knob.format(value)}: this trial process may run on CPUs {affinity}, not only "
                        f"on the cores it was to be bound to ({list(bound_cpus) or 'none given'})")
    return notes


def thread_cpus() -> list[int]:
    """Every CPU any thread of this process may run on (after the steps: OpenMP's threads included)."""
    return sorted({cpu for cpus in binding.thread_cpus().values() for cpu in cpus})
