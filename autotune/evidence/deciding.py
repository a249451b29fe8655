"""How the verdict is reached: the rules that turn a study's evidence into the answer a user reads.

:class:`autotune.evidence.Evidence` computes the figures (each configuration's speed-up, its noise, the race's choice,
the claim measured apart); the functions here compose them into a :class:`autotune.evidence.verdict.Verdict`, each
over an evidence (``ev``) as its caller hands it:

- :func:`confirmed`: once the race's choice was measured apart, the claim decides: a gain beyond the noise, a gain
  measured in too few processes to confirm (no interval), or no gain;
- :func:`raced`, over :func:`by_noise`: before that, the raced configurations (or every one) compared through the
  noise; a figure from too few processes is never claimed, and on a busy machine a gain resting on a load-sensitive
  knob is set aside;
- :func:`ablated`: the race's verdict told what each knob of its winner bought;
- :func:`checked`: the verdict once the numerics were checked (``--numerics strict`` may recommend another).

Pure computation; nothing here imports torch or Optuna.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from autotune import knobs
from autotune.errors import Said, either
from autotune.evidence import claim as CL
from autotune.evidence import numerics_answer as NU
from autotune.evidence import stats
from autotune.evidence import verdict as V
from autotune.evidence.verdict import State, Verdict, changes_text
from autotune.request import option, pickled_name
from autotune.store.plans import ConfirmStop, RaceStop
from autotune.store.records import Role
from autotune.units import plural

INDIFFERENCE = CL.INDIFFERENCE


def quoted(s: stats.Ratio | None) -> stats.Ratio | None:
    """A figure as a verdict may quote it: its interval only from :data:`autotune.evidence.claim.MIN_PROCESSES`
    processes of its configuration or more; from fewer, the estimate alone (its spread is part of a claim)."""
    if s is None or not s.has_interval or s.processes >= CL.MIN_PROCESSES:
        return s
    return replace(s, low=None, high=None)


def quoted_text(s: stats.Ratio | None) -> str:
    """``1.08x (1.02-1.15)`` from enough processes; ``1.02x in 1 process, not confirmed`` from fewer."""
    q = quoted(s)
    if q is None:
        return "-"
    if q.has_interval:
        return q.text()
    return f"{q.estimate:.2f}x in {plural(q.processes, 'process')}, not confirmed"


def checked(ev: Any, verdict: Verdict, record: Any) -> Verdict:
    """The verdict once the numerics were checked: its text says how they compare; under ``--numerics strict`` a
    recommendation whose numerics differ gives way to the fastest configuration checked whose numerics hold (its
    figure the search's and the race's: it was not measured apart), or to the defaults when none holds."""
    check = NU.judge(record)
    if check.state != NU.DIFFER or record.get("mode") != NU.STRICT or "reason" in record:
        return V.detailed(verdict, check.text())
    n = verdict.winner
    assert n is not None and verdict.speedup is not None and ev.baseline is not None
    was = (f"#{n} ({changes_text(ev.configs[n].changes)}) was faster, {verdict.speedup.text()}, but "
           f"{check.text()}")
    pick = record.get("strict_pick")
    if pick is None or pick not in ev.configs:
        text = f"keep the defaults: no faster configuration checked holds ({option('numerics', NU.STRICT)})"
        return V.detailed(Verdict(State.NO_GAIN, ev.baseline.number, n, verdict.speedup, (), verdict.confirmed, False,
                                  Said(text)), was)
    held = NU.judge(record, pick)
    speedup = ev.speedup(pick)
    assert speedup is not None
    text = (f"use #{pick} ({changes_text(ev.configs[pick].changes)}): {speedup.text()} as fast as PyTorch's "
            f"defaults (measured in the search and the race), the fastest configuration checked whose numerics "
            f"hold ({option('numerics', NU.STRICT)})")
    return V.detailed(Verdict(State.GAIN, pick, n, speedup, (), False, False, Said(text)), held.text(), was)


def confirmed(ev: Any, conf: CL.Confirmed) -> Verdict:
    """The verdict on the race's choice, from its claim measured apart: a gain when the recommendation's fresh
    processes beat the defaults beyond the noise, else "no gain beyond the noise"; the knobs the least change
    left at the user's setting named with what they bought together."""
    assert conf.claim is not None and ev.baseline is not None
    n, s = conf.recommendation, conf.claim
    if ev.load.was_busy and sensitive(ev, n):  # its load-sensitive knobs could not be reverted: the race's rule
        return raced(ev)
    c = ev.configs[n]
    behind = (f"{int(round(100 * stats.LEVEL))}% interval, measured apart from the search that "
              f"{'found' if conf.record.fastest else 'chose'} it: "
              f"{plural(s.processes, 'process')} against {s.reference_processes} of the defaults")
    details = []
    if conf.record.unreduced and n == conf.record.chosen:
        details.append(f"claimed with all its knobs: {conf.record.unreduced}")
    elif s.has_interval and s.above_one():
        details.append(kept_text(ev, conf))
    if ev.load.was_busy:
        details.append(ev.load.text())
    if not s.has_interval and beyond_steady_noise(ev, n):
        why = {ConfirmStop.TIME: "the time budget ran out", ConfirmStop.FAILED: "it failed when measured again"}.get(
            conf.record.stop, "its rounds were spent") if conf.done else "the claim is still being measured"
        text = (f"use #{n} ({changes_text(c.changes)}): it measured {s.estimate:.2f}x the speed of PyTorch's defaults "
                f"in {plural(s.processes, 'process')} apart from the search that chose it, not confirmed, so no "
                f"interval (a claim needs {plural(CL.MIN_PROCESSES, 'process')} of it; {why}: run again to confirm it, "
                f"with a longer {option('time_budget')})")
        verdict = Verdict(State.UNCONFIRMED, n, conf.record.chosen, s, (), True, bool(conf.reverted), Said(text))
    elif s.above_one():
        text = f"use #{n} ({changes_text(c.changes)}): {s.text()} as fast as PyTorch's defaults ({behind})"
        verdict = Verdict(State.GAIN, n, conf.record.chosen, s, (), True, bool(conf.reverted), Said(text))
        if conf.record.fastest:
            details.append("the measurements that selected it had not told it from the noise; its processes apart "
                           "did")
    else:
        measured = f"{s.text()} ({behind})" if s.has_interval else quoted_text(s)
        named = f"#{n} ({changes_text(c.changes) or 'defaults'})"
        if not conf.record.fastest:
            which = f"{named}, chosen by the race,"
        elif n != conf.record.chosen:  # its load-sensitive knobs reverted, as a busy machine asks
            which = (f"the fastest without what depends on the load (#{conf.record.chosen} without "
                     f"{changes_text(conf.record.reverted)}), {named},")
        else:
            which = f"the fastest, {named},"
        text = (f"keep the defaults: no configuration beats PyTorch's defaults beyond the noise; {which} measured "
                f"{measured}")
        verdict = Verdict(State.NO_GAIN, ev.baseline.number, n, s, (), True, False, Said(text))
    verdict = V.detailed(verdict, *details)
    if conf.reverted and verdict.recommends:
        lefts = ev.left()
        if ev.load.was_busy:  # reverted for the load, not for what they bought
            loaded = [x for x in lefts if all(sensitive_knob(k) for k in x.changes)]
            lefts = [x for x in lefts if x not in loaded]
            if loaded:
                verdict = V.detailed(verdict, "left at your setting as their gain depends on the load: "
                                     + ", ".join(line for x in loaded for line in x.lines()))
        paid = any(x.bought is not None and x.bought.above_one() for x in lefts)
        slower = any(x.bought is not None and x.bought.below_one() for x in lefts)
        verdict = V.leaving(verdict, tuple(line for x in lefts for line in x.lines()),
                            "; ".join(x.bought_text() for x in lefts), "; ".join(x.text() for x in lefts),
                            V.LEFT_DECIDED if paid else V.LEFT_SLOWER if slower else V.LEFT_WHY)
    return verdict


