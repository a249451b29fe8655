"""The dashboard: one self-contained HTML page that shows what a study found.

The page reads a study stored as docs/storage.md describes and opens from disk
with no network: plotly.js is embedded once and each figure is drawn from JSON
held in the page. Every figure has two halves: an *info* function that reduces
the study to plain, JSON-able data (``pareto_info``, ``history_info``, ...; what
the tests check) and a *figure* function that draws that data with plotly. The
page (:func:`render_html`) puts them together with the header, the front as a
sortable table and the failures table.

Every string that comes from a user or an error (study name, knob values, spec
strings, exception messages) is HTML-escaped where it lands in HTML or in plotly
text (which plotly renders as a small subset of HTML), and the JSON embedded in
the page escapes ``<``, ``>`` and ``&`` so nothing in it can close its script tag.

Public API: :func:`write_dashboard`, :func:`watch`, :func:`default_path`,
:func:`render_html`, the ``*_info`` functions and :func:`hypervolume_2d`.
"""

from __future__ import annotations

import html
import json
import logging
import math
import os
import re
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import optuna
import plotly.graph_objects as go
import plotly.io
import plotly.offline
from optuna.trial import FrozenTrial, TrialState
from plotly.subplots import make_subplots

from autotune import ceiling, knobs
from autotune.errors import AutotuneError
from autotune.evidence import Evidence
from autotune.units import format_bytes, format_duration, format_rate

log = logging.getLogger(__name__)

OK = "ok"
BASELINE = "baseline"
RECIPE = "recipe"
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
MAX_OPS = 8  # ops named in the profile figure; the rest are "other ops"
MIN_TRIALS_FOR_IMPORTANCE = 5
FONT = "system-ui, -apple-system, Segoe UI, Roboto, sans-serif"


# ---------------------------------------------------------------- the study, read once


@dataclass
class Snapshot:
    """A study read once: its attributes, one plain row per trial, and the front.

    Every ``*_info`` function takes a study or a snapshot; the page builds one
    snapshot and hands it to all of them.
    """

    name: str
    attrs: dict[str, Any]
    rows: list[dict[str, Any]]
    front: list[int]  # numbers of the front trials, by samples/s, fastest first
    trials: list[FrozenTrial] = field(repr=False, default_factory=list)
    defaults: dict[str, Any] = field(default_factory=dict)
    evidence: Evidence | None = field(repr=False, default=None)

    @classmethod
    def of(cls, study: optuna.Study | Snapshot) -> Snapshot:
        return study if isinstance(study, Snapshot) else snapshot(study)

    def by_number(self) -> dict[int, dict[str, Any]]:
        return {r["number"]: r for r in self.rows}

    def measured_ok(self) -> list[dict[str, Any]]:
        """Trials that measured a configuration successfully (no cache answers)."""
        return [
            r for r in self.rows if r["outcome"] == OK and r["duplicate_of"] is None and r["samples_per_s"] is not None
        ]

    def baseline(self) -> dict[str, Any] | None:
        for r in self.measured_ok():
            if r["role"] == BASELINE:
                return r
        return None

    def best(self) -> dict[str, Any] | None:
        """The verdict's recommendation (the fastest-looking one when nothing beats the defaults beyond the noise)."""
        verdict = self.evidence.verdict() if self.evidence else None
        number = (verdict.winner if verdict.state == "gain" else verdict.leader) if verdict else None
        return self.by_number().get(number) if number is not None else None


def snapshot(study: optuna.Study) -> Snapshot:
    """Read a study once into a :class:`Snapshot`."""
    trials = study.get_trials(deepcopy=False)
    attrs = dict(study.user_attrs)
    defaults = _knob_defaults(attrs)
    rows = [_row(t, defaults) for t in trials]
    ev = Evidence(trials, attrs)
    for r in rows:
        # Every figure of a measured configuration is the evidence's (autotune/evidence.py):
        # the same samples/s and speed-up as status, export and the run's summary.
        if r["number"] in ev.configs and r["duplicate_of"] is None and r["outcome"] == OK:
            s = ev.speedup(r["number"])
            r["first_samples_per_s"] = r["samples_per_s"]
            r["samples_per_s"] = ev.samples_per_s(r["number"])
            r["processes"] = ev.configs[r["number"]].processes
            r["speedup"] = s.estimate if s else None
            r["speedup_text"] = s.text() if s else "-"
    front = ev.front()
    return Snapshot(study.study_name, attrs, rows, front, list(trials), defaults, ev)


