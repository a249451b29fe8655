from __future__ import annotations

import pytest

from autotune import knobs
from autotune.errors import KnobError

CPU = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=4)
CUDA = knobs.Context(device_type="cuda", task="train", input_rank=4, cpu_count=4)


def test_registry_has_every_design_knob_once():
    expected = {
        "precision", "compile", "memory_format", "batch_size", "num_workers", "prefetch_factor",
        "persistent_workers", "pin_memory", "activation_checkpointing", "cudnn_benchmark",
        "optimizer_impl", "threads", "cuda_allocator",
    }
    assert set(knobs.NAMES) == expected
    assert len(knobs.NAMES) == len(knobs.REGISTRY)
    for k in knobs.REGISTRY:
        assert k.help and k.stage in knobs.STAGE_HELP


def test_defaults_are_valid_values():
    for k in knobs.REGISTRY:
        assert k.validate(k.default_for(CPU), CPU) == k.default_for(CPU)


def test_parse_assignments_types_and_errors():
    cfg = knobs.parse_assignments(["precision=bf16", "batch_size=64", "pin_memory=on", "num_workers=2"], CPU)
    assert cfg == {"precision": "bf16", "batch_size": 64, "pin_memory": True, "num_workers": 2}
    with pytest.raises(KnobError, match="unknown knob 'precison'"):
        knobs.parse_assignments(["precison=bf16"])
    with pytest.raises(KnobError, match="not one of"):
        knobs.parse_assignments(["precision=fp8"])
    with pytest.raises(KnobError, match="out of range"):
        knobs.parse_assignments(["num_workers=99"], CPU)
    with pytest.raises(KnobError, match="not an integer"):
        knobs.parse_assignments(["batch_size=lots"])
    with pytest.raises(KnobError, match="name=value"):
        knobs.parse_assignments(["precision"])


def test_cuda_only_knobs_do_not_apply_on_cpu():
    res = knobs.resolve({"pin_memory": True, "cudnn_benchmark": True, "precision": "fp16", "cuda_allocator": "expandable_segments"}, CPU)
    assert set(res.not_applicable) == {"pin_memory", "cudnn_benchmark", "precision", "cuda_allocator"}
    assert "CUDA" in res.not_applicable["pin_memory"]
    assert res.config["pin_memory"] is False and res.config["precision"] == "fp32"
    on_gpu = knobs.resolve({"pin_memory": True, "precision": "fp16"}, CUDA)
    assert on_gpu.not_applicable == {} and on_gpu.config["precision"] == "fp16"


def test_dependent_knob_follows_num_workers():
    res = knobs.resolve({"prefetch_factor": 4, "persistent_workers": True}, CPU)
    assert "num_workers" in res.not_applicable["prefetch_factor"]
    assert res.config["prefetch_factor"] == 2
    res = knobs.resolve({"num_workers": 2, "prefetch_factor": 4}, CPU)
    assert res.not_applicable == {} and res.config["prefetch_factor"] == 4


def test_input_rank_and_task_conditions():
    flat = knobs.Context(device_type="cpu", task="infer", input_rank=2)
    res = knobs.resolve({"memory_format": "channels_last", "activation_checkpointing": True, "optimizer_impl": "fused"}, flat)
    assert set(res.not_applicable) == {"memory_format", "activation_checkpointing", "optimizer_impl"}


def test_optimizer_support_condition():
    ctx = knobs.Context(device_type="cpu", task="train", optimizer_params=frozenset({"foreach"}))
    dropped = knobs.resolve({"optimizer_impl": "fused"}, ctx).not_applicable
    assert "fused=" in dropped["optimizer_impl"]
    assert knobs.resolve({"optimizer_impl": "foreach"}, ctx).not_applicable == {}


def test_key_is_canonical_and_ignores_dropped_values():
    a = knobs.resolve({"precision": "bf16", "pin_memory": True}, CPU)
    b = knobs.resolve({"pin_memory": False, "precision": "bf16"}, CPU)
    assert a.key() == b.key()
    assert a.key() != knobs.resolve({}, CPU).key()


def test_short_lists_only_changes():
    assert knobs.short(knobs.defaults(CPU), CPU) == "defaults"
    assert knobs.short({**knobs.defaults(CPU), "precision": "bf16"}, CPU) == "precision=bf16"
