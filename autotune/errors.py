"""Typed errors of autotune, all in one place, and the names in their messages that each surface says its own way.

Every error a user can cause (a bad spec, a bad knob value, a malformed space file,
a study that does not match) is an :class:`AutotuneError`. The CLI turns these into
one clear line on stderr and a non-zero exit; nothing else catches them.

A message that tells the user what to pass names it as a *term* (:func:`named`, made from the request's
declaration by :func:`autotune.request.option`; :func:`either` for a phrase that is not an option): the
command line says ``--trial-timeout`` or ``--study mlp-2``, the Python API ``trial_timeout=`` or
``study='mlp-2'``. A term carries the field's name, the command line's text and Python's text of the value,
so ``str(exc)``, a log line and a message sent from a trial process read in the command line's words
(exactly as they always have), and the API's edge words each term from the field's keyword
(:meth:`AutotuneError.in_words`), never by rewriting the text around it.

Why: the messages of the modules below the request named command-line options in their prose, and the API
rewrote those with regular expressions, which garbled what they did not foresee (``--study name`` became
``study='name'``, ``autotune measure --model ...`` became ``autotune measure model= ...``).

This module imports nothing of autotune's: it is the lowest layer; the words come from the declaration.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

# ---------------------------------------------------------------- terms

#: A term sits in a message between these two characters, as JSON, which writes every control character as an
#: escape: neither can occur inside a term, and a message's own text keeps them only if it had them (then a part
#: that does not read as a term is left as it is).
OPEN, CLOSE = "\x0e", "\x0f"

#: A surface's word for a name: ``"trial_timeout_s"`` -> ``"trial_timeout"`` (the API's, from the declaration).
Words = Callable[[str], str]


@dataclass(frozen=True)
class Term:
    """A name in a message. ``name``: the field (or argument) both surfaces know, as the request declares it.
    ``cli``: the command line's whole text for it (``--study mlp-2``). ``value``: Python's text of the value
    (``'mlp-2'``; a pickled object's own name), or None. ``python``: a phrase Python says instead (see
    :func:`either`), when there is no name."""

    cli: str
    name: str | None = None
    value: str | None = None
    python: str | None = None

    def said(self, word: Words | None) -> str:
        """The term in one surface's words: the command line's (``word`` None), or ``word``'s (``name=value``)."""
        if word is None:
            return self.cli
        if self.python is not None or self.name is None:
            return self.python if self.python is not None else self.cli
        return f"{word(self.name)}={self.value or ''}"

    def marked(self) -> str:
        return OPEN + json.dumps({k: v for k, v in self.__dict__.items() if v is not None}) + CLOSE


def named(name: str, cli: str, value: str | None = None) -> str:
    """An option named in a message: the field ``name``, the command line's text ``cli`` (``--device 'cuda:3'``)
    and Python's text of its value (``'cuda:3'``), or None (``--trial-timeout``, ``trial_timeout=``). Sites name a
    declared field through :func:`autotune.request.option`, which takes these from the declaration."""
    return Term(cli, name, value).marked()


def either(cli: str, python: str) -> str:
    """A phrase each surface says its own way, with no option to name: a command (``autotune measure --model ...``)
    and its call (``autotune.measure(model)``)."""
    return Term(cli, python=python).marked()


def in_words(text: str, word: Words | None = None) -> str:
    """``text`` with each term in one surface's words: the command line's (``word`` None) or those of ``word``."""
    if OPEN not in text:
        return text
    out: list[str] = []
    rest = text
    while True:
        before, opened, rest = rest.partition(OPEN)
        out.append(before)
        if not opened:
            return "".join(out)
        body, closed, after = rest.partition(CLOSE)
        found = _term(body) if closed else None
        if found is None:  # not a term: the character stays, the text after it is read on
            out.append(OPEN)
            continue
        out.append(found.said(word))
        rest = after


def plain(value: Any) -> Any:
    """``value`` (a text, or JSON data holding texts) with every term in the command line's words: what is stored or
    written for a user (a trial's marks, an export) holds no marker, however its texts were built."""
    if isinstance(value, str):
        return in_words(value) if OPEN in value else value
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value) if isinstance(value, list) else tuple(plain(v) for v in value)
    return value


