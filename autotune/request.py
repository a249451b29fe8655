"""The one typed request: what a tuning job is, validated once, every default in one place.

A :class:`TuneConfig` holds a whole job: the workload (a :class:`WorkloadSpec`), the
search space, the budget and how to measure. ``autotune run``, ``autotune submit`` and
``autotune.tune()`` only translate their arguments into one; :mod:`autotune.tuning`
and :mod:`autotune.study` take it (or what derives from it) and nothing else. It is
stored on its study (``job``), so a worker on another machine joins with nothing but a
study name and a storage URL.

Why one: the job was spelled four times (click options, ``tune``'s parameters, a Job
and the tuner's Options) and the copies disagreed (the trial timeout was 600 s in two
places and 300 s in a third; the stale-trial grace matched neither). Here each default
is written once and the grace derives from the timeout.

This module imports neither torch nor Optuna: the CLI reads its defaults before parsing.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import asdict, dataclass, fields
from typing import Any, Iterable, Mapping

from autotune.errors import KnobError, SpecError

TASKS = ("train", "infer")
SAMPLERS = ("tpe", "gp", "random", "nsga2")
DEFAULT_SAMPLER = "gp"  # from benchmarks/search_efficiency.py: best share of the grid optimum after 20 trials
DEFAULT_TRIALS = 30
DEFAULT_CONFIRM = 8  # rounds of the final race at most
MAX_CONFIRM = 50
MAX_TRIALS = 100_000
DEFAULT_TRIAL_TIMEOUT_S = 600.0
DEFAULT_POLL_S = 30.0  # how often a worker --all looks for new jobs
CUT_MARGIN = 0.25  # early stopping: a trial is cut when a front point is this much faster at no more memory (at least)
#: What ``autotune export --pick`` may take: the verdict's recommendation (the defaults when nothing beats them
#: beyond the noise), the fastest-looking point of the front, the smallest, or the balance of the two.
PICKS = ("recommended", "fastest", "smallest", "balanced")
DEFAULT_PICK = "recommended"


# ---------------------------------------------------------------- the workload

MAX_NAME = 200


def safe_name(text: str) -> str:
    """A study name made from any text (a model spec, a callable's name): what is not allowed becomes '-'
    (the rule: :func:`autotune.store.check_name`)."""
    name = re.sub(r"[^A-Za-z0-9._@-]+", "-", text).strip("-.@")[:MAX_NAME]
    return name or "study"


@dataclass(frozen=True)
class WorkloadSpec:
    """How to build a workload: picklable, stored with a study."""

    model: str
    data: str | None = None
    model_args: tuple[tuple[str, Any], ...] = ()
    input_shape: tuple[int, ...] | None = None
    num_classes: int | None = None
    task: str | None = None  # overrides the workload's own task
    synthetic_size: int = 1 << 16
    # ``pickled:<name>@<sha256>`` spec -> base64 of the cloudpickled object (autotune.tune/measure with a callable)
    pickled: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model.strip():
            raise SpecError("the model (--model, model=) is empty: name a factory as module:attr, or hf:<model_type>")
        if self.num_classes is not None and (isinstance(self.num_classes, bool) or not isinstance(self.num_classes, int)
                                             or self.num_classes < 2):
            raise KnobError(f"the number of classes (--num-classes, num_classes=) must be an integer of at least 2, "
                            f"not {self.num_classes!r}")
        if self.task is not None and self.task not in TASKS:
            raise KnobError(f"the task (--task, task=) must be one of {', '.join(TASKS)}, not {self.task!r}")

    def default_study_name(self) -> str:
        """The study a run of this workload resumes when no ``--study`` is given: the model's name, and, when
        anything else sets this workload apart (model arguments, data, shapes, task, a Python object's code), a
        digest of it, so that unrelated models and changed arguments never share a study by accident.
        ``mypkg.models:build`` -> ``mypkg.models-build``; with ``--model-arg width=8`` -> ``mypkg.models-build-1a2b3c4d``."""
        pickled = self.model.startswith("pickled:")
        model = self.model[len("pickled:"):].rsplit("@", 1)[0] if pickled else self.model
        name = safe_name(model.replace(":", "-").replace("/", "-"))
        identity = self.to_dict(payload=False)
        if pickled or any(v for k, v in identity.items() if k != "model"):
            digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:8]
            name = f"{name[:MAX_NAME - 9]}-{digest}"
        return name

    def to_dict(self, payload: bool = True) -> dict[str, Any]:
        """The spec as JSON. ``payload=False`` leaves out the pickled bytes: the workload's name, not its bytes
        (what a study records as its ``workload`` and compares on a resume)."""
        out = {
            "model": self.model,
            "data": self.data,
            "model_args": {k: v for k, v in self.model_args},
            "input_shape": list(self.input_shape) if self.input_shape else None,
            "num_classes": self.num_classes,
            "task": self.task,
        }
        if self.pickled and payload:
            out["pickled"] = dict(self.pickled)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WorkloadSpec:
        return cls(
            model=d["model"],
            data=d.get("data"),
            model_args=tuple(sorted((d.get("model_args") or {}).items())),
            input_shape=tuple(d["input_shape"]) if d.get("input_shape") else None,
            num_classes=d.get("num_classes"),
            task=d.get("task"),
            pickled=tuple(sorted((d.get("pickled") or {}).items())),
        )


def parse_model_args(items: Iterable[str]) -> tuple[tuple[str, Any], ...]:
    """``key=value`` strings into keyword arguments (values as Python literals when they parse)."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise SpecError(f"--model-arg {item!r}: expected key=value")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key.isidentifier():
            raise SpecError(f"--model-arg {item!r}: {key!r} is not a valid argument name")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        out[key] = value
    return tuple(sorted(out.items()))


def parse_shape(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        shape = tuple(int(p) for p in text.replace("x", ",").split(",") if p.strip())
    except ValueError:
        raise SpecError(f"--input-shape {text!r}: expected comma-separated integers, e.g. 3,32,32") from None
    if not shape or any(d <= 0 for d in shape):
        raise SpecError(f"--input-shape {text!r}: expected positive integers, e.g. 3,32,32")
    return shape


# ---------------------------------------------------------------- the job


def stale_grace(trial_timeout_s: float) -> float:
    """How long a trial of another host may go without a sign of life before it is taken as stale:
    two trial timeouts and a minute (a trial is killed after one timeout; the second covers the probe)."""
    return 2 * trial_timeout_s + 60


def check_global_batch(value: Any) -> None:
    """A global batch is a positive whole number (whether a batch size divides it: knobs.accumulation_steps)."""
    if value is not None:
        _whole(value, "the global batch (--global-batch, global_batch=)", 1)


def _whole(value: Any, what: str, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f"from {low} to {high}" if high is not None else f"of at least {low}"
        raise KnobError(f"{what} must be a whole number {bound}, not {value!r}")


def _positive(value: Any, what: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value != value:
        raise KnobError(f"{what} must be positive, not {value!r}")


@dataclass(frozen=True)
class TuneConfig:
    """A tuning job: what to tune and how (everything but where: the study name and the store).

    Validated on construction; every field's default is the product's default. Durations
    are seconds and sizes bytes here: the CLI's parameter types and :func:`autotune.tune`
    turn ``"2h"`` or ``"20GiB"`` into them (:mod:`autotune.units`).
    """

    spec: WorkloadSpec
    space: str | None = None  # a built-in space's name or a TOML path; default: 'cpu' on a CPU, 'default' on a GPU
    trials: int = DEFAULT_TRIALS
    time_budget_s: float | None = None
    max_memory_bytes: int | None = None
    global_batch: int | None = None
    sampler: str = DEFAULT_SAMPLER
    seed: int | None = None
    quick: bool = False
    early_stop: bool = True
    confirm: int = DEFAULT_CONFIRM
    trial_timeout_s: float = DEFAULT_TRIAL_TIMEOUT_S
    batch_ceiling: bool | None = None  # probe the largest batch that fits; None: on a GPU or with a memory budget
    warm_start: bool = True  # a new study first measures earlier studies' winners on this kind of machine (autotune.warmstart)

    def __post_init__(self) -> None:
        if not isinstance(self.spec, WorkloadSpec):
            raise SpecError(f"a tuning job needs a WorkloadSpec, not {type(self.spec).__name__}")
        _whole(self.trials, "the trial budget (--trials, trials=)", 1, MAX_TRIALS)
        _whole(self.confirm, "the race's rounds (--confirm, confirm=)", 0, MAX_CONFIRM)
        check_global_batch(self.global_batch)
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise KnobError(f"the seed (--seed, seed=) must be a whole number, not {self.seed!r}")
        if self.sampler not in SAMPLERS:
            raise KnobError(f"the sampler (--sampler, sampler=) must be one of {', '.join(SAMPLERS)}, not {self.sampler!r}")
        _positive(self.time_budget_s, "the time budget (--time-budget, time_budget=)")
        _positive(self.trial_timeout_s, "the trial timeout (--trial-timeout, trial_timeout=)")
        if self.max_memory_bytes is not None:
            _whole(self.max_memory_bytes, "the memory budget (--max-memory, max_memory=) in bytes", 1)
        if self.space is not None and (not isinstance(self.space, str) or not self.space.strip()):
            raise KnobError(f"the space (--space, space=) must name a space or a TOML file, not {self.space!r}")
        for flag in ("quick", "early_stop", "warm_start"):
            if not isinstance(getattr(self, flag), bool):
                raise KnobError(f"{flag} must be True or False, not {getattr(self, flag)!r}")
        if self.batch_ceiling is not None and not isinstance(self.batch_ceiling, bool):
            raise KnobError(f"batch_ceiling must be True, False or None, not {self.batch_ceiling!r}")

    @property
    def stale_grace_s(self) -> float:
        return stale_grace(self.trial_timeout_s)

    def space_name(self, device: str) -> str:
        return self.space or ("cpu" if device == "cpu" else "default")

    def probes_ceiling(self, device: str) -> bool:
        """Whether to find the batch ceiling before searching batch sizes (see :mod:`autotune.ceiling`)."""
        if self.batch_ceiling is not None:
            return self.batch_ceiling
        return device != "cpu" or self.max_memory_bytes is not None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["spec"] = self.spec.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TuneConfig:
        """A stored job (a study's ``job`` attribute); fields a newer version added take their defaults."""
        names = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names and k != "spec"}
        return cls(spec=WorkloadSpec.from_dict(d["spec"]), **kwargs)
