"""Tune this workload in this storage: the one composition behind ``autotune run``, ``autotune worker``,
``autotune submit`` and the Python API.

A :class:`Job` is everything that defines a tuning job (the workload spec, the search
space, the budget and how to measure). It is stored on its study (``job``), so that a
worker on another machine joins with nothing but a study name and a storage URL, and
on a *job record* (a study that holds only the job, ``autotune_job``) when it is
submitted for a fleet: ``autotune worker --all`` then creates one study per hardware
kind, named ``<job>@<kind>`` (:func:`autotune.storage.kind`), so one submission yields one
tuned configuration per kind of machine in the fleet.

The storage is the only shared state: budgets, de-duplication and stale trials are read
from it (:class:`autotune.study.Tuner`); no process talks to another.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Mapping

import optuna

from autotune import knobs
from autotune import space as spaces
from autotune import ceiling as ceilings
from autotune.ceiling import Ceiling
from autotune import storage as stores
from autotune import study as S
from autotune.errors import KnobError, SpaceError, StudyError
from autotune.protocol import Settings
from autotune.race import OnMeasure
from autotune.runner import Runner
from autotune.workload import WorkloadSpec

JOB = "autotune_job"  # the attribute of a job record
JOB_OF = "job_of"  # on a per-kind study: the job record it works for


@dataclass
class Job:
    """What to tune and how (everything but where: the study name and storage URL)."""

    spec: WorkloadSpec
    space: str | None = None  # a name in search_spaces/ or a path; default: 'cpu' on a CPU, 'default' on a GPU
    trials: int = 30
    time_budget_s: float | None = None
    max_memory_bytes: int | None = None
    global_batch: int | None = None
    sampler: str = S.DEFAULT_SAMPLER
    seed: int | None = None
    quick: bool = False
    early_stop: bool = True
    confirm: int = S.DEFAULT_RACE_ROUNDS
    trial_timeout_s: float = 600.0
    batch_ceiling: bool | None = None  # probe the largest batch that fits; None: on a GPU or with --max-memory

    def probes_ceiling(self, device: str) -> bool:
        """Whether to find the batch ceiling before searching batch sizes (see :mod:`autotune.ceiling`)."""
        if self.batch_ceiling is not None:
            return self.batch_ceiling
        return device != "cpu" or self.max_memory_bytes is not None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["spec"] = self.spec.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Job:
        names = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names and k != "spec"}
        return cls(spec=WorkloadSpec.from_dict(d["spec"]), **kwargs)

    def validate(self) -> None:
        if self.global_batch is not None and self.global_batch <= 0:
            raise KnobError(f"the global batch (--global-batch, global_batch=) must be positive, not {self.global_batch}")
        if self.trials < 1:
            raise KnobError(f"the trial budget (--trials, trials=) must be at least 1, not {self.trials}")


@dataclass
class Prepared:
    """A study ready to tune: what ``run`` prints before it starts, and the loop to start."""

    job: Job
    name: str
    url: str
    study: optuna.Study
    created: bool
    recovered: list[int]
    tuner: S.Tuner
    device: str
    space_name: str
    configurations: int
    searched: list[str]
    measured: int
    runner: Runner = field(repr=False)
    ceiling: Ceiling | None = None  # the batch-size ceiling the searched batch sizes were fitted to

    def run(self) -> S.Summary:
        return self.tuner.run()

    def opening(self, workers: int = 1) -> list[str]:
        """What ``run`` and ``autotune.tune`` say before the first trial: the study, the ceiling, re-queued trials."""
        lines = [
            f"{'new' if self.created else 'resuming'} study {self.name!r} in {stores.redact(self.url)}: {self.measured} measured, "
            f"target {self.job.trials}; space {self.space_name} ({self.configurations} configurations here: "
            f"{', '.join(self.searched)}); device {self.device}" + (f"; {workers} workers" if workers > 1 else "")
        ]
        if self.ceiling is not None:
            lines.append(f"batch ceiling: {self.ceiling.text()}")
        if self.recovered:
            n = len(self.recovered)
            lines.append(f"re-queued {n} trial{'s' if n > 1 else ''} left running by a stopped process: "
                         + ", ".join(f"#{t}" for t in self.recovered))
        return lines


def load_space(job: Job, device: str) -> spaces.Space:
    return spaces.load(job.space or ("cpu" if device == "cpu" else "default"))


def prepare(
    job: Job,
    name: str,
    url: str,
    device: str,
    *,
    on_trial: Callable[[S.TrialRecord], None] | None = None,
    on_repeat: OnMeasure | None = None,
    on_probe: Callable[[int, str, int | None], None] | None = None,
    race: bool = True,
    join_only: bool = False,
    extra_attrs: Mapping[str, Any] | None = None,
) -> Prepared:
    """Probe the workload, create the study (or check it matches), recover stale trials, build the Tuner.

    ``join_only``: the study must exist already (a worker joining); ``race``: run the final race
    when the budget is spent (workers started by ``run --workers`` leave it to ``run``);
    ``on_probe(batch, outcome, peak bytes)``: after each probe of the batch-size ceiling.
    """
    job.validate()
    store = stores.open_storage(url)  # an unreachable storage fails before any measurement; opened once
    if join_only:
        stores.load(name, url, store)  # a clear error when there is no such study
    space = load_space(job, device)
    runner = Runner(job.spec, device=device, timeout_s=job.trial_timeout_s,
                    settings=Settings.quick() if job.quick else Settings(), global_batch=job.global_batch)
    probe = runner.probe()
    ctx = knobs.Context.from_dict(probe["context"])
    base = S.base_config(ctx, space.fixed, probe["workload"].get("batch_size"))
    effective = spaces.effective(space, ctx, base)
    if job.global_batch:
        if job.global_batch % base["batch_size"]:
            raise KnobError(f"--global-batch {job.global_batch} is not a multiple of the baseline batch size {base['batch_size']}")
        dim = effective.search.get("batch_size")
        if dim is not None:
            effective.search["batch_size"] = spaces.Dimension("batch_size", tuple(v for v in dim.values() if job.global_batch % v == 0))
    if not effective.search:
        raise SpaceError(f"{space.path}: none of its knobs applies to this workload on {device}: nothing to tune")
    # The batch ceiling is found before a new study exists, so that every trial of a study
    # searches the same batch sizes; a study that exists keeps the one it stored.
    fresh = not join_only and name not in stores.study_names(store)
    found = None
    if fresh and "batch_size" in effective.search and job.probes_ceiling(device):
        found = ceilings.probe(runner, base, effective.search["batch_size"], job.max_memory_bytes, on_probe)
    attrs = {
        "workload": job.spec.to_dict(payload=False),  # its name, never a pickled factory's bytes
        "space": space.to_dict(),
        "space_hash": space.hash(),
        "fingerprint": probe["fingerprint"],
        "device": device,
        "context": probe["context"],
        "global_batch": job.global_batch,
        **(extra_attrs or {}),
    }
    study, created = stores.create_or_check(name, url, attrs, S.make_sampler(job.sampler, job.seed), store)
    stored_memory = study.user_attrs.get("max_memory_bytes")
    if not created and job.max_memory_bytes is not None and job.max_memory_bytes != stored_memory:
        from autotune.units import format_bytes

        was = format_bytes(stored_memory) if stored_memory else "no budget"
        raise StudyError(f"study {name!r} was made with --max-memory {was}; pass the same value, or start a new study with --study {name}-2")
    if created:
        study.set_user_attr("max_memory_bytes", job.max_memory_bytes)
        if found is not None:
            study.set_user_attr(ceilings.ATTR, found.to_dict())
    ceiling = ceilings.stored(study)
    if ceiling is not None and "batch_size" in effective.search:
        clipped = ceilings.clip(effective.search["batch_size"], ceiling, base["batch_size"])
        if clipped is None:
            del effective.search["batch_size"]
        else:
            effective.search["batch_size"] = clipped
        if not effective.search:
            raise SpaceError(f"{space.path}: only the batch size is searched here, and no batch but the baseline's fits "
                             f"(batch ceiling: {ceiling.text()})")
    if created or not join_only:
        study.set_user_attr("job", job.to_dict())  # what workers that join later follow (a run may raise --trials)
    memory = job.max_memory_bytes if created else stored_memory
    grace = 2 * job.trial_timeout_s + 60
    recovered = stores.recover_stale(study, grace_s=grace)
    deadline = _deadline(study, job, created, join_only)
    options = S.Options(
        trials=job.trials,
        max_memory_bytes=memory,
        early_stop=job.early_stop,
        race_rounds=job.confirm if race else 0,
        deadline=deadline,
        placement=placement(device),
        stale_grace_s=grace,
    )
    tuner = S.Tuner(study, effective, ctx, base, runner.measure, options, on_trial=on_trial, on_repeat=on_repeat)
    measured = sum(1 for t in study.get_trials(deepcopy=False) if S.is_measured(t))
    return Prepared(job, name, url, study, created, recovered, tuner, device, space.name, effective.size(), list(effective.search),
                    measured, runner, ceiling)


def _deadline(study: optuna.Study, job: Job, created: bool, joining: bool) -> float | None:
    """``--time-budget``: for a run, from now; for a fleet, from the study's creation (the stored deadline)."""
    if job.time_budget_s is None:
        return None
    stored = study.user_attrs.get("deadline")
    if joining and stored:
        return float(stored)
    deadline = time.time() + job.time_budget_s
    if created or not stored:
        study.set_user_attr("deadline", deadline)
    return deadline


