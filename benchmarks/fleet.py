"""What sharing a study costs: coordination overhead per trial by storage, and trials per hour with 1 and 2 workers.

    python benchmarks/fleet.py [--trials 30] [--postgres URL] [--throughput-trials 16]

1. Coordination overhead: the search phase alone (autotune.tuning.phases.Search, as `autotune run`
   runs it: ask, suggest, claim through the storage, heartbeats, tell, the evidence read for
   each trial line) with an instant fake measurement and neither noise floor nor race, so all
   that is timed is the coordination; per storage (SQLite file,
   journal file, PostgreSQL when a URL is given or AUTOTUNE_TEST_POSTGRES_URL is set) and
   per sampler (random: coordination alone; gp: plus the default sampler's cost per
   suggestion, which grows with the study).
2. Trials per hour: `autotune run --workers 1` and `--workers 2` on the mlp example
   (quick windows, no race), on this machine, and the noise between processes each study
   measured (two workers share 2 cores: each gets one).
Writes benchmarks/results/fleet-<date>.json and .txt (what it printed).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness
from harness import say

from autotune import knobs
from autotune.knobs import space
from autotune import result as R
from autotune.tuning.phases import Bench, Search, SearchOptions, Seeds, Session
from autotune.tuning.phases.sampler import make_sampler
from autotune.tuning.phases.seeds import base_config
from autotune.store import LiveStudy
from autotune.evidence import evidence_of

CTX = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=2)
SPACE = space.parse(
    {"search": {"precision": ["fp32", "bf16"], "batch_size": {"low": 8, "high": 512, "step": 8},
                "optimizer_impl": ["default", "foreach", "fused"]}},
    "bench.toml",
    "bench",
)


def instant(config, dominators=(), margin=None):
    rate = 100.0 + config["batch_size"] * (2 if config["precision"] == "bf16" else 1)
    return R.TrialResult(outcome=R.OK, samples_per_s=rate, samples_per_s_cv=0.01, peak_memory_bytes=10**8, wall_s=0.0)


def coordination(url: str, sampler: str, trials: int) -> dict:
    attrs = {"workload": {"model": "x:y"}, "space": SPACE.to_dict(), "space_hash": SPACE.hash(),
             "fingerprint": {"device_type": "cpu", "torch": "2"}, "device": "cpu", "context": CTX.to_dict(),
             "global_batch": None}
    study, _ = harness.open_store(url).create_or_check("bench", attrs, make_sampler(sampler, 0))
    live = LiveStudy(study)
    base = base_config(CTX, SPACE.fixed, None)
    seeds = Seeds(space.effective(SPACE, CTX, base), CTX, base)
    stamps: list[float] = []
    # Every suggestion is timed, those answered from the cache too (a sampler that settles on the
    # best point re-proposes it; the default max_repeats then ends the study, as it would a real one).
    search = Search(live, seeds, Bench(instant), SearchOptions(trials=trials),
                    on_trial=lambda rec: stamps.append(time.perf_counter()))
    start = time.perf_counter()
    search.run(Session(live))
    gaps = [b - a for a, b in zip([start, *stamps], stamps)]
    return {"per_trial_s_median": statistics.median(gaps), "first_10_s": statistics.median(gaps[:10]),
            "last_10_s": statistics.median(gaps[-10:]), "trials": len(gaps)}


def throughput(workers: int, trials: int, folder: Path) -> dict:
    url = f"sqlite:///{folder}/w{workers}.db"
    cmd = [sys.executable, "-m", "autotune.cli", "run", "--model", "autotune.examples:mlp", "--space", "cpu",
           "--study", f"w{workers}", "--storage", url, "--trials", str(trials), "--quick", "--confirm", "0",
           "--seed", "0", "--workers", str(workers), "--no-early-stop"]
    start = time.monotonic()
    subprocess.run(cmd, cwd=folder, check=True, capture_output=True, text=True)
    wall = time.monotonic() - start
    study = harness.open_store(url, read_only=True).read(f"w{workers}")
    ev = evidence_of(study)
    given_up = sum(1 for t in study.trials if t.outcome == "skipped")
    cached = sum(1 for t in study.trials if t.duplicate_of is not None)
    return {"wall_s": wall, "trials_per_hour": 3600 * trials / wall, "noise_percent": ev.noise.percent,
            "skipped": given_up, "cache_answers": cached}


def main() -> None:
    ap = harness.arguments(__doc__, trials=30)
    ap.add_argument("--postgres", default=os.environ.get("AUTOTUNE_TEST_POSTGRES_URL"),
                    help="a PostgreSQL server's URL (default: AUTOTUNE_TEST_POSTGRES_URL); "
                         "its database bench_* is recreated")
    ap.add_argument("--throughput-trials", type=int, default=16)
    args = ap.parse_args()
    out: dict = {"coordination": {}, "throughput": {}}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        urls = {"sqlite": f"sqlite:///{folder}/c.db", "journal": f"journal:{folder}/c.log"}
        if args.postgres:
            urls["postgresql"] = args.postgres
        for sampler in ("random", "gp"):
            for name, url in urls.items():
                if name == "postgresql":
                    url = harness.fresh_postgres(url, f"bench_{sampler}")
                else:
                    url = url.replace("c.", f"c_{sampler}.")
                r = coordination(url, sampler, args.trials)
                out["coordination"][f"{name}/{sampler}"] = r
                say(f"coordination {name:<10} sampler {sampler:<6}: {1000 * r['per_trial_s_median']:.0f} ms per trial "
                    f"(first 10: {1000 * r['first_10_s']:.0f} ms, last 10: {1000 * r['last_10_s']:.0f} ms; "
                    f"{r['trials']} trials asked, cache answers included)")
        for workers in (1, 2):
            r = throughput(workers, args.throughput_trials, folder)
            out["throughput"][str(workers)] = r
            say(f"mlp --quick, {workers} worker(s): {r['trials_per_hour']:.0f} trials/hour ({r['wall_s']:.0f} s for "
                f"{args.throughput_trials}; {r['skipped']} trials given up to another worker's claim, "
                f"{r['cache_answers']} cache answers); noise between processes ±{r['noise_percent']:.0f}%")
    harness.write(args, out)


if __name__ == "__main__":
    main()
