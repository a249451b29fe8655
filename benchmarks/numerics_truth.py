"""The numerics check on models whose numerics are known (autotune/testing/known_numerics.py), seed after seed.

    python benchmarks/numerics_truth.py [--seeds 20] [--steps 30]

Each case is checked as a study checks its recommendation (:func:`autotune.trial.trainings.check`: the defaults,
the defaults again, the configuration, a revert per knob when they differ), here in this process, one training
after another, with the model's data and the check seeded by the seed:

- ``bf16, a layer that needs the mantissa``: a signal on an offset of 256, which bf16 rounds in steps of 2;
  expected: differ, caused by the precision;
- ``bf16, an ordinary MLP``: expected: hold;
- ``BatchNorm, batch 32 against 128`` (bf16 beside it): the same 128 samples per step; expected: differ, caused by
  the batch size (bf16 alone holds);
- ``fp32 against fp32 (foreach optimizer)``: expected: hold, with the loss where the floor puts it.

Prints, per case, how many seeds gave the expected answer (issue 36's target: 20 of 20) and the range of the loss
gap (median relative difference over the second half of the steps) and of the weights' distance (a share of how
far training moved them), the figures the tolerances of autotune/evidence/numerics_answer.py are set against.
Writes benchmarks/results/numerics_truth-<date>.json and .txt.
"""

from __future__ import annotations

import time

import harness
from harness import say

from autotune import knobs
from autotune.evidence import numerics_answer as NU
from autotune.request import WorkloadSpec
from autotune.trial import numerics_run as N
from autotune.trial import trainings
from autotune.trial.messages import NumericsRequest

CASES = {
    "bf16, a layer that needs the mantissa": ("needs_mantissa", {}, {"precision": "bf16"}, NU.DIFFER, ("precision",)),
    "bf16, an ordinary MLP": ("mlp", {}, {"precision": "bf16"}, NU.HOLD, ()),
    "BatchNorm, batch 32 against 128": ("batchnorm", {"batch_size": 128}, {"batch_size": 32, "precision": "bf16"},
                                        NU.DIFFER, ("batch_size",)),
    "fp32 against fp32 (foreach optimizer)": ("mlp", {}, {"optimizer_impl": "foreach"}, NU.HOLD, ()),
}


def checked(model: str, defaults: dict, config: dict, seed: int, steps: int) -> NU.Check:
    spec = WorkloadSpec(model=f"autotune.testing.known_numerics:{model}", model_args={"seed": seed})

    def numerics(cfg, n, per_step, s, save, references):
        return N.run(NumericsRequest(spec=spec, config=dict(cfg), steps=n, samples_per_step=per_step, seed=s,
                                     save_path=save, references=tuple(references)))

    changes = {k: v for k, v in config.items() if defaults.get(k, knobs.KNOBS[k].default_for()) != v}
    record = {"number": 1, "mode": NU.WARN, "steps": steps, "seed": seed, "changes": changes, "config": config,
              "defaults": defaults, "runs": [], "samples_per_step": trainings.samples_per_step(config, defaults, None)}
    return NU.judge(trainings.check(numerics, record))


def main() -> None:
    ap = harness.arguments(__doc__)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--steps", type=int, default=NU.MIN_STEPS)
    args = ap.parse_args()
    say(f"tolerances: loss {100 * NU.LOSS_TOLERANCE:g}%, weights {100 * NU.WEIGHTS_TOLERANCE:g}% of the distance "
        f"training moved them, or {NU.FLOOR_TIMES:g}x the floor; {args.steps} steps, {args.seeds} seeds")
    out = {}
    for name, (model, defaults, config, expected, causes) in CASES.items():
        start = time.perf_counter()
        rows = []
        for seed in range(args.seeds):
            c = checked(model, defaults, config, seed, args.steps)
            rows.append({"seed": seed, "state": c.state, "causes": list(c.causes),
                         "loss": c.gap.loss if c.gap else None,
                         "weights": c.gap.weights if c.gap else None, "floor_loss": c.floor.loss if c.floor else None,
                         "text": c.text(), "right": c.state == expected and tuple(c.causes) == causes})
        right = sum(r["right"] for r in rows)
        loss = [100 * r["loss"] for r in rows if r["loss"] is not None]
        weights = [100 * r["weights"] for r in rows if r["weights"] is not None]
        say(f"{name}: expected {expected}" + (f" ({', '.join(causes)})" if causes else "")
            + f"; {right} of {args.seeds} seeds as expected (target: all); loss {min(loss):.2f}-{max(loss):.2f}%, "
            f"weights {min(weights):.1f}-{max(weights):.1f}% apart; {time.perf_counter() - start:.0f} s")
        out[name] = {"expected": expected, "causes": list(causes), "right": right, "rows": rows}
    harness.write(args, out)


if __name__ == "__main__":
    main()
