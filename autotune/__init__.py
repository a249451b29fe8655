"""autotune: find the fastest way to run a PyTorch model on the hardware in front of it.

Public API: :func:`tune` (tune a model from Python: ``autotune run`` as a function),
:func:`measure` (measure one configuration), :func:`verify` (does an exported claim still hold on this
machine?), :class:`Workload` (what a model factory may return) and :func:`load_config` (apply a tuned
configuration in your own training script). Importing it imports neither torch nor Optuna.

The package's rooms, from the faces down (each may import only those below it: pyproject.toml's layers contract):

- the faces: :mod:`autotune.cli` (the command line), :mod:`autotune.api` (these functions), and the public modules
  named by their old names (:mod:`autotune.examples`, :mod:`autotune.frameworks`, :mod:`autotune.callbacks`);
- :mod:`autotune.tuning`: a tuning job (prepare, the loop and its phases, the fleet);
- :mod:`autotune.reports`: what a study shows; :mod:`autotune.export`: the answer leaving the study;
- :mod:`autotune.trial`: one trial, the parent's side and the trial process's (torch);
- :mod:`autotune.workloads`: what is measured; :mod:`autotune.evidence`: every figure, from the record;
- :mod:`autotune.store`: the record, its one owner; :mod:`autotune.knobs`: the knob registry and the space;
- :mod:`autotune.machine`: the device, its fingerprint, other processes, the heap;
- :mod:`autotune.request` (the one typed request), :mod:`autotune.result` (a trial's result), :mod:`autotune.units`,
  :mod:`autotune.files`, :mod:`autotune.errors`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune._version import __version__

__all__ = ["TuneResult", "Workload", "load_config", "measure", "tune", "verify", "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from autotune.api import TuneResult, measure, tune, verify
    from autotune.export.config import Config
    from autotune.workloads.contract import Workload


def load_config(path: str, **kwargs: Any) -> "Config":
    """Read an exported configuration (``autotune export -o best.json``); see :mod:`autotune.export.config`."""
    from autotune.export import config

    return config.load_config(path, **kwargs)


def __getattr__(name: str) -> Any:
    """``autotune.tune``, ``autotune.measure``, ``autotune.verify``, ``autotune.TuneResult`` and ``autotune.Workload``,
    imported on first use (importing autotune imports neither torch nor Optuna: the read commands never need torch)."""
    if name == "Workload":
        from autotune.workloads.contract import Workload

        return Workload
    if name in ("tune", "measure", "verify", "TuneResult"):
        from autotune import api

        return getattr(api, name)
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
