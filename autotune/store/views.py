"""The views kept on a study (:mod:`.kept`), read and written through a store.

Why a module of its own: the read commands ask a store for a study's kept views (``status``, ``list``, the
dashboard's page) before they read its trials, and a run keeps them once it has drawn them; :class:`KeptViews` is
that part of :class:`autotune.store.Store`, over its studies (:class:`autotune.store.studies.Studies`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping

from autotune.store import kept as keeping
from autotune.store import server
from autotune.store.tables import Tables
from autotune.store.records import StoredStudy
from autotune.store.studies import Studies


class KeptViews(Studies):
    """A study's kept views, where they hold for the study as it is now (a part of :class:`autotune.store.Store`)."""

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
