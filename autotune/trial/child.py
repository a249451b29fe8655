"""The entry of a trial process: set the forked process up, answer its one request, write the answer.

The fork server (:mod:`autotune.trial.forkserver`) forks a child for each request the runner
sends and calls :func:`main` there. It makes the process the leader of a new process
group, imports from where the parent runs, sends its output to the trial's log, and
answers the request by its type (:mod:`autotune.trial.messages`): a probe here, a trial in
:mod:`autotune.trial.measure_one` (a trial of several ranks in :mod:`autotune.trial.ranks`), a paired
measurement in :mod:`autotune.trial.paired`, a numerics run in :mod:`autotune.trial.numerics_run`. The answer is
written as JSON to the result file the runner reads once the process has ended.
"""

from __future__ import annotations

import os
import sys

import torch

from autotune import knobs
from autotune.machine import hardware
from autotune.trial import numerics_run, paired
from autotune.trial import measure_one, ranks
from autotune import result as R
from autotune.trial.arm import context_for, error_record, write_atomic
from autotune.errors import AutotuneError
from autotune.trial.messages import NumericsRequest, PairedRequest, ProbeAnswer, ProbeRequest, Request, TrialRequest
from autotune.workloads.specs import build


def main(request: Request, result_path: str, log_path: str) -> None:
    """Entry point of a forked trial process."""
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    # Import what the parent could import, from where it runs.
    for entry in reversed(request.sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    if request.cwd:
        os.chdir(request.cwd)
    try:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except FileNotFoundError:  # the parent gave this trial up (a signal) and removed its directory
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    write_atomic(result_path, answer(request).to_json())
    sys.stdout.flush()
    sys.stderr.flush()


def answer(request: Request) -> ProbeAnswer | R.TrialResult | R.PairedResult | R.NumericsResult:
    """What the request asks for, measured in this process. Never raises but for Ctrl-C."""
    match request:
        case ProbeRequest():
            return probe(request)
        case PairedRequest():
            return paired.run_arms(request)
        case TrialRequest():
            return (ranks.run if ranks.ranks_of(request) > 1 else measure_one.run)(request)
        case NumericsRequest():
            return (ranks.run if ranks.ranks_of(request) > 1 else numerics_run.run)(request)
    raise TypeError(f"a trial process answers no {type(request).__name__}")


def probe(request: ProbeRequest) -> ProbeAnswer:
    """Build the workload once and report what decides knob applicability, plus the fingerprint."""
    try:
        workload = build(request.spec)
        ctx = context_for(workload, torch.device(request.device))
        return ProbeAnswer(probe={
            "context": ctx.to_dict(),
            "fingerprint": hardware.fingerprint(request.device),
            "workload": {
                "task": workload.task,
                knobs.BATCH_KNOB: workload.batch_size,
                "model": type(workload.model).__name__,
                "parameters": sum(p.numel() for p in workload.model.parameters()),
                "dataset_len": len(workload.dataset) if workload.dataset is not None else None,  # type: ignore[arg-type]
            },
        })
    except AutotuneError as exc:
        return ProbeAnswer(error=error_record(exc, user=True))
    except BaseException as exc:  # noqa: BLE001
        return ProbeAnswer(error=error_record(exc))

