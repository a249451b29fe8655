"""The knob registry: every performance knob autotune tunes, declared once as data.

A knob says what values it takes, what PyTorch does by default, when it applies
(device, task, input rank, torch version, another knob's value, what the optimizer
supports), where a value applies but cannot pay (a search leaves it out: bf16 on a CPU
without native bf16), at which stage it is applied, what applying it does, what a user
writes to apply it by hand, how each framework export (Trainer, Lightning, Accelerate)
expresses it, and one line of help. Space validation, the ``autotune knobs`` table, the plan that
applies a configuration, dashboards and exports all read this registry; no other module
names a knob (``tests/test_knobs.py`` checks the package's sources for that).

The package's parts:

- :mod:`~autotune.knobs.core`: the vocabulary (:class:`Knob`, :class:`Context`, the conditions);
- :mod:`~autotune.knobs.effects`: what applying a knob does, as data that :mod:`autotune.trial.plan` carries out;
- :mod:`~autotune.knobs.exports`: the :class:`~autotune.knobs.exports.Job` a knob's framework mapping writes into;
- :mod:`~autotune.knobs.registry`: the declarations themselves (a launch's, the ranks and DDP's arguments, in
  :mod:`~autotune.knobs.launch`);
- :mod:`~autotune.knobs.reading`: the functions that read them (a knob by name, resolving a configuration, ...);
- :mod:`~autotune.knobs.space`: the search space a study searches, read from a TOML file and fitted to a workload.

Importing it imports neither torch nor Optuna: read commands stay light.
"""

from __future__ import annotations

from autotune.errors import KnobError
from autotune.knobs import effects, exports
from autotune.knobs.core import (
    ALONE,
    BACKEND,
    BATCH,
    CPUS,
    ENV,
    LAUNCH,
    LOADER,
    MODEL,
    OPTIMIZER,
    PER_ARM,
    SHARED,
    STAGE_HELP,
    STEP,
    CompileSupported,
    Condition,
    Context,
    ForTask,
    Glibc,
    InputRank,
    Knob,
    KnobAbove,
    NativeBF16,
    OnDevice,
    OptimizerSupports,
    accumulation_steps,
    keeps_global_batch,
)
from autotune.knobs.reading import (
    BATCH_KNOB,
    Resolved,
    apart,
    bound_per_rank,
    compile_knobs,
    compiles,
    defaults,
    differs_from_default,
    get,
    inherited_environment,
    launch_of,
    owned_environment,
    parse_assignments,
    per_arm,
    ranks_of,
    recipe,
    resolve,
    short,
    starts_processes,
    validate_config,
)
from autotune.knobs.registry import KNOBS, NAMES, REGISTRY

__all__ = [
    "ALONE", "BATCH_KNOB", "PER_ARM", "SHARED", "apart", "compile_knobs", "compiles", "keeps_global_batch", "per_arm",
    "starts_processes",
    "BACKEND", "BATCH", "CPUS", "ENV", "KNOBS", "LAUNCH", "LOADER", "MODEL", "NAMES", "OPTIMIZER", "REGISTRY",
    "STAGE_HELP",
    "STEP", "CompileSupported", "Condition", "Context", "ForTask", "Glibc", "InputRank", "Knob", "KnobAbove",
    "KnobError",
    "NativeBF16", "OnDevice", "OptimizerSupports", "Resolved", "accumulation_steps", "bound_per_rank", "defaults",
    "differs_from_default", "effects", "exports", "get", "inherited_environment", "launch_of", "owned_environment",
    "parse_assignments", "ranks_of", "recipe", "resolve", "short",
    "validate_config",
]
