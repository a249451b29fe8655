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
to the winner has been measured (what each knob bought, :mod:`autotune.evidence.bought`), it names the
smallest configuration that keeps the gain, without the knobs that bought nothing beyond the
noise. On a busy machine (:class:`autotune.evidence.busy.Load`) a configuration whose gain rests
on a load-sensitive knob (``threads``: fewer threads suffer less from other processes) is not
recommended: the verdict names what was seen and how to re-check it on a quiet machine, and
recommends among the others.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from autotune.evidence import deciding as D
from autotune.evidence import claim as CL
from autotune.evidence import numerics_answer as NU
from autotune.evidence.choices import Choices
from autotune.evidence import verdict as V
from autotune.evidence.verdict import State, Verdict


class Evidence(Choices):
    """A study's measurements, read once from a :class:`autotune.store.StoredStudy`, and every figure derived from them.

    ``max_memory_bytes``: the budget a configuration must fit (default: the study's own, ``--max-memory``).
    A study's own evidence is built once per read, by :func:`autotune.evidence.evidence_of`.

    The figures a view shows are here; the comparisons they rest on are
    :class:`autotune.evidence.comparing.Comparisons`'s, the choices the tuning job's phases make
    :class:`autotune.evidence.choices.Choices`'s.
    """

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
            # the front's second axis in a speed,energy study (None in a speed,memory one: peak memory is the axis)
            "joules_per_sample": c.second if self.study.second == "energy" else None,
            "feasible": c.feasible,
            "speedup": s.to_dict() if s else None,
            # which figure: the claim measured apart from the search (the recommendation's, once measured), or the
            # measurements that selected among the configurations (they run high for a winner)
            "figure": ("claim" if self.confirmation is not None and self.confirmation.claim is not None
                       and number == self.confirmation.recommendation else "selection"),
        }

    def front(self) -> list[int]:
        """Feasible configurations no other beats on both figure and the study's second objective (peak memory, or
        joules per sample: ``--objectives``), fastest first."""
        # One sweep, fastest first: a point is dominated by a faster one using no more memory, or by one as
        # fast using less (O(n log n): a study of 10,000 trials has millions of pairs).
        points = sorted((c for c in self.ok() if c.second is not None), key=lambda c: (-c.samples_per_s, c.second))
        out: list[int] = []
        least_faster = math.inf  # the least memory (energy) among the points strictly faster than the current group
        for _, same in itertools.groupby(points, key=lambda c: c.samples_per_s):
            group = list(same)
            least_here = group[0].second  # sorted by memory (energy) within the group
            out.extend(c.number for c in group if least_here == c.second < least_faster)
            least_faster = min(least_faster, least_here)  # type: ignore[type-var]
        return out

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

    def numerics(self) -> NU.Check | None:
        """The numerics check of the recommendation (:mod:`autotune.evidence.numerics_answer`): of the configuration the
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

    def left(self) -> list[CL.Left]:
        """The knobs the recommendation left at the user's setting, each with what it bought (none before a claim)."""
        if self.confirmation is None or not self.confirmation.reverted or self.baseline is None:
            return []
        return CL.left(self.confirmation, self.ablation(), self.baseline.config)

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
            (float(s["started_at"]), float(s["started_at"]) + float(s.get("elapsed_s") or 0.0))
            for s in sessions if s.get("started_at")
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
