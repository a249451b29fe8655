"""What a knob is: the :class:`Knob` declaration, the :class:`Context` a trial runs in, and the conditions
that decide where a knob applies (and where a value that applies is worth searching: ``pays_when``).

Why a module of its own: the declarations in :mod:`autotune.knobs.registry` are data
written in this vocabulary, and a file of fourteen declarations reads best without the
machinery that gives them meaning. Also here: :func:`accumulation_steps`, the one check
of a global batch against a batch size, and the shape of a knob's framework mapping
(:data:`Export`), which :mod:`autotune.knobs.exports` builds on. This module imports no
other part of the package but the effects: the exports and the registry are written in
its terms. Nothing here imports torch.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping

from autotune.errors import KnobError
from autotune.knobs.effects import Effect, LoaderArg
from autotune.machine import preload
from autotune.machine.load import cpu_count

# How a framework export expresses a knob: a function of (the rendering, a :class:`autotune.knobs.exports.Job`; the
# knob's name; its value) that writes the value into the job as an argument or a by-hand step. Declared here by its
# shape, so that the vocabulary the exports are written in does not import them.
Export = Callable[[Any, str, Any], None]

# How a knob's values may share one trial process (autotune.trial.paired: a candidate and the defaults measured
# alternately in one process, so that the process's own speed cancels in their ratio).
PER_ARM = "per_arm"  # its value may differ between the arms of one process: each arm applies it to its own objects
SHARED = "shared"  # it sets process-wide state: every arm of a process has the same value
ALONE = "alone"  # at any value but its default, a configuration is measured in a process of its own

# Stages, in the order a trial applies them.
LAUNCH = "launch"  # how many processes run the training, started before anything else
ENV = "env"  # process environment, set before anything reads it
BACKEND = "backend"  # global torch backend flags
BATCH = "batch"  # batch size / accumulation
LOADER = "loader"  # DataLoader keyword arguments
MODEL = "model"  # model transforms
OPTIMIZER = "optimizer"  # optimizer constructor arguments
STEP = "step"  # how the step itself runs (autocast, scaler)

STAGE_HELP = {
    LAUNCH: "launcher (torchrun)",
    ENV: "process environment",
    BACKEND: "backend flag",
    BATCH: "batch",
    LOADER: "DataLoader argument",
    MODEL: "model transform",
    OPTIMIZER: "optimizer argument",
    STEP: "step wrapper",
}


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
    # The CPU runs bf16 natively (AVX512-BF16, AMX, Arm BF16: autotune.machine.hardware.native_bf16). True where not
    # known (a study stored before it was recorded), so that nothing is left out of a search on a guess.
    cpu_bf16: bool = True
    # The C library is glibc, whose malloc options the host_allocator knob sets (autotune.machine.heap). True where not
    # known.
    glibc: bool = True
    # The CUDA devices a training of several ranks may use (one rank each); 1 where not known.
    devices: int = 1
    # The allocator libraries a trial can preload here (autotune.machine.preload.found: jemalloc, tcmalloc). None where
    # not known (a study stored before it was recorded): nothing is left out on a guess.
    libraries: tuple[str, ...] | None = None
    # torch.distributed's backends in this PyTorch build: several ranks need NCCL on GPUs, gloo on a CPU (None: unknown)
    backends: tuple[str, ...] | None = None

    @property
    def rank_backend(self) -> str:
        return "nccl" if self.device_type == "cuda" else "gloo"

    def to_dict(self) -> dict[str, Any]:
        return {
            "device_type": self.device_type,
            "task": self.task,
            "input_rank": self.input_rank,
            "torch_version": list(self.torch_version),
            "cpu_count": self.cpu_count,
            "optimizer_params": sorted(self.optimizer_params),
            "compile_supported": self.compile_supported,
            "cpu_bf16": self.cpu_bf16,
            "glibc": self.glibc,
            "devices": self.devices,
            "libraries": None if self.libraries is None else list(self.libraries),
            "backends": None if self.backends is None else list(self.backends),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Context:
        return cls(
            device_type=d["device_type"],
            task=d["task"],
            input_rank=d.get("input_rank"),
            torch_version=tuple(d.get("torch_version", (2, 0)))[:2],  # type: ignore[arg-type]
            cpu_count=int(d.get("cpu_count", cpu_count())),
            optimizer_params=frozenset(d.get("optimizer_params", cls.optimizer_params)),
            compile_supported=bool(d.get("compile_supported", True)),
            cpu_bf16=bool(d.get("cpu_bf16", True)),
            glibc=bool(d.get("glibc", True)),
            devices=int(d.get("devices", 1)),
            libraries=None if d.get("libraries") is None else tuple(d["libraries"]),
            backends=None if d.get("backends") is None else tuple(d["backends"]),
        )


# ---------------------------------------------------------------- conditions


@dataclass(frozen=True)
class Condition:
    """A reason a knob (or one of its values) may not apply.

    ``portable`` conditions depend only on the task and the other knobs' values, so they can
    be checked wherever a configuration is applied or exported; the others (device, input
    rank, optimizer, platform) were settled when the configuration was resolved where it ran.
    """

    portable: ClassVar[bool] = False

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
    portable: ClassVar[bool] = True

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
    """Another knob's value is above a threshold (a prefetch factor needs loader workers). It holds that knob
    itself, declared before the knob that depends on it, so that its default is read without a registry."""

    knob: Knob
    threshold: int
    portable: ClassVar[bool] = True

    def __hash__(self) -> int:  # a Knob holds mappings, which do not hash: its name stands for it
        return hash((self.knob.name, self.threshold))

    def __repr__(self) -> str:
        return f"KnobAbove({self.knob.name!r}, {self.threshold})"

    def check(self, ctx: Context, config: Mapping[str, Any]) -> str | None:
        name = self.knob.name
        value = config.get(name, self.knob.default_for(ctx))
        if not value > self.threshold:
            return f"only when {name} > {self.threshold} (it is {value})"
        return None

    def describe(self) -> str:
        return f"{self.knob.name}>{self.threshold}"


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


@dataclass(frozen=True)
class NativeBF16(Condition):
    """On a CPU, bf16 pays only where the CPU runs it natively; elsewhere autocast converts to fp32 and back
    (3-8x slower than fp32 measured on an AVX2-only EPYC). Holds on every other device."""

    def check(self, ctx: Context, config: Mapping[str, Any]) -> str | None:
        if ctx.device_type == "cpu" and not ctx.cpu_bf16:
            return "this CPU has no native bf16 (AVX512-BF16/AMX)"
        return None

    def describe(self) -> str:
        return "on a CPU, searched only with native bf16"


@dataclass(frozen=True)
class Glibc(Condition):
    """The process's C library is glibc (Linux as most distributions ship it): its malloc takes ``mallopt``."""

    def check(self, ctx: Context, config: Mapping[str, Any]) -> str | None:
        if not ctx.glibc:
            return "needs glibc's malloc (Linux)"
        return None

    def describe(self) -> str:
        return "glibc"


