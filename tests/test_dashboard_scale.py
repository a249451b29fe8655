"""The dashboard of a large study (autotune.reports.dashboard past its thresholds): the cloud and the failures in WebGL
with their numbers as typed arrays, the histories aggregated, the failures table grouped by error, and a page whose size
grows far slower than the study. The thresholds are lowered (module constants) so that studies of a few hundred
trials stand for ones of 100,000 and the tests take seconds; tests/test_dashboard_browser.py draws a real 10,000."""

from __future__ import annotations

import base64
import json
import re
from functools import lru_cache

import numpy as np
import optuna
import pytest
from autotune.testing.studies import jittered_copies, make_study

from autotune.reports import dashboard
from autotune.evidence import evidence_of
from autotune.reports.dashboard import charts, failures, knob_effects, page, timeline
from autotune.store import StoredStudy


@lru_cache(maxsize=None)
def grown(n: int) -> StoredStudy:
    """A made-up study of ``n`` trials: 60 made, the rest jittered copies of their measurements (~8% failures)."""
    study = make_study(optuna.storages.InMemoryStorage(), n_trials=60, seed=5, name="big")
    stored = StoredStudy.of(study)
    return stored.with_trials([*stored.trials, *jittered_copies(study, n - len(stored.trials), seed=2)])


@pytest.fixture
def small_thresholds(monkeypatch):
    """Thresholds a hundredth or less of the real ones: 10 points make a cloud, 20 failures a grouped table."""
    monkeypatch.setattr(charts, "DENSE", 10)
    monkeypatch.setattr(failures, "MAX_FAILURE_ROWS", 20)
    monkeypatch.setattr(knob_effects, "PARALLEL_LINES", 100)


def typed(values) -> list:
    """A figure's array as numbers, whether plain or plotly's typed-array form ({"dtype", "bdata"})."""
    if isinstance(values, dict):
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=np.dtype(values["dtype"])).tolist()
    return list(values)


def figure_json(fig) -> dict:
    return json.loads(fig.to_json())


def test_a_large_cloud_and_its_failures_are_drawn_in_webgl_every_one_exactly(small_thresholds):
    study = grown(600)
    info = dashboard.pareto_info(study)
    fig = figure_json(dashboard.pareto_figure(info))
    traces = fig["data"]
    cloud = [t for t in traces if t["name"].startswith("trials (")]
    assert [t["type"] for t in cloud] == ["scattergl"]
    drawn = [p for p in info["points"] if not p["on_front"] and p["feasible"]]
    assert typed(cloud[0]["customdata"]) == [p["number"] for p in drawn]
    assert typed(cloud[0]["y"]) == [p["samples_per_s"] for p in drawn]  # exact: the doubles themselves
    (front,) = [t for t in traces if t["name"].startswith("Pareto front")]
    assert (front["type"] == "scatter"
            and len(front["hovertext"]) == len(info["front"]) == len(evidence_of(study).front()))
    failed = [t for t in traces if t.get("legendgroup", "").startswith("failed:")]
    assert failed and all(t["type"] == "scattergl" for t in failed)
    by_outcome: dict[str, list[int]] = {}
    for f in info["failed"]:
        by_outcome.setdefault(f["outcome"], []).append(f["number"])
    for outcome, numbers in by_outcome.items():
        mine = [t for t in failed if t["legendgroup"] == f"failed:{outcome}"]
        if len(numbers) <= charts.DENSE:
            continue
        assert sorted(n for t in mine for n in typed(t["customdata"])) == sorted(numbers)  # every failure, once
        assert [t["name"] for t in mine if t["showlegend"]] == [f"{outcome} ({len(numbers)})"]
    assert any(a["text"].startswith("<b>recommended") for a in fig["layout"]["annotations"])


def test_a_small_study_keeps_its_svg_points_and_full_hovers():
    study = grown(150)  # under the real thresholds
    fig = figure_json(dashboard.pareto_figure(dashboard.pareto_info(study)))
    assert {t["type"] for t in fig["data"]} == {"scatter"}
    cloud = next(t for t in fig["data"] if t["name"].startswith("trials ("))
    assert all("samples/s" in h for h in cloud["hovertext"])


def test_a_large_history_is_drawn_by_its_changes_and_its_time_in_bins(small_thresholds):
    study = grown(600)
    info = dashboard.history_info(study)
    history = figure_json(dashboard.history_figure(info))
    best = history["data"][0]
    assert len(best["x"]) < len(info["numbers"]) / 10  # the trials where the best changed, not one mark a trial
    # the same step line: at every trial, the last kept step at or before it holds that trial's best so far
    steps = dict(zip(best["x"], best["y"]))
    for number, value in zip(info["numbers"], info["best_so_far"]):
        assert steps[max(x for x in steps if x <= number)] == value
    durations = figure_json(dashboard.duration_figure(info))
    bars = [t for t in durations["data"] if t["type"] == "bar"]
    assert max(len(t["x"]) for t in bars) <= timeline.BINS < len(info["durations"])
    trial_time = sum(d["duration_s"] for d in info["durations"])
    drawn = sum(y for t in bars if not t["name"].startswith("re-measured") for y in t["y"])
    assert drawn == pytest.approx(trial_time)  # every trial's time, in its bin


def test_a_large_failures_table_has_one_row_per_error(small_thresholds):
    study = grown(600)
    info = dashboard.failures_info(study)
    assert len(info["rows"]) > failures.MAX_FAILURE_ROWS and info["groups"]
    assert sum(g["count"] for g in info["groups"]) == len(info["rows"])
    assert {(g["outcome"], g["error_message"]) for g in info["groups"]} == {
        (r["outcome"], r["error_message"]) for r in info["rows"]
    }
    html = page.render_html(study)
    table = re.search(r'<table class="sortable" id="failures-table">.*?</table>', html, re.DOTALL).group(0)
    assert table.count("<tr>") == 1 + len(info["groups"])  # the head, then one row a distinct error
    for outcome, n in info["by_outcome"].items():
        assert sum(g["count"] for g in info["groups"] if g["outcome"] == outcome) == n


@pytest.mark.slow  # 4 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_the_page_grows_far_slower_than_the_study(small_thresholds):
    """Past the thresholds a trial adds a few dozen bytes (its place in the WebGL cloud), not the ~1 KB of a point
    with its own hover, tick and bar; the page's figures and tables stay a small part of a 100,000-trial page."""
    embedded = len(page._plotly_js())
    sizes = {n: len(page.render_html(grown(n))) - embedded for n in (300, 900)}
    per_trial = (sizes[900] - sizes[300]) / 600
    assert per_trial < 100, per_trial  # 74 here; each point with its own hover and mark: over 300
    with pytest.MonkeyPatch.context() as unlimited:  # the same study drawn point by point
        unlimited.setattr(charts, "DENSE", 10**9)
        unlimited.setattr(failures, "MAX_FAILURE_ROWS", 10**9)
        unlimited.setattr(knob_effects, "PARALLEL_LINES", 10**9)
        full = len(page.render_html(grown(900))) - embedded
    assert sizes[900] < full / 3, (sizes[900], full)
