"""The store: where studies live, opened once per process, read-only for the commands that only read.

Any Optuna storage URL works (``sqlite:///...``, ``postgresql://...``, ``mysql://...``),
plus ``journal:PATH`` for Optuna's journal file storage; the default is
``sqlite:///studies/<study>.db``. A :class:`Store` is opened once from its URL (the
engine and its connection pool live as long as the process) and passed down; every
URL a user, a log or a stored document sees is :attr:`Store.shown`, its password masked.
Each backend's own rules live in a module of its own (:mod:`.sqlite`, :mod:`.server`,
:mod:`.journal`), after Optuna's ``storages/``; this module is where a URL picks one.

Read-only stores (``status``, ``list``, ``export``, ``dashboard``) create no file, no
folder and no table: a SQLite file is opened with ``mode=ro``, a database server's
session is read-only, and a database without Optuna's tables is refused in one line
and left as it was. They read a SQLite file or a PostgreSQL server's tables directly
(:mod:`.tables`), with no Optuna storage (no Alembic, no ORM: what a read command spent
most of its start on), where the tables are on the schema the direct read knows; any
other is read through Optuna's storage, which says why it cannot when it cannot. Study names come from a safe set (:func:`autotune.store.names.check_name`),
checked before any file is touched.

A storage that refuses a write (a read-only file or folder, a full disk, a file deleted
under a running study, a database server gone) becomes one :class:`StorageError` that
names the cause and the fix (:meth:`Store.fault`), never a traceback. See docs/storage.md.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import logging
import os
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from autotune._version import __version__
from autotune.errors import AutotuneError, StorageError, StorageUnreachable, StudyError
from autotune.request import option
from autotune.store import kept as keeping
from autotune.store import reading, records, server, sqlite
from autotune.store.tables import Tables
from autotune.store.faults import first_line
from autotune.store.names import check_name, default_url
from autotune.store.records import StoredStudy
from autotune.store.secrets import redact, redact_message
from autotune.store.matching import check_matches

if TYPE_CHECKING:
    import optuna

METRICS = ["samples_per_s", "peak_memory_bytes"]
DESCRIBE_WAIT_S = 15.0  # how long a study just created by another process may take to get its attributes

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


def _directions() -> list[Any]:
    optuna = _optuna()
    return [optuna.study.StudyDirection.MAXIMIZE, optuna.study.StudyDirection.MINIMIZE]


def __getattr__(name: str) -> Any:
    if name == "DIRECTIONS":  # the two objectives' directions, Optuna's enums: Optuna is imported when first asked for
        return _directions()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Store:
    """One storage, opened once per process (:meth:`open`), passed to whatever reads or writes studies.

    ``read_only``: for the commands that only read; such a store creates nothing, and a
    SQLite file or journal that does not exist is an empty store (``load`` says no study).
    """

    _open: dict[tuple[str, bool], Store] = {}

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

    @classmethod
    def open(cls, url: str, *, read_only: bool = False) -> Store:
        """The process's store for ``url`` (opened on first use, then the same one: one engine per URL).

        A file named by a relative path is another file once the process changes its folder (a notebook's
        ``os.chdir``, tests): such a URL is keyed with the current folder too."""
        relative = (url.startswith("journal:") and not url.startswith("journal:/")) or (
            url.startswith("sqlite:///") and not url.startswith("sqlite:////") and url != "sqlite:///:memory:")
        key = (url, read_only, os.getcwd() if relative else None)
        store = cls._open.get(key)
        if store is None:
            store = cls._open[key] = cls(url, read_only=read_only)
        return store

    @classmethod
    def default(cls, study: str, *, read_only: bool = False) -> Store:
        return cls.open(default_url(study), read_only=read_only)

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
            raise StorageError(f"storage {self.shown!r} cannot be opened: {redact_message(first_line(exc), self._url)}") from None

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
            heartbeat_interval=server.HEARTBEAT_S if is_server else None,  # recorded while each trial runs (recovery.Heartbeat)
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

    # ------------------------------------------------------------ studies

    def names(self) -> list[str]:
        """The names of every study (and submitted job) in the store."""
        if self.missing:
            return []
        with self._studies_read():
            direct = self._direct
            if direct is not None:
                return [name for _, name in direct.studies()]  # no attribute read
        return [s.name for s in self.summaries()]

    def summaries(self) -> list[StoredStudy]:
        """Every study's name and description, in one query (their trials are not read: ``trials`` is empty)."""
        if self.missing:
            return []
        with self._studies_read():
            direct = self._direct
            if direct is not None:
                studies = direct.studies()
                attrs = direct.attrs()
                return [StoredStudy(name, attrs.get(sid, {}), []) for sid, name in studies]
            return [StoredStudy(s.study_name, s.user_attrs, []) for s in self.storage.get_all_studies()]

    @contextlib.contextmanager
    def _studies_read(self) -> Iterator[None]:
        """The store's list of studies failing to be read, as one StorageError."""
        try:
            yield
        except AutotuneError:
            raise
        except Exception as exc:  # noqa: BLE001
            if self._url.startswith("journal:") and isinstance(exc, ValueError):  # a line that is no journal record
                raise StorageError(f"{self.shown} is not an Optuna journal file, or it is damaged (a line that is not "
                                   f"a whole record: {first_line(exc)}); it was left as it was") from None
            raise self.fault(exc) or StorageError(f"cannot read the studies of {self.shown}: "
                                                  f"{redact_message(first_line(exc), self._url)}") from None

    def has(self, name: str) -> bool:
        return name in self.names()

    def load(self, name: str, sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
        """An existing study; StudyError listing what exists when there is none of that name."""
        self._existing(name)
        return _optuna().load_study(study_name=name, storage=self.storage, sampler=sampler)

    def read(self, name: str, description: StoredStudy | None = None) -> StoredStudy:
        """The study ``name``, read once: its description and its trials in one pass (:mod:`.reading`);
        ``description``: already read (``list`` has every study's from one query). StudyError when there is none."""
        with self.faults():
            if description is None:
                self._existing(name)
            direct = self._direct
            if direct is not None:
                study_id = dict((n, i) for i, n in direct.studies())[name]
                attrs = direct.attrs([study_id]).get(study_id, {}) if description is None else description._attrs
                return StoredStudy(name, attrs, direct.trials(study_id))
            study_id = self.storage.get_study_id_from_name(name)
            attrs = self.storage.get_study_user_attrs(study_id) if description is None else description._attrs
            return StoredStudy.from_frozen(name, attrs, reading.all_trials(self.storage, study_id))

    # ------------------------------------------------------------ kept views (.kept)

    def kept(self, name: str, parts: tuple[str, ...] = ("status", "owners"),
             attr: str = keeping.KEPT) -> tuple[StoredStudy, dict[str, Any] | None]:
        """The study's description (its trials not read: pass it to :meth:`read`) and the parts ``parts`` of its kept
        views where they hold for the study as it is now (:mod:`.kept`), else None: a store read through Optuna's
        storage (a journal) never has them. StudyError when there is no such study."""
        with self.faults():
            self._existing(name)
            direct = self._direct
            if direct is None:
                study_id = self.storage.get_study_id_from_name(name)
                return StoredStudy(name, self.storage.get_study_user_attrs(study_id), []), None
            study_id = dict((n, i) for i, n in direct.studies())[name]
            attrs = direct.attrs([study_id]).get(study_id, {})
            described = StoredStudy(name, attrs, [])
            return described, self._valid(direct, {study_id: attrs}, parts, attr).get(study_id)

    def kept_of(self, described: list[StoredStudy], parts: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        """The parts ``parts`` of the kept views that hold, by study name, of studies already described (``list``:
        every study's description from one query): a query for the views, one for every study's key."""
        direct = self._direct
        if direct is None or not described:
            return {}
        with self.faults():
            ids = dict((n, i) for i, n in direct.studies())
            attrs = {ids[d.name]: d._attrs for d in described if d.name in ids}
            names = {i: n for n, i in ids.items()}
            return {names[i]: views for i, views in self._valid(direct, attrs, parts).items()}

    @staticmethod
    def _valid(direct: Tables, attrs: Mapping[int, Mapping[str, Any]], parts: tuple[str, ...],
               attr: str = keeping.KEPT) -> dict[int, dict[str, Any]]:
        views = direct.kept(list(attrs), ("key", *parts), attr)
        if not views:
            return {}
        keys = direct.keys({i: attrs[i] for i in views})
        return {i: v for i, v in ((i, keeping.valid(views[i], keys[i])) for i in views) if v is not None}

    def key(self, name: str) -> list[Any] | None:
        """The study's key now (:func:`.kept.keys_of`): None while a trial of it runs, and for a store with no direct
        read of its tables (a journal, an in-memory database, a schema :mod:`.reading` does not know). A writer's
        store reads it through tables opened for the read and closed after it (a server's connection is not kept)."""
        with self.faults(), self._key_tables() as tables:
            if tables is None:
                return None
            ids = dict((n, i) for i, n in tables.studies())
            if name not in ids:
                return None
            return tables.keys({ids[name]: tables.attrs([ids[name]]).get(ids[name], {})})[ids[name]]

    @contextlib.contextmanager
    def _key_tables(self) -> Iterator[Tables | None]:
        if self.read_only:
            yield self._direct
            return
        tables = None
        if not self._url.startswith("journal:") and (self.path is not None or self.is_server):
            with self._worded():
                tables = (Tables.of_sqlite(self.path.absolute()) if self.path is not None
                          else Tables.of_server(server.with_installed_driver(self._url)))
                if tables is not None and not tables.known():
                    tables.close()
                    tables = None
        try:
            yield tables
        finally:
            if tables is not None:
                tables.close()

    def keep(self, name: str, key: list[Any], views: Mapping[str, Any], page: str | None = None) -> None:
        """Keep ``views`` (and the dashboard's ``page``, as drawn) on the study, for as long as its key stays ``key``
        (a writer's: see :mod:`.kept`)."""
        storage = self._writable()
        with self.faults():
            study_id = storage.get_study_id_from_name(name)
            if page is not None:
                storage.set_study_user_attr(study_id, keeping.PAGE, {"page": keeping.pack(page), "key": key})
            storage.set_study_user_attr(study_id, keeping.KEPT, {**views, "key": key})

    def kept_page(self, name: str) -> tuple[StoredStudy, str | None]:
        """The study's description and its dashboard page as kept (:meth:`keep`) where it holds, else None."""
        described, views = self.kept(name, ("page",), keeping.PAGE)
        return described, keeping.unpack(views["page"]) if views and isinstance(views.get("page"), str) else None

    def _existing(self, name: str) -> None:
        check_name(name)
        if not self.read_only and not self.missing:
            # One query for the name (the list of every study reads every study's attributes, kept views and
            # all: a year of nightly studies in one database), the list only to say what there is instead.
            with self._studies_read():
                try:
                    self.storage.get_study_id_from_name(name)
                    return
                except KeyError:
                    pass
        names = self.names()
        if name not in names:
            if self.missing:
                raise StudyError(f"no study {name!r}: {self.path} does not exist")
            hint = f"; studies there: {', '.join(names)}" if names else "; it holds no study"
            raise StudyError(f"no study {name!r} in {self.shown}{hint}")

    def _writable(self) -> optuna.storages.BaseStorage:
        if self.read_only:
            raise StorageError(f"{self.shown} was opened read-only")
        return self.storage

    def create(self, name: str) -> optuna.Study:
        """A new, empty two-objective study (a submitted job's record); StudyError when the name is taken."""
        check_name(name)
        storage = self._writable()
        optuna = _optuna()
        try:
            return optuna.create_study(study_name=name, storage=storage, directions=_directions())
        except optuna.exceptions.DuplicatedStudyError:
            raise StudyError(f"a study or job named {name!r} exists in {self.shown}: choose another {option('study')} name") from None

    def create_or_check(
        self, name: str, attrs: Mapping[str, Any], sampler: optuna.samplers.BaseSampler | None = None
    ) -> tuple[optuna.Study, bool]:
        """Create the study with ``attrs``, or load it and refuse when it was made for something else.

        Returns (study, created). ``attrs`` holds workload, space, space_hash, fingerprint, device, ...

        A seeded ``sampler`` keeps its seed only in the process that creates the study (a new study
        is reproducible). A process that joins one (a worker of a fleet, a resumed run) draws a fresh
        seed, as Optuna does for parallel jobs: with one seed, every worker would propose the same
        configurations in the same order, and all but one of each would be skipped.
        """
        check_name(name)
        storage = self._writable()
        optuna = _optuna()
        created = False
        if name not in self.names():
            try:
                study = optuna.create_study(study_name=name, storage=storage, directions=_directions(), sampler=sampler)
                created = True
            except optuna.exceptions.DuplicatedStudyError:  # another process created it meanwhile
                study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        else:
            study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        if created:
            study.set_metric_names(METRICS)
            records.save(study, **attrs)
            records.save(study, version=__version__)
            records.save(study, created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))  # written last
            return study, True
        _wait_until_described(study)
        check_matches(study, attrs, self.shown)
        study.sampler.reseed_rng()
        return study, False

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
            raise StorageError(f"{self.shown} was deleted, moved or replaced while in use; what this run measured since "
                               "is lost: restore the file, or start again with the same command")

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
        refused = any(s in text for s in ("readonly database", "read-only", "unable to open database file", "disk i/o error",
                                          "no such table", "database or disk is full", "disk is full"))
        if self.path is not None and (refused or code is not None):
            # A file store: its state says which (SQLite's own words are the same for several causes).
            exists = self.path.exists()
            gone = self._identity is not None and (not exists or _identity(self.path) != self._identity)
            if gone or (code == errno.ENOENT and self._identity is not None):
                return StorageError(f"{where} was deleted, moved or replaced while in use: restore it, or start again with "
                                    "the same command")
            if "full" in text or code == errno.ENOSPC:
                return StorageError(f"the disk holding {where} is full: free some space and run the same command again "
                                    "(the trial that was running is measured again)")
            if not ((not exists or os.access(self.path, os.W_OK)) and os.access(self.path.parent, os.W_OK)) or code in (
                    errno.EROFS, errno.EACCES, errno.EPERM) or "readonly" in text or "read-only" in text:
                return StorageError(f"{where} refuses writes (a read-only file or folder): make it writable, or copy the "
                                    f"study somewhere writable and pass {option('storage')}; read commands (status, export) still work on it")
            return StorageError(f"{where} refused a write ({redact_message(first_line(exc), self._url)}): check the file "
                                "and its disk, then run the same command again")
        if "readonly" in text or "read-only" in text:
            return StorageError(f"{where} refuses writes: the database or its user is read-only; point {option('storage')} at a "
                                "writable one; read commands (status, export) still work on it")
        if "disk is full" in text or "no space left" in text:
            return StorageError(f"the database of {where} is out of space: free some and run the same command again")
        if self.is_server and server.is_unreachable(exc):
            reason = redact_message(first_line(exc), self._url)[:160]
            return StorageUnreachable(f"the database server of {where} is unreachable ({reason}): start it, or check the "
                                      "URL, and run the same command again (the trial that was running is measured again)",
                                      reason)
        optuna = sys.modules.get("optuna")  # not imported: no Optuna error to tell
        if optuna is not None and isinstance(exc, optuna.exceptions.StorageInternalError):
            cause = exc.__cause__ or exc.__context__
            if cause is not None:
                return self.fault(cause) or StorageError(f"{where} refused a write: {redact_message(first_line(cause), self._url)}")
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



def _wait_until_described(study: optuna.Study) -> None:
    """Another process may have created the study an instant ago and still be writing its attributes
    (Optuna cannot create a study with them at once): give an empty study a moment to get them."""
    deadline = time.monotonic() + DESCRIBE_WAIT_S
    while (StoredStudy(study.study_name, study.user_attrs, []).created_at is None and time.monotonic() < deadline
           and not study.get_trials(deepcopy=False)):
        time.sleep(0.1)
