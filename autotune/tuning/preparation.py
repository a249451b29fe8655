"""Tune this workload in this store: the one composition behind ``autotune run``, ``autotune worker``,
``autotune submit`` and the Python API.

A :class:`autotune.request.TuneConfig` is everything that defines a tuning job (the
workload spec, the search space, the budget and how to measure). It is stored on its
study (``job``), so that a
worker on another machine joins with nothing but a study name and a storage URL, and
on a *job record* (a study that holds only the job, ``autotune_job``) when it is
submitted for a fleet: ``autotune worker --all`` then creates one study per hardware
kind, named ``<job>@<kind>`` (:func:`autotune.store.kind`), so one submission yields one
tuned configuration per kind of machine in the fleet.

The storage is the only shared state: budgets, de-duplication and stale trials are read
from it (:mod:`autotune.tuning.phases`); no process talks to another. The store is opened once by
the caller (:class:`autotune.store.Store`) and passed in; the study is opened here as a
:class:`autotune.store.LiveStudy` with the request's stale-trial grace (the one place it is
set), and a storage that refuses a write ends the work in one :class:`StorageError`
(:meth:`Store.faults`).
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import optuna

from autotune import clock
from autotune.tuning import ceiling_probe as ceilings
from autotune import knobs
from autotune.machine import load
from autotune.reports import view
from autotune.tuning import warmstart
from autotune.knobs import space as spaces
from autotune.tuning import loop
from autotune.evidence.ceiling import TIME, Ceiling
from autotune.errors import Said, SpaceError, StudyError
from autotune.tuning.phases import Bench, Seeds, sharing
from autotune.tuning.phases.bench import OnMeasure, slow_limit
from autotune.trial.protocol import Settings
from autotune.request import TuneConfig, option
from autotune.units import format_duration
from autotune.trial.runner import Runner
from autotune.store import LiveStudy, Store, StoredStudy, kind
#: ``AUTOTUNE_PAIRED=1``: the race measures a candidate alongside the defaults in shared processes
#: (:mod:`autotune.trial.paired`). Off by default: glibc's default heap carries one arm's allocations into the next
#: arm's speed, so shared processes are refused at the defaults' heap (:func:`autotune.knobs.apart`); where they are
#: sound, what each knob bought is measured in them (:mod:`autotune.evidence.bought`).
PAIRED_ENV = "AUTOTUNE_PAIRED"
#: The batch ceiling's share of a time budget: its probes stop there (an H200's four probes took 25 s of a 4-minute
#: budget), and the ceiling is the largest batch seen to fit.
CEILING_SHARE = 0.2


@dataclass
class Prepared:
    """A study ready to tune: what ``run`` prints before it starts, and the loop to start."""

    config: TuneConfig
    name: str
    store: Store
    live: LiveStudy
    created: bool
    recovered: list[int]
    tuner: loop.Tuner
    device: str
    space_name: str
    configurations: int
    searched: list[str]
    measured: int
    runner: Runner = field(repr=False)
    ceiling: Ceiling | None = None  # the batch-size ceiling the searched batch sizes were fitted to
    left_out: str | None = None  # what fitting the space to this machine left out, and why (space.Fitted.text)
    busy: dict[str, Any] = field(default_factory=dict)  # other processes' cores when it started (autotune.machine.load)
    warm: list[warmstart.Seed] = field(default_factory=list)  # earlier studies' winners, queued after the recipe

    @property
    def study(self) -> optuna.Study:
        return self.live.study

    def run(self, *, poll_s: float | None = None) -> loop.Summary:
        """Tune until the budget is spent; a storage that refuses a write ends it in one StorageError. ``poll_s``:
        how often to look while other processes measure the rest of the budget (``run --workers``: this process
        waits for its workers' last trials, then races)."""
        with self.store.faults():
            summary = self.tuner.run(poll_s=poll_s)
            view.keep(self.store, self.name)  # the views of the study as this run leaves it (autotune.store.kept)
            return summary

    def opening(self, workers: int = 1) -> list[str]:
        """What ``run`` and ``autotune.tune`` say before the first trial: the study, what the space left out here,
        the ceiling, re-queued trials."""
        lines = [
            f"{'new' if self.created else 'resuming'} study {self.name!r} in {self.store.shown}: {self.measured} "
            "measured, "
            f"target {self.config.trials}; space {self.space_name} ({self.configurations} configurations here: "
            f"{', '.join(self.searched)}); device {self.device}" + (f"; {workers} workers" if workers > 1 else "")
        ]
        if self.left_out:
            lines.append(f"left out here: {self.left_out}")
        other, cores = self.busy.get("other_cores"), self.busy.get("cores") or 1
        if other is not None and other > load.busy_threshold(cores):
            lines.append(f"warning: the machine is busy: {load.text(other, cores)} just now; figures measured while it "
                         "stays busy say little about a quiet machine (they are named in the verdict, and threads are "
                         "not recommended from them)")
        if set(self.searched) & set(knobs.compile_knobs()):
            lines.append(Said(f"compile: a compiled configuration's first step (the compilation, max-autotune's kernel "
                              f"benchmarks included) is stopped after {format_duration(self.config.compile_limit_s)} "
                              f"and recorded as too slow ({option('compile_limit_s')})"))
        inherited = knobs.inherited_environment(os.environ)
        if inherited:
            lines.append("not passed to trials: " + ", ".join(f"{k}={v}" for k, v in inherited.items())
                         + ": the knobs set these (at a knob's default, PyTorch's default holds)")
        if self.ceiling is not None:
            lines.append(f"batch ceiling: {self.ceiling.text()}")
        if self.warm:
            lines.append(warmstart.line(self.warm, self.tuner.seeds.base) or "")
        switched = self.tuner.sampler_opening() if self.tuner is not None else None  # (None: an opening alone)
        if switched:
            lines.append(switched)
        if self.recovered:
            n = len(self.recovered)
            lines.append(f"re-queued {n} trial{'s' if n > 1 else ''} left running by a stopped process: "
                         + ", ".join(f"#{t}" for t in self.recovered))
        return lines


def load_space(config: TuneConfig, device: str) -> spaces.Space:
    return spaces.load(config.space_name(device))


def prepare(
    config: TuneConfig,
    name: str,
    store: Store,
    device: str,
    *,
    on_trial: Callable[[loop.TrialRecord], None] | None = None,
    on_repeat: OnMeasure | None = None,
    on_probe: Callable[[int, str, int | None], None] | None = None,
    race: bool = True,
    join_only: bool = False,
    job_of: str | None = None,
    make_runner: Callable[..., Runner] | None = None,
) -> Prepared:
    """Prepare a study to tune, in steps, each entered once and in order: :func:`look` (the storage answers, the
    machine's load), :func:`probe` (the workload, where trials run), :func:`fit` (the space, to this workload here),
    :func:`find_ceiling` (the largest batch that fits, for a new study), :func:`open_study` (create it or check it
    matches, its budgets and ceiling), :func:`recover` (stale trials re-queued), :func:`warm_start` (the seeds: the
    defaults, the recipe, earlier studies' winners when asked), :func:`build_loop` (the measuring bench, the loop).

    ``join_only``: the study must exist already (a worker joining); ``race``: run the final race
    when the budget is spent (workers started by ``run --workers`` leave it to ``run``);
    ``on_probe(batch, outcome, peak bytes)``: after each probe of the batch-size ceiling; ``job_of``: the submitted
    job a per-kind study works for (recorded on it when it is created); ``make_runner``: what measures, built as
    :class:`autotune.trial.runner.Runner` is (a simulated device's runner in :mod:`autotune.testing.simulated`, which
    also hands the study its clock: :mod:`autotune.clock`).
    """
    started = clock.now()  # a time budget counts from here: the probes and the ceiling are part of the run's time
    with store.faults():
        looked = look(store, name, join_only)
        probed = probe(config, device, make_runner, started=started)
        fitted = fit(config, device, probed)
        found = find_ceiling(config, device, probed, fitted, fresh=not join_only and name not in looked.names,
                             on_probe=on_probe, started=started)
        opened = open_study(config, store, name, device, probed, fitted, found, join_only=join_only, job_of=job_of)
        recovered = recover(opened.live)
        seeds, warm = warm_start(config, store, probed, fitted, opened)
        return build_loop(config, store, name, device, looked, probed, fitted, opened, recovered, seeds, warm,
                          race=race, join_only=join_only, on_trial=on_trial, on_repeat=on_repeat, started=started)


# ---------------------------------------------------------------- the steps, in order


@dataclass(frozen=True)
class Looked:
    """Before anything of ours runs: the studies the storage holds, and how busy the machine is."""

    names: list[str]
    busy: dict[str, Any]


def look(store: Store, name: str, join_only: bool) -> Looked:
    """The storage answers (an unreachable one fails before any measurement) and holds the study when joining; the
    load other processes put on the machine before anything of ours runs."""
    names = store.names()
    busy = load.other_cores_now()
    if join_only and name not in names:
        store.load(name)  # the clear error: no such study, and those there are
    return Looked(names, busy)


@dataclass(frozen=True)
class Probed:
    """The workload as a trial process found it: where it runs (its context and fingerprint), the defaults it is
    measured against (the space's fixed knobs and the workload's own batch), and the runner that measures it."""

    runner: Runner
    space: spaces.Space
    context: dict[str, Any]
    fingerprint: dict[str, Any]
    base: dict[str, Any]

    @property
    def ctx(self) -> knobs.Context:
        return knobs.Context.from_dict(self.context)


def probe(config: TuneConfig, device: str, make_runner: Callable[..., Runner] | None = None,
          started: float | None = None) -> Probed:
    """Build the workload once in a trial process (a factory that fails says so here) and read what decides which
    knobs apply; the space file is read first (a bad one fails before any process starts). Bounded by the trial
    timeout, and by what is left of a time budget counted from ``started``."""
    space = load_space(config, device)
    runner = (make_runner or Runner)(config.spec, device=device, timeout_s=config.trial_timeout_s,
                                     settings=Settings.quick() if config.quick else Settings(),
                                     global_batch=config.global_batch, compile_limit_s=config.compile_limit_s)
    timeout_s = config.trial_timeout_s
    if config.time_budget_s is not None:
        spent = clock.now() - (started if started is not None else clock.now())
        timeout_s = max(1.0, min(timeout_s, config.time_budget_s - spent))
    found = runner.probe(timeout_s=timeout_s)
    ctx = knobs.Context.from_dict(found["context"])
    base = loop.base_config(ctx, space.fixed, found["workload"].get(knobs.BATCH_KNOB))
    return Probed(runner, space, found["context"], found["fingerprint"], base)


def fit(config: TuneConfig, device: str, probed: Probed) -> spaces.Fitted:
    """The space fitted to this workload on this device (what does not apply, or cannot pay, left out and said), the
    batch sizes kept to those that divide ``--global-batch``; a space with nothing left to search is refused."""
    fitted = spaces.fit(probed.space, probed.ctx, probed.base)
    effective = fitted.space
    if config.global_batch:
        knobs.accumulation_steps(config.global_batch, probed.base[knobs.BATCH_KNOB])  # the baseline's batch divides it
        dim = effective.search.get(knobs.BATCH_KNOB)
        if dim is not None:
            effective.search[knobs.BATCH_KNOB] = spaces.Dimension(
                knobs.BATCH_KNOB, tuple(v for v in dim.values() if knobs.keeps_global_batch(config.global_batch, v)))
    if not effective.search:
        raise SpaceError(f"{probed.space.path}: none of its knobs applies to this workload on {device}: nothing to tune"
                         + (f" (left out here: {fitted.text()})" if fitted.left_out else ""))
    return fitted


def find_ceiling(config: TuneConfig, device: str, probed: Probed, fitted: spaces.Fitted, *, fresh: bool,
                 on_probe: Callable[[int, str, int | None], None] | None = None, started: float | None = None
                 ) -> Ceiling | None:
    """The largest batch that fits, probed before a new study exists so that every trial of it searches the same batch
    sizes (a study that exists keeps the one it stored); None when not probed, or when a time budget's share
    (:data:`CEILING_SHARE` of it, from ``started``) was spent before a probe finished."""
    dim = fitted.space.search.get(knobs.BATCH_KNOB)
    if not fresh or dim is None or not config.probes_ceiling(device):
        return None
    deadline = None
    if config.time_budget_s is not None:
        deadline = (started if started is not None else clock.now()) + CEILING_SHARE * config.time_budget_s
    found = ceilings.probe(probed.runner, probed.base, dim, config.max_memory_bytes, on_probe, deadline=deadline)
    if found.batch_size is None and found.limit == TIME:
        return None
    return ceilings.probe_graphs(probed.runner, device, probed.base, fitted.space.search, found,
                                 config.max_memory_bytes, on_probe, deadline=deadline)  # as CUDA graphs' memory allows


@dataclass(frozen=True)
class Opened:
    """The study this process writes: whether it was created here, its memory budget and its batch ceiling."""

    live: LiveStudy
    created: bool
    max_memory_bytes: int | None
    ceiling: Ceiling | None


def open_study(config: TuneConfig, store: Store, name: str, device: str, probed: Probed, fitted: spaces.Fitted,
               found: Ceiling | None, *, join_only: bool, job_of: str | None) -> Opened:
    """Create the study with its description, or check that the one stored was made for this setup (the space, the
    machine, the workload, the memory budget); save the budget, the ceiling and the job; keep the searched batch
    sizes to the stored ceiling."""
    config.check_objectives(device)
    attrs = {
        "workload": config.spec.to_dict(payload=False),  # its name, never a pickled factory's bytes
        "space": probed.space.to_dict(),
        "space_hash": probed.space.hash(),
        "fingerprint": probed.fingerprint,
        "device": device,
        "context": probed.context,
        "global_batch": config.global_batch,
        "objectives": config.objectives,  # the front's axes, fixed with the study (autotune.store.matching)
        **({"job_of": job_of} if job_of else {}),
    }
    live, created = open_live(config, store, name, attrs)
    if not created:
        # a resumed or joined study: its trials in one quick read, not Optuna's ORM (7 s at 10,000 trials)
        live.warm_cache()
    stored_memory = live.records().max_memory_bytes
    if not created and config.max_memory_bytes is not None and config.max_memory_bytes != stored_memory:
        from autotune.units import format_bytes

        was = format_bytes(stored_memory) if stored_memory else "no budget"
        raise StudyError(f"study {name!r} was made with {option('max_memory', was)}; pass the same value, or start a "
                         f"new study with {option('study', f'{name}-2')}")
    if created:
        live.save(max_memory_bytes=config.max_memory_bytes)
        if found is not None:
            live.save(batch_ceiling=found.to_dict())
    stored_ceiling = live.records().batch_ceiling
    ceiling = Ceiling.from_dict(stored_ceiling) if stored_ceiling else None
    effective = fitted.space
    if ceiling is not None and knobs.BATCH_KNOB in effective.search:
        clipped = ceilings.clip(effective.search[knobs.BATCH_KNOB], ceiling, probed.base[knobs.BATCH_KNOB])
        if clipped is None:
            del effective.search[knobs.BATCH_KNOB]
        else:
            effective.search[knobs.BATCH_KNOB] = clipped
        if not effective.search:
            raise SpaceError(f"{probed.space.path}: only the batch size is searched here, and no batch but the "
                             f"baseline's fits (batch ceiling: {ceiling.text()})")
    if created or not join_only:
        live.save(job=config.to_dict())  # what workers that join later follow (a run may raise --trials)
    return Opened(live, created, config.max_memory_bytes if created else stored_memory, ceiling)


def recover(live: LiveStudy) -> list[int]:
    """Trials left running by a stopped process, failed and queued again (their numbers)."""
    return live.recover_stale()


def warm_start(config: TuneConfig, store: Store, probed: Probed, fitted: spaces.Fitted, opened: Opened
               ) -> tuple[Seeds, list[warmstart.Seed]]:
    """The first configurations the search measures: PyTorch's defaults, the guides' recipe and, for a new study with
    ``--warm-start``, the winners of earlier studies in the same storage on this kind of machine."""
    seeds = Seeds(fitted.space, probed.ctx, probed.base)
    warm = warmstart.seeds(store, opened.live, opened.created, config.warm_start, probed.fingerprint, seeds)
    seeds.warm = [(seed.params, seed.attrs()) for seed in warm]
    return seeds, warm


def build_loop(config: TuneConfig, store: Store, name: str, device: str, looked: Looked, probed: Probed,
               fitted: spaces.Fitted, opened: Opened, recovered: list[int], seeds: Seeds, warm: list[warmstart.Seed],
               *, race: bool, join_only: bool, on_trial: Any, on_repeat: Any, started: float | None = None) -> Prepared:
    """The loop to run: how this process measures (the bench), its options, and what ``run`` says before it starts
    (``started``: when the run began, epoch seconds: its time budget counts from then; default now)."""
    live, runner = opened.live, probed.runner
    options = loop.Options.of(config, max_memory_bytes=opened.max_memory_bytes, race=race,
                           deadline=_deadline(live, config, opened.created, join_only, started),
                           placement=placement(device))

    # Every process is stopped at the end of the time its phase may take (bench.until, set by the loop per phase).
    def evaluate(config: Mapping[str, Any], dominators: Any = (), margin: float | None = None) -> Any:
        return runner.measure(config, dominators, margin, limit_s=slow_limit(live, config), deadline=bench.until)

    def remeasure(config: Mapping[str, Any]) -> Any:
        return runner.measure(config, settings=runner.settings.lean(), limit_s=slow_limit(live, config),
                              deadline=bench.until)

    def together(configs: Any) -> Any:
        return runner.measure_together(configs, settings=runner.settings.lean(), deadline=bench.until)

    def numerics(*args: Any, **kwargs: Any) -> Any:
        return runner.numerics(*args, deadline=bench.until, **kwargs)

    bench = Bench(evaluate, remeasure, together=together if os.environ.get(PAIRED_ENV) == "1" else None,
                  ablate=together,
                  numerics=numerics if runner.numerics is not None else None, on_repeat=on_repeat)
    effective = fitted.space
    tuner = loop.Tuner(live, seeds, bench, options, on_trial=on_trial, check=store.check_alive)
    measured = sharing.budget_counts(live.trials())[0]
    return Prepared(config, name, store, live, opened.created, recovered, tuner, device, probed.space.name,
                    effective.size(), list(effective.search), measured, runner, opened.ceiling, left_out=fitted.text(),
                    busy=looked.busy, warm=warm)


def open_live(config: TuneConfig, store: Store, name: str, attrs: Mapping[str, Any]) -> tuple[LiveStudy, bool]:
    """The study ``name`` opened for this process to write, created with ``attrs`` or checked against them, with the
    request's sampler and stale-trial grace (:meth:`TuneConfig.stale_grace_s`: derived here, once, for every phase
    and for recovery). Returns (study, created)."""
    study, created = store.create_or_check(name, attrs, loop.make_sampler(config.sampler, config.seed))
    return LiveStudy(study, grace_s=config.stale_grace_s), created


def _deadline(live: LiveStudy, config: TuneConfig, created: bool, joining: bool, started: float | None = None
              ) -> float | None:
    """``--time-budget``: for a run, from its start (``started``, before the workload's probe and the batch ceiling's:
    they are part of the time it takes; default now); for a fleet, from the study's creation (the stored deadline)."""
    if config.time_budget_s is None:
        return None
    stored = live.records().deadline
    if joining and stored:
        return float(stored)
    deadline = (started if started is not None else clock.now()) + config.time_budget_s
    if created or not stored:
        live.save(deadline=deadline)
    return deadline


def placement(device: str) -> dict[str, Any]:
    """The device and cores this process measures on (recorded on each trial)."""
    import socket

    out: dict[str, Any] = {"host": socket.gethostname(), "device": device, "cpus": sorted(os.sched_getaffinity(0))}
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        out["cuda_visible_devices"] = os.environ["CUDA_VISIBLE_DEVICES"]
    inherited = knobs.inherited_environment(os.environ)
    if inherited:
        out["not_inherited"] = inherited  # the shell's values of variables the knobs set: trials ran without them
    return out


def stored_config(study: StoredStudy) -> TuneConfig:
    """The job a study was created for (workers join with it), or the job a job record holds."""
    raw = study.job or study.job_record
    if not raw:
        raise StudyError(f"study {study.name!r} holds no job (made before autotune 0.2): run it with `autotune run`")
    return TuneConfig.from_dict(raw)


def is_job_record(study: StoredStudy) -> bool:
    """A submitted job's record (``autotune submit``): its studies are ``<job>@<kind>``."""
    return bool(study.job_record)


# ---------------------------------------------------------------- jobs for a fleet


def submit(config: TuneConfig, name: str, store: Store) -> optuna.Study:
    """Record a job in the storage and return at once; ``autotune worker --all`` picks it up."""
    load_space(config, "cpu")  # a bad space file fails now, not on the fleet
    with store.faults():
        study = store.create(name)
        LiveStudy(study).save(job_record={**config.to_dict(),
                                          "submitted_at":
                                              dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})
    return study


def jobs(studies: Iterable[Any]) -> list[tuple[str, TuneConfig]]:
    """Every submitted job among a store's studies (:meth:`Store.summaries`), oldest first."""
    out = []
    for summary in studies:
        raw = summary.job_record
        if raw:
            out.append((summary.name, TuneConfig.from_dict(raw)))
    return out


def kind_study_name(job_name: str, fingerprint: Mapping[str, Any]) -> str:
    return f"{job_name}@{kind(fingerprint)}"
