"""What applying a knob does, as data: the effects a knob declares and :mod:`autotune.trial.plan` carries out.

Why: the registry is the one place that names knobs, yet applying one needs torch
(setting a thread count, converting a model to channels-last, wrapping blocks in
checkpoints, autocasting the step). So a knob declares *which* effects its value has,
with their data (the environment variables, the DataLoader keyword, the torch flag, the
autocast dtypes), and the plan implements each kind of effect once, without knowing
which knob asked for it. A new knob that reuses a kind (another environment variable,
DataLoader argument or backend flag) touches only the registry; only a new kind of
effect needs code in the plan. Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from autotune.machine import preload


@dataclass(frozen=True)
class Effect:
    """One thing that applying a knob's value does."""


# ---------------------------------------------------------------- the process, before and after torch starts


@dataclass(frozen=True)
class Env(Effect):
    """Environment variables, set before torch (or CUDA) reads them: in a trial's process before the
    workload is built, in a user's script before Python starts."""

    names: tuple[str, ...]
    values: Mapping[Any, str] | None = None  # knob value -> the variables' value (absent: unset); None: the value
    # Other names of the same setting (PyTorch 2.9 reads PYTORCH_ALLOC_CONF before PYTORCH_CUDA_ALLOC_CONF): never set
    # by the knob, and, like ``names``, never inherited by a trial (:func:`autotune.knobs.owned_environment`).
    aliases: tuple[str, ...] = ()

    @property
    def owned(self) -> tuple[str, ...]:
        """Every variable this effect decides: at the knob's default a trial runs with none of them set."""
        return self.names + self.aliases

    def variables(self, value: Any) -> dict[str, str]:
        if self.values is not None:
            text = self.values.get(value)
        else:
            text = None if value is None or value is False else str(value)
        return {} if text is None else {name: text for name in self.names}


@dataclass(frozen=True)
class Preload(Env):
    """A library preloaded into processes started afterwards: ``LD_PRELOAD=<path>``, the path of the library the
    value names (``libraries``: knob value -> a name of :data:`autotune.machine.preload.LIBRARIES`) as installed here.
    It takes effect only in a process started with it (the knob's ``started_with``), which proves it by its memory
    map."""

    names: tuple[str, ...] = ("LD_PRELOAD",)
    libraries: Mapping[Any, str] = field(default_factory=dict)

    def variables(self, value: Any) -> dict[str, str]:
        library = self.libraries.get(value)
        path = preload.find(library) if library is not None else None
        return {} if path is None else {name: path for name in self.names}


@dataclass(frozen=True)
class BindCores(Effect):
    """At value ``on``, the process and its threads bound to a compact set of cores, one a thread
    (:mod:`autotune.machine.binding`): a trial's process is started bound (``numactl``/``taskset``); elsewhere the
    process binds itself, unless it is bound within that set already."""

    on: Any


@dataclass(frozen=True)
class NumThreads(Effect):
    """``torch.set_num_threads(value)`` in this process (its environment only reaches new processes)."""


# The two ways torch sets TF32. PyTorch 2.9 added ``fp32_precision`` (``torch.backends.cuda.matmul.fp32_precision =
# "tf32"``) and refuses to read a legacy ``allow_tf32`` flag once the new API set the same setting (inductor reads the
# new one), so a process uses one API: the new one where torch has it (``torch.backends.fp32_precision``).
LEGACY_TF32 = "allow_tf32"
FP32_PRECISION = "fp32_precision"


@dataclass(frozen=True)
class Flag(Effect):
    """A global torch attribute (``path`` below ``torch``, e.g. ``backends.cudnn.benchmark``) set to
    ``value(knob value)`` in the process, on devices of ``device_type`` only. ``api``: the flag belongs to one of
    torch's TF32 APIs (:data:`LEGACY_TF32`, :data:`FP32_PRECISION`) and is set only where torch uses that one."""

    path: str
    device_type: str
    value: Callable[[Any], Any] = bool
    api: str = ""

    def in_use(self, fp32_precision_api: bool) -> bool:
        """Whether this flag is set in a torch that has (or lacks) the ``fp32_precision`` API."""
        return not self.api or (self.api == FP32_PRECISION) == fp32_precision_api


