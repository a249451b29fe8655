"""The hardware's limit: each known GPU's dense peak FLOP/s by precision class, found by the device's name.

MFU (model FLOPs utilisation) divides the FLOP/s a step achieved by the device's peak for the precision the step ran
in. Both sides need the one table: the trial process (:mod:`autotune.trial.measure_one`, through
:func:`autotune.machine.hardware.peak_flops`) and the read side (:mod:`autotune.evidence.efficiency`: ``status``,
``export``, the dashboard), which must not import torch nor :mod:`autotune.machine.hardware`; so the table lives
here, in a module that imports neither.

The figures are the vendors' datasheet figures without sparsity (the "2:4 sparse" figures are twice these and no
dense training step reaches them): fp32 on the CUDA cores, tf32/bf16/fp16 on the tensor cores with FP32
accumulation. A GPU without TF32 tensor cores (Volta, Turing) runs a ``precision=tf32`` step in fp32, so its tf32
peak is its fp32 one; one without bf16 (V100, T4) has no bf16 peak. A device not in the table, a MIG slice (its
share of the GPU is not its name's) and every CPU have none: :func:`missing` says why, never a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

T = 1e12

#: The precision knob's values by the peak they divide by: each its own class (bf16 and fp16 share a peak on every
#: GPU that has both, and only fp16 has one on Volta and Turing).
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
#: Classes run on the tensor cores, whose datasheets give a sparse figure too: the peak named is the dense one.
TENSOR = frozenset({"tf32", "bf16", "fp16"})


@dataclass(frozen=True)
class Device:
    """One row of the table: a GPU (``name``, as a user says it), the pattern its ``torch.cuda.get_device_name()``
    matches, and its dense peak FLOP/s by precision class (a class it lacks is absent)."""

    name: str
    pattern: str
    peaks: Mapping[str, float]
    source: str = ""  # where the figures come from, where it is not the GPU's own datasheet


def _gpu(name: str, pattern: str, fp32: float, tf32: float | None, bf16: float | None, fp16: float | None,
         source: str = "") -> Device:
    peaks = {"fp32": fp32, "tf32": tf32 if tf32 is not None else fp32}
    peaks.update({k: v for k, v in (("bf16", bf16), ("fp16", fp16)) if v is not None})
    return Device(name, pattern, {k: float(round(v * T)) for k, v in peaks.items()}, source)


#: Dense peaks (TFLOP/s): fp32, tf32 (None: no TF32 tensor cores, a tf32 step runs in fp32), bf16, fp16 (None: none).
#: Matched in order, case-insensitively, as whole words of the device's name (``A10`` is not ``A100``, ``H200`` is
#: not ``GH200``): the specific before the general.
PEAK_FLOPS: tuple[Device, ...] = (
    # Hopper
    _gpu("GH200", r"\bGH200\b", 66.9, 494.7, 989.4, 989.4),
    _gpu("H200 NVL", r"\bH200\b.*\bNVL\b", 60.0, 417.5, 835.5, 835.5),
    _gpu("H200", r"\bH200\b", 66.9, 494.7, 989.4, 989.4),  # the SXM's: as the H100 SXM
    _gpu("H100 PCIe", r"\bH100\b.*\bPCIe\b", 51.2, 378.0, 756.0, 756.0),
    _gpu("H100 NVL", r"\bH100\b.*\bNVL\b", 60.0, 417.5, 835.5, 835.5),
    _gpu("H100 SXM", r"\bH100\b", 66.9, 494.7, 989.4, 989.4),  # "NVIDIA H100 80GB HBM3"
    _gpu("H800 PCIe", r"\bH800\b.*\bPCIe\b", 51.2, 378.0, 756.0, 756.0),
    _gpu("H800", r"\bH800\b", 66.9, 494.7, 989.4, 989.4),
    # Ampere
    _gpu("A100", r"\bA100\b", 19.5, 156.0, 312.0, 312.0),  # SXM4 and PCIe alike
    _gpu("A800", r"\bA800\b", 19.5, 156.0, 312.0, 312.0),
    _gpu("A30", r"\bA30\b", 10.3, 82.0, 165.0, 165.0),
    _gpu("A40", r"\bA40\b", 37.4, 74.8, 149.7, 149.7),
    _gpu("A10G", r"\bA10G\b", 31.2, 62.5, 125.0, 125.0,
         source="the A10's datasheet: NVIDIA publishes none for the A10G"),
    _gpu("A10", r"\bA10\b", 31.2, 62.5, 125.0, 125.0),
    _gpu("RTX A6000", r"\bRTX A6000\b", 38.7, 77.4, 154.8, 154.8),
    _gpu("RTX 3090", r"\bRTX 3090\b(?! Ti)", 35.6, 35.6, 71.0, 71.0),
    # Ada
    _gpu("L40S", r"\bL40S\b", 91.6, 183.0, 362.05, 362.05),
    _gpu("L40", r"\bL40\b", 90.5, 90.5, 181.0, 181.0),
    _gpu("L4", r"\bL4\b", 30.3, 60.0, 121.0, 121.0),
    _gpu("RTX 4090", r"\bRTX 4090\b(?! D\b)", 82.6, 82.6, 165.2, 165.2),
    # Volta and Turing: no TF32, no bf16
    _gpu("V100S", r"\bV100S\b", 16.4, None, None, 130.0),
    _gpu("V100 PCIe", r"\bV100\b.*\bPCIe\b", 14.0, None, None, 112.0),
    _gpu("V100", r"\bV100\b", 15.7, None, None, 125.0),  # the SXM2's: "Tesla V100-SXM2-16GB"
    _gpu("T4", r"\bT4\b", 8.1, None, None, 65.0),
)
#: Names that carry a known GPU's name without its peak: a MIG slice is a share of the GPU, a laptop part another chip.
NOT_THE_WHOLE = re.compile(r"\bMIG\b|\bLaptop\b", re.IGNORECASE)
_COMPILED = tuple((d, re.compile(d.pattern, re.IGNORECASE)) for d in PEAK_FLOPS)


@dataclass(frozen=True)
class Peak:
    """The peak a figure is divided by: the device (as the table names it), the precision class and its FLOP/s."""

    device: str
    precision: str
    flops: float
    source: str = ""

    @property
    def name(self) -> str:
        """``dense bf16 peak`` (tensor-core classes, whose sparse figure is twice this), ``fp32 peak``."""
        return f"{'dense ' if self.precision in TENSOR else ''}{self.precision} peak"

    def text(self) -> str:
        """``this H200's dense bf16 peak, 989 TFLOP/s``."""
        source = f" ({self.source})" if self.source else ""
        return f"this {self.device}'s {self.name}, {tflops(self.flops)}{source}"

    def to_dict(self) -> dict[str, object]:
        return {"device": self.device, "precision_class": self.precision,
                "flops": self.flops, "name": self.name, "text": self.text()}


