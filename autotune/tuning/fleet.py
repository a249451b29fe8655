"""Workers: processes that tune studies from a shared storage until their budgets are spent.

- :func:`work_on` joins one study (``autotune worker --study NAME --storage URL``) with the
  job stored on it, and measures until the study's budget is spent;
- :func:`serve` is the daemon (``autotune worker --all --storage URL``): it takes every
  submitted job with budget left, creates the job's study for this machine's hardware kind
  when there is none (``<job>@<kind>``), works on it, and polls for more;
- :func:`spawn_local` starts the processes of ``autotune run --workers K`` /
  ``--devices 0,1``: each worker pinned to its share of the cores (or sees one GPU only),
  so two trials never share a device, and the ``threads`` knob is bounded by the share.

The storage is the only shared state (Optuna's RDB or journal storage); nothing here
talks to another process. Each worker opens its store once. When a database server
goes away, a worker logs one line and retries with back-off; the trial it was
measuring is re-queued (a stale trial) and measured again, so nothing is lost. A
storage that refuses writes (read-only, full, deleted) ends the worker in one line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from autotune import clock
from autotune.tuning import preparation
from autotune.errors import AutotuneError, DeviceError, StorageError, StorageUnreachable
from autotune.knobs.launch import RANKS
from autotune.request import DEFAULT_POLL_S, FIELDS, TuneConfig, option
from autotune.store import Store, StoredStudy

Log = Callable[[str], None]

BACKOFF_S = (1, 2, 4, 8, 15, 30, 60)


def retrying(what: Callable[[], Any], log: Log, store: Store | None = None, stop_after_s: float | None = None) -> Any:
    """Run ``what``; while the database server is unreachable, log one line per attempt and retry with back-off.

    Only an unreachable server is waited for: a storage that refuses writes (read-only, full, deleted)
    is raised at once as a StorageError that says why, and so is every other error.
    """
    attempt = 0
    start = clock.monotonic()
    while True:
        try:
            return what()
        except KeyboardInterrupt:
            raise
        except StorageUnreachable as exc:
            reason = exc.reason
        except AutotuneError:
            raise
        except Exception as exc:  # noqa: BLE001 - only an unreachable server is retried
            fault = store.fault(exc) if store is not None else None
            if fault is None:
                raise
            if not isinstance(fault, StorageUnreachable):
                raise fault from None
            reason = fault.reason
        if stop_after_s is not None and clock.monotonic() - start > stop_after_s:
            raise StorageError(f"the storage stayed unreachable for {stop_after_s:.0f} s: {reason}") from None
        wait = BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]
        log(f"storage unreachable ({reason}); retrying in {wait} s")
        clock.sleep(wait)
        attempt += 1


def open_store(url: str, log: Log) -> Store:
    """The worker's store, opened once (waiting while its database server is unreachable)."""
    return retrying(lambda: Store.open(url), log)


def work_on(name: str, store: Store, device: str, log: Log, race: bool = True, **callbacks: Any) -> Any:
    """Join a study and measure until its budget is spent; returns the last run's Summary.

    ``name`` may also be a submitted job (``autotune submit --study NAME``): the worker then
    works on the job's study for this machine's hardware kind, as ``worker --all`` would.
    """

    def once() -> Any:
        study = _described(store, name)
        config = preparation.stored_config(study)
        if preparation.is_job_record(study):
            return _work_on_job(name, config, store, device, log, **callbacks)
        return preparation.prepare(config, name, store, device, race=race, join_only=True, **callbacks).run()

    return retrying(once, log, store)


def _work_on_job(job_name: str, config: TuneConfig, store: Store, device: str, log: Log, **callbacks: Any) -> Any:
    from autotune.machine import hardware

    name = preparation.kind_study_name(job_name, hardware.fingerprint(device))
    log(f"job {job_name!r}: working on study {name!r}")
    return preparation.prepare(config, name, store, device, job_of=job_name, **callbacks).run()


def serve(store: Store, device: str, log: Log, poll_s: float = DEFAULT_POLL_S, exit_when_idle: bool = False,
          **callbacks: Any) -> int:
    """The daemon's loop: work on every job with budget left for this machine's kind; returns studies worked on.

    One store for the whole loop (one engine, one connection pool): a poll is one query for the
    studies, and one more per job whose study for this machine exists.
    """
    from autotune.machine import hardware

    worked = 0
    fingerprint = hardware.fingerprint(device)
    while True:
        frozen = retrying(store.summaries, log, store)
        names = {s.name for s in frozen}
        did = False
        for job_name, config in preparation.jobs(frozen):
            name = preparation.kind_study_name(job_name, fingerprint)
            if name in names and _budget_spent(name, store, config, log):
                continue
            log(f"job {job_name!r}: working on study {name!r}")
            try:
                retrying(
                    lambda: preparation.prepare(config, name, store, device, job_of=job_name, **callbacks).run(),
                    log, store,
                )
            except StorageError:
                raise  # the storage refuses writes: no job can go on
            except AutotuneError as exc:
                log(f"job {job_name!r} skipped: {exc}")
                continue
            did = True
            worked += 1
        if not did:
            if exit_when_idle:
                return worked
            clock.sleep(poll_s)


