"""Configurations measured alternately in one process (autotune.trial.paired): each arm is its own, a switch leaves no
trace, what cannot share a process is refused, and a failing arm leaves the others measured."""

from __future__ import annotations

import pytest
import torch

from autotune import knobs
from autotune.trial import paired
from autotune import result as R
from autotune.knobs import effects as fx
from autotune.trial.messages import PairedRequest
from autotune.trial.plan import fp32_precision_api
from autotune.trial.protocol import Settings
from autotune.request import WorkloadSpec
from autotune.trial.runner import Runner

QUICK = Settings(windows=3, window_s=0.03, min_warmup_steps=2, min_warmup_s=0.0, max_warmup_s=1.0, profile_steps=0,
                 count_flops=False)
CNN = WorkloadSpec("autotune.examples:cnn")
BASE = {**knobs.defaults(), "batch_size": 8, "host_allocator": "retain"}  # the heap keeps no arm's history
OTHER = {**BASE, "memory_format": "channels_last", "optimizer_impl": "foreach", "batch_size": 16}
# Effects an arm applies to its own objects (or, for backend flags, again before each of its windows).
PER_ARM_EFFECTS = (fx.Autocast, fx.GradScaler, fx.Flag, fx.BatchSize, fx.ChannelsLast, fx.CheckpointBlocks,
                   fx.OptimizerImpl)


@pytest.fixture(autouse=True)
def own_threads():
    """These tests measure in this process: the thread count an arm's process sets is put back after each (the
    environment is, for every test: tests/conftest.py)."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def arms(*configs, spec: WorkloadSpec = CNN) -> R.PairedResult:
    return paired.run_arms(PairedRequest(spec=spec, arms=tuple(dict(c) for c in configs), settings=QUICK))


def test_every_knob_an_arm_may_change_acts_on_the_arm_alone():
    """A knob declared PER_ARM has only effects an arm applies to its own model, optimizer, loader or step (or
    sets again before each window): a thread count, an environment variable, loader workers or compile would
    outlive the arm and leak into the next one."""
    for knob in knobs.REGISTRY:
        assert knob.in_process in (knobs.PER_ARM, knobs.SHARED, knobs.ALONE), knob.name
        if knob.in_process == knobs.PER_ARM:
            leaking = [e for e in knob.effects if not isinstance(e, PER_ARM_EFFECTS)
                       or (isinstance(e, fx.LoaderArg) and not isinstance(e, fx.BatchSize))]
            assert not leaking, f"{knob.name} is PER_ARM but {leaking} would outlive its arm"
    assert {k.name for k in knobs.REGISTRY if k.in_process == knobs.PER_ARM} == {
        "precision", "batch_size", "memory_format", "optimizer_impl", "activation_checkpointing"}


def test_what_cannot_share_a_process_is_said():
    assert knobs.apart([BASE, OTHER]) is None
    heap = knobs.apart([{**BASE, "host_allocator": "default"}, {**OTHER, "host_allocator": "default"}])
    assert "host_allocator=default" in heap and "heap" in heap  # the default heap carries one arm into the next
    assert "threads" in knobs.apart([BASE, {**BASE, "threads": 1}])
    assert "num_workers" in knobs.apart([BASE, {**BASE, "num_workers": 1}])
    assert "compile" in knobs.apart([BASE, {**BASE, "compile": "default"}])
    assert knobs.apart([{**BASE, "compile": "default"}]) is None  # alone, it is a trial
    inside, outside = knobs.per_arm({"threads": 1, "memory_format": "channels_last", "precision": "bf16"})
    assert inside == {"memory_format": "channels_last", "precision": "bf16"} and outside == {"threads": 1}
    refused = arms(BASE, {**BASE, "threads": 1})
    assert refused.outcome == R.ERROR and "cannot share a process" in refused.error["message"]


def test_a_switch_between_arms_leaves_no_trace():
    """The defaults measured before and after an arm that changes the layout, the optimizer's kernels and the
    batch run under the same state as the defaults measured alone; the other arm under its own."""
    alone = arms(BASE, BASE)
    between = arms(BASE, OTHER, BASE)
    assert alone.ok and between.ok, (alone.error, between.error)
    first, other, again = (a["state"] for a in between.arms)
    assert first == again == alone.arms[0]["state"] == alone.arms[1]["state"]
    assert first["channels_last_weights"] == 0 and other["channels_last_weights"] > 0
    assert first["optimizer"].get("foreach") in (None, False) and other["optimizer"]["foreach"] is True
    assert (first["samples_per_batch"], other["samples_per_batch"]) == (8, 16)
    assert not first["autocast"] and first["intra_op_threads"] == other["intra_op_threads"]
    for arm in between.arms:
        assert arm["outcome"] == R.OK and arm["samples_per_s"] > 0 and len(arm["window_samples_per_s"]) == QUICK.windows


@pytest.mark.slow  # 4 s: the quick loop (-m 'not slow') has a test of this part that takes less
@pytest.mark.skipif(not hasattr(torch, "bfloat16"), reason="no bf16")
def test_the_precision_of_one_arm_is_not_the_next_ones():
    result = arms(BASE, {**BASE, "precision": "bf16"}, BASE)
    assert result.ok, result.error
    states = [a["state"] for a in result.arms]
    assert [a["config"]["precision"] for a in result.arms] == ["fp32", "bf16", "fp32"]
    assert [s["step_autocast"] for s in states] == [None, "torch.bfloat16", None]  # each arm's own step
    assert not any(s["autocast"] for s in states)  # nothing the bf16 arm's step turned on stays on
    assert states[0] == states[2]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_tf32_flags_are_each_arms_own_on_a_gpu():
    """precision's TF32 flags are process-wide: each arm sets its own before each of its windows."""
    base = {**knobs.defaults(knobs.Context(device_type="cuda")), "batch_size": 8, "host_allocator": "retain"}
    result = paired.run_arms(PairedRequest(spec=CNN, device="cuda:0", settings=QUICK,
                                           arms=(base, {**base, "precision": "tf32"}, base)))
    assert result.ok, result.error
    matmul = "backends.cuda.matmul.fp32_precision" if fp32_precision_api() else "backends.cuda.matmul.allow_tf32"
    flags = [a["state"]["flags"][matmul] for a in result.arms]
    assert flags == (["ieee", "tf32", "ieee"] if fp32_precision_api() else [False, True, False])


