"""The claim, measured apart from the search that chose it, and the least change that keeps its gain.

The search and the race *select*: the configuration they pick is the one whose measurements came out fastest, so
those measurements run high (the winner's curse: a true 1.5x quoted 1.82x). Its claim is measured again, in
fresh processes interleaved with PyTorch's defaults, processes that chose nothing
(:mod:`autotune.tuning.phases.confirm`): their ratio is an honest estimate of what the user's training will see. The
claim is the configuration's fresh processes against the defaults' processes of the same rounds (:func:`defaults_pool`),
unpaired, each side with its own spread (Welch, no test first of whether the spreads differ: :func:`claim_ratio`).

Before that, the chosen configuration is reduced to the knobs that pay (:func:`propose`): a knob whose effect the
search's own measurements cannot tell from the noise is proposed for reverting to the user's setting, the batch
size first (a batch size the user did not ask for changes their training, not only its speed). The proposal is then
measured, never trusted: the reduced configuration runs in the same fresh rounds as the chosen one, and it is
recommended unless it is slower beyond the noise (:func:`reduction_holds`).

The claim stops once its interval is as narrow as the noise allows (:func:`width_target`: high/low 1.4 at 15%
between processes, 1.1 at 3%) or its rounds are spent. Pure computation; nothing here imports torch or Optuna.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from autotune import knobs
from autotune.evidence import stats
from autotune.evidence.stats import Measurement, Noise, Ratio
from autotune.store.plans import ConfirmRecord, RoundId
from autotune.store.records import Role

INDIFFERENCE = 0.03  # configurations not more than 3% apart are equal for a user (the race's choice, the reduction)

ROUNDS = 7  # the claim's rounds at most: up to 4 that decide a reduction, then at least 3 of the recommendation alone
MIN_ROUNDS = 2  # before a reduction may be decided (two give the reduced configuration's comparison a pair)
#: A claim has an interval only from this many fresh processes of its configuration: its own spread is part of the
#: claim (a configuration's noise is its own: on a GPU the defaults spread 1% between processes, a launch-bound
#: compiled configuration 25%), and fewer say too little of it. Before that the claim is "not confirmed".
MIN_PROCESSES = 3
#: What a claim measures beside the recommendation's processes, as a time budget keeps it: the defaults once, and
#: room for a little more (a claim whose reduction the time left cannot decide claims the chosen configuration whole:
#: :func:`deciding_processes`).
CLAIM_EXTRA_PROCESSES = 3


def deciding_processes(processes: int) -> int:
    """The processes a claim takes when it decides a reduction by measurement: the reduced configuration's own
    trial, :data:`MIN_ROUNDS` rounds of it and the chosen one, the defaults once, then ``processes`` of the reduced
    configuration after the decision (those before it chose it)."""
    return 1 + 2 * MIN_ROUNDS + 1 + processes
WIDEST = 2.25  # the width a claim aims at, in noise: high/low = exp(WIDEST * sigma), 1.40 at 15% ...
NARROWEST = 1.10  # ... and never below this (1.07 at 3% would cost more processes than it tells a user)


def width_target(sigma: float | None) -> float:
    """The high/low a claim stops at: what the noise between processes allows for a few processes of each side
    (about five at 15%, three at 3%): ``exp(2.25 sigma)``, at least 1.10. Without a known noise, 1.4."""
    if sigma is None:
        return math.exp(WIDEST * 0.15)
    return max(NARROWEST, math.exp(WIDEST * sigma))


def processes_needed(sigma: float | None, level: float = stats.LEVEL) -> int:
    """Processes of each side a claim needs to reach :func:`width_target` at this noise (a normal approximation,
    at least :data:`MIN_PROCESSES`, at most :data:`ROUNDS`): how much of a time budget it keeps."""
    return min(ROUNDS, processes_for(width_target(sigma), 0.15 if sigma is None else sigma, level))


def processes_for(width: float, sigma: float, level: float = stats.LEVEL) -> int:
    """The least processes of each side a claim of ``width`` (high/low) needs at ``sigma`` between processes (a
    normal approximation: width = exp(2 z sigma sqrt(2/n))), at least :data:`MIN_PROCESSES`."""
    z = statistics.NormalDist().inv_cdf(0.5 + level / 2.0)
    return max(MIN_PROCESSES, math.ceil(2.0 * (2.0 * z * sigma / math.log(width)) ** 2))


def claim_ratio(fresh: Sequence[Measurement], defaults: Sequence[Measurement], noise: Noise,
                level: float = stats.LEVEL, reference_noise: Noise | None = None,
                minimum: int = MIN_PROCESSES) -> Ratio:
    """The configuration's fresh processes over every process of the defaults: the ratio of their geometric means
    (unpaired: the defaults' earlier processes count too). ``noise`` is the configuration's noise between processes
    and ``reference_noise`` the defaults' (default: the same): one noise gives a t interval of half-width
    ``t * sigma * sqrt(1/n + 1/m)``, two (the configurations spread unequally) Welch's
    (:func:`autotune.evidence.stats.welch`). Fewer than ``minimum`` fresh processes give no interval: a claim rests
    on its configuration's own spread (:data:`MIN_PROCESSES`). One claim: no adjustment for comparisons or looks (its
    stopping rule never looks at its estimate)."""
    num = [math.log(v) for _, v in fresh if v and v > 0]
    ref = [math.log(v) for _, v in defaults if v and v > 0]
    if not num or not ref:
        raise ValueError("a claim needs a fresh measurement of the configuration and one of the defaults")
    log_ratio = statistics.fmean(num) - statistics.fmean(ref)
    if len(num) < minimum or not noise.known or noise.sigma is None:
        return Ratio(math.exp(log_ratio), None, None, len(num), len(ref), False, level, 1, 1)
    if reference_noise is not None and reference_noise is not noise:
        return stats.welch(fresh, defaults, noise, reference_noise, level=level)
    half = stats.t_quantile(noise.df, level) * noise.sigma * math.sqrt(1.0 / len(num) + 1.0 / len(ref))
    return Ratio(math.exp(log_ratio), math.exp(log_ratio - half), math.exp(log_ratio + half), len(num), len(ref),
                 False, level, 1, 1, df=noise.df)


def wide(ratio: Ratio) -> float | None:
    """A ratio's high/low (None without an interval)."""
    if not ratio.has_interval or not ratio.low:
        return None
    return float(ratio.high) / float(ratio.low)  # type: ignore[arg-type]


