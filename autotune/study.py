"""The tuning study: Optuna glue for a resumable, multi-objective search of the knob space.

One coordinator process asks Optuna for configurations and tells it the results;
every measurement runs in an isolated trial process (:mod:`autotune.runner`).
What this module decides:

- the first trials are the PyTorch defaults (the baseline, trial 0) and the guides'
  "every trick on" recipe;
- a failed trial (oom, nan, error, timeout, crashed, not_applicable) is told as a
  COMPLETE trial with pessimistic values and a violated constraint, so every
  sampler learns to avoid its region (Optuna's samplers ignore FAIL trials) and it
  never reaches the Pareto front;
- a configuration already measured is answered from the stored result, and a
  sampler that keeps repeating itself ends the study ("space exhausted");
- ``--max-memory`` is a real constraint, not a penalty;
- a search trial that is clearly dominated by the current front after a few timed
  windows is cut short (Optuna's pruners do not work with two objectives);
- Ctrl-C/SIGTERM record the running trial as interrupted and queue it again, so a
  later run measures it.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import warnings

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState

from autotune import knobs, storage
from autotune import result as R
from autotune.errors import AutotuneError
from autotune.space import Space

warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

SAMPLERS = ("tpe", "gp", "random", "nsga2")
DEFAULT_SAMPLER = "gp"  # from benchmarks/search_efficiency.py: best share of the grid optimum after 20 trials

Evaluate = Callable[[Mapping[str, Any], Sequence[tuple[float, float]]], R.TrialResult]


def make_sampler(name: str, seed: int | None = None, n_startup_trials: int = 8) -> optuna.samplers.BaseSampler:
    """A sampler by name. ``gp`` (the default, chosen from benchmarks/search_efficiency.py) is
    Gaussian-process Bayesian optimisation; ``tpe`` is multivariate TPE (cheaper per suggestion
    in long studies); ``nsga2`` is the genetic algorithm; ``random`` is the control."""
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=n_startup_trials)
    if name == "gp":
        try:
            import scipy  # noqa: F401
        except ImportError:
            raise AutotuneError("--sampler gp needs scipy: pip install scipy") from None
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup_trials, warn_independent_sampling=False)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=10)
    raise AutotuneError(f"--sampler {name!r}: expected one of {', '.join(SAMPLERS)}")


@dataclass
class Options:
    trials: int = 30
    time_budget_s: float | None = None
    max_memory_bytes: int | None = None
    max_repeats: int = 30
    early_stop: bool = True
    failures_as: str = "constraint"  # "fail": Optuna's FAIL state (only to measure the difference)
    confirm_top: int = 3  # at the end, re-measure the baseline and this many of the fastest front trials ...
    confirm_times: int = 2  # ... this many times each (0: never), against the winner's curse


@dataclass
class TrialRecord:
    """What the progress display gets after each trial."""

    number: int
    role: str
    config: dict[str, Any]
    outcome: str
    samples_per_s: float | None
    peak_memory_bytes: int | None
    cv: float | None = None
    duplicate_of: int | None = None
    error: str | None = None
    duration_s: float | None = None
    cut_short: bool = False


@dataclass
class Summary:
    reason: str
    measured: int
    new: int
    duplicates: int
    elapsed_s: float
    baseline: float | None = None
    best: float | None = None
    records: list[TrialRecord] = field(default_factory=list)

    @property
    def speedup(self) -> float | None:
        return self.best / self.baseline if self.best and self.baseline else None


def is_measured(t: FrozenTrial) -> bool:
    """A trial that measured a configuration (not a cache answer, not interrupted)."""
    return (
        t.state == TrialState.COMPLETE
        or (t.state == TrialState.FAIL and t.user_attrs.get("outcome") not in (None, R.INTERRUPTED))
    ) and t.user_attrs.get("duplicate_of") is None and "outcome" in t.user_attrs


def front(study: optuna.Study) -> list[FrozenTrial]:
    """The Pareto front: feasible ok trials, not duplicates, sorted by throughput."""
    trials = [t for t in study.best_trials if t.user_attrs.get("outcome") == R.OK and t.user_attrs.get("duplicate_of") is None]
    return sorted(trials, key=lambda t: -t.values[0])


def confirmations(study: optuna.Study) -> dict[int, list[float]]:
    """Re-measurements of trials (trial number -> samples/s), kept on the study (finished trials are read-only)."""
    return {int(k): list(v) for k, v in (study.user_attrs.get("confirmations") or {}).items()}


def figure(t: FrozenTrial, confirmed: Mapping[int, list[float]] | None = None) -> float:
    """A trial's throughput: the median of its first measurement and its confirmations."""
    again = (confirmed or {}).get(t.number) or []
    return statistics.median([t.values[0], *again]) if again else t.values[0]


