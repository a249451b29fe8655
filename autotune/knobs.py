"""The knob registry: every performance knob autotune tunes, declared once as data.

A knob says what values it takes, what PyTorch does by default, when it applies
(device, task, input rank, torch version, another knob's value, what the optimizer
supports), at which stage it is applied, and one line of help. Space validation,
the ``autotune knobs`` table, dashboards and exports all read this registry; no
other module re-lists knob names. How each stage is applied lives in
:mod:`autotune.plan`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from autotune.errors import KnobError

# Stages, in the order a trial applies them.
ENV = "env"  # process environment, set before anything reads it
BACKEND = "backend"  # global torch backend flags
BATCH = "batch"  # batch size / accumulation
LOADER = "loader"  # DataLoader keyword arguments
MODEL = "model"  # model transforms
OPTIMIZER = "optimizer"  # optimizer constructor arguments
STEP = "step"  # how the step itself runs (autocast, scaler)

STAGE_HELP = {
    ENV: "process environment",
    BACKEND: "backend flag",
    BATCH: "batch",
    LOADER: "DataLoader argument",
    MODEL: "model transform",
    OPTIMIZER: "optimizer argument",
    STEP: "step wrapper",
}


def cpu_count() -> int:
    """CPUs this process may run on (affinity-aware)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Context:
    """What a trial knows about where it runs; decides which knobs apply."""

    device_type: str = "cpu"
    task: str = "train"
    input_rank: int | None = None
    torch_version: tuple[int, int] = (2, 0)
    cpu_count: int = field(default_factory=cpu_count)
    optimizer_params: frozenset[str] = frozenset({"foreach", "fused"})
    compile_supported: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "device_type": self.device_type,
            "task": self.task,
            "input_rank": self.input_rank,
            "torch_version": list(self.torch_version),
            "cpu_count": self.cpu_count,
            "optimizer_params": sorted(self.optimizer_params),
            "compile_supported": self.compile_supported,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Context:
        return cls(
            device_type=d["device_type"],
            task=d["task"],
            input_rank=d.get("input_rank"),
            torch_version=tuple(d.get("torch_version", (2, 0)))[:2],  # type: ignore[arg-type]
            cpu_count=int(d.get("cpu_count", cpu_count())),
            optimizer_params=frozenset(d.get("optimizer_params", ())),
            compile_supported=bool(d.get("compile_supported", True)),
        )


# ---------------------------------------------------------------- conditions


@dataclass(frozen=True)
class Condition:
    """A reason a knob (or one of its values) may not apply."""

    def check(self, ctx: Context, config: Mapping[str, Any]) -> str | None:
        """None when it holds, else why not."""
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class OnDevice(Condition):
    device_type: str

    def check(self, ctx: Context, config: Mapping[str, Any]) -> str | None:
        if ctx.device_type != self.device_type:
            return f"needs a {self.device_type.upper()} device (this trial runs on {ctx.device_type})"
        return None

    def describe(self) -> str:
        return self.device_type.upper()


@dataclass(frozen=True)
class ForTask(Condition):
    task: str

    def check(self, ctx: Context, config: Mapping[str, Any]) -> str | None:
        if ctx.task != self.task:
            return f"only for {self.task} workloads (this one is {ctx.task})"
        return None

    def describe(self) -> str:
        return self.task


@dataclass(frozen=True)
class InputRank(Condition):
    rank: int

    def check(self, ctx: Context, config: Mapping[str, Any]) -> str | None:
        if ctx.input_rank != self.rank:
            return f"needs {self.rank}-D inputs (this workload's are {ctx.input_rank}-D)"
        return None

    def describe(self) -> str:
        return f"{self.rank}-D inputs"


@dataclass(frozen=True)
class KnobAbove(Condition):
    knob: str
    threshold: int

    def check(self, ctx: Context, config: Mapping[str, Any]) -> str | None:
        value = config.get(self.knob, KNOBS[self.knob].default_for(ctx))
        if not value > self.threshold:
            return f"only when {self.knob} > {self.threshold} (it is {value})"
        return None

    def describe(self) -> str:
        return f"{self.knob}>{self.threshold}"


