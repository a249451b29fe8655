"""What a GPU study must keep, checked on a simulated one: the budget, claims that rest on their own processes and
cover the truth, a pick near the best reachable, a verdict that agrees with its own lines, and what was spent after
the search against the least a claim of that width needs.

:func:`check` reads a finished :class:`.study.SimulatedStudy` through the views a user reads (``status --json``'s
document and the export's, :mod:`autotune.reports.view`) and the device's truth, and returns one :class:`Checked`;
:func:`summary` counts them over many studies (the benchmark's last line). A claim is the verdict's figure measured
apart from the search that chose it: with fewer than :data:`autotune.evidence.claim.MIN_PROCESSES` fresh processes
of its configuration it must say it is not confirmed and give no interval, in every view.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

from autotune import knobs
from autotune.evidence import claim as CL
from autotune.reports import view
from autotune.store import Store
from autotune.testing.simulated.study import SimulatedStudy, best_reachable

#: A study ends within this share of its budget, in simulated time, probes and its process's exit included.
BUDGET_SLACK = 0.05
#: The pick is at least this share of the best reachable configuration's speed-up on the median seed.
PICK_SHARE = 0.90
UNCONFIRMED = "not confirmed"


@dataclass
class Checked:
    """One study held to the properties (None: the property does not apply, e.g. no interval to cover)."""

    study: str
    budget_s: float
    wall_s: float
    budget_kept: bool
    claim: dict[str, Any] | None
    claim_sound: bool  # >= 3 processes with an interval, or unconfirmed without one, in every view
    claim_problems: list[str]
    truth: float | None  # the claimed configuration's true speed-up
    covered: bool | None
    width: float | None  # the interval's high / low
    pick: float  # the recommendation's true speed-up (1.0: the defaults)
    best: float  # the best reachable
    contradictions: list[str]
    after_search: int  # processes the race, what each knob bought, the least change and the claim started
    least: int | None  # the least a claim of that width needs, each side
    wasted_compiles: int  # compiled trials stopped by a phase's end with nothing learned
    verdict: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pick_share(self) -> float:
        return self.pick / self.best if self.best else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "pick_share": self.pick_share}


def _speedups(status: Mapping[str, Any], export: Mapping[str, Any]) -> dict[str, Mapping[str, Any] | None]:
    """The claim as each view gives it."""
    rec = status.get("recommended") or {}
    out: dict[str, Mapping[str, Any] | None] = {"status verdict": (status.get("verdict") or {}).get("speedup"),
                                                 "export": export.get("speedup")}
    if rec.get("figure") == "claim":
        out["status recommended"] = rec.get("speedup")
    return out


def _sound(views: Mapping[str, Mapping[str, Any] | None], verdict_text: str) -> list[str]:
    """What is wrong with the claim in each view: fewer than MIN_PROCESSES fresh processes with an interval, or
    without saying it is not confirmed; a None reaching a figure."""
    problems = []
    for where, s in views.items():
        if not s or s.get("estimate") is None:
            continue
        n = int(s.get("processes") or 0)
        has_interval = s.get("low") is not None and s.get("high") is not None
        if n >= CL.MIN_PROCESSES and not has_interval:
            problems.append(f"{where}: {n} processes and no interval")
        if n < CL.MIN_PROCESSES and has_interval:
            problems.append(f"{where}: an interval from {n} process(es)")
        if n < CL.MIN_PROCESSES and UNCONFIRMED not in str(s.get("text", "")) + verdict_text:
            problems.append(f"{where}: {n} process(es) without saying '{UNCONFIRMED}'")
        if "None" in str(s.get("text", "")):
            problems.append(f"{where}: None in {s.get('text')!r}")
    return problems


def contradictions(verdict: Mapping[str, Any]) -> list[str]:
    """Where a verdict's words contradict its own figures: the knobs left at the user's setting said to have bought
    nothing beyond the noise while their figure together (``left_bought``) excludes 1."""
    text = str(verdict.get("text") or "")
    bought = str(verdict.get("left_bought") or "")
    found = re.search(r"([0-9.]+)x \(([0-9.]+)-([0-9.]+)\)", bought)
    if "nothing beyond the noise" in text and found:
        low, high = float(found.group(2)), float(found.group(3))
        if low > 1.0 or high < 1.0:
            return [f"says the knobs left out bought nothing beyond the noise, yet they measured {bought}"]
    return []


def least_processes(claim: Mapping[str, Any], sigma: float | None) -> int | None:
    """The least processes of each side a claim of this width needs at the noise seen (``sigma``: between processes),
    as a claim's plan is sized (:func:`autotune.evidence.claim.processes_for`)."""
    low, high = claim.get("low"), claim.get("high")
    if low is None or high is None or not sigma or high <= low:
        return None
    return CL.processes_for(high / low, sigma, claim.get("level") or 0.9)


