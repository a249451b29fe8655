"""The dashboard's plotly figures, each drawn from an info function's data (the ``*_info`` of
:mod:`autotune.reports.dashboard`).

Colours are shared by every figure: one colour per outcome, one palette for knob
values and ops. Every user string reaches plotly escaped (plotly renders a subset
of HTML in labels and hovers).
"""

from __future__ import annotations

import array
import base64
import sys
from typing import Any, Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from autotune.reports.dashboard.source import plotly_text, speedup_text, wrap_changes
from autotune.store.records import Role
from autotune.units import clip, format_percent, format_rate

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
#: Colours of importance within the dominant split's values.
SPLIT_COLORS = ["#2a9d8f", "#8ab17d", "#6d597a"]
#: Colours of values and ops, in order.
PALETTE = ["#264653", "#2a9d8f", "#8ab17d", "#e9c46a", "#f4a261", "#e76f51", "#6d597a", "#b56576", "#355070", "#4d908e"]
FRONT_COLOR = "#e76f51"
RECOMMENDED_COLOR = "#2a9d8f"
REMEASURE_COLOR = "#457b9d"
TRIAL_COLOR = "#8ab6d6"
FONT = "system-ui, -apple-system, Segoe UI, Roboto, sans-serif"
#: Above this many marks a cloud is drawn with WebGL (Scattergl), a box from its quartiles, a history by the
#: trials where it changed and time per trial in bins of trials: the page of a 10,000-trial study stays
#: small and quick to draw. The front, the labelled points and the failure counts are always drawn exactly.
DENSE = 1000


# ---------------------------------------------------------------- figure functions


