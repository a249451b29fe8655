"""Measure every configuration of a reduced space once and store the table under benchmarks/data/.

    python benchmarks/measure_grid.py [cnn] [mlp]

Each configuration is one real trial (isolated process, the normal protocol). The table,
benchmarks/data/grid_<example>.json, is what benchmarks/search_efficiency.py and warm_start.py
replay the samplers against: a new measurement REPLACES it (commit it deliberately: every replayed
figure changes with it). What it printed goes to benchmarks/results/measure_grid-<date>.txt.
"""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import harness
from grids import GRIDS
from harness import say

from autotune import knobs
from autotune.trial.runner import Runner
from autotune.machine import identity

DATA = harness.HERE / "data"


def measure(name: str) -> Path:
    grid = GRIDS[name]
    runner = Runner(grid["spec"], timeout_s=300)
    probe = runner.probe()
    ctx = knobs.Context.from_dict(probe["context"])
    names = list(grid["search"])
    rows = []
    start = time.monotonic()
    combos = list(itertools.product(*grid["search"].values()))
    for i, values in enumerate(combos):
        config = knobs.resolve(dict(zip(names, values)), ctx).config
        res = runner.measure(config)
        rows.append(
            {
                "params": dict(zip(names, values)),
                "config_key": knobs.resolve(config, ctx).key(),
                "outcome": res.outcome,
                "samples_per_s": res.samples_per_s,
                "samples_per_s_cv": res.samples_per_s_cv,
                "window_samples_per_s": res.window_samples_per_s,
                "peak_memory_bytes": res.peak_memory_bytes,
                "wall_s": res.wall_s,
                "phases_s": res.phases_s,
            }
        )
        say(f"{name} {i + 1}/{len(combos)} {knobs.short(config, ctx):60s} {res.outcome} "
            f"{res.samples_per_s or 0:9.1f}/s {res.wall_s:5.1f}s (total {time.monotonic() - start:6.0f}s)")
    doc = {
        "example": name,
        "spec": grid["spec"].to_dict(),
        "search": grid["search"],
        "fingerprint": probe["fingerprint"],
        "header": harness.header(),  # the machine as a results header names it: its CPU flags, the command
        "measured_in_s": time.monotonic() - start,
        "rows": rows,
    }
    DATA.mkdir(exist_ok=True)
    path = DATA / f"grid_{name}.json"
    path.write_text(json.dumps(doc, indent=1))
    say(f"wrote {path} ({len(rows)} configurations, {identity.short(probe['fingerprint'])})")
    return path


def main() -> None:
    ap = harness.arguments(__doc__)
    ap.add_argument("examples", nargs="*", metavar="EXAMPLE",
                    help=f"the grids to measure: {', '.join(GRIDS)} (default: all)")
    args = ap.parse_args()
    unknown = [e for e in args.examples if e not in GRIDS]
    if unknown:
        ap.error(f"no grid {', '.join(unknown)}: the grids are {', '.join(GRIDS)}")
    args.examples = args.examples or list(GRIDS)
    for example in args.examples:
        measure(example)
        harness.write(args)


if __name__ == "__main__":
    main()
