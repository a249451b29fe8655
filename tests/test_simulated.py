"""The simulated GPU (autotune.testing.simulated): whole studies run unchanged against it in simulated time, held to
the properties a GPU study must keep on a small set of seeds (benchmarks/simulated_studies.py runs 200), and the GPU
proof (benchmarks/gpu_study.py --simulate) run whole."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import clock
from autotune import result as R
from autotune.testing.simulated import SHAPES, SimulatedClock, SimulatedRunner, properties, run_study
from autotune.testing.simulated import device as D
from autotune.trial.protocol import Settings

ROOT = Path(__file__).resolve().parents[1]


def test_the_device_is_shaped_by_the_h200_runs():
    """The LM's fp32 defaults at about 645 samples/s and 55% of the fp32 peak, tf32 at batch 256 about 2.9x, 61 GiB at
    batch 256 in fp32: the figures the H200 study measured."""
    shape = SHAPES["lm-h200"]
    w, defaults = shape.workload, {"batch_size": 32}
    rate = D.step(w, defaults).samples_per_s
    assert 600 < rate < 680
    assert D.mfu(shape.device, w, defaults, rate)[1] == pytest.approx(0.55, abs=0.05)
    assert 2.5 < D.truth(w, {"precision": "tf32", "batch_size": 256}, defaults) < 3.2
    assert D.peak_memory(w, {"batch_size": 256}) / D.GiB == pytest.approx(61.2, rel=0.05)
    assert D.step(w, defaults).sigma < 0.03  # GPU-bound: about 1% between processes
    compiled = {"precision": "bf16", "compile": "default", "batch_size": 32}
    assert D.step(w, compiled).sigma > 0.1  # launch-bound and compiled: the H200's ±25%


def test_a_trial_past_its_phase_deadline_or_its_compile_limit_ends_as_the_real_runner_says():
    shape = SHAPES["lm-h200"]
    sim = SimulatedClock()
    runner = SimulatedRunner(shape, sim, 0, compile_limit_s=10.0, settings=Settings())
    slow = runner.measure({"compile": "default", "batch_size": 32})  # compiles for about 15 s: past the limit
    assert slow.outcome == R.SLOWER and "10.0s compile limit" in slow.error["message"]
    start = sim.time()
    runner = SimulatedRunner(shape, sim, 0, settings=Settings())
    cut = runner.measure({"compile": "default", "batch_size": 32}, deadline=start + 8.0)  # 8 s left: the compile stops
    assert cut.outcome == R.SLOWER and "left of its phase's time" in cut.error["message"]
    assert sim.time() <= start + 8.0 + 1.0 + shape.workload.exit_s
    late = runner.measure({"batch_size": 32}, deadline=sim.time() - 1.0)
    assert late.outcome == R.OUT_OF_TIME and late.wall_s == 0.0
    assert runner.measure({"batch_size": 1024}).outcome == R.OOM  # 240 GiB of activations on a 140 GiB device


def test_a_study_runs_in_simulated_time_and_hands_the_clock_back(tmp_path):
    before = clock.current()
    study = run_study(SHAPES["lm-h200"], 240.0, 0, f"journal:{tmp_path / 'sim.log'}", "lm", sampler="tpe")
    assert clock.current() is before
    assert study.wall_s <= 240.0 * 1.05 and study.wall_s > 120.0  # the budget was spent, and kept
    assert study.summary.verdict is not None and study.processes >= 10
    assert any(line.startswith("batch ceiling: ") for line in study.lines)
    checked = properties.check(study)
    assert checked.budget_kept and checked.claim_sound, checked.claim_problems
    assert checked.contradictions == []


SMALL = [(shape, budget, noise, seed) for seed, (shape, budget, noise) in enumerate([
    ("lm-h200", 240.0, "unequal"), ("lm-h100", 900.0, "equal"), ("cnn-h100", 240.0, "drifting"),
    ("loader-h200", 900.0, "heavy"), ("flat-h100", 240.0, "unequal"), ("lm-h200", 120.0, "drifting"),
    ("cnn-h100", 900.0, "unequal"), ("flat-h100", 900.0, "heavy")])]


@pytest.mark.slow  # about 30 s: eight whole studies
def test_simulated_studies_keep_the_budget_claims_and_verdicts(tmp_path):
    """The benchmark's properties on eight studies (every machine, noise and a short and a long budget): each ends
    within 5% of its budget, each claim rests on 3 processes or says it is not confirmed, no verdict contradicts
    itself, and the picks and intervals are where the 200-seed benchmark holds them."""
    checked = []
    for shape, budget, noise, seed in SMALL:
        study = run_study(SHAPES[shape].with_noise(noise), budget, seed, f"journal:{tmp_path / 'sims.log'}",
                          f"{shape}-{budget:g}-{seed}", sampler="tpe")
        checked.append(properties.check(study))
    counts = properties.summary(checked)
    said = "\n".join(f"{c.study}: {c.verdict} {c.claim_problems} {c.contradictions}" for c in checked)
    assert counts["budget_kept"] == len(SMALL), said
    assert counts["claims_sound"] == len(SMALL), said
    assert counts["contradictions"] == 0, said
    assert counts["covering"] >= counts["intervals"] - 1, said
    assert counts["median_pick_percent"] >= 90, said


@pytest.mark.slow  # about 20 s: the whole proof, on the simulated H200
def test_the_gpu_proof_runs_whole_on_the_simulated_gpu(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_study.py"), "--simulate", "--results-dir",
                           str(tmp_path)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    shape = (r"simulated NVIDIA H200: study \d+ s of 240 s budget; claim \d+\.\d\dx (\(\d+\.\d\d-\d+\.\d\d\)|\(no "
             r"interval: not confirmed\)) from \d+ processes; loop \d+\.\d\dx: (covered|not covered|no interval to "
             r"cover it); MFU \d+% of .*peak.*; energy \d+\.\d+ J/sample")
    assert re.fullmatch(shape, last), last
    assert "None" not in done.stdout
    assert list(tmp_path.glob("gpu_study_simulated-nvidia-h200-*.json"))
