"""The Python API: ``autotune.tune(...)``, ``autotune.measure(...)`` and ``autotune.verify(...)``, for notebooks and
scripts.

``tune`` is ``autotune run`` as a function: it translates its arguments into the one typed
request (:class:`autotune.request.TuneConfig`) and runs it through
:func:`autotune.tuning.preparation.prepare` (the one composition behind ``run``,
``worker`` and ``submit``), then returns a :class:`TuneResult` with the study, its Pareto
front, the verdict and ``export()``.

The model (and data) may be named as on the command line (``"mypkg.models:build"``,
``"hf:gpt2"``) or passed as a Python object: a factory function, a class, a lambda, an
``nn.Module``, even one defined in a notebook, in a script's ``__main__`` or inside
another function. Trials run in processes forked from a server that cannot import those,
so such an object travels by value, pickled with cloudpickle (:mod:`autotune.workloads.shipping`);
an object an importable module defines is named ``module:attr`` instead, as the CLI would.

The keywords are the request's fields, as declared in :mod:`autotune.request` (with the
same defaults; tests/test_request.py checks them field by field), and a value a field cannot
take is refused by the request, once, in an error that names the keyword (``trials=``).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Sequence

import optuna

from autotune.evidence.verdict import shown
from autotune.tuning import ceiling_probe as ceilings
from autotune import knobs
from autotune.workloads import shipping
from autotune.tuning import fleet
from autotune.tuning import preparation
from autotune.tuning import loop
from autotune.errors import AutotuneError, KnobError, SpecError, WorkloadError, in_words, said
from autotune.evidence import Verdict, evidence_of
from autotune.evidence.efficiency import Efficiency, efficiency, hardware_line, rated
from autotune.request import (DEFAULT_COMPILE_LIMIT_S, DEFAULT_CONFIRM, DEFAULT_NUMERICS, DEFAULT_PICK, DEFAULT_SAMPLER,
                              DEFAULT_TRIAL_TIMEOUT_S, DEFAULT_TRIALS, DEFAULT_OBJECTIVES)
from autotune.request import VERIFY_ROUNDS
from autotune.request import MeasureConfig, TuneConfig, WorkloadSpec, declared
from autotune.request import parse_model_args, parse_shape, with_seq_len
from autotune.result import TrialResult
from autotune.evidence.stats import Noise, Ratio
from autotune.store import Store, StoredStudy
from autotune.units import parse_size
from autotune.workloads.specs import import_spec

__all__ = ["TuneResult", "measure", "tune", "verify"]


# ---------------------------------------------------------------- arguments


def _size(value: int | float | str | None, name: str) -> int | None:
    """A size argument of the API's own (not a field of the request): bytes, or text such as '20GiB'."""
    if value is None:
        return None
    try:
        number = parse_size(value)
    except AutotuneError as exc:
        raise KnobError(f"{name}={value!r}: {exc}") from None
    if not isinstance(number, int) or number <= 0:
        raise KnobError(f"{name}={value!r}: must be positive and a whole number of bytes")
    return number


def _part(obj: Any, what: str, pickled: dict[str, str]) -> str | None:
    """A model or data argument as a spec string; objects that cannot be imported by name are pickled into
    ``pickled``."""
    if obj is None:
        return None
    if isinstance(obj, str):
        if shipping.is_pickled(obj):
            raise SpecError(f"{what}={obj!r}: a pickled spec is made by autotune.tune() from an object; "
                            "pass the object (or model=None with study=NAME to resume that study's own workload)")
        if obj.count(":") != 1:
            import_spec(obj, what)  # the same one-line SpecError as the CLI, before any process starts
        return obj
    ref = shipping.reference(obj) if isinstance(obj, (type, types.FunctionType)) else None
    if ref is not None:
        return ref
    from torch import nn
    from torch.utils.data import Dataset

    from autotune.workloads.contract import Workload

    if not callable(obj) and not isinstance(obj, (nn.Module, Workload, Dataset)):
        raise SpecError(f"{what}={type(obj).__name__}: expected a module:attr string, "
                        + ("hf:<model_type>, " if what == "model" else "")
                        + "or a callable (a factory returning "
                        + ("an nn.Module or an autotune.Workload)" if what == "model" else "a Dataset)"))
    spec, data = shipping.ship(obj, what)
    pickled[spec] = data
    return spec