@dataclass(frozen=True)
class OptimizerSupports(Condition):
    param: str

    def check(self, ctx: Context, config: Mapping[str, Any]) -> str | None:
        if self.param not in ctx.optimizer_params:
            return f"the optimizer takes no {self.param}= argument"
        return None

    def describe(self) -> str:
        return f"optimizer has {self.param}="


@dataclass(frozen=True)
class CompileSupported(Condition):
    def check(self, ctx: Context, config: Mapping[str, Any]) -> str | None:
        if not ctx.compile_supported:
            return "torch.compile is not supported on this Python/platform"
        return None

    def describe(self) -> str:
        return "torch.compile available"


# ---------------------------------------------------------------- knobs

CPUS = "cpus"  # a bound that stands for the number of usable CPUs


@dataclass(frozen=True)
class Knob:
    """One performance knob, declared as data."""

    name: str
    stage: str
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    low: int | None = None
    high: int | str | None = None
    step: int = 1  # the grid step when searched
    when: tuple[Condition, ...] = ()
    value_when: Mapping[Any, tuple[Condition, ...]] = field(default_factory=dict)
    torch_default: str = ""  # what PyTorch does when nobody sets it, in words
    recipe: Any = None  # the tuning guides' "every trick on" value; None: leave at the default

    @property
    def is_range(self) -> bool:
        return self.choices is None

    @property
    def is_bool(self) -> bool:
        return self.choices == (False, True)

    def bounds(self, ctx: Context | None = None) -> tuple[int, int]:
        assert self.low is not None and self.high is not None
        high = self.high
        if high == CPUS:  # without a context (a space file, say) any machine's count is allowed
            high = ctx.cpu_count if ctx else 1024
        return self.low, int(high)

    def default_for(self, ctx: Context | None = None) -> Any:
        if self.default == CPUS:
            return ctx.cpu_count if ctx else cpu_count()
        return self.default

    def parse(self, raw: Any) -> Any:
        """Turn a value from the command line, TOML or JSON into this knob's type."""
        if self.is_bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("on", "true", "1", "yes"):
                return True
            if text in ("off", "false", "0", "no"):
                return False
            raise KnobError(f"knob {self.name!r}: {raw!r} is not one of on, off")
        if self.is_range:
            if isinstance(raw, bool):
                raise KnobError(f"knob {self.name!r}: {raw!r} is not an integer")
            try:
                value = int(str(raw).strip()) if not isinstance(raw, int) else raw
            except ValueError:
                raise KnobError(f"knob {self.name!r}: {raw!r} is not an integer") from None
            return value
        text = str(raw).strip()
        for choice in self.choices or ():
            if str(choice) == text:
                return choice
        raise KnobError(
            f"knob {self.name!r}: {raw!r} is not one of {', '.join(map(str, self.choices or ()))}"
        )

    def validate(self, value: Any, ctx: Context | None = None) -> Any:
        """Parse and range-check one value; raises KnobError."""
        value = self.parse(value)
        if self.is_range:
            low, high = self.bounds(ctx)
            if not low <= value <= high:
                raise KnobError(f"knob {self.name!r}: {value} is out of range [{low}, {high}]")
        return value

    def values_text(self) -> str:
        if self.is_bool:
            return "off, on"
        if self.is_range:
            step = f" step {self.step}" if self.step != 1 else ""
            high = "#cpus" if self.high == CPUS else self.high
            return f"{self.low}..{high}{step}"
        parts = []
        for choice in self.choices or ():
            conds = self.value_when.get(choice)
            parts.append(f"{choice} ({', '.join(c.describe() for c in conds)})" if conds else str(choice))
        return ", ".join(parts)

    def applies_text(self) -> str:
        return ", ".join(c.describe() for c in self.when) or "everywhere"

    def not_applicable(self, value: Any, ctx: Context, config: Mapping[str, Any]) -> str | None:
        """Why this knob (or this value of it) does not apply here; None when it does."""
        for cond in self.when:
            reason = cond.check(ctx, config)
            if reason:
                return reason
        for cond in self.value_when.get(value, ()):
            reason = cond.check(ctx, config)
            if reason:
                return f"{value}: {reason}"
        return None

    def format(self, value: Any) -> str:
        if self.is_bool:
            return "on" if value else "off"
        return str(value)


