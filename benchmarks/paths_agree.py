"""Do autotune's two ways of measuring a speed-up agree with each other, and with a user's own training loop?

A claim is about the user's training. This script measures one candidate against PyTorch's
defaults three ways, in fresh processes, alternating, on the same machine:

- **user loop**: a plain training loop as a user writes it with the exported configuration
  (``autotune.load_config(...).apply(model, dataset, optimizer)``, then ``step(batch)`` in
  half-second windows), the candidate and the defaults each in processes of their own;
- **separate**: autotune's trial protocol, one configuration per process (``Runner.measure``,
  as the noise floor and a race of separate processes measure);
- **shared**: the candidate and the defaults alternately inside one process
  (``Runner.measure_together``, as the race measures configurations that can share a
  process, and as "what each knob bought" does).

It also runs the defaults against themselves inside one process (must read 1.00x) and prints
each configuration's own samples/s by path, so a bias can be told apart from noise.

    python benchmarks/paths_agree.py [--model autotune.examples:mlp] [--set precision=bf16 ...] [--both KNOB=VALUE]
                                     [--rounds 4] [--out paths_agree]

Writes benchmarks/results/OUT-<date>.json and .txt (what it printed). Run it on a quiet machine.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import harness
from harness import say

USER_LOOP = """
import importlib, json, sys, time, torch, autotune, autotune.workloads.contract
cfg = autotune.load_config(sys.argv[1], check_hardware=False)
module, attr = sys.argv[2].split(":")
model = getattr(importlib.import_module(module), attr)()
dataset = autotune.workloads.contract.SyntheticDataset(model.example_input)
model, loader, step = cfg.apply(model, dataset, torch.optim.AdamW(model.parameters(), lr=1e-4))
batches = iter(loader)
for _ in range(20):
    step(next(batches))
windows = []
for _ in range(6):
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < 0.5:
        step(next(batches))
        n += 1
    windows.append(n * cfg.knobs["batch_size"] / (time.perf_counter() - start))
print(json.dumps(sorted(windows)[len(windows) // 2]))
"""
def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def main() -> None:
    ap = harness.arguments(__doc__)
    ap.add_argument("--model", default="autotune.examples:mlp")
    ap.add_argument("--set", action="append", default=None, help="A knob of the candidate, NAME=VALUE (repeatable).")
    ap.add_argument("--both", action="append", default=[],
                    help="A knob set in the defaults and the candidate alike, NAME=VALUE (repeatable), e.g. "
                         "host_allocator=retain to take the heap's history out of every path.")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()

    from autotune import knobs
    from autotune.machine import hardware, identity
    from autotune.machine import load
    from autotune.export.document import SCHEMA
    from autotune.trial.protocol import Settings
    from autotune.trial.runner import Runner, warm_up
    from autotune.workloads.contract import WorkloadSpec

    sets = args.set or ["precision=bf16", "batch_size=128", "optimizer_impl=fused"]
    base = {**knobs.defaults(), **knobs.parse_assignments(args.both)}
    cand = {**base, **knobs.parse_assignments(sets)}
    warm_up()
    busy = load.other_cores_now(2.0)
    say(f"machine: {identity.short(hardware.fingerprint('cpu'))}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M')}; "
        f"other processes used {busy['other_cores']:.1f} cores at the start")
    say(f"model {args.model}; candidate {knobs.short(cand)}; baseline {knobs.short(base) or 'the defaults'}; "
        f"{args.rounds} rounds, each path alternating")
    runner = Runner(WorkloadSpec(args.model), settings=Settings().lean())
    rates: dict[str, dict[str, list[float]]] = {p: {"defaults": [], "candidate": []}
                                                for p in ("user loop", "separate", "shared")}
    same: list[float] = []
    context = runner.probe()["context"]  # what an export stores: the optimizer's switches included
    with tempfile.TemporaryDirectory() as folder:
        docs = {}
        for name, config in (("defaults", base), ("candidate", cand)):
            docs[name] = Path(folder, f"{name}.json")
            docs[name].write_text(json.dumps({"schema": SCHEMA, "knobs": config,
                                              "context": context}))
        for k in range(args.rounds):
            for name in ("defaults", "candidate"):
                out = subprocess.run([sys.executable, "-c", USER_LOOP, str(docs[name]), args.model],
                                     capture_output=True, text=True, check=True)
                rates["user loop"][name].append(float(out.stdout.strip().splitlines()[-1]))
            rates["separate"]["defaults"].append(runner.measure(base).samples_per_s)
            rates["separate"]["candidate"].append(runner.measure(cand).samples_per_s)
            res = runner.measure_together([base, cand], unchecked=True)  # what autotune.knobs.apart may refuse
            rates["shared"]["defaults"].append(res.arms[0]["samples_per_s"])
            rates["shared"]["candidate"].append(res.arms[1]["samples_per_s"])
            res = runner.measure_together([base, base], unchecked=True)
            same.append(res.arms[1]["samples_per_s"] / res.arms[0]["samples_per_s"])
            say(f"round {k + 1}: " + "; ".join(
                f"{p} {r['candidate'][-1] / r['defaults'][-1]:.2f}x "
                f"({r['defaults'][-1]:.0f} -> {r['candidate'][-1]:.0f})"
                for p, r in rates.items()) + f"; defaults against themselves in one process {same[-1]:.2f}x")
    say()
    out = {}
    for p, r in rates.items():
        ratio = geomean(r["candidate"]) / geomean(r["defaults"])
        out[p] = {"speedup": ratio, "defaults_samples_per_s": geomean(r["defaults"]),
                  "candidate_samples_per_s": geomean(r["candidate"]), "rates": r}
        say(f"{p:>9}: {ratio:.2f}x  (defaults {geomean(r['defaults']):.0f}, "
            f"candidate {geomean(r['candidate']):.0f} samples/s)")
    say(f"defaults against themselves in one process: {geomean(same):.2f}x")
    out["same_in_one_process"] = geomean(same)
    harness.write(args, out)


if __name__ == "__main__":
    main()
