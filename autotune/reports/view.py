"""One view of a study, as every read command shows it: ``status`` (and ``--json``), ``list``, ``export``, the
dashboard and the end of ``run``.

A read command reads the study once from its store (:meth:`autotune.store.Store.read`: a
:class:`autotune.store.StoredStudy`, its description and typed trials in one pass) and hands it
to whatever shows it. The figures come from its evidence (``evidence_of(study)``, built once:
:mod:`autotune.evidence`); this module gathers them with the study's counts, failures and
description into one JSON-able document, so the command line, ``--json`` and the Python API
print the same thing. It imports neither torch nor the trial modules, and writes nothing but the views a run
keeps at its end (:func:`keep`, through the store).

The views of a study nobody runs are computed once, by the run that wrote it last (:func:`views`,
kept by :meth:`autotune.tuning.preparation.Prepared.run`), and kept on the study (:mod:`autotune.store.kept`):
``status``, ``list``, ``export`` and ``dashboard`` (the page of a study of :data:`KEEP_PAGE_FROM` trials
or more) show them (:func:`status_of`, :func:`listing`, :func:`export_of`, :func:`page_of`) while the
study is as it was when they were kept, and compute them from its trials otherwise. The figures are the
same either way; only what depends on the clock (the workers seen lately, when it was exported or
written) is worked out when shown.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Mapping

from autotune.export import document as exporting
from autotune.errors import AutotuneError
from autotune.request import PICKS
from autotune.result import Outcome
from autotune.store import Store, StoredStudy
from autotune.evidence import evidence_of

NOT_MEASURED = (Outcome.INTERRUPTED, Outcome.SKIPPED, "running", "waiting")  # outcomes, and states of no outcome
RECENT_S = 15 * 60  # a worker that signed a trial this recently counts as working on the study
#: A study of this many trials or more has its dashboard page kept too (:func:`keep`): drawing it took most of a
#: 100,000-trial ``dashboard``; a smaller one is drawn when asked (0.8 s at 100 trials), and its run ends sooner.
KEEP_PAGE_FROM = 1000


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
    return {
        "study": study.name,
        "kind": "study",
        "job_of": study.job_of,
        "budget": study.job.get("trials"),
        "trials": sum(outcomes.values()),
        "measured": sum(n for o, n in outcomes.items() if o not in NOT_MEASURED),
        "running": sum(1 for t in study.trials if t.running),
        "failed": sum(n for o, n in outcomes.items() if o not in (Outcome.OK, *NOT_MEASURED)),
        "workers_recently": workers_recently(owners(study)),
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
    """Everything ``autotune status`` shows: the summary, the evidence's figures, failures by outcome, and how close
    the recommendation runs to the hardware's peak (:func:`autotune.evidence.efficiency.efficiency`)."""
    from autotune.evidence import ceiling
    from autotune.evidence.efficiency import efficiency, hardware_line, rated

    ev = evidence_of(study)
    doc = summary(study)
    doc.update(ev.to_dict())
    doc["verdict"] = rated(study, ev.verdict()).to_dict()  # with the recommendation's MFU (its peak named) and energy
    doc["batch_ceiling"] = ceiling.describe(study.batch_ceiling)
    eff = efficiency(study)
    doc["efficiency"] = eff.to_dict()
    doc["energy"] = eff.energy.to_dict() if eff.energy is not None else None
    doc["hardware_text"] = hardware_line(eff)  # the MFU's words, the energy beside them
    failures: dict[str, dict[str, Any]] = {}
    for t in study.trials:
        if t.outcome in (None, Outcome.OK, Outcome.SKIPPED) or t.duplicate_of is not None:
            continue
        entry = failures.setdefault(t.outcome, {"count": 0, "trials": [], "example": ""})
        entry["count"] += 1
        entry["trials"].append(t.number)
        entry["example"] = entry["example"] or t.error_message
    doc.update({"failures": failures, "device": study.device, "time_spent_s": ev.time_spent()["wall_s"],
                "objectives": study.objectives,  # the front's axes (--objectives)
                "max_memory_bytes": study.max_memory_bytes, "space": study.space.get("name")})
    return doc


