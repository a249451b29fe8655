"""autotune: find the fastest way to run a PyTorch model on the hardware in front of it.

Public API: :func:`tune` (tune a model from Python: ``autotune run`` as a function),
:func:`measure` (measure one configuration), :class:`Workload` (what a model factory
may return) and :func:`load_config` (apply a tuned configuration in your own training
script).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.workload import Workload

__version__ = "0.1.0"
__all__ = ["TuneResult", "Workload", "load_config", "measure", "tune", "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from autotune.api import TuneResult, tune
    from autotune.config import Config
    from autotune.result import TrialResult


def load_config(path: str, **kwargs: Any) -> "Config":
    """Read an exported configuration (``autotune export -o best.json``); see :mod:`autotune.config`."""
    from autotune.config import load_config as _load

    return _load(path, **kwargs)


def measure(
    model: Any,
    config: Any = None,
    *,
    data: Any = None,
    device: str | None = None,
    quick: bool = False,
    repeat: int = 1,
    global_batch: int | None = None,
    model_args: Any = None,
    input_shape: Any = None,
    num_classes: int | None = None,
    task: str | None = None,
    trial_timeout: float | str = 600,
) -> "TrialResult | list[TrialResult]":
    """Measure one configuration of a model in an isolated process (``autotune measure`` as a function).

    ``config``: knob values, e.g. ``{"precision": "bf16", "batch_size": 64}``; the rest stay at
    PyTorch's defaults. Returns a :class:`autotune.result.TrialResult` (a list when ``repeat > 1``).
    See :func:`autotune.api.measure`.
    """
    from autotune.api import measure as _measure

    return _measure(model, config, data=data, device=device, quick=quick, repeat=repeat, global_batch=global_batch,
                    model_args=model_args, input_shape=input_shape, num_classes=num_classes, task=task,
                    trial_timeout=trial_timeout)


def __getattr__(name: str) -> Any:
    """``autotune.tune`` and ``autotune.TuneResult``, imported on first use (Optuna is not needed to import autotune)."""
    if name in ("tune", "TuneResult"):
        from autotune import api

        return getattr(api, name)
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
