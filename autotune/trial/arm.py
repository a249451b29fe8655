"""What every measurement in a trial process is built of: the process started for a configuration, one
configuration built as an :class:`Arm`, and how a failure becomes a record.

Why a module of its own: a trial (:mod:`autotune.trial.measure_one`) builds one arm and a paired
measurement (:mod:`autotune.trial.paired`) builds several in one process; both start the
process the same way, read the workload's context the same way and turn an exception
into the same error record. Here, below both, neither imports the other, and the child's
entry (:mod:`autotune.trial.child`) imports both.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch
from torch.utils.data.distributed import DistributedSampler

from autotune import knobs
from autotune.machine import hardware
from autotune.machine import heap, load, preload
from autotune import files
from autotune import result as R
from autotune.errors import AutotuneError
from autotune.trial import launch
from autotune.trial.plan import Plan, infinite, optimizer_params
from autotune.trial.protocol import StepLoop
from autotune.workloads.specs import build
from autotune.workloads.contract import Workload, WorkloadSpec, default_optimizer, input_rank

OOM_MESSAGES = ("out of memory", "can't allocate memory", "cannot allocate memory", "not enough memory")


def is_oom(exc: BaseException) -> bool:
    """OOM by exception type first (CUDA/CPU allocator, MemoryError), by message only as a fallback."""
    seen: set[int] = set()
    current: BaseException | None = exc
    types = hardware.oom_types()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, types):
            return True
        if isinstance(current, RuntimeError) and any(m in str(current).lower() for m in OOM_MESSAGES):
            return True
        current = current.__cause__ or current.__context__
    return False


def error_record(exc: BaseException, user: bool = False) -> dict[str, Any]:
    """An exception as a result's ``error``: its type, first line, the traceback's end, and whether it is the
    user's to fix (an :class:`~autotune.errors.AutotuneError`: a bad spec, a factory that failed)."""
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return {
        "type": type(exc).__name__,
        "message": str(exc).strip().splitlines()[0][:2000] if str(exc).strip() else type(exc).__name__,
        "traceback": "".join(tb)[-4000:],
        "user": user,
        # the message as raised, its terms (autotune.errors.named) kept for the caller's edge to word: the API's differ
        **({"said": exc.said.strip().splitlines()[0]} if isinstance(exc, AutotuneError) and exc.said != str(exc)
           else {}),
    }


def ended(exc: BaseException) -> tuple[str, dict[str, Any]]:
    """The outcome and the error record of an exception that ended a measurement in a trial process: the user's
    (an :class:`~autotune.errors.AutotuneError`), out of memory, or any other error. Ctrl-C is raised again."""
    if isinstance(exc, KeyboardInterrupt):
        raise exc
    if isinstance(exc, AutotuneError):
        return R.ERROR, error_record(exc, user=True)
    return (R.OOM if is_oom(exc) else R.ERROR), error_record(exc)


def context_for(workload: Workload, device: torch.device, cpus: int | None = None) -> knobs.Context:
    """What decides which knobs apply to this workload on this device; ``cpus``: the CPUs its process was started
    bound to (OpenMP's binding has bound this thread to the first of them: its own affinity says 1), if any."""
    opt_params: frozenset[str] = frozenset()
    if workload.task == "train":
        params = [p for p in workload.model.parameters() if p.requires_grad]
        factory = workload.optimizer
        if params:
            opt_params = optimizer_params((factory or default_optimizer)(params))
    compile_ok = True
    try:
        compile_ok = bool(torch._dynamo.is_dynamo_supported())
    except Exception:  # pragma: no cover - platforms without dynamo
        compile_ok = False
    return knobs.Context(
        cpu_count=cpus or load.cpu_count(),
        device_type=device.type,
        task=workload.task,
        input_rank=input_rank(workload.example),
        torch_version=tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]),  # type: ignore[arg-type]
        optimizer_params=opt_params,
        compile_supported=compile_ok,
        cpu_bf16=hardware.native_bf16(),
        glibc=heap.available(),
        devices=torch.cuda.device_count() if device.type == "cuda" else 1,
        libraries=preload.found(),
        backends=distributed_backends(),
    )


def distributed_backends() -> tuple[str, ...]:
    """torch.distributed's backends this PyTorch build has, of those several ranks train with (gloo, NCCL)."""
    import torch.distributed as dist

    if not dist.is_available():
        return ()
    return tuple(name for name, present in (("gloo", dist.is_gloo_available()), ("nccl", dist.is_nccl_available()))
                 if present)


def environment(requested: Mapping[str, Any], device: torch.device) -> dict[str, str]:
    """The variables the environment-level knobs of ``requested`` set on this device."""
    env_plan = Plan({k: v for k, v in requested.items() if knobs.KNOBS[k].stage == knobs.ENV}, device, "train")
    if device.type != "cuda":
        env_plan.config = {k: v for k, v in env_plan.config.items() if not knobs.KNOBS[k].not_applicable(
            v, knobs.Context(device_type=device.type), env_plan.config)}
    return env_plan.environment()


def start_process(requested: Mapping[str, Any], device: torch.device, bound_cpus: tuple[int, ...] = ()
                  ) -> dict[str, Any]:
    """Environment-level knobs first, before the workload (or CUDA) can read them; then the device. Returns the proof
    that what only a process's start can set (a preloaded library, bound cores: ``bound_cpus``) is in force, for the
    result's notes (:func:`autotune.trial.launch.prove`, which raises where it is not)."""
    proof = launch.prove(requested, device.type, tuple(bound_cpus))
    os.environ.update(environment(requested, device))
    if device.type == "cuda":
        device = cuda_device(device)
        torch.cuda.set_device(device)
        torch.cuda.reset_peak_memory_stats(device)
    return proof


