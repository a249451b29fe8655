"""What a study claims: every figure any view shows, computed in one place from all its measurements.

A configuration's *figure* (samples/s), the processes behind it, its *speed-up*
over the baseline with a 90% interval, the study's *noise floor*, the Pareto
*front* and the final *verdict* all come from :class:`Evidence`. The run's summary
and table, ``status`` (and ``--json``), ``list``, ``export`` and the dashboard read
them from here and nowhere else, so one configuration never shows two speed-ups.

Where the measurements come from (docs/storage.md):

- a trial's own measurement (its first objective value), round ``search-<n>``;
- re-measurements kept as study user attributes ``measurement:<round>:<trial>``:
  the baseline's noise-floor repeats (``floor-<k>``) and the race's rounds
  (``race-<id>-<k>``, the baseline measured in every round, interleaved);
- ``confirmations`` of studies made before the race existed (rounds ``confirm-<k>``).

- processes that measured several configurations alternately (:mod:`autotune.paired`),
  one study attribute each, ``paired:<round>``: the race's rounds for configurations that
  can share a process with the defaults (``pair-<id>-<k>``) and the ablation's
  (``abl-<id>-<k>``); their arms name configurations by key, so a configuration measured
  as a trial later (the ablation's recommendation) finds its measurements.

A configuration's claim rests on its re-measurements when it has any, and drops
its first measurement then: a configuration reaches the race *because* its first
measurement was high, so that one is biased upwards (the winner's curse). The
baseline was never selected, so all of its measurements count.

A speed-up between two configurations measured alternately in the same processes is
their mean log-ratio over those processes, with the within-process noise
(:func:`autotune.stats.within_process_noise`); otherwise the ratio of their claims, with
the noise between processes. A configuration's figure (samples/s) is then the baseline's
times its speed-up, so the figure and the speed-up a view shows never disagree.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune import ablation as A
from autotune import knobs
from autotune import result as R
from autotune import stats
from autotune.stats import Measurement, Noise, Ratio
from autotune.units import plural

MEASUREMENT = "measurement:"
PAIRED = "paired:"  # one process that measured several configurations alternately: paired:<round>
UNCOMPARED = "uncompared"  # an arm of a shared process whose reference arm failed: it ran, but compares with nothing
RACE = "race:"
SESSION = "session:"


def measurement_key(round_id: str, trial: int) -> str:
    return f"{MEASUREMENT}{round_id}:{trial}"


def record_measurement(study: optuna.Study, trial: int, round_id: str, result: R.TrialResult) -> float | None:
    """Store one re-measurement of a trial's configuration; returns its samples/s (None when it failed)."""
    ok = result.ok and result.samples_per_s is not None and math.isfinite(result.samples_per_s) and result.samples_per_s > 0
    rate = float(result.samples_per_s) if ok else None  # type: ignore[arg-type]
    study.set_user_attr(
        measurement_key(round_id, trial),
        {
            "samples_per_s": rate,
            "outcome": result.outcome if ok or not result.ok else R.ERROR,
            "peak_memory_bytes": result.peak_memory_bytes if ok else None,
            "other_cores": (result.load or {}).get("other_cores"),
            "wall_s": result.wall_s,  # what it cost: the dashboard's time per trial counts it
            "at": dt.datetime.now(dt.timezone.utc).timestamp(),
        },
    )
    return rate


