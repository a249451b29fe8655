"""The failures: every finished trial whose outcome is not ok, with its error and configuration."""

from __future__ import annotations

from collections import Counter
from typing import Any

from autotune.report.source import OK, Snapshot
from autotune.store import StoredStudy


def failures_info(study: StoredStudy | Snapshot) -> dict[str, Any]:
    """Every finished trial whose outcome is not ok, with its error and configuration."""
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
    return {"rows": rows, "by_outcome": dict(Counter(r["outcome"] for r in rows))}

