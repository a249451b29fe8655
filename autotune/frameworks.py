"""Exports for training frameworks: an exported configuration as Hugging Face ``TrainingArguments``,
Lightning ``Trainer``/``DataLoader`` arguments, or an Accelerate config file.

Why: many users train through a framework rather than their own loop, so
``cfg.apply(...)`` does not fit their script; what they need is the framework's own
arguments for the knob values autotune measured. Not every knob has one (no framework
has a channels-last or thread-count argument, Lightning has no compile switch), and a
knob quietly lost in translation makes the framework run something other than what was
measured. So :func:`render` maps every knob of the registry (:mod:`autotune.knobs`) for
every format: to an argument, or to a ``not_expressible`` entry that says why and what
to do by hand; only a knob at PyTorch's default, which needs nothing, is left out.

Input is the document :func:`autotune.config.export` writes; ``render(doc, fmt)`` gives a
JSON-able dict, ``text(doc, fmt)`` the file a user keeps (a Python snippet, YAML for
Accelerate, the document itself for ``json``). No framework needs to be installed.
"""

from __future__ import annotations

import importlib.metadata
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from autotune import knobs
from autotune.errors import ConfigError, KnobError

FORMATS = ("json", "hf-trainer", "lightning", "accelerate")
PACKAGES = {"json": "autotune", "hf-trainer": "transformers", "lightning": "lightning", "accelerate": "accelerate"}
WHERE = {"hf-trainer": "TrainingArguments", "lightning": "Lightning's Trainer", "accelerate": "the Accelerate config"}
HF_ACTIVATION_CHECKPOINTING = (5, 23)  # transformers renamed gradient_checkpointing to activation_checkpointing
LOADER_KNOBS = ("batch_size", "num_workers", "pin_memory", "prefetch_factor", "persistent_workers")


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _how(name: str, value: Any) -> str:
    """What to write by hand for a knob value, whatever the framework."""
    if name == "precision":
        return {
            "tf32": "torch.backends.cuda.matmul.allow_tf32 = True and torch.backends.cudnn.allow_tf32 = True before training",
            "bf16": "with torch.autocast(device_type, dtype=torch.bfloat16): around forward and loss",
            "fp16": "with torch.autocast(device_type, dtype=torch.float16): around forward and loss, with torch.amp.GradScaler",
        }.get(value, "no autocast: run the step in float32")
    if name == "compile":
        return "model = torch.compile(model)" if value == "default" else f"model = torch.compile(model, mode={value!r})"
    if name == "memory_format":
        return "model = model.to(memory_format=torch.channels_last), and 4-D inputs x.contiguous(memory_format=torch.channels_last)"
    if name == "pin_memory":
        return f"DataLoader(dataset, pin_memory={value!r})" + (", and batch.to(device, non_blocking=True)" if value else "")
    if name in LOADER_KNOBS:
        return f"DataLoader(dataset, {name}={value!r})"
    if name == "activation_checkpointing":
        return ("torch.utils.checkpoint.checkpoint(block, *inputs, use_reentrant=False) around each repeated block "
                "(Hugging Face models: model.gradient_checkpointing_enable())")
    if name == "cudnn_benchmark":
        return f"torch.backends.cudnn.benchmark = {value!r} before training"
    if name == "optimizer_impl":
        return f"build the optimizer with {value}=True, e.g. torch.optim.AdamW(model.parameters(), lr=..., {value}=True)"
    if name == "threads":
        return f"torch.set_num_threads({value}) at start, and OMP_NUM_THREADS={value} in the environment before Python starts"
    if name == "cuda_allocator":
        return "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the environment before Python starts"
    return f"apply it with autotune.load_config(...).apply(...) ({knobs.KNOBS[name].help})"  # a knob added later


@dataclass
class Job:
    """One rendering: the knob values and what they became."""

    fmt: str
    values: dict[str, Any]
    defaults: dict[str, Any]
    task: str
    device: str
    global_batch: int | None
    arguments: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    manual: list[dict[str, Any]] = field(default_factory=list)

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def train(self) -> bool:
        return self.task == "train"

    @property
    def workers(self) -> int:
        return int(self.values["num_workers"])

    @property
    def accumulation(self) -> int | None:
        """Micro-batches per optimizer step when ``global_batch`` is set (training only)."""
        if not self.global_batch or not self.train:
            return None
        bs = int(self.values["batch_size"])
        if self.global_batch % bs:
            raise ConfigError(f"batch_size {bs} does not divide global_batch {self.global_batch}")
        return self.global_batch // bs

    def is_default(self, name: str) -> bool:
        """At PyTorch's default, so nothing needs doing (a batch size always needs saying)."""
        return name != "batch_size" and self.values[name] == self.defaults[name]

    def by_hand(self, name: str, why: str, how: str | None = None) -> None:
        value = self.values[name]
        self.manual.append({"knob": name, "value": value, "why": why, "how": how or _how(name, value)})

    def unless_default(self, name: str, why: str | None = None) -> None:
        if not self.is_default(name):
            self.by_hand(name, why or f"{WHERE[self.fmt]} has no argument for it")