def device(device_name: str | None) -> Device | None:
    """The table's row for a device name (``torch.cuda.get_device_name()``), None for one it does not know."""
    if not device_name or NOT_THE_WHOLE.search(device_name):
        return None
    return next((d for d, pattern in _COMPILED if pattern.search(device_name)), None)


def precision_class(precision: str | None) -> str:
    """The peak a step of this precision divides by: fp32 for anything that is not tf32, bf16 or fp16."""
    return precision if precision in PRECISIONS else "fp32"


def peak(device_name: str | None, precision: str | None) -> Peak | None:
    """The device's dense peak for this precision, or None (an unknown device, or a class it lacks: :func:`missing`)."""
    found = device(device_name)
    if found is None:
        return None
    cls = precision_class(precision)
    flops = found.peaks.get(cls)
    return Peak(found.name, cls, flops, found.source) if flops else None


def peak_flops(device_name: str | None, precision: str) -> float | None:
    """The device's dense peak FLOP/s for this precision, or None for a device not in the table (CPUs included)."""
    found = peak(device_name, precision)
    return found.flops if found else None


def missing(device_name: str | None, precision: str | None, cpu: bool = False) -> str:
    """Why there is no peak: ``peak unknown for <device>`` (a CPU, a device not in the table, a MIG slice), or the
    precision the device has no peak for (``the V100 has no bf16 peak``)."""
    shown = device_name or "this device"
    if cpu:
        return f"peak unknown for {shown} (a CPU: autotune knows GPU peaks only)"
    if device_name and NOT_THE_WHOLE.search(device_name):
        return f"peak unknown for {shown} (a share of a GPU, or a laptop part: not the datasheet's chip)"
    found = device(device_name)
    if found is None:
        return f"peak unknown for {shown}"
    return f"the {found.name} has no {precision_class(precision)} peak"


def sixteen_bit(device_name: str | None) -> str | None:
    """The 16-bit precision the device has a tensor-core peak for: bf16 where it has one, else fp16; None where
    neither (or the device is unknown)."""
    found = device(device_name)
    if found is None:
        return None
    return next((p for p in ("bf16", "fp16") if p in found.peaks), None)


def best(device_name: str | None) -> Peak | None:
    """The highest dense peak the device offers, whatever the precision (bf16 before fp16 where they tie): what a
    figure against a lower precision's peak is set beside (an fp32 step at 55% of the H200's fp32 peak is at 4% of
    its dense bf16 one). None for a device not in the table."""
    found = device(device_name)
    if found is None:
        return None
    order = ("bf16", "fp16", "tf32", "fp32")
    cls = max((p for p in order if p in found.peaks), key=lambda p: (found.peaks[p], -order.index(p)))
    return Peak(found.name, cls, found.peaks[cls], found.source)


def times(higher: Peak, lower: Peak) -> str:
    """How many times ``lower``'s FLOP/s ``higher`` is, as said: ``15x``, ``2.0x``."""
    ratio = higher.flops / lower.flops
    return f"{ratio:.0f}x" if ratio >= 9.95 else f"{ratio:.1f}x"


def tflops(flops: float) -> str:
    """``989 TFLOP/s``, ``66.9 TFLOP/s``, ``8.1 TFLOP/s``: three significant figures at most."""
    return f"{float(f'{flops / T:.3g}'):g} TFLOP/s"