def layout(fig: go.Figure, height: int, **kwargs: Any) -> go.Figure:
    """The dashboard's look for a figure (template, height, margins, font, legend), ``kwargs`` over it."""
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
    lines = [f"<b>#{p['number']}</b> {plotly_text(p['role'])}" + (" · on the front" if p.get("on_front") else "")]
    runs = p.get("processes") or 1
    memory = "-" if p["peak_memory_bytes"] is None else f"{p['peak_memory_bytes'] / scale:.2f} {unit}"
    lines.append(f"{format_rate(p['samples_per_s'])} samples/s ({runs} process{'es' if runs > 1 else ''}) · {memory}")
    extra = []
    if p.get("speedup") is not None:
        extra.append(f"{plotly_text(p.get('speedup_text') or speedup_text(p['speedup']))} the defaults (90%)")
    if p.get("mfu") is not None:
        extra.append(f"MFU {format_percent(p['mfu'])}")
    if not p.get("feasible", True):
        extra.append("over the memory budget")
    if extra:
        lines.append(" · ".join(extra))
    lines.append(wrap_changes(p["changes"]))
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
        if not pts:
            continue
        xs = [(p["peak_memory_bytes"] or 0.0) / scale for p in pts]
        ys = [p["samples_per_s"] for p in pts]
        if len(pts) > DENSE:
            # A cloud in WebGL, each point hovering its trial, figures and speed-up; its numbers as typed arrays
            # (plotly's base64 form: exact, smaller than their digits, and checked by plotly in one step, not one a
            # point), the same speed-up texts once each.
            kind, marker = go.Scattergl, {"color": color, "size": 5, "symbol": symbol, "opacity": 0.6}
            hover: dict[str, Any] = {
                "customdata": typed_array([p["number"] for p in pts], "i4"),
                "text": [plotly_text(p.get("speedup_text") or "-") for p in pts],
                "hovertemplate": f"#%{{customdata}}: %{{y:.1f}} samples/s, %{{x:.2f}} {unit}, "
                                 "%{text} the defaults<extra></extra>"}
            xs, ys = typed_array(xs), typed_array(ys)  # type: ignore[assignment]
        else:  # the front keeps full hovers either way
            kind, marker = go.Scatter, {"color": color, "size": 8, "symbol": symbol,
                                        "line": {"width": 0.5, "color": "#456"}}
            hover = {"hovertext": [_point_hover(p, unit, scale) for p in pts], "hoverinfo": "text"}
        fig.add_trace(kind(x=xs, y=ys, mode="markers", name=f"{name} ({len(pts)})", marker=marker, **hover))
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
        dense = len(items) > DENSE / 10
        hovers = [
            f"<b>#{f['number']}</b> {plotly_text(f['outcome'])}: {plotly_text(clip(f['error'], 80))}" if dense else
            f"<b>#{f['number']}</b> {plotly_text(f['outcome'])}<br>"
            + (
                "memory unknown (drawn at the right edge)"
                if f["peak_memory_bytes"] is None
                else f"{f['peak_memory_bytes'] / scale:.2f} {unit} when it failed"
            )
            + f"<br>{plotly_text(clip(f['error'], 160))}<br>{wrap_changes(f['changes'])}"
            for f in items
        ]
        if len(items) > DENSE and _add_failure_cloud(fig, outcome, items, xs):
            continue
        fig.add_trace(
            (go.Scattergl if len(items) > DENSE else go.Scatter)(
                x=xs,
                y=[0.0] * len(items),
                mode="markers",
                name=f"{plotly_text(outcome)} ({len(items)})",
                marker={"color": OUTCOME_COLORS.get(outcome, "#555"), "size": 10, "symbol": "x"},
                hovertext=hovers,
                hoverinfo="text",
            )
        )
    x_top = info["edge_memory_bytes"] * (1.03 + 0.012 * len(by_outcome)) / scale
    for label in info["labels"]:
        chosen = label.get("recommended")
        x = label["peak_memory_bytes"] / scale
        # Each label beside its point where it fits (the baseline's preferably left of it, others on the side with
        # more room; about 7 px a character on a plot about 1100 px wide), the recommendation's below its point and
        # the others above, so that a recommendation next to the recipe or the baseline does not cover theirs.
        frac = x / x_top if x_top else 0.0
        need = min(0.9, (7 * len(label["text"]) + 40) / 1100)
        left = frac > 0.5 or label["role"] == Role.BASELINE
        if left and frac < need:
            left = False
        elif not left and 1 - frac < need:
            left = True
        fig.add_annotation(
            x=x,
            y=label["samples_per_s"],
            text=f"<b>{plotly_text(label['text'])}</b>" if chosen else plotly_text(label["text"]),
            showarrow=True,
            arrowhead=2,
            ax=-30 if left else 30,
            ay=36 if chosen and label["role"] != Role.BASELINE else -30,
            xanchor="right" if left else "left",
            bgcolor="rgba(255,255,255,0.85)",
            bordercolor=RECOMMENDED_COLOR if chosen else "rgba(0,0,0,0)",
            borderwidth=1.5 if chosen else 0,
            arrowcolor=RECOMMENDED_COLOR if chosen else "#444",
        )
    if info["max_memory_bytes"]:
        fig.add_vline(
            x=info["max_memory_bytes"] / scale,
            line={"color": "#d62828", "dash": "dash", "width": 1.5},
            annotation_text="memory budget",
            annotation_position="top right",
        )
    layout(fig, 520, xaxis_title=f"peak memory ({unit})", yaxis_title="samples/s", hovermode="closest")
    # Fixed ranges from 0, with room below 0 samples/s for the failures drawn there.
    top_speed = max((p["samples_per_s"] for p in info["points"]), default=1.0)
    fig.update_xaxes(range=[0, x_top])
    fig.update_yaxes(range=[-0.05 * top_speed, 1.1 * top_speed])
    return fig


_ARRAY_CODES = {"f8": "d", "i4": "i"}


def typed_array(values: list[Any], dtype: str = "f8") -> dict[str, str]:
    """Numbers as a plotly typed array (``{"dtype", "bdata"}``: little-endian, base64), which plotly.py takes as it
    is and plotly.js reads natively: 8 bytes a double, exact, ~11 characters, where its digits take up to 20; and
    made without numpy (83 ms to import) or plotly's check of each element."""
    packed = array.array(_ARRAY_CODES[dtype], values)
    if sys.byteorder != "little":
        packed.byteswap()
    return {"dtype": dtype, "bdata": base64.b64encode(packed.tobytes()).decode("ascii")}


