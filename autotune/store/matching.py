"""Whether a stored study was made for this run: the same search space, machine, workload and device, or one
:class:`~autotune.errors.StudyError` that names every difference and how to keep both (results are never mixed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from autotune.errors import StudyError
from autotune.machine import identity
from autotune.request import option
from autotune.store.records import StoredStudy

if TYPE_CHECKING:
    import optuna


def check_matches(study: optuna.Study, attrs: Mapping[str, Any], shown: str) -> None:
    """Refuse a run whose space, fingerprint, workload or device differ from the stored study's."""
    view = StoredStudy(study.study_name, study.user_attrs, [])
    stored = study.user_attrs
    if not view.described:
        raise StudyError(f"study {study.study_name!r} in {shown} was not made by autotune; "
                         f"choose another {option('study')} name")
    if len(study.directions) != 2:
        raise StudyError(f"study {study.study_name!r} has {len(study.directions)} objectives; autotune studies have 2")
    new_name = f"{study.study_name}-2"
    how = f"start a new study with {option('study', new_name)} (or another {option('storage')})"
    problems: list[str] = []
    if view.space_hash != attrs.get("space_hash"):
        problems.append(f"the search space differs from the study's ({view.space.get('path')})")
    if view.objectives != (attrs.get("objectives") or view.objectives):
        problems.append(f"the objectives differ: {view.objectives} (stored) vs {attrs.get('objectives')} (this run; "
                        f"{option('objectives')} is fixed when a study is made)")
    diffs = identity.differences(view.fingerprint, attrs["fingerprint"])
    if diffs:
        problems.append("the hardware/software differ: " + "; ".join(diffs))
    for key in ("workload", "device", "global_batch"):
        if key in attrs and stored.get(key) != attrs.get(key):
            problems.append(f"the {key} differs: {stored.get(key)} (stored) vs {attrs.get(key)} (this run)")
    if problems:
        raise StudyError(
            f"study {study.study_name!r} was made for another setup, and results are never mixed: "
            + "; ".join(problems)
            + f". To keep both, {how}."
        )