def effects(changes: Mapping[str, Any], rows: Sequence[tuple[Mapping[str, Any], float]], sigma: float | None
            ) -> dict[str, tuple[float, float]]:
    """Each changed knob's effect on log(samples/s) as the search measured it: a main-effects fit over the study's
    configurations (``rows``: configuration, samples/s), one indicator per knob, "has the chosen value"; with its
    standard error from the noise between processes (``sigma``). A knob the search never varied gets (0, inf)."""
    names = [k for k in knobs.NAMES if k in changes]
    rows = [(c, r) for c, r in rows if r and r > 0]
    out: dict[str, tuple[float, float]] = {k: (0.0, math.inf) for k in names}
    if not names or len(rows) < 3:
        return out
    import numpy as np

    x = np.array([[1.0] + [1.0 if c.get(k) == changes[k] else 0.0 for k in names] for c, _ in rows])
    y = np.log(np.array([r for _, r in rows]))
    gram = x.T @ x + 1e-6 * np.eye(x.shape[1])
    beta = np.linalg.solve(gram, x.T @ y)
    if len(rows) > x.shape[1]:
        resid = y - x @ beta
        s = float(np.sqrt(max(float(resid @ resid) / (len(rows) - x.shape[1]), (sigma or 0.0) ** 2)))
    else:
        s = sigma if sigma is not None else math.inf
    cov = np.linalg.inv(gram) * s * s
    for i, k in enumerate(names, start=1):
        varied = any(r[i] for r in x) and not all(r[i] for r in x)
        out[k] = (float(beta[i]), float(math.sqrt(max(cov[i, i], 0.0)))) if varied else (0.0, math.inf)
    return out


FIT_SPARE = 1  # the main-effects fit proposes only from as many configurations as it has parameters (the knobs, a mean)
KEEP_LEVEL = 0.95  # a knob stays in the proposal when the search shows it pays beyond the noise at this level ...
KEEP_MARGIN = math.log(1.0 + INDIFFERENCE)  # ... and by more than the indifference zone: a spurious effect rarely does


