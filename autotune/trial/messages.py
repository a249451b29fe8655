"""What crosses the trial process boundary: the requests the runner sends a trial process, and the probe's answer.

Why dataclasses: the runner (:mod:`autotune.trial.runner`) makes a request, the child's entry
(:mod:`autotune.trial.child`) answers it, and both handle typed objects: a field that one side
renames, forgets or mistypes fails where it is made, not as a missing dict key in another
process. A request becomes JSON only at the pipe (:meth:`Request.to_wire`, read back by
:func:`from_wire` in the forked child); its kind, the one thing the JSON needs that the
type says, is written there and nowhere else.

The answers: a :class:`~autotune.result.TrialResult` to a :class:`TrialRequest`, a
:class:`~autotune.result.PairedResult` to a :class:`PairedRequest`, a :class:`ProbeAnswer`
to a :class:`ProbeRequest`, a :class:`~autotune.result.NumericsResult` to a :class:`NumericsRequest`; each is
written as JSON to the result file the runner reads.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Mapping

from autotune.trial.protocol import Settings
from autotune.request import WorkloadSpec


@dataclass(frozen=True, kw_only=True)
class Request:
    """What every request says: the workload and the device, and where the child runs (set by the runner as it
    sends the request: the parent's import path and folder, so that the child imports what the parent could, and
    the file a trial writes its progress to)."""

    kind: ClassVar[str]

    spec: WorkloadSpec
    device: str = "cpu"
    sys_path: tuple[str, ...] = ()
    cwd: str | None = None
    progress_path: str | None = None
    bound_cpus: tuple[int, ...] = ()  # the cores its process was started bound to (autotune.trial.launch), if any

    def to_wire(self) -> dict[str, Any]:
        """The request as JSON-ready data, its kind included."""
        out: dict[str, Any] = {"kind": self.kind}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.to_dict() if isinstance(value, (WorkloadSpec, Settings)) else value
        return out


@dataclass(frozen=True, kw_only=True)
class ProbeRequest(Request):
    """Build the workload once and say what decides which knobs apply, and the machine's fingerprint."""

    kind: ClassVar[str] = "probe"


@dataclass(frozen=True, kw_only=True)
class TrialRequest(Request):
    """Measure one configuration (:func:`autotune.trial.measure_one.run`).

    ``dominators`` ((samples/s, peak bytes) of the current front) let the trial stop early
    when one of them is ``cut_margin`` faster at no more memory (None: the settings' margin).
    """

    kind: ClassVar[str] = "trial"

    config: Mapping[str, Any] = field(default_factory=dict)
    settings: Settings = field(default_factory=Settings)
    global_batch: int | None = None
    dominators: tuple[tuple[float, float], ...] = ()
    cut_margin: float | None = None


@dataclass(frozen=True, kw_only=True)
class PairedRequest(Request):
    """Measure ``arms`` (configurations, the first the reference) alternately in one process
    (:func:`autotune.trial.paired.run_arms`). ``unchecked``: even what :func:`autotune.knobs.apart` keeps apart."""

    kind: ClassVar[str] = "paired"

    arms: tuple[Mapping[str, Any], ...]
    settings: Settings = field(default_factory=Settings)
    global_batch: int | None = None
    unchecked: bool = False


@dataclass(frozen=True, kw_only=True)
class NumericsRequest(Request):
    """Train ``config`` for ``steps`` optimizer steps of ``samples_per_step`` samples each from weights seeded by
    ``seed`` (:func:`autotune.trial.numerics_run.run`); save the final weights to ``save_path`` (when given) and measure
    their distance to each ``(label, path)`` of ``references``, weights an earlier run saved."""

    kind: ClassVar[str] = "numerics"

    config: Mapping[str, Any] = field(default_factory=dict)
    steps: int = 30
    samples_per_step: int | None = None
    seed: int = 0
    save_path: str | None = None
    references: tuple[tuple[str, str], ...] = ()


REQUESTS: dict[str, type[Request]] = {cls.kind: cls for cls in (ProbeRequest, TrialRequest, PairedRequest,
                                                                 NumericsRequest)}


def from_wire(data: Mapping[str, Any]) -> Request:
    """The request that :meth:`Request.to_wire` wrote (a request without a kind is a trial's, as
    ``python -m autotune.trial.measure_one REQUEST.json`` reads one)."""
    values = dict(data)
    cls = REQUESTS[values.pop("kind", TrialRequest.kind)]
    values["spec"] = WorkloadSpec.from_dict(values["spec"])
    if "settings" in values:
        values["settings"] = Settings(**(values["settings"] or {}))
    if "sys_path" in values:
        values["sys_path"] = tuple(values["sys_path"] or ())
    if "bound_cpus" in values:
        values["bound_cpus"] = tuple(int(cpu) for cpu in values["bound_cpus"] or ())
    if "dominators" in values:
        values["dominators"] = tuple((float(t), float(mem)) for t, mem in values["dominators"] or ())
    if "references" in values:
        values["references"] = tuple((str(label), str(path)) for label, path in values["references"] or ())
    if "arms" in values:
        values["arms"] = tuple(dict(arm) for arm in values["arms"])
    return cls(**values)


@dataclass
class ProbeAnswer:
    """The answer to a :class:`ProbeRequest`: what the probe found (``context``, ``fingerprint``, ``workload``), or
    the error that stopped it (:func:`autotune.trial.arm.error_record`)."""

    probe: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> str:
        return json.dumps(asdict(self), default=str)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProbeAnswer:
        return cls(probe=data.get("probe"), error=data.get("error"))
