"""The CUDA path on a real GPU (pytest -m gpu). Skips cleanly without CUDA."""

from __future__ import annotations


import pytest
import torch

from autotune import knobs
from autotune.machine import hardware
from autotune import result as R
from autotune.workloads.examples import SmallResNet
from autotune.trial.plan import Plan, fp32_precision_api
from autotune.trial.runner import Runner
from autotune.workloads.contract import WorkloadSpec

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

CUDA = knobs.Context(device_type="cuda", task="train", input_rank=4)


def plan(**cfg) -> Plan:
    return Plan.from_config(knobs.resolve(cfg, CUDA).config, "cuda:0", "train")


def test_backend_flags_reach_torch():
    """Through the TF32 API this torch uses (fp32_precision from 2.9): read back as inductor reads it."""
    plan(cudnn_benchmark=True, precision="tf32").apply_process()
    tf32 = (torch.backends.cuda.matmul.fp32_precision == "tf32" if fp32_precision_api()
            else torch.backends.cuda.matmul.allow_tf32)
    assert tf32 and torch.backends.cudnn.benchmark is True
    plan(cudnn_benchmark=False, precision="fp32").apply_process()
    tf32 = (torch.backends.cuda.matmul.fp32_precision == "tf32" if fp32_precision_api()
            else torch.backends.cuda.matmul.allow_tf32)
    assert not tf32 and torch.backends.cudnn.benchmark is False


def test_pinned_batches_and_non_blocking_copies():
    p = plan(pin_memory=True, num_workers=1)
    ds = torch.utils.data.TensorDataset(torch.randn(64, 3, 8, 8), torch.zeros(64, dtype=torch.long))
    batch = next(iter(p.make_loader(ds)))
    assert batch[0].is_pinned()
    on_gpu = p.to_device(batch)
    assert on_gpu[0].is_cuda


def test_channels_last_model_and_autocast_dtype():
    for precision, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        p = plan(memory_format="channels_last", precision=precision)
        model = p.prepare_model(SmallResNet(width=8))
        assert model.stem[0].weight.is_contiguous(memory_format=torch.channels_last)
        x = p.to_device(torch.randn(4, 3, 16, 16))
        with p.autocast():
            assert model.stem[0](x).dtype == dtype
        assert (p.make_scaler() is not None) == (precision == "fp16")


@pytest.mark.parametrize("example", ["cnn", "transformer", "mlp"])
def test_fp16_with_grad_scaler_trains_without_nan(example):
    res = Runner(WorkloadSpec(f"autotune.examples:{example}"), device="cuda:0").measure({"precision": "fp16"})
    assert res.outcome == R.OK, res.error
    assert res.not_applicable == {}


def test_every_cuda_knob_in_one_trial():
    cfg = {"precision": "bf16", "memory_format": "channels_last", "cudnn_benchmark": True, "pin_memory": True,
           "num_workers": 2, "cuda_allocator": "expandable_segments", "optimizer_impl": "fused", "compile": "default"}
    res = Runner(WorkloadSpec("autotune.examples:cnn"), device="cuda:0").measure(cfg)
    assert res.outcome == R.OK, res.error
    assert res.not_applicable == {} and res.config["pin_memory"] is True
    assert res.memory["peak_reserved_bytes"] >= res.memory["peak_allocated_bytes"] > 0
    # MFU needs the device's peak: every GPU of hardware.PEAK_FLOPS (the H100 and H200 the GPU tests run on) has one
    peak = hardware.peak_flops(torch.cuda.get_device_name(0), "bf16")
    if peak is None:
        assert res.mfu is None, f"{torch.cuda.get_device_name(0)} has no known peak, yet MFU is {res.mfu}"
    else:
        assert res.flops_per_sample and res.flops_per_sample > 0 and res.achieved_flops and res.achieved_flops > 0, res
        assert res.mfu is not None and 0 < res.mfu <= 1, res.mfu
        assert res.mfu == pytest.approx(res.achieved_flops / peak)


def test_cuda_oom_is_classified():
    res = Runner(WorkloadSpec("autotune.examples:transformer"), device="cuda:0").measure({"batch_size": 65536})
    assert res.outcome == R.OOM, res.error


def test_memory_figure_agrees_with_allocator():
    cfg = knobs.resolve({"batch_size": 64}, CUDA).config
    res = Runner(WorkloadSpec("autotune.examples:cnn"), device="cuda:0").measure(cfg)
    assert res.ok
    # independently: the same step in this process
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    p = Plan.from_config(cfg, "cuda:0", "train")
    model = p.prepare_model(SmallResNet())
    step = p.stepper(model, p.build_optimizer(model))
    batch = p.to_device((torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,))))
    for _ in range(5):
        step([batch])
    torch.cuda.synchronize()
    independent = torch.cuda.max_memory_reserved()
    assert abs(res.peak_memory_bytes - independent) / independent < 0.25, (res.peak_memory_bytes, independent)


def test_expandable_segments_reaches_the_trial_environment():
    args = (("value", "expandable_segments:True"), ("var", "PYTORCH_CUDA_ALLOC_CONF"))
    res = Runner(WorkloadSpec("failing_workloads:env_check", model_args=args), device="cuda:0").measure(
        {"cuda_allocator": "expandable_segments"}
    )
    assert res.ok, res.error


# ---------------------------------------------------------------- CUDA graphs in the user's loop


