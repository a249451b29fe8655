"""The choices the tuning job's phases make from a study's evidence: what to race, which configuration the race
chose, what to cut short, which configuration the numerics check is about, the path of what each knob bought.

Why a module of its own: the phases (:mod:`autotune.tuning.phases`) ask these of the evidence while a study runs,
the views ask for the figures (:mod:`autotune.evidence.figures`); both rest on the same comparisons
(:mod:`autotune.evidence.comparing`). :class:`Choices` is the part of :class:`autotune.evidence.Evidence` that
chooses.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from autotune.evidence import bought as A
from autotune.evidence import deciding as D
from autotune.evidence import claim as CL
from autotune.evidence import stats
from autotune.evidence.comparing import Comparisons
from autotune.evidence.configs import Measured
from autotune.store.plans import RaceStop
from autotune.evidence import verdict as V
from autotune.evidence.verdict import State, Verdict
from autotune.store.records import Role

INDIFFERENCE = CL.INDIFFERENCE  # configurations not more than 3% apart are equal for a user: the simplest is chosen


class Choices(Comparisons):
    """What the phases choose from the comparisons (:class:`autotune.evidence.comparing.Comparisons`): the leader,
    when to cut a trial short, the race's candidates and its choice, the verdict before its numerics check, and the
    path of what each knob of the choice bought."""

    def leader(self) -> int | None:
        """The fastest feasible configuration other than the defaults, by the figure the views show (the selection's
        for one not measured apart): the likeliest recommendation while the search runs (None: none measured)."""
        points = [c for c in self.ok() if not c.is_baseline]
        return max(points, key=lambda c: (c.samples_per_s, -c.number)).number if points else None

    def cut_margin(self, floor: float) -> float:
        """How much faster a front point must be before a trial is cut short: never below the noise."""
        if not self.noise.known or self.noise.sigma is None:
            return floor
        return max(floor, math.expm1(2.5 * self.noise.sigma))

    def race_candidates(self, limit: int, always: int = 3) -> list[int]:
        """The configurations to race: those whose intervals overlap the fastest's, by estimate.

        Generous on purpose (the race is what separates them): the ``always`` fastest
        estimates are in whatever the noise says (a noise floor from a few processes can
        come out far too small), then the rest whose interval overlaps the fastest's, up to
        ``limit``, plus the one that changes the fewest knobs (so the race can prefer it) and the recipe.
        Never the baseline: it is measured in every round anyway.
        """
        points = sorted((c for c in self.ok() if not c.is_baseline), key=lambda c: -c.samples_per_s)
        if not points:
            return []
        leader = points[0]

        def overlaps(c: Measured) -> bool:
            if not self.noise.known or self.noise.sigma is None:
                return True
            half = stats.t_quantile(self.noise.df) * self.noise.sigma
            return (math.log(leader.samples_per_s) - half / math.sqrt(leader.processes)
                    <= math.log(c.samples_per_s) + half / math.sqrt(c.processes))

        tied = [c for i, c in enumerate(points) if i < always or overlaps(c)]
        chosen = tied[:limit]
        simplest = min(tied, key=lambda c: (len(c.changes), -c.samples_per_s))
        if simplest not in chosen:
            chosen.append(simplest)
        # the expert's recipe too, while the noise cannot tell it from the fastest: it is the configuration most
        # likely to pay before anything is measured, and one unlucky process must not keep it out of the race
        recipe = next((c for c in tied if c.role == Role.RECIPE), None)
        if recipe is not None and recipe not in chosen:
            chosen.append(recipe)
        # and whatever was measured only while the machine was much busier than during the baseline's: its figure says
        # nothing and it cannot win as it is, so it is measured again while the race's time allows (one round of it
        # slower than the fastest beyond the noise, and it leaves)
        chosen += [c for c in points if c.busy_only and c not in chosen]
        return [c.number for c in chosen]

    def to_check(self) -> int | None:
        """The configuration the numerics check is about: the verdict's winner before the check is read into it
        (None when the verdict recommends no change)."""
        verdict = self._unchecked_verdict(True)
        return verdict.winner if verdict.recommends else None

    def _numerics_record(self) -> Any:
        """The latest finished numerics check of the configuration the verdict (before the check) recommends."""
        if "numerics_record" not in self._memo:
            verdict = self._unchecked_verdict(True)
            found = [r for _, r in self.study.numerics_checks() if r.get("done") and verdict.recommends
                     and r.get("number") == verdict.winner]
            self._memo["numerics_record"] = found[-1] if found else None
        return self._memo["numerics_record"]

    def _unchecked_verdict(self, ablated: bool = True) -> Verdict:
        """:meth:`verdict` before the numerics check is read into it."""
        key = ("verdict", ablated)
        if key not in self._memo:
            if ablated and self.confirmation is not None and self.confirmation.claim is not None:
                verdict = D.confirmed(self, self.confirmation)
            else:
                verdict = D.ablated(self, D.raced(self)) if ablated else D.raced(self)
            verdict = D.unclaimed(self, verdict)
            if self.load.share and verdict.state in (State.GAIN, State.UNCONFIRMED, State.NO_GAIN):
                verdict = V.detailed(verdict, self.load.share)
            self._memo[key] = verdict
        return self._memo[key]  # type: ignore[no-any-return]

    def ablation(self) -> A.Ablation | None:
        """What each knob of the race's choice bought, from the defaults (:mod:`autotune.evidence.bought`): measured in
        shared processes once the race is over, one step when the winner changes a single knob; None before. Once the
        claim settled which of its knobs stay, each step is marked kept as the recommendation keeps it."""
        if "ablation" not in self._memo:
            self._memo["ablation"] = None
            found = self._ablation()
            conf = self.confirmation
            if found is not None and conf is not None and conf.record.chosen == found.winner:
                found = A.as_recommended(found, conf.reverted)  # the claim settled which knobs stay
            self._memo["ablation"] = found
        return self._memo["ablation"]  # type: ignore[no-any-return]

    def _ablation(self) -> A.Ablation | None:
        chosen = self.chosen()
        if chosen is None or self.baseline is None:
            return None
        w = self.configs[chosen]
        speedup = self.compare(chosen, self.baseline.number, claim=False)  # between processes: the path's last step
        if len(w.changes) == 1:
            step = A.Step(dict(w.changes), w.key, speedup, speedup, speedup.within)
            return A.Ablation("", w.number, (step,), w.key, w.number, {}, 0)
        plans = [(ablation_id, plan) for ablation_id, plan in self.study.ablation_plans()
                 if plan.get("winner_key") == w.key]
        # the newest path measured whole (one measured again in another order, when a knob that bought nothing
        # stood before one that paid: autotune.evidence.bought.reordered), else the one before it
        for ablation_id, plan in sorted(plans, key=lambda kv: -float(kv[1].get("started", 0.0))):
            keys = [p["key"] for p in plan.get("path") or []]
            processes = sum(1 for b in self.blocks if b.purpose.get("ablation") == ablation_id)
            found = A.analyse(ablation_id, plan, {k: self.within.get(k, []) for k in keys}, self.within_noise,
                              speedup, self.trial_of.get, processes)
            if found is not None:
                return found
        return None

    def choose(self, pool: Sequence[int]) -> stats.Choice:
        """The verdict's rule (:func:`autotune.evidence.stats.choose`) over these configurations."""
        assert self.baseline is not None
        return stats.choose(
            [str(n) for n in pool],
            str(self.baseline.number),
            lambda k: self.speedup(int(k)),  # type: ignore[arg-type, return-value]
            lambda k, leader: self.compare(int(k), int(leader), claim=False),
            {str(n): len(self.configs[n].changes) for n in pool},
        )

    def pick(self, pool: Sequence[int]) -> int:
        """The race's rule of choice among ``pool``: the simplest (fewest knobs changed, then the faster) of the
        fastest and those shown within the indifference zone of it (not more than :data:`INDIFFERENCE` slower, at
        plain 90%): within it configurations are equal for a user."""
        leader = max(pool, key=lambda n: self.configs[n].samples_per_s)
        within = [n for n in pool if n == leader
                  or (r := self.compare(n, leader, claim=False)).low is not None
                  and r.low >= 1.0 / (1.0 + INDIFFERENCE)]
        return min(within, key=lambda n: (len(self.configs[n].changes), -self.configs[n].samples_per_s))

    def _race_pool(self) -> tuple[list[int], bool]:
        """The configurations the race's choice is made among: the candidates the latest race kept (before a race,
        every configuration measured) that may be recommended; and whether the time budget stopped that race before
        it could settle."""
        races = self.study.races()
        unsettled = False
        if races:
            record = races[-1][1]
            pool = [n for n in record.candidates if n not in record.eliminated and n in self.configs]
            unsettled = record.stop is RaceStop.TIME
        else:
            pool = [c.number for c in self.ok() if not c.is_baseline]
        return [n for n in pool if self.recommendable(n)], unsettled

    def recommendable(self, number: int) -> bool:
        """A measured configuration a verdict may recommend: it fits, it did not run on a busy machine only, it is not
        a least change measured to be reported, and on a busy machine its gain does not rest on load-sensitive knobs
        alone."""
        c = self.configs[number]
        return (c.feasible and not c.busy_only and c.role != Role.MINIMAL
                and not (self.load.was_busy and D.only_sensitive(self, number)))

    def chosen(self) -> int | None:
        """The race's choice (what the claim measured apart is about): :meth:`pick` among the candidates the latest
        race kept (before a race, every configuration measured), when the fastest of them beats the defaults at
        plain 90% in the measurements that selected it; None when none does (no gain beyond the noise). A race the
        time budget stopped before it could settle (its share held no more rounds) chooses its fastest when it
        looks faster than the defaults by more than the indifference zone: the claim, measured apart, decides."""
        if self.baseline is None:
            return None
        pool, unsettled = self._race_pool()
        if not pool:
            return None
        leader = max(pool, key=lambda n: self.configs[n].samples_per_s)
        lead = self.compare(leader, self.baseline.number, claim=False) if leader != self.baseline.number else None
        if lead is None or not (lead.above_one() or unsettled and lead.estimate > 1.0 + INDIFFERENCE):
            return None
        picked = self.pick(pool)
        return None if picked == self.baseline.number else picked  # the defaults tied with the fastest: no change

    def fastest(self) -> int | None:
        """The fastest configuration the race could have chosen from (the candidates it kept; every one it may
        recommend when it kept none): where it chose nothing (no gain beyond the noise in the measurements that
        selected), the claim measured apart bounds what the best found would buy, so "no gain beyond the noise" comes
        with its interval. None before the baseline, or when nothing else was measured."""
        if self.baseline is None:
            return None
        pool = [n for n in self._race_pool()[0] if n != self.baseline.number]
        if not pool:
            pool = [c.number for c in self.ok() if not c.is_baseline and self.recommendable(c.number)]
        return max(pool, key=lambda n: self.configs[n].samples_per_s) if pool else None
