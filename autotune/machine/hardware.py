"""The machine a trial runs on: device resolution, the hardware/software fingerprint, and known peak FLOP/s
(:mod:`autotune.machine.peaks`'s table).

Only the functions that probe the live machine import torch (inside them): the read commands compare stored
fingerprints with :func:`differences` and :func:`short`, and must answer without loading torch (~1 s).
"""

from __future__ import annotations

import os
import platform
from typing import Any, Iterable


from autotune.errors import DeviceError
from autotune.machine import load, peaks
from autotune.machine.load import cpu_count
from autotune.request import option

# The peak FLOP/s table lives in the torch-free autotune.machine.peaks, which the read side reads too (status, export,
# the dashboard: autotune.evidence.efficiency); the trial process reaches it here.
PEAK_FLOPS = peaks.PEAK_FLOPS
peak_flops = peaks.peak_flops


def oom_types() -> tuple[type[BaseException], ...]:
    """The exception types that mean out of memory: ``torch.OutOfMemoryError`` (torch 2.4 and newer, raised by the
    CPU allocator too), ``torch.cuda.OutOfMemoryError`` (the CUDA allocator's, its only name before 2.4),
    ``MemoryError``."""
    import torch

    found = (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None), MemoryError)
    return tuple(dict.fromkeys(t for t in found if isinstance(t, type)))


def check_device(device: str) -> str:
    """Validate a ``--device`` string (cpu, cuda, cuda:N) against this machine; returns it normalised."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise DeviceError(f"{option('device', device, quoted=True)}: not a device (expected cpu, cuda or "
                          "cuda:N)") from None
    if dev.type == "cpu":
        return "cpu"
    if dev.type != "cuda":
        raise DeviceError(f"{option('device', device, quoted=True)}: only cpu and cuda devices are supported")
    count = torch.cuda.device_count()
    if count == 0:
        raise DeviceError(f"{option('device', device, quoted=True)}: this machine has no CUDA device "
                          f"(use {option('device', 'cpu')})")
    index = dev.index or 0
    if index >= count:
        raise DeviceError(f"{option('device', device, quoted=True)}: this machine has {count} CUDA device(s), "
                          f"cuda:0..cuda:{count - 1}")
    return f"cuda:{index}"


def default_device() -> str:
    import torch

    return "cuda:0" if torch.cuda.device_count() > 0 else "cpu"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def driver_version() -> str | None:
    """The NVIDIA driver's version (``/proc/driver/nvidia/version``), None without one."""
    try:
        with open("/proc/driver/nvidia/version") as fh:
            first = fh.readline()
        for token in first.split():
            if token.count(".") >= 1 and token.replace(".", "").isdigit():
                return token
    except OSError:
        pass
    return None


def fingerprint(device: str) -> dict[str, Any]:
    """What the measurements depend on. Call it where trials run (it may start CUDA)."""
    import torch

    dev = torch.device(device)
    info: dict[str, Any] = {
        "device_type": dev.type,
        "device_name": _cpu_model(),
        "device_count": 1,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "driver": None,
        "python": platform.python_version(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count() or cpu_count(),  # the machine's: a worker pinned to a share is the same kind
        "cpus_available": cpu_count(),
        # The vector ISA torch's CPU kernels use (AVX2, AVX512, ...): two "AMD EPYC" VMs with and
        # without AVX-512 differ 8x on bf16 (benchmarks/results/calibration.txt against trial_worker_cpu.txt).
        "cpu_capability": _cpu_capability(),
    }
    if dev.type == "cuda":
        info["device_name"] = torch.cuda.get_device_name(dev)
        info["device_count"] = torch.cuda.device_count()
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability(dev)))
        info["driver"] = driver_version()
    return info


def _cpu_capability() -> str | None:
    import torch

    get = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    return str(get()) if get else None


# The CPU features that make bf16 autocast pay on a CPU: x86's AVX512-BF16 (Cooper Lake, Zen 4 and newer) and AMX
# (Sapphire Rapids and newer), Arm's BF16 extension (Neoverse V1/N2, Graviton3 and newer). Without them autocast
# converts every bf16 tensor to fp32 and back: the cnn ran 3-8x slower in bf16 than in fp32 on an AVX2-only EPYC.
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def cpu_flags(lines: Iterable[str]) -> frozenset[str] | None:
    """The first CPU's feature flags in ``/proc/cpuinfo`` lines (x86 ``flags``, Arm ``Features``); None where
    they list none. Reads no further than that line (the file holds one block per CPU)."""
    for line in lines:
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return None


def native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU runs bf16 natively (AVX512-BF16, AMX or Arm BF16), so that bf16 autocast can pay on it.

    Linux: the flags of ``/proc/cpuinfo`` (or the ``cpuinfo`` text given). Elsewhere, or where it lists no
    flags: torch's own CPU probes (``torch.cpu._is_avx512_bf16_supported``/``_is_amx_tile_supported``, x86 only;
    torch's ``cpu_capability``, AVX2/AVX512, says nothing of bf16: Skylake and Cascade Lake have AVX-512 without
    it). Conservative: where neither says yes, False, and a search leaves bf16 out on a CPU (it still measures
    when asked for: ``autotune measure --set precision=bf16``).
    """
    flags = None
    if cpuinfo is not None:
        flags = cpu_flags(cpuinfo.splitlines())
    else:
        try:
            with open("/proc/cpuinfo") as fh:
                flags = cpu_flags(fh)
        except OSError:
            pass
    if flags is not None:
        return bool(flags & BF16_FLAGS)
    import torch

    cpu = getattr(torch, "cpu", None)
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        check = getattr(cpu, probe, None)
        try:
            if check is not None and check():
                return True
        except Exception:  # a probe torch offers but cannot answer here is no evidence of bf16
            continue
    return False


# ---------------------------------------------------------------- who else is on a GPU


def gpu_others(device: Any) -> int | None:
    """Processes other than this trial's on a CUDA device, by NVML (None when it cannot be told)."""
    return load.others_on_gpu(gpu_pids(device), {p.pid for p in load.own_tree()})


def gpu_pids(device: Any) -> list[int] | None:
    """The processes that hold a context on this CUDA device, as NVML lists them: through torch (pynvml), else
    ``nvidia-smi`` by the device's UUID; None when neither can tell."""
    try:
        import torch

        text = torch.cuda.list_gpu_processes(device)
    except Exception:  # noqa: BLE001 - no driver, no pynvml
        text = ""
    pids = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "process" and parts[1].isdigit():
            pids.append(int(parts[1]))
    if pids or "no processes" in text:
        return pids
    return _smi_pids(device)


def _smi_pids(device: Any) -> list[int] | None:
    import shutil
    import subprocess

    try:
        import torch

        uuid = str(getattr(torch.cuda.get_device_properties(device), "uuid", "") or "")
    except Exception:  # noqa: BLE001
        return None
    smi = shutil.which("nvidia-smi")
    if not uuid or smi is None:
        return None
    try:
        done = subprocess.run([smi, "--query-compute-apps=pid,gpu_uuid", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    wanted = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
    pids = []
    for line in done.stdout.splitlines():
        pid, _, gpu = (part.strip() for part in line.partition(","))
        if gpu == wanted and pid.isdigit():
            pids.append(int(pid))
    return pids