@dataclass(frozen=True)
class Preloadable(Condition):
    """An allocator library (a name of :data:`autotune.machine.preload.LIBRARIES`) is installed where the trial runs,
    to be preloaded into its process; where it is not, the reason names the package to install."""

    library: str

    def check(self, ctx: Context, config: Mapping[str, Any]) -> str | None:
        if ctx.libraries is not None and self.library not in ctx.libraries:
            return preload.missing(self.library)
        return None

    def describe(self) -> str:
        return f"{self.library} installed"


# ---------------------------------------------------------------- knobs

CPUS = "cpus"  # a bound that stands for the number of usable CPUs
RANK_SLOTS = "rank_slots"  # a bound that stands for the usable CPUs on a CPU, the CUDA devices on a GPU


@dataclass(frozen=True)
class Knob:
    """One performance knob, declared as data.

    Besides its values and where it applies, a knob declares how it is applied
    (``effects``, carried out by :mod:`autotune.trial.plan`), what a user writes to apply a value
    by hand (``how``), and how each framework export expresses it (``exports``: format ->
    a function that writes the value into a :class:`~autotune.knobs.exports.Job` as an
    argument, or as a by-hand step that says why and how).
    """

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
    # Where a value applies but cannot pay: a search leaves it out (saying why), a configuration that asks for it
    # still runs it (measure --set, a space's [fixed]), so a claim can always be checked.
    pays_when: Mapping[Any, tuple[Condition, ...]] = field(default_factory=dict)
    torch_default: str = ""  # what PyTorch does when nobody sets it, in words
    recipe: Any = None  # the tuning guides' "every trick on" value; None: leave at the default
    effects: tuple[Effect, ...] = ()  # what applying a value does (autotune.trial.plan carries out each kind)
    how: Callable[[Any], str] | None = None  # what to write by hand for a value, whatever the framework
    exports: Mapping[str, Export] = field(default_factory=dict)  # framework format -> how it expresses the knob
    always_stated: bool = False  # exports state it even at its default, which is nobody's choice (the batch size)
    # Its gain depends on what else runs on the machine (fewer threads suffer less from other processes): never
    # recommended from measurements taken on a busy machine (autotune.evidence, autotune.machine.load).
    load_sensitive: bool = False
    # Whether its values may differ between configurations measured alternately in one process (PER_ARM: a fresh
    # model, optimizer, loader and step per arm, and nothing it sets outlives the arm), must be equal there (SHARED:
    # process-wide state such as threads, environment variables or loader worker processes), or keep a non-default
    # value out of shared processes altogether (ALONE: torch.compile's caches and recompilations). See
    # autotune.trial.paired and docs/claims.md ("Shared processes").
    in_process: str = SHARED
    # The values at which arms may share a process at all (None: any). The host heap at glibc's default carries one
    # arm's allocations into the next arm's speed (autotune.machine.heap), so host_allocator shares only at "retain".
    shares_at: tuple[Any, ...] | None = None
    why_apart: str = ""  # what apart() says at a value outside shares_at
    # False for a knob added after studies were stored: at its default it is left out of a configuration's key
    # (Resolved.key), so the keys of those studies' trials, measured at that default, stay what they were.
    keyed_at_default: bool = True
    # At any value but its default a trial starts processes of its own (loader workers, compile workers): the
    # trial's memory is then that of its whole process tree, sampled (autotune.trial.protocol.MemoryMonitor).
    starts_processes: bool = False
    # The values that take effect only in a process started with them (a preloaded library, OpenMP's binding, read
    # when its library loads): a trial at one of them is forked from an interpreter started with the knob's
    # environment (autotune.trial.launch), never from the warm one.
    started_with: tuple[Any, ...] = ()

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
        elif high == RANK_SLOTS:
            high = (ctx.devices if ctx.device_type == "cuda" else ctx.cpu_count) if ctx else 1024
            if ctx is not None and ctx.backends is not None and ctx.rank_backend not in ctx.backends:
                high = 1
        return self.low, int(high)

    def bound_why(self, ctx: Context) -> str:
        """Why this range knob's highest value here is what :meth:`bounds` says: the CPUs, the GPUs, the backend."""
        high, gpus = self.bounds(ctx)[1], self.high == RANK_SLOTS and ctx.device_type == "cuda"
        if self.high == RANK_SLOTS and ctx.backends is not None and ctx.rank_backend not in ctx.backends:
            return f"several ranks need torch.distributed's {ctx.rank_backend} backend, which this PyTorch build lacks"
        return f"{high} {'GPU' if gpus else 'CPU'}{'s' if high != 1 else ''} here" + (", a rank a GPU" if gpus else "")

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
                why = f" ({self.bound_why(ctx)})" if ctx and value > high and self.high == RANK_SLOTS else ""
                raise KnobError(f"knob {self.name!r}: {value} is out of range [{low}, {high}]{why}")
        return value

    def values_text(self) -> str:
        if self.is_bool:
            return "off, on"
        if self.is_range:
            step = f" step {self.step}" if self.step != 1 else ""
            high = {CPUS: "#cpus", RANK_SLOTS: "#cpus (#gpus on a GPU)"}.get(str(self.high), self.high)
            return f"{self.low}..{high}{step}"
        parts = []
        for choice in self.choices or ():
            conds = (*self.value_when.get(choice, ()), *self.pays_when.get(choice, ()))
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

    def not_paying(self, value: Any, ctx: Context) -> str | None:
        """Why this value, though it applies here, is not worth searching here; None when it may pay."""
        for cond in self.pays_when.get(value, ()):
            reason = cond.check(ctx, {})
            if reason:
                return reason
        return None

    def format(self, value: Any) -> str:
        if self.is_bool:
            return "on" if value else "off"
        return str(value)

    def in_force(self, config: Mapping[str, Any], task: str) -> bool:
        """Whether the knob's portable conditions hold (its task, the knobs it depends on): where they do
        not, a plan passes no argument for it and an export says nothing (prefetch without workers)."""
        ctx = Context(task=task)
        return all(cond.check(ctx, config) is None for cond in self.when if cond.portable)

    def how_to(self, value: Any) -> str:
        """What to write by hand to apply ``value``, whatever the framework."""
        if self.how is not None:
            return self.how(value)
        for effect in self.effects:
            if isinstance(effect, LoaderArg):
                return f"DataLoader(dataset, {effect.keyword}={value!r})"
        return f"apply it with autotune.load_config(...).apply(...) ({self.help})"


