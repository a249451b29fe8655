"""Warm start (issue 17), measured on the recorded grids: trials to reach 95% of a grid's best, with and without.

    python benchmarks/warm_start.py [--seeds 5] [--source-trials 30] [--cap 40] [--sampler gp] [--out warm_start]

For each pair of grids (benchmarks/data/grid_<example>.json), the warm-start source is a study
tuned on the OTHER grid, so the target's grid played no part in picking it:

1. source: the tuning loop as `autotune run` composes its phases (autotune.tuning.loop.Tuner over a
   LiveStudy and a Bench that looks the grid up: baseline, noise floor, recipe, the sampler, the
   final race) replayed against the source grid, ``--source-trials`` configurations, every
   re-measurement drawn with a between-process noise of ``--noise`` (log-normal), so the verdict
   (autotune.evidence) has real intervals to decide with;
2. target, twice with the same sampler seed, the search phase alone with its noise floor
   (autotune.tuning.phases.Search, no race): without warm start, and with it: the seeds are chosen by
   the product's own code (autotune.tuning.warmstart.seeds, as tuning.prepare calls it on a new study)
   from the storage holding the source study, and queued after the baseline and the recipe.

Both grids were measured on one kind of machine (same fingerprint), so the "same kind" condition
holds by construction. A target run stops as soon as a configuration within 95% of the grid's best
is measured (the search's ``until``), or after ``--cap`` measured configurations: "not reached",
counted as cap + 1. Trials
count measured configurations, baseline, recipe and warm-start seeds included (the noise floor's and
the race's re-measurements are not trials). Prints a table per target grid and the ratio of the
median trials with warm start to without, and writes benchmarks/results/OUT-<date>.{txt,json}.

``--pairs mlp:mlp`` is a control, not the held-out measure: the source is an earlier study of the SAME
model (another seed), i.e. what warm start gives when the winner does transfer
(benchmarks/results/warm_start_same_model.txt: ``--pairs mlp:mlp --out warm_start_same_model``).

It replays recorded grids, so no trial runs: the machine that runs it matters only for its time (the GP
sampler's suggestions take most of it: 36 minutes for --seeds 10 on a busy 2-core VM).
"""

from __future__ import annotations

import json
import math
import random
import statistics
import time
from typing import Any

import harness
import optuna
from grids import GRIDS
from harness import say

from autotune import knobs
from autotune.knobs import space
from autotune.tuning import warmstart
from autotune import result as R
from autotune.tuning import loop
from autotune.tuning.phases import Bench, Search, SearchOptions, Seeds, Session, floor
from autotune.tuning.phases.sampler import make_sampler
from autotune.tuning.phases.seeds import base_config
from autotune.store import LiveStudy, Store, kind

HERE = harness.HERE

optuna.logging.set_verbosity(optuna.logging.ERROR)
SHARE = 0.95


def memory_store() -> Store:
    """A new, empty store in memory (SQLite's), for the source study and the warm-started target: what
    autotune.tuning.warmstart reads (its studies' descriptions, its Optuna storage) through the product's own Store."""
    return harness.open_store("sqlite:///:memory:", fresh=True)


def load_grid(name: str) -> dict[str, Any]:
    doc = json.loads((HERE / "data" / f"grid_{name}.json").read_text())
    table = {row["config_key"]: row for row in doc["rows"]}
    best = max(r["samples_per_s"] for r in doc["rows"] if r["outcome"] == R.OK)
    ctx = GRIDS[name]["context"]
    sp = space.parse({"search": GRIDS[name]["search"]}, f"grid-{name}", name)
    base = base_config(ctx, {}, None)
    return {"name": name, "doc": doc, "table": table, "best": best, "ctx": ctx, "space": space.effective(sp, ctx, base),
            "raw_space": sp, "base": base, "fingerprint": doc["fingerprint"]}


def seeds_of(grid: dict[str, Any]) -> Seeds:
    """What a study of the grid searches, and its baseline (the defaults)."""
    return Seeds(grid["space"], grid["ctx"], grid["base"])


