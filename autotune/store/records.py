"""The stored format: what autotune keeps on an Optuna study, as typed records, and the only place that knows its keys.

An autotune study is an Optuna study whose user attributes hold autotune's records:

- on the study: its description (workload, space, fingerprint, device, context, ...), the
  job it follows, and one attribute per re-measurement (``measurement:<round>:<trial>``),
  per shared process (``paired:<round>``), per race (``race:<id>``), per plan of what each
  knob bought (``ablation:<id>``) and per session (``session:<id>``);
- on each trial: its marks (role, outcome, configuration and its key, the compact result,
  the error, duplicate_of, requeued_from, placement, measuring_since) and, as a system
  attribute, the process that runs it (``autotune:owner``).

Everything else reads a study through :class:`StoredStudy` (the study read once, with typed
trials, :class:`StoredTrial`) and writes it through the functions of :mod:`autotune.store.writing`; no other module
names a key. docs/storage.md describes the format for people.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from autotune.result import Outcome
from autotune.store.plans import ConfirmRecord, RaceRecord, RoundId

if TYPE_CHECKING:  # Optuna is imported where a study is written (a read builds these records from the tables alone)
    import optuna
    from optuna.trial import FrozenTrial

# ---------------------------------------------------------------- keys (nowhere else)

# the study's description, written once when it is created
WORKLOAD = "workload"
SPACE = "space"
SPACE_HASH = "space_hash"
FINGERPRINT = "fingerprint"
DEVICE = "device"
CONTEXT = "context"
GLOBAL_BATCH = "global_batch"
#: the study's two objectives, the front's axes (autotune.request.OBJECTIVES): the trials' second value is peak memory
#: (``speed,memory``, and every study made before this was stored) or joules per sample (``speed,energy``)
OBJECTIVES = "objectives"
MAX_MEMORY = "max_memory_bytes"
CREATED_AT = "created_at"  # written last: a study without it is still being described
VERSION = "autotune_version"
# what a study follows and decides along the way
JOB = "job"  # the request the study's workers follow (autotune.request.TuneConfig.to_dict)
JOB_RECORD = "autotune_job"  # on a submitted job's record (a study without trials)
JOB_OF = "job_of"  # on a per-kind study: the job record it works for
DEADLINE = "deadline"  # epoch seconds: no trial of a fleet's job starts after it
WARM_START = "warm_start"  # the earlier studies' winners chosen as seeds
BATCH_CEILING = "batch_ceiling"  # the largest batch that fits (autotune.tuning.ceiling_probe)
SAMPLER_SWITCH = "sampler_switch"  # the default sampler handed over from GP to TPE
CONFIRMATIONS = "confirmations"  # re-measurements of studies made before the race existed
# one attribute per record
MEASUREMENT = "measurement:"  # measurement:<round>:<trial>: a re-measurement in a process of its own
PAIRED = "paired:"  # paired:<round>: one process that measured several configurations alternately
RACE = "race:"  # race:<id>: a race's plan and state
CONFIRM = "confirm:"  # confirm:<id>: a claim measured apart: its plan and state
ABLATION = "ablation:"  # ablation:<id>: the plan of what each knob of a winner bought
NUMERICS = "numerics:"  # numerics:<id>: a numerics check of a recommendation: its plan and its runs
SESSION = "session:"  # session:<id>: one run's wall time
# on trials
OWNER = "autotune:owner"  # the system attribute a trial's process signs it with
ROLE, OUTCOME, CONFIG, CONFIG_KEY = "role", "outcome", "config", "config_key"
NOT_APPLICABLE, RESULT, ERROR, DURATION = "not_applicable", "result", "error", "duration_s"
DUPLICATE_OF, REQUEUED_FROM, PLACEMENT, MEASURING_SINCE = ("duplicate_of", "requeued_from", "placement",
                                                           "measuring_since")
ABLATION_ID = "ablation"  # on the trial that measures an ablation's recommendation alone: its plan's id
WARM_FROM = "warm_from"  # on a warm-start seed's trial: {"study", "trial"} it came from
TRIAL_MARKS = (ROLE, OUTCOME, CONFIG, CONFIG_KEY, NOT_APPLICABLE, RESULT, ERROR, DURATION, DUPLICATE_OF, REQUEUED_FROM,
               PLACEMENT, MEASURING_SINCE, ABLATION_ID, WARM_FROM)



class Role(StrEnum):
    """Why a trial was measured (its ``role`` mark): stored, shown and compared as its plain value."""

    BASELINE = "baseline"  # the defaults (PyTorch's), measured first
    RECIPE = "recipe"  # the recipe's configuration, measured next (autotune.knobs.recipe)
    SEARCH = "search"  # the sampler's choice (a trial with no role mark)
    # the trials after the recipe: its variants along what pays most on a GPU (Seeds.opening_params)
    OPENING = "opening"
    NEIGHBOUR = "neighbour"  # the leader's one-knob neighbours, tried before the race (autotune.tuning.phases.search)
    WARM = "warm"  # a seed from an earlier study's winner (autotune.tuning.warmstart)
    MINIMAL = "minimal"  # a configuration measured on its own after the race: nothing selected it
    VERIFY = "verify"  # the exported configuration as `autotune verify` measures it (never stored)


# outcomes the store itself writes (the others come from autotune.result)
INTERRUPTED = Outcome.INTERRUPTED
SKIPPED = Outcome.SKIPPED  # given up because another process measures the configuration, or the budget is full
UNCOMPARED = Outcome.UNCOMPARED  # an arm of a shared process whose reference arm failed: it compares with nothing
OK = Outcome.OK
ERROR_OUTCOME = Outcome.ERROR

#: Trial states (Optuna's ``TrialState`` names, as its tables hold them) by their lower-case names: what a view shows,
#: with no Optuna enum outside the store.
STATES = {"COMPLETE": "complete", "FAIL": "fail", "RUNNING": "running", "WAITING": "waiting", "PRUNED": "pruned"}
#: Optuna's system attribute of a trial's constraints: a list (Optuna before 4.4), or one ``constraints:<name>`` each.
CONSTRAINTS = "constraints"


# ---------------------------------------------------------------- trials


@dataclass(frozen=True)
class StoredTrial:
    """One trial as autotune stored it: Optuna's state and values, and autotune's marks, typed."""

    number: int
    state: str  # complete | fail | running | waiting | pruned
    values: tuple[float, ...] | None
    constraints: Mapping[str, float]
    params: Mapping[str, Any]
    started: dt.datetime | None
    completed: dt.datetime | None
    role: str = Role.SEARCH
    outcome: str | None = None
    config: Mapping[str, Any] = field(default_factory=dict)
    config_key: str | None = None
    not_applicable: Mapping[str, Any] = field(default_factory=dict)
    result: Mapping[str, Any] = field(default_factory=dict)  # the compact trial result (autotune.result.TrialResult)
    error: Mapping[str, Any] | None = None
    duration_s: float | None = None
    duplicate_of: int | None = None
    requeued_from: int | None = None
    placement: Mapping[str, Any] = field(default_factory=dict)
    measuring_since: float | None = None
    ablation: str | None = None
    warm_from: Mapping[str, Any] | None = None
    owner: Mapping[str, Any] = field(default_factory=dict)
    trial_id: int = field(default=-1, repr=False, compare=False)  # the storage's id (for the store's own writes)

    @classmethod
    def of(cls, t: FrozenTrial) -> StoredTrial:
        return cls.stored(t.number, t.state.name, tuple(t.values) if t.values else None, _constraints(t), t.params,
                          t.datetime_start, t.datetime_complete, t.user_attrs, t.system_attrs,
                          t._trial_id)  # private: the id the storage's writes take (docs/storage.md)

    @classmethod
    def stored(cls, number: int, state: str, values: tuple[float, ...] | None, constraints: Mapping[str, float],
               params: Mapping[str, Any], started: dt.datetime | None, completed: dt.datetime | None,
               ua: Mapping[str, Any], system: Mapping[str, Any], trial_id: int,
               result: Mapping[str, Any] | None = None) -> StoredTrial:
        """A trial from what the storage holds of it (``state``: Optuna's state name; ``ua``, ``system``: its user
        and system attributes), from Optuna's ``FrozenTrial`` (:meth:`of`) or from the tables (:mod:`.reading`);
        ``result``: its result when it is not among ``ua`` (a :class:`LazyResult`)."""
        error = ua.get(ERROR)
        return cls(
            number=number,
            state=STATES.get(state, state.lower()),
            values=values,
            constraints=constraints,
            params=params,
            started=started,
            completed=completed,
            role=ua.get(ROLE, Role.SEARCH),
            outcome=ua.get(OUTCOME),
            config=ua.get(CONFIG) or {},
            config_key=ua.get(CONFIG_KEY),
            not_applicable=ua.get(NOT_APPLICABLE) or {},
            result=result if result is not None else (ua.get(RESULT) or {}),
            error=error if isinstance(error, Mapping) else None,
            duration_s=ua.get(DURATION),
            duplicate_of=ua.get(DUPLICATE_OF),
            requeued_from=ua.get(REQUEUED_FROM),
            placement=ua.get(PLACEMENT) or {},
            measuring_since=ua.get(MEASURING_SINCE),
            ablation=ua.get(ABLATION_ID),
            warm_from=ua.get(WARM_FROM),
            owner=system.get(OWNER) or {},
            trial_id=trial_id,
        )

    @property
    def finished(self) -> bool:
        return self.state in ("complete", "fail", "pruned")

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def measured(self) -> bool:
        """It measured a configuration (not a cache answer, not interrupted, not skipped)."""
        return ((self.state == "complete" or (self.state == "fail" and self.outcome not in (None, INTERRUPTED)))
                and self.duplicate_of is None and self.outcome is not None)

    @property
    def ok(self) -> bool:
        """Measured successfully, with a positive figure."""
        return self.measured and self.outcome == OK and bool(self.values) and self.values[0] > 0  # type: ignore[index]

    @property
    def samples_per_s(self) -> float | None:
        """The trial's own first measurement (the evidence's figure may differ: autotune.evidence)."""
        return float(self.values[0]) if self.values and self.outcome == OK else None

    @property
    def peak_memory_bytes(self) -> int | None:
        """The second value: the peak memory of a ``speed,memory`` study (of any study:
        :meth:`StoredStudy.peak_memory_of`)."""
        return int(self.values[1]) if self.values and self.outcome == OK else None

    @property
    def error_message(self) -> str:
        return str((self.error or {}).get("message", ""))

    def is_mine(self, me: Mapping[str, Any]) -> bool:
        return (self.owner.get("host"), self.owner.get("pid")) == (me.get("host"), me.get("pid"))


def _constraints(t: FrozenTrial) -> dict[str, float]:
    return dict(t.constraints) if t.constraints else {}


def constraints_of(system: Mapping[str, Any]) -> dict[str, float]:
    """A trial's constraints from its system attributes, as Optuna's ``FrozenTrial.constraints`` reads them: the
    old list as ``"0"``, ``"1"``, ..., then each ``constraints:<name>`` (a name in both: the latter's value)."""
    out: dict[str, float] = {}
    old = system.get(CONSTRAINTS)
    if old is not None:
        out.update((str(i), c) for i, c in enumerate(old))
    prefix = CONSTRAINTS + ":"
    out.update((key[len(prefix):], value) for key, value in system.items() if key.startswith(prefix))
    return out


# ---------------------------------------------------------------- records on the study


@dataclass(frozen=True)
class Remeasurement:
    """A configuration measured again in a process of its own (the noise floor's and the race's rounds)."""

    round_id: str
    trial: int
    samples_per_s: float | None
    outcome: str
    peak_memory_bytes: int | None = None
    other_cores: float | None = None
    wall_s: float | None = None
    at: float | None = None
    cores: int | None = None  # the cores its process could run on (None: not recorded)


@dataclass(frozen=True)
class Block:
    """One process that measured several configurations alternately: samples/s by configuration key."""

    round_id: str
    rates: dict[str, float | None]
    trials: dict[str, int | None]
    other_cores: float | None
    purpose: dict[str, str]
    outcomes: dict[str, str] = field(default_factory=dict)
    wall_s: float | None = None  # the process's wall time, when stored
    at: float | None = None
    cores: int | None = None  # the cores the process could run on (None: not recorded)


class StoredStudy:
    """A study read once: its name, its description, its records and its trials (typed, by number). Read-only.

    Every read command builds one (:func:`autotune.store.read`), the tuning loop reads one whenever
    it needs the study's state (:meth:`autotune.store.live.LiveStudy.view`), and every figure is
    computed from one (:func:`autotune.evidence.evidence_of`, above the store: the store knows no figure).
    """

    def __init__(self, name: str, attrs: Mapping[str, Any], trials: Sequence[StoredTrial]) -> None:
        self.name = name
        self._attrs = MappingProxyType(dict(attrs))
        self.trials: list[StoredTrial] = list(trials)

    @classmethod
    def of(cls, study: optuna.Study) -> StoredStudy:
        """A live Optuna study, read now (Optuna's own read; :func:`autotune.store.read` is the quick one)."""
        return cls(study.study_name, study.user_attrs, [StoredTrial.of(t) for t in study.get_trials(deepcopy=False)])

    @classmethod
    def from_frozen(cls, name: str, attrs: Mapping[str, Any], trials: Sequence[FrozenTrial]) -> StoredStudy:
        return cls(name, attrs, [StoredTrial.of(t) for t in trials])

    def trial(self, number: int) -> StoredTrial | None:
        if 0 <= number < len(self.trials) and self.trials[number].number == number:
            return self.trials[number]
        return next((t for t in self.trials if t.number == number), None)

    # ------------------------------------------------------------ the description

    def _get(self, key: str, default: Any = None) -> Any:
        value = self._attrs.get(key)
        return default if value is None else value

    @property
    def workload(self) -> Mapping[str, Any]:
        return self._get(WORKLOAD, {})

    @property
    def space(self) -> Mapping[str, Any]:
        return self._get(SPACE, {})

    @property
    def space_hash(self) -> str | None:
        return self._get(SPACE_HASH)

    @property
    def fingerprint(self) -> Mapping[str, Any]:
        return self._get(FINGERPRINT, {})

    @property
    def device(self) -> str | None:
        return self._get(DEVICE)

    @property
    def context(self) -> Mapping[str, Any]:
        return self._get(CONTEXT, {})

    @property
    def global_batch(self) -> int | None:
        return self._get(GLOBAL_BATCH)

    @property
    def max_memory_bytes(self) -> int | None:
        return self._get(MAX_MEMORY)

    @property
    def objectives(self) -> str:
        """The front's axes: ``speed,memory`` (a study made before they were stored too) or ``speed,energy``."""
        return self._get(OBJECTIVES, "speed,memory")

    @property
    def second(self) -> str:
        """The second objective, the trials' second value: ``memory`` or ``energy``."""
        return self.objectives.split(",")[1]

    def peak_memory_of(self, trial: StoredTrial) -> int | None:
        """A trial's peak memory: its second value in a ``speed,memory`` study, its result's in a ``speed,energy``
        one."""
        if self.second == "memory" or trial.outcome != OK:
            return trial.peak_memory_bytes
        peak = trial.result.get("peak_memory_bytes") if trial.result else None
        return int(peak) if isinstance(peak, (int, float)) else None

    @property
    def created_at(self) -> str | None:
        return self._get(CREATED_AT)

    @property
    def version(self) -> str | None:
        return self._get(VERSION)

    @property
    def job(self) -> Mapping[str, Any]:
        """The request its workers follow (empty for studies made before jobs were stored)."""
        return self._get(JOB, {})

    @property
    def job_record(self) -> Mapping[str, Any]:
        """A submitted job's record (empty for a study)."""
        return self._get(JOB_RECORD, {})

    @property
    def job_of(self) -> str | None:
        return self._get(JOB_OF)

    @property
    def deadline(self) -> float | None:
        return self._get(DEADLINE)

    @property
    def warm_start(self) -> list[Mapping[str, Any]]:
        return list(self._get(WARM_START, []))

    @property
    def batch_ceiling(self) -> Mapping[str, Any] | None:
        raw = self._attrs.get(BATCH_CEILING)
        return raw if isinstance(raw, Mapping) else None

    @property
    def sampler_switch(self) -> Mapping[str, Any] | None:
        raw = self._attrs.get(SAMPLER_SWITCH)
        return raw if isinstance(raw, Mapping) else None

    @property
    def described(self) -> bool:
        """Made by autotune (it has a fingerprint)."""
        return FINGERPRINT in self._attrs

    def description(self) -> dict[str, Any]:
        """The study's description as stored (what ``autotune status --json`` and an export carry)."""
        return {k: self._attrs[k] for k in (WORKLOAD, SPACE, SPACE_HASH, FINGERPRINT, DEVICE, CONTEXT, GLOBAL_BATCH,
                                              MAX_MEMORY, OBJECTIVES, CREATED_AT, VERSION) if k in self._attrs}

    # ------------------------------------------------------------ the records

    def remeasurements(self) -> Iterator[Remeasurement]:
        """Every re-measurement in a process of its own, and the legacy ``confirmations``."""
        for key, value in self._attrs.items():
            if not key.startswith(MEASUREMENT) or not isinstance(value, Mapping):
                continue
            round_id, _, trial = key[len(MEASUREMENT):].rpartition(":")
            try:
                number = int(trial)
            except ValueError:
                continue
            yield Remeasurement(round_id, number, value.get("samples_per_s"), str(value.get("outcome") or ""),
                                value.get("peak_memory_bytes"), value.get("other_cores"), value.get("wall_s"),
                                value.get("at"), value.get("cores"))
        for trial, rates in (self._attrs.get(CONFIRMATIONS) or {}).items():
            for i, rate in enumerate(rates):
                yield Remeasurement(f"{RoundId.CLAIM}-{i + 1}", int(trial), float(rate), OK)  # as claims were then

    def blocks(self) -> list[Block]:
        """Every process that measured several configurations alternately, in round order."""
        out = []
        for key, value in self._attrs.items():
            if not key.startswith(PAIRED) or not isinstance(value, Mapping):
                continue
            arms = [a for a in value.get("arms") or [] if isinstance(a, Mapping) and a.get("key")]
            purpose = {k: str(value[k]) for k in ("race", "ablation") if value.get(k)}
            out.append(Block(key[len(PAIRED):], {a["key"]: a.get("samples_per_s") for a in arms},
                             {a["key"]: a.get("trial") for a in arms}, value.get("other_cores"), purpose,
                             {a["key"]: str(a.get("outcome") or "") for a in arms},
                             float(value["wall_s"]) if isinstance(value.get("wall_s"), (int, float)) else None,
                             value.get("at"), value.get("cores")))
        out.sort(key=lambda b: b.round_id)
        return out

    def races(self) -> list[tuple[str, RaceRecord]]:
        """Every race's record, (id, record), oldest first."""
        found = [(k[len(RACE):], RaceRecord.from_dict(v)) for k, v in self._attrs.items()
                 if k.startswith(RACE) and isinstance(v, Mapping)]
        return sorted(found, key=lambda kv: kv[1].started)

    def confirms(self) -> list[tuple[str, ConfirmRecord]]:
        """Every claim measured apart, (id, record), oldest first."""
        found = [(k[len(CONFIRM):], ConfirmRecord.from_dict(v)) for k, v in self._attrs.items()
                 if k.startswith(CONFIRM) and isinstance(v, Mapping) and "chosen" in v]
        return sorted(found, key=lambda kv: kv[1].started)

    def numerics_checks(self) -> list[tuple[str, Mapping[str, Any]]]:
        """Every numerics check, (id, record), oldest first (:mod:`autotune.evidence.numerics_answer` reads a
        record)."""
        found = [(k[len(NUMERICS):], v) for k, v in self._attrs.items()
                 if k.startswith(NUMERICS) and isinstance(v, Mapping)]
        return sorted(found, key=lambda kv: kv[1].get("started", 0.0))

    def ablation_plans(self) -> list[tuple[str, Mapping[str, Any]]]:
        """Every plan of what each knob bought, (id, plan), oldest first."""
        found = [(k[len(ABLATION):], v) for k, v in self._attrs.items()
                 if k.startswith(ABLATION) and isinstance(v, Mapping)]
        return sorted(found, key=lambda kv: kv[1].get("started", 0.0))

    def ablation_plan(self, ablation_id: str) -> Mapping[str, Any]:
        raw = self._attrs.get(ABLATION + ablation_id)
        return raw if isinstance(raw, Mapping) else {}

    def rounds_done(self, prefix: str) -> int:
        """How many shared processes of rounds ``prefix...`` are stored."""
        return sum(1 for k in self._attrs if k.startswith(PAIRED + prefix))

    def sessions(self) -> list[Mapping[str, Any]]:
        return [v for k, v in self._attrs.items() if k.startswith(SESSION) and isinstance(v, Mapping)]

    def with_trials(self, trials: Sequence[StoredTrial]) -> StoredStudy:
        """The same study (its description and records) with these trials instead: a made-up study grown past what
        was stored (autotune/testing/studies.py's ``jittered_copies``), read as any other."""
        return StoredStudy(self.name, self._attrs, trials)


def finite(rate: Any) -> bool:
    return rate is not None and isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0
