"""The Pareto front: every measured trial in (peak memory, samples/s), the front as a table, and where the front's
step time goes (its profile).

The recommended configuration (the verdict's winner, or the baseline when the verdict keeps the
defaults) is labelled wherever it lies, and leads the table even when the front leaves it out.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping

from autotune.evidence.energy import energy
from autotune.reports.dashboard.source import OK, Snapshot, finite, memory_unit
from autotune.reports.dashboard.ticks import nice_ticks
from autotune.result import op_name
from autotune.store import StoredStudy
from autotune.store.records import Role

MAX_OPS = 8  # ops named in the profile figure; the rest are "other ops"


def pareto_info(study: StoredStudy | Snapshot) -> dict[str, Any]:
    """Every measured trial in (peak memory, samples/s), the front, failures by outcome, labels and the budget.

    The labels name the baseline, the recipe and the recommended configuration (``recommended: #N``: the verdict's
    winner, or the baseline when the verdict keeps the defaults), wherever it lies, on the front or not.
    """
    snap = Snapshot.of(study)
    front = set(snap.front)
    chosen = snap.recommended()
    recommended = chosen["number"] if chosen else None
    points = []
    for r in snap.measured_ok():
        points.append(
            {
                "number": r["number"],
                "role": r["role"],
                "samples_per_s": r["samples_per_s"],
                "samples_per_s_cv": r["samples_per_s_cv"],
                "peak_memory_bytes": r["peak_memory_bytes"],
                "mfu": r["mfu"],
                "processes": r.get("processes", 1),
                "speedup": r.get("speedup"),
                "speedup_text": r.get("speedup_text", "-"),
                "on_front": r["number"] in front,
                "recommended": r["number"] == recommended,
                "feasible": r["feasible"],
                "changes": r["changes"],
            }
        )
    failed = [
        {
            "number": r["number"],
            "outcome": r["outcome"],
            "role": r["role"],
            "peak_memory_bytes": r["peak_memory_bytes"],
            "error": f"{r['error_type']}: {r['error_message']}".strip(": "),
            "changes": r["changes"],
        }
        for r in snap.rows
        if r["outcome"] != OK and r["duplicate_of"] is None and r["state"] in ("COMPLETE", "FAIL")
    ]
    memories = [p["peak_memory_bytes"] for p in points + failed if p["peak_memory_bytes"] is not None]
    budget = finite(snap.study.max_memory_bytes)
    top = max(memories + ([budget] if budget else []), default=1024.0**3)
    unit, scale = memory_unit(top)
    by_number = {p["number"]: p for p in points}
    labels = [
        {
            "number": p["number"],
            "role": p["role"],
            "recommended": p["recommended"],
            "text": _label_text(p),
            "samples_per_s": p["samples_per_s"],
            "peak_memory_bytes": p["peak_memory_bytes"],
        }
        for p in points
        if (p["role"] in (Role.BASELINE, Role.RECIPE) or p["recommended"]) and p["peak_memory_bytes"] is not None
    ]
    return {
        "memory_unit": unit,
        "memory_scale": scale,
        "points": points,
        "front": sorted(front & set(by_number), key=lambda n: by_number[n]["peak_memory_bytes"] or 0.0),
        "failed": failed,
        "edge_memory_bytes": top * 1.05,  # where failures of unknown memory are drawn
        "labels": labels,
        "recommended": recommended,
        "max_memory_bytes": budget,
    }


def _label_text(p: Mapping[str, Any]) -> str:
    if not p["recommended"]:
        return f"{p['role']} #{p['number']}"
    if p["role"] == Role.BASELINE:
        return f"recommended: #{p['number']} (baseline: keep the defaults)"
    return f"recommended: #{p['number']}" + (f" ({p['role']})" if p["role"] == Role.RECIPE else "")


def front_table_info(study: StoredStudy | Snapshot) -> dict[str, Any]:
    """The front as table rows, fastest first, with what each changes from the defaults; the recommended
    configuration is the first row, marked, even when the front leaves it out (dominated on memory), as
    in the command line's front tables."""
    snap = Snapshot.of(study)
    baseline = snap.baseline()
    chosen = snap.recommended()
    rows_by_number = snap.by_number()
    first = [chosen["number"]] if chosen is not None and chosen["number"] in rows_by_number else []
    rows = []
    for n in first + [n for n in snap.front if n not in first]:
        r = rows_by_number[n]
        profile = r["profile"] if isinstance(r["profile"], Mapping) else {}
        rows.append(
            {
                "number": n,
                "role": r["role"],
                "recommended": chosen is not None and chosen["number"] == n,
                "samples_per_s": r["samples_per_s"],
                "samples_per_s_cv": r["samples_per_s_cv"],
                "peak_memory_bytes": r["peak_memory_bytes"],
                "processes": r.get("processes", 1),
                "speedup": r.get("speedup"),
                "speedup_text": r.get("speedup_text", "-"),
                "mfu": r["mfu"],
                # beside MFU: the configuration's energy per sample, as status shows it (autotune.evidence.energy)
                "joules_per_sample": energy(snap.study, n).joules_per_sample,
                "data_wait_share": finite(profile.get("data_wait_share")),
                "time_to_first_step_s": r["time_to_first_step_s"],
                "changes": r["changes"],
            }
        )
    return {
        "rows": rows,
        "has_mfu": any(r["mfu"] is not None for r in rows),
        "has_energy": any(r["joules_per_sample"] is not None for r in rows),
        "baseline": baseline["number"] if baseline else None,
        "recommended": chosen["number"] if chosen else None,
    }


def profile_info(study: StoredStudy | Snapshot) -> dict[str, Any]:
    """Where step time goes on the front: each trial's top ops (share of step) and its data-wait share."""
    snap = Snapshot.of(study)
    rows_by_number = snap.by_number()
    per_trial = []
    totals: Counter[str] = Counter()
    for n in snap.front:
        r = rows_by_number[n]
        profile = r["profile"] if isinstance(r["profile"], Mapping) else {}
        ops = {}
        for op in profile.get("top_ops") or []:
            if isinstance(op, Mapping) and finite(op.get("share")) is not None:
                name = op_name(str(op.get("name", "?")))  # one entry for every compiled graph, not one per hash
                ops[name] = ops.get(name, 0.0) + float(op["share"])
        wait = finite(profile.get("data_wait_share"))
        if not ops and wait is None:
            continue
        totals.update(ops)
        per_trial.append({"number": n, "changes": r["changes"], "ops": ops, "data_wait_share": wait})
    named = [name for name, _ in totals.most_common(MAX_OPS)]
    for t in per_trial:
        shown = {name: t["ops"].get(name, 0.0) for name in named}
        t["other_share"] = max(0.0, 1.0 - sum(shown.values())) if t["ops"] else 0.0
        t["ops"] = shown
    # Shares of a step: the ops' axis is the whole step; the data-wait axis reaches at least 5% so that a wait
    # of 0.03% is drawn as the sliver it is (not as a full-width bar over "0% 0% 0%").
    ops_top = max([1.0] + [sum(t["ops"].values()) + t["other_share"] for t in per_trial])
    wait_top = min(1.0, max([0.05] + [1.15 * (t["data_wait_share"] or 0.0) for t in per_trial]))
    return {
        "ops": named,
        "trials": per_trial,
        "ops_axis": {"range": [0.0, ops_top], **nice_ticks(0.0, ops_top, target=4, percent=True)},
        "data_wait_axis": {"range": [0.0, wait_top], **nice_ticks(0.0, wait_top, target=3, percent=True)},
    }

