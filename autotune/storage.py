"""Where studies live: opening storage URLs, creating or checking a study, listing, and crash recovery.

Any Optuna storage URL works (``sqlite:///...``, ``postgresql://...``,
``mysql://...``), plus ``journal:PATH`` for Optuna's journal file storage. The
default is ``sqlite:///studies/<study>.db``. A study records the workload, the
search space and the hardware/software fingerprint; opening it for a run with
another space or fingerprint is refused, never mixed. See docs/storage.md.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import socket
import time
import warnings
from pathlib import Path
from typing import Any, Mapping

import optuna
from optuna.trial import TrialState

from autotune import __version__, hardware
from autotune.errors import StorageError, StudyError

METRICS = ["samples_per_s", "peak_memory_bytes"]
DIRECTIONS = [optuna.study.StudyDirection.MAXIMIZE, optuna.study.StudyDirection.MINIMIZE]
STUDIES_DIR = Path("studies")

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
logging.getLogger("sqlalchemy").setLevel(logging.ERROR)


MASK = "***"
_SECRET_KEYS = ("password", "passwd", "pwd")
# scheme:[//]user:PASSWORD@ (the password may hold '@'; the host part ends at '/' or a blank)
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*:/{0,3}[^\s:/@'\"]*:)(?P<secret>[^\s/'\"]*)@")
# password=... in a query string or a libpq DSN, quoted or not
_KEYVALUE = re.compile(r"(?i)\b(?P<head>(?:%s)\s*=\s*)(?P<secret>'(?:[^'\\]|\\.)*'|[^\s&;'\"]*)" % "|".join(_SECRET_KEYS))


def redact(url: str) -> str:
    """``url`` with its password masked (``***``): the only form of a storage URL that a user,
    a log, an error message or a stored document may see.

    Uses SQLAlchemy's own rendering of a URL with the password hidden, and also masks a
    ``password=`` in the query string. Never raises: a ``journal:`` path, a SQLite URL or a
    string that is no URL comes back unchanged except for whatever looks like a password.
    """
    text = str(url)
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(text)
        if parsed.password is not None:
            text = parsed.render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy can parse: patterns only
        pass
    return redact_message(text)


def redact_message(text: str, url: str | None = None) -> str:
    """``text`` (an exception's message, say) with passwords masked: those of ``url`` wherever
    they appear, and anything shaped like ``scheme://user:password@`` or ``password=...``."""
    for secret in _secrets(url) if url else ():
        text = text.replace(secret, MASK)
    text = _USERINFO.sub(lambda m: m["head"] + MASK + "@", text)
    return _KEYVALUE.sub(lambda m: m["head"] + MASK, text)


def _secrets(url: str) -> list[str]:
    """The password(s) in ``url``, as written and decoded; too short to replace safely: left to the patterns."""
    from urllib.parse import unquote

    found = [m["secret"] for m in _USERINFO.finditer(url)] + [m["secret"].strip("'") for m in _KEYVALUE.finditer(url)]
    found += [unquote(s) for s in found]
    try:
        from sqlalchemy.engine import make_url

        found.append(make_url(url).password or "")
    except Exception:  # noqa: BLE001 - not a URL: the patterns found what there is
        pass
    return sorted({s for s in found if len(s) >= 4}, key=len, reverse=True)


def default_url(study: str) -> str:
    return f"sqlite:///{STUDIES_DIR / (study + '.db')}"


def default_study_name(model_spec: str) -> str:
    """``mypkg.models:build_model`` -> ``mypkg.models-build_model``."""
    return model_spec.replace(":", "-").replace("/", "-").strip("-") or "study"


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """An Optuna storage for a URL; StorageError with the reason when it cannot be opened."""
    if url.startswith("journal:"):
        raw = url[len("journal:") :]
        path = Path(raw[2:] if raw.startswith("//") else raw)  # journal:///abs/file.log or journal:rel/file.log
        if not path.parent.is_dir():
            raise StorageError(f"storage {redact(url)!r}: folder {path.parent} does not exist")
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        return JournalStorage(JournalFileBackend(str(path)))
    if "://" not in url:
        raise StorageError(f"storage {redact(url)!r}: expected a URL such as sqlite:///studies/x.db or postgresql://user@host/db")
    if url.startswith("sqlite:///"):
        db_path = Path(url[len("sqlite:///") :])
        if str(db_path).startswith(str(STUDIES_DIR)) and not db_path.is_absolute():
            db_path.parent.mkdir(parents=True, exist_ok=True)
        if not db_path.parent.is_dir():
            raise StorageError(f"storage {redact(url)!r}: folder {db_path.parent} does not exist")
    # Heartbeats on database servers only: a SQLite file is shared by processes of one host, whose
    # liveness is checked by pid (is_stale), and a heartbeat thread's own SQLite connection would
    # contend for the file's lock (or, for :memory:, see another database).
    server = not url.startswith("sqlite:")
    try:
        return optuna.storages.RDBStorage(
            _with_installed_driver(url),
            engine_kwargs=_engine_kwargs(url),
            heartbeat_interval=HEARTBEAT_S if server else None,  # recorded while each trial runs (study.Tuner)
            grace_period=GRACE_S if server else None,
        )
    except ImportError as exc:
        raise StorageError(f"storage {redact(url)!r}: a database driver is missing ({exc}); for PostgreSQL: pip install -e '.[postgres]'") from None
    except Exception as exc:  # sqlalchemy errors, bad URLs, unreachable servers
        reason = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or [type(exc).__name__])[0]
        raise StorageError(f"storage {redact(url)!r} cannot be opened: {redact_message(reason, url)}") from None


