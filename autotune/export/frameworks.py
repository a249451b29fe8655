"""Exports for training frameworks: an exported configuration as Hugging Face ``TrainingArguments``,
Lightning ``Trainer``/``DataLoader`` arguments, or an Accelerate config file.

Why: many users train through a framework rather than their own loop, so
``cfg.apply(...)`` does not fit their script; what they need is the framework's own
arguments for the knob values autotune measured. Not every knob has one (no framework
has a channels-last or thread-count argument, Lightning has no compile switch), and a
knob quietly lost in translation makes the framework run something other than what was
measured. So :func:`render` maps every knob of the registry (:mod:`autotune.knobs`) for
every format: to an argument; else, for the Trainer and Lightning, to the callback that
applies it in the framework's own loop (:mod:`autotune.callbacks`, passed as
``Trainer(callbacks=[...])``); else to a ``not_expressible`` entry that says why and what
to do by hand. Only a knob at PyTorch's default, which needs nothing, is left out.

Each knob declares its own mapping for every format (``Knob.exports``, written into a
:class:`~autotune.knobs.exports.Job`); this module names no knob. It sets up each
format's arguments (device, sections), calls the knobs' mappings in registry order
(skipping a knob not in force: prefetch without workers, checkpointing outside
training), and writes the result as the file a user keeps.

Input is the document :func:`autotune.export.document.export` writes; ``render(doc, fmt)`` gives a
JSON-able dict (``arguments``: the keyword form, ``callback``: the callback's factory and
knob values), ``text(doc, fmt)`` the file a user keeps (a Python snippet whose keyword dicts
go to ``TrainingArguments(**training_args_kwargs)`` or ``lightning.Trainer(**trainer_kwargs)``,
YAML for Accelerate, the document itself for ``json``). No framework needs to be installed.
"""

from __future__ import annotations

import importlib.metadata
import json
from typing import Any, Callable, Mapping

from autotune import knobs
from autotune.export.training_speed import Expected
from autotune.evidence import stats
from autotune.errors import ConfigError, KnobError
from autotune.knobs import exports
from autotune.knobs.exports import Export, Job

__all__ = ["FORMATS", "check_format", "render", "text"]

FORMATS = ("json", *exports.FRAMEWORKS)
PACKAGES = {"json": "autotune", exports.HF_TRAINER: "transformers", exports.LIGHTNING: "lightning",
            exports.ACCELERATE: "accelerate"}
WHERE = {exports.HF_TRAINER: "TrainingArguments", exports.LIGHTNING: "Lightning's Trainer",
         exports.ACCELERATE: "the Accelerate config"}


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------- each format's own setup (no knob in it)


def _hf_device(job: Job) -> None:
    if not job.cuda:
        job.arguments["use_cpu"] = True


def _pl_device(job: Job) -> None:
    job.arguments = {"trainer": {}, "dataloader": {}}
    if job.cuda:
        index = job.device.partition(":")[2]
        job.arguments["trainer"].update(accelerator="gpu", devices=[int(index)] if index else 1)
    else:
        job.arguments["trainer"].update(accelerator="cpu", devices=1)


ACCELERATE_BASE = {  # what `accelerate config` writes for one process on one machine
    "compute_environment": "LOCAL_MACHINE", "debug": False, "distributed_type": "NO", "downcast_bf16": "no",
    "enable_cpu_affinity": False, "machine_rank": 0, "main_training_function": "main", "mixed_precision": "no",
    "num_machines": 1, "num_processes": 1, "rdzv_backend": "static", "same_network": True,
}


def _acc_device(job: Job) -> None:
    job.arguments = {**ACCELERATE_BASE, "use_cpu": not job.cuda}
    if job.cuda:
        job.arguments["gpu_ids"] = job.device.partition(":")[2] or "0"
    job.extra["accelerator"] = {} if job.cuda else {"cpu": True}


SETUP: dict[str, Callable[[Job], None]] = {exports.HF_TRAINER: _hf_device, exports.LIGHTNING: _pl_device,
                                           exports.ACCELERATE: _acc_device}

# ---------------------------------------------------------------- the knobs' mappings, read from the registry

# autotune's own format carries every value as it is: autotune.load_config resolves and applies every knob.
HANDLERS: dict[str, dict[str, Export]] = {
    "json": {knob.name: exports.arg(knob.name) for knob in knobs.REGISTRY},
    **{fmt: {knob.name: knob.exports[fmt] for knob in knobs.REGISTRY if fmt in knob.exports}
       for fmt in exports.FRAMEWORKS},
}


# ---------------------------------------------------------------- render and text


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}: expected one of {', '.join(FORMATS)}")
    return fmt