def record_paired(study: optuna.Study, round_id: str, keys: Sequence[str], trials: Sequence[int | None],
                  result: R.PairedResult, **purpose: Any) -> list[float | None]:
    """Store one process's measurements of several configurations (``keys``, the trial each is, if any) taken
    alternately (:mod:`autotune.paired`); returns each arm's samples/s (None where it failed). ``purpose``:
    ``race=<id>`` or ``ablation=<id>``."""
    rates = result.rates() if result.ok else [None] * len(keys)
    arms = []
    for key, trial, rate, arm in zip(keys, trials, rates, result.arms or [{}] * len(keys)):
        good = rate is not None and math.isfinite(rate) and rate > 0
        outcome = arm.get("outcome") or result.outcome
        if not good and outcome == R.OK:
            outcome = UNCOMPARED  # it ran, but the process had nothing to compare it with (its reference failed)
        arms.append({"key": key, "trial": trial, "samples_per_s": float(rate) if good else None,  # type: ignore[arg-type]
                     "outcome": R.OK if good else outcome})
    study.set_user_attr(PAIRED + round_id, {
        "arms": arms, "other_cores": (result.load or {}).get("other_cores"), "wall_s": result.wall_s,
        "at": dt.datetime.now(dt.timezone.utc).timestamp(), **purpose,
    })
    return [a["samples_per_s"] for a in arms]


@dataclass(frozen=True)
class Block:
    """One process that measured several configurations alternately: samples/s by configuration key."""

    round_id: str
    rates: dict[str, float | None]
    trials: dict[str, int | None]
    other_cores: float | None
    purpose: dict[str, str]
    outcomes: dict[str, str] = field(default_factory=dict)
    wall_s: float | None = None  # the process's wall time, when stored


def remeasured(attrs: Mapping[str, Any]) -> Iterator[tuple[str, int, Mapping[str, Any]]]:
    """Every re-measurement in a process of its own, from the study's attributes ``measurement:<round>:<trial>``:
    (round, trial number, the stored record)."""
    for key, value in attrs.items():
        if not key.startswith(MEASUREMENT) or not isinstance(value, Mapping):
            continue
        round_id, _, trial = key[len(MEASUREMENT):].rpartition(":")
        try:
            number = int(trial)
        except ValueError:
            continue
        yield round_id, number, value


def blocks(attrs: Mapping[str, Any]) -> list[Block]:
    """Every process that measured several configurations alternately (``paired:<round>``), in round order."""
    out = []
    for key, value in attrs.items():
        if not key.startswith(PAIRED) or not isinstance(value, Mapping):
            continue
        arms = [a for a in value.get("arms") or [] if isinstance(a, Mapping) and a.get("key")]
        purpose = {k: str(value[k]) for k in ("race", "ablation") if value.get(k)}
        out.append(Block(key[len(PAIRED):], {a["key"]: a.get("samples_per_s") for a in arms},
                         {a["key"]: a.get("trial") for a in arms}, value.get("other_cores"), purpose,
                         {a["key"]: str(a.get("outcome") or "") for a in arms},
                         float(value["wall_s"]) if isinstance(value.get("wall_s"), (int, float)) else None))
    out.sort(key=lambda b: b.round_id)
    return out


def is_measured(t: FrozenTrial) -> bool:
    """A trial that measured a configuration (not a cache answer, not interrupted)."""
    return (
        (t.state == TrialState.COMPLETE or (t.state == TrialState.FAIL and t.user_attrs.get("outcome") not in (None, R.INTERRUPTED)))
        and t.user_attrs.get("duplicate_of") is None
        and "outcome" in t.user_attrs
    )


