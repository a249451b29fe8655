"""How a resolved configuration is applied: the one place that turns knob values into PyTorch calls.

The trial worker and :meth:`autotune.config.Config.apply` (a user's own training
script) both go through :class:`Plan`, so what a user applies is exactly what was
measured: environment and backend flags, model transforms (device, memory format,
activation checkpointing, compile), the optimizer's implementation, DataLoader
arguments, and the step itself (autocast, GradScaler, gradient accumulation,
non-blocking copies).
"""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from autotune.errors import KnobError
from autotune.workload import call_model, default_loss, default_optimizer, main_tensor, split_batch

AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class NotApplicableAtRuntime(Exception):
    """A knob turned out not to apply once the workload was built (e.g. no blocks to checkpoint)."""

    def __init__(self, knob: str, reason: str) -> None:
        super().__init__(f"{knob}: {reason}")
        self.knob = knob
        self.reason = reason


def optimizer_params(optimizer: torch.optim.Optimizer) -> frozenset[str]:
    """Which implementation switches (foreach, fused) the optimizer's class accepts."""
    import inspect

    try:
        params = inspect.signature(type(optimizer).__init__).parameters
    except (TypeError, ValueError):
        return frozenset()
    return frozenset(p for p in ("foreach", "fused") if p in params)


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
        config = dict(config)
        accumulation = 1
        if global_batch:
            bs = int(config["batch_size"])
            if global_batch % bs:
                raise KnobError(f"batch_size {bs} does not divide --global-batch {global_batch}")
            accumulation = global_batch // bs
        return cls(config, torch.device(device), task, accumulation if task == "train" else 1)

    @property
    def precision(self) -> str:
        return str(self.config.get("precision", "fp32"))

    @property
    def batch_size(self) -> int:
        return int(self.config["batch_size"])

    @property
    def samples_per_step(self) -> int:
        return self.batch_size * self.accumulation

    # ------------------------------------------------------------ process level

    def environment(self) -> dict[str, str]:
        """Variables that must be set before torch (or CUDA) reads them."""
        env: dict[str, str] = {}
        threads = self.config.get("threads")
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
            env["MKL_NUM_THREADS"] = str(threads)
        if self.config.get("cuda_allocator") == "expandable_segments":
            env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        return env

    def apply_process(self) -> None:
        """Set environment variables, thread count and global backend flags in this process."""
        os.environ.update(self.environment())
        threads = self.config.get("threads")
        if threads and torch.get_num_threads() != int(threads):
            torch.set_num_threads(int(threads))
        if self.device.type == "cuda":
            torch.backends.cudnn.benchmark = bool(self.config.get("cudnn_benchmark", False))
            tf32 = self.precision == "tf32"
            # fp32 keeps PyTorch's defaults: TF32 off for matmuls, on for cuDNN convolutions.
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = True

    # ------------------------------------------------------------ model and optimizer

    @property
    def channels_last(self) -> bool:
        return self.config.get("memory_format") == "channels_last"

    def prepare_model(self, model: nn.Module, compile: bool = True) -> nn.Module:
        """Move and transform the model; compile it last (``compile=False`` leaves that to the caller)."""
        model = model.to(self.device)
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        if self.config.get("activation_checkpointing") and self.task == "train":
            blocks = checkpoint_blocks(model)
            if not blocks:
                raise NotApplicableAtRuntime(
                    "activation_checkpointing", "the model has no ModuleList or Sequential of blocks to wrap"
                )
            for block in blocks:
                block.forward = _checkpointed(block.forward)  # type: ignore[method-assign]
            self.notes["checkpointed_blocks"] = len(blocks)
        model.train(self.task == "train")
        if compile:
            model = self.compile_model(model)
        return model

    def compile_model(self, model: nn.Module) -> nn.Module:
        mode = self.config.get("compile", "off")
        if mode == "off":
            return model
        return torch.compile(model, mode=None if mode == "default" else mode)  # type: ignore[return-value]

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
        impl = self.config.get("optimizer_impl", "default")
        if impl == "default":
            return optimizer
        if impl not in optimizer_params(optimizer):
            raise NotApplicableAtRuntime("optimizer_impl", f"{type(optimizer).__name__} takes no {impl}= argument")
        groups = [{k: v for k, v in g.items() if k not in ("foreach", "fused")} for g in optimizer.param_groups]
        try:
            return type(optimizer)(groups, **{impl: True})
        except (RuntimeError, ValueError, TypeError) as exc:
            raise NotApplicableAtRuntime("optimizer_impl", f"{impl}: {exc}") from None

    # ------------------------------------------------------------ data

    @property
    def pin_memory(self) -> bool:
        return bool(self.config.get("pin_memory")) and self.device.type == "cuda"

    def loader_kwargs(self) -> dict[str, Any]:
        workers = int(self.config.get("num_workers", 0))
        kwargs: dict[str, Any] = {
            "batch_size": self.batch_size,
            "num_workers": workers,
            "pin_memory": self.pin_memory,
            "drop_last": True,
        }
        if workers > 0:
            kwargs["prefetch_factor"] = int(self.config.get("prefetch_factor", 2))
            kwargs["persistent_workers"] = bool(self.config.get("persistent_workers", False))
        return kwargs

    def make_loader(
        self, dataset: Dataset, collate_fn: Callable[[list[Any]], Any] | None = None, **overrides: Any
    ) -> DataLoader:
        kwargs = {**self.loader_kwargs(), **overrides}
        if collate_fn is not None:
            kwargs["collate_fn"] = collate_fn
        if kwargs["pin_memory"]:
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
        dtype = AUTOCAST_DTYPES.get(self.precision)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def make_scaler(self) -> Any:
        if self.precision == "fp16" and self.task == "train":
            return torch.amp.GradScaler(self.device.type)
        return None

    def stepper(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
    ) -> Stepper:
        return Stepper(self, model, optimizer, loss_fn or default_loss, self.make_scaler())


@dataclass
class Stepper:
    """Runs one real step on batches already on the device."""

    plan: Plan
    model: nn.Module
    optimizer: torch.optim.Optimizer | None
    loss_fn: Callable[[Any, Any], torch.Tensor]
    scaler: Any = None

    def __call__(self, batches: list[Any]) -> torch.Tensor:
        if self.plan.task == "train":
            return self.train(batches)
        return self.infer(batches)

    def train(self, batches: list[Any]) -> torch.Tensor:
        loss = torch.zeros(())
        for batch in batches:
            loss = self.micro(batch)
        self.finish()
        return loss

    def micro(self, batch: Any) -> torch.Tensor:
        """Forward and backward of one micro-batch (already on the device); returns the detached loss."""
        inputs, target = split_batch(batch)
        with self.plan.autocast():
            output = call_model(self.model, inputs)
            loss = self.loss_fn(output, target)
        if self.plan.accumulation > 1:
            loss = loss / self.plan.accumulation
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()
        return loss.detach()

    def finish(self) -> None:
        """The optimizer step after the micro-batches of one step, then zero_grad(set_to_none=True)."""
        assert self.optimizer is not None
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def infer(self, batches: list[Any]) -> torch.Tensor:
        out = torch.zeros(())
        with torch.inference_mode():
            for batch in batches:
                inputs, _ = split_batch(batch)
                with self.plan.autocast():
                    out = main_tensor(call_model(self.model, inputs))
        return out

