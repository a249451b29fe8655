from __future__ import annotations

import pytest

from autotune import hardware
from autotune.errors import DeviceError


def test_peak_flops_table():
    assert hardware.peak_flops("NVIDIA H100 80GB HBM3", "bf16") == pytest.approx(989.4e12)
    assert hardware.peak_flops("NVIDIA H100 PCIe", "bf16") == pytest.approx(756e12)
    assert hardware.peak_flops("NVIDIA A100-SXM4-80GB", "fp16") == pytest.approx(312e12)
    assert hardware.peak_flops("Some Future GPU", "bf16") is None
    assert hardware.peak_flops(None, "fp32") is None


def test_check_device():
    assert hardware.check_device("cpu") == "cpu"
    with pytest.raises(DeviceError, match="not a device"):
        hardware.check_device("banana")
    if not hardware.torch.cuda.is_available():
        with pytest.raises(DeviceError, match="no CUDA device"):
            hardware.check_device("cuda:0")
    else:  # pragma: no cover - GPU machines
        with pytest.raises(DeviceError, match="CUDA device"):
            hardware.check_device("cuda:99")


def test_fingerprint_and_differences():
    fp = hardware.fingerprint("cpu")
    assert fp["device_type"] == "cpu" and fp["cpu_count"] >= 1 and fp["torch"]
    other = dict(fp, torch="0.0.1")
    assert hardware.differences(fp, other) == [f"torch: {fp['torch']} (stored) vs 0.0.1 (here)"]
    assert hardware.differences(fp, dict(fp, python="0.0")) == []  # not part of the identity


def test_the_cpu_vector_isa_is_part_of_the_identity_and_the_kind():
    from autotune import store as storage

    fp = hardware.fingerprint("cpu")
    assert fp["cpu_capability"]  # AVX2, AVX512, DEFAULT, ...
    wider = dict(fp, cpu_capability="AVX512" if fp["cpu_capability"] != "AVX512" else "AVX2")
    assert hardware.differences(fp, wider) == [f"cpu_capability: {fp['cpu_capability']} (stored) vs {wider['cpu_capability']} (here)"]
    assert storage.kind(fp) != storage.kind(wider) and fp["cpu_capability"].lower() in storage.kind(fp)
    older = {k: v for k, v in fp.items() if k != "cpu_capability"}  # a study made before it was recorded
    assert hardware.differences(older, wider) == []
