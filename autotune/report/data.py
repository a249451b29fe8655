"""The dashboard's info functions: a study reduced to plain, JSON-able data, one function per figure.

``header_info``, ``pareto_info``, ``front_table_info``, ``knob_effects_info``,
``importance_info``, ``parallel_info``, ``history_info``, ``profile_info`` and
``failures_info`` take a study or a :class:`~autotune.report.source.Snapshot`; what
they return is what the tests check and what the figures draw.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any, Hashable, Iterable, Mapping, Sequence

import optuna

from autotune import ceiling, knobs
from autotune.evidence import Evidence, blocks, remeasured
from autotune.result import op_name
from autotune.report.source import (
    BASELINE,
    OK,
    RECIPE,
    Snapshot,
    _is_range,
    _knob_value,
    _memory_unit,
    _num,
    _pct,
    _plain,
    _value_order,
    config_text,
    format_value,
    join,
    plural,
    range_here,
    searched_knobs,
)
from autotune.units import format_bytes, format_duration, format_rate

MAX_OPS = 8  # ops named in the profile figure; the rest are "other ops"
MIN_TRIALS_FOR_IMPORTANCE = 5
MAX_GROUPS = 4  # a numeric knob with more values is grouped into this many bins of about equal counts for importance
MAX_SPLITS = 3  # importance is also shown within the most-tried values of the knob that matters most


# ---------------------------------------------------------------- axis ticks


def nice_ticks(
    low: float, high: float, target: int = 5, integer: bool = False, percent: bool = False
) -> dict[str, list[Any]]:
    """Tick values and labels for an axis from ``low`` to ``high``: round steps (1, 2, 2.5, 5 x 10^k), whole numbers
    when ``integer``, and as many decimals as it takes for no two labels to read the same."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return {"tickvals": [], "ticktext": []}
    low, high = min(low, high), max(low, high)
    span = high - low
    if span <= 0:
        vals = [float(low)]
        step = abs(low) / 100 or 1.0
    else:
        raw = span / max(target, 1)
        mag = 10.0 ** math.floor(math.log10(raw))
        mantissas = (1.0, 2.0, 5.0, 10.0) if integer and mag >= 1 else (1.0, 2.0, 2.5, 5.0, 10.0)
        step = next(m * mag for m in mantissas if m * mag >= raw * (1 - 1e-9))
        if integer:
            step = max(1.0, float(round(step)))
        first = math.ceil(low / step - 1e-9)
        vals = []
        k = first
        while k * step <= high + 1e-9 * step:
            vals.append(round(k * step, 12))
            k += 1
    if integer:
        vals = [float(int(round(v))) for v in vals if abs(v - round(v)) < 1e-9]
    scale = 100.0 if percent else 1.0
    decimals = 0 if integer else max(0, -math.floor(math.log10(step * scale) + 1e-9))
    mantissa = step / 10.0 ** math.floor(math.log10(step) + 1e-9) if span > 0 else 1.0
    if not integer and step * scale < 10 and abs(mantissa - 2.5) < 1e-6:
        decimals += 1  # 2.5, 0.25: the half shows

    def label(v: float, d: int) -> str:
        return f"{v * scale:,.{d}f}" + ("%" if percent else "")

    texts = [label(v, decimals) for v in vals]
    while len(set(texts)) < len(texts) and decimals < 12:
        decimals += 1
        texts = [label(v, decimals) for v in vals]
    return {"tickvals": [int(v) if integer else v for v in vals], "ticktext": texts}


def trial_ticks(numbers: Sequence[int]) -> dict[str, list[Any]]:
    """Whole-number ticks for a trial-number axis (never -0.5 or 2.5)."""
    if not numbers:
        return {"tickvals": [], "ticktext": []}
    return nice_ticks(min(numbers), max(numbers), target=min(8, max(1, max(numbers) - min(numbers))), integer=True)


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
    recommended = ev.speedup(best["number"]) if best else None  # the recommendation's own figure, as every view shows it
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

    info: dict[str, Any] = {
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
        "best_speedup": recommended.estimate if recommended else None,
        "best_speedup_text": recommended.text() if recommended else "-",
        "verdict": _plain(verdict.to_dict()),
        "noise": _plain(ev.noise.to_dict()),
        "noise_text": ev.noise.text(),
        "load": _plain(ev.load.to_dict()),
        "batch_ceiling": _plain(ceiling.describe(attrs)),
        "front_size": len(snap.front),
        "remeasurements": _remeasure_totals(remeasurements(snap)),
    }
    info.update(header_texts(info))
    return info


