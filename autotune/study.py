"""The tuning study: Optuna glue for a resumable, multi-objective search of the knob space.

One coordinator process asks Optuna for configurations and tells it the results;
every measurement runs in an isolated trial process (:mod:`autotune.runner`).
What this module decides:

- the baseline (PyTorch's defaults) is measured first, then again in separate
  processes for the study's noise floor (:mod:`autotune.race`), then the guides'
  "every trick on" recipe; seeds are queued just in time, so a resumed study
  always measures its baseline first;
- a failed trial (oom, nan, error, timeout, crashed, not_applicable) is told as a
  COMPLETE trial with pessimistic values and a violated constraint, so every
  sampler learns to avoid its region (Optuna's samplers ignore FAIL trials) and it
  never reaches the Pareto front;
- a configuration already measured is answered from the stored result, and a
  sampler that keeps repeating itself ends the study ("space exhausted");
- ``--max-memory`` is a real constraint, not a penalty;
- a search trial clearly dominated by the current front after a few timed windows
  is cut short, by a margin never below the noise floor (Optuna's pruners do not
  work with two objectives);
- at the end the race (:mod:`autotune.race`) re-measures the leaders against the
  baseline, and :class:`autotune.evidence.Evidence` gives the verdict;
- Ctrl-C/SIGTERM record the running trial as interrupted and queue it again, so a
  later run measures it.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import socket
import time
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import optuna
from optuna.storages._heartbeat import BaseHeartbeat, is_heartbeat_enabled
from optuna.trial import FrozenTrial, Trial, TrialState

from autotune import ablation, knobs, race
from autotune.store import recovery
from autotune import result as R
from autotune.errors import AutotuneError, WorkloadError
from autotune.evidence import SESSION, Evidence, Verdict, is_measured
from autotune.request import CUT_MARGIN, DEFAULT_CONFIRM, DEFAULT_SAMPLER, DEFAULT_TRIAL_TIMEOUT_S, DEFAULT_TRIALS, SAMPLERS, TuneConfig, stale_grace
from autotune.space import Space
from autotune.stats import Ratio

warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
# Heartbeats are recorded by hand around each trial (Heartbeat below), which Optuna's ask() does not know.
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")

UNDECIDED_WAIT_S = 30.0  # how long a claim waits for earlier trials still choosing their configuration
UNDECIDED_POLL_S = 0.05
#: How often the loop looks for other processes' stale trials (a query for lapsed heartbeats and a read of the running
#: trials): a stale trial is one whose heartbeats lapsed a grace period ago (60 s), or whose process on this host is
#: gone; looking before every trial only polled the database harder (64 workers: a dozen queries a second).
RECOVER_EVERY_S = 5.0
SKIPPED = "skipped"  # a trial given up because another process measures its configuration, or the budget is full

#: ``evaluate(config, dominators, cut_margin)`` measures one configuration in a fresh process.
Evaluate = Callable[[Mapping[str, Any], Sequence[tuple[float, float]], "float | None"], R.TrialResult]

__all__ = ["DEFAULT_SAMPLER", "GPThenTPE", "GP_MAX_TRIALS", "Options", "SAMPLERS", "Summary", "TrialRecord", "Tuner", "base_config", "baseline_trial", "front",
           "is_measured", "make_sampler"]


#: Past this many complete trials the default sampler (``gp``) hands over to ``tpe``. A Gaussian process refits on
#: the whole history for every suggestion: measured on the 2-core CPU machines (benchmarks/results/fleet_scale.txt:
#: a 9-knob space, two objectives and two constraints), a suggestion took 0.44 s at 100 trials, 0.87 s at 200,
#: 1.26 s at 300 and 6.4 s at 1,000 (a resumed 10,000-trial study asked none within 4 minutes); TPE's took 0.14 s
#: at 10,000. Studies of the usual size (tens of trials) never reach it.
GP_MAX_TRIALS = 200
SAMPLER_SWITCH = "sampler_switch"  # the study attribute that records the hand-over (autotune status can show it)


def make_sampler(name: str, seed: int | None = None, n_startup_trials: int = 8,
                 gp_max_trials: int = GP_MAX_TRIALS) -> optuna.samplers.BaseSampler:
    """A sampler by name. ``gp`` (the default, chosen from benchmarks/search_efficiency.py) is
    Gaussian-process Bayesian optimisation until the study holds ``gp_max_trials`` complete trials,
    then multivariate TPE (:class:`GPThenTPE`); ``tpe`` is multivariate TPE (cheaper per suggestion
    in long studies); ``nsga2`` is the genetic algorithm; ``random`` is the control."""
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=n_startup_trials)
    if name == "gp":
        try:
            import scipy  # noqa: F401
        except ImportError:
            raise AutotuneError("--sampler gp needs scipy: pip install scipy") from None
        gp = optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup_trials, warn_independent_sampling=False)
        return GPThenTPE(gp, make_sampler("tpe", seed, n_startup_trials), gp_max_trials)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=10)
    raise AutotuneError(f"--sampler {name!r}: expected one of {', '.join(SAMPLERS)}")


class GPThenTPE(optuna.samplers.BaseSampler):
    """The Gaussian process while the study holds fewer than ``limit`` complete trials, then TPE.

    A GP's suggestion refits on every complete trial (its cost grows with the cube of the history);
    TPE's grows about linearly. The choice is made once per trial (in ``before_trial``), and once TPE
    has taken over in a process it keeps the study (trials are never removed, so the history only
    grows): after the hand-over no trial is counted again. :attr:`switched_at` is the first trial
    number it suggested with TPE in this process (None while the GP suggests).
    """

    def __init__(self, gp: optuna.samplers.BaseSampler, tpe: optuna.samplers.BaseSampler, limit: int) -> None:
        self.gp = gp
        self.tpe = tpe
        self.limit = limit
        self.switched_at: int | None = None
        self._chosen: dict[int, optuna.samplers.BaseSampler] = {}

    def past_limit(self, study: optuna.Study) -> bool:
        """The study holds ``limit`` complete trials or more (what the GP would refit on)."""
        if self.switched_at is not None:
            return True
        return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))) >= self.limit

    def text(self) -> str:
        """The line a run prints when TPE takes over (once)."""
        start = f"from trial #{self.switched_at} on" if self.switched_at is not None else "from here on"
        return (f"sampler: the study holds {self.limit}+ complete trials, past which each Gaussian-process suggestion "
                f"refits on the whole history (about a second each at {self.limit}, growing with the cube of it): TPE "
                f"suggests {start} (recorded on the study as {SAMPLER_SWITCH})")

    def _for(self, study: optuna.Study, trial: FrozenTrial) -> optuna.samplers.BaseSampler:
        chosen = self._chosen.get(trial.number)
        if chosen is None:
            chosen = self._chosen[trial.number] = self.tpe if self.past_limit(study) else self.gp
            if chosen is self.tpe and self.switched_at is None:
                self.switched_at = trial.number
        return chosen

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._for(study, trial).before_trial(study, trial)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, Any]:
        return self._for(study, trial).infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, Any]) -> dict[str, Any]:
        return self._for(study, trial).sample_relative(study, trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: Any) -> Any:
        return self._for(study, trial).sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None) -> None:
        chosen = self._chosen.pop(trial.number, None) or (self.tpe if self.switched_at is not None else self.gp)
        chosen.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.gp.reseed_rng()
        self.tpe.reseed_rng()


@dataclass
class Options:
    """How the Tuner runs: the request's budget and measurement choices (:meth:`of`), and the loop's own settings."""

    trials: int = DEFAULT_TRIALS
    time_budget_s: float | None = None
    max_memory_bytes: int | None = None
    max_repeats: int = 30
    early_stop: bool = True
    cut_margin: float = CUT_MARGIN  # the least margin to cut a dominated trial short; raised to the noise floor
    failures_as: str = "constraint"  # "fail": Optuna's FAIL state (only to measure the difference)
    floor_repeats: int = race.FLOOR_REPEATS  # the baseline again in this many processes, early
    race_rounds: int = DEFAULT_CONFIRM  # at most this many rounds of the final race (--confirm; 0: none)
    race_candidates: int = race.MAX_CANDIDATES
    deadline: float | None = None  # epoch seconds: no trial starts after it (a fleet's --time-budget)
    placement: dict[str, Any] = field(default_factory=dict)  # the device and cores this process measures on
    stale_grace_s: float = stale_grace(DEFAULT_TRIAL_TIMEOUT_S)  # a trial of another host with no heartbeat is stale after this long
    poll_s: float = 2.0  # while other processes' trials finish the budget

    @classmethod
    def of(cls, config: TuneConfig, *, max_memory_bytes: int | None, race: bool = True, deadline: float | None = None,
           placement: Mapping[str, Any] | None = None) -> Options:
        """The tuner's options for a request (``max_memory_bytes``: the study's stored budget; ``race``: False for
        workers that leave the final race to another process; ``deadline``: a fleet's stored --time-budget)."""
        return cls(trials=config.trials, max_memory_bytes=max_memory_bytes, early_stop=config.early_stop,
                   race_rounds=config.confirm if race else 0, deadline=deadline, placement=dict(placement or {}),
                   stale_grace_s=config.stale_grace_s)


