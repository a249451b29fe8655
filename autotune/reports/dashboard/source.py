"""The page's rows: a :class:`Snapshot` of the stored study as plain rows, and the text helpers every part shares.

The study is read once by the command (:class:`autotune.store.StoredStudy`: its description
and typed trials); the snapshot turns each of its trials into one tolerant, JSON-able row (odd
or missing values never break a page) for the info functions. A measured configuration's
samples/s and speed-up in that row are the evidence's (``evidence_of(study)``:
:mod:`autotune.evidence`), the same figures status, export and the run's summary show. The
escaping helpers live here because the data, the figures and the page all put user strings
into HTML or plotly text.
"""

from __future__ import annotations

import collections.abc
import html
import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from autotune import knobs
from autotune.knobs import space as spaces
from autotune.evidence import efficiency
from autotune.evidence import Evidence, evidence_of
from autotune.result import OK
from autotune.store import StoredStudy, StoredTrial
from autotune.store.records import Role



# ---------------------------------------------------------------- the study, read once


@dataclass
class Snapshot:
    """The stored study (``study``), one plain row per trial, and the front.

    Every ``*_info`` function takes a :class:`autotune.store.StoredStudy` or a snapshot of one; the
    page builds one snapshot and hands it to all of them.
    """

    study: StoredStudy = field(repr=False)
    rows: list[dict[str, Any]]
    front: list[int]  # numbers of the front trials, by samples/s, fastest first
    defaults: dict[str, Any] = field(default_factory=dict)
    context: knobs.Context | None = field(repr=False, default=None)  # the machine the study ran on
    # The stored space's values as they applied on that machine (threads within its CPUs, ...); None when unknown.
    values_here: dict[str, list[Any]] | None = field(repr=False, default=None)

    @classmethod
    def of(cls, study: StoredStudy | Snapshot) -> Snapshot:
        return study if isinstance(study, Snapshot) else snapshot(study)

    @property
    def name(self) -> str:
        return self.study.name

    @property
    def evidence(self) -> Evidence:
        return evidence_of(self.study)  # type: ignore[no-any-return]

    def by_number(self) -> dict[int, dict[str, Any]]:
        return {r["number"]: r for r in self.rows}

    def measured_ok(self) -> list[dict[str, Any]]:
        """Trials that measured a configuration successfully (no cache answers)."""
        return [
            r for r in self.rows if r["outcome"] == OK and r["duplicate_of"] is None and r["samples_per_s"] is not None
        ]

    def baseline(self) -> dict[str, Any] | None:
        for r in self.measured_ok():
            if r["role"] == Role.BASELINE:
                return r
        return None

    def recommended(self) -> dict[str, Any] | None:
        """The recommendation (:meth:`Evidence.recommended`: the verdict's winner, or the defaults when nothing beats
        them beyond the noise); None before the baseline is measured. The dashboard labels it on the front."""
        number = self.evidence.recommended()
        return self.by_number().get(number) if number is not None else None

    def best(self) -> dict[str, Any] | None:
        """The header's "speed-up" card: the recommendation (:meth:`recommended`)."""
        return self.recommended()


def snapshot(study: StoredStudy) -> Snapshot:
    """The stored study as a :class:`Snapshot`."""
    context = _context(study)
    defaults = knobs.defaults(context)
    seen: dict[Any, tuple[dict[str, Any], dict[str, str]]] = {}  # one config and changes per configuration
    rows = [_row(t, defaults, seen) for t in study.trials]
    ev = evidence_of(study)
    for r in rows:
        # Every figure of a measured configuration is the evidence's (autotune/evidence/):
        # the same samples/s and speed-up as status, export and the run's summary.
        if r["number"] in ev.configs and r["duplicate_of"] is None and r["outcome"] == OK:
            s = ev.speedup(r["number"])
            r["first_samples_per_s"] = r["samples_per_s"]
            r["samples_per_s"] = ev.samples_per_s(r["number"])
            fig = efficiency.figure(study, r["number"])  # the MFU of the figure shown, as every view computes it
            r["mfu"] = fig.mfu if fig is not None else None
            r["processes"] = ev.configs[r["number"]].processes
            r["speedup"] = s.estimate if s else None
            r["speedup_text"] = s.text() if s else "-"
    front = ev.front()
    here = _values_here(study, context, defaults)
    return Snapshot(study, rows, front, defaults, context, here)


def _context(study: StoredStudy) -> knobs.Context | None:
    """The machine the study ran on, as knobs see it: its stored context, else its fingerprint's CPU count."""
    ctx = None
    context = study.context
    if isinstance(context, Mapping) and context:
        try:
            ctx = knobs.Context.from_dict(context)
        except Exception:  # noqa: BLE001 - an older or foreign context: fall back below
            ctx = None
    if ctx is None:
        fingerprint = study.fingerprint if isinstance(study.fingerprint, Mapping) else {}
        cpus = finite(fingerprint.get("cpu_count"))
        ctx = knobs.Context(cpu_count=int(cpus)) if cpus else None
    return ctx