def _figures_text(r: Mapping[str, Any] | None) -> str:
    if not r:
        return "not measured"
    runs = f" from {r['processes']} processes" if (r.get("processes") or 1) > 1 else ", 1 process"
    mfu = f", MFU {_pct(r['mfu'])}" if r.get("mfu") is not None else ""
    rate, memory = format_rate(r["samples_per_s"]), format_bytes(r["peak_memory_bytes"])
    return f"{rate} samples/s{runs}, {memory}{mfu} (#{r['number']})"


def header_texts(h: Mapping[str, Any]) -> dict[str, Any]:
    """The header as text: ``meta`` (version · created · front size) and the ``cards`` (label, value, sub).

    Parts that are unknown are left out with their separator (never ``data synthetic;`` or ``, ,``), and counts
    agree with their nouns (``front: 1 trial``).
    """
    w, fp = h["workload"], h["fingerprint"]
    shape = "×".join(map(str, w["input_shape"])) if isinstance(w.get("input_shape"), list) else w.get("input_shape")
    args = w.get("model_args")
    if isinstance(args, Mapping):
        args_text = "args " + ", ".join(f"{k}={v}" for k, v in args.items()) if args else ""
    else:
        args_text = f"args {args}" if args else ""
    workload = join(
        [
            f"data {w.get('data') or 'synthetic'}",
            join(
                [
                    f"task {w['task']}" if w.get("task") else "",
                    f"input {shape}" if shape else "",
                    f"{w['num_classes']} classes" if w.get("num_classes") else "",
                    args_text,
                ]
            ),
        ],
        "; ",
    )
    device = fp.get("device_name") or h.get("device") or "-"
    machine = join(
        [
            fp["cpu_model"] if fp.get("cpu_model") and fp.get("cpu_model") != device else "",
            f"torch {fp['torch']}" if fp.get("torch") else "",
            plural(int(fp["cpu_count"]), "CPU") if fp.get("cpu_count") else "",
            f"CUDA {fp['cuda']}" if fp.get("cuda") else "",
        ]
    )
    outcomes = join(
        [
            join(f"{n} {o}" for o, n in h["outcomes"].items()) or "none yet",
            f"{h['duplicates']} answered from the cache" if h["duplicates"] else "",
        ],
        "; ",
    )
    again = h.get("remeasurements") or {}
    spent = join(
        [
            f"trials {format_duration(h['trial_time_s'])}" if h.get("trial_time_s") else "",
            (
                f"{plural(again['count'], 're-measurement')} (noise floor, race, what each knob bought) {format_duration(again['time_s'])}"
                + (" (estimated: each as long as its trial)" if again.get("estimated") else "")
            )
            if again.get("count")
            else "",
        ]
    )
    budget = f"memory budget {format_bytes(h['max_memory_bytes'])}" if h.get("max_memory_bytes") else ""
    ceiling_text = f"batch ceiling {h['batch_ceiling']['text']}" if h.get("batch_ceiling") else ""
    time_sub = join(
        [
            spent,
            join([f"search space {h['space'] or '-'}", budget]),
            ceiling_text,
            h.get("noise_text"),
            (h.get("load") or {}).get("text"),
        ],
        "; ",
    )
    best = h["best"]
    cards = [
        {"label": "workload", "value": w.get("model") or "-", "sub": workload},
        {"label": "machine", "value": device, "sub": machine},
        {"label": "trials", "value": str(h["n_trials"]), "sub": outcomes},
        {"label": "time spent", "value": format_duration(h["total_time_s"]), "sub": time_sub},
        {"label": "baseline", "value": _figures_text(h["baseline"]), "sub": "PyTorch defaults"},
        {
            "label": "speed-up (90% interval)",
            "value": h.get("best_speedup_text") or "-",
            "sub": join([_figures_text(best), best["config_text"] if best else ""], ": "),
        },
    ]
    meta = join(
        [
            f"autotune {h['autotune_version']}" if h.get("autotune_version") else "",
            f"created {h['created_at']}" if h.get("created_at") else "",
            f"front: {plural(h['front_size'], 'trial')}",
        ],
        " · ",
    )
    return {"meta": meta, "cards": cards}


