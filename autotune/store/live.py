"""A study this process writes: Optuna's study for ask and tell, with the store's reads and writes of it.

The tuning loop asks Optuna for configurations and tells it results through Optuna's public
API (``ask``, ``tell``, ``enqueue_trial``, the trial's ``suggest_*`` and ``set_constraint``);
everything autotune keeps beside them (the trial's marks, its owner, its heartbeats, the
records on the study) goes through this handle, and every read of the study's state is a
:class:`autotune.store.records.StoredStudy`. The private Optuna names it needs are listed in
docs/storage.md.
"""

from __future__ import annotations

import socket
from typing import Any, Mapping, Sequence

import optuna
from optuna.trial import TrialState

from autotune import clock
from autotune.store import cache, recovery
from autotune.store import records as rec
from autotune.store import writing
from autotune.store.plans import ConfirmRecord, RaceRecord
from autotune.store.records import StoredStudy, StoredTrial


class LiveStudy:
    """One study opened for writing by this process (:meth:`autotune.store.Store.create_or_check`).

    ``grace_s``: how long a trial of another host may go without a sign of life before it is stale
    (derived once from the trial timeout: :meth:`autotune.request.TuneConfig.stale_grace_s`).
    """

    def __init__(self, study: optuna.Study, grace_s: float | None = None) -> None:
        self.study = study
        self.grace_s = grace_s
        self._finished: dict[int, StoredTrial] = {}  # by storage id: a finished trial never changes

    @property
    def name(self) -> str:
        return self.study.study_name

    @property
    def sampler(self) -> optuna.samplers.BaseSampler:
        return self.study.sampler

    # ------------------------------------------------------------ reads

    def _typed(self, t: optuna.trial.FrozenTrial) -> StoredTrial:
        done = self._finished.get(t._trial_id)
        if done is not None:
            return done
        typed = StoredTrial.of(t)
        if typed.finished:
            self._finished[t._trial_id] = typed
        return typed

    def trials(self) -> list[StoredTrial]:
        """Every trial, read now (Optuna's cache: finished trials are read once, running ones afresh)."""
        return [self._typed(t) for t in self.study.get_trials(deepcopy=False)]

    def distributions(self) -> dict[str, Any]:
        """Each parameter's distribution as the study's trials recorded it (the latest finished trial that has it):
        a process whose space differs here (a worker pinned to a share of the cores searches fewer thread counts) must
        suggest over these, or Optuna refuses the parameter ("dynamic value space")."""
        out: dict[str, Any] = {}
        for t in reversed(self.study.get_trials(deepcopy=False)):
            if t.state.is_finished():
                for name, dist in t.distributions.items():
                    out.setdefault(name, dist)
        return out

    def view(self, trials: Sequence[StoredTrial] | None = None) -> StoredStudy:
        """The study as it is now (``trials``: just read by :meth:`trials`)."""
        return StoredStudy(self.name, self.study.user_attrs, self.trials() if trials is None else trials)

    def records(self) -> StoredStudy:
        """The study's description and records, read now, without its trials (one read of its attributes: for a
        decision that needs no trial, such as whether a record is stored; its evidence is empty)."""
        return StoredStudy(self.name, self.study.user_attrs, ())

    def trial(self, trial: optuna.Trial | int) -> StoredTrial:
        """One trial read afresh from the storage (a running trial's marks change)."""
        trial_id = trial if isinstance(trial, int) else trial._trial_id  # private: the storage's id of a Trial
        return StoredTrial.of(self.study._storage.get_trial(trial_id))  # private: Study has no public get_trial

    def is_running(self, trial: optuna.Trial) -> bool:
        return self.study._storage.get_trial(trial._trial_id).state == TrialState.RUNNING

    def role(self, trial: optuna.Trial) -> str:
        """The role a trial was just asked with: a queued seed's (baseline, recipe, warm, minimal, ...) or ``search``
        (read from the trial as Optuna handed it over, no read of the storage)."""
        return str(trial.user_attrs.get(rec.ROLE, rec.Role.SEARCH))

    # ------------------------------------------------------------ processes

    def is_mine(self, who: Mapping[str, Any]) -> bool:
        """``who`` (a trial's owner, or the owner a record names) is this process."""
        me = writing.owner()
        return (who.get("host"), who.get("pid")) == (me["host"], me["pid"])

    def is_gone(self, who: Mapping[str, Any], since: float, grace_s: float | None = None) -> bool:
        """The process ``who`` (an owner: host, pid) has stopped: on this host its pid is gone; on another, ``since``
        (epoch seconds: when it was last known at work) is longer ago than ``grace_s`` (default: the study's grace)."""
        if who.get("host") == socket.gethostname():
            return not recovery.pid_alive(int(who.get("pid", -1)))
        grace = grace_s if grace_s is not None else self.grace_s if self.grace_s is not None else float("inf")
        return clock.now() - since > grace

    # ------------------------------------------------------------ trials

    def sign(self, trial: optuna.Trial) -> None:
        """Sign a trial just asked with this process (host, pid, start): how others tell it is alive."""
        self.study._storage.set_trial_system_attr(trial._trial_id, rec.OWNER, writing.owner())

    def heartbeat(self, trial: optuna.Trial) -> recovery.Heartbeat:
        """Heartbeats for a running trial (database servers) while the ``with`` block measures it."""
        return recovery.Heartbeat(trial._trial_id, self.study._storage)

    def mark(self, trial: optuna.Trial, **marks: Any) -> None:
        writing.mark(trial, **marks)

    def enqueue(self, params: Mapping[str, Any], **marks: Any) -> None:
        """Queue a configuration with its marks (``role=``, ``requeued_from=``, ``ablation=``, ``warm_from=``)."""
        self.study.enqueue_trial(dict(params), user_attrs=writing.marks_of(**marks))

    def recover_stale(self) -> list[int]:
        """Record other processes' stale trials as interrupted and queue them again (:mod:`.recovery`)."""
        grace = self.grace_s if self.grace_s is not None else float("inf")
        return recovery.recover_stale(self.study, grace)

    def is_stale(self, trial: StoredTrial) -> bool:
        return recovery.is_stale(trial, self.grace_s if self.grace_s is not None else float("inf"))

    def warm_cache(self) -> bool:
        return cache.warm_cache(self.study)

    # ------------------------------------------------------------ records on the study

    def save_measurement(self, trial: int, round_id: str, **record: Any) -> None:
        writing.save_measurement(self.study, trial, round_id, **record)

    def save_paired(self, round_id: str, arms: Sequence[Mapping[str, Any]], **record: Any) -> None:
        writing.save_paired(self.study, round_id, arms, **record)

    def save_race(self, race_id: str, record: RaceRecord) -> None:
        writing.save_race(self.study, race_id, record)

    def save_confirm(self, confirm_id: str, record: ConfirmRecord) -> None:
        writing.save_confirm(self.study, confirm_id, record)

    def save_numerics(self, check_id: str, record: Mapping[str, Any]) -> None:
        writing.save_numerics(self.study, check_id, record)

    def save_ablation_plan(self, ablation_id: str, plan: Mapping[str, Any]) -> None:
        writing.save_ablation_plan(self.study, ablation_id, plan)

    def save_session(self, session_id: str, record: Mapping[str, Any]) -> None:
        writing.save_session(self.study, session_id, record)

    def save(self, **attrs: Any) -> None:
        writing.save(self.study, **attrs)