def propose(changes: Mapping[str, Any], rows: Sequence[tuple[Mapping[str, Any], float]], sigma: float | None,
            keep_one: bool = True) -> list[str]:
    """The knobs of the chosen configuration to revert to the user's setting, the batch size first: those whose
    effect in the search is not above the indifference zone beyond the noise (a one-sided 95% bound). Never all of
    them (``keep_one``): the knob with the largest effect stays (the race chose a configuration that beats the
    defaults). Only a
    proposal: the reduced configuration is measured before it is recommended, and a knob whose effect shows only
    together with others (a combination that pays) comes back when the reduced configuration is slower."""
    z = statistics.NormalDist().inv_cdf(KEEP_LEVEL)
    measured = [r for _, r in rows if r and r > 0]
    if len(measured) < len([k for k in changes if k in knobs.KNOBS]) + FIT_SPARE:
        # too few configurations to tell the knobs' effects apart: a guess would revert the knobs that pay (an H200
        # study of 5 trials proposed reverting tf32 and a 256 batch, its whole 2.9x); the chosen one is claimed whole
        return []
    found = effects(changes, rows, sigma)
    revert = [k for k, (effect, se) in found.items() if not effect - z * se > KEEP_MARGIN]
    if keep_one and revert and len(revert) == len(found):
        revert.remove(max(found, key=lambda k: found[k][0]))
    return sorted(revert, key=lambda k: (k != knobs.BATCH_KNOB, knobs.NAMES.index(k)))


def round_of(k: int, target: int, deciding: int | None, defaults: int, fresh_n: int, defaults_n: int) -> list[int]:
    """The configurations round ``k`` (from 0) of a claim measures, each in a process of its own, in a rotating order
    (nobody always first): the recommendation; the chosen configuration while the reduction is undecided
    (``deciding``); the defaults, in every round: a round of the recommendation alone would put it first every time,
    and a machine whose second process of a round runs slower (what the first left behind: caches, clocks) then
    made 3 of 20 claims miss their truth instead of 1 (tests/test_race.py). (``fresh_n``, ``defaults_n``: the
    processes each side has so far, kept for the callers; every round measures both.)"""
    numbers = [target, *([deciding] if deciding is not None else []), defaults]
    shift = k % len(numbers)
    return numbers[shift:] + numbers[:shift]


# the indifference zone: a reduced configuration not more than 3% slower is as fast
INDIFFERENT = 1.0 / (1.0 + INDIFFERENCE)
#: The round by which a reduction is decided at the latest: the claim's last rounds stay its own, enough for a claim of
#: the reduced configuration from the processes after the decision (those up to it chose it).
DECIDE_BY = ROUNDS - MIN_PROCESSES
#: By DECIDE_BY, a reduction measured slower than this (but not beyond the noise) is refused all the same.
DECIDE_FLOOR = 0.90


def reduction_holds(reduced_over_chosen: Ratio, rounds: int) -> bool | None:
    """Whether the reduced configuration is recommended after ``rounds`` rounds (None: not yet decided). A knob
    whose removal costs nothing beyond the noise is left at the user's setting, but a loss must have had its
    chance to show: not when the reduced configuration is slower beyond the noise (False, at once); yes when it
    shows no loss (its estimate within the indifference zone of the chosen one); otherwise more rounds, and by
    :data:`DECIDE_BY`, yes unless slower beyond the noise or by more than :data:`DECIDE_FLOOR` (a reduction that
    measured 19% slower and "not beyond the noise" on a few processes is a loss the noise hid, not no loss). (A
    combination that pays loses most of its gain when one of its knobs is reverted: 1.5x against 1.05x is far
    outside the zone, so it is measured until it shows.)"""
    if rounds < MIN_ROUNDS:
        return None
    if reduced_over_chosen.below_one():
        return False
    if reduced_over_chosen.estimate >= INDIFFERENT:
        return True
    if rounds >= DECIDE_BY:
        return reduced_over_chosen.estimate >= DECIDE_FLOOR
    return None


# ---------------------------------------------------------------- a study's claim, as read


def fresh(ev: Any, number: int, after: int = 0) -> list[Measurement]:
    """A configuration's measurements that chose nothing: its rounds of a claim, and its first measurement when it
    was measured on its own after the race (role ``minimal``: nothing selected it). ``after``: only the claim's rounds
    after that one (those up to it decided the reduction: a decision looked at them)."""
    c = ev.configs[number]
    out = [m for m in c.repeats if RoundId.is_of(RoundId.CLAIM, m[0]) and m[0] not in c.left_out
           and RoundId.number(m[0]) > after]
    if c.role == Role.MINIMAL and c.first[0] not in c.left_out and not after:
        out.insert(0, c.first)
    return out


