"""Writing the stored format: autotune's records set on an Optuna study and its trials, each by its key.

Why a module of its own: the tuning loop (through :class:`autotune.store.live.LiveStudy`), recovery and the tests'
made-up studies write records; every read builds :class:`autotune.store.records.StoredStudy` and never writes.
The keys stay in :mod:`autotune.store.records`, the one place that names them; the writers here set them.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from autotune.errors import plain
from autotune.store.plans import ConfirmRecord, RaceRecord
from autotune.store.records import (ABLATION, BATCH_CEILING, CONFIRM, CONTEXT, CREATED_AT, DEADLINE, DEVICE,
                                    FINGERPRINT, GLOBAL_BATCH, JOB, JOB_OF, JOB_RECORD, MAX_MEMORY, MEASUREMENT,
                                    NUMERICS, OBJECTIVES, OWNER, PAIRED, RACE, ROLE, SAMPLER_SWITCH, SESSION, SPACE,
                                    SPACE_HASH, STATES, TRIAL_MARKS, VERSION, WARM_START, WORKLOAD, StoredTrial)
from autotune.units import now

if TYPE_CHECKING:
    import optuna



def owner() -> dict[str, Any]:
    """Who runs a trial: recorded on it so that another process can tell whether it is stale."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": now()}


def measurement(round_id: str, trial: int) -> str:
    return f"{MEASUREMENT}{round_id}:{trial}"


def save_measurement(study: optuna.Study, trial: int, round_id: str, *, samples_per_s: float | None, outcome: str,
                     peak_memory_bytes: int | None, other_cores: float | None, wall_s: float | None,
                     cores: int | None = None) -> None:
    """Store one re-measurement of a trial's configuration (``cores``: those its process could run on)."""
    study.set_user_attr(measurement(round_id, trial), {
        "samples_per_s": samples_per_s, "outcome": outcome, "peak_memory_bytes": peak_memory_bytes,
        "other_cores": other_cores, "wall_s": wall_s, "at": now(), **({"cores": cores} if cores else {})})


def save_paired(study: optuna.Study, round_id: str, arms: Sequence[Mapping[str, Any]], *, other_cores: float | None,
                wall_s: float | None, cores: int | None = None, **purpose: Any) -> None:
    """Store one process's measurements of several configurations (each arm: key, trial, samples_per_s, outcome)."""
    study.set_user_attr(PAIRED + round_id, {"arms": [dict(a) for a in arms], "other_cores": other_cores,
                                            "wall_s": wall_s, "at": now(), **({"cores": cores} if cores else {}),
                                            **purpose})


def save_race(study: optuna.Study, race_id: str, record: RaceRecord) -> None:
    study.set_user_attr(RACE + race_id, record.to_dict())


def save_confirm(study: optuna.Study, confirm_id: str, record: ConfirmRecord) -> None:
    study.set_user_attr(CONFIRM + confirm_id, record.to_dict())


def save_numerics(study: optuna.Study, check_id: str, record: Mapping[str, Any]) -> None:
    study.set_user_attr(NUMERICS + check_id, dict(record))


def save_ablation_plan(study: optuna.Study, ablation_id: str, plan: Mapping[str, Any]) -> None:
    study.set_user_attr(ABLATION + ablation_id, dict(plan))


def save_session(study: optuna.Study, session_id: str, record: Mapping[str, Any]) -> None:
    study.set_user_attr(SESSION + session_id, dict(record))


def save(study: optuna.Study, **attrs: Any) -> None:
    """Set description or decision attributes by their field names (``max_memory_bytes=``, ``job=``, ``deadline=``,
    ``warm_start=``, ``batch_ceiling=``, ``sampler_switch=``, ``job_record=``, ``job_of=``)."""
    keys = {"workload": WORKLOAD, "space": SPACE, "space_hash": SPACE_HASH, "fingerprint": FINGERPRINT,
            "device": DEVICE, "context": CONTEXT, "global_batch": GLOBAL_BATCH, "max_memory_bytes": MAX_MEMORY,
            "job": JOB, "job_record": JOB_RECORD, "job_of": JOB_OF, "deadline": DEADLINE, "warm_start": WARM_START,
            "batch_ceiling": BATCH_CEILING, "sampler_switch": SAMPLER_SWITCH, "created_at": CREATED_AT,
            "version": VERSION, "objectives": OBJECTIVES}
    for name, value in attrs.items():
        if name not in keys:
            raise TypeError(f"no study attribute {name!r} in the stored format")
        study.set_user_attr(keys[name], value)


def mark(trial: optuna.Trial, **marks: Any) -> None:
    """Set a running trial's marks by their field names (``role=``, ``config_key=``, ``outcome=``, ...)."""
    for name, value in marks.items():
        if name not in TRIAL_MARKS:
            raise TypeError(f"no trial mark {name!r} in the stored format")
        trial.set_user_attr(name, plain(value))  # a message's terms in the command line's words: no marker is stored


def add_trials(study: optuna.Study, trials: Sequence[StoredTrial],
               distributions: Mapping[str, optuna.distributions.BaseDistribution]) -> None:
    """Add finished trials to a study in one write, each as the store holds it: Optuna's state, values, constraints
    and parameters (``distributions``: of each parameter name), its marks and its owner; numbered after the study's
    own. For a made-up study grown fast to thousands of trials (autotune/testing/studies.py,
    benchmarks/resume_scale.py): asking and telling each one through the loop reads the whole study for every trial.
    ``started``/``completed`` are kept where given (else now)."""
    import optuna
    from optuna.trial import TrialState

    states = {name: TrialState[key] for key, name in STATES.items() if TrialState[key].is_finished()}
    frozen = []
    for t in trials:
        if t.state not in states:
            raise ValueError(f"trial #{t.number} is {t.state}: only finished trials are added")
        marks = {name: getattr(t, name) for name in TRIAL_MARKS}
        marks = {k: dict(v) if isinstance(v, Mapping) else v for k, v in marks.items()
                 if v is not None and not (isinstance(v, Mapping) and not v)}
        marks.setdefault(ROLE, t.role)
        added = optuna.trial.create_trial(
            state=states[t.state], values=list(t.values) if t.values and t.state == "complete" else None,
            params=dict(t.params), distributions={k: distributions[k] for k in t.params},
            user_attrs=marks, system_attrs={OWNER: dict(t.owner)} if t.owner else None,
            constraints=dict(t.constraints) or None)
        if t.started is not None:
            added.datetime_start = t.started
        if t.completed is not None:
            added.datetime_complete = t.completed
        frozen.append(added)
    study.add_trials(frozen)


def marks_of(**marks: Any) -> dict[str, Any]:
    """Marks for a queued trial (``study.enqueue_trial(params, user_attrs=marks_of(role=...))``), checked."""
    for name in marks:
        if name not in TRIAL_MARKS:
            raise TypeError(f"no trial mark {name!r} in the stored format")
    return dict(marks)
