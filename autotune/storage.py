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
import socket
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
            raise StorageError(f"storage {url!r}: folder {path.parent} does not exist")
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        return JournalStorage(JournalFileBackend(str(path)))
    if "://" not in url:
        raise StorageError(f"storage {url!r}: expected a URL such as sqlite:///studies/x.db or postgresql://user@host/db")
    if url.startswith("sqlite:///"):
        db_path = Path(url[len("sqlite:///") :])
        if str(db_path).startswith(str(STUDIES_DIR)) and not db_path.is_absolute():
            db_path.parent.mkdir(parents=True, exist_ok=True)
        if not db_path.parent.is_dir():
            raise StorageError(f"storage {url!r}: folder {db_path.parent} does not exist")
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs=_engine_kwargs(url))
    except ImportError as exc:
        raise StorageError(f"storage {url!r}: a database driver is missing ({exc}); for PostgreSQL: pip install -e '.[postgres]'") from None
    except Exception as exc:  # sqlalchemy errors, bad URLs, unreachable servers
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise StorageError(f"storage {url!r} cannot be opened: {reason}") from None


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
        raise StorageError(f"cannot read studies: {exc}") from None


def load(name: str, url: str) -> optuna.Study:
    """Load an existing study; StudyError listing what exists when it does not."""
    storage = open_storage(url)
    names = study_names(storage)
    if name not in names:
        hint = f"; studies there: {', '.join(names)}" if names else "; it holds no study"
        raise StudyError(f"no study {name!r} in {url}{hint}")
    return optuna.load_study(study_name=name, storage=storage)


def create_or_check(
    name: str,
    url: str,
    attrs: Mapping[str, Any],
    sampler: optuna.samplers.BaseSampler | None = None,
) -> tuple[optuna.Study, bool]:
    """Create the study with ``attrs``, or load it and refuse when it was made for something else.

    Returns (study, created). ``attrs`` holds workload, space, space_hash, fingerprint, device, ...
    """
    storage = open_storage(url)
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
        study.set_user_attr("created_at", dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
        return study, True
    check_matches(study, attrs, url)
    return study, False


def check_matches(study: optuna.Study, attrs: Mapping[str, Any], url: str) -> None:
    """Refuse a run whose space, fingerprint, workload or device differ from the stored study's."""
    stored = study.user_attrs
    if "fingerprint" not in stored:
        raise StudyError(f"study {study.study_name!r} in {url} was not made by autotune; choose another --study name")
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
        return True
    if who.get("host") == socket.gethostname():
        return not _pid_alive(int(who.get("pid", -1))) or who.get("pid") == os.getpid()
    age = dt.datetime.now(dt.timezone.utc).timestamp() - float(who.get("started", 0))
    return age > grace_s


def recover_stale(study: optuna.Study, grace_s: float) -> list[int]:
    """Mark stale RUNNING trials as interrupted (FAIL) and queue their configurations again."""
    recovered = []
    storage = study._storage
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not is_stale(trial, grace_s):
            continue
        storage.set_trial_user_attr(trial._trial_id, "outcome", "interrupted")
        storage.set_trial_user_attr(trial._trial_id, "error", {"type": "Interrupted", "message": "the process running it stopped"})
        try:
            storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
        except Exception:  # noqa: BLE001 - finished by someone else meanwhile
            continue
        role = trial.user_attrs.get("role", "search")
        study.enqueue_trial(dict(trial.params), user_attrs={"role": role, "requeued_from": trial.number})
        recovered.append(trial.number)
    return recovered


# ---------------------------------------------------------------- summaries


def summary(study: optuna.Study) -> dict[str, Any]:
    """Counts by outcome, the baseline and the best, for ``autotune list``."""
    trials = study.get_trials(deepcopy=False)
    outcomes: dict[str, int] = {}
    for t in trials:
        if t.user_attrs.get("duplicate_of") is not None:
            continue
        outcome = t.user_attrs.get("outcome") or t.state.name.lower()
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    from autotune.study import confirmations, figure

    confirmed = confirmations(study)
    ok = [t for t in trials if t.user_attrs.get("outcome") == "ok" and t.values and t.user_attrs.get("duplicate_of") is None]
    best = max((figure(t, confirmed) for t in ok), default=None)
    baseline = next((t for t in ok if t.user_attrs.get("role") == "baseline"), None)
    base = figure(baseline, confirmed) if baseline else None
    return {
        "study": study.study_name,
        "trials": sum(outcomes.values()),
        "outcomes": outcomes,
        "best_samples_per_s": best,
        "baseline_samples_per_s": base,
        "speedup": (best / base) if (best and base) else None,
        "fingerprint": study.user_attrs.get("fingerprint", {}),
        "workload": study.user_attrs.get("workload", {}),
    }
