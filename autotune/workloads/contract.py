"""The workload contract: what a training step needs, and the defaults for what a factory leaves out.

A user's factory returns an ``nn.Module`` or a :class:`Workload` (model, dataset or
one example sample, loss, optimizer factory, task). This module checks what it returned,
fills in defaults (synthetic data, cross-entropy or a mean-square loss, AdamW), and knows how to
split a batch into model inputs and a target and how to get a loss out of whatever the
model returns. Finding the factory a spec names (``module:attr``, ``hf:``, ``pickled:``)
is :mod:`autotune.workloads.specs`, which builds on this module (and :mod:`autotune.workloads.hf` on both).
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch
from torch import nn
from torch.utils.data import Dataset

from autotune.errors import WorkloadError
from autotune.request import TASKS, WorkloadSpec, option


@dataclass
class Workload:
    """Everything a step needs. Return one from your factory to control more than the model.

    ``dataset`` yields single samples (tensors, tuples or dicts of tensors); when it is
    None, ``example`` (one sample, without the batch dimension) is used to make
    synthetic data of the same shapes and dtypes. ``loss_fn(output, target)`` turns
    the model's output into a scalar; ``optimizer(params)`` builds the optimizer.
    ``batch_size`` fixes the batch size (it is then not searched).

    What the numerics check (``--numerics``, :mod:`autotune.trial.numerics_run`) needs of a workload, to train the
    defaults and the recommendation from the same start on the same samples: a factory whose weights depend only
    on the random generators it is called under (torch's, Python's, NumPy's: the check seeds them; a factory that
    seeds itself, or loads weights that change, cannot be compared and is reported "not checked"); a map-style
    dataset whose item ``i`` is the same sample in every process (random augmentations are fine: each step's
    samples are read under generators seeded for that step); and a task of ``train``. Dropout modules are turned off
    for the check (their masks would differ between configurations); dropout called as a function is not.
    """

    model: nn.Module
    dataset: Dataset | None = None
    example: Any = None
    loss_fn: Callable[[Any, Any], torch.Tensor] | None = None
    optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | None = None
    task: str = "train"
    collate_fn: Callable[[list[Any]], Any] | None = None
    batch_size: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def user_frame(exc: BaseException) -> str:
    """' (at file:line)' of the innermost frame of the traceback outside torch and the modules that call the
    user's code (this one and :mod:`autotune.workloads.specs`); empty when there is none."""
    frames = traceback.extract_tb(exc.__traceback__)
    here = os.sep + "autotune" + os.sep
    skip = (os.sep + "torch" + os.sep, here + "workload.py", here + "specs.py", "<frozen ")
    for frame in reversed(frames):
        if not any(s in frame.filename for s in skip):
            return f" (at {frame.filename}:{frame.lineno})"
    return ""


# ---------------------------------------------------------------- synthetic data


def _random_like(sample: Any, gen: torch.Generator) -> Any:
    if isinstance(sample, torch.Tensor):
        if sample.dtype == torch.bool:
            return torch.randint(0, 2, sample.shape, generator=gen).bool()
        if not sample.is_floating_point() and not sample.is_complex():
            high = max(int(sample.max().item()) + 1, 2) if sample.numel() else 2
            return torch.randint(0, high, sample.shape, generator=gen, dtype=sample.dtype)
        return torch.randn(sample.shape, generator=gen, dtype=sample.dtype)
    if isinstance(sample, (tuple, list)):
        return type(sample)(_random_like(s, gen) for s in sample)
    if isinstance(sample, dict):
        return {k: _random_like(v, gen) for k, v in sample.items()}
    return sample