@dataclass
class Config:
    """One measured, successful configuration and every measurement of it."""

    number: int
    role: str
    config: dict[str, Any]
    peak_memory_bytes: int
    feasible: bool
    first: Measurement
    repeats: list[Measurement] = field(default_factory=list)
    failed_repeats: int = 0
    changes: dict[str, Any] = field(default_factory=dict)
    loads: dict[str, float] = field(default_factory=dict)  # round -> cores other processes used meanwhile
    left_out: frozenset[str] = frozenset()  # rounds much busier than the baseline's: not part of the claim
    key: str = ""  # the configuration's key (knobs.Resolved.key)
    together: list[Measurement] = field(default_factory=list)  # measured alternately with others in one process
    figure: float | None = None  # samples/s from a within-process speed-up over the baseline (Evidence sets it)
    # (claim, samples/s) once Evidence has set every field above (seal): a view of a large study asks for them
    # millions of times
    sealed: tuple[list[Measurement], float] | None = field(default=None, repr=False, compare=False)

    @property
    def is_baseline(self) -> bool:
        return self.role == "baseline"

    def seal(self) -> None:
        self.sealed = None
        self.sealed = (self.claim, self.samples_per_s)

    @property
    def claim(self) -> list[Measurement]:
        """The measurements a claim about this configuration rests on (see the module docstring), less those
        taken while the machine was much busier than during the baseline's (unless that would leave none)."""
        if self.sealed is not None:
            return self.sealed[0]
        if self.is_baseline:
            taken = [self.first, *self.repeats]
        else:
            taken = list(self.repeats) if self.repeats else [self.first]
        kept = [m for m in taken if m[0] not in self.left_out]
        return kept or taken

    @property
    def busy_only(self) -> bool:
        """Every measurement of its claim was taken on a machine much busier than during the baseline's."""
        return bool(self.left_out) and all(m[0] in self.left_out for m in self.claim)

    @property
    def samples_per_s(self) -> float:
        if self.sealed is not None:
            return self.sealed[1]
        return self.figure if self.figure is not None else stats.geomean(v for _, v in self.claim)

    @property
    def processes(self) -> int:
        return len(self.together) if self.figure is not None else len(self.claim)

    @property
    def confirmed(self) -> bool:
        return bool(self.repeats) or bool(self.together)


@dataclass(frozen=True)
class Verdict:
    """The answer a user reads: which configuration to use, by how much, and how sure."""

    state: str  # "gain" | "no_gain" | "no_fit" (nothing fits the memory budget) | "no_baseline" | "no_results"
    winner: int | None
    leader: int | None
    speedup: Ratio | None  # the winner's (for "no_gain": the leader's) over the baseline
    tied: tuple[int, ...]
    confirmed: bool
    simpler_preferred: bool
    text: str

    @property
    def significant(self) -> bool:
        return self.state == "gain"

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "significant": self.significant,
            "winner": self.winner,
            "leader": self.leader,
            "speedup": self.speedup.to_dict() if self.speedup else None,
            "tied": list(self.tied),
            "confirmed": self.confirmed,
            "simpler_preferred": self.simpler_preferred,
            "text": self.text,
        }


