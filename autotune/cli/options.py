"""The command line's options for the request, made from its declaration, and their translation into it.

Each option of ``run``, ``submit``, ``measure`` and ``worker`` that is a field of the request
(:mod:`autotune.request`) is made here from the field's declaration: its flag, help, default,
the type that reads its value and the bounds or choices the help shows. The option's
destination is the field's Python keyword, so the values a command receives are what
:meth:`autotune.request.TuneConfig.from_keywords` takes, as :func:`autotune.tune` passes them.

The types here only read text (a duration, a size, a whole number): the rules (a trial budget
from 1 to 100,000, a positive memory budget) are the request's, checked once when it is made,
and an error names the option from the declaration (:mod:`autotune.cli.edge`). Options
that are not fields of the request (``--workers``, ``--poll``, ``--seq-len``) carry their own rules.
"""

from __future__ import annotations

from typing import Any, Callable

import click

from autotune.errors import UnitError
from autotune.declaration import Declared, OneOf, Switch, Whole, declarations
from autotune.request import FIELDS, MeasureConfig, TuneConfig, WorkloadSpec
from autotune.units import format_duration, parse_duration, parse_size

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


class _Unit(click.ParamType):
    """A number written with a unit, read by :mod:`autotune.units`. ``positive``: the option's own rule; a field of
    the request has its rule checked by the request, so its type only reads."""

    parse: Callable[[Any], float]

    def __init__(self, positive: bool = True) -> None:
        self.positive = positive

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        try:
            number = type(self).parse(value)
        except UnitError as exc:
            self.fail(f"{value!r}: {exc}", param, ctx)
        if self.positive and not number > 0:
            self.fail(f"{value!r}: must be positive", param, ctx)
        return number


class Duration(_Unit):
    """A duration: seconds, or 90s, 10m, 2h, 1h30m."""

    name = "duration"
    parse = staticmethod(parse_duration)


class Size(_Unit):
    """A size: bytes, or 512MB, 20GiB, 1e9."""

    name = "size"
    parse = staticmethod(parse_size)


DURATION = Duration()
SIZE = Size()


class Bounds(click.IntRange):
    """A whole number whose declared bounds the help shows (``1<=x<=100000``); the request checks them."""

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        return click.INT.convert(value, param, ctx)


class Choices(click.Choice):
    """One of the declared choices, shown in the help (``[tpe|gp|random|nsga2]``); the request checks it."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        return value


def storage_option(what: str, required: bool = False) -> Decorator:
    """``--storage``, the same on every command: the URL, or the AUTOTUNE_STORAGE variable, which keeps a password
    off the command line (where `ps` and the shell's history show it)."""
    return click.option("--storage", default=None, required=required, envvar="AUTOTUNE_STORAGE", show_envvar=True,
                        help=what + " Give a password in the variable, or in ~/.pgpass, rather than here.")


def declared_option(declared: Declared, command: str, required: bool = False) -> Decorator:
    """The click option of one declared field, as ``command`` shows it (its help may be the command's own)."""
    if declared.name == "storage":
        return storage_option(declared.help_for(command), required)
    assert declared.flag is not None, declared.name
    kwargs: dict[str, Any] = {"help": declared.help_for(command)}
    if declared.show_default:
        kwargs["show_default"] = format_duration(declared.default) if declared.unit == "duration" else True
    if declared.metavar:
        kwargs["metavar"] = declared.metavar
    rule = declared.rule
    # a flag alone sets the field to what it is not by default
    if isinstance(rule, Switch) and "/" not in declared.flag:
        kwargs.update(is_flag=True, flag_value=not declared.default, default=declared.default)
        return click.option(declared.flag, declared.word, **kwargs)
    if declared.required or required:
        kwargs["required"] = True
    else:
        kwargs["default"] = declared.default
    if isinstance(declared.default, tuple):  # a field of several values: the option repeats
        kwargs["multiple"] = True
    if declared.unit == "duration":
        kwargs["type"] = Duration(positive=False)
    elif declared.unit == "size":
        kwargs["type"] = Size(positive=False)
    elif isinstance(rule, Whole):
        shown = rule.shown and (rule.low is not None or rule.high is not None)
        kwargs["type"] = Bounds(rule.low, rule.high) if shown else click.INT
    elif isinstance(rule, OneOf):
        kwargs["type"] = Choices(rule.choices)
    return click.option(declared.flag, declared.word, **kwargs)


def options(command: str, *items: str | Decorator, required: tuple[str, ...] = ()) -> Decorator:
    """A command's options, in the order of ``items``: a declared field's name (its option made from the
    declaration), or a click option of the command's own."""
    made = [declared_option(FIELDS[item], command, item in required) if isinstance(item, str) else item
            for item in items]

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(made):
            func = option(func)
        return func

    return decorate


SEQ_LEN = click.option("--seq-len", type=click.IntRange(1), default=None,
                       help="Tokens per synthetic sample of an hf: model (as --model-arg seq_len=N).")

#: The options that name a workload (and where and how long a trial may run), shared by measure, run and submit.
WORKLOAD = ("model", "data", "model_args", SEQ_LEN, "input_shape", "num_classes", "task", "device", "trial_timeout_s")
#: The options that say how to tune a workload, shared by run and submit (with the trial timeout: every field of the
#: job).
JOB = ("space", "trials", "time_budget_s", "max_memory_bytes", "global_batch", "sampler", "seed", "quick", "early_stop",
       "confirm", "numerics", "warm_start", "batch_ceiling", "compile_limit_s", "objectives")


def make_spec(model: str, data: str | None, model_args: tuple[str, ...], input_shape: str | None,
              num_classes: int | None, task: str | None) -> Any:
    from autotune.request import parse_model_args, parse_shape
    from autotune.workloads.specs import import_spec

    spec = WorkloadSpec(
        model=model,
        data=data,
        model_args=parse_model_args(model_args),
        input_shape=parse_shape(input_shape),
        num_classes=num_classes,
        task=task,
    )
    # Syntax errors of the specs are reported before any process starts.
    for value, field in ((model, "model"), (data, "data")):
        if value is not None and value.count(":") != 1:
            import_spec(value, field)
    return spec


def workload_from(options: dict[str, Any]) -> tuple[Any, str, float]:
    """The workload spec, device and trial timeout from the shared workload options."""
    from dataclasses import replace

    from autotune.request import with_seq_len

    spec = make_spec(options["model"], options["data"], tuple(options["model_args"]), options["input_shape"],
                     options["num_classes"], options["task"])
    spec = replace(spec, model_args=with_seq_len(spec.model, spec.model_args, options.get("seq_len")))
    return spec, resolve_device(options["device"]), FIELDS["trial_timeout_s"].read(options["trial_timeout"])


def job_from(spec: Any, options: dict[str, Any]) -> TuneConfig:
    """The tuning job (the one typed request) from the options of every field of the job."""
    return TuneConfig.from_keywords(spec, **{d.word: options[d.word] for d in declarations(TuneConfig).values()})


def measurement_from(spec: Any, options: dict[str, Any]) -> MeasureConfig:
    """The measurement (``autotune measure``'s request) from the options of its fields."""
    return MeasureConfig.from_keywords(spec, **{d.word: options[d.word] for d in declarations(MeasureConfig).values()})


def resolve_device(device: str | None) -> str:
    from autotune.machine.hardware import check_device, default_device

    return check_device(device) if device else default_device()
