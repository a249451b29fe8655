"""The dashboard's plotly figures, each drawn from an info function's data (:mod:`autotune.report.data`).

Colours are shared by every figure: one colour per outcome, one palette for knob
values and ops. Every user string reaches plotly escaped (plotly renders a subset
of HTML in labels and hovers).
"""

from __future__ import annotations

from typing import Any, Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from autotune.report.source import BASELINE, _clip, _pct, _speedup_text, _t, _wrap_changes
from autotune.units import format_duration, format_rate

#: Marker colours by outcome, shared by every figure.
OUTCOME_COLORS = {
    "ok": "#2a9d8f",
    "oom": "#d62828",
    "nan": "#f77f00",
    "error": "#7b2cbf",
    "timeout": "#8d5524",
    "crashed": "#212529",
    "not_applicable": "#adb5bd",
    "interrupted": "#6c757d",
}
#: Colours of values and ops, in order.
PALETTE = ["#264653", "#2a9d8f", "#8ab17d", "#e9c46a", "#f4a261", "#e76f51", "#6d597a", "#b56576", "#355070", "#4d908e"]
FRONT_COLOR = "#e76f51"
TRIAL_COLOR = "#8ab6d6"
FONT = "system-ui, -apple-system, Segoe UI, Roboto, sans-serif"


# ---------------------------------------------------------------- figure functions


def _layout(fig: go.Figure, height: int, **kwargs: Any) -> go.Figure:
    base: dict[str, Any] = {
        "template": "plotly_white",
        "height": height,
        "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
        "font": {"family": FONT, "size": 12},
        "hoverlabel": {"align": "left"},
        "legend": {"orientation": "h", "y": -0.18},
    }
    fig.update_layout(**{**base, **kwargs})
    return fig


def _point_hover(p: Mapping[str, Any], unit: str, scale: float) -> str:
    lines = [f"<b>#{p['number']}</b> {_t(p['role'])}" + (" · on the front" if p.get("on_front") else "")]
    runs = p.get("processes") or 1
    memory = "-" if p["peak_memory_bytes"] is None else f"{p['peak_memory_bytes'] / scale:.2f} {unit}"
    lines.append(f"{format_rate(p['samples_per_s'])} samples/s ({runs} process{'es' if runs > 1 else ''}) · {memory}")
    extra = []
    if p.get("speedup") is not None:
        extra.append(f"{_t(p.get('speedup_text') or _speedup_text(p['speedup']))} the defaults (90%)")
    if p.get("mfu") is not None:
        extra.append(f"MFU {_pct(p['mfu'])}")
    if not p.get("feasible", True):
        extra.append("over the memory budget")
    if extra:
        lines.append(" · ".join(extra))
    lines.append(_wrap_changes(p["changes"]))
    return "<br>".join(lines)


