"""Whether a training of several ranks still learns what one process learns: the numerics check of launches.

Each arm is a configuration of the launch knobs over PyTorch's defaults, checked as a study checks its
recommendation (``autotune.trial.trainings.check``: the defaults, the defaults again, the arm, and each of its knobs
reverted when the numerics differ, each a fresh process from the same seeded weights on the same samples a step,
the samples a step sized so that every revert can run):

- ``2 ranks``: two ranks of the defaults' batch, a thread each (each rank normalises a BatchNorm over the batch one
  process normalises over);
- ``2 ranks of 8``: two ranks of 8 samples each (a BatchNorm over 8 samples, not the defaults' 32);
- ``fp16 hook``: two ranks whose gradients are all-reduced in fp16 (``comm_hook=fp16``).

    python benchmarks/launch_numerics.py [--models autotune.examples:cnn,autotune.examples:mlp] [--steps 30]

Prints each check's answer, its samples a step and its time. Writes benchmarks/results/launch_numerics-<date>.json
and .txt.
"""

from __future__ import annotations

import time
from typing import Any

import harness
from harness import say

MODELS = "autotune.examples:cnn,autotune.examples:mlp"
TWO = {"ranks": 2, "threads": 1}
ARMS = {"2 ranks": TWO, "2 ranks of 8": {**TWO, "batch_size": 8}, "fp16 hook": {**TWO, "comm_hook": "fp16"}}


def main() -> None:
    from autotune.evidence import numerics_answer as NU

    ap = harness.arguments(__doc__)
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--steps", type=int, default=NU.MIN_STEPS)
    args = ap.parse_args()

    from autotune import knobs
    from autotune.evidence.verdict import changes_text
    from autotune.trial import trainings
    from autotune.trial.runner import Runner
    from autotune.workloads.contract import WorkloadSpec

    harness.start_on_this_machine()
    defaults = knobs.defaults()
    out: dict[str, Any] = {"steps": args.steps, "arms": ARMS, "models": {}}
    for model in args.models.split(","):
        runner = Runner(WorkloadSpec(model), timeout_s=600)
        out["models"][model] = {}
        for name, changes in ARMS.items():
            config = {**defaults, **changes}
            record = trainings.plan(config, defaults, changes, args.steps, number=1)
            per_step = record["samples_per_step"]
            start = time.perf_counter()
            check = NU.judge(trainings.check(runner.numerics, record))
            wall = time.perf_counter() - start
            say(f"{model} {name} ({changes_text(changes)}): "
                f"{per_step} samples a step, {len(record['runs'])} runs in {wall:.0f} s: {check.text()}")
            out["models"][model][name] = {"check": check.to_dict(), "wall_s": wall, "samples_per_step": per_step,
                                          "runs": [(r["label"], r["outcome"], r.get("ranks")) for r in record["runs"]]}
    harness.write(args, out)


if __name__ == "__main__":
    main()
