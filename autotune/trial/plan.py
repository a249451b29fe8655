"""How a resolved configuration is applied: the one place that turns knob values into PyTorch calls.

A trial process (:mod:`autotune.trial.measure_one`) and :meth:`autotune.export.config.Config.apply` (a user's own
training script) both go through :class:`Plan`, so what a user applies is exactly what was
measured: environment and backend flags, model transforms (device, memory format,
activation checkpointing, compile), the optimizer's implementation, DataLoader
arguments, and the step itself (autocast, GradScaler, gradient accumulation,
non-blocking copies).

The plan names no knob: each knob of the registry declares its effects
(:mod:`autotune.knobs.effects`), and the plan carries out each kind of effect for
whichever knob declares it. A knob absent from the plan's configuration is not applied
(PyTorch's own default holds).
"""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, TypeVar

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from autotune import knobs
from autotune.machine import binding, heap
from autotune.trial import launch
from autotune.errors import KnobError
from autotune.knobs import effects as fx
from autotune.workloads.contract import call_model, default_loss, default_optimizer, main_tensor, split_batch

E = TypeVar("E", bound=fx.Effect)

# The kinds of effect this module carries out (subclasses included); a knob declaring any other kind would do
# nothing, which tests/test_plan.py forbids.
CARRIED_OUT: tuple[type[fx.Effect], ...] = (
    fx.Env, fx.NumThreads, fx.Mallopt, fx.Flag, fx.LoaderArg, fx.ChannelsLast, fx.CheckpointBlocks, fx.Compile,
    fx.OptimizerImpl, fx.Autocast, fx.GradScaler, fx.Ranks, fx.DDPArg, fx.CommHook, fx.BindCores,
)


def declared(kind: type[E]) -> Iterator[tuple[knobs.Knob, E]]:
    """Every (knob, effect) of the registry whose effect is of this kind, in registry order."""
    for knob in knobs.REGISTRY:
        for effect in knob.effects:
            if isinstance(effect, kind):
                yield knob, effect


def fp32_precision_api() -> bool:
    """Whether this torch sets TF32 through ``fp32_precision`` (2.9 and newer), which must not be mixed with the
    legacy ``allow_tf32`` flags (:data:`autotune.knobs.effects.FP32_PRECISION`)."""
    return hasattr(torch.backends, "fp32_precision")


class NotApplicableAtRuntime(Exception):
    """A knob turned out not to apply once the workload was built (e.g. no blocks to checkpoint)."""

    def __init__(self, knob: str, reason: str) -> None:
        super().__init__(f"{knob}: {reason}")
        self.knob = knob
        self.reason = reason


def optimizer_switches() -> frozenset[str]:
    """The optimizer keywords a knob may switch on (the values of an :class:`~autotune.knobs.effects.OptimizerImpl`
    knob other than its default: foreach, fused)."""
    return frozenset(str(c) for knob, eff in declared(fx.OptimizerImpl) for c in knob.choices or () if c != eff.default)


def optimizer_params(optimizer: torch.optim.Optimizer) -> frozenset[str]:
    """Which implementation switches (foreach, fused) the optimizer's class accepts."""
    import inspect

    try:
        params = inspect.signature(type(optimizer).__init__).parameters
    except (TypeError, ValueError):
        return frozenset()
    return frozenset(p for p in optimizer_switches() if p in params)


