"""The tuning loop's phases, in the order a run takes them, each a unit over the stored study.

1. **search** (:mod:`.search`): Optuna suggests configurations and each is measured once in a
   fresh process until the budget is spent; the seeds come first (:mod:`.seeds`: PyTorch's
   defaults, the guides' recipe, earlier studies' winners), configurations are claimed through
   the storage so processes sharing a study never measure one twice (:mod:`.sharing`), and the
   default sampler hands over from a Gaussian process to TPE in long studies (:mod:`.sampler`); each trial's
   outcome is stored and told to Optuna by :mod:`.outcomes`.
2. **noise floor** (:mod:`.floor`): right after the baseline trial, the defaults measured again in
   processes of their own, so that every comparison after it knows the machine's noise. It runs
   inside the search, before the next trial.
3. **race** (:mod:`.race`): the configurations the evidence cannot separate from the fastest,
   measured again round after round until the verdict is settled.
4. **what each knob bought** (:mod:`.bought`): the path from the defaults to the winner, one knob
   at a time, each step measured in shared processes.
5. **minimal configuration** (:mod:`.minimal`): the shortest start of that path that keeps the
   gain, measured as a trial of its own when the search never measured it.
6. **the claim, measured apart** (:mod:`.confirm`): the race's choice reduced to the knobs that pay (the minimal
   configuration, or the knobs the search shows an effect for), and its speed-up measured again in fresh processes
   interleaved with the defaults', until its interval is as narrow as the noise allows.
7. **the numerics** (:mod:`.numerics_check`): the recommendation trained beside the defaults from the same weights on
   the same samples, in fresh processes, and their losses compared; a difference is traced to a knob, and
   ``--numerics strict`` recommends the fastest configuration whose numerics hold.

Every phase is a function (the search a class, for its state across trials) over a
:class:`autotune.store.LiveStudy` (what the study holds; every write goes through it) and a
:class:`.bench.Bench` (how this process measures), with its own few settings, and returns its
report; it reads what it needs from the study, so each runs alone on a study in the right
state (a benchmark or a test measures one phase without the others), and a stopped run
resumes each where it stopped. The time a run may take is its :class:`.session.Session`.
Each phase after the search is also a unit (:mod:`.phase`: its module's ``PHASE``), which
:class:`autotune.tuning.loop.Tuner` walks in the order of :data:`autotune.tuning.loop.PHASES`; the figures come from
:class:`autotune.evidence.Evidence`, computed from the study each phase leaves.
"""

from __future__ import annotations

from autotune.tuning.phases import bought, confirm, floor, minimal, numerics_check, phase, race, sampler, seeds, sharing
from autotune.tuning.phases.bench import Bench
from autotune.tuning.phases.outcomes import TrialRecord
from autotune.tuning.phases.search import Search, SearchOptions, SearchReport
from autotune.tuning.phases.seeds import Seeds
from autotune.tuning.phases.session import Session

__all__ = ["Bench", "Search", "SearchOptions", "SearchReport", "Seeds", "Session", "TrialRecord", "bought", "confirm",
           "floor", "minimal", "numerics_check", "phase", "race", "sampler", "seeds", "sharing"]
