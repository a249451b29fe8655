"""A head start from earlier studies: the winners of studies on the same kind of machine, measured early.

Why: what makes one model fast on a machine often makes another fast on it too (the precision
the device computes fastest in, the threads its cores want, a batch large enough to keep it
busy). A new study in a store that already holds tuned studies of this kind of machine
(:func:`autotune.store.kind`) therefore measures their winners right after the baseline and the
guides' recipe, before the sampler takes over: a few trials that can save many. ``--no-warm-start``
(``TuneConfig.warm_start=False``) turns it off. benchmarks/warm_start.py measures the trials saved
on a model whose grid did not pick the source.

What it reads, once, when a study is created: the store's study summaries (one query, names and
descriptions: :meth:`autotune.store.Store.summaries`), then, newest first and only for studies of
this kind of machine, each one read whole (:meth:`autotune.store.Store.read`) for its verdict
(its evidence: :class:`autotune.evidence.Evidence`), until :data:`LIMIT` seeds are found or
:data:`EXAMINED` studies were read. Only a ``gain`` verdict counts (a study whose defaults won has
nothing to pass on), and its winner's knob values come from the winner trial's ``config``.

What it keeps: the winners' values of the knobs *this* study searches, each one a value this
study's space holds (Optuna's ``enqueue_trial`` refuses a categorical value outside the choices
and only warns for an out-of-range integer): a range value outside the space goes to the nearest
value in it, a choice the space lacks, or a knob the winner did not set, takes the baseline's
value. A seed that comes out as the baseline, the recipe or an earlier seed is dropped.

What it writes: the chosen seeds, on the new study (``warm_start``), so a resumed run and every
worker that joins queue the same ones; the :class:`autotune.tuning.loop.Tuner` queues each just in time
(role ``warm``, ``warm_from`` naming the source study and trial), never twice. A resumed study
does not look for new winners.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from autotune import knobs
from autotune.knobs.space import Space
from autotune.store import LiveStudy, Store, StoredStudy, kind
from autotune.store import records, writing
from autotune.evidence import evidence_of

LIMIT = 3  # seeds at most: each one is a measured trial of the budget
EXAMINED = 12  # earlier studies of this kind whose trials are read at most


@dataclass(frozen=True)
class Seed:
    """The winner of an earlier study, as values of this study's searched knobs."""

    study: str
    trial: int
    params: dict[str, Any]
    speedup: float | None = None  # the winner's speed-up over its own study's defaults

    def attrs(self) -> dict[str, Any]:
        """The marks of the trial that measures it (role ``warm``, ``warm_from`` naming the source study and trial)."""
        return writing.marks_of(role=records.Role.WARM, warm_from={"study": self.study, "trial": self.trial})

    def text(self, base: Mapping[str, Any]) -> str:
        changes = " ".join(f"{k}={knobs.KNOBS[k].format(v)}" for k, v in self.params.items()
                           if k in knobs.KNOBS and base.get(k) != v)
        return f"#{self.trial} of {self.study!r} ({changes or 'defaults'})"

    def to_dict(self) -> dict[str, Any]:
        return {"study": self.study, "trial": self.trial, "params": dict(self.params), "speedup": self.speedup}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Seed:
        return cls(str(d["study"]), int(d["trial"]), dict(d["params"]), d.get("speedup"))