def _job(doc: Mapping[str, Any], fmt: str) -> Job:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("knobs"), Mapping):
        raise ConfigError("not an autotune export document: it has no 'knobs' mapping")
    device = str(doc.get("device") or "cpu")
    task = str(doc.get("task") or "train")
    stored = doc.get("context") or {}
    try:
        ctx = knobs.Context.from_dict({**stored, "device_type": device.split(":")[0], "task": task})
        given = knobs.validate_config(doc["knobs"])  # any machine's CPU count: it was measured elsewhere
    except (KnobError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"bad knob values in the export document: {exc}") from None
    defaults = knobs.defaults(ctx)
    return Job(fmt, WHERE.get(fmt, fmt), knobs.KNOBS, {**defaults, **given}, defaults, task, device,
               doc.get("global_batch"), version=_version)


def _render(doc: Mapping[str, Any], fmt: str) -> tuple[dict[str, Any], Job]:
    """The rendering and the job behind it (which also holds the launcher's options)."""
    check_format(fmt)
    job = _job(doc, fmt)
    if fmt in SETUP:
        SETUP[fmt](job)
    table = HANDLERS[fmt]
    for knob in knobs.REGISTRY:
        if fmt != "json" and not knob.in_force(job.values, job.task):
            continue  # it does nothing here (prefetch without workers, checkpointing outside training)
        handler = table.get(knob.name)
        try:
            if handler is not None:
                handler(job, knob.name, job.values[knob.name])
            elif not job.is_default(knob.name):  # a knob no mapping knows yet is never dropped silently
                job.by_hand(knob.name, f"autotune has no {fmt} mapping for this knob yet")
        except KnobError as exc:  # e.g. a batch size that does not divide the global batch
            raise ConfigError(f"cannot export to {fmt}: {exc}") from None
    study = doc.get("study") or {}
    package = PACKAGES[fmt]
    expected = Expected.of(doc, same_machine=False)
    return {
        "format": fmt,
        "framework": {"package": package, "version": _version(package)},
        "arguments": job.arguments,
        # the knobs the arguments cannot express, for autotune's callback of the format (autotune.callbacks), and what
        # the study measured, for the callback to set the training's own samples/s beside
        # (autotune.export.training_speed)
        "callback": ({"factory": f"autotune.callbacks.{exports.CALLBACKS[fmt]}", "knobs": job.callback,
                      "expected": expected.to_dict() if expected is not None else None}
                     if fmt in exports.CALLBACKS and (job.callback or expected is not None) else None),
        **job.extra,
        "not_expressible": job.manual,
        "source": {"study": study.get("name"), "trial": study.get("trial"), "storage": study.get("storage"),
                   "pick": doc.get("pick"), "pick_note": doc.get("pick_note"), "exported_at": doc.get("exported_at")},
        "knobs": job.values,
        "task": job.task,
        "device": job.device,
        "global_batch": job.global_batch,
        "batch_note": doc.get("batch_note"),  # the samples per optimizer step: kept through accumulation, or not
        "speedup": doc.get("speedup"),
    }, job


def render(doc: Mapping[str, Any], fmt: str) -> dict[str, Any]:
    """The framework's arguments for an exported configuration, and what must be done by hand."""
    return _render(doc, fmt)[0]


def _header(out: Mapping[str, Any]) -> list[str]:
    src = out["source"]
    where = f"study {src['study']!r}, trial {src['trial']}" if src["study"] else "an autotune configuration"
    pick = f" (pick {src['pick']})" if src["pick"] else ""
    fw = out["framework"]
    target = f"{fw['package']} {fw['version']}" if fw["version"] else f"{fw['package']} (not installed here)"
    lines = [f"# autotune export for {target}: {where}{pick}, measured on {out['device']} ({out['task']})"]
    speedup = out.get("speedup") or {}
    if speedup.get("text"):
        lines.append(f"# speed-up over PyTorch's defaults: {speedup['text']}{stats.interval_label(speedup)}")
    if src.get("pick_note"):
        lines.append(f"# {src['pick_note']}")
    if out.get("batch_note"):
        lines.append(f"# {out['batch_note']}")
    return lines


def _manual_lines(out: Mapping[str, Any], where: str) -> list[str]:
    if not out["not_expressible"]:
        return []
    lines = ["", f"# Not expressible in {where}; do these by hand:"]
    for item in out["not_expressible"]:
        lines.append(f"# - {item['knob']}={item['value']}: {item['why']}")
        lines.append(f"#     {item['how']}")
    return lines


def _kwargs(target: str, kwargs: Mapping[str, Any]) -> list[str]:
    """A keyword dict as Python source (its values are JSON-able: ``json.dumps`` it for a config system)."""
    return [f"{target} = {{", *[f"    {k!r}: {v!r}," for k, v in kwargs.items()], "}"]


