"""Shared fixtures: quick measurement settings, a folder for user modules written by tests, a PostgreSQL
database per test (with a way to stop and start its server) on the server .ci/postgres.sh starts, and
:func:`need`, the one way a test says it cannot run here (a skip on a developer's machine, a failure in CI)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

from autotune.testing.suite import CI_VAR, POSTGRES_CTL_VAR, POSTGRES_URL_VAR, START_ONE, in_ci, need, wait_until  # noqa: F401
from autotune.trial.protocol import Settings

TESTS = Path(__file__).parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


@pytest.fixture(autouse=True)
def environment_restored():
    """Every test gets the environment it started with back: a test that applies a configuration in this process
    (a plan, a paired measurement, a callback) sets the knobs' variables here, and no later test may run under them."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def quick() -> Settings:
    return Settings.quick()


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """Write a module into a fresh folder on sys.path; returns its import name."""
    monkeypatch.syspath_prepend(str(tmp_path))
    counter = {"n": 0}

    def write(source: str, name: str | None = None) -> str:
        counter["n"] += 1
        name = name or f"user_mod_{counter['n']}_{abs(hash(str(tmp_path))) % 10**8}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        return name

    return write


@pytest.fixture
def hog():
    """A real CPU-bound process outside this test's process tree, for as long as the test runs.

    Started through a short-lived middle process, so that it is re-parented away from pytest:
    the load meter counts the measuring process's own children as its own work, and a hog
    that were pytest's child would be subtracted as such."""
    import psutil

    middle = subprocess.run(
        [sys.executable, "-c",
         "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'while True: pass'], "
         "start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, "
         "stderr=subprocess.DEVNULL); print(p.pid)"],
        capture_output=True, text=True, check=True, timeout=60)
    proc = psutil.Process(int(middle.stdout.strip()))
    assert proc.pid not in {c.pid for c in psutil.Process().children(recursive=True)}
    yield proc
    proc.kill()
    proc.wait(10)


# ---------------------------------------------------------------- PostgreSQL (.ci/postgres.sh)



class SecretURL(str):
    """A storage URL whose repr masks its password: pytest prints a failing test's arguments
    (``postgres_url = '...'``) with repr, and CI logs must not carry the password."""

    def __repr__(self) -> str:
        from autotune.store import redact

        return repr(redact(str(self)))


def pytest_assertrepr_compare(op, left, right):
    """A failed comparison with a SecretURL explains itself with the masked reprs (pytest's own diff shows the text)."""
    if isinstance(left, SecretURL) or isinstance(right, SecretURL):
        return [f"{left!r} {op} {right!r}"]
    return None


def _postgres_connect():
    """An autocommit psycopg2 connection to the test server's own database; skips the test (fails it
    in CI: :func:`need`), with the reason, when there is no server, no psycopg2, or no answer."""
    url = os.environ.get(POSTGRES_URL_VAR)
    if not url:
        need(f"no PostgreSQL server for the tests: {POSTGRES_URL_VAR} is unset ({START_ONE})")
    try:
        import psycopg2
    except ImportError:
        need("psycopg2 is not installed (pip install psycopg2-binary)")
    from autotune.store import redact, redact_message

    try:
        conn = psycopg2.connect(url, connect_timeout=5)
    except psycopg2.OperationalError as exc:
        reason = (str(exc).strip().splitlines() or ["no reason given"])[0]
        need(f"the PostgreSQL server at {redact(url)} is unreachable: {redact_message(reason, url)} ({START_ONE})")
    conn.autocommit = True
    return conn


