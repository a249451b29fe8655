"""The trial worker: runs in a process of its own, applies one configuration, measures it, returns one result.

It never talks to a database. :func:`child_main` is the entry point the runner
forks into (it makes the process a group leader, sends its output to a file and
writes the result as JSON); :func:`run` does the work and turns every way a trial
can end into a typed :class:`~autotune.result.TrialResult`. ``python -m
autotune.worker REQUEST.json`` runs one trial in this interpreter and prints the
result, for debugging.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from autotune import hardware, heap, knobs, load
from autotune import result as R
from autotune.errors import AutotuneError
from autotune.protocol import MemoryMonitor, cv, NonFinite, Settings, StepLoop, check_parameters, run_protocol
from autotune.plan import NotApplicableAtRuntime, Plan, infinite, optimizer_params
from autotune.specs import build
from autotune.workload import Workload, WorkloadSpec, default_optimizer, input_rank

OOM_MESSAGES = ("out of memory", "can't allocate memory", "cannot allocate memory", "not enough memory")


def is_oom(exc: BaseException) -> bool:
    """OOM by exception type first (CUDA/CPU allocator, MemoryError), by message only as a fallback."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (torch.OutOfMemoryError, MemoryError)):
            return True
        if isinstance(current, RuntimeError) and any(m in str(current).lower() for m in OOM_MESSAGES):
            return True
        current = current.__cause__ or current.__context__
    return False


def _error(exc: BaseException, user: bool = False) -> dict[str, Any]:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return {
        "type": type(exc).__name__,
        "message": str(exc).strip().splitlines()[0][:2000] if str(exc).strip() else type(exc).__name__,
        "traceback": "".join(tb)[-4000:],
        "user": user,
    }


def context_for(workload: Workload, device: torch.device) -> knobs.Context:
    """What decides which knobs apply to this workload on this device."""
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
        device_type=device.type,
        task=workload.task,
        input_rank=input_rank(workload.example),
        torch_version=tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]),  # type: ignore[arg-type]
        optimizer_params=opt_params,
        compile_supported=compile_ok,
        cpu_bf16=hardware.native_bf16(),
        glibc=heap.available(),
    )


def probe(spec: WorkloadSpec, device: str) -> dict[str, Any]:
    """Build the workload once and report what decides knob applicability, plus the fingerprint."""
    workload = build(spec)
    dev = torch.device(device)
    ctx = context_for(workload, dev)
    return {
        "context": ctx.to_dict(),
        "fingerprint": hardware.fingerprint(device),
        "workload": {
            "task": workload.task,
            knobs.BATCH_KNOB: workload.batch_size,
            "model": type(workload.model).__name__,
            "parameters": sum(p.numel() for p in workload.model.parameters()),
            "dataset_len": len(workload.dataset) if workload.dataset is not None else None,  # type: ignore[arg-type]
        },
    }


def start_process(requested: Mapping[str, Any], device: torch.device) -> None:
    """Environment-level knobs first, before the workload (or CUDA) can read them; then the device."""
    env_plan = Plan({k: v for k, v in requested.items() if knobs.KNOBS[k].stage == knobs.ENV}, device, "train")
    if device.type != "cuda":
        env_plan.config = {k: v for k, v in env_plan.config.items() if not knobs.KNOBS[k].not_applicable(
            v, knobs.Context(device_type=device.type), env_plan.config)}
    os.environ.update(env_plan.environment())
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.cuda.reset_peak_memory_stats(device)