def _knob_defaults(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """PyTorch's defaults as knob values, for the machine the study ran on."""
    ctx = None
    context = attrs.get("context")
    if isinstance(context, Mapping):
        try:
            ctx = knobs.Context.from_dict(context)
        except Exception:  # noqa: BLE001 - an older or foreign context: fall back below
            ctx = None
    if ctx is None:
        fingerprint = attrs.get("fingerprint") if isinstance(attrs.get("fingerprint"), Mapping) else {}
        cpus = _num(fingerprint.get("cpu_count"))
        ctx = knobs.Context(cpu_count=int(cpus)) if cpus else None
    return knobs.defaults(ctx)


def _row(t: FrozenTrial, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """One trial as plain data; tolerant of missing or malformed attributes."""
    ua = t.user_attrs
    result = ua.get("result") if isinstance(ua.get("result"), Mapping) else {}
    config = ua.get("config") if isinstance(ua.get("config"), Mapping) else dict(t.params)
    error = ua.get("error") if isinstance(ua.get("error"), Mapping) else {}
    outcome = str(ua.get("outcome") or _outcome_from_state(t))
    values = list(t.values) if t.values is not None else []
    ok = outcome == OK
    speed = _num(result.get("samples_per_s"))
    peak = _num(result.get("peak_memory_bytes"))
    if ok and speed is None and values:
        speed = _num(values[0])
    if ok and peak is None and len(values) > 1:
        peak = _num(values[1])
    profile = result.get("profile") if isinstance(result.get("profile"), Mapping) else {}
    duplicate_of = ua.get("duplicate_of")
    return {
        "number": t.number,
        "state": t.state.name,
        "outcome": outcome,
        "role": str(ua.get("role") or "search"),
        "config": {str(k): _plain(v) for k, v in config.items()},
        "changes": _changes(config, defaults),
        "duplicate_of": int(duplicate_of) if isinstance(duplicate_of, (int, float)) else None,
        "feasible": all((_num(c) or 0.0) <= 0.0 for c in t.constraints.values()),
        "samples_per_s": speed,
        "samples_per_s_cv": _num(result.get("samples_per_s_cv")),
        "peak_memory_bytes": peak,
        "mfu": _num(result.get("mfu")),
        "time_to_first_step_s": _num(result.get("time_to_first_step_s")),
        "duration_s": _num(ua.get("duration_s")),
        "error_type": str(error.get("type") or ""),
        "error_message": str(error.get("message") or ""),
        "profile": _plain(profile),
    }


def _outcome_from_state(t: FrozenTrial) -> str:
    if t.state == TrialState.COMPLETE:
        return OK if t.values else "unknown"
    return {TrialState.FAIL: "error", TrialState.RUNNING: "running", TrialState.WAITING: "waiting"}.get(
        t.state, t.state.name.lower()
    )


def _num(x: Any) -> float | None:
    """A finite float, or None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _plain(x: Any) -> Any:
    """JSON-able copy of stored data (it already is, unless someone stored odd floats)."""
    if isinstance(x, Mapping):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    return str(x)


def format_value(name: str, value: Any) -> str:
    """A knob value as text (``on``/``off`` for switches); unknown knobs print as they are."""
    knob = knobs.KNOBS.get(name)
    try:
        return knob.format(value) if knob else str(value)
    except Exception:  # noqa: BLE001
        return str(value)


def _changes(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, str]:
    """Knob -> value text, for the knobs whose value differs from PyTorch's default."""
    return {str(k): format_value(str(k), v) for k, v in config.items() if k not in defaults or defaults[k] != v}


def config_text(changes: Mapping[str, str]) -> str:
    """``k=v k=v`` of the knobs that differ from the defaults, or ``defaults``."""
    return " ".join(f"{k}={v}" for k, v in changes.items()) or "defaults"


def _t(text: Any) -> str:
    """Text for plotly labels and hovers (plotly renders a subset of HTML, so escape)."""
    return html.escape(str(text), quote=False)


def _e(text: Any) -> str:
    """Text for the HTML page."""
    return html.escape(str(text), quote=True)


def script_json(data: Any) -> str:
    """JSON that is safe inside a ``<script>`` element: no ``<``, ``>`` or ``&`` survive."""
    text = data if isinstance(data, str) else json.dumps(data, allow_nan=False, default=str)
    for raw, safe in (
        ("&", "\\u0026"),
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, safe)
    return text


def _memory_unit(max_bytes: float) -> tuple[str, float]:
    for unit, size in (("GiB", 1024.0**3), ("MiB", 1024.0**2), ("KiB", 1024.0)):
        if max_bytes >= size:
            return unit, size
    return "B", 1.0


def _pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def _speedup_text(x: float | None) -> str:
    return "-" if x is None else f"×{x:.2f}"


def _wrap_changes(changes: Mapping[str, str], per_line: int = 3) -> str:
    """Changes for a hover, a few per line, escaped."""
    items = [_t(f"{k}={v}") for k, v in changes.items()]
    if not items:
        return "defaults"
    return "<br>".join(" ".join(items[i : i + per_line]) for i in range(0, len(items), per_line))


def searched_knobs(study: optuna.Study | Snapshot) -> list[str]:
    """The knobs the study searched: ``space.search``, else the sampled params, else the config values that vary."""
    snap = Snapshot.of(study)
    space = snap.attrs.get("space")
    search = space.get("search") if isinstance(space, Mapping) else None
    if isinstance(search, Mapping) and search:
        names = [str(n) for n in search]
    else:
        names = sorted({p for t in snap.trials for p in t.params})
        if not names:
            seen: dict[str, set[str]] = {}
            for r in snap.measured_ok():
                for k, v in r["config"].items():
                    seen.setdefault(k, set()).add(json.dumps(v, sort_keys=True))
            names = [k for k, vals in seen.items() if len(vals) > 1]
    order = {n: i for i, n in enumerate(knobs.NAMES)}
    return sorted(names, key=lambda n: (order.get(n, len(order)), n))


def _value_order(snap: Snapshot, name: str, observed: Iterable[Any]) -> list[Any]:
    """A knob's values in a sensible order: the space's choices, the registry's, else sorted."""
    space = snap.attrs.get("space")
    spec = (
        space.get("search", {}).get(name)
        if isinstance(space, Mapping) and isinstance(space.get("search"), Mapping)
        else None
    )
    choices: list[Any] = []
    if isinstance(spec, Mapping) and isinstance(spec.get("choices"), list):
        choices = list(spec["choices"])
    elif name in knobs.KNOBS and knobs.KNOBS[name].choices:
        choices = list(knobs.KNOBS[name].choices or ())
    extra = []
    for v in observed:
        if v not in choices and v not in extra:
            extra.append(v)
    try:
        extra.sort()
    except TypeError:
        extra.sort(key=str)
    return choices + extra


def _is_range(snap: Snapshot, name: str) -> bool:
    """True when the knob was searched over an integer range (else over a list of choices)."""
    space = snap.attrs.get("space")
    search = space.get("search") if isinstance(space, Mapping) else None
    spec = search.get(name) if isinstance(search, Mapping) else None
    if isinstance(spec, Mapping):
        return "choices" not in spec
    return name in knobs.KNOBS and knobs.KNOBS[name].is_range


def _knob_value(snap: Snapshot, row: Mapping[str, Any], name: str) -> Any:
    if name in row["config"]:
        return row["config"][name]
    return snap.defaults.get(name)


# ---------------------------------------------------------------- info functions


def header_info(study: optuna.Study | Snapshot) -> dict[str, Any]:
    """Study name, workload, machine, trials by outcome, time spent, baseline and best speed-up."""
    snap = Snapshot.of(study)
    attrs = snap.attrs
    workload = attrs.get("workload") if isinstance(attrs.get("workload"), Mapping) else {}
    fingerprint = attrs.get("fingerprint") if isinstance(attrs.get("fingerprint"), Mapping) else {}
    space = attrs.get("space") if isinstance(attrs.get("space"), Mapping) else {}
    outcomes = Counter(r["outcome"] for r in snap.rows if r["duplicate_of"] is None)
    baseline = snap.baseline()
    best = snap.best()
    ev = snap.evidence or Evidence([], {})
    verdict = ev.verdict()

    def figures(r: Mapping[str, Any] | None) -> dict[str, Any] | None:
        if r is None:
            return None
        return {
            "number": r["number"],
            "role": r["role"],
            "samples_per_s": r["samples_per_s"],
            "processes": r.get("processes"),
            "peak_memory_bytes": r["peak_memory_bytes"],
            "mfu": r["mfu"],
            "time_to_first_step_s": r["time_to_first_step_s"],
            "config_text": config_text(r["changes"]),
        }

    return {
        "name": snap.name,
        "workload": _plain(
            {k: workload.get(k) for k in ("model", "data", "model_args", "input_shape", "num_classes", "task")}
        ),
        "fingerprint": _plain(
            {
                k: fingerprint.get(k)
                for k in (
                    "device_type",
                    "device_name",
                    "device_count",
                    "torch",
                    "cuda",
                    "python",
                    "cpu_model",
                    "cpu_count",
                )
            }
        ),
        "device": _plain(attrs.get("device")),
        "space": _plain(space.get("name")),
        "max_memory_bytes": _num(attrs.get("max_memory_bytes")),
        "global_batch": _plain(attrs.get("global_batch")),
        "created_at": _plain(attrs.get("created_at")),
        "autotune_version": _plain(attrs.get("autotune_version")),
        "n_trials": len(snap.rows),
        "outcomes": dict(sorted(outcomes.items(), key=lambda kv: (kv[0] != OK, -kv[1], kv[0]))),
        "duplicates": sum(1 for r in snap.rows if r["duplicate_of"] is not None),
        "total_time_s": ev.time_spent()["wall_s"] or sum(r["duration_s"] or 0.0 for r in snap.rows),
        "trial_time_s": sum(r["duration_s"] or 0.0 for r in snap.rows),
        "baseline": figures(baseline),
        "best": figures(best),
        "best_speedup": verdict.speedup.estimate if verdict.speedup else None,
        "best_speedup_text": verdict.speedup.text() if verdict.speedup else "-",
        "verdict": _plain(verdict.to_dict()),
        "noise": _plain(ev.noise.to_dict()),
        "noise_text": ev.noise.text(),
        "batch_ceiling": _plain(ceiling.describe(attrs)),
        "front_size": len(snap.front),
    }


def pareto_info(study: optuna.Study | Snapshot) -> dict[str, Any]:
    """Every measured trial in (peak memory, samples/s), the front, failures by outcome, labels and the budget."""
    snap = Snapshot.of(study)
    front = set(snap.front)
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
    budget = _num(snap.attrs.get("max_memory_bytes"))
    top = max(memories + ([budget] if budget else []), default=1024.0**3)
    unit, scale = _memory_unit(top)
    by_number = {p["number"]: p for p in points}
    labels = [
        {
            "number": p["number"],
            "role": p["role"],
            "samples_per_s": p["samples_per_s"],
            "peak_memory_bytes": p["peak_memory_bytes"],
        }
        for p in points
        if p["role"] in (BASELINE, RECIPE) and p["peak_memory_bytes"] is not None
    ]
    return {
        "memory_unit": unit,
        "memory_scale": scale,
        "points": points,
        "front": sorted(front & set(by_number), key=lambda n: by_number[n]["peak_memory_bytes"] or 0.0),
        "failed": failed,
        "edge_memory_bytes": top * 1.05,  # where failures of unknown memory are drawn
        "labels": labels,
        "max_memory_bytes": budget,
    }


def front_table_info(study: optuna.Study | Snapshot) -> dict[str, Any]:
    """The front as table rows, fastest first, with what each changes from the defaults."""
    snap = Snapshot.of(study)
    baseline = snap.baseline()
    rows_by_number = snap.by_number()
    rows = []
    for n in snap.front:
        r = rows_by_number[n]
        profile = r["profile"] if isinstance(r["profile"], Mapping) else {}
        rows.append(
            {
                "number": n,
                "role": r["role"],
                "samples_per_s": r["samples_per_s"],
                "samples_per_s_cv": r["samples_per_s_cv"],
                "peak_memory_bytes": r["peak_memory_bytes"],
                "processes": r.get("processes", 1),
                "speedup": r.get("speedup"),
                "speedup_text": r.get("speedup_text", "-"),
                "mfu": r["mfu"],
                "data_wait_share": _num(profile.get("data_wait_share")),
                "time_to_first_step_s": r["time_to_first_step_s"],
                "changes": r["changes"],
            }
        )
    return {
        "rows": rows,
        "has_mfu": any(r["mfu"] is not None for r in rows),
        "baseline": baseline["number"] if baseline else None,
    }


def knob_effects_info(study: optuna.Study | Snapshot) -> dict[str, Any]:
    """For each searched knob: samples/s and peak memory of the ok trials, by value."""
    snap = Snapshot.of(study)
    rows = snap.measured_ok()
    out = []
    for name in searched_knobs(snap):
        groups: dict[str, dict[str, list[Any]]] = {}
        raw = [_knob_value(snap, r, name) for r in rows]
        for value in _value_order(snap, name, raw):
            groups[format_value(name, value)] = {"numbers": [], "samples_per_s": [], "peak_memory_bytes": []}
        for r, value in zip(rows, raw):
            g = groups.setdefault(
                format_value(name, value), {"numbers": [], "samples_per_s": [], "peak_memory_bytes": []}
            )
            g["numbers"].append(r["number"])
            g["samples_per_s"].append(r["samples_per_s"])
            g["peak_memory_bytes"].append(r["peak_memory_bytes"])
        values = [{"value": v, **g} for v, g in groups.items() if g["numbers"]]
        knob = knobs.KNOBS.get(name)
        out.append({"name": name, "help": knob.help if knob else "", "values": values})
    return {"knobs": out, "n_trials": len(rows)}


def importance_info(study: optuna.Study | Snapshot) -> dict[str, Any]:
    """Optuna's parameter importances for samples/s and for peak memory, over the ok trials.

    Returns ``{"samples_per_s": {knob: share}, "peak_memory_bytes": {...}, "note": str | None}``;
    the note says why there are none (too few trials, a single value, an Optuna error).
    """
    snap = Snapshot.of(study)
    ok = {r["number"] for r in snap.measured_ok()}
    trials = [t for t in snap.trials if t.number in ok and t.params and t.values is not None and len(t.values) >= 2]
    out: dict[str, Any] = {"samples_per_s": {}, "peak_memory_bytes": {}, "n_trials": len(trials), "note": None}
    if len(trials) < MIN_TRIALS_FOR_IMPORTANCE:
        out["note"] = (
            f"Knob importance needs at least {MIN_TRIALS_FOR_IMPORTANCE} ok trials with sampled knobs; there are {len(trials)}."
        )
        return out
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sub = optuna.create_study(directions=["maximize", "minimize"])
            sub.add_trials(trials)
            for index, key in enumerate(("samples_per_s", "peak_memory_bytes")):
                scores = optuna.importance.get_param_importances(sub, target=lambda t, i=index: t.values[i])
                out[key] = {str(k): float(v) for k, v in scores.items() if math.isfinite(v)}
    except Exception as exc:  # noqa: BLE001 - one value per knob, degenerate data, Optuna changes
        out.update(samples_per_s={}, peak_memory_bytes={}, note=f"Knob importance could not be computed: {exc}")
    return out


def parallel_info(study: optuna.Study | Snapshot) -> dict[str, Any]:
    """Parallel coordinates of the searched knobs against samples/s and memory, one line per ok trial."""
    snap = Snapshot.of(study)
    rows = snap.measured_ok()
    dims = []
    for name in searched_knobs(snap):
        raw = [_knob_value(snap, r, name) for r in rows]
        if _is_range(snap, name) and all(_num(v) is not None for v in raw):
            dims.append({"name": name, "values": [float(v) for v in raw], "ticktext": None, "tickvals": None})
        else:
            order = _value_order(snap, name, raw)
            texts = [format_value(name, v) for v in order]
            dims.append(
                {
                    "name": name,
                    "values": [order.index(v) for v in raw],
                    "ticktext": texts,
                    "tickvals": list(range(len(order))),
                }
            )
    return {
        "dimensions": dims,
        "numbers": [r["number"] for r in rows],
        "samples_per_s": [r["samples_per_s"] for r in rows],
        "peak_memory_bytes": [r["peak_memory_bytes"] for r in rows],
    }


def hypervolume_2d(points: Iterable[tuple[float, float]], ref_memory: float) -> float:
    """Area dominated by (samples/s, memory) points against the reference (0 samples/s, ``ref_memory``).

    Samples/s is maximised and memory minimised: the area is that of the union of
    the rectangles [0, speed] x [memory, ref_memory]. A sweep by memory does it:
    each point that is faster than every point using less memory adds a strip.
    """
    usable = sorted((m, s) for s, m in points if s > 0 and m < ref_memory)
    area, best = 0.0, 0.0
    for memory, speed in usable:
        if speed > best:
            area += (ref_memory - memory) * (speed - best)
            best = speed
    return area


def history_info(study: optuna.Study | Snapshot) -> dict[str, Any]:
    """Per finished trial, in number order: best speed-up so far, hypervolume so far, and its duration and outcome."""
    snap = Snapshot.of(study)
    finished = sorted((r for r in snap.rows if r["state"] in ("COMPLETE", "FAIL")), key=lambda r: r["number"])
    baseline = snap.baseline()
    base = baseline["samples_per_s"] if baseline else None
    ok_all = [r for r in snap.measured_ok() if r["peak_memory_bytes"] is not None]
    ref = 1.1 * max((r["peak_memory_bytes"] for r in ok_all), default=0.0)
    top_speed = max((r["samples_per_s"] for r in ok_all if r["feasible"]), default=0.0)
    box = ref * top_speed
    numbers, best_so_far, hv, share = [], [], [], []
    points: list[tuple[float, float]] = []
    best: float | None = None
    for r in finished:
        if r["outcome"] == OK and r["duplicate_of"] is None and r["feasible"] and r["samples_per_s"] is not None:
            best = max(best or 0.0, r.get("first_samples_per_s") or r["samples_per_s"])  # the search as it went
            if r["peak_memory_bytes"] is not None:
                points.append((r["samples_per_s"], r["peak_memory_bytes"]))
        volume = hypervolume_2d(points, ref) if ref else 0.0
        numbers.append(r["number"])
        best_so_far.append(None if best is None else (best / base if base else best))
        hv.append(volume)
        share.append(volume / box if box else 0.0)
    return {
        "numbers": numbers,
        "metric": "speedup" if base else "samples_per_s",
        "best_so_far": best_so_far,
        "hypervolume": hv,
        "hypervolume_share": share,
        "reference": {"samples_per_s": 0.0, "peak_memory_bytes": ref},
        "durations": [
            {
                "number": r["number"],
                "outcome": r["outcome"],
                "duration_s": r["duration_s"] or 0.0,
                "duplicate_of": r["duplicate_of"],
            }
            for r in finished
        ],
    }


def profile_info(study: optuna.Study | Snapshot) -> dict[str, Any]:
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
            if isinstance(op, Mapping) and _num(op.get("share")) is not None:
                name = str(op.get("name", "?"))
                ops[name] = ops.get(name, 0.0) + float(op["share"])
        wait = _num(profile.get("data_wait_share"))
        if not ops and wait is None:
            continue
        totals.update(ops)
        per_trial.append({"number": n, "changes": r["changes"], "ops": ops, "data_wait_share": wait})
    named = [name for name, _ in totals.most_common(MAX_OPS)]
    for t in per_trial:
        shown = {name: t["ops"].get(name, 0.0) for name in named}
        t["other_share"] = max(0.0, 1.0 - sum(shown.values())) if t["ops"] else 0.0
        t["ops"] = shown
    return {"ops": named, "trials": per_trial}


def failures_info(study: optuna.Study | Snapshot) -> dict[str, Any]:
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


# ---------------------------------------------------------------- the page


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Page:
    """Collects sections and figures; renders the final document."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.figures: list[dict[str, Any]] = []

    def add(self, markup: str) -> None:
        self.parts.append(markup)

    def section(self, anchor: str, title: str, parts: list[str]) -> None:
        """One ``<section>`` with its heading and body parts."""
        self.add(f'<section id="{anchor}"><h2>{title}</h2>' + "".join(parts) + "</section>")

    def figure(self, fig: go.Figure, css: str = "plot") -> str:
        fig_id = f"fig-{len(self.figures) + 1}"
        self.figures.append({"id": fig_id, "json": plotly.io.to_json(fig, validate=False)})
        return f'<div id="{fig_id}" class="{css}"></div>'

    def figures_json(self) -> str:
        body = ",".join(f'{{"id":{json.dumps(f["id"])},"figure":{f["json"]}}}' for f in self.figures)
        return script_json(f"[{body}]")


def _note(text: str) -> str:
    return f'<p class="note">{_e(text)}</p>'


def _header_html(h: Mapping[str, Any]) -> str:
    w, fp = h["workload"], h["fingerprint"]
    model = w.get("model") or "-"
    data = w.get("data") or "synthetic"
    shape = "×".join(map(str, w["input_shape"])) if isinstance(w.get("input_shape"), list) else w.get("input_shape")
    workload_bits = [
        f"task {w['task']}" if w.get("task") else "",
        f"input {shape}" if shape else "",
        f"{w['num_classes']} classes" if w.get("num_classes") else "",
    ]
    args = w.get("model_args")
    if isinstance(args, Mapping) and args:
        workload_bits.append("args " + ", ".join(f"{k}={v}" for k, v in args.items()))
    elif args:
        workload_bits.append(f"args {args}")
    device = fp.get("device_name") or h.get("device") or "-"
    machine_bits = [
        fp["cpu_model"] if fp.get("cpu_model") and fp.get("cpu_model") != device else "",
        f"torch {fp['torch']}" if fp.get("torch") else "",
        f"{fp['cpu_count']} CPUs" if fp.get("cpu_count") else "",
        f"CUDA {fp['cuda']}" if fp.get("cuda") else "",
    ]
    outcomes = ", ".join(f"{n} {o}" for o, n in h["outcomes"].items()) or "none yet"
    if h["duplicates"]:
        outcomes += f"; {h['duplicates']} answered from the cache"
    base, best = h["baseline"], h["best"]

    def figures(r: Mapping[str, Any] | None) -> str:
        if not r:
            return "not measured"
        runs = f" from {r['processes']} processes" if (r.get("processes") or 1) > 1 else ", 1 process"
        mfu = f", MFU {_pct(r['mfu'])}" if r.get("mfu") is not None else ""
        return f"{format_rate(r['samples_per_s'])} samples/s{runs}, {format_bytes(r['peak_memory_bytes'])}{mfu} (#{r['number']})"

    speedup = h.get("best_speedup_text") or "-"
    budget = f", memory budget {format_bytes(h['max_memory_bytes'])}" if h["max_memory_bytes"] else ""
    if h.get("batch_ceiling"):
        budget += f"; batch ceiling {h['batch_ceiling']['text']}"
    cards = [
        ("workload", model, f"data {data}; " + ", ".join(b for b in workload_bits if b)),
        ("machine", device, ", ".join(b for b in machine_bits if b)),
        ("trials", str(h["n_trials"]), outcomes),
        ("time spent", format_duration(h["total_time_s"]), f"search space {h['space'] or '-'}{budget}; {h['noise_text']}"),
        ("baseline", figures(base), "PyTorch defaults"),
        ("speed-up (90% interval)", speedup, figures(best) + (f": {best['config_text']}" if best else "")),
    ]
    card_html = "".join(
        f'<div class="card"><div class="label">{_e(label)}</div><div class="value">{_e(value)}</div><div class="sub">{_e(sub)}</div></div>'
        for label, value, sub in cards
    )
    meta = " · ".join(
        _e(x)
        for x in (
            f"autotune {h['autotune_version']}" if h["autotune_version"] else "",
            f"created {h['created_at']}" if h["created_at"] else "",
            f"front: {h['front_size']} trials",
        )
        if x
    )
    verdict = f'<p class="verdict" id="verdict">{_e(h["verdict"]["text"])}</p>'
    return f'<header><h1>autotune study <span class="name">{_e(h["name"])}</span></h1><p class="meta">{meta}</p><div class="cards">{card_html}</div>{verdict}</header>'


def _front_table_html(info: Mapping[str, Any]) -> str:
    if not info["rows"]:
        return _note("No ok trial within the constraints yet, so there is no front.")
    cols = [
        ("#", "num"),
        ("role", "text"),
        ("samples/s", "num"),
        ("processes", "num"),
        ("peak memory", "num"),
        ("speed-up (90%)", "num"),
    ]
    if info["has_mfu"]:
        cols.append(("MFU", "num"))
    cols += [("data wait", "num"), ("first step", "num"), ("changes from PyTorch defaults", "text")]
    head = "".join(f'<th data-type="{kind}" title="sort">{_e(name)}</th>' for name, kind in cols)
    body = []
    for r in info["rows"]:
        cells: list[tuple[Any, str]] = [
            (r["number"], f"#{r['number']}"),
            (r["role"], r["role"]),
            (r["samples_per_s"], format_rate(r["samples_per_s"])),
            (r["processes"], str(r["processes"])),
            (r["peak_memory_bytes"], format_bytes(r["peak_memory_bytes"])),
            (r["speedup"], r["speedup_text"]),
        ]
        if info["has_mfu"]:
            cells.append((r["mfu"], _pct(r["mfu"])))
        cells += [
            (r["data_wait_share"], _pct(r["data_wait_share"])),
            (r["time_to_first_step_s"], format_duration(r["time_to_first_step_s"])),
            (config_text(r["changes"]), config_text(r["changes"])),
        ]
        tds = "".join(f'<td data-v="{_e("" if v is None else v)}">{_e(text)}</td>' for v, text in cells)
        body.append(f"<tr>{tds}</tr>")
    return (
        f'<table class="sortable" id="front-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    )


def _failures_html(info: Mapping[str, Any]) -> str:
    if not info["rows"]:
        return _note("No trial failed.")
    head = "".join(
        f'<th data-type="{k}" title="sort">{n}</th>'
        for n, k in (("#", "num"), ("outcome", "text"), ("error", "text"), ("configuration", "text"))
    )
    body = []
    for r in info["rows"]:
        message = _clip(r["error_message"], 4000)
        kind = f"<b>{_e(r['error_type'])}</b>: " if r["error_type"] else ""
        cached = (
            f' <span class="dim">(cached from #{r["duplicate_of"]})</span>' if r["duplicate_of"] is not None else ""
        )
        body.append(
            f'<tr><td data-v="{r["number"]}">#{r["number"]}</td>'
            f'<td data-v="{_e(r["outcome"])}"><span class="pill" style="background:{OUTCOME_COLORS.get(r["outcome"], "#555")}">{_e(r["outcome"])}</span>{cached}</td>'
            f'<td data-v="{_e(r["error_type"])}" class="error">{kind}{_e(message) or "-"}</td>'
            f'<td data-v="{_e(config_text(r["changes"]))}" class="config">{_e(config_text(r["changes"]))}</td></tr>'
        )
    return f'<table class="sortable" id="failures-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def render_html(study: optuna.Study | Snapshot, refresh_s: float | None = None) -> str:
    """The whole dashboard page as a string (see the module docstring)."""
    snap = Snapshot.of(study)
    page = _Page()
    header = header_info(snap)
    page.add(_header_html(header))
    page.add(
        '<nav><a href="#front">Pareto front</a><a href="#knobs">What each knob does</a><a href="#history">History</a>'
        '<a href="#time">Where time goes</a><a href="#failures">Failures</a></nav>'
    )

    pareto = pareto_info(snap)
    unit, scale = pareto["memory_unit"], pareto["memory_scale"]
    section: list[str] = []
    if pareto["points"] or pareto["failed"]:
        section.append(page.figure(pareto_figure(pareto)))
        section.append(
            '<p class="hint">Hover a point for its knobs. Failed trials sit at 0 samples/s, at their memory when known.</p>'
        )
    else:
        section.append(_note("No finished trial yet."))
    section.append("<h3>The front</h3>")
    section.append(_front_table_html(front_table_info(snap)))
    page.section("front", "Pareto front: samples/s against peak memory", section)

    effects = knob_effects_info(snap)
    section = []
    shown = [k for k in effects["knobs"] if k["values"]]
    if shown:
        section.append('<div class="grid">')
        for k in shown:
            section.append(
                f'<div class="knob">{page.figure(knob_figure(k, unit, scale), "plot small")}<p class="hint">{_e(k["help"])}</p></div>'
            )
        section.append("</div>")
    else:
        section.append(_note("No ok trial yet: nothing to show per knob."))
    importance = importance_info(snap)
    section.append("<h3>Knob importance</h3>")
    section.append(
        page.figure(importance_figure(importance))
        if importance["samples_per_s"]
        else _note(importance["note"] or "No importance.")
    )
    parallel = parallel_info(snap)
    section.append("<h3>Knobs against samples/s</h3>")
    if parallel["numbers"] and parallel["dimensions"]:
        section.append(page.figure(parallel_figure(parallel, unit, scale)))
        section.append('<p class="hint">Drag along an axis to filter the lines.</p>')
    else:
        section.append(_note("No ok trial with searched knobs yet."))
    page.section("knobs", "What each knob does", section)

    history = history_info(snap)
    section = []
    if history["numbers"]:
        section.append(page.figure(history_figure(history)))
        ref = history["reference"]["peak_memory_bytes"]
        section.append(
            f'<p class="hint">Hypervolume reference point: 0 samples/s, {_e(format_bytes(ref))} (1.1 × the largest peak memory of an ok trial).</p>'
        )
        section.append("<h3>Time per trial</h3>")
        section.append(page.figure(duration_figure(history)))
    else:
        section.append(_note("No finished trial yet."))
    page.section("history", "History", section)

    prof = profile_info(snap)
    page.section(
        "time",
        "Where time goes on the front",
        [page.figure(profile_figure(prof)) if prof["trials"] else _note("No profile for the front trials.")],
    )

    failures = failures_info(snap)
    page.section("failures", "Failures", [_failures_html(failures)])

    refresh = f'<meta http-equiv="refresh" content="{max(1, round(refresh_s))}">' if refresh_s else ""
    generated = time.strftime("%Y-%m-%d %H:%M:%S")
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8">{refresh}'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>autotune · {_e(snap.name)}</title><style>{_CSS}</style><script>{_EARLY_JS}</script></head><body>"
        + "".join(page.parts)
        + f"<footer>Generated {_e(generated)} by autotune. Everything on this page is embedded; it needs no network.</footer>"
        + '<pre id="autotune-selftest" hidden></pre>'
        + f'<script type="application/json" id="autotune-figures">{page.figures_json()}</script>'
        + f"<script>{_plotly_js()}</script>"
        + f"<script>{_PAGE_JS}</script></body></html>\n"
    )


DASHBOARDS_DIR = Path("dashboards")


def default_path(study_name: str) -> Path:
    """Where a study's dashboard goes by default: ``dashboards/<study>.html`` (name made file-safe)."""
    return DASHBOARDS_DIR / f"{_file_safe(study_name)}.html"


def _file_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "study"


def write_dashboard(study: optuna.Study, path: str | Path, refresh_s: float | None = None) -> Path:
    """Write the dashboard of ``study`` to ``path`` (parents created, replaced atomically); returns the path.

    A ``path`` that is an existing folder gets ``<study>.html`` inside it. With
    ``refresh_s`` the page reloads itself that often (see :func:`watch`). A path
    that cannot be written raises :class:`~autotune.errors.AutotuneError`.
    """
    target = Path(path)
    if target.is_dir():
        target = target / f"{_file_safe(study.study_name)}.html"
    text = render_html(study, refresh_s=refresh_s)
    tmp: str | None = None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as exc:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        raise AutotuneError(f"cannot write the dashboard to {target}: {exc.strerror or exc}") from None
    except BaseException:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        raise
    return target


def watch(
    load_study: Callable[[], optuna.Study],
    path: str | Path,
    interval_s: float,
    stop: Callable[[], bool] | None = None,
    iterations: int | None = None,
) -> None:
    """Rewrite the dashboard every ``interval_s`` seconds until ``stop()`` is true or ``iterations`` pages are written.

    The study is loaded again each time (``load_study``), so the page follows a
    running study; the page reloads itself at the same interval. An error on the
    first load is raised; a later one (a busy database) is logged and the old page
    kept until the next round.
    """
    if not interval_s > 0:
        raise ValueError(f"interval_s must be positive, got {interval_s}")
    done = 0
    while True:
        try:
            write_dashboard(load_study(), path, refresh_s=interval_s)
        except Exception as exc:
            if done == 0:
                raise
            log.warning("dashboard not updated: %s", exc)
        done += 1
        if iterations is not None and done >= iterations:
            return
        deadline = time.monotonic() + interval_s
        while True:
            if stop is not None and stop():
                return
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(left, 0.25))


_PLOTLY_JS: str | None = None


def _plotly_js() -> str:
    """plotly.js, read once per process; guarded against closing its script tag."""
    global _PLOTLY_JS
    if _PLOTLY_JS is None:
        _PLOTLY_JS = plotly.offline.get_plotlyjs().replace("</script", "<\\/script")
    return _PLOTLY_JS


_CSS = """
:root { --fg:#1d2b36; --dim:#6c7a89; --line:#e3e8ee; --bg:#f7f9fb; --accent:#e76f51; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px 48px; font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: var(--fg); background: var(--bg); font-size: 14px; line-height: 1.45; }
h1 { font-size: 22px; margin: 0 0 4px; font-weight: 600; }
h1 .name { color: var(--accent); word-break: break-all; }
h2 { font-size: 18px; margin: 0 0 12px; font-weight: 600; }
h3 { font-size: 15px; margin: 20px 0 8px; font-weight: 600; }
.meta, .hint, .note, .dim { color: var(--dim); }
.hint { font-size: 12px; margin: 4px 0 0; }
.note { font-style: italic; }
.verdict { margin: 14px 0 0; padding: 10px 14px; border-left: 4px solid #2a9d8f; background: #f1f8f7; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(220px, 1fr)); gap: 12px; margin-top: 12px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; }
.card .label { font-size: 11px; text-transform: uppercase; letter-spacing: .05em; color: var(--dim); }
.card .value { font-size: 17px; font-weight: 600; margin: 2px 0; word-break: break-word; }
.card .sub { font-size: 12px; color: var(--dim); word-break: break-word; }
nav { position: sticky; top: 0; z-index: 10; background: var(--bg); padding: 10px 0; margin: 8px 0; border-bottom: 1px solid var(--line); }
nav a { margin-right: 18px; color: var(--fg); text-decoration: none; font-weight: 500; }
nav a:hover { color: var(--accent); }
section { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 16px 20px; margin: 16px 0; }
.plot { width: 100%; min-height: 260px; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 12px; }
.knob { border: 1px solid var(--line); border-radius: 6px; padding: 4px 8px 8px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 5px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: #f0f3f6; cursor: pointer; user-select: none; white-space: nowrap; position: sticky; top: 44px; }
th.asc::after { content: " \\25B2"; } th.desc::after { content: " \\25BC"; }
tbody tr:nth-child(even) { background: #fafbfc; }
td.error { white-space: pre-wrap; word-break: break-word; font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; max-width: 640px; }
td.config { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; }
.pill { color: #fff; border-radius: 10px; padding: 1px 8px; font-size: 12px; }
footer { color: var(--dim); font-size: 12px; margin-top: 24px; }
"""

# Runs first: records JavaScript errors (and, with #selftest, console errors) for the self-test.
_EARLY_JS = """
window.__autotune = {errors: []};
window.addEventListener('error', function (e) {
  var t = e.target;
  var what = (t && t !== window && (t.src || t.href)) ? 'failed to load ' + (t.src || t.href) : String(e.message || e);
  window.__autotune.errors.push(what);
}, true);
window.addEventListener('unhandledrejection', function (e) { window.__autotune.errors.push('unhandled rejection: ' + String(e.reason)); });
if (location.hash === '#selftest') {
  var ce = console.error;
  console.error = function () { window.__autotune.errors.push(Array.prototype.map.call(arguments, String).join(' ')); return ce.apply(console, arguments); };
}
"""

# Draws the figures, makes tables sortable, and with #selftest writes a JSON summary into #autotune-selftest.
_PAGE_JS = """
(function () {
  function cellValue(row, i, numeric) {
    var v = row.children[i].getAttribute('data-v');
    if (!numeric) return (v || '').toLowerCase();
    var x = parseFloat(v);
    return isNaN(x) ? -Infinity : x;
  }
  function sortBy(th) {
    var table = th.closest('table'), body = table.tBodies[0], i = Array.prototype.indexOf.call(th.parentNode.children, th);
    var numeric = th.getAttribute('data-type') === 'num', asc = !th.classList.contains('asc');
    Array.prototype.forEach.call(th.parentNode.children, function (h) { h.classList.remove('asc', 'desc'); });
    th.classList.add(asc ? 'asc' : 'desc');
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, i, numeric), y = cellValue(b, i, numeric);
      return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1);
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  document.querySelectorAll('table.sortable th').forEach(function (th) { th.addEventListener('click', function () { sortBy(th); }); });

  var figures = JSON.parse(document.getElementById('autotune-figures').textContent);
  var config = {displaylogo: false, responsive: true};
  var drawn = figures.map(function (f) {
    try { return Promise.resolve(Plotly.newPlot(f.id, f.figure.data, f.figure.layout, config)); }
    catch (err) { window.__autotune.errors.push('figure ' + f.id + ': ' + err); return Promise.resolve(); }
  });
  if (location.hash !== '#selftest') return;
  Promise.all(drawn).catch(function (err) { window.__autotune.errors.push('draw: ' + err); }).then(function () {
    return new Promise(function (resolve) { setTimeout(resolve, 200); });
  }).then(function () {
    function count(el, sel) { return el.querySelectorAll(sel).length; }
    var plots = Array.prototype.map.call(document.querySelectorAll('.js-plotly-plot'), function (el) {
      var c = {id: el.id, points: count(el, '.scatterlayer .point'), bars: count(el, '.barlayer .point'),
               boxes: count(el, '.boxlayer .point'), lines: count(el, '.scatterlayer .js-line'),
               parcoords: count(el, '.parcoords .axis'), canvases: count(el, 'canvas')};
      c.marks = c.points + c.bars + c.boxes + c.lines + c.parcoords;
      return c;
    });
    var sorted = null, th = document.querySelector('#front-table th');
    if (th) {
      th.click(); th.click();
      var nums = Array.prototype.map.call(document.querySelectorAll('#front-table tbody tr'), function (r) { return parseFloat(r.children[0].getAttribute('data-v')); });
      sorted = nums.every(function (x, k) { return k === 0 || nums[k - 1] >= x; });
    }
    var canvas = document.createElement('canvas');
    var resources = performance.getEntriesByType('resource').map(function (r) { return r.name; });
    var out = {ready: true, errors: window.__autotune.errors, expected: figures.length, plots: plots, table_sorts: sorted,
               webgl: !!(canvas.getContext('webgl') || canvas.getContext('experimental-webgl')), resources: resources,
               title: document.title, tables: document.querySelectorAll('table').length,
               scripts: document.querySelectorAll('script').length, images: document.querySelectorAll('img').length,
               height: document.body.scrollHeight};
    var pre = document.getElementById('autotune-selftest');
    pre.textContent = JSON.stringify(out);
    pre.hidden = false;
  });
})();
"""
