"""Reading a study in one pass (autotune/store/reading.py, Store.read's StoredStudy): the same trials as Optuna's own
read, over SQLite, the journal file and PostgreSQL alike, and the same figures in every view."""

from __future__ import annotations

import hashlib
import math
import sqlite3
import warnings
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial
from autotune.testing.studies import make_study

from autotune.reports import view
from autotune.errors import StorageError, StudyError
from autotune.store import Store, StoredStudy, reading
from autotune.store import writing
from autotune.evidence import evidence_of


def odd_trials(study: optuna.Study) -> None:
    """What a factory study lacks: infinite values, intermediate values, every kind of parameter, a running
    and a waiting trial, nested and non-ASCII attributes."""
    dists = {"lr": FloatDistribution(1e-5, 1.0, log=True), "layers": IntDistribution(1, 8, step=1),
             "opt": CategoricalDistribution(["adam", "sgd", None])}
    study.add_trial(create_trial(
        state=TrialState.COMPLETE, values=[math.inf, -math.inf], params={"lr": 0.01, "layers": 3, "opt": None},
        distributions=dists, intermediate_values={0: 1.5, 3: math.inf, 4: -math.inf},
        user_attrs={**writing.marks_of(outcome="ok"), "note": "débit ≥ 2×", "nested": {"a": [1, 2.5, None, True]}},
        system_attrs={"constraints": [0.0, -1.0]}))
    study.enqueue_trial({"lr": 0.1}, user_attrs=writing.marks_of(role="search"))
    with warnings.catch_warnings():  # PostgreSQL's heartbeat "is supposed to be used with Study.optimize"
        warnings.simplefilter("ignore")
        running = study.ask()  # takes the waiting trial
    study.enqueue_trial({"lr": 0.2}, user_attrs=writing.marks_of(role="search"))
    writing.mark(running, outcome=None)


@pytest.mark.slow  # 3 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_the_quick_read_is_optunas_read(store_url):
    store = Store(store_url)
    study = make_study(store.storage, n_trials=30, seed=4, name="s")
    odd_trials(study)
    study_id = store.storage.get_study_id_from_name("s")
    expected = store.storage.get_all_trials(study_id, deepcopy=False)
    got = reading.all_trials(store.storage, study_id)
    assert len(got) == len(expected) == 33
    for a, b in zip(got, expected):
        assert a.__dict__ == b.__dict__, a.number  # state, values, params, distributions, attrs, dates, ids
    assert any(t.state == TrialState.RUNNING for t in got) and any(t.state == TrialState.WAITING for t in got)


def test_the_quick_read_runs_on_the_schema_it_knows_and_optunas_read_on_any_other(tmp_path, monkeypatch):
    store = Store(f"sqlite:///{tmp_path / 'x.db'}")
    make_study(store.storage, n_trials=10, seed=1, name="s")
    calls = []
    monkeypatch.setattr(reading, "_rdb_trials", lambda storage, study_id: calls.append(study_id) or [])
    assert reading.all_trials(store.storage, 1) == [] and calls == [1]
    monkeypatch.setattr(reading, "SCHEMA", reading.SCHEMA + 1)  # an Optuna whose tables this reader does not know
    assert len(reading.all_trials(store.storage, 1)) == 10 and calls == [1]