@dataclass
class Arm:
    """One configuration built and ready to step: its own workload (model, optimizer, DataLoader, step) from the
    factory, with the configuration resolved where it runs. A trial builds one; a paired measurement
    (:mod:`autotune.paired`) builds one per configuration it measures alternately."""

    plan: Plan
    resolved: knobs.Resolved
    workload: Workload
    loop: StepLoop
    eager: Any  # the step on the uncompiled model (FLOPs are counted on it)
    eager_model: Any
    optimizer: Any

    @classmethod
    def build(cls, spec: WorkloadSpec, requested: dict[str, Any], device: torch.device, global_batch: int | None,
              on_resolved: Any = None, process: bool = True) -> Arm:
        """Build the workload and apply the configuration (``process``: its process-wide part too, threads and
        backend flags, before the model is built; the environment is the caller's, set before anything starts).
        ``requested`` gains the workload's own batch size when it fixes one; ``on_resolved(resolved)`` is told
        the configuration before anything can fail on it."""
        workload = build(spec)
        if workload.batch_size and knobs.BATCH_KNOB not in requested:
            requested[knobs.BATCH_KNOB] = workload.batch_size
        resolved = knobs.resolve(requested, context_for(workload, device))
        if on_resolved is not None:
            on_resolved(resolved)
        plan = Plan.from_config(resolved.config, device, workload.task, global_batch)
        if process:
            plan.apply_process()
        model = plan.prepare_model(workload.model, compile=False)
        eager_model = model
        model = plan.compile_model(model)
        optimizer = plan.build_optimizer(model, workload.optimizer)
        loader = plan.make_loader(workload.dataset, workload.collate_fn)  # type: ignore[arg-type]
        stepper = plan.stepper(model, optimizer, workload.loss_fn)
        eager = stepper if eager_model is model else plan.stepper(eager_model, optimizer, workload.loss_fn)
        eager.scaler = stepper.scaler
        return cls(plan, resolved, workload, StepLoop(plan, stepper, infinite(loader)), eager, eager_model, optimizer)


def run(request: Mapping[str, Any]) -> R.TrialResult:
    """Measure one configuration. Never raises: every ending is a TrialResult."""
    start = time.perf_counter()
    spec = WorkloadSpec.from_dict(request["spec"])
    device = torch.device(request.get("device", "cpu"))
    settings = Settings(**request.get("settings", {}))
    requested = dict(request.get("config", {}))
    monitor = MemoryMonitor().start(
        watch_children=knobs.starts_processes(requested)
    )
    result = R.TrialResult(outcome=R.ERROR, config=requested, device=str(device), notes={"pid": os.getpid()})
    progress = ProgressFile(request.get("progress_path"), start)
    try:
        start_process(requested, device)

        arm = Arm.build(spec, requested, device, request.get("global_batch"),
                        on_resolved=lambda r: (setattr(result, "config", r.config),
                                               setattr(result, "not_applicable", dict(r.not_applicable))))
        plan, loop, eager, eager_model = arm.plan, arm.loop, arm.eager, arm.eager_model
        peak: dict[str, int] = {}

        def memory_checkpoint() -> None:
            monitor.sample()  # DataLoader workers are alive now; the periodic samples may have missed their peak
            if device.type == "cuda":
                peak["reserved"] = torch.cuda.max_memory_reserved(device)
                peak["allocated"] = torch.cuda.max_memory_allocated(device)

        dominators = [(float(t), float(mem)) for t, mem in request.get("dominators") or []]
        margin = float(request.get("cut_margin") or settings.cut_margin)  # the study's, never below its noise

        def dominated(median_so_far: float) -> bool:
            """A front point at least ``margin`` faster that needs no more memory than this trial already has."""
            if device.type == "cuda":
                used = float(torch.cuda.max_memory_reserved(device))
            else:
                used = float(monitor.peak_so_far())
            return any(t >= median_so_far * (1 + margin) and mem <= used for t, mem in dominators)

        progress.loop = loop
        meter = load.Meter().start()
        m = run_protocol(
            loop, settings, eager=eager, on_memory_checkpoint=memory_checkpoint, dominated=dominated if dominators else None
        )
        result.load = meter.stop()
        if device.type == "cuda":
            result.load["gpu_other_processes"] = load.gpu_others(device)
        if plan.task == "train":
            check_parameters(eager_model)
        samples = plan.samples_per_step
        result.outcome = R.OK
        result.samples_per_s = m.samples_per_s
        result.samples_per_s_cv = cv(m.window_samples_per_s)
        result.window_samples_per_s = m.window_samples_per_s
        result.step_time_s = samples / m.samples_per_s
        result.samples_per_step = samples
        result.time_to_first_step_s = m.time_to_first_step_s
        result.warmup_steps = m.warmup_steps
        result.timed_steps = m.window_steps * len(m.window_samples_per_s)
        result.profile = m.profile
        result.phases_s = m.phases_s
        result.notes.update(plan.notes)
        if m.cut_short:
            result.notes["cut_short"] = True
        if m.cut_in_warmup:
            result.notes["cut_in_warmup"] = True
        result.notes["accumulation"] = plan.accumulation
        if m.flops_per_step:
            result.flops_per_sample = m.flops_per_step / samples
            result.achieved_flops = result.flops_per_sample * m.samples_per_s
            name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
            peak_flops = hardware.peak_flops(name, plan.precision)
            result.mfu = result.achieved_flops / peak_flops if peak_flops else None
        if device.type == "cuda":
            result.memory = {"peak_reserved_bytes": peak["reserved"], "peak_allocated_bytes": peak["allocated"]}
            result.peak_memory_bytes = peak["reserved"]
        del loop, eager, eager_model, arm
    except NotApplicableAtRuntime as exc:
        result.outcome = R.NOT_APPLICABLE
        result.not_applicable[exc.knob] = exc.reason
        result.error = {"type": "NotApplicable", "message": str(exc), "user": False}
    except AutotuneError as exc:
        result.outcome = R.ERROR
        result.error = _error(exc, user=True)
    except NonFinite as exc:
        result.outcome = R.NAN
        result.error = _error(exc)
    except BaseException as exc:  # noqa: BLE001 - everything the model does becomes a result
        if isinstance(exc, KeyboardInterrupt):
            raise
        result.outcome = R.OOM if is_oom(exc) else R.ERROR
        result.error = _error(exc)
    finally:
        progress.stop()
        gc.collect()
        host = monitor.stop()
        result.memory.update(host)
        if result.peak_memory_bytes is None and result.outcome == R.OK:
            result.peak_memory_bytes = host["peak_tree_rss_bytes"]
        result.wall_s = time.perf_counter() - start
    return result


