from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from autotune import knobs
from autotune.trial.protocol import NonFinite, Settings, StepLoop, cv, run_protocol
from autotune.trial.plan import Plan, infinite


def test_cv():
    assert cv([1.0]) == 0.0
    assert cv([1.0, 1.0, 1.0]) == 0.0
    assert cv([9.0, 11.0]) == pytest.approx(0.1)


def _loop(model: nn.Module, precision: str = "fp32") -> tuple[StepLoop, Plan]:
    cfg = knobs.resolve({"precision": precision, "batch_size": 8}, knobs.Context()).config
    p = Plan.from_config(cfg, "cpu", "train")
    model = p.prepare_model(model)
    step = p.stepper(model, p.build_optimizer(model))
    data = [(torch.randn(8, 4), torch.randint(0, 2, (8,)))] * 4
    return StepLoop(p, step, infinite(data)), p


def test_protocol_in_process():
    loop, _ = _loop(nn.Linear(4, 2))
    m = run_protocol(loop, Settings.quick(), eager=loop.stepper)
    assert len(m.window_samples_per_s) == 3 and m.samples_per_s > 0
    assert m.flops_per_step and m.flops_per_step > 0
    assert m.profile["top_ops"] and 0 <= m.profile["data_wait_share"] <= 1
    assert set(m.phases_s) == {"first_step", "warmup", "timed", "flops", "profile"}


def test_the_memory_is_read_after_the_windows_and_before_the_flop_count_and_the_profile(monkeypatch):
    """The trial's peak is what the training needs (its one-time costs included), not the protocol's own extras: the
    FLOP count runs an extra step on the uncompiled model, the profile more steps under the profiler."""
    import autotune.trial.protocol as protocol

    loop, _ = _loop(nn.Linear(4, 2))
    events: list[str] = []
    real_count, real_profile = protocol.count_flops, protocol.profile_steps
    monkeypatch.setattr(protocol, "count_flops", lambda *a: (events.append("flops"), real_count(*a))[1])
    monkeypatch.setattr(protocol, "profile_steps", lambda *a: (events.append("profile"), real_profile(*a))[1])
    real_timed = loop.timed

    def timed(n=1, stepper=None):  # a timed call between warm-up's end and the memory is a window
        events.append("window" if "warm" in events and "memory" not in events else "step")
        return real_timed(n, stepper)

    loop.timed = timed  # type: ignore[method-assign]
    m = run_protocol(loop, Settings.quick(), eager=loop.stepper, on_warm=lambda: events.append("warm"),
                     on_memory_checkpoint=lambda: events.append("memory"))
    assert m.flops_per_step and m.flops_per_step > 0
    tail = [e for e in events if e != "step"]
    assert tail[0] == "warm" and tail.index("memory") == tail.index("warm") + 1 + len(m.window_samples_per_s)
    assert tail[-3:] == ["memory", "flops", "profile"] and events.count("window") == len(m.window_samples_per_s)
    assert events.index("warm") > events.index("step")  # after the first step and the warm-up


class _Nan(nn.Linear):
    def forward(self, x):
        return super().forward(x) * float("nan")


def test_protocol_detects_non_finite_loss():
    loop, _ = _loop(_Nan(4, 2))
    with pytest.raises(NonFinite):
        run_protocol(loop, Settings.quick())


GROWTH = 256 << 20  # what the measured process allocates and touches
# In a fresh process (pytest's own peak is whatever the tests before it left): its peak before, its resident memory
# before, and what the monitor reports around the allocation. Started by a small launcher, not by pytest itself: Linux
# keeps a process's peak across exec and counts the memory of the process it was forked from, so a process pytest
# starts begins with pytest's peak (800 MB late in a CI run); the launcher's child begins with the launcher's.
LAUNCH = "import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-c', sys.argv[1]]).returncode)"
PEAK_SCRIPT = f"""
import json, resource, psutil, torch
from autotune.trial.protocol import MemoryMonitor
old_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
before = psutil.Process().memory_info().rss
mon = MemoryMonitor().start(watch_children=False)
x = torch.ones({GROWTH}, dtype=torch.uint8)
print(json.dumps({{"old_peak": old_peak, "before": before, "stats": mon.stop()}}))
"""


