"""One view of a study, as every read command shows it: ``status`` (and ``--json``), ``list``, ``export``, the
dashboard and the end of ``run``.

:class:`StudyView` is the study read once from its store: its attributes in one query and
its trials in one pass (:mod:`autotune.reading`), never deep-copied, and its
:class:`autotune.evidence.Evidence` built once from them. Every read command builds one and
hands it to whatever shows the study (it answers what those read of an ``optuna.Study``:
``study_name``, ``user_attrs``, ``get_trials``). The figures come from the evidence (each
computed once there); this module gathers them with the study's counts, failures and
attributes into one JSON-able document, so the command line, ``--json`` and the Python API
print the same thing. It reads, never writes, and imports neither torch nor the trial modules.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any, Container, Mapping, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.store.records import OWNER

JOB = "autotune_job"  # the attribute of a submitted job's record (see autotune.tuning)
NOT_MEASURED = ("interrupted", "skipped", "running", "waiting")
RECENT_S = 15 * 60  # a worker that signed a trial this recently counts as working on the study


class StudyView:
    """A study read once: its name, attributes and trials, and its evidence (built on first use, then kept).

    Built by :func:`read` (or :meth:`of` for a live ``optuna.Study``, e.g. at the end of a run); read-only.
    """

    def __init__(self, name: str, attrs: Mapping[str, Any], trials: Sequence[FrozenTrial]) -> None:
        self.study_name = name
        self.user_attrs: dict[str, Any] = dict(attrs)
        self.trials: list[FrozenTrial] = list(trials)

    @classmethod
    def of(cls, study: optuna.Study | StudyView) -> StudyView:
        if isinstance(study, StudyView):
            return study
        return cls(study.study_name, study.user_attrs, study.get_trials(deepcopy=False))

    def get_trials(self, deepcopy: bool = False, states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        """The trials by number (the same objects every time; ``deepcopy`` is accepted for optuna.Study's
        signature, and ignored: nothing here writes to them)."""
        return self.trials if states is None else [t for t in self.trials if t.state in states]

    @functools.cached_property
    def evidence(self) -> Any:
        from autotune.evidence import Evidence

        return Evidence(self.trials, self.user_attrs)


def read(store: Any, name: str, attrs: Mapping[str, Any] | None = None) -> StudyView:
    """The study ``name`` of ``store`` (an :class:`autotune.store.Store`), read once; ``attrs``: its attributes when
    already read (``list`` has every study's from one query). StudyError when there is no such study."""
    from autotune.store import reading

    with store.faults():
        if attrs is None:
            store._existing(name)
        study_id = store.storage.get_study_id_from_name(name)
        return StudyView(name, attrs if attrs is not None else store.storage.get_study_user_attrs(study_id),
                         reading.all_trials(store.storage, study_id))


def summary(study: optuna.Study | StudyView, evidence: Any = None) -> dict[str, Any]:
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
    shown = ev.recommended()  # the configuration to use (the defaults when nothing beats them), as every view shows it
    speedup = ev.speedup(shown) if shown is not None else None
    now = dt.datetime.now(dt.timezone.utc).timestamp()
    workers = {
        (who.get("host"), who.get("pid"))
        for t in trials
        if (who := t.system_attrs.get(OWNER)) and now - float(who.get("started", 0)) < RECENT_S
    }
    job = study.user_attrs.get("job") or {}
    return {
        "study": study.study_name,
        "kind": "study",
        "job_of": study.user_attrs.get("job_of"),
        "budget": job.get("trials"),
        "trials": sum(outcomes.values()),
        "measured": sum(n for o, n in outcomes.items() if o not in NOT_MEASURED),
        "running": sum(1 for t in trials if t.state == TrialState.RUNNING),
        "failed": sum(n for o, n in outcomes.items() if o not in ("ok", *NOT_MEASURED)),
        "workers_recently": len(workers),
        "outcomes": outcomes,
        "best_samples_per_s": ev.samples_per_s(shown) if shown is not None else None,
        "baseline_samples_per_s": ev.baseline.samples_per_s if ev.baseline else None,
        "recommended": shown,
        "speedup": speedup.to_dict() if speedup else None,
        "verdict": verdict.state,
        "fingerprint": study.user_attrs.get("fingerprint", {}),
        "workload": study.user_attrs.get("workload", {}),
    }


def status(study: optuna.Study | StudyView) -> dict[str, Any]:
    """Everything ``autotune status`` shows: the summary, the evidence's figures, failures by outcome."""
    from autotune import ceiling
    from autotune.evidence import Evidence

    study = StudyView.of(study)
    ev = Evidence.of(study)
    doc = summary(study, ev)
    doc.update(ev.to_dict())
    doc["batch_ceiling"] = ceiling.describe(study.user_attrs)
    failures: dict[str, dict[str, Any]] = {}
    for t in study.get_trials(deepcopy=False):
        outcome = t.user_attrs.get("outcome")
        if outcome in (None, "ok", "skipped") or t.user_attrs.get("duplicate_of") is not None:
            continue
        entry = failures.setdefault(outcome, {"count": 0, "trials": [], "example": ""})
        entry["count"] += 1
        entry["trials"].append(t.number)
        entry["example"] = entry["example"] or (t.user_attrs.get("error") or {}).get("message", "")
    doc.update({"failures": failures, "device": study.user_attrs.get("device"), "time_spent_s": ev.time_spent()["wall_s"],
                "max_memory_bytes": study.user_attrs.get("max_memory_bytes"),
                "space": (study.user_attrs.get("space") or {}).get("name")})
    return doc


def listing(store: Any) -> list[dict[str, Any]]:
    """Every job and study in a store (an :class:`autotune.store.Store`), as ``autotune list`` shows them."""
    summaries = store.summaries()
    names = [s.name for s in summaries]
    docs: list[dict[str, Any]] = []
    for described in summaries:
        raw = described.job_record
        if raw:
            docs.append({"study": described.name, "kind": "job", "budget": raw.get("trials"),
                         "submitted_at": raw.get("submitted_at"), "workload": raw.get("spec"),
                         "studies": [n for n in names if n.startswith(described.name + "@")]})
            continue
        docs.append(summary(read(store, described.name, described._attrs)))
    return docs