def _spec(model: Any, data: Any, model_args: Any, input_shape: Any, num_classes: int | None, task: str | None,
          seq_len: Any = None) -> WorkloadSpec:
    pickled: dict[str, str] = {}
    model_spec = _part(model, "model", pickled)
    assert model_spec is not None
    data_spec = _part(data, "data", pickled)
    if model_args is None:
        args: tuple[tuple[str, Any], ...] = ()
    elif isinstance(model_args, Mapping):
        bad = [k for k in model_args if not isinstance(k, str) or not k.isidentifier()]
        if bad:
            raise SpecError(f"model_args: {bad[0]!r} is not a valid argument name")
        args = tuple(sorted(model_args.items()))
    elif isinstance(model_args, Iterable) and not isinstance(model_args, (str, bytes)):
        args = parse_model_args(model_args)  # ["key=value", ...] as on the command line
    else:
        raise SpecError(f"model_args={model_args!r}: expected a dict of keyword arguments")
    try:
        json.dumps(dict(args), allow_nan=False)
    except (TypeError, ValueError):
        raise SpecError("model_args: values must be numbers, strings, booleans, None, lists or dicts (they are stored "
                        "with the study); pass other objects through the factory, "
                        "e.g. functools.partial(factory, ...)") from None
    if input_shape is None or isinstance(input_shape, str):
        shape = parse_shape(input_shape)
    else:
        try:
            shape = parse_shape(",".join(str(int(d)) for d in input_shape))
        except (TypeError, ValueError):
            raise SpecError(f"input_shape={input_shape!r}: expected positive integers, e.g. (3, 32, 32)") from None
    args = with_seq_len(model_spec, args, seq_len)
    return WorkloadSpec(model=model_spec, data=data_spec, model_args=args, input_shape=shape, num_classes=num_classes,
                        task=task, pickled=tuple(sorted(pickled.items())))


def _device(device: str | None) -> str:
    from autotune.machine.hardware import check_device, default_device

    return check_device(str(device)) if device is not None else default_device()


def default_study(spec: WorkloadSpec) -> str:
    """The study name ``autotune run`` would choose (:meth:`WorkloadSpec.default_study_name`)."""
    return spec.default_study_name()


# ---------------------------------------------------------------- errors in Python's words


def _word(name: str) -> str:
    """The API's word for a name a message holds: a declared field's keyword (``trial_timeout_s`` ->
    ``trial_timeout``), or the API's own argument of that name (``pick``, ``config``)."""
    try:
        return declared(name).word
    except KeyError:
        return name


def in_python_words(exc: AutotuneError) -> AutotuneError:
    """An error as a Python caller reads it: a field of the request named by its keyword, from its declaration
    (``trial_timeout=``), and every term of any other message (:func:`autotune.errors.named`) in the API's words
    (``study='mlp-2'``, ``model=Net``)."""
    return exc.in_words(_word)


def in_python_text(verdict: Verdict) -> Verdict:
    """The verdict as a Python caller reads it: the options its text names (``run with confirm=``) in the API's
    words (:class:`autotune.errors.Said`)."""
    return dataclasses.replace(verdict, text=in_words(said(verdict.text), _word))


def _in_python_words(func: Callable[..., Any]) -> Callable[..., Any]:
    """Re-raise an AutotuneError with its message in Python's words (the API's edge; the CLI's is autotune.cli.edge)."""
    import functools

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except AutotuneError as exc:
            raise in_python_words(exc) from None

    return wrapper


# ---------------------------------------------------------------- the result


