"""One configuration measured: in a trial process, returning one result.

It never talks to a database. :func:`run` answers a :class:`~autotune.trial.messages.TrialRequest`
(the child's entry, :mod:`autotune.trial.child`, calls it in the forked process): it starts the
process, builds the configuration as an :class:`~autotune.trial.arm.Arm`, runs the measurement
protocol and turns every way a trial can end into a typed
:class:`~autotune.result.TrialResult`. ``python -m autotune.trial.measure_one REQUEST.json`` runs one
trial in this interpreter and prints the result, for debugging.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
from typing import Any

import torch

from autotune import knobs
from autotune.machine import energy, hardware, peaks
from autotune.machine import load
from autotune import result as R
from autotune.trial import launch
from autotune.trial.arm import Arm, ended, error_record, start_process, write_atomic
from autotune.trial.messages import TrialRequest, from_wire
from autotune.knobs import effects as fx
from autotune.trial.collective import Group
from autotune.trial.plan import NotApplicableAtRuntime, declared
from autotune.trial.protocol import MemoryMonitor, NonFinite, StepLoop, check_parameters, cv, run_protocol


def run(request: TrialRequest, group: Group | None = None) -> R.TrialResult:
    """Measure one configuration. Never raises but for Ctrl-C: every ending is a TrialResult.

    ``group``: this process is one rank of a training of several (:mod:`autotune.trial.ranks`), whose process group
    it has joined: the model is DDP's, the data this rank's shard, the windows are the ranks' together
    (:mod:`autotune.trial.collective`); the figures are the training's (samples/s of all ranks, the largest rank's
    memory), the same in every rank."""
    start = time.perf_counter()
    world = group.world if group is not None else 1
    device = torch.device(request.device)
    settings = request.settings
    requested = dict(request.config)
    monitor = MemoryMonitor().start(
        watch_children=knobs.starts_processes(requested)
    )
    result = R.TrialResult(outcome=R.ERROR, config=requested, device=str(device), notes={"pid": os.getpid()})
    progress = ProgressFile(request.progress_path, start)
    try:
        result.notes.update(start_process(requested, device, request.bound_cpus))

        arm = Arm.build(request.spec, requested, device, per_rank(request.global_batch, world),
                        cpus=len(request.bound_cpus) or None,
                        on_resolved=lambda r: (setattr(result, "config", r.config),
                                               setattr(result, "not_applicable", dict(r.not_applicable))),
                        distributed=group is not None)
        plan, loop, eager, eager_model = arm.plan, arm.loop, arm.eager, arm.eager_model
        peak: dict[str, int] = {}

        def warm() -> None:
            """Warm-up is over: the one-time costs so far are kept, and the steady-state peak is read from here on."""
            if device.type == "cuda":
                peak["startup_reserved"] = torch.cuda.max_memory_reserved(device)
                peak["startup_allocated"] = torch.cuda.max_memory_allocated(device)
                torch.cuda.reset_peak_memory_stats(device)

        def memory_checkpoint() -> None:
            """The end of the timed windows: the trial's memory, before the FLOP count and the profile add theirs."""
            monitor.sample()  # DataLoader workers are alive now; the periodic samples may have missed their peak
            peak["host"] = monitor.peak_so_far()
            if device.type == "cuda":
                steady_reserved = torch.cuda.max_memory_reserved(device)
                steady_allocated = torch.cuda.max_memory_allocated(device)
                peak["reserved"] = max(steady_reserved, peak.get("startup_reserved", 0))
                peak["allocated"] = max(steady_allocated, peak.get("startup_allocated", 0))
                if "startup_reserved" in peak:
                    peak["steady_reserved"] = steady_reserved

        dominators = request.dominators
        margin = float(request.cut_margin or settings.cut_margin)  # the study's, never below its noise

        def dominated(median_so_far: float) -> bool:
            """A front point at least ``margin`` faster that needs no more memory than this trial already has."""
            if device.type == "cuda":  # the peak since the trial began: the steady one is read after a reset at warm()
                used = float(max(torch.cuda.max_memory_reserved(device), peak.get("startup_reserved", 0)))
            else:
                used = float(monitor.peak_so_far())
            return any(t >= world * median_so_far * (1 + margin) and mem <= used for t, mem in dominators)

        progress.loop, progress.world = loop, world
        loop.sync = group
        # what else ran meanwhile: beside this process's tree, or, a rank of several, beside the whole training's (the
        # launcher's agent, this process's parent, and every rank it started: a sibling rank is not another process)
        meter = load.Meter(os.getppid() if world > 1 else None).start()
        m = run_protocol(
            loop, settings, eager=eager, on_memory_checkpoint=memory_checkpoint,
            dominated=dominated if dominators else None,
            on_warm=warm, meter=energy_meter(device),
        )
        result.load = meter.stop()
        if device.type == "cuda":
            result.load["gpu_other_processes"] = hardware.gpu_others(device)
        if plan.task == "train":
            check_parameters(eager_model)
        samples = plan.samples_per_step
        result.outcome = R.OK
        result.samples_per_s = m.samples_per_s * world  # a window's time is its slowest rank's: the same in all
        result.samples_per_s_cv = cv(m.window_samples_per_s)
        result.window_samples_per_s = [rate * world for rate in m.window_samples_per_s]
        result.step_time_s = samples / m.samples_per_s
        result.samples_per_step = samples * world
        result.time_to_first_step_s = m.time_to_first_step_s
        result.warmup_steps = m.warmup_steps
        result.timed_steps = m.window_steps * len(m.window_samples_per_s)
        result.profile = m.profile
        result.phases_s = m.phases_s
        result.applied = arm.state()
        result.notes.update(plan.notes)
        if m.cut_short:
            result.notes["cut_short"] = True
        if m.cut_in_warmup:
            result.notes["cut_in_warmup"] = True
        result.notes["accumulation"] = plan.accumulation
        if "affinity" in result.notes:  # bound: where its threads (OpenMP's, started by the steps) may run
            result.notes["thread_cpus"] = launch.thread_cpus()
        result.energy = m.energy
        if "joules" in m.energy:
            result.joules_per_sample = m.energy["joules"] / m.energy["samples"]
        if m.flops_per_step:
            result.flops_per_sample = m.flops_per_step / samples
            result.achieved_flops = result.flops_per_sample * m.samples_per_s
            name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
            limit = peaks.peak(name, plan.precision) if name else None  # the table every view reads
            result.mfu = result.achieved_flops / limit.flops if limit else None
            result.notes["device_name"] = name  # the peak's device, for whoever names the peak (autotune measure)
            result.notes["mfu_peak"] = (limit.to_dict() if limit else
                                        peaks.missing(name, plan.precision, cpu=device.type == "cpu"))
        if device.type == "cuda":
            result.memory = {"peak_reserved_bytes": peak["reserved"], "peak_allocated_bytes": peak["allocated"]}
            if "steady_reserved" in peak:
                result.memory["steady_reserved_bytes"] = peak["steady_reserved"]  # after warm-up: no one-time costs
            result.peak_memory_bytes = peak["reserved"]
        else:
            result.peak_memory_bytes = peak.get("host")
        if group is not None:
            result.peak_memory_bytes = group.largest(result.peak_memory_bytes or 0)
            result.notes["world_size"] = world
        del loop, eager, eager_model, arm
    except NotApplicableAtRuntime as exc:
        result.outcome = R.NOT_APPLICABLE
        result.not_applicable[exc.knob] = exc.reason
        result.error = {"type": "NotApplicable", "message": str(exc), "user": False}
    except NonFinite as exc:
        result.outcome = R.NAN
        result.error = error_record(exc)
    except BaseException as exc:  # noqa: BLE001 - everything the model does becomes a result (Ctrl-C raised again)
        result.outcome, result.error = ended(exc)
    finally:
        progress.stop()
        gc.collect()
        host = monitor.stop()
        result.memory.update(host)
        if result.peak_memory_bytes is None and result.outcome == R.OK:
            result.peak_memory_bytes = host["peak_tree_rss_bytes"]
        result.wall_s = time.perf_counter() - start
    return result