def _with_installed_driver(url: str) -> str:
    """``postgresql://`` with the driver that is installed.

    SQLAlchemy 2.1 made psycopg (3) the default driver of ``postgresql://`` where 2.0 used
    psycopg2; with only psycopg2 installed (the ``postgres`` extra), name it explicitly.
    """
    import importlib.util

    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
        if parsed.drivername != "postgresql" or importlib.util.find_spec(parsed.get_dialect().driver):
            return url
        if importlib.util.find_spec("psycopg2"):
            return parsed.set(drivername="postgresql+psycopg2").render_as_string(hide_password=False)
    except Exception:  # noqa: BLE001 - RDBStorage reports what is wrong with the URL
        pass
    return url


def kind(fingerprint: Mapping[str, Any]) -> str:
    """A short name for a hardware kind (device model, count, CPU vector ISA, torch), for per-kind study names."""
    import re as _re

    name = str(fingerprint.get("device_name") or fingerprint.get("cpu_model") or "unknown")
    count = fingerprint.get("device_count") or 1
    if fingerprint.get("device_type") == "cuda" and count > 1:
        name = f"{count}x-{name}"
    if fingerprint.get("device_type") != "cuda":
        isa = f"-{fingerprint['cpu_capability']}" if fingerprint.get("cpu_capability") else ""
        name = f"cpu-{name}-{fingerprint.get('cpu_count')}c{isa}"
    torch_version = str(fingerprint.get("torch") or "").split("+")[0]
    slug = _re.sub(r"[^a-z0-9.]+", "-", f"{name}-torch{torch_version}".lower()).strip("-")
    return slug[:80]


HEARTBEAT_S = int(os.environ.get("AUTOTUNE_HEARTBEAT_S", "10"))
GRACE_S = int(os.environ.get("AUTOTUNE_HEARTBEAT_GRACE_S", "60"))


def _engine_kwargs(url: str) -> dict[str, Any]:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 60}}
    if url.startswith("postgresql"):
        return {"connect_args": {"connect_timeout": 10}, "pool_pre_ping": True}
    return {"pool_pre_ping": True}


def study_names(storage: optuna.storages.BaseStorage) -> list[str]:
    try:
        return [s.study_name for s in storage.get_all_studies()]
    except Exception as exc:  # noqa: BLE001
        raise StorageError(f"cannot read studies: {redact_message(str(exc))}") from None


def load(name: str, url: str, storage: optuna.storages.BaseStorage | None = None) -> optuna.Study:
    """Load an existing study (from ``storage``, already open on ``url``, when given); StudyError
    listing what exists when it does not."""
    storage = storage or open_storage(url)
    names = study_names(storage)
    if name not in names:
        hint = f"; studies there: {', '.join(names)}" if names else "; it holds no study"
        raise StudyError(f"no study {name!r} in {redact(url)}{hint}")
    return optuna.load_study(study_name=name, storage=storage)