def evaluator(grid: dict[str, Any], rng: random.Random, noise: float):
    """A measurement from the grid: the recorded throughput, times a between-process draw of the noise."""

    def evaluate(config, dominators=(), margin=None):
        row = grid["table"][knobs.resolve(config, grid["ctx"]).key()]
        if row["outcome"] != R.OK:
            return R.TrialResult.failure(row["outcome"], "from the grid")
        rate = row["samples_per_s"] * math.exp(rng.gauss(0.0, noise))
        return R.TrialResult(outcome=R.OK, samples_per_s=rate, samples_per_s_cv=row["samples_per_s_cv"],
                             peak_memory_bytes=row["peak_memory_bytes"], wall_s=row["wall_s"])

    return evaluate


def create(store: Store, name: str, grid: dict[str, Any], sampler: Any, fingerprint: dict[str, Any]) -> LiveStudy:
    """A new study of the grid in ``store``, described as `autotune run` describes one (Store.create_or_check)."""
    attrs = {"workload": GRIDS[grid["name"]]["spec"].to_dict(payload=False), "space": grid["raw_space"].to_dict(),
             "space_hash": grid["raw_space"].hash(), "fingerprint": fingerprint, "device": "cpu",
             "context": grid["ctx"].to_dict(), "global_batch": None}
    study, created = store.create_or_check(name, attrs, sampler)
    assert created, name
    return LiveStudy(study)


def source_study(store: Store, grid: dict[str, Any], sampler: str, seed: int, trials: int, noise: float,
                 fingerprint: dict[str, Any]) -> dict[str, Any]:
    """A study tuned to the end (race included) on the source grid; returns its verdict."""
    live = create(store, f"source-{grid['name']}", grid, make_sampler(sampler, seed), fingerprint)
    options = loop.Options(trials=trials, early_stop=False, max_repeats=200)
    bench = Bench(evaluator(grid, random.Random(seed), noise))
    verdict = loop.Tuner(live, seeds_of(grid), bench, options).run().verdict
    assert verdict is not None
    gain = verdict.state == "gain" and verdict.winner is not None
    winner = dict(live.view().trial(verdict.winner).config) if gain else None  # type: ignore[arg-type, union-attr]
    true = grid["table"][knobs.resolve(winner, grid["ctx"]).key()]["samples_per_s"] / grid["best"] if winner else None
    return {"state": verdict.state, "winner": verdict.winner, "config": winner, "share_of_its_grid_best": true}


def target_run(grid: dict[str, Any], store: Store | None, sampler: str, seed: int, cap: int, noise: float,
               fingerprint: dict[str, Any]) -> dict[str, Any]:
    """Trials until a configuration within SHARE of the grid's best is measured (None: not within ``cap``)."""
    name = f"target-{grid['name']}-{'warm' if store is not None else 'cold'}"
    live = create(store if store is not None else memory_store(), name, grid, make_sampler(sampler, 1000 + seed),
                  fingerprint)
    measured: list[float] = []
    hit: list[int] = []  # the measured configurations when one came within SHARE of the grid's best

    def reached(rec: loop.TrialRecord) -> bool:
        if rec.duplicate_of is not None:
            return False
        row = grid["table"][knobs.resolve(rec.config, grid["ctx"]).key()]
        measured.append(row["samples_per_s"] if row["outcome"] == R.OK else 0.0)
        if measured[-1] >= SHARE * grid["best"]:
            hit.append(len(measured))
        return bool(hit)

    bench = Bench(evaluator(grid, random.Random(1000 + seed), noise))
    seeds = seeds_of(grid)
    chosen: list[warmstart.Seed] = []
    if store is not None:  # what tuning.prepare does for a new study with warm start on
        chosen = warmstart.seeds(store, live, True, True, fingerprint, seeds)
        seeds.warm = [(s.params, s.attrs()) for s in chosen]
    # The search with its noise floor, as `autotune run` measures it (no race: the target only counts trials).
    search = Search(live, seeds, bench, SearchOptions(trials=cap, early_stop=False, max_repeats=200))
    search.run(Session(live), between=floor.Floor(live, bench), until=reached)
    return {"trials": hit[0] if hit else None,
            "seeds": [s.to_dict() for s in chosen], "seed_text": [s.text(grid["base"]) for s in chosen],
            "roles": [t.role for t in live.trials() if t.measured]}


def machine() -> str:
    head = harness.header()
    return f"{head['cpu']}, {head['cores']} cores, Python {head['python']}, optuna {optuna.__version__}"


