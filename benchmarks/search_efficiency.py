"""Search efficiency, tabular: replay samplers against fully measured grids.

    python benchmarks/measure_grid.py cnn mlp        # once: measures every configuration
    python benchmarks/search_efficiency.py [--seeds 20] [--trials 40] [--examples cnn mlp] [--samplers tpe random ...]

For each example grid (benchmarks/data/grid_<example>.json) and each sampler, runs
the search phase alone (autotune.tuning.phases.Search, as `autotune run` runs it: baseline and
recipe seeds, failure feedback, de-duplication, early stopping; no noise floor, no race)
with a lookup in the table instead of a measurement, over many seeds, and prints:

- the median (and min) share of the grid's best throughput reached after 10, 20
  and 40 measured configurations;
- the median hypervolume of the front after 40, as a share of the grid's;
- early stopping: the share of trial time it saves and the hypervolume kept,
  replaying the stored timed windows (a trial is cut after its first two windows
  when a front point is 25% faster with no more memory).

Results are also written to benchmarks/results/search_efficiency-<date>.json and .txt (what it printed).
"""

from __future__ import annotations

import json
import statistics
import time

import harness
import optuna
from grids import GRIDS
from harness import say

from autotune import knobs
from autotune.knobs import space
from autotune import result as R
from autotune.tuning.phases import Bench, Search, SearchOptions, Seeds, Session
from autotune.tuning.phases.sampler import make_sampler
from autotune.tuning.phases.seeds import base_config
from autotune.trial.protocol import Settings
from autotune.reports.dashboard import hypervolume_2d
from autotune.store import DIRECTIONS, LiveStudy

HERE = harness.HERE

optuna.logging.set_verbosity(optuna.logging.ERROR)

SAMPLERS = {
    "gp (default)": lambda seed: make_sampler("gp", seed),
    "tpe": lambda seed: make_sampler("tpe", seed),
    "tpe-independent": lambda seed: optuna.samplers.TPESampler(seed=seed),
    "nsga2": lambda seed: make_sampler("nsga2", seed),
    "random": lambda seed: make_sampler("random", seed),
}
CHECKPOINTS = (10, 20, 40)


def load_table(name: str) -> tuple[dict, dict[str, dict]]:
    doc = json.loads((HERE / "data" / f"grid_{name}.json").read_text())
    return doc, {row["config_key"]: row for row in doc["rows"]}


def replay(name: str, table: dict[str, dict], sampler_of, seed: int, trials: int, early_stop: bool) -> dict:
    grid = GRIDS[name]
    ctx = grid["context"]
    sp = space.parse({"search": grid["search"]}, f"grid-{name}", name)
    base = base_config(ctx, {}, None)
    eff = space.effective(sp, ctx, base)
    live = LiveStudy(optuna.create_study(directions=DIRECTIONS, sampler=sampler_of(seed)))  # in memory: no store
    settings = Settings()
    spent = {"s": 0.0}
    curve: list[float] = []

    def evaluate(config, dominators=(), margin=None):
        row = table[knobs.resolve(config, ctx).key()]
        if row["outcome"] != R.OK:
            spent["s"] += row["wall_s"] or 0.0
            return R.TrialResult.failure(row["outcome"], "from the table")
        windows = list(row["window_samples_per_s"])
        wall = row["wall_s"]
        cut = False
        if dominators and len(windows) > settings.cut_after_windows:
            first = statistics.median(windows[: settings.cut_after_windows])
            if any(t >= first * (1 + (margin or settings.cut_margin)) and m <= row["peak_memory_bytes"]
                   for t, m in dominators):
                timed = row["phases_s"].get("timed", 0.0)
                skipped = timed * (1 - settings.cut_after_windows / len(windows)) + row["phases_s"].get("profile", 0.0)
                wall -= skipped
                windows = windows[: settings.cut_after_windows]
                cut = True
        spent["s"] += wall
        rate = statistics.median(windows)
        return R.TrialResult(
            outcome=R.OK, samples_per_s=rate, samples_per_s_cv=row["samples_per_s_cv"], window_samples_per_s=windows,
            peak_memory_bytes=row["peak_memory_bytes"], wall_s=wall, notes={"cut_short": cut},
        )

    def on_trial(rec):
        if rec.duplicate_of is None:
            true = table[knobs.resolve(rec.config, ctx).key()]
            value = true["samples_per_s"] if true["outcome"] == R.OK else 0.0
            curve.append(max(curve[-1] if curve else 0.0, value))

    search = Search(live, Seeds(eff, ctx, base), Bench(evaluate),
                    SearchOptions(trials=trials, early_stop=early_stop, max_repeats=200), on_trial=on_trial)
    report = search.run(Session(live))
    found = [table[t.config_key] for t in live.trials() if t.measured and t.config_key and t.outcome == R.OK]
    return {"curve": curve, "found": found, "spent_s": spent["s"], "reason": report.reason}


