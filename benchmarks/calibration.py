"""Are the claims calibrated? A study's exported speed-up and interval against a re-measurement.

    python benchmarks/calibration.py [--trials 20] [--models cnn mlp transformer outside]

For each model: a study of N trials as `autotune run` makes it (the `cpu` space, the
noise floor and the final race on), then the verdict's export; then the exported
configuration and the defaults are measured again alternately in 5 fresh processes
each, and the re-measured speed-up (ratio of geometric means) is compared with the
claimed interval. Also printed: what the floor and the race cost (extra measurements
and seconds). `outside` is a model that is not among the examples: a 2-layer GPT-2
from Hugging Face transformers built from its config where transformers is installed,
else an LSTM language model (benchmarks/outside.py).
Writes benchmarks/results/calibration.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from autotune import config as C  # noqa: E402
from autotune import knobs, tuning  # noqa: E402
from autotune.request import TuneConfig  # noqa: E402
from autotune.store import Store  # noqa: E402
from autotune.evidence import Evidence  # noqa: E402
from autotune.runner import warm_up  # noqa: E402
from autotune.stats import geomean  # noqa: E402
from autotune.workload import WorkloadSpec  # noqa: E402


def outside() -> WorkloadSpec:
    try:
        import transformers  # noqa: F401

        return WorkloadSpec("hf:gpt2", model_args=(("n_embd", 128), ("n_head", 4), ("n_layer", 2), ("seq_len", 64), ("vocab_size", 2048)))
    except ImportError:
        return WorkloadSpec("outside:lstm_lm")


MODELS = {
    "cnn": lambda: WorkloadSpec("autotune.examples:cnn", data="autotune.examples:images"),
    "mlp": lambda: WorkloadSpec("autotune.examples:mlp"),
    "transformer": lambda: WorkloadSpec("autotune.examples:transformer"),
    "outside": outside,
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--keep", default=None, help="Keep the studies' SQLite files in this folder (default: a temporary one).")
    args = ap.parse_args()
    warm_up()
    out = {}
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
        for name in args.models:
            spec = MODELS[name]()
            url = f"sqlite:///{tmp}/{name}.db"
            job = TuneConfig(spec=spec, space="cpu", trials=args.trials, seed=0)
            prepared = tuning.prepare(job, name, Store.open(url), "cpu")
            start = time.monotonic()
            summary = prepared.run()
            elapsed = time.monotonic() - start
            race = summary.race
            study = prepared.study
            # the claim checked: the recommendation's when there is a gain, else the fastest-looking one's
            gain = Evidence.of(study).verdict().state == "gain"
            doc = C.export(study, "recommended" if gain else "fastest")
            claim = doc["speedup"]
            runner = prepared.runner
            defaults, best = [], []
            for _ in range(args.repeats):
                defaults.append(runner.measure(prepared.tuner.base).samples_per_s)
                best.append(runner.measure(doc["knobs"]).samples_per_s)
            again = geomean(best) / geomean(defaults)
            inside = claim["low"] <= again <= claim["high"] if claim["low"] is not None else None
            trial_s = sum(t.user_attrs.get("duration_s") or 0.0 for t in study.trials)
            ex = {
                "model": spec.model,
                "trials": args.trials,
                "verdict": doc["verdict"]["state"],
                "verdict_text": doc["verdict"]["text"],
                "exported": knobs.short(doc["knobs"]),
                "claimed": claim,
                "noise_percent": doc["noise"]["percent"],
                "remeasured_defaults": defaults,
                "remeasured_exported": best,
                "remeasured_speedup": again,
                "inside": inside,
                "repeat_measurements": summary.repeats,
                "race_rounds": race.rounds if race else 0,
                "study_s": elapsed,
                "trials_s": trial_s,
            }
            out[name] = ex
            print(flush=True)
            print(f"== {name} ({spec.model}): {args.trials} trials in {elapsed:.0f} s, noise between processes ±{ex['noise_percent']:.0f}%")
            print(f"   verdict: {ex['verdict_text']}")
            print(f"   claimed {claim['text']}; re-measured in {args.repeats}+{args.repeats} fresh processes: {again:.2f}x "
                  f"-> {'inside' if inside else 'OUTSIDE'} the interval")
            print(f"   cost of the floor and the race: {summary.repeats} extra measurements ({race.rounds if race else 0} race rounds); "
                  f"trials themselves took {trial_s:.0f} s of the study's {elapsed:.0f} s", flush=True)
    results = Path(__file__).resolve().parent / "results"
    results.mkdir(exist_ok=True)
    (results / "calibration.json").write_text(json.dumps(out, indent=1, default=str))
    covered = [v["inside"] for v in out.values() if v["inside"] is not None]
    print(f"re-measured speed-up inside the claimed interval: {sum(covered)} of {len(covered)}")


if __name__ == "__main__":
    main()
