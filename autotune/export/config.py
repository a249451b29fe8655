"""An exported configuration applied in a user's script (:mod:`autotune.export.document` writes the document).

In a training script::

    import autotune
    cfg = autotune.load_config("best.json")        # warns when hardware/software differ
    model, loader, step = cfg.apply(model, dataset, optimizer)
    for batch in loader:
        loss = step(batch)

``apply`` goes through the same :class:`~autotune.trial.plan.Plan` as the trial worker,
so what runs is what was measured: environment and backend flags, model transforms
(device, channels-last, activation checkpointing, compile), the optimizer's
implementation, DataLoader arguments, autocast/GradScaler and gradient accumulation.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from autotune import knobs
from autotune.machine import hardware
from autotune.errors import ConfigError
from autotune.export.document import SCHEMA, SCHEMAS
from autotune.export.live import Expected, Meter
from autotune.trial.plan import Plan, Stepper
from autotune.trial.protocol import first_tensor
from autotune.machine import identity


class HardwareMismatchWarning(UserWarning):
    """The configuration was measured on other hardware or software than this."""


class NumericsWarning(UserWarning):
    """The configuration's numerics check found its training different from the defaults' (``--numerics warn``)."""


# ---------------------------------------------------------------- load and apply


@dataclass
class Applied:
    """What :meth:`Config.apply` returns; unpacks as ``model, loader, step``."""

    model: nn.Module
    loader: DataLoader | None
    step: Callable[[Any], torch.Tensor]
    optimizer: torch.optim.Optimizer | None

    def __iter__(self):  # model, loader, step = cfg.apply(...)
        return iter((self.model, self.loader, self.step))


@dataclass
class TrainStep:
    """One call per batch from the loader: copy to the device, forward and backward under the
    configured precision, and the optimizer step every ``accumulation`` batches. ``meter`` (when given) times the
    calls and says the training's samples/s once (:mod:`autotune.export.live`)."""

    plan: Plan
    stepper: Stepper
    calls: int = 0
    meter: Meter | None = None

    def __call__(self, batch: Any) -> torch.Tensor:
        if self.meter is not None:
            self.meter.begin()
        loss = self.stepper.micro(self.plan.to_device(batch))
        self.calls += 1
        if self.calls % self.plan.accumulation == 0:
            self.stepper.finish()
        if self.meter is not None:
            self.meter.end(samples_in(batch))
        return loss


@dataclass
class InferStep:
    plan: Plan
    stepper: Stepper
    meter: Meter | None = None

    def __call__(self, batch: Any) -> torch.Tensor:
        if self.meter is not None:
            self.meter.begin()
        out = self.stepper.infer([self.plan.to_device(batch)])
        if self.meter is not None:
            self.meter.end(samples_in(batch))
        return out



@dataclass
class Config:
    """A loaded configuration: the knob values and where they were measured."""

    knobs: dict[str, Any]
    task: str = "train"
    device: str = "cpu"
    global_batch: int | None = None
    doc: dict[str, Any] = field(default_factory=dict)
    measured_here: bool = True  # this machine is the one the study measured on (load_config compared them)
    meter: Meter | None = None  # the last :meth:`apply`'s: this training's samples/s, once measured

    def plan(self, device: str | torch.device | None = None) -> Plan:
        return Plan.from_config(self.knobs, device or self.device, self.task, self.global_batch)

    def apply(
        self,
        model: nn.Module,
        dataset: Dataset | None = None,
        optimizer: torch.optim.Optimizer | Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | None = None,
        *,
        loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        device: str | torch.device | None = None,
        shuffle: bool = False,
        report_speed: bool = True,
        **loader_kwargs: Any,
    ) -> Applied:
        """Apply every knob to your model, dataset and optimizer.

        ``optimizer`` is an optimizer built on ``model``'s parameters (kept, or rebuilt with
        the same hyperparameters when the configuration picks foreach/fused kernels) or a
        factory ``params -> optimizer`` (default AdamW). Returns ``(model, loader, step)``
        where ``step(batch)`` runs one training (or inference) step on a loader batch and
        returns the loss (or the output). Once warm, the step says once, on standard error, the samples/s this
        training reaches beside what the study measured (:mod:`autotune.export.live`; the figure stays as
        ``cfg.meter.samples_per_s``); ``report_speed=False`` turns it off.
        """
        plan = self.plan(device)
        _apply_process(plan)
        model = plan.prepare_model(model)
        opt = plan.build_optimizer(model, optimizer) if plan.task == "train" else None
        loader = plan.make_loader(dataset, collate_fn, shuffle=shuffle, **loader_kwargs) if dataset is not None else None
        stepper = plan.stepper(model, opt, loss_fn)
        meter = self.meter = Meter(Expected.of(self.doc, self.measured_here), sync=_sync(plan.device)) if report_speed else None
        step: Callable[[Any], torch.Tensor] = (TrainStep(plan, stepper, meter=meter) if plan.task == "train"
                                               else InferStep(plan, stepper, meter=meter))
        return Applied(model, loader, step, opt)


