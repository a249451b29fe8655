"""The tuning loop: the phases (:mod:`autotune.tuning.phases`) composed into one run over a study.

A run searches until the budget is spent, measuring the noise floor as soon as the baseline
is measured; then, unless the request leaves it to another process, it races the leaders
against the defaults, measures what each knob of the winner bought and, when some bought
nothing, the smallest configuration that keeps the gain; it measures the claim apart and, last, checks the
recommendation's numerics against the defaults'; the verdict comes from the evidence
of the study the phases leave. :class:`Options` is the request's part that the loop follows
(derived once: :meth:`Options.of`); :class:`Summary` is what a run reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from autotune import clock
from autotune.evidence import Verdict, evidence_of
from autotune.tuning.phases import Bench, Search, SearchOptions, Seeds, Session, TrialRecord, bought, sharing, floor
from autotune.tuning.phases import confirm, minimal, numerics_check, race
from autotune.tuning.phases.phase import Context, Phase
from autotune.tuning.phases.session import Shares, process_s
from autotune.trial import trainings
from autotune.store.records import SKIPPED, Role
from autotune.evidence import claim as CL
from autotune.tuning.phases.sampler import GP_MAX_TRIALS, GPThenTPE, make_sampler
from autotune.tuning.phases.seeds import base_config, baseline_failure
from autotune.request import DEFAULT_CONFIRM, DEFAULT_NUMERICS, DEFAULT_SAMPLER, SAMPLERS, TuneConfig
from autotune.evidence import numerics_answer as NU
from autotune.store import LiveStudy
from autotune import result as R

__all__ = ["DEFAULT_SAMPLER", "GPThenTPE", "GP_MAX_TRIALS", "Options", "SAMPLERS", "Summary", "TrialRecord", "Tuner",
           "base_config", "baseline_failure", "make_sampler"]


@dataclass
class Options(SearchOptions):
    """How a run goes: the search's budget and measurement choices, the run's time, and the phases after it."""

    time_budget_s: float | None = None
    deadline: float | None = None  # epoch seconds: no trial starts after it (a fleet's --time-budget)
    floor_repeats: int = floor.FLOOR_REPEATS  # the baseline again in this many processes, early
    race_rounds: int = DEFAULT_CONFIRM  # at most this many rounds of the final race (--confirm; 0: none)
    race_candidates: int = race.MAX_CANDIDATES
    confirm: bool = True  # after the race, the least change and its claim measured apart (phases.confirm)
    numerics: str = DEFAULT_NUMERICS  # the numerics check after the verdict (phases.numerics): off, warn or strict

    @classmethod
    def of(cls, config: TuneConfig, *, max_memory_bytes: int | None, race: bool = True, deadline: float | None = None,
           placement: Mapping[str, Any] | None = None) -> Options:
        """The options for a request (``max_memory_bytes``: the study's stored budget; ``race``: False for workers
        that leave the final race to another process; ``deadline``: the end of its --time-budget, for a fleet the
        stored one). The stale grace is the study's own (:class:`autotune.store.LiveStudy`, opened with the
        request's)."""
        return cls(trials=config.trials, max_memory_bytes=max_memory_bytes, early_stop=config.early_stop,
                   race_rounds=config.confirm if race else 0, deadline=deadline, placement=dict(placement or {}),
                   numerics=config.numerics if race else NU.OFF, time_budget_s=config.time_budget_s,
                   compile_limit_s=config.compile_limit_s)

    def estimate_s(self, trial_s: float, remaining: int, elapsed_s: float = 0.0) -> float:
        """The rest of the study at the defaults' pace: the remaining trials, the noise floor, and a race of
        ``race_candidates`` configurations and the baseline for all its rounds (an upper bound: a race stops
        as soon as it is settled, and dominated trials are cut short); never past the time budget, which ends
        the study first (``elapsed_s``: spent of it already)."""
        race_measurements = self.race_rounds * (self.race_candidates + 1) if self.race_rounds else 0
        if self.race_rounds and self.confirm:
            # the claim: the recommendation and the defaults, a reduced one first
            race_measurements += 2 * CL.ROUNDS + 1
        rest = trial_s * (max(0, remaining) + self.floor_repeats + race_measurements)
        ends = [self.time_budget_s - elapsed_s if self.time_budget_s is not None else None,
                self.deadline - clock.now() if self.deadline is not None else None]
        return min([rest, *(max(0.0, e) for e in ends if e is not None)])


    def shares(self, race_s: float | None, claim_s: float | None, sigma: float | None, *,
               budget_s: float | None = None, candidate_s: float | None = None) -> Shares:
        """What a time budget keeps for the phases after the search, so that the run ends with an answer
        (:class:`autotune.tuning.phases.session.Shares`): the claim measured apart first (a reduced configuration, then
        :func:`autotune.evidence.claim.processes_needed` rounds of it and the defaults, and the chosen configuration
        while the reduction is undecided), at ``claim_s`` a process (the likely recommendation's: a compiled one
        compiles in each fresh process), and as many of the defaults (``race_s`` each) interleaved with them; the
        numerics check's share of the budget (none where it could not hold the check's runs); the race's first rounds
        (none where they would not make a whole round), at
        ``race_s`` a process (the defaults' and the candidates'). At most half the budget in all, so the search always
        has the other half; when that cannot hold them all, the claim keeps its share first, then the numerics check,
        and the race takes what is left. Nothing without a time budget or a race. ``budget_s``: the time the loop has
        (what the probes left of the budget; default the whole budget); ``candidate_s``: a race candidate's process
        (a compiled candidate compiles in each; default ``race_s``)."""
        if self.time_budget_s is None or not race_s or not self.race_rounds:
            return Shares()
        budget = self.time_budget_s if budget_s is None else min(self.time_budget_s, max(0.0, budget_s))
        cap = budget / 2.0
        claim = 0.0
        if self.confirm:  # the recommendation's processes and as many of the defaults, interleaved, and a little more
            n = CL.processes_needed(sigma)
            claim = (claim_s or race_s) * (n + CL.CLAIM_EXTRA_PROCESSES) + race_s * n
        check = NU.COST_SHARE * budget if self.numerics != NU.OFF else 0.0
        round_s = race_s + (candidate_s or race_s) * self.race_candidates  # the defaults and the candidates
        racing = round_s * min(self.race_rounds, race.MIN_ROUNDS)
        claim = min(claim, cap)
        check = min(check, cap - claim)
        if check < trainings.RUNS * race_s:  # its share could not hold the check's runs: it would only sit unused
            check = 0.0
        racing = min(racing, cap - claim - check)
        if racing < round_s:  # not a whole round: the search is better served
            racing = 0.0
        return Shares(racing, claim, check)