def listing(store: Store) -> list[dict[str, Any]]:
    """Every job and study in a store, as ``autotune list`` shows them."""
    summaries = store.summaries()
    names = [s.name for s in summaries]
    kept_views = store.kept_of([s for s in summaries if not s.job_record], ("summary", "owners"))
    docs: list[dict[str, Any]] = []
    for described in summaries:
        raw = described.job_record
        if raw:
            docs.append({"study": described.name, "kind": "job", "budget": raw.get("trials"),
                         "submitted_at": raw.get("submitted_at"), "workload": raw.get("spec"),
                         "studies": [n for n in names if n.startswith(described.name + "@")]})
            continue
        kept = kept_views.get(described.name)
        docs.append(_now(kept["summary"], kept["owners"]) if kept else summary(store.read(described.name, described)))
    return docs


def owners(study: StoredStudy) -> list[list[Any]]:
    """Each process that signed a trial of the study (host, pid) and when it last started one (epoch seconds)."""
    latest: dict[tuple[Any, Any], float] = {}
    for t in study.trials:
        if t.owner:
            who = (t.owner.get("host"), t.owner.get("pid"))
            latest[who] = max(latest.get(who, float("-inf")), float(t.owner.get("started", 0)))
    return [[host, pid, started] for (host, pid), started in latest.items()]


def workers_recently(signed: list[list[Any]]) -> int:
    """How many of the processes in ``signed`` (:func:`owners`) started a trial within :data:`RECENT_S` of now."""
    now = dt.datetime.now(dt.timezone.utc).timestamp()
    return len({(host, pid) for host, pid, started in signed if now - float(started) < RECENT_S})


# ---------------------------------------------------------------- kept views


def views(study: StoredStudy) -> dict[str, Any]:
    """Every view ``status``, ``list`` and ``export`` show of the study, as JSON (what :func:`keep` keeps): the
    status, the summary, the owners behind the workers seen lately, and the export of each pick that has one."""
    exports = {}
    for pick in PICKS:
        try:
            exports[pick] = exporting.export(study, pick)
        except AutotuneError:
            continue  # nothing to export by that pick: export says why, from the trials, when asked
    doc = {"status": status(study), "summary": summary(study), "owners": owners(study), "exports": exports}
    return json.loads(json.dumps(doc, default=str))


def keep(store: Store, name: str) -> bool:
    """Keep the study's views on it (the end of a run), unless a trial of it is running or it changes while they
    are computed; whether they were kept."""
    from autotune.reports import dashboard  # (plotly: imported by the writer and `dashboard` only)

    key = store.key(name)
    if key is None:
        return False
    study = store.read(name)
    kept = views(study)
    page = dashboard.draw(study).text if len(study.trials) >= KEEP_PAGE_FROM else None
    if store.key(name) != key:
        return False
    store.keep(name, key, kept, page)
    return True


def page_of(store: Store, name: str) -> Any:
    """The dashboard's page of the study ``name`` (a :class:`autotune.reports.dashboard.Drawn`): kept, or drawn from its
    trials (a :class:`StoredStudy` for :func:`autotune.reports.dashboard.write_dashboard` to draw)."""
    from autotune.reports import dashboard

    described, kept = store.kept_page(name)
    if kept is None:
        return store.read(name, described)
    return dashboard.Drawn(name, kept)


def status_of(store: Store, name: str) -> dict[str, Any]:
    """What ``autotune status`` shows of the study ``name``: kept, or computed from its trials."""
    described, kept = store.kept(name, ("status", "owners"))
    if kept is None:
        return status(store.read(name, described))
    return _now(kept["status"], kept["owners"])


def export_of(store: Store, name: str, pick: str, max_memory_bytes: int | None = None) -> dict[str, Any]:
    """The export of the study's ``pick`` (:func:`autotune.export.document.export`): kept, or computed from its
    trials."""
    described, kept = store.kept(name, (f"exports.{pick}",)) if max_memory_bytes is None else (None, None)
    if kept is None or kept[f"exports.{pick}"] is None:
        return exporting.export(store.read(name, described), pick, max_memory_bytes, store.shown)
    doc = dict(kept[f"exports.{pick}"])
    doc["exported_at"] = exporting.now()
    doc["study"] = {**doc["study"], "storage": store.shown}
    return doc


def _now(doc: Mapping[str, Any], signed: list[list[Any]]) -> dict[str, Any]:
    """A kept document with what depends on the clock worked out now."""
    return {**doc, "workers_recently": workers_recently(signed)}
