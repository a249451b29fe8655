"""The store: where studies live, opened once per process, read-only for the commands that only read.

Any Optuna storage URL works (``sqlite:///...``, ``postgresql://...``, ``mysql://...``),
plus ``journal:PATH`` for Optuna's journal file storage; the default is
``sqlite:///studies/<study>.db``. A :class:`Store` is opened once from its URL (the
engine and its connection pool live as long as the process) and passed down; every
URL a user, a log or a stored document sees is :attr:`Store.shown`, its password masked.

Read-only stores (``status``, ``list``, ``export``, ``dashboard``) create no file, no
folder and no table: a SQLite file is opened with ``mode=ro``, a database server's
session is read-only, and a database without Optuna's tables is refused in one line
and left as it was. Study names come from a safe set (:func:`check_name`), checked
before any file is touched.

A storage that refuses a write (a read-only file or folder, a full disk, a file deleted
under a running study, a database server gone) becomes one :class:`StorageError` that
names the cause and the fix (:meth:`Store.fault`), never a traceback. See docs/storage.md.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import logging
import os
import re
import time
import warnings
from pathlib import Path
from typing import Any, Iterator, Mapping

import optuna
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

from autotune import __version__, hardware
from autotune.errors import AutotuneError, StorageError, StorageUnreachable, StudyError
from autotune.request import MAX_NAME

METRICS = ["samples_per_s", "peak_memory_bytes"]
DIRECTIONS = [optuna.study.StudyDirection.MAXIMIZE, optuna.study.StudyDirection.MINIMIZE]
STUDIES_DIR = Path("studies")
HEARTBEAT_S = int(os.environ.get("AUTOTUNE_HEARTBEAT_S", "10"))
GRACE_S = int(os.environ.get("AUTOTUNE_HEARTBEAT_GRACE_S", "60"))
DESCRIBE_WAIT_S = 15.0  # how long a study just created by another process may take to get its attributes

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
logging.getLogger("sqlalchemy").setLevel(logging.ERROR)


# ---------------------------------------------------------------- passwords

MASK = "***"
_SECRET_KEYS = ("password", "passwd", "pwd")
# scheme:[//]user:PASSWORD@ (the password may hold '@'; the host part ends at '/' or a blank)
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*:/{0,3}[^\s:/@'\"]*:)(?P<secret>[^\s/'\"]*)@")
# password=... in a query string or a libpq DSN, quoted or not
_KEYVALUE = re.compile(r"(?i)\b(?P<head>(?:%s)\s*=\s*)(?P<secret>'(?:[^'\\]|\\.)*'|[^\s&;'\"]*)" % "|".join(_SECRET_KEYS))


def redact(url: str) -> str:
    """``url`` with its password masked (``***``): the only form of a storage URL that a user,
    a log, an error message or a stored document may see.

    Uses SQLAlchemy's own rendering of a URL with the password hidden, and also masks a
    ``password=`` in the query string. Never raises: a ``journal:`` path, a SQLite URL or a
    string that is no URL comes back unchanged except for whatever looks like a password.
    """
    text = str(url)
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(text)
        if parsed.password is not None:
            text = parsed.render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - not a URL SQLAlchemy can parse: patterns only
        pass
    return redact_message(text)


def redact_message(text: str, url: str | None = None) -> str:
    """``text`` (an exception's message, say) with passwords masked: those of ``url`` wherever
    they appear, and anything shaped like ``scheme://user:password@`` or ``password=...``."""
    for secret in _secrets(url) if url else ():
        text = text.replace(secret, MASK)
    text = _USERINFO.sub(lambda m: m["head"] + MASK + "@", text)
    return _KEYVALUE.sub(lambda m: m["head"] + MASK, text)


def _secrets(url: str) -> list[str]:
    """The password(s) in ``url``, as written and decoded; too short to replace safely: left to the patterns."""
    from urllib.parse import unquote

    found = [m["secret"] for m in _USERINFO.finditer(url)] + [m["secret"].strip("'") for m in _KEYVALUE.finditer(url)]
    found += [unquote(s) for s in found]
    # a password written unencoded with '@' or ':' in it is split by whatever parses the URL, and an error message
    # may quote a piece of it (SQLAlchemy: "invalid literal for int(): 'w0rdSecret@127.0.0.1:1'"): mask the pieces too
    found += [piece for s in found for piece in re.split(r"[@:]", s)]
    try:
        from sqlalchemy.engine import make_url

        found.append(make_url(url).password or "")
    except Exception:  # noqa: BLE001 - not a URL: the patterns found what there is
        pass
    return sorted({s for s in found if len(s) >= 4}, key=len, reverse=True)


# ---------------------------------------------------------------- study names

NAME_CHARS = "letters, digits and . _ - @"
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._@-]*")


