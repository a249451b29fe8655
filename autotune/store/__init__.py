"""The stored study: the one place a storage URL becomes a store, and the only code that knows how studies are stored.

- :class:`Store` (:mod:`.base`; its parts :mod:`.connection`, :mod:`.studies`, :mod:`.views`): a URL opened once per
  process (:func:`open`), read-only for the commands that only read, its faults turned into one
  :class:`autotune.errors.StorageError`;
  one module per backend (:mod:`.sqlite`, :mod:`.server`, :mod:`.journal`), after Optuna's
  ``storages/``; passwords masked in :mod:`.secrets`, study names checked in :mod:`.names`.
- the stored format (:mod:`.records`): typed trials and records, their keys, readers and writers;
  :class:`StoredStudy` is the one view of a study every read command shows and every figure is
  computed from; :class:`LiveStudy` (:mod:`.live`) the handle the tuning loop writes through.
- the one-pass read (:mod:`.reading`), Optuna's trial cache filled by it (:mod:`.cache`), and
  claims' owners, heartbeats and recovery of stale trials (:mod:`.recovery`).

Every ``user_attrs`` key and every private Optuna name the project uses lives in this package
(tests/test_store_owner.py holds it so; docs/storage.md lists the private names and why).

Importing the package imports no Optuna: a read-only store reads a database's tables into typed
records without it (:mod:`.tables`); :class:`LiveStudy` and ``DIRECTIONS`` import it when first
asked for, and the store wherever it builds an Optuna storage or study.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.store.base import Store
from autotune.store.matching import check_matches
from autotune.store.names import NAME_CHARS, STUDIES_DIR, check_name, default_url, kind
from autotune.store.plans import ConfirmRecord, ConfirmStop, RaceRecord, RaceStop
from autotune.store.records import Block, Remeasurement, StoredStudy, StoredTrial
from autotune.store.secrets import MASK, redact, redact_message
from autotune.store.studies import METRICS

if TYPE_CHECKING:
    from autotune.store.live import LiveStudy


def open(url: str, *, read_only: bool = False) -> Store:  # noqa: A001 - the package's verb, as sqlite3.connect
    """The process's store for ``url``: the same :class:`Store` for every call with the same URL."""
    return Store.open(url, read_only=read_only)


def __getattr__(name: str) -> Any:
    """What needs Optuna, imported when first asked for: a read command imports no Optuna."""
    if name == "LiveStudy":
        from autotune.store.live import LiveStudy

        return LiveStudy
    if name == "DIRECTIONS":
        from autotune.store import studies

        return studies.DIRECTIONS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Block", "DIRECTIONS", "LiveStudy", "MASK", "METRICS", "NAME_CHARS", "ConfirmRecord", "ConfirmStop",
           "RaceRecord", "RaceStop", "Remeasurement", "STUDIES_DIR", "Store",
           "StoredStudy", "StoredTrial", "check_matches", "check_name", "default_url", "kind", "open", "redact",
           "redact_message"]
