"""Typed errors of autotune, all in one place.

Every error a user can cause (a bad spec, a bad knob value, a malformed space file,
a study that does not match) is an :class:`AutotuneError`. The CLI turns these into
one clear line on stderr and a non-zero exit; nothing else catches them.
"""

from __future__ import annotations


class AutotuneError(Exception):
    """Base class of every user-facing autotune error."""

    exit_code = 2


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


class UnitError(AutotuneError):
    """A size or a duration that does not read (:mod:`autotune.units`). The message says what was expected and
    names no option: the caller knows whether it is ``--time-budget`` or ``time_budget=``."""


class FieldError(AutotuneError):
    """A value one field of the request cannot take (:mod:`autotune.request`).

    It carries the field's name, the value and the problem, not a surface's word for the field: the CLI says
    ``--trial-timeout``, the Python API ``trial_timeout=``, each from the field's declaration
    (:func:`autotune.request.cli_words`, :func:`autotune.request.api_words`). Its own message, for a request built
    directly, names the dataclass field.
    """

    def __init__(self, field: str, problem: str, *, value: object = None, valued: bool = False, what: str = "") -> None:
        self.field = field
        self.problem = problem
        self.value = value
        self.valued = valued  # the message quotes the value before the problem: "--input-shape '3,a': expected ..."
        self.what = what  # the field in words, "the trial budget"; "" names it by its word alone
        super().__init__(self.say(field, f"{field}="))

    def say(self, word: str, before_value: str) -> str:
        """The message with the field named in one surface's words: ``word`` alone (``--trials``, ``trials=``), or
        ``before_value`` followed by the value (``--model-arg 'x'``, ``model_args='x'``)."""
        if self.valued:
            return f"{before_value}{self.value!r}: {self.problem}"
        if self.what:
            return f"{self.what} ({word}) {self.problem}"
        return f"{word} {self.problem}"

    def worded(self, word: str, before_value: str) -> FieldError:
        """The same error, its message in one surface's words."""
        out = type(self)(self.field, self.problem, value=self.value, valued=self.valued, what=self.what)
        out.args = (self.say(word, before_value),)
        return out


class FieldValueError(FieldError, KnobError):
    """A field of the request with a value it cannot take: a trial budget of 0, an unknown sampler."""


class FieldSpecError(FieldError, SpecError):
    """A field of the workload that names nothing usable: an empty model, a malformed shape or model argument."""