def kept_text(ev: Any, conf: CL.Confirmed) -> str:
    """What stands behind each knob the recommendation keeps, apart from the selection: what each bought where that
    was measured (in shared processes, a step at a time); the claim itself for a single knob; else that several were
    kept on the search's figures, and only their gain together was measured apart ("" when nothing needs saying)."""
    ab = ev.ablation()
    kept = {k: v for k, v in ev.configs[conf.recommendation].changes.items() if k in knobs.KNOBS}
    if ab is not None and ab.settled and ab.winner == conf.record.chosen:
        steps = [st for st in ab.steps if st.kept and set(st.added) <= set(kept)]
        return ("what each knob kept bought, from the defaults: "
                + ", ".join(f"{st.label()} {st.bought.text()}" for st in steps)) if steps else ""
    if len(kept) < 2:
        return ""
    return (f"kept on the search's figures, their gain measured apart only together: "
            f"{' '.join(f'{k}={knobs.KNOBS[k].format(v)}' for k, v in kept.items())}")


def ablated(ev: Any, verdict: Verdict) -> Verdict:
    """The race's verdict, told what each knob of its winner bought (and, where some bought nothing, the
    smallest configuration that keeps the gain, once measured on its own)."""
    ab = ev.ablation()
    if verdict.state != State.GAIN or ab is None or len(ab.steps) < 2:
        return verdict
    m = ab.minimal
    s = ev.speedup(m) if m is not None and m != verdict.winner else None
    if m is None or m == verdict.winner or s is None or not s.above_one():
        return V.detailed(verdict, ab.text())
    c = ev.configs[m]
    text = (f"use #{m} ({changes_text(c.changes)}): {s.text()} as fast as PyTorch's defaults "
            f"({int(round(100 * stats.LEVEL))}% interval, {plural(s.processes, 'process')} against "
            f"{s.reference_processes}), "
            f"#{verdict.winner}'s gain without the knobs that bought nothing beyond the noise")
    return V.detailed(Verdict(State.GAIN, m, verdict.leader, s, verdict.tied, True, verdict.simpler_preferred, text),
                      ab.text(), ev.load.text() if ev.load.was_busy else "")


