"""How a knob is expressed in a framework export: the :class:`Job` a knob's mapping writes into, and the three
mappings most knobs use (:func:`arg`, :func:`callback`, :func:`by_hand`).

Why here and not in :mod:`autotune.frameworks`: each knob declares its own mapping for
every format (``Knob.exports``), next to its values and effects, so a knob added to the
registry is exported everywhere without touching another module. A mapping is a function
``(job, name, value)`` that sets the framework's arguments or records a by-hand step with
why and how; :mod:`autotune.frameworks` sets up each format's arguments, calls the knobs'
mappings in registry order, and writes the result as a file. Nothing here imports a
framework or torch.

A knob the framework's arguments cannot express is not left to the user where the
framework has an extension point that can apply it: the Trainer's and Lightning's
callbacks (:mod:`autotune.callbacks`) carry out a knob's effects inside the framework's
own loop, so a mapping hands such a knob to the callback (:func:`callback`). Only what no
argument and no callback can apply becomes a by-hand step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from autotune.errors import KnobError
from autotune.knobs.core import Export, Knob, accumulation_steps

HF_TRAINER = "hf-trainer"
LIGHTNING = "lightning"
ACCELERATE = "accelerate"
FRAMEWORKS = (HF_TRAINER, LIGHTNING, ACCELERATE)  # every knob declares a mapping for each
# The formats with an extension point autotune ships a callback for (autotune.callbacks): the factory's name there.
# Accelerate has none: the user's own loop applies what its config cannot say (or autotune.load_config(...).apply).
CALLBACKS = {HF_TRAINER: "for_trainer", LIGHTNING: "for_lightning"}


@dataclass
class Job:
    """One rendering: the knob values and what they became."""

    fmt: str
    where: str  # what the format's arguments are called ("TrainingArguments"), for "... has no argument for it"
    knobs: Mapping[str, Knob]
    values: dict[str, Any]
    defaults: dict[str, Any]
    task: str
    device: str
    global_batch: int | None
    version: Callable[[str], str | None] = lambda package: None  # the installed version of a package, if any
    arguments: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # more objects of the format (Accelerator(...) arguments)
    launch: dict[str, Any] = field(default_factory=dict)  # options of the framework's launcher (accelerate launch)
    manual: list[dict[str, Any]] = field(default_factory=list)
    callback: dict[str, Any] = field(default_factory=dict)  # knob -> value, applied by the format's callback

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def train(self) -> bool:
        return self.task == "train"

    def accumulation(self, batch_size: int) -> int | None:
        """Micro-batches per optimizer step when the document sets a global batch (training only)."""
        if not self.global_batch or not self.train:
            return None
        return accumulation_steps(self.global_batch, batch_size)

    def is_default(self, name: str) -> bool:
        """At PyTorch's default, so nothing needs doing (unless the knob is always stated)."""
        return not self.knobs[name].always_stated and self.values[name] == self.defaults[name]

    def by_hand(self, name: str, why: str, how: str | None = None) -> None:
        value = self.values[name]
        self.manual.append({"knob": name, "value": value, "why": why, "how": how or self.knobs[name].how_to(value)})

    def by_callback(self, name: str) -> None:
        """Applied in training by autotune's callback for the format (:mod:`autotune.callbacks`), which carries out
        the knob's effects there."""
        if self.fmt not in CALLBACKS:
            raise KnobError(f"{name}: autotune ships no callback for {self.fmt}")
        self.callback[name] = self.values[name]

    def unless_default(self, name: str, why: str | None = None) -> None:
        if not self.is_default(name):
            self.by_hand(name, why or f"{self.where} has no argument for it")


def arg(argument: str, section: str | None = None) -> Export:
    """The knob's value as the framework's argument (in a section of the arguments, e.g. Lightning's ``trainer``)."""

    def write(job: Job, name: str, value: Any) -> None:
        (job.arguments[section] if section else job.arguments)[argument] = value

    return write


#: The objects of a format beyond its arguments that DistributedDataParallel's keywords go to (``Job.extra``):
#: Lightning's ``DDPStrategy(**...)`` and Accelerate's ``DistributedDataParallelKwargs(**...)``, a kwargs handler.
DDP_STRATEGY = "ddp_strategy"
DDP_KWARGS = "ddp_kwargs"


def keyword_of(obj: str, keyword: str) -> Export:
    """The knob's value as a keyword of one more object of the format (``job.extra[obj]``, e.g. Lightning's
    ``DDPStrategy``), unless it is PyTorch's default."""

    def write(job: Job, name: str, value: Any) -> None:
        if not job.is_default(name):
            job.extra.setdefault(obj, {})[keyword] = value

    return write


def callback() -> Export:
    """Applied by autotune's callback for the format (the framework's own extension point), unless the value is
    PyTorch's default."""

    def write(job: Job, name: str, value: Any) -> None:
        if not job.is_default(name):
            job.by_callback(name)

    return write


def by_hand(why: str | None = None) -> Export:
    """Not expressible in the format: a by-hand step (the knob's ``how``), unless the value is PyTorch's default."""

    def write(job: Job, name: str, value: Any) -> None:
        job.unless_default(name, why)

    return write


def by_hand_at(values: Any, why: str, otherwise: Export) -> Export:
    """A by-hand step (the knob's ``how``, for ``why``) at ``values``; ``otherwise``'s mapping at the others."""

    def write(job: Job, name: str, value: Any) -> None:
        if value in values:
            job.by_hand(name, why)
        else:
            otherwise(job, name, value)

    return write