REGISTRY: tuple[Knob, ...] = (
    Knob(
        "precision",
        STEP,
        "fp32",
        "numeric precision of the step: autocast to bf16/fp16 (fp16 training with a GradScaler), or TF32 matmuls",
        choices=("fp32", "tf32", "bf16", "fp16"),
        value_when={"tf32": (OnDevice("cuda"),), "fp16": (OnDevice("cuda"),)},
        torch_default="fp32, no autocast",
        recipe="bf16",
    ),
    Knob(
        "compile",
        MODEL,
        "off",
        "torch.compile mode; compile time is kept apart as time to first step",
        choices=("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
        when=(CompileSupported(),),
        value_when={
            "reduce-overhead": (OnDevice("cuda"),),
            "max-autotune-no-cudagraphs": (OnDevice("cuda"),),
        },
        torch_default="eager",
        recipe="default",
    ),
    Knob(
        "memory_format",
        MODEL,
        "contiguous",
        "channels_last puts model weights and 4-D inputs in NHWC layout",
        choices=("contiguous", "channels_last"),
        when=(InputRank(4),),
        torch_default="contiguous (NCHW)",
        recipe="channels_last",
    ),
    Knob(
        "batch_size",
        BATCH,
        32,
        "samples per step; with --global-batch the effective batch is kept by gradient accumulation",
        low=1,
        high=65536,
        step=8,
        torch_default="the user's choice",
    ),
    Knob(
        "num_workers",
        LOADER,
        0,
        "DataLoader worker processes",
        low=0,
        high=CPUS,
        torch_default="0 (load in the main process)",
        recipe=4,
    ),
    Knob(
        "prefetch_factor",
        LOADER,
        2,
        "batches each DataLoader worker loads ahead",
        low=1,
        high=8,
        when=(KnobAbove("num_workers", 0),),
        torch_default="2",
        recipe=2,
    ),
    Knob(
        "persistent_workers",
        LOADER,
        False,
        "keep DataLoader workers alive between epochs",
        choices=(False, True),
        when=(KnobAbove("num_workers", 0),),
        torch_default="off",
        recipe=True,
    ),
    Knob(
        "pin_memory",
        LOADER,
        False,
        "page-locked host batches, copied to the GPU with non_blocking=True",
        choices=(False, True),
        when=(OnDevice("cuda"),),
        torch_default="off",
        recipe=True,
    ),
    Knob(
        "activation_checkpointing",
        MODEL,
        False,
        "recompute the activations of each block in backward: less memory, more compute",
        choices=(False, True),
        when=(ForTask("train"),),
        torch_default="off",
    ),
    Knob(
        "cudnn_benchmark",
        BACKEND,
        False,
        "let cuDNN time its algorithms for each input shape and keep the fastest",
        choices=(False, True),
        when=(OnDevice("cuda"),),
        torch_default="off",
        recipe=True,
    ),
    Knob(
        "optimizer_impl",
        OPTIMIZER,
        "default",
        "optimizer kernels: per-tensor loop, foreach (multi-tensor), or fused",
        choices=("default", "foreach", "fused"),
        when=(ForTask("train"),),
        value_when={"foreach": (OptimizerSupports("foreach"),), "fused": (OptimizerSupports("fused"),)},
        torch_default="default (foreach on CUDA where possible)",
        recipe="fused",
    ),
    Knob(
        "threads",
        ENV,
        CPUS,
        "intra-op CPU threads (torch.set_num_threads, OMP_NUM_THREADS)",
        low=1,
        high=CPUS,
        torch_default="one per core",
    ),
    Knob(
        "cuda_allocator",
        ENV,
        "default",
        "CUDA caching allocator setting (PYTORCH_CUDA_ALLOC_CONF), set before CUDA starts",
        choices=("default", "expandable_segments"),
        when=(OnDevice("cuda"),),
        torch_default="default",
    ),
)

KNOBS: dict[str, Knob] = {k.name: k for k in REGISTRY}
NAMES: tuple[str, ...] = tuple(KNOBS)


def get(name: str) -> Knob:
    try:
        return KNOBS[name]
    except KeyError:
        raise KnobError(f"unknown knob {name!r}; known knobs: {', '.join(NAMES)}") from None


def defaults(ctx: Context | None = None) -> dict[str, Any]:
    """The PyTorch defaults, as knob values."""
    return {k.name: k.default_for(ctx) for k in REGISTRY}


def parse_assignments(items: Iterable[str], ctx: Context | None = None) -> dict[str, Any]:
    """Parse ``name=value`` strings (``--set``) into validated knob values."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise KnobError(f"--set {item!r}: expected name=value")
        name, raw = item.split("=", 1)
        knob = get(name.strip())
        out[knob.name] = knob.validate(raw, ctx)
    return out


def validate_config(config: Mapping[str, Any], ctx: Context | None = None) -> dict[str, Any]:
    """Validate a knob->value mapping (from JSON or TOML); raises KnobError."""
    return {get(name).name: get(name).validate(value, ctx) for name, value in config.items()}


@dataclass(frozen=True)
class Resolved:
    """A configuration as it will really run: every knob's value, and what was dropped."""

    config: dict[str, Any]
    not_applicable: dict[str, str]

    def key(self) -> str:
        """A canonical string of the effective configuration (for de-duplication)."""
        return ";".join(f"{name}={KNOBS[name].format(self.config[name])}" for name in NAMES)


def resolve(config: Mapping[str, Any], ctx: Context) -> Resolved:
    """Fill in defaults and drop (to the default) every knob that does not apply here.

    Knobs are resolved in registry order against the values decided so far, so a
    knob that depends on another (``prefetch_factor`` on ``num_workers``) is
    declared after it and sees the value that will really be used.
    """
    effective: dict[str, Any] = {}
    dropped: dict[str, str] = {}
    requested = dict(config)
    for knob in REGISTRY:
        default = knob.default_for(ctx)
        value = requested.get(knob.name, default)
        context_config = {**requested, **effective}
        reason = knob.not_applicable(value, ctx, context_config)
        if reason is not None:
            if knob.name in requested and value != default:
                dropped[knob.name] = reason
            # The default of an inapplicable knob may itself not apply (e.g. none at all).
            value = default
        effective[knob.name] = value
    return Resolved(effective, dropped)


def differs_from_default(config: Mapping[str, Any], ctx: Context | None = None) -> dict[str, Any]:
    """The knobs of ``config`` whose value differs from PyTorch's default."""
    base = defaults(ctx)
    return {k: v for k, v in config.items() if k in base and base[k] != v}


def short(config: Mapping[str, Any], ctx: Context | None = None) -> str:
    """A short human string of the knobs that differ from the defaults."""
    diff = differs_from_default(config, ctx)
    if not diff:
        return "defaults"
    return " ".join(f"{k}={KNOBS[k].format(v)}" for k, v in diff.items())


def recipe(ctx: Context, base: Mapping[str, Any]) -> dict[str, Any]:
    """The tuning guides' "every trick on" configuration, as far as it applies here."""
    config = dict(base)
    for knob in REGISTRY:
        if knob.recipe is None:
            continue
        value = knob.recipe
        if knob.is_range:
            low, high = knob.bounds(ctx)
            value = max(low, min(high, int(value)))
        config[knob.name] = value
    return resolve(config, ctx).config