def after_decision(record: ConfirmRecord, number: int) -> int:
    """The claim's rounds that decided whether ``number`` is recommended (its processes in them are left out of its
    claim): the reduced configuration's, when its claim's rounds decided the reduction (:func:`reduction_ratio`)."""
    return (record.decided_at or 0) if number == record.reduced else 0


def claim_of(ev: Any, number: int, after: int = 0) -> Ratio | None:
    """``number``'s claim: its fresh processes (after round ``after``) over the defaults' of the same rounds (None
    before it has one)."""
    if ev.baseline is None:
        return None
    taken = fresh(ev, number, after)
    if not taken:
        return None
    # Each side's noise is its own, always (Welch), with no test first of whether the spreads differ: a pretest that
    # found them alike lent the defaults' spread (their processes outnumber the others', and on a GPU they spread 1%)
    # to a configuration spreading 25%, and the claim's own processes, not those the plan looked at to fix how many
    # to measure, say its spread (a claim planned short on a spread that came out small by chance would be narrow too).
    pool = defaults_pool(ev, after)
    return claim_ratio(taken, pool, stats.own_noise(v for _, v in taken),
                       reference_noise=stats.own_noise(v for _, v in pool))


def defaults_pool(ev: Any, after: int = 0) -> list[Measurement]:
    """The defaults' processes a claim rests on: those of the claim's own rounds (after round ``after``, as its
    configuration's), measured beside the claimed configuration's. On a machine whose speed drifts over a study the
    defaults' earlier processes (their first trial, the noise floor's) carried the drift into the claim; the race's
    were never taken (its stopping rule looked at them). Before the claim has a round (the least change's own first
    process, which chose nothing), the defaults' processes but the race's."""
    if ev.baseline is None:
        return []
    rounds = [m for m in ev.baseline.claim if RoundId.is_of(RoundId.CLAIM, m[0]) and RoundId.number(m[0]) > after]
    return rounds or [m for m in ev.baseline.claim if not RoundId.is_of(RoundId.RACE, m[0])]


def reduction_ratio(ev: Any, reduced: int, chosen: int) -> Ratio:
    """The reduced configuration over the chosen one, to decide the reduction: the reduced one's fresh processes
    against the chosen one's processes of the search and the race (they ran a little high, as they chose it, which
    only makes a knob that pays harder to revert), unpaired, plain 90%. Never the chosen one's fresh processes:
    they are its claim should the reduction fail, and a claim must not rest on processes a decision looked at; for
    the same reason the reduced configuration's claim rests on its processes after the decision
    (:func:`after_decision`: from the processes that let it through it ran 23% high over 100 seeds)."""
    a = fresh(ev, reduced)
    b = [m for m in ev.configs[chosen].claim if not RoundId.is_of(RoundId.CLAIM, m[0])]
    if not a or not b:
        return Ratio(1.0)
    return claim_ratio(a, b, ev.noise_of(reduced), reference_noise=ev.noise_of(chosen), minimum=1)


def fresh_ratio(ev: Any, number: int, reference: int) -> Ratio:
    """``number`` over ``reference`` in the rounds of a claim that measured both (paired on them), plain 90%: the
    reduced configuration against the chosen one."""
    a = [m for m in fresh(ev, number) if RoundId.is_of(RoundId.CLAIM, m[0])]
    b = [m for m in fresh(ev, reference) if RoundId.is_of(RoundId.CLAIM, m[0])]
    rounds = {r for r, _ in a} & {r for r, _ in b}
    if not rounds:
        return Ratio(1.0)
    a, b = [m for m in a if m[0] in rounds], [m for m in b if m[0] in rounds]
    na, nb = ev.noise_of(number), ev.noise_of(reference)
    if na is ev.noise and nb is ev.noise:
        return stats.ratio(a, b, ev.noise)
    return stats.paired(a, b)  # unequal spreads: the rounds' own log-ratios say the noise of their ratio


@dataclass(frozen=True)
class Confirmed:
    """A claim measured apart, as read from the study: the recommendation (the reduced configuration when it held,
    else the chosen one) and its claim; the knobs left at the user's setting and what they bought together (the
    chosen configuration over the reduced one, in the claim's rounds); the chosen configuration's figure in the race
    (the selection's own, shown only as such); the width the claim aimed at."""

    confirm_id: str
    record: ConfirmRecord
    recommendation: int
    claim: Ratio | None
    reverted: dict[str, Any]
    bought: Ratio | None
    selected: Ratio | None
    target: float

    @property
    def done(self) -> bool:
        return self.record.done

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.confirm_id, "recommendation": self.recommendation, "chosen": self.record.chosen,
                "reduced": self.record.reduced, "claim": self.claim.to_dict() if self.claim else None,
                "reverted": dict(self.reverted), "bought": self.bought.to_dict() if self.bought else None,
                "selected": self.selected.to_dict() if self.selected else None, "target_width": self.target,
                "width": wide(self.claim) if self.claim else None, "done": self.done,
                "stop": self.record.stop.value if self.record.stop else None}