def test_a_study_view_shows_the_figures_of_the_live_study_and_writes_nothing(tmp_path):
    path = tmp_path / "x.db"
    make_study(f"sqlite:///{path}", n_trials=40, seed=2, name="s")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    store = Store(f"sqlite:///{path}", read_only=True)
    seen = store.read("s")
    live = StoredStudy.of(optuna.load_study(study_name="s", storage=f"sqlite:///{path}"))  # Optuna's own read
    assert [t.__dict__ for t in seen.trials] == [t.__dict__ for t in live.trials]
    assert view.status(seen) == view.status(live)
    assert evidence_of(seen) is evidence_of(seen)  # built once, then kept
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def _without_optunas_storage(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a read-only store built Optuna's RDBStorage")

    monkeypatch.setattr(optuna.storages.RDBStorage, "__init__", refuse)


@pytest.mark.slow  # 4 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_a_read_only_store_reads_a_database_with_no_optuna_storage(store_url, monkeypatch):
    if store_url.startswith("journal:"):
        pytest.skip("a journal file is read through Optuna's journal storage")
    writer = Store(store_url)
    study = make_study(writer.storage, n_trials=30, seed=5, name="s")
    odd_trials(study)
    make_study(writer.storage, n_trials=3, seed=6, name="t", with_failures=False)
    expected = (writer.names(), [(s.name, dict(s._attrs)) for s in writer.summaries()], writer.read("s"))
    _without_optunas_storage(monkeypatch)
    reader = Store(store_url, read_only=True)
    got = (reader.names(), [(s.name, dict(s._attrs)) for s in reader.summaries()], reader.read("s"))
    assert got[:2] == expected[:2] and got[0] == ["s", "t"]
    assert [t.__dict__ for t in got[2].trials] == [t.__dict__ for t in expected[2].trials]
    assert repr(got[2].trials) == repr(expected[2].trials)  # the same types too: 3, not 3.0
    assert dict(got[2]._attrs) == dict(expected[2]._attrs)
    with pytest.raises(StudyError, match="no study 'nosuch'.*studies there: s, t"):
        reader.read("nosuch")


def test_a_trials_attributes_read_in_one_order_after_one_is_rewritten(store_url):
    """PostgreSQL moves a rewritten row to the end of its table, and a read without an order returns rows as they
    lie: the writer's and a reader's read of one trial showed its constraints in two orders (CI, 2026-11-27). Every
    store reads them by key, as SQLite's index gives them."""
    writer = Store(store_url)
    study = make_study(writer.storage, n_trials=2, seed=5, name="s", with_failures=False)
    with warnings.catch_warnings():  # PostgreSQL's heartbeat "is supposed to be used with Study.optimize"
        warnings.simplefilter("ignore")
        trial_id = study.ask()._trial_id  # a running trial: Optuna rewrites no attribute of a finished one
    for key in ("constraints:failed", "constraints:memory", "constraints:failed"):  # the last rewrites the first
        writer.storage.set_trial_system_attr(trial_id, key, 1.0 if key.endswith("failed") else 2.0)
    for reader in (writer, Store(store_url, read_only=True)):
        trial = reader.read("s").trials[-1]
        assert list(trial.constraints.items()) == [("failed", 1.0), ("memory", 2.0)]


def test_the_direct_read_knows_the_schema_optuna_writes_today(tmp_path):
    path = tmp_path / "x.db"
    make_study(f"sqlite:///{path}", n_trials=2, seed=1, name="s")  # tables made by the installed Optuna
    with sqlite3.connect(path) as raw:
        assert reading.schema_of(raw) == (reading.SCHEMA, reading.REVISION)


@pytest.mark.parametrize("revision, advice",
                         [("v3.0.0.d", "optuna storage upgrade"), ("v9.9.9.z", "pip install -U optuna")])
def test_a_database_on_another_schema_is_refused_as_optunas_storage_refuses_it(tmp_path, revision, advice):
    path = tmp_path / "x.db"
    make_study(f"sqlite:///{path}", n_trials=2, seed=1, name="s")
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE alembic_version SET version_num = ?", (revision,))
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(StorageError) as read_only:
        Store(f"sqlite:///{path}", read_only=True).read("s")
    with pytest.raises(StorageError) as writer:
        Store(f"sqlite:///{path}").read("s")
    assert str(read_only.value) == str(writer.value)  # Optuna's own words, in the store's one line
    assert "no longer compatible with the table schema" in str(read_only.value) and advice in str(read_only.value)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_a_read_only_store_reads_the_file_it_opened_after_the_process_changes_folder(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    make_study(f"sqlite:///{tmp_path / 'a' / 'x.db'}", n_trials=3, seed=1, name="s")
    make_study(f"sqlite:///{tmp_path / 'b' / 'x.db'}", n_trials=3, seed=1, name="other")
    monkeypatch.chdir(tmp_path / "a")
    reader = Store("sqlite:///x.db", read_only=True)
    assert reader.names() == ["s"]
    monkeypatch.chdir(tmp_path / "b")  # a notebook's os.chdir: the store opened is the file it named then
    assert reader.names() == ["s"] and len(reader.read("s").trials) == 3


SHAPES = [{"samples_per_s": 9.0, "load": {"other_cores": 1.7, "cores": 2}, "profile": {"ops": [1, 2]}},
          {"samples_per_s": 8.0, "load": None}, None, {}]
ODD_SHAPES = [[1, 2], {"load": 3}, "text"]  # never written by autotune: read whole, as any other attribute


def results_of_every_shape(study: optuna.Study, shapes: list[Any] = SHAPES) -> None:
    """Results a view reads part of: with the machine's load (an object, null), a null result, an empty one."""
    dists = {"lr": FloatDistribution(1e-5, 1.0, log=True)}
    for result in shapes:
        study.add_trial(create_trial(state=TrialState.COMPLETE, values=[1.0, 2.0], params={"lr": 0.01},
                                     distributions=dists, user_attrs=writing.marks_of(outcome="ok", result=result)))


@pytest.mark.slow  # 3 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_status_list_and_trials_leave_the_bulk_of_each_result_unread_and_export_reads_it(store_url, monkeypatch):
    if store_url.startswith("journal:"):
        pytest.skip("a journal file is read through Optuna's journal storage")
    from autotune.reports import trials as trial_table
    from autotune.export.document import export
    from autotune.store.tables import Tables

    writer = Store(store_url)
    results_of_every_shape(make_study(writer.storage, n_trials=20, seed=7, name="s"))
    expected = writer.read("s")
    seen = Store(store_url, read_only=True).read("s")
    connect = Tables.connection

    def refuse(self):
        raise AssertionError("a view read a result's bulk")

    monkeypatch.setattr(Tables, "connection", refuse)
    assert view.status(seen) == view.status(expected)
    assert view.summary(seen) == view.summary(expected) and trial_table.rows(seen) == trial_table.rows(expected)
    assert [t.result.get("load") for t in seen.trials] == [t.result.get("load") for t in expected.trials]
    monkeypatch.setattr(Tables, "connection", connect)
    assert {**export(seen), "exported_at": None} == {**export(expected), "exported_at": None}  # reads it now
    assert [t.__dict__ for t in seen.trials] == [t.__dict__ for t in expected.trials]
    assert repr(seen.trials) == repr(expected.trials)


def test_a_result_of_a_shape_autotune_never_writes_is_read_whole(tmp_path):
    url = f"sqlite:///{tmp_path / 'x.db'}"
    results_of_every_shape(make_study(url, n_trials=3, seed=7, name="s"), SHAPES + ODD_SHAPES)
    seen, expected = Store(url, read_only=True).read("s"), Store(url).read("s")
    assert repr(seen.trials) == repr(expected.trials)
    assert [t.result for t in seen.trials[-3:]] == ODD_SHAPES


def test_a_read_only_read_runs_with_the_collector_paused_and_freezes_what_it_read(tmp_path, collector_seen):
    """A read command's typed trials are built with Python's cyclic collector paused and left frozen (as a resumed
    study's bulk read: autotune/store/cache.py), so neither the read nor the evidence after it walks them again."""
    import gc

    url = f"sqlite:///{tmp_path / 'g.db'}"
    make_study(url, n_trials=10, seed=3, name="g")
    enabled = collector_seen(reading, "stored_trials_of")
    assert len(Store(url, read_only=True).read("g").trials) == 10
    assert enabled == [False] and gc.isenabled() and gc.get_freeze_count() > 0