def accumulation_steps(global_batch: int | None, batch_size: int) -> int:
    """Micro-batches per optimizer step that keep the effective batch at ``global_batch`` (1 without one).

    The one place that checks a global batch against a batch size: the request, the
    study's batch candidates, the plan and the exports all ask here. Raises
    :class:`KnobError` when ``batch_size`` does not divide ``global_batch``.
    """
    batch_size = _whole(batch_size, "the batch size")
    if global_batch is None:
        return 1
    global_batch = _whole(global_batch, "the global batch")
    if global_batch % batch_size:
        raise KnobError(
            f"the batch size {batch_size} does not divide the global batch {global_batch} ({global_batch} is not a "
            f"multiple of {batch_size}): gradient accumulation needs a whole number of batches per optimizer step"
        )
    return global_batch // batch_size




def keeps_global_batch(global_batch: int | None, batch_size: int) -> bool:
    """Whether gradient accumulation keeps ``global_batch`` with this batch size (:func:`accumulation_steps`
    would take it)."""
    try:
        accumulation_steps(global_batch, batch_size)
    except KnobError:
        return False
    return True


def _whole(value: Any, what: str) -> int:
    """``value`` as a positive int (numpy integers too); KnobError for anything else."""
    try:
        number = operator.index(value) if not isinstance(value, bool) else None
    except TypeError:
        number = None
    if number is None or number < 1:
        raise KnobError(f"{what} must be a positive whole number of samples, not {value!r}")
    return number
