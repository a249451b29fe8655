"""A trial of several ranks (autotune.trial.ranks): real DDP trainings of 2 gloo ranks started by PyTorch's elastic
launcher from the trial process, measured as one training; a rank that fails, hangs or is killed fails the trial with
its outcome and leaves no process behind; DDP's gradients over the ranks' shards are one process's."""

from __future__ import annotations

import threading
import uuid

import psutil
import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from autotune import knobs
from autotune import result as R
from autotune.knobs import registry as reg
from autotune.testing.suite import need, wait_until
from autotune.trial import forkserver
from autotune.trial.collective import Group
from autotune.trial.measure_one import per_rank
from autotune.trial.plan import NotApplicableAtRuntime, Plan
from autotune.trial.runner import Runner
from autotune.workloads.contract import WorkloadSpec

# One thread per rank: two ranks on this 2-core machine.
TWO = {reg.RANKS.name: 2, reg.THREADS.name: 1}


@pytest.fixture(autouse=True)
def gloo():
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_gloo_available()):
        need("torch.distributed with gloo (a torch build with distributed support)")


def trial_processes() -> set[int]:
    """Every process below the fork server: the trials, their ranks, their ranks' workers."""
    server = forkserver.get()
    server.start()
    return {p.pid for p in psutil.Process(server.pid).children(recursive=True)}


def measured(model: str, quick, config: dict, timeout: float = 120, **args) -> tuple[R.TrialResult, set[int]]:
    """The trial's result and every process it had below the fork server while it ran (all gone once it ended)."""
    seen: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.2):
            try:
                seen.update(trial_processes())
            except psutil.Error:
                continue

    before = trial_processes()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        spec = WorkloadSpec(model, model_args=tuple(args.items()))
        result = Runner(spec, timeout_s=timeout, settings=quick).measure(config)
    finally:
        done.set()
        watcher.join()
    seen -= before

    def gone() -> bool:
        return not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                       for pid in seen)

    wait_until(gone, 10, lambda: f"the trial's processes {sorted(seen)} to be gone")
    return result, seen


