"""An exported configuration applied in a user's script (:mod:`autotune.export.document` writes the document).

In a training script::

    import autotune
    cfg = autotune.load_config("best.json")        # warns when hardware/software differ
    model, loader, step = cfg.apply(model, dataset, optimizer,
                                    scheduler=lambda opt: OneCycleLR(opt, max_lr=1e-3, total_steps=1000),
                                    clip_grad_norm=1.0)
    for batch in loader:
        loss = step(batch)
    val_loss = step.evaluate(val_loader)             # eval mode, no grad; training mode as it was after

``apply`` goes through the same :class:`~autotune.trial.plan.Plan` as a trial process,
so what runs is what was measured: environment and backend flags, model transforms
(device, channels-last, activation checkpointing, compile), the optimizer's
implementation, DataLoader arguments, autocast/GradScaler and gradient accumulation.

What almost every training loop adds and a trial does not measure (a learning-rate scheduler, gradient clipping,
an eval pass) runs in the step too, where it belongs: the scheduler and the clipping once per optimizer step (every
``accumulation`` batches), the clipping after the GradScaler unscaled the gradients. Why here and not in the user's
loop: the optimizer the scheduler must drive may be a new one (rebuilt with fused/foreach kernels), and under
gradient accumulation only the step knows which batch ends an optimizer step. Neither costs anything when it is
not asked for: the step then ends its optimizer steps with the trial's own :meth:`Stepper.finish
<autotune.trial.plan.Stepper.finish>`, the code the study timed.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Union

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

from autotune import knobs
from autotune.machine import hardware
from autotune.errors import ConfigError
from autotune.export.document import SCHEMA, SCHEMAS
from autotune.export.training_speed import Expected, Meter
from autotune.trial.collective import Group
from autotune.trial.plan import Plan, Stepper
from autotune.trial.protocol import first_tensor
from autotune.machine import identity
from autotune.workloads.contract import call_model, split_batch

LRScheduler = torch.optim.lr_scheduler.LRScheduler
#: What ``apply(scheduler=...)`` takes: a scheduler already built on the optimizer the step steps, or a factory
#: ``optimizer -> scheduler`` called with it (the one to use when the configuration rebuilds the optimizer).
SchedulerArg = Union[LRScheduler, Callable[[torch.optim.Optimizer], LRScheduler]]


class HardwareMismatchWarning(UserWarning):
    """The configuration was measured on other hardware or software than this."""


class NumericsWarning(UserWarning):
    """The configuration's numerics check found its training different from the defaults' (``--numerics warn``)."""


# ---------------------------------------------------------------- load and apply


@dataclass
class Applied:
    """What :meth:`Config.apply` returns; unpacks as ``model, loader, step``. ``optimizer``: the one the step
    steps (the configuration may have rebuilt yours with fused/foreach kernels: build anything else on this one);
    ``scheduler``: the learning-rate scheduler the step steps, if any."""

    model: nn.Module
    loader: DataLoader | None
    step: Callable[[Any], torch.Tensor]
    optimizer: torch.optim.Optimizer | None
    scheduler: LRScheduler | None = None

    def __iter__(self):  # model, loader, step = cfg.apply(...)
        return iter((self.model, self.loader, self.step))


@dataclass
class TrainStep:
    """One call per batch from the loader: copy to the device, forward and backward under the
    configured precision, and the optimizer step every ``accumulation`` batches. ``meter`` (when given) times the
    calls and says the training's samples/s once (:mod:`autotune.export.training_speed`).

    ``clip_grad_norm`` (a max norm) and ``scheduler`` act at each optimizer step, in the order PyTorch's recipes
    give: the GradScaler unscales the gradients, they are clipped, the optimizer steps, the gradients are zeroed,
    the scheduler steps. Without either, :attr:`finish` is the trial's own :meth:`Stepper.finish
    <autotune.trial.plan.Stepper.finish>`: nothing is added to the step the study timed. :attr:`grad_norm` is the
    last optimizer step's total gradient norm before clipping (a tensor on the device, read without a sync)."""

    plan: Plan
    stepper: Stepper
    calls: int = 0
    meter: Meter | None = None
    scheduler: LRScheduler | None = None
    clip_grad_norm: float | None = None
    grad_norm: torch.Tensor | None = field(default=None, init=False, repr=False)
    finish: Callable[[], None] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.scheduler is None and self.clip_grad_norm is None:
            self.finish = self.stepper.finish  # the measured step, as it was measured
        else:
            self.finish = self._finish
            opt = self.stepper.optimizer
            self._params = [p for group in opt.param_groups for p in group["params"]] if opt is not None else []

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        """The optimizer this step steps (yours, or the one rebuilt from it with fused/foreach kernels)."""
        return self.stepper.optimizer

    @property
    def model(self) -> nn.Module:
        return self.stepper.model

    def __call__(self, batch: Any) -> torch.Tensor:
        """One training step on ``batch``; returns its loss (detached), which stays as it is after later steps:
        under CUDA graphs the step's own copy out of the graphs' memory (:meth:`Stepper.kept
        <autotune.trial.plan.Stepper.kept>`), the trial's step too."""
        if self.meter is not None:
            self.meter.begin()
        loss = self.stepper.micro(self.plan.to_device(batch))
        self.calls += 1
        if self.calls % self.plan.accumulation == 0:
            self.finish()
        if self.meter is not None:
            self.meter.end(samples_in(batch))
        return loss

    def _finish(self) -> None:
        """The optimizer step with clipping and the scheduler (only when either was asked for)."""
        optimizer, scaler = self.stepper.optimizer, self.stepper.scaler
        assert optimizer is not None
        if self.clip_grad_norm is not None:
            if scaler is not None:
                scaler.unscale_(optimizer)  # clip the true gradients, not the loss-scaled ones
            self.grad_norm = torch.nn.utils.clip_grad_norm_(self._params, self.clip_grad_norm)
        if scaler is not None:
            scaler.step(optimizer)  # skips a step whose gradients hold inf/NaN; unscales none twice
            scaler.update()
        else:
            optimizer.step()
        self.stepper.zero_grad()
        if self.scheduler is not None:
            self.scheduler.step()

    # ------------------------------------------------------------ evaluation

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[nn.Module]:
        """``with step.evaluating() as model:`` the model in eval mode (dropout off, batch norm's running
        statistics used) under ``torch.no_grad()``; afterwards every module's training mode is back as it was.
        The time inside is left out of the training's samples/s line.

        Under CUDA graphs (``compile=reduce-overhead`` or ``max-autotune`` on a GPU) the model given is the
        uncompiled module (the same weights): the compiled one would compile its eval forward and record graphs
        for it beside the training's, in their memory, at the first evaluation; the training's graphs are left as
        they are and replay at the next step."""
        model = self.stepper.eval_model
        modes = [(m, m.training) for m in model.modules()]
        clock = self.meter.clock if self.meter is not None else time.perf_counter
        started = clock()
        model.eval()
        try:
            with torch.no_grad():
                yield model
        finally:
            model.train(modes[0][1])  # the model's own train() runs (it may do more than set flags) ...
            for module, training in modes:
                module.training = training  # ... and a module the user had in another mode stays in it
            _pause(self.meter, clock() - started)

    def eval(self, batch: Any) -> torch.Tensor:
        """The loss on one batch (``loss_fn`` as in training, not divided by the accumulation steps) in eval mode,
        without gradients, under the configured device copy and autocast; returns it detached. The training's
        gradients, accumulation and optimizer are untouched."""
        with self.evaluating() as model:
            return self._eval_loss(model, batch)

    def evaluate(self, batches: Iterable[Any]) -> float:
        """The mean loss over ``batches`` (a validation DataLoader), weighted by each batch's samples: one eval pass
        (:meth:`eval` on each batch), one sync at its end."""
        total: torch.Tensor | None = None
        samples = 0
        with self.evaluating() as model:
            for batch in batches:
                n = samples_in(batch)
                part = self._eval_loss(model, batch).float() * n
                total = part if total is None else total + part
                samples += n
        if total is None:
            raise ConfigError("step.evaluate(): the batches were empty")
        return float(total) / samples

    def _eval_loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        inputs, target = split_batch(self.plan.to_device(batch))
        with self.plan.autocast():
            loss = self.stepper.loss_fn(call_model(model, inputs), target)
        return loss.detach()


def _pause(meter: Meter | None, seconds: float) -> None:
    """Leave ``seconds`` (an eval pass) out of a speed window that is open: neither training nor waiting on data."""
    if meter is None or meter.done or meter.window is None:
        return
    meter.window["t0"] += seconds
    if meter.last_end is not None:
        meter.last_end += seconds


@dataclass
class InferStep:
    """One call per batch: the model's output (its main tensor) under the configured precision, without gradients;
    under CUDA graphs a copy out of the graphs' memory, so that it stays as it is after the next call."""

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
        scheduler: SchedulerArg | None = None,
        clip_grad_norm: float | None = None,
        **loader_kwargs: Any,
    ) -> Applied:
        """Apply every knob to your model, dataset and optimizer.

        ``optimizer`` is an optimizer built on ``model``'s parameters (kept, or rebuilt with
        the same hyperparameters when the configuration picks foreach/fused kernels) or a
        factory ``params -> optimizer`` (default AdamW). Returns ``(model, loader, step)``
        where ``step(batch)`` runs one training (or inference) step on a loader batch and
        returns the loss (or the output); the returned object also has ``.optimizer`` (the one
        the step steps) and ``.scheduler``. ``dataset`` may be None (no loader: pass your own
        batches to ``step``).

        ``loss_fn(output, target)``: the loss, called under the configured autocast with the model's
        output and the batch's target (a tuple or list batch is ``(*inputs, target)``, a dict batch is
        passed as keywords and is its own target, a tensor batch has none). Default: the output's
        ``.loss``, else cross-entropy for integer targets, mean squared error for float targets of the
        output's shape, else the output's mean square. ``collate_fn``: the DataLoader's. ``device``: where
        to train (default: the configuration's, ``"cpu"`` when it was measured on a GPU this machine lacks).
        ``shuffle`` and any other keyword (``**loader_kwargs``) go to the DataLoader, over the
        configuration's own DataLoader arguments.

        ``scheduler``: a learning-rate scheduler the step steps once per optimizer step (every
        ``accumulation`` batches under gradient accumulation): a factory ``optimizer -> scheduler``,
        called with the optimizer the step steps (``scheduler=lambda opt: OneCycleLR(opt, max_lr=1e-3,
        total_steps=n)``; use this form when the configuration may rebuild your optimizer), or a scheduler
        already built on that optimizer. A scheduler that needs a metric (ReduceLROnPlateau) is yours to
        step. ``clip_grad_norm``: clip the gradients' total norm to this before each optimizer step, after
        the GradScaler (fp16) unscaled them. Without either, the step is exactly the one the study timed.

        ``step.eval(batch)`` (the loss of one batch), ``step.evaluate(batches)`` (the mean loss of a
        validation loader) and ``with step.evaluating() as model:`` (your own metrics) run in eval mode
        without gradients and put every module's training mode back as it was.

        Under CUDA graphs (``compile=reduce-overhead`` or ``max-autotune`` on a GPU) ``step(batch)`` returns its loss
        (or output) copied out of the graphs' memory, which the next step's replay overwrites, so a loss kept in a
        list stays as it was (the study's trials timed that copy too); evaluation runs the uncompiled module, so the
        training's graphs are neither recompiled nor recorded again for it.

        In a script that ``torchrun`` started with several processes (the export's ``launch`` line), each is one
        rank of a DDP training: it joins the launcher's process group (unless the script did), on a GPU its own
        (``cuda:LOCAL_RANK``); the model is wrapped in DistributedDataParallel with the configuration's DDP arguments
        before it is compiled, as the study's trials were; the loader reads this rank's shard (a
        ``DistributedSampler``, which ``shuffle`` goes to: call ``loader.sampler.set_epoch(epoch)`` each epoch).

        Once warm, the step says once, on standard error, the samples/s this
        training reaches beside what the study measured (:mod:`autotune.export.training_speed`; the figure stays as
        ``cfg.meter.samples_per_s``); ``report_speed=False`` turns it off.
        """
        ranked = launched()
        plan = self.plan(device if device is not None or not ranked else rank_device(self.device))
        if plan.task != "train" and (scheduler is not None or clip_grad_norm is not None):
            raise ConfigError(f"scheduler= and clip_grad_norm= apply to training; this configuration's task is "
                              f"{plan.task!r}")
        clip = _max_norm(clip_grad_norm)
        apply_process(plan)
        model = plan.prepare_model(model, compile=not ranked)
        shard: dict[str, Any] = {}
        if ranked:  # a rank of a training torchrun started: DDP (before compiling, as a trial), this rank's shard
            join(plan.device)
            model = plan.compile_model(plan.distribute(model))
            if dataset is not None:
                shard = {"sampler": DistributedSampler(dataset, shuffle=shuffle), "shuffle": False}
        opt = plan.build_optimizer(model, optimizer) if plan.task == "train" else None
        loader = (plan.make_loader(dataset, collate_fn, **{"shuffle": shuffle, **loader_kwargs, **shard})
                  if dataset is not None else None)
        stepper = plan.stepper(model, opt, loss_fn)
        meter = self.meter = (Meter(Expected.of(self.doc, self.measured_here), sync=_sync(plan.device)) if report_speed
                              else None)
        if plan.task == "train":
            assert opt is not None
            sched = _scheduler(scheduler, opt,
                               rebuilt=opt is not optimizer and isinstance(optimizer, torch.optim.Optimizer))
            train = TrainStep(plan, stepper, meter=meter, scheduler=sched, clip_grad_norm=clip)
            return Applied(model, loader, train, opt, sched)
        return Applied(model, loader, InferStep(plan, stepper, meter=meter), opt)


def launched() -> bool:
    """This process is one rank of several that a launcher started (``torchrun`` sets ``WORLD_SIZE`` and
    ``LOCAL_RANK``): :meth:`Config.apply` then makes it a rank of one DDP training."""
    return int(os.environ.get("WORLD_SIZE", "1") or 1) > 1 and "LOCAL_RANK" in os.environ


def rank_device(device: str) -> str:
    """A rank's device: on a GPU the launcher's local rank's (``cuda:LOCAL_RANK``), one GPU a rank."""
    return f"cuda:{os.environ['LOCAL_RANK']}" if str(device).startswith("cuda") else str(device)


def join(device: torch.device) -> None:
    """This rank in the launcher's process group (NCCL on a GPU, gloo on a CPU), unless the script joined it."""
    import torch.distributed as dist

    if not dist.is_initialized():
        Group.join(device)


def _max_norm(value: float | None) -> float | None:
    """``clip_grad_norm`` checked: a positive finite number, or None."""
    if value is None:
        return None
    try:
        norm = float(value)
    except (TypeError, ValueError):
        norm = math.nan
    if isinstance(value, bool) or not math.isfinite(norm) or norm <= 0:
        raise ConfigError(f"clip_grad_norm must be a positive number (the gradients' largest total norm), not "
                          f"{value!r}")
    return norm


def _scheduler(arg: SchedulerArg | None, optimizer: torch.optim.Optimizer, rebuilt: bool) -> LRScheduler | None:
    """The scheduler the step steps: built by the factory on ``optimizer``, or given, and then built on it."""
    if arg is None:
        return None
    made = arg if isinstance(arg, LRScheduler) else arg(optimizer) if callable(arg) else arg
    if isinstance(made, torch.optim.lr_scheduler.ReduceLROnPlateau):
        raise ConfigError("scheduler=: ReduceLROnPlateau steps on a metric (scheduler.step(val_loss)), not once per "
                          "optimizer step; build it on the returned optimizer and step it yourself")
    if not hasattr(made, "step") or not hasattr(made, "optimizer"):
        raise ConfigError(f"scheduler= takes an LR scheduler or a function optimizer -> scheduler, not "
                          f"{type(made).__name__}")
    if made.optimizer is not optimizer:
        why = (" the configuration rebuilt your optimizer (fused/foreach kernels), so" if rebuilt else "")
        raise ConfigError(f"scheduler=: the scheduler is built on another optimizer than the one the step steps;{why} "
                          "pass a function instead, e.g. scheduler=lambda opt: OneCycleLR(opt, ...)")
    return made


def samples_in(batch: Any) -> int:
    """The samples in a batch: its first tensor's leading size (1 for a batch without one)."""
    first = first_tensor(batch)
    return int(first.shape[0]) if first is not None and first.dim() else 1


def _sync(device: torch.device) -> Callable[[], None] | None:
    """What waits for the device's queued work (None on a CPU, where a step's work is done when it returns)."""
    if device.type != "cuda":
        return None
    return lambda: torch.cuda.synchronize(device)


def apply_process(plan: Plan) -> None:
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
        raise ConfigError(f"{path}: not an autotune configuration (expected schema {SCHEMA!r}, found "
                          f"{doc.get('schema') if isinstance(doc, dict) else None!r})")
    try:
        values = knobs.validate_config(doc["knobs"])
    except (KeyError, knobs.KnobError) as exc:
        raise ConfigError(f"{path}: bad knob values: {exc}") from None
    target = device or doc.get("device") or "cpu"
    if torch.device(target).type == "cuda" and not torch.cuda.is_available():
        warnings.warn(f"{path} was measured on {target}, but this machine has no CUDA device: using the CPU",
                      HardwareMismatchWarning, stacklevel=2)
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
    return Config(knobs=resolved.config, task=doc.get("task", "train"), device=target,
                  global_batch=doc.get("global_batch"), doc=doc, measured_here=here)