class Evidence:
    """A study's measurements, read once, and every figure derived from them."""

    def __init__(self, trials: Sequence[FrozenTrial], attrs: Mapping[str, Any], max_memory_bytes: int | None = None) -> None:
        self.attrs = dict(attrs)
        self._memo: dict[Any, Any] = {}
        self.max_memory_bytes = max_memory_bytes if max_memory_bytes is not None else attrs.get("max_memory_bytes")
        repeats, failed, loads = _repeats(attrs)
        self.configs: dict[int, Config] = {}
        self.baseline: Config | None = None
        for t in trials:
            if not (is_measured(t) and t.user_attrs.get("outcome") == R.OK and t.values and t.values[0] > 0):
                continue
            peak = int(t.values[1])
            feasible = all(v <= 0 for v in (t.constraints or {}).values())
            if self.max_memory_bytes:
                feasible = feasible and peak <= self.max_memory_bytes
            c = Config(
                number=t.number,
                role=t.user_attrs.get("role", "search"),
                config=dict(t.user_attrs.get("config") or {}),
                peak_memory_bytes=peak,
                feasible=feasible,
                first=(f"search-{t.number}", float(t.values[0])),
                repeats=repeats.get(t.number, []),
                failed_repeats=failed.get(t.number, 0),
                loads=_first_load(t) | loads.get(t.number, {}),
                key=str(t.user_attrs.get("config_key") or ""),
            )
            self.configs[t.number] = c
            if c.is_baseline and self.baseline is None:
                self.baseline = c
        reference = self.baseline.config if self.baseline else knobs.defaults()
        for c in self.configs.values():
            c.changes = {k: v for k, v in c.config.items() if k in reference and reference[k] != v}
        # Processes that measured several configurations alternately: each arm joins its configuration by key.
        self.trial_of: dict[str, int] = {}
        for n in sorted(self.configs):
            if self.configs[n].key:
                self.trial_of.setdefault(self.configs[n].key, n)
        self.blocks = blocks(attrs)
        self.within: dict[str, list[Measurement]] = {}  # key -> within-process measurements, trials or not
        for b in self.blocks:
            for key, rate in b.rates.items():
                number = self.trial_of.get(key)
                if rate:
                    self.within.setdefault(key, []).append((b.round_id, float(rate)))
                    if number is not None:
                        self.configs[number].together.append((b.round_id, float(rate)))
                elif number is not None and b.outcomes.get(key) not in (R.OOM, UNCOMPARED):
                    # out of memory beside the other arms (or a reference that failed) says nothing of the
                    # configuration alone: not a failure of it
                    self.configs[number].failed_repeats += 1
                if number is not None and b.other_cores is not None:
                    self.configs[number].loads[b.round_id] = float(b.other_cores)
        self.within_noise: Noise = stats.within_process_noise(b.rates for b in self.blocks)  # type: ignore[misc]
        self.load = Load.of(self.configs.values(), self.baseline, attrs)
        for c in self.configs.values():
            # a process that measured the baseline alongside cancels what the machine's load did to both
            c.left_out = frozenset(r for r, other in c.loads.items() if self.load.much_busier(other)
                                   and not r.startswith(WITHIN_PREFIXES))
        self.noise: Noise = stats.pooled_noise([v for _, v in c.claim] for c in self.configs.values())
        self.raced = [n for n, c in self.configs.items() if c.confirmed and not c.is_baseline]
        # Every interval of the study is simultaneous over the configurations its verdict
        # compares: the raced ones, or before any race every measured one (a best of N);
        # once a race has looked at its evidence several times, over those looks too.
        self.comparisons = max(1, len(self.raced) or len([c for c in self.configs.values() if not c.is_baseline]))
        self.looks = _looks(attrs) if self.raced else 1
        if self.baseline is not None:
            base = self.baseline
            for c in self.configs.values():
                if c is not base and _common(c.together, base.together):
                    c.figure = base.samples_per_s * self.compare(c.number, base.number).estimate
        for c in self.configs.values():
            c.seal()

    @classmethod
    def of(cls, study: Any) -> Evidence:
        """A study's evidence: an ``optuna.Study``'s, read now, or a :class:`autotune.view.StudyView`'s, built once."""
        built = getattr(study, "evidence", None)
        if isinstance(built, Evidence):
            return built
        return cls(study.get_trials(deepcopy=False), study.user_attrs)

    # ------------------------------------------------------------ per configuration

    def samples_per_s(self, number: int) -> float | None:
        c = self.configs.get(number)
        return c.samples_per_s if c else None

    def speedup(self, number: int) -> Ratio | None:
        """``number``'s throughput over the baseline's, with its interval; None without a baseline."""
        c = self.configs.get(number)
        if c is None or self.baseline is None:
            return None
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
            return stats.ratio_within(x.together, y.together, self.within_noise, comparisons, looks=looks)
        base = self.baseline
        if base is not None and number != base.number and reference != base.number and (
                _common(x.together, base.together) or _common(y.together, base.together)):
            return stats.combined(self.compare(number, base.number, claim), self.compare(reference, base.number, claim))
        return stats.ratio(x.claim, y.claim, self.noise, comparisons, looks=looks)

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
        }

    # ------------------------------------------------------------ the study

    def ok(self, feasible_only: bool = True) -> list[Config]:
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
        ``limit``, plus the one that changes the fewest knobs (so the race can prefer it).
        Never the baseline: it is measured in every round anyway.
        """
        points = sorted((c for c in self.ok() if not c.is_baseline), key=lambda c: -c.samples_per_s)
        if not points:
            return []
        leader = points[0]

        def overlaps(c: Config) -> bool:
            if not self.noise.known or self.noise.sigma is None:
                return True
            half = stats.t_quantile(self.noise.df) * self.noise.sigma
            return math.log(leader.samples_per_s) - half / math.sqrt(leader.processes) <= math.log(c.samples_per_s) + half / math.sqrt(c.processes)

        tied = [c for i, c in enumerate(points) if i < always or overlaps(c)]
        chosen = tied[:limit]
        simplest = min(tied, key=lambda c: (len(c.changes), -c.samples_per_s))
        if simplest not in chosen:
            chosen.append(simplest)
        return [c.number for c in chosen]

    def verdict(self, ablated: bool = True) -> Verdict:
        """The recommendation: the raced configurations (or, before a race, every one) compared through the noise;
        then, once the path to the winner has been measured (:meth:`ablation`), the smallest configuration that
        keeps its gain, without the knobs that bought nothing beyond the noise (``ablated=False``: the race's own
        winner, before that).

        On a busy machine (:class:`Load`) a configuration whose gain rests on a load-sensitive knob
        (``threads``: fewer threads suffer less from other processes) is not recommended: the verdict
        names what was seen and how to re-check it on a quiet machine, and recommends among the others.
        """
        key = ("verdict", ablated)
        if key not in self._memo:
            self._memo[key] = self._ablated(self._raced_verdict()) if ablated else self._raced_verdict()
        return self._memo[key]  # type: ignore[no-any-return]

    def _ablated(self, verdict: Verdict) -> Verdict:
        """The race's verdict, told what each knob of its winner bought (and, where some bought nothing, the
        smallest configuration that keeps the gain, once measured on its own)."""
        ab = self.ablation()
        if verdict.state != "gain" or ab is None or len(ab.steps) < 2:
            return verdict
        m = ab.minimal
        s = self.speedup(m) if m is not None and m != verdict.winner else None
        if m is None or m == verdict.winner or s is None or not s.above_one():
            return Verdict(verdict.state, verdict.winner, verdict.leader, verdict.speedup, verdict.tied, verdict.confirmed,
                           verdict.simpler_preferred, f"{verdict.text}; {ab.text()}")
        c = self.configs[m]
        text = (f"#{m} ({_changes_text(c.changes)}) is {s.text()} as fast as PyTorch's defaults "
                f"({int(round(100 * stats.LEVEL))}% interval, {plural(s.processes, 'process')} against {s.reference_processes}): "
                f"#{verdict.winner}'s gain without the knobs that bought nothing beyond the noise; {ab.text()}")
        if self.load.was_busy:
            text += f"; {self.load.text()}"
        return Verdict("gain", m, verdict.leader, s, verdict.tied, True, verdict.simpler_preferred, text)

    def ablation(self) -> A.Ablation | None:
        """What each knob of the race's winner bought, from the defaults (:mod:`autotune.ablation`): measured in
        shared processes once the race is over, one step when the winner changes a single knob; None before."""
        if "ablation" in self._memo:
            return self._memo["ablation"]  # type: ignore[no-any-return]
        self._memo["ablation"] = None
        verdict = self.verdict(ablated=False)
        if verdict.state != "gain" or verdict.winner is None or verdict.speedup is None:
            return None
        w = self.configs[verdict.winner]
        if len(w.changes) == 1:
            step = A.Step(dict(w.changes), w.key, verdict.speedup, verdict.speedup, verdict.speedup.within)
            self._memo["ablation"] = A.Ablation("", w.number, (step,), w.key, w.number, {}, 0)
            return self._memo["ablation"]  # type: ignore[no-any-return]
        plans = [(k[len(A.ABLATION):], v) for k, v in self.attrs.items()
                 if k.startswith(A.ABLATION) and isinstance(v, Mapping) and v.get("winner_key") == w.key]
        # the newest path measured whole (one measured again in another order, when a knob that bought nothing
        # stood before one that paid: autotune.ablation.reordered), else the one before it
        for ablation_id, plan in sorted(plans, key=lambda kv: -float(kv[1].get("started", 0.0))):
            keys = [p["key"] for p in plan.get("path") or []]
            processes = sum(1 for b in self.blocks if b.purpose.get("ablation") == ablation_id)
            found = A.analyse(ablation_id, plan, {k: self.within.get(k, []) for k in keys}, self.within_noise,
                              verdict.speedup, self.trial_of.get, processes)
            if found is not None:
                self._memo["ablation"] = found
                break
        return self._memo["ablation"]  # type: ignore[no-any-return]

    def _raced_verdict(self) -> Verdict:
        verdict = self._verdict()
        if not self.load.was_busy or verdict.state == "gain" and not self._sensitive(verdict.winner):
            return self._busy_note(verdict) if self.load.was_busy else verdict
        if verdict.state != "gain":
            return self._busy_note(verdict)
        seen = verdict
        quiet = self._verdict(exclude_sensitive=True)
        c = self.configs[seen.winner]  # type: ignore[index]
        names = ", ".join(k for k in c.changes if self._sensitive_knob(k))
        model = (self.attrs.get("workload") or {}).get("model") or "MODEL"
        sets = " ".join(f"--set {k}={knobs.KNOBS[k].format(v)}" for k, v in c.changes.items() if k in knobs.KNOBS)
        note = (f"#{seen.winner} ({_changes_text(c.changes)}) measured {seen.speedup.text() if seen.speedup else '-'} but its "
                f"gain rests on {names}, which depends on the load, and {self.load.text()}: not recommended from these "
                f"measurements; re-check it on a quiet machine with `autotune measure --model {model} {sets} --repeat 5` "
                f"against `autotune measure --model {model} --repeat 5`")
        if quiet.state == "gain":
            return Verdict("gain", quiet.winner, seen.leader, quiet.speedup, quiet.tied, quiet.confirmed,
                           quiet.simpler_preferred, f"{quiet.text}; {note}")
        return Verdict("no_gain", self.baseline.number if self.baseline else None, seen.leader, seen.speedup, seen.tied,
                       seen.confirmed, False, "no configuration beats PyTorch's defaults beyond the noise once the "
                       f"load-sensitive knobs are set aside: keep the defaults; {note}")

    def _sensitive_knob(self, name: str) -> bool:
        return name in knobs.KNOBS and knobs.KNOBS[name].load_sensitive

    def _sensitive(self, number: int | None) -> bool:
        return number is not None and any(self._sensitive_knob(k) for k in self.configs[number].changes)

    def _busy_note(self, verdict: Verdict) -> Verdict:
        return Verdict(verdict.state, verdict.winner, verdict.leader, verdict.speedup, verdict.tied, verdict.confirmed,
                       verdict.simpler_preferred, f"{verdict.text}; {self.load.text()}")

    def _verdict(self, exclude_sensitive: bool = False) -> Verdict:
        if not self.configs:
            return Verdict("no_results", None, None, None, (), False, False, "no successful measurement yet")
        if self.baseline is None:
            return Verdict("no_baseline", None, None, None, (), False, False, "the baseline (PyTorch's defaults) has not been measured yet")
        base = self.baseline
        pool = self.raced or [c.number for c in self.ok() if not c.is_baseline]
        # the ablation's recommendation is measured to be reported, not raced (the verdict comes to it through the ablation)
        pool = [n for n in pool if self.configs[n].feasible and not self.configs[n].busy_only
                and self.configs[n].role != A.ROLE]
        if exclude_sensitive:
            pool = [n for n in pool if not self._sensitive(n)]
        if not pool and not base.feasible:
            from autotune.units import format_bytes

            return Verdict("no_fit", None, None, None, (), False, False,
                           f"nothing measured fits the memory budget ({format_bytes(self.max_memory_bytes)}), PyTorch's "
                           f"defaults included (they peaked at {format_bytes(base.peak_memory_bytes)}): raise --max-memory, "
                           "or make the model or its batch smaller")
        if not pool:
            return Verdict("no_gain", base.number, None, None, (), False, False,
                           "no other configuration ran successfully within the budget: keep PyTorch's defaults")
        choice = self.choose(pool)
        leader = int(choice.leader)
        winner = int(choice.winner)
        tied = tuple(int(k) for k in choice.tied)
        confirmed = self.configs[leader].confirmed
        if not self.noise.known:
            s = self.speedup(leader)
            return Verdict("no_gain", base.number, leader, s, tied, confirmed, False,
                           f"the noise between processes is not measured yet, so no claim: the fastest so far is "
                           f"#{leader} at {s.text() if s else '-'} the speed of the defaults")
        if not choice.significant:
            s = self.speedup(leader)
            what = knobs.short(self.configs[leader].config) if self.configs[leader].changes else "defaults"
            return Verdict("no_gain", base.number, leader, s, tied, confirmed, False,
                           f"no configuration beats PyTorch's defaults beyond the noise: the fastest, #{leader} ({what}), "
                           f"measured {s.text() if s else '-'}; keep the defaults")
        s = self.speedup(winner)
        assert s is not None
        c = self.configs[winner]
        text = (f"#{winner} ({_changes_text(c.changes)}) is {s.text()} as fast as PyTorch's defaults "
                f"({int(round(100 * stats.LEVEL))}% interval, {plural(c.processes, 'process')} against {s.reference_processes})")
        if choice.simpler_than_leader:
            text += (f"; preferred over #{leader}, which looked faster ({self.speedup(leader).text()}) but is not "  # type: ignore[union-attr]
                     f"separated from it by the evidence, because it changes fewer knobs")
        elif len(tied) > 1:
            text += f"; {len(tied) - 1} other configuration(s) were as fast within the noise"
        if not confirmed:
            text += "; measured once, not confirmed by a race (run with --confirm)"
        return Verdict("gain", winner, leader, s, tied, confirmed, choice.simpler_than_leader, text)

    def choose(self, pool: Sequence[int]) -> stats.Choice:
        """The verdict's rule (:func:`autotune.stats.choose`) over these configurations (the race's rule too)."""
        assert self.baseline is not None
        return stats.choose(
            [str(n) for n in pool],
            str(self.baseline.number),
            lambda k: self.speedup(int(k)),  # type: ignore[arg-type, return-value]
            lambda k, leader: self.compare(int(k), int(leader), claim=False),
            {str(n): len(self.configs[n].changes) for n in pool},
        )

    def recommended(self) -> int | None:
        """The configuration to use: the verdict's winner, or the defaults (the baseline) when nothing beats them
        beyond the noise; None before the baseline is measured."""
        verdict = self.verdict()
        if verdict.state == "gain" and verdict.winner is not None:
            return verdict.winner
        if verdict.state == "no_fit":  # not even the defaults fit the memory budget: nothing to recommend
            return None
        return self.baseline.number if self.baseline else None

    def time_spent(self) -> dict[str, float]:
        """Wall-clock time during which any process worked on the study (overlapping workers count once)."""
        sessions = [v for k, v in self.attrs.items() if k.startswith(SESSION) and isinstance(v, Mapping)]
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
            "front": [self.row(n) for n in self.front()],
            "recommended": self.row(rec) if (rec := self.recommended()) is not None else None,
            "load": self.load.to_dict(),
        }


def _changes_text(changes: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={knobs.KNOBS[k].format(v)}" for k, v in changes.items() if k in knobs.KNOBS) or "defaults"


def _first_load(t: FrozenTrial) -> dict[str, float]:
    other = ((t.user_attrs.get("result") or {}).get("load") or {}).get("other_cores")
    return {f"search-{t.number}": float(other)} if other is not None else {}


def _repeats(attrs: Mapping[str, Any]) -> tuple[dict[int, list[Measurement]], dict[int, int], dict[int, dict[str, float]]]:
    """Re-measurements by trial from the study's attributes (and legacy ``confirmations``), and the load during each."""
    out: dict[int, list[Measurement]] = {}
    failed: dict[int, int] = {}
    loads: dict[int, dict[str, float]] = {}
    for round_id, number, value in remeasured(attrs):
        rate = value.get("samples_per_s")
        if value.get("other_cores") is not None:
            loads.setdefault(number, {})[round_id] = float(value["other_cores"])
        if rate:
            out.setdefault(number, []).append((round_id, float(rate)))
        else:
            failed[number] = failed.get(number, 0) + 1
    for trial, rates in (attrs.get("confirmations") or {}).items():
        for i, rate in enumerate(rates):
            out.setdefault(int(trial), []).append((f"confirm-{i + 1}", float(rate)))
    for values in out.values():
        values.sort(key=lambda m: m[0])
    return out, failed, loads