def main() -> None:
    parser = harness.arguments(__doc__)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--source-trials", type=int, default=30)
    parser.add_argument("--cap", type=int, default=40)
    parser.add_argument("--sampler", default="gp")
    parser.add_argument("--noise", type=float, default=0.03, help="between-process noise of a measurement (log sd)")
    parser.add_argument("--pairs", nargs="*", default=["mlp:cnn", "cnn:mlp"], help="source:target grids")
    args = parser.parse_args()
    grids = {name: load_grid(name) for name in GRIDS}
    t0 = time.perf_counter()
    say(f"warm start on the recorded grids: trials to {100 * SHARE:.0f}% of the grid's best, with and without; sampler "
        f"{args.sampler}, {args.seeds} seeds, source studies of {args.source_trials} trials (race included), "
        f"between-process noise {100 * args.noise:.0f}%, cap {args.cap}")
    measured_on = grids["cnn"]["fingerprint"]
    say(f"grids measured on: {measured_on.get('cpu_model')} ({measured_on.get('cpu_count')} cores, "
        f"torch {measured_on.get('torch')}); replayed on: {machine()}")
    out: dict[str, Any] = {"args": vars(args), "machine": machine(), "grids_fingerprint": measured_on, "pairs": {}}
    ratios: list[float] = []
    for pair in args.pairs:
        src_name, dst_name = pair.split(":")
        src, dst = grids[src_name], grids[dst_name]
        fingerprint = dict(dst["fingerprint"])
        if kind(src["fingerprint"]) != kind(fingerprint):
            say(f"note: the {src_name} and {dst_name} grids were measured on different kinds "
                f"({kind(src['fingerprint'])}, {kind(fingerprint)}): the source study gets the target's fingerprint")
        say()
        say(f"== target {dst_name} ({len(dst['table'])} configurations, best {dst['best']:.1f} samples/s), "
            f"warm start from a {src_name} study")
        say(f"{'seed':>4}  {'source verdict':24s} {'warm-start seeds (fitted to the target space)':62s} "
            f"{'without':>7} {'with':>5}")
        rows = []
        for seed in range(args.seeds):
            store = memory_store()
            source = source_study(store, src, args.sampler, seed, args.source_trials, args.noise, fingerprint)
            cold = target_run(dst, None, args.sampler, seed, args.cap, args.noise, fingerprint)
            warm = target_run(dst, store, args.sampler, seed, args.cap, args.noise, fingerprint)
            rows.append({"seed": seed, "source": source, "without": cold, "with": warm})
            verdict = (f"#{source['winner']} ({100 * source['share_of_its_grid_best']:.0f}% of its best)"
                       if source["state"] == "gain" else source["state"])
            seeds_text = "; ".join(warm["seed_text"]) or "-"
            say(f"{seed:>4}  {verdict:24s} {seeds_text[:62]:62s} "
                f"{_fmt(cold['trials'], args.cap):>7} {_fmt(warm['trials'], args.cap):>5}")
        without = [_n(r["without"]["trials"], args.cap) for r in rows]
        with_ = [_n(r["with"]["trials"], args.cap) for r in rows]
        ratio = statistics.median(with_) / statistics.median(without)
        ratios.append(ratio)
        per_seed = statistics.geometric_mean([w / c for w, c in zip(with_, without)])
        say(f"median trials to {100 * SHARE:.0f}%: without {statistics.median(without):g}, "
            f"with {statistics.median(with_):g} "
            f"(mean {statistics.fmean(without):.1f} vs {statistics.fmean(with_):.1f}); "
            f"ratio with/without {ratio:.2f} "
            f"(geometric mean of per-seed ratios {per_seed:.2f}); not reached within {args.cap}: "
            f"{sum(r['without']['trials'] is None for r in rows)} without, "
            f"{sum(r['with']['trials'] is None for r in rows)} with")
        out["pairs"][pair] = {"rows": rows, "median_without": statistics.median(without),
                              "median_with": statistics.median(with_), "ratio_of_medians": ratio,
                              "per_seed_ratio_geomean": per_seed}
    say()
    say(f"ratio of median trials to {100 * SHARE:.0f}% (with / without; below 1: warm start helps): "
        + ", ".join(f"{p.split(':')[1]} target {r:.2f}" for p, r in zip(args.pairs, ratios))
        + f"; in {time.perf_counter() - t0:.0f} s")
    harness.write(args, out)


def _n(trials: int | None, cap: int) -> int:
    return cap + 1 if trials is None else trials


def _fmt(trials: int | None, cap: int) -> str:
    return f">{cap}" if trials is None else str(trials)


if __name__ == "__main__":
    main()
