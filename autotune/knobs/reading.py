"""The functions that read the registry: a knob by name, the defaults, a configuration resolved where it runs (what
applies there, what was dropped and why), which configurations may share a process, and what a configuration's
knobs imply for its trial (processes it starts, compilation, the environment the knobs decide).

Why a module of its own: :mod:`autotune.knobs.registry` is the knobs' declarations, data read top to bottom; these
functions give them meaning for the rest of the package. They name no knob: each reads what the declarations say.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from autotune.errors import KnobError, named
from autotune.knobs.core import ALONE, PER_ARM, Context, Knob
from autotune.knobs.effects import BatchSize, BindCores, Compile, CommHook, DDPArg, Env, NumThreads, Ranks
from autotune.knobs.registry import KNOBS, NAMES, REGISTRY


def get(name: str) -> Knob:
    try:
        return KNOBS[name]
    except KeyError:
        raise KnobError(f"unknown knob {name!r}; known knobs: {', '.join(NAMES)}") from None


def defaults(ctx: Context | None = None) -> dict[str, Any]:
    """The PyTorch defaults, as knob values."""
    return {k.name: k.default_for(ctx) for k in REGISTRY}


def parse_assignments(items: Iterable[str], ctx: Context | None = None) -> dict[str, Any]:
    """Parse ``name=value`` strings (``--set``) into validated knob values."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise KnobError(f"{named('config', f'--set {item!r}', repr(item))}: expected name=value")
        name, raw = item.split("=", 1)
        knob = get(name.strip())
        out[knob.name] = knob.validate(raw, ctx)
    return out


def validate_config(config: Mapping[str, Any], ctx: Context | None = None) -> dict[str, Any]:
    """Validate a knob->value mapping (from JSON or TOML); raises KnobError."""
    return {get(name).name: get(name).validate(value, ctx) for name, value in config.items()}


@dataclass(frozen=True)
class Resolved:
    """A configuration as it will really run: every knob's value, and what was dropped."""

    config: dict[str, Any]
    not_applicable: dict[str, str]

    def key(self) -> str:
        """A canonical string of the effective configuration (for de-duplication)."""
        return ";".join(f"{name}={KNOBS[name].format(self.config[name])}" for name in NAMES
                        if KNOBS[name].keyed_at_default or self.config[name] != KNOBS[name].default)


def resolve(config: Mapping[str, Any], ctx: Context) -> Resolved:
    """Fill in defaults and drop (to the default) every knob that does not apply here.

    Knobs are resolved in registry order against the values decided so far, so a
    knob that depends on another (``prefetch_factor`` on ``num_workers``) is
    declared after it and sees the value that will really be used.
    """
    effective: dict[str, Any] = {}
    dropped: dict[str, str] = {}
    requested = dict(config)
    for knob in REGISTRY:
        default = knob.default_for(ctx)
        value = requested.get(knob.name, default)
        context_config = {**requested, **effective}
        reason = knob.not_applicable(value, ctx, context_config)
        if reason is not None:
            if knob.name in requested and value != default:
                dropped[knob.name] = reason
            # The default of an inapplicable knob may itself not apply (e.g. none at all).
            value = default
        effective[knob.name] = value
    return Resolved(effective, dropped)


def differs_from_default(config: Mapping[str, Any], ctx: Context | None = None) -> dict[str, Any]:
    """The knobs of ``config`` whose value differs from PyTorch's default."""
    base = defaults(ctx)
    return {k: v for k, v in config.items() if k in base and base[k] != v}


def short(config: Mapping[str, Any], ctx: Context | None = None) -> str:
    """A short human string of the knobs that differ from the defaults."""
    diff = differs_from_default(config, ctx)
    if not diff:
        return "defaults"
    return " ".join(f"{k}={KNOBS[k].format(v)}" for k, v in diff.items())


def recipe(ctx: Context, base: Mapping[str, Any]) -> dict[str, Any]:
    """The tuning guides' "every trick on" configuration, as far as it applies here."""
    config = dict(base)
    for knob in REGISTRY:
        if knob.recipe is None:
            continue
        value = knob.recipe
        if knob.is_range:
            low, high = knob.bounds(ctx)
            value = max(low, min(high, int(value)))
        config[knob.name] = value
    return resolve(config, ctx).config


def apart(configs: Sequence[Mapping[str, Any]]) -> str | None:
    """Why these configurations cannot be measured alternately in one process (None when they can).

    Each knob's ``in_process`` decides (:mod:`autotune.trial.paired`): a PER_ARM knob may differ between the arms,
    a SHARED knob sets process-wide state and must be equal in all of them, and an ALONE knob at any value
    but its default keeps a configuration out of shared processes. A knob with ``shares_at`` lets arms share a
    process only at those values (the host heap: only where it carries no history from one arm to the next).
    """
    if len(configs) < 2:
        return None
    for knob in REGISTRY:
        values = [c.get(knob.name, knob.default_for()) for c in configs]
        if knob.shares_at is not None and any(v not in knob.shares_at for v in values):
            bad = next(v for v in values if v not in knob.shares_at)
            return f"{knob.name}={knob.format(bad)}: {knob.why_apart}"
        if knob.in_process == PER_ARM:
            continue
        if knob.in_process == ALONE and any(v != knob.default_for() for v in values):
            return (f"{knob.name}={knob.format(next(v for v in values if v != knob.default_for()))} needs a process "
                    "of its own")
        if any(v != values[0] for v in values[1:]):
            return (f"{knob.name} differs ({', '.join(sorted({knob.format(v) for v in values}))}): it is the "
                    "process's own")
    return None


