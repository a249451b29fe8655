"""The numerics run: one configuration trained for a few steps from seeded weights on a fixed sequence of samples,
its loss, gradient norm and final weights written down, so that two configurations can be compared step by step.

Runs inside a trial process (:mod:`autotune.trial.child` answers a :class:`~autotune.trial.messages.NumericsRequest`
here), one configuration per process, as every measurement is. What makes two runs comparable:

- **the same initial weights**: every random generator (torch's, Python's, NumPy's) is seeded before the factory
  is called; the weights' digest is returned, and the caller refuses to compare runs whose digests differ (a factory
  that cannot be seeded);
- **the same samples, in the same order, per optimizer step**: sample ``i`` of the sequence is ``dataset[i]``, the
  samples of each step read under generators seeded by ``(seed, step)`` (so a random augmentation gives each sample
  the same draw in every run), collated into the configuration's own batch size, and each optimizer step takes
  ``samples_per_step`` samples:
  gradient accumulation makes up the difference where the batch sizes differ. A digest of the samples is returned
  too (data that does not repeat);
- **no dropout**: its masks come from the random stream, which a different batch size or a compiled kernel draws
  differently; the check turns every ``nn.Dropout`` module off and says how many it turned off;
- the configuration's own precision, compilation, memory format, optimizer kernels and backend flags (what is
  checked); the DataLoader's settings do not change what is computed and are not applied.

Each optimizer step records the mean loss over its samples and the gradients' global norm (unscaled, before the
step); at the end, the weights are saved (``save_path``) and their distance to earlier runs' saved weights
(``references``) computed, with how far training moved them from the start.
:mod:`autotune.evidence.numerics_answer` reads the runs.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from autotune import knobs
from autotune import result as R
from autotune.trial.arm import context_for, ended, start_process
from autotune.trial.collective import Group
from autotune.trial.messages import NumericsRequest
from autotune.trial.plan import NotApplicableAtRuntime, Plan
from autotune.workloads.specs import build

DROPOUT = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


def seed_all(seed: int) -> None:
    """Seed every generator a factory or a model may draw from."""
    random.seed(seed)
    torch.manual_seed(seed)
    import numpy as np  # torch's wheels bring it

    np.random.seed(seed % (2**32))


def weights_of(model: nn.Module) -> torch.Tensor:
    """The model's floating-point parameters as one flat float32 vector on the CPU, in the model's order."""
    parts = [p.detach().float().reshape(-1).cpu() for p in model.parameters() if p.is_floating_point()]
    return torch.cat(parts) if parts else torch.zeros(0)


def digest(tensors: Iterator[torch.Tensor]) -> str:
    """A digest of the tensors' values in order (their bytes, contiguous, on the CPU)."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def _leaves(batch: Any) -> Iterator[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, (tuple, list)):
        for item in batch:
            yield from _leaves(item)
    elif isinstance(batch, dict):
        for key in sorted(batch):
            yield from _leaves(batch[key])


def samples(dataset: Any, first: int, count: int, seed: int) -> list[Any]:
    """``dataset[first:first + count]``, read under generators seeded by (seed, first): the same draws for these
    samples in every run (a random augmentation included), whatever the run drew before them; the run's own
    generators are left as they were."""
    import numpy as np

    state, np_state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed * 1_000_003 + first)
        random.seed(seed * 1_000_003 + first)
        np.random.seed((seed * 1_000_003 + first) % (2**32))
        try:
            return [dataset[i % len(dataset)] for i in range(first, first + count)]
        finally:
            random.setstate(state)
            np.random.set_state(np_state)


