"""The reduced spaces whose full grids are measured once (measure_grid.py) and replayed (search_efficiency.py)."""

from __future__ import annotations

from autotune import knobs
from autotune.workloads.contract import WorkloadSpec

GRIDS = {
    "cnn": {
        "spec": WorkloadSpec("autotune.examples:cnn", data="autotune.examples:images"),
        "context": knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=2),
        "search": {
            "precision": ["fp32", "bf16"],
            "memory_format": ["contiguous", "channels_last"],
            "batch_size": [16, 32, 64, 128],
            "num_workers": [0, 1, 2],
            "threads": [1, 2],
        },
    },
    "mlp": {
        "spec": WorkloadSpec("autotune.examples:mlp"),
        "context": knobs.Context(device_type="cpu", task="train", input_rank=2, cpu_count=2),
        "search": {
            "precision": ["fp32", "bf16"],
            "batch_size": [16, 32, 64, 128, 256],
            "optimizer_impl": ["default", "foreach", "fused"],
            "threads": [1, 2],
        },
    },
}
