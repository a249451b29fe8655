"""The dashboard's charts of the study as it went: the search's history (the front's best figure trial after trial) and
the time each trial took, drawn from :func:`autotune.reports.dashboard.history.history_info`'s data with the colours
and layout of :mod:`autotune.reports.dashboard.charts`.
"""

from __future__ import annotations

from typing import Any, Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from autotune.reports.dashboard import charts
from autotune.reports.dashboard.charts import FRONT_COLOR, OUTCOME_COLORS, REMEASURE_COLOR, layout
from autotune.reports.dashboard.source import plotly_text
from autotune.units import format_duration


def history_figure(info: Mapping[str, Any]) -> go.Figure:
    """Best speed-up (or samples/s) so far and the front's hypervolume so far, by trial number."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    label = ("best single (search) measurement so far / baseline" if info["metric"] == "speedup"
             else "best samples/s so far")
    best_x, best_y = _steps(info["numbers"], info["best_so_far"])
    share_x, share_y = _steps(info["numbers"], info["hypervolume_share"])
    fig.add_trace(
        go.Scatter(
            x=best_x,
            y=best_y,
            mode="lines+markers",
            line={"shape": "hv", "color": FRONT_COLOR},
            name=label,
            marker={"size": 4},
        ),
        secondary_y=False,
    )
    fig.add_trace(
        go.Scatter(
            x=share_x,
            y=share_y,
            mode="lines+markers",
            line={"shape": "hv", "color": "#264653", "dash": "dot"},
            marker={"size": 4},
            name="hypervolume so far (share of the reference box)",
        ),
        secondary_y=True,
    )
    layout(fig, 340, xaxis_title="trial")
    _trial_axis(fig, info)
    fig.update_yaxes(
        title_text="speed-up over baseline" if info["metric"] == "speedup" else "samples/s", secondary_y=False
    )
    fig.update_yaxes(
        title_text="hypervolume (share)",
        range=[0, 1.02],
        tickformat=".0%",
        tickmode="linear",
        tick0=0,
        dtick=0.25,
        secondary_y=True,
        showgrid=False,
    )
    return fig


def _steps(xs: list[Any], ys: list[Any]) -> tuple[list[Any], list[Any]]:
    """A running best drawn as a step line (``shape="hv"``): past :data:`autotune.reports.dashboard.charts.DENSE`
    trials only the trials where it changed, and the last one, are kept; the line drawn is the same."""
    if len(xs) <= charts.DENSE:
        return list(xs), list(ys)
    keep = [i for i in range(len(xs)) if i == 0 or i == len(xs) - 1 or ys[i] != ys[i - 1]]
    return [xs[i] for i in keep], [ys[i] for i in keep]


def _trial_axis(fig: go.Figure, info: Mapping[str, Any]) -> None:
    """Whole trial numbers on the x axis (plotly's own ticks for 3 trials read -0.5, 0.5, 2.5)."""
    ticks = info.get("trial_ticks")
    if ticks and ticks["tickvals"]:
        numbers = info["numbers"]
        fig.update_xaxes(
            tickmode="array",
            tickvals=ticks["tickvals"],
            ticktext=ticks["ticktext"],
            range=[min(numbers) - 0.6, max(numbers) + 0.6],
        )


def duration_figure(info: Mapping[str, Any]) -> go.Figure:
    """Time per trial, one bar per trial coloured by outcome, with its re-measurements (noise floor, race) on top
    (past :data:`autotune.reports.dashboard.charts.DENSE` trials, one bar per bin of trials:
    :func:`_binned_duration_figure`)."""
    if len(info["durations"]) > charts.DENSE:
        return _binned_duration_figure(info)
    fig = go.Figure()
    by_outcome: dict[str, list[Mapping[str, Any]]] = {}
    for d in info["durations"]:
        by_outcome.setdefault(d["outcome"], []).append(d)
    for outcome, items in by_outcome.items():
        fig.add_trace(
            go.Bar(
                x=[d["number"] for d in items],
                y=[d["duration_s"] for d in items],
                name=plotly_text(outcome),
                width=[0.8] * len(items),  # per trace, plotly would size bars by that trace's spacing
                marker={"color": OUTCOME_COLORS.get(outcome, "#555")},
                hovertext=[
                    f"#{d['number']} {plotly_text(outcome)}: {format_duration(d['duration_s'])}"
                    + (f" (cached from #{d['duplicate_of']})" if d["duplicate_of"] is not None else "")
                    for d in items
                ],
                hoverinfo="text",
            )
        )
    for estimated in (False, True):
        items = [
            d
            for d in info["durations"]
            if (d.get("remeasured") or {}).get("count")
            and bool(d["remeasured"].get("estimated") or d["remeasured"].get("untimed")) == estimated
        ]
        if not items:
            continue
        name = (
            "re-measured (noise floor, race, what each knob bought), estimated: each as long as its trial"
            if estimated
            else "re-measured (noise floor, race, what each knob bought)"
        )
        fig.add_trace(
            go.Bar(
                x=[d["number"] for d in items],
                y=[d["remeasured"]["time_s"] for d in items],
                name=name,
                width=[0.8] * len(items),
                marker={
                    "color": REMEASURE_COLOR,
                    "pattern": {"shape": "/" if estimated else "", "fgcolor": "#ffffff", "solidity": 0.3},
                },
                hovertext=[_remeasure_hover(d) for d in items],
                hoverinfo="text",
            )
        )
    layout(fig, 300, xaxis_title="trial", yaxis_title="duration (s)", barmode="stack", bargap=0.1)
    _trial_axis(fig, info)
    return fig


BINS = 200


def _binned_duration_figure(info: Mapping[str, Any]) -> go.Figure:
    """Time spent per bin of consecutive trials, by outcome, and the re-measurements of those trials on top."""
    durations = info["durations"]
    first, last = durations[0]["number"], durations[-1]["number"]
    width = max(1, -(-(last - first + 1) // BINS))
    starts = list(range(first, last + 1, width))
    sums: dict[str, list[float]] = {}
    counts: dict[str, list[int]] = {}
    again = [0.0] * len(starts)
    for d in durations:
        b = (d["number"] - first) // width
        sums.setdefault(d["outcome"], [0.0] * len(starts))[b] += d["duration_s"] or 0.0
        counts.setdefault(d["outcome"], [0] * len(starts))[b] += 1
        again[b] += (d.get("remeasured") or {}).get("time_s") or 0.0
    xs = [start + (width - 1) / 2 for start in starts]
    fig = go.Figure()
    for outcome, ys in sums.items():
        fig.add_trace(go.Bar(
            x=xs, y=ys, width=width * 0.9, name=plotly_text(outcome),
            marker={"color": OUTCOME_COLORS.get(outcome, "#555")},
            hovertext=[f"trials #{a}-#{a + width - 1}: {n} {plotly_text(outcome)}, {format_duration(y)}"
                       for a, n, y in zip(starts, counts[outcome], ys)],
            hoverinfo="text"))
    if any(again):
        fig.add_trace(go.Bar(
            x=xs, y=again, width=width * 0.9, name="re-measured (noise floor, race, what each knob bought)",
            marker={"color": REMEASURE_COLOR},
            hovertext=[f"trials #{a}-#{a + width - 1}: re-measurements {format_duration(y)}"
                       for a, y in zip(starts, again)],
            hoverinfo="text"))
    layout(fig, 300, xaxis_title=f"trial (bars of {width} trials)", yaxis_title=f"time per {width} trials (s)",
            barmode="stack", bargap=0.1)
    return fig


def _remeasure_hover(d: Mapping[str, Any]) -> str:
    again = d["remeasured"]
    kinds = ", ".join(f"{n} {kind}" for kind, n in (again.get("by_kind") or {}).items())
    parts = [f"#{d['number']} measured again {again['count']} time{'s' if again['count'] != 1 else ''} "
             f"({plotly_text(kinds)})"]
    if again.get("timed"):
        parts.append(f"{again['timed']} timed: {format_duration(again.get('timed_s'))}")
    if again.get("estimated"):
        parts.append(
            f"{again['estimated']} not timed when measured, estimated as long as the trial's own "
            f"{format_duration(d['duration_s'])} each: {format_duration(again.get('estimated_s'))}"
        )
    if again.get("untimed"):
        parts.append(f"{again['untimed']} of unknown time")
    return "<br>".join(parts)