def fit(config: Mapping[str, Any], space: Space, base: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` as values of the knobs ``space`` searches, every one a value the space holds (see the module)."""
    out: dict[str, Any] = {}
    for name, dim in space.search.items():
        value = config.get(name, base.get(name))
        if not dim.contains(value):
            candidates = dim.values()
            if knobs.KNOBS[name].is_range and isinstance(value, int) and not isinstance(value, bool):
                value = min(candidates, key=lambda v: (abs(v - value), -v))
            else:
                value = base.get(name)
        if not dim.contains(value):  # the baseline's own value is always a candidate; a guard all the same
            value = dim.values()[0]
        out[name] = value
    return out


def choose(store: Store, name: str, fingerprint: Mapping[str, Any], space: Space, base: Mapping[str, Any],
           ctx: knobs.Context, taken: Iterable[Mapping[str, Any]] = (), limit: int = LIMIT,
           examined: int = EXAMINED) -> list[Seed]:
    """The winners of the newest earlier studies of this kind of machine in ``store``, fitted to ``space``.

    ``taken``: parameters already queued (the baseline and the recipe); a seed equal to one of them is dropped.
    """
    mine = kind(fingerprint)
    summaries = [s for s in store.summaries() if s.name != name and s.described and kind(s.fingerprint) == mine]
    order = sorted(range(len(summaries)), reverse=True,
                   key=lambda i: (str(summaries[i].created_at or ""), i))  # newest first
    seen = {_key(p, base, ctx) for p in taken}
    out: list[Seed] = []
    for i in order[:examined]:
        if len(out) >= limit:
            break
        seed = _winner(store, summaries[i], space, base)
        if seed is None or _key(seed.params, base, ctx) in seen:
            continue
        seen.add(_key(seed.params, base, ctx))
        out.append(seed)
    return out


def _winner(store: Store, summary: StoredStudy, space: Space, base: Mapping[str, Any]) -> Seed | None:
    """A study's recommended configuration (a ``gain`` verdict only), fitted to ``space``."""
    study = store.read(summary.name, summary)
    try:
        evidence = evidence_of(study)
        verdict = evidence.verdict()
    except (KeyError, TypeError, ValueError, AttributeError):  # a study too odd to read gives no seed, never an error
        return None
    if not verdict.recommends or verdict.winner is None or verdict.winner not in evidence.configs:
        return None
    config = evidence.configs[verdict.winner].config
    if not config:
        return None
    speedup = verdict.speedup.estimate if verdict.speedup else None
    return Seed(summary.name, verdict.winner, fit(config, space, base), speedup)


def _key(params: Mapping[str, Any], base: Mapping[str, Any], ctx: knobs.Context) -> str:
    return knobs.resolve({**base, **params}, ctx).key()


def stored(study: StoredStudy, space: Space, base: Mapping[str, Any]) -> list[Seed]:
    """The seeds a study chose when it was created, fitted again to the space as it is now."""
    out = []
    for raw in study.warm_start:
        try:
            seed = Seed.from_dict(raw)
        except (KeyError, TypeError, ValueError):
            continue
        out.append(Seed(seed.study, seed.trial, fit(seed.params, space, base), seed.speedup))
    return out


def line(seeds: Sequence[Seed], base: Mapping[str, Any]) -> str | None:
    """What ``run`` says about the seeds before the first trial (None: there are none)."""
    if not seeds:
        return None
    n = len(seeds)
    return (f"warm start: {n} winner{'s' if n > 1 else ''} of earlier studies on this kind of machine: "
            + ", ".join(s.text(base) for s in seeds))


def seeds(store: Store, study: Any, created: bool, enabled: bool, fingerprint: Mapping[str, Any],
          tuner: Any) -> list[Seed]:
    """This study's seeds (for :class:`autotune.tuning.loop.Tuner`'s ``warm``): chosen now and stored on the study when
    it was just created, else the ones it stored then; none with warm start off. ``study``: the study this process
    writes (a :class:`autotune.store.LiveStudy`, or the ``optuna.Study`` it wraps)."""
    if not enabled:
        return []
    live = study if isinstance(study, LiveStudy) else LiveStudy(study)
    if not created:
        return stored(live.view([]), tuner.space, tuner.base)
    chosen = choose(store, live.name, fingerprint, tuner.space, tuner.base, tuner.ctx,
                    taken=[params for _, params in tuner.seed_params()])
    if chosen:
        live.save(warm_start=[s.to_dict() for s in chosen])
    return chosen
