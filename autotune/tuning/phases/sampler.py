"""Which sampler suggests the next configuration, and the default's hand-over from a Gaussian process to TPE.

Optuna's samplers by name (:func:`make_sampler`); the default, ``gp``, is a Gaussian process
until the study is long enough that its refits cost more than a trial's worth of waiting,
then multivariate TPE (:class:`GPThenTPE`). :class:`Handover` says so once per run and
records it on the study once (``sampler_switch``), so ``autotune status`` can show it. Past the hand-over,
TPE's proposals of configurations measured already are steered to the nearest one not measured
(:attr:`GPThenTPE.steer`, set by the search: :mod:`.steer`).
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Callable, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.errors import AutotuneError
from autotune.request import SAMPLERS, option
from autotune.store import LiveStudy
from autotune.store.records import SAMPLER_SWITCH

#: Past this many complete trials the default sampler (``gp``) hands over to ``tpe``. A Gaussian process refits on
#: the whole history for every suggestion: measured on the 2-core CPU machines (benchmarks/results/fleet_scale.txt:
#: a 9-knob space, two objectives and two constraints), a suggestion took 0.44 s at 100 trials, 0.87 s at 200,
#: 1.26 s at 300 and 6.4 s at 1,000 (a resumed 10,000-trial study asked none within 4 minutes); TPE's took 0.14 s
#: at 10,000. Studies of the usual size (tens of trials) never reach it.
GP_MAX_TRIALS = 200


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
            raise AutotuneError(f"{option('sampler', 'gp')} needs scipy: pip install scipy") from None
        gp = optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup_trials, warn_independent_sampling=False)
        return GPThenTPE(gp, make_sampler("tpe", seed, n_startup_trials), gp_max_trials)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=10)
    raise AutotuneError(f"{option('sampler', name, quoted=True)}: expected one of {', '.join(SAMPLERS)}")


class GPThenTPE(optuna.samplers.BaseSampler):
    """The Gaussian process while the study holds fewer than ``limit`` complete trials, then TPE.

    A GP's suggestion refits on every complete trial (its cost grows with the cube of the history);
    TPE's grows about linearly. The choice is made once per trial (in ``before_trial``), and once TPE
    has taken over in a process it keeps the study (trials are never removed, so the history only
    grows): after the hand-over no trial is counted again. :attr:`switched_at` is the first trial
    number it suggested with TPE in this process (None while the GP suggests).

    :attr:`steer` (set by the search, :class:`autotune.tuning.phases.search.Search`): ``steer(params)`` is given TPE's
    proposal for a trial (its relative parameters) and returns the parameters to use instead (the nearest
    configuration not measured yet: :mod:`.steer`), or None to keep it. Only TPE's proposals are steered, so the
    Gaussian process (a study under ``limit``) decides as it would without it.

    :attr:`afford` (set by the search too): ``afford(params)`` is given every proposal, the Gaussian process's and
    TPE's, and returns it with a compile mode the search's time left affords (:mod:`.afford`), or None to keep it; an
    independent sample of the compile knob (the first, random trials) is moved the same way. A proposal the time left
    cannot afford would otherwise be skipped unmeasured, and the Gaussian process, which learns nothing from a
    skipped trial, would propose it again.
    """

    def __init__(self, gp: optuna.samplers.BaseSampler, tpe: optuna.samplers.BaseSampler, limit: int) -> None:
        self.gp = gp
        self.tpe = tpe
        self.limit = limit
        self.switched_at: int | None = None
        self.steer: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None
        self.afford: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None
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
        chosen = self._for(study, trial)
        params = chosen.sample_relative(study, trial, search_space)
        if chosen is self.tpe and self.steer is not None and params:
            steered = self.steer(dict(params))
            if steered is not None:
                params = {**params, **{k: v for k, v in steered.items() if k in search_space}}
        if self.afford is not None and params:
            moved = self.afford(dict(params))
            if moved is not None:
                params = {**params, **{k: v for k, v in moved.items() if k in search_space
                                       and v in getattr(search_space[k], "choices", (v,))}}
        return params

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: Any) -> Any:
        value = self._for(study, trial).sample_independent(study, trial, param_name, param_distribution)
        if self.afford is not None:
            moved = self.afford({param_name: value})
            choices = getattr(param_distribution, "choices", ())  # the compile knob is categorical
            if moved is not None and moved[param_name] in choices:
                return moved[param_name]
        return value

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        chosen = self._chosen.pop(trial.number, None) or (self.tpe if self.switched_at is not None else self.gp)
        chosen.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.gp.reseed_rng()
        self.tpe.reseed_rng()


class Handover:
    """The default sampler's hand-over, told once per run and recorded on the study once (by the first process)."""

    def __init__(self, live: LiveStudy) -> None:
        self.live = live
        self._told = False  # the hand-over was printed in this run
        self._recorded = False  # ... and recorded on the study by this process

    def opening(self) -> str | None:
        """Before the first trial: the line saying TPE suggests instead of the Gaussian process, when the study is
        already past :data:`GP_MAX_TRIALS` (a resumed long study); the run then does not say it again."""
        sampler = self.live.sampler
        if self._told or not isinstance(sampler, GPThenTPE) or not sampler.past_limit(self.live.study):
            return None
        self._told = True
        return sampler.text()

    def note(self) -> str | None:
        """Once the sampler has handed over: record it on the study (once) and return the line to print (once per
        run)."""
        sampler = self.live.sampler
        if not isinstance(sampler, GPThenTPE) or sampler.switched_at is None or self._recorded:
            return None
        self._recorded = True
        if self.live.records().sampler_switch is None:
            self.live.save(sampler_switch={
                "from": "gp", "to": "tpe", "limit": sampler.limit, "trial": sampler.switched_at,
                "at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")})
        if self._told:
            return None
        self._told = True
        return sampler.text()
