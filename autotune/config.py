"""Exported configurations: pick a point of a study's front, write it as JSON, and apply it in a user's script.

``autotune export STUDY -o best.json`` (``--pick recommended``, the default) writes a versioned JSON
document (knob values, measured figures with spread, speed-up over the baseline,
workload spec, fingerprint, study and trial). In a training script::

    import autotune
    cfg = autotune.load_config("best.json")        # warns when hardware/software differ
    model, loader, step = cfg.apply(model, dataset, optimizer)
    for batch in loader:
        loss = step(batch)

``apply`` goes through the same :class:`~autotune.plan.Plan` as the trial worker,
so what runs is what was measured: environment and backend flags, model transforms
(device, channels-last, activation checkpointing, compile), the optimizer's
implementation, DataLoader arguments, autocast/GradScaler and gradient accumulation.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import optuna
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from autotune import __version__, hardware, knobs
from autotune.evidence import Evidence
from autotune.errors import ConfigError, StudyError
from autotune.plan import Plan, Stepper
from autotune.request import DEFAULT_PICK, PICKS

SCHEMA = "autotune.config/2"  # /2: speedup became a claim with its interval
SCHEMAS = ("autotune.config/1", SCHEMA)  # what load_config reads


class HardwareMismatchWarning(UserWarning):
    """The configuration was measured on other hardware or software than this."""


# ---------------------------------------------------------------- export


def pick_trial(study: optuna.Study, pick: str, max_memory_bytes: int | None = None) -> tuple[optuna.trial.FrozenTrial, str]:
    """A configuration to export, and what it is (the line an export records as ``pick_note``).

    ``recommended`` is the verdict's winner (:meth:`Evidence.verdict`: raced through the noise,
    the simplest among the tied), or the defaults when nothing beats them beyond the noise.
    ``fastest`` is the fastest-looking point of the front: where it is not the recommendation it
    is labelled so, with the verdict (never presented as a gain the evidence does not support).
    ``smallest`` and ``balanced`` pick on the front by memory.
    """
    if pick not in PICKS:
        raise StudyError(f"--pick {pick!r}: expected one of {', '.join(PICKS)}")
    ev = Evidence.of(study) if max_memory_bytes is None else Evidence(study.get_trials(deepcopy=False), study.user_attrs, max_memory_bytes)
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    candidates = [ev.configs[n] for n in ev.front()]
    if not candidates:
        raise StudyError(_nothing_to_export(study, ev, max_memory_bytes))
    verdict = ev.verdict()
    recommended = ev.recommended()
    if pick == "recommended":
        if recommended is None or not ev.configs[recommended].feasible:
            raise StudyError(f"{verdict.text}; and the defaults themselves do not fit the memory budget: export --pick "
                             "smallest, or one of the front's configurations")
        if verdict.state == "gain":
            return trials[recommended], f"recommended: {verdict.text}"
        return trials[recommended], f"recommended: the defaults, because {verdict.text}"
    if pick == "fastest":
        chosen = max(candidates, key=lambda c: c.samples_per_s).number
    elif pick == "smallest":
        chosen = min(candidates, key=lambda c: (c.peak_memory_bytes, -c.samples_per_s)).number
    else:
        chosen = _balanced(candidates)
    s = ev.speedup(chosen)
    figure = f"{s.text()} the defaults" if s is not None else "no speed-up measured"
    if chosen == recommended:
        return trials[chosen], f"{pick}, and recommended: {verdict.text}"
    return trials[chosen], (f"{pick}: #{chosen} at {figure}, not the recommendation (#{recommended}); the verdict: "
                            f"{verdict.text}")


def _balanced(candidates: list[Any]) -> int:
    t_lo, t_hi = min(c.samples_per_s for c in candidates), max(c.samples_per_s for c in candidates)
    m_lo, m_hi = min(c.peak_memory_bytes for c in candidates), max(c.peak_memory_bytes for c in candidates)

    def distance(c: Any) -> float:
        speed_gap = (t_hi - c.samples_per_s) / (t_hi - t_lo) if t_hi > t_lo else 0.0
        mem_gap = (c.peak_memory_bytes - m_lo) / (m_hi - m_lo) if m_hi > m_lo else 0.0
        return speed_gap**2 + mem_gap**2

    return min(candidates, key=distance).number


def _nothing_to_export(study: optuna.Study, ev: Evidence, max_memory_bytes: int | None) -> str:
    """Why the front is empty: no trial succeeded, or those that did are over a memory budget (whose)."""
    from autotune.units import format_bytes

    ok = [c for c in ev.configs.values() if c.peak_memory_bytes is not None]
    name = study.study_name
    if not ok:
        return f"study {name!r} has no successful trial to export; run more trials first"
    smallest = format_bytes(min(c.peak_memory_bytes for c in ok))
    if max_memory_bytes is not None:
        return (f"study {name!r}: none of its {len(ok)} successful trials fits in --max-memory {format_bytes(max_memory_bytes)} "
                f"(the smallest peaked at {smallest}); export with a larger --max-memory")
    budget = study.user_attrs.get("max_memory_bytes")
    return (f"study {name!r}: all {len(ok)} successful trials are over the study's memory budget "
            f"{format_bytes(budget) if budget else ''} (the smallest peaked at {smallest}); "
            "start a new study with a larger --max-memory").replace("budget  (", "budget (")


def export(
    study: optuna.Study,
    pick: str = DEFAULT_PICK,
    max_memory_bytes: int | None = None,
    storage_url: str | None = None,
) -> dict[str, Any]:
    """The exported document of a picked configuration, with the study's figures for it (see module docstring)."""
    trial, note = pick_trial(study, pick, max_memory_bytes)
    ev = Evidence.of(study)
    res = trial.user_attrs.get("result", {})
    c = ev.configs[trial.number]
    base = ev.baseline
    speedup = ev.speedup(trial.number)
    attrs = study.user_attrs
    return {
        "schema": SCHEMA,
        "autotune_version": __version__,
        "exported_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "pick": pick,
        "pick_note": note,
        "knobs": trial.user_attrs["config"],
        "not_applicable": trial.user_attrs.get("not_applicable", {}),
        "measured": {
            "samples_per_s": c.samples_per_s,
            "processes": c.processes,
            "measurements_samples_per_s": [v for _, v in c.claim],
            "within_process_measurements": len(c.together),  # processes that measured it alongside the defaults
            "first_measurement_samples_per_s": trial.values[0],
            "samples_per_s_cv_within_process": res.get("samples_per_s_cv"),
            "peak_memory_bytes": int(trial.values[1]),
            "time_to_first_step_s": res.get("time_to_first_step_s"),
            "step_time_s": res.get("step_time_s"),
            "samples_per_step": res.get("samples_per_step"),
            "mfu": res.get("mfu"),
        },
        "baseline": {
            "trial": base.number if base else None,
            "samples_per_s": base.samples_per_s if base else None,
            "processes": base.processes if base else None,
            "peak_memory_bytes": base.peak_memory_bytes if base else None,
        },
        "speedup": speedup.to_dict() if speedup else None,
        "noise": ev.noise.to_dict(),
        "within_process_noise": ev.within_noise.to_dict(),
        "load": ev.load.to_dict(),
        "verdict": ev.verdict().to_dict(),
        # what each knob bought, from the defaults, when this is the configuration the path led to (or its winner)
        "ablation": ab.to_dict() if (ab := ev.ablation()) is not None and trial.number in (ab.winner, ab.minimal) else None,
        "workload": attrs.get("workload"),
        "device": attrs.get("device"),
        "global_batch": attrs.get("global_batch"),
        "task": (attrs.get("context") or {}).get("task", "train"),
        "context": attrs.get("context"),
        "fingerprint": attrs.get("fingerprint"),
        "study": {"name": study.study_name, "storage": storage_url, "trial": trial.number},
    }