def baseline_trial(study: optuna.Study) -> FrozenTrial | None:
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("role") == "baseline" and t.user_attrs.get("outcome") == R.OK and t.user_attrs.get("duplicate_of") is None:
            return t
    return None


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
        on_confirm: Callable[[FrozenTrial, float | None], None] | None = None,
    ) -> None:
        self.study = study
        self.space = space
        self.ctx = ctx
        self.base = dict(base)
        self.evaluate = evaluate
        self.options = options or Options()
        self.on_trial = on_trial
        self.on_confirm = on_confirm

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

    def enqueue_seeds(self) -> None:
        for role, params in self.seed_params():
            self.study.enqueue_trial(params, user_attrs={"role": role})

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

    # ------------------------------------------------------------ bookkeeping

    def measured(self) -> list[FrozenTrial]:
        return [t for t in self.study.get_trials(deepcopy=False) if is_measured(t)]

    def _cache(self) -> dict[str, FrozenTrial]:
        return {t.user_attrs["config_key"]: t for t in self.measured() if "config_key" in t.user_attrs}

    def _pessimistic_memory(self) -> float:
        peaks = [t.values[1] for t in self.measured() if t.user_attrs.get("outcome") == R.OK and t.values]
        return 2.0 * max(peaks) if peaks else float(1 << 40)

    def _dominators(self) -> list[tuple[float, float]]:
        return [(t.values[0], t.values[1]) for t in front(self.study)]

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

    def record(self, trial: Trial, role: str, resolved: knobs.Resolved, result: R.TrialResult) -> TrialRecord:
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
            cv=result.samples_per_s_cv,
            error=(error or {}).get("message"),
            duration_s=result.wall_s,
            cut_short=bool(result.notes.get("cut_short")),
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
        return TrialRecord(
            number=trial.number,
            role=role,
            config=resolved.config,
            outcome=hit.user_attrs.get("outcome", "?"),
            samples_per_s=hit.values[0] if ok and hit.values else None,
            peak_memory_bytes=int(hit.values[1]) if ok and hit.values else None,
            duplicate_of=hit.number,
        )

    def interrupted(self, trial: Trial, role: str, params: Mapping[str, Any]) -> None:
        trial.set_user_attr("outcome", R.INTERRUPTED)
        trial.set_user_attr("role", role)
        trial.set_user_attr("error", {"type": "Interrupted", "message": "stopped by Ctrl-C or SIGTERM"})
        self.study.tell(trial, state=TrialState.FAIL)
        self.study.enqueue_trial(dict(params), user_attrs={"role": role, "requeued_from": trial.number})

    # ------------------------------------------------------------ the loop

    def confirm(self) -> list[tuple[FrozenTrial, float | None]]:
        """Re-measure the baseline and the fastest front trials, interleaved, in fresh processes.

        The fastest of many noisy measurements is biased upwards (the winner's curse); the
        exported figures and speed-ups use the median of the first measurement and these.
        """
        opts = self.options
        base = baseline_trial(self.study)
        top = sorted(front(self.study), key=lambda t: -t.values[0])[: opts.confirm_top]
        targets = ([base] if base else []) + [t for t in top if base is None or t.number != base.number]
        done: list[tuple[FrozenTrial, float | None]] = []
        for round_ in range(opts.confirm_times):
            for t in targets:
                stored = confirmations(self.study)
                if len(stored.get(t.number, [])) > round_:
                    continue
                res = self.evaluate(t.user_attrs["config"], [])
                rate = res.samples_per_s if res.ok else None
                if rate is not None:
                    stored.setdefault(t.number, []).append(rate)
                    self.study.set_user_attr("confirmations", {str(k): v for k, v in stored.items()})
                done.append((t, rate))
        return done

    def run(self) -> Summary:
        start = time.monotonic()
        opts = self.options
        if not self.study.get_trials(deepcopy=False):
            self.enqueue_seeds()
        cache = self._cache()
        baseline = baseline_trial(self.study)
        summary = Summary(reason="", measured=len(self.measured()), new=0, duplicates=0, elapsed_s=0.0)
        repeats = 0
        while True:
            if summary.measured >= opts.trials:
                summary.reason = f"the study holds {summary.measured} measured configurations (--trials {opts.trials})"
                break
            if opts.time_budget_s is not None and time.monotonic() - start >= opts.time_budget_s:
                summary.reason = "time budget spent"
                break
            trial = self.study.ask()
            role = trial.user_attrs.get("role", "search")
            params: dict[str, Any] = {}
            try:
                self.study._storage.set_trial_system_attr(trial._trial_id, "autotune:owner", storage.owner())
                params = self.suggest(trial)
                resolved = knobs.resolve({**self.base, **params}, self.ctx)
                hit = cache.get(resolved.key())
                if hit is not None:
                    rec = self.record_duplicate(trial, role, resolved, hit)
                    summary.duplicates += 1
                else:
                    dominators = self._dominators() if opts.early_stop and role == "search" else []
                    result = self.evaluate(resolved.config, dominators)
                    rec = self.record(trial, role, resolved, result)
            except KeyboardInterrupt:
                if self.study._storage.get_trial(trial._trial_id).state == TrialState.RUNNING:
                    self.interrupted(trial, role, params or dict(trial.params))
                raise
            summary.records.append(rec)
            if self.on_trial:
                self.on_trial(rec)
            if rec.duplicate_of is not None:
                repeats += 1
                if repeats >= opts.max_repeats:
                    summary.reason = f"space exhausted: the sampler repeated measured configurations {repeats} times in a row"
                    break
                continue
            repeats = 0
            cache[resolved.key()] = self.study._storage.get_trial(trial._trial_id)
            summary.measured += 1
            summary.new += 1
            if role == "baseline" and rec.outcome == R.OK:
                baseline = cache[resolved.key()]
        if opts.confirm_times > 0:
            for t, rate in self.confirm():
                if self.on_confirm:
                    self.on_confirm(t, rate)
        summary.elapsed_s = time.monotonic() - start
        confirmed = confirmations(self.study)
        ok = [t for t in self.measured() if t.user_attrs.get("outcome") == R.OK]
        summary.best = max((figure(t, confirmed) for t in ok), default=None)
        summary.baseline = figure(baseline, confirmed) if baseline else None
        return summary


def base_config(ctx: knobs.Context, fixed: Mapping[str, Any], batch_size: int | None) -> dict[str, Any]:
    """PyTorch's defaults, the workload's batch size, and the space's fixed values."""
    base = knobs.defaults(ctx)
    if batch_size:
        base["batch_size"] = batch_size
    base.update(fixed)
    return knobs.resolve(base, ctx).config