def pareto_figure(info: Mapping[str, Any]) -> go.Figure:
    """Samples/s against peak memory: trials, the front joined by a line, failures by outcome along the bottom."""
    unit, scale = info["memory_unit"], info["memory_scale"]
    fig = go.Figure()
    groups = [
        ("trials", [p for p in info["points"] if not p["on_front"] and p["feasible"]], TRIAL_COLOR, "circle"),
        (
            "over the memory budget",
            [p for p in info["points"] if not p["on_front"] and not p["feasible"]],
            "#b0b0b0",
            "circle-open",
        ),
    ]
    for name, pts, color, symbol in groups:
        if pts:
            fig.add_trace(
                go.Scatter(
                    x=[(p["peak_memory_bytes"] or 0.0) / scale for p in pts],
                    y=[p["samples_per_s"] for p in pts],
                    mode="markers",
                    name=f"{name} ({len(pts)})",
                    marker={"color": color, "size": 8, "symbol": symbol, "line": {"width": 0.5, "color": "#456"}},
                    hovertext=[_point_hover(p, unit, scale) for p in pts],
                    hoverinfo="text",
                )
            )
    by_number = {p["number"]: p for p in info["points"]}
    front = [by_number[n] for n in info["front"]]
    if front:
        fig.add_trace(
            go.Scatter(
                x=[(p["peak_memory_bytes"] or 0.0) / scale for p in front],
                y=[p["samples_per_s"] for p in front],
                mode="lines+markers",
                line={"color": FRONT_COLOR, "width": 2, "shape": "hv"},
                name=f"Pareto front ({len(front)})",
                marker={"color": FRONT_COLOR, "size": 12, "symbol": "diamond", "line": {"width": 1, "color": "#333"}},
                hovertext=[_point_hover(p, unit, scale) for p in front],
                hoverinfo="text",
            )
        )
    by_outcome: dict[str, list[Mapping[str, Any]]] = {}
    for f in info["failed"]:
        by_outcome.setdefault(f["outcome"], []).append(f)
    for index, (outcome, items) in enumerate(by_outcome.items()):
        # Unknown memory: at the right edge, each outcome a little apart so none hides another.
        edge = info["edge_memory_bytes"] * (1 + 0.012 * index)
        xs = [(f["peak_memory_bytes"] if f["peak_memory_bytes"] is not None else edge) / scale for f in items]
        hovers = [
            f"<b>#{f['number']}</b> {_t(f['outcome'])}<br>"
            + (
                "memory unknown (drawn at the right edge)"
                if f["peak_memory_bytes"] is None
                else f"{f['peak_memory_bytes'] / scale:.2f} {unit} when it failed"
            )
            + f"<br>{_t(_clip(f['error'], 160))}<br>{_wrap_changes(f['changes'])}"
            for f in items
        ]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=[0.0] * len(items),
                mode="markers",
                name=f"{_t(outcome)} ({len(items)})",
                marker={"color": OUTCOME_COLORS.get(outcome, "#555"), "size": 10, "symbol": "x"},
                hovertext=hovers,
                hoverinfo="text",
            )
        )
    for label in info["labels"]:
        fig.add_annotation(
            x=label["peak_memory_bytes"] / scale,
            y=label["samples_per_s"],
            text=f"{_t(label['role'])} #{label['number']}",
            showarrow=True,
            arrowhead=2,
            ax=-40 if label["role"] == BASELINE else 40,
            ay=-30,
            bgcolor="rgba(255,255,255,0.8)",
        )
    if info["max_memory_bytes"]:
        fig.add_vline(
            x=info["max_memory_bytes"] / scale,
            line={"color": "#d62828", "dash": "dash", "width": 1.5},
            annotation_text="memory budget",
            annotation_position="top right",
        )
    _layout(fig, 520, xaxis_title=f"peak memory ({unit})", yaxis_title="samples/s", hovermode="closest")
    # Fixed ranges from 0, with room below 0 samples/s for the failures drawn there.
    top_speed = max((p["samples_per_s"] for p in info["points"]), default=1.0)
    fig.update_xaxes(range=[0, info["edge_memory_bytes"] * (1.03 + 0.012 * len(by_outcome)) / scale])
    fig.update_yaxes(range=[-0.05 * top_speed, 1.1 * top_speed])
    return fig


def knob_figure(knob: Mapping[str, Any], memory_unit: str, memory_scale: float) -> go.Figure:
    """One knob: samples/s and peak memory of the ok trials for each of its values (box + every point)."""
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("samples/s", f"peak memory ({memory_unit})"), horizontal_spacing=0.12
    )
    for i, v in enumerate(knob["values"]):
        hover = [f"#{n}" for n in v["numbers"]]
        color = PALETTE[i % len(PALETTE)]
        common = {
            "name": _t(v["value"]),
            "boxpoints": "all",
            "jitter": 0.4,
            "pointpos": 0,
            "showlegend": False,
            "hovertext": hover,
            "hoverinfo": "y+text",
            "marker": {"size": 5, "opacity": 0.7, "color": color},
            "line": {"color": color},
        }
        fig.add_trace(go.Box(y=v["samples_per_s"], x=[_t(v["value"])] * len(hover), **common), row=1, col=1)
        mem = [None if m is None else m / memory_scale for m in v["peak_memory_bytes"]]
        fig.add_trace(go.Box(y=mem, x=[_t(v["value"])] * len(hover), **common), row=1, col=2)
    _layout(
        fig,
        300,
        title={"text": f"<b>{_t(knob['name'])}</b>", "x": 0.01, "font": {"size": 14}},
        margin={"l": 50, "r": 10, "t": 60, "b": 40},
    )
    fig.update_xaxes(type="category")
    return fig


def importance_figure(info: Mapping[str, Any]) -> go.Figure:
    """Horizontal bars of knob importance for samples/s and for peak memory."""
    speed = info["samples_per_s"]
    names = sorted(speed, key=lambda k: speed[k])
    fig = go.Figure()
    for key, label, color in (
        ("samples_per_s", "samples/s", "#264653"),
        ("peak_memory_bytes", "peak memory", "#e9c46a"),
    ):
        fig.add_trace(
            go.Bar(
                y=[_t(n) for n in names],
                x=[info[key].get(n, 0.0) for n in names],
                orientation="h",
                name=f"for {label}",
                marker={"color": color},
                hovertemplate="%{y}: %{x:.3f}<extra>" + label + "</extra>",
            )
        )
    _layout(
        fig,
        max(260, 40 + 38 * len(names)),
        barmode="group",
        xaxis_title="importance (share)",
        legend={"orientation": "h", "y": -0.25},
    )
    return fig