def checkpoint_blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks activation checkpointing wraps: items of the outermost ModuleLists,
    else the children of the largest Sequential that hold parameters."""
    blocks: list[nn.Module] = []
    seen: set[int] = set()
    for module in model.modules():
        if id(module) in seen:
            continue
        if isinstance(module, nn.ModuleList):
            for sub in module.modules():
                seen.add(id(sub))
            blocks.extend(m for m in module if any(True for _ in m.parameters()))
    if blocks:
        return blocks
    best: list[nn.Module] = []
    for module in model.modules():
        if isinstance(module, nn.Sequential):
            with_params = [m for m in module if any(True for _ in m.parameters())]
            if len(with_params) > len(best):
                best = with_params
    return best if len(best) >= 2 else []


def _checkpointed(forward: Callable[..., Any]) -> Callable[..., Any]:
    from torch.utils.checkpoint import checkpoint

    @functools.wraps(forward)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return forward(*args, **kwargs)
        return checkpoint(forward, *args, use_reentrant=False, **kwargs)

    return wrapper


def infinite(loader: Iterable[Any]) -> Iterator[Any]:
    """Cycle a DataLoader forever (each pass is an epoch, as in real training)."""
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            raise KnobError("the DataLoader yields no batch: the dataset is smaller than one batch")


@dataclass
class Plan:
    """A resolved configuration bound to a device and a task."""

    config: dict[str, Any]
    device: torch.device
    task: str = "train"
    accumulation: int = 1
    notes: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any], device: str | torch.device, task: str, global_batch: int | None = None
    ) -> Plan:
        plan = cls(dict(config), torch.device(device), task)
        steps = knobs.accumulation_steps(global_batch, plan.batch_size)  # checked for every task
        plan.accumulation = steps if task == "train" else 1
        return plan

    # ------------------------------------------------------------ the knobs' effects

    def applied(self, kind: type[E]) -> Iterator[tuple[knobs.Knob, E, Any]]:
        """(knob, effect, value) for each knob in the configuration that declares an effect of this kind."""
        for knob, effect in declared(kind):
            if knob.name in self.config:
                yield knob, effect, self.config[knob.name]

    def value(self, kind: type[fx.Effect]) -> Any:
        """The value of the (first) knob with an effect of this kind: configured, else its default."""
        for knob, _ in declared(kind):
            return self.config.get(knob.name, knob.default_for())
        return None

    @property
    def precision(self) -> str:
        """The value of the knob that sets the step's autocast (``fp32``, ``tf32``, ``bf16``, ``fp16``)."""
        return str(self.value(fx.Autocast))

    @property
    def batch_size(self) -> int:
        return int(self.value(fx.BatchSize))

    @property
    def samples_per_step(self) -> int:
        return self.batch_size * self.accumulation

    @property
    def ranks(self) -> int:
        """The processes the training runs as (:mod:`autotune.trial.ranks` starts them; 1: this one)."""
        return int(self.value(fx.Ranks) or 1)

    # ------------------------------------------------------------ process level

    def environment(self) -> dict[str, str]:
        """Variables that must be set before torch (or CUDA) reads them."""
        env: dict[str, str] = {}
        for _, effect, value in self.applied(fx.Env):
            env.update(effect.variables(value))
        return env

    def apply_process(self) -> None:
        """Set environment variables, thread count, malloc options, the cores it runs on and global backend flags in
        this process."""
        os.environ.update(self.environment())
        for _, _, threads in self.applied(fx.NumThreads):
            if threads and torch.get_num_threads() != int(threads):
                torch.set_num_threads(int(threads))
        for _, effect, value in self.applied(fx.Mallopt):
            if value in effect.options:
                heap.set_options(effect.options[value])
        for _, effect, value in self.applied(fx.BindCores):
            if value == effect.on and self.device.type == "cpu":
                cpus = binding.compact_cpus(launch.threads_of(self.config))
                if not set(os.sched_getaffinity(0)) <= set(cpus):  # a trial's process was started bound: left so
                    binding.bind(cpus)
        self.apply_flags()

    def apply_flags(self) -> None:
        """Set the global backend flags of this configuration (TF32, cuDNN benchmark) in this process: once per
        trial, or before each window of an arm that shares its process with others (:mod:`autotune.trial.paired`)."""
        new_api = fp32_precision_api()
        for _, flag, value in self.applied(fx.Flag):
            if flag.device_type == self.device.type and flag.in_use(new_api):
                *parents, attribute = flag.path.split(".")
                owner: Any = torch
                for part in parents:
                    owner = getattr(owner, part)
                setattr(owner, attribute, flag.value(value))

    def flag_values(self) -> dict[str, Any]:
        """The global backend flags this plan's knobs set, as they stand now in this process (what an arm of a
        shared process ran under: :mod:`autotune.trial.paired` records it, and tests check it equals the arm's own)."""
        out: dict[str, Any] = {}
        new_api = fp32_precision_api()
        for _, flag in declared(fx.Flag):
            if flag.device_type == self.device.type and flag.in_use(new_api):
                owner: Any = torch
                for part in flag.path.split("."):
                    owner = getattr(owner, part)
                out[flag.path] = owner
        return out

    # ------------------------------------------------------------ model and optimizer

    @property
    def channels_last(self) -> bool:
        return any(value == effect.on for _, effect, value in self.applied(fx.ChannelsLast))

    def prepare_model(self, model: nn.Module, compile: bool = True) -> nn.Module:
        """Move and transform the model; compile it last (``compile=False`` leaves that to the caller)."""
        model = model.to(self.device)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        for knob, _, value in self.applied(fx.CheckpointBlocks):
            if not value or self.task != "train":
                continue
            blocks = checkpoint_blocks(model)
            if not blocks:
                raise NotApplicableAtRuntime(knob.name, "the model has no ModuleList or Sequential of blocks to wrap")
            for block in blocks:
                block.forward = _checkpointed(block.forward)  # type: ignore[method-assign]
            self.notes["checkpointed_blocks"] = len(blocks)
        model.train(self.task == "train")
        if compile:
            model = self.compile_model(model)
        return model

    @property
    def cuda_graphs(self) -> bool:
        """Whether the step runs in CUDA graphs: a compile mode that captures them (torch's CUDA graph trees), on a
        CUDA device. Its outputs (a loss the model computes, an inference output) live in the graphs' memory and
        are overwritten by the next replay, and a forward in another mode (eval, no grad) records graphs of its own:
        the :class:`Stepper` clones what it returns, and evaluation runs on the uncompiled module
        (:func:`uncompiled`)."""
        return self.device.type == "cuda" and any(
            mode in effect.graphs for _, effect, mode in self.applied(fx.Compile))

    def distribute(self, model: nn.Module) -> nn.Module:
        """The model wrapped in DistributedDataParallel (in a rank of a process group already joined), with the DDP
        arguments of the knobs in force."""
        from torch.nn.parallel import DistributedDataParallel

        kwargs = {effect.keyword: knob.parse(value) for knob, effect, value in self.applied(fx.DDPArg)
                  if knob.in_force(self.config, self.task)}
        ids = [self.device.index] if self.device.type == "cuda" and self.device.index is not None else None
        ddp = DistributedDataParallel(model, device_ids=ids, **kwargs)
        for knob, effect, value in self.applied(fx.CommHook):
            if knob.in_force(self.config, self.task) and value in effect.hooks:
                from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

                ddp.register_comm_hook(None, getattr(default_hooks, effect.hooks[value]))  # the default process group
        return ddp

    def compile_model(self, model: nn.Module) -> nn.Module:
        for _, effect, mode in self.applied(fx.Compile):
            if mode != effect.off:
                model = torch.compile(model, mode=None if mode == effect.plain else mode)  # type: ignore[assignment]
        return model

    def build_optimizer(
        self,
        model: nn.Module,
        factory: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | torch.optim.Optimizer | None = None,
    ) -> torch.optim.Optimizer | None:
        """The optimizer (from a factory, or an instance already built on the model's parameters)
        with the configured implementation (foreach/fused: rebuilt with the same hyperparameters)."""
        if self.task != "train":
            return None
        if isinstance(factory, torch.optim.Optimizer):
            optimizer = factory
        else:
            params = [p for p in model.parameters() if p.requires_grad]
            optimizer = (factory or default_optimizer)(params)
        for knob, effect, impl in self.applied(fx.OptimizerImpl):
            if impl == effect.default:
                continue
            if impl not in optimizer_params(optimizer):
                raise NotApplicableAtRuntime(knob.name, f"{type(optimizer).__name__} takes no {impl}= argument")
            switches = optimizer_switches()
            groups = [{k: v for k, v in g.items() if k not in switches} for g in optimizer.param_groups]
            try:
                optimizer = type(optimizer)(groups, **{impl: True})
            except (RuntimeError, ValueError, TypeError) as exc:
                raise NotApplicableAtRuntime(knob.name, f"{impl}: {exc}") from None
        return optimizer

    # ------------------------------------------------------------ data

    @property
    def pin_memory(self) -> bool:
        return self.device.type == "cuda" and any(bool(value) for _, _, value in self.applied(fx.PinnedCopies))

    def loader_kwargs(self) -> dict[str, Any]:
        """DataLoader arguments: one per knob with a :class:`~autotune.knobs.effects.LoaderArg` that is in force."""
        kwargs: dict[str, Any] = {"drop_last": True}
        for knob, effect, value in self.applied(fx.LoaderArg):
            if not knob.in_force(self.config, self.task):
                continue  # e.g. prefetch_factor without workers, which DataLoader rejects
            kwargs[effect.keyword] = self.pin_memory if isinstance(effect, fx.PinnedCopies) else knob.parse(value)
        return kwargs

    def make_loader(
        self, dataset: Dataset, collate_fn: Callable[[list[Any]], Any] | None = None, **overrides: Any
    ) -> DataLoader:
        kwargs = {**self.loader_kwargs(), **overrides}
        if collate_fn is not None:
            kwargs["collate_fn"] = collate_fn
        if any(kwargs.get(effect.keyword) for _, effect in declared(fx.PinnedCopies)):
            kwargs["pin_memory_device"] = str(self.device)
        try:
            return DataLoader(dataset, **kwargs)
        except TypeError:  # older torch without pin_memory_device
            kwargs.pop("pin_memory_device", None)
            return DataLoader(dataset, **kwargs)

    def to_device(self, batch: Any) -> Any:
        """Copy a batch to the device (non-blocking from pinned memory), 4-D inputs channels-last."""
        if isinstance(batch, torch.Tensor):
            out = batch.to(self.device, non_blocking=self.pin_memory)
            if self.channels_last and out.dim() == 4 and out.is_floating_point():
                out = out.contiguous(memory_format=torch.channels_last)
            return out
        if isinstance(batch, (tuple, list)):
            return type(batch)(self.to_device(b) for b in batch)
        if isinstance(batch, dict):
            return {k: self.to_device(v) for k, v in batch.items()}
        return batch

    # ------------------------------------------------------------ the step

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        for _, effect, value in self.applied(fx.Autocast):
            dtype = effect.dtypes.get(value)
            if dtype is not None:
                return torch.autocast(device_type=self.device.type, dtype=getattr(torch, dtype))
        return contextlib.nullcontext()

    def make_scaler(self) -> Any:
        if self.task == "train" and any(value in effect.values for _, effect, value in self.applied(fx.GradScaler)):
            return torch.amp.GradScaler(self.device.type)
        return None

    def stepper(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
    ) -> Stepper:
        return Stepper(self, model, optimizer, loss_fn or default_loss, self.make_scaler(),
                       graphs=self.cuda_graphs and uncompiled(model) is not model)