Handler = Callable[[Job, Any], None]


def _manual(name: str, why: str | None = None, train_only: bool = False, needs_workers: bool = False) -> Handler:
    """By hand unless at PyTorch's default, or where the knob does not apply (training only, workers only)."""

    def handle(job: Job, value: Any) -> None:
        if (job.train or not train_only) and (job.workers > 0 or not needs_workers):
            job.unless_default(name, why)

    return handle


def _arg(argument: str, section: str | None = None, needs_workers: bool = False) -> Handler:
    """The knob's value as a framework argument (DataLoader worker options only with workers)."""

    def handle(job: Job, value: Any) -> None:
        if not needs_workers or job.workers > 0:
            (job.arguments[section] if section else job.arguments)[argument] = value

    return handle


# ---------------------------------------------------------------- Hugging Face Trainer


def _hf_precision(job: Job, value: Any) -> None:
    job.arguments.update(bf16=value == "bf16", fp16=value == "fp16")
    if value == "tf32":
        job.arguments["tf32"] = True


def _hf_compile(job: Job, value: Any) -> None:
    job.arguments["torch_compile"] = value != "off"
    if value != "off":
        job.arguments["torch_compile_mode"] = value
        if job.cuda and job.values["precision"] in ("fp32", "bf16"):
            job.by_hand("precision", "with torch_compile, Trainer (through Accelerate) turns TF32 matmuls on; the measured step kept them off",
                        "torch.backends.cuda.matmul.allow_tf32 = False after building the Trainer")


def _hf_batch(job: Job, value: Any) -> None:
    job.arguments["per_device_train_batch_size" if job.train else "per_device_eval_batch_size"] = value
    if job.accumulation:
        job.arguments["gradient_accumulation_steps"] = job.accumulation


def _hf_checkpointing_name() -> str:
    """``activation_checkpointing`` from transformers 5.23; ``gradient_checkpointing`` before (and when not installed)."""
    version = _version("transformers")
    try:
        parts = tuple(int(p) for p in (version or "0.0").split(".")[:2])
    except ValueError:
        return "gradient_checkpointing"
    return "activation_checkpointing" if parts >= HF_ACTIVATION_CHECKPOINTING else "gradient_checkpointing"


def _hf_optimizer(job: Job, value: Any) -> None:
    if not job.train:
        return
    job.arguments["optim"] = "adamw_torch_fused" if value == "fused" else "adamw_torch"  # explicit: the default is fused
    if value == "foreach":
        job.by_hand("optimizer_impl", "TrainingArguments' optim names have no foreach variant (adamw_torch is the default loop)",
                    "Trainer(..., optimizers=(torch.optim.AdamW(model.parameters(), lr=args.learning_rate, foreach=True), None))")


def _hf_checkpointing(job: Job, value: Any) -> None:
    if job.train:
        job.arguments[_hf_checkpointing_name()] = value


HF: dict[str, Handler] = {
    "precision": _hf_precision,
    "compile": _hf_compile,
    "memory_format": _manual("memory_format"),
    "batch_size": _hf_batch,
    "num_workers": _arg("dataloader_num_workers"),
    "prefetch_factor": _arg("dataloader_prefetch_factor", needs_workers=True),
    "persistent_workers": _arg("dataloader_persistent_workers", needs_workers=True),
    "pin_memory": _arg("dataloader_pin_memory"),  # always said: Trainer's default is on, PyTorch's off
    "activation_checkpointing": _hf_checkpointing,
    "cudnn_benchmark": _manual("cudnn_benchmark"),
    "optimizer_impl": _hf_optimizer,
    "threads": _manual("threads"),
    "cuda_allocator": _manual("cuda_allocator"),
}


def _hf_device(job: Job) -> None:
    if not job.cuda:
        job.arguments["use_cpu"] = True


# ---------------------------------------------------------------- Lightning


def _pl_precision(job: Job, value: Any) -> None:
    job.arguments["trainer"]["precision"] = {"bf16": "bf16-mixed", "fp16": "16-mixed"}.get(value, "32-true")
    if value == "tf32":
        job.by_hand("precision", "Lightning's precision has no TF32 setting",
                    "torch.set_float32_matmul_precision('high') and torch.backends.cudnn.allow_tf32 = True before trainer.fit")