def raced(ev: Any) -> Verdict:
    """The race's verdict, on a busy machine without the configurations whose gain rests on a load-sensitive knob."""
    verdict = by_noise(ev)
    if not ev.load.was_busy or verdict.recommends and not sensitive(ev, verdict.winner):
        return busy_note(ev, verdict) if ev.load.was_busy else verdict
    if not verdict.recommends:
        return busy_note(ev, verdict)
    seen = verdict
    quiet = by_noise(ev, exclude_sensitive=True)
    c = ev.configs[seen.winner]  # type: ignore[index]
    names = ", ".join(k for k in c.changes if sensitive_knob(k))
    model = ev.study.workload.get("model") or "MODEL"
    config = {k: v for k, v in c.changes.items() if k in knobs.KNOBS}
    shown = pickled_name(model) or repr(model)
    note = (f"#{seen.winner} ({changes_text(c.changes)}) measured "
            f"{seen.speedup.text() if seen.speedup else '-'} but its "
            f"gain rests on {names}, which depends on the load, and {ev.load.text()}: not recommended from these "
            "measurements; re-check it on a quiet machine with "
            + either(f"`autotune measure --model {model} "
                     + " ".join(f"--set {k}={knobs.KNOBS[k].format(v)}" for k, v in config.items())
                     + f" --repeat 5` against `autotune measure --model {model} --repeat 5`",
                     f"autotune.measure({shown}, config={config!r}, repeat=5) against "
                     f"autotune.measure({shown}, repeat=5)"))
    if quiet.recommends:
        return V.detailed(replace(quiet, leader=seen.leader), note)
    return V.detailed(Verdict(State.NO_GAIN, ev.baseline.number if ev.baseline else None, seen.leader, seen.speedup,
                              seen.tied, seen.confirmed, False,
                              Said("keep the defaults: no configuration beats PyTorch's defaults beyond the noise "
                                   "once the load-sensitive knobs are set aside")), note)


def sensitive_knob(name: str) -> bool:
    """A knob whose gain depends on the load other processes put on the machine (threads, loader workers)."""
    return name in knobs.KNOBS and knobs.KNOBS[name].load_sensitive


def sensitive(ev: Any, number: int | None) -> bool:
    return number is not None and any(sensitive_knob(k) for k in ev.configs[number].changes)


def only_sensitive(ev: Any, number: int | None) -> bool:
    """``number`` changes load-sensitive knobs only: without them it is the defaults."""
    changes = [k for k in ev.configs[number].changes if k in knobs.KNOBS] if number is not None else []
    return bool(changes) and all(sensitive_knob(k) for k in changes)


