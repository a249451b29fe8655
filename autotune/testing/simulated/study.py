"""A whole study on the simulated GPU, in simulated time, and what a claim's truth is there.

:func:`run_study` runs the product's own composition (:func:`autotune.tuning.preparation.prepare`: the workload's
probe, the batch ceiling, the search, the race, what each knob bought, the least change, the claim, the numerics
check, the verdict) against :class:`.runner.SimulatedRunner`, with :mod:`autotune.clock` set to the runner's clock
for the length of the run, into a real storage. Nothing in the loop knows it is simulated but the fingerprint
(``simulated: true``). A 4-minute H200 study takes about a second of CPU.

:func:`best_reachable` is the best true speed-up among the configurations a study could have measured (those of
the space fitted to the device that fit its memory and whose compilation fits the compile limit and a quarter of
the budget); :func:`truth_of` is a trial's true speed-up over the defaults. What the benchmark and the tests hold
against them lives in :mod:`.properties`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable, Mapping

from autotune import clock
from autotune import knobs
from autotune.knobs import space as spaces
from autotune.request import TuneConfig, WorkloadSpec
from autotune.store import Store
from autotune.testing.simulated import device as D
from autotune.testing.simulated.runner import SimulatedClock, SimulatedRunner
from autotune.tuning import loop, preparation

DEVICE = "cuda:0"


@dataclass
class SimulatedStudy:
    """One study on a simulated device: its shape, budget and seed, the storage it wrote, the run's summary, its
    wall time in simulated seconds (the probes included, from its start to its process's exit), the processes it
    started, and what it printed."""

    shape: D.Shape
    budget_s: float
    seed: int
    url: str
    name: str
    summary: loop.Summary
    wall_s: float
    processes: int
    config: TuneConfig
    lines: list[str] = field(default_factory=list)
    base: dict[str, Any] = field(default_factory=dict)

    def truth(self, config: Mapping[str, Any]) -> float:
        """``config``'s true speed-up over this study's defaults."""
        return D.truth(self.shape.workload, config, self.base)


def spec_of(shape: D.Shape) -> WorkloadSpec:
    """The workload as a user would name it (only its name reaches the simulated runner)."""
    return WorkloadSpec(model=f"autotune.testing.simulated:{shape.workload.name}")


def run_study(shape: D.Shape, budget_s: float, seed: int, url: str, name: str = "simulated", *, trials: int = 30,
              numerics: str = "warn", sampler: str | None = None, echo: Callable[[str], None] | None = None
              ) -> SimulatedStudy:
    """Run a study of ``shape`` under ``--time-budget budget_s`` (``trials`` at most) in simulated time into the
    storage at ``url`` (see the module's docstring); ``sampler``: the request's (default: the product's default);
    ``echo`` hears what a run prints. The coordinator's own computation (the sampler's suggestions, the reads of the
    study) takes no simulated time: a GP's suggestion costs a second or so of a GPU machine's CPU in a real study."""
    from autotune.tuning.progress import Progress

    sim = SimulatedClock()
    made: list[SimulatedRunner] = []

    def make_runner(spec: WorkloadSpec, **kwargs: Any) -> SimulatedRunner:
        # each study's machine draws its own noise: seeded by the seed alone, the studies of every shape and budget
        # with one seed drew the same noises in the same order, and their claims missed or covered together
        made.append(SimulatedRunner(shape, sim, f"{shape.name} {budget_s:g} {seed}", **kwargs))
        return made[-1]

    config = TuneConfig(spec=spec_of(shape), trials=trials, time_budget_s=float(budget_s), numerics=numerics,
                        seed=seed, **({"sampler": sampler} if sampler else {}))
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        if echo is not None:
            echo(line)

    store = Store(url)
    with clock.using(sim):
        start = sim.monotonic()
        bar = Progress(config.trials, config.time_budget_s, 0, enabled=True, echo=say)
        prepared = preparation.prepare(config, name, store, DEVICE, on_trial=bar, on_repeat=bar.repeat,
                                       make_runner=make_runner)
        for line in prepared.opening():
            say(line)
        summary = prepared.run()
        bar.close()
        say(summary.text())
        wall = sim.monotonic() - start + shape.workload.exit_s  # the run's own process exits too
    runner = made[-1]
    return SimulatedStudy(shape, float(budget_s), seed, url, name, summary, wall, runner.processes, config, lines,
                          base=dict(prepared.tuner.seeds.base))


@lru_cache(maxsize=32)
def _reachable(shape_name: str, budget_s: float, compile_limit_s: float, noise: str) -> tuple[float, tuple]:
    shape = D.SHAPES[shape_name.split("/")[0]].with_noise(noise)
    w = shape.workload
    space = spaces.load("default")
    ctx = knobs.Context(device_type="cuda", task="train", input_rank=w.input_rank, torch_version=(2, 11),
                        cpu_count=shape.device.cpu_count)
    base = loop.base_config(ctx, space.fixed, w.batch)
    fitted = spaces.fit(space, ctx, base).space
    names = list(fitted.search)
    best, best_config = 0.0, ()
    for values in itertools.product(*(fitted.search[n].values() for n in names)):
        config = knobs.resolve({**base, **dict(zip(names, values))}, ctx).config
        if D.peak_memory(w, config) > shape.device.memory_bytes:
            continue
        if D.first_step_s(w, config) > min(compile_limit_s, budget_s / 4):
            continue
        x = D.truth(w, config, base)
        if x > best:
            best, best_config = x, tuple(sorted(config.items()))
    return best, best_config


def best_reachable(study: SimulatedStudy) -> tuple[float, dict[str, Any]]:
    """The best true speed-up a study of this shape and budget could reach (see the module's docstring), and its
    configuration."""
    best, config = _reachable(study.shape.name, study.budget_s, study.config.compile_limit_s,
                              study.shape.workload.noise)
    return best, dict(config)
