"""Callbacks that apply, inside a framework's own training loop, the knobs its arguments cannot express: a Hugging
Face ``TrainerCallback`` (:func:`for_trainer`) and a Lightning ``Callback`` (:func:`for_lightning`).

Why: a framework export (:mod:`autotune.frameworks`) maps each knob to the framework's
arguments, but no framework has an argument for a thread count or channels-last, and
Lightning none for the optimizer's kernels or activation checkpointing; left as comments,
the knobs that made the gain are lost. Both frameworks' own extension point, the callback,
runs where these knobs take effect, so the exports pass one the knob values to apply::

    trainer = Trainer(model=model, args=training_args, train_dataset=train_dataset,
                      callbacks=[autotune.callbacks.for_trainer({"threads": 1, "memory_format": "channels_last"})])

When the callback is built (before the Trainer starts CUDA or DataLoader workers) it sets the
knobs' environment variables (``OMP_NUM_THREADS``, ``PYTORCH_CUDA_ALLOC_CONF``). When the
framework hands it the model (the Trainer's ``on_init_end`` and ``on_train_begin``,
Lightning's ``on_fit_start``, ``on_train_start`` and the evaluation starts) it sets the
thread count and the backend flags (cuDNN benchmark, TF32) for the model's device, puts the
model in channels-last and checkpoints its blocks, and switches the optimizer the framework
built to foreach/fused kernels in place (its LR schedulers keep working). 4-D
floating-point inputs are made channels-last on their way into each layer with 4-D weights
(the convolutions), by a forward pre-hook on that layer: a Trainer callback never sees a
batch, and a Lightning ``training_step`` may call any submodule, so the layers whose speed
depends on the layout are where the inputs are sure to pass (a no-op once they are
channels-last, as the first convolution's output already is).

The callbacks name no knob: they carry out the knobs' declared effects
(:mod:`autotune.knobs.effects`) of the kinds in :data:`CARRIED_OUT` through
:class:`autotune.trial.plan.Plan`, the code a trial process and ``load_config(...).apply`` run.
The step's autocast, the DataLoader and ``torch.compile`` stay with the framework's own
arguments. A knob that turns out not to apply (no blocks to checkpoint, an optimizer
without ``fused=``) is a :class:`NotAppliedWarning`, never a silent no-op. Neither
transformers nor lightning is imported until a callback class is first needed.
"""

from __future__ import annotations

import os
import warnings
import weakref
from typing import Any, Iterable, Mapping

import torch
from torch import nn

from autotune import knobs
from autotune.errors import KnobError
from autotune.knobs import effects as fx
from autotune.export.config import samples_in
from autotune.export.training_speed import Expected, Meter
from autotune.trial.plan import NotApplicableAtRuntime, Plan, optimizer_switches
from autotune.request import TASKS

__all__ = ["CARRIED_OUT", "KnobsInForce", "NotAppliedWarning", "for_lightning", "for_trainer"]

# The kinds of effect a callback carries out; a knob an export hands to a callback declares at least one of them
# (tests/test_frameworks.py). The rest (autocast, GradScaler, DataLoader arguments, compile) are the framework's.
CARRIED_OUT: tuple[type[fx.Effect], ...] = (
    fx.Env, fx.NumThreads, fx.Mallopt, fx.Flag, fx.ChannelsLast, fx.CheckpointBlocks, fx.OptimizerImpl,
)


class NotAppliedWarning(UserWarning):
    """A knob the callback was given does not apply to this model or optimizer (it says which and why)."""


def _devices(model: nn.Module | None) -> list[torch.device]:
    """The devices the model's parameters and buffers are on, accelerators first (the CPU for no model)."""
    devices = {t.device for t in (*model.parameters(), *model.buffers())} if model is not None else set()
    return sorted(devices, key=lambda d: (d.type == "cpu", str(d))) or [torch.device("cpu")]


def _innermost(optimizer: Any) -> Any:
    """The torch optimizer inside a framework's wrapper (Accelerate's AcceleratedOptimizer)."""
    while isinstance(getattr(optimizer, "optimizer", None), torch.optim.Optimizer):
        optimizer = optimizer.optimizer
    return optimizer


