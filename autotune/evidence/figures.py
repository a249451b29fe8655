"""Evidence: a study's configurations compared, and every figure any view shows, each computed once.

A speed-up between two configurations measured alternately in the same processes is their
mean log-ratio over those processes, with the within-process noise
(:func:`autotune.evidence.stats.within_process_noise`); otherwise the ratio of their claims
(:mod:`autotune.evidence.configs`), with the noise between processes. A configuration's figure
(samples/s) is then the baseline's times its speed-up, so the figure and the speed-up a view
shows never disagree. The front, the race's candidates and the verdict are computed here from
the same comparisons.

The verdict (:class:`autotune.evidence.verdict.Verdict`): the raced configurations (or, before
a race, every one) are compared through the noise (:func:`autotune.evidence.stats.choose`); once the path
to the winner has been measured (what each knob bought, :mod:`autotune.evidence.ablation`), it names the
smallest configuration that keeps the gain, without the knobs that bought nothing beyond the
noise. On a busy machine (:class:`autotune.evidence.busy.Load`) a configuration whose gain rests
on a load-sensitive knob (``threads``: fewer threads suffer less from other processes) is not
recommended: the verdict names what was seen and how to re-check it on a quiet machine, and
recommends among the others.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Sequence

from autotune.evidence import ablation as A
from autotune.evidence import deciding as D
from autotune.evidence import claim as CL
from autotune.evidence import numerics as NU
from autotune.evidence import stats
from autotune.evidence import configs as C
from autotune.evidence.configs import Measured
from autotune.evidence.busy import Load, leave_out
from autotune.store.plans import RaceStop
from autotune.store.records import Role, StoredStudy
from autotune.evidence import verdict as V
from autotune.evidence.verdict import State, Verdict
from autotune.evidence.stats import Measurement, Noise, Ratio

INDIFFERENCE = CL.INDIFFERENCE  # configurations not more than 3% apart are equal for a user: the simplest is chosen


class Evidence:
    """A study's measurements, read once from a :class:`autotune.store.StoredStudy`, and every figure derived from them.

    ``max_memory_bytes``: the budget a configuration must fit (default: the study's own, ``--max-memory``).
    A study's own evidence is built once per read, by :func:`autotune.evidence.evidence_of`.
    """

    def __init__(self, study: StoredStudy, max_memory_bytes: int | None = None) -> None:
        self.study = study
        self._memo: dict[Any, Any] = {}
        self.max_memory_bytes = max_memory_bytes if max_memory_bytes is not None else study.max_memory_bytes
        self.configs: dict[int, Measured] = C.measured(study, self.max_memory_bytes)
        self.baseline: Measured | None = next((c for c in self.configs.values() if c.is_baseline), None)
        C.set_changes(self.configs.values(), self.baseline)
        # Processes that measured several configurations alternately: each arm joins its configuration by key.
        self.trial_of: dict[str, int] = {}
        for n in sorted(self.configs):
            if self.configs[n].key:
                self.trial_of.setdefault(self.configs[n].key, n)
        self.blocks = list(study.blocks())
        self.within: dict[str, list[Measurement]] = C.join(self.configs, self.blocks, self.trial_of)
        self.within_noise: Noise = stats.within_process_noise(b.rates for b in self.blocks)  # type: ignore[misc]
        self.load = Load.of(self.configs.values(), self.baseline, study.fingerprint)
        leave_out(self.configs.values(), self.load)
        self.noise: Noise = stats.pooled_noise([v for _, v in c.claim] for c in self.configs.values())
        # Each configuration's own spread between processes (every process of it, the one that selected it included:
        # that one runs high, which only widens the spread), and whether the spreads differ beyond chance: then none
        # is lent another's (the defaults' 1% to a configuration that spreads 25%).
        self.spreads: dict[int, Noise] = {n: stats.own_noise(_apart(c)) for n, c in self.configs.items()
                                          if len(_apart(c)) >= 2}
        self.unequal: bool = stats.unequal_spreads([_apart(self.configs[n]) for n in self.spreads])
        # the pooled noise speaks for a configuration measured once only when some configuration other than the
        # defaults was measured in several processes: else it would be the defaults' alone
        self.lendable: bool = any(not self.configs[n].is_baseline for n in self.spreads)
        self.raced = [n for n, c in self.configs.items() if c.confirmed and not c.is_baseline]
        # Every interval of the study is simultaneous over the configurations its verdict
        # compares: the raced ones, or before any race every measured one (a best of N);
        # once a race has looked at its evidence several times, over those looks too.
        self.comparisons = max(1, len(self.raced) or len([c for c in self.configs.values() if not c.is_baseline]))
        self.looks = _looks(study) if self.raced else 1
        if self.baseline is not None:
            base = self.baseline
            for c in self.configs.values():
                if c is not base and _common(c.together, base.together):
                    c.figure = base.samples_per_s * self.compare(c.number, base.number).estimate
        # A configuration measured in shared processes without the defaults (what each knob bought, from a start that
        # retains the heap: ablation apart_first), and never raced, rests on the raced configuration it shared them
        # with (the winner): that one's claim between processes times their ratio inside those processes, not its own
        # single first measurement (which would carry the winner's curse onto the front).
        for c in self.configs.values():
            if c.figure is not None or c.is_baseline or c.repeats or not c.together:
                continue
            raced = [r for r in self.configs.values()
                     if r is not c and r.figure is None and r.repeats and _common(c.together, r.together)]
            if raced:
                ref = max(raced, key=lambda r: (len(r.claim), -r.number))
                c.figure = ref.samples_per_s * self.compare(c.number, ref.number).estimate
                c.via = ref.number
        # The claim of the race's choice, measured apart from the search (autotune.evidence.claim): the recommended
        # configuration's speed-up (:meth:`speedup`); its samples/s stay the geometric mean of its processes.
        self.confirmation: CL.Confirmed | None = CL.confirmed(self)
        for c in self.configs.values():
            c.seal()

    # ------------------------------------------------------------ per configuration

    def samples_per_s(self, number: int) -> float | None:
        c = self.configs.get(number)
        return c.samples_per_s if c else None

    def speedup(self, number: int) -> Ratio | None:
        """``number``'s throughput over the baseline's, with its interval; None without a baseline."""
        c = self.configs.get(number)
        if c is None or self.baseline is None:
            return None
        conf = getattr(self, "confirmation", None)
        if conf is not None and conf.claim is not None and number == conf.recommendation:
            return conf.claim  # measured apart from the search that chose it: the recommendation's one figure
        if c.number == self.baseline.number:
            return Ratio(1.0, 1.0, 1.0, c.processes, c.processes, True, stats.LEVEL, 1)
        return self.compare(number, self.baseline.number)

    def compare(self, number: int, reference: int, claim: bool = True) -> Ratio:
        """``number``'s throughput over ``reference``'s, each kind of pair with its own noise.

        Measured alternately in the same processes: their mean log-ratio there, with the
        within-process noise. Otherwise, when either has such measurements against the
        baseline, the two speed-ups divided (their errors combined). Otherwise their claims
        (separate processes, paired on common rounds), with the noise between processes.
        ``claim``: adjusted for the study's comparisons and looks (a claim); else plain 90%
        (the race's rule for staying in the race).
        """
        x, y = self.configs[number], self.configs[reference]
        comparisons, looks = (self.comparisons, self.looks) if claim else (1, 1)
        if _common(x.together, y.together):
            return stats.ratio_within(x.together, y.together, self.within_noise, comparisons, looks=looks, between=self.noise)
        base = self.baseline
        if base is not None and number != base.number and reference != base.number and (
                _common(x.together, base.together) or _common(y.together, base.together)):
            return stats.combined(self.compare(number, base.number, claim), self.compare(reference, base.number, claim))
        via = x.via if x.via is not None and x.via != reference else y.via if y.via is not None and y.via != number else None
        if via is not None:  # through the raced configuration one of them rests on: (x / via) / (y / via)
            return stats.combined(self.compare(number, via, claim), self.compare(reference, via, claim))
        nx, ny = self.noise_of(number), self.noise_of(reference)
        if nx is self.noise and ny is self.noise:  # one noise for all (the spreads do not differ): paired on rounds
            return stats.ratio(x.claim, y.claim, self.noise, comparisons, looks=looks)
        return stats.welch(x.claim, y.claim, nx, ny, comparisons, looks=looks)

    def noise_of(self, number: int) -> Noise:
        """The noise between processes that a figure of configuration ``number`` carries: the study's pooled noise
        while the configurations spread alike; once they spread unequally (:func:`autotune.evidence.stats.unequal_spreads`)
        its own spread, or for one measured in a single process the widest spread of the configurations other than
        the defaults. Unknown for a configuration measured once while only the defaults' spread is known: no
        interval is drawn from one process with the defaults' noise."""
        c = self.configs[number]
        if number in self.spreads:
            return self.spreads[number] if self.unequal else self.noise
        if c.is_baseline:
            return self.noise
        if self.unequal:
            others = [self.spreads[n] for n in self.spreads if not self.configs[n].is_baseline]
            return max(others, key=lambda z: z.sigma or 0.0) if others else Noise(None)
        return self.noise if self.lendable else Noise(None)

    def single(self, samples_per_s: float) -> Ratio | None:
        """The speed-up one fresh measurement shows (a trial line, before it is stored)."""
        if self.baseline is None or not samples_per_s:
            return None
        return stats.ratio([("new", samples_per_s)], self.baseline.claim, self.noise, self.comparisons)

    def row(self, number: int) -> dict[str, Any]:
        """The figures of one configuration, as every view shows them."""
        c = self.configs[number]
        s = self.speedup(number)
        return {
            "trial": number,
            "role": c.role,
            "changes": dict(c.changes),
            "samples_per_s": c.samples_per_s,
            "processes": c.processes,
            "confirmed": c.confirmed,
            "peak_memory_bytes": c.peak_memory_bytes,
            "feasible": c.feasible,
            "speedup": s.to_dict() if s else None,
            # which figure: the claim measured apart from the search (the recommendation's, once measured), or the
            # measurements that selected among the configurations (they run high for a winner)
            "figure": ("claim" if self.confirmation is not None and self.confirmation.claim is not None
                       and number == self.confirmation.recommendation else "selection"),
        }

    # ------------------------------------------------------------ the study

    def ok(self, feasible_only: bool = True) -> list[Measured]:
        return [c for c in self.configs.values() if c.feasible or not feasible_only]

    def front(self) -> list[int]:
        """Feasible configurations no other beats on both figure and memory, fastest first."""
        # One sweep, fastest first: a point is dominated by a faster one using no more memory, or by one as
        # fast using less (O(n log n): a study of 10,000 trials has millions of pairs).
        points = sorted(self.ok(), key=lambda c: (-c.samples_per_s, c.peak_memory_bytes))
        out: list[int] = []
        least_faster = math.inf  # the least memory among the points strictly faster than the current group
        for _, same in itertools.groupby(points, key=lambda c: c.samples_per_s):
            group = list(same)
            least_here = group[0].peak_memory_bytes  # sorted by memory within the group
            out.extend(c.number for c in group if least_here == c.peak_memory_bytes < least_faster)
            least_faster = min(least_faster, least_here)
        return out

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
            return math.log(leader.samples_per_s) - half / math.sqrt(leader.processes) <= math.log(c.samples_per_s) + half / math.sqrt(c.processes)

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

    def verdict(self, ablated: bool = True) -> Verdict:
        """The recommendation (:mod:`autotune.evidence.verdict`): the raced configurations (or, before a race, every
        one) compared through the noise; then, once the path to the winner has been measured (:meth:`ablation`),
        the smallest configuration that keeps its gain, without the knobs that bought nothing beyond the noise
        (``ablated=False``: the race's own winner, before that). On a busy machine a gain that rests on a
        load-sensitive knob is not recommended. Once its numerics were checked (:meth:`numerics`), the verdict
        says how they compare with the defaults'."""
        verdict = self._unchecked_verdict(ablated)
        record = self._numerics_record() if ablated else None
        if record is None or not verdict.recommends:
            return verdict
        if ("checked", ablated) not in self._memo:
            self._memo[("checked", ablated)] = D.checked(self, verdict, record)
        return self._memo[("checked", ablated)]  # type: ignore[no-any-return]

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

    def numerics(self) -> NU.Check | None:
        """The numerics check of the recommendation (:mod:`autotune.evidence.numerics`): of the configuration the
        verdict recommends, from the latest finished check (under ``--numerics strict``, the check of the
        configuration recommended in place of one whose numerics differ); None when none ran, or the verdict
        recommends no change."""
        record = self._numerics_record()
        if record is None:
            return None
        pick = record.get("strict_pick")
        verdict = self.verdict()
        if pick is not None and verdict.winner == pick:
            return NU.judge(record, pick)
        return NU.judge(record) if verdict.winner == record.get("number") else None

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

    def left(self) -> list[CL.Left]:
        """The knobs the recommendation left at the user's setting, each with what it bought (none before a claim)."""
        if self.confirmation is None or not self.confirmation.reverted or self.baseline is None:
            return []
        return CL.left(self.confirmation, self.ablation(), self.baseline.config)

    def ablation(self) -> A.Ablation | None:
        """What each knob of the race's choice bought, from the defaults (:mod:`autotune.evidence.ablation`): measured in
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
        plans = [(ablation_id, plan) for ablation_id, plan in self.study.ablation_plans() if plan.get("winner_key") == w.key]
        # the newest path measured whole (one measured again in another order, when a knob that bought nothing
        # stood before one that paid: autotune.evidence.ablation.reordered), else the one before it
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
                  or (r := self.compare(n, leader, claim=False)).low is not None and r.low >= 1.0 / (1.0 + INDIFFERENCE)]
        return min(within, key=lambda n: (len(self.configs[n].changes), -self.configs[n].samples_per_s))

    def chosen(self) -> int | None:
        """The race's choice (what the claim measured apart is about): :meth:`pick` among the candidates the latest
        race kept (before a race, every configuration measured), when the fastest of them beats the defaults at
        plain 90% in the measurements that selected it; None when none does (no gain beyond the noise). A race the
        time budget stopped before it could settle (its share held no more rounds) chooses its fastest when it
        looks faster than the defaults by more than the indifference zone: the claim, measured apart, decides."""
        if self.baseline is None:
            return None
        races = self.study.races()
        unsettled = False
        if races:
            record = races[-1][1]
            pool = [n for n in record.candidates if n not in record.eliminated and n in self.configs]
            unsettled = record.stop is RaceStop.TIME
        else:
            pool = [c.number for c in self.ok() if not c.is_baseline]
        pool = [n for n in pool if self.configs[n].feasible and not self.configs[n].busy_only
                and self.configs[n].role != A.ROLE and not (self.load.was_busy and D.only_sensitive(self, n))]
        if not pool:
            return None
        leader = max(pool, key=lambda n: self.configs[n].samples_per_s)
        lead = self.compare(leader, self.baseline.number, claim=False) if leader != self.baseline.number else None
        if lead is None or not (lead.above_one() or unsettled and lead.estimate > 1.0 + INDIFFERENCE):
            return None
        picked = self.pick(pool)
        return None if picked == self.baseline.number else picked  # the defaults tied with the fastest: no change

    def selected(self, number: int) -> Ratio | None:
        """``number``'s speed-up in the search and the race, the measurements that selected it: the selection's own
        figure, which runs high for a winner (a view shows it only as such)."""
        c, base = self.configs.get(number), self.baseline
        if c is None or base is None or c is base:
            return None
        own = [m for m in c.claim if not m[0].startswith(CL.CONFIRM)] or [c.first]
        ref = [m for m in base.claim if not m[0].startswith(CL.CONFIRM)] or base.claim
        nx, ny = self.noise_of(number), self.noise_of(base.number)
        if nx is self.noise and ny is self.noise:
            return stats.ratio(own, ref, self.noise, self.comparisons, looks=self.looks)
        return stats.welch(own, ref, nx, ny, self.comparisons, looks=self.looks)

    def recommended(self) -> int | None:
        """The configuration to use: the verdict's winner, or the defaults (the baseline) when nothing beats them
        beyond the noise; None before the baseline is measured."""
        verdict = self.verdict()
        if verdict.recommends and verdict.winner is not None:
            return verdict.winner
        if verdict.state == State.NO_FIT:  # not even the defaults fit the memory budget: nothing to recommend
            return None
        return self.baseline.number if self.baseline else None

    def named(self) -> list[int]:
        """The configurations the verdict names (``#N`` in its text) that are neither the recommendation nor on the
        front, in the order it names them."""
        shown = set(self.front()) | {self.recommended()}
        return [n for n in V.named(self.verdict()) if n in self.configs and n not in shown]

    def time_spent(self) -> dict[str, float]:
        """Wall-clock time during which any process worked on the study (overlapping workers count once)."""
        sessions = self.study.sessions()
        spans = sorted(
            (float(s["started_at"]), float(s["started_at"]) + float(s.get("elapsed_s") or 0.0)) for s in sessions if s.get("started_at")
        )
        wall, end = 0.0, float("-inf")
        for a, b in spans:
            if b > end:
                wall += b - max(a, end)
                end = b
        wall += sum(float(s.get("elapsed_s") or 0.0) for s in sessions if not s.get("started_at"))
        return {"wall_s": wall, "sessions": float(len(sessions))}

    def to_dict(self) -> dict[str, Any]:
        """Noise, verdict and front rows: what ``status --json`` and exports carry."""
        return {
            "noise": self.noise.to_dict(),
            "noise_text": self.noise.text(),
            "within_process_noise": self.within_noise.to_dict(),
            "within_process_noise_text": self.within_noise.text() if self.blocks else None,
            "ablation": ab.to_dict() if (ab := self.ablation()) is not None else None,
            "comparisons": self.comparisons,
            "verdict": self.verdict().to_dict(),
            # the claim measured apart, the knobs left at the user's setting with what each bought, and the chosen
            # configuration's figure in the search and the race (the selection's own: it runs high)
            "claim": ({**self.confirmation.to_dict(), "left": [x.to_dict() for x in self.left()]}
                      if self.confirmation is not None else None),
            "front": [self.row(n) for n in self.front()],
            # the configurations the verdict names that neither the recommendation nor the front shows: every view's
            # table shows them too, so that a verdict never names a configuration its table leaves out
            "named": [self.row(n) for n in self.named()],
            "recommended": self.row(rec) if (rec := self.recommended()) is not None else None,
            "numerics": check.to_dict() if (check := self.numerics()) is not None else None,
            "load": self.load.to_dict(),
        }


def _apart(c: Measured) -> list[float]:
    """Every measurement of a configuration in a process of its own (its claim's, and the one that selected it)."""
    taken = list(c.claim)
    if c.first not in taken and c.first[0] not in c.left_out:
        taken.insert(0, c.first)
    return [v for _, v in taken]


def _common(a: Sequence[Measurement], b: Sequence[Measurement]) -> bool:
    rounds = {r for r, _ in a}
    return any(r in rounds for r, _ in b)


def _looks(study: StoredStudy) -> int:
    """The planned looks of the study's latest race (1 before any race, and for races that did not record them)."""
    races = [record for _, record in study.races()]
    if not races:
        return 1
    return max(races, key=lambda r: r.started).looks
