"""What evidence reads of a study: the typed view it computes over, declared here so that it needs no store.

:class:`autotune.store.StoredStudy` (with its :class:`~autotune.store.StoredTrial`,
:class:`~autotune.store.Block` and :class:`~autotune.store.Remeasurement`) is that view: the store
reads a study once and builds its evidence (``study.evidence``), so the evidence may not import
the store back (no import circles: pyproject.toml's import contracts). These protocols name what
the figures use of it, field by field; tests/test_evidence.py holds the store's classes to them.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Protocol, Sequence

#: The outcome the store gives an arm of a shared process whose reference arm failed: it ran, but compares with
#: nothing (autotune.store.records.UNCOMPARED; tests/test_evidence.py holds the two equal).
UNCOMPARED = "uncompared"


class Trial(Protocol):
    """One stored trial: its figures and marks."""

    @property
    def number(self) -> int: ...
    @property
    def ok(self) -> bool: ...  # measured successfully, with a positive figure
    @property
    def values(self) -> tuple[float, ...] | None: ...  # (samples/s, peak memory bytes)
    @property
    def constraints(self) -> Mapping[str, float]: ...
    @property
    def role(self) -> str: ...
    @property
    def config(self) -> Mapping[str, Any]: ...
    @property
    def config_key(self) -> str | None: ...
    @property
    def result(self) -> Mapping[str, Any]: ...


class Remeasurement(Protocol):
    """A configuration measured again in a process of its own."""

    @property
    def round_id(self) -> str: ...
    @property
    def trial(self) -> int: ...
    @property
    def samples_per_s(self) -> float | None: ...
    @property
    def other_cores(self) -> float | None: ...


class Block(Protocol):
    """One process that measured several configurations alternately, by configuration key."""

    @property
    def round_id(self) -> str: ...
    @property
    def rates(self) -> dict[str, float | None]: ...
    @property
    def trials(self) -> dict[str, int | None]: ...
    @property
    def other_cores(self) -> float | None: ...
    @property
    def purpose(self) -> dict[str, str]: ...
    @property
    def outcomes(self) -> dict[str, str]: ...


class Study(Protocol):
    """A study read once: its trials, its description and its records."""

    @property
    def trials(self) -> Sequence[Trial]: ...
    @property
    def max_memory_bytes(self) -> int | None: ...
    @property
    def fingerprint(self) -> Mapping[str, Any]: ...
    @property
    def workload(self) -> Mapping[str, Any]: ...
    def remeasurements(self) -> Iterable[Remeasurement]: ...
    def blocks(self) -> Sequence[Block]: ...
    def races(self) -> Sequence[tuple[str, Mapping[str, Any]]]: ...
    def ablation_plans(self) -> Sequence[tuple[str, Mapping[str, Any]]]: ...
    def sessions(self) -> Sequence[Mapping[str, Any]]: ...