def placement(device: str) -> dict[str, Any]:
    """The device and cores this process measures on (recorded on each trial)."""
    import socket

    out: dict[str, Any] = {"host": socket.gethostname(), "device": device, "cpus": sorted(os.sched_getaffinity(0))}
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        out["cuda_visible_devices"] = os.environ["CUDA_VISIBLE_DEVICES"]
    return out


def stored_job(study: optuna.Study) -> Job:
    """The job a study was created for (workers join with it)."""
    raw = study.user_attrs.get("job")
    if not raw:
        raise StudyError(f"study {study.study_name!r} holds no job (made before autotune 0.2): run it with `autotune run`")
    return Job.from_dict(raw)


# ---------------------------------------------------------------- jobs for a fleet


def submit(job: Job, name: str, url: str) -> optuna.Study:
    """Record a job in the storage and return at once; ``autotune worker --all`` picks it up."""
    job.validate()
    load_space(job, "cpu")  # a bad space file fails now, not on the fleet
    store = stores.open_storage(url)
    if name in stores.study_names(store):
        raise StudyError(f"a study or job named {name!r} exists in {stores.redact(url)}: choose another --study name")
    study = optuna.create_study(study_name=name, storage=store, directions=stores.DIRECTIONS)
    study.set_user_attr(JOB, {**job.to_dict(), "submitted_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})
    return study


def jobs(url: str) -> list[tuple[str, Job]]:
    """Every submitted job in a storage, oldest first."""
    store = stores.open_storage(url)
    out = []
    for summary in store.get_all_studies():
        raw = summary.user_attrs.get(JOB)
        if raw:
            out.append((summary.study_name, Job.from_dict(raw)))
    return out


def kind_study_name(job_name: str, fingerprint: Mapping[str, Any]) -> str:
    return f"{job_name}@{stores.kind(fingerprint)}"


def listing(url: str) -> list[dict[str, Any]]:
    """Every job and study in a storage, as ``autotune list`` shows them."""
    store = stores.open_storage(url)
    names = stores.study_names(store)
    docs: list[dict[str, Any]] = []
    for summary in store.get_all_studies():
        raw = summary.user_attrs.get(JOB)
        if raw:
            docs.append({"study": summary.study_name, "kind": "job", "budget": raw.get("trials"),
                         "submitted_at": raw.get("submitted_at"), "workload": raw.get("spec"),
                         "studies": [n for n in names if n.startswith(summary.study_name + "@")]})
            continue
        docs.append(stores.summary(optuna.load_study(study_name=summary.study_name, storage=store)))
    return docs
