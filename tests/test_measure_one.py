"""The trial body: what a trial reports of its configuration in force is read from the trial itself."""

from __future__ import annotations

import pytest

from autotune import result as R
from autotune.trial.runner import Runner
from autotune.workloads.contract import WorkloadSpec


def test_a_trial_shows_its_optimizer_kernels_and_batch_from_the_step_itself(quick):
    runner = Runner(WorkloadSpec("autotune.examples:mlp"), settings=quick)
    fused = runner.measure({"optimizer_impl": "fused", "batch_size": 16, "threads": 1})
    assert fused.outcome == R.OK, fused.error
    assert fused.profile["kernels"]["fused_optimizer"] > 0  # aten::_fused_adamw_ ran in the profiled steps
    assert fused.applied["optimizer"]["fused"] is True and fused.applied["batch_samples"] == 16
    assert fused.applied["intra_op_threads"] == 1 and fused.applied["pinned_batches"] is False
    plain = runner.measure({"batch_size": 48, "threads": 1})
    assert plain.ok and plain.profile["kernels"]["fused_optimizer"] == 0 and plain.applied["batch_samples"] == 48


@pytest.mark.slow  # 5 s in a full run on a 2-core CPU
def test_activation_checkpointing_shows_as_forward_ops_run_again(quick):
    runner = Runner(WorkloadSpec("autotune.examples:cnn"), settings=quick)
    results = [runner.measure({"activation_checkpointing": on, "batch_size": 16, "threads": 1}) for on in (False, True)]
    assert all(r.ok for r in results), [r.error for r in results]
    plain, checkpointed = (r.profile["kernels"]["forward_ops"] for r in results)
    assert checkpointed > plain > 0 and results[1].applied["checkpointed_blocks"] > 0
