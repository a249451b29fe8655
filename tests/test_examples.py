"""Each built-in example steps on this CPU well under a second at a small batch."""

from __future__ import annotations

import time

import pytest
import torch

from autotune import examples, knobs
from autotune.plan import Plan
from autotune.workload import WorkloadSpec, build


@pytest.mark.parametrize("name", ["cnn", "mlp", "transformer"])
def test_example_steps_fast(name):
    w = build(WorkloadSpec(f"autotune.examples:{name}"))
    p = Plan.from_config(knobs.resolve({"batch_size": 16}, knobs.Context()).config, "cpu", w.task)
    model = p.prepare_model(w.model)
    step = p.stepper(model, p.build_optimizer(model, w.optimizer), w.loss_fn)
    batch = torch.utils.data.default_collate([w.dataset[i] for i in range(16)])
    step([batch])
    start = time.perf_counter()
    loss = step([batch])
    assert time.perf_counter() - start < 1.0
    assert torch.isfinite(loss)


def test_images_dataset_costs_cpu_per_item():
    ds = examples.images(length=100)
    x, y = ds[3]
    assert x.shape == (3, 32, 32) and y.dtype == torch.long
    assert not torch.equal(ds[3][0], ds[4][0])
    assert torch.equal(ds[3][0], ds[3][0])  # deterministic per index