DESCRIBE_WAIT_S = 15.0  # how long a study just created by another process may take to get its attributes


def create_or_check(
    name: str,
    url: str,
    attrs: Mapping[str, Any],
    sampler: optuna.samplers.BaseSampler | None = None,
    storage: optuna.storages.BaseStorage | None = None,
) -> tuple[optuna.Study, bool]:
    """Create the study with ``attrs``, or load it and refuse when it was made for something else.

    Returns (study, created). ``attrs`` holds workload, space, space_hash, fingerprint, device, ...
    ``storage``: the storage already open on ``url`` (else it is opened).

    A seeded ``sampler`` keeps its seed only in the process that creates the study (a new study
    is reproducible). A process that joins one (a worker of a fleet, a resumed run) draws a fresh
    seed, as Optuna does for parallel jobs: with one seed, every worker would propose the same
    configurations in the same order, and all but one of each would be skipped.
    """
    storage = storage or open_storage(url)
    created = False
    if name not in study_names(storage):
        try:
            study = optuna.create_study(study_name=name, storage=storage, directions=DIRECTIONS, sampler=sampler)
            created = True
        except optuna.exceptions.DuplicatedStudyError:  # another process created it meanwhile
            study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
    else:
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
    if created:
        study.set_metric_names(METRICS)
        for key, value in attrs.items():
            study.set_user_attr(key, value)
        study.set_user_attr("autotune_version", __version__)
        study.set_user_attr("created_at", dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))  # written last
        return study, True
    _wait_until_described(study)
    check_matches(study, attrs, url)
    study.sampler.reseed_rng()
    return study, False


def _wait_until_described(study: optuna.Study) -> None:
    """Another process may have created the study an instant ago and still be writing its attributes
    (Optuna cannot create a study with them at once): give an empty study a moment to get them."""
    deadline = time.monotonic() + DESCRIBE_WAIT_S
    while "created_at" not in study.user_attrs and time.monotonic() < deadline and not study.get_trials(deepcopy=False):
        time.sleep(0.1)


def check_matches(study: optuna.Study, attrs: Mapping[str, Any], url: str) -> None:
    """Refuse a run whose space, fingerprint, workload or device differ from the stored study's."""
    stored = study.user_attrs
    if "fingerprint" not in stored:
        raise StudyError(f"study {study.study_name!r} in {redact(url)} was not made by autotune; choose another --study name")
    if len(study.directions) != 2:
        raise StudyError(f"study {study.study_name!r} has {len(study.directions)} objectives; autotune studies have 2")
    new_name = f"{study.study_name}-2"
    how = f"start a new study with --study {new_name} (or another --storage)"
    problems: list[str] = []
    if stored.get("space_hash") != attrs.get("space_hash"):
        problems.append(f"the search space differs from the study's ({stored.get('space', {}).get('path')})")
    diffs = hardware.differences(stored["fingerprint"], attrs["fingerprint"])
    if diffs:
        problems.append("the hardware/software differ: " + "; ".join(diffs))
    for key in ("workload", "device", "global_batch"):
        if key in attrs and stored.get(key) != attrs.get(key):
            problems.append(f"the {key} differs: {stored.get(key)} (stored) vs {attrs.get(key)} (this run)")
    if problems:
        raise StudyError(
            f"study {study.study_name!r} was made for another setup, and results are never mixed: "
            + "; ".join(problems)
            + f". To keep both, {how}."
        )


# ---------------------------------------------------------------- crash recovery