def _described(store: Store, name: str) -> StoredStudy:
    """The study (or submitted job) ``name``: its description and records, without its trials (one query)."""
    found = next((s for s in store.summaries() if s.name == name), None)
    return found if found is not None else store.read(name)  # read says why not: no such study, and those there are


def _budget_spent(name: str, store: Store, config: TuneConfig, log: Log) -> bool:
    def check() -> bool:
        study = store.read(name)  # each poll reads the study afresh: in one pass, not through Optuna's ORM
        measured = sum(1 for t in study.trials if t.measured)
        raced = config.confirm <= 0 or any(r.done and r.measured == measured for _, r in study.races())
        late = bool(study.deadline) and clock.now() >= float(study.deadline)  # type: ignore[arg-type]
        return (measured >= config.trials or late) and raced

    return bool(retrying(check, log, store))


# ---------------------------------------------------------------- several workers on this machine


def shares(workers: int, cpus: Sequence[int] | None = None) -> list[list[int]]:
    """Split the cores this process may use into ``workers`` contiguous shares (at least one core each)."""
    cores = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    if workers > len(cores):
        raise AutotuneError(f"{option('workers', workers)}: this machine lets autotune use {len(cores)} cores; "
                            "one worker needs one at least")
    size, extra = divmod(len(cores), workers)
    out, start = [], 0
    for i in range(workers):
        n = size + (1 if i < extra else 0)
        out.append(cores[start : start + n])
        start += n
    return out


@dataclass(frozen=True)
class Here:
    """How a run measures on this machine: ``workers`` trials at once, each worker pinned to its share of the cores,
    or one trial per GPU of ``devices`` (each worker sees its own GPU only, and a share of the cores). ``run
    --workers/--devices`` and ``tune(workers=, devices=)`` make one with :meth:`of`, checked alike."""

    workers: int = 1
    devices: tuple[int, ...] = ()

    @classmethod
    def of(cls, workers: Any = 1, devices: str | Sequence[int] | None = None) -> Here:
        """Checked: at least one worker; GPUs as numbers (``"0,1"`` or ``[0, 1]``) that this machine has."""
        FIELDS["workers"].check(workers)
        if devices is None or devices == "" or (not isinstance(devices, str) and not list(devices)):
            return cls(int(workers))
        if isinstance(devices, str):
            ids = parse_devices(devices)
        else:
            if not all(isinstance(d, int) and not isinstance(d, bool) for d in devices):
                raise FIELDS["devices"].error("expected GPU numbers such as [0, 1, 2, 3]", devices, valued=True)
            ids = tuple(devices)
        from autotune.machine.hardware import check_device

        for i in ids:
            check_device(f"cuda:{i}")
        return cls(int(workers), ids)

    @property
    def processes(self) -> int:
        """Trials measured at once."""
        return len(self.devices) or self.workers

    def device(self, device: str) -> str:
        """The device the study is made for: each GPU worker's own is its ``cuda:0``."""
        return "cuda:0" if self.devices else device

    def run(self, prepared: Any) -> Any:
        """Tune ``prepared`` here: in this process alone, or with worker processes that measure (this one waits for
        them, then runs the final race and the verdict); an interrupt stops the workers too (SIGTERM) and goes on.
        With ``devices``, a worker holds as many GPUs as the most ranks a configuration of the study's space trains
        as (:func:`device_groups`): a trial of N ranks counts as N devices."""
        groups = device_groups(self.devices, ranks_per_trial(prepared.tuner.seeds))
        if self.processes <= 1:
            return prepared.run()
        procs = spawn_local(prepared.name, prepared.store, self.workers, groups, prepared.device)
        try:
            for p in procs:
                p.wait()
        except KeyboardInterrupt:
            for p in procs:
                p.send_signal(signal.SIGTERM)
            for p in procs:
                p.wait()
            raise
        return prepared.run(poll_s=0.5)  # the budget is spent: this records nothing new but races and decides


