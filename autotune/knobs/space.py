"""Search spaces: TOML files that say which knobs are searched over which values, and which are fixed.

A space file has two tables::

    [search]
    precision = ["fp32", "bf16"]                      # candidate values
    batch_size = { low = 16, high = 256, step = 16 }  # an integer range

    [fixed]
    cudnn_benchmark = true

Everything is validated against the knob registry on load; errors name the file
and the knob (or the line, for TOML syntax). ``--space NAME`` finds
``search_spaces/NAME.toml`` in the working folder, else the built-in ``NAME.toml``
shipped inside the package (``SPACES_DIR``, ``autotune/search_spaces/``; the
repository's top-level ``search_spaces/`` is a link to it); ``--space PATH`` reads any file.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

if TYPE_CHECKING:  # imported where a distribution is made: a read command's ceiling needs no Optuna
    import optuna

from autotune import knobs
from autotune.errors import KnobError, SpaceError
from autotune.request import option

SPACES_DIR = Path(__file__).resolve().parents[1] / "search_spaces"  # autotune/search_spaces: package data, in the wheel


@dataclass(frozen=True)
class Dimension:
    """One searched knob: a list of choices or an integer range."""

    knob: str
    choices: tuple[Any, ...] | None = None
    low: int | None = None
    high: int | None = None
    step: int = 1

    def to_dict(self) -> dict[str, Any]:
        if self.choices is not None:
            return {"choices": list(self.choices)}
        return {"low": self.low, "high": self.high, "step": self.step}

    def values(self) -> list[Any]:
        if self.choices is not None:
            return list(self.choices)
        assert self.low is not None and self.high is not None
        return list(range(self.low, self.high + 1, self.step))

    def distribution(self) -> optuna.distributions.BaseDistribution:
        import optuna

        if self.choices is not None:
            return optuna.distributions.CategoricalDistribution(list(self.choices))
        assert self.low is not None and self.high is not None
        return optuna.distributions.IntDistribution(self.low, self.high, step=self.step)

    def contains(self, value: Any) -> bool:
        if self.choices is not None:
            return value in self.choices
        assert self.low is not None and self.high is not None
        return isinstance(value, int) and self.low <= value <= self.high and (value - self.low) % self.step == 0

    def with_value(self, value: Any) -> Dimension:
        """This dimension widened so that ``value`` is a candidate (the baseline must be measurable)."""
        if self.contains(value):
            return self
        if self.choices is not None:
            return Dimension(self.knob, self.choices + (value,))
        return Dimension(self.knob, tuple(dict.fromkeys([*self.values(), value])))


@dataclass(frozen=True)
class Space:
    name: str
    path: str
    search: dict[str, Dimension] = field(default_factory=dict)
    fixed: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": self.path,
            "search": {k: d.to_dict() for k, d in self.search.items()},
            "fixed": dict(self.fixed),
        }

    def hash(self) -> str:
        """Identity of the space's content (not of where the file lies)."""
        body = json.dumps({"search": self.to_dict()["search"], "fixed": self.fixed}, sort_keys=True, default=str)
        return hashlib.sha256(body.encode()).hexdigest()[:16]

    def size(self) -> int:
        n = 1
        for dim in self.search.values():
            n *= len(dim.values())
        return n

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Space:
        return parse(d, d.get("path", "<stored>"), d.get("name", "stored"))


