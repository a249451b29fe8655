"""What a launch buys on this machine: the processes a training runs as, a preloaded allocator, bound cores.

Each arm is a configuration of the launch knobs over PyTorch's defaults, measured as a study's trial is (a process
of its own, started the way the knob needs: ranks by torch's elastic launcher, a preloaded library in a process
started with ``LD_PRELOAD``, bound cores under ``taskset``/``numactl``):

- ``1x<C>``: the defaults, one rank of all C cores' threads (the reference);
- ``<R>x<T>``: R ranks of T threads each, R x T = C (on a 2-core machine: 2 ranks of 1 thread);
- ``retain``, ``jemalloc``, ``tcmalloc``: the host allocator (glibc's malloc told to keep its heap, or a library
  preloaded), where this machine has it;
- ``bound``: the threads bound to compact cores.

Rounds: every arm once, each in a fresh process, the order rotated round by round. An arm's speed-up over the
reference is paired by round (``autotune.evidence.stats.paired``: the mean of the rounds' log-ratios with a 90% t
interval from their own spread), so the machine's drift between rounds cancels; beside it the samples/s, the peak
memory, and the proof that the launch was in force (the library in the trial's own maps, the cores it ran on).

    python benchmarks/launch.py [--models autotune.examples:cnn,autotune.examples:mlp] [--rounds 5]

Writes benchmarks/results/launch-<date>.json and .txt (what it printed). Run it on a quiet machine.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

import harness
from harness import say

MODELS = "autotune.examples:cnn,autotune.examples:mlp"


def arms(base: dict[str, Any], cores: int, libraries: tuple[str, ...]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The arms over ``base`` (the defaults), and what this machine cannot run, with why."""
    out = {f"1x{cores}": dict(base)}
    missing = []
    if cores >= 2:
        ranks = 2
        out[f"{ranks}x{cores // ranks}"] = {**base, "ranks": ranks, "threads": cores // ranks}
    out["retain"] = {**base, "host_allocator": "retain"}
    from autotune.machine import preload

    for name in ("jemalloc", "tcmalloc"):
        if name in libraries:
            out[name] = {**base, "host_allocator": name}
        else:
            missing.append(f"{name}: {preload.missing(name)}")
    out["bound"] = {**base, "core_binding": "compact"}
    return out, missing


def proof(notes: dict[str, Any]) -> str:
    """What the trial's own process showed of its launch."""
    said = []
    if notes.get("preloaded"):
        said.append(f"maps: {os.path.basename(str(notes['preloaded']))}")
    if notes.get("bound_cpus"):
        said.append(f"bound to cores {notes['bound_cpus']}, its threads on {notes.get('thread_cpus')}")
    return ", ".join(said)


def main() -> None:
    ap = harness.arguments(__doc__)
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    from autotune import knobs
    from autotune.evidence import stats
    from autotune.machine import load, preload
    from autotune.trial.protocol import Settings
    from autotune.trial.runner import Runner
    from autotune.workloads.contract import WorkloadSpec

    harness.start_on_this_machine()
    cores = load.cpu_count()
    libraries = preload.found()
    base = knobs.defaults()
    table, missing = arms(base, cores, libraries)
    reference = next(iter(table))
    say(f"arms: {', '.join(table)} (the reference {reference}: the defaults); {args.rounds} rounds, each arm in a "
        "process of its own, the order rotated" + (f"; left out: {'; '.join(missing)}" if missing else ""))
    out: dict[str, Any] = {"cores": cores, "arms": {k: {n: v for n, v in c.items() if v != base.get(n)}
                                                   for k, c in table.items()}, "missing": missing, "models": {}}
    names = list(table)
    for model in args.models.split(","):
        runner = Runner(WorkloadSpec(model), settings=Settings().lean())
        rates: dict[str, list[tuple[str, float]]] = {k: [] for k in names}
        memory: dict[str, list[float]] = {k: [] for k in names}
        shown: dict[str, str] = {}
        other: list[float] = []
        failed: dict[str, str] = {}
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                res = runner.measure(table[name])
                if not res.ok:
                    failed[name] = f"{res.outcome}: {res.error}"[:200]
                    continue
                rates[name].append((str(r), res.samples_per_s))
                memory[name].append(res.peak_memory_bytes / 2**20)
                shown[name] = proof(res.notes or {}) or shown.get(name, "")
                other.append(float((res.load or {}).get("other_cores") or 0.0))
        ref = rates[reference]
        say(f"{model}: the reference {reference} {stats.geomean(v for _, v in ref):.0f} samples/s; other processes "
            f"used at most {max(other, default=0.0):.1f} cores during the trials")
        result: dict[str, Any] = {}
        for name in names:
            if not rates[name]:
                say(f"  {name:>9}: failed ({failed.get(name, 'no measurement')})")
                result[name] = {"failed": failed.get(name)}
                continue
            geo = stats.geomean(v for _, v in rates[name])
            mem = statistics.median(memory[name])
            if name == reference:
                say(f"  {name:>9}: {geo:.0f} samples/s; peak memory {mem:.0f} MiB")
                result[name] = {"samples_per_s": geo, "peak_memory_mib": mem, "rates": rates[name]}
                continue
            r = stats.paired(rates[name], ref)
            interval = f" ({r.low:.2f}-{r.high:.2f})" if r.has_interval else " (no interval: one round)"
            verdict = ("faster beyond the noise" if r.above_one() else "slower beyond the noise" if r.below_one()
                       else "no difference beyond the noise")
            say(f"  {name:>9}: {r.estimate:.2f}x{interval} over {r.processes} rounds, {verdict}; {geo:.0f} samples/s; "
                f"peak memory {mem:.0f} MiB" + (f"; {shown[name]}" if shown.get(name) else "")
                + (f"; failed once: {failed[name]}" if name in failed else ""))
            result[name] = {"speedup": r.estimate, "low": r.low, "high": r.high, "rounds": r.processes,
                            "samples_per_s": geo, "peak_memory_mib": mem, "rates": rates[name],
                            "proof": shown.get(name), "failed": failed.get(name)}
        out["models"][model] = result
    harness.write(args, out)


if __name__ == "__main__":
    main()
