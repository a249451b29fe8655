from __future__ import annotations

import pytest

import torch

from autotune.machine import hardware
from autotune.errors import DeviceError
from autotune.machine import identity


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
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="no CUDA device"):
            hardware.check_device("cuda:0")
    else:  # pragma: no cover - GPU machines
        with pytest.raises(DeviceError, match="CUDA device"):
            hardware.check_device("cuda:99")


def test_fingerprint_and_differences():
    fp = hardware.fingerprint("cpu")
    assert fp["device_type"] == "cpu" and fp["cpu_count"] >= 1 and fp["torch"]
    other = dict(fp, torch="0.0.1")
    assert identity.differences(fp, other) == [f"torch: {fp['torch']} (stored) vs 0.0.1 (here)"]
    assert identity.differences(fp, dict(fp, python="0.0")) == []  # not part of the identity


def test_the_cpu_vector_isa_is_part_of_the_identity_and_the_kind():
    from autotune import store as storage

    fp = hardware.fingerprint("cpu")
    assert fp["cpu_capability"]  # AVX2, AVX512, DEFAULT, ...
    wider = dict(fp, cpu_capability="AVX512" if fp["cpu_capability"] != "AVX512" else "AVX2")
    assert identity.differences(fp, wider) == [
        f"cpu_capability: {fp['cpu_capability']} (stored) vs {wider['cpu_capability']} (here)"]
    assert storage.kind(fp) != storage.kind(wider) and fp["cpu_capability"].lower() in storage.kind(fp)
    older = {k: v for k, v in fp.items() if k != "cpu_capability"}  # a study made before it was recorded
    assert identity.differences(older, wider) == []


# ---------------------------------------------------------------- native bf16 on the CPU

ZEN3 = ("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n"
        "flags\t\t: fpu sse sse2 ssse3 fma avx f16c avx2 bmi2 sha_ni vaes vpclmulqdq\n\nprocessor\t: 1\n")
ZEN4 = "flags\t\t: fpu avx2 avx512f avx512bw avx512_vnni avx512_bf16 vaes\n"
SAPPHIRE_RAPIDS = "flags\t\t: fpu avx2 avx512f avx512_vnni amx_bf16 amx_tile amx_int8\n"
CASCADE_LAKE = "flags\t\t: fpu avx2 avx512f avx512bw avx512_vnni\n"  # AVX-512 without bf16
GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes sve asimdbf16 bf16 i8mm\n"
GRAVITON2 = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics\n"


@pytest.mark.parametrize("cpuinfo, native", [(ZEN3, False), (CASCADE_LAKE, False), (GRAVITON2, False),
                                             (ZEN4, True), (SAPPHIRE_RAPIDS, True), (GRAVITON3, True)])
def test_native_bf16_from_the_cpu_flags(cpuinfo, native, monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: not native, raising=False)
    assert hardware.native_bf16(cpuinfo) is native  # the flags decide, whatever torch's probe says


def test_native_bf16_without_flags_asks_torch_and_is_conservative(monkeypatch):
    """Where no flags are listed (macOS, Windows): torch's probes; where they cannot say, no native bf16."""
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.setattr(torch.cpu, probe, lambda: False, raising=False)
    assert hardware.native_bf16("") is False
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert hardware.native_bf16("") is True

    def broken() -> bool:
        raise RuntimeError("cpuinfo failed to initialise")

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", broken)
    assert hardware.native_bf16("") is False
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        monkeypatch.delattr(torch.cpu, probe)
    assert hardware.native_bf16("") is False


def test_cpu_flags_reads_the_first_cpu_only():
    zen3 = hardware.cpu_flags(ZEN3.splitlines())
    assert zen3 is not None and {"avx2", "fma", "sha_ni"} <= zen3 and not zen3 & hardware.BF16_FLAGS
    assert hardware.cpu_flags(GRAVITON3.splitlines()) >= {"bf16", "sve"}
    assert hardware.cpu_flags(["processor : 0", "model name : Apple M2"]) is None

    def lines():
        yield "flags : avx2"
        raise AssertionError("read past the first flags line")

    assert hardware.cpu_flags(lines()) == {"avx2"}


def test_the_probe_records_native_bf16_in_the_context(monkeypatch):
    from autotune import knobs
    from autotune.trial import arm
    from autotune.workloads.specs import build
    from autotune.workloads.contract import WorkloadSpec

    w = build(WorkloadSpec("autotune.examples:mlp"))
    for native in (False, True):
        monkeypatch.setattr(hardware, "native_bf16", lambda cpuinfo=None, native=native: native)
        ctx = arm.context_for(w, torch.device("cpu"))
        assert ctx.cpu_bf16 is native
        assert knobs.Context.from_dict(ctx.to_dict()).cpu_bf16 is native  # stored and read back with the study