def check_name(name: Any) -> str:
    """``name`` if it is a safe study name, else StudyError (before any file is touched).

    Safe: letters, digits, ``.``, ``_``, ``-``, ``@`` (``@`` joins a job and a hardware kind),
    at most 200 characters, not starting with a dot or a dash. No path separators, so a
    name never leads a study file out of its folder, and no markup, so it prints as it is.
    """
    if not isinstance(name, str) or not name:
        raise StudyError("a study name is needed: " + NAME_CHARS)
    if len(name) > MAX_NAME or not _NAME.fullmatch(name):
        shown = name if len(name) <= 60 else name[:57] + "..."
        raise StudyError(f"study name {shown!r} is not allowed: use {NAME_CHARS}, at most {MAX_NAME} characters, "
                         "not starting with a dot or a dash")
    return name


def default_url(study: str) -> str:
    """``sqlite:///studies/<study>.db``, for a name that is safe."""
    return f"sqlite:///{STUDIES_DIR / (check_name(study) + '.db')}"


# ---------------------------------------------------------------- the store


def _first_line(exc: BaseException) -> str:
    lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


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
        if url.startswith("journal:"):
            raw = url[len("journal:") :]
            self.path = Path(raw[2:] if raw.startswith("//") else raw)  # journal:///abs/file.log or journal:rel/file.log
        elif "://" not in url:
            raise StorageError(f"storage {self.shown!r}: expected a URL such as sqlite:///studies/x.db, "
                               "postgresql://user@host/db or journal:PATH")
        elif url.startswith("sqlite:///") and url != "sqlite:///:memory:":
            self.path = Path(url[len("sqlite:///") :].split("?", 1)[0])
        if self.path is not None and self.path.is_dir():
            raise StorageError(f"storage {self.shown!r}: {self.path} is a folder, not a study file")

    @property
    def missing(self) -> bool:
        """A file store whose file does not exist (yet): it holds no study, and reading it creates nothing."""
        return self.path is not None and self._storage is None and not self.path.exists()

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
        if self._url.startswith("journal:"):
            return self._journal()
        if self.path is not None:
            self._sqlite_folder()
        try:
            storage = self._rdb()
        except AutotuneError:
            raise
        except ImportError as exc:
            raise StorageError(f"storage {self.shown!r}: a database driver is missing ({exc}); "
                               "for PostgreSQL: pip install 'autotune[postgres]'") from None
        except Exception as exc:  # noqa: BLE001 - sqlalchemy errors, bad URLs, unreachable servers
            fault = self.fault(exc)
            if fault is not None:
                raise fault from None
            raise StorageError(f"storage {self.shown!r} cannot be opened: {redact_message(_first_line(exc), self._url)}") from None
        self.opened()
        return storage

    def _sqlite_folder(self) -> None:
        """The SQLite file's folder must exist; for writing, the default ``studies/`` is made."""
        assert self.path is not None
        folder = self.path.parent
        if not self.read_only and not folder.is_dir() and folder == STUDIES_DIR:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StorageError(f"cannot create the folder {folder} for {self.shown}: {exc.strerror}; "
                                   "run from a folder you can write to, or pass --storage") from None
        if not folder.is_dir():
            raise StorageError(f"storage {self.shown!r}: folder {folder} does not exist")

    def _journal(self) -> optuna.storages.BaseStorage | None:
        from optuna.storages.journal import JournalStorage

        assert self.path is not None
        if not self.path.parent.is_dir():
            raise StorageError(f"storage {self.shown!r}: folder {self.path.parent} does not exist")
        try:
            storage = JournalStorage(JournalFile(str(self.path)))  # creates the file (never read-only: see missing)
        except OSError as exc:
            raise self.fault(exc) or StorageError(f"storage {self.shown!r} cannot be opened: {exc.strerror}") from None
        self.opened()
        return storage

    def _rdb(self) -> optuna.storages.RDBStorage:
        url = _with_installed_driver(self._url)
        kwargs = _engine_kwargs(url, self.read_only)
        if self.read_only and self.path is not None:
            from urllib.parse import quote

            url = f"sqlite:///file:{quote(str(self.path))}?mode=ro&uri=true"
        if self.read_only:
            self._check_tables(url, kwargs)
        # Heartbeats on database servers only: a SQLite file is shared by processes of one host, whose
        # liveness is checked by pid (recovery.is_stale), and a heartbeat thread's own SQLite connection
        # would contend for the file's lock (or, for :memory:, see another database).
        server = self.is_server and not self.read_only
        return optuna.storages.RDBStorage(
            url,
            engine_kwargs=kwargs,
            skip_table_creation=self.read_only,
            heartbeat_interval=HEARTBEAT_S if server else None,  # recorded while each trial runs (study.Heartbeat)
            grace_period=GRACE_S if server else None,
        )

    def _check_tables(self, url: str, kwargs: Mapping[str, Any]) -> None:
        """A read-only store must already hold Optuna's tables: a foreign database is refused, untouched."""
        import sqlalchemy

        engine = sqlalchemy.create_engine(url, **kwargs)
        try:
            tables = set(sqlalchemy.inspect(engine).get_table_names())
        finally:
            engine.dispose()
        if not {"studies", "version_info"} <= tables:
            what = "an empty database" if not tables else "not an Optuna storage (it has no studies table)"
            raise StudyError(f"{self.shown} is {what}: no autotune study there; it was left as it was")

    # ------------------------------------------------------------ studies

    def names(self) -> list[str]:
        """The names of every study (and submitted job) in the store."""
        return [s.study_name for s in self.summaries()]

    def summaries(self) -> list[Any]:
        """Optuna's FrozenStudy of every study: names, directions and attributes, in one query."""
        if self.missing:
            return []
        try:
            return list(self.storage.get_all_studies())
        except AutotuneError:
            raise
        except Exception as exc:  # noqa: BLE001
            if self._url.startswith("journal:") and isinstance(exc, ValueError):  # a line that is no journal record
                raise StorageError(f"{self.shown} is not an Optuna journal file, or it is damaged (a line that is not "
                                   f"a whole record: {_first_line(exc)}); it was left as it was") from None
            raise self.fault(exc) or StorageError(f"cannot read the studies of {self.shown}: "
                                                  f"{redact_message(_first_line(exc), self._url)}") from None

    def has(self, name: str) -> bool:
        return name in self.names()

    def load(self, name: str, sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
        """An existing study; StudyError listing what exists when there is none of that name."""
        self._existing(name)
        return optuna.load_study(study_name=name, storage=self.storage, sampler=sampler)

    def study_id(self, name: str) -> int:
        """The storage's id of an existing study (for reading it in one pass: :func:`autotune.view.read`)."""
        self._existing(name)
        return self.storage.get_study_id_from_name(name)

    def _existing(self, name: str) -> None:
        check_name(name)
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
        try:
            return optuna.create_study(study_name=name, storage=storage, directions=DIRECTIONS)
        except optuna.exceptions.DuplicatedStudyError:
            raise StudyError(f"a study or job named {name!r} exists in {self.shown}: choose another --study name") from None

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
        created = False
        if name not in self.names():
            try:
                study = optuna.create_study(study_name=name, storage=storage, directions=DIRECTIONS, sampler=sampler)
                created = True
            except optuna.exceptions.DuplicatedStudyError:  # another process created it meanwhile
                study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        else:
            study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        if created:
            study.set_metric_names(METRICS)
            for key, value in attrs.items():
                study.set_user_attr(key, value)
            study.set_user_attr("autotune_version", __version__)
            study.set_user_attr("created_at", dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))  # written last
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
        text = _first_line(exc).lower()
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
                                    "study somewhere writable and pass --storage; read commands (status, export) still work on it")
            return StorageError(f"{where} refused a write ({redact_message(_first_line(exc), self._url)}): check the file "
                                "and its disk, then run the same command again")
        if "readonly" in text or "read-only" in text:
            return StorageError(f"{where} refuses writes: the database or its user is read-only; point --storage at a "
                                "writable one; read commands (status, export) still work on it")
        if "disk is full" in text or "no space left" in text:
            return StorageError(f"the database of {where} is out of space: free some and run the same command again")
        if self.is_server and _is_unreachable(exc):
            reason = redact_message(_first_line(exc), self._url)[:160]
            return StorageUnreachable(f"the database server of {where} is unreachable ({reason}): start it, or check the "
                                      "URL, and run the same command again (the trial that was running is measured again)",
                                      reason)
        if isinstance(exc, optuna.exceptions.StorageInternalError):
            cause = exc.__cause__ or exc.__context__
            if cause is not None:
                return self.fault(cause) or StorageError(f"{where} refused a write: {redact_message(_first_line(cause), self._url)}")
            return StorageError(f"{where} refused a write: {redact_message(_first_line(exc), self._url)}")
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


