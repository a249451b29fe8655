"""The batch-size ceiling: the largest batch that fits, found before the search spends trials above it.

Lightning's batch-size finder doubles the batch until it runs out of memory, then
bisects between the last batch that fit and the first that did not. This does the same
through isolated trials (each probe a short run of the real step in its own process, as a
trial is), so an out-of-memory error ends a probe, never the study or the machine's other
work. A batch "fits" when its probe runs and its peak memory is within ``--max-memory``
(when one is given); the ceiling is the largest fitting batch on the space's grid (its
``step``), at most the space's top.

The probe runs PyTorch's defaults at each batch (fp32, no activation checkpointing):
the configuration that needs the most memory in most spaces, so what fits there fits
the cheaper configurations too; a configuration that would fit a still larger batch (bf16
with checkpointing) is not searched above the ceiling, a deliberate trade for not spending
the study's trials on batches that cannot run.

Where the search tries CUDA graphs (``compile=reduce-overhead`` on a GPU), the ceiling is then checked with them
(:func:`probe_graphs`): torch's CUDA graph trees hold the step's memory in a pool of their own, so the defaults
compiled with graphs run at the ceiling, and a typed out-of-memory there tries the next batch down. Those probes
compile (about 19 s each on an H200), so they start where the eager ones ended: one probe where the graphs fit.

The result is stored on the study (``batch_ceiling``) once and read back on every resume
and by every worker, so the searched range (and with it Optuna's distributions) never
changes within a study.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from autotune import clock
from autotune import knobs
from autotune import result as R
from autotune.knobs.effects import Compile
from autotune.knobs.space import Dimension
from autotune.evidence.ceiling import MAX_MEMORY, SPACE, TIME, Ceiling

if TYPE_CHECKING:  # pragma: no cover
    from autotune.trial.protocol import Settings
    from autotune.trial.runner import Runner

MAX_PROBES = 16  # enough for an exact ceiling on a grid of 128 batch sizes (2 log2 n + 1 probes at most)

#: ``fits(batch_size)`` -> (fits, outcome, peak memory bytes or None)
Fits = Callable[[int], tuple[bool, str, int | None]]


def probe_text(batch: int, outcome: str, peak: int | None) -> str:
    """One probe as the progress lines show it: ``batch ceiling probe: batch 64: oom``."""
    from autotune.units import format_bytes

    return f"batch ceiling probe: batch {batch}: {outcome}" + (f", peak {format_bytes(peak)}" if peak else "")


def find(fits: Fits, values: list[int], start: int | None = None, max_probes: int = MAX_PROBES) -> Ceiling:
    """The largest of ``values`` (the searched batch sizes) for which ``fits`` holds.

    Doubles from ``start`` (default: the smallest value) until a batch does not fit or the
    largest value is reached (halves while the start does not fit), then bisects between the
    last batch that fit and the first that did not: at most 2 log2(n) + 1 probes for n
    values. Past ``max_probes`` it settles for the largest batch seen to fit. Assumes that fitting is monotone in the
    batch (a batch that fits implies
    that every smaller one does), as memory is.
    """
    grid = sorted(set(int(v) for v in values))
    if not grid:
        raise ValueError("no batch sizes to probe")
    began = clock.monotonic()
    probes: list[tuple[int, str, int | None]] = []
    seen: dict[int, tuple[bool, str]] = {}

    def check(i: int) -> bool:
        b = grid[i]
        if b not in seen:
            ok, outcome, peak = fits(b)
            if outcome == R.OUT_OF_TIME:  # its share of the budget is spent: settle for what was seen to fit
                raise _Spent
            probes.append((b, R.OK if ok else outcome, peak))
            seen[b] = (ok, outcome)
        return seen[b][0]

    def done(best: int | None, failing: int | None) -> Ceiling:
        return Ceiling(None if best is None else grid[best], SPACE if failing is None else seen[grid[failing]][1],
                       None if failing is None else grid[failing], probes, clock.monotonic() - began)

    try:
        return _search(grid, start, max_probes, probes, check, done)
    except _Spent:
        fitting = [b for b, (ok, _) in seen.items() if ok]
        failing_seen = [b for b, (ok, _) in seen.items() if not ok]
        return Ceiling(max(fitting) if fitting else None, TIME, min(failing_seen) if failing_seen else None,
                       probes, clock.monotonic() - began)


class _Spent(Exception):
    """The ceiling's share of the time budget ran out during a probe."""


