"""What one re-measurement (noise floor, race) costs, with and without the profile and the FLOP count.

    python benchmarks/remeasure_cost.py [--repeat 3]

Each workload's defaults are measured in fresh processes, alternately with the full trial settings
(``Settings()``: FLOP count, warm-up, windows, profile) and the lean ones the floor and the race use
(``Settings().lean()``: no profile, no FLOP count). Prints the median wall time of a measurement
(process start to result) and the median samples/s of each, and writes
benchmarks/results/remeasure_cost-<date>.{json,txt}. Run it on a quiet machine.
"""

from __future__ import annotations

import os
import platform
import statistics
import time

import harness
from harness import say

from autotune.trial.protocol import Settings
from autotune.request import WorkloadSpec
from autotune.trial.runner import Runner

WORKLOADS = [
    ("cnn", WorkloadSpec("autotune.examples:cnn")),
    ("mlp", WorkloadSpec("autotune.examples:mlp")),
    ("gpt2, 2 layers, vocab 8000", WorkloadSpec("hf:gpt2", model_args=(("n_layer", 2), ("n_embd", 128), ("n_head", 2),
                                                                          ("vocab_size", 8000), ("seq_len", 64)))),
]


def main() -> None:
    ap = harness.arguments(__doc__, repeat=3)
    args = ap.parse_args()
    say(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
        f"{time.strftime('%Y-%m-%d %H:%M')}; {args.repeat} processes each")
    out = []
    for name, spec in WORKLOADS:
        full, lean = Settings(), Settings().lean()
        walls: dict[str, list[float]] = {"full": [], "lean": []}
        rates: dict[str, list[float]] = {"full": [], "lean": []}
        for _ in range(args.repeat):
            for label, settings in (("full", full), ("lean", lean)):
                result = Runner(spec, settings=settings).measure({})
                if not result.ok:
                    raise SystemExit(f"{name}: {result.outcome}: {result.error}")
                walls[label].append(result.wall_s)
                rates[label].append(result.samples_per_s)
        row = {"workload": name, **{f"{k}_wall_s": statistics.median(v) for k, v in walls.items()},
               **{f"{k}_samples_per_s": statistics.median(v) for k, v in rates.items()}}
        out.append(row)
        line = (f"{name:28s} full {row['full_wall_s']:5.1f} s ({row['full_samples_per_s']:.1f} samples/s) | lean "
                f"{row['lean_wall_s']:5.1f} s ({row['lean_samples_per_s']:.1f} samples/s) | saves "
                f"{1 - row['lean_wall_s'] / row['full_wall_s']:.0%} of a re-measurement")
        say(line)
    harness.write(args, out)


if __name__ == "__main__":
    main()