class JournalFile(JournalFileBackend):
    """Optuna's journal file, whose appends first drop a record that a failed write left half-written.

    A write cut short (a full disk, a process killed inside ``write``) leaves the file ending inside
    a record. Optuna's reader skips such a tail, but the next append would join it and the new
    record into one line no reader can decode, in the middle of the file: every later read fails,
    and the study is lost until the file is mended by hand. So each append, under the file lock
    Optuna's writers take by default, first cuts the file back to its last whole line; what it cuts
    was never a record any reader counted. Writes as Optuna's own ``append_logs`` does otherwise.
    """

    def __init__(self, file_path: str) -> None:
        self.path = file_path
        self.lock = JournalFileSymlinkLock(file_path)  # Optuna's default lock for this backend
        super().__init__(file_path, lock_obj=self.lock)

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        text = "".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs).encode("utf-8")
        self.lock.acquire()
        try:
            with open(self.path, "r+b") as fh:
                _cut_half_written_tail(fh)
                fh.seek(0, os.SEEK_END)
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
        finally:
            self.lock.release()


def _cut_half_written_tail(fh: Any, chunk: int = 1 << 16) -> int:
    """Truncate an open file after its last newline; returns the bytes cut (0 when it ends in one)."""
    size = fh.seek(0, os.SEEK_END)
    end = size
    while end > 0:
        start = max(0, end - chunk)
        fh.seek(start)
        block = fh.read(end - start)
        if end == size and block.endswith(b"\n"):
            return 0
        i = block.rfind(b"\n")
        if i >= 0:
            fh.truncate(start + i + 1)
            return size - (start + i + 1)
        end = start
    fh.truncate(0)
    return size


