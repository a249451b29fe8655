"""Optuna's cache of a database study's trials, filled in one quick read: what lets a resumed 10,000-trial study start.

Optuna wraps a database storage in a cache of each study's trials (per Study object) and fills it on
the first read through its ORM: most of the time a resumed run of a large study took to start its
first trial (benchmarks/results/resume_scale.txt). :func:`autotune.store.reading.all_trials` reads
the same trials in one pass (held equal to Optuna's read by tests/test_reading.py); they are put in
the cache as Optuna's own first read leaves it, with Python's cyclic collector paused during the read
and what it read frozen out of later collections (two thirds of the read's time, and of the first
evidence's, went to collections walking those trials again).
"""

from __future__ import annotations

from typing import Any, Callable

import optuna

from autotune.store import reading


def warm_cache(study: optuna.Study) -> bool:
    """Fill Optuna's cache of a database study's trials in one quick read; True when it did.

    Optuna wraps a database storage in a cache of each study's trials (per Study object) and fills it on
    the first read through its ORM: about 7 s for a 10,000-trial study on SQLite here, most of the time a
    resumed run took to start its first trial. :func:`autotune.reading.all_trials` reads the same trials
    in one pass (held equal to Optuna's read by tests/test_reading.py); they are put in the cache as
    Optuna's own first read leaves it (every trial, the finished ones never read again, the unfinished
    ones and any newer re-read on each later read, in Optuna's code). For want of a public way to fill
    that cache, this uses private names of Optuna 5.0: ``optuna.storages._cached_storage._CachedStorage``
    (``_backend``, ``_lock``, ``_studies``, ``_add_trials_to_cache``) and ``_StudyInfo``
    (``unfinished_trial_ids``, ``last_finished_trial_id``). Anything else (journal and in-memory storages
    keep their own state; an Optuna whose cache differs; a read that fails, e.g. racing another
    process's writes) leaves the cache empty, and Optuna's first read fills it as before.
    """

    try:
        from optuna.storages._cached_storage import _CachedStorage, _StudyInfo
    except ImportError:
        return False
    cache = study._storage
    if not isinstance(cache, _CachedStorage) or not hasattr(cache, "_backend"):
        return False
    study_id = study._study_id

    def empty() -> bool:
        info = cache._studies.get(study_id)
        return info is None or not (info.trials or info.last_finished_trial_id >= 0 or info.unfinished_trial_ids)

    try:
        if not empty():
            return False  # read already
        with reading.collector_paused():
            return _fill(cache, study_id, empty, _StudyInfo)
    except Exception:  # noqa: BLE001 - a read that failed, an Optuna whose cache differs: Optuna's own first read fills it
        return False


def _fill(cache: Any, study_id: int, empty: Callable[[], bool], info_type: Any) -> bool:
    """Read the study's trials in one pass and put them in Optuna's cache (see :func:`warm_cache`)."""
    trials = reading.all_trials(cache._backend, study_id)
    with cache._lock:
        if not empty():
            return False
        info = cache._studies.setdefault(study_id, info_type())
        cache._add_trials_to_cache(study_id, trials)
        for t in trials:
            if t.state.is_finished():
                info.last_finished_trial_id = max(info.last_finished_trial_id, t._trial_id)
            else:
                info.unfinished_trial_ids.add(t._trial_id)
    return True
