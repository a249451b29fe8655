"""A simulated GPU and workload: speeds, memory, times and power of known truth, shaped by what the GPU runs measured.

The figures come from the committed GPU runs (``benchmarks/results/gpu_proof_*``, ``gpu_study_*``) and
``machine/peaks.py``: on an H200 a GPT-2-shaped LM (6 layers, 512 wide, 32k tokens, 256 tokens a sample, batch 32) ran
its fp32 defaults at 645 samples/s (55% of the fp32 peak), a spread of 1% between processes; bf16 with
``compile=default`` at batch 32 ran 1757-2956 samples/s in seven processes (a launch-bound step: ±25%); tf32 at batch
256 ran 2.89x; the ceiling's probes of batch 32-256 took 25 s and batch 256 in fp32 held 61.2 GiB; the defaults'
whole trial took 9.9 s; the first step took 0.6 s without compilation, 15 s with ``default``, 19 s with
``reduce-overhead`` and more than 2 minutes with ``max-autotune``.

A step is the larger of its GPU time and its CPU's launch time, plus what the loader and the copy add:

- GPU time: the batch's samples at the precision's speed (fused further by a compile mode, slowed by activation
  checkpointing, and for a convolutional net by channels-last in 16 bits and cuDNN's autotuning), a fixed cost a step,
  and the optimizer's kernels;
- launch time: the eager step's kernel launches (a compile mode fuses them; CUDA graphs replay them at almost no CPU
  cost, which is what pays at small batches) and the optimizer's (the for-loop optimizer launches per parameter);
- the loader: each sample's CPU work in the main process without workers, or hidden behind the step by enough of
  them; the host-to-device copy halved by pinned memory.

Each configuration's own noise between processes grows with how launch-bound it is (the defaults ±1%, a compiled
launch-bound step about ±25%). Memory grows with the batch (less in 16 bits and under checkpointing, more with CUDA
graphs' pools); above the device's memory the trial ends in an OOM. Power follows how busy the GPU is. Nothing here
reads a clock or draws a random number: :mod:`.runner` does, so a figure here is the truth a test compares against.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from autotune.machine import peaks

GiB = 1024**3
PRECISION_MEMORY = {"fp32": 1.0, "tf32": 1.0, "bf16": 0.6, "fp16": 0.6}
#: A compile mode's fusion of the GPU's work, and what is left of the eager step's launch work.
FUSION = {"off": 1.0, "default": 1.25, "reduce-overhead": 1.25, "max-autotune-no-cudagraphs": 1.35,
          "max-autotune": 1.35}
LAUNCH = {"off": 1.0, "default": 0.45, "reduce-overhead": 0.06, "max-autotune-no-cudagraphs": 0.45,
          "max-autotune": 0.06}
CUDA_GRAPHS = frozenset({"reduce-overhead", "max-autotune"})
#: The optimizer's kernels: (GPU ms, launch ms) a step, as a share of a 35M-parameter model's.
OPTIMIZER = {"default": (3.0, 4.0), "foreach": (1.6, 0.5), "fused": (0.8, 0.1)}


@dataclass(frozen=True)
class Device:
    """A GPU as a trial finds it: its name (matched by :mod:`autotune.machine.peaks`), memory, power and software."""

    name: str = "NVIDIA H200"
    memory_bytes: int = 140 * GiB
    idle_w: float = 120.0
    busy_w: float = 650.0
    capability: str = "9.0"
    driver: str = "580.159.04"
    cuda: str = "13.0"
    torch: str = "2.11.0+cu130"
    cpu_model: str = "Intel(R) Xeon(R) Processor"
    # the host's cores are this machine's: the study's coordinator runs here, and the knobs' defaults (threads) with it
    cpu_count: int = field(default_factory=lambda: os.cpu_count() or 1)

    def peak(self, precision: str) -> float | None:
        return peaks.peak_flops(self.name, precision)

    def fingerprint(self) -> dict[str, Any]:
        """As :func:`autotune.machine.hardware.fingerprint` gives it on such a machine, and marked simulated."""
        return {"device_type": "cuda", "device_name": self.name, "device_count": 1, "torch": self.torch,
                "cuda": self.cuda, "driver": self.driver, "python": "3.12.3", "cpu_model": self.cpu_model,
                "cpu_count": self.cpu_count, "cpus_available": self.cpu_count, "cpu_capability": "AVX512",
                "capability": self.capability, "simulated": True}


H200 = Device()
H100 = Device(name="NVIDIA H100 80GB HBM3", memory_bytes=80 * GiB, busy_w=700.0)


@dataclass(frozen=True)
class Workload:
    """A workload's cost on the device: per sample and per step, in milliseconds and bytes."""

    name: str
    model: str
    input_rank: int
    batch: int = 32
    parameters: int = 35_000_000
    flops_per_sample: float = 57e9  # the model's FLOPs a training sample (6 x parameters x tokens)
    gpu_ms_per_sample: float = 1.43  # fp32, eager, at a large batch
    gpu_ms_per_step: float = 3.9
    launch_ms: float = 12.0  # the eager step's kernel launches on the CPU
    data_ms_per_sample: float = 0.02  # the loader's CPU work
    copy_ms_per_sample: float = 0.004  # the host-to-device copy, pageable
    speed: Mapping[str, float] = field(default_factory=lambda: {"fp32": 1.0, "tf32": 2.7, "bf16": 4.5, "fp16": 4.3})
    conv: bool = False  # channels-last in 16 bits and cuDNN's autotuning pay
    optimizer_scale: float = 1.0
    activation_bytes_per_sample: float = 0.238 * GiB  # fp32, eager
    fixed_bytes: float = 0.7 * GiB  # weights, gradients, the optimizer's state, the context
    compile_s: Mapping[str, float] = field(default_factory=lambda: {
        "off": 0.6, "default": 15.0, "reduce-overhead": 19.0, "max-autotune-no-cudagraphs": 110.0,
        "max-autotune": 140.0})
    build_s: float = 1.5  # building the model and the loader in a trial process
    start_s: float = 2.5  # a trial process's start and its CUDA context
    exit_s: float = 0.3
    noise: str = "unequal"  # unequal (each configuration its own), equal, drifting, heavy (t, 3 degrees)
    flat: bool = False  # nothing pays: every configuration runs at the defaults' speed