def find(name_or_path: str) -> Path:
    """``default`` -> ./search_spaces/default.toml, else the built-in default.toml; a path is taken as it is."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or candidate.exists() or "/" in name_or_path:
        if candidate.is_dir():
            raise SpaceError(f"{option('space', name_or_path, quoted=True)}: is a folder, not a TOML file")
        if not candidate.is_file():  # missing, a broken link, or a device/FIFO that reading could block on
            what = "not a regular file" if candidate.exists() else "no such file"
            raise SpaceError(f"{option('space', name_or_path, quoted=True)}: {what}")
        return candidate
    for folder in (Path.cwd() / "search_spaces", SPACES_DIR):
        path = folder / f"{name_or_path}.toml"
        if path.is_file():
            return path
    known = sorted(p.stem for p in SPACES_DIR.glob("*.toml")) if SPACES_DIR.is_dir() else []
    raise SpaceError(f"{option('space', name_or_path, quoted=True)}: no such space; built-in spaces: "
                     f"{', '.join(known) or 'none'}")


def load(name_or_path: str) -> Space:
    path = find(name_or_path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SpaceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")  # TOML is UTF-8, whatever the locale says
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SpaceError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} on line {line}); a space file is TOML, which is UTF-8"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpaceError(f"{path}: TOML syntax error: {exc}") from None
    return parse(data, str(path), path.stem)


def _dimension(where: str, knob: knobs.Knob, raw: Any) -> Dimension:
    if isinstance(raw, list):
        if not raw:
            raise SpaceError(f"{where}: knob {knob.name!r}: the list of values is empty")
        try:
            values = tuple(dict.fromkeys(knob.validate(v) for v in raw))
        except KnobError as exc:
            raise SpaceError(f"{where}: {exc}") from None
        return Dimension(knob.name, values)
    if isinstance(raw, dict):
        if not knob.is_range:
            raise SpaceError(f"{where}: knob {knob.name!r} takes a list of values, not a range")
        unknown = set(raw) - {"low", "high", "step"}
        if unknown or "low" not in raw or "high" not in raw:
            raise SpaceError(f"{where}: knob {knob.name!r}: a range is {{ low = .., high = .., step = .. }}")
        try:
            low, high = knob.validate(raw["low"]), knob.validate(raw["high"])
        except KnobError as exc:
            raise SpaceError(f"{where}: {exc}") from None
        step = raw.get("step", knob.step if knob.name == knobs.BATCH_KNOB else 1)
        if not isinstance(step, int) or isinstance(step, bool) or step < 1:
            raise SpaceError(f"{where}: knob {knob.name!r}: step must be a positive integer")
        if low > high:
            raise SpaceError(f"{where}: knob {knob.name!r}: low {low} is above high {high}")
        high = low + (high - low) // step * step
        return Dimension(knob.name, None, low, high, step)
    raise SpaceError(f"{where}: knob {knob.name!r}: expected a list of values or a {{ low, high }} range")


def parse(data: Mapping[str, Any], path: str, name: str) -> Space:
    """Validate a space's tables against the registry."""
    unknown_tables = set(data) - {"search", "fixed", "name", "path", "description"}
    if unknown_tables:
        raise SpaceError(f"{path}: unknown table(s) {', '.join(sorted(unknown_tables))}; expected [search] and [fixed]")
    search_raw = data.get("search", {}) or {}
    fixed_raw = data.get("fixed", {}) or {}
    if not isinstance(search_raw, dict) or not isinstance(fixed_raw, dict):
        raise SpaceError(f"{path}: [search] and [fixed] must be tables")
    search: dict[str, Dimension] = {}
    fixed: dict[str, Any] = {}
    for name_, raw in search_raw.items():
        if name_ not in knobs.KNOBS:
            raise SpaceError(f"{path}: [search] unknown knob {name_!r}; known knobs: {', '.join(knobs.NAMES)}")
        if isinstance(raw, dict) and "choices" in raw:  # the stored form
            raw = raw["choices"]
        search[name_] = _dimension(f"{path}: [search]", knobs.KNOBS[name_], raw)
    for name_, raw in fixed_raw.items():
        if name_ not in knobs.KNOBS:
            raise SpaceError(f"{path}: [fixed] unknown knob {name_!r}; known knobs: {', '.join(knobs.NAMES)}")
        if name_ in search:
            raise SpaceError(f"{path}: knob {name_!r} is both searched and fixed")
        try:
            fixed[name_] = knobs.KNOBS[name_].validate(raw)
        except KnobError as exc:
            raise SpaceError(f"{path}: [fixed] {exc}") from None
    if not search:
        raise SpaceError(f"{path}: [search] names no knob: nothing to tune")
    # Registry order, so that dependent knobs come after the knobs they depend on.
    ordered = {k: search[k] for k in knobs.NAMES if k in search}
    return Space(name=name, path=path, search=ordered, fixed=fixed)


