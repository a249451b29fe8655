"""Every trial of a study, read in one pass: what makes the read commands quick on studies of 10,000 trials.

Optuna's ``get_trials`` on a database builds every row of every trial table as an ORM
object: a 10,000-trial study is ~200,000 objects and took 3-6 s here on SQLite, more than
all the figures computed from them. This module reads the same tables with one plain
query each (trials, values, parameters, user and system attributes, intermediate values)
and builds the same :class:`optuna.trial.FrozenTrial` objects through Optuna's public
constructor: 0.5 s for those 10,000 trials.

It depends on Optuna's table layout, which Optuna versions with ``version_info.schema_version``:
the quick path runs only on the schema it was written and tested against (:data:`SCHEMA`);
any other, and every journal or in-memory storage, is read through Optuna's public
``get_all_trials``. tests/test_reading.py holds the quick path equal to Optuna's own read on
SQLite and PostgreSQL, so an Optuna upgrade that changes the layout fails there first.
It only reads: a read-only store stays read-only.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import math
from typing import Any

import optuna
from optuna.distributions import json_to_distribution
from optuna.trial import FrozenTrial, TrialState

SCHEMA = 12  # Optuna's RDB schema version (optuna.storages._rdb.models.SCHEMA_VERSION) this reader knows

_INF = {"INF_POS": math.inf, "INF_NEG": -math.inf, "NAN": math.nan}


def all_trials(storage: optuna.storages.BaseStorage, study_id: int) -> list[FrozenTrial]:
    """Every trial of the study, by number, never deep-copied (the same objects Optuna's read would build)."""
    if isinstance(storage, optuna.storages.RDBStorage) and _schema(storage) == SCHEMA:
        return _rdb_trials(storage, study_id)
    return storage.get_all_trials(study_id, deepcopy=False)


def _schema(storage: optuna.storages.RDBStorage) -> int | None:
    import sqlalchemy

    with storage.engine.connect() as conn:
        try:
            row = conn.execute(sqlalchemy.text("SELECT schema_version FROM version_info")).first()
        except sqlalchemy.exc.DBAPIError:
            return None
    return int(row[0]) if row else None


@functools.lru_cache(maxsize=4096)
def _distribution(text: str) -> optuna.distributions.BaseDistribution:
    return json_to_distribution(text)


def _datetime(value: Any) -> dt.datetime | None:
    """SQLite's driver hands back the text SQLAlchemy stored (naive, like Optuna's own read); a server's, a datetime."""
    return dt.datetime.fromisoformat(value) if isinstance(value, str) else value


def _value(value: float | None, kind: Any) -> float:
    name = getattr(kind, "name", kind)
    return float(value) if name == "FINITE" else _INF[name]  # type: ignore[arg-type]


def _rdb_trials(storage: optuna.storages.RDBStorage, study_id: int) -> list[FrozenTrial]:
    # The driver's own cursor: SQLAlchemy's result rows cost as much again as the query for 200,000 rows.
    ids = f"SELECT trial_id FROM trials WHERE study_id = {int(study_id)}"
    raw = storage.engine.raw_connection()
    try:
        cur = raw.cursor()
        # One snapshot for every statement: workers keep writing while a fleet's study is read.
        dialect = storage.engine.dialect.name
        if dialect == "sqlite":
            cur.execute("BEGIN")  # Python's sqlite3 opens no transaction for reads on its own
        elif dialect == "postgresql":
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")

        def rows(sql: str) -> list[Any]:
            cur.execute(sql)
            return list(cur.fetchall())

        trials = rows("SELECT trial_id, number, state, datetime_start, datetime_complete FROM trials "
                      f"WHERE study_id = {int(study_id)} ORDER BY trial_id")
        values = rows(f"SELECT trial_id, objective, value, value_type FROM trial_values WHERE trial_id IN ({ids})")
        params = rows(f"SELECT trial_id, param_name, param_value, distribution_json FROM trial_params "
                      f"WHERE trial_id IN ({ids}) ORDER BY param_id")
        user = rows(f"SELECT trial_id, key, value_json FROM trial_user_attributes WHERE trial_id IN ({ids})")
        system = rows(f"SELECT trial_id, key, value_json FROM trial_system_attributes WHERE trial_id IN ({ids})")
        steps = rows("SELECT trial_id, step, intermediate_value, intermediate_value_type FROM trial_intermediate_values "
                     f"WHERE trial_id IN ({ids})")
        cur.close()
    finally:
        raw.rollback()  # it wrote nothing: end the snapshot
        raw.close()  # back to the engine's pool

    by_id: dict[int, dict[str, Any]] = {
        tid: {"values": {}, "params": {}, "distributions": {}, "user": {}, "system": {}, "steps": {}} for tid, *_ in trials}
    # (Without a snapshot, as on MySQL, a trial created after the first statement has rows in the later ones:
    # left out, as is the trial itself; a next read has it whole.)
    values = [r for r in values if r[0] in by_id]
    params = [r for r in params if r[0] in by_id]
    user = [r for r in user if r[0] in by_id]
    system = [r for r in system if r[0] in by_id]
    steps = [r for r in steps if r[0] in by_id]
    for tid, objective, value, kind in values:
        by_id[tid]["values"][objective] = _value(value, kind)
    for tid, name, internal, dist_json in params:
        dist = _distribution(dist_json)
        by_id[tid]["params"][name] = dist.to_external_repr(internal)
        by_id[tid]["distributions"][name] = dist
    # One decode of all the attributes at once: 90,000 json.loads calls cost a third again in call overhead.
    for table, part in ((user, "user"), (system, "system")):
        decoded = json.loads("[" + ",".join(raw for _, _, raw in table) + "]") if table else []
        for (tid, key, _), value in zip(table, decoded):
            by_id[tid][part][key] = value
    for tid, step, value, kind in steps:
        by_id[tid]["steps"][step] = _value(value, kind)

    out = []
    for tid, number, state, start, complete in trials:
        parts = by_id[tid]
        vals = parts["values"]
        out.append(FrozenTrial(
            number=number,
            state=state if isinstance(state, TrialState) else TrialState[state],
            value=None,
            values=[vals[i] for i in range(len(vals))] if vals else None,
            datetime_start=_datetime(start),
            datetime_complete=_datetime(complete),
            params=parts["params"],
            distributions=parts["distributions"],
            user_attrs=parts["user"],
            system_attrs=parts["system"],
            intermediate_values=parts["steps"],
            trial_id=tid,
        ))
    out.sort(key=lambda t: t.number)
    return out