class KnobsInForce:
    """What both callbacks do, without a framework: knob values, applied to the models and optimizers it is given.

    Building it sets the knobs' environment variables. :meth:`begin` applies the rest to a
    model (once per model) and the optimizers built on it.
    """

    def __init__(self, values: Mapping[str, Any], task: str = "train") -> None:
        if task not in TASKS:
            raise KnobError(f"the task must be one of {', '.join(TASKS)}, not {task!r}")
        self.values = knobs.validate_config(values)  # KnobError names a bad knob or value
        self.task = task
        self.plan = Plan.from_config(self.values, "cpu", task)
        self._models: weakref.WeakSet[nn.Module] = weakref.WeakSet()  # already in the configured layout
        # Now, before the framework starts CUDA (the allocator) or worker processes (the thread count).
        os.environ.update(self.plan.environment())

    def begin(self, model: nn.Module | None, optimizers: Iterable[Any] = ()) -> None:
        """Apply the knobs to the process for the model's device, to the model (its layout, its inputs' layout,
        its checkpointed blocks), and to the optimizers built on it."""
        from autotune.export.config import apply_process  # the allocator of a CUDA already started, as apply() does

        devices = _devices(model)
        plan = self.plan = Plan.from_config(self.values, devices[0], self.task)
        apply_process(plan)
        if model is None:
            return
        if len(devices) > 1:
            warnings.warn(f"autotune's callback leaves the model as it is: it is spread over {len(devices)} devices",
                          NotAppliedWarning, stacklevel=2)
            return
        if model not in self._models:
            self._models.add(model)
            training = model.training
            try:
                plan.prepare_model(model, compile=False)  # on the device it is on already
            except NotApplicableAtRuntime as exc:
                self._not_applied(exc)
            finally:
                model.train(training)  # the framework decides the mode (an evaluation may be starting)
            if plan.channels_last:
                def channels_last(layer: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
                    # the plan's rule for a batch's 4-D floating-point tensors (already on the device)
                    return plan.to_device(args), plan.to_device(kwargs)

                for layer in model.modules():
                    if any(p.dim() == 4 and p.is_floating_point() for p in layer.parameters(recurse=False)):
                        layer.register_forward_pre_hook(channels_last, with_kwargs=True)
                # A checkpoint keeps the standard layout: safetensors (the Trainer's format for a plain module)
                # refuses tensors that are not contiguous, and a checkpoint should load anywhere anyway.
                model.register_state_dict_post_hook(_contiguous_state)
        for optimizer in optimizers:
            self._switch(model, _innermost(optimizer))

    def _switch(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        """Switch an optimizer the framework built to the configured kernels, in place: the framework and its LR
        schedulers hold this object. A rebuilt twin checks that the class takes the switch here."""
        try:
            rebuilt = self.plan.build_optimizer(model, optimizer)
        except NotApplicableAtRuntime as exc:
            self._not_applied(exc)
            return
        if rebuilt is None or rebuilt is optimizer:
            return
        switches = optimizer_switches()
        optimizer.defaults.update({k: v for k, v in rebuilt.defaults.items() if k in switches})
        for group, twin in zip(optimizer.param_groups, rebuilt.param_groups):
            group.update({k: v for k, v in twin.items() if k in switches})

    @staticmethod
    def _not_applied(exc: NotApplicableAtRuntime) -> None:
        warnings.warn(f"autotune's callback does not apply {exc.knob}: {exc.reason}", NotAppliedWarning, stacklevel=3)


def _contiguous_state(module: nn.Module, state_dict: dict[str, Any], prefix: str, local_metadata: Any) -> None:
    """A state dict of a channels-last model with its tensors in the standard (contiguous) layout."""
    for key, value in state_dict.items():
        if isinstance(value, torch.Tensor) and not value.is_contiguous():
            state_dict[key] = value.contiguous()


# ---------------------------------------------------------------- the frameworks' hooks (no framework imported)


def _meter(expected: Mapping[str, Any] | None, report_speed: bool) -> Meter | None:
    """The meter of the training's speed (:mod:`autotune.export.training_speed`), told what the study measured
    (``expected``: :meth:`Expected.to_dict`, as an export passes it); None when ``report_speed`` is off."""
    if not report_speed:
        return None
    return Meter(Expected(**dict(expected)) if expected else None)


class _TrainerHooks:
    """The ``TrainerCallback`` methods: the model at the end of ``Trainer.__init__`` (so evaluation and prediction
    get it too), the optimizer at train begin (the Trainer builds it in ``train()``); each optimizer step timed
    (``on_step_begin``/``on_step_end``), and the training's samples/s, once measured, in every log the Trainer
    writes after (``autotune_samples_per_s``)."""

    def __init__(self, values: Mapping[str, Any], task: str = "train", expected: Mapping[str, Any] | None = None,
                 report_speed: bool = True) -> None:
        self.autotune = KnobsInForce(values, task)
        self.meter = _meter(expected, report_speed)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.meter is not None:
            self.meter.begin()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.meter is not None:
            # the samples of one optimizer step, on every device of every process
            self.meter.end(int(args.per_device_train_batch_size) * max(1, int(getattr(args, "n_gpu", 1) or 1))
                           * int(args.gradient_accumulation_steps) * int(getattr(args, "world_size", 1) or 1))

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if self.meter is not None and self.meter.samples_per_s is not None and logs is not None:
            logs["autotune_samples_per_s"] = round(self.meter.samples_per_s, 2)

    def on_init_end(self, args: Any, state: Any, control: Any, model: nn.Module | None = None, **kwargs: Any) -> None:
        if model is not None:
            self.autotune.begin(model)

    def on_train_begin(self, args: Any, state: Any, control: Any, model: nn.Module | None = None,
                       optimizer: Any = None, **kwargs: Any) -> None:
        self.autotune.begin(model, [optimizer] if optimizer is not None else [])


class _LightningHooks:
    """The Lightning ``Callback`` methods: the model once the strategy put it on its device (before the sanity
    check; or when an evaluation starts), the optimizers at train start (after a checkpoint's optimizer state is
    restored, which would undo a switch made earlier); each training batch timed, and the training's samples/s,
    once measured, logged as ``autotune/samples_per_s``."""

    def __init__(self, values: Mapping[str, Any], task: str = "train", expected: Mapping[str, Any] | None = None,
                 report_speed: bool = True) -> None:
        self.autotune = KnobsInForce(values, task)
        self.meter = _meter(expected, report_speed)

    def on_train_batch_start(self, trainer: Any, pl_module: nn.Module, batch: Any, batch_idx: int) -> None:
        if self.meter is not None:
            self.meter.begin()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.meter is None:
            return
        done = self.meter.done
        self.meter.end(samples_in(batch))
        if not done and self.meter.samples_per_s is not None:  # measured at this batch: into the trainer's logs
            pl_module.log("autotune/samples_per_s", self.meter.samples_per_s, on_step=True, on_epoch=False)

    def on_fit_start(self, trainer: Any, pl_module: nn.Module) -> None:
        self.autotune.begin(pl_module)

    def on_train_start(self, trainer: Any, pl_module: nn.Module) -> None:
        self.autotune.begin(pl_module, trainer.optimizers)

    def on_validation_start(self, trainer: Any, pl_module: nn.Module) -> None:
        self.autotune.begin(pl_module)

    def on_test_start(self, trainer: Any, pl_module: nn.Module) -> None:
        self.autotune.begin(pl_module)

    def on_predict_start(self, trainer: Any, pl_module: nn.Module) -> None:
        self.autotune.begin(pl_module)


_CLASSES: dict[str, type] = {}


def _class(name: str) -> type:
    """The callback class, built on the framework's base class the first time it is needed (and importable as
    ``autotune.callbacks.<name>``, so a pickled callback finds it again)."""
    if name not in _CLASSES:
        if name == "AutotuneTrainerCallback":
            from transformers import TrainerCallback

            bases: tuple[type, ...] = (_TrainerHooks, TrainerCallback)
        else:
            try:
                from lightning.pytorch import Callback
            except ImportError:  # the standalone package
                from pytorch_lightning import Callback  # type: ignore[no-redef]
            bases = (_LightningHooks, Callback)
        _CLASSES[name] = type(name, bases, {"__module__": __name__, "__qualname__": name,
                                            "__doc__": bases[0].__doc__})
    return _CLASSES[name]


def __getattr__(name: str) -> Any:
    if name in ("AutotuneTrainerCallback", "AutotuneLightningCallback"):
        return _class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def for_trainer(values: Mapping[str, Any], task: str = "train", expected: Mapping[str, Any] | None = None,
                report_speed: bool = True) -> Any:
    """A Hugging Face ``TrainerCallback`` that applies these knob values: ``Trainer(..., callbacks=[...])``. Once
    warm, it says the samples/s the training reaches beside what the study measured (``expected``, as an export
    passes it; :mod:`autotune.export.training_speed`), and logs it; ``report_speed=False`` turns that off."""
    return _class("AutotuneTrainerCallback")(values, task, expected, report_speed)


def for_lightning(values: Mapping[str, Any], task: str = "train", expected: Mapping[str, Any] | None = None,
                  report_speed: bool = True) -> Any:
    """A Lightning ``Callback`` that applies these knob values: ``lightning.Trainer(..., callbacks=[...])``. Once
    warm, it says the samples/s the training reaches beside what the study measured (``expected``, as an export
    passes it; :mod:`autotune.export.training_speed`), and logs it; ``report_speed=False`` turns that off."""
    return _class("AutotuneLightningCallback")(values, task, expected, report_speed)

