"""``autotune run``, ``autotune submit`` and ``autotune worker``: a tuning job run here, recorded for a fleet, or
joined.

Each builds the one typed request (:class:`autotune.request.TuneConfig`) from its options
(:mod:`autotune.cli.options`) and hands it to :mod:`autotune.tuning.preparation` or :mod:`autotune.tuning.fleet`.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Any, Callable, Iterator

import click

from autotune.cli.edge import STORES, study_store
from autotune.cli.options import DURATION, JOB, WORKLOAD, job_from, options, resolve_device, workload_from
from autotune.cli.reads import print_status
from autotune.errors import KnobError
from autotune.tuning.progress import Progress
from autotune.request import DEFAULT_POLL_S
from autotune.units import format_duration, local_time


# ---------------------------------------------------------------- run


@click.command()
@options("run", *WORKLOAD, *JOB, "study", "storage", "workers", "devices")
def run(study: str | None, storage: str | None, workers: int, devices: str | None, **fields: Any) -> None:
    """Tune a model: search the knob space; resume the study if it exists.

    \b
    Examples:
      autotune run --model autotune.examples:mlp --study mynet --trials 20   # a built-in example
      autotune run --model mypkg.models:build --data mypkg.data:build --time-budget 2h --max-memory 20GiB
      autotune run --model mypkg.models:build --workers 2 --study mymodel    # two trials at a time, cores split
      (mypkg stands for your own package: those lines show the options, they do not run as they are)
    """
    from autotune.tuning import fleet
    from autotune.tuning import preparation

    spec, dev, _ = workload_from(fields)
    here = fleet.Here.of(workers, devices)
    job = job_from(spec, fields)
    name = study or _default_study(spec)
    store = study_store(name, storage)
    progress = Progress(job.trials, job.time_budget_s, 0)
    prepared = preparation.prepare(job, name, store, here.device(dev), on_trial=progress, on_repeat=progress.repeat,
                              on_probe=_print_probe)
    progress.done = prepared.measured
    for line in prepared.opening(here.processes):
        click.echo(line)
    summary = _until_stopped(lambda: here.run(prepared), progress)
    click.echo(summary.text())
    from autotune.reports import view

    print_status(view.status_of(store, prepared.name), store)  # as every read command shows it (kept by the run)


def _print_probe(batch: int, outcome: str, peak: int | None) -> None:
    from autotune.tuning import ceiling_probe

    click.echo(ceiling_probe.probe_text(batch, outcome, peak))


def _default_study(spec: Any) -> str:
    return str(spec.default_study_name())


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be, so a trial stops the same way; the exit code differs (143, not 130)."""


def _on_term(signum: int, frame: Any) -> None:
    raise Terminated


def _swallowed(hook: Callable[[Any], None]) -> Callable[[Any], None]:
    """``sys.unraisablehook`` that gives a SIGTERM (or Ctrl-C) back when Python swallowed it: a signal whose handler
    ran inside a finalizer (a SQLAlchemy weakref callback, a ``__del__``) raised there, where Python prints "Exception
    ignored" and goes on, and the run went on measuring (benchmarks/results/resume_scale-2026-11-25.json). The signal
    is sent again a moment later, from another thread, to land outside it; anything else goes to ``hook``."""
    import os
    import signal
    import threading

    def unraisable(args: Any) -> None:
        if isinstance(args.exc_value, KeyboardInterrupt):  # Ctrl-C's alike
            again = signal.SIGTERM if isinstance(args.exc_value, Terminated) else signal.SIGINT
            threading.Timer(0.05, os.kill, (os.getpid(), again)).start()
            return
        hook(args)

    return unraisable


def _until_stopped(work: Callable[[], Any], progress: Any = None) -> Any:
    """Run ``work`` with SIGTERM as Ctrl-C; an interrupted trial is recorded and queued again.

    Exits as shells expect of a process stopped by a signal: 130 after Ctrl-C (SIGINT), 143 after SIGTERM. A SIGTERM
    that Python swallowed (its handler ran inside a finalizer) is sent again (:func:`_swallowed`).
    """
    import signal

    try:
        with _sigterm_as_ctrl_c():
            return work()
    except KeyboardInterrupt as exc:
        if progress is not None:
            progress.close()
        click.echo("stopped: the running trial is recorded as interrupted and will be measured again. "
                   "Run the same command to continue.", err=True)
        sys.exit(128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT))
    finally:
        if progress is not None:
            progress.close()


@contextlib.contextmanager
def _sigterm_as_ctrl_c() -> Iterator[None]:
    """SIGTERM raised as :class:`Terminated` (a KeyboardInterrupt) while the block runs, and a stop that Python
    swallowed sent again (:func:`_swallowed`); both as they were after it. SQLAlchemy's pool logs an exception that
    lands while it closes a connection, with its traceback, before raising it again: a stop that lands there is told
    once, by the command, not as a traceback (:func:`_pool_stops_unlogged`)."""
    import signal

    previous = signal.signal(signal.SIGTERM, _on_term)
    hook = sys.unraisablehook
    sys.unraisablehook = _swallowed(hook)
    pool = _pool_stops_unlogged()
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        sys.unraisablehook = hook
        logging.getLogger(POOL_LOGGER).removeHandler(pool)


