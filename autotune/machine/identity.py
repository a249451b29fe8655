"""What makes two machines' measurements comparable: the identity part of a fingerprint, and what differs.

A study records the fingerprint of the machine that made it (:func:`autotune.machine.hardware.fingerprint`, probed
where trials run); a worker that joins it, ``verify`` and ``load_config`` compare theirs with it here. Torch-free:
the read commands compare stored fingerprints without loading torch.
"""

from __future__ import annotations

from typing import Any

# What makes two measurements incomparable. Not the number of GPUs: a trial measures on one, and a worker of
# ``run --devices`` sees only its own (CUDA_VISIBLE_DEVICES) where the process that made the study saw them all.
IDENTITY_KEYS = ("device_type", "device_name", "torch", "cuda", "cpu_model", "cpu_count", "cpu_capability")


def identity(fp: dict[str, Any]) -> dict[str, Any]:
    """The part of a fingerprint whose change makes measurements incomparable."""
    return {k: fp.get(k) for k in IDENTITY_KEYS}


def differences(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Human lines for each identity field that differs."""
    a, b = identity(stored), identity(current)
    # A key a study made by an older autotune did not record is not a difference.
    return [f"{k}: {a[k]} (stored) vs {b[k]} (here)" for k in IDENTITY_KEYS if a[k] != b[k] and k in stored]


def short(fp: dict[str, Any]) -> str:
    name = fp.get("device_name") or "?"
    count = fp.get("device_count") or 1
    dev = f"{count}x {name}" if fp.get("device_type") == "cuda" and count > 1 else name
    return f"{dev}, torch {fp.get('torch')}, {fp.get('cpu_count')} cpus"