def _identity(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def _is_unreachable(exc: BaseException) -> bool:
    """An error of the connection to a database server (it went away), not of what was asked."""
    try:
        import sqlalchemy.exc
    except ImportError:  # pragma: no cover
        return False
    for e in (exc, exc.__cause__, exc.__context__):
        if isinstance(e, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)) or (
            isinstance(e, sqlalchemy.exc.DBAPIError) and e.connection_invalidated):
            text = _first_line(e).lower()
            if not any(s in text for s in ("readonly", "read-only", "disk is full", "no such table", "unable to open")):
                return True
    return False


#: A database server's connections per process: one kept open (the loop's reads and writes, one at a time), and up to
#: POOL_OVERFLOW more opened only while a second thread needs one at the same moment (the heartbeat, every 10 s), then
#: closed. SQLAlchemy's default keeps up to 5 open: each worker held 2 (loop and heartbeat), and 64 workers 128
#: connections, past PostgreSQL's default max_connections of 100 (benchmarks/fleet_scale.py).
POOL_SIZE = 1
POOL_OVERFLOW = 4


def _engine_kwargs(url: str, read_only: bool = False) -> dict[str, Any]:
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 60}}
    pool = {"pool_pre_ping": True, "pool_size": POOL_SIZE, "max_overflow": POOL_OVERFLOW}
    if url.startswith("postgresql"):
        args: dict[str, Any] = {"connect_timeout": 10}
        if read_only:
            args["options"] = "-c default_transaction_read_only=on"
        return {"connect_args": args, **pool}
    return pool


