from __future__ import annotations

import pytest
import torch
from torch import nn

from autotune import knobs
from autotune.protocol import MemoryMonitor, NonFinite, Settings, StepLoop, cv, run_protocol
from autotune.plan import Plan, infinite


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
    assert set(m.phases_s) == {"first_step", "warmup", "timed", "profile"}


class _Nan(nn.Linear):
    def forward(self, x):
        return super().forward(x) * float("nan")


def test_protocol_detects_non_finite_loss():
    loop, _ = _loop(_Nan(4, 2))
    with pytest.raises(NonFinite):
        run_protocol(loop, Settings.quick())


def test_memory_monitor_reports_self_peak():
    mon = MemoryMonitor().start(watch_children=False)
    x = torch.ones(32 << 20, dtype=torch.uint8)  # 32 MiB touched
    stats = mon.stop()
    assert stats["peak_tree_rss_bytes"] >= 32 << 20
    del x


def test_lean_settings_keep_the_windows_and_drop_the_profile_and_the_flop_count():
    full = Settings()
    lean = full.lean()
    assert lean.profile_steps == 0 and lean.count_flops is False
    assert (lean.windows, lean.window_s, lean.max_warmup_s) == (full.windows, full.window_s, full.max_warmup_s)