@dataclass
class TrialRecord:
    """What the progress display gets after each trial."""

    number: int
    role: str
    config: dict[str, Any]
    outcome: str
    samples_per_s: float | None
    peak_memory_bytes: int | None
    speedup: Ratio | None = None
    duplicate_of: int | None = None
    error: str | None = None
    duration_s: float | None = None
    cut_short: bool = False
    over_budget: bool = False  # ok, but its peak memory is over --max-memory: never a candidate
    estimate_s: float | None = None  # on the baseline's record: about how long the rest of the study will take
    load: dict[str, Any] = field(default_factory=dict)  # what else ran on the machine while it measured (autotune.load)
    note: str | None = None  # a line to print after this trial's: the sampler handed over (GPThenTPE), once per run


@dataclass
class Summary:
    reason: str
    measured: int
    new: int
    duplicates: int
    elapsed_s: float
    repeats: int = 0  # re-measurements (noise floor, race and ablation) taken by this run: configurations measured
    repeat_processes: int = 0  # ... and the processes they took (a shared process measures several configurations)
    race: race.RaceReport | None = None
    ablation: race.AblationReport | None = None
    verdict: Verdict | None = None
    records: list[TrialRecord] = field(default_factory=list)

    def text(self) -> str:
        """The line a run ends with (``autotune run`` and ``autotune.tune``)."""
        from autotune.units import format_duration

        from autotune.units import plural

        r = self.race
        raced = (f"; race: {plural(r.rounds, 'round')}, {plural(r.measurements, 'measurement')} in "
                 f"{plural(r.processes, 'process')} ({r.stopped})") if r else ""
        if self.ablation is not None:
            raced += f"; each knob's step measured in {plural(self.ablation.processes, 'shared process')}"
        return (f"done: {self.reason}; {plural(self.new, 'new configuration')} and "
                f"{plural(self.repeats, 'repeat measurement')} ({plural(self.repeat_processes, 'process')}) "
                f"in {format_duration(self.elapsed_s)}{raced}")


