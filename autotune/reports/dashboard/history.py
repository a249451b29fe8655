"""The search as it went: the best speed-up and the hypervolume after each trial, and the time each trial took,
its re-measurements (the noise floor's, the race's, what each knob bought) included.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from autotune.reports.dashboard.source import OK, Snapshot, finite
from autotune.reports.dashboard.ticks import trial_ticks
from autotune.store import StoredStudy
from autotune.store.plans import RoundId



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


def remeasurements(study: StoredStudy | Snapshot) -> dict[int, dict[str, Any]]:
    """Per trial, the re-measurements of its configuration after it ran and the time they took.

    They are the noise floor's, the race's and the ablation's (the study's re-measurements,
    :meth:`autotune.store.StoredStudy.remeasurements`; its shared processes, :meth:`~autotune.store.StoredStudy.blocks`,
    each of which measured several configurations alternately and whose time is shared equally by the trials it
    measured; and the ``confirmations`` of older studies). A measurement that stored its ``wall_s`` is *timed*; one
    that did not (stored before autotune kept it) is *estimated* as long as the trial's own measurement
    (its ``duration_s``), and said to be; one of a trial with no duration either is counted, untimed.
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

    confirmed: list[int] = []  # the older studies' confirmations: counted last
    for m in snap.study.remeasurements():
        if RoundId.is_of(RoundId.CLAIM, m.round_id):
            confirmed.append(m.trial)
            continue
        kind = ("race" if m.round_id.startswith(RoundId.prefix(RoundId.RACE))
                else "noise floor" if RoundId.is_of(RoundId.FLOOR, m.round_id) else "other")
        wall = finite(m.wall_s)
        add(m.trial, kind, wall if wall is not None and wall >= 0 else None)
    for b in snap.study.blocks():
        # a process that measured several configurations alternately: its time shared by the trials it measured
        measured = [n for n in b.trials.values() if isinstance(n, int)]
        kind = "race" if b.purpose.get("race") else "what each knob bought" if b.purpose.get("ablation") else "other"
        for number in measured:
            add(number, kind, b.wall_s / len(measured) if b.wall_s is not None and b.wall_s >= 0 else None)
    for number in confirmed:
        add(number, "confirmation", None)
    for e in out.values():
        e["time_s"] = e["timed_s"] + e["estimated_s"]
    return out


def remeasure_totals(per_trial: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """The re-measurements of all trials together: counts (timed, estimated, untimed) and their time."""
    totals = {k: sum(e[k] for e in per_trial.values()) for k in ("count", "timed", "estimated", "untimed")}
    return {**totals, "time_s": sum(e["time_s"] for e in per_trial.values())}


def history_info(study: StoredStudy | Snapshot) -> dict[str, Any]:
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
        "remeasurements": remeasure_totals(again),
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