def _values_here(
    study: StoredStudy, ctx: knobs.Context | None, defaults: Mapping[str, Any]
) -> dict[str, list[Any]] | None:
    """Each knob's values in the stored space as it applied on the study's machine
    (:func:`autotune.knobs.space.effective`: ``threads = [1, 2, 4, 8, 16]`` is 1 and 2 on 2 CPUs); a knob it left out
    is absent. None when not known."""
    stored = study.space
    if ctx is None or not isinstance(stored, Mapping) or not isinstance(stored.get("search"), Mapping):
        return None
    try:
        fitted = spaces.effective(spaces.Space.from_dict(stored), ctx, defaults)
    except Exception:  # noqa: BLE001 - an older or foreign space: the stored values are shown as they are
        return None
    return {name: dim.values() for name, dim in fitted.search.items()}


_MAP = collections.abc.Mapping  # isinstance against typing.Mapping costs as much again, 4 times a row


def _row(
    t: StoredTrial, defaults: Mapping[str, Any], seen: dict[Any, tuple[dict[str, Any], dict[str, str]]] | None = None
) -> dict[str, Any]:
    """One trial as plain data; tolerant of missing or malformed values.

    ``seen``: the plain configuration and its changes by configuration, shared by the rows of trials that ran the same
    one (a study of 100,000 trials has a few thousand): read only, as every row is."""
    result = t.result if isinstance(t.result, _MAP) else {}
    whole = getattr(result, "whole", None)  # a lazy result (autotune.store): its dict, read once, 7 lookups a row
    result = whole() if callable(whole) else result
    config = t.config if isinstance(t.config, _MAP) and t.config else dict(t.params)  # none yet: its parameters
    try:
        key: Any = tuple(config.items()) if seen is not None else None
        shared = seen.get(key) if seen is not None else None
    except TypeError:  # a value that cannot be a key (a list): this row's own copy
        key, shared = None, None
    if shared is None:
        shared = ({str(k): jsonable(v) for k, v in config.items()}, _changes(config, defaults))
        if key is not None and seen is not None:
            seen[key] = shared
    error = t.error or {}
    outcome = str(t.outcome or _outcome_from_state(t))
    values = list(t.values) if t.values is not None else []
    ok = outcome == OK
    speed = finite(result.get("samples_per_s"))
    peak = finite(result.get("peak_memory_bytes"))
    if ok and speed is None and values:
        speed = finite(values[0])
    if ok and peak is None and len(values) > 1:
        peak = finite(values[1])
    profile = result.get("profile")
    profile = profile if isinstance(profile, _MAP) else {}
    duplicate_of = t.duplicate_of
    return {
        "number": t.number,
        "state": t.state.upper(),
        "outcome": outcome,
        "role": str(t.role or Role.SEARCH),
        "config": shared[0],
        "changes": shared[1],
        "duplicate_of": int(duplicate_of) if isinstance(duplicate_of, (int, float)) else None,
        "feasible": all((finite(c) or 0.0) <= 0.0 for c in t.constraints.values()),
        "samples_per_s": speed,
        "samples_per_s_cv": finite(result.get("samples_per_s_cv")),
        "peak_memory_bytes": peak,
        "mfu": finite(result.get("mfu")),
        "time_to_first_step_s": finite(result.get("time_to_first_step_s")),
        "duration_s": finite(t.duration_s),
        "error_type": str(error.get("type") or ""),
        "error_message": str(error.get("message") or ""),
        "profile": profile,  # as stored (not copied: read only for the front's trials, through finite)
    }


def _outcome_from_state(t: StoredTrial) -> str:
    if t.state == "complete":
        return OK if t.values else "unknown"
    return {"fail": "error"}.get(t.state, t.state)


def finite(x: Any) -> float | None:
    """A finite float, or None."""
    kind = type(x)
    if kind is float:  # most numbers: 16 a trial
        return x if math.isfinite(x) else None
    if kind is int:
        x = float(x)
        return x if math.isfinite(x) else None
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


_SCALARS = (str, int, bool, type(None))  # exact types: returned as they are, without the costlier checks below


def jsonable(x: Any) -> Any:
    """JSON-able copy of stored data (it already is, unless someone stored odd floats)."""
    kind = type(x)
    if kind in _SCALARS:  # most of a configuration: 14 values a trial, 1.4 million checks at 100,000 trials
        return x
    if kind is float:
        return x if math.isfinite(x) else None
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    return str(x)


def format_value(name: str, value: Any) -> str:
    """A knob value as text (``on``/``off`` for switches); unknown knobs print as they are."""
    knob = knobs.KNOBS.get(name)
    try:
        return knob.format(value) if knob else str(value)
    except Exception:  # noqa: BLE001
        return str(value)


def _changes(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, str]:
    """Knob -> value text, for the knobs whose value differs from PyTorch's default."""
    return {str(k): format_value(str(k), v) for k, v in config.items() if k not in defaults or defaults[k] != v}


def config_text(changes: Mapping[str, str]) -> str:
    """``k=v k=v`` of the knobs that differ from the defaults, or ``defaults``."""
    return " ".join(f"{k}={v}" for k, v in changes.items()) or "defaults"


