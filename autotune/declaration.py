"""A field's declaration: how one field of the request is named, helped, read and checked on every surface.

Each field of :mod:`autotune.request` is declared once, beside its default (:class:`Declared`, in the field's
metadata): its CLI option, its Python keyword, its help, its unit and its rule (:class:`Whole`, :class:`Positive`,
:class:`OneOf`, :class:`Switch`, :class:`Text`). Why a module of its own: the declaration is the grammar the request
is written in, and the CLI reads it to make its options (:mod:`autotune.cli.options`); the request is what is
declared with it. This module imports neither torch nor Optuna.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, Mapping

from autotune.errors import FieldError, FieldSpecError, FieldValueError, UnitError, named
from autotune.units import parse_duration, parse_size


@dataclass(frozen=True)
class Whole:
    """A whole number within bounds (either may be open). ``shown``: the CLI's help shows the bounds."""

    low: int | None = None
    high: int | None = None
    shown: bool = True

    def problem(self, value: Any) -> str | None:
        if (isinstance(value, bool) or not isinstance(value, int) or (self.low is not None and value < self.low)
                or (self.high is not None and value > self.high)):
            if self.low is not None and self.high is not None:
                bound = f" from {self.low} to {self.high}"
            else:
                bound = f" of at least {self.low}" if self.low is not None else ""
            return f"must be a whole number{bound}, not {value!r}"
        return None


@dataclass(frozen=True)
class Positive:
    """A positive number (``whole``: of bytes)."""

    whole: bool = False

    def problem(self, value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:  # NaN is not > 0
            return f"must be positive, not {value!r}"
        if self.whole and not isinstance(value, int):
            return f"must be positive and a whole number of bytes, not {value!r}"
        return None


@dataclass(frozen=True)
class OneOf:
    choices: tuple[str, ...]

    def problem(self, value: Any) -> str | None:
        return None if value in self.choices else f"must be one of {', '.join(self.choices)}, not {value!r}"


@dataclass(frozen=True)
class Switch:
    """True or False (``maybe``: or None, the product decides)."""

    maybe: bool = False

    def problem(self, value: Any) -> str | None:
        if isinstance(value, bool) or (self.maybe and value is None):
            return None
        return f"must be True, False or None, not {value!r}" if self.maybe else f"must be True or False, not {value!r}"


@dataclass(frozen=True)
class Text:
    """Text that is not blank; ``problem`` is what is said otherwise (``{value!r}`` quotes the value)."""

    problem_text: str

    def problem(self, value: Any) -> str | None:
        if isinstance(value, str) and value.strip():
            return None
        return self.problem_text.format(value=value)


Rule = Whole | Positive | OneOf | Switch | Text
DECLARED = "autotune.declared"  # the key of a field's declaration in its dataclass metadata


@dataclass(frozen=True, eq=False)
class Declared:
    """One field of the request as every surface shows it, written once beside the field's default.

    ``what``: the field in words, for messages ("the trial budget"; empty: its word alone).
    ``flag``: its CLI option as click declares it ("--trials", "--warm-start/--no-warm-start"; a switch whose
    default is True and whose flag has no pair, "--no-early-stop", turns it off); None: no option.
    ``keyword``: its name in ``tune()``/``measure()``: the field's own, but for a duration or a size, which
    the API and the CLI take as ``"2h"`` or ``"20GiB"`` too: the name without its unit (``time_budget``).
    ``help``: the CLI's help; ``help_in``: a command's own wording of it. ``unit``: "duration" (seconds) or
    "size" (bytes), read by :mod:`autotune.units`. ``rule``: the values it takes, checked once, by the request.
    ``show_default``: the CLI's help shows the default. ``metavar``: the CLI's name of the value.
    ``spec``: a field of the workload, whose errors are SpecErrors. ``name``, ``default`` and ``required`` (no
    default) are the field's.
    """

    what: str = ""
    flag: str | None = None
    keyword: str | None = None
    help: str = ""
    help_in: Mapping[str, str] = field(default_factory=dict)
    unit: str | None = None
    rule: Rule | None = None
    show_default: bool = False
    metavar: str | None = None
    spec: bool = False
    name: str = ""
    default: Any = None
    required: bool = False

    @property
    def word(self) -> str:
        """The Python keyword (``tune(trial_timeout=...)``)."""
        return self.keyword or self.name

    @property
    def cli(self) -> str | None:
        """The CLI's word for it (``--warm-start`` of ``--warm-start/--no-warm-start``)."""
        return self.flag.split("/")[0] if self.flag else None

    def help_for(self, command: str) -> str:
        return self.help_in.get(command, self.help)

    def error(self, problem: str, value: Any = None, valued: bool = False) -> FieldError:
        """The field's error: its message names the field as a term each surface words as its own (``valued``: with
        the value, before the problem: ``--input-shape '3,a': expected ...``; else the field in words, when it has
        them: ``the trial budget (--trials) must be ...``)."""
        kind = FieldSpecError if self.spec else FieldValueError
        cli = self.cli or self.name
        if valued:
            message = f"{named(self.name, f'{cli} {value!r}', repr(value))}: {problem}"
        elif self.what:
            message = f"{self.what} ({named(self.name, cli)}) {problem}"
        else:
            message = f"{named(self.name, cli)} {problem}"
        return kind(self.name, problem, message, value=value)

    def check(self, value: Any) -> None:
        """Raise the field's FieldError when ``value`` breaks its rule (None is allowed where it is the default)."""
        if self.rule is None or (value is None and self.default is None and not self.required):
            return
        problem = self.rule.problem(value)
        if problem is not None:
            raise self.error(problem, value)

    def read(self, value: Any) -> Any:
        """A surface's value as the field holds it: a duration or a size given as text (or a number) read by
        :mod:`autotune.units`; anything else as given (the rule is checked when the request is made)."""
        if value is None or self.unit is None:
            return value
        try:
            return parse_duration(value) if self.unit == "duration" else parse_size(value)
        except UnitError as exc:
            raise self.error(str(exc), value, valued=True) from None


def declare(default: Any = MISSING, **declaration: Any) -> Any:
    """A dataclass field with its declaration (see :class:`Declared`)."""
    return field(default=default, metadata={DECLARED: Declared(**declaration)})


def declarations(cls: type) -> dict[str, Declared]:
    """The declared fields of a request class, in order, each with its name and default filled in."""
    return {f.name: replace(f.metadata[DECLARED], name=f.name, default=None if f.default is MISSING else f.default,
                            required=f.default is MISSING)
            for f in fields(cls) if DECLARED in f.metadata}
