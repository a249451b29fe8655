"""Measure every configuration of a reduced space once and store the table under benchmarks/data/.

    python benchmarks/measure_grid.py cnn mlp

Each configuration is one real trial (isolated process, the normal protocol). The
table is what benchmarks/search_efficiency.py replays the samplers against.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from grids import GRIDS  # noqa: E402

from autotune import hardware, knobs  # noqa: E402
from autotune.runner import Runner  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"


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
        print(f"{name} {i + 1}/{len(combos)} {knobs.short(config, ctx):60s} {res.outcome} {res.samples_per_s or 0:9.1f}/s "
              f"{res.wall_s:5.1f}s (total {time.monotonic() - start:6.0f}s)", flush=True)
    doc = {
        "example": name,
        "spec": grid["spec"].to_dict(),
        "search": grid["search"],
        "fingerprint": probe["fingerprint"],
        "measured_in_s": time.monotonic() - start,
        "rows": rows,
    }
    DATA.mkdir(exist_ok=True)
    path = DATA / f"grid_{name}.json"
    path.write_text(json.dumps(doc, indent=1))
    print(f"wrote {path} ({len(rows)} configurations, {hardware.short(probe['fingerprint'])})")
    return path


if __name__ == "__main__":
    for example in sys.argv[1:] or list(GRIDS):
        measure(example)