@dataclass(frozen=True)
class LeftOut:
    """What fitting a space to this machine left out of it, and why: a whole knob (``what`` is its name), some of
    its values (``precision=bf16``), or the top of a range (``threads above 2``)."""

    knob: str
    what: str
    reason: str


@dataclass(frozen=True)
class Fitted:
    """A space as it applies here (:func:`fit`), and what was left out of it."""

    space: Space
    left_out: tuple[LeftOut, ...] = ()

    def text(self) -> str | None:
        """One line: what was left out, grouped by reason (None when nothing was)."""
        return left_out_text(self.left_out)


def left_out_text(items: tuple[LeftOut, ...] | list[LeftOut]) -> str | None:
    """``precision=bf16: this CPU has no native bf16 (AVX512-BF16/AMX); threads above 2: 2 CPUs here``."""
    by_reason: dict[str, list[str]] = {}
    for item in items:
        by_reason.setdefault(item.reason, []).append(item.what)
    if not by_reason:
        return None
    return "; ".join(f"{', '.join(whats)}: {reason}" for reason, whats in by_reason.items())


def fit(space: Space, ctx: knobs.Context, base: Mapping[str, Any]) -> Fitted:
    """The space as it applies here, and what was left out and why.

    Knobs that cannot apply here are dropped (CUDA-only knobs on a CPU, channels_last without
    4-D inputs), values that cannot apply or cannot pay here are removed (fp16 on a CPU; bf16
    on a CPU without native bf16: ``pays_when``), ranges are clipped to this machine's CPUs,
    and every base (baseline) value is a candidate. A knob left with one value is not searched.
    """
    search: dict[str, Dimension] = {}
    left: list[LeftOut] = []
    for name, dim in space.search.items():
        knob = knobs.KNOBS[name]
        device_level = [c for c in knob.when if not isinstance(c, knobs.KnobAbove)]
        reason = _first(c.check(ctx, {}) for c in device_level)
        if reason:
            left.append(LeftOut(name, name, reason))
            continue
        values = dim.values()
        if dim.choices is not None:
            dropped: dict[str, list[Any]] = {}
            for v in dim.choices:
                why = _first(c.check(ctx, {}) for c in knob.value_when.get(v, ())) or knob.not_paying(v, ctx)
                if why and v != base.get(name):  # the baseline's value is always a candidate
                    dropped.setdefault(why, []).append(v)
            for why, vs in dropped.items():
                left.append(LeftOut(name, f"{name}={'/'.join(knob.format(v) for v in vs)}", why))
            values = [v for v in values if not any(v in vs for vs in dropped.values())]
        if knob.is_range:
            low, high = knob.bounds(ctx)
            if any(v > high for v in values):  # only a bound of this machine's CPUs depends on where it runs
                left.append(LeftOut(name, f"{name} above {high}", knob.bound_why(ctx)))
            values = [v for v in values if low <= v <= high]
        if not values:
            continue
        if dim.choices is not None:
            dim = Dimension(name, tuple(values))
        else:
            dim = Dimension(name, None, values[0], values[-1], dim.step)
        if name in base:
            dim = dim.with_value(base[name])
        if len(dim.values()) > 1:
            search[name] = dim
    return Fitted(Space(space.name, space.path, search, dict(space.fixed)), tuple(left))


def _first(reasons: Iterable[str | None]) -> str | None:
    return next((r for r in reasons if r), None)


def effective(space: Space, ctx: knobs.Context, base: Mapping[str, Any]) -> Space:
    """The space as it applies here (:func:`fit`, without what was left out)."""
    return fit(space, ctx, base).space