def run(request: NumericsRequest, group: Group | None = None) -> R.NumericsResult:
    """Train ``request.config`` for ``request.steps`` optimizer steps (see the module's docstring). Never raises but
    for Ctrl-C: every ending is a NumericsResult.

    ``group``: this process is one rank of a training of several (:mod:`autotune.trial.ranks`): the model is DDP's
    (its arguments the configuration's), each optimizer step's samples are read as one process reads them and this
    rank trains on its share (rank r the r-th of ``world`` equal parts), the loss recorded is the mean over all ranks;
    the gradients, the weights and their digests are the same in every rank after each all-reduce. Against one
    process on the same samples, what differs is what several ranks change: a BatchNorm's statistics over a rank's
    share, a reduction's order, DDP's arguments."""
    start = time.perf_counter()
    world, rank = (group.world, group.rank) if group is not None else (1, 0)
    device = torch.device(request.device)
    requested = dict(request.config)
    result = R.NumericsResult(outcome=R.ERROR, config=requested, device=str(device))
    try:
        start_process(requested, device, request.bound_cpus)
        seed_all(request.seed)
        workload = build(request.spec)
        if workload.task != "train":
            raise NotApplicableAtRuntime("task", f"the task is {workload.task}: no training to compare")
        if workload.batch_size and knobs.BATCH_KNOB not in requested:
            requested[knobs.BATCH_KNOB] = workload.batch_size
        resolved = knobs.resolve(requested, context_for(workload, device, len(request.bound_cpus) or None))
        result.config = dict(resolved.config)
        whole = request.samples_per_step
        if world > 1:
            batch_size = int(resolved.config[knobs.BATCH_KNOB])
            whole = whole or batch_size * world
            if whole % (world * batch_size):
                raise NotApplicableAtRuntime(knobs.BATCH_KNOB, f"{whole} samples a step do not split into {world} "
                                             f"ranks of whole batches of {batch_size}")
        plan = Plan.from_config(resolved.config, device, workload.task, whole // world if world > 1 else whole)
        plan.apply_process()
        dropouts = [m for m in workload.model.modules() if isinstance(m, DROPOUT) and m.p > 0]
        for module in dropouts:
            module.p = 0.0
        result.dropout_off = len(dropouts)
        start_weights = weights_of(workload.model)
        result.initial_digest = digest(iter([start_weights]))
        eager = plan.prepare_model(workload.model, compile=False)
        model = plan.compile_model(plan.distribute(eager) if world > 1 else eager)  # DDP shares eager's parameters
        optimizer = plan.build_optimizer(model, workload.optimizer)
        stepper = plan.stepper(model, optimizer, workload.loss_fn)
        batch, mine = plan.batch_size, plan.samples_per_step  # this rank's samples a step
        per_step = mine * world
        collate = workload.collate_fn or torch.utils.data.default_collate
        data: list[Any] = []  # a digest per leaf of the batch (inputs, target): its samples in order, however batched
        for step in range(request.steps):
            loss = torch.zeros((), device=device)
            read = samples(workload.dataset, step * per_step, per_step, request.seed)
            for chunk in range(0, per_step, batch):  # the step's samples in order, as one process batches them
                host = collate(read[chunk:chunk + batch])
                for k, leaf in enumerate(_leaves(host)):
                    if k == len(data):
                        data.append(hashlib.sha256())
                    data[k].update(leaf.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
                if rank * mine <= chunk < (rank + 1) * mine:  # this rank's share (whole batches), a micro-batch each
                    loss = loss + stepper.micro(plan.to_device(host)).float()  # each already divided by accumulation
            if group is not None:
                loss = torch.tensor(group.mean(float(loss)))
            if stepper.scaler is not None:
                stepper.scaler.unscale_(optimizer)
            grads = [p.grad.detach().float().norm() for p in eager.parameters() if p.grad is not None]
            norm = float(torch.linalg.vector_norm(torch.stack(grads))) if grads else 0.0
            stepper.finish()
            value = float(loss)
            result.losses.append(value)
            result.grad_norms.append(norm)
            if not math.isfinite(value):
                result.outcome = R.NAN
                result.error = {"message": f"the loss became {value} at step {step + 1}"}
                break
        else:
            result.outcome = R.OK
        result.data_digest = hashlib.sha256("".join(h.hexdigest() for h in data).encode()).hexdigest()[:16]
        final = weights_of(eager)
        result.moved = float(torch.linalg.vector_norm(final - start_weights))
        result.weights_norm = float(torch.linalg.vector_norm(final))
        for label, path in request.references:
            other = torch.load(path, map_location="cpu", weights_only=True)
            result.distances[label] = (float(torch.linalg.vector_norm(final - other))
                                       if other.shape == final.shape else None)
        if request.save_path:
            tmp = request.save_path + ".part"
            torch.save(final, tmp)
            os.replace(tmp, request.save_path)
        result.accumulation = plan.accumulation
        result.samples_per_step = per_step
        result.ranks = world
    except NotApplicableAtRuntime as exc:
        result.outcome = R.NOT_APPLICABLE
        result.error = {"type": "NotApplicable", "message": str(exc), "user": False}
    except BaseException as exc:  # noqa: BLE001 - everything the model does becomes a result (Ctrl-C raised again)
        result.outcome, result.error = ended(exc)
    finally:
        result.wall_s = time.perf_counter() - start
    return result