def per_arm(changes: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split knob changes into those an arm of a shared process can make (PER_ARM) and the rest."""
    inside = {k: v for k, v in changes.items() if k in KNOBS and KNOBS[k].in_process == PER_ARM}
    return inside, {k: v for k, v in changes.items() if k not in inside}


#: The knob that sets the batch: the batch-size ceiling searches it, a workload may fix it, and --global-batch
#: is kept by accumulating it.
BATCH_KNOB: str = next(k.name for k in REGISTRY if any(isinstance(e, BatchSize) for e in k.effects))


def owned_environment() -> tuple[str, ...]:
    """The environment variables the knobs decide (``OMP_NUM_THREADS``, ``PYTORCH_CUDA_ALLOC_CONF``, ``MALLOC_*``...).
    A trial process never inherits them from the shell that started autotune: at a knob's default PyTorch's default
    holds, not what the shell exported (the baseline is the defaults); each knob sets its own at other values."""
    out: list[str] = []
    for knob in REGISTRY:
        for effect in knob.effects:
            if isinstance(effect, Env):
                out.extend(name for name in effect.owned if name not in out)
    return tuple(out)


def inherited_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of :func:`owned_environment` that ``environ`` sets: what trials run without (a study records
    and ``run`` names them)."""
    return {name: environ[name] for name in owned_environment() if name in environ}


def starts_processes(config: Mapping[str, Any]) -> bool:
    """A trial of this configuration starts processes of its own (loader or compile workers)."""
    return any(k.starts_processes and config.get(k.name, k.default_for()) != k.default_for() for k in REGISTRY)


def compiles(config: Mapping[str, Any]) -> bool:
    """A trial of this configuration compiles its model (its first step holds the compilation)."""
    for knob in REGISTRY:
        for effect in knob.effects:
            if isinstance(effect, Compile) and config.get(knob.name, effect.off) != effect.off:
                return True
    return False


def compile_knobs() -> tuple[str, ...]:
    """The knobs whose values compile the model."""
    return tuple(k.name for k in REGISTRY if any(isinstance(e, Compile) for e in k.effects))


def ranks_of(config: Mapping[str, Any]) -> int:
    """The processes of one training ``config`` runs as (its knob's default: one)."""
    for knob in REGISTRY:
        if any(isinstance(e, Ranks) for e in knob.effects):
            return max(1, int(config.get(knob.name, knob.default_for()) or 1))
    return 1


def bound_per_rank(knob: Knob, value: Any, config: Mapping[str, Any]) -> bool:
    """``knob`` binds cores at ``value`` and ``config`` trains as several ranks: each rank then binds its own process to
    cores of its own (:mod:`autotune.trial.ranks`, the export's per-rank ``taskset``), and the knob's environment
    (OpenMP's binding) is left out: read once in a process the ranks share, it would put them all on its first cores."""
    return ranks_of(config) > 1 and any(isinstance(e, BindCores) and value == e.on for e in knob.effects)


def launch_of(config: Mapping[str, Any], script: str = "train.py") -> dict[str, Any]:
    """How a training of ``config`` (resolved: every knob at a value) is started, as a user types it: the environment
    its knobs set before Python starts (``LD_PRELOAD``, ``OMP_NUM_THREADS``, ``OMP_PROC_BIND``...), the processes of
    one training (torchrun's ``--nproc-per-node``, one included), DDP's keyword arguments and the name of the
    communication hook of ``default_hooks`` to register on it (with several), the cores the processes are bound to
    (with several ranks, each rank on its own: torchrun starts each through ``taskset``), and all of it as one
    ``command`` line running ``script``."""
    env: dict[str, str] = {}
    ranks, threads, ddp, bound, hook = ranks_of(config), None, {}, False, None
    for knob in REGISTRY:
        value = config.get(knob.name, knob.default_for())
        for effect in knob.effects:
            if isinstance(effect, Env) and not bound_per_rank(knob, value, config):
                env.update(effect.variables(value))
            elif isinstance(effect, NumThreads):
                threads = int(value) if value else None
            elif isinstance(effect, DDPArg):
                ddp[effect.keyword] = value
            elif isinstance(effect, CommHook):
                hook = effect.hooks.get(value)  # registered on the DDP model, not a keyword of it
            elif isinstance(effect, BindCores):
                bound = bound or value == effect.on
    per = threads or 1
    binding = f"taskset -c 0-{per * ranks - 1}" if bound else None  # compact: a core a thread of every rank
    words = [f"{name}={shlex.quote(text)}" for name, text in sorted(env.items())]
    words += [*(binding.split() if binding else []), "torchrun", "--standalone", f"--nproc-per-node={ranks}"]
    if bound and ranks > 1:  # each rank on its own cores: torchrun starts it through taskset (--no-python)
        first = f"$((LOCAL_RANK*{per}))"
        words += ["--no-python", "sh", "-c", shlex.quote(f"exec taskset -c {first}-$((LOCAL_RANK*{per}+{per - 1})) "
                                                         f"python {script}")]
    else:
        words.append(script)
    return {"ranks": ranks, "environment": dict(sorted(env.items())), "ddp": ddp if ranks > 1 else {},
            "comm_hook": hook if ranks > 1 else None, "binding": binding, "command": " ".join(words)}