def owner() -> dict[str, Any]:
    """Who runs a trial: recorded on it so that another process can tell whether it is stale."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": dt.datetime.now(dt.timezone.utc).timestamp()}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale(trial: optuna.trial.FrozenTrial, grace_s: float) -> bool:
    """A RUNNING trial whose process is gone (same host), or that is older than ``grace_s`` (other hosts)."""
    who = trial.system_attrs.get("autotune:owner") or {}
    if not who:
        # Asked but not yet signed by its process (it signs right after ask): stale only when old.
        started = trial.datetime_start or dt.datetime.now()
        return (dt.datetime.now() - started).total_seconds() > grace_s
    if who.get("host") == socket.gethostname():
        return not _pid_alive(int(who.get("pid", -1))) or who.get("pid") == os.getpid()
    age = dt.datetime.now(dt.timezone.utc).timestamp() - float(who.get("started", 0))
    return age > grace_s


def recover_stale(study: optuna.Study, grace_s: float) -> list[int]:
    """Mark stale RUNNING trials as interrupted (FAIL) and queue their configurations again.

    On RDB storages Optuna's heartbeats decide (``fail_stale_trials``; :func:`requeue_stale`),
    plus, at once, a trial of this host whose process is gone. On the journal storage (no
    heartbeats): this host's dead processes, and other hosts' trials older than ``grace_s``.
    """
    from optuna.storages._heartbeat import is_heartbeat_enabled

    recovered = []
    storage = study._storage
    beats = is_heartbeat_enabled(storage)
    if beats:
        # Optuna's own test of staleness (heartbeat older than the grace period, by the database's
        # clock); its fail_stale_trials fails a trial before the callback can record why, so the
        # recording is done here, in the same order as for a dead process.
        for trial_id in storage._get_stale_trial_ids(study._study_id):
            number = _requeue(study, storage.get_trial(trial_id), "its worker stopped sending heartbeats")
            if number is not None:
                recovered.append(number)
    here = socket.gethostname()
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        who = trial.system_attrs.get("autotune:owner") or {}
        if beats and who.get("host") not in (None, here):
            continue  # another host's trial: its heartbeat says whether it is alive
        if not is_stale(trial, grace_s):
            continue
        number = _requeue(study, trial, "the process running it stopped")
        if number is not None:
            recovered.append(number)
    return recovered


def _requeue(study: optuna.Study, trial: optuna.trial.FrozenTrial, why: str) -> int | None:
    """Record a stale RUNNING trial as interrupted (FAIL) and queue its configuration again; None if
    another process finished or recovered it meanwhile."""
    storage = study._storage
    try:
        storage.set_trial_user_attr(trial._trial_id, "outcome", "interrupted")
        storage.set_trial_user_attr(trial._trial_id, "error", {"type": "Interrupted", "message": why})
        if not storage.set_trial_state_values(trial._trial_id, TrialState.FAIL):
            return None
    except optuna.exceptions.UpdateFinishedTrialError:
        return None
    role = trial.user_attrs.get("role", "search")
    study.enqueue_trial(dict(trial.params), user_attrs={"role": role, "requeued_from": trial.number})
    return trial.number


# ---------------------------------------------------------------- summaries


def summary(study: optuna.Study, evidence: Any = None) -> dict[str, Any]:
    """Counts by outcome and the verdict's figures, for ``autotune list`` (figures from :mod:`autotune.evidence`)."""
    from autotune.evidence import Evidence

    ev = evidence or Evidence.of(study)
    trials = study.get_trials(deepcopy=False)
    outcomes: dict[str, int] = {}
    for t in trials:
        if t.user_attrs.get("duplicate_of") is not None:
            continue
        outcome = t.user_attrs.get("outcome") or t.state.name.lower()
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    verdict = ev.verdict()
    shown = verdict.winner if verdict.state == "gain" else verdict.leader
    now = dt.datetime.now(dt.timezone.utc).timestamp()
    workers = {
        (who.get("host"), who.get("pid"))
        for t in trials
        if (who := t.system_attrs.get("autotune:owner")) and now - float(who.get("started", 0)) < 15 * 60
    }
    job = study.user_attrs.get("job") or {}
    return {
        "study": study.study_name,
        "kind": "study",
        "job_of": study.user_attrs.get("job_of"),
        "budget": job.get("trials"),
        "trials": sum(outcomes.values()),
        "measured": sum(n for o, n in outcomes.items() if o not in ("interrupted", "skipped", "running", "waiting")),
        "running": sum(1 for t in trials if t.state == TrialState.RUNNING),
        "failed": sum(n for o, n in outcomes.items() if o not in ("ok", "interrupted", "skipped", "running", "waiting")),
        "workers_recently": len(workers),
        "outcomes": outcomes,
        "best_samples_per_s": ev.samples_per_s(shown) if shown is not None else None,
        "baseline_samples_per_s": ev.baseline.samples_per_s if ev.baseline else None,
        "speedup": verdict.speedup.to_dict() if verdict.speedup else None,
        "verdict": verdict.state,
        "fingerprint": study.user_attrs.get("fingerprint", {}),
        "workload": study.user_attrs.get("workload", {}),
    }