def _callback(out: Mapping[str, Any], where: str, kind: str) -> list[str]:
    """The callback that applies what the arguments cannot express, as ``autotune_callbacks``; none when all fit."""
    callback = out["callback"]
    if not callback:
        return []
    task = f", task={out['task']!r}" if out["task"] != "train" else ""
    expected = f", expected={callback['expected']!r}" if callback.get("expected") else ""
    call = f"autotune_callbacks = [{callback['factory']}({callback['knobs']!r}{task}{expected})]"
    if len(call) > 116:  # an argument a line (a long knob dict: one knob a line)
        knob_lines = ([f"    {callback['knobs']!r}{task},"] if len(repr(callback["knobs"])) <= 100 else
                      ["    {", *[f"        {k!r}: {v!r}," for k, v in callback["knobs"].items()], f"    }}{task},"])
        call = "\n".join([f"autotune_callbacks = [{callback['factory']}(", *knob_lines,
                          *([f"    expected={callback['expected']!r},"] if expected else []), ")]"])
    said = (f"What {where} cannot express, applied by a {kind} in the framework's own loop (autotune.callbacks)"
            if callback["knobs"] else f"A {kind} (autotune.callbacks)")
    return [f"# {said}; once warm, it says the samples/s this training reaches beside the study's",
            "# (report_speed=False turns that off):", call]


def text(doc: Mapping[str, Any], fmt: str) -> str:
    """The rendering as a file: the JSON document, a Python snippet, or Accelerate's YAML."""
    check_format(fmt)
    if fmt == "json":
        _job(doc, fmt)  # validated like the others
        return json.dumps(doc, indent=2, default=str) + "\n"
    out, job = _render(doc, fmt)
    lines = _header(out)
    imports = ["import autotune.callbacks"] if out["callback"] else []
    if fmt == exports.HF_TRAINER:
        callbacks = _callback(out, "TrainingArguments", "TrainerCallback")
        lines += ["from transformers import Trainer, TrainingArguments", *imports, ""]
        lines += ["# The keyword form (as data: autotune.frameworks.render(doc, 'hf-trainer')['arguments'])"]
        lines += _kwargs("training_args_kwargs", out["arguments"])
        lines += ['training_args = TrainingArguments(output_dir="autotune-trainer", **training_args_kwargs)  # yours']
        lines += callbacks
        given = ", callbacks=list(autotune_callbacks)" if callbacks else ""  # a copy: the pasted names stay as found
        lines += [f"# trainer = Trainer(model=model, args=training_args, train_dataset=train_dataset{given})"]
        lines += _manual_lines(out, "TrainingArguments or autotune's callback")
    elif fmt == exports.LIGHTNING:
        callbacks = _callback(out, "these arguments", "Lightning Callback")
        lines += ["import lightning", *imports, ""]
        lines += ["# The keyword form (as data: autotune.frameworks.render(doc, 'lightning')['arguments'])"]
        lines += _kwargs("trainer_kwargs", out["arguments"]["trainer"])
        lines += _kwargs("dataloader_kwargs", out["arguments"]["dataloader"])
        if out.get(exports.DDP_STRATEGY):  # DistributedDataParallel's keywords, through Lightning's DDP strategy
            lines += ["from lightning.pytorch.strategies import DDPStrategy",
                      f"trainer_kwargs['strategy'] = DDPStrategy(**{out[exports.DDP_STRATEGY]!r})"]
        lines += callbacks
        # a copy: Lightning appends its own to the list
        given = ", callbacks=list(autotune_callbacks)" if callbacks else ""
        lines += [f"trainer = lightning.Trainer(**trainer_kwargs{given})"]
        lines += ["# train_loader = torch.utils.data.DataLoader(train_dataset, **dataloader_kwargs)"]
        lines += _manual_lines(out, "the Trainer or DataLoader arguments or autotune's callback")
    else:
        import yaml  # PyYAML comes with Optuna

        kwargs = ", ".join(f"{k}={v!r}" for k, v in out["accelerator"].items())
        imports = "Accelerator"
        if out.get(exports.DDP_KWARGS):  # DistributedDataParallel's keywords, as Accelerate's kwargs handler
            ddp = ", ".join(f"{k}={v!r}" for k, v in out[exports.DDP_KWARGS].items())
            kwargs += (", " if kwargs else "") + f"kwargs_handlers=[DistributedDataParallelKwargs({ddp})]"
            imports += ", DistributedDataParallelKwargs"
        options = "".join(f" {option} {value}" for option, value in job.launch.items())
        lines += [f"# accelerate launch --config_file THIS_FILE{options} train.py",
                  f"# in train.py: from accelerate import {imports}",
                  f"#   accelerator = Accelerator({kwargs})"]
        lines += _manual_lines(out, "the Accelerate config") + [""]
        return "\n".join(lines) + yaml.safe_dump(out["arguments"], sort_keys=False, default_flow_style=False)
    return "\n".join(lines) + "\n"
