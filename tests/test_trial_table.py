"""`autotune trials`: every trial of a study, with the figures every other view shows, as a table, JSON or CSV."""

from __future__ import annotations

import csv
import io
import json

from click.testing import CliRunner
from autotune.testing.studies import make_study

from autotune.reports import trials as trial_table
from autotune.reports import view
from autotune.cli import main
from autotune.store import Store


def _study(tmp_path, n_trials=12):
    url = f"sqlite:///{tmp_path}/demo.db"
    make_study(url, n_trials=n_trials, name="demo")
    return url, Store.open(url, read_only=True).read("demo")


def test_every_trial_is_a_row_with_the_figure_status_shows(tmp_path):
    url, study = _study(tmp_path)
    rows = trial_table.rows(study)
    assert [r.number for r in rows] == [t.number for t in study.trials]
    status = view.status(study)
    for front in status["front"]:  # the figure of each front configuration is the one status shows
        row = rows[front["trial"]]
        assert row.samples_per_s == front["samples_per_s"] and row.processes == front["processes"]
    base = rows[0]
    assert base.role == "baseline" and base.changes == {} and base.measured_samples_per_s == study.trials[0].values[0]


def test_a_cache_answer_names_the_trial_it_repeats_and_shows_that_trials_figure(tmp_path):
    _, study = _study(tmp_path)
    rows = trial_table.rows(study)
    repeats = [r for r in rows if r.repeat_of is not None]
    assert repeats, "the factory writes a duplicate in a study of at least 6 trials"
    for r in repeats:
        assert r.measured_samples_per_s is None
        assert r.samples_per_s == rows[r.repeat_of].samples_per_s


def test_failed_trials_carry_their_outcome_and_message_and_no_figure(tmp_path):
    _, study = _study(tmp_path)
    failed = [r for r in trial_table.rows(study) if r.outcome not in (None, "ok")]
    assert {"oom", "nan", "error", "interrupted"} <= {r.outcome for r in failed}
    for r in failed:
        assert r.samples_per_s is None and r.error


def test_the_command_prints_a_table_json_and_csv_with_the_same_figures(tmp_path):
    url, study = _study(tmp_path)
    runner = CliRunner()
    table = runner.invoke(main, ["trials", "demo", "--storage", url])
    assert table.exit_code == 0, table.output
    assert f"{len(study.trials)} trials" in table.output and "#0" in table.output and "baseline" in table.output
    doc = json.loads(runner.invoke(main, ["trials", "demo", "--storage", url, "--json"]).output)
    assert [d["number"] for d in doc] == [t.number for t in study.trials]
    assert doc == [r.to_dict() for r in trial_table.rows(study)]
    text = runner.invoke(main, ["trials", "demo", "--storage", url, "--csv"]).output
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert len(parsed) == len(doc) and float(parsed[0]["samples_per_s"]) == doc[0]["samples_per_s"]


def test_json_and_csv_together_is_one_clear_line_and_nothing_changes(tmp_path):
    url, _ = _study(tmp_path)
    before = (tmp_path / "demo.db").read_bytes()
    res = CliRunner().invoke(main, ["trials", "demo", "--storage", url, "--json", "--csv"])
    assert res.exit_code == 2 and "choose one of --json and --csv" in res.output and "Traceback" not in res.output
    assert (tmp_path / "demo.db").read_bytes() == before


def test_an_unknown_study_is_one_line_and_creates_nothing(tmp_path):
    res = CliRunner().invoke(main, ["trials", "nope", "--storage", f"sqlite:///{tmp_path}/none.db"])
    assert res.exit_code != 0 and "does not exist" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "none.db").exists()