def _search(grid: list[int], start: int | None, max_probes: int, probes: list[Any], check: Callable[[int], bool],
            done: Callable[[int | None, int | None], Ceiling]) -> Ceiling:
    """:func:`find`'s doubling, halving and bisection over ``grid`` (indices), with ``check(i)`` probing one."""
    i = 0 if start is None else min(range(len(grid)), key=lambda k: (abs(grid[k] - start), k))
    best: int | None = None
    while True:  # doubling
        if len(probes) >= max_probes:
            return done(best, None)
        if not check(i):
            failing = i
            break
        best = i
        if i == len(grid) - 1:
            return done(best, None)
        i = next((k for k in range(i + 1, len(grid)) if grid[k] >= 2 * grid[i]), len(grid) - 1)
    while best is None:  # the start did not fit: halve until one does
        if failing == 0:
            return done(None, 0)
        i = next((k for k in range(failing - 1, -1, -1) if grid[k] <= grid[failing] // 2), 0)
        if len(probes) >= max_probes:
            return done(None, failing)
        if check(i):
            best = i
        else:
            failing = i
    while failing - best > 1 and len(probes) < max_probes:  # bisection
        mid = (best + failing) // 2
        if check(mid):
            best = mid
        else:
            failing = mid
    return done(best, failing)


def fits_with(measure: Callable[[Mapping[str, Any]], R.TrialResult], base: Mapping[str, Any],
              max_memory_bytes: int | None) -> Fits:
    """A ``fits`` function that runs ``base`` at each batch through ``measure`` (an isolated short trial)."""

    def fits(batch: int) -> tuple[bool, str, int | None]:
        res = measure({**base, knobs.BATCH_KNOB: batch})
        peak = res.peak_memory_bytes
        if not res.ok:
            return False, res.outcome, peak
        if max_memory_bytes and peak is not None and peak > max_memory_bytes:
            return False, MAX_MEMORY, peak
        return True, R.OK, peak

    return fits


def probe_settings() -> Settings:
    """A probe runs a few steps (enough for the optimizer's state and the peak), not a measurement."""
    from autotune.trial.protocol import Settings

    return Settings(windows=1, window_s=0.05, min_warmup_steps=2, min_warmup_s=0.0, max_warmup_steps=3,
                    max_warmup_s=5.0, profile_steps=0, count_flops=False)


def probe(runner: Runner, base: Mapping[str, Any], dim: Dimension, max_memory_bytes: int | None,
          on_probe: Callable[[int, str, int | None], None] | None = None, deadline: float | None = None) -> Ceiling:
    """The ceiling among ``dim``'s batch sizes: PyTorch's defaults (``base``) run at each batch in isolated trials.
    ``deadline`` (epoch seconds on :mod:`autotune.clock`): the end of the ceiling's share of a time budget; a probe
    is not started past it and is stopped at it, and the ceiling is then the largest batch seen to fit (its limit
    :data:`autotune.evidence.ceiling.TIME`), the bigger batches left unprobed rather than the budget spent on them."""
    settings = probe_settings()

    def measure(config: Mapping[str, Any]) -> R.TrialResult:
        return runner.measure(config, settings=settings, deadline=deadline)

    fits = fits_with(measure, base, max_memory_bytes)

    def reporting(batch: int) -> tuple[bool, str, int | None]:
        ok, outcome, peak = fits(batch)
        if on_probe is not None:
            on_probe(batch, R.OK if ok else outcome, peak)
        return ok, outcome, peak

    return find(reporting, [int(v) for v in dim.values()], start=int(base.get(knobs.BATCH_KNOB) or dim.values()[0]))


def graphs_config(base: Mapping[str, Any], search: Mapping[str, Dimension], device: str) -> dict[str, Any] | None:
    """``base`` compiled in the first mode the search tries that captures the step in CUDA graphs (the compile
    knob's effect declares which: :class:`autotune.knobs.effects.Compile`); None when it tries none, and on a device
    other than CUDA (where those modes compile without graphs)."""
    if str(device).split(":")[0] != "cuda":
        return None
    for knob in knobs.REGISTRY:
        for effect in knob.effects:
            if isinstance(effect, Compile) and knob.name in search:
                modes = [v for v in search[knob.name].values() if v in effect.graphs]
                if modes:
                    return {**base, knob.name: modes[0]}
    return None


class _Unsettled(Exception):
    """A probe with CUDA graphs failed otherwise than for memory: the graphs do not decide the ceiling."""


def probe_graphs(runner: Runner, device: str, base: Mapping[str, Any], search: Mapping[str, Dimension],
                 found: Ceiling, max_memory_bytes: int | None,
                 on_probe: Callable[[int, str, int | None], None] | None = None, deadline: float | None = None
                 ) -> Ceiling:
    """The ceiling ``found`` (by :func:`probe`) as CUDA graphs' memory allows, where the search tries them.

    Torch's CUDA graph trees keep the step's memory in a pool of their own, beside what runs eagerly, so a batch
    that fits eagerly may not with the graphs. The defaults compiled in the search's graphs mode
    (:func:`graphs_config`, the most memory-hungry configuration with graphs, as the defaults are without) run at
    ``found``'s batch; a typed out-of-memory there (or a peak over ``--max-memory``) tries the next batch down,
    halving then bisecting as :func:`find` does. Each probe compiles, so only as many run as it takes: one where
    the graphs fit. Returns ``found`` with the graphs' probes; where a batch fits with them, its ceiling is theirs.
    Without a graphs mode in the search on ``device``, or without a batch that fits at all, ``found`` as it is;
    where a probe with the graphs fails otherwise (its compile fails or passes the compile limit), ``found`` with
    the probes run so far, and no more of them (each smaller batch would compile to the same end), as where its share
    of a time budget (``deadline``, as :func:`probe`'s) ran out."""
    config = graphs_config(base, search, device)
    if config is None or found.batch_size is None:
        return found
    values = [int(v) for v in search[knobs.BATCH_KNOB].values() if int(v) <= found.batch_size]
    fits = fits_with(lambda c: runner.measure(c, settings=probe_settings(), deadline=deadline), config,
                     max_memory_bytes)
    ran: list[tuple[int, str, int | None]] = []
    began = clock.monotonic()

    def reporting(batch: int) -> tuple[bool, str, int | None]:
        ok, outcome, peak = fits(batch)
        ran.append((batch, R.OK if ok else outcome, peak))
        if on_probe is not None:
            on_probe(batch, R.OK if ok else outcome, peak)
        if not ok and outcome not in (R.OOM, MAX_MEMORY):
            raise _Unsettled  # a compile that failed or ran out of time says nothing of memory, nor would smaller ones
        return ok, outcome, peak

    try:
        graphs = find(reporting, values, start=found.batch_size)
    except _Unsettled:
        return dataclasses.replace(found, graphs=ran, seconds=found.seconds + clock.monotonic() - began)
    seconds = found.seconds + graphs.seconds
    if graphs.batch_size is None:
        return dataclasses.replace(found, graphs=graphs.probes, seconds=seconds)
    binding = graphs.limit != SPACE  # a batch did not fit with the graphs: theirs is the limit
    return dataclasses.replace(found, batch_size=graphs.batch_size, graphs=graphs.probes, seconds=seconds,
                               limit=graphs.limit if binding else found.limit,
                               first_failing=graphs.first_failing if binding else found.first_failing)


def clip(dim: Dimension, ceiling: Ceiling, baseline: int) -> Dimension | None:
    """``dim`` without the batch sizes above the ceiling (the baseline's stays: it is always measured);
    None when no more than one value is left to search."""
    top = ceiling.batch_size
    if top is None:
        kept = Dimension(dim.knob, (baseline,))
    elif dim.choices is None:
        assert dim.low is not None
        if top < dim.low:
            kept = Dimension(dim.knob, (baseline,))
        else:
            kept = Dimension(dim.knob, None, dim.low,
                             dim.low + (min(top, dim.high or top) - dim.low) // dim.step * dim.step, dim.step)
    else:
        kept = Dimension(dim.knob, tuple(v for v in dim.choices if v <= top) or (baseline,))
    kept = kept.with_value(baseline)
    return kept if len(kept.values()) > 1 else None