#: The phases after the search, in the order a run takes them (:class:`autotune.tuning.phases.phase.Phase`): a new
#: phase is its module's ``PHASE`` and one line here.
PHASES: tuple[Phase, ...] = (
    race.PHASE,
    bought.PHASE,
    minimal.PHASE,
    confirm.PHASE,
    numerics_check.PHASE,
)


@dataclass
class Summary:
    """What a run did: why its search stopped, the configurations it measured, what it measured again, the report of
    each phase after the search (``reports``, by the phase's name, each also an attribute: ``summary.race``,
    ``summary.ablation``, ``summary.confirm``, ``summary.numerics``; None where the run did not take it), and the
    verdict of the study it leaves."""

    reason: str
    measured: int
    new: int
    duplicates: int
    elapsed_s: float
    skipped: int = 0  # configurations the search did not start: predicted to outlast what was left of its time
    repeats: int = 0  # re-measurements (noise floor, race and ablation) taken by this run: configurations measured
    repeat_processes: int = 0  # ... and the processes they took (a shared process measures several configurations)
    reports: dict[str, Any] = field(default_factory=dict)
    verdict: Verdict | None = None
    records: list[TrialRecord] = field(default_factory=list)

    def __getattr__(self, name: str) -> Any:
        """A phase's report by the phase's name (None: the run did not take it)."""
        if name in _PHASE_NAMES:
            return self.__dict__.get("reports", {}).get(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def text(self) -> str:
        """The line a run ends with (``autotune run`` and ``autotune.tune``)."""
        from autotune.units import format_duration, plural

        phases = "".join(phase.line(self.reports.get(phase.name)) for phase in PHASES)
        skipped = (f" ({plural(self.skipped, 'configuration')} not started: predicted to outlast the search's time)"
                   if self.skipped else "")
        return (f"done: {self.reason}; {plural(self.new, 'new configuration')}{skipped} and "
                f"{plural(self.repeats, 'repeat measurement')} ({plural(self.repeat_processes, 'process')}) "
                f"in {format_duration(self.elapsed_s)}{phases}")


_PHASE_NAMES = frozenset(phase.name for phase in PHASES)


class Tuner:
    """One run of the phases over a study: ``seeds`` say what is searched and measured first, ``bench`` how this
    process measures; ``on_trial(record)`` is told after each trial, ``check()`` runs before each (it raises when
    the store can no longer keep results: :meth:`autotune.store.Store.check_alive`)."""

    def __init__(self, live: LiveStudy, seeds: Seeds, bench: Bench, options: Options | None = None,
                 on_trial: Callable[[TrialRecord], None] | None = None,
                 check: Callable[[], None] | None = None) -> None:
        self.live = live
        self.seeds = seeds
        self.bench = bench
        self.options = options or Options()
        self.on_trial = on_trial
        self.search = Search(live, seeds, bench, self.options, on_trial=self._shown, check=check)
        self._session: Session | None = None

    def sampler_opening(self) -> str | None:
        """Before the first trial: the sampler's hand-over, when a resumed study is past it already."""
        return self.search.handover.opening()

    def run(self, *, poll_s: float | None = None) -> Summary:
        """Search, then race, measure what each knob bought and the minimal configuration (``poll_s``: how often to
        look while other processes measure the rest of the budget; default: the options')."""
        live, bench, opts = self.live, self.bench, self.options
        session = self._session = Session(live, opts.time_budget_s, opts.deadline)
        counted = bench.counts()
        noise = floor.Floor(live, bench, opts.floor_repeats)

        def floor_first() -> None:  # before each trial: the noise floor, as soon as the baseline is measured
            bench.until = session.ends().search
            if noise():
                session.save()
            if opts.time_budget_s is not None:  # what follows the search keeps its share
                view = live.view()
                ev = evidence_of(view)
                if ev.baseline is not None:
                    race_s = process_s(view, [ev.baseline.number])
                    leader = ev.leader()
                    claim_s = max(race_s, process_s(view, [leader])) if leader is not None else race_s
                    end = session.end()
                    session.shares = opts.shares(race_s, claim_s, ev.noise.sigma, candidate_s=claim_s,
                                                 budget_s=None if end is None else end - session.started_at)
            bench.until = session.ends().search

        try:
            found = self.search.run(session, between=floor_first, poll_s=poll_s)
            summary = Summary(found.reason, found.measured, found.new, found.duplicates, 0.0, records=found.records,
                              skipped=found.skipped)
            if opts.race_rounds > 0:  # a process that leaves the race to another takes no phase after the search
                ends = session.ends()
                for phase in PHASES:
                    ctx = Context(live, bench, self.search, opts, deadline=getattr(ends, phase.until))
                    if not phase.wanted(ctx):
                        continue
                    bench.until = ctx.deadline
                    summary.reports[phase.name] = report = phase.run(ctx)
                    for rec in phase.records(report):
                        self._record(summary, rec)
                    session.save()
        finally:
            bench.until = None
            session.save()
        measurements, processes = bench.counts()
        summary.elapsed_s = session.elapsed_s
        summary.repeats, summary.repeat_processes = measurements - counted[0], processes - counted[1]
        summary.verdict = evidence_of(live.view()).verdict()
        return summary

    def _record(self, summary: Summary, rec: TrialRecord) -> None:
        """A trial a phase after the search measured as one of its own: in the run's records, shown, and counted as
        a new configuration when it is one."""
        summary.records.append(rec)
        self._shown(rec)
        if rec.duplicate_of is None and rec.outcome != SKIPPED:
            summary.new += 1

    def _shown(self, rec: TrialRecord) -> None:
        """Tell ``on_trial`` a trial's record; the baseline's first measurement carries the estimate of the rest."""
        if rec.role == Role.BASELINE and rec.outcome == R.OK and rec.duration_s and rec.duplicate_of is None:
            assert self._session is not None
            measured = sharing.budget_counts(self.live.trials())[0]
            rec.estimate_s = self.options.estimate_s(rec.duration_s, self.options.trials - measured,
                                                     self._session.elapsed_s)
        if self.on_trial:
            self.on_trial(rec)
