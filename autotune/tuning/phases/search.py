"""The search: Optuna suggests configurations, each is measured once in a fresh process, until the budget is spent.

One trial (:meth:`Search.trial`): ask Optuna (a queued seed first), sign the trial with this
process, suggest the searched knobs, resolve the configuration; a configuration measured
already is answered from the stored result; otherwise it is claimed through the storage
(:mod:`.sharing`) and measured with heartbeats, cut short when the front clearly dominates
it (by a margin never below the noise floor), then recorded and told to Optuna.

- a failed trial (oom, nan, error, timeout, crashed, not_applicable) is told as a COMPLETE
  trial with pessimistic values and a violated constraint, so every sampler learns to avoid
  its region (Optuna's samplers ignore FAIL trials) and it never reaches the Pareto front;
- ``--max-memory`` is a real constraint, not a penalty;
- Ctrl-C/SIGTERM record the running trial as interrupted and queue it again, so a later run
  measures it.

The loop (:meth:`Search.run`) looks for other processes' stale trials, queues the seeds just
in time (:mod:`.seeds`), and stops when the study holds ``trials`` measured configurations,
when the run's time is spent, or when the sampler keeps repeating measured configurations
("space exhausted"); while other processes measure the rest of the budget, it waits. Past the default
sampler's hand-over to TPE (a long study), a proposal of a measured configuration is moved to the nearest one
not measured yet before the trial takes it (:meth:`Search.steer`, :mod:`.steer`): no trial is spent on a cache
answer there.

Each part of a trial can be timed without touching the loop: ``on_step(step, seconds)`` is told
after ``ask`` (Optuna creates the trial), ``suggest`` (the sampler and the parameters' writes),
``claim`` (the claim through the storage), ``measure`` (the bench), ``tell`` (the result's marks
and Optuna's tell, or a cache answer's), then ``trial`` (the whole of :meth:`Search.trial`), and
``wait`` for each idle poll of :meth:`Search.run` while other processes measure the rest of the
budget (benchmarks/fleet_scale.py times coordination with it). ``AUTOTUNE_TRACE=1`` in the
environment prints each step as it ends, on stderr, one JSON line after ``autotune-trace ``
(``step``, ``began``: epoch seconds, ``s``, ``sampler``: the study's sampler's class), so a run's own time to its
first trial is measured from outside (benchmarks/resume_scale.py).
"""

from __future__ import annotations

import json
import math
import os
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import optuna

from autotune import clock
from autotune import knobs
from autotune import result as R
from autotune.errors import WorkloadError
from autotune.tuning.phases import afford, sharing, sampler
from autotune.tuning.phases import steer as steering
from autotune.tuning.phases.bench import Bench
from autotune.tuning.phases.outcomes import Outcomes, TrialRecord
from autotune.tuning.phases.seeds import Seeds, baseline_failure, failed_baseline
from autotune.tuning.phases.session import Session
from autotune.request import CUT_MARGIN, DEFAULT_TRIALS
from autotune.store import LiveStudy, StoredTrial
from autotune.store.records import SKIPPED, Role
from autotune.evidence import evidence_of

warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
# Heartbeats are recorded by hand around each trial (LiveStudy.heartbeat), which Optuna's ask() does not know.
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")

#: How often the loop looks for other processes' stale trials (a query for lapsed heartbeats and a read of the running
#: trials): a stale trial is one whose heartbeats lapsed a grace period ago (60 s), or whose process on this host is
#: gone; looking before every trial only polled the database harder (64 workers: a dozen queries a second).
RECOVER_EVERY_S = 5.0
TRACE_ENV = "AUTOTUNE_TRACE"  # "1": print each step of each trial on stderr (see the module's docstring)
STEPS = ("ask", "suggest", "claim", "measure", "tell", "trial", "wait")
#: ``on_step(step, seconds)``: told as each step of :data:`STEPS` ends.
OnStep = Callable[[str, float], None]
#: The last part of the search's budget (its trials, or its share of the time budget) that goes to the leader's
#: one-knob neighbours: the twin of the least change, where a knob left at a worse value is found.
NEIGHBOUR_SHARE = 1.0 / 3.0


@dataclass
class SearchOptions:
    """The search's budget and how it measures and tells (the tuning loop's :class:`autotune.tuning.loop.Options` holds
    them)."""

    trials: int = DEFAULT_TRIALS
    max_memory_bytes: int | None = None
    max_repeats: int = 30  # the sampler repeating measured configurations this many times in a row ends the search
    early_stop: bool = True
    cut_margin: float = CUT_MARGIN  # the least margin to cut a dominated trial short; raised to the noise floor
    failures_as: str = "constraint"  # "fail": Optuna's FAIL state (only to measure the difference)
    placement: dict[str, Any] = field(default_factory=dict)  # the device and cores this process measures on
    poll_s: float = 2.0  # while other processes' trials finish the budget
    compile_limit_s: float | None = None  # a compiled configuration's first step may run this long (--compile-limit)


