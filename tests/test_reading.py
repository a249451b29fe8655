"""Reading a study in one pass (autotune/store/reading.py, Store.read's StoredStudy): the same trials as Optuna's own
read, over SQLite, the journal file and PostgreSQL alike, and the same figures in every view."""

from __future__ import annotations

import hashlib
import math
import warnings

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial
from autotune.made_up import make_study

from autotune import view
from autotune.store import Store, StoredStudy, reading
from autotune.store import records
from autotune.evidence import evidence_of


def odd_trials(study: optuna.Study) -> None:
    """What a factory study lacks: infinite values, intermediate values, every kind of parameter, a running
    and a waiting trial, nested and non-ASCII attributes."""
    dists = {"lr": FloatDistribution(1e-5, 1.0, log=True), "layers": IntDistribution(1, 8, step=1),
             "opt": CategoricalDistribution(["adam", "sgd", None])}
    study.add_trial(create_trial(
        state=TrialState.COMPLETE, values=[math.inf, -math.inf], params={"lr": 0.01, "layers": 3, "opt": None},
        distributions=dists, intermediate_values={0: 1.5, 3: math.inf, 4: -math.inf},
        user_attrs={**records.marks_of(outcome="ok"), "note": "débit ≥ 2×", "nested": {"a": [1, 2.5, None, True]}},
        system_attrs={"constraints": [0.0, -1.0]}))
    study.enqueue_trial({"lr": 0.1}, user_attrs=records.marks_of(role="search"))
    with warnings.catch_warnings():  # PostgreSQL's heartbeat "is supposed to be used with Study.optimize"
        warnings.simplefilter("ignore")
        running = study.ask()  # takes the waiting trial
    study.enqueue_trial({"lr": 0.2}, user_attrs=records.marks_of(role="search"))
    records.mark(running, outcome=None)


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
