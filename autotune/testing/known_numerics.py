"""Workloads whose numerics are known, for the numerics check's tests and benchmark (``--model
autotune.testing.known_numerics:<name>``): what each configuration does to the loss is a fact of the model, not a
measurement.

- :func:`mlp`: an ordinary MLP; bf16 autocast rounds its matmuls, and its loss follows fp32's within a fraction of a
  percent: the numerics hold.
- :func:`needs_mantissa`: a layer that reads a small signal riding on a large offset (``h + 256``); bf16 keeps 8
  bits of mantissa, a step of 2 at 256, so under bf16 the signal is rounded away and the loss cannot fall as fp32's
  does: the numerics differ, because of the precision.
- :func:`batchnorm`: a CNN with BatchNorm on data whose samples differ in scale; BatchNorm normalises by the batch's
  own statistics, so a batch of 32 trains a different model than one of 128 even on the same samples per step:
  the numerics differ, because of the batch size.
- :func:`dropout`: the MLP with dropout, which the check turns off (its masks differ between configurations).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset

from autotune.workloads.contract import Workload

OFFSET = 256.0


class Fixed(Dataset):
    """``length`` samples drawn once from a seeded generator: inputs of ``shape`` (scaled per sample by up to
    ``spread``x) and class labels given by a fixed random linear teacher, so there is something to learn."""

    def __init__(self, shape: tuple[int, ...], classes: int = 10, length: int = 4096, spread: float = 1.0,
                 seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn((length, *shape), generator=gen)
        if spread != 1.0:
            x = x * torch.exp(torch.rand((length,) + (1,) * len(shape), generator=gen)
                              * torch.log(torch.tensor(spread)))
        teacher = torch.randn((int(torch.tensor(shape).prod()), classes), generator=gen)
        self.x, self.y = x, (x.reshape(length, -1) @ teacher).argmax(dim=1)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


def _opt(params):  # a learning rate that moves a small model visibly in 30 steps
    return torch.optim.AdamW(params, lr=1e-3)


def mlp(width: int = 256, depth: int = 3, seed: int = 0) -> Workload:
    layers: list[nn.Module] = [nn.Linear(64, width), nn.ReLU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, 10))
    return Workload(model=nn.Sequential(*layers), dataset=Fixed((64,), seed=seed), optimizer=_opt)


class _Offset(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.inner = nn.Linear(64, width)
        self.outer = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.inner(x)) + OFFSET  # the signal (within +-1) on an offset bf16 rounds in steps of 2
        return self.outer(h) - self.outer.weight.sum(dim=1) * OFFSET  # the offset taken out again, exactly in fp32


def needs_mantissa(width: int = 128, seed: int = 0) -> Workload:
    return Workload(model=_Offset(width), dataset=Fixed((64,), seed=seed), optimizer=_opt)


def batchnorm(width: int = 256, spread: float = 1000.0, seed: int = 0) -> Workload:
    model = nn.Sequential(nn.Linear(64, width), nn.BatchNorm1d(width), nn.ReLU(), nn.Linear(width, width),
                          nn.BatchNorm1d(width), nn.ReLU(), nn.Linear(width, 10))
    return Workload(model=model, dataset=Fixed((64,), spread=spread, seed=seed), optimizer=_opt)


def dropout(width: int = 256, seed: int = 0) -> Workload:
    model = nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Dropout(0.3), nn.Linear(width, 10))
    return Workload(model=model, dataset=Fixed((64,), seed=seed), optimizer=_opt)