def test_an_arm_that_fails_leaves_the_others_measured():
    # activation checkpointing needs blocks to wrap: the tiny model has none, so that arm is not applicable
    spec = WorkloadSpec("failing_workloads:tiny")
    base = dict(BASE)
    result = arms(base, {**base, "activation_checkpointing": True}, {**base, "batch_size": 16}, spec=spec)
    assert result.ok
    outcomes = [a["outcome"] for a in result.arms]
    assert outcomes == [R.OK, R.NOT_APPLICABLE, R.OK]
    assert result.rates()[1] is None and result.rates()[0] > 0 and result.rates()[2] > 0
    alone = arms(base, {**base, "activation_checkpointing": True}, spec=spec)
    assert alone.outcome == R.ERROR and "fewer than two" in alone.error["message"]  # nothing left to compare


def test_the_runner_measures_arms_in_an_isolated_process():
    runner = Runner(WorkloadSpec("failing_workloads:tiny"), settings=QUICK, timeout_s=120)
    base = dict(BASE)
    result = runner.measure_together([base, {**base, "batch_size": 32}])
    assert result.ok and all(r and r > 0 for r in result.rates())
    assert result.notes["pid"] != __import__("os").getpid() and result.wall_s > 0
    assert "other_cores" in result.load
    crashed = Runner(WorkloadSpec("failing_workloads:abort"), settings=QUICK,
                     timeout_s=120).measure_together([base, base])
    assert crashed.outcome == R.CRASHED and [a["outcome"] for a in crashed.arms] == [R.CRASHED, R.CRASHED]
