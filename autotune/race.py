"""Repeat measurements where they change a decision: the noise floor early, the race at the end, then what each
knob of the winner bought.

- **Noise floor.** Right after the baseline trial, the baseline is measured again in
  ``floor`` more processes, so the study knows its machine's noise between processes
  before it compares anything (the cut margin of early stopping, every interval).
- **The race.** At the end, the configurations the evidence does not separate from
  the fastest (:meth:`Evidence.race_candidates`) are measured again, round after round.
  Given shared processes (``together``: ``AUTOTUNE_PAIRED=1``, see
  :data:`autotune.tuning.PAIRED_ENV`), those that can share a process with the defaults
  (every knob they change acts on the arm's own model, optimizer, loader or step, and the
  host heap is retained: :func:`autotune.knobs.apart`) are measured alternately with the
  defaults in one process per round (:mod:`autotune.paired`), where the process's own speed
  cancels in their ratio; the others in a process each, the
  baseline in every round, interleaved in a rotating order. After each round a candidate
  leaves once it cannot change the verdict (slower than the fastest or the defaults beyond
  the noise, or neither faster than the winner nor simpler: :func:`_decide`), so
  measurements go to the comparisons still undecided. The race stops at a planned look
  (:func:`look_rounds`) once the verdict is settled, at once when it cannot end in a claim,
  or after ``rounds`` rounds (the ``--confirm`` budget). Claims are adjusted for the looks.
- **What each knob bought** (:func:`run_ablation`, :mod:`autotune.ablation`; shared processes only, so only
  where the baseline's host heap is retained). A winner that
  changes several knobs gets the path from the defaults to it measured, one knob at a time,
  in a few shared processes; knobs that buy nothing beyond the noise are dropped from the
  recommendation, which is then measured once on its own.

Every re-measurement is a study user attribute of its own (``measurement:<round>:<trial>``,
or ``paired:<round>`` for a shared process), so a race stopped half-way resumes on the
next run, and two processes never overwrite each other's measurements.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import optuna

from autotune import ablation as A
from autotune import knobs
from autotune.store import recovery
from autotune import result as R
from autotune.evidence import MEASUREMENT, PAIRED, RACE, Evidence, is_measured, record_measurement, record_paired

#: ``evaluate(config)`` -> a TrialResult; measures in a fresh process.
Measure = Callable[[Mapping[str, Any]], R.TrialResult]
#: ``together(configs)`` -> a PairedResult; measures the configurations alternately in one fresh process.
Together = Callable[[Sequence[Mapping[str, Any]]], R.PairedResult]
#: Called after each re-measurement: (what, trial number, samples/s or None).
OnMeasure = Callable[[str, int, "float | None"], None]

FLOOR_REPEATS = 2  # the baseline is measured in 1 + this many processes early
MAX_CANDIDATES = 6
MIN_ROUNDS = 3  # rounds before a race of separate processes may stop (the noise between processes is large)
MIN_ROUNDS_WITHIN = 2  # ... of shared processes only: two give the within-process noise its degrees of freedom
MAX_ARMS = 5  # configurations one process measures alternately: the defaults and up to four candidates


def floor_missing(study: optuna.Study, repeats: int = FLOOR_REPEATS, grace_s: float | None = None) -> int:
    """How many noise-floor measurements of the baseline are still for this process to take.

    The process that measured the baseline takes them (so two processes starting on one study
    do not both measure the floor); another process takes over only when that one is gone
    (:func:`_floor_is_mine`).
    """
    ev = Evidence.of(study)
    if ev.baseline is None:
        return 0
    taken = sum(1 for r, _ in ev.baseline.repeats if r.startswith("floor-")) + ev.baseline.failed_repeats
    missing = max(0, repeats - taken)
    if missing and grace_s is not None and not _floor_is_mine(study, ev.baseline.number, grace_s):
        return 0
    return missing


def _floor_is_mine(study: optuna.Study, baseline: int, grace_s: float) -> bool:
    """This process measured the baseline trial, or the process that did is gone (same host: its pid;
    another host: longer ago than ``grace_s``)."""
    trial = next(t for t in study.get_trials(deepcopy=False) if t.number == baseline)
    who = trial.system_attrs.get(recovery.OWNER) or {}
    me = recovery.owner()
    if not who or (who.get("host"), who.get("pid")) == (me["host"], me["pid"]):
        return True
    if who.get("host") == me["host"]:
        return not recovery._pid_alive(int(who.get("pid", -1)))
    finished = trial.datetime_complete.timestamp() if trial.datetime_complete else float(who.get("started", 0))
    return me["started"] - finished > grace_s


def measure_floor(study: optuna.Study, measure: Measure, repeats: int = FLOOR_REPEATS, on_measure: OnMeasure | None = None,
                  grace_s: float | None = None) -> int:
    """Measure the baseline again until it has ``repeats`` floor measurements; returns how many were taken."""
    ev = Evidence.of(study)
    base = ev.baseline
    if base is None:
        return 0
    taken = 0
    for _ in range(floor_missing(study, repeats, grace_s)):
        done = sum(1 for r, _ in Evidence.of(study).baseline.repeats if r.startswith("floor-"))  # type: ignore[union-attr]
        rate = record_measurement(study, base.number, f"floor-{done + 1}-{uuid.uuid4().hex[:6]}", measure(base.config))
        taken += 1
        if on_measure:
            on_measure("floor", base.number, rate)
    return taken


@dataclass
class RaceReport:
    race_id: str
    candidates: list[int]
    rounds: int = 0
    measurements: int = 0  # configurations measured (an arm of a shared process counts as one)
    processes: int = 0  # processes started for them
    eliminated: dict[int, str] = field(default_factory=dict)
    stopped: str = ""
    within: list[int] = field(default_factory=list)  # candidates measured alternately with the defaults in one process
    looks: int = 1


def _state(study: optuna.Study) -> tuple[str, dict[str, Any]] | None:
    """The latest race record of the study, if any."""
    races = [(k[len(RACE):], v) for k, v in study.user_attrs.items() if k.startswith(RACE) and isinstance(v, Mapping)]
    return max(races, key=lambda kv: kv[1].get("started", 0.0)) if races else None


def _measured_count(study: optuna.Study) -> int:
    return sum(1 for t in study.get_trials(deepcopy=False) if is_measured(t))


def look_rounds(min_rounds: int, rounds: int) -> list[int]:
    """The rounds after which a race may stop: ``min_rounds``, then each doubling, and the budget's last.
    Few looks, so that adjusting the claim for them (:mod:`autotune.stats`) costs little width."""
    if rounds <= min_rounds:
        return [max(1, rounds)]
    out = []
    k = min_rounds
    while k < rounds:
        out.append(k)
        k *= 2
    return [*out, rounds]


def _rounds_begun(ev: Evidence, race_id: str) -> int:
    """Rounds of this race with any measurement stored (a failed one counts, so a failing configuration cannot
    loop forever): measurement:race-<id>-<k>:<trial> and paired:pair-<id>-<k>-<g>."""
    begun = set()
    for key in ev.attrs:
        if key.startswith(f"{MEASUREMENT}race-{race_id}-"):
            begun.add(key[len(MEASUREMENT):].rpartition(":")[0].rsplit("-", 1)[1])
        elif key.startswith(f"{PAIRED}pair-{race_id}-"):
            begun.add(key[len(PAIRED):].split("-")[2])
    return len(begun)


def run_race(
    study: optuna.Study,
    measure: Measure,
    rounds: int,
    max_candidates: int = MAX_CANDIDATES,
    min_rounds: int = MIN_ROUNDS,
    on_measure: OnMeasure | None = None,
    deadline: float | None = None,
    together: Together | None = None,
) -> RaceReport | None:
    """Race the candidates tied with the fastest; resumes a race a stopped run left unfinished.

    A race covers the trials measured when it started; once the study holds more, a new race
    starts (the earlier rounds still count as evidence). Candidates that can share a process
    with the defaults (:func:`autotune.knobs.apart`) are measured alternately with them in one
    process per round (``together``; their noise is the within-process one, so two rounds may
    settle them); the others, and all of them without ``together``, in a process each, the
    baseline in every round. After each round the candidates that can no longer change the
    verdict leave (:func:`_decide`); at the planned looks (:func:`look_rounds`) the race stops
    once the verdict is settled, or cannot be. ``deadline`` (epoch seconds, from
    ``--time-budget``): no round starts after it. ``on_measure`` is told each measurement as
    ``("race round K of at most N", trial, samples/s)`` (``..., in one process`` for the shared ones).
    """
    import time

    if rounds <= 0:
        return None
    ev = Evidence.of(study)
    if ev.baseline is None:
        return None
    base = ev.baseline.number
    measured = _measured_count(study)
    latest = _state(study)
    if latest and latest[1].get("measured") == measured:
        race_id, record = latest
        if not record.get("done") and _owned_elsewhere(record):
            return None  # another live process runs this race
        extend = str(record.get("stopped", "")).startswith("budget") and rounds > int(record.get("rounds_run") or 0)
        if record.get("done") and not extend:
            return None
        candidates = [int(n) for n in record.get("candidates", [])]
        within = [int(n) for n in record.get("within", [])] if together is not None else []
        first = int(record.get("min_rounds") or min_rounds)
        if extend:
            record = {**record, "rounds": rounds, "looks": len(look_rounds(first, rounds)), "done": False}
            study.set_user_attr(RACE + race_id, record)
    else:
        candidates = ev.race_candidates(max_candidates)
        if not candidates:
            return None
        # Shared processes need two rounds before their noise is known (--confirm 1 races in separate processes).
        within = [n for n in candidates if together is not None and rounds >= MIN_ROUNDS_WITHIN
                  and knobs.apart([ev.baseline.config, ev.configs[n].config]) is None]
        first = MIN_ROUNDS_WITHIN if within and len(within) == len(candidates) else min_rounds
        race_id = uuid.uuid4().hex[:8]
        record = {"candidates": candidates, "within": within, "measured": measured, "rounds": rounds,
                  "min_rounds": first, "looks": len(look_rounds(first, rounds)), "started": time.time(),
                  "done": False, "owner": recovery.owner()}
        study.set_user_attr(RACE + race_id, record)
    looks = look_rounds(first, rounds)
    report = RaceReport(race_id, candidates, within=within, looks=len(looks))
    alive = list(candidates)
    while True:
        ev = Evidence.of(study)
        report.rounds = _rounds_begun(ev, race_id)
        alive = _failed_out(ev, alive, report)
        if not alive:
            report.stopped = "every candidate failed when measured again"
            break
        if report.rounds >= MIN_ROUNDS_WITHIN:  # leaving the race is no claim: it may come before the first look
            alive, stop = _decide(ev, alive, report, report.rounds, rounds)
            # A stop that ends in a claim waits for a planned look (the claim is adjusted for them); one that
            # ends without a claim (futile, everything slower) can come at any round.
            if stop and (report.rounds in looks or not stop.startswith("settled")):
                report.stopped = stop
                break
        if report.rounds >= rounds:
            report.stopped = f"budget of {rounds} rounds spent (--confirm)"
            break
        if deadline is not None and time.time() >= deadline:
            report.stopped = "time budget spent (--time-budget)"
            break
        k = report.rounds
        what = f"race round {k + 1} of at most {rounds}"

        def late() -> bool:  # no process starts after the deadline, inside a round too
            return deadline is not None and time.time() >= deadline

        shared = [n for n in alive if n in within]
        for g in range(0, len(shared), MAX_ARMS - 1):
            if late():
                break
            numbers = [base, *shared[g:g + MAX_ARMS - 1]]
            result = together(  # type: ignore[misc]
                [ev.configs[n].config for n in numbers])
            rates = record_paired(study, f"pair-{race_id}-{k + 1:02d}-{g // (MAX_ARMS - 1)}",
                                  [ev.configs[n].key for n in numbers], numbers, result, race=race_id)
            report.processes += 1
            for n, rate, arm in zip(numbers, rates, result.arms or [{}] * len(numbers)):
                report.measurements += 1
                if on_measure:
                    on_measure(f"{what}, in one process", n, rate)
                if arm.get("outcome") == R.OOM and n != base and n in within:
                    # out of memory beside the other arms (a GPU holds them all): measure it alone from now on
                    within.remove(n)
                    record = {**record, "within": list(within)}
                    study.set_user_attr(RACE + race_id, record)
        apart = [n for n in alive if n not in within]
        if apart:
            order = [base, *apart]
            order = order[k % len(order):] + order[: k % len(order)]  # rotate: nobody is always first
            for number in order:
                if late():
                    break
                rate = record_measurement(study, number, f"race-{race_id}-{k + 1:02d}", measure(ev.configs[number].config))
                report.measurements += 1
                report.processes += 1
                if on_measure:
                    on_measure(what, number, rate)
    record = {**record, "done": True, "stopped": report.stopped, "rounds_run": report.rounds, "eliminated": {str(k): v for k, v in report.eliminated.items()}}
    study.set_user_attr(RACE + race_id, record)
    return report


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


def _decide(ev: Evidence, alive: list[int], report: RaceReport, done: int, budget: int) -> tuple[list[int], str | None]:
    """Which candidates stay in the race, and whether the verdict is settled (why, or None).

    Leaving the race is a decision about where to spend measurements, not a claim, so it is
    taken at the plain 90% level. A candidate leaves when it is slower than the fastest beyond
    the noise, slower than the defaults beyond the noise, or can no longer change the verdict:
    once a winner beats the defaults beyond the noise, only a candidate that might still prove
    faster than it, or one that changes fewer knobs and might still separate from the defaults,
    is measured again. The verdict is settled when nobody else could change it; it cannot be
    settled when the fastest would not separate from the defaults within the budget (futile).
    """
    leader = max(alive, key=lambda n: ev.configs[n].samples_per_s)
    speed = {n: ev.speedup(n) for n in alive}
    keep = []
    for n in alive:
        if n != leader and ev.compare(n, leader, claim=False).below_one():
            report.eliminated.setdefault(n, f"slower than #{leader} beyond the noise")
        elif speed[n] is not None and speed[n].below_one():  # type: ignore[union-attr]
            report.eliminated.setdefault(n, "slower than the defaults beyond the noise")
        else:
            keep.append(n)
    if not keep:
        return keep, "every candidate is slower than the defaults beyond the noise"
    choice = ev.choose(keep)
    if not choice.significant:
        lead = int(choice.leader)
        s = speed[lead]
        if s is not None and _futile(s, done, budget):
            return keep, "futile: at this rate the fastest would not separate from the defaults within the budget"
        return keep, None
    winner = int(choice.winner)
    tied = {int(k) for k in choice.tied}
    changes = {n: len(ev.configs[n].changes) for n in keep}
    contenders = []
    for n in keep:
        if n == winner:
            continue
        # Each question stays open only while the budget could still answer it (_futile): two configurations
        # that are truly alike never separate, and measuring them until the budget is spent teaches nothing.
        s = speed[n]
        simpler = (changes[n] < changes[winner] and n in tied and s is not None and s.includes_one()
                   and not _futile(s, done, budget))
        versus = ev.compare(n, winner, claim=False)
        faster = (ev.configs[n].samples_per_s > ev.configs[winner].samples_per_s and versus.includes_one()
                  and not _futile(versus, done, budget))
        if simpler or faster:
            contenders.append(n)
        else:
            report.eliminated.setdefault(n, f"cannot change the verdict for #{winner} within the budget")
    if not contenders:
        return [winner], f"settled: #{winner} beats the defaults beyond the noise"
    return [winner, *contenders], None


def _owned_elsewhere(record: Mapping[str, Any]) -> bool:
    """The race was started by another process that is still alive (same host) or recently started (another host)."""
    who = record.get("owner") or {}
    if not who:
        return False
    me = recovery.owner()
    if (who.get("host"), who.get("pid")) == (me["host"], me["pid"]):
        return False
    if who.get("host") == me["host"]:
        return recovery._pid_alive(int(who.get("pid", -1)))
    return me["started"] - float(who.get("started", 0)) < 6 * 3600


def _futile(s: Any, done: int, budget: int) -> bool:
    """A ratio's interval includes 1, and would still include it at the end of the budget even were its
    estimate to grow by half again: for the fastest against the defaults, a race that cannot end in a claim
    stops, and the answer is "no gain beyond the noise"; for a contender against the winner, the question is
    left (they are alike, as far as the budget can tell). The projection narrows the interval as
    1/sqrt(rounds), and its t quantile as the noise's degrees of freedom grow with the rounds (two processes
    of two configurations give one degree of freedom, whose quantile alone is ten times a large sample's)."""
    import math

    from autotune.stats import t_quantile

    if not s.includes_one() or not s.has_interval or s.estimate <= 0:
        return bool(s.has_interval and s.below_one())
    half_now = (math.log(s.high) - math.log(s.low)) / 2
    scale = math.sqrt(done / budget) if budget > done else 1.0
    if s.df and budget > done:
        tests = s.comparisons * s.looks
        scale *= t_quantile(max(s.df, round(s.df * budget / max(done, 1))), s.level, tests) / t_quantile(s.df, s.level, tests)
    return 1.5 * abs(math.log(s.estimate)) < half_now * scale