@dataclass(frozen=True)
class Load:
    """How busy the machine was while the study measured (other processes' cores, :mod:`autotune.load`).

    A measurement is *busy* when other processes used more than :func:`autotune.load.busy_threshold`
    cores; it is *much busier than the baseline's* when they used that much more than during the
    baseline's measurements (their median), and is then left out of its configuration's claim: a
    ratio between a quiet baseline and a busy candidate (or the reverse) is a claim about that minute.
    """

    cores: int
    baseline_other: float  # the median of other processes' cores during the baseline's measurements
    measurements: int  # measurements whose load is known
    busy: int  # of them, taken on a busy machine
    max_other: float
    median_other: float
    left_out: int = 0

    @classmethod
    def of(cls, configs: Any, baseline: Config | None, attrs: Mapping[str, Any]) -> Load:
        import statistics

        from autotune.load import busy_threshold

        cores = int((attrs.get("fingerprint") or {}).get("cpu_count") or 0) or 1
        every = [v for c in configs for v in c.loads.values()]
        base = [v for v in baseline.loads.values()] if baseline else []
        threshold = busy_threshold(cores)
        probe = cls(cores, statistics.median(base) if base else 0.0, len(every), sum(1 for v in every if v > threshold),
                    max(every, default=0.0), statistics.median(every) if every else 0.0)
        left = sum(1 for c in configs for v in c.loads.values() if probe.much_busier(v))
        return cls(**{**probe.__dict__, "left_out": left})

    @property
    def threshold(self) -> float:
        from autotune.load import busy_threshold

        return busy_threshold(self.cores)

    def much_busier(self, other: float) -> bool:
        return other > self.baseline_other + self.threshold

    @property
    def was_busy(self) -> bool:
        return self.busy > 0

    def text(self) -> str:
        if not self.measurements:
            return "machine load: not recorded"
        if not self.was_busy:
            return f"machine quiet while measuring: other processes used at most {self.max_other:.1f} of {self.cores} cores"
        text = (f"measured on a busy machine: other processes used up to {self.max_other:.1f} of {self.cores} cores "
                f"during {self.busy} of {self.measurements} measurements (median {self.median_other:.1f})")
        if self.left_out:
            text += f"; {self.left_out} taken while it was much busier than during the baseline's were left out of the claims"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "busy_machine": self.was_busy, "text": self.text()}


WITHIN_PREFIXES = ("pair-", "abl-")  # rounds of processes that measured several configurations alternately


def _common(a: Sequence[Measurement], b: Sequence[Measurement]) -> bool:
    rounds = {r for r, _ in a}
    return any(r in rounds for r, _ in b)


def _looks(attrs: Mapping[str, Any]) -> int:
    """The planned looks of the study's latest race (1 before any race, and for races that did not record them)."""
    races = [v for k, v in attrs.items() if k.startswith(RACE) and isinstance(v, Mapping)]
    if not races:
        return 1
    latest = max(races, key=lambda v: v.get("started", 0.0))
    return max(1, int(latest.get("looks") or 1))