def test_two_ranks_train_as_one(quick):
    config = {**TWO, reg.BATCH_SIZE.name: 16, reg.BUCKET_CAP_MB.name: 5, reg.GRADIENT_AS_BUCKET_VIEW.name: True,
              reg.STATIC_GRAPH.name: True}
    res, seen = measured("autotune.examples:mlp", quick, config)
    assert res.outcome == R.OK, res.error
    assert res.notes["world_size"] == 2
    assert res.samples_per_step == 32  # both ranks' batches
    assert res.samples_per_s > 0 and len(res.window_samples_per_s) == quick.windows
    assert res.samples_per_s == pytest.approx(sorted(res.window_samples_per_s)[len(res.window_samples_per_s) // 2])
    assert res.peak_memory_bytes > 0
    assert res.config[reg.RANKS.name] == 2 and res.config[reg.BUCKET_CAP_MB.name] == 5
    assert res.config[reg.STATIC_GRAPH.name] is True and not res.not_applicable
    assert res.applied["intra_op_threads"] == 1  # threads is per rank
    assert len(seen) >= 3  # the trial process (the launcher) and its two ranks
    # what else ran is measured beside the whole training: a rank's sibling is not another process using the machine
    assert res.load["own_processes"] >= 3, res.load


def test_two_ranks_of_a_cnn_share_its_batch_norm_buffers(quick):
    res, _ = measured("autotune.examples:cnn", quick, {**TWO, reg.BATCH_SIZE.name: 8})
    assert res.outcome == R.OK, res.error
    assert res.notes["world_size"] == 2 and res.samples_per_step == 16 and res.samples_per_s > 0


def test_a_global_batch_is_shared_by_the_ranks(quick):
    spec = WorkloadSpec("autotune.examples:mlp")
    res = Runner(spec, timeout_s=120, settings=quick, global_batch=64).measure({**TWO, reg.BATCH_SIZE.name: 16})
    assert res.outcome == R.OK, res.error
    assert res.notes["accumulation"] == 2 and res.samples_per_step == 64  # 2 ranks x 2 micro-batches x 16
    assert per_rank(64, 2) == 32 and per_rank(None, 2) is None and per_rank(7, 1) == 7
    with pytest.raises(NotApplicableAtRuntime, match="2 ranks do not divide the global batch 25"):
        per_rank(25, 2)


def test_a_rank_that_raises_fails_the_trial_and_leaves_nothing(quick):
    res, seen = measured("failing_workloads:rank_fails", quick, TWO)
    assert res.outcome == R.ERROR, res.error
    assert "rank 1 breaks" in res.error["message"]
    assert res.notes["rank"] == 1 and res.notes["world_size"] == 2
    assert len(seen) >= 3


def test_a_rank_that_hangs_is_a_timeout_and_its_group_is_killed(quick):
    res, seen = measured("failing_workloads:rank_fails", quick, TWO, timeout=15, how="hang")
    assert res.outcome == R.TIMEOUT, res.error
    assert len(seen) >= 3


def test_a_rank_killed_by_a_signal_crashes_the_trial(quick):
    res, _ = measured("failing_workloads:rank_fails", quick, TWO, how="kill")
    assert res.outcome == R.CRASHED, res.error
    assert res.error["signal"] == 9 and res.notes["rank"] == 1


def test_one_rank_is_a_trial_of_one_process(quick):
    res, _ = measured("failing_workloads:tiny", quick, {reg.RANKS.name: 1, reg.BUCKET_CAP_MB.name: 100})
    assert res.outcome == R.OK, res.error
    assert "world_size" not in res.notes and res.samples_per_step == 32
    assert reg.BUCKET_CAP_MB.name in res.not_applicable  # DDP's arguments only where there are ranks


def test_the_launch_knobs_bounds_conditions_and_keys():
    cpu = knobs.Context(device_type="cpu", cpu_count=4)
    gpus = knobs.Context(device_type="cuda", cpu_count=16, devices=2)
    assert reg.RANKS.bounds(cpu) == (1, 4) and reg.RANKS.bounds(gpus) == (1, 2)  # a rank per core, per GPU
    assert knobs.Context.from_dict(gpus.to_dict()) == gpus and knobs.Context.from_dict({
        k: v for k, v in cpu.to_dict().items() if k != "devices"}).devices == 1  # a study stored before it
    ddp = {reg.BUCKET_CAP_MB.name: 100, reg.GRADIENT_AS_BUCKET_VIEW.name: True, reg.STATIC_GRAPH.name: True}
    alone = knobs.resolve(ddp, cpu)
    assert set(alone.not_applicable) == set(ddp)  # DDP's arguments only where there are ranks
    together = knobs.resolve({**ddp, reg.RANKS.name: 2}, cpu)
    assert not together.not_applicable and all(together.config[k] == v for k, v in ddp.items())
    assert knobs.resolve({}, cpu).key() == alone.key()  # at their defaults the keys are those of stored studies
    assert reg.RANKS.name not in knobs.resolve({}, cpu).key() and reg.RANKS.name in together.key()
    assert knobs.apart([{}, {reg.RANKS.name: 2}])  # several ranks are processes of their own
    assert "torchrun --nproc-per-node 2" in reg.RANKS.how_to(2)


# ---------------------------------------------------------------- DDP's gradients are one process's

SAMPLES, FEATURES, CLASSES = 8, 6, 3


def data() -> TensorDataset:
    gen = torch.Generator().manual_seed(7)
    return TensorDataset(torch.randn(SAMPLES, FEATURES, generator=gen),
                         torch.randint(0, CLASSES, (SAMPLES,), generator=gen))


def model() -> nn.Module:
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(FEATURES, 5), nn.Tanh(), nn.Linear(5, CLASSES))


def gradients_in_rank() -> dict:
    """In a rank: the model wrapped as a trial wraps it (Plan.distribute, DDP's knobs), one step on this rank's shard
    (a DistributedSampler, as a trial's loader); its gradients after DDP's all-reduce, and DDP's settings."""
    rank, world, _ = Group.from_environment()
    group = Group.join(torch.device("cpu"))
    config = {reg.RANKS.name: world, reg.BUCKET_CAP_MB.name: 5, reg.GRADIENT_AS_BUCKET_VIEW.name: True}
    plan = Plan.from_config(knobs.resolve(config, knobs.Context()).config, "cpu", "train")
    net = model()
    ddp = plan.distribute(net)
    dataset = data()
    sampler = DistributedSampler(dataset, shuffle=False, drop_last=True)
    x, y = next(iter(DataLoader(dataset, batch_size=SAMPLES // world, sampler=sampler)))
    F.cross_entropy(ddp(x), y).backward()
    out = {"grads": [p.grad.clone() for p in net.parameters()], "bucket_bytes": ddp.bucket_bytes_cap,
           "as_view": ddp.gradient_as_bucket_view, "rank": rank}
    group.leave()
    return out


def test_ddp_gradients_of_two_ranks_are_one_processs(tmp_path, monkeypatch):
    from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=2, run_id=f"test-{uuid.uuid4().hex[:8]}",
                          rdzv_backend="c10d", rdzv_endpoint="localhost:0", max_restarts=0, start_method="spawn",
                          logs_specs=DefaultLogsSpecs(log_dir=str(tmp_path / "logs")))
    ranks = elastic_launch(config, gradients_in_rank)()
    assert sorted(ranks) == [0, 1]
    net = model()
    x, y = data().tensors
    F.cross_entropy(net(x), y).backward()  # one process, all the samples
    for out in ranks.values():
        assert out["bucket_bytes"] == 5 * 1024 * 1024 and out["as_view"] is True
        for mine, theirs in zip((p.grad for p in net.parameters()), out["grads"], strict=True):
            torch.testing.assert_close(theirs, mine, rtol=1e-5, atol=1e-6)


def numerics_of(model: str, config: dict) -> R.NumericsResult:
    """Four optimizer steps of 16 samples from the seeded weights, as the numerics check trains a configuration."""
    return Runner(WorkloadSpec(model), timeout_s=120).numerics(config, steps=4, samples_per_step=16, seed=0)


def test_the_numerics_run_of_two_ranks_is_one_processs_on_the_same_samples():
    one = numerics_of("autotune.examples:mlp", {reg.BATCH_SIZE.name: 16, reg.THREADS.name: 1})
    two = numerics_of("autotune.examples:mlp", {**TWO, reg.BATCH_SIZE.name: 8})
    assert one.ok and two.ok, (one.error, two.error)
    assert two.initial_digest == one.initial_digest and two.data_digest == one.data_digest  # comparable runs
    assert two.ranks == 2 and two.accumulation == 1 and two.samples_per_step == 16 and len(two.losses) == 4
    # no BatchNorm: each rank's mean gradient over its 8 samples, averaged by DDP, is the one process's over 16
    assert two.losses == pytest.approx(one.losses, rel=1e-4)
    assert two.grad_norms == pytest.approx(one.grad_norms, rel=1e-4)


def test_the_numerics_run_of_two_ranks_of_a_cnn_shows_batch_norm_over_each_ranks_share():
    one = numerics_of("autotune.examples:cnn", {reg.BATCH_SIZE.name: 16, reg.THREADS.name: 1})
    two = numerics_of("autotune.examples:cnn", {**TWO, reg.BATCH_SIZE.name: 8})
    assert one.ok and two.ok, (one.error, two.error)
    assert two.initial_digest == one.initial_digest and two.data_digest == one.data_digest
    assert two.ranks == 2 and two.accumulation == 1  # 8 samples a rank, not 16 in one process of 2 micro-batches
    gaps = [abs(a - b) / abs(b) for a, b in zip(two.losses, one.losses)]
    # the first step's forward already normalises over 8 samples a rank, not 16: close, not the same
    assert max(gaps) > 1e-5 and max(gaps) < 0.05, gaps


def checked_on_the_cnn(changes: dict, steps: int):
    """The check a study runs last, of the defaults with ``changes`` against the defaults in one process, as the
    phase plans it: the samples a step fit every run it may need, the reverts included. Returns the check's record
    and its answer."""
    from autotune.evidence import numerics_answer as NU
    from autotune.trial import trainings

    defaults = knobs.defaults()
    config = {**defaults, **changes}
    record = trainings.plan(config, defaults, changes, steps, number=1)
    trainings.check(Runner(WorkloadSpec("autotune.examples:cnn"), timeout_s=300).numerics, record)
    return record, NU.judge(record)


@pytest.mark.slow  # 12 s: three numerics runs of the cnn, one of them two ranks
def test_the_numerics_check_of_two_ranks_of_the_cnn_holds():
    """Two ranks of the defaults' batch against the defaults in one process: the same samples a step (a batch in
    each rank), and the answer is the check's own."""
    record, check = checked_on_the_cnn(TWO, steps=12)
    assert record["samples_per_step"] == 2 * knobs.defaults()[reg.BATCH_SIZE.name]  # a batch in each rank
    assert [run["ranks"] for run in record["runs"]] == [1, 1, 2], record["runs"]
    assert check.holds, check.text()


@pytest.mark.slow  # 40 s: six numerics runs of the cnn, three of them two ranks
def test_the_numerics_check_of_two_ranks_of_a_smaller_batch_names_the_batch_size():
    """Two ranks of 8 samples normalise the cnn's BatchNorm over 8 samples each, the defaults over 32: the numerics
    differ, and the revert that holds is the batch size's (two ranks of 32, which the check's 64 samples a step were
    sized to run), not the ranks' (one process of 8 still normalises over 8)."""
    record, check = checked_on_the_cnn({**TWO, reg.BATCH_SIZE.name: 8}, steps=12)
    assert record["samples_per_step"] == 64, record["samples_per_step"]  # 2 ranks of the defaults' 32
    assert [r["outcome"] for r in record["runs"]] == [R.OK] * 6, record["runs"]
    assert not check.holds and check.causes == (reg.BATCH_SIZE.name,), check.text()
    assert check.reverted == {reg.RANKS.name: False, reg.THREADS.name: False, reg.BATCH_SIZE.name: True}
    assert check.text().endswith(": batch_size=8"), check.text()


def test_a_numerics_run_whose_step_does_not_split_into_the_ranks_batches_is_not_applicable():
    res = numerics_of("autotune.examples:mlp", {**TWO, reg.BATCH_SIZE.name: 16})  # 16 samples a step, 2 ranks of 16
    assert res.outcome == R.NOT_APPLICABLE and "2 ranks of whole batches of 16" in res.error["message"], res.error
