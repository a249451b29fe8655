"""Does measuring a candidate and the defaults alternately inside one process cut the noise of their ratio?

Issue 17's first question, measured before anything is built on it. Two processes running the
same configuration differ by 10-25% on these machines, windows inside one process by 1-5%; a
speed-up measured between processes must beat the large number. If the candidate (B) and the
defaults (A) run alternately in one process (a fresh model, optimizer and loader for each arm,
windows ABAB...), the process's own speed should cancel in the ratio B/A.

    python benchmarks/paired_noise.py [--processes 8] [--pairs 6] [--window-s 0.5]

For each workload and in-process-switchable knob value it runs:

- **paired**: ``--processes`` fresh processes, each warming both arms and then timing
  ``--pairs`` windows of each, alternately (AB BA AB ...); the ratio of one process is the
  median B window over the median A window;
- **unpaired**: ``--processes`` fresh processes of A alone and as many of B alone, the same
  warm-up and windows; the ratios are B_i / A_i (as the study compares between processes).

and prints the standard deviation of log(ratio) across processes for each (the uncertainty of a
ratio from one process, or one pair of processes), the between-process spread of A alone, and
the ratio of the two deviations. Writes benchmarks/results/paired_noise-<date>.{json,txt}.
Run it on a quiet machine.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any

import harness
from harness import say

CASES = [  # (workload, knob values of B): knobs that switch inside one process without process-level state
    ("autotune.examples:cnn", {"memory_format": "channels_last"}),
    ("autotune.examples:mlp", {"batch_size": 128}),
    ("autotune.examples:mlp", {"optimizer_impl": "foreach"}),
]

# ---------------------------------------------------------------- inside one process


def _arm(model: str, config: dict[str, Any]) -> Any:
    """A fresh workload (model, optimizer, loader) with ``config`` applied, as the trial worker builds it."""
    import torch

    from autotune import knobs
    from autotune.trial.plan import Plan, infinite
    from autotune.trial.protocol import StepLoop
    from autotune.workloads.specs import build
    from autotune.trial.arm import context_for
    from autotune.workloads.contract import WorkloadSpec

    device = torch.device("cpu")
    workload = build(WorkloadSpec(model))
    requested = dict(config)
    if workload.batch_size and "batch_size" not in requested:
        requested["batch_size"] = workload.batch_size
    resolved = knobs.resolve(requested, context_for(workload, device))
    plan = Plan.from_config(resolved.config, device, workload.task, None)
    net = plan.prepare_model(workload.model, compile=False)
    optimizer = plan.build_optimizer(net, workload.optimizer)
    loader = plan.make_loader(workload.dataset, workload.collate_fn)
    return StepLoop(plan, plan.stepper(net, optimizer, workload.loss_fn), infinite(loader))


def _warm(loop: Any, seconds: float) -> float:
    """Steps until ``seconds`` have passed (at least 3); the median time of the last steps."""
    start = time.perf_counter()
    times = []
    while len(times) < 3 or time.perf_counter() - start < seconds:
        times.append(loop.timed(1))
    return statistics.median(times[-5:])


def child(model: str, arms: list[dict[str, Any]], pairs: int, window_s: float) -> dict[str, Any]:
    loops = [_arm(model, config) for config in arms]
    per_window = [max(1, math.ceil(window_s / max(_warm(loop, 1.0), 1e-6))) for loop in loops]
    windows: list[list[float]] = [[] for _ in arms]
    for k in range(pairs):
        order = list(range(len(arms))) if k % 2 == 0 else list(reversed(range(len(arms))))
        for i in order:
            elapsed = loops[i].timed(per_window[i])
            windows[i].append(per_window[i] * loops[i].plan.samples_per_step / elapsed)
    return {"windows": windows, "rates": [statistics.median(w) for w in windows]}


# ---------------------------------------------------------------- the comparison


def spawn(model: str, arms: list[dict[str, Any]], pairs: int, window_s: float) -> list[float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child",
         json.dumps({"model": model, "arms": arms, "pairs": pairs, "window_s": window_s})],
        capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["rates"]


def sd(values: list[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else float("nan")


def main() -> None:
    ap = harness.arguments(__doc__)
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--window-s", type=float, default=0.5)
    ap.add_argument("--child", help="(internal) one measuring process: a JSON request")
    args = ap.parse_args()
    if args.child:
        req = json.loads(args.child)
        print(json.dumps(child(req["model"], req["arms"], req["pairs"], req["window_s"])))
        return
    say(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"{time.strftime('%Y-%m-%d %H:%M')}; "
        f"{args.processes} processes per arrangement, {args.pairs} windows of {args.window_s} s per arm")
    results = []
    for model, b in CASES:
        paired, alone_a, alone_b = [], [], []
        for _ in range(args.processes):  # interleaved, so that a slow minute touches every arrangement
            a_rate, b_rate = spawn(model, [{}, b], args.pairs, args.window_s)
            paired.append(math.log(b_rate / a_rate))
            alone_a.append(math.log(spawn(model, [{}], args.pairs, args.window_s)[0]))
            alone_b.append(math.log(spawn(model, [b], args.pairs, args.window_s)[0]))
        unpaired = [y - x for x, y in zip(alone_a, alone_b)]
        row = {
            "model": model, "b": b,
            "paired_ratio": math.exp(statistics.fmean(paired)), "paired_sd_log": sd(paired),
            "unpaired_ratio": math.exp(statistics.fmean(unpaired)), "unpaired_sd_log": sd(unpaired),
            "between_process_sd_log_a": sd(alone_a),
        }
        row["sd_ratio_paired_over_unpaired"] = row["paired_sd_log"] / row["unpaired_sd_log"]
        results.append(row)
        knob = " ".join(f"{k}={v}" for k, v in b.items())
        say(f"{model.split(':')[1]:4s} {knob:26s} paired {row['paired_ratio']:.3f}x sd {row['paired_sd_log']:.3f} | "
            f"unpaired {row['unpaired_ratio']:.3f}x sd {row['unpaired_sd_log']:.3f} | one config between processes sd "
            f"{row['between_process_sd_log_a']:.3f} | paired/unpaired sd {row['sd_ratio_paired_over_unpaired']:.2f}")
    harness.write(args, results)


if __name__ == "__main__":
    main()