@dataclass(frozen=True)
class Step:
    """One configuration's step on the device: its time and parts (ms), its samples/s, its own noise."""

    ms: float
    gpu_ms: float
    cpu_ms: float
    batch: int
    sigma: float

    @property
    def samples_per_s(self) -> float:
        return 1000.0 * self.batch / self.ms

    @property
    def busy(self) -> float:
        """The GPU's share of the step (what its power follows)."""
        return min(1.0, self.gpu_ms / self.ms)


def _get(config: Mapping[str, Any], knob: str, default: Any) -> Any:
    value = config.get(knob)
    return default if value is None else value


def step(workload: Workload, config: Mapping[str, Any]) -> Step:
    """The true step of ``config`` (resolved: every knob at a value) on the device."""
    w = workload
    batch = int(_get(config, "batch_size", w.batch))
    if w.flat:  # nothing pays: the defaults' step, scaled to the batch
        ms = (w.batch * w.gpu_ms_per_sample + w.gpu_ms_per_step) * batch / w.batch
        return Step(ms, ms, 0.2 * ms, batch, 0.03)
    precision = str(_get(config, "precision", "fp32"))
    mode = str(_get(config, "compile", "off"))
    speed = w.speed.get(precision, 1.0) * FUSION.get(mode, 1.0)
    if w.conv and _get(config, "memory_format", "contiguous") == "channels_last":
        speed *= 1.3 if precision in ("bf16", "fp16") else 0.95
    if w.conv and _get(config, "cudnn_benchmark", False):
        speed *= 1.12
    if _get(config, "activation_checkpointing", False):
        speed /= 1.33
    opt_gpu, opt_launch = OPTIMIZER.get(str(_get(config, "optimizer_impl", "default")), OPTIMIZER["default"])
    gpu = batch * w.gpu_ms_per_sample / speed + w.gpu_ms_per_step + opt_gpu * w.optimizer_scale
    cpu = w.launch_ms * LAUNCH.get(mode, 1.0) + opt_launch * w.optimizer_scale
    workers = int(_get(config, "num_workers", 0))
    data = batch * w.data_ms_per_sample
    pinned = bool(_get(config, "pin_memory", False))
    copy = batch * w.copy_ms_per_sample * (0.4 if pinned else 1.0)
    if workers == 0:
        core = max(gpu, cpu + data)  # the main process loads each batch between launches
        wait = 0.0
    else:
        core = max(gpu, cpu)
        prefetch = 1.0 + 0.02 * (int(_get(config, "prefetch_factor", 2)) - 2)
        wait = max(0.0, data / workers / prefetch - core)
        if not _get(config, "persistent_workers", False):
            wait += 0.02 * core  # workers started again every epoch
    ms = core + wait + copy
    launch_share = min(1.0, cpu / core)
    sigma = 0.01 + (0.60 if mode != "off" else 0.25) * launch_share ** 3  # GPU-bound ±1%; launch-bound, compiled ±25%
    return Step(ms, gpu, cpu, batch, sigma)