MAX_ERROR_TRACES = 50  # the most distinct errors of an outcome drawn as traces of their own (_add_failure_cloud)


def _add_failure_cloud(fig: go.Figure, outcome: str, items: list[Mapping[str, Any]], xs: list[float]) -> bool:
    """Thousands of failures of one outcome in WebGL, one trace per distinct error (a study of 100,000 trials has a
    few): the error once in its trace, each point's trial number in a typed array; one legend entry for the outcome,
    with its count. False (nothing drawn) when the outcome has more than :data:`MAX_ERROR_TRACES` distinct errors."""
    by_error: dict[str, list[int]] = {}
    for i, f in enumerate(items):
        by_error.setdefault(f["error"], []).append(i)
    if len(by_error) > MAX_ERROR_TRACES:
        return False
    for k, (error, members) in enumerate(by_error.items()):
        fig.add_trace(
            go.Scattergl(
                x=typed_array([xs[i] for i in members]),
                y=typed_array([0.0] * len(members)),
                mode="markers",
                name=f"{plotly_text(outcome)} ({len(items)})",
                legendgroup=f"failed:{outcome}",
                showlegend=k == 0,
                marker={"color": OUTCOME_COLORS.get(outcome, "#555"), "size": 10, "symbol": "x"},
                customdata=typed_array([items[i]["number"] for i in members], "i4"),
                # the error as text of the trace (not in the template, where a "%{" of the message would be read)
                text=f"{plotly_text(outcome)}: {plotly_text(clip(error, 80))}",
                hovertemplate="<b>#%{customdata}</b> %{text}<extra></extra>",
            )
        )
    return True


def knob_figure(knob: Mapping[str, Any], memory_unit: str, memory_scale: float) -> go.Figure:
    """One knob: samples/s and peak memory of the ok trials for each of its values (box + every point)."""
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("samples/s", f"peak memory ({memory_unit})"), horizontal_spacing=0.12
    )
    dense = sum(len(v["numbers"]) for v in knob["values"]) > DENSE
    for i, v in enumerate(knob["values"]):
        color = PALETTE[i % len(PALETTE)]
        if dense:  # boxes from their quartiles (plotly's own method), without a mark per trial
            label = plotly_text(v["value"])
            for col, ys in ((1, v["samples_per_s"]),
                            (2, [None if m is None else m / memory_scale for m in v["peak_memory_bytes"]])):
                q = _quartiles([y for y in ys if y is not None])
                if q is None:
                    continue
                fig.add_trace(go.Box(x=[label], q1=[q[1]], median=[q[2]], q3=[q[3]], lowerfence=[q[0]],
                                     upperfence=[q[4]],
                                     name=f"{label} ({len(ys)} trials)", showlegend=False, boxpoints=False,
                                     marker={"color": color}, line={"color": color}), row=1, col=col)
            continue
        hover = [f"#{n}" for n in v["numbers"]]
        common = {
            "name": plotly_text(v["value"]),
            "boxpoints": "all",
            "jitter": 0.4,
            "pointpos": 0,
            "showlegend": False,
            "hovertext": hover,
            "hoverinfo": "y+text",
            "marker": {"size": 5, "opacity": 0.7, "color": color},
            "line": {"color": color},
        }
        fig.add_trace(go.Box(y=v["samples_per_s"], x=[plotly_text(v["value"])] * len(hover), **common), row=1, col=1)
        mem = [None if m is None else m / memory_scale for m in v["peak_memory_bytes"]]
        fig.add_trace(go.Box(y=mem, x=[plotly_text(v["value"])] * len(hover), **common), row=1, col=2)
    layout(
        fig,
        300,
        title={"text": f"<b>{plotly_text(knob['name'])}</b>", "x": 0.01, "font": {"size": 14}},
        margin={"l": 50, "r": 10, "t": 60, "b": 40},
    )
    fig.update_xaxes(type="category")
    return fig


