"""The race: at the end, the configurations the evidence cannot separate from the fastest, measured again until
the verdict is settled.

The candidates (:meth:`autotune.evidence.Evidence.race_candidates`) are measured again,
round after round. Given shared processes (``bench.together``: ``AUTOTUNE_PAIRED=1``, see
:data:`autotune.tuning.preparation.PAIRED_ENV`), those that can share a process with the defaults
(every knob they change acts on the arm's own model, optimizer, loader or step, and the
host heap is retained: :func:`autotune.knobs.apart`) are measured alternately with the
defaults in one process per round (:mod:`autotune.trial.paired`), where the process's own speed
cancels in their ratio; the others in a process each, the baseline in every round,
interleaved in a rotating order. After each round a candidate leaves once it cannot change
the verdict (slower than the fastest or the defaults beyond the noise, neither faster than the
winner nor simpler, or faster by no more than ``INDIFFERENCE``, an equivalent: :func:`_decide`),
so measurements go to the comparisons still undecided. The race stops at a planned look (:func:`look_rounds`) once
the verdict is
settled, at once when it cannot end in a claim, or after ``rounds`` rounds (the
``--confirm`` budget). Claims are adjusted for the looks.

Every re-measurement is a record of its own (``measurement:race-<id>-<k>:<trial>``, or
``paired:pair-<id>-<k>-<g>`` for a shared process) and the race's plan and state one more
(``race:<id>``), so a race stopped half-way resumes on the next run, and two processes never
overwrite each other's measurements.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from autotune import clock
from autotune import knobs
from autotune import result as R
from autotune.evidence import Evidence, evidence_of
from autotune.tuning.phases.bench import Bench, rounds_begun
from autotune.tuning.phases.sharing import owned_elsewhere
from autotune.tuning.phases.phase import Phase
from autotune.units import plural
from autotune.tuning.phases.session import fits, process_s
from autotune.evidence.choices import INDIFFERENCE  # a rival not more than 3% faster than the choice is equivalent
from autotune.evidence.stats import t_quantile
from autotune.store import LiveStudy, StoredStudy
from autotune.store.plans import RaceRecord, RaceStop, RoundId
from autotune.store.writing import owner

MAX_CANDIDATES = 2  # the race selects (its claim is measured apart): the two fastest, and the simplest and the recipe
# while the noise cannot tell them from the fastest (autotune.evidence.Evidence.race_candidates)
MIN_ROUNDS = 2  # rounds before a race of separate processes may claim a winner (its claim is measured apart since)
FUTILE_FROM = 3  # rounds before a race may call itself futile: one unlucky process must not end it
MIN_ROUNDS_WITHIN = 2  # ... of shared processes only: two give the within-process noise its degrees of freedom
MAX_ARMS = 5  # configurations one process measures alternately: the defaults and up to four candidates


@dataclass
class RaceReport:
    """What this run's race did: its candidates, rounds, measurements and processes, who left and why it stopped."""

    race_id: str
    candidates: list[int]
    rounds: int = 0
    measurements: int = 0  # configurations measured (an arm of a shared process counts as one)
    processes: int = 0  # processes started for them
    eliminated: dict[int, str] = field(default_factory=dict)
    stop: RaceStop | None = None
    stopped: str = ""  # the stop in words
    within: list[int] = field(default_factory=list)  # candidates measured alternately with the defaults in one process
    looks: int = 1


def look_rounds(min_rounds: int, rounds: int) -> list[int]:
    """The rounds after which a race may stop: ``min_rounds``, then each doubling, and the budget's last.
    Few looks, so that adjusting the claim for them (:mod:`autotune.evidence.stats`) costs little width."""
    if rounds <= min_rounds:
        return [max(1, rounds)]
    out = []
    k = min_rounds
    while k < rounds:
        out.append(k)
        k *= 2
    return [*out, rounds]


