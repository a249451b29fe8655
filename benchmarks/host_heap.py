"""What the host heap (knob ``host_allocator``) buys and costs, on each example model, in separate processes.

``benchmarks/paths_agree.py`` found that glibc's malloc gives the large blocks of a CPU step back
to the system and faults them in again on the next step, unless the heap has already grown
(:mod:`autotune.machine.heap`). This script measures the knob itself: the defaults against the defaults
with ``host_allocator=retain``, each in a process of its own, alternating, ``--rounds`` rounds;
the speed-up with its 90% interval between processes (``autotune.evidence.stats``, the noise pooled from
both configurations' rounds), and the peak memory of each (what retaining costs).

    python benchmarks/host_heap.py [--models autotune.examples:mlp,autotune.examples:cnn,...] [--rounds 5]

Writes benchmarks/results/host_heap-<date>.json and .txt (what it printed). Run it on a quiet machine.
"""

from __future__ import annotations

import statistics

import harness
from harness import say

MODELS = "autotune.examples:mlp,autotune.examples:cnn,autotune.examples:transformer"


def main() -> None:
    ap = harness.arguments(__doc__)
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    from autotune import knobs
    from autotune.evidence import stats
    from autotune.trial.protocol import Settings
    from autotune.trial.runner import Runner
    from autotune.workloads.contract import WorkloadSpec

    harness.start_on_this_machine()
    say(f"the defaults against the defaults with host_allocator=retain, each in a process of its own, "
        f"{args.rounds} rounds")
    base = knobs.defaults()
    retain = {**base, "host_allocator": "retain"}
    out = {}
    for model in args.models.split(","):
        runner = Runner(WorkloadSpec(model), settings=Settings().lean())
        rates: dict[str, list[float]] = {"default": [], "retain": []}
        memory: dict[str, list[float]] = {"default": [], "retain": []}
        for k in range(args.rounds):
            order = (("default", base), ("retain", retain)) if k % 2 == 0 else (("retain", retain), ("default", base))
            for name, config in order:
                res = runner.measure(config)
                assert res.ok, res.error
                rates[name].append(res.samples_per_s)
                memory[name].append(res.peak_memory_bytes / 2**20)
        noise = stats.pooled_noise([rates["default"], rates["retain"]])
        r = stats.ratio(list(enumerate(rates["retain"])), list(enumerate(rates["default"])), noise)
        say(f"{model}: retain {r.estimate:.2f}x ({r.low:.2f}-{r.high:.2f}); "
            f"samples/s {stats.geomean(rates['default']):.0f} -> "
            f"{stats.geomean(rates['retain']):.0f}; peak memory {statistics.median(memory['default']):.0f} -> "
            f"{statistics.median(memory['retain']):.0f} MiB; noise between processes ±{noise.percent:.0f}%")
        out[model] = {"speedup": r.estimate, "low": r.low, "high": r.high, "rates": rates, "peak_memory_mib": memory,
                      "noise_sigma": noise.sigma}
    harness.write(args, out)


if __name__ == "__main__":
    main()
