"""Kept views (autotune/store/kept.py, autotune.reports.view's status_of / export_of / listing / keep): a study's views
kept by the run that wrote it last are shown while the study is as it was, with the figures computed from its trials to
the digit, over SQLite, the journal file and PostgreSQL alike; a study that changed in any way is computed afresh."""

from __future__ import annotations

import json
import warnings

import pytest
from optuna.trial import TrialState

from autotune.reports import view
from autotune.export import document as exporting
from autotune.testing.studies import add_failed_trial, add_race, add_sessions, make_study
from autotune.request import PICKS
from autotune.store import Store, kept, records
from autotune.store.live import LiveStudy
from autotune.store.tables import Tables


def same(a, b) -> bool:
    return json.dumps(a, default=str) == json.dumps(b, default=str)


def computed_status(url: str, name: str = "s") -> dict:
    return view.status(Store(url, read_only=True).read(name))


def built(url: str, n: int = 40):
    """A study as a run leaves it: trials, failures, a race and sessions (autotune.testing.studies)."""
    store = Store(url)
    study = make_study(store.storage, n_trials=n, seed=3, name="s")
    add_failed_trial(study, "oom", "out of memory")
    add_race(study, {t.number: t.values[0] for t in study.best_trials[:3]}, rounds=2)
    add_sessions(study, 2)
    return store, study


def test_kept_views_show_the_figures_computed_from_the_trials(store_url):
    store, _ = built(store_url)
    journal = store_url.startswith("journal:")
    assert view.keep(store, "s") is not journal  # a journal is replayed whole by every read: nothing kept
    reader = Store(store_url, read_only=True)
    assert (reader.kept("s")[1] is None) is journal
    shown = view.status_of(reader, "s")
    assert same(shown, computed_status(store_url)) and shown["front"] and shown["failures"]["oom"]["example"]
    study = reader.read("s")
    for pick in PICKS:
        a, b = view.export_of(reader, "s", pick), exporting.export(study, pick, None, reader.shown)
        assert a.pop("exported_at") and b.pop("exported_at")
        assert same(a, b), pick
    assert same(view.listing(reader), [view.summary(study)])


@pytest.mark.slow  # 5 s: the quick loop (-m 'not slow') has a test of this part that takes less
@pytest.mark.parametrize("store_url", ["sqlite", "postgresql"], indirect=True)  # (a journal keeps none)
def test_the_status_of_a_kept_study_reads_no_trial(store_url, monkeypatch):
    store, _ = built(store_url)
    assert view.keep(store, "s")
    expected = computed_status(store_url)
    monkeypatch.setattr(Tables, "trials", lambda *a: pytest.fail("read the trials of a kept study"))
    reader = Store(store_url, read_only=True)
    assert same(view.status_of(reader, "s"), expected)
    assert view.listing(reader)[0]["speedup"] == expected["speedup"]
    assert view.export_of(reader, "s", "recommended")["study"]["storage"] == reader.shown


def _new_trial(store, study):
    add_failed_trial(study, "error", "boom")


def _new_record(store, study):
    add_sessions(study, 1)


def _same_length_record(store, study):
    """A record written again with a value of the same length (a session's time changing digits)."""
    key = next(k for k in study.user_attrs if k.startswith(records.SESSION))
    value = dict(study.user_attrs[key])
    value["elapsed_s"] = float(str(value["elapsed_s"]).replace("0", "1").replace("5", "6")) if value.get("elapsed_s") \
        else 1.0
    study.set_user_attr(key, value)


def _running_trial(store, study):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study.ask()


@pytest.mark.slow  # 3 s: the quick loop (-m 'not slow') has a test of this part that takes less
@pytest.mark.parametrize("change", [_new_trial, _new_record, _same_length_record, _running_trial])
def test_a_study_that_changed_since_its_views_were_kept_is_computed_afresh(tmp_path, change):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    store, study = built(url)
    assert view.keep(store, "s")
    change(store, study)
    reader = Store(url, read_only=True)
    assert reader.kept("s")[1] is None
    assert same(view.status_of(reader, "s"), computed_status(url))


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_a_study_with_a_running_trial_keeps_nothing(tmp_path):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    store, study = built(url)
    _running_trial(store, study)
    assert store.key("s") is None and not view.keep(store, "s")
    assert kept.KEPT not in study.user_attrs


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_views_kept_by_another_version_are_not_shown(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    store, _ = built(url)
    assert view.keep(store, "s")
    assert Store(url, read_only=True).kept("s")[1] is not None
    monkeypatch.setattr(kept, "__version__", "0.0.0-other")
    assert Store(url, read_only=True).kept("s")[1] is None


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_the_workers_seen_lately_are_counted_when_shown_not_when_kept(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    store, study = built(url)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trial = study.ask()
    LiveStudy(study).sign(trial)
    study.tell(trial, state=TrialState.FAIL)
    assert view.keep(store, "s")
    reader = Store(url, read_only=True)
    assert view.status_of(reader, "s")["workers_recently"] == 1
    monkeypatch.setattr(view, "RECENT_S", -1.0)  # the same kept views, read long after
    assert view.status_of(reader, "s")["workers_recently"] == 0
    assert view.listing(reader)[0]["workers_recently"] == 0


@pytest.mark.slow  # 3 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_a_sqlite_without_json_functions_reads_the_whole_kept_record_and_shows_the_same(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    store, _ = built(url)
    assert view.keep(store, "s")
    expected = computed_status(url)
    monkeypatch.setattr(Tables, "_json", lambda self: False)
    monkeypatch.setattr(Tables, "trials", lambda *a: pytest.fail("read the trials of a kept study"))
    reader = Store(url, read_only=True)
    assert same(view.status_of(reader, "s"), expected)
    assert view.export_of(reader, "s", "smallest")["pick"] == "smallest"


def _page(study_or_drawn) -> str:
    import re

    from autotune.reports import dashboard

    return re.sub(r"Generated [0-9: -]+ by", "Generated by", dashboard.render_html(study_or_drawn))


@pytest.mark.slow  # 7 s in a full run on a 2-core CPU
@pytest.mark.parametrize("store_url", ["sqlite", "postgresql"], indirect=True)  # (a journal keeps none)
def test_the_dashboard_of_a_kept_study_is_the_page_its_trials_draw_and_reads_no_trial(store_url, monkeypatch):
    monkeypatch.setattr(view, "KEEP_PAGE_FROM", 10)  # a large study's page is kept (the made-up one has 41 trials)
    store, _ = built(store_url)
    assert view.keep(store, "s")
    expected = _page(Store(store_url, read_only=True).read("s"))
    monkeypatch.setattr(Tables, "trials", lambda *a: pytest.fail("read the trials of a kept study"))
    drawn = view.page_of(Store(store_url, read_only=True), "s")
    assert _page(drawn) == expected and drawn.name == "s"


@pytest.mark.slow  # 6 s in a full run on a 2-core CPU
def test_a_small_studys_page_is_not_kept_and_a_changed_studys_is_drawn_from_its_trials(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    store, study = built(url)
    assert view.keep(store, "s") and Store(url, read_only=True).kept_page("s")[1] is None  # 41 trials < 1,000
    monkeypatch.setattr(view, "KEEP_PAGE_FROM", 10)
    assert view.keep(store, "s") and Store(url, read_only=True).kept_page("s")[1] is not None
    _new_trial(store, study)
    reader = Store(url, read_only=True)
    assert reader.kept_page("s")[1] is None
    assert _page(view.page_of(reader, "s")) == _page(reader.read("s"))