def confirmed(ev: Any) -> Confirmed | None:
    """The claim of the study's latest race, measured apart (None before one began)."""
    races = ev.study.races()
    if not races or ev.baseline is None:
        return None
    race_id = races[-1][0]
    found = [(i, r) for i, r in ev.study.confirms() if r.race_id == race_id and r.chosen in ev.configs]
    if not found:
        return None
    confirm_id, record = found[-1]
    reduced = record.reduced if record.reduced in ev.configs else None
    bought = fresh_ratio(ev, record.chosen, reduced) if reduced is not None else None
    if bought is not None and not bought.has_interval and bought.estimate == 1.0 and not fresh(ev, reduced):
        bought = None
    holds = reduced is not None and record.reduction is not False and (not record.done or record.reduction is True)
    # The reduction is decided on the search's processes of the chosen configuration (its fresh ones are its claim
    # should the reduction fail); where the rounds that measured both then show the knobs it reverts buying a gain
    # beyond the noise, the user would be told to leave a measured gain at their setting: the chosen one is claimed,
    # where its fresh processes can confirm a claim (else the verdict says the gain showed after the decision).
    if (holds and bought is not None and bought.above_one()
            and len(fresh(ev, record.chosen)) >= MIN_PROCESSES):
        holds = False
    number = reduced if holds else record.chosen
    reverted = dict(record.reverted) if holds else {}
    return Confirmed(confirm_id, record, number, claim_of(ev, number, after_decision(record, number)), reverted, bought,
                     ev.selected(record.chosen), record.width)


@dataclass(frozen=True)
class Left:
    """Knobs of the race's choice left at the user's setting, with what they bought: the choice over the least
    change, in shared processes where what each knob bought measured them one step at a time, else in the claim's
    fresh rounds (then, for several knobs, together)."""

    changes: dict[str, Any]  # knob -> the value the race chose
    kept: dict[str, Any]  # knob -> the user's value, which the recommendation keeps
    bought: Ratio | None

    def lines(self) -> list[str]:
        """Each knob with the user's value, as the recommendation keeps it: ``batch_size: 32``."""
        return [f"{k}: {knobs.KNOBS[k].format(v)}" for k, v in self.kept.items() if k in knobs.KNOBS]

    def bought_text(self) -> str:
        """What the race's values bought: ``batch_size=128 bought 1.01x (0.93-1.10)`` (``together`` for several)."""
        label = " ".join(f"{k}={knobs.KNOBS[k].format(v)}" for k, v in self.changes.items() if k in knobs.KNOBS)
        figure = self.bought.text() if self.bought is not None else "nothing measured apart"
        return f"{label} bought {figure}{' together' if len(self.changes) > 1 else ''}"

    def text(self) -> str:
        """``batch_size: 32 (batch_size=128 bought 1.01x (0.93-1.10))``."""
        return f"{', '.join(self.lines())} ({self.bought_text()})"

    def to_dict(self) -> dict[str, Any]:
        return {"changes": dict(self.changes), "kept": dict(self.kept), "text": self.text(), "lines": self.lines(),
                "bought": self.bought.to_dict() if self.bought is not None else None}


def left(conf: Confirmed, ablation: Any, defaults: Mapping[str, Any]) -> list[Left]:
    """What the recommendation left at the user's setting (``conf.reverted``), each with what it bought: a step of
    what each knob bought that was dropped (measured in shared processes) on its own, the rest together in the
    claim's rounds."""
    rest = dict(conf.reverted)
    out: list[Left] = []
    if ablation is not None and ablation.winner == conf.record.chosen:
        for step in ablation.steps:
            if not step.kept and step.added and set(step.added) <= set(rest):
                out.append(Left(dict(step.added), {k: defaults.get(k) for k in step.added}, step.bought))
                for k in step.added:
                    rest.pop(k)
    if rest:
        out.append(Left(rest, {k: defaults.get(k) for k in rest}, conf.bought))
    return out
