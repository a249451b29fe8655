"""Each built-in example steps on this CPU well under a second at a small batch."""

from __future__ import annotations


import pytest
import torch

from autotune import knobs
from autotune.workloads import examples
from autotune.trial.plan import Plan
from autotune.workloads.specs import build
from autotune.workloads.contract import WorkloadSpec


MAX_STEP_FLOPS = 10e9  # a step of 16 samples: well under a second on a 2-core CPU (tens of GFLOP/s)


@pytest.mark.parametrize("name", ["cnn", "mlp", "transformer"])
def test_example_steps_are_small(name):
    """The examples stay small enough for a study in minutes on a CPU: counted in FLOPs, not timed (a timed
    test fails on a busy machine; the time a study takes is the benchmarks')."""
    from torch.utils.flop_counter import FlopCounterMode

    w = build(WorkloadSpec(f"autotune.examples:{name}"))
    p = Plan.from_config(knobs.resolve({"batch_size": 16}, knobs.Context()).config, "cpu", w.task)
    model = p.prepare_model(w.model)
    step = p.stepper(model, p.build_optimizer(model, w.optimizer), w.loss_fn)
    batch = torch.utils.data.default_collate([w.dataset[i] for i in range(16)])
    with FlopCounterMode(display=False) as counter:
        loss = step([batch])
    assert 0 < counter.get_total_flops() < MAX_STEP_FLOPS
    assert torch.isfinite(loss)


def test_images_dataset_costs_cpu_per_item():
    ds = examples.images(length=100)
    x, y = ds[3]
    assert x.shape == (3, 32, 32) and y.dtype == torch.long
    assert not torch.equal(ds[3][0], ds[4][0])
    assert torch.equal(ds[3][0], ds[3][0])  # deterministic per index