class LossInForward(torch.nn.Module):
    """A classifier that computes its loss in its forward (as Hugging Face models do): under reduce-overhead the loss
    is an output of the compiled graph, in the graphs' memory."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                                       torch.nn.Linear(64, 4))

    def forward(self, x, y):
        return {"loss": torch.nn.functional.cross_entropy(self.net(x), y)}


def graphs_step():
    """apply() of compile=reduce-overhead on this GPU, and host batches for it (dict batches: the model's keywords)."""
    from autotune.export.config import Config

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = LossInForward()
    cfg = Config(knobs={"compile": "reduce-overhead", "batch_size": 8}, device="cuda:0", global_batch=8)
    model, _, step = cfg.apply(model, None, torch.optim.SGD(model.parameters(), lr=0.1), report_speed=False)
    batches = [{"x": torch.randn(8, 16), "y": torch.randint(0, 4, (8,))} for _ in range(16)]
    return model, step, batches


def test_under_reduce_overhead_the_loss_of_step_k_is_unchanged_after_step_k_plus_1():
    from torch._dynamo.utils import counters  # torch's count of compiled graphs it ran without CUDA graphs

    model, step, batches = graphs_step()
    assert step.stepper.graphs and step.plan.cuda_graphs
    skipped = counters["inductor"]["cudagraph_skips"]
    for batch in batches[:4]:  # the first call warms up, the second records, the rest replay
        step(batch)
    assert counters["inductor"]["cudagraph_skips"] == skipped, "the step ran without CUDA graphs (torch skipped them)"
    kept, read_then = [], []
    for batch in batches[4:10]:
        loss = step(batch)
        kept.append(loss)
        read_then.append(float(loss))
    assert [float(v) for v in kept] == read_then and len(set(read_then)) > 1
    # the same step without the copy: torch's graphs overwrite the loss it returned (what the copy guards against)
    step.stepper.graphs = False
    first = step(batches[10])
    step(batches[11])
    with pytest.raises(RuntimeError, match="overwritten"):
        float(first)


def test_under_reduce_overhead_evaluate_neither_compiles_nor_records_graphs(monkeypatch):
    import math

    from torch._dynamo.utils import counters
    from torch._inductor import cudagraph_trees

    recorded: list[int] = []
    original = cudagraph_trees.CUDAGraphTreeManager.record_function

    def counting(self, *args, **kwargs):
        recorded.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cudagraph_trees.CUDAGraphTreeManager, "record_function", counting)
    model, step, batches = graphs_step()
    for batch in batches[:5]:
        step(batch)
    torch.cuda.synchronize()
    graphs, compiled = len(recorded), counters["stats"]["unique_graphs"]
    assert graphs >= 2, recorded  # the training's forward and backward were recorded: the count sees a recording
    val = step.evaluate(batches[5:9])
    assert math.isfinite(val) and model.training
    for batch in batches[9:12]:  # training goes on replaying the graphs it had
        step(batch)
    torch.cuda.synchronize()
    assert len(recorded) == graphs and counters["stats"]["unique_graphs"] == compiled


def test_an_out_of_memory_under_cuda_graphs_is_typed():
    """What the ceiling's graphs probes step down on: an OOM while compiling, recording or replaying is an OOM."""
    res = Runner(WorkloadSpec("autotune.examples:transformer"), device="cuda:0").measure(
        {"batch_size": 65536, "compile": "reduce-overhead"})
    assert res.outcome == R.OOM, res.error


def test_the_ceiling_is_probed_with_the_graphs_where_the_search_tries_them():
    from autotune.evidence.ceiling import SPACE, Ceiling
    from autotune.knobs.space import Dimension
    from autotune.tuning import ceiling_probe

    runner = Runner(WorkloadSpec("autotune.examples:cnn"), device="cuda:0")
    search = {"batch_size": Dimension("batch_size", (32, 64)),
              "compile": Dimension("compile", ("off", "reduce-overhead"))}
    base = knobs.resolve({"batch_size": 32}, CUDA).config
    eager = Ceiling(64, SPACE, None, [(64, R.OK, 1)], 1.0)
    found = ceiling_probe.probe_graphs(runner, "cuda:0", base, search, eager, None)
    assert [(b, o) for b, o, _ in found.graphs] == [(64, R.OK)] and found.graphs[0][2] > 0
    assert found.batch_size == 64 and "with CUDA graphs too" in found.text()


def test_under_reduce_overhead_accumulated_gradients_add_up():
    """Gradient accumulation across graph replays: the weights after a few optimizer steps of 2 micro-batches are
    those of the same training without compile (torch's graph trees alone would leave the last micro-batch's)."""
    from autotune.export.config import Config

    batches = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(12)]
    trained = []
    for mode in ("off", "reduce-overhead"):
        torch._dynamo.reset()
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
        cfg = Config(knobs={"compile": mode, "batch_size": 8}, device="cuda:0", global_batch=16)
        model, _, step = cfg.apply(model, None, torch.optim.SGD(model.parameters(), lr=0.5), report_speed=False)
        assert step.plan.accumulation == 2 and step.stepper.graphs is (mode != "off")
        for batch in batches:
            step(batch)
        trained.append([p.detach().cpu() for p in model.parameters()])
    assert all(torch.allclose(a, b, rtol=1e-3, atol=1e-4) for a, b in zip(*trained))
