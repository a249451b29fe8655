"""The numerics check on the page: the defaults' loss, their second run's and the recommendation's, step by step.

:func:`numerics_info` reads the check of the recommendation (:meth:`autotune.evidence.Evidence.numerics`), whose
answer the header's verdict already says; :func:`numerics_figure` draws its loss curves, the recommendation's beside
the defaults' (the check's floor, the defaults again, dotted), and each knob reverted when the numerics differed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go

from autotune.reports.dashboard.source import Snapshot, plotly_text
from autotune.store import StoredStudy

COLORS = {"defaults": "#6c757d", "floor": "#adb5bd", "recommendation": "#2a9d8f"}


def numerics_info(study: StoredStudy | Snapshot) -> dict[str, Any]:
    """The check's answer (``text``, ``state``) and its loss per step by run label; ``curves`` empty when no check
    of the recommendation ran."""
    check = Snapshot.of(study).evidence.numerics()
    if check is None:
        return {"state": None, "text": None, "curves": {}, "steps": 0}
    return {"state": check.state, "text": check.text(), "steps": check.steps,
            "curves": {label: [float(x) for x in losses] for label, losses in check.curves.items()}}


def numerics_figure(info: Mapping[str, Any]) -> go.Figure:
    """The loss per optimizer step of each run of the check."""
    fig = go.Figure()
    for label, losses in info["curves"].items():
        name = {"defaults": "PyTorch's defaults", "floor": "the defaults again (floor)",
                "recommendation": "the recommendation"}.get(label, label.replace("revert:", "reverted: "))
        dash = "dot" if label == "floor" else ("dash" if label.startswith(("revert:", "candidate:")) else "solid")
        fig.add_trace(go.Scatter(x=list(range(1, len(losses) + 1)), y=losses, mode="lines", name=plotly_text(name),
                                 line={"color": COLORS.get(label), "dash": dash, "width": 2}))
    fig.update_layout(template="plotly_white", height=360, margin={"l": 60, "r": 20, "t": 40, "b": 50},
                      legend={"orientation": "h", "y": -0.2}, xaxis={"title": "optimizer step"},
                      yaxis={"title": "loss (mean over the step's samples)"}, hoverlabel={"align": "left"})
    return fig