def run(live: LiveStudy, bench: Bench, rounds: int, max_candidates: int = MAX_CANDIDATES, min_rounds: int = MIN_ROUNDS,
        deadline: float | None = None) -> RaceReport | None:
    """Race the candidates tied with the fastest; resumes a race a stopped run left unfinished.

    A race covers the trials measured when it started; once the study holds more, a new race
    starts (the earlier rounds still count as evidence). Candidates that can share a process
    with the defaults (:func:`autotune.knobs.apart`) are measured alternately with them in one
    process per round (``bench.together``; their noise is the within-process one, so two rounds
    may settle them); the others, and all of them without ``together``, in a process each
    (``bench.again``), the baseline in every round. After each round the candidates that can no
    longer change the verdict leave (:func:`_decide`); at the planned looks (:func:`look_rounds`)
    the race stops once the verdict is settled, or cannot be. ``deadline`` (epoch seconds, from
    ``--time-budget``): no process starts after it. Each measurement is told to the bench as
    ``("race round K of at most N", trial, samples/s)`` (``..., in one process`` for the shared ones).
    """
    if rounds <= 0:
        return None
    view = live.view()
    ev = evidence_of(view)
    if ev.baseline is None:
        return None
    together = bench.together
    base = ev.baseline.number
    measured = sum(1 for t in view.trials if t.measured)
    races = view.races()
    latest = races[-1] if races else None
    if latest and latest[1].measured == measured:
        race_id, record = latest
        if not record.done and owned_elsewhere(live, record.owner):
            return None  # another live process runs this race
        extend = record.stop is RaceStop.ROUNDS and rounds > record.rounds_run
        if record.done and not extend:
            return None
        candidates = list(record.candidates)
        within = list(record.within) if together is not None else []
        first = record.min_rounds or min_rounds
        if extend:
            record = replace(record, rounds=rounds, looks=len(look_rounds(first, rounds)), done=False)
            live.save_race(race_id, record)
    else:
        candidates = ev.race_candidates(max_candidates)
        if not candidates:
            return None
        # Shared processes need two rounds before their noise is known (--confirm 1 races in separate processes).
        within = [n for n in candidates if together is not None and rounds >= MIN_ROUNDS_WITHIN
                  and knobs.apart([ev.baseline.config, ev.configs[n].config]) is None]
        first = MIN_ROUNDS_WITHIN if within and len(within) == len(candidates) else min_rounds
        race_id = uuid.uuid4().hex[:8]
        record = RaceRecord(tuple(candidates), measured, rounds, clock.now(), tuple(within), first,
                            len(look_rounds(first, rounds)), owner=owner())
        live.save_race(race_id, record)
    looks = look_rounds(first, rounds)
    report = RaceReport(race_id, candidates, within=within, looks=len(looks))
    alive = list(candidates)
    while True:
        view = live.view()
        ev = evidence_of(view)
        report.rounds = rounds_begun(view, RoundId.RACE, race_id, RoundId.PAIR)  # race-<id>-<k>, pair-<id>-<k>-<g>
        alive = _failed_out(ev, alive, report)
        if not alive:
            report.stop, report.stopped = RaceStop.FAILED, "every candidate failed when measured again"
            break
        if report.rounds >= 1:  # leaving the race, or its choice, is no claim: from the first round on
            alive, stop = _decide(ev, alive, report, report.rounds, rounds)
            # A stop that ends in a claim waits for a planned look (the claim is adjusted for them); one that
            # ends without a claim (futile, everything slower) can come at any round.
            if stop and (report.rounds in looks or stop[0] is not RaceStop.SETTLED):
                report.stop, report.stopped = stop
                break
        if report.rounds >= rounds:
            report.stop, report.stopped = RaceStop.ROUNDS, f"budget of {rounds} rounds spent (--confirm)"
            break
        if not fits(deadline, _round_s(view, base, alive, within)):  # a round begun and cut teaches nothing
            report.stop, report.stopped = RaceStop.TIME, "time budget spent (--time-budget)"
            break
        k = report.rounds
        what = f"race round {k + 1} of at most {rounds}"

        def late(numbers: list[int]) -> bool:  # no process starts that would end past the deadline, in a round too
            return not fits(deadline, process_s(view, numbers))

        shared = [n for n in alive if n in within]
        for g in range(0, len(shared), MAX_ARMS - 1):
            numbers = [base, *shared[g:g + MAX_ARMS - 1]]
            if late(numbers):
                break
            rates, result = bench.shared(live, RoundId(RoundId.PAIR, race_id, k + 1, g // (MAX_ARMS - 1)).format(),
                                         [ev.configs[n].key for n in numbers], numbers,
                                         [ev.configs[n].config for n in numbers], race=race_id)
            report.processes += 1
            for n, rate, arm in zip(numbers, rates, result.arms or [{}] * len(numbers)):
                report.measurements += 1
                bench.told(f"{what}, in one process", n, rate, shared=True)
                if arm.get("outcome") == R.OOM and n != base and n in within:
                    # out of memory beside the other arms (a GPU holds them all): measure it alone from now on
                    within.remove(n)
                    record = replace(record, within=tuple(within))
                    live.save_race(race_id, record)
        apart = [n for n in alive if n not in within]
        if apart:
            order = [base, *apart]
            order = order[k % len(order):] + order[: k % len(order)]  # rotate: nobody is always first
            for number in order:
                if late([number]):
                    break
                rate = bench.again(live, number, RoundId(RoundId.RACE, race_id, k + 1).format(),
                                   ev.configs[number].config)
                report.measurements += 1
                report.processes += 1
                bench.told(what, number, rate)
    record = replace(record, done=True, stop=report.stop, stopped=report.stopped, rounds_run=report.rounds,
                     eliminated=dict(report.eliminated))
    live.save_race(race_id, record)
    return report


def _round_s(view: StoredStudy, base: int, alive: list[int], within: list[int]) -> float:
    """About how long a round takes: the shared processes of the candidates measured beside the defaults, the
    others' and the defaults' processes of their own."""
    shared = [n for n in alive if n in within]
    apart = [n for n in alive if n not in within]
    groups = [[base, *shared[g:g + MAX_ARMS - 1]] for g in range(0, len(shared), MAX_ARMS - 1)]
    return sum(process_s(view, g) for g in groups) + (process_s(view, [base, *apart]) if apart else 0.0)


def _failed_out(ev: Evidence, alive: list[int], report: RaceReport) -> list[int]:
    """Candidates that failed when measured again leave the race."""
    keep = []
    for n in alive:
        c = ev.configs.get(n)
        if c is None or c.failed_repeats:
            report.eliminated.setdefault(n, "failed when measured again")
            continue
        keep.append(n)
    return keep


Stop = tuple[RaceStop, str]  # why a race stops, and that in words


def _decide(ev: Evidence, alive: list[int], report: RaceReport, done: int,
            budget: int) -> tuple[list[int], Stop | None]:
    """Which candidates stay in the race, and whether the choice is made (why, or None).

    The race selects; its claim is measured apart (:mod:`autotune.tuning.phases.confirm`), so every decision here is
    taken at the plain 90% level. A candidate leaves when it is slower than the fastest beyond the noise, slower
    than the defaults beyond the noise, cannot be more than :data:`INDIFFERENCE` faster than the choice (then the
    two are equivalent for a user), or could not separate from the choice within the budget. The choice
    (:meth:`autotune.evidence.Evidence.pick`) is the simplest of the fastest and those shown within the
    indifference zone of it; the knobs it changes that buy nothing are left out afterwards, by measurement. The race
    cannot choose when the fastest would not beat the defaults within the budget (futile): no gain.
    """
    assert ev.baseline is not None
    base = ev.baseline.number
    leader = max(alive, key=lambda n: ev.configs[n].samples_per_s)
    keep = []
    for n in alive:
        if n != leader and ev.compare(n, leader, claim=False).below_one():
            report.eliminated.setdefault(n, f"slower than #{leader} beyond the noise")
        elif ev.compare(n, base, claim=False).below_one():
            report.eliminated.setdefault(n, "slower than the defaults beyond the noise")
        else:
            keep.append(n)
    if not keep:
        return keep, (RaceStop.SLOWER, "every candidate is slower than the defaults beyond the noise")
    leader = max(keep, key=lambda n: ev.configs[n].samples_per_s)
    lead = ev.compare(leader, base, claim=False)
    if not lead.above_one():
        if done >= FUTILE_FROM and _futile(lead, done, budget):
            return keep, (RaceStop.FUTILE, "futile: at this rate the fastest would not separate from the defaults "
                                           "within the budget")
        return keep, None
    chosen = ev.pick(keep)
    contenders = []
    for n in keep:
        if n == chosen:
            continue
        versus = ev.compare(n, chosen, claim=False)
        if versus.high is not None and versus.high <= 1.0 + INDIFFERENCE:
            report.eliminated.setdefault(n, f"not more than {100 * INDIFFERENCE:.0f}% faster than #{chosen}: "
                                            "equivalent")
        elif _futile(versus, done, budget):
            # two configurations that are truly alike never separate: measuring them until the budget is spent
            # teaches nothing, and the knobs of the choice that buy nothing are left out afterwards anyway
            report.eliminated.setdefault(n, f"cannot change the choice of #{chosen} within the budget")
        else:
            contenders.append(n)
    if not contenders:
        return [chosen], (RaceStop.CHOSEN, f"chosen: #{chosen}, which nobody left could beat by more than "
                                           f"{100 * INDIFFERENCE:.0f}%")
    return [chosen, *contenders], None


def _futile(s: Any, done: int, budget: int) -> bool:
    """A ratio's interval includes 1, and would still include it at the end of the budget even were its
    estimate to grow by half again: for the fastest against the defaults, a race that cannot end in a claim
    stops, and the answer is "no gain beyond the noise"; for a contender against the winner, the question is
    left (they are alike, as far as the budget can tell). The projection narrows the interval as
    1/sqrt(rounds), and its t quantile as the noise's degrees of freedom grow with the rounds (two processes
    of two configurations give one degree of freedom, whose quantile alone is ten times a large sample's)."""
    if not s.includes_one() or not s.has_interval or s.estimate <= 0:
        return bool(s.has_interval and s.below_one())
    half_now = (math.log(s.high) - math.log(s.low)) / 2
    scale = math.sqrt(done / budget) if budget > done else 1.0
    if s.df and budget > done:
        tests = s.comparisons * s.looks
        scale *= (t_quantile(max(s.df, round(s.df * budget / max(done, 1))), s.level, tests)
                  / t_quantile(s.df, s.level, tests))
    return 1.5 * abs(math.log(s.estimate)) < half_now * scale


def _line(report: RaceReport | None) -> str:
    return (f"; race: {plural(report.rounds, 'round')}, {plural(report.measurements, 'measurement')} in "
            f"{plural(report.processes, 'process')} ({report.stopped})") if report else ""


#: The race, as the tuning loop runs it: its rounds and candidates from the run's options.
PHASE = Phase("race", "race", lambda ctx: run(ctx.live, ctx.bench, ctx.options.race_rounds,
                                              ctx.options.race_candidates, deadline=ctx.deadline), line=_line)
