from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


GROWTH = 256 << 20  # what the measured process allocates and touches
# In a fresh process (pytest's own peak is whatever the tests before it left): its peak before, its resident memory
# before, and what the monitor reports around the allocation. Started by a small launcher, not by pytest itself: Linux
# keeps a process's peak across exec and counts the memory of the process it was forked from, so a process pytest
# starts begins with pytest's peak (800 MB late in a CI run); the launcher's child begins with the launcher's.
LAUNCH = "import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-c', sys.argv[1]]).returncode)"
PEAK_SCRIPT = f"""
import json, resource, psutil, torch
from autotune.protocol import MemoryMonitor
old_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
before = psutil.Process().memory_info().rss
mon = MemoryMonitor().start(watch_children=False)
x = torch.ones({GROWTH}, dtype=torch.uint8)
print(json.dumps({{"old_peak": old_peak, "before": before, "stats": mon.stop()}}))
"""


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