def peak_memory(workload: Workload, config: Mapping[str, Any]) -> int:
    """The step's peak memory on the device (bytes)."""
    w = workload
    batch = int(_get(config, "batch_size", w.batch))
    mode = str(_get(config, "compile", "off"))
    act = batch * w.activation_bytes_per_sample * PRECISION_MEMORY.get(str(_get(config, "precision", "fp32")), 1.0)
    if _get(config, "activation_checkpointing", False):
        act *= 0.35
    if mode != "off":
        act *= 0.85
    if mode in CUDA_GRAPHS:
        act *= 1.3  # the graphs' private pool holds its own copies
    fixed = w.fixed_bytes * (1.1 if _get(config, "optimizer_impl", "default") == "foreach" else 1.0)
    total = fixed + act + 0.5 * GiB
    if _get(config, "cuda_allocator", "default") == "expandable_segments":
        total *= 0.97
    return int(total)


def first_step_s(workload: Workload, config: Mapping[str, Any]) -> float:
    """The first step: the compilation, for a compiled configuration."""
    return float(workload.compile_s.get(str(_get(config, "compile", "off")), workload.compile_s["off"]))


def truth(workload: Workload, config: Mapping[str, Any], defaults: Mapping[str, Any]) -> float:
    """``config``'s true speed-up over ``defaults``."""
    return step(workload, config).samples_per_s / step(workload, defaults).samples_per_s


def power_w(device: Device, s: Step) -> float:
    return device.idle_w + (device.busy_w - device.idle_w) * s.busy


def mfu(device: Device, workload: Workload, config: Mapping[str, Any], samples_per_s: float
        ) -> tuple[float, float | None]:
    """(achieved FLOP/s, MFU against the precision's peak: None where the device has none)."""
    achieved = workload.flops_per_sample * samples_per_s
    peak = device.peak(str(_get(config, "precision", "fp32")))
    return achieved, (achieved / peak if peak else None)


# ---------------------------------------------------------------- the shapes


@dataclass(frozen=True)
class Shape:
    """A device and a workload on it: one simulated machine of the benchmark."""

    name: str
    device: Device
    workload: Workload
    why: str

    def with_noise(self, noise: str) -> Shape:
        return replace(self, name=f"{self.name}/{noise}", workload=replace(self.workload, noise=noise))


LM = Workload("lm", "GPT2LMHeadModel", input_rank=2)
SHAPES: dict[str, Shape] = {
    "lm-h200": Shape("lm-h200", H200, LM, "the GPT-2-shaped LM of the H200 study, as measured"),
    "lm-h100": Shape("lm-h100", H100, replace(LM, activation_bytes_per_sample=0.35 * GiB),
                     "the LM with longer activations on an 80 GiB H100: fp32 runs out of memory above batch 208"),
    "cnn-h100": Shape("cnn-h100", H100, Workload(
        "cnn", "ResNetLike", input_rank=4, batch=32, parameters=11_000_000, flops_per_sample=3.6e9,
        gpu_ms_per_sample=0.09, gpu_ms_per_step=1.5, launch_ms=6.0, data_ms_per_sample=0.05,
        copy_ms_per_sample=0.01, conv=True, optimizer_scale=0.3, activation_bytes_per_sample=0.06 * GiB,
        fixed_bytes=0.4 * GiB), "a CNN on an H100 (the proof's compile times): launch-bound at small batches"),
    "loader-h200": Shape("loader-h200", H200, Workload(
        "loader", "MLP", input_rank=2, batch=32, parameters=5_000_000, flops_per_sample=0.3e9,
        gpu_ms_per_sample=0.02, gpu_ms_per_step=1.0, launch_ms=2.0, data_ms_per_sample=1.5,
        copy_ms_per_sample=0.05, optimizer_scale=0.2, activation_bytes_per_sample=0.01 * GiB,
        fixed_bytes=0.2 * GiB), "a step starved by its loader without workers"),
    "flat-h100": Shape("flat-h100", H100, replace(LM, flat=True, name="flat"),
                       "a step where nothing pays: every configuration runs at the defaults' speed"),
}