def parallel_figure(info: Mapping[str, Any], memory_unit: str, memory_scale: float) -> go.Figure:
    """Parallel coordinates: one line per ok trial through its knob values to its samples/s and memory."""
    dims = []
    for d in info["dimensions"]:
        dim: dict[str, Any] = {"label": _t(d["name"]), "values": d["values"]}
        if d["ticktext"] is not None:
            dim.update(
                tickvals=d["tickvals"],
                ticktext=[_t(t) for t in d["ticktext"]],
                range=[-0.3, max(len(d["tickvals"]) - 0.7, 0.3)],
            )
        dims.append(dim)
    memory = [None if m is None else m / memory_scale for m in info["peak_memory_bytes"]]
    dims.append({"label": f"peak memory ({memory_unit})", "values": memory, "tickformat": ".2f"})
    dims.append({"label": "samples/s", "values": info["samples_per_s"], "tickformat": ",.0f"})
    fig = go.Figure(
        go.Parcoords(
            line={
                "color": info["samples_per_s"],
                "colorscale": "Viridis",
                "showscale": True,
                "colorbar": {"title": {"text": "samples/s"}},
            },
            dimensions=dims,
            labelangle=-20,
        )
    )
    _layout(fig, 420, margin={"l": 60, "r": 110, "t": 80, "b": 30})
    return fig


def history_figure(info: Mapping[str, Any]) -> go.Figure:
    """Best speed-up (or samples/s) so far and the front's hypervolume so far, by trial number."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    label = "best single (search) measurement so far / baseline" if info["metric"] == "speedup" else "best samples/s so far"
    fig.add_trace(
        go.Scatter(
            x=info["numbers"],
            y=info["best_so_far"],
            mode="lines+markers",
            line={"shape": "hv", "color": FRONT_COLOR},
            name=label,
            marker={"size": 4},
        ),
        secondary_y=False,
    )
    fig.add_trace(
        go.Scatter(
            x=info["numbers"],
            y=info["hypervolume_share"],
            mode="lines+markers",
            line={"shape": "hv", "color": "#264653", "dash": "dot"},
            marker={"size": 4},
            name="hypervolume so far (share of the reference box)",
        ),
        secondary_y=True,
    )
    _layout(fig, 340, xaxis_title="trial")
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


def duration_figure(info: Mapping[str, Any]) -> go.Figure:
    """Time per trial, one bar per trial, coloured by outcome."""
    fig = go.Figure()
    by_outcome: dict[str, list[Mapping[str, Any]]] = {}
    for d in info["durations"]:
        by_outcome.setdefault(d["outcome"], []).append(d)
    for outcome, items in by_outcome.items():
        fig.add_trace(
            go.Bar(
                x=[d["number"] for d in items],
                y=[d["duration_s"] for d in items],
                name=_t(outcome),
                width=[0.8] * len(items),  # per trace, plotly would size bars by that trace's spacing
                marker={"color": OUTCOME_COLORS.get(outcome, "#555")},
                hovertext=[
                    f"#{d['number']} {_t(outcome)}: {format_duration(d['duration_s'])}"
                    + (f" (cached from #{d['duplicate_of']})" if d["duplicate_of"] is not None else "")
                    for d in items
                ],
                hoverinfo="text",
            )
        )
    _layout(fig, 300, xaxis_title="trial", yaxis_title="duration (s)", barmode="overlay", bargap=0.1)
    return fig


def profile_figure(info: Mapping[str, Any]) -> go.Figure:
    """Per front trial: stacked share of step time by op, and the share spent waiting for data."""
    trials = info["trials"]
    labels = [f"#{t['number']}" for t in trials]
    fig = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        column_widths=[0.78, 0.22],
        horizontal_spacing=0.03,
        subplot_titles=("share of step time by op", "waiting for data"),
    )
    for i, op in enumerate(list(info["ops"]) + ["other ops"]):
        shares = [t["ops"].get(op, 0.0) if op != "other ops" else t["other_share"] for t in trials]
        fig.add_trace(
            go.Bar(
                y=labels,
                x=shares,
                orientation="h",
                name=_t(op),
                marker={"color": PALETTE[i % len(PALETTE)] if op != "other ops" else "#ced4da"},
                hovertext=[
                    f"{_t(op)}: {_pct(s)} of the step<br>{_wrap_changes(t['changes'])}" for s, t in zip(shares, trials)
                ],
                hoverinfo="text",
            ),
            row=1,
            col=1,
        )
    fig.add_trace(
        go.Bar(
            y=labels,
            x=[t["data_wait_share"] or 0.0 for t in trials],
            orientation="h",
            name="data wait",
            marker={"color": "#d62828"},
            hovertext=[f"#{t['number']} waits for data {_pct(t['data_wait_share'])} of the step" for t in trials],
            hoverinfo="text",
        ),
        row=1,
        col=2,
    )
    _layout(
        fig,
        max(260, 90 + 34 * len(trials)),
        barmode="stack",
        legend={"orientation": "h", "y": -0.2 - 6.0 / max(len(trials) * 34, 120)},
    )
    fig.update_xaxes(tickformat=".0%", rangemode="tozero")
    fig.update_yaxes(autorange="reversed", type="category")
    return fig