@pytest.fixture
def postgres_url():
    """The URL of a fresh, empty PostgreSQL database of this test's own, dropped afterwards.

    The database is made on the server named by AUTOTUNE_TEST_POSTGRES_URL (``source
    .ci/postgres.sh`` starts one and sets it; .ci/run does). The test skips (in CI: fails), saying
    why, when that variable is unset, psycopg2 is missing, or the server does not answer. The URL holds
    the server's password: its repr is masked (what pytest prints); pass it through
    ``autotune.store.redact`` before showing it in any other way.
    """
    from sqlalchemy.engine import make_url

    name = f"autotune_test_{uuid.uuid4().hex[:12]}"
    conn = _postgres_connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f'CREATE DATABASE "{name}"')
    finally:
        conn.close()
    yield SecretURL(make_url(os.environ[POSTGRES_URL_VAR]).set(database=name).render_as_string(hide_password=False))
    import psycopg2

    try:  # a new connection: the test may have restarted the server (or left it stopped: then the database stays)
        conn = psycopg2.connect(os.environ[POSTGRES_URL_VAR], connect_timeout=5)
    except psycopg2.OperationalError:
        return
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')  # FORCE: the pools the test left open
    finally:
        conn.close()


class PostgresServer:
    """Stops and starts the test server, as the user that runs it.

    ``ctl`` is AUTOTUNE_TEST_POSTGRES_CTL split into words: .ci/postgres.sh writes there this
    server's pg_ctl command (with ``runuser -u postgres --`` when started by root, ``-D DATA -l
    LOG -w``), to which ``stop -m fast`` or ``start`` is appended. The server comes back on the
    same port with the same databases and passwords.
    """

    def __init__(self, ctl: list[str]) -> None:
        self.ctl = ctl
        self.stopped = False

    def _pg_ctl(self, *args: str) -> None:
        done = subprocess.run([*self.ctl, *args], cwd="/", capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl {' '.join(args)} failed: {(done.stderr or done.stdout).strip()}")

    def stop(self) -> None:
        """Stop the server now (fast shutdown: open connections are cut, as in a real outage)."""
        self._pg_ctl("stop", "-m", "fast")
        self.stopped = True

    def start(self) -> None:
        """Start it again and wait until it accepts connections."""
        self._pg_ctl("start")
        self.stopped = False

    @contextmanager
    def down(self, seconds: float = 2.0):
        """``with server.down(3): ...``: stopped inside the block, started again at least ``seconds``
        after it stopped, whatever the block does."""
        self.stop()
        since = time.monotonic()
        try:
            yield self
        finally:
            time.sleep(max(0.0, seconds - (time.monotonic() - since)))
            self.start()


@pytest.fixture
def postgres_server():
    """A :class:`PostgresServer` for a test that needs the database to go away for a while, e.g.::

        def test_outage(postgres_url, postgres_server):
            ...                                  # use postgres_url
            with postgres_server.down(seconds=3):
                ...                              # the server is stopped here
            ...                                  # and running again here

    or ``postgres_server.stop()`` / ``.start()``. Skips (in CI: fails) when AUTOTUNE_TEST_POSTGRES_CTL is unset
    (.ci/postgres.sh sets it) or the server does not answer; a server the test left stopped is
    started again afterwards, so the tests after it find it running.
    """
    ctl = os.environ.get(POSTGRES_CTL_VAR)
    if not ctl:
        need(f"cannot stop and start the PostgreSQL server: {POSTGRES_CTL_VAR} is unset ({START_ONE})")
    _postgres_connect().close()
    server = PostgresServer(shlex.split(ctl))
    yield server
    if server.stopped:
        server.start()


@pytest.fixture(params=["sqlite", "journal", "postgresql"])
def store_url(request, tmp_path):
    """The same storage behaviour over a SQLite file, Optuna's journal file and a PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'studies.db'}"
    if request.param == "journal":
        return f"journal:{tmp_path / 'studies.log'}"
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def collector_seen(monkeypatch):
    """``watch(module, name)``: a list that gets, at each call of ``module.name``, whether Python's cyclic collector
    was on then. Nothing is frozen before the test, and the collector is on and nothing frozen after it."""
    import gc

    def watch(module, name: str) -> list:
        seen: list = []
        wrapped = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a: seen.append(gc.isenabled()) or wrapped(*a))
        return seen

    gc.unfreeze()
    yield watch
    gc.enable()
    gc.unfreeze()
