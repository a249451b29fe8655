"""CUDA graphs' replayed outputs, on a CPU: a model whose loss lives in memory that its next call overwrites.

Under ``torch.compile(mode="reduce-overhead")`` (torch's CUDA graph trees) a compiled forward's outputs are
written into the addresses the graph recorded, and the next replay writes over them; torch's own docs say to clone
what a program keeps "before you begin the next run". What the step does about it (:meth:`Stepper.kept
<autotune.trial.plan.Stepper.kept>`) is tested on a CPU with this fake of the one piece that matters, the fixed
buffer an output lives in; the real graphs are tested on a GPU (``tests/test_gpu.py``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class Replayed(torch.autograd.Function):
    """``value`` written into ``buffer`` and returned as a view of it (gradients pass through): each call
    overwrites what the previous one returned, as a graph's replay does."""

    @staticmethod
    def forward(ctx: Any, value: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
        buffer.copy_(value)
        return buffer.view_as(buffer)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class InGraphLoss(nn.Module):
    """A regression that computes its loss in its forward (as Hugging Face models do) from a dict batch ``{"x": (n,
    4), "y": (n,)}``, and returns ``{"loss", "logits"}`` (the logits summed) in fixed buffers, as a graph would."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(4, 1)
        self.register_buffer("static_loss", torch.zeros(()), persistent=False)
        self.register_buffer("static_logits", torch.zeros(()), persistent=False)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.head(x).squeeze(-1)
        loss = nn.functional.mse_loss(logits, y)
        return {"loss": Replayed.apply(loss, self.static_loss),
                "logits": Replayed.apply(logits.sum(), self.static_logits)}


def batches(n: int, size: int = 4, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """``n`` dict batches for :class:`InGraphLoss`, each of ``size`` samples."""
    gen = torch.Generator().manual_seed(seed)
    return [{"x": torch.randn(size, 4, generator=gen), "y": torch.randn(size, generator=gen)} for _ in range(n)]
