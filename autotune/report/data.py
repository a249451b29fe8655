"""The dashboard's info functions: a study reduced to plain, JSON-able data, one function per figure.

``header_info``, ``pareto_info``, ``front_table_info``, ``knob_effects_info``,
``importance_info``, ``parallel_info``, ``history_info``, ``profile_info`` and
``failures_info`` take a study or a :class:`~autotune.report.source.Snapshot`; what
they return is what the tests check and what the figures draw.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from typing import Any, Iterable, Mapping

import optuna

from autotune import ceiling, knobs
from autotune.evidence import Evidence
from autotune.report.source import (
    BASELINE,
    OK,
    RECIPE,
    Snapshot,
    _is_range,
    _knob_value,
    _memory_unit,
    _num,
    _plain,
    _value_order,
    config_text,
    format_value,
    searched_knobs,
)

MAX_OPS = 8  # ops named in the profile figure; the rest are "other ops"
MIN_TRIALS_FOR_IMPORTANCE = 5


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
        "load": _plain(ev.load.to_dict()),
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


