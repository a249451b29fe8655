from __future__ import annotations

import pytest
import torch
from torch import nn

from autotune import knobs
from autotune.errors import KnobError
from autotune.workloads.examples import SmallResNet, TinyLM
from autotune.knobs import effects as fx
from autotune.knobs import registry
from autotune.testing.graphs import InGraphLoss
from autotune.testing.graphs import batches as graph_batches
from autotune.trial.plan import (CARRIED_OUT, NotApplicableAtRuntime, Plan, checkpoint_blocks, declared,
                                 fp32_precision_api, infinite, optimizer_switches, uncompiled)

CPU = knobs.Context(device_type="cpu", task="train", input_rank=4)


def plan(**overrides) -> Plan:
    cfg = knobs.resolve(overrides, CPU).config
    return Plan.from_config(cfg, "cpu", "train")


def test_loader_kwargs_follow_knobs():
    assert plan().loader_kwargs() == {"batch_size": 32, "num_workers": 0, "pin_memory": False, "drop_last": True}
    kw = plan(num_workers=2, prefetch_factor=4, persistent_workers=True, batch_size=16).loader_kwargs()
    assert kw["num_workers"] == 2 and kw["prefetch_factor"] == 4 and kw["persistent_workers"] is True
    assert kw["batch_size"] == 16