class TuneResult:
    """What :func:`tune` returns: the study and the figures derived from it (read when the result is made).

    ``study``: the Optuna study; ``front``: the Pareto front, fastest first, as rows (trial, changes, samples/s,
    processes, peak memory, speed-up); ``verdict``: the :class:`autotune.evidence.Verdict`; ``winner``: the verdict's
    trial number (the baseline's when nothing beats PyTorch's defaults; None before any result); ``speedup``: the
    verdict's :class:`autotune.evidence.stats.Ratio` over the defaults, with its interval; ``noise``: the noise between
    processes; ``numerics``: the recommendation's numerics check (:class:`autotune.evidence.numerics_answer.Check`:
    ``state`` hold, differ or not_checked, ``text()``; None when none ran); ``summary``: what this run did
    (:class:`autotune.tuning.loop.Summary`); ``mfu`` of ``peak`` (``device``, ``precision``, ``flops``),
    ``joules_per_sample`` and ``energy``: as ``status --json`` and the verdict carry them.
    """

    def __init__(self, study: optuna.Study, store: Store, summary: loop.Summary | None = None) -> None:
        self.study = study
        self.store = store
        self.summary = summary
        self.view = StoredStudy.of(study)  # read once: the figures below and export() read this view, as the CLI's do
        evidence = evidence_of(self.view)
        self.front: list[dict[str, Any]] = [evidence.row(n) for n in evidence.front()]
        self.verdict: Verdict = in_python_text(rated(self.view, evidence.verdict()))
        self.noise: Noise = evidence.noise
        self.numerics = evidence.numerics()
        self.recommended: int | None = evidence.recommended()
        self._speedup = evidence.speedup(self.recommended) if self.recommended is not None else None
        self._changes = evidence.configs[self.recommended].changes if self.recommended is not None else {}
        self.measured = sum(1 for t in self.view.trials if t.measured)
        self.efficiency: Efficiency = (e := efficiency(self.view))  # the recommendation's MFU, its peak, its energy
        self.mfu, self.peak, self.energy, self.joules_per_sample = e.mfu, e.peak, e.energy, e.joules_per_sample

    @property
    def name(self) -> str:
        return self.study.study_name

    @property
    def winner(self) -> int | None:
        """The recommended trial (the baseline's when nothing beats the defaults beyond the noise)."""
        return self.recommended

    @property
    def speedup(self) -> Ratio | None:
        """The recommendation's own speed-up over the defaults (1.00x when it is the defaults)."""
        return self._speedup

    @_in_python_words
    def export(self, path: str | Path | None = None, format: str = "json", pick: str = DEFAULT_PICK,
               max_memory: int | str | None = None) -> Any:
        """The configuration to use, as ``autotune export`` writes it.

        ``format="json"`` returns the document :func:`autotune.load_config` reads;
        ``"hf-trainer"``, ``"lightning"`` or ``"accelerate"`` return the framework's
        arguments as text (what the framework cannot express is listed in it). With
        ``path``, it is also written there. ``pick``: recommended (the verdict's configuration, or
        the defaults when nothing beats them beyond the noise; the document says which and why),
        fastest (the fastest-looking, labelled with the verdict), smallest or balanced;
        ``max_memory``: only front points within it.
        """
        from autotune.export import document
        from autotune.export import frameworks

        frameworks.check_format(format)
        doc = document.export(self.view, pick, _size(max_memory, "max_memory"), self.store.shown)
        if format == "json":
            if path is not None:
                document.write(doc, path)
            return doc
        text = frameworks.text(doc, format)
        if path is not None:
            out = Path(path)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
        return text

    def __repr__(self) -> str:
        what = " ".join(f"{k}={v}" for k, v in self._changes.items()) or "the defaults"
        speed = f", speed-up {self.speedup.text()}" if self.speedup else ""
        return (f"TuneResult(study={self.name!r}, measured={self.measured}, "
                f"recommended=#{self.recommended} ({what}){speed})\n"
                + "\n".join([*shown(self.verdict.to_dict()), f"hardware: {hardware_line(self.efficiency)}"]))


# ---------------------------------------------------------------- tune


