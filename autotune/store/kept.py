"""A study's views kept with it: what the read commands show, stored once by the run that wrote it last.

A read command's figures depend on every trial (the front, the configurations measured more
than once, the failures), so reading them costs in proportion to the study: a 10,000-trial
``status`` read 10,000 trials to print one table, and ``list`` over a year of nightly
studies read every trial of every study. Yet a study nobody is running does not change. So the
run that stops last (:meth:`autotune.tuning.preparation.Prepared.run`) computes the views as every read
command computes them (:mod:`autotune.reports.view`) and keeps them on the study, as the user attribute
:data:`KEPT`, with the study's key at that moment (:func:`keys_of`). A read command reads the part
of the attribute it shows and the key (one aggregate query over the trials, and the study's
attributes it reads anyway) and shows the kept views only while the key is the same; otherwise it
reads the trials and computes them, as it always did. Nothing is ever shown from a kept view that
the study has outgrown: the figures are the same to the digit either way (tests/test_kept.py).

The key holds what can change a view:

- the trials: how many there are in each state, the last trial's id and the last completion
  time. A finished trial never changes in Optuna's storages (the storage refuses a write to
  one), a waiting trial changes only by starting, and a running trial changes as it runs: a
  study with a running trial has no key (its views are computed each time);
- the study's own attributes but the kept views themselves (its records: re-measurements,
  races, sessions; a hash of their JSON), and how many system attributes it has;
- :data:`FORMAT` and autotune's version: a kept view written by another version is not shown.

A large study's dashboard page is kept too, as drawn (:func:`autotune.reports.dashboard.draw`; compressed:
:func:`pack`), in an attribute of its own (:data:`PAGE`, with the same key) that only ``dashboard``
reads: drawing a 100,000-trial page took most of the command's time.

Only a database read directly (:mod:`.tables`: SQLite files and PostgreSQL servers on the schema
it knows) has a key; a journal file is replayed whole by every read anyway, and its views are
computed each time, as are an in-memory database's.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from typing import Any, Mapping

from autotune._version import __version__

KEPT = "view:kept"  # the study user attribute that holds the kept views
PAGE = "view:kept:page"  # ... and the one that holds a large study's dashboard page (read by `dashboard` only)
FORMAT = 1  # the layout of the kept views (raised when what they hold changes shape)
UNFINISHED = ("RUNNING",)  # states whose trials still change


def attrs_hash(attrs: Mapping[str, Any]) -> str:
    """The study's attributes, less the kept views, as one hash (the same for Optuna's read and the direct one)."""
    text = json.dumps({k: v for k, v in attrs.items() if not k.startswith(KEPT)}, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()


def keys_of(raw: Any, attrs: Mapping[int, Mapping[str, Any]]) -> dict[int, list[Any] | None]:
    """Each study's key through ``raw`` (a driver's own connection), by id (``attrs``: the studies' attributes by
    id); None for a study while a trial of it runs. One query over the trials of them all."""
    ids = ",".join(str(int(i)) for i in attrs) or "NULL"
    cur = raw.cursor()
    try:
        cur.execute("SELECT study_id, state, count(*), max(trial_id), max(datetime_complete) FROM trials "
                    f"WHERE study_id IN ({ids}) GROUP BY study_id, state ORDER BY study_id, state")
        trials = cur.fetchall()
        cur.execute(f"SELECT study_id, count(*) FROM study_system_attributes WHERE study_id IN ({ids}) "
                    "GROUP BY study_id")
        system = {int(sid): int(n) for sid, n in cur.fetchall()}
    finally:
        cur.close()
        raw.rollback()
    states: dict[int, list[list[Any]]] = {int(i): [] for i in attrs}
    for sid, state, n, last, done in trials:
        states[int(sid)].append([str(getattr(state, "name", state)), int(n), int(last),
                                 None if done is None else str(done)])
    return {sid: None if any(s[0] in UNFINISHED for s in rows) else
            [FORMAT, __version__, rows, system.get(sid, 0), attrs_hash(attrs[sid])] for sid, rows in states.items()}


def parts_query(dialect: str, ids: str, parts: tuple[str, ...], attr: str = KEPT) -> str:
    """The query of the parts ``parts`` (dotted paths) of each study's kept views, as JSON text, where the database
    reads JSON."""
    if dialect == "sqlite":  # (json_quote: JSON text whatever the part is, as json_extract gives a string unquoted)
        cols = "".join(f", json_quote(json_extract(value_json, '$.{p}'))" for p in parts)
    else:  # PostgreSQL
        cols = "".join(f", (value_json::json #> '{{{','.join(p.split('.'))}}}')::text" for p in parts)
    return f"SELECT study_id{cols} FROM study_user_attributes WHERE key = '{attr}' AND study_id IN ({ids})"


def pack(text: str) -> str:
    """A page's text as it is kept: compressed, as JSON can hold it (a 100,000-trial page: 5 MB to about 2)."""
    return base64.b64encode(zlib.compress(text.encode(), 6)).decode("ascii")


def unpack(packed: str) -> str:
    return zlib.decompress(base64.b64decode(packed)).decode()


def part(views: Any, path: str) -> Any:
    """The part ``path`` (dotted: ``exports.fastest``) of a whole kept record (None where there is none)."""
    for name in path.split("."):
        views = views.get(name) if isinstance(views, Mapping) else None
    return views


def valid(views: Mapping[str, Any] | None, key: list[Any] | None) -> dict[str, Any] | None:
    """The kept views (those parts of them read) when they were kept at ``key`` (the study's key now), else None."""
    if key is None or not isinstance(views, Mapping) or views.get("key") != key:
        return None
    return dict(views)
