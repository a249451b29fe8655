"""Optuna's tables opened read-only with no Optuna storage: what a read command reads a database through.

Building Optuna's ``RDBStorage`` costs a read command more than the read itself: it imports
Alembic and SQLAlchemy's ORM, and checks the schema by loading Alembic's migration scripts
(0.26 s of a 0.7 s ``status`` here). A read-only store on a SQLite file or a
PostgreSQL server reads Optuna's tables directly instead (:mod:`.reading`): a SQLite file
through Python's ``sqlite3`` (``mode=ro``, as :func:`autotune.store.sqlite.read_only_url`
opens it; SQLAlchemy is not imported), a server through a plain SQLAlchemy engine with a
read-only session (:func:`autotune.store.server.engine_kwargs`). Its trials are typed records
built from the rows (:func:`autotune.store.reading.stored_trials_of`): no ``FrozenTrial`` per
trial, and no Optuna imported.

Only on the schema :mod:`.reading` knows (``version_info`` at :data:`.reading.SCHEMA`, Alembic
at :data:`.reading.REVISION`, the check Optuna's storage makes when it opens): a database on
any other is read through Optuna's storage, whose own refusal ("upgrade the storage", "update
Optuna") a user then sees, as before. MySQL and other servers are read through Optuna's storage
too (``key`` is a reserved word there). Nothing here writes.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Iterator

from autotune.store import kept, reading, server, sqlite
from autotune.store.records import StoredTrial

#: The database servers read directly (by SQLAlchemy's dialect name).
DIRECT_SERVERS = ("postgresql",)


class Tables:
    """A database's Optuna tables, read through the driver's own connections (one per read, closed after it)."""

    def __init__(self, connect: Callable[[], Any], dialect: str, engine: Any = None) -> None:
        self._connect = connect
        self.dialect = dialect
        self._engine = engine  # a server's SQLAlchemy engine (its pool); None for a SQLite file
        self._has_json: bool | None = None  # SQLite's JSON functions (built in since 3.38, unless left out)

    @classmethod
    def of_sqlite(cls, path: Path) -> Tables:
        """The SQLite file ``path``, opened read-only by ``sqlite3`` itself (SQLite refuses every write through it)."""
        import sqlite3

        timeout = sqlite.ENGINE_KWARGS["connect_args"]["timeout"]
        return cls(lambda: sqlite3.connect(sqlite.read_only_uri(path), uri=True, timeout=timeout), "sqlite")

    @classmethod
    def of_server(cls, url: str, read_only: bool = True) -> Tables | None:
        """A database server's (None for one not read directly: see :data:`DIRECT_SERVERS`)."""
        import sqlalchemy

        engine = sqlalchemy.create_engine(url, **server.engine_kwargs(url, read_only))
        if engine.dialect.name not in DIRECT_SERVERS:
            engine.dispose()
            return None
        return cls(engine.raw_connection, engine.dialect.name, engine)

    @contextlib.contextmanager
    def connection(self) -> Iterator[Any]:
        raw = self._connect()
        try:
            yield raw
        finally:
            raw.close()

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()

    def table_names(self) -> set[str]:
        """The database's tables (a server's as SQLAlchemy's inspector lists them; a SQLite file's the same way)."""
        if self._engine is not None:
            import sqlalchemy

            return set(sqlalchemy.inspect(self._engine).get_table_names())
        with self.connection() as raw:
            cur = raw.cursor()
            try:
                cur.execute("SELECT name FROM sqlite_master "
                            "WHERE type = 'table' AND name NOT LIKE 'sqlite~_%' ESCAPE '~'")
                return {str(r[0]) for r in cur.fetchall()}
            finally:
                cur.close()

    def known(self) -> bool:
        """The tables are on the schema :mod:`.reading` reads (else Optuna's storage reads them, or says why not)."""
        with self.connection() as raw:
            return reading.schema_of(raw) == (reading.SCHEMA, reading.REVISION)

    def studies(self) -> list[tuple[int, str]]:
        """Every study's id and name, by id."""
        with self.connection() as raw:
            return reading.studies_of(raw)

    def attrs(self, study_ids: list[int] | None = None) -> dict[int, dict[str, Any]]:
        """The studies' user attributes by id (every study's when ``study_ids`` is None)."""
        with self.connection() as raw:
            return reading.study_attrs_of(raw, study_ids)

    def keys(self, attrs: dict[int, dict[str, Any]]) -> dict[int, list[Any] | None]:
        """The studies' keys for their kept views, by id (:func:`autotune.store.kept.keys_of`; None while a trial of
        one runs); ``attrs``: their attributes by id."""
        with self.connection() as raw:
            return kept.keys_of(raw, attrs)

    def kept(self, study_ids: list[int], parts: tuple[str, ...], attr: str = kept.KEPT) -> dict[int, dict[str, Any]]:
        """The parts ``parts`` of the studies' kept views, by id (:func:`autotune.store.reading.kept_of`)."""
        json_read = self._json()
        with self.connection() as raw:
            return reading.kept_of(raw, self.dialect, study_ids, parts, json_read, attr)

    def trials(self, study_id: int) -> list[StoredTrial]:
        """Every trial of the study, typed, in one pass (:func:`autotune.store.reading.stored_trials_of`); each
        result's bulk read when a view first asks for it, where the database reads JSON (SQLite's may not)."""
        with self.connection() as raw, reading.collector_paused():
            later = (lambda: self.connection()) if self._json() else None  # a connection when a view asks, not now
            return reading.stored_trials_of(raw, self.dialect, study_id, later)

    def _json(self) -> bool:
        if self.dialect != "sqlite":
            return True
        if self._has_json is None:
            with self.connection() as raw:
                try:
                    raw.execute("SELECT json_type('{}')")
                    self._has_json = True
                except Exception:  # noqa: BLE001 - a SQLite built without JSON: results are read whole
                    self._has_json = False
        return self._has_json
