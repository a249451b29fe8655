"""A trial's result read in two parts: what every view reads with the trial, the rest when a view looks past it.

``status``, ``list`` and ``trials`` read only ``load`` of each trial's result; ``export`` and the dashboard read the
whole. The store's one-pass read (:mod:`autotune.store.reading`) reads that first part with the trials and leaves
the rest (about 1 KB a trial: profile, memory, windows) to :class:`LazyResult`.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping


#: What every view reads of a trial's result (the busy-machine judgement, autotune.evidence): read with the trial;
#: the rest of the result (its profile, memory, windows: ~1 KB a trial) only when a view shows it (:class:`LazyResult`).
RESULT_READ_WITH_TRIAL = ("load", "flops_per_sample", "energy")  # and the FLOP count and the energy: MFU, J/sample


class LazyResult(Mapping[str, Any]):
    """A trial's compact result whose bulk is read when a view first looks past what was read with the trial.

    ``status``, ``list`` and ``trials`` read only ``load`` of each result (:data:`RESULT_READ_WITH_TRIAL`),
    so a read-only store reads that part with the trials (:func:`autotune.store.reading.stored_trials_of`) and
    the rest, the largest per-trial record, only when something asks for it (``export``, the dashboard): then
    ``fetch`` reads the whole result, with those of every other trial of the same read in one query. It is the
    same mapping as the stored one: equal to it, its repr, its copy and its pickle are the plain dict's.
    """

    __slots__ = ("_known", "_fetch", "_whole")

    def __init__(self, known: Mapping[str, Any], fetch: Any) -> None:
        self._known = dict(known)  # the keys of RESULT_READ_WITH_TRIAL the result has, with their values
        self._fetch = fetch  # () -> the whole result (a dict)
        self._whole: dict[str, Any] | None = None

    def whole(self) -> dict[str, Any]:
        if self._whole is None:
            self._whole = self._fetch()
        return self._whole

    def get(self, key: str, default: Any = None) -> Any:
        if self._whole is None and key in RESULT_READ_WITH_TRIAL:
            return self._known.get(key, default)
        return self.whole().get(key, default)

    def __getitem__(self, key: str) -> Any:
        if self._whole is None and key in RESULT_READ_WITH_TRIAL:
            return self._known[key]
        return self.whole()[key]

    def __contains__(self, key: object) -> bool:
        if self._whole is None and key in RESULT_READ_WITH_TRIAL:
            return key in self._known
        return key in self.whole()

    def __iter__(self) -> Iterator[str]:
        return iter(self.whole())

    def __len__(self) -> int:
        return len(self.whole())

    def __eq__(self, other: object) -> bool:
        return self.whole() == (other.whole() if isinstance(other, LazyResult) else other)

    __hash__ = None  # type: ignore[assignment]  # a mapping, as the dict it stands for

    def __repr__(self) -> str:
        return repr(self.whole())

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (self.whole(),)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        import copy

        return copy.deepcopy(self.whole(), memo)
