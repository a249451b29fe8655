"""How long ``autotune.report.write_dashboard`` takes on a 200-trial study stored in SQLite.

Builds a fake study with tests/study_factory.py into a temporary SQLite file,
loads it back as the CLI does, then writes the dashboard several times and
prints the median, the spread and the page size. Target: under 5 s on a 2-core CPU.

    python benchmarks/dashboard_speed.py [--trials 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from study_factory import make_study, storage_url

from autotune import report
from autotune.knobs import cpu_count

TARGET_S = 5.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
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
            study = optuna.load_study(study_name="bench", storage=storage_url(db))
            start = time.perf_counter()
            report.write_dashboard(study, out)
            times.append(time.perf_counter() - start)
        size = out.stat().st_size

    median = statistics.median(times)
    print(f"study: {args.trials} trials in SQLite (built in {build_s:.1f} s); CPUs: {cpu_count()}")
    print(
        f"write_dashboard: median {median:.2f} s over {args.repeat} runs (min {min(times):.2f} s, max {max(times):.2f} s)"
    )
    print(f"page: {size / 1e6:.2f} MB ({size:,} bytes), of which plotly.js {len(report.page._plotly_js()) / 1e6:.2f} MB")
    print(f"target: < {TARGET_S:.0f} s: {'met' if median < TARGET_S else 'MISSED'}")
    return 0 if median < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
