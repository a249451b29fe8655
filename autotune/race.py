"""Repeat measurements where they change a decision: the noise floor early, the race at the end.

- **Noise floor.** Right after the baseline trial, the baseline is measured again in
  ``floor`` more processes, so the study knows its machine's noise between processes
  before it compares anything (the cut margin of early stopping, every interval).
- **The race.** At the end, the configurations the evidence does not separate from
  the fastest (:meth:`Evidence.race_candidates`) are measured again, round after round,
  each round the baseline and every candidate still in the race, interleaved in a
  rotating order. After each round a candidate whose interval against the leader lies
  wholly below 1 leaves the race. It stops when one candidate is left and its speed-up
  over the baseline is separated from 1 (either way), or after ``rounds`` rounds (the
  ``--confirm`` budget). The verdict (:meth:`Evidence.verdict`) then picks among the
  candidates still tied the one that changes the fewest knobs.

Every re-measurement is a study user attribute of its own (``measurement:<round>:<trial>``),
so a race stopped half-way resumes on the next run, and two processes never overwrite
each other's measurements.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import optuna

from autotune import result as R
from autotune import recovery
from autotune.evidence import MEASUREMENT, RACE, Evidence, is_measured, record_measurement

#: ``evaluate(config)`` -> a TrialResult; measures in a fresh process.
Measure = Callable[[Mapping[str, Any]], R.TrialResult]
#: Called after each re-measurement: (what, trial number, samples/s or None).
OnMeasure = Callable[[str, int, "float | None"], None]

FLOOR_REPEATS = 2  # the baseline is measured in 1 + this many processes early
MAX_CANDIDATES = 6
MIN_ROUNDS = 3


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
    measurements: int = 0
    eliminated: dict[int, str] = field(default_factory=dict)
    stopped: str = ""


def _state(study: optuna.Study) -> tuple[str, dict[str, Any]] | None:
    """The latest race record of the study, if any."""
    races = [(k[len(RACE):], v) for k, v in study.user_attrs.items() if k.startswith(RACE) and isinstance(v, Mapping)]
    return max(races, key=lambda kv: kv[1].get("started", 0.0)) if races else None


def _measured_count(study: optuna.Study) -> int:
    return sum(1 for t in study.get_trials(deepcopy=False) if is_measured(t))


def run_race(
    study: optuna.Study,
    measure: Measure,
    rounds: int,
    max_candidates: int = MAX_CANDIDATES,
    min_rounds: int = MIN_ROUNDS,
    on_measure: OnMeasure | None = None,
    deadline: float | None = None,
) -> RaceReport | None:
    """Race the candidates tied with the fastest; resumes a race a stopped run left unfinished.

    A race covers the trials measured when it started; once the study holds more, a new race
    starts (the earlier rounds still count as evidence). ``deadline`` (epoch seconds, from
    ``--time-budget``): no round starts after it. ``on_measure`` is told each measurement as
    ``("race round K of at most N", trial, samples/s)``.
    """
    import time

    if rounds <= 0:
        return None
    ev = Evidence.of(study)
    if ev.baseline is None:
        return None
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
    else:
        candidates = ev.race_candidates(max_candidates)
        if not candidates:
            return None
        race_id = uuid.uuid4().hex[:8]
        record = {"candidates": candidates, "measured": measured, "rounds": rounds, "started": time.time(), "done": False,
                  "owner": recovery.owner()}
        study.set_user_attr(RACE + race_id, record)
    report = RaceReport(race_id, candidates)
    prefix = f"race-{race_id}-"
    base = ev.baseline.number
    while True:
        ev = Evidence.of(study)
        # rounds begun (a failed measurement counts too, so a failing configuration cannot loop forever)
        done = {k[len(MEASUREMENT):].rpartition(":")[0] for k in ev.attrs if k.startswith(MEASUREMENT + prefix)}
        report.rounds = len(done)
        alive = _alive(ev, candidates, report)
        if not alive:
            report.stopped = "every candidate failed when measured again"
            break
        if report.rounds >= rounds:
            report.stopped = f"budget of {rounds} rounds spent (--confirm)"
            break
        if deadline is not None and time.time() >= deadline:
            report.stopped = "time budget spent (--time-budget)"
            break
        if report.rounds >= min_rounds:
            leader = max(alive, key=lambda n: ev.configs[n].samples_per_s)
            s = ev.speedup(leader)
            if len(alive) == 1 and s is not None and not s.includes_one():
                report.stopped = "separated"
                break
            if s is not None and _futile(s, report.rounds, rounds):
                report.stopped = "futile: at this rate the fastest would not separate from the defaults within the budget"
                break
        k = report.rounds
        order = [base, *alive]
        order = order[k % len(order):] + order[: k % len(order)]  # rotate: nobody is always first
        round_id = f"{prefix}{k + 1:02d}"
        for number in order:
            rate = record_measurement(study, number, round_id, measure(ev.configs[number].config))
            report.measurements += 1
            if on_measure:
                on_measure(f"race round {k + 1} of at most {rounds}", number, rate)
    record = {**record, "done": True, "stopped": report.stopped, "rounds_run": report.rounds, "eliminated": {str(k): v for k, v in report.eliminated.items()}}
    study.set_user_attr(RACE + race_id, record)
    return report


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
    """The fastest's interval includes 1, and would still include it at the end of the budget
    even were its estimate to grow by half again (the interval narrows as 1/sqrt(rounds)):
    a race that cannot end in a claim stops, and the answer is "no gain beyond the noise"."""
    import math

    if not s.includes_one() or not s.has_interval or s.estimate <= 0:
        return bool(s.has_interval and s.below_one())
    half_now = (math.log(s.high) - math.log(s.low)) / 2
    half_then = half_now * math.sqrt(done / budget)
    return 1.5 * abs(math.log(s.estimate)) < half_then


def _alive(ev: Evidence, candidates: list[int], report: RaceReport) -> list[int]:
    """Candidates still in the race: measured fine again, and not clearly slower than the leader."""
    alive = []
    for n in candidates:
        c = ev.configs.get(n)
        if c is None or c.failed_repeats:
            report.eliminated.setdefault(n, "failed when measured again")
            continue
        alive.append(n)
    if len(alive) < 2:
        return alive
    from autotune import stats

    leader = max(alive, key=lambda n: ev.configs[n].samples_per_s)
    keep = []
    for n in alive:
        # Leaving the race is a decision about where to spend measurements, not a claim: it is
        # taken at the plain 90% level (claims are adjusted for every raced configuration).
        if n != leader and stats.ratio(ev.configs[n].claim, ev.configs[leader].claim, ev.noise, 1).below_one():
            report.eliminated.setdefault(n, f"slower than #{leader} beyond the noise")
            continue
        keep.append(n)
    return keep