def _quartiles(values: list[float]) -> tuple[float, float, float, float, float] | None:
    """Lowest, q1, median, q3 and highest (a box whose whiskers reach every value: none is hidden as an outlier)."""
    if not values:
        return None
    if len(values) == 1:
        return (values[0],) * 5
    import statistics

    q1, med, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return min(values), q1, med, q3, max(values)


def importance_figure(info: Mapping[str, Any]) -> go.Figure:
    """Horizontal bars of knob importance: samples/s over all trials and within the dominant split, peak memory."""
    n = info.get("n_trials")
    series: list[tuple[str, Mapping[str, float], str]] = [
        (f"samples/s, all {n} trials" if n else "samples/s, all trials", info["samples_per_s"], "#264653")
    ]
    for i, split in enumerate(info.get("splits") or []):
        series.append(
            (
                f"samples/s where {split['knob']}={split['value']} ({split['n_trials']} trials)",
                split["samples_per_s"],
                SPLIT_COLORS[i % len(SPLIT_COLORS)],
            )
        )
    series.append(("peak memory, all trials", info["peak_memory_bytes"], "#e9c46a"))
    speed_series = [values for _, values, _ in series[:-1]]
    knobs_shown = {k for _, values, _ in series for k in values}
    names = sorted(knobs_shown, key=lambda k: (max(v.get(k, 0.0) for v in speed_series), k))
    fig = go.Figure()
    for label, values, color in series:
        fig.add_trace(
            go.Bar(
                y=[plotly_text(n) for n in names],
                x=[values.get(n) for n in names],
                orientation="h",
                name=plotly_text(label),
                marker={"color": color},
                hovertemplate="%{y}: %{x:.2f}<extra>" + plotly_text(label) + "</extra>",
            )
        )
    layout(
        fig,
        max(260, 60 + 16 * len(series) * len(names)),
        barmode="group",
        xaxis_title="importance (share of the spread of log samples/s or log memory it explains)",
        legend={"orientation": "h", "y": -0.12 - 0.02 * len(series)},
    )
    fig.update_xaxes(range=[0, 1.0], tickvals=[0, 0.25, 0.5, 0.75, 1.0], ticktext=["0", "0.25", "0.5", "0.75", "1"])
    return fig


def _round(x: Any) -> Any:
    return float(f"{x:.4g}") if isinstance(x, float) else x


def parallel_figure(info: Mapping[str, Any], memory_unit: str, memory_scale: float) -> go.Figure:
    """Parallel coordinates: one line per ok trial through its knob values to its samples/s and memory."""
    dims = []
    for d in info["dimensions"]:
        dim: dict[str, Any] = {"label": plotly_text(d["name"]), "values": d["values"]}
        if d.get("ticktext") is not None:
            dim.update(tickvals=d["tickvals"], ticktext=[plotly_text(t) for t in d["ticktext"]])
        if d.get("range") is not None:
            dim["range"] = d["range"]
        dims.append(dim)
    objectives = info.get("objectives")
    if objectives is None:  # info from before the axes carried their ticks
        memory = [None if m is None else m / memory_scale for m in info["peak_memory_bytes"]]
        objectives = [
            {"name": f"peak memory ({memory_unit})", "values": memory},
            {"name": "samples/s", "values": info["samples_per_s"]},
        ]
    dense = len(info["samples_per_s"]) > DENSE
    for o in objectives:
        # thousands of lines: 4 significant digits are all an axis can show (the exact figures are in the tables)
        dim = {"label": plotly_text(o["name"]), "values": [_round(v) for v in o["values"]] if dense else o["values"]}
        dim.update({k: o[k] for k in ("tickvals", "ticktext", "range") if o.get(k) is not None})
        dims.append(dim)
    fig = go.Figure(
        go.Parcoords(
            line={
                "color": [_round(v) for v in info["samples_per_s"]] if dense else info["samples_per_s"],
                "colorscale": "Viridis",
                "showscale": True,
                "colorbar": {"title": {"text": "samples/s"}},
            },
            dimensions=dims,
            labelangle=-20,
        )
    )
    layout(fig, 420, margin={"l": 100, "r": 110, "t": 80, "b": 30})  # room for the first axis's labels
    return fig


