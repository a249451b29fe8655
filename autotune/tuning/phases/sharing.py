"""Sharing a study with other processes: claiming a configuration through the storage, and the budget they share.

No process talks to another: each writes its claim on its trial (``config_key``) and reads
the others'. The lowest-numbered claim of a configuration wins, and only the first
``trials`` claims by number are measured, so every process reaches the same answer from
the storage: no configuration is measured twice, and the budget holds for the whole fleet
(:func:`claim`). A race or a path of what each knob bought is claimed by its record's owner
(:func:`owned_elsewhere`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping, Sequence

import optuna

from autotune import clock
from autotune.store.records import Role
from autotune.store import LiveStudy, StoredTrial

UNDECIDED_WAIT_S = 30.0  # how long a claim waits for earlier trials still choosing their configuration
UNDECIDED_POLL_S = 0.05
OWNED_FOR_S = 6 * 3600  # a race or a path started by another host's process is its own for this long


def claims(trials: Sequence[StoredTrial]) -> list[StoredTrial]:
    """Trials that measured, or are measuring, a configuration (any process): what no other trial measures again."""
    return [t for t in trials if t.duplicate_of is None and t.config_key is not None and (t.running or t.measured)]


def in_budget(trial: StoredTrial) -> bool:
    """A claim counts toward the trial budget, but the recommendation measured on its own after the race (role
    ``minimal``): it is measured beyond the budget, on the first run and on every resumed one alike."""
    return trial.role != Role.MINIMAL


def budget_counts(trials: Sequence[StoredTrial]) -> tuple[int, int]:
    """(measured configurations, configurations being measured now by any process)."""
    taken = [t for t in claims(trials) if in_budget(t)]
    running = sum(1 for t in taken if t.running)
    return len(taken) - running, running


class Answer(Enum):
    """What a claim decided for a trial."""

    MEASURE = "measure"  # the configuration is this trial's to measure
    ANSWERED = "answered"  # an earlier trial measured it: this one answers from it (``Claim.earlier``)
    TAKEN = "taken"  # another process holds this very trial (SQLite handed a queued trial to two): it measures it
    GIVEN_UP = "given_up"  # another trial measures the same configuration now, or the budget is full (``Claim.why``)


@dataclass
class Claim:
    """What a claim found (``answer``), the earlier trial this one answers from, why it is given up (in words, for the
    record), and the study as the claim read it (``trials``)."""

    answer: Answer
    trials: list[StoredTrial] = field(default_factory=list)
    earlier: StoredTrial | None = None
    why: str = ""


def claim(live: LiveStudy, trial: optuna.Trial, role: str, key: str, budget: int) -> Claim:
    """Claim configuration ``key`` for ``trial`` through the storage before measuring it (see the module's docstring).

    The ablation's recommendation (role ``minimal``) is measured beyond the budget: it is the study's answer, not a
    search trial.
    """
    live.mark(trial, config_key=key, role=role)
    # The study's trials once the earlier undecided ones have chosen, this one included (a running trial is
    # read afresh on every read), read after the writes above.
    trials, undecided = after_undecided(live, trial.number)
    mine = next((t for t in trials if t.number == trial.number), None) or live.trial(trial)
    if not live.is_mine(mine.owner):
        # SQLite handed this queued trial to two processes: the other one measures it
        return Claim(Answer.TAKEN, trials)
    earlier = [t for t in claims(trials) if t.number < trial.number]
    for t in earlier:
        if t.config_key == key:
            if t.running:
                return Claim(Answer.GIVEN_UP, trials, why=f"#{t.number} is measuring the same configuration")
            return Claim(Answer.ANSWERED, trials, earlier=t)
    # Earlier trials still undecided after the wait (a process stopped while choosing) may claim
    # the budget too: count them (one that turns out a cache answer leaves room a later trial takes).
    if role != Role.MINIMAL and len([t for t in earlier if in_budget(t)]) + len(undecided) >= budget:
        return Claim(Answer.GIVEN_UP, trials, why=f"the budget of {budget} configurations is taken")
    return Claim(Answer.MEASURE, trials)


def after_undecided(live: LiveStudy, number: int) -> tuple[list[StoredTrial], list[StoredTrial]]:
    """The study's trials once every earlier trial still choosing its configuration has claimed one.

    Each process writes its claim, then reads the others'. An earlier trial still choosing (a
    GP suggestion takes 0.4 s) may write the same configuration after this one has read: it
    then sees this later claim, not yet an earlier one, and measures too. So a claim first waits
    for the earlier undecided trials (the earliest never waits, so none wait forever), at most
    UNDECIDED_WAIT_S for a process that stopped while choosing (it is recovered as stale).
    Returns (trials, the earlier ones still undecided when the wait ended).
    """
    deadline = clock.monotonic() + UNDECIDED_WAIT_S
    while True:
        trials = live.trials()
        undecided = [t for t in trials if t.running and t.number < number and t.config_key is None
                     and not live.is_stale(t)]
        if not undecided or clock.monotonic() >= deadline:
            return trials, undecided
        clock.sleep(UNDECIDED_POLL_S)  # another process's write: the storage is the only way to learn of it


def owned_elsewhere(live: LiveStudy, who: Mapping[str, Any]) -> bool:
    """A race's or a path's record was started by another process (``who``: its owner) that is still alive (same
    host) or started recently (another host: within OWNED_FOR_S)."""
    if not who or live.is_mine(who):
        return False
    return not live.is_gone(who, since=float(who.get("started", 0)), grace_s=OWNED_FOR_S)
