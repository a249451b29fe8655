"""The minimal configuration: the shortest start of the path that keeps the winner's gain, measured as a trial of its
own.

When what each knob bought (:mod:`autotune.tuning.phases.bought`) shows that some of the winner's
knobs bought nothing beyond the noise, the recommendation is the start of the path without
them. When the search never measured that configuration, it is measured once here, through
the search's own trial (claimed, measured, recorded and told to Optuna, role ``minimal``),
outside the trial budget: its memory is then known and it has a trial number every view can
show as the recommendation.
"""

from __future__ import annotations

from autotune.store.records import Role
from autotune.tuning.phases.outcomes import TrialRecord
from autotune.tuning.phases.phase import Phase
from autotune.tuning.phases.search import Search
from autotune.tuning.phases.session import fits, process_s
from autotune.store import LiveStudy
from autotune.evidence import evidence_of


def run(live: LiveStudy, search: Search, deadline: float | None = None) -> TrialRecord | None:
    """Measure the ablation's recommendation when it is settled and no measured trial is it; returns its trial's
    record (None: nothing to measure, the deadline passed, or another process measures it)."""
    view = live.view()
    ab = evidence_of(view).ablation()
    if ab is None or not ab.settled or ab.minimal is not None or not fits(deadline, process_s(view, [ab.winner])):
        return None
    point = next((p for p in view.ablation_plan(ab.ablation_id).get("path") or [] if p.get("key") == ab.minimal_key),
                 None)
    if point is None:
        return None
    params = {name: point["config"][name] for name in search.seeds.space.search if name in point["config"]}
    live.enqueue(params, role=Role.MINIMAL, ablation=ab.ablation_id)
    return search.trial()


#: The least change, as the tuning loop runs it: after what each knob bought; its trial is one of the run's.
PHASE = Phase("minimal", "race", lambda ctx: run(ctx.live, ctx.search, ctx.deadline),
              wanted=lambda ctx: ctx.bench.ablate is not None,
              records=lambda rec: [rec] if rec is not None else [])