@dataclass
class SearchReport:
    """Why the search stopped, and what it did: configurations measured in the study, new ones, cache answers."""

    reason: str = ""
    measured: int = 0
    new: int = 0
    duplicates: int = 0
    skipped: int = 0  # configurations not started: predicted to outlast what was left of the search's time
    records: list[TrialRecord] = field(default_factory=list)


class Search(Outcomes):
    """The search over ``seeds.space`` on a study, measuring through ``bench``.

    ``on_trial(record)``: told after each trial of :meth:`run`; ``check()``: before each trial, raises when the
    store can no longer keep results (:meth:`autotune.store.Store.check_alive`); ``on_step(step, seconds)``: told
    as each step of a trial ends (see the module's docstring; default: the ``AUTOTUNE_TRACE`` lines, when set).
    """

    def __init__(self, live: LiveStudy, seeds: Seeds, bench: Bench, options: SearchOptions | None = None,
                 on_trial: Callable[[TrialRecord], None] | None = None, check: Callable[[], None] | None = None,
                 on_step: OnStep | None = None) -> None:
        self.live = live
        self.seeds = seeds
        self.bench = bench
        self.options = options or SearchOptions()
        self.on_trial = on_trial
        self.check = check or (lambda: None)
        self.on_step = on_step if on_step is not None else _trace(live) if os.environ.get(TRACE_ENV) == "1" else None
        self.handover = sampler.Handover(live)
        # past the hand-over, TPE's proposals avoid measured configurations
        if isinstance(live.sampler, sampler.GPThenTPE):
            live.sampler.steer = self.steer
            live.sampler.afford = self.affordable  # every proposal: a compile mode the time left affords
        self._cache: dict[str, StoredTrial] | None = None  # measured trials by configuration key

    @property
    def cache(self) -> dict[str, StoredTrial]:
        """The measured trials by configuration key (read once per run, then kept up to date by this process)."""
        if self._cache is None:
            self._cache = {t.config_key: t for t in self.live.trials() if t.measured and t.config_key}
        return self._cache

    # ------------------------------------------------------------ the loop

    def run(self, session: Session, between: Callable[[], Any] = lambda: None, poll_s: float | None = None,
            until: Callable[[TrialRecord], bool] | None = None) -> SearchReport:
        """Search until the budget is spent (see the module's docstring). ``between()`` runs before each trial (the
        noise floor, measured as soon as the baseline is); ``poll_s``: how often to look while other processes
        measure the rest of the budget (default: the options'); ``until(record)``: asked after each trial's record
        is told, the search stops once it holds (a benchmark's goal reached: benchmarks/warm_start.py)."""
        live, opts = self.live, self.options
        failed = failed_baseline(live.trials())
        if failed is not None:  # every speed-up is a ratio to the defaults: without them the study can answer nothing
            raise WorkloadError(baseline_failure(failed.number, failed.outcome or "?", failed.error_message,
                                                 again=True))
        self._cache = None
        report = SearchReport(measured=sharing.budget_counts(live.trials())[0])
        repeats = 0
        recovered_at = -math.inf  # the last look for stale trials (at once, then every RECOVER_EVERY_S)
        while True:
            self.check()
            between()
            if clock.monotonic() >= recovered_at + RECOVER_EVERY_S:
                live.recover_stale()
                recovered_at = clock.monotonic()
            trials = live.trials()  # one read for the budget and the seeds
            measured, running = sharing.budget_counts(trials)
            report.measured = measured
            if measured >= opts.trials:
                report.reason = f"the study holds {measured} measured configurations (--trials {opts.trials})"
                return report
            if session.spent(afford.trial_s(trials, self.seeds.base)[0] or 0.0):
                report.reason = ("time budget spent" if not session.reserve_s
                                 else "the search's share of the time budget spent")
                return report
            if measured + running >= opts.trials:  # the rest of the budget is being measured elsewhere
                with self._step("wait"):
                    clock.sleep(opts.poll_s if poll_s is None else poll_s)
                continue
            if not self.seeds.enqueue(live, trials) and self.near_the_end(measured, session):
                self.queue_neighbour(trials)
            rec = self.trial()
            session.save()
            if rec is None:  # another process measures it, or the budget filled up meanwhile
                continue
            rec.note = self.handover.note()
            report.records.append(rec)
            if self.on_trial:
                self.on_trial(rec)
            if rec.role == Role.BASELINE and rec.outcome != R.OK and rec.duplicate_of is None:
                raise WorkloadError(baseline_failure(rec.number, rec.outcome, rec.error or ""))
            if rec.duplicate_of is not None or rec.outcome == SKIPPED:
                if rec.outcome == SKIPPED:
                    report.skipped += 1
                else:
                    report.duplicates += 1
                repeats += 1
                if repeats >= opts.max_repeats:
                    report.reason = (f"space exhausted: the sampler proposed configurations measured already or not "
                                     f"affordable in the time left {repeats} times in a row")
                    return report
            else:
                repeats = 0
                report.new += 1
            if until is not None and until(rec):
                report.reason = f"stopped after trial #{rec.number}: the caller's condition holds"
                return report

    # ------------------------------------------------------------ one trial

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """Define-by-run: a dependent knob is suggested only when the knobs it needs allow it; over the distribution
        the study recorded for it where that differs from this process's (:meth:`LiveStudy.distributions`: a worker
        pinned to a share of the cores searched fewer thread counts than the process that races and claims)."""
        recorded = self.live.distributions()

        def pick(name: str, dim: Any) -> Any:
            seen = recorded.get(name)
            if isinstance(seen, optuna.distributions.CategoricalDistribution):
                return trial.suggest_categorical(name, list(seen.choices))
            if isinstance(seen, optuna.distributions.IntDistribution):
                return trial.suggest_int(name, seen.low, seen.high, step=seen.step)
            if dim.choices is not None:
                return trial.suggest_categorical(name, list(dim.choices))
            assert dim.low is not None and dim.high is not None
            return trial.suggest_int(name, dim.low, dim.high, step=dim.step)

        return self._define(pick)

    def _define(self, pick: Callable[[str, Any], Any]) -> dict[str, Any]:
        """The searched knobs' values, each from ``pick(name, dimension)``, skipping a dependent knob whose needs
        the knobs picked before it do not meet (one definition for a trial's suggestions and a proposal's)."""
        params: dict[str, Any] = {}
        for name, dim in self.seeds.space.search.items():
            knob = knobs.KNOBS[name]
            so_far = {**self.seeds.base, **params}
            if any(c.check(self.seeds.ctx, so_far) for c in knob.when if isinstance(c, knobs.KnobAbove)):
                continue
            params[name] = pick(name, dim)
        return params

    def measured(self, proposal: Mapping[str, Any]) -> bool:
        """The configuration ``proposal`` (a value for every searched knob) defines is measured in the study as this
        process knows it (:attr:`cache`); one that does not resolve counts as measured (never steered to)."""
        try:
            params = self._define(lambda name, dim: proposal[name])
            return knobs.resolve({**self.seeds.base, **params}, self.seeds.ctx).key() in self.cache
        except Exception:  # noqa: BLE001 - a combination the knobs refuse: not a configuration to move to
            return True

    def steer(self, proposal: dict[str, Any]) -> dict[str, Any] | None:
        """The sampler's proposal moved to the nearest configuration not measured yet (:mod:`.steer`), or None to
        keep it (not measured, or none found near it)."""
        return steering.nearest(proposal, self.seeds.space.search, self.measured)

    @contextmanager
    def _step(self, step: str) -> Iterator[None]:
        """Tell ``on_step`` how long the ``with`` block took (nothing is timed without one)."""
        if self.on_step is None:
            yield
            return
        start = clock.monotonic()
        try:
            yield
        finally:
            self.on_step(step, clock.monotonic() - start)

    def trial(self) -> TrialRecord | None:
        """Ask for one configuration (a queued one first) and answer it: measured, from the cache, or given up
        (None: another process measures it, or the budget is taken). Not shown: :meth:`run` tells ``on_trial``."""
        with self._step("trial"):
            return self._trial()

    def _trial(self) -> TrialRecord | None:
        live, opts = self.live, self.options
        with self._step("ask"):
            trial = live.study.ask()
        role = live.role(trial)
        params: dict[str, Any] = {}
        try:
            live.sign(trial)
            if opts.placement:
                live.mark(trial, placement=opts.placement)
            with self._step("suggest"):
                params = self.suggest(trial)
            resolved = knobs.resolve({**self.seeds.base, **params}, self.seeds.ctx)
            hit = self.cache.get(resolved.key())
            if hit is not None:
                with self._step("tell"):
                    return self._duplicate(trial, role, resolved, hit)
            why = self.why_not(resolved.config)
            if why is not None:
                with self._step("tell"):
                    return self._skipped(trial, role, resolved, why)
            with self._step("claim"):
                claimed = sharing.claim(live, trial, role, resolved.key(), opts.trials)
            if claimed.answer is sharing.Answer.TAKEN:
                return None
            if claimed.answer is sharing.Answer.GIVEN_UP:
                with self._step("tell"):
                    self._skip(trial, role, claimed.why)
                return None
            if claimed.answer is sharing.Answer.ANSWERED:
                assert claimed.earlier is not None
                with self._step("tell"):
                    return self._duplicate(trial, role, resolved, claimed.earlier)
            dominators: list[tuple[float, float]] = []
            margin = None
            if opts.early_stop and role == Role.SEARCH:
                ev = evidence_of(live.view(claimed.trials))  # the trials the claim just read
                dominators = [(ev.configs[n].samples_per_s, float(ev.configs[n].peak_memory_bytes)) for n in ev.front()]
                margin = ev.cut_margin(opts.cut_margin)
            # The claim holds: from here this trial measures (a RUNNING trial without the mark is
            # still choosing its configuration, or about to give way to an earlier claim).
            live.mark(trial, measuring_since=clock.now())
            with live.heartbeat(trial), self._step("measure"):
                assert self.bench.evaluate is not None, "the search measures with bench.evaluate"
                result = self.bench.evaluate(resolved.config, dominators, margin)
            with self._step("tell"):
                rec = self._record(trial, role, resolved, result)
                self.cache[resolved.key()] = live.trial(trial)
            return rec
        except optuna.exceptions.UpdateFinishedTrialError:
            # Another worker took this trial as stale (its heartbeats lapsed while the database was
            # away) and queued its configuration again: the queued copy will be measured; whatever
            # this process measured is dropped, never doubled.
            return None
        except KeyboardInterrupt:
            if live.is_running(trial):
                self._interrupted(trial, role, params or dict(trial.params))
            raise
        except Exception:
            # The storage refused a write (or anything else broke): record the trial as interrupted if the
            # storage still takes writes; if not, it stays RUNNING and the next start re-queues it (its
            # process is gone). Either way its configuration is measured again, never lost.
            try:
                if live.is_running(trial):
                    self._interrupted(trial, role, params or dict(trial.params))
            except Exception:  # noqa: BLE001 - the storage is away: recovery re-queues it on the next start
                pass
            raise

    # ------------------------------------------------------------ the leader's neighbours, near the end

    def near_the_end(self, measured: int, session: Session) -> bool:
        """The search is in the last :data:`NEIGHBOUR_SHARE` of its budget (of its trials, or of its share of the time
        budget): its trials go to the leader's one-knob neighbours."""
        opts = self.options
        if opts.trials - measured <= math.ceil(opts.trials * NEIGHBOUR_SHARE):
            return True
        end = session.ends().search
        if end is None:
            return False
        share = end - session.started_at
        return share > 0 and end - clock.now() <= NEIGHBOUR_SHARE * share

    def queue_neighbour(self, trials: list[StoredTrial]) -> bool:
        """Queue the first one-knob neighbour of the leader (the fastest configuration so far, the defaults aside)
        that is not measured yet and the time left affords (:meth:`.seeds.Seeds.neighbours`). Returns whether it
        queued one."""
        leader = evidence_of(self.live.view()).leader()
        if leader is None:
            return False
        found = next((t for t in trials if t.number == leader), None)
        if found is None:
            return False
        params = {name: found.config[name] for name in self.seeds.space.search if name in found.config}
        for near in self.seeds.neighbours(params):
            if self.measured(near):
                continue
            resolved = knobs.resolve({**self.seeds.base, **near}, self.seeds.ctx)
            if self.why_not(resolved.config) is not None:
                continue
            self.live.enqueue(near, role=Role.NEIGHBOUR)
            return True
        return False

    # ------------------------------------------------------------ what the time left affords

    def left_s(self) -> float | None:
        """Seconds left of the running phase's time (:attr:`Bench.until`; None: no limit)."""
        return None if self.bench.until is None else self.bench.until - clock.now()

    def why_not(self, config: Mapping[str, Any]) -> str | None:
        """Why a trial of ``config`` is not started now (:func:`.afford.why_not`; None: it may be)."""
        return afford.why_not(self.live.trials(), config, self.left_s(), self.options.compile_limit_s)

    def affordable(self, params: dict[str, Any]) -> dict[str, Any] | None:
        """A sampler's proposal with its compile mode moved to the nearest cheaper one the time left affords (None:
        keep it): the proposal is still the sampler's, without a trial skipped for it."""
        trials = self.live.trials()
        left, limit = self.left_s(), self.options.compile_limit_s
        if left is None and limit is None:
            return None
        return afford.cheaper(trials, params, lambda p: afford.why_not(trials, {**self.seeds.base, **p}, left, limit)
                              is None)


def _trace(live: LiveStudy) -> OnStep:
    """``AUTOTUNE_TRACE=1``: each step printed on stderr as it ends (one JSON line after ``autotune-trace ``)."""
    def told(step: str, seconds: float) -> None:
        line = {"step": step, "began": round(clock.now() - seconds, 4), "s": round(seconds, 4),
                "sampler": type(live.sampler).__name__}
        print("autotune-trace " + json.dumps(line), file=sys.stderr, flush=True)

    return told