def parse_devices(text: str) -> tuple[int, ...]:
    """GPU numbers as ``--devices`` takes them: ``0,1,2,3``, ranges ``0-7``, or both (``0-3,6``)."""
    ids: list[int] = []
    try:
        for part in (p.strip() for p in text.split(",")):
            if "-" in part:
                first, last = (int(x) for x in part.split("-", 1))
                if last < first:
                    raise ValueError(part)
                ids.extend(range(first, last + 1))
            elif part:
                ids.append(int(part))
    except ValueError:
        raise FIELDS["devices"].error("expected GPU numbers such as 0,1,2,3 or 0-7", text, valued=True) from None
    return tuple(ids)


def device_masks(devices: Sequence[int], visible: str | None) -> list[str]:
    """Each worker's ``CUDA_VISIBLE_DEVICES`` for ``--devices``: the GPU at each index of the mask this process was
    given (``visible``: indices, UUIDs or MIG names, as CUDA takes them), or the index itself where none was given.
    ``--devices 0,1`` under ``CUDA_VISIBLE_DEVICES=4,5`` are the GPUs 4 and 5, as ``cuda:0`` and ``cuda:1`` are."""
    if visible is None:
        return [str(d) for d in devices]
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    out = []
    for d in devices:
        if not 0 <= d < len(entries):
            raise DeviceError(f"{option('devices')}: GPU {d} is not among the {len(entries)} that "
                              f"CUDA_VISIBLE_DEVICES={visible!r} lets this process use (0 to {len(entries) - 1})")
        out.append(entries[d])
    return out


def ranks_per_trial(seeds: Any) -> int:
    """The most ranks a configuration of the study trains as: the largest ``ranks`` its space searches, else the
    one every configuration takes (1: one process, one GPU)."""
    dim = seeds.space.search.get(RANKS.name)
    values = dim.values() if dim is not None else [seeds.base.get(RANKS.name) or 1]
    return max(1, *(int(v) for v in values))


def device_groups(devices: Sequence[int], per_trial: int) -> list[list[int]]:
    """``--devices`` split into each worker's GPUs: a trial of N ranks takes N GPUs (a rank a GPU), so a worker holds
    ``per_trial`` of them, the most ranks a trial of the study trains as; ``--devices 0,1,2,3,4,5,6,7`` with 2-rank
    trials runs 4 at a time. GPUs left over (fewer than a group) are not used. Fewer GPUs than a trial's ranks is
    a DeviceError (none without ``--devices``)."""
    per = max(1, per_trial)
    if devices and len(devices) < per:
        raise DeviceError(f"{option('devices')}: {len(devices)} GPU{'s' if len(devices) != 1 else ''} given, but a "
                          f"configuration of this study trains as {per} ranks, a GPU each: give {per} or more, or "
                          "search fewer ranks")
    return [list(devices[i : i + per]) for i in range(0, len(devices) - per + 1, per)]


def spawn_local(name: str, store: Store, workers: int, devices: Sequence[Sequence[int]] | None, base_device: str,
                quiet: bool = False) -> list[subprocess.Popen]:
    """Start the worker processes of ``run --workers K`` (CPU: a share of cores each) or ``--devices`` (``devices``:
    each worker's GPUs, :func:`device_groups`; it sees only those, and a share of the cores where there are as many
    cores as workers: a trial's "other processes" are then those on its own cores and GPUs, never the study's other
    workers)."""
    procs = []
    if devices:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        masks = [",".join(device_masks(group, visible)) for group in devices]
        cores = os.sched_getaffinity(0)
        split: list[list[int] | None] = (list(shares(len(devices))) if len(cores) >= len(devices)
                                         else [None] * len(devices))
        plan: list[tuple[dict[str, str], list[str]]] = [
            ({"CUDA_VISIBLE_DEVICES": mask},
             ["--device", "cuda:0", *(["--cpus", ",".join(map(str, share))] if share else [])])
            for mask, share in zip(masks, split)]
    else:
        plan = [({}, ["--device", base_device, "--cpus", ",".join(map(str, share))]) for share in shares(workers)]
    for env_extra, args in plan:
        # The URL travels in the environment, not on the command line, where `ps` would show its password.
        cmd = [sys.executable, "-m", "autotune.cli", "worker", "--study", name, "--no-race", *args]
        procs.append(
            subprocess.Popen(
                cmd,
                env={**os.environ, **env_extra, "AUTOTUNE_STORAGE": store.url},
                stdout=subprocess.DEVNULL if quiet else None,
                stderr=None,
                start_new_session=False,
            )
        )
    return procs
