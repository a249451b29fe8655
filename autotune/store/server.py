"""The database-server backend (PostgreSQL, MySQL): connections, drivers, heartbeats, and telling "unreachable".

Several machines share a study through a server, so this is where heartbeats are switched on
(Optuna records them only for RDB storages) and where a lost connection is told apart from a
refused write. Connection pools are kept small: a fleet of workers must fit the server's
``max_connections``.
"""

from __future__ import annotations

import os
from typing import Any

from autotune.store.faults import first_line

#: How often a running trial's heartbeat is recorded, and how long after the last one another worker takes it as stale.
HEARTBEAT_S = int(os.environ.get("AUTOTUNE_HEARTBEAT_S", "10"))
GRACE_S = int(os.environ.get("AUTOTUNE_HEARTBEAT_GRACE_S", "60"))


def is_unreachable(exc: BaseException) -> bool:
    """An error of the connection to a database server (it went away), not of what was asked."""
    try:
        import sqlalchemy.exc
    except ImportError:  # pragma: no cover
        return False
    for e in (exc, exc.__cause__, exc.__context__):
        if isinstance(e, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)) or (
            isinstance(e, sqlalchemy.exc.DBAPIError) and e.connection_invalidated):
            text = first_line(e).lower()
            if not any(s in text for s in ("readonly", "read-only", "disk is full", "no such table", "unable to open")):
                return True
    return False


#: A database server's connections per process: one kept open (the loop's reads and writes, one at a time), and up to
#: POOL_OVERFLOW more opened only while a second thread needs one at the same moment (the heartbeat, every 10 s), then
#: closed. SQLAlchemy's default keeps up to 5 open: each worker held 2 (loop and heartbeat), and 64 workers 128
#: connections, past PostgreSQL's default max_connections of 100 (benchmarks/fleet_scale.py).
POOL_SIZE = 1
POOL_OVERFLOW = 4


def engine_kwargs(url: str, read_only: bool = False) -> dict[str, Any]:
    """SQLAlchemy's engine settings for a server: a small pool that checks a connection before use (PostgreSQL drops
    idle ones after about an hour), a connect timeout, and a read-only session for the read commands."""
    pool = {"pool_pre_ping": True, "pool_size": POOL_SIZE, "max_overflow": POOL_OVERFLOW}
    if url.startswith("postgresql"):
        args: dict[str, Any] = {"connect_timeout": 10}
        if read_only:
            args["options"] = "-c default_transaction_read_only=on"
        return {"connect_args": args, **pool}
    return pool


def with_installed_driver(url: str) -> str:
    """``postgresql://`` with the driver that is installed.

    SQLAlchemy 2.1 made psycopg (3) the default driver of ``postgresql://`` where 2.0 used
    psycopg2; with only psycopg2 installed (the ``postgres`` extra), name it explicitly.
    """
    import importlib.util

    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
        if parsed.drivername != "postgresql" or importlib.util.find_spec(parsed.get_dialect().driver):
            return url
        if importlib.util.find_spec("psycopg2"):
            return parsed.set(drivername="postgresql+psycopg2").render_as_string(hide_password=False)
    except Exception:  # noqa: BLE001 - RDBStorage reports what is wrong with the URL
        pass
    return url