def ablation_figure(info: Mapping[str, Any]) -> go.Figure:
    """A waterfall from the defaults (1.00x) to the winner, one bar a knob added: each bar rises (or falls) from
    the speed-up before it to the speed-up after it; its text is what that knob bought, with its interval."""
    x, y, measure, text, hover = ["the defaults"], [1.0], ["absolute"], ["1.00x"], ["PyTorch's defaults: 1.00x"]
    before = 1.0
    for s in info["steps"]:
        name = plotly_text(clip(s["label"], 40)) + ("" if s["kept"] else "<br>(left out)")
        x.append(name)
        y.append(s["speedup"] - before)
        measure.append("relative")
        text.append(f"×{plotly_text(s['bought_text'])}")
        where = "in one process" if s["within_process"] else "between processes"
        hover.append(f"<b>+ {plotly_text(s['label'])}</b><br>bought {plotly_text(s['bought_text'])} ({where})"
                     f"<br>{plotly_text(s['speedup_text'])} the defaults"
                     + ("" if s["kept"] else f"<br>left out of the recommendation: {s['why_left']}"))
        before = s["speedup"]
    fig = go.Figure(go.Waterfall(
        x=x, y=y, measure=measure, text=text, textposition="outside", hovertext=hover, hoverinfo="text",
        increasing={"marker": {"color": RECOMMENDED_COLOR}}, decreasing={"marker": {"color": FRONT_COLOR}},
        totals={"marker": {"color": TRIAL_COLOR}}, connector={"line": {"color": "#adb5bd", "dash": "dot"}},
    ))
    top = max([1.0, *(s["speedup"] for s in info["steps"])])
    return layout(fig, 380, showlegend=False, yaxis={"title": "speed-up over the defaults", "range": [0, top * 1.25]},
                   xaxis={"type": "category"})


def profile_figure(info: Mapping[str, Any]) -> go.Figure:
    """Per front trial: stacked share of step time by op, and the share spent waiting for data."""
    trials = info["trials"]
    labels = [f"#{t['number']}" for t in trials]
    fig = make_subplots(
        rows=1,
        cols=2,
        shared_yaxes=True,
        column_widths=[0.78, 0.22],
        horizontal_spacing=0.06,  # room between the ops' "100%" and the data wait's "0%"
        subplot_titles=("share of step time by op", "waiting for data"),
    )
    for i, op in enumerate(list(info["ops"]) + ["other ops"]):
        shares = [t["ops"].get(op, 0.0) if op != "other ops" else t["other_share"] for t in trials]
        fig.add_trace(
            go.Bar(
                y=labels,
                x=shares,
                orientation="h",
                name=plotly_text(op),
                marker={"color": PALETTE[i % len(PALETTE)] if op != "other ops" else "#ced4da"},
                hovertext=[
                    f"{plotly_text(op)}: {format_percent(s)} of the step<br>{wrap_changes(t['changes'])}"
                    for s, t in zip(shares, trials)
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
            hovertext=[f"#{t['number']} waits for data {format_percent(t['data_wait_share'])} of the step"
                       for t in trials],
            hoverinfo="text",
        ),
        row=1,
        col=2,
    )
    layout(
        fig,
        max(260, 90 + 34 * len(trials)),
        barmode="stack",
        legend={"orientation": "h", "y": -0.2 - 6.0 / max(len(trials) * 34, 120)},
    )
    for col, key in ((1, "ops_axis"), (2, "data_wait_axis")):
        axis = info.get(key)
        if axis:
            ticks = {"tickmode": "array", "tickvals": axis["tickvals"], "ticktext": axis["ticktext"]}
            fig.update_xaxes(range=axis["range"], row=1, col=col, **ticks)
        else:
            fig.update_xaxes(tickformat=".0%", rangemode="tozero", row=1, col=col)
    fig.update_yaxes(autorange="reversed", type="category")
    return fig