class SyntheticDataset(Dataset):
    """Random samples shaped like an example sample; a small pool, cycled, so items cost nothing."""

    def __init__(self, example: Any, length: int = 1 << 16, pool: int = 64, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.pool = [_random_like(example, gen) for _ in range(pool)]
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Any:
        return self.pool[index % len(self.pool)]


# ---------------------------------------------------------------- building


def from_factory(spec: WorkloadSpec, made: Any) -> Workload:
    """What the model factory of ``spec`` returned, checked, as a Workload with the spec's task."""
    if isinstance(made, nn.Module):
        workload = Workload(model=made)
    elif isinstance(made, Workload):
        workload = made
        if not isinstance(workload.model, nn.Module):
            raise WorkloadError(
                f"{option('model', spec.model, quoted=True)} returned a Workload whose model is a "
                f"{type(workload.model).__name__}, not an nn.Module"
            )
    else:
        raise WorkloadError(
            f"{option('model', spec.model, quoted=True)} returned {type(made).__name__}; "
            "expected an nn.Module or an autotune.Workload"
        )
    if spec.task:
        workload.task = spec.task
    if workload.task not in TASKS:
        raise WorkloadError(f"task {workload.task!r} is not one of {', '.join(TASKS)}")
    return workload


def complete(workload: Workload, spec: WorkloadSpec, dataset: Any = None) -> Workload:
    """``workload`` with the data factory's ``dataset`` (when ``spec`` names one) and every default filled in:
    synthetic data shaped like the example (or the spec's input shape) when there is no dataset, the dataset's
    first sample as the example when there is no example."""
    if spec.data:
        if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
            raise WorkloadError(
                f"{option('data', spec.data, quoted=True)} returned {type(dataset).__name__}; expected a map-style "
                "Dataset"
            )
        workload.dataset = dataset
    if workload.dataset is None:
        example = workload.example
        if example is None:
            example = _example_from_shapes(workload.model, spec)
        workload.example = example
        workload.dataset = SyntheticDataset(example, length=spec.synthetic_size)
    elif workload.example is None:
        try:
            workload.example = workload.dataset[0]
        except Exception as exc:
            raise WorkloadError(
                f"the dataset's first sample could not be read: {type(exc).__name__}: {exc}{user_frame(exc)}"
            ) from None
    return workload

def _example_from_shapes(model: nn.Module, spec: WorkloadSpec) -> Any:
    if spec.input_shape:
        x = torch.zeros(spec.input_shape)
    elif isinstance(getattr(model, "example_input", None), torch.Tensor):
        x = model.example_input  # type: ignore[assignment]
    else:
        raise WorkloadError(
            f"{option('model', spec.model, quoted=True)} gives no data: pass {option('data')}, or "
            f"{option('input_shape')} "
            f"(and {option('num_classes')} for a classifier), or give the module an example_input tensor"
        )
    if spec.num_classes:
        return (x, torch.tensor(spec.num_classes - 1))
    return x


def input_rank(example: Any) -> int | None:
    """Rank of the first model input once batched (a (3,32,32) sample gives 4)."""
    inputs, _ = split_batch(example)
    for item in inputs:
        if isinstance(item, torch.Tensor):
            return item.dim() + 1
    if isinstance(inputs, dict):
        for item in inputs.values():
            if isinstance(item, torch.Tensor):
                return item.dim() + 1
    return None


# ---------------------------------------------------------------- step helpers


def split_batch(batch: Any) -> tuple[Any, Any]:
    """A batch into (model inputs, target). Inputs are a tuple (positional) or a dict (keywords)."""
    if isinstance(batch, dict):
        return batch, batch
    if isinstance(batch, (tuple, list)):
        if len(batch) >= 2:
            return tuple(batch[:-1]), batch[-1]
        return tuple(batch), None
    return (batch,), None


def call_model(model: Callable[..., Any], inputs: Any) -> Any:
    if isinstance(inputs, dict):
        return model(**inputs)
    return model(*inputs)


def main_tensor(output: Any) -> torch.Tensor:
    """The tensor that stands for the output: itself, the first of a tuple, logits of a dict/object."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)) and output:
        return main_tensor(output[0])
    if isinstance(output, dict):
        if "logits" in output:
            return output["logits"]
        for value in output.values():
            if isinstance(value, torch.Tensor):
                return value
    logits = getattr(output, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    raise WorkloadError(f"the model returned {type(output).__name__}; no tensor found in it")


def _output_loss(output: Any) -> torch.Tensor | None:
    if isinstance(output, dict) and isinstance(output.get("loss"), torch.Tensor):
        return output["loss"]
    loss = getattr(output, "loss", None)
    return loss if isinstance(loss, torch.Tensor) else None


def default_loss(output: Any, target: Any) -> torch.Tensor:
    """The output's ``.loss``; cross-entropy for integer targets; MSE for matching float targets; else the output's
    mean square: a loss bounded below, so that a training of many steps converges (a plain mean falls without bound
    and overflows fp16 within a minute of an H100's steps)."""
    loss = _output_loss(output)
    if loss is not None:
        return loss
    pred = main_tensor(output)
    if isinstance(target, dict):
        target = target.get("labels")
    if isinstance(target, torch.Tensor):
        if not target.is_floating_point() and pred.dim() >= 2 and pred.shape[:-1] == target.shape:
            return nn.functional.cross_entropy(pred.reshape(-1, pred.shape[-1]).float(), target.reshape(-1))
        if target.is_floating_point() and target.shape == pred.shape:
            return nn.functional.mse_loss(pred.float(), target.float())
    return pred.float().square().mean()


def default_optimizer(params: Iterable[nn.Parameter], **kwargs: Any) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-4, **kwargs)
