"""Transitional: the writers of re-measurements, and the names the tuning loop still imports from here.

# writers: moving to the race (in progress)

They move, with the stored keys' names, to the tuning loop's side (:mod:`autotune.race` and
:mod:`autotune.study`, through :meth:`autotune.store.LiveStudy.save_measurement` and
:meth:`~autotune.store.LiveStudy.save_paired`); the keys themselves are the store's
(:mod:`autotune.store.records`). Nothing in :mod:`autotune.evidence` reads through them.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import TYPE_CHECKING, Any, Sequence

from autotune import result as R
from autotune.store.records import MEASUREMENT, PAIRED, RACE, SESSION, UNCOMPARED, StoredTrial
from autotune.store.records import measurement as measurement_key

if TYPE_CHECKING:  # pragma: no cover
    import optuna

__all__ = ["MEASUREMENT", "PAIRED", "RACE", "SESSION", "UNCOMPARED", "is_measured", "measurement_key",
           "record_measurement", "record_paired"]


def is_measured(t: Any) -> bool:
    """A trial that measured a configuration (not a cache answer, not interrupted): :attr:`StoredTrial.measured`
    (an Optuna trial, as the loop still passes one, is read through the store first)."""
    return (t if isinstance(t, StoredTrial) else StoredTrial.of(t)).measured


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