def pareto_info(study: optuna.Study | Snapshot) -> dict[str, Any]:
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
    budget = _num(snap.attrs.get("max_memory_bytes"))
    top = max(memories + ([budget] if budget else []), default=1024.0**3)
    unit, scale = _memory_unit(top)
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
        if (p["role"] in (BASELINE, RECIPE) or p["recommended"]) and p["peak_memory_bytes"] is not None
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
    if p["role"] == BASELINE:
        return f"recommended: #{p['number']} (baseline: keep the defaults)"
    return f"recommended: #{p['number']}" + (f" ({p['role']})" if p["role"] == RECIPE else "")


def front_table_info(study: optuna.Study | Snapshot) -> dict[str, Any]:
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
                "data_wait_share": _num(profile.get("data_wait_share")),
                "time_to_first_step_s": r["time_to_first_step_s"],
                "changes": r["changes"],
            }
        )
    return {
        "rows": rows,
        "has_mfu": any(r["mfu"] is not None for r in rows),
        "baseline": baseline["number"] if baseline else None,
        "recommended": chosen["number"] if chosen else None,
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


IMPORTANCE_METHOD = (
    "importance: the share of the spread of log samples/s (log peak memory) across the ok trials that a knob's value "
    "explains on its own, adjusted for how many values it has (epsilon squared; 0: no effect seen). Over all trials a "
    "knob that matters only under one value of another (threads under fp32, say) is diluted, so samples/s is also "
    "shown within each of the most-tried values of the knob that explains most of it."
)


def importance_info(study: optuna.Study | Snapshot) -> dict[str, Any]:
    """How much each searched knob moves samples/s and peak memory, over all ok trials and within the dominant split.

    Returns ``{"samples_per_s": {knob: share}, "peak_memory_bytes": {...}, "splits": [...], "note": str | None}``.
    A share is the fraction of the variance of log samples/s (log peak memory) that the knob's value explains on
    its own, adjusted for its number of values (epsilon squared, in [0, 1]; the shares need not add up to 1, as
    knobs' effects overlap). A numeric knob with many values is grouped into ``MAX_GROUPS`` bins. Over all trials
    an effect that shows only under one value of another knob is diluted (threads decide samples/s in fp32 and
    not at all in bf16), so ``splits`` repeats samples/s within each of the ``MAX_SPLITS`` most-tried values of the
    knob that explains most of it: ``{"knob", "value", "n_trials", "samples_per_s": {knob: share}}``. The note
    says why there are none (too few trials, no knob varied).
    """
    snap = Snapshot.of(study)
    rows = [r for r in snap.measured_ok() if (r["samples_per_s"] or 0.0) > 0]
    out: dict[str, Any] = {
        "samples_per_s": {},
        "peak_memory_bytes": {},
        "splits": [],
        "n_trials": len(rows),
        "method": IMPORTANCE_METHOD,
        "note": None,
    }
    if len(rows) < MIN_TRIALS_FOR_IMPORTANCE:
        out["note"] = (
            f"Knob importance needs at least {MIN_TRIALS_FOR_IMPORTANCE} ok trials with searched knobs; "
            f"there {'is' if len(rows) == 1 else 'are'} {len(rows)}."
        )
        return out
    groups = {name: _groups(snap, rows, name) for name in searched_knobs(snap)}
    speed = [math.log(r["samples_per_s"]) for r in rows]
    everyone = list(range(len(rows)))
    out["samples_per_s"] = _explained_by(groups, speed, everyone)
    memory_rows = [i for i, r in enumerate(rows) if (r["peak_memory_bytes"] or 0.0) > 0]
    memory = [math.log(r["peak_memory_bytes"]) if (r["peak_memory_bytes"] or 0.0) > 0 else 0.0 for r in rows]
    if len(memory_rows) >= MIN_TRIALS_FOR_IMPORTANCE:
        out["peak_memory_bytes"] = _explained_by(groups, memory, memory_rows)
    if not out["samples_per_s"]:
        out["note"] = "No searched knob took two values among the ok trials: no importance to show."
        return out
    dominant = max(out["samples_per_s"], key=lambda k: out["samples_per_s"][k])
    if out["samples_per_s"][dominant] > 0:
        by_value: dict[Hashable, list[int]] = {}
        for i, label in enumerate(groups[dominant]):
            by_value.setdefault(label, []).append(i)
        others = {k: v for k, v in groups.items() if k != dominant}
        for label, members in sorted(by_value.items(), key=lambda kv: -len(kv[1])):
            if len(members) < MIN_TRIALS_FOR_IMPORTANCE or len(out["splits"]) >= MAX_SPLITS:
                continue
            within = _explained_by(others, speed, members)
            if within:
                out["splits"].append(
                    {"knob": dominant, "value": str(label), "n_trials": len(members), "samples_per_s": within}
                )
    return out


def _groups(snap: Snapshot, rows: Sequence[Mapping[str, Any]], name: str) -> list[Hashable]:
    """Each row's value of a knob as a group label; a numeric knob with more than ``MAX_GROUPS`` values is binned."""
    raw = [_knob_value(snap, r, name) for r in rows]
    numeric = [_num(v) for v in raw]
    distinct = sorted({v for v in numeric if v is not None})
    if len(distinct) <= MAX_GROUPS or any(v is None for v in numeric):
        return [format_value(name, v) for v in raw]
    counts = Counter(numeric)
    bins: dict[float, int] = {}
    seen = 0
    for v in distinct:
        bins[v] = min(MAX_GROUPS - 1, seen * MAX_GROUPS // len(rows))
        seen += counts[v]
    spans: dict[int, list[float]] = {}
    for v, b in bins.items():
        spans.setdefault(b, []).append(v)
    names = {b: f"{format_value(name, _whole(vs[0]))}-{format_value(name, _whole(vs[-1]))}" for b, vs in spans.items()}
    return [names[bins[v]] for v in numeric]  # type: ignore[index]


def _whole(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x


def _explained_by(
    groups: Mapping[str, Sequence[Hashable]], values: Sequence[float], members: Sequence[int]
) -> dict[str, float]:
    """Knob -> epsilon squared of ``values`` (at ``members``) grouped by the knob's value, for knobs that vary there."""
    out = {}
    for name, labels in groups.items():
        share = _epsilon_squared([values[i] for i in members], [labels[i] for i in members])
        if share is not None:
            out[name] = share
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _epsilon_squared(values: Sequence[float], labels: Sequence[Hashable]) -> float | None:
    """The share of the variance of ``values`` explained by ``labels``, less what as many random groups would explain
    (epsilon squared, clipped to [0, 1]); None when there are fewer than two groups or nothing varies."""
    n = len(values)
    by: dict[Hashable, list[float]] = {}
    for v, label in zip(values, labels):
        by.setdefault(label, []).append(v)
    k = len(by)
    if k < 2 or n - k < 1:
        return None
    mean = sum(values) / n
    total = sum((v - mean) ** 2 for v in values)
    if total <= 1e-12 * max(1.0, mean * mean) * n:
        return None
    between = sum(len(vs) * (sum(vs) / len(vs) - mean) ** 2 for vs in by.values())
    within_mean_square = (total - between) / (n - k)
    return min(1.0, max(0.0, (between - (k - 1) * within_mean_square) / total))


PARALLEL_LINES = 1000  # the most lines parallel coordinates draw (parallel_info)


def parallel_info(study: optuna.Study | Snapshot) -> dict[str, Any]:
    """Parallel coordinates of the searched knobs against samples/s and memory, one line per ok trial.

    Every axis comes with its ticks: a list knob's values as the study's machine could take them (``threads``
    choices above its CPUs are not drawn), a range knob's whole numbers over its range there, and for samples/s
    and peak memory (``objectives``) labels with as many decimals as it takes for no two to read the same.
    """
    snap = Snapshot.of(study)
    every = snap.measured_ok()
    rows = every
    if len(every) > PARALLEL_LINES:
        # Past PARALLEL_LINES lines the axes read as a smear and drawing them takes seconds (9,000 lines: 3 s in
        # headless Chromium): every front point, and an even random sample of the rest (the same one each time).
        front = set(snap.front)
        rest = [r for r in every if r["number"] not in front]
        keep = front | {r["number"] for r in random.Random(0).sample(rest, max(0, PARALLEL_LINES - len(front)))}
        rows = [r for r in every if r["number"] in keep]
    dims = []
    for name in searched_knobs(snap):
        raw = [_knob_value(snap, r, name) for r in rows]
        if _is_range(snap, name) and all(_num(v) is not None for v in raw):
            values = [float(v) for v in raw]
            bounds = range_here(snap, name)
            low = min(values + ([bounds[0]] if bounds else []), default=0.0)
            high = max(values + ([bounds[1]] if bounds else []), default=0.0)
            integer = all(float(v).is_integer() for v in values)
            ticks = nice_ticks(low, high, integer=integer)
            dims.append({"name": name, "values": values, "range": _padded(low, high), **ticks, "numeric": True})
        else:
            order = _value_order(snap, name, raw)
            texts = [format_value(name, v) for v in order]
            dims.append(
                {
                    "name": name,
                    "values": [order.index(v) for v in raw],
                    "ticktext": texts,
                    "tickvals": list(range(len(order))),
                    "range": [-0.3, max(len(order) - 0.7, 0.3)],
                    "numeric": False,
                }
            )
    speeds = [r["samples_per_s"] for r in rows]
    memories = [r["peak_memory_bytes"] for r in rows]
    unit, scale = _memory_unit(max((m for m in memories if m is not None), default=1024.0**3))
    scaled = [None if m is None else m / scale for m in memories]
    return {
        "dimensions": dims,
        "of": len(every),  # ok trials in all; "numbers" are those drawn
        "numbers": [r["number"] for r in rows],
        "samples_per_s": speeds,
        "peak_memory_bytes": memories,
        "objectives": [
            _objective_axis(f"peak memory ({unit})", scaled),
            _objective_axis("samples/s", speeds),
        ],
    }


def _objective_axis(label: str, values: Sequence[float | None]) -> dict[str, Any]:
    known = [v for v in values if v is not None]
    low, high = (min(known), max(known)) if known else (0.0, 1.0)
    return {"name": label, "values": list(values), "range": _padded(low, high), **nice_ticks(low, high)}


def _padded(low: float, high: float) -> list[float]:
    """An axis range; one value alone sits in the middle of a small range around it."""
    if high > low:
        return [low, high]
    pad = abs(low) * 0.05 or 0.5
    return [low - pad, high + pad]


def hypervolume_2d(points: Iterable[tuple[float, float]], ref_memory: float) -> float:
    """Area dominated by (samples/s, memory) points against the reference (0 samples/s, ``ref_memory``).

    Samples/s is maximised and memory minimised: the area is that of the union of
    the rectangles [0, speed] x [memory, ref_memory]. A sweep by memory does it:
    each point that is faster than every point using less memory adds a strip.
    """
    # By memory, the fastest first among equal memory: only the staircase's corners add strips, so the area
    # of a set and of its non-dominated points alone are the same number to the last bit (history_info keeps
    # only those).
    usable = sorted((m, -s) for s, m in points if s > 0 and m < ref_memory)
    usable = [(m, -s) for m, s in usable]
    area, best = 0.0, 0.0
    for memory, speed in usable:
        if speed > best:
            area += (ref_memory - memory) * (speed - best)
            best = speed
    return area


def remeasurements(study: optuna.Study | Snapshot) -> dict[int, dict[str, Any]]:
    """Per trial, the re-measurements of its configuration after it ran and the time they took.

    They are the noise floor's, the race's and the ablation's (study attributes ``measurement:<round>:<trial>``;
    ``paired:<round>``, a process that measured several configurations alternately, whose time is shared equally
    by the trials it measured; and the ``confirmations`` of older studies). A measurement that stored its
    ``wall_s`` is *timed*; one that did not
    (stored before autotune kept it) is *estimated* as long as the trial's own measurement (its ``duration_s``),
    and said to be; one of a trial with no duration either is counted, untimed.
    """
    snap = Snapshot.of(study)
    durations = {r["number"]: r["duration_s"] for r in snap.rows}
    out: dict[int, dict[str, Any]] = {}

    def add(number: int, kind: str, wall: float | None) -> None:
        e = out.setdefault(
            number,
            {"count": 0, "timed": 0, "timed_s": 0.0, "estimated": 0, "estimated_s": 0.0, "untimed": 0, "by_kind": {}},
        )
        e["count"] += 1
        e["by_kind"][kind] = e["by_kind"].get(kind, 0) + 1
        own = durations.get(number)
        if wall is not None:
            e["timed"] += 1
            e["timed_s"] += wall
        elif own:
            e["estimated"] += 1
            e["estimated_s"] += own
        else:
            e["untimed"] += 1

    for round_id, number, value in remeasured(snap.attrs):
        kind = "race" if round_id.startswith("race-") else "noise floor" if round_id.startswith("floor-") else "other"
        wall = _num(value.get("wall_s"))
        add(number, kind, wall if wall is not None and wall >= 0 else None)
    for b in blocks(snap.attrs):
        # a process that measured several configurations alternately: its time shared by the trials it measured
        measured = [n for n in b.trials.values() if isinstance(n, int)]
        kind = "race" if b.purpose.get("race") else "what each knob bought" if b.purpose.get("ablation") else "other"
        for number in measured:
            add(number, kind, b.wall_s / len(measured) if b.wall_s is not None and b.wall_s >= 0 else None)
    confirmations = snap.attrs.get("confirmations")
    if isinstance(confirmations, Mapping):
        for trial, rates in confirmations.items():
            try:
                number = int(trial)
            except (TypeError, ValueError):
                continue
            for _ in rates if isinstance(rates, list) else ():
                add(number, "confirmation", None)
    for e in out.values():
        e["time_s"] = e["timed_s"] + e["estimated_s"]
    return out


def _remeasure_totals(per_trial: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    totals = {k: sum(e[k] for e in per_trial.values()) for k in ("count", "timed", "estimated", "untimed")}
    return {**totals, "time_s": sum(e["time_s"] for e in per_trial.values())}


def history_info(study: optuna.Study | Snapshot) -> dict[str, Any]:
    """Per finished trial, in number order: best speed-up so far, hypervolume so far, and its duration and outcome.

    Each trial's time counts its re-measurements too (:func:`remeasurements`: the noise floor's, the race's),
    timed where stored and otherwise estimated, and said to be. ``trial_ticks`` are whole trial numbers.
    """
    snap = Snapshot.of(study)
    finished = sorted((r for r in snap.rows if r["state"] in ("COMPLETE", "FAIL")), key=lambda r: r["number"])
    baseline = snap.baseline()
    base = baseline["samples_per_s"] if baseline else None
    ok_all = [r for r in snap.measured_ok() if r["peak_memory_bytes"] is not None]
    ref = 1.1 * max((r["peak_memory_bytes"] for r in ok_all), default=0.0)
    top_speed = max((r["samples_per_s"] for r in ok_all if r["feasible"]), default=0.0)
    box = ref * top_speed
    numbers, best_so_far, hv, share = [], [], [], []
    points: list[tuple[float, float]] = []  # the non-dominated points so far: the volume is theirs alone
    best: float | None = None
    volume = 0.0
    for r in finished:
        if r["outcome"] == OK and r["duplicate_of"] is None and r["feasible"] and r["samples_per_s"] is not None:
            best = max(best or 0.0, r.get("first_samples_per_s") or r["samples_per_s"])  # the search as it went
            p = (r["samples_per_s"], r["peak_memory_bytes"])
            if p[1] is not None and not any(s >= p[0] and m <= p[1] for s, m in points):
                points = [(s, m) for s, m in points if not (p[0] >= s and p[1] <= m)] + [p]
                volume = hypervolume_2d(points, ref) if ref else 0.0
        numbers.append(r["number"])
        best_so_far.append(None if best is None else (best / base if base else best))
        hv.append(volume)
        share.append(volume / box if box else 0.0)
    again = remeasurements(snap)
    none: dict[str, Any] = {"count": 0, "timed": 0, "timed_s": 0.0, "estimated": 0, "estimated_s": 0.0, "untimed": 0}
    none.update(by_kind={}, time_s=0.0)
    return {
        "numbers": numbers,
        "trial_ticks": trial_ticks(numbers),
        "remeasurements": _remeasure_totals(again),
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
                "remeasured": again.get(r["number"], none),
            }
            for r in finished
        ],
    }


def ablation_info(study: optuna.Study | Snapshot) -> dict[str, Any]:
    """What each knob of the race's winner bought, from the defaults (:meth:`Evidence.ablation`): the steps of the
    path, each with its speed-up over the defaults and what it bought over the step before, both with intervals;
    which steps the recommendation keeps. Empty before the race settles a gain."""
    snap = Snapshot.of(study)
    ab = snap.evidence.ablation() if snap.evidence is not None else None
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
            "within_process": s["within_process"],
        }
        for s in doc["steps"]
    ]
    return {"steps": steps, "text": doc["text"], "winner": doc["winner"], "minimal": doc["minimal"],
            "dropped": {k: format_value(k, v) for k, v in doc["dropped"].items()}, "processes": doc["processes"]}


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
                name = op_name(str(op.get("name", "?")))  # one entry for every compiled graph, not one per hash
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