@dataclass
class AblationReport:
    ablation_id: str
    winner: int
    path: list[str]  # the knobs, in the order they were added
    processes: int = 0  # processes this run started (each measured the whole path)
    stopped: str = ""


def run_ablation(
    study: optuna.Study,
    together: Together,
    ctx: knobs.Context,
    on_measure: OnMeasure | None = None,
    rounds: int = A.ROUNDS,
    deadline: float | None = None,
) -> AblationReport | None:
    """Measure what each knob of the race's winner bought (:mod:`autotune.ablation`): the path from the
    defaults to the winner, one knob at a time, every point of it in each of ``rounds`` shared processes.

    Only for a winner that beats the defaults and changes several knobs, some of which can share a
    process (:func:`autotune.knobs.per_arm`); the knobs that cannot are the path's last step, measured
    between processes. Resumes an unfinished ablation of the same winner; does nothing once it is done.
    """
    import time

    ev = Evidence.of(study)
    verdict = ev.verdict(ablated=False)
    if verdict.state != "gain" or verdict.winner is None or ev.baseline is None:
        return None
    winner = ev.configs[verdict.winner]
    inside, apart = knobs.per_arm(winner.changes)
    if len(winner.changes) < 2 or not inside:
        return None
    base = ev.baseline.config
    if knobs.apart([base, {**base, **inside}]) is None:
        first = False  # the path from the defaults shares processes; the process-wide knobs are its last step
    elif apart and knobs.apart([{**base, **apart}, {**base, **apart, **inside}]) is None:
        first = True  # only with the winner's process-wide knobs (the host heap retained): they are its first step
        rounds = max(rounds, A.ROUNDS_ALONE)
    else:
        return None
    plans = [(k[len(A.ABLATION):], v) for k, v in study.user_attrs.items()
             if k.startswith(A.ABLATION) and isinstance(v, Mapping) and v.get("winner_key") == winner.key]
    report: AblationReport | None = None
    if plans:
        ablation_id, plan = max(plans, key=lambda kv: kv[1].get("started", 0.0))
        if _owned_elsewhere(plan) and not plan.get("done"):
            return None
        if not plan.get("done"):
            report = _measure_path(study, together, ablation_id, plan, ev, winner.number, rounds, deadline, on_measure)
    else:
        ordered = A.order(inside, [(c.config, c.samples_per_s) for c in ev.configs.values()])
        ablation_id, plan = _plan(study, ev, winner, inside, apart, ordered, ctx, rounds, apart_first=first)
        report = _measure_path(study, together, ablation_id, plan, ev, winner.number, rounds, deadline, on_measure)
    spent = deadline is not None and time.time() >= deadline
    if (report is None or report.stopped == "done") and not plan.get("reordered_from") and not spent:
        # once, for a path that could not leave out a knob that bought nothing: measured again, what paid first
        ab = Evidence.of(study).ablation()
        again = A.reordered(ab) if ab is not None and ab.ablation_id == ablation_id else None
        if again is not None:
            new_id, new_plan = _plan(study, ev, winner, inside, apart, again, ctx, rounds, reordered_from=ablation_id,
                                     apart_first=bool(plan.get("apart_first")))
            more = _measure_path(study, together, new_id, new_plan, Evidence.of(study), winner.number, rounds, deadline,
                                 on_measure)
            if report is not None:
                more.processes += report.processes
            report = more
    return report


