"""Crash recovery: who runs a trial, its heartbeats, whether it is stale, and re-queuing what a stopped process left.

A trial is signed by its process (``autotune:owner``: host, pid, start). A RUNNING trial
whose process is gone (this host), whose heartbeats lapsed (database servers, Optuna's
heartbeats) or that is older than the grace period (another host, journal storage) is
recorded as interrupted (FAIL, outcome ``interrupted``) and its configuration queued
again, so a stop of any kind loses at most the measurement in flight. Optuna's own
``fail_stale_trials`` fails a trial before a callback could record why, so the test of
staleness is Optuna's (private ``_get_stale_trial_ids``, see docs/storage.md) and the
recording is ours.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import threading
from typing import Any

import optuna
from optuna.storages._heartbeat import BaseHeartbeat, is_heartbeat_enabled  # private: no public ask/tell heartbeat
from optuna.trial import TrialState

from autotune.store.records import INTERRUPTED, OWNER, ROLE, Role, StoredTrial
from autotune.store.writing import marks_of


def pid_alive(pid: int) -> bool:
    """Whether a process of this host with this id still runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale(trial: optuna.trial.FrozenTrial | StoredTrial, grace_s: float) -> bool:
    """A RUNNING trial whose process is gone (same host), or that is older than ``grace_s`` (other hosts)."""
    if isinstance(trial, StoredTrial):
        who, started = dict(trial.owner), trial.started
    else:
        who, started = trial.system_attrs.get(OWNER) or {}, trial.datetime_start
    if not who:
        # Asked but not yet signed by its process (it signs right after ask): stale only when old.
        started = started or dt.datetime.now()
        return (dt.datetime.now() - started).total_seconds() > grace_s
    if who.get("host") == socket.gethostname():
        return not pid_alive(int(who.get("pid", -1))) or who.get("pid") == os.getpid()
    age = dt.datetime.now(dt.timezone.utc).timestamp() - float(who.get("started", 0))
    return age > grace_s


def recover_stale(study: optuna.Study, grace_s: float) -> list[int]:
    """Mark stale RUNNING trials as interrupted (FAIL) and queue their configurations again.

    On RDB storages with heartbeats Optuna's test decides, plus, at once, a trial of this host
    whose process is gone. On SQLite and the journal storage (no heartbeats): this host's dead
    processes, and other hosts' trials older than ``grace_s``.
    """
    recovered = []
    storage = study._storage
    beats = is_heartbeat_enabled(storage)
    if beats:
        # Optuna's own test of staleness (heartbeat older than the grace period, by the database's clock).
        for trial_id in storage._get_stale_trial_ids(study._study_id):
            number = _requeue(study, storage.get_trial(trial_id), "its worker stopped sending heartbeats")
            if number is not None:
                recovered.append(number)
    here = socket.gethostname()
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        who = trial.system_attrs.get(OWNER) or {}
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
        storage.set_trial_user_attr(trial._trial_id, "outcome", INTERRUPTED)
        storage.set_trial_user_attr(trial._trial_id, "error", {"type": "Interrupted", "message": why})
        if not storage.set_trial_state_values(trial._trial_id, TrialState.FAIL):
            return None
    except optuna.exceptions.UpdateFinishedTrialError:
        return None
    role = trial.user_attrs.get(ROLE, Role.SEARCH)
    study.enqueue_trial(dict(trial.params), user_attrs=marks_of(role=role, requeued_from=trial.number))
    return trial.number




class Heartbeat:
    """Records Optuna heartbeats for a running trial (RDB storages), so other workers can tell it is alive.

    Optuna records them only inside ``study.optimize``; the ask/tell loop does it here. A
    failed heartbeat (the database is away for a moment) is skipped, never a traceback:
    the trial goes on, and if the outage outlasts the grace period another worker re-queues it.
    """

    def __init__(self, trial_id: int, store: optuna.storages.BaseStorage) -> None:
        self.trial_id = trial_id
        self.store = store
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="autotune-heartbeat", daemon=True)
        self.enabled = isinstance(store, BaseHeartbeat) and is_heartbeat_enabled(store)

    def _beat(self) -> None:
        assert isinstance(self.store, BaseHeartbeat)
        interval = self.store.get_heartbeat_interval() or 10
        while True:
            try:
                self.store.record_heartbeat(self.trial_id)
            except Exception:  # noqa: BLE001 - the database is away: try again at the next beat
                pass
            if self.stop.wait(interval):
                return

    def __enter__(self) -> Heartbeat:
        if self.enabled:
            self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        if self.enabled:
            self.thread.join(timeout=5)
