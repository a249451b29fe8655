"""What every measurement in a trial process is built of: the process started for a configuration, OOM told apart."""

from __future__ import annotations

import torch

from autotune.trial import arm
from autotune.machine import hardware


def test_a_cuda_device_without_an_index_is_set_as_cuda_0(monkeypatch):
    """torch.cuda.set_device refuses torch.device("cuda"); a trial asked for "cuda" runs on cuda:0 (simulated:
    no GPU)."""
    seen = []

    def set_device(device):
        if isinstance(device, torch.device) and device.index is None:
            raise ValueError("Expected a torch.device with a specified index or an integer")  # as torch says it
        seen.append(device)

    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: seen.append(("reset", device)))
    arm.start_process({}, torch.device("cuda"))
    assert seen == [torch.device("cuda", 0), ("reset", torch.device("cuda", 0))]
    seen.clear()
    arm.start_process({}, torch.device("cuda:1"))
    assert seen == [torch.device("cuda", 1), ("reset", torch.device("cuda", 1))]


def test_out_of_memory_is_told_by_type_before_and_after_torch_2_4(monkeypatch):
    """torch.OutOfMemoryError is torch 2.4's; before it only torch.cuda.OutOfMemoryError existed."""
    assert arm.is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert arm.is_oom(MemoryError()) and not arm.is_oom(RuntimeError("shapes do not match"))

    class OlderCudaOOM(RuntimeError):  # torch 2.3's torch.cuda.OutOfMemoryError, with a message that says nothing
        pass

    monkeypatch.delattr(torch, "OutOfMemoryError")
    monkeypatch.setattr(torch.cuda, "OutOfMemoryError", OlderCudaOOM)
    assert hardware.oom_types() == (OlderCudaOOM, MemoryError)
    assert arm.is_oom(OlderCudaOOM("allocation failed"))
    wrapped = RuntimeError("step failed")
    wrapped.__cause__ = OlderCudaOOM("allocation failed")
    assert arm.is_oom(wrapped)