def check_output(path: str | Path) -> Path:
    """Where an export will be written: refused in one line when it is a folder (or under a file)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"-o {path}: is a folder; name a file, e.g. {path / 'best.json'}")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise ConfigError(f"-o {path}: {parent} is a file, not a folder")
    return path


def write_text(text: str, path: str | Path) -> Path:
    """Write ``text`` whole or not at all (a temporary file beside it, then renamed); one line on failure,
    and no temporary file left behind."""
    path = check_output(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def write(doc: Mapping[str, Any], path: str | Path) -> Path:
    """Write an exported document as JSON (:func:`write_text`)."""
    return write_text(json.dumps(doc, indent=2, default=str) + "\n", path)


# ---------------------------------------------------------------- load and apply


@dataclass
class Applied:
    """What :meth:`Config.apply` returns; unpacks as ``model, loader, step``."""

    model: nn.Module
    loader: DataLoader | None
    step: Callable[[Any], torch.Tensor]
    optimizer: torch.optim.Optimizer | None

    def __iter__(self):  # model, loader, step = cfg.apply(...)
        return iter((self.model, self.loader, self.step))


@dataclass
class TrainStep:
    """One call per batch from the loader: copy to the device, forward and backward under the
    configured precision, and the optimizer step every ``accumulation`` batches."""

    plan: Plan
    stepper: Stepper
    calls: int = 0

    def __call__(self, batch: Any) -> torch.Tensor:
        loss = self.stepper.micro(self.plan.to_device(batch))
        self.calls += 1
        if self.calls % self.plan.accumulation == 0:
            self.stepper.finish()
        return loss


@dataclass
class InferStep:
    plan: Plan
    stepper: Stepper

    def __call__(self, batch: Any) -> torch.Tensor:
        return self.stepper.infer([self.plan.to_device(batch)])


@dataclass
class Config:
    """A loaded configuration: the knob values and where they were measured."""

    knobs: dict[str, Any]
    task: str = "train"
    device: str = "cpu"
    global_batch: int | None = None
    doc: dict[str, Any] = field(default_factory=dict)

    def plan(self, device: str | torch.device | None = None) -> Plan:
        return Plan.from_config(self.knobs, device or self.device, self.task, self.global_batch)

    def apply(
        self,
        model: nn.Module,
        dataset: Dataset | None = None,
        optimizer: torch.optim.Optimizer | Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer] | None = None,
        *,
        loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        device: str | torch.device | None = None,
        shuffle: bool = False,
        **loader_kwargs: Any,
    ) -> Applied:
        """Apply every knob to your model, dataset and optimizer.

        ``optimizer`` is an optimizer built on ``model``'s parameters (kept, or rebuilt with
        the same hyperparameters when the configuration picks foreach/fused kernels) or a
        factory ``params -> optimizer`` (default AdamW). Returns ``(model, loader, step)``
        where ``step(batch)`` runs one training (or inference) step on a loader batch and
        returns the loss (or the output).
        """
        plan = self.plan(device)
        _apply_process(plan)
        model = plan.prepare_model(model)
        opt = plan.build_optimizer(model, optimizer) if plan.task == "train" else None
        loader = plan.make_loader(dataset, collate_fn, shuffle=shuffle, **loader_kwargs) if dataset is not None else None
        stepper = plan.stepper(model, opt, loss_fn)
        step: Callable[[Any], torch.Tensor] = TrainStep(plan, stepper) if plan.task == "train" else InferStep(plan, stepper)
        return Applied(model, loader, step, opt)


def _apply_process(plan: Plan) -> None:
    """Process-level knobs in a process that may already have started CUDA."""
    wanted = plan.environment().get("PYTORCH_CUDA_ALLOC_CONF")
    if wanted and torch.cuda.is_available() and torch.cuda.is_initialized():
        try:
            torch.cuda.memory._set_allocator_settings(wanted)
        except Exception:  # noqa: BLE001
            warnings.warn(
                f"CUDA started before the configuration was applied: set PYTORCH_CUDA_ALLOC_CONF={wanted} "
                "in the environment before starting Python",
                HardwareMismatchWarning,
                stacklevel=3,
            )
    plan.apply_process()


def load_config(path: str | Path, device: str | None = None, check_hardware: bool = True) -> Config:
    """Read an exported configuration; warns (HardwareMismatchWarning) when this machine differs."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") not in SCHEMAS:
        raise ConfigError(f"{path}: not an autotune configuration (expected schema {SCHEMA!r}, found {doc.get('schema') if isinstance(doc, dict) else None!r})")
    try:
        values = knobs.validate_config(doc["knobs"])
    except (KeyError, knobs.KnobError) as exc:
        raise ConfigError(f"{path}: bad knob values: {exc}") from None
    target = device or doc.get("device") or "cpu"
    if torch.device(target).type == "cuda" and not torch.cuda.is_available():
        warnings.warn(f"{path} was measured on {target}, but this machine has no CUDA device: using the CPU", HardwareMismatchWarning, stacklevel=2)
        target = "cpu"
    if check_hardware and doc.get("fingerprint"):
        diffs = hardware.differences(doc["fingerprint"], hardware.fingerprint(target))
        if diffs:
            warnings.warn(
                f"{path} was measured on other hardware/software; its figures may not hold here: " + "; ".join(diffs),
                HardwareMismatchWarning,
                stacklevel=2,
            )
    stored_ctx = doc.get("context") or {"device_type": "cpu", "task": doc.get("task", "train")}
    ctx = knobs.Context.from_dict({**stored_ctx, "device_type": torch.device(target).type})
    resolved = knobs.resolve(values, ctx)  # CUDA-only values fall back on a CPU
    return Config(knobs=resolved.config, task=doc.get("task", "train"), device=target, global_batch=doc.get("global_batch"), doc=doc)