def test_environment_and_threads():
    p = plan(threads=1)
    assert p.environment()["OMP_NUM_THREADS"] == "1"
    cuda = Plan({"cuda_allocator": "expandable_segments", "batch_size": 8}, torch.device("cpu"))
    assert cuda.environment()["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"


def test_channels_last_reaches_model_and_inputs():
    p = plan(memory_format="channels_last")
    model = p.prepare_model(SmallResNet())
    assert model.stem[0].weight.is_contiguous(memory_format=torch.channels_last)
    x = p.to_device((torch.zeros(2, 3, 8, 8), torch.zeros(2, dtype=torch.long)))
    assert x[0].is_contiguous(memory_format=torch.channels_last)


def test_activation_checkpointing_wraps_blocks_and_keeps_gradients():
    torch.manual_seed(0)
    ref = TinyLM(vocab=32, dim=16, depth=2, seq_len=8)
    ck = TinyLM(vocab=32, dim=16, depth=2, seq_len=8)
    ck.load_state_dict(ref.state_dict())
    p = plan(activation_checkpointing=True)
    ck = p.prepare_model(ck)
    assert p.notes["checkpointed_blocks"] == 2
    x = torch.randint(0, 32, (2, 8))
    ref(x).sum().backward()
    ck(x).sum().backward()
    assert torch.allclose(ref.head.weight.grad, ck.head.weight.grad, atol=1e-5)


def test_checkpointing_without_blocks_is_not_applicable():
    assert checkpoint_blocks(nn.Linear(2, 2)) == []
    with pytest.raises(NotApplicableAtRuntime):
        plan(activation_checkpointing=True).prepare_model(nn.Linear(2, 2))


def test_optimizer_impl_rebuilds_with_same_hyperparameters():
    model = nn.Linear(4, 4)
    p = plan(optimizer_impl="foreach")
    opt = p.build_optimizer(model, lambda ps: torch.optim.AdamW(ps, lr=0.123, weight_decay=0.5))
    assert opt.param_groups[0]["foreach"] is True
    assert opt.param_groups[0]["lr"] == 0.123 and opt.param_groups[0]["weight_decay"] == 0.5
    with pytest.raises(NotApplicableAtRuntime):
        plan(optimizer_impl="fused").build_optimizer(model, _NoImpl)


class _NoImpl(torch.optim.SGD):
    def __init__(self, params):  # a user optimizer that takes no implementation switch
        super().__init__(params, lr=0.1)


def test_bf16_step_autocasts_and_trains():
    p = plan(precision="bf16")
    model = p.prepare_model(nn.Linear(4, 3))
    opt = p.build_optimizer(model)
    seen = {}

    def loss_fn(out, target):
        seen["dtype"] = out.dtype
        return nn.functional.cross_entropy(out.float(), target)

    step = p.stepper(model, opt, loss_fn)
    before = model.weight.detach().clone()
    step([(torch.randn(8, 4), torch.randint(0, 3, (8,)))])
    assert seen["dtype"] == torch.bfloat16
    assert not torch.equal(before, model.weight)


def test_global_batch_sets_accumulation():
    cfg = knobs.resolve({"batch_size": 16}, CPU).config
    assert Plan.from_config(cfg, "cpu", "train", global_batch=64).accumulation == 4
    assert Plan.from_config(cfg, "cpu", "train").accumulation == 1
    assert Plan.from_config(cfg, "cpu", "infer", global_batch=64).accumulation == 1  # inference accumulates nothing
    with pytest.raises(KnobError, match="does not divide"):
        Plan.from_config(cfg, "cpu", "train", global_batch=40)
    with pytest.raises(KnobError, match="does not divide"):
        Plan.from_config(cfg, "cpu", "infer", global_batch=40)


def test_infinite_cycles_and_rejects_empty():
    it = infinite([1, 2])
    assert [next(it) for _ in range(5)] == [1, 2, 1, 2, 1]
    with pytest.raises(KnobError, match="smaller than one batch"):
        next(infinite([]))


def test_infer_step_runs_in_inference_mode():
    p = Plan.from_config(knobs.resolve({}, knobs.Context(task="infer")).config, "cpu", "infer")
    model = p.prepare_model(nn.Linear(4, 2))
    assert not model.training
    out = p.stepper(model, None)([(torch.randn(3, 4),)])
    assert out.is_inference()


def test_the_plan_carries_out_every_effect_the_registry_declares():
    for k in knobs.REGISTRY:
        for effect in k.effects:
            assert isinstance(effect, CARRIED_OUT), (k.name, effect)
    assert optimizer_switches() == {"foreach", "fused"}


def backend_flags() -> dict:
    """Every backend flag a knob sets on a GPU, read through the one TF32 API this torch uses (a name needs no GPU)."""
    return Plan({"batch_size": 8}, torch.device("cuda")).flag_values()


def set_backend_flags(flags: dict) -> None:
    for path, value in flags.items():
        *parents, attribute = path.split(".")
        owner = torch
        for part in parents:
            owner = getattr(owner, part)
        setattr(owner, attribute, value)


@pytest.fixture
def restore_backend_flags():
    saved, threads = backend_flags(), torch.get_num_threads()
    yield
    set_backend_flags(saved)
    torch.set_num_threads(threads)


def tf32_matmuls() -> bool:
    if fp32_precision_api():
        return torch.backends.cuda.matmul.fp32_precision == "tf32"
    return torch.backends.cuda.matmul.allow_tf32


def test_backend_flags_are_set_on_their_device_only(restore_backend_flags):
    set_backend_flags({path: (False if path.endswith("benchmark") else value)
                       for path, value in backend_flags().items()})
    Plan({"precision": "fp32", "batch_size": 8}, torch.device("cuda")).apply_flags()
    Plan({"cudnn_benchmark": True, "precision": "tf32", "batch_size": 8}, torch.device("cpu")).apply_process()
    assert torch.backends.cudnn.benchmark is False and not tf32_matmuls()
    # torch.device("cuda") needs no GPU to be named; the flags are plain process state
    gpu = {"cudnn_benchmark": True, "precision": "tf32", "threads": 1, "batch_size": 8}
    Plan(gpu, torch.device("cuda")).apply_process()
    assert torch.backends.cudnn.benchmark is True and tf32_matmuls() and torch.get_num_threads() == 1
    Plan({"precision": "fp32", "batch_size": 8}, torch.device("cuda")).apply_process()
    assert not tf32_matmuls()  # fp32 keeps PyTorch's default: no TF32 matmuls ...
    flags = backend_flags()
    assert all(v in (True, "tf32") for p, v in flags.items() if "cudnn" in p and "benchmark" not in p)  # ... TF32 convs


def test_tf32_is_set_through_one_api_the_one_this_torch_has(restore_backend_flags):
    """torch 2.9 and newer: fp32_precision, never the legacy allow_tf32 flags (reading one after the other raises)."""
    paths = set(backend_flags())
    if fp32_precision_api():
        assert {"backends.cuda.matmul.fp32_precision", "backends.cudnn.conv.fp32_precision"} <= paths
        assert not any(p.endswith("allow_tf32") for p in paths)
        Plan({"precision": "tf32", "batch_size": 8}, torch.device("cuda")).apply_flags()
        assert torch.backends.cuda.matmul.fp32_precision == "tf32"  # what inductor reads
    else:
        assert {"backends.cuda.matmul.allow_tf32", "backends.cudnn.allow_tf32"} <= paths
        assert not any(p.endswith("fp32_precision") for p in paths)


def test_the_legacy_tf32_flags_serve_a_torch_without_fp32_precision():
    """Read here without setting them: in a torch that has the new API, reading a legacy flag it set raises."""
    legacy = {flag.path for _, flag in declared(fx.Flag) if flag.in_use(fp32_precision_api=False)}
    new = {flag.path for _, flag in declared(fx.Flag) if flag.in_use(fp32_precision_api=True)}
    assert legacy == {"backends.cudnn.benchmark", "backends.cuda.matmul.allow_tf32", "backends.cudnn.allow_tf32"}
    assert new == {"backends.cudnn.benchmark", "backends.cuda.matmul.fp32_precision",
                   "backends.cudnn.conv.fp32_precision", "backends.cudnn.rnn.fp32_precision"}


def test_fp16_trains_with_a_grad_scaler_and_infers_without():
    train = Plan({"precision": "fp16", "batch_size": 8}, torch.device("cpu"), "train")
    assert isinstance(train.make_scaler(), torch.amp.GradScaler)
    with train.autocast():
        assert torch.get_autocast_dtype("cpu") == torch.float16 and torch.is_autocast_enabled("cpu")
    assert Plan({"precision": "fp16", "batch_size": 8}, torch.device("cpu"), "infer").make_scaler() is None
    assert plan(precision="bf16").make_scaler() is None and plan().make_scaler() is None


def test_a_knob_absent_from_the_configuration_is_not_applied():
    p = Plan({"batch_size": 8}, torch.device("cpu"))
    assert p.environment() == {} and p.loader_kwargs() == {"batch_size": 8, "drop_last": True}
    assert p.precision == "fp32" and not p.channels_last and not p.pin_memory
    model = nn.Linear(2, 2)
    assert p.compile_model(model) is model
    assert Plan({"pin_memory": True, "batch_size": 8}, torch.device("cpu")).loader_kwargs()["pin_memory"] is False


# ---------------------------------------------------------------- CUDA graphs


def graphs_plan(mode: str, device: str = "cuda") -> Plan:
    return Plan({registry.COMPILE.name: mode, knobs.BATCH_KNOB: 4}, torch.device(device))


def test_cuda_graphs_are_the_compile_modes_that_capture_them_on_a_cuda_device():
    """The registry's declaration agrees with torch's own modes (the ones that turn on triton.cudagraphs)."""
    import torch._inductor

    effect = next(e for e in registry.COMPILE.effects if isinstance(e, fx.Compile))
    for mode in registry.COMPILE.choices:
        torch_says = (mode not in (effect.off, effect.plain)
                      and bool(torch._inductor.list_mode_options(mode).get("triton.cudagraphs")))
        assert graphs_plan(mode).cuda_graphs is torch_says, mode
        assert graphs_plan(mode, "cpu").cuda_graphs is False  # no CUDA graphs without CUDA
    assert graphs_plan("reduce-overhead").cuda_graphs and not graphs_plan("default").cuda_graphs
    # and what a by-hand export says of them: keep a loss as a copy
    assert all(("clone()" in registry.COMPILE.how_to(mode)) is (mode in effect.graphs)
               for mode in registry.COMPILE.choices if mode != effect.off)


def test_only_a_compiled_model_under_cuda_graphs_has_its_step_copied():
    model = nn.Linear(4, 1)
    compiled = torch.compile(model, backend="eager")  # compiled lazily: nothing runs here
    assert uncompiled(compiled) is model and uncompiled(model) is model
    assert graphs_plan("reduce-overhead").stepper(compiled, None).graphs
    assert not graphs_plan("reduce-overhead").stepper(model, None).graphs  # the eager twin (FLOPs are counted on it)
    assert not graphs_plan("default").stepper(compiled, None).graphs
    assert not graphs_plan("reduce-overhead", "cpu").stepper(compiled, None).graphs
    assert graphs_plan("reduce-overhead").stepper(compiled, None).eval_model is model
    assert graphs_plan("default").stepper(compiled, None).eval_model is compiled
    out = torch.ones(3)
    assert plan().stepper(model, None).kept(out).data_ptr() == out.data_ptr()  # no copy where there are no graphs


@pytest.mark.parametrize("graphs", [False, True])
def test_under_cuda_graphs_a_loss_outlives_the_next_replay(graphs):
    """The loss of step k, kept, reads the same after step k+1 with CUDA graphs (a copy out of their memory); the
    same model without the copy shows the overwrite this guards against."""
    torch.manual_seed(0)
    model = InGraphLoss()
    p = plan()
    stepper = p.stepper(model, torch.optim.SGD(model.parameters(), lr=0.1))
    stepper.graphs = graphs
    kept, read_then = [], []
    for batch in graph_batches(4):
        loss = stepper.micro(batch)
        stepper.finish()
        kept.append(loss)
        read_then.append(float(loss))
    assert len(set(read_then)) == 4
    assert ([float(v) for v in kept] == read_then) is graphs
    p.task = "infer"
    outputs = [stepper.infer([b]) for b in graph_batches(2)]
    assert (float(outputs[0]) != float(outputs[1])) is graphs


def test_under_cuda_graphs_accumulated_gradients_live_in_their_own_memory():
    """With gradient accumulation the gradients are allocated before the first backward and zeroed, not dropped,
    after each optimizer step (one buffer all along: a backward graph's output is never the .grad); they add up to
    the reference's. Without CUDA graphs, set to None as before."""
    p = Plan.from_config(knobs.resolve({"batch_size": 4}, CPU).config, "cpu", "train", global_batch=8)
    assert p.accumulation == 2
    torch.manual_seed(0)
    model, reference = nn.Linear(4, 1), nn.Linear(4, 1)
    reference.load_state_dict(model.state_dict())
    stepper = p.stepper(model, torch.optim.SGD(model.parameters(), lr=0.0))
    stepper.graphs = True
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    nn.functional.mse_loss(reference(x), y).backward()  # the whole batch at once: the mean of the two halves
    stepper.micro((x[:4], y[:4]))
    buffers = [q.grad.data_ptr() for q in model.parameters()]
    stepper.micro((x[4:], y[4:]))
    assert all(torch.allclose(q.grad, r.grad, atol=1e-6) for q, r in zip(model.parameters(), reference.parameters()))
    stepper.finish()
    assert all(q.grad is not None and not q.grad.any() for q in model.parameters())
    stepper.micro((x[:4], y[:4]))
    assert [q.grad.data_ptr() for q in model.parameters()] == buffers
    stepper.graphs = False
    stepper.finish()
    assert all(q.grad is None for q in model.parameters())


HOOK_SCRIPT = """
import json, sys
import torch, torch.distributed as dist
from autotune.trial.plan import Plan

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(1)
x, y = torch.randn(32, 8) * 300, torch.randn(32, 1)  # gradients large enough that 16 bits round them
answer = {}
for hook in ("none", "fp16"):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    ddp = Plan({"ranks": 2, "comm_hook": hook}, torch.device("cpu"), "train").distribute(model)
    half = slice(16 * rank, 16 * (rank + 1))
    torch.nn.functional.mse_loss(ddp(x[half]), y[half]).backward()
    answer[hook] = torch.cat([p.grad.flatten() for p in model.parameters()]).tolist()
    if rank == 0:  # one process, the whole batch, from the same weights
        torch.manual_seed(0)
        one = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        torch.nn.functional.mse_loss(one(x), y).backward()
        answer["one"] = torch.cat([p.grad.flatten() for p in one.parameters()]).tolist()
open(f"rank{rank}.json", "w").write(json.dumps(answer))
dist.destroy_process_group()
"""


@pytest.mark.slow  # 8 s on the 2-core VM: two ranks import torch
def test_the_fp16_communication_hook_all_reduces_one_process_gradients_rounded_to_16_bits_on_gloo(tmp_path):
    """comm_hook=fp16 on gloo, two ranks started by torchrun: each rank's gradients after the all-reduce are one
    process's gradients over the whole batch within fp16's rounding, and not the uncompressed all-reduce's (the hook
    ran); without the hook they agree to fp32's rounding."""
    import json
    import os
    import subprocess
    import sys

    (tmp_path / "train.py").write_text(HOOK_SCRIPT)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           "train.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    one = torch.tensor(ranks[0]["one"])
    for r in ranks:
        plain, fp16 = torch.tensor(r["none"]), torch.tensor(r["fp16"])
        assert torch.allclose(plain, one, rtol=1e-5, atol=1e-5)
        assert torch.allclose(fp16, one, rtol=2e-3, atol=1e-3)  # fp16 keeps 11 bits: a relative 2^-11
        assert not torch.equal(fp16, plain)  # rounded to 16 bits: the hook ran
    assert ranks[0]["fp16"] == ranks[1]["fp16"]  # one all-reduced sum in both ranks
