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
