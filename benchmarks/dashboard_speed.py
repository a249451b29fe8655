"""How long ``autotune.reports.dashboard.write_dashboard`` takes on a 200-trial study stored in SQLite.

Builds a made-up study (autotune/testing/studies.py) into a temporary SQLite file, then, several
times, opens a store of its own, as a new CLI process does, and times reading the study
(``Store.read``) and writing its dashboard; prints the median, the spread and the page size
(and the share of it that is plotly.js, read from the page's own script element). Target: under 5 s on a
2-core CPU. Exits 1 when the target is missed. Writes benchmarks/results/dashboard_speed-<date>.txt.

    python benchmarks/dashboard_speed.py [--trials 200] [--repeat 3]
"""

from __future__ import annotations

import re
import statistics
import tempfile
import time
from pathlib import Path

import harness
import optuna
from harness import say
from autotune.testing.studies import make_study

from autotune.reports import dashboard
from autotune.machine.load import cpu_count

TARGET_S = 5.0


def main(argv: list[str] | None = None) -> int:
    parser = harness.arguments(__doc__, trials=200, repeat=3)
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        start = time.perf_counter()
        make_study(db, n_trials=args.trials, seed=0, name="bench")
        build_s = time.perf_counter() - start
        times = []
        out = Path(tmp) / "dashboard.html"
        for _ in range(args.repeat):
            store = harness.open_store(harness.sqlite_url(db), fresh=True)
            start = time.perf_counter()
            dashboard.write_dashboard(store.read("bench"), out)
            times.append(time.perf_counter() - start)
        size = out.stat().st_size
        plotly = _plotly_bytes(out.read_text(encoding="utf-8"))

    median = statistics.median(times)
    say(f"study: {args.trials} trials in SQLite (built in {build_s:.1f} s); CPUs: {cpu_count()}")
    say(f"write_dashboard: median {median:.2f} s over {args.repeat} runs "
        f"(min {min(times):.2f} s, max {max(times):.2f} s)")
    say(f"page: {size / 1e6:.2f} MB ({size:,} bytes), of which plotly.js {plotly / 1e6:.2f} MB")
    say(f"target: < {TARGET_S:.0f} s: {'met' if median < TARGET_S else 'MISSED'}")
    harness.write(args, {"trials": args.trials, "build_s": build_s, "write_s": times, "median_s": median,
                         "page_bytes": size, "target_s": TARGET_S, "met": median < TARGET_S})
    return 0 if median < TARGET_S else 1


def _plotly_bytes(page: str) -> int:
    """The size of the plotly.js the page embeds (its ``autotune-plotly`` script element; 0 when there is none)."""
    found = re.search(r'<script[^>]*id="autotune-plotly"[^>]*>(.*?)</script>', page, re.DOTALL)
    return len(found.group(1)) if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
