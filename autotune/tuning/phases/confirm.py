"""The claim, measured apart: the race's choice reduced to the knobs that pay, and its speed-up measured again in
fresh processes interleaved with PyTorch's defaults (:mod:`autotune.evidence.claim` says why and how it is read).

After the race has chosen (:func:`autotune.evidence.Evidence.chosen`), the least change is proposed: the shortest
configuration that what each knob bought found to keep the gain (measured in shared processes, where they are
sound), else the chosen configuration without the knobs whose effect the search cannot tell from the noise, the
batch size first (:func:`autotune.evidence.claim.propose`). A reduced configuration never measured is measured once
as a trial of its own (role ``minimal``, beyond the budget): its memory is known, every view can name it, and that
first process is already a fresh one. Then round after round (``confirm-<id>-<k>``), the defaults, the chosen
configuration and the reduced one are each measured once more in a process of its own, in a rotating order, until
the recommendation has the fresh processes its plan fixed from the chosen configuration's noise
(:func:`autotune.evidence.claim.processes_needed`, at least :data:`autotune.evidence.claim.MIN_PROCESSES`) or the
rounds are spent; the reduced configuration leaves as soon as it is slower than the chosen one beyond the noise,
and once the reduction is decided its claim rests on its processes after that round (those before chose it). The
plan and its state are a record (``confirm:<id>``), so a stopped run resumes it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from autotune import clock
from autotune.store.records import Role
from autotune import knobs
from autotune.evidence import claim as CL
from autotune.evidence import deciding as D
from autotune.evidence import evidence_of
from autotune.evidence.stats import Noise
from autotune.store import LiveStudy
from autotune.store.plans import ConfirmRecord, ConfirmStop, RoundId
from autotune.store.writing import owner
from autotune.tuning.phases.bench import Bench, rounds_begun
from autotune.tuning.phases.sharing import owned_elsewhere
from autotune.tuning.phases.outcomes import TrialRecord
from autotune.tuning.phases.phase import Phase
from autotune.tuning.phases.search import Search
from autotune.units import plural
from autotune.tuning.phases.session import fits, process_s


@dataclass
class ConfirmReport:
    """What this run measured of a claim: the configurations, its rounds and processes, and why it stopped."""

    confirm_id: str
    chosen: int
    reduced: int | None
    rounds: int = 0
    processes: int = 0
    stop: ConfirmStop | None = None
    records: list[TrialRecord] = field(default_factory=list)  # the reduced configuration's own trial, when measured


def run(live: LiveStudy, bench: Bench, search: Search, rounds: int = CL.ROUNDS, deadline: float | None = None
        ) -> ConfirmReport | None:
    """Measure the claim of the race's choice apart from the search (see the module's docstring); resumes a claim a
    stopped run left; nothing when the race chose nothing, or the claim is done."""
    view = live.view()
    ev = evidence_of(view)
    chosen = ev.chosen()
    fastest = chosen is None
    if fastest:  # no gain beyond the noise: the claim bounds the fastest, so that answer comes with its interval
        chosen = ev.fastest()
    if chosen is None or ev.baseline is None or view.races() == []:
        return None
    race_id = view.races()[-1][0]
    found = [(i, r) for i, r in view.confirms() if r.race_id == race_id]
    if found:
        confirm_id, record = found[-1]
        if record.done:
            return None
        if owned_elsewhere(live, record.owner):
            return None
    else:
        confirm_id, record = _plan(live, ev, chosen, race_id, deadline, fastest)
    report = ConfirmReport(confirm_id, record.chosen, record.reduced)
    if record.reverted and record.reduced is None:  # the reduced configuration is measured first, on its own
        rec = _measure_reduced(live, search, ev, record, deadline)
        if rec is None:
            return report
        report.records.append(rec)
        report.processes += 1
        record = replace(record, reduced=rec.number if rec.duplicate_of is None else rec.duplicate_of)
        live.save_confirm(confirm_id, record)
        report.reduced = record.reduced
    base = ev.baseline.number
    while True:
        view = live.view()
        ev = evidence_of(view)
        done = rounds_begun(view, RoundId.CLAIM, confirm_id)  # confirm-<id>-<k>
        report.rounds = done
        if ev.configs.get(record.chosen) is None or ev.configs[record.chosen].failed_repeats:
            record = replace(record, stop=ConfirmStop.FAILED)
            break
        if record.reduced is not None and record.reduction is not False and (
                ev.configs.get(record.reduced) is None or ev.configs[record.reduced].failed_repeats):
            record = replace(record, reduction=False)  # it failed when measured: the chosen configuration stands
            live.save_confirm(confirm_id, record)
        if record.reduced is not None and record.reduction is None:
            # the search's proposal, decided by measurement (autotune.evidence.claim.reduction_holds); the reduced
            # configuration's processes up to here chose it: its claim rests on those after
            holds = CL.reduction_holds(CL.reduction_ratio(ev, record.reduced, record.chosen), done)
            if holds is not None:
                record = replace(record, reduction=holds, decided_at=done)
                live.save_confirm(confirm_id, record)
        deciding = record.reduced is not None and record.reduction is None
        target = record.reduced if record.reduced is not None and record.reduction is not False else record.chosen
        taken = CL.fresh(ev, target, CL.after_decision(record, target))
        if not deciding and _enough(record, ev, target, taken):
            record = replace(record, stop=ConfirmStop.PROCESSES if record.processes else ConfirmStop.WIDTH)
            break
        if done >= rounds:
            record = replace(record, stop=ConfirmStop.ROUNDS)
            break
        numbers = CL.round_of(done, target, record.chosen if deciding else None, base, len(CL.fresh(ev, target)),
                             len(CL.defaults_pool(ev)))
        if not fits(deadline, process_s(view, [target])):
            record = replace(record, stop=ConfirmStop.TIME)
            break
        what = f"the claim, round {done + 1} of at most {rounds}"
        for number in numbers:
            if not fits(deadline, process_s(view, [number])):
                break
            rate = bench.again(live, number, RoundId(RoundId.CLAIM, confirm_id, done + 1).format(),
                               ev.configs[number].config)
            report.processes += 1
            bench.told(what, number, rate)
    record = replace(record, done=True, rounds=report.rounds)
    live.save_confirm(confirm_id, record)
    report.stop = record.stop
    return report


def _enough(record: ConfirmRecord, ev: Any, target: int, taken: list[Any]) -> bool:
    """The claim has what its plan asked: the recommendation's fresh processes (a claim planned before that: the
    width its noise allows)."""
    if record.processes:
        return len(taken) >= record.processes
    figure = CL.claim_of(ev, target, CL.after_decision(record, target))
    width = CL.wide(figure) if figure is not None else None
    return width is not None and width <= CL.width_target(ev.noise.sigma)


def _plan(live: LiveStudy, ev: Any, chosen: int, race_id: str, deadline: float | None = None, fastest: bool = False
          ) -> tuple[str, ConfirmRecord]:
    """The claim's plan: the chosen configuration, the least change proposed for it (none when the time left cannot
    hold deciding it: the chosen configuration is then claimed whole, and says so; none for the fastest of a race that
    chose nothing, claimed as measured; on a busy machine either without its load-sensitive knobs), the processes to
    measure."""
    c = ev.configs[chosen]
    base = ev.baseline.config
    ab = ev.ablation()
    reduced: int | None = None
    rows = [(m.config, m.samples_per_s) for m in ev.configs.values()]
    measured = ab is not None and ab.settled and ab.winner == chosen
    if measured:
        # what each knob bought was measured in shared processes: its smallest configuration is the least change ...
        reverted = {k: c.config[k] for k in ab.dropped}
        reduced = ab.minimal
        judged = [k for s in ab.steps if not s.within_process and s.kept for k in s.added]
        if judged:
            # ... but a step measured between processes was judged on the measurements that chose the winner (they run
            # high): the knobs the search shows no effect for are proposed too, with the steps in one process that
            # bought nothing, and the claim's own rounds decide
            idle = [k for s in ab.steps if s.within_process and not s.pays for k in s.added]
            proposed = CL.propose({k: c.config[k] for k in judged}, rows, ev.noise.sigma, keep_one=False)
            if proposed:
                reverted.update({k: c.config[k] for k in [*idle, *proposed]})
                measured, reduced = False, None
    elif fastest:
        reverted = {}
    else:
        reverted = {k: c.config[k] for k in CL.propose(c.changes, rows, ev.noise.sigma)}
    if c.changes and set(reverted) >= set(c.changes):  # never the defaults themselves: the race chose a change
        reverted = {k: c.config[k] for k in CL.propose(c.changes, rows, ev.noise.sigma)}
        measured, reduced = False, None
    loaded = {k: c.config[k] for k in c.changes if D.sensitive_knob(k)} if ev.load.was_busy else {}
    if loaded and not set(loaded) >= set(c.changes):
        # On a busy machine a load-sensitive knob (threads, loader workers) is reverted by itself, never the whole gain
        # with it: what a quiet machine could contradict is not claimed. Decided, not measured against the chosen
        # configuration (which the load flattered); the knobs proposed from the search's figures stay as chosen.
        reverted = dict(reverted) if measured else {}
        reverted.update(loaded)
        measured, reduced = True, None
    if reverted:
        config = {**c.config, **{k: base[k] for k in reverted}}
        key = knobs.resolve(config, knobs.Context.from_dict(ev.study.context)).key() if ev.study.context else None
        same = [n for n, m in ev.configs.items() if key is not None and m.key == key]
        if same:
            reduced = same[0]
        if key is not None and key == c.key:
            reverted = {}
    # How many fresh processes: what the chosen configuration's noise asks, fixed now, before any of them is seen (a
    # claim that stopped once its interval looked narrow enough would stop on processes that happened to agree, and
    # cover the truth less often than it says). Its own spread where it has one, never below the study's pooled noise:
    # no test of whether the spreads differ decides it, and a few processes that agreed by chance plan no shorter.
    spreads = [n.sigma for n in (ev.spreads.get(chosen), ev.noise) if n is not None and n.sigma is not None]
    noise = Noise(max(spreads), 1) if spreads else ev.noise
    processes = CL.processes_needed(noise.sigma)
    unreduced = None
    if (reverted and not measured
            and not fits(deadline, CL.deciding_processes(processes) * process_s(ev.study, [chosen]))):
        unreduced = "the time budget could not hold deciding the least change"  # the claim itself comes first
        reverted, reduced = {}, None
    record = ConfirmRecord(chosen, race_id, clock.now(), reduced if reverted else None, reverted, 0,
                           CL.width_target(noise.sigma), owner(), reduction=True if measured and reverted else None,
                           processes=processes, unreduced=unreduced, fastest=fastest)
    confirm_id = uuid.uuid4().hex[:8]
    live.save_confirm(confirm_id, record)
    return confirm_id, record


def _measure_reduced(live: LiveStudy, search: Search, ev: Any, record: ConfirmRecord, deadline: float | None
                     ) -> TrialRecord | None:
    """The reduced configuration measured once as a trial of its own (role ``minimal``, beyond the budget)."""
    if not fits(deadline, process_s(ev.study, [record.chosen])):
        return None
    config = {**ev.configs[record.chosen].config, **{k: ev.baseline.config[k] for k in record.reverted}}
    params = {name: config[name] for name in search.seeds.space.search if name in config}
    live.enqueue(params, role=Role.MINIMAL)
    return search.trial()


def _line(report: ConfirmReport | None) -> str:
    return (f"; the claim measured apart: {plural(report.rounds, 'round')}, {plural(report.processes, 'process')}"
            if report is not None else "")


#: The claim measured apart, as the tuning loop runs it: unless the run's options leave it out; its reduced
#: configuration's trial is one of the run's.
PHASE = Phase("confirm", "claim", lambda ctx: run(ctx.live, ctx.bench, ctx.search, deadline=ctx.deadline),
              wanted=lambda ctx: ctx.options.confirm, records=lambda report: report.records if report else [],
              line=_line)