@_in_python_words
def tune(
    model: Any = None,
    data: Any = None,
    *,
    trials: int = DEFAULT_TRIALS,
    space: str | None = None,
    storage: str | None = None,
    study: str | None = None,
    device: str | None = None,
    time_budget: float | str | None = None,
    max_memory: int | str | None = None,
    global_batch: int | None = None,
    sampler: str = DEFAULT_SAMPLER,
    seed: int | None = None,
    quick: bool = False,
    confirm: int = DEFAULT_CONFIRM,
    numerics: str = DEFAULT_NUMERICS,
    model_args: Mapping[str, Any] | Iterable[str] | None = None,
    seq_len: int | None = None,
    input_shape: Iterable[int] | str | None = None,
    num_classes: int | None = None,
    task: str | None = None,
    trial_timeout: float | str = DEFAULT_TRIAL_TIMEOUT_S,
    batch_ceiling: bool | None = None,
    warm_start: bool = False,
    early_stop: bool = True,
    compile_limit: float | str = DEFAULT_COMPILE_LIMIT_S,
    objectives: str = DEFAULT_OBJECTIVES,
    workers: int = 1,
    devices: str | Sequence[int] | None = None,
    progress: bool = True,
) -> TuneResult:
    """Tune a model's performance knobs (``autotune run`` as a function); resume the study if it exists.

    ``model``: ``"module:attr"``, ``"hf:<model_type>"``, or a callable returning an
    ``nn.Module`` or an :class:`autotune.Workload` (any callable: defined in a notebook or
    inside a function, it is pickled and sent to the trial processes); ``None`` with
    ``study=`` resumes that study's own workload. ``data``: a dataset factory, likewise.
    ``trials``: the study's total of measured configurations. ``time_budget`` (seconds or
    ``"2h"``), ``max_memory`` (bytes or ``"20GiB"``), ``trial_timeout`` (seconds or ``"10m"``).
    ``study`` and ``storage`` default as in the CLI (``studies/<name>.db``). ``confirm``:
    rounds of the final race (0: none). ``numerics``: after the verdict, the recommendation trained beside the
    defaults on the same samples, its loss compared (``"warn"``: marked where it differs; ``"strict"``: the fastest
    configuration whose numerics hold is recommended; ``"off"``). ``quick``: short windows (smoke runs).
    ``batch_ceiling``: first find the largest batch that fits and search none above it
    (default: on a GPU, or with ``max_memory``). ``warm_start``: a new study first measures the winners of
    earlier studies in the same storage on this kind of machine (off by default: across models it bought nothing).
    ``early_stop``: cut a trial short when a point of the front beats it (False: as ``--no-early-stop``).
    ``compile_limit`` (seconds or ``"3m"``): a compiled configuration whose first step (the compilation) runs longer
    is stopped and recorded as too slow. ``workers``: trials at once on this machine, each worker pinned to its share
    of the cores (as ``run --workers``); ``devices``: GPUs to use at once (``[0, 1]`` or ``"0,1"``), one trial each
    (as ``run --devices``). ``objectives``: the front's axes, ``"speed,memory"`` or ``"speed,energy"`` (joules per
    sample from an NVIDIA GPU's energy counter), fixed with the study. ``seq_len``: tokens per synthetic sample of an
    ``hf:`` model (as ``model_args={"seq_len": N}``). ``progress``: a progress bar, a line per trial (False: silent).

    Ctrl-C (a notebook's interrupt) stops the running trial, records it as interrupted
    (the next call measures it again) and raises KeyboardInterrupt.
    """
    here = fleet.Here.of(workers, devices)
    dev = here.device(_device(device))
    if model is None:
        if study is None:
            raise SpecError("tune(): pass a model, or model=None with study=NAME to resume that study's workload")
        if any(v is not None for v in (data, model_args, seq_len, input_shape, num_classes, task)):
            raise SpecError("tune(model=None, study=...) resumes the study's own workload: "
                            "it takes no data or model options")
        spec = preparation.stored_config(_store(storage, study, read_only=True).read(study)).spec
    else:
        spec = _spec(model, data, model_args, input_shape, num_classes, task, seq_len)
    job = TuneConfig.from_keywords(
        spec, space=space, trials=trials, time_budget=time_budget, max_memory=max_memory, global_batch=global_batch,
        sampler=sampler, seed=seed, quick=quick, early_stop=early_stop, confirm=confirm, numerics=numerics,
        trial_timeout=trial_timeout, batch_ceiling=batch_ceiling, warm_start=warm_start, compile_limit=compile_limit,
        objectives=objectives)
    name = study or default_study(spec)
    store = _store(storage, name)
    from autotune.tuning.progress import Progress

    bar = Progress(trials, job.time_budget_s, 0, enabled=progress, echo=_echo)
    try:
        prepared = preparation.prepare(job, name, store, dev, on_trial=bar, on_repeat=bar.repeat,
                                  on_probe=lambda *probe: bar.print(ceilings.probe_text(*probe)))
        bar.done = prepared.measured
        for line in prepared.opening(here.processes):
            bar.print(in_words(said(line), _word))
        summary = here.run(prepared)
    except KeyboardInterrupt:
        bar.close()
        if progress:
            _echo("stopped: the running trial is recorded as interrupted; call tune() again to continue")
        raise
    finally:
        bar.close()
    result = TuneResult(prepared.study, store, summary)
    if progress:
        _echo(summary.text())
        for line in shown(result.verdict.to_dict()):
            _echo(line)
    return result


def _store(storage: str | None, study: str, read_only: bool = False) -> Store:
    """The store of ``storage=`` (a URL), else the study's default SQLite file; the name checked first."""
    from autotune.store import check_name

    check_name(study)
    return (Store.open(storage, read_only=read_only) if storage is not None
            else Store.default(study, read_only=read_only))


def _echo(line: str) -> None:
    print(line, file=sys.stdout, flush=True)


# ---------------------------------------------------------------- measure


