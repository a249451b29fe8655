"""The SQLite backend: a study file on this machine, shared by the processes of one host.

A read-only store opens the file with ``mode=ro`` (SQLite's own guarantee that nothing is
written); a store for writing makes the default ``studies/`` folder, and no other. SQLite has
no heartbeats (a heartbeat thread would contend for the file's lock): a stopped process's
trials are told by pid, :mod:`autotune.store.recovery`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from autotune.errors import StorageError
from autotune.request import option
from autotune.store.names import STUDIES_DIR

#: A writer waits this long for another process's lock on the file before SQLite gives up.
ENGINE_KWARGS: dict[str, Any] = {"connect_args": {"timeout": 60}}


def serialize_writers(engine: Any) -> None:
    """Make each transaction of a writer's ``engine`` take the file's write lock when it begins (``BEGIN IMMEDIATE``).

    Python's sqlite3 opens a transaction only at the first write, so a read and the write that depends on it are
    not one transaction: two processes popping Optuna's queue of enqueued trials both read a trial WAITING, both
    set it RUNNING, and both measure and tell it (the second tell fails: "Cannot tell a COMPLETE trial"; Optuna's
    ``SELECT ... FOR UPDATE`` is a no-op on SQLite). Begun immediately, the second waits for the first's commit and
    then reads the trial RUNNING. SQLAlchemy's documented recipe for pysqlite's transactions (its "connect" and
    "begin" events); the pool is emptied so that no connection made before keeps the old behaviour."""
    from sqlalchemy import event

    def no_implicit_begin(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # pysqlite emits no BEGIN of its own

    def begin_immediate(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    event.listen(engine, "connect", no_implicit_begin)
    event.listen(engine, "begin", begin_immediate)
    engine.dispose()


def path_of(url: str) -> Path | None:
    """The file of a ``sqlite:///`` URL (None for ``:memory:``)."""
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        return Path(url[len("sqlite:///") :].split("?", 1)[0])
    return None


def read_only_uri(path: Path) -> str:
    """SQLite's own URI that opens ``path`` read-only (``sqlite3.connect(..., uri=True)``): SQLite refuses every write
    through it."""
    return f"file:{quote(str(path))}?mode=ro"


def read_only_url(path: Path) -> str:
    """The SQLAlchemy URL that opens ``path`` read-only, as :func:`read_only_uri` does."""
    return f"sqlite:///{read_only_uri(path)}&uri=true"


def prepare_folder(path: Path, read_only: bool, shown: str) -> None:
    """The file's folder must exist; for writing, the default ``studies/`` is made."""
    folder = path.parent
    if not read_only and not folder.is_dir() and folder == STUDIES_DIR:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create the folder {folder} for {shown}: {exc.strerror}; "
                               f"run from a folder you can write to, or pass {option('storage')}") from None
    if not folder.is_dir():
        raise StorageError(f"storage {shown!r}: folder {folder} does not exist")
