"""The comparisons every figure of a study rests on: its configurations measured, read once, and compared two at a time.

Why a module of its own: what a view shows (:mod:`autotune.evidence.figures`) and what the tuning job's phases choose
(:mod:`autotune.evidence.choices`) both ask the same few questions of a study's measurements: one configuration's
speed-up over another's, with the noise its kind of pair carries. :class:`Comparisons` reads the study's trials once
and answers those; :class:`autotune.evidence.Evidence` builds on it.
"""

from __future__ import annotations

from typing import Any, Sequence

from autotune.store.plans import RoundId
from autotune.evidence import claim as CL
from autotune.evidence import stats
from autotune.evidence import configs
from autotune.evidence.configs import Measured
from autotune.evidence.busy import Load, leave_out
from autotune.store.records import StoredStudy
from autotune.evidence.stats import Measurement, Noise, Ratio


class Comparisons:
    """A study's measurements, read once from a :class:`autotune.store.StoredStudy`, and each configuration compared
    with another (the base of :class:`autotune.evidence.Evidence`, which is what callers build).

    ``max_memory_bytes``: the budget a configuration must fit (default: the study's own, ``--max-memory``).
    """

    def __init__(self, study: StoredStudy, max_memory_bytes: int | None = None) -> None:
        self.study = study
        self._memo: dict[Any, Any] = {}
        self.max_memory_bytes = max_memory_bytes if max_memory_bytes is not None else study.max_memory_bytes
        self.configs: dict[int, Measured] = configs.measured(study, self.max_memory_bytes)
        self.baseline: Measured | None = next((c for c in self.configs.values() if c.is_baseline), None)
        configs.set_changes(self.configs.values(), self.baseline)
        # Processes that measured several configurations alternately: each arm joins its configuration by key.
        self.trial_of: dict[str, int] = {}
        for n in sorted(self.configs):
            if self.configs[n].key:
                self.trial_of.setdefault(self.configs[n].key, n)
        self.blocks = list(study.blocks())
        self.within: dict[str, list[Measurement]] = configs.join(self.configs, self.blocks, self.trial_of)
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
            return stats.ratio_within(x.together, y.together, self.within_noise, comparisons, looks=looks,
                                      between=self.noise)
        base = self.baseline
        if base is not None and number != base.number and reference != base.number and (
                _common(x.together, base.together) or _common(y.together, base.together)):
            return stats.combined(self.compare(number, base.number, claim), self.compare(reference, base.number, claim))
        via = (x.via if x.via is not None and x.via != reference
               else y.via if y.via is not None and y.via != number else None)
        if via is not None:  # through the raced configuration one of them rests on: (x / via) / (y / via)
            return stats.combined(self.compare(number, via, claim), self.compare(reference, via, claim))
        nx, ny = self.noise_of(number), self.noise_of(reference)
        if nx is self.noise and ny is self.noise:  # one noise for all (the spreads do not differ): paired on rounds
            return stats.ratio(x.claim, y.claim, self.noise, comparisons, looks=looks)
        return stats.welch(x.claim, y.claim, nx, ny, comparisons, looks=looks)

    def noise_of(self, number: int) -> Noise:
        """The noise between processes that a figure of configuration ``number`` carries: the study's pooled noise
        while the configurations spread alike; once they spread unequally
        (:func:`autotune.evidence.stats.unequal_spreads`) its own spread, or for one measured in a single process the
        widest spread of the configurations other than
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

    # ------------------------------------------------------------ the study

    def ok(self, feasible_only: bool = True) -> list[Measured]:
        return [c for c in self.configs.values() if c.feasible or not feasible_only]

    def selected(self, number: int) -> Ratio | None:
        """``number``'s speed-up in the search and the race, the measurements that selected it: the selection's own
        figure, which runs high for a winner (a view shows it only as such)."""
        c, base = self.configs.get(number), self.baseline
        if c is None or base is None or c is base:
            return None
        own = [m for m in c.claim if not RoundId.is_of(RoundId.CLAIM, m[0])] or [c.first]
        ref = [m for m in base.claim if not RoundId.is_of(RoundId.CLAIM, m[0])] or base.claim
        nx, ny = self.noise_of(number), self.noise_of(base.number)
        if nx is self.noise and ny is self.noise:
            return stats.ratio(own, ref, self.noise, self.comparisons, looks=self.looks)
        return stats.welch(own, ref, nx, ny, self.comparisons, looks=self.looks)


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