def _with_installed_driver(url: str) -> str:
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


def kind(fingerprint: Mapping[str, Any]) -> str:
    """A short name for a hardware kind (device model, count, CPU vector ISA, torch), for per-kind study names."""
    import re as _re

    name = str(fingerprint.get("device_name") or fingerprint.get("cpu_model") or "unknown")
    count = fingerprint.get("device_count") or 1
    if fingerprint.get("device_type") == "cuda" and count > 1:
        name = f"{count}x-{name}"
    if fingerprint.get("device_type") != "cuda":
        isa = f"-{fingerprint['cpu_capability']}" if fingerprint.get("cpu_capability") else ""
        name = f"cpu-{name}-{fingerprint.get('cpu_count')}c{isa}"
    torch_version = str(fingerprint.get("torch") or "").split("+")[0]
    slug = _re.sub(r"[^a-z0-9.]+", "-", f"{name}-torch{torch_version}".lower()).strip("-")
    return slug[:80]


def _wait_until_described(study: optuna.Study) -> None:
    """Another process may have created the study an instant ago and still be writing its attributes
    (Optuna cannot create a study with them at once): give an empty study a moment to get them."""
    deadline = time.monotonic() + DESCRIBE_WAIT_S
    while "created_at" not in study.user_attrs and time.monotonic() < deadline and not study.get_trials(deepcopy=False):
        time.sleep(0.1)


def check_matches(study: optuna.Study, attrs: Mapping[str, Any], shown: str) -> None:
    """Refuse a run whose space, fingerprint, workload or device differ from the stored study's."""
    stored = study.user_attrs
    if "fingerprint" not in stored:
        raise StudyError(f"study {study.study_name!r} in {shown} was not made by autotune; choose another --study name")
    if len(study.directions) != 2:
        raise StudyError(f"study {study.study_name!r} has {len(study.directions)} objectives; autotune studies have 2")
    new_name = f"{study.study_name}-2"
    how = f"start a new study with --study {new_name} (or another --storage)"
    problems: list[str] = []
    if stored.get("space_hash") != attrs.get("space_hash"):
        problems.append(f"the search space differs from the study's ({stored.get('space', {}).get('path')})")
    diffs = hardware.differences(stored["fingerprint"], attrs["fingerprint"])
    if diffs:
        problems.append("the hardware/software differ: " + "; ".join(diffs))
    for key in ("workload", "device", "global_batch"):
        if key in attrs and stored.get(key) != attrs.get(key):
            problems.append(f"the {key} differs: {stored.get(key)} (stored) vs {attrs.get(key)} (this run)")
    if problems:
        raise StudyError(
            f"study {study.study_name!r} was made for another setup, and results are never mixed: "
            + "; ".join(problems)
            + f". To keep both, {how}."
        )
