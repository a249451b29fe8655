"""Where a workload spec leads: ``module:attr`` imported, ``hf:<model_type>`` built by :mod:`autotune.workloads.hf`,
``pickled:<digest>`` unpickled by :mod:`autotune.workloads.shipping`; and :func:`build`, a spec into a complete
Workload.

Why a module of its own: resolving a spec dispatches to every kind of factory there is,
a Hugging Face model among them, while :mod:`autotune.workloads.hf` builds its models as a
:class:`~autotune.workloads.contract.Workload`. With the dispatch here, above both, the workload
contract imports neither, and each kind of spec says what is wrong with it in one line
(:class:`~autotune.errors.SpecError` for a spec that names nothing, a
:class:`~autotune.errors.WorkloadError` for a factory that fails or returns the wrong thing).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Any, Mapping

from torch import nn
from torch.utils.data import Dataset

from autotune.workloads import hf
from autotune.workloads import shipping
from autotune.workloads import contract as W
from autotune.errors import SpecError, WorkloadError
from autotune.request import WorkloadSpec, option
from autotune.workloads.contract import Workload, user_frame


def build(spec: WorkloadSpec) -> Workload:
    """Import (or unpickle) and call the factories of ``spec`` and return a complete Workload."""
    factory = _factory(spec, spec.model, "model")
    if spec.model.startswith(hf.PREFIX):  # autotune.workloads.hf raises its own one-line SpecErrors
        made = factory(**dict(spec.model_args))
    else:
        made = _call_factory(factory, spec.model, "model", dict(spec.model_args))
    workload = W.from_factory(spec, made)
    dataset = None
    if spec.data:
        dataset = _call_factory(_factory(spec, spec.data, "data"), spec.data, "data", {})
    return W.complete(workload, spec, dataset)


def _factory(spec: WorkloadSpec, value: str, field: str) -> Any:
    """What a model or data spec names: imported (``module:attr``, ``hf:``) or unpickled (``pickled:``)."""
    if shipping.is_pickled(value):
        return shipping.load(value, dict(spec.pickled), field)
    return import_spec(value, field)


def import_spec(spec: str, field: str = "model") -> Any:
    """Import ``module:attr`` and return the attribute; SpecError for every failure. ``field``: the field the spec
    is given as, ``model`` or ``data`` (``--model`` and ``--data`` are taken too), which the message names.

    ``--model hf:<model_type>`` names a Hugging Face model instead (see :mod:`autotune.workloads.hf`).
    """
    field = field.removeprefix("--")
    if field == "model" and isinstance(spec, str) and spec.startswith(hf.PREFIX):
        return hf.factory(spec)  # transformers, an optional dependency, is imported only there
    given = option(field, spec, quoted=True)
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise SpecError(f"{given}: expected module:attribute, e.g. autotune.examples:cnn")
    module_name, attr = (p.strip() for p in spec.split(":"))
    if not module_name or not attr:
        raise SpecError(f"{given}: expected module:attribute, e.g. autotune.examples:cnn")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise SpecError(f"{given}: no module named {missing!r}") from None
        raise SpecError(
            f"{given}: importing {module_name!r} failed: "
            f"{type(exc).__name__}: {exc}{user_frame(exc)}"
        ) from None
    except Exception as exc:  # the user's module raised while importing
        raise SpecError(
            f"{given}: importing {module_name!r} failed: "
            f"{type(exc).__name__}: {exc}{user_frame(exc)}"
        ) from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise SpecError(f"{given}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def _call_factory(factory: Any, spec: str, field: str, kwargs: Mapping[str, Any]) -> Any:
    given = option(field, spec, quoted=True)
    if isinstance(factory, (nn.Module, Workload, Dataset)):
        if kwargs:
            raise WorkloadError(f"{given} is an object, not a factory: it takes no {option('model_args')}")
        return factory
    if not callable(factory):
        raise WorkloadError(f"{given} is a {type(factory).__name__}, not a factory")
    try:
        return factory(**kwargs)
    except TypeError as exc:
        try:
            inspect.signature(factory).bind(**kwargs)
        except TypeError:
            raise WorkloadError(f"{given}: bad arguments: {exc}") from None
        raise WorkloadError(f"{given} raised TypeError: {exc}{user_frame(exc)}") from None
    except Exception as exc:
        raise WorkloadError(f"{given} raised {type(exc).__name__}: {exc}{user_frame(exc)}") from None