def _pl_compile(job: Job, value: Any) -> None:
    if value != "off":
        job.by_hand("compile", "Lightning's Trainer has no compile argument",
                    _how("compile", value) + " on the LightningModule before trainer.fit(model)")


def _pl_batch(job: Job, value: Any) -> None:
    job.arguments["dataloader"]["batch_size"] = value
    if job.accumulation:
        job.arguments["trainer"]["accumulate_grad_batches"] = job.accumulation


def _pl_optimizer(job: Job, value: Any) -> None:
    if job.train and value != "default":
        job.by_hand("optimizer_impl", "the optimizer is built in configure_optimizers, not by the Trainer",
                    f"in configure_optimizers: torch.optim.AdamW(self.parameters(), lr=..., {value}=True)")


LIGHTNING: dict[str, Handler] = {
    "precision": _pl_precision,
    "compile": _pl_compile,
    "memory_format": _manual("memory_format"),
    "batch_size": _pl_batch,
    "num_workers": _arg("num_workers", "dataloader"),
    "prefetch_factor": _arg("prefetch_factor", "dataloader", needs_workers=True),
    "persistent_workers": _arg("persistent_workers", "dataloader", needs_workers=True),
    "pin_memory": _arg("pin_memory", "dataloader"),
    "activation_checkpointing": _manual("activation_checkpointing", train_only=True),
    "cudnn_benchmark": _arg("benchmark", "trainer"),
    "optimizer_impl": _pl_optimizer,
    "threads": _manual("threads"),
    "cuda_allocator": _manual("cuda_allocator"),
}


def _pl_device(job: Job) -> None:
    job.arguments = {"trainer": {}, "dataloader": {}}
    if job.cuda:
        index = job.device.partition(":")[2]
        job.arguments["trainer"].update(accelerator="gpu", devices=[int(index)] if index else 1)
    else:
        job.arguments["trainer"].update(accelerator="cpu", devices=1)


# ---------------------------------------------------------------- Accelerate


def _acc_precision(job: Job, value: Any) -> None:
    mixed = {"bf16": "bf16", "fp16": "fp16"}.get(value, "no")
    job.arguments["mixed_precision"] = mixed
    job.extra["accelerator"]["mixed_precision"] = mixed
    if value == "tf32":
        job.by_hand("precision", "the Accelerate config has no TF32 setting")
    elif value == "fp32" and job.cuda and job.values["compile"] != "off":
        job.by_hand("precision", "Accelerate turns TF32 matmuls on when dynamo runs without mixed precision; the measured step kept them off",
                    "torch.backends.cuda.matmul.allow_tf32 = False after creating the Accelerator")


def _acc_compile(job: Job, value: Any) -> None:
    if value != "off":
        job.arguments["dynamo_config"] = {"dynamo_backend": "INDUCTOR", "dynamo_mode": value,
                                          "dynamo_use_fullgraph": False, "dynamo_use_dynamic": False}


def _acc_batch(job: Job, value: Any) -> None:
    how = _how("batch_size", value)
    if job.accumulation:
        job.extra["accelerator"]["gradient_accumulation_steps"] = job.accumulation
        how += (f"; Accelerator(gradient_accumulation_steps={job.accumulation}) and `with accelerator.accumulate(model):` "
                f"around each step (global batch {job.global_batch})")
    job.by_hand("batch_size", "the Accelerate config has no batch size: your script builds the DataLoader", how)


ACC_LOADER = "the Accelerate config has no DataLoader arguments: your script builds the DataLoader"


def _acc_threads(job: Job, value: Any) -> None:
    # Always said: unless told, `accelerate launch` sets OMP_NUM_THREADS itself (1, or the physical cores on a CPU).
    job.by_hand("threads", "the Accelerate config has no thread count, and accelerate launch picks one of its own",
                f"accelerate launch --num_cpu_threads_per_process {value} (sets OMP_NUM_THREADS), or torch.set_num_threads({value})")


ACCELERATE: dict[str, Handler] = {
    "precision": _acc_precision,
    "compile": _acc_compile,
    "memory_format": _manual("memory_format"),
    "batch_size": _acc_batch,
    "num_workers": _manual("num_workers", ACC_LOADER),
    "prefetch_factor": _manual("prefetch_factor", ACC_LOADER, needs_workers=True),
    "persistent_workers": _manual("persistent_workers", ACC_LOADER, needs_workers=True),
    "pin_memory": _manual("pin_memory", ACC_LOADER),
    "activation_checkpointing": _manual("activation_checkpointing", train_only=True),
    "cudnn_benchmark": _manual("cudnn_benchmark"),
    "optimizer_impl": _manual("optimizer_impl", "your script builds the optimizer", train_only=True),
    "threads": _acc_threads,
    "cuda_allocator": _manual("cuda_allocator"),
}


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