POOL_LOGGER = "sqlalchemy.pool"  # its pools log under it (sqlalchemy.pool.impl.QueuePool, ...)


class _NotAStop(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], KeyboardInterrupt))


def _pool_stops_unlogged() -> logging.Handler:
    """A handler for SQLAlchemy's pool that writes what it logs to standard error, as Python's last resort would,
    less a Ctrl-C or SIGTERM the pool caught while closing a connection (it raises it again: the stop goes on)."""
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)
    handler.addFilter(_NotAStop())
    logging.getLogger(POOL_LOGGER).addHandler(handler)
    return handler


@click.command()
@options("worker", "device", "study", "storage",
         click.option("--all", "all_jobs", is_flag=True,
                      help="Be a daemon: work on every submitted job with budget left, and wait for more."),
         click.option("--cpus", default=None,
                      help="Pin this worker to these cores, e.g. 0-3 or 0,2 (run --workers does it)."),
         click.option("--no-race", is_flag=True,
                      help="Leave the final race to another process (run --workers does it)."),
         click.option("--poll", "poll", type=DURATION, default=DEFAULT_POLL_S,
                      show_default=format_duration(DEFAULT_POLL_S),
                      help="With --all: how often to look for new jobs."),
         click.option("--exit-when-idle", is_flag=True,
                      help="With --all: stop when no job has budget left instead of waiting."))
def worker(device: str | None, study: str | None, storage: str | None, all_jobs: bool, cpus: str | None, no_race: bool,
           poll: float, exit_when_idle: bool) -> None:
    """Measure trials of a shared study, or (--all) of every submitted job, until their budgets are spent.

    \b
    Examples:
      autotune worker --study mynet --storage postgresql://tuner@db/autotune  # a study, or a job from submit
      autotune worker --all --storage postgresql://tuner@db/autotune          # the daemon
      autotune worker --all --storage journal:/shared/autotune.log --exit-when-idle
      (db stands for your PostgreSQL server, /shared for a file system every machine mounts)
    """
    from autotune.tuning import fleet as daemon

    if not storage:
        raise KnobError("worker needs --storage URL (the storage the study or jobs live in)")
    if all_jobs == bool(study):
        raise KnobError("worker: give --study NAME to join one study, or --all to take every submitted job")
    if cpus:
        os_cpus = _parse_cpus(cpus)
        import os

        os.sched_setaffinity(0, os_cpus)
    dev = resolve_device(device)
    progress = Progress(0, None, 0)

    def log(line: str) -> None:
        click.echo(f"{_now()} {line}", err=False)

    def work() -> Any:
        store = daemon.open_store(storage, log)
        STORES.append(store)
        if all_jobs:
            return daemon.serve(store, dev, log, poll_s=poll, exit_when_idle=exit_when_idle,
                                on_trial=progress, on_repeat=progress.repeat)
        return daemon.work_on(study, store, dev, log, race=not no_race, on_trial=progress, on_repeat=progress.repeat)

    try:
        with _sigterm_as_ctrl_c():
            work()
    except KeyboardInterrupt:
        click.echo(f"{_now()} stopped by a signal: the running trial is recorded as interrupted and queued again")
        return  # exit 0: a daemon stopped on purpose (SIGTERM is how a service manager stops it)
    click.echo(f"{_now()} done: no budget left")


def _parse_cpus(text: str) -> set[int]:
    out: set[int] = set()
    try:
        for part in text.split(","):
            if "-" in part:
                lo, hi = part.split("-")
                out.update(range(int(lo), int(hi) + 1))
            elif part.strip():
                out.add(int(part))
    except ValueError:
        raise KnobError(f"--cpus {text!r}: expected cores such as 0-3 or 0,2") from None
    return out


def _now() -> str:
    return local_time()


@click.command()
@options("submit", *WORKLOAD, *JOB, "study", "storage", required=("storage",))
def submit(study: str | None, storage: str, **fields: Any) -> None:
    """Record a tuning job in a shared storage and return at once; `autotune worker --all` daemons run it.

    \b
    Examples:
      autotune submit --model mypkg.models:build --trials 50 --storage postgresql://tuner@db/autotune
      autotune submit --model autotune.examples:mlp --study mlp-nightly --trials 20 --storage journal:/shared/autotune.log
      (mypkg stands for your own package, db for your PostgreSQL server, /shared for a file system every machine mounts)
    """  # noqa: E501 - an example command in a \b block: click and the docs print it as one line, as written
    from autotune.tuning import preparation

    spec, _, _ = workload_from({**fields, "device": "cpu"})
    job = job_from(spec, fields)
    name = study or _default_study(spec)
    store = study_store(name, storage)
    preparation.submit(job, name, store)
    click.echo(f"submitted job {name!r} to {store.shown}: {job.trials} trials per hardware kind; "
               f"workers (`autotune worker --all --storage ...`) will tune it as study {name}@<kind>")
