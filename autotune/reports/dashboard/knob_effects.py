"""What each knob does: samples/s and memory by a knob's value, how much of their spread each knob explains
(importance), and every ok trial across the knobs at once (parallel coordinates).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any, Hashable, Mapping, Sequence

from autotune import knobs
from autotune.reports.dashboard.source import (
    Snapshot,
    finite,
    format_value,
    is_range,
    knob_value,
    memory_unit,
    range_here,
    searched_knobs,
    value_order,
)
from autotune.reports.dashboard.ticks import nice_ticks, padded
from autotune.store import StoredStudy

MIN_TRIALS_FOR_IMPORTANCE = 5
MAX_GROUPS = 4  # a numeric knob with more values is grouped into this many bins of about equal counts for importance
MAX_SPLITS = 3  # importance is also shown within the most-tried values of the knob that matters most


def knob_effects_info(study: StoredStudy | Snapshot) -> dict[str, Any]:
    """For each searched knob: samples/s and peak memory of the ok trials, by value."""
    snap = Snapshot.of(study)
    rows = snap.measured_ok()
    numbers = [r["number"] for r in rows]
    speeds = [r["samples_per_s"] for r in rows]
    memories = [r["peak_memory_bytes"] for r in rows]
    out = []
    for name in searched_knobs(snap):
        raw = _values(snap, rows, name)
        members: dict[str, list[int]] = {format_value(name, value): [] for value in value_order(snap, name, raw)}
        for i, label in enumerate(_labels(name, raw)):
            members.setdefault(label, []).append(i)
        values = [
            {
                "value": label,
                "numbers": [numbers[i] for i in at],
                "samples_per_s": [speeds[i] for i in at],
                "peak_memory_bytes": [memories[i] for i in at],
            }
            for label, at in members.items()
            if at
        ]
        knob = knobs.KNOBS.get(name)
        out.append({"name": name, "help": knob.help if knob else "", "values": values})
    return {"knobs": out, "n_trials": len(rows)}


IMPORTANCE_METHOD = (
    "importance: the share of the spread of log samples/s (log peak memory) across the ok trials that a knob's value "
    "explains on its own, adjusted for how many values it has (epsilon squared; 0: no effect seen). Over all trials a "
    "knob that matters only under one value of another (threads under fp32, say) is diluted, so samples/s is also "
    "shown within each of the most-tried values of the knob that explains most of it."
)


def importance_info(study: StoredStudy | Snapshot) -> dict[str, Any]:
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
    raw = _values(snap, rows, name)
    numeric = [finite(v) for v in raw]
    distinct = sorted({v for v in numeric if v is not None})
    if len(distinct) <= MAX_GROUPS or any(v is None for v in numeric):
        return list(_labels(name, raw))
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


def _values(snap: Snapshot, rows: Sequence[Mapping[str, Any]], name: str) -> list[Any]:
    """Each row's value of a knob (:func:`~autotune.reports.dashboard.source.knob_value`, without a call a row)."""
    default = snap.defaults.get(name)
    return [r["config"][name] if name in r["config"] else default for r in rows]


def _labels(name: str, raw: Sequence[Any]) -> list[str]:
    """``format_value(name, v)`` of each value, each distinct value formatted once (a knob takes a few values over
    100,000 trials)."""
    known: dict[tuple[type, Any], str] = {}
    out = []
    for v in raw:
        try:
            key = (type(v), v)  # 1 and True and 1.0 are equal keys, but not always the same text
            text = known.get(key)
            if text is None:
                text = known[key] = format_value(name, v)
        except TypeError:  # a value that cannot be a key (a list)
            text = format_value(name, v)
        out.append(text)
    return out


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


def parallel_info(study: StoredStudy | Snapshot) -> dict[str, Any]:
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
        raw = [knob_value(snap, r, name) for r in rows]
        if is_range(snap, name) and all(finite(v) is not None for v in raw):
            values = [float(v) for v in raw]
            bounds = range_here(snap, name)
            low = min(values + ([bounds[0]] if bounds else []), default=0.0)
            high = max(values + ([bounds[1]] if bounds else []), default=0.0)
            integer = all(float(v).is_integer() for v in values)
            ticks = nice_ticks(low, high, integer=integer)
            dims.append({"name": name, "values": values, "range": padded(low, high), **ticks, "numeric": True})
        else:
            order = value_order(snap, name, raw)
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
    unit, scale = memory_unit(max((m for m in memories if m is not None), default=1024.0**3))
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
    return {"name": label, "values": list(values), "range": padded(low, high), **nice_ticks(low, high)}

