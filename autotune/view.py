"""One view of a study, as every read command shows it: ``status`` (and ``--json``), ``list``, ``export``, the
dashboard and the end of ``run``.

A read command reads the study once from its store (:meth:`autotune.store.Store.read`: a
:class:`autotune.store.StoredStudy`, its description and typed trials in one pass) and hands it
to whatever shows it. The figures come from its evidence (``evidence_of(study)``, built once:
:mod:`autotune.evidence`); this module gathers them with the study's counts, failures and
description into one JSON-able document, so the command line, ``--json`` and the Python API
print the same thing. It reads, never writes, and imports neither torch nor the trial modules.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from autotune.store import Store, StoredStudy
from autotune.store.records import JOB_RECORD as JOB  # noqa: F401 - transitional: autotune.tuning still reads it here
from autotune.evidence import evidence_of

NOT_MEASURED = ("interrupted", "skipped", "running", "waiting")
RECENT_S = 15 * 60  # a worker that signed a trial this recently counts as working on the study


def read(store: Store, name: str) -> StoredStudy:
    """The study ``name`` of ``store``, read once (:meth:`autotune.store.Store.read`; StudyError when there is none)."""
    return store.read(name)


def summary(study: StoredStudy) -> dict[str, Any]:
    """Counts by outcome and the verdict's figures, for ``autotune list`` (figures from :mod:`autotune.evidence`)."""
    ev = evidence_of(study)
    outcomes: dict[str, int] = {}
    for t in study.trials:
        if t.duplicate_of is not None:
            continue
        outcome = t.outcome or t.state
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    verdict = ev.verdict()
    shown = ev.recommended()  # the configuration to use (the defaults when nothing beats them), as every view shows it
    speedup = ev.speedup(shown) if shown is not None else None
    now = dt.datetime.now(dt.timezone.utc).timestamp()
    workers = {
        (t.owner.get("host"), t.owner.get("pid"))
        for t in study.trials
        if t.owner and now - float(t.owner.get("started", 0)) < RECENT_S
    }
    return {
        "study": study.name,
        "kind": "study",
        "job_of": study.job_of,
        "budget": study.job.get("trials"),
        "trials": sum(outcomes.values()),
        "measured": sum(n for o, n in outcomes.items() if o not in NOT_MEASURED),
        "running": sum(1 for t in study.trials if t.running),
        "failed": sum(n for o, n in outcomes.items() if o not in ("ok", *NOT_MEASURED)),
        "workers_recently": len(workers),
        "outcomes": outcomes,
        "best_samples_per_s": ev.samples_per_s(shown) if shown is not None else None,
        "baseline_samples_per_s": ev.baseline.samples_per_s if ev.baseline else None,
        "recommended": shown,
        "speedup": speedup.to_dict() if speedup else None,
        "verdict": verdict.state,
        "fingerprint": study.fingerprint,
        "workload": study.workload,
    }


def status(study: StoredStudy) -> dict[str, Any]:
    """Everything ``autotune status`` shows: the summary, the evidence's figures, failures by outcome."""
    from autotune import ceiling

    ev = evidence_of(study)
    doc = summary(study)
    doc.update(ev.to_dict())
    doc["batch_ceiling"] = ceiling.describe(study.batch_ceiling)
    failures: dict[str, dict[str, Any]] = {}
    for t in study.trials:
        if t.outcome in (None, "ok", "skipped") or t.duplicate_of is not None:
            continue
        entry = failures.setdefault(t.outcome, {"count": 0, "trials": [], "example": ""})
        entry["count"] += 1
        entry["trials"].append(t.number)
        entry["example"] = entry["example"] or t.error_message
    doc.update({"failures": failures, "device": study.device, "time_spent_s": ev.time_spent()["wall_s"],
                "max_memory_bytes": study.max_memory_bytes, "space": study.space.get("name")})
    return doc


def listing(store: Store) -> list[dict[str, Any]]:
    """Every job and study in a store, as ``autotune list`` shows them."""
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
        docs.append(summary(store.read(described.name, described)))
    return docs
