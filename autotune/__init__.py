"""autotune: find the fastest way to run a PyTorch model on the hardware in front of it.

Public API: :func:`tune` (tune a model from Python: ``autotune run`` as a function),
:func:`measure` (measure one configuration), :func:`verify` (does an exported claim still hold on this
machine?), :class:`Workload` (what a model factory
may return) and :func:`load_config` (apply a tuned configuration in your own training
script).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["TuneResult", "Workload", "load_config", "measure", "tune", "verify", "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from autotune.api import TuneResult, measure, tune, verify
    from autotune.config import Config
    from autotune.workload import Workload


def load_config(path: str, **kwargs: Any) -> "Config":
    """Read an exported configuration (``autotune export -o best.json``); see :mod:`autotune.config`."""
    from autotune.config import load_config as _load

    return _load(path, **kwargs)


def __getattr__(name: str) -> Any:
    """``autotune.tune``, ``autotune.measure``, ``autotune.verify``, ``autotune.TuneResult`` and ``autotune.Workload``, imported on first
    use (importing autotune imports neither torch nor Optuna: the read commands never need torch)."""
    if name == "Workload":
        from autotune.workload import Workload

        return Workload
    if name in ("tune", "measure", "verify", "TuneResult"):
        from autotune import api

        return getattr(api, name)
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