@pytest.mark.slow  # 4 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_memory_monitor_reports_self_peak():
    """The peak covers what the process allocated while watched: the resident memory before plus the growth, which
    lies above the process's old peak, so a monitor that reported the old peak (or what start saw) fails."""
    done = subprocess.run([sys.executable, "-c", LAUNCH, PEAK_SCRIPT], capture_output=True, text=True, timeout=300,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    before, stats = got["before"], got["stats"]
    grown = before + GROWTH
    assert got["old_peak"] < grown - (128 << 20), got  # the allocation raises the peak well above the old one
    for key in ("peak_self_rss_bytes", "peak_tree_rss_bytes"):
        assert grown - (32 << 20) <= stats[key] <= grown + (64 << 20), (key, stats[key] - before, got)


# A parent that grew to 1 GiB, then starts the measured process directly (as a runner may start a trial).
BIG_PARENT = ("import subprocess, sys; big = bytearray(1 << 30); big[::4096] = b'x' * len(big[::4096]); "
              "sys.exit(subprocess.run([sys.executable, '-c', sys.argv[1]]).returncode)")


@pytest.mark.slow  # 5 s in a full run on a 2-core CPU
def test_memory_monitor_does_not_count_the_peak_of_the_process_that_started_it():
    """A trial started as a fresh interpreter by a large parent reports its own peak: Linux starts a new process's
    ru_maxrss at its parent's memory and keeps it across exec, so a monitor that read it reported the parent's."""
    done = subprocess.run([sys.executable, "-c", BIG_PARENT, PEAK_SCRIPT], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    grown = got["before"] + GROWTH
    assert got["old_peak"] > grown + (256 << 20), got  # the kernel's own count starts at the parent's 1 GiB
    for key in ("peak_self_rss_bytes", "peak_tree_rss_bytes"):
        assert got["stats"][key] <= grown + (64 << 20), (key, got)


def test_lean_settings_keep_the_windows_and_drop_the_profile_and_the_flop_count():
    full = Settings()
    lean = full.lean()
    assert lean.profile_steps == 0 and lean.count_flops is False
    assert (lean.windows, lean.window_s, lean.max_warmup_s) == (full.windows, full.window_s, full.max_warmup_s)


def test_kernel_names_tell_the_knobs_in_force():
    """Names as cuBLAS, cuDNN, ATen and the profiler give them on an H100 (and a CPU's ATen ops)."""
    from autotune.trial.protocol import kernel_classes

    named = {
        "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_"
        "execute_segment_k_off_kernel": "tf32",
        "cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4": "tf32",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64": "bf16",
        "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn": "fp16",
        "void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, "
        "(cudnnKernelDataType_t)2>": "layout_conversions",
        "sm80_xmma_fprop_implicit_gemm_indexed_wo_smem_f32f32_tf32f32_f32_nhwckrsc_nhwc": "nhwc",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
        "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>>": "fused_optimizer",
        "aten::_fused_adamw_": "fused_optimizer",
        "aten::_foreach_addcmul_": "foreach_optimizer",
        "Memcpy HtoD (Pinned -> Device)": "pinned_copies",
        "Memcpy HtoD (Pageable -> Device)": "pageable_copies",
        "cudaGraphLaunch": "graph_launches",
        "aten::convolution": "forward_ops",
    }
    for name, cls in named.items():
        found = {k for k, v in kernel_classes([(name, 3)]).items() if v}
        assert cls in found, (name, found)
    assert kernel_classes([("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 1)])["fp16"] == 0  # bf16 is not fp16
    assert kernel_classes([("nchwToNhwcKernel", 1)])["nhwc"] == 0  # a conversion is no NHWC convolution
    assert kernel_classes([("sm90_xmma_gemm_f32f32_f32f32_f32_nn_n", 1)])["tf32"] == 0  # strict fp32
    assert kernel_classes([("ampere_bf16_s16816gemm_bf16_128x128_ldg8", 1)])["tf32"] == 0  # a bf16 tensor-core GEMM
