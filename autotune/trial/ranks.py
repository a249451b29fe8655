"""A trial of several ranks: one configuration trained by N processes of one DDP process group on this machine,
measured as one training (and the numerics check's run of such a configuration, trained the same way:
:func:`autotune.trial.numerics_run.run`).

Why a module of its own: a configuration with ``ranks`` above 1 is not one process's step but a launch, as a user runs
it with ``torchrun --nproc-per-node N``. The trial process (forked by the runner's fork server, in its own process
group) becomes the launcher's agent: :func:`run` starts the ranks with PyTorch's own elastic launcher
(``torch.distributed.launcher.api.elastic_launch``, what torchrun runs; a rendezvous on a free local port, no restarts),
each forked from the trial process (:data:`START_METHOD`) into the trial's process group, with the environment the
configuration's environment-level knobs set. Each rank (:func:`rank_main`) joins the process group (gloo on a CPU, NCCL
on GPUs, one device per rank) and measures the configuration with :func:`autotune.trial.measure_one.run` as a
one-process trial does, under a :class:`~autotune.trial.collective.Group`: DDP wraps the model, a DistributedSampler
gives the rank its shard of the data, the windows start after a barrier and end with the slowest rank, the warm-up's end
and a cut are agreed, and the figures are the training's (samples/s of all ranks, the largest rank's memory).

Every rank writes its answer to a file of its own; the trial's is rank 0's when all succeeded, else that of the rank
that failed first (its outcome: oom, nan, error; the others fail after it, when their peer is gone), and a rank killed
by a signal without an answer makes the trial ``crashed``. A rank that fails ends with a non-zero exit, and the agent
stops the others. A rank that hangs keeps the trial past its timeout: the runner kills the trial's process group, which
the ranks are in, so nothing outlives the trial.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from typing import Any, Union

import torch

from autotune import knobs
from autotune import result as R
from autotune.machine import binding
from autotune.trial import launch, measure_one, numerics_run
from autotune.trial.arm import ended, environment, write_atomic
from autotune.trial.collective import Group
from autotune.trial.messages import NumericsRequest, TrialRequest, from_wire

#: How the launcher starts a rank: forked from the trial process, itself a fork of the warm server that imported torch
#: and never ran a torch op nor touched CUDA (:mod:`autotune.trial.forkserver`), so each rank starts as a one-process
#: trial does and the two compare alike; a rank is running in 0.1 s where a fresh interpreter ("spawn", what torchrun
#: starts) takes 7 s on a 2-core machine to import torch. What must be in a process from its start (a preloaded
#: allocator) needs "spawn".
START_METHOD = "fork"


Ranked = Union[TrialRequest, NumericsRequest]
Answer = Union[R.TrialResult, R.NumericsResult]


def ranks_of(request: Ranked) -> int:
    """How many ranks the request's configuration trains as (1: one process, :mod:`autotune.trial.measure_one` or
    :mod:`autotune.trial.numerics_run`)."""
    return knobs.ranks_of(request.config)


def run(request: Ranked) -> Answer:
    """Measure one configuration of several ranks (a trial), or train it for the numerics check
    (:mod:`autotune.trial.numerics_run`), this process their launcher. Never raises but for Ctrl-C."""
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    start = time.perf_counter()
    n = ranks_of(request)
    device = torch.device(request.device)
    result: Answer = (R.TrialResult(outcome=R.ERROR, config=dict(request.config), device=str(device),
                                    notes={"pid": os.getpid(), "world_size": n})
                      if isinstance(request, TrialRequest) else
                      R.NumericsResult(outcome=R.ERROR, config=dict(request.config), device=str(device)))
    progress = getattr(request, "progress_path", None)
    where = os.path.dirname(progress) if progress else None
    try:
        with tempfile.TemporaryDirectory(prefix="autotune-ranks-", dir=where) as folder:
            os.environ.update(environment(request.config, device))  # the ranks start with it
            config = LaunchConfig(
                min_nodes=1, max_nodes=1, nproc_per_node=n, run_id=f"autotune-{uuid.uuid4().hex[:12]}",
                rdzv_backend="c10d", rdzv_endpoint="localhost:0",  # torchrun --standalone: a free port
                max_restarts=0, monitor_interval=0.1, start_method=START_METHOD,
                logs_specs=DefaultLogsSpecs(log_dir=os.path.join(folder, "logs")),  # not a folder left in /tmp
            )
            failure: ChildFailedError | None = None
            try:
                elastic_launch(config, rank_main)(request.to_wire(), folder)
            except ChildFailedError as exc:
                failure = exc
            result = gathered(folder, n, failure, result)
    except BaseException as exc:  # noqa: BLE001 - the launch's own failures (the rendezvous) become a result
        result.outcome, result.error = ended(exc)
    if isinstance(result, R.TrialResult):
        result.notes.setdefault("world_size", n)
    result.wall_s = time.perf_counter() - start
    return result


def answer_path(folder: str, rank: int) -> str:
    return os.path.join(folder, f"rank{rank}.json")


def gathered(folder: str, n: int, failure: Any, result: Answer) -> Answer:
    """The trial's result from the ranks' answers (``failure``: the launcher's ChildFailedError, or None); of the
    kind of ``result`` (a trial's, or a numerics run's)."""
    kind = type(result)
    answers: dict[int, dict[str, Any]] = {}
    for rank in range(n):
        try:
            with open(answer_path(folder, rank)) as fh:
                answers[rank] = json.load(fh)
        except (OSError, ValueError):
            continue
    failed = {rank: a for rank, a in answers.items() if a["result"]["outcome"] != R.OK}
    # a rank killed by a signal (the OOM killer's SIGKILL, a segfault) leaves no answer; SIGTERM is the agent's own,
    # sent to the ranks left once one failed
    killed = {f.local_rank: f for f in (failure.failures.values() if failure is not None else ())
              if f.exitcode is not None and f.exitcode < 0 and f.exitcode != -signal.SIGTERM
              and f.local_rank not in answers}
    # the first to fail (a killed rank's time is in whole seconds, rounded down); the others failed after it
    moments = [(float(f.timestamp), 0, rank) for rank, f in killed.items()]
    moments += [(float(a["ended_at"]), 1, rank) for rank, a in failed.items()]
    if moments:
        _, _, rank = min(moments)
        if rank in killed:
            out = kind.failure(R.CRASHED, f"rank {rank} of {n} was killed by {killed[rank].signal_name()}",
                               signal=-killed[rank].exitcode)
        else:
            out = kind.from_dict(failed[rank]["result"])
        if isinstance(out, R.TrialResult):
            out.notes.update(rank=rank, world_size=n, failed_ranks=sorted({*failed, *killed}))
        else:
            out.error = {**(out.error or {}), "rank": rank, "world_size": n}
        return out
    if failure is not None:
        first = min(failure.failures.values(), key=lambda f: f.timestamp)
        return kind.failure(R.ERROR, f"rank {first.local_rank} of {n} exited with code {first.exitcode} "
                            f"without an answer: {first.message}", exitcode=first.exitcode)
    if 0 in answers:
        out = kind.from_dict(answers[0]["result"])
        bound = [answers[r]["result"].get("notes", {}).get("affinity") for r in sorted(answers)]
        if isinstance(out, R.TrialResult) and any(bound):
            out.notes["rank_affinity"] = bound  # the cores each rank ran on (core_binding)
        return out
    result.error = {"type": "NoAnswer", "message": f"the {n} ranks ended without an answer", "user": False}
    return result


def rank_main(wire: dict[str, Any], folder: str) -> None:
    """One rank (in a process the launcher started): join the process group, measure, write this rank's answer.
    A rank that failed exits with code 1 at once, so that the launcher stops the others."""
    request = from_wire(wire)
    assert isinstance(request, (TrialRequest, NumericsRequest))
    rank, _, local = Group.from_environment()
    if isinstance(request, TrialRequest) and request.bound_cpus:  # compact cores: a slice of its own for each rank
        binding.bind(binding.rank_cpus(request.bound_cpus, local, launch.threads_of(request.config)))
    device = torch.device(request.device)
    if device.type == "cuda":
        device = torch.device("cuda", local)
    if isinstance(request, TrialRequest):
        request = dataclasses.replace(request, device=str(device),
                                      progress_path=request.progress_path if rank == 0 else None)
    else:  # rank 0's weights are the run's (DDP keeps them equal): it alone saves them
        request = dataclasses.replace(request, device=str(device), save_path=request.save_path if rank == 0 else None)
    group: Group | None = None
    result: Answer
    try:
        group = Group.join(device)
        result = (measure_one.run(request, group) if isinstance(request, TrialRequest) else
                  numerics_run.run(request, group))
    except BaseException as exc:  # noqa: BLE001 - joining can fail too: every ending is an answer
        result = (R.TrialResult if isinstance(request, TrialRequest) else R.NumericsResult)(
            outcome=R.ERROR, config=dict(request.config), device=str(device))
        result.outcome, result.error = ended(exc)
    write_atomic(answer_path(folder, rank), json.dumps({"result": result.to_dict(), "ended_at": time.time()}))
    if result.outcome != R.OK:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # no teardown that could wait for the peers
    if group is not None:
        group.leave()
