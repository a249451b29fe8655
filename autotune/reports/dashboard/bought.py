"""What each knob of the race's winner bought, from the defaults: the steps of the path as the waterfall draws them."""

from __future__ import annotations

from typing import Any

from autotune.reports.dashboard.source import Snapshot, format_value
from autotune.store import StoredStudy


def ablation_info(study: StoredStudy | Snapshot) -> dict[str, Any]:
    """What each knob of the race's winner bought, from the defaults (:meth:`Evidence.ablation`): the steps of the
    path, each with its speed-up over the defaults and what it bought over the step before, both with intervals;
    which steps the recommendation keeps. Empty before the race settles a gain."""
    snap = Snapshot.of(study)
    ab = snap.evidence.ablation()
    if ab is None:
        return {"steps": [], "text": None, "winner": None, "minimal": None, "dropped": {}, "processes": 0}
    doc = ab.to_dict()
    steps = [
        {
            "label": s["label"],
            "speedup": s["speedup"]["estimate"],
            "speedup_text": s["speedup"]["text"],
            "bought": s["bought"]["estimate"],
            "bought_text": s["bought"]["text"],
            "pays": s["pays"],
            "kept": s["kept"],
            "why_left": s.get("why_left") or "bought nothing beyond the noise",
            "within_process": s["within_process"],
        }
        for s in doc["steps"]
    ]
    return {"steps": steps, "text": doc["text"], "winner": doc["winner"], "minimal": doc["minimal"],
            "dropped": {k: format_value(k, v) for k, v in doc["dropped"].items()}, "processes": doc["processes"]}

