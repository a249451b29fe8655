"""What the numerics check costs on a Hugging Face model, run as a study runs it: fresh processes through the trial
runner, its steps sized for the study's time.

    python benchmarks/numerics_cost.py [--study-s 469] [--set batch_size=16 ...]

The check of ``--set``'s configuration (default: :data:`FASTEST`) against the defaults on ``hf:gpt2`` with 2 layers 128
wide (the README's Hugging Face job, ``benchmarks/main_job.py --jobs hf``), sized for a study of ``--study-s`` seconds
(469: what that job took on 2026-11-27, benchmarks/results/main_job_numerics-2026-11-27.txt; its study recommended the
defaults, so it checked nothing). Prints the check's answer, its steps and its wall time as a share of the study's
(issue 36's target: at most 10%).

Writes benchmarks/results/numerics_cost-<date>.json and .txt.
"""

from __future__ import annotations

import time

import harness
from harness import say

from autotune.evidence import numerics_answer as NU
from autotune.request import WorkloadSpec, parse_model_args
from autotune.trial import trainings
from autotune.trial.runner import Runner

#: The fastest configuration that job measured (#4, 0.96x (0.92-1.00): no gain, so it checked nothing). Not bf16: on
#: this CPU a bf16 step of this model takes 40 s against fp32's 0.3 s (its 50,257-token head), which no study
#: would recommend.
FASTEST = ("batch_size=16", "num_workers=2", "persistent_workers=True", "optimizer_impl=fused")
MODEL = WorkloadSpec(model="hf:gpt2", model_args=(("n_embd", 128), ("n_head", 2), ("n_layer", 2), ("seq_len", 64)))


def main() -> None:
    ap = harness.arguments(__doc__)
    ap.add_argument("--study-s", type=float, default=469.0)
    ap.add_argument("--set", action="append", default=None)
    args = ap.parse_args()
    args.set = args.set or list(FASTEST)
    config = dict(parse_model_args(tuple(args.set)))
    runner = Runner(MODEL)
    per_step = trainings.samples_per_step(config, {}, None)
    start = time.perf_counter()
    first = runner.numerics({}, 2, per_step, 0)  # two steps: the step time and the start-up, as a study knows them
    probe_s = time.perf_counter() - start
    step_s = first.wall_s / 2 if first.wall_s else 1.0
    steps = NU.steps_for(args.study_s, step_s, probe_s)
    record = trainings.plan(config, {}, config, steps, per_step=per_step, number=1)
    start = time.perf_counter()
    check = NU.judge(trainings.check(runner.numerics, record))
    wall = time.perf_counter() - start
    say(f"{MODEL.model} {dict(MODEL.model_args)}: {' '.join(args.set)} against the defaults, {steps} steps of "
        f"{per_step} samples: {check.text()}")
    say(f"the check: {wall:.1f} s in {len(record['runs'])} processes = {100 * wall / args.study_s:.1f}% of a "
        f"{args.study_s:.0f} s study (target: at most 10%)")
    harness.write(args, {"check": check.to_dict(), "wall_s": wall, "study_s": args.study_s,
                         "share": wall / args.study_s, "runs": [(r["label"], r.get("wall_s")) for r in record["runs"]]})


if __name__ == "__main__":
    main()