class Said(str):
    """A text both surfaces show that is no error (a verdict): as a str, the command line's words, exactly as it
    always read (stored, printed, written to JSON, compared); :attr:`said` keeps its terms for another surface's
    words (:meth:`in_words`). Compose one from another's :func:`said` (an f-string reads the str, the CLI's words)."""

    said: str

    def __new__(cls, said: str) -> Said:
        text = super().__new__(cls, in_words(said))
        text.said = said
        return text

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (Said, (self.said,))

    def in_words(self, word: Words) -> str:
        return in_words(self.said, word)


def said(text: str) -> str:
    """A text with its terms: a :class:`Said`'s, else the text itself (to compose one text from another)."""
    return text.said if isinstance(text, Said) else text


def _term(body: str) -> Term | None:
    try:
        fields = json.loads(body)
        return Term(**fields) if isinstance(fields, dict) else None
    except (ValueError, TypeError):
        return None


# ---------------------------------------------------------------- errors


class AutotuneError(Exception):
    """Base class of every user-facing autotune error. Its message may hold terms (:func:`named`): ``str(exc)``
    says them in the command line's words, :meth:`in_words` in another surface's."""

    exit_code = 2

    def __str__(self) -> str:
        return in_words(self.said)

    @property
    def said(self) -> str:
        """The message with its terms, as raised (what a trial process sends, for the edge to word)."""
        return super().__str__()

    def in_words(self, word: Words) -> AutotuneError:
        """The same error (its type and attributes), its message in the words ``word`` gives names."""
        out = type(self).__new__(type(self))
        out.__dict__.update(self.__dict__)
        out.args = (in_words(self.said, word),)
        return out


class SpecError(AutotuneError):
    """A ``module:attr`` spec is malformed, does not import, or names nothing."""


class WorkloadError(AutotuneError):
    """A factory raised, or returned something autotune cannot run."""


class KnobError(AutotuneError):
    """An unknown knob, or a value the knob cannot take."""


class SpaceError(AutotuneError):
    """A search-space file is malformed or names something the registry rejects."""


class StudyError(AutotuneError):
    """A study is missing, or does not match this run (space, fingerprint, workload)."""


class StorageError(AutotuneError):
    """A storage cannot be opened, or refuses to work (a read-only file, a full disk, a deleted file):
    the message names the cause and the fix (:meth:`autotune.store.Store.fault`)."""


class StorageUnreachable(StorageError):
    """The database server of a storage does not answer: a worker retries; a run stops in one line."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


class ConfigError(AutotuneError):
    """An exported configuration file is missing, malformed or of another schema."""


class DeviceError(AutotuneError):
    """A ``--device`` that does not exist on this machine."""


class TrialProcessError(AutotuneError):
    """Trial processes cannot be started: the fork server did not start, died, or would fork a process that
    cannot use the GPU (it initialised CUDA itself)."""


class UnitError(AutotuneError):
    """A size or a duration that does not read (:mod:`autotune.units`). The message says what was expected and
    names no option: the caller knows whether it is ``--time-budget`` or ``time_budget=``."""


class FieldError(AutotuneError):
    """A value one field of the request cannot take (:mod:`autotune.request`).

    Its message names the field as a term (:func:`named`, made by the field's declaration:
    :meth:`autotune.declaration.Declared.error`), as every other message names an option: the CLI's edge says
    ``--trial-timeout``, the Python API's ``trial_timeout=``. Its own ``str``, for a request built directly, says the
    field in the request's own words, as that call takes it (``trial_timeout_s=``). ``field``, ``problem`` and
    ``value`` are kept for the caller.
    """

    def __init__(self, field: str, problem: str, message: str, *, value: object = None) -> None:
        self.field = field
        self.problem = problem
        self.value = value
        super().__init__(message)

    def __str__(self) -> str:
        return in_words(self.said, _own)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.field, self.problem, self.said), {"value": self.value})


def _own(name: str) -> str:
    """The request's own word for a field: its name (``trial_timeout_s``)."""
    return name


class FieldValueError(FieldError, KnobError):
    """A field of the request with a value it cannot take: a trial budget of 0, an unknown sampler."""


class FieldSpecError(FieldError, SpecError):
    """A field of the workload that names nothing usable: an empty model, a malformed shape or model argument."""
