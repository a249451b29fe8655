"""The verdict: which configuration to use, by how much and how sure, from a study's evidence.

The raced configurations (or, before a race, every one) are compared through the noise
(:func:`autotune.stats.choose`); once the path to the winner has been measured (what each
knob bought, :mod:`autotune.ablation`), the verdict names the smallest configuration that
keeps the gain, without the knobs that bought nothing beyond the noise. On a busy machine
(:class:`autotune.evidence.load.Load`) a configuration whose gain rests on a load-sensitive knob
(``threads``: fewer threads suffer less from other processes) is not recommended: the verdict
names what was seen and how to re-check it on a quiet machine, and recommends among the others.
The rules read :class:`autotune.evidence.Evidence`; :meth:`Evidence.verdict` keeps the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from autotune import ablation as A
from autotune import knobs
from autotune import stats
from autotune.stats import Ratio
from autotune.units import plural

if TYPE_CHECKING:  # pragma: no cover
    from autotune.evidence.figures import Evidence


@dataclass(frozen=True)
class Verdict:
    """The answer a user reads: which configuration to use, by how much, and how sure."""

    state: str  # "gain" | "no_gain" | "no_fit" (nothing fits the memory budget) | "no_baseline" | "no_results"
    winner: int | None
    leader: int | None
    speedup: Ratio | None  # the winner's (for "no_gain": the leader's) over the baseline
    tied: tuple[int, ...]
    confirmed: bool
    simpler_preferred: bool
    text: str

    @property
    def significant(self) -> bool:
        return self.state == "gain"

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "significant": self.significant,
            "winner": self.winner,
            "leader": self.leader,
            "speedup": self.speedup.to_dict() if self.speedup else None,
            "tied": list(self.tied),
            "confirmed": self.confirmed,
            "simpler_preferred": self.simpler_preferred,
            "text": self.text,
        }


def changes_text(changes: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={knobs.KNOBS[k].format(v)}" for k, v in changes.items() if k in knobs.KNOBS) or "defaults"


def ablated(ev: Evidence, verdict: Verdict) -> Verdict:
    """The race's verdict, told what each knob of its winner bought (and, where some bought nothing, the
    smallest configuration that keeps the gain, once measured on its own)."""
    ab = ev.ablation()
    if verdict.state != "gain" or ab is None or len(ab.steps) < 2:
        return verdict
    m = ab.minimal
    s = ev.speedup(m) if m is not None and m != verdict.winner else None
    if m is None or m == verdict.winner or s is None or not s.above_one():
        return Verdict(verdict.state, verdict.winner, verdict.leader, verdict.speedup, verdict.tied, verdict.confirmed,
                       verdict.simpler_preferred, f"{verdict.text}; {ab.text()}")
    c = ev.configs[m]
    text = (f"#{m} ({changes_text(c.changes)}) is {s.text()} as fast as PyTorch's defaults "
            f"({int(round(100 * stats.LEVEL))}% interval, {plural(s.processes, 'process')} against {s.reference_processes}): "
            f"#{verdict.winner}'s gain without the knobs that bought nothing beyond the noise; {ab.text()}")
    if ev.load.was_busy:
        text += f"; {ev.load.text()}"
    return Verdict("gain", m, verdict.leader, s, verdict.tied, True, verdict.simpler_preferred, text)


def ablation(ev: Evidence) -> A.Ablation | None:
    """What each knob of the race's winner bought, from the defaults (see :meth:`Evidence.ablation`)."""
    verdict = ev.verdict(ablated=False)
    if verdict.state != "gain" or verdict.winner is None or verdict.speedup is None:
        return None
    w = ev.configs[verdict.winner]
    if len(w.changes) == 1:
        step = A.Step(dict(w.changes), w.key, verdict.speedup, verdict.speedup, verdict.speedup.within)
        return A.Ablation("", w.number, (step,), w.key, w.number, {}, 0)
    plans = [(ablation_id, plan) for ablation_id, plan in ev.study.ablation_plans() if plan.get("winner_key") == w.key]
    # the newest path measured whole (one measured again in another order, when a knob that bought nothing
    # stood before one that paid: autotune.ablation.reordered), else the one before it
    for ablation_id, plan in sorted(plans, key=lambda kv: -float(kv[1].get("started", 0.0))):
        keys = [p["key"] for p in plan.get("path") or []]
        processes = sum(1 for b in ev.blocks if b.purpose.get("ablation") == ablation_id)
        found = A.analyse(ablation_id, plan, {k: ev.within.get(k, []) for k in keys}, ev.within_noise,
                          verdict.speedup, ev.trial_of.get, processes)
        if found is not None:
            return found
    return None