# ---------------------------------------------------------------- json (autotune's own format)

JSON: dict[str, Handler] = {name: _arg(name) for name in knobs.NAMES}  # autotune.load_config applies every knob

HANDLERS: dict[str, dict[str, Handler]] = {"json": JSON, "hf-trainer": HF, "lightning": LIGHTNING, "accelerate": ACCELERATE}
SETUP: dict[str, Callable[[Job], None]] = {"hf-trainer": _hf_device, "lightning": _pl_device, "accelerate": _acc_device}


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
    return Job(fmt, {**defaults, **given}, defaults, task, device, doc.get("global_batch"))


def render(doc: Mapping[str, Any], fmt: str) -> dict[str, Any]:
    """The framework's arguments for an exported configuration, and what must be done by hand."""
    check_format(fmt)
    job = _job(doc, fmt)
    if fmt in SETUP:
        SETUP[fmt](job)
    table = HANDLERS[fmt]
    for name in knobs.NAMES:
        handler = table.get(name)
        if handler is not None:
            handler(job, job.values[name])
        elif not job.is_default(name):  # a knob no table knows yet is never dropped silently
            job.by_hand(name, f"autotune has no {fmt} mapping for this knob yet")
    study = doc.get("study") or {}
    package = PACKAGES[fmt]
    return {
        "format": fmt,
        "framework": {"package": package, "version": _version(package)},
        "arguments": job.arguments,
        **job.extra,
        "not_expressible": job.manual,
        "source": {"study": study.get("name"), "trial": study.get("trial"), "storage": study.get("storage"),
                   "pick": doc.get("pick"), "exported_at": doc.get("exported_at")},
        "knobs": job.values,
        "task": job.task,
        "device": job.device,
        "global_batch": job.global_batch,
        "speedup": doc.get("speedup"),
    }


def _header(out: Mapping[str, Any]) -> list[str]:
    src = out["source"]
    where = f"study {src['study']!r}, trial {src['trial']}" if src["study"] else "an autotune configuration"
    pick = f" (pick {src['pick']})" if src["pick"] else ""
    fw = out["framework"]
    target = f"{fw['package']} {fw['version']}" if fw["version"] else f"{fw['package']} (not installed here)"
    return [f"# autotune export for {target}: {where}{pick}, measured on {out['device']} ({out['task']})"]


def _manual_lines(out: Mapping[str, Any], where: str) -> list[str]:
    if not out["not_expressible"]:
        return []
    lines = ["", f"# Not expressible in {where}; do these by hand:"]
    for item in out["not_expressible"]:
        lines.append(f"# - {item['knob']}={item['value']}: {item['why']}")
        lines.append(f"#     {item['how']}")
    return lines


def _call(target: str, func: str, kwargs: Mapping[str, Any], first: str | None = None) -> list[str]:
    body = ([f"    {first}"] if first else []) + [f"    {k}={v!r}," for k, v in kwargs.items()]
    return [f"{target} = {func}(", *body, ")"]


def text(doc: Mapping[str, Any], fmt: str) -> str:
    """The rendering as a file: the JSON document, a Python snippet, or Accelerate's YAML."""
    check_format(fmt)
    if fmt == "json":
        _job(doc, fmt)  # validated like the others
        return json.dumps(doc, indent=2, default=str) + "\n"
    out = render(doc, fmt)
    lines = _header(out)
    if fmt == "hf-trainer":
        lines += ["from transformers import TrainingArguments", ""]
        lines += _call("training_args", "TrainingArguments", out["arguments"], 'output_dir="autotune-trainer",  # yours')
        lines += _manual_lines(out, "TrainingArguments")
    elif fmt == "lightning":
        lines += ["import lightning", ""] + _call("trainer", "lightning.Trainer", out["arguments"]["trainer"])
        lines += ["dataloader_kwargs = " + repr(out["arguments"]["dataloader"])]
        lines += ["# train_loader = torch.utils.data.DataLoader(train_dataset, **dataloader_kwargs)"]
        lines += _manual_lines(out, "the Trainer or DataLoader arguments")
    else:
        import yaml  # PyYAML comes with Optuna

        kwargs = ", ".join(f"{k}={v!r}" for k, v in out["accelerator"].items())
        threads = out["knobs"]["threads"]
        lines += [f"# accelerate launch --config_file THIS_FILE --num_cpu_threads_per_process {threads} train.py",
                  f"# in train.py: accelerator = Accelerator({kwargs})"]
        lines += _manual_lines(out, "the Accelerate config") + [""]
        return "\n".join(lines) + yaml.safe_dump(out["arguments"], sort_keys=False, default_flow_style=False)
    return "\n".join(lines) + "\n"