@_in_python_words
def measure(
    model: Any,
    config: Mapping[str, Any] | Iterable[str] | None = None,
    *,
    data: Any = None,
    device: str | None = None,
    quick: bool = False,
    repeat: int = 1,
    global_batch: int | None = None,
    model_args: Mapping[str, Any] | Iterable[str] | None = None,
    seq_len: int | None = None,
    input_shape: Iterable[int] | str | None = None,
    num_classes: int | None = None,
    task: str | None = None,
    trial_timeout: float | str = DEFAULT_TRIAL_TIMEOUT_S,
) -> TrialResult | list[TrialResult]:
    """Measure one configuration in an isolated process (``autotune measure`` as a function).

    ``config``: knob values (``{"precision": "bf16", "batch_size": 64}`` or
    ``["precision=bf16"]``); the rest stay at PyTorch's defaults. Returns the
    :class:`autotune.result.TrialResult` (a list of ``repeat`` of them, each from a new
    process, when ``repeat > 1``). ``seq_len``: tokens per synthetic sample of an ``hf:`` model (as ``--seq-len``).
    A failing configuration (oom, nan, ...) is a result; a
    model or data factory that cannot be built raises.
    """
    spec = _spec(model, data, model_args, input_shape, num_classes, task, seq_len)
    request = MeasureConfig.from_keywords(spec, quick=quick, global_batch=global_batch, trial_timeout=trial_timeout,
                                          repeat=repeat)
    if config is None:
        values: dict[str, Any] = {}
    elif isinstance(config, Mapping):
        values = knobs.validate_config(config)
    else:
        values = knobs.parse_assignments(config)
    results = measure_spec(request, values, device=_device(device))
    return results[0] if request.repeat == 1 else results


def measure_spec(
    request: MeasureConfig,
    config: Mapping[str, Any],
    *,
    device: str,
    on_result: Callable[[int, TrialResult], None] | None = None,
) -> list[TrialResult]:
    """Measure one configuration of a workload ``request.repeat`` times, each in a new process (``measure`` and
    ``autotune measure``). ``on_result(i, result)`` after each. A failing configuration is a result; a
    workload that cannot be built raises WorkloadError."""
    from autotune.trial.protocol import Settings
    from autotune.trial.runner import Runner

    spec, global_batch = request.spec, request.global_batch
    runner = Runner(spec, device=device, timeout_s=request.trial_timeout_s,
                    settings=Settings.quick() if request.quick else Settings(), global_batch=global_batch)
    probe = runner.probe()
    values = knobs.validate_config(config, knobs.Context.from_dict(probe["context"]))
    batch = int(values.get(knobs.BATCH_KNOB,
                           probe["workload"].get(knobs.BATCH_KNOB) or knobs.defaults()[knobs.BATCH_KNOB]))
    knobs.accumulation_steps(global_batch, batch)
    results = []
    for i in range(request.repeat):
        res = runner.measure(values)
        if res.user_error:
            raise WorkloadError((res.error.get("said") or res.error["message"]) if res.error else "the workload failed")
        results.append(res)
        if on_result is not None:
            on_result(i, res)
    return results


# ---------------------------------------------------------------- verify


@_in_python_words
def verify(
    export: str | Path | Mapping[str, Any],
    *,
    rounds: int = VERIFY_ROUNDS[1],
    device: str | None = None,
    quick: bool = False,
    trial_timeout: float | str = DEFAULT_TRIAL_TIMEOUT_S,
    model_args: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> Any:
    """Measure an exported configuration against its defaults again, on this machine (``autotune verify`` as a
    function; see :mod:`autotune.export.verify`).

    ``export``: a file written by ``autotune export STUDY -o FILE`` (or ``TuneResult.export()``'s document).
    ``rounds``: at most this many rounds (at least 2), each the defaults and the configuration in fresh
    processes; it stops once the interval is clear of the claim's lower bound. ``device`` (default: the
    export's, else this machine's), ``quick`` (short windows), ``trial_timeout`` as for :func:`measure`;
    ``model_args``: the workload's arguments changed since (set over the export's). Returns a
    :class:`autotune.export.verify.Verification`: ``verdict`` ("holds", "weaker", "gone", "busy" or "failed"),
    ``holds``, ``measured`` and ``claim.speedup`` (:class:`autotune.evidence.stats.Ratio`), ``changed`` (what differs
    from where the claim was measured), ``text()`` and ``to_dict()``.
    """
    from autotune.export import verify as verification

    if model_args is not None and not isinstance(model_args, Mapping):
        raise SpecError(f"model_args={model_args!r}: expected a dict of keyword arguments")
    outcome = verification.run(export, rounds=rounds, device=device, quick=quick, trial_timeout=trial_timeout,
                    model_args=model_args, echo=_echo if progress else None)
    if progress:
        for line in outcome.lines():
            _echo(line)
    return outcome
