"""Studies in a real PostgreSQL server: create, write, read back, and survive a server restart.

The server is the one .ci/postgres.sh starts (``source .ci/postgres.sh``; .ci/run does it);
without one these tests skip, saying why, and in CI (``CI=true``) they fail with the reason
(autotune.testing.suite.need). Each test gets a database of its own (the ``postgres_url`` fixture in conftest.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import sqlalchemy.exc
from autotune.testing.suite import POSTGRES_CTL_VAR, POSTGRES_URL_VAR

from autotune import store as storage
from autotune.errors import StorageUnreachable, StudyError
from autotune import knobs
from autotune.store import Store
from autotune.testing import studies as made_up

ATTRS = made_up.description(made_up.space_of_one(), knobs.Context())


def password(url: str) -> str:
    from sqlalchemy.engine import make_url

    secret = make_url(url).password
    assert secret, "the test server's URL has a password"
    return secret


def test_study_is_created_written_and_read_back(postgres_url):
    study, created = Store(postgres_url).create_or_check("pg", ATTRS)
    assert created and study.user_attrs["fingerprint"] == ATTRS["fingerprint"]
    trial = study.ask()
    trial.suggest_categorical("precision", ["fp32", "bf16"])
    trial.set_user_attr("outcome", "ok")
    study.tell(trial, [123.5, 4096.0])

    # what another process (or machine) sees when it opens the same study
    again, created = Store(postgres_url).create_or_check("pg", ATTRS)
    assert not created
    (stored,) = again.get_trials()
    assert stored.values == [123.5, 4096.0]
    assert stored.params["precision"] in ("fp32", "bf16") and stored.user_attrs["outcome"] == "ok"
    assert again.metric_names == storage.METRICS
    assert Store(postgres_url, read_only=True).names() == ["pg"]

    # a run for another setup is refused, and no message shows the password
    with pytest.raises(StudyError, match="made for another setup") as refused:
        Store(postgres_url).create_or_check("pg", {**ATTRS, "space_hash": "other"})
    with pytest.raises(StudyError, match="no study 'nosuch'") as missing:
        Store(postgres_url, read_only=True).load("nosuch")
    for info in (refused, missing):
        assert password(postgres_url) not in str(info.value)
    assert "***" in str(missing.value)


@pytest.mark.slow  # 3 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_pool_pre_ping_survives_a_server_restart(postgres_url, postgres_server):
    store = Store(postgres_url)  # pool_pre_ping on
    store.create("a")
    assert store.names() == ["a"]  # leaves a connection in the pool
    # the control: the same storage without pool_pre_ping
    plain = optuna.storages.RDBStorage(storage.server.with_installed_driver(postgres_url),
                                       engine_kwargs={"pool_pre_ping": False})
    assert [s.study_name for s in plain.get_all_studies()] == ["a"]

    with postgres_server.down(seconds=2):
        with pytest.raises(StorageUnreachable, match="unreachable") as outage:
            Store(postgres_url).names()
        message = str(outage.value)
        assert password(postgres_url) not in message and "***" in message and "\n" not in message

    # the pooled connections died with the server; the first query after the restart must work
    assert store.names() == ["a"]
    study = store.load("a")
    study.tell(study.ask(), [1.0, 2.0])
    assert len(study.get_trials()) == 1
    # without pool_pre_ping the first query fails on its dead connection (what the setting is for)
    with pytest.raises(optuna.exceptions.StorageInternalError) as dead:
        plain.get_all_studies()
    assert isinstance(dead.value.__cause__, sqlalchemy.exc.OperationalError)


def test_a_failing_tests_printed_arguments_do_not_show_the_password(postgres_url):
    from _pytest._io.saferepr import saferepr

    secret = password(postgres_url)
    assert secret not in repr(postgres_url) and secret not in saferepr(postgres_url)
    assert "***" in repr(postgres_url)
    assert secret in str(postgres_url)  # the URL itself still works as given


def _pytest_without_a_server(ci: str | None) -> subprocess.CompletedProcess[str]:
    """This module's first test in a pytest of its own, with no server named and CI as given."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", POSTGRES_URL_VAR, POSTGRES_CTL_VAR)}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rsfE", "-p", "no:cacheprovider",
         f"{__file__}::test_study_is_created_written_and_read_back"],
        capture_output=True, text=True, env=env, cwd=Path(__file__).parent.parent, timeout=300)


@pytest.mark.slow  # 15 s in a full run on a 2-core CPU
def test_without_a_server_the_tests_fail_in_ci_and_skip_elsewhere_saying_why():
    reason = f"no PostgreSQL server for the tests: {POSTGRES_URL_VAR} is unset"
    ci = _pytest_without_a_server("true")
    assert ci.returncode == 1, ci.stdout + ci.stderr
    assert reason in ci.stdout and "1 error" in ci.stdout and "skipped" not in ci.stdout, ci.stdout
    elsewhere = _pytest_without_a_server(None)
    assert elsewhere.returncode == 0, elsewhere.stdout + elsewhere.stderr
    assert reason in elsewhere.stdout and "1 skipped" in elsewhere.stdout, elsewhere.stdout