@dataclass(frozen=True)
class Mallopt(Effect):
    """glibc malloc options (``mallopt(3)``, by name: ``M_MMAP_MAX``, ...) set in this process at the knob values
    ``options`` names (:mod:`autotune.machine.heap`); an :class:`Env` beside it carries them to processes started
    later."""

    options: Mapping[Any, Mapping[str, int]]


# ---------------------------------------------------------------- data


@dataclass(frozen=True)
class LoaderArg(Effect):
    """A DataLoader keyword argument; left out where the knob is not in force (prefetch without workers)."""

    keyword: str


@dataclass(frozen=True)
class BatchSize(LoaderArg):
    """The micro-batch: the DataLoader's batch size; with a global batch, gradient accumulation makes up the
    rest (:func:`autotune.knobs.accumulation_steps`)."""


@dataclass(frozen=True)
class PinnedCopies(LoaderArg):
    """Page-locked batches copied to a CUDA device with ``non_blocking=True``; off on other devices."""


# ---------------------------------------------------------------- the model and the optimizer


@dataclass(frozen=True)
class ChannelsLast(Effect):
    """At value ``on``: the model's weights and its 4-D floating-point inputs in NHWC layout."""

    on: Any


@dataclass(frozen=True)
class CheckpointBlocks(Effect):
    """When the value is true (training only): each repeated block recomputes its activations in backward;
    a model without such blocks makes the knob not applicable at run time."""


@dataclass(frozen=True)
class Compile(Effect):
    """``torch.compile`` the model last: no compile at value ``off``, no ``mode=`` at value ``plain``, else the
    value is the mode. ``graphs``: the modes that capture the step in CUDA graphs on a CUDA device (torch's
    CUDA graph trees), whose outputs live in the graphs' memory until the next replay."""

    off: Any
    plain: Any
    graphs: tuple[Any, ...] = ()


@dataclass(frozen=True)
class OptimizerImpl(Effect):
    """At a value other than ``default``, the optimizer is rebuilt with the same hyperparameters and
    ``<value>=True`` (``foreach``, ``fused``); an optimizer without that keyword makes it not applicable."""

    default: Any


# ---------------------------------------------------------------- several ranks


@dataclass(frozen=True)
class Ranks(Effect):
    """The training runs as this many ranks of one process group on this machine (one process each, started by
    PyTorch's elastic launcher, what ``torchrun --nproc-per-node`` runs), the model wrapped in DistributedDataParallel
    and each rank given its shard of the data: :mod:`autotune.trial.ranks`."""


@dataclass(frozen=True)
class DDPArg(Effect):
    """A ``DistributedDataParallel`` keyword argument; left out where the knob is not in force (a single rank)."""

    keyword: str


@dataclass(frozen=True)
class CommHook(Effect):
    """A communication hook registered on the DistributedDataParallel model (``register_comm_hook``): at each value
    the name of one of ``torch.distributed.algorithms.ddp_comm_hooks.default_hooks``' hooks (a value not here:
    none); left out where the knob is not in force (a single rank)."""

    hooks: Mapping[Any, str] = field(default_factory=dict)


# ---------------------------------------------------------------- the step


@dataclass(frozen=True)
class Autocast(Effect):
    """Forward and loss under ``torch.autocast`` at the dtype (a ``torch`` attribute name) the value maps to;
    values not in ``dtypes`` run without autocast."""

    dtypes: Mapping[Any, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GradScaler(Effect):
    """A training step scales the loss with ``torch.amp.GradScaler`` at these values (fp16's narrow range)."""

    values: tuple[Any, ...]
