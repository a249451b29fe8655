"""One storage opened: a URL becomes an Optuna storage (or a read-only database's tables, read directly), and the
storage refusing to work becomes one line that names the cause and the fix.

Why a module of its own: every question a caller asks of a :class:`autotune.store.Store` (its studies,
:mod:`.studies`; the views kept on them, :mod:`.views`) first needs the storage opened, by the rules of its backend,
and its faults worded; :class:`Connection` is that part of the store, and the base the others build on.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from autotune.errors import AutotuneError, StorageError, StorageUnreachable, StudyError
from autotune.request import option
from autotune.store import server, sqlite
from autotune.store.tables import Tables
from autotune.store.faults import first_line
from autotune.store.secrets import redact, redact_message

if TYPE_CHECKING:
    import optuna

logging.getLogger("sqlalchemy").setLevel(logging.ERROR)
_quieted = False


def _optuna() -> Any:
    """Optuna, imported (where the store builds or uses an Optuna storage or study: a read of a database's tables
    needs none, :mod:`.tables`) and quieted once: no INFO line per study and trial, no ExperimentalWarning (the
    heartbeat, metric names)."""
    global _quieted
    import optuna

    if not _quieted:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        _quieted = True
    return optuna


if "optuna" in sys.modules:  # a process that imported Optuna before the store (one that writes studies): quiet it now
    _optuna()


class Connection:
    """One storage's URL, opened on first use (the base of :class:`autotune.store.Store`, which is what callers open):
    the Optuna storage or a read-only database's tables, and its faults as one :class:`StorageError`.

    ``read_only``: for the commands that only read; such a store creates nothing, and a
    SQLite file or journal that does not exist is an empty store (``load`` says no study).
    """

    def __init__(self, url: str, *, read_only: bool = False) -> None:
        if not isinstance(url, str) or not url:
            raise StorageError("a storage URL is needed, e.g. sqlite:///studies/x.db or postgresql://user@host/db")
        self._url = url
        self.shown = redact(url)
        self.read_only = read_only
        self.path: Path | None = None  # the file of a SQLite or journal store
        self._identity: tuple[int, int] | None = None  # the file's (device, inode) when opened
        self._storage: optuna.storages.BaseStorage | None = None
        self._tables: Tables | None | bool = False  # a read-only database's tables read directly (False: not opened)
        if url.startswith("journal:"):
            from autotune.store import journal  # Optuna's journal storage: imported for a journal store only

            self.path = journal.path_of(url)
        elif "://" not in url:
            raise StorageError(f"storage {self.shown!r}: expected a URL such as sqlite:///studies/x.db, "
                               "postgresql://user@host/db or journal:PATH")
        else:
            self.path = sqlite.path_of(url)
        if self.path is not None and self.path.is_dir():
            raise StorageError(f"storage {self.shown!r}: {self.path} is a folder, not a study file")

    @property
    def missing(self) -> bool:
        """A file store whose file does not exist (yet): it holds no study, and reading it creates nothing."""
        return self.path is not None and self._storage is None and not self._tables and not self.path.exists()

    @property
    def storage(self) -> optuna.storages.BaseStorage:
        """The Optuna storage, connected on first use (a SQLite or journal file is created then, on a first write)."""
        if self._storage is None:
            if self.read_only and self.missing:
                raise StorageError(f"storage {self.shown!r}: {self.path} does not exist")
            self._storage = self._connect()
        return self._storage

    def __repr__(self) -> str:
        return f"Store({self.shown!r}{', read-only' if self.read_only else ''})"

    @property
    def url(self) -> str:
        """The URL as given, password included: for the processes this one starts, never to print."""
        return self._url

    @property
    def is_sqlite(self) -> bool:
        return self._url.startswith("sqlite:")

    @property
    def is_server(self) -> bool:
        """A database server (PostgreSQL, MySQL): other machines may share it; heartbeats are recorded."""
        return "://" in self._url and not self.is_sqlite and not self._url.startswith("journal:")

    # ------------------------------------------------------------ opening

    def _connect(self) -> optuna.storages.BaseStorage:
        _optuna()
        if self._url.startswith("journal:"):
            return self._journal()
        if self.path is not None:
            sqlite.prepare_folder(self.path, self.read_only, self.shown)
        with self._worded():
            storage = self._rdb()
        self.opened()
        return storage

    @contextlib.contextmanager
    def _worded(self) -> Iterator[None]:
        """What opening the database raised, as one line (an AutotuneError passes as it is): a missing driver, a
        fault of the storage (:meth:`fault`), or any other (sqlalchemy's or a driver's errors, bad URLs,
        unreachable servers) with its first line, the URL's password masked."""
        try:
            yield
        except AutotuneError:
            raise
        except ImportError as exc:
            raise StorageError(f"storage {self.shown!r}: a database driver is missing ({exc}); "
                               "for PostgreSQL: pip install 'autotune[postgres]'") from None
        except Exception as exc:  # noqa: BLE001 - see the docstring
            fault = self.fault(exc)
            if fault is not None:
                raise fault from None
            raise StorageError(f"storage {self.shown!r} cannot be opened: "
                               f"{redact_message(first_line(exc), self._url)}") from None

    def _journal(self) -> optuna.storages.BaseStorage | None:
        from autotune.store import journal

        assert self.path is not None
        if not self.path.parent.is_dir():
            raise StorageError(f"storage {self.shown!r}: folder {self.path.parent} does not exist")
        try:
            storage = journal.connect(self.path)  # creates the file (never read-only: see missing)
        except OSError as exc:
            raise self.fault(exc) or StorageError(f"storage {self.shown!r} cannot be opened: {exc.strerror}") from None
        self.opened()
        return storage

    @property
    def _direct(self) -> Tables | None:
        """A read-only database's tables, read with no Optuna storage (:mod:`.tables`); None for a store that is not
        read-only, a journal, an in-memory database, a server or schema the direct read does not know."""
        if self._tables is False:
            self._tables = None
            if self.read_only and not self._url.startswith("journal:") and (self.path is not None or self.is_server):
                self._tables = self._open_tables()
        return self._tables or None

    def _open_tables(self) -> Tables | None:
        if self.path is not None:
            sqlite.prepare_folder(self.path, True, self.shown)
        with self._worded():
            # each read connects anew: to the file named when the store opened, whatever folder the process is in then
            tables = Tables.of_sqlite(self.path.absolute()) if self.path is not None else Tables.of_server(
                server.with_installed_driver(self._url))
            if tables is None:
                return None
            self._check_tables(tables.table_names())
            if not tables.known():
                tables.close()
                return None  # another schema: Optuna's storage reads it, or says why it cannot
        self.opened()
        return tables

    def _rdb(self) -> optuna.storages.RDBStorage:
        url = server.with_installed_driver(self._url)
        kwargs = dict(sqlite.ENGINE_KWARGS) if self.is_sqlite else server.engine_kwargs(url, self.read_only)
        if self.read_only and self.path is not None:
            url = sqlite.read_only_url(self.path)
        if self.read_only:
            self._check_tables(_table_names(url, kwargs))
        # Heartbeats on database servers only: a SQLite file is shared by processes of one host, whose
        # liveness is checked by pid (recovery.is_stale), and a heartbeat thread's own SQLite connection
        # would contend for the file's lock (or, for :memory:, see another database).
        is_server = self.is_server and not self.read_only
        storage = _optuna().storages.RDBStorage(
            url,
            engine_kwargs=kwargs,
            skip_table_creation=self.read_only,
            # recorded while each trial runs (recovery.Heartbeat)
            heartbeat_interval=server.HEARTBEAT_S if is_server else None,
            grace_period=server.GRACE_S if is_server else None,
        )
        if self.is_sqlite and self.path is not None and not self.read_only:  # workers of one file: one writer at a time
            sqlite.serialize_writers(storage.engine)
        return storage

    def _check_tables(self, tables: set[str]) -> None:
        """A read-only store must already hold Optuna's tables: a foreign database is refused, untouched."""
        if not {"studies", "version_info"} <= tables:
            what = "an empty database" if not tables else "not an Optuna storage (it has no studies table)"
            raise StudyError(f"{self.shown} is {what}: no autotune study there; it was left as it was")

    # ------------------------------------------------------------ faults

    def check_alive(self) -> None:
        """StorageError when the store's file was deleted or replaced since it was opened (a SQLite
        connection would go on writing into the deleted file, and every result would be lost)."""
        if self.path is None or self._identity is None:
            return
        try:
            same = _identity(self.path) == self._identity
        except OSError:
            same = False
        if not same:
            raise StorageError(f"{self.shown} was deleted, moved or replaced while in use; what this run measured "
                               "since is lost: restore the file, or start again with the same command")

    def opened(self) -> None:
        """Record the file's identity once it exists (when connected; a SQLite file exists after the first write)."""
        if self.path is not None and self._identity is None and self.path.exists():
            self._identity = _identity(self.path)

    def fault(self, exc: BaseException) -> StorageError | None:
        """The storage refusing to work, as one line with the cause and the fix; None for any other error."""
        text = first_line(exc).lower()
        if isinstance(exc, AutotuneError):
            return exc if isinstance(exc, StorageError) else None
        chain = [exc, getattr(exc, "orig", None), exc.__cause__, exc.__context__]
        # an OSError speaks of the store only when it names the store's file (or names none: SQLite's own)
        os_error = next((e for e in chain if isinstance(e, OSError) and (
            e.filename is None or self.path is None or str(e.filename).startswith(str(self.path)))), None)
        code = os_error.errno if os_error is not None else None
        where = self.shown
        refused = any(s in text for s in ("readonly database", "read-only", "unable to open database file",
                                          "disk i/o error", "no such table", "database or disk is full",
                                          "disk is full"))
        if self.path is not None and (refused or code is not None):
            # A file store: its state says which (SQLite's own words are the same for several causes).
            exists = self.path.exists()
            gone = self._identity is not None and (not exists or _identity(self.path) != self._identity)
            if gone or (code == errno.ENOENT and self._identity is not None):
                return StorageError(f"{where} was deleted, moved or replaced while in use: restore it, "
                                    "or start again with the same command")
            if "full" in text or code == errno.ENOSPC:
                return StorageError(f"the disk holding {where} is full: free some space and run the same command again "
                                    "(the trial that was running is measured again)")
            if not ((not exists or os.access(self.path, os.W_OK)) and os.access(self.path.parent, os.W_OK)) or code in (
                    errno.EROFS, errno.EACCES, errno.EPERM) or "readonly" in text or "read-only" in text:
                return StorageError(f"{where} refuses writes (a read-only file or folder): make it writable, "
                                    f"or copy the study somewhere writable and pass {option('storage')}; "
                                    "read commands (status, export) still work on it")
            return StorageError(f"{where} refused a write ({redact_message(first_line(exc), self._url)}): "
                                "check the file and its disk, then run the same command again")
        if "readonly" in text or "read-only" in text:
            return StorageError(f"{where} refuses writes: the database or its user is read-only; "
                                f"point {option('storage')} at a writable one; "
                                "read commands (status, export) still work on it")
        if "disk is full" in text or "no space left" in text:
            return StorageError(f"the database of {where} is out of space: free some and run the same command again")
        if self.is_server and server.is_unreachable(exc):
            reason = redact_message(first_line(exc), self._url)[:160]
            return StorageUnreachable(f"the database server of {where} is unreachable ({reason}): "
                                      "start it, or check the URL, and run the same command again "
                                      "(the trial that was running is measured again)",
                                      reason)
        optuna = sys.modules.get("optuna")  # not imported: no Optuna error to tell
        if optuna is not None and isinstance(exc, optuna.exceptions.StorageInternalError):
            cause = exc.__cause__ or exc.__context__
            if cause is not None:
                return self.fault(cause) or StorageError(
                    f"{where} refused a write: {redact_message(first_line(cause), self._url)}")
            return StorageError(f"{where} refused a write: {redact_message(first_line(exc), self._url)}")
        return None

    @contextlib.contextmanager
    def faults(self) -> Iterator[None]:
        """Turn the storage refusing to work into one StorageError (other errors pass through)."""
        try:
            yield
        except AutotuneError:
            raise
        except Exception as exc:  # noqa: BLE001 - only what fault() recognises is converted
            fault = self.fault(exc)
            if fault is None:
                raise
            raise fault from None


def _table_names(url: str, kwargs: Mapping[str, Any]) -> set[str]:
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, **kwargs)
    try:
        return set(sqlalchemy.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _identity(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino
