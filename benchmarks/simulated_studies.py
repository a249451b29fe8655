"""Does a GPU study keep its promises? Many whole studies on a simulated GPU, in simulated time, held to them.

    python benchmarks/simulated_studies.py [--seeds 200] [--workers 2] [--sampler tpe]

Each study is the product's own preparation and loop (the workload's probe, the batch ceiling, the search, the race,
what each knob bought, the least change, the claim, the numerics check) run against
:mod:`autotune.testing.simulated`: an H200 or an H100 with a workload of known truth shaped by the GPU runs (the
GPT-2-shaped LM, the LM that runs out of memory above a batch, a CNN, a step starved by its loader, a step where
nothing pays), under each configuration's own noise (unequal), the same for all (equal), a machine that drifts, or
heavy tails, with --time-budget of 2 minutes, 4 minutes, 15 minutes and an hour. The studies go round the shapes,
the budgets and the noises, seed after seed.

Prints a line a study and then the properties (autotune.testing.simulated.properties), counted:

- the study ends within 5% of its budget in simulated time, probes and its process's exit included;
- every claim rests on at least 3 processes of its configuration, or says it is not confirmed, with no interval, in
  every view (status --json's verdict and recommendation, the export);
- the claims' 90% intervals cover their configuration's truth in at least 88% of the studies (a study whose claim
  has no interval covers nothing: "no gain beyond the noise" comes with an interval too);
- the pick is at least 90% of the best reachable configuration on the median seed;
- no verdict contradicts its own lines;
- the processes spent after the search (race, what each knob bought, the claim) against the least a claim of that
  width needs (median of the ratio: at most 2);
- compiled trials stopped by a phase's end with nothing learned.

The last line: ``seeds N: budget kept k, claims with >= 3 processes or unconfirmed u, covering the truth c, median pick
p% of the best reachable, contradictions z``. Exits 1 when k or u is short of N, c of 88% of N, p of 90 or
z above 0. The sampler is TPE unless --sampler says otherwise: the default GP's suggestions cost seconds of CPU
each, which a simulated study does not count in its time and this machine cannot afford 200 times over.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harness
from harness import say

from autotune.testing.simulated import SHAPES, properties, run_study

BUDGETS = (120.0, 240.0, 900.0, 3600.0)
NOISES = ("unequal", "equal", "drifting", "heavy")


def plan(seeds: int, shapes: list[str], budgets: list[float]) -> list[tuple[str, float, str, int]]:
    """The studies: round the shapes and budgets, each combination's noise turning with its seed."""
    combos = list(itertools.product(shapes, budgets))
    out = []
    for i in range(seeds):
        shape, budget = combos[i % len(combos)]
        seed = i // len(combos)
        out.append((shape, budget, NOISES[(seed + i) % len(NOISES)], seed))
    return out


def one(job: tuple[str, float, str, int, str, str]) -> dict[str, Any]:
    shape, budget, noise, seed, folder, sampler = job
    url = f"journal:{Path(folder) / f'{os.getpid()}.log'}"
    name = f"{shape}-{budget:g}-{noise}-{seed}"
    began = time.process_time()
    study = run_study(SHAPES[shape].with_noise(noise), budget, seed, url, name, sampler=sampler or None)
    checked = properties.check(study)
    return {**checked.to_dict(), "noise": noise, "seed": seed, "cpu_s": round(time.process_time() - began, 2),
            "processes": study.processes}


def main() -> int:
    parser = harness.arguments(__doc__)
    parser.add_argument("--seeds", type=int, default=200, help="studies in all (default 200)")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes running studies at once (default: 2)")
    parser.add_argument("--sampler", default="tpe", help="the studies' sampler (default tpe; the product's: gp)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="which simulated machines (default: all)")
    parser.add_argument("--budgets", default=",".join(f"{b:g}" for b in BUDGETS),
                        help="time budgets in seconds (default: 120,240,900,3600)")
    args = parser.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    budgets = [float(b) for b in args.budgets.split(",") if b]
    jobs = plan(args.seeds, shapes, budgets)
    started = time.monotonic()
    say(f"{len(jobs)} simulated studies: shapes {', '.join(shapes)}; budgets {', '.join(f'{b:g}s' for b in budgets)};"
        f" noises {', '.join(NOISES)}; sampler {args.sampler}; {args.workers} workers")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="simulated-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as d:
        work = [(*job, d, args.sampler) for job in jobs]
        ctx = multiprocessing.get_context("forkserver")
        with ctx.Pool(args.workers) as pool:
            for row in pool.imap(one, work):
                rows.append(row)
                claim = row["claim"] or {}
                say(f"{row['study']:<32} {row['noise']:<8} wall {row['wall_s']:6.0f}/{row['budget_s']:<5g} "
                    f"{'kept' if row['budget_kept'] else 'OVER'}; claim {claim.get('text') or '-':<18} "
                    f"truth {row['truth'] or 0:5.2f}x "
                    f"{'covered' if row['covered'] else 'NOT covered' if row['covered'] is False else 'no interval'}"
                    f"; pick {row['pick_share']:.0%} of {row['best']:.2f}x; after the search {row['after_search']}"
                    f" processes (least {row['least'] or '-'}); {row['cpu_s']:.1f} s CPU"
                    + (f"; {'; '.join(row['claim_problems'])}" if row["claim_problems"] else "")
                    + (f"; CONTRADICTS: {'; '.join(row['contradictions'])}" if row["contradictions"] else ""),
                    keep=True)
    checked = [properties.Checked(**{k: v for k, v in r.items() if k in properties.Checked.__dataclass_fields__})
               for r in rows]
    counts = properties.summary(checked)
    widths = sorted(r["width"] for r in rows if r["width"])
    say("")
    say(f"budget: {counts['budget_kept']} of {counts['seeds']} within {properties.BUDGET_SLACK:.0%} "
        f"(the longest {counts['worst_wall_share']:.3f} of its budget)")
    say(f"claims: {counts['claims_sound']} of {counts['seeds']} rest on >= 3 processes or say they are not confirmed;"
        f" {counts['intervals']} with an interval, {counts['covering']} covering the truth "
        f"({counts['covering'] / max(1, counts['intervals']):.0%}); median width "
        + (f"{widths[len(widths) // 2]:.3f}x" if widths else "-"))
    by_noise = {n: [r["covered"] for r in rows if r["noise"] == n and r["covered"] is not None] for n in NOISES}
    say("by noise: " + "; ".join(f"{n} {sum(c)} of {len(c)} covering" for n, c in by_noise.items()))
    say(f"pick: median {counts['median_pick_percent']:.1f}% of the best reachable")
    say("after the search: median " + (f"{counts['median_after_over_least']:.2f}x" if counts["median_after_over_least"]
                                       else "-") + " the least a claim of that width needs")
    say(f"compiled trials stopped by a phase's end with nothing learned: {counts['wasted_compiles']}")
    say(f"{time.monotonic() - started:.0f} s in all")
    say(properties.last_line(counts))
    harness.write(args, {"counts": counts, "studies": rows})
    ok = (counts["budget_kept"] == counts["seeds"] and counts["claims_sound"] == counts["seeds"]
          and counts["covering"] >= 0.88 * counts["seeds"] and (counts["median_pick_percent"] or 0) >= 90
          and counts["contradictions"] == 0)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