def cuda_device(device: torch.device) -> torch.device:
    """A CUDA device with its index: ``cuda`` is ``cuda:0`` (``torch.cuda.set_device`` refuses a device without one)."""
    return device if device.index is not None else torch.device("cuda", 0)


@dataclass
class Arm:
    """One configuration built and ready to step: its own workload (model, optimizer, DataLoader, step) from the
    factory, with the configuration resolved where it runs. A trial builds one; a paired measurement
    (:mod:`autotune.trial.paired`) builds one per configuration it measures alternately."""

    plan: Plan
    resolved: knobs.Resolved
    workload: Workload
    loop: StepLoop
    eager: Any  # the step on the uncompiled model (FLOPs are counted on it)
    eager_model: Any
    optimizer: Any

    @classmethod
    def build(cls, spec: WorkloadSpec, requested: dict[str, Any], device: torch.device, global_batch: int | None,
              on_resolved: Callable[[knobs.Resolved], Any] | None = None, process: bool = True,
              distributed: bool = False, cpus: int | None = None) -> Arm:
        """Build the workload and apply the configuration (``process``: its process-wide part too, threads and
        backend flags, before the model is built; the environment is the caller's, set before anything starts).
        ``distributed``: this process is one rank of a process group it has joined (:mod:`autotune.trial.ranks`):
        the model is wrapped in DistributedDataParallel (before it is compiled) and the loader reads this rank's
        shard of the dataset.
        ``requested`` gains the workload's own batch size when it fixes one; ``on_resolved(resolved)`` is told
        the configuration before anything can fail on it; ``cpus``: as :func:`context_for`'s."""
        workload = build(spec)
        if workload.batch_size and knobs.BATCH_KNOB not in requested:
            requested[knobs.BATCH_KNOB] = workload.batch_size
        resolved = knobs.resolve(requested, context_for(workload, device, cpus))
        if on_resolved is not None:
            on_resolved(resolved)
        plan = Plan.from_config(resolved.config, device, workload.task, global_batch)
        if process:
            plan.apply_process()
        model = plan.prepare_model(workload.model, compile=False)
        if distributed:
            model = plan.distribute(model)
        eager_model = model
        model = plan.compile_model(model)
        optimizer = plan.build_optimizer(model, workload.optimizer)
        shard = {"sampler": DistributedSampler(workload.dataset, shuffle=False, drop_last=True)} if distributed else {}
        loader = plan.make_loader(workload.dataset, workload.collate_fn, **shard)  # type: ignore[arg-type]
        stepper = plan.stepper(model, optimizer, workload.loss_fn)
        eager = stepper if eager_model is model else plan.stepper(eager_model, optimizer, workload.loss_fn)
        eager.scaler = stepper.scaler
        return cls(plan, resolved, workload, StepLoop(plan, stepper, infinite(loader)), eager, eager_model, optimizer)


    def state(self) -> dict[str, Any]:
        """What this configuration is in force as, read from the process and the arm's own objects: the evidence
        that each knob was applied, not the configuration's echo. Process-wide state (threads, backend flags,
        autocast outside the step) and what the arm's objects were made into (its weights' layout, its optimizer's
        kernels, its step's autocast and scaler, the batches the step got, the allocator's segments)."""
        plan = self.plan
        try:
            autocast = bool(torch.is_autocast_enabled(plan.device.type))
        except TypeError:  # pragma: no cover - torch < 2.4
            autocast = bool(torch.is_autocast_enabled())
        with plan.autocast():  # what the arm's own step runs under
            try:
                inside = (torch.get_autocast_dtype(plan.device.type) if torch.is_autocast_enabled(plan.device.type)
                          else None)
            except (AttributeError, TypeError):  # pragma: no cover - torch < 2.4
                inside = None
        four_d = [p for p in self.eager_model.parameters() if p.dim() == 4]
        optimizer: dict[str, Any] = {}
        if self.optimizer is not None:
            group = self.optimizer.param_groups[0]
            optimizer = {"class": type(self.optimizer).__name__,
                         **{k: group[k] for k in sorted(group) if k in ("foreach", "fused")}}
        scaler = self.loop.stepper.scaler
        out: dict[str, Any] = {
            "intra_op_threads": torch.get_num_threads(),
            "flags": plan.flag_values(),
            "autocast": autocast,  # outside the step: nothing an arm's step turns on may stay on
            "step_autocast": str(inside) if inside is not None else None,
            "grad_enabled": torch.is_grad_enabled(),
            "default_dtype": str(torch.get_default_dtype()),
            "channels_last_weights": sum(1 for p in four_d if p.is_contiguous(memory_format=torch.channels_last)
                                         and not p.is_contiguous()),
            "optimizer": optimizer,
            "samples_per_batch": plan.batch_size,
            "batch_samples": self.loop.batch_samples,  # as the step received them (None before the first step)
            "pinned_batches": self.loop.pinned_batches,
            "scaler": scaler is not None,
            "scale": float(scaler.get_scale()) if scaler is not None and scaler.is_enabled() else None,
            "checkpointed_blocks": int(plan.notes.get("checkpointed_blocks", 0)),
            "compiled": type(self.loop.stepper.model).__name__ == "OptimizedModule",
        }
        if plan.device.type == "cuda":
            segments = torch.cuda.memory_snapshot()
            out["allocator_segments"] = len(segments)
            out["expandable_segments"] = sum(1 for seg in segments if seg.get("is_expandable"))
        return out


def write_atomic(path: str, text: str) -> None:
    """Write a file the parent reads (a result, the progress) so that it never sees half of it."""
    files.write_atomic(path, text)