def raced(ev: Evidence) -> Verdict:
    """The race's verdict, on a busy machine without the configurations whose gain rests on a load-sensitive knob."""
    verdict = rule(ev)
    if not ev.load.was_busy or verdict.state == "gain" and not _sensitive(ev, verdict.winner):
        return _busy_note(ev, verdict) if ev.load.was_busy else verdict
    if verdict.state != "gain":
        return _busy_note(ev, verdict)
    seen = verdict
    quiet = rule(ev, exclude_sensitive=True)
    c = ev.configs[seen.winner]  # type: ignore[index]
    names = ", ".join(k for k in c.changes if _sensitive_knob(k))
    model = ev.study.workload.get("model") or "MODEL"
    sets = " ".join(f"--set {k}={knobs.KNOBS[k].format(v)}" for k, v in c.changes.items() if k in knobs.KNOBS)
    note = (f"#{seen.winner} ({changes_text(c.changes)}) measured {seen.speedup.text() if seen.speedup else '-'} but its "
            f"gain rests on {names}, which depends on the load, and {ev.load.text()}: not recommended from these "
            f"measurements; re-check it on a quiet machine with `autotune measure --model {model} {sets} --repeat 5` "
            f"against `autotune measure --model {model} --repeat 5`")
    if quiet.state == "gain":
        return Verdict("gain", quiet.winner, seen.leader, quiet.speedup, quiet.tied, quiet.confirmed,
                       quiet.simpler_preferred, f"{quiet.text}; {note}")
    return Verdict("no_gain", ev.baseline.number if ev.baseline else None, seen.leader, seen.speedup, seen.tied,
                   seen.confirmed, False, "no configuration beats PyTorch's defaults beyond the noise once the "
                   f"load-sensitive knobs are set aside: keep the defaults; {note}")


def _sensitive_knob(name: str) -> bool:
    return name in knobs.KNOBS and knobs.KNOBS[name].load_sensitive


def _sensitive(ev: Evidence, number: int | None) -> bool:
    return number is not None and any(_sensitive_knob(k) for k in ev.configs[number].changes)


def _busy_note(ev: Evidence, verdict: Verdict) -> Verdict:
    return Verdict(verdict.state, verdict.winner, verdict.leader, verdict.speedup, verdict.tied, verdict.confirmed,
                   verdict.simpler_preferred, f"{verdict.text}; {ev.load.text()}")


def rule(ev: Evidence, exclude_sensitive: bool = False) -> Verdict:
    """The verdict's rule over the raced configurations (before a race, every one), through the noise."""
    if not ev.configs:
        return Verdict("no_results", None, None, None, (), False, False, "no successful measurement yet")
    if ev.baseline is None:
        return Verdict("no_baseline", None, None, None, (), False, False, "the baseline (PyTorch's defaults) has not been measured yet")
    base = ev.baseline
    pool = ev.raced or [c.number for c in ev.ok() if not c.is_baseline]
    # the ablation's recommendation is measured to be reported, not raced (the verdict comes to it through the ablation)
    pool = [n for n in pool if ev.configs[n].feasible and not ev.configs[n].busy_only
            and ev.configs[n].role != A.ROLE]
    if exclude_sensitive:
        pool = [n for n in pool if not _sensitive(ev, n)]
    if not pool and not base.feasible:
        from autotune.units import format_bytes

        return Verdict("no_fit", None, None, None, (), False, False,
                       f"nothing measured fits the memory budget ({format_bytes(ev.max_memory_bytes)}), PyTorch's "
                       f"defaults included (they peaked at {format_bytes(base.peak_memory_bytes)}): raise --max-memory, "
                       "or make the model or its batch smaller")
    if not pool:
        return Verdict("no_gain", base.number, None, None, (), False, False,
                       "no other configuration ran successfully within the budget: keep PyTorch's defaults")
    choice = ev.choose(pool)
    leader = int(choice.leader)
    winner = int(choice.winner)
    tied = tuple(int(k) for k in choice.tied)
    confirmed = ev.configs[leader].confirmed
    if not ev.noise.known:
        s = ev.speedup(leader)
        return Verdict("no_gain", base.number, leader, s, tied, confirmed, False,
                       f"the noise between processes is not measured yet, so no claim: the fastest so far is "
                       f"#{leader} at {s.text() if s else '-'} the speed of the defaults")
    if not choice.significant:
        s = ev.speedup(leader)
        what = knobs.short(ev.configs[leader].config) if ev.configs[leader].changes else "defaults"
        return Verdict("no_gain", base.number, leader, s, tied, confirmed, False,
                       f"no configuration beats PyTorch's defaults beyond the noise: the fastest, #{leader} ({what}), "
                       f"measured {s.text() if s else '-'}; keep the defaults")
    s = ev.speedup(winner)
    assert s is not None
    c = ev.configs[winner]
    text = (f"#{winner} ({changes_text(c.changes)}) is {s.text()} as fast as PyTorch's defaults "
            f"({int(round(100 * stats.LEVEL))}% interval, {plural(c.processes, 'process')} against {s.reference_processes})")
    if choice.simpler_than_leader:
        text += (f"; preferred over #{leader}, which looked faster ({ev.speedup(leader).text()}) but is not "  # type: ignore[union-attr]
                 f"separated from it by the evidence, because it changes fewer knobs")
    elif len(tied) > 1:
        text += f"; {len(tied) - 1} other configuration(s) were as fast within the noise"
    if not confirmed:
        text += "; measured once, not confirmed by a race (run with --confirm)"
    return Verdict("gain", winner, leader, s, tied, confirmed, choice.simpler_than_leader, text)