def per_rank(global_batch: int | None, world: int) -> int | None:
    """Each rank's share of the global batch (the ranks' gradients are averaged: their batches add up)."""
    if global_batch is None or world == 1:
        return global_batch
    if global_batch % world:
        name = next(knob.name for knob, _ in declared(fx.Ranks))
        raise NotApplicableAtRuntime(name, f"{world} ranks do not divide the global batch {global_batch}")
    return global_batch // world


def energy_meter(device: torch.device, finder: energy.Finder | None = None) -> energy.Meter:
    """The energy meter of the trial's device (:mod:`autotune.machine.energy`): NVML's counter on an NVIDIA GPU, found
    by its UUID; on a CPU none, and the record says so."""
    uuid = None
    if device.type == "cuda":
        try:
            uuid = str(torch.cuda.get_device_properties(device).uuid)
        except (AttributeError, RuntimeError):
            uuid = None
    return energy.Meter.of(device.type, device.index, uuid, finder or FINDER)


#: How a trial finds its device's energy counter (a test replaces it with a made-up one).
FINDER: energy.Finder = energy.find


class ProgressFile:
    """How far a trial got, rewritten twice a second (``progress_path``): the runner reads it to stop a trial
    that is slower than the defaults could ever be (:data:`autotune.result.SLOWER`) and to say how far it got."""

    def __init__(self, path: str | None, start: float, interval_s: float = 0.5) -> None:
        self.path = path
        self.start = start
        self.loop: StepLoop | None = None
        self.world = 1  # the ranks training as one: a rank's rate times these is the training's
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="autotune-progress", daemon=True)
        if path:
            self.interval_s = interval_s
            self.thread.start()

    def snapshot(self) -> dict[str, Any]:
        loop = self.loop
        now = time.perf_counter()
        out: dict[str, Any] = {"elapsed_s": round(now - self.start, 3), "steps": 0, "first_step_s": None,
                               "in_first_step_s": None, "since_first_step_s": None, "samples_per_s": None}
        if loop is not None:
            rate = loop.rate()
            out.update(steps=loop.steps, first_step_s=loop.first_step_s,
                       samples_per_s=rate * self.world if rate is not None else None)
            if loop.first_done_at is not None:
                out["since_first_step_s"] = round(now - loop.first_done_at, 3)
            elif loop.started_at is not None:  # compiling, for a compiled configuration
                out["in_first_step_s"] = round(now - loop.started_at, 3)
        return out

    def _run(self) -> None:
        while not self.done.wait(self.interval_s):
            try:
                write_atomic(self.path, json.dumps(self.snapshot()))  # type: ignore[arg-type]
            except OSError:
                return

    def stop(self) -> None:
        self.done.set()


def main(argv: list[str] | None = None) -> int:
    """``python -m autotune.trial.measure_one REQUEST.json``: one trial in this process, result JSON on stdout."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m autotune.trial.measure_one REQUEST.json", file=sys.stderr)
        return 2
    with open(args[0]) as fh:
        request = from_wire(json.load(fh))
    if not isinstance(request, TrialRequest):
        print(f"{args[0]}: a {request.kind} request; this runs trials", file=sys.stderr)
        return 2
    print(run(request).to_json(indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