def front(study: optuna.Study) -> list[FrozenTrial]:
    """The Pareto front by the evidence's figures: feasible ok trials, fastest first."""
    numbers = Evidence.of(study).front()
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    return [trials[n] for n in numbers]


def baseline_trial(study: optuna.Study) -> FrozenTrial | None:
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("role") == "baseline" and t.user_attrs.get("outcome") == R.OK and t.user_attrs.get("duplicate_of") is None:
            return t
    return None


class Session:
    """This run's wall time, kept on the study (``session:<id>``) so every view reports the same time spent."""

    def __init__(self, study: optuna.Study) -> None:
        self.study = study
        self.key = f"{SESSION}{uuid.uuid4().hex[:8]}"
        self.start = time.monotonic()
        self.started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        self.started_at = time.time()

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.start

    def save(self) -> None:
        self.study.set_user_attr(
            self.key, {"host": socket.gethostname(), "pid": os.getpid(), "started": self.started, "started_at": self.started_at,
             "elapsed_s": round(self.elapsed_s, 3)}
        )


class Tuner:
    """Runs the search loop on an Optuna study."""

    def __init__(
        self,
        study: optuna.Study,
        space: Space,
        ctx: knobs.Context,
        base: Mapping[str, Any],
        evaluate: Evaluate,
        options: Options | None = None,
        on_trial: Callable[[TrialRecord], None] | None = None,
        on_repeat: race.OnMeasure | None = None,
        check: Callable[[], None] | None = None,
        warm: Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]] = (),
        remeasure: race.Measure | None = None,
        together: race.Together | None = None,
        ablate: race.Together | None = None,
    ) -> None:
        """``check()`` runs before each trial and raises when the store can no longer keep results
        (:meth:`autotune.store.Store.check_alive`). ``warm``: (parameters, user attributes) of the seeds
        queued after the recipe, each once (:mod:`autotune.warmstart`: earlier studies' winners).
        ``remeasure(config)``: how the noise floor and the race measure a configuration again (default:
        ``evaluate`` without dominators; ``autotune run`` leaves out the profile and the FLOP count).
        ``together(configs)``: how the race measures configurations alternately in one process (:mod:`autotune.paired`);
        without it every race measurement takes a process of its own. ``ablate(configs)``: the same, for what each
        knob of the winner bought (default: ``together``); without either the knobs are not measured one by one."""
        self.study = study
        self.space = space
        self.ctx = ctx
        self.base = dict(base)
        self.evaluate = evaluate
        self.options = options or Options()
        self.on_trial = on_trial
        self.on_repeat = on_repeat
        self.check = check or (lambda: None)
        self.warm = list(warm)
        self.remeasure = remeasure
        self.together = together
        self.ablate = ablate if ablate is not None else together
        self._switch_told = False  # the sampler's hand-over was printed (GPThenTPE)
        self._switch_recorded = False  # ... and recorded on the study by this process
        self._read: list[FrozenTrial] | None = None  # the study's trials as this trial's claim read them

    # ------------------------------------------------------------ seeds

    def seed_params(self) -> list[tuple[str, dict[str, Any]]]:
        """Baseline and recipe as parameters of the searched knobs (validated against the space)."""
        baseline = {name: self.base[name] for name in self.space.search}
        recipe_config = knobs.recipe(self.ctx, self.base)
        recipe: dict[str, Any] = {}
        for name, dim in self.space.search.items():
            value = recipe_config[name]
            if not dim.contains(value):
                candidates = dim.values()
                if knobs.KNOBS[name].is_range:
                    value = min(candidates, key=lambda v: (abs(v - value), -v))
                else:
                    value = self.base[name]
            recipe[name] = value
        return [("baseline", baseline), ("recipe", recipe)]

    def _seeded(self, role: str, trials: Sequence[FrozenTrial] | None = None, **match: Any) -> bool:
        """A trial of this role (and these user attributes, or queued again for one that had them) is queued,
        running, or has been answered (measured, failed, or a cache answer). ``trials``: the study's, just read."""
        matched: set[int] = set()
        for t in self.study.get_trials(deepcopy=False) if trials is None else trials:
            if t.user_attrs.get("role") != role:
                continue
            if any(t.user_attrs.get(k) != v for k, v in match.items()) and t.user_attrs.get("requeued_from") not in matched:
                continue
            matched.add(t.number)
            if t.state in (TrialState.WAITING, TrialState.RUNNING, TrialState.COMPLETE):
                return True
            if t.state == TrialState.FAIL and t.user_attrs.get("outcome") not in (None, R.INTERRUPTED):
                return True
        return False

    def enqueue_seeds(self, trials: Sequence[FrozenTrial] | None = None) -> None:
        """Queue the next seed, just in time: the baseline first; the recipe once the baseline is measured;
        then the warm-start seeds, one at a time. ``trials``: the study's, just read (one read for every test)."""
        trials = self.study.get_trials(deepcopy=False) if trials is None else trials
        seeds = dict(self.seed_params())
        if not self._seeded("baseline", trials):
            self.study.enqueue_trial(seeds["baseline"], user_attrs={"role": "baseline"})
        elif baseline_measured(self.study, trials) and not self._seeded("recipe", trials):
            self.study.enqueue_trial(seeds["recipe"], user_attrs={"role": "recipe"})
        elif baseline_measured(self.study, trials):
            for params, attrs in self.warm:
                if not self._seeded(attrs["role"], trials, **{k: v for k, v in attrs.items() if k != "role"}):
                    self.study.enqueue_trial(dict(params), user_attrs=dict(attrs))
                    break

    # ------------------------------------------------------------ sampling

    def suggest(self, trial: Trial) -> dict[str, Any]:
        """Define-by-run: a dependent knob is suggested only when the knobs it needs allow it."""
        params: dict[str, Any] = {}
        for name, dim in self.space.search.items():
            knob = knobs.KNOBS[name]
            so_far = {**self.base, **params}
            if any(c.check(self.ctx, so_far) for c in knob.when if isinstance(c, knobs.KnobAbove)):
                continue
            if dim.choices is not None:
                params[name] = trial.suggest_categorical(name, list(dim.choices))
            else:
                assert dim.low is not None and dim.high is not None
                params[name] = trial.suggest_int(name, dim.low, dim.high, step=dim.step)
        return params

    def sampler_opening(self) -> str | None:
        """Before the first trial: the line saying TPE suggests instead of the Gaussian process, when the study is
        already past :data:`GP_MAX_TRIALS` (a resumed long study); the run then does not say it again."""
        sampler = self.study.sampler
        if self._switch_told or not isinstance(sampler, GPThenTPE) or not sampler.past_limit(self.study):
            return None
        self._switch_told = True
        return sampler.text()

    def _sampler_note(self) -> str | None:
        """Once the sampler has handed over: record it on the study (once) and return the line to print (once per run)."""
        sampler = self.study.sampler
        if not isinstance(sampler, GPThenTPE) or sampler.switched_at is None or self._switch_recorded:
            return None
        self._switch_recorded = True
        if SAMPLER_SWITCH not in self.study.user_attrs:
            self.study.set_user_attr(SAMPLER_SWITCH, {
                "from": "gp", "to": "tpe", "limit": sampler.limit, "trial": sampler.switched_at,
                "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})
        if self._switch_told:
            return None
        self._switch_told = True
        return sampler.text()

    # ------------------------------------------------------------ bookkeeping

    def measured(self) -> list[FrozenTrial]:
        return [t for t in self.study.get_trials(deepcopy=False) if is_measured(t)]

    def _cache(self) -> dict[str, FrozenTrial]:
        return {t.user_attrs["config_key"]: t for t in self.measured() if "config_key" in t.user_attrs}

    def _pessimistic_memory(self) -> float:
        peaks = [t.values[1] for t in self.measured() if t.user_attrs.get("outcome") == R.OK and t.values]
        return 2.0 * max(peaks) if peaks else float(1 << 40)

    def _tell(self, trial: Trial, ok: bool, values: list[float] | None, memory_violation: float) -> None:
        if not ok and self.options.failures_as == "fail":
            self.study.tell(trial, state=TrialState.FAIL)
            return
        trial.set_constraint("failed", 0.0 if ok else 1.0)
        trial.set_constraint("memory", memory_violation)
        self.study.tell(trial, values)

    def _memory_violation(self, peak: float | None) -> float:
        budget = self.options.max_memory_bytes
        if not budget or peak is None:
            return 0.0
        return (peak - budget) / budget  # > 0 infeasible

    def record(self, trial: Trial, role: str, resolved: knobs.Resolved, result: R.TrialResult,
               claimed: bool = False) -> TrialRecord:
        """Store a measurement on its trial and tell Optuna. ``claimed``: the claim wrote the trial's ``role`` and
        ``config_key`` already (the same values): they are not written again (a transaction each on a database)."""
        ok = result.ok and result.samples_per_s is not None and math.isfinite(result.samples_per_s)
        compact = {k: v for k, v in result.to_dict().items() if k not in ("config", "not_applicable", "error", "outcome")}
        error = None
        if result.error:
            tail = [line for line in result.error.get("stderr_tail") or [] if line.strip()][-5:]
            error = {"type": result.error.get("type", ""), "message": result.error.get("message", ""), "stderr_tail": tail}
        attrs = {
            "outcome": result.outcome if ok or result.outcome != R.OK else R.ERROR,
            "role": role,
            "config": resolved.config,
            "config_key": resolved.key(),
            "not_applicable": {**resolved.not_applicable, **result.not_applicable},
            "result": compact,
            "duration_s": result.wall_s,
        }
        if error:
            attrs["error"] = error
        for key, value in attrs.items():
            if not (claimed and key in ("role", "config_key")):
                trial.set_user_attr(key, value)
        if ok:
            values = [float(result.samples_per_s), float(result.peak_memory_bytes or 0)]  # type: ignore[arg-type]
            self._tell(trial, True, values, self._memory_violation(result.peak_memory_bytes))
        else:
            self._tell(trial, False, [0.0, self._pessimistic_memory()], 0.0)
        return TrialRecord(
            number=trial.number,
            role=role,
            config=resolved.config,
            outcome=attrs["outcome"],
            samples_per_s=result.samples_per_s if ok else None,
            peak_memory_bytes=result.peak_memory_bytes if ok else None,
            speedup=Evidence.of(self.study).speedup(trial.number) if ok else None,
            error=(error or {}).get("message"),
            duration_s=result.wall_s,
            cut_short=bool(result.notes.get("cut_short")),
            over_budget=ok and self._memory_violation(result.peak_memory_bytes) > 0,
            load=dict(result.load or {}),
        )

    def record_duplicate(self, trial: Trial, role: str, resolved: knobs.Resolved, hit: FrozenTrial) -> TrialRecord:
        for key in ("outcome", "config", "config_key", "not_applicable", "result", "error"):
            if key in hit.user_attrs:
                trial.set_user_attr(key, hit.user_attrs[key])
        trial.set_user_attr("role", role)
        trial.set_user_attr("duplicate_of", hit.number)
        trial.set_user_attr("duration_s", 0.0)
        ok = hit.user_attrs.get("outcome") == R.OK
        if hit.state == TrialState.FAIL:
            self.study.tell(trial, state=TrialState.FAIL)
        else:
            self._tell(trial, ok, list(hit.values), hit.constraints.get("memory", 0.0) if ok else 0.0)
        ev = Evidence.of(self.study)
        return TrialRecord(
            number=trial.number,
            role=role,
            config=resolved.config,
            outcome=hit.user_attrs.get("outcome", "?"),
            samples_per_s=ev.samples_per_s(hit.number) if ok else None,
            peak_memory_bytes=int(hit.values[1]) if ok and hit.values else None,
            speedup=ev.speedup(hit.number) if ok else None,
            duplicate_of=hit.number,
            over_budget=ok and hit.constraints.get("memory", 0.0) > 0,
        )

    def interrupted(self, trial: Trial, role: str, params: Mapping[str, Any]) -> None:
        trial.set_user_attr("outcome", R.INTERRUPTED)
        trial.set_user_attr("role", role)
        trial.set_user_attr("error", {"type": "Interrupted", "message": "stopped by Ctrl-C or SIGTERM"})
        self.study.tell(trial, state=TrialState.FAIL)
        self.study.enqueue_trial(dict(params), user_attrs={"role": role, "requeued_from": trial.number})

    # ------------------------------------------------------------ the loop

    def estimate_s(self, trial_s: float, remaining: int, elapsed_s: float = 0.0) -> float:
        """The rest of the study at the defaults' pace: the remaining trials, the noise floor, and a race of
        ``race_candidates`` configurations and the baseline for all its rounds (an upper bound: a race stops
        as soon as it is settled, and dominated trials are cut short); never past the time budget, which ends
        the study first (``elapsed_s``: spent of it already)."""
        opts = self.options
        race_measurements = opts.race_rounds * (opts.race_candidates + 1) if opts.race_rounds else 0
        rest = trial_s * (max(0, remaining) + opts.floor_repeats + race_measurements)
        ends = [opts.time_budget_s - elapsed_s if opts.time_budget_s is not None else None,
                opts.deadline - time.time() if opts.deadline is not None else None]
        return min([rest, *(max(0.0, e) for e in ends if e is not None)])

    def _repeat(self, config: Mapping[str, Any]) -> R.TrialResult:
        return self.remeasure(config) if self.remeasure is not None else self.evaluate(config, (), None)

    def _on_repeat(self, what: str, number: int, rate: float | None) -> None:
        self._repeats += 1
        if self.on_repeat:
            self.on_repeat(what, number, rate)

    def failed_baseline(self) -> FrozenTrial | None:
        """The baseline trial, when it was measured and failed and no other measurement of the defaults succeeded."""
        failed = None
        for t in self.study.get_trials(deepcopy=False):
            if t.user_attrs.get("role") != "baseline" or not is_measured(t):
                continue
            if t.user_attrs.get("outcome") == R.OK:
                return None
            failed = failed or t
        return failed

    def run(self) -> Summary:
        failed = self.failed_baseline()
        if failed is not None:  # every speed-up is a ratio to the defaults: without them the study can answer nothing
            raise WorkloadError(baseline_failure(failed.number, failed.user_attrs.get("outcome", "?"),
                                                 (failed.user_attrs.get("error") or {}).get("message", ""), again=True))
        session = Session(self.study)
        opts = self.options
        self._repeats = 0
        cache = self._cache()
        summary = Summary(reason="", measured=len(self.measured()), new=0, duplicates=0, elapsed_s=0.0)
        repeats = 0
        floor_done = False
        recovered_at = -math.inf  # the last look for stale trials (at once, then every RECOVER_EVERY_S)
        try:
            while True:
                self.check()
                if opts.floor_repeats and not floor_done:
                    if race.floor_missing(self.study, opts.floor_repeats, opts.stale_grace_s):
                        summary.repeat_processes += race.measure_floor(self.study, self._repeat, opts.floor_repeats,
                                                                       self._on_repeat, opts.stale_grace_s)
                        session.save()
                    elif baseline_trial(self.study) is not None and not race.floor_missing(self.study, opts.floor_repeats):
                        # Complete (whoever measured it): it never goes missing again, so it is not read
                        # again each trial (the evidence of the whole study, 0.15 s at 10,000 trials).
                        floor_done = True
                if time.monotonic() >= recovered_at + RECOVER_EVERY_S:
                    recovery.recover_stale(self.study, opts.stale_grace_s)
                    recovered_at = time.monotonic()
                trials = self.study.get_trials(deepcopy=False)  # one read for the budget and the seeds
                measured, running = self._budget_counts(trials)
                summary.measured = measured
                if measured >= opts.trials:
                    summary.reason = f"the study holds {measured} measured configurations (--trials {opts.trials})"
                    break
                if (opts.time_budget_s is not None and session.elapsed_s >= opts.time_budget_s) or (
                    opts.deadline is not None and time.time() >= opts.deadline
                ):
                    summary.reason = "time budget spent"
                    break
                if measured + running >= opts.trials:  # the rest of the budget is being measured elsewhere
                    time.sleep(opts.poll_s)
                    continue
                self.enqueue_seeds(trials)
                rec, resolved, trial_id = self._one_trial(cache)
                session.save()
                if rec is None:  # another process measures it, or the budget filled up meanwhile
                    continue
                rec.note = self._sampler_note()
                summary.records.append(rec)
                if rec.role == "baseline" and rec.outcome != R.OK and rec.duplicate_of is None:
                    if self.on_trial:
                        self.on_trial(rec)
                    raise WorkloadError(baseline_failure(rec.number, rec.outcome, rec.error or ""))
                if rec.role == "baseline" and rec.outcome == R.OK and rec.duration_s and rec.duplicate_of is None:
                    rec.estimate_s = self.estimate_s(rec.duration_s, opts.trials - self._budget_counts()[0], session.elapsed_s)
                if self.on_trial:
                    self.on_trial(rec)
                if rec.duplicate_of is not None:
                    summary.duplicates += 1
                    repeats += 1
                    if repeats >= opts.max_repeats:
                        summary.reason = f"space exhausted: the sampler repeated measured configurations {repeats} times in a row"
                        break
                    continue
                repeats = 0
                cache[resolved.key()] = self.study._storage.get_trial(trial_id)
                summary.new += 1
            if opts.race_rounds > 0:
                ends = [d for d in (opts.deadline, session.started_at + opts.time_budget_s if opts.time_budget_s else None) if d]
                deadline = min(ends) if ends else None
                summary.race = race.run_race(self.study, self._repeat, opts.race_rounds, opts.race_candidates,
                                             on_measure=self._on_repeat, deadline=deadline, together=self.together)
                summary.repeat_processes += summary.race.processes if summary.race else 0
                if self.ablate is not None:
                    summary.ablation = race.run_ablation(self.study, self.ablate, self.ctx, on_measure=self._on_repeat,
                                                         deadline=deadline)
                    summary.repeat_processes += summary.ablation.processes if summary.ablation else 0
                    self._measure_minimal(cache, summary, deadline)
                session.save()
        finally:
            session.save()
        summary.elapsed_s = session.elapsed_s
        summary.repeats = self._repeats
        summary.verdict = Evidence.of(self.study).verdict()
        return summary

    def _measure_minimal(self, cache: dict[str, FrozenTrial], summary: Summary, deadline: float | None) -> None:
        """The ablation's recommendation, when it is not a configuration measured already: one trial of its own
        (its memory, a trial number every view shows), outside the trial budget."""
        ab = Evidence.of(self.study).ablation()
        if ab is None or not ab.settled or ab.minimal is not None or (deadline is not None and time.time() >= deadline):
            return
        plan = self.study.user_attrs.get(ablation.ABLATION + ab.ablation_id) or {}
        point = next((p for p in plan.get("path") or [] if p.get("key") == ab.minimal_key), None)
        if point is None:
            return
        params = {name: point["config"][name] for name in self.space.search if name in point["config"]}
        self.study.enqueue_trial(params, user_attrs={"role": ablation.ROLE, "ablation": ab.ablation_id})
        rec, resolved, trial_id = self._one_trial(cache)
        if rec is None:
            return
        summary.records.append(rec)
        if self.on_trial:
            self.on_trial(rec)
        if rec.duplicate_of is None and resolved is not None:
            cache[resolved.key()] = self.study._storage.get_trial(trial_id)
            summary.new += 1

    # ------------------------------------------------------------ sharing a study with other processes

    def _claims(self, trials: Sequence[FrozenTrial] | None = None) -> list[FrozenTrial]:
        """Trials that measured, or are measuring, a configuration of the budget (any process)."""
        out = []
        for t in self.study.get_trials(deepcopy=False) if trials is None else trials:
            if t.user_attrs.get("duplicate_of") is not None or "config_key" not in t.user_attrs:
                continue
            if t.state == TrialState.RUNNING or is_measured(t):
                out.append(t)
        return out

    def _budget_counts(self, trials: Sequence[FrozenTrial] | None = None) -> tuple[int, int]:
        """(measured configurations, configurations being measured now by any process)."""
        claims = self._claims(trials)
        running = sum(1 for t in claims if t.state == TrialState.RUNNING)
        return len(claims) - running, running

    def _skip(self, trial: Trial, role: str, why: str) -> None:
        """Give a trial up without measuring: not counted, not learned from (PRUNED), not queued again."""
        trial.set_user_attr("outcome", SKIPPED)
        trial.set_user_attr("role", role)
        trial.set_user_attr("error", {"type": "Skipped", "message": why})
        self.study.tell(trial, state=TrialState.PRUNED)

    def _claim(self, trial: Trial, role: str, resolved: knobs.Resolved) -> FrozenTrial | str | None:
        """Claim a configuration through the storage before measuring it.

        Returns a measured trial to answer from, a reason to skip, or None (measure it).
        The lowest-numbered claim of a configuration wins, and only the first ``trials``
        claims by number are measured: every process reaches the same answer from the
        storage, so no configuration is measured twice and the budget holds for the fleet.
        """
        me = recovery.owner()
        trial.set_user_attr("config_key", resolved.key())
        trial.set_user_attr("role", role)
        # The study's trials once the earlier undecided ones have chosen, this one included (a running trial is
        # read afresh on every read), read after the writes above.
        trials, undecided = self._after_undecided(trial.number)
        self._read = trials
        mine = next((t for t in trials if t.number == trial.number), None) or self.study._storage.get_trial(trial._trial_id)
        who = mine.system_attrs.get(recovery.OWNER) or {}
        if (who.get("host"), who.get("pid")) != (me["host"], me["pid"]):
            return "taken"  # SQLite handed this queued trial to two processes: the other one measures it
        earlier = [t for t in self._claims(trials) if t.number < trial.number]
        for t in earlier:
            if t.user_attrs.get("config_key") == resolved.key():
                return t if t.state != TrialState.RUNNING else f"#{t.number} is measuring the same configuration"
        # Earlier trials still undecided after the wait (a process stopped while choosing) may claim
        # the budget too: count them (one that turns out a cache answer leaves room a later trial takes).
        # The ablation's recommendation is measured beyond the budget (the study's answer, not a search trial).
        if role != ablation.ROLE and len(earlier) + len(undecided) >= self.options.trials:
            return f"the budget of {self.options.trials} configurations is taken"
        return None

    def _after_undecided(self, number: int) -> tuple[list[FrozenTrial], list[FrozenTrial]]:
        """The study's trials once every earlier trial still choosing its configuration has claimed one.

        Each process writes its claim, then reads the others'. An earlier trial still choosing (a
        GP suggestion takes 0.4 s) may write the same configuration after this one has read: it
        then sees this later claim, not yet an earlier one, and measures too. So a claim first waits
        for the earlier undecided trials (the earliest never waits, so none wait forever), at most
        UNDECIDED_WAIT_S for a process that stopped while choosing (it is recovered as stale).
        Returns (trials, the earlier ones still undecided when the wait ended).
        """
        deadline = time.monotonic() + UNDECIDED_WAIT_S
        while True:
            trials = self.study.get_trials(deepcopy=False)
            undecided = [t for t in trials if t.state == TrialState.RUNNING and t.number < number
                         and "config_key" not in t.user_attrs and not recovery.is_stale(t, self.options.stale_grace_s)]
            if not undecided or time.monotonic() >= deadline:
                return trials, undecided
            time.sleep(UNDECIDED_POLL_S)

    def _one_trial(self, cache: Mapping[str, FrozenTrial]) -> tuple[TrialRecord | None, knobs.Resolved | None, int]:
        self._read = None
        trial = self.study.ask()
        role = trial.user_attrs.get("role", "search")
        params: dict[str, Any] = {}
        try:
            self.study._storage.set_trial_system_attr(trial._trial_id, recovery.OWNER, recovery.owner())
            if self.options.placement:
                trial.set_user_attr("placement", self.options.placement)
            params = self.suggest(trial)
            resolved = knobs.resolve({**self.base, **params}, self.ctx)
            hit = cache.get(resolved.key())
            if hit is not None:
                return self.record_duplicate(trial, role, resolved, hit), resolved, trial._trial_id
            claim = self._claim(trial, role, resolved)
            if claim == "taken":
                return None, None, trial._trial_id
            if isinstance(claim, str):
                self._skip(trial, role, claim)
                return None, None, trial._trial_id
            if claim is not None:
                return self.record_duplicate(trial, role, resolved, claim), resolved, trial._trial_id
            dominators: list[tuple[float, float]] = []
            margin = None
            if self.options.early_stop and role == "search":
                # The evidence of the trials the claim just read (as Evidence.of would read them again now).
                ev = Evidence(self._read, self.study.user_attrs) if self._read is not None else Evidence.of(self.study)
                dominators = [(ev.configs[n].samples_per_s, float(ev.configs[n].peak_memory_bytes)) for n in ev.front()]
                margin = ev.cut_margin(self.options.cut_margin)
            # The claim holds: from here this trial measures (a RUNNING trial without the mark is
            # still choosing its configuration, or about to give way to an earlier claim).
            trial.set_user_attr("measuring_since", dt.datetime.now(dt.timezone.utc).timestamp())
            with Heartbeat(trial._trial_id, self.study._storage):
                result = self.evaluate(resolved.config, dominators, margin)
            return self.record(trial, role, resolved, result, claimed=True), resolved, trial._trial_id
        except optuna.exceptions.UpdateFinishedTrialError:
            # Another worker took this trial as stale (its heartbeats lapsed while the database was
            # away) and queued its configuration again: the queued copy will be measured; whatever
            # this process measured is dropped, never doubled.
            return None, None, trial._trial_id
        except KeyboardInterrupt:
            if self.study._storage.get_trial(trial._trial_id).state == TrialState.RUNNING:
                self.interrupted(trial, role, params or dict(trial.params))
            raise
        except Exception:
            # The storage refused a write (or anything else broke): record the trial as interrupted if the
            # storage still takes writes; if not, it stays RUNNING and the next start re-queues it (its
            # process is gone). Either way its configuration is measured again, never lost.
            try:
                if self.study._storage.get_trial(trial._trial_id).state == TrialState.RUNNING:
                    self.interrupted(trial, role, params or dict(trial.params))
            except Exception:  # noqa: BLE001 - the storage is away: recovery re-queues it on the next start
                pass
            raise


class Heartbeat:
    """Records Optuna heartbeats for a running trial (RDB storages), so other workers can tell it is alive.

    Optuna records them only inside ``study.optimize``; the ask/tell loop does it here. A
    failed heartbeat (the database is away for a moment) is skipped, never a traceback:
    the trial goes on, and if the outage outlasts the grace period another worker re-queues it.
    """

    def __init__(self, trial_id: int, store: optuna.storages.BaseStorage) -> None:
        import threading

        self.trial_id = trial_id
        self.store = store
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="autotune-heartbeat", daemon=True)
        self.enabled = isinstance(store, BaseHeartbeat) and is_heartbeat_enabled(store)

    def _beat(self) -> None:
        assert isinstance(self.store, BaseHeartbeat)
        interval = self.store.get_heartbeat_interval() or 10
        while True:
            try:
                self.store.record_heartbeat(self.trial_id)
            except Exception:  # noqa: BLE001 - the database is away: try again at the next beat
                pass
            if self.stop.wait(interval):
                return

    def __enter__(self) -> Heartbeat:
        if self.enabled:
            self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        if self.enabled:
            self.thread.join(timeout=5)


def baseline_failure(number: int, outcome: str, message: str, again: bool = False) -> str:
    """Why a study cannot go on when PyTorch's defaults fail, and what to do (one line)."""
    advice = {
        R.TIMEOUT: "raise --trial-timeout (or use --quick, a smaller model or batch)",
        R.OOM: "fix a smaller batch in the space's [fixed] (or --max-memory), or a smaller model",
        R.NAN: "the model's loss is not finite with PyTorch's defaults: fix the model or its data",
    }.get(outcome, "fix the model or its data (autotune measure --model ... shows the whole error)")
    where = "this study measured them" if again else "measured"
    fresh = "; then start a new study (--study NAME-2): this one holds the failed defaults" if again else ""
    detail = f": {message}" if message else ""
    return (f"PyTorch's defaults failed when {where} (trial #{number}, {outcome}{detail}), and every speed-up is a "
            f"ratio to them: {advice}{fresh}")


SLOW_FACTOR = 3.0  # a trial whose steps run this many times the defaults' whole trial, unfinished, is stopped as slower


def slow_limit(study: optuna.Study, config: Mapping[str, Any]) -> float | None:
    """How long a configuration's steps may run before it is stopped as ``slower``: SLOW_FACTOR times the
    baseline's whole trial (None before the baseline is measured, and for the baseline's own configuration,
    which only ``--trial-timeout`` bounds). A configuration that has run three times as long as the whole
    baseline trial without finishing its windows cannot be the answer; waiting longer teaches nothing."""
    base = baseline_trial(study)
    if base is None or not base.user_attrs.get("duration_s"):
        return None
    if base.user_attrs.get("config") == dict(config):
        return None
    return SLOW_FACTOR * float(base.user_attrs["duration_s"])


def baseline_measured(study: optuna.Study, trials: Sequence[FrozenTrial] | None = None) -> bool:
    """The baseline trial has been measured (successfully or not); ``trials``: the study's, just read."""
    return any(t.user_attrs.get("role") == "baseline" and is_measured(t)
               for t in (study.get_trials(deepcopy=False) if trials is None else trials))


def base_config(ctx: knobs.Context, fixed: Mapping[str, Any], batch_size: int | None) -> dict[str, Any]:
    """PyTorch's defaults, the workload's batch size, and the space's fixed values."""
    base = knobs.defaults(ctx)
    if batch_size:
        base[knobs.BATCH_KNOB] = batch_size
    base.update(fixed)
    return knobs.resolve(base, ctx).config
