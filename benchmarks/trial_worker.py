"""Figures of the trial worker (issue: measure one configuration), on the CPU examples.

    python benchmarks/trial_worker.py [--repeat 5] [--device cpu] [--examples cnn mlp transformer]

Prints and writes benchmarks/results/trial_worker_<device>-<date>.json and .txt (what it printed):
- per-trial overhead: wall time of a whole trial minus its first, warm-up, timed and
  profiled steps (what the isolation, workload build and reporting cost);
- repeatability: the same configuration measured in N separate processes, the
  coefficient of variation of their throughputs (the `autotune measure --repeat N` figure);
- the speed-up of the best of a handful of hand-picked configurations over the PyTorch
  defaults, all measured in this one run, interleaved.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import harness
from harness import say

from autotune import knobs
from autotune.machine import hardware, identity
from autotune.trial.protocol import cv
from autotune.trial.runner import Runner, warm_up
from autotune.workloads.contract import WorkloadSpec

EXAMPLES = {
    "cnn": (WorkloadSpec("autotune.examples:cnn"), [
        {"precision": "bf16"},
        {"precision": "bf16", "memory_format": "channels_last"},
        {"precision": "bf16", "batch_size": 128},
        {"batch_size": 128},
        {"precision": "bf16", "batch_size": 128, "optimizer_impl": "fused"},
    ]),
    "mlp": (WorkloadSpec("autotune.examples:mlp"), [
        {"precision": "bf16"},
        {"batch_size": 128},
        {"precision": "bf16", "batch_size": 128},
        {"precision": "bf16", "batch_size": 128, "optimizer_impl": "fused"},
        {"batch_size": 256, "threads": 1},
    ]),
    "transformer": (WorkloadSpec("autotune.examples:transformer"), [
        {"precision": "bf16"},
        {"batch_size": 64},
        {"precision": "bf16", "batch_size": 64},
        {"precision": "bf16", "batch_size": 64, "optimizer_impl": "fused"},
        {"precision": "bf16", "batch_size": 64, "activation_checkpointing": True},
    ]),
}


CONTROL = """
import statistics, sys, time, torch
from torch.utils.data import default_collate
from autotune.workloads.specs import build
from autotune.workloads.contract import WorkloadSpec, default_loss, split_batch, call_model
w = build(WorkloadSpec(sys.argv[1]))
model, opt = w.model, torch.optim.AdamW(w.model.parameters(), lr=1e-4)
batch = default_collate([w.dataset[i] for i in range(32)])
def step():
    inputs, target = split_batch(batch)
    default_loss(call_model(model, inputs), target).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
for _ in range(20):
    step()
windows = []
for _ in range(5):
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < 0.5:
        step()
        n += 1
    windows.append(32 * n / (time.perf_counter() - start))
print(statistics.median(windows))
"""


def control_cv(model: str, n: int) -> tuple[float, list[float]]:
    """The machine's own repeatability for this model: a plain PyTorch loop (no autotune, one fixed
    batch, no DataLoader) of the default configuration, in n fresh processes."""
    rates = [float(subprocess.run([sys.executable, "-c", CONTROL, model], capture_output=True, text=True,
                                  check=True).stdout)
             for _ in range(n)]
    return cv(rates), rates


def main() -> None:
    parser = harness.arguments(__doc__, repeat=5)
    parser.add_argument("--device", default=None)
    parser.add_argument("--examples", nargs="*", default=list(EXAMPLES), choices=list(EXAMPLES))
    args = parser.parse_args()
    device = hardware.check_device(args.device) if args.device else hardware.default_device()
    t0 = time.perf_counter()
    warm_up()
    say(f"fork server ready in {time.perf_counter() - t0:.2f} s (imports torch once)")
    out: dict = {"device": device, "examples": {}}
    for name in args.examples:
        spec, picks = EXAMPLES[name]
        runner = Runner(spec, device=device, timeout_s=600)
        probe = runner.probe()
        out["fingerprint"] = probe["fingerprint"]
        defaults = [runner.measure({}) for _ in range(args.repeat)]
        rates = [r.samples_per_s for r in defaults]
        overheads = [r.overhead_s for r in defaults]
        walls = [r.wall_s for r in defaults]
        # hand-picked configurations, interleaved with more default runs: one run, same conditions
        picked = []
        base_again = []
        for cfg in picks:
            picked.append((cfg, runner.measure(cfg)))
            base_again.append(runner.measure({}).samples_per_s)
        base = statistics.median(rates + base_again)
        ok = [(c, r) for c, r in picked if r.ok]
        best_cfg, best = max(ok, key=lambda cr: cr[1].samples_per_s)
        ex = {
            "overhead_s": {"median": statistics.median(overheads), "min": min(overheads), "max": max(overheads)},
            "trial_wall_s_median": statistics.median(walls),
            "repeat": args.repeat,
            "defaults_samples_per_s": rates,
            "repeat_cv": cv(rates),
            "within_trial_cv_median": statistics.median(r.samples_per_s_cv for r in defaults),
            "control_cv": control_cv(spec.model, args.repeat)[0] if device == "cpu" else None,
            "picks": [{"config": c, "outcome": r.outcome, "samples_per_s": r.samples_per_s, "cv": r.samples_per_s_cv,
                       "peak_memory_bytes": r.peak_memory_bytes, "mfu": r.mfu} for c, r in picked],
            "best_pick": best_cfg,
            "best_speedup": best.samples_per_s / base,
            "defaults_median_all": base,
        }
        out["examples"][name] = ex
        say()
        say(f"== {name} on {device} ({identity.short(probe['fingerprint'])})")
        say(f"per-trial overhead: median {ex['overhead_s']['median']:.3f} s "
            f"(min {min(overheads):.3f}, max {max(overheads):.3f}) of a {ex['trial_wall_s_median']:.2f} s trial")
        say(f"repeatability: {args.repeat} processes, defaults {statistics.median(rates):.1f} samples/s, "
            f"CV across processes {100 * cv(rates):.2f}% "
            f"(within-trial window CV median {100 * ex['within_trial_cv_median']:.2f}%)")
        if ex["control_cv"] is not None:
            say(f"control: a plain PyTorch loop of the same model in {args.repeat} fresh processes: "
                f"CV {100 * ex['control_cv']:.2f}% (the machine's own floor)")
        for cfg, r in picked:
            rate = f"{r.samples_per_s:9.1f}" if r.ok else f"{r.outcome:>9s}"
            say(f"  {knobs.short({**knobs.defaults(), **cfg}):70s} {rate} samples/s  "
                f"{(r.samples_per_s or 0) / base:5.2f}x")
        say(f"best hand-picked: {knobs.short({**knobs.defaults(), **best_cfg})}: {ex['best_speedup']:.2f}x "
            f"the defaults ({base:.1f} samples/s, median of {len(rates) + len(base_again)} default runs in this run)")
    tag = "cpu" if device == "cpu" else "gpu"
    harness.write(args, out, name=f"trial_worker_{tag}")


if __name__ == "__main__":
    main()
