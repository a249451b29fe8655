"""The dashboard: one self-contained HTML page that shows what a study found.

The page reads a study stored as docs/storage.md describes and opens from disk
with no network. As in optuna's ``visualization``, the package keeps its parts
apart:

- :mod:`~autotune.reports.dashboard.source`: the stored study (:class:`autotune.store.StoredStudy`,
  read once by the command) as a :class:`Snapshot` of plain rows whose figures are the
  evidence's, and the escaping helpers;
- the *info* functions, one module per part of the page, that reduce the study to
  plain, JSON-able data, which is what the tests check: :mod:`~autotune.reports.dashboard.header`,
  :mod:`~autotune.reports.dashboard.front` (the Pareto front, its table and profile),
  :mod:`~autotune.reports.dashboard.bought` (what each knob bought), :mod:`~autotune.reports.dashboard.knob_effects`
  (what each knob does), :mod:`~autotune.reports.dashboard.history` (the search as it went, and the
  time each trial took) and :mod:`~autotune.reports.dashboard.failures`, with their axis ticks in
  :mod:`~autotune.reports.dashboard.ticks`;
- :mod:`~autotune.reports.dashboard.charts` and :mod:`~autotune.reports.dashboard.timeline` (the study as it went):
  plotly figures drawn from that data;
- :mod:`~autotune.reports.dashboard.page`: the page (:func:`render_html`), written atomically
  (:func:`write_dashboard`) or on a timer (:func:`watch`).

Every string that comes from a user or an error (study name, knob values, spec
strings, exception messages) is HTML-escaped where it lands in HTML or in plotly
text (which plotly renders as a small subset of HTML), and the JSON embedded in
the page escapes ``<``, ``>`` and ``&`` so nothing in it can close its script tag.
"""

from autotune.reports.dashboard.bought import ablation_info
from autotune.reports.dashboard.failures import failures_info
from autotune.reports.dashboard.front import MAX_OPS, front_table_info, pareto_info, profile_info
from autotune.reports.dashboard.header import header_info, header_texts
from autotune.reports.dashboard.history import history_info, hypervolume_2d, remeasurements
from autotune.reports.dashboard.knob_effects import (
    MIN_TRIALS_FOR_IMPORTANCE,
    importance_info,
    knob_effects_info,
    parallel_info,
)
from autotune.reports.dashboard.ticks import nice_ticks, trial_ticks
from autotune.reports.dashboard.timeline import duration_figure, history_figure
from autotune.reports.dashboard.charts import (
    OUTCOME_COLORS,
    ablation_figure,
    importance_figure,
    knob_figure,
    parallel_figure,
    pareto_figure,
    profile_figure,
)
from autotune.reports.dashboard.page import (
    DASHBOARDS_DIR,
    Drawn,
    default_path,
    draw,
    render_html,
    watch,
    write_dashboard,
)
from autotune.reports.dashboard.source import Snapshot, config_text, format_value, script_json, searched_knobs, snapshot

__all__ = [
    "DASHBOARDS_DIR",
    "Drawn",
    "MAX_OPS",
    "MIN_TRIALS_FOR_IMPORTANCE",
    "OUTCOME_COLORS",
    "Snapshot",
    "ablation_figure",
    "ablation_info",
    "config_text",
    "default_path",
    "draw",
    "duration_figure",
    "failures_info",
    "format_value",
    "front_table_info",
    "header_info",
    "header_texts",
    "history_figure",
    "history_info",
    "hypervolume_2d",
    "importance_figure",
    "importance_info",
    "knob_effects_info",
    "knob_figure",
    "nice_ticks",
    "parallel_figure",
    "parallel_info",
    "pareto_figure",
    "pareto_info",
    "profile_figure",
    "profile_info",
    "remeasurements",
    "render_html",
    "script_json",
    "searched_knobs",
    "snapshot",
    "trial_ticks",
    "watch",
    "write_dashboard",
]