def _plan(study: optuna.Study, ev: Evidence, winner: Any, inside: Mapping[str, Any], apart: Mapping[str, Any],
          ordered: Sequence[str], ctx: knobs.Context, rounds: int, **extra: Any) -> tuple[str, dict[str, Any]]:
    """A new ablation's plan, stored: the path from the defaults adding ``inside``'s knobs in ``ordered`` order
    (with ``apart_first``, from the defaults with the winner's process-wide knobs)."""
    import time

    base = ev.baseline.config if not extra.get("apart_first") else {**ev.baseline.config, **apart}  # type: ignore[union-attr]
    points = A.path(base, inside, ordered)
    ablation_id = uuid.uuid4().hex[:8]
    plan = {
        "winner": winner.number, "winner_key": winner.key,
        "path": [{"key": knobs.resolve(p, ctx).key(), "config": p, "added": {n: inside[n]} if i else {}}
                 for i, (n, p) in enumerate(zip([None, *ordered], points))],
        "apart": dict(apart), "order": list(ordered), "rounds": rounds, "started": time.time(), "done": False,
        "owner": recovery.owner(), **extra,
    }
    study.set_user_attr(A.ABLATION + ablation_id, plan)
    return ablation_id, plan


def _measure_path(study: optuna.Study, together: Together, ablation_id: str, plan: Mapping[str, Any], ev: Evidence,
                  winner: int, rounds: int, deadline: float | None, on_measure: OnMeasure | None) -> AblationReport:
    """Measure an ablation's path in each of ``rounds`` shared processes (resuming those already stored)."""
    import time

    keys = [p["key"] for p in plan["path"]]
    configs = [p["config"] for p in plan["path"]]
    report = AblationReport(ablation_id, winner, list(plan.get("order") or []))
    prefix = f"{PAIRED}abl-{ablation_id}-"
    done = sum(1 for k in study.user_attrs if k.startswith(prefix))
    for k in range(done, rounds):
        if deadline is not None and time.time() >= deadline:
            report.stopped = "time budget spent (--time-budget)"
            break
        result = together(configs)
        rates = record_paired(study, f"abl-{ablation_id}-{k + 1:02d}", keys, [ev.trial_of.get(key) for key in keys],
                              result, ablation=ablation_id)
        report.processes += 1
        for point, rate in zip(plan["path"], rates):
            if on_measure:
                added = " ".join(f"{n}={knobs.KNOBS[n].format(v)}" for n, v in point["added"].items()) or "the defaults"
                on_measure(f"what each knob bought, process {k + 1} of {rounds}, in one process: +{added}", -1, rate)
    else:
        report.stopped = "done"
        study.set_user_attr(A.ABLATION + ablation_id, {**plan, "done": True})
    return report