def main() -> None:
    parser = harness.arguments(__doc__, trials=40)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--examples", nargs="*", default=list(GRIDS), choices=list(GRIDS))
    parser.add_argument("--samplers", nargs="*", default=list(SAMPLERS), choices=list(SAMPLERS))
    args = parser.parse_args()
    out: dict = {"seeds": args.seeds, "trials": args.trials, "examples": {}}
    for name in args.examples:
        doc, table = load_table(name)
        ok = [r for r in doc["rows"] if r["outcome"] == R.OK]
        best = max(r["samples_per_s"] for r in ok)
        ref = 1.1 * max(r["peak_memory_bytes"] for r in ok)
        grid_hv = hypervolume_2d([(r["samples_per_s"], r["peak_memory_bytes"]) for r in ok], ref)
        base_key = knobs.resolve(base_config(GRIDS[name]["context"], {}, None), GRIDS[name]["context"]).key()
        say()
        say(f"== {name}: {len(doc['rows'])} configurations, grid best {best:.1f} samples/s "
            f"({best / table[base_key]['samples_per_s']:.2f}x the defaults), {doc['fingerprint']['cpu_model']}")
        say(f"{'sampler':18s} " + " ".join(f"best@{c:<3d} (min)   " for c in CHECKPOINTS) + " HV@40   time/run")
        ex: dict = {"grid_size": len(doc["rows"]), "grid_best": best, "samplers": {}}
        for label in args.samplers:
            shares = {c: [] for c in CHECKPOINTS}
            hvs = []
            t0 = time.perf_counter()
            for seed in range(args.seeds):
                run = replay(name, table, SAMPLERS[label], seed, args.trials, early_stop=False)
                for c in CHECKPOINTS:
                    curve = run["curve"]
                    shares[c].append((curve[min(c, len(curve)) - 1] if curve else 0.0) / best)
                hvs.append(hypervolume_2d([(r["samples_per_s"], r["peak_memory_bytes"]) for r in run["found"]], ref)
                           / grid_hv)
            per_run = (time.perf_counter() - t0) / args.seeds
            row = {f"best_share_at_{c}": {"median": statistics.median(shares[c]), "min": min(shares[c])}
                   for c in CHECKPOINTS}
            row["hypervolume_share_at_end"] = statistics.median(hvs)
            ex["samplers"][label] = row
            say(f"{label:18s} " + " ".join(f"{100 * statistics.median(shares[c]):5.1f}% ({100 * min(shares[c]):5.1f}%)"
                                           for c in CHECKPOINTS)
                + f"  {100 * statistics.median(hvs):5.1f}%  {per_run:.1f}s")
        # early stopping, with the default sampler and with TPE, same seeds
        ex["early_stop"] = {}
        for label in ("gp (default)", "tpe"):
            if label not in args.samplers:
                continue
            saved, kept, same_best = [], [], []
            for seed in range(args.seeds):
                off = replay(name, table, SAMPLERS[label], seed, args.trials, early_stop=False)
                on = replay(name, table, SAMPLERS[label], seed, args.trials, early_stop=True)
                saved.append(1 - on["spent_s"] / off["spent_s"])
                hv_on = hypervolume_2d([(r["samples_per_s"], r["peak_memory_bytes"]) for r in on["found"]], ref)
                hv_off = hypervolume_2d([(r["samples_per_s"], r["peak_memory_bytes"]) for r in off["found"]], ref)
                kept.append(hv_on / hv_off if hv_off else 1.0)
                same_best.append(max(r["samples_per_s"] for r in on["found"])
                                 / max(r["samples_per_s"] for r in off["found"]))
            ex["early_stop"][label] = {"time_saved_median": statistics.median(saved),
                                       "hypervolume_kept_median": statistics.median(kept),
                                       "best_kept_median": statistics.median(same_best),
                                       "best_kept_min": min(same_best)}
            say(f"early stop ({label}): saves {100 * statistics.median(saved):.1f}% of trial time (median), keeps "
                f"{100 * statistics.median(kept):.1f}% of the front's hypervolume and "
                f"{100 * statistics.median(same_best):.1f}% of the best throughput (min {100 * min(same_best):.1f}%)")
        out["examples"][name] = ex
    harness.write(args, out)


if __name__ == "__main__":
    main()