def busy_note(ev: Any, verdict: Verdict) -> Verdict:
    return V.detailed(verdict, ev.load.text())


def by_noise(ev: Any, exclude_sensitive: bool = False) -> Verdict:
    """The verdict's rule over the raced configurations (before a race, every one), through the noise."""
    if not ev.configs:
        return Verdict(State.NO_RESULTS, None, None, None, (), False, False, "no successful measurement yet")
    if ev.baseline is None:
        return Verdict(State.NO_BASELINE, None, None, None, (), False, False,
                       "the baseline (PyTorch's defaults) has not been measured yet")
    base = ev.baseline
    pool = ev.raced or [c.number for c in ev.ok() if not c.is_baseline]
    # the ablation's recommendation is measured to be reported, not raced (the verdict comes to it through the ablation)
    pool = [n for n in pool if ev.configs[n].feasible and not ev.configs[n].busy_only
            and ev.configs[n].role != Role.MINIMAL]
    if exclude_sensitive:
        pool = [n for n in pool if not sensitive(ev, n)]
    if not pool and not base.feasible:
        from autotune.units import format_bytes

        return Verdict(State.NO_FIT, None, None, None, (), False, False,
                       Said(f"nothing measured fits the memory budget ({format_bytes(ev.max_memory_bytes)}), PyTorch's "
                            f"defaults included (they peaked at {format_bytes(base.peak_memory_bytes)}): raise "
                            f"{option('max_memory')}, or make the model or its batch smaller"))
    if not pool:
        tried = [t for t in ev.study.trials if t.measured and t.role != Role.BASELINE]
        why = ("no other configuration ran successfully within the budget" if tried
               else "nothing but the defaults was measured within the budget")
        return Verdict(State.NO_GAIN, base.number, None, None, (), False, False, f"keep PyTorch's defaults: {why}")
    if not ev.noise.known:
        leader = max(pool, key=lambda n: ev.configs[n].samples_per_s)
        s = quoted(ev.speedup(leader))
        return Verdict(State.NO_GAIN, base.number, leader, s, (leader,), ev.configs[leader].confirmed, False,
                       f"keep the defaults for now: the noise between processes is not measured yet, so no claim; the "
                       f"fastest so far is #{leader} at {quoted_text(s)} the speed of the defaults")
    # A figure is a claim only with an interval from enough processes of its own configuration; the others are
    # compared, but never claimed (the defaults' noise is not lent to them).
    decided = [n for n in pool if claimable(ev, n)]
    undecided = [n for n in pool if n not in decided]
    choice = ev.choose(decided) if decided else stats.Choice(str(base.number), str(base.number), (), False, False)
    # a configuration too little measured to claim may be recommended unconfirmed only when no race, or one that chose
    # or ran out of time, measured it less than a claim needs: a race that found nothing separated said so
    races = ev.study.races()
    hopeful = (max(undecided, key=lambda n: ev.configs[n].samples_per_s, default=None)
               if not races or races[-1][1].stop in (RaceStop.TIME, RaceStop.CHOSEN, RaceStop.SETTLED) else None)
    if hopeful is not None and not beyond_steady_noise(ev, hopeful):
        hopeful = None
    if not choice.significant:
        if hopeful is not None:
            return unconfirmed(ev, hopeful, tuple(int(k) for k in choice.tied))
        leader = max(pool, key=lambda n: ev.configs[n].samples_per_s)
        s = quoted(ev.speedup(leader))
        tied = tuple(int(k) for k in choice.tied) or (leader,)
        what = knobs.short(ev.configs[leader].config) if ev.configs[leader].changes else "defaults"
        return Verdict(State.NO_GAIN, base.number, leader, s, tied, ev.configs[leader].confirmed, False,
                       f"keep the defaults: no configuration beats PyTorch's defaults beyond the noise; the fastest, "
                       f"#{leader} ({what}), measured {quoted_text(s)}")
    leader = int(choice.leader)
    winner = int(choice.winner)
    tied = tuple(int(k) for k in choice.tied)
    confirmed = ev.configs[leader].confirmed
    s = ev.speedup(winner)
    assert s is not None
    c = ev.configs[winner]
    text = (f"use #{winner} ({changes_text(c.changes)}): {s.text()} as fast as PyTorch's defaults "
            f"({int(round(100 * stats.LEVEL))}% interval, {plural(c.processes, 'process')} against "
            f"{s.reference_processes})")
    details = []
    if choice.simpler_than_leader:
        details.append(f"preferred over #{leader}, which looked faster ({ev.speedup(leader).text()}) but is not "  # type: ignore[union-attr]
                       f"separated from it by the evidence, because it changes fewer knobs")
    elif len(tied) > 1:
        details.append(f"{len(tied) - 1} other configuration(s) were as fast within the noise")
    if hopeful is not None and ev.configs[hopeful].samples_per_s > c.samples_per_s:
        h = ev.configs[hopeful]
        details.append(f"#{hopeful} ({changes_text(h.changes)}) looked faster, {estimate_text(ev, hopeful)}, but in "
                       f"too few processes to confirm")
    if not confirmed:
        details.append(f"not confirmed by a race (run with {option('confirm')})")
    return V.detailed(Verdict(State.GAIN, winner, leader, s, tied, confirmed, choice.simpler_than_leader, Said(text)),
                      *details)


