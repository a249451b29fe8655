"""Several configurations measured alternately in one process: the arms of a paired measurement.

Why: two processes running the same configuration differ by 10-25% on the CPU machines
this project is built on, while windows inside one process agree within 1-5%. A speed-up
measured between processes must beat the large number; measured inside one process, only
the small one. ``benchmarks/paired_noise.py`` measured it before anything was built on it:
the standard deviation of log(speed-up) across processes was 0.03-0.05 when the candidate
and the defaults ran alternately in one process, against 0.14-0.23 between processes.

How: the trial process builds each configuration as an *arm* of its own (a fresh model,
optimizer, DataLoader and step from the factory: :class:`autotune.trial.arm.Arm`), warms each
up to a steady step time, then times one window of each arm in turn, rotating the order
(ABC, BCA, CAB, ...), so that whatever makes this process fast or slow touches every arm
alike and cancels in their ratio. An arm's figure is the median of its windows.

Which configurations may share a process is the registry's (``Knob.in_process``,
:func:`autotune.knobs.apart`): knobs that act on the arm's own objects (precision's
autocast and scaler, batch size, memory format, optimizer kernels, activation
checkpointing) may differ between arms; knobs that set process-wide state (threads, the
environment, loader worker processes, cuDNN benchmark, the allocators) must be equal; a
compiled configuration is measured alone. Arms share a process only where glibc's heap
carries nothing from one arm to the next (``host_allocator=retain``, :mod:`autotune.machine.heap`):
at its default, an arm found the heap another arm had grown and ran faster than in a process
of its own (``benchmarks/paths_agree.py``: the mlp's winner 6.58x shared, 3.96x alone). The
only process-wide state a per-arm knob sets (precision's TF32 flags) is set again before
each of the arm's windows, and each arm records the state it ran under (``state``), so a
test can show a switch leaves no trace.

Runs inside the trial process (:mod:`autotune.trial.child` answers a
:class:`~autotune.trial.messages.PairedRequest` here); never talks to a database. Memory is not measured per arm
(the arms share the process).
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from typing import Any

import torch

from autotune import knobs
from autotune.machine import hardware, load
from autotune import result as R
from autotune.errors import AutotuneError
from autotune.trial.plan import NotApplicableAtRuntime
from autotune.trial.protocol import NonFinite, check_parameters, warmed_up, window_steps
from autotune.trial.arm import Arm, error_record, is_oom, start_process
from autotune.trial.messages import PairedRequest


def _failed(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, NotApplicableAtRuntime):
        return {"outcome": R.NOT_APPLICABLE, "error": {"type": "NotApplicable", "message": str(exc), "user": False},
                "not_applicable": {exc.knob: exc.reason}}
    if isinstance(exc, AutotuneError):
        return {"outcome": R.ERROR, "error": error_record(exc, user=True)}
    if isinstance(exc, NonFinite):
        return {"outcome": R.NAN, "error": error_record(exc)}
    return {"outcome": R.OOM if is_oom(exc) else R.ERROR, "error": error_record(exc)}


def run_arms(request: PairedRequest) -> R.PairedResult:
    """Measure ``request.arms`` (configurations) alternately in this process. Never raises but for Ctrl-C."""
    start = time.perf_counter()
    device = torch.device(request.device)
    settings = request.settings
    requested = [dict(c) for c in request.arms]
    arms_out: list[dict[str, Any]] = [{"config": c, "outcome": R.ERROR} for c in requested]
    result = R.PairedResult(outcome=R.ERROR, arms=arms_out, notes={"pid": os.getpid()})
    why = None if request.unchecked else knobs.apart(requested)
    if why is not None:
        result.error = {"type": "KnobError", "message": f"these configurations cannot share a process: {why}"}
        return result
    arms: dict[int, Arm] = {}
    try:
        result.notes.update(start_process(requested[0], device, request.bound_cpus))
        for i, config in enumerate(requested):
            try:
                arm = Arm.build(request.spec, config, device, request.global_batch, process=(i == 0),
                                cpus=len(request.bound_cpus) or None)
                arms_out[i].update(config=arm.resolved.config, not_applicable=dict(arm.resolved.not_applicable))
                arms[i] = arm
            except Exception as exc:  # noqa: BLE001 - an arm that cannot be built leaves the others measurable
                arms_out[i].update(_failed(exc))
        meter = load.Meter().start()
        per_window: dict[int, int] = {}
        for i, arm in list(arms.items()):
            try:
                arm.plan.apply_flags()
                first = arm.loop.timed(1)
                arm.loop.first_step_s = first
                arm.loop.check_finite()
                times: list[float] = []
                warm_start = time.perf_counter()
                while True:
                    times.append(arm.loop.timed(1))
                    if warmed_up(times, time.perf_counter() - warm_start, settings):
                        break
                arm.loop.check_finite()
                per_window[i] = window_steps(statistics.median(times[-3:]), settings)
                arms_out[i].update(time_to_first_step_s=first, warmup_steps=len(times))
            except Exception as exc:  # noqa: BLE001
                arms_out[i].update(_failed(exc))
                del arms[i]
        windows: dict[int, list[float]] = {i: [] for i in arms}
        for k in range(settings.windows):
            order = sorted(arms)
            order = order[k % len(order):] + order[: k % len(order)] if order else order
            for i in order:
                arm = arms[i]
                try:
                    arm.plan.apply_flags()  # the precision's TF32 flags are process-wide: each arm's own, each window
                    if not windows[i]:
                        arms_out[i]["state"] = arm.state()
                    elapsed = arm.loop.timed(per_window[i])
                    windows[i].append(per_window[i] * arm.plan.samples_per_step / elapsed)
                except Exception as exc:  # noqa: BLE001
                    arms_out[i].update(_failed(exc))
                    del arms[i]
        for i, arm in list(arms.items()):
            try:
                arm.loop.check_finite()
                if arm.plan.task == "train":
                    check_parameters(arm.eager_model)
                arms_out[i].update(outcome=R.OK, samples_per_s=statistics.median(windows[i]),
                                   window_samples_per_s=windows[i], window_steps=per_window[i],
                                   samples_per_step=arm.plan.samples_per_step)
            except Exception as exc:  # noqa: BLE001
                arms_out[i].update(_failed(exc))
        result.load = meter.stop()
        if device.type == "cuda":
            result.load["gpu_other_processes"] = hardware.gpu_others(device)
        measured = [a for a in arms_out if a.get("outcome") == R.OK]
        if arms_out[0].get("outcome") == R.OK and len(measured) >= 2:
            result.outcome = R.OK
        else:
            result.outcome = arms_out[0].get("outcome") if arms_out[0].get("outcome") != R.OK else R.ERROR
            result.error = arms_out[0].get("error") or {"message": "fewer than two arms were measured"}
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - whatever the process itself hit becomes the result
        result.outcome = R.OOM if is_oom(exc) else R.ERROR
        result.error = error_record(exc)
    finally:
        arms.clear()
        gc.collect()
        result.wall_s = time.perf_counter() - start
    return result
