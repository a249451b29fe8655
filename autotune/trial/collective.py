"""What the ranks of one training agree on while they are measured: the process group a rank joins, the barrier a
timed window starts after, the slowest rank's time it ends at, the decisions every rank must take alike, the largest
rank's memory.

Why a module of its own: a trial of several ranks (:mod:`autotune.trial.ranks`) runs the one-process measurement
(:mod:`autotune.trial.measure_one`, :func:`autotune.trial.protocol.run_protocol`) in each rank. DDP makes every rank
run the same steps, so whatever decides how many steps a rank runs (the end of the warm-up, the steps of a window, a
cut) must be decided alike in all of them, or a rank waits for an all-reduce that never comes. Here, below the
protocol and the measurement, is the one place that talks to the process group for them; with no group (one process)
nothing here is called.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Group:
    """This rank in the default process group: its rank, the world's size, the device its tensors go to."""

    rank: int
    world: int
    device: torch.device

    @classmethod
    def join(cls, device: torch.device) -> Group:
        """Join the process group the launcher described in the environment (``RANK``, ``WORLD_SIZE``,
        ``MASTER_ADDR``, ``MASTER_PORT``): NCCL on a CUDA device (which becomes this process's), gloo elsewhere."""
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
        return cls(rank=dist.get_rank(), world=dist.get_world_size(), device=device)

    @staticmethod
    def from_environment() -> tuple[int, int, int]:
        """(rank, world size, local rank) as the elastic launcher sets them for a worker."""
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])

    def barrier(self) -> None:
        """Every rank is here (a timed window starts after it)."""
        dist.barrier()

    def _reduce(self, value: float, dtype: torch.dtype) -> float:
        tensor = torch.tensor([value], dtype=dtype, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return tensor.item()

    def slowest(self, seconds: float) -> float:
        """The longest of the ranks' times: a window ends when its last rank does."""
        return float(self._reduce(seconds, torch.float64))

    def agree(self, flag: bool) -> bool:
        """True in every rank when it is true in any (the end of the warm-up, a cut): all ranks decide alike."""
        return bool(self._reduce(1.0 if flag else 0.0, torch.float64))

    def mean(self, value: float) -> float:
        """The mean of the ranks' values (a numerics run's loss: each rank's over its share of the step)."""
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor.item() / self.world

    def largest(self, count: int) -> int:
        """The largest of the ranks' counts (the trial's memory is its largest rank's)."""
        return int(self._reduce(count, torch.int64))

    def leave(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