def uncompiled(model: nn.Module) -> nn.Module:
    """The module ``torch.compile`` wrapped (it shares the parameters and buffers), or ``model`` itself when it is
    not compiled."""
    inner = getattr(model, "_orig_mod", None)
    return inner if isinstance(inner, nn.Module) else model


@dataclass
class Stepper:
    """Runs one real step on batches already on the device."""

    plan: Plan
    model: nn.Module
    optimizer: torch.optim.Optimizer | None
    loss_fn: Callable[[Any, Any], torch.Tensor]
    scaler: Any = None
    #: the model runs in CUDA graphs (:attr:`Plan.cuda_graphs`): what a step returns is cloned out of the graphs'
    #: memory, which the next replay overwrites; False: returned as computed, at no cost
    graphs: bool = False

    def kept(self, out: torch.Tensor) -> torch.Tensor:
        """``out`` (detached) as a tensor that outlives the next step: a copy under CUDA graphs, else itself."""
        return out.detach().clone() if self.graphs else out.detach()

    @property
    def eval_model(self) -> nn.Module:
        """The module an evaluation runs: the compiled one, except under CUDA graphs, where a forward in eval mode
        without gradients would compile and record graphs of its own beside the training's (in their one memory
        pool) at the first evaluation: there the uncompiled module, which shares the weights and records nothing."""
        return uncompiled(self.model) if self.graphs else self.model

    def __call__(self, batches: list[Any]) -> torch.Tensor:
        if self.plan.task == "train":
            return self.train(batches)
        return self.infer(batches)

    def train(self, batches: list[Any]) -> torch.Tensor:
        loss = torch.zeros(())
        no_sync = getattr(uncompiled(self.model), "no_sync", None)  # DDP: one all-reduce per optimizer step
        for i, batch in enumerate(batches):
            with no_sync() if no_sync is not None and i < len(batches) - 1 else contextlib.nullcontext():
                loss = self.micro(batch)
        self.finish()
        return loss

    def micro(self, batch: Any) -> torch.Tensor:
        """Forward and backward of one micro-batch (already on the device); returns the detached loss, which
        outlives the next step (:meth:`kept`)."""
        inputs, target = split_batch(batch)
        with self.plan.autocast():
            output = call_model(self.model, inputs)
            loss = self.loss_fn(output, target)
        if self.plan.accumulation > 1:
            loss = loss / self.plan.accumulation
            if self.graphs:
                self._own_grads()
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()
        return self.kept(loss)

    def finish(self) -> None:
        """The optimizer step after the micro-batches of one step, then :meth:`zero_grad`."""
        assert self.optimizer is not None
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.zero_grad()

    def zero_grad(self) -> None:
        """The gradients cleared after an optimizer step: set to None (no memory between steps), except under CUDA
        graphs with gradient accumulation, where they are zeroed in their own memory (:meth:`_own_grads`)."""
        assert self.optimizer is not None
        self.optimizer.zero_grad(set_to_none=not (self.graphs and self.plan.accumulation > 1))

    def _own_grads(self) -> None:
        """Under CUDA graphs with gradient accumulation, each parameter's ``.grad`` allocated (zeros) outside the
        graphs' memory before a backward. A ``.grad`` that autograd finds unset is the backward graph's output
        itself, which the next micro-batch's replay overwrites: torch's graph trees do not keep a backward's outputs
        across a later replay, so the micro-batches' gradients would not add up. Allocated, autograd adds each
        micro-batch's gradients into it."""
        assert self.optimizer is not None
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None and p.requires_grad:
                    p.grad = torch.zeros_like(p)

    def infer(self, batches: list[Any]) -> torch.Tensor:
        out = torch.zeros(())
        with torch.inference_mode():
            for batch in batches:
                inputs, _ = split_batch(batch)
                with self.plan.autocast():
                    out = main_tensor(call_model(self.model, inputs))
            return self.kept(out)