def unclaimed(ev: Any, verdict: Verdict) -> Verdict:
    """A verdict of no gain names every configuration whose figure (the search's and the race's, which run high for
    what they chose) lies wholly above the defaults', with why it is not taken: a table must not show a speed-up
    beyond the noise beside "no gain" without saying why."""
    if verdict.state != State.NO_GAIN or ev.baseline is None:
        return verdict
    named = set(V.named(verdict))
    above = [n for n in sorted(ev.configs) if n != ev.baseline.number and n not in named and ev.configs[n].feasible
             and (s := ev.speedup(n)) is not None and s.above_one()]
    if not above:
        return verdict
    listed = ", ".join(f"#{n} ({changes_text(ev.configs[n].changes)}) {ev.speedup(n).text()}" for n in above)  # type: ignore[union-attr]
    return V.detailed(verdict, f"not taken: {listed}, figures of the search and the race, which run high for what "
                               f"they chose, and {'none was' if len(above) > 1 else 'it was not'} confirmed apart")


def claimable(ev: Any, number: int) -> bool:
    """A configuration's speed-up may be claimed: it has an interval, from :data:`autotune.evidence.claim.
    MIN_PROCESSES` processes or more (of its own, or shared with the defaults)."""
    s = ev.speedup(number)
    return s is not None and s.has_interval and s.processes >= CL.MIN_PROCESSES


def beyond_steady_noise(ev: Any, number: int) -> bool:
    """A configuration measured in too few processes for a claim looks faster than the defaults by more than the
    defaults' own spread could make it (their noise used only to rule out, never to claim) and than the
    indifference zone."""
    c, base = ev.configs[number], ev.baseline
    assert base is not None
    if c.samples_per_s <= base.samples_per_s * (1.0 + INDIFFERENCE):
        return False
    steady = ev.noise_of(base.number)
    if not steady.known:
        return False
    return stats.ratio(c.claim, base.claim, steady, ev.comparisons).above_one()  # the fastest of many runs high


def estimate_text(ev: Any, number: int) -> str:
    s = ev.speedup(number)
    n = ev.configs[number].processes
    return f"{s.estimate:.2f}x in {plural(n, 'process')}" if s is not None else "-"


def unconfirmed(ev: Any, number: int, tied: tuple[int, ...] = ()) -> Verdict:
    """The verdict when the fastest configuration has too few processes for a claim: recommended, not confirmed,
    with no interval."""
    assert ev.baseline is not None
    c = ev.configs[number]
    s = ev.speedup(number)
    text = (f"use #{number} ({changes_text(c.changes)}): it measured {estimate_text(ev, number)} the speed of "
            f"PyTorch's defaults, not confirmed, so no interval (a claim needs {plural(CL.MIN_PROCESSES, 'process')} "
            f"of it; run again to confirm it, with a longer {option('time_budget')} or more {option('confirm')})")
    return Verdict(State.UNCONFIRMED, number, number, s, tied, c.confirmed, False, Said(text))
