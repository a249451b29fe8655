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
other is read through Optuna's storage, which says why it cannot when it cannot. Study names
come from a safe set (:func:`autotune.store.names.check_name`),
checked before any file is touched.

A storage that refuses a write (a read-only file or folder, a full disk, a file deleted
under a running study, a database server gone) becomes one :class:`StorageError` that
names the cause and the fix (:meth:`Store.fault`), never a traceback. See docs/storage.md.

A :class:`Store` is built of parts, one per kind of question its callers ask: the storage opened and its faults
(:class:`.connection.Connection`), the studies it holds (:class:`.studies.Studies`) and the views kept on them
(:class:`.views.KeptViews`); this module opens one store per URL.
"""

from __future__ import annotations

import os

from autotune.store.names import default_url
from autotune.store.views import KeptViews


class Store(KeptViews):
    """One storage, opened once per process (:meth:`open`), passed to whatever reads or writes studies.

    ``read_only``: for the commands that only read; such a store creates nothing, and a
    SQLite file or journal that does not exist is an empty store (``load`` says no study).
    """

    _open: dict[tuple[str, bool], Store] = {}

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