def check(study: SimulatedStudy) -> Checked:
    """``study`` held to the properties (see the module's docstring)."""
    store = Store(study.url, read_only=True)
    status = view.status_of(store, study.name)
    export = view.export_of(store, study.name, "recommended")
    verdict = status.get("verdict") or {}
    trials = {t.number: t for t in store.read(study.name).trials}
    views = _speedups(status, export)
    claim = verdict.get("speedup")
    problems = _sound(views, str(verdict.get("text") or ""))
    # whose figure the verdict's speed-up is: the recommendation's, or with no gain the configuration it measured (the
    # winner is then the defaults)
    about = verdict.get("leader") if verdict.get("state") == "no_gain" or verdict.get("winner") is None \
        else verdict.get("winner")
    truth = study.truth(trials[about].config) if about in trials else None
    covered = width = None
    if claim and claim.get("low") is not None and claim.get("high") is not None and truth is not None:
        covered = claim["low"] <= truth <= claim["high"]
        width = claim["high"] / claim["low"]
    rec = (status.get("recommended") or {}).get("trial")
    pick = study.truth(trials[rec].config) if rec in trials else 1.0
    best, _ = best_reachable(study)
    reports = study.summary.reports
    after = sum(int(getattr(reports.get(name), "processes", 0) or 0) for name in ("race", "ablation", "confirm"))
    sigma = (status.get("noise") or {}).get("sigma") if isinstance(status.get("noise"), Mapping) else None
    wasted = sum(1 for t in trials.values() if knobs.compiles(t.config) and t.outcome == "skipped"
                 and "ran out" in str(t.error_message or ""))
    return Checked(f"{study.shape.name} {study.budget_s:g}s seed {study.seed}", study.budget_s, study.wall_s,
                   study.wall_s <= study.budget_s * (1.0 + BUDGET_SLACK), claim, not problems, problems, truth,
                   covered, width, pick, best, contradictions(verdict), after,
                   least_processes(claim or {}, sigma), wasted, str(verdict.get("text") or ""))


def summary(checked: Iterable[Checked]) -> dict[str, Any]:
    """The counts over many studies: the benchmark's last line's figures."""
    rows = list(checked)
    covered = [c.covered for c in rows if c.covered is not None]
    ratios = [c.after_search / c.least for c in rows if c.least]
    return {
        "seeds": len(rows),
        "budget_kept": sum(c.budget_kept for c in rows),
        "claims_sound": sum(c.claim_sound for c in rows),
        "intervals": len(covered),
        "covering": sum(covered),
        "median_pick_percent": 100.0 * statistics.median(c.pick_share for c in rows) if rows else None,
        "contradictions": sum(len(c.contradictions) for c in rows),
        "median_after_over_least": statistics.median(ratios) if ratios else None,
        "wasted_compiles": sum(c.wasted_compiles for c in rows),
        "worst_wall_share": max((c.wall_s / c.budget_s for c in rows), default=None),
    }


def last_line(counts: Mapping[str, Any]) -> str:
    """``seeds 200: budget kept <k>, claims with >= 3 processes or unconfirmed <u>, covering the truth <c>, median
    pick <p>% of the best reachable, contradictions <z>``."""
    return (f"seeds {counts['seeds']}: budget kept {counts['budget_kept']}, claims with >= 3 processes or unconfirmed "
            f"{counts['claims_sound']}, covering the truth {counts['covering']}, median pick "
            f"{counts['median_pick_percent']:.0f}% of the best reachable, contradictions {counts['contradictions']}")