class ProgressFile:
    """How far a trial got, rewritten twice a second (``progress_path``): the runner reads it to stop a trial
    that is slower than the defaults could ever be (:data:`autotune.result.SLOWER`) and to say how far it got."""

    def __init__(self, path: str | None, start: float, interval_s: float = 0.5) -> None:
        import threading

        self.path = path
        self.start = start
        self.loop: StepLoop | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="autotune-progress", daemon=True)
        if path:
            self.interval_s = interval_s
            self.thread.start()

    def snapshot(self) -> dict[str, Any]:
        loop = self.loop
        now = time.perf_counter()
        out: dict[str, Any] = {"elapsed_s": round(now - self.start, 3), "steps": 0, "first_step_s": None,
                               "since_first_step_s": None, "samples_per_s": None}
        if loop is not None:
            out.update(steps=loop.steps, first_step_s=loop.first_step_s, samples_per_s=loop.rate())
            if loop.first_done_at is not None:
                out["since_first_step_s"] = round(now - loop.first_done_at, 3)
        return out

    def _run(self) -> None:
        while not self.done.wait(self.interval_s):
            try:
                _write_atomic(self.path, json.dumps(self.snapshot()))  # type: ignore[arg-type]
            except OSError:
                return

    def stop(self) -> None:
        self.done.set()


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def child_main(request: Mapping[str, Any], result_path: str, log_path: str) -> None:
    """Entry point of a forked trial process."""
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    # Import what the parent could import, from where it runs.
    for entry in reversed(request.get("sys_path") or []):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    if request.get("cwd"):
        os.chdir(request["cwd"])
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except FileNotFoundError:  # the parent gave this trial up (a signal) and removed its directory
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    if request.get("kind") == "probe":
        try:
            payload: dict[str, Any] = {"ok": True, "probe": probe(WorkloadSpec.from_dict(request["spec"]), request["device"])}
        except AutotuneError as exc:
            payload = {"ok": False, "error": _error(exc, user=True)}
        except BaseException as exc:  # noqa: BLE001
            payload = {"ok": False, "error": _error(exc)}
        _write_atomic(result_path, json.dumps(payload, default=str))
    elif request.get("kind") == "paired":
        from autotune.paired import run_arms

        _write_atomic(result_path, run_arms(request).to_json())
    else:
        _write_atomic(result_path, run(request).to_json())
    sys.stdout.flush()
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    """``python -m autotune.worker REQUEST.json``: one trial in this process, result JSON on stdout."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m autotune.worker REQUEST.json", file=sys.stderr)
        return 2
    with open(args[0]) as fh:
        request = json.load(fh)
    print(run(request).to_json(indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