def plotly_text(text: Any) -> str:
    """Text for plotly labels and hovers (plotly renders a subset of HTML, so escape)."""
    return html.escape(str(text), quote=False)


def html_text(text: Any) -> str:
    """Text for the HTML page."""
    return html.escape(str(text), quote=True)


def script_json(data: Any) -> str:
    """JSON that is safe inside a ``<script>`` element: no ``<``, ``>`` or ``&`` survive."""
    text = data if isinstance(data, str) else json.dumps(data, allow_nan=False, default=str)
    for raw, safe in (
        ("&", "\\u0026"),
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, safe)
    return text


def memory_unit(max_bytes: float) -> tuple[str, float]:
    """The unit to show memory in, up to ``max_bytes``, and its size in bytes."""
    for unit, size in (("GiB", 1024.0**3), ("MiB", 1024.0**2), ("KiB", 1024.0)):
        if max_bytes >= size:
            return unit, size
    return "B", 1.0


def speedup_text(x: float | None) -> str:
    """A speed-up ratio as the dashboard shows it (``×1.23``; ``-`` for none)."""
    return "-" if x is None else f"×{x:.2f}"


def wrap_changes(changes: Mapping[str, str], per_line: int = 3) -> str:
    """Changes for a hover, a few per line, escaped."""
    items = [plotly_text(f"{k}={v}") for k, v in changes.items()]
    if not items:
        return "defaults"
    return "<br>".join(" ".join(items[i : i + per_line]) for i in range(0, len(items), per_line))


def searched_knobs(study: StoredStudy | Snapshot) -> list[str]:
    """The knobs the study searched: ``space.search``, else the sampled params, else the config values that vary."""
    snap = Snapshot.of(study)
    space = snap.study.space
    search = space.get("search") if isinstance(space, Mapping) else None
    if isinstance(search, Mapping) and search:
        names = [str(n) for n in search]
        if snap.values_here is not None:
            # Knobs not searched on the study's machine (bf16 left out where the CPU has none) only if they vary.
            names = [n for n in names if n in snap.values_here or len(_observed(snap, n)) > 1]
    else:
        names = sorted({p for t in snap.study.trials for p in t.params})
        if not names:
            seen: dict[str, set[str]] = {}
            for r in snap.measured_ok():
                for k, v in r["config"].items():
                    seen.setdefault(k, set()).add(json.dumps(v, sort_keys=True))
            names = [k for k, vals in seen.items() if len(vals) > 1]
    order = {n: i for i, n in enumerate(knobs.NAMES)}
    return sorted(names, key=lambda n: (order.get(n, len(order)), n))


def _observed(snap: Snapshot, name: str) -> set[str]:
    return {json.dumps(knob_value(snap, r, name), sort_keys=True, default=str) for r in snap.measured_ok()}


def value_order(snap: Snapshot, name: str, observed: Iterable[Any]) -> list[Any]:
    """A knob's values in a sensible order: the space's choices (those that applied on the study's machine), the
    registry's, else sorted; then any other value a trial ran with."""
    if snap.values_here is not None and not is_range(snap, name):
        return _with_extra(list(snap.values_here.get(name, [])), observed)
    space = snap.study.space
    spec = (
        space.get("search", {}).get(name)
        if isinstance(space, Mapping) and isinstance(space.get("search"), Mapping)
        else None
    )
    choices: list[Any] = []
    if isinstance(spec, Mapping) and isinstance(spec.get("choices"), list):
        choices = list(spec["choices"])
    elif name in knobs.KNOBS and knobs.KNOBS[name].choices:
        choices = list(knobs.KNOBS[name].choices or ())
    return _with_extra(choices, observed)


def _with_extra(choices: list[Any], observed: Iterable[Any]) -> list[Any]:
    extra: list[Any] = []
    for v in observed:
        if v not in choices and v not in extra:
            extra.append(v)
    try:
        extra.sort()
    except TypeError:
        extra.sort(key=str)
    return choices + extra


def is_range(snap: Snapshot, name: str) -> bool:
    """True when the knob was searched over an integer range (else over a list of choices)."""
    space = snap.study.space
    search = space.get("search") if isinstance(space, Mapping) else None
    spec = search.get(name) if isinstance(search, Mapping) else None
    if isinstance(spec, Mapping):
        return "choices" not in spec
    return name in knobs.KNOBS and knobs.KNOBS[name].is_range


def range_here(snap: Snapshot, name: str) -> tuple[float, float] | None:
    """A range knob's bounds as searched on the study's machine (``threads``: 1 to its CPUs); None when unknown."""
    values = (snap.values_here or {}).get(name)
    numbers = [float(v) for v in values or () if finite(v) is not None]
    return (min(numbers), max(numbers)) if numbers else None


def join(parts: Iterable[str | None], sep: str = ", ") -> str:
    """The non-empty parts joined: never a leading, trailing or doubled separator."""
    return sep.join(p.strip() for p in parts if p and p.strip())


def knob_value(snap: Snapshot, row: Mapping[str, Any], name: str) -> Any:
    """A row's value of a knob: its configuration's, else the study's default."""
    if name in row["config"]:
        return row["config"][name]
    return snap.defaults.get(name)


