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
talks to another process. When the storage goes away, a worker logs one line and
retries with back-off; the trial it was measuring is re-queued (a stale trial) and
measured again, so nothing is lost.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any, Callable, Sequence

from autotune import storage as stores
from autotune import tuning
from autotune.errors import AutotuneError, StorageError, StudyError

Log = Callable[[str], None]

BACKOFF_S = (1, 2, 4, 8, 15, 30, 60)


def _transient(exc: BaseException) -> bool:
    """An error of the storage's connection (the database went away), not of the job."""
    if isinstance(exc, StorageError):
        return True
    try:
        import sqlalchemy.exc

        if isinstance(exc, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError, sqlalchemy.exc.DBAPIError)):
            return True
    except ImportError:  # pragma: no cover
        pass
    import optuna

    return isinstance(exc, optuna.exceptions.StorageInternalError)


def retrying(what: Callable[[], Any], log: Log, stop_after_s: float | None = None) -> Any:
    """Run ``what``; while the storage is unreachable, log one line per attempt and retry with back-off."""
    attempt = 0
    start = time.monotonic()
    while True:
        try:
            return what()
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - only transient storage errors are retried
            if not _transient(exc):
                raise
            if stop_after_s is not None and time.monotonic() - start > stop_after_s:
                raise StorageError(f"the storage stayed unreachable for {stop_after_s:.0f} s: {_reason(exc)}") from None
            wait = BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]
            log(f"storage unreachable ({_reason(exc)}); retrying in {wait} s")
            time.sleep(wait)
            attempt += 1


_url: str | None = None  # the storage URL being worked on, so its password is masked in retry lines


def _reason(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return stores.redact_message(text[0] if text else type(exc).__name__, _url)[:160]


def work_on(name: str, url: str, device: str, log: Log, race: bool = True, **callbacks: Any) -> Any:
    """Join a study and measure until its budget is spent; returns the last run's Summary."""
    global _url
    _url = url

    def once() -> Any:
        study = stores.load(name, url)
        job = tuning.stored_job(study)
        prepared = tuning.prepare(job, name, url, device, race=race, join_only=True, **callbacks)
        return prepared.run()

    return retrying(once, log)


def serve(url: str, device: str, log: Log, poll_s: float = 30.0, exit_when_idle: bool = False, **callbacks: Any) -> int:
    """The daemon's loop: work on every job with budget left for this machine's kind; returns studies worked on."""
    from autotune import hardware

    global _url
    _url = url
    worked = 0
    fingerprint = hardware.fingerprint(device)
    while True:
        pending = retrying(lambda: tuning.jobs(url), log)
        did = False
        for job_name, job in pending:
            name = tuning.kind_study_name(job_name, fingerprint)
            if _budget_spent(name, url, job, log):
                continue
            log(f"job {job_name!r}: working on study {name!r}")
            try:
                retrying(
                    lambda: tuning.prepare(job, name, url, device, extra_attrs={tuning.JOB_OF: job_name}, **callbacks).run(),
                    log,
                )
            except (StudyError, AutotuneError) as exc:
                log(f"job {job_name!r} skipped: {exc}")
                continue
            did = True
            worked += 1
        if not did:
            if exit_when_idle:
                return worked
            time.sleep(poll_s)


def _budget_spent(name: str, url: str, job: tuning.Job, log: Log) -> bool:
    from autotune import study as S

    def check() -> bool:
        store = stores.open_storage(url)
        if name not in stores.study_names(store):
            return False
        import optuna

        study = optuna.load_study(study_name=name, storage=store)
        measured = sum(1 for t in study.get_trials(deepcopy=False) if S.is_measured(t))
        races = [v for k, v in study.user_attrs.items() if k.startswith("race:") and isinstance(v, dict)]
        raced = job.confirm <= 0 or any(r.get("done") and r.get("measured") == measured for r in races)
        deadline = study.user_attrs.get("deadline")
        late = bool(deadline) and time.time() >= float(deadline)
        return (measured >= job.trials or late) and raced

    return bool(retrying(check, log))


# ---------------------------------------------------------------- several workers on this machine


def shares(workers: int, cpus: Sequence[int] | None = None) -> list[list[int]]:
    """Split the cores this process may use into ``workers`` contiguous shares (at least one core each)."""
    cores = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    if workers > len(cores):
        raise AutotuneError(f"--workers {workers}: this machine lets autotune use {len(cores)} cores; one worker needs one at least")
    size, extra = divmod(len(cores), workers)
    out, start = [], 0
    for i in range(workers):
        n = size + (1 if i < extra else 0)
        out.append(cores[start : start + n])
        start += n
    return out


def spawn_local(name: str, url: str, workers: int, devices: Sequence[int] | None, base_device: str, quiet: bool = False) -> list[subprocess.Popen]:
    """Start the worker processes of ``run --workers K`` (CPU: a share of cores each) or ``--devices`` (one GPU each)."""
    procs = []
    if devices:
        plan: list[tuple[dict[str, str], list[str]]] = [({"CUDA_VISIBLE_DEVICES": str(d)}, ["--device", "cuda:0"]) for d in devices]
    else:
        plan = [({}, ["--device", base_device, "--cpus", ",".join(map(str, share))]) for share in shares(workers)]
    for env_extra, args in plan:
        # The URL travels in the environment, not on the command line, where `ps` would show its password.
        cmd = [sys.executable, "-m", "autotune.cli", "worker", "--study", name, "--no-race", *args]
        procs.append(
            subprocess.Popen(
                cmd,
                env={**os.environ, **env_extra, "AUTOTUNE_STORAGE": url},
                stdout=subprocess.DEVNULL if quiet else None,
                stderr=None,
                start_new_session=False,
            )
        )
    return procs
