"""Workloads that fail on purpose, for the runner's and the study's tests."""

from __future__ import annotations

import os
import signal
import threading
import time

import torch
from torch import nn
from torch.utils.data import Dataset

from autotune import Workload


class _Tiny(nn.Module):
    def __init__(self, mode: str = "ok") -> None:
        super().__init__()
        self.lin = nn.Linear(8, 4)
        self.mode = mode
        self.example_input = torch.zeros(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "oom":
            torch.empty(1 << 50, dtype=torch.uint8)  # far more than any machine has
        if self.mode == "sleep":
            time.sleep(3600)
        if self.mode == "abort":
            os.kill(os.getpid(), signal.SIGABRT)
        if self.mode == "exit":
            os._exit(3)
        y = self.lin(x)
        if self.mode == "nan":
            y = y * float("nan")
        return y


def tiny() -> nn.Module:
    return _Tiny("ok")


def oom() -> nn.Module:
    return _Tiny("oom")


def nan() -> nn.Module:
    return _Tiny("nan")


def abort() -> nn.Module:
    return _Tiny("abort")


def hard_exit() -> nn.Module:
    return _Tiny("exit")


class _SlowData(Dataset):
    def __len__(self) -> int:
        return 1 << 16

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros(8), torch.tensor(i % 4)


def sleeper() -> Workload:
    """Sleeps forever in forward, with two DataLoader workers alive (they must die with it)."""
    return Workload(model=_Tiny("sleep"), dataset=_SlowData())


class _PidData(Dataset):
    """Records the pid of each process that loads an item; each DataLoader worker holds ``hold_mb`` MiB."""

    def __init__(self, folder: str, hold_mb: int = 0) -> None:
        self.folder = folder
        self.hold_mb = hold_mb
        self._held: torch.Tensor | None = None

    def __len__(self) -> int:
        return 1 << 16

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        in_worker = torch.utils.data.get_worker_info() is not None
        if self._held is None and self.hold_mb and in_worker:
            self._held = torch.ones(self.hold_mb << 20, dtype=torch.uint8)  # touched: really resident
        open(os.path.join(self.folder, f"{os.getpid()}.pid"), "w").close()
        return torch.zeros(8), torch.tensor(i % 4)


def pid_data(folder: str, hold_mb: int = 0) -> Workload:
    return Workload(model=nn.Linear(8, 4), dataset=_PidData(folder, hold_mb))




class _Slow(_Tiny):
    def __init__(self, delay: float) -> None:
        super().__init__("ok")
        self.delay = delay

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.delay)
        return super().forward(x)


def slow(delay: float = 0.1) -> nn.Module:
    """A tiny model whose step takes at least ``delay`` seconds: trials last long enough to be interrupted."""
    return _Slow(delay)


class _SlowFirst(_Tiny):
    def __init__(self, first: float) -> None:
        super().__init__("ok")
        self.first = first
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls == 1:
            time.sleep(self.first)
        return super().forward(x)


def slow_first(first: float = 4.0) -> nn.Module:
    """A tiny model whose first forward takes ``first`` seconds (as a compilation would) and every later one no time."""
    return _SlowFirst(first)


class _EnvCheck(_Tiny):
    """Fails its step unless the trial process sees ``var=value`` (and ``threads`` intra-op threads)."""

    def __init__(self, var: str, value: str, threads: int) -> None:
        super().__init__("ok")
        self.var, self.value, self.threads = var, value, threads

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # value None: the variable must be unset
        assert os.environ.get(self.var) == self.value, f"{self.var}={os.environ.get(self.var)!r}"
        assert not self.threads or torch.get_num_threads() == self.threads, torch.get_num_threads()
        return super().forward(x)


def env_check(var: str, value: str | None, threads: int = 0) -> nn.Module:
    return _EnvCheck(var, value, threads)


class _Capped(nn.Linear):
    """Runs out of memory (as the allocator says it) when a batch is larger than ``cap``, like a device would."""

    def __init__(self, cap: int) -> None:
        super().__init__(8, 4)
        self.cap = cap
        self.example_input = torch.zeros(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > self.cap:
            raise torch.OutOfMemoryError(f"out of memory: a batch of {x.shape[0]} (this device holds {self.cap})")
        return super().forward(x)


def capped(cap: int = 48) -> nn.Module:
    return _Capped(cap)


def deletes_file(path: str, counter: str, on_build: int = 2) -> nn.Module:
    """A tiny model whose ``on_build``-th build (counted in the file ``counter``; the first is the
    run's probe) deletes ``path``: a study file removed while its run goes on."""
    builds = int(open(counter).read()) + 1 if os.path.exists(counter) else 1
    with open(counter, "w") as fh:
        fh.write(str(builds))
    if builds == on_build and os.path.exists(path):
        os.remove(path)
    return _Tiny("ok")


class _SlowAbove(nn.Linear):
    """Fast with small batches; each step of a batch above ``batch`` takes ``delay`` seconds (a configuration far
    slower than the defaults, as bf16 on a CPU without native bf16 is)."""

    def __init__(self, batch: int, delay: float) -> None:
        super().__init__(8, 4)
        self.batch, self.delay = batch, delay
        self.example_input = torch.zeros(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > self.batch:
            time.sleep(self.delay)
        return super().forward(x)


def slow_above(batch: int = 32, delay: float = 1.0) -> nn.Module:
    return _SlowAbove(batch, delay)


class _RankFails(_Tiny):
    """On rank ``rank`` of a training of several (its ``RANK``), after ``after`` steps: raises (``how="raise"``),
    sleeps forever (``"hang"``), or is killed by SIGKILL (``"kill"``, as the kernel's OOM killer would); the other
    ranks run."""

    def __init__(self, how: str, rank: int, after: int) -> None:
        super().__init__("ok")
        self.how, self.rank, self.after, self.calls = how, rank, after, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if os.environ.get("RANK") == str(self.rank) and self.calls > self.after:
            if self.how == "raise":
                raise RuntimeError(f"rank {self.rank} breaks")
            if self.how == "hang":
                threading.Event().wait()  # a hang: until the trial's timeout kills the group
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
        return super().forward(x)


def rank_fails(how: str = "raise", rank: int = 1, after: int = 3) -> nn.Module:
    return _RankFails(how, rank, after)
