"""The failures: every finished trial whose outcome is not ok, with its error and configuration.

Past :data:`MAX_FAILURE_ROWS` failures (a study of 100,000 trials has thousands, most with one of a few errors) the
page's table shows one row per distinct error instead (``groups``): its outcome, how many trials, which (the first
:data:`GROUP_NUMBERS`) and how many configurations; the counts by outcome are the same either way.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from autotune.reports.dashboard.source import OK, Snapshot, config_text
from autotune.store import StoredStudy

MAX_FAILURE_ROWS = 1000  # past this many failed trials the table groups them by error
GROUP_NUMBERS = 20  # trial numbers named per group of failures


def failures_info(study: StoredStudy | Snapshot) -> dict[str, Any]:
    """Every finished trial whose outcome is not ok, with its error and configuration; past
    :data:`MAX_FAILURE_ROWS` of them, also grouped by error (``groups``, else None)."""
    snap = Snapshot.of(study)
    rows = [
        {
            "number": r["number"],
            "outcome": r["outcome"],
            "state": r["state"],
            "role": r["role"],
            "error_type": r["error_type"],
            "error_message": r["error_message"],
            "changes": r["changes"],
            "duration_s": r["duration_s"],
            "duplicate_of": r["duplicate_of"],
        }
        for r in snap.rows
        if r["outcome"] != OK and r["state"] in ("COMPLETE", "FAIL")
    ]
    return {
        "rows": rows,
        "by_outcome": dict(Counter(r["outcome"] for r in rows)),
        "groups": failure_groups(rows) if len(rows) > MAX_FAILURE_ROWS else None,
    }


def failure_groups(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Failed trials by (outcome, error type, message), the most frequent first: how many, the first
    :data:`GROUP_NUMBERS` trial numbers, how many were answered from the cache and how many configurations."""
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    configs: dict[tuple[str, str, str], set[str]] = {}
    for r in rows:
        key = (r["outcome"], r["error_type"], r["error_message"])
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"outcome": key[0], "error_type": key[1], "error_message": key[2], "count": 0,
                               "numbers": [], "cached": 0, "configurations": 0}
            configs[key] = set()
        g["count"] += 1
        if len(g["numbers"]) < GROUP_NUMBERS:
            g["numbers"].append(r["number"])
        g["cached"] += r["duplicate_of"] is not None
        configs[key].add(config_text(r["changes"]))
    for key, g in groups.items():
        g["configurations"] = len(configs[key])
    return sorted(groups.values(), key=lambda g: (-g["count"], g["outcome"], g["error_type"], g["error_message"]))