def samples_in(batch: Any) -> int:
    """The samples in a batch: its first tensor's leading size (1 for a batch without one)."""
    first = first_tensor(batch)
    return int(first.shape[0]) if first is not None and first.dim() else 1


def _sync(device: torch.device) -> Callable[[], None] | None:
    """What waits for the device's queued work (None on a CPU, where a step's work is done when it returns)."""
    if device.type != "cuda":
        return None
    return lambda: torch.cuda.synchronize(device)


def _apply_process(plan: Plan) -> None:
    """Process-level knobs in a process that may already have started CUDA."""
    wanted = plan.environment().get("PYTORCH_CUDA_ALLOC_CONF")
    if wanted and torch.cuda.is_available() and torch.cuda.is_initialized():
        try:
            torch.cuda.memory._set_allocator_settings(wanted)
        except Exception:  # noqa: BLE001
            warnings.warn(
                f"CUDA started before the configuration was applied: set PYTORCH_CUDA_ALLOC_CONF={wanted} "
                "in the environment before starting Python",
                HardwareMismatchWarning,
                stacklevel=3,
            )
    plan.apply_process()


def load_config(path: str | Path, device: str | None = None, check_hardware: bool = True) -> Config:
    """Read an exported configuration; warns (HardwareMismatchWarning) when this machine differs, and
    (NumericsWarning) when the study found that its training differs from the defaults'."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") not in SCHEMAS:
        raise ConfigError(f"{path}: not an autotune configuration (expected schema {SCHEMA!r}, found {doc.get('schema') if isinstance(doc, dict) else None!r})")
    try:
        values = knobs.validate_config(doc["knobs"])
    except (KeyError, knobs.KnobError) as exc:
        raise ConfigError(f"{path}: bad knob values: {exc}") from None
    target = device or doc.get("device") or "cpu"
    if torch.device(target).type == "cuda" and not torch.cuda.is_available():
        warnings.warn(f"{path} was measured on {target}, but this machine has no CUDA device: using the CPU", HardwareMismatchWarning, stacklevel=2)
        target = "cpu"
    here = True
    if check_hardware and doc.get("fingerprint"):
        diffs = identity.differences(doc["fingerprint"], hardware.fingerprint(target))
        here = not diffs
        if diffs:
            warnings.warn(
                f"{path} was measured on other hardware/software; its figures may not hold here: " + "; ".join(diffs),
                HardwareMismatchWarning,
                stacklevel=2,
            )
    numerics = doc.get("numerics")
    if isinstance(numerics, dict) and numerics.get("state") == "differ":
        warnings.warn(f"{path}: {numerics.get('text')}; the study recommended it all the same (its numerics check "
                      "warned, it did not decide)", NumericsWarning, stacklevel=2)
    stored_ctx = doc.get("context") or {"device_type": "cpu", "task": doc.get("task", "train")}
    ctx = knobs.Context.from_dict({**stored_ctx, "device_type": torch.device(target).type})
    resolved = knobs.resolve(values, ctx)  # CUDA-only values fall back on a CPU
    return Config(knobs=resolved.config, task=doc.get("task", "train"), device=target, global_batch=doc.get("global_batch"),
                  doc=doc, measured_here=here)
