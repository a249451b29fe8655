"""Are the claims calibrated? A study's exported speed-up and interval against a re-measurement.

    python benchmarks/calibration.py [--trials 20] [--repeat 5] [--models cnn mlp transformer outside]
                                     [--out calibration]

For each model: a study of N trials as `autotune run` makes it (the `cpu` space, the
noise floor and the final race on), then the verdict's export; then the exported
configuration and the defaults are measured again alternately in 5 fresh processes
each, and the re-measured speed-up (ratio of geometric means) is compared with the
claimed interval. Also printed: what the floor, the race and the ablation cost (extra
processes and configurations measured, per search trial, and their seconds against the
trials' own), what each knob of the winner bought, and the claimed interval's width next
to the one the same model's claim had before paired measurement (issue 17:
benchmarks/results/calibration_before.json, the issue-8 run). `outside` is a model that
is not among the examples: a 2-layer GPT-2 from Hugging Face transformers built from its
config where transformers is installed, else an LSTM language model (benchmarks/outside.py).
Writes benchmarks/results/OUT-<date>.json and .txt (what it printed).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import harness
from harness import say

from autotune.export import document as C
from autotune import knobs
from autotune.tuning import preparation
from autotune.request import TuneConfig
from autotune.store import StoredStudy
from autotune.trial.runner import warm_up
from autotune.evidence.stats import geomean
from autotune.workloads.contract import WorkloadSpec
from autotune.evidence import evidence_of
from autotune.machine import identity


def outside() -> WorkloadSpec:
    try:
        import transformers  # noqa: F401

        return WorkloadSpec("hf:gpt2", model_args=(("n_embd", 128), ("n_head", 4), ("n_layer", 2), ("seq_len", 64),
                                                   ("vocab_size", 2048)))
    except ImportError:
        return WorkloadSpec("outside:lstm_lm")


MODELS = {
    "cnn": lambda: WorkloadSpec("autotune.examples:cnn", data="autotune.examples:images"),
    "mlp": lambda: WorkloadSpec("autotune.examples:mlp"),
    "transformer": lambda: WorkloadSpec("autotune.examples:transformer"),
    "outside": outside,
}


def extras(study: StoredStudy) -> dict:
    """What the study spent beyond its search trials: floor, race and ablation processes (and the configurations
    they measured), the ablation's recommendation measured on its own, and the seconds of all of them."""
    again = list(study.remeasurements())
    floor = [m for m in again if m.round_id.startswith("floor-")]
    race_alone = [m for m in again if m.round_id.startswith("race-")]
    shared = study.blocks()
    race_shared = [b for b in shared if b.purpose.get("race")]
    ablation = [b for b in shared if b.purpose.get("ablation")]
    minimal = [t for t in study.trials if t.role == "minimal" and t.duplicate_of is None]
    processes = len(floor) + len(race_alone) + len(shared) + len(minimal)
    configurations = len(floor) + len(race_alone) + sum(len(b.rates) for b in shared) + len(minimal)
    seconds = sum(float(m.wall_s or 0.0) for m in floor + race_alone) + sum(
        float(b.wall_s or 0.0) for b in shared) + sum(float(t.duration_s or 0.0) for t in minimal)
    return {"floor": len(floor), "race_processes": len(race_alone) + len(race_shared), "race_shared": len(race_shared),
            "ablation_processes": len(ablation), "minimal_trials": len(minimal), "processes": processes,
            "configurations": configurations, "seconds": seconds}


def main() -> None:
    ap = harness.arguments(__doc__, trials=20, repeat=5)
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--keep", default=None,
                    help="Keep the studies' SQLite files in this folder (default: a temporary one).")
    args = ap.parse_args()
    warm_up()
    import os
    import platform

    from autotune.machine import hardware
    from autotune.machine import load

    busy = load.other_cores_now(2.0)
    say(f"machine: {identity.short(hardware.fingerprint('cpu'))}, {os.cpu_count()} CPUs, {platform.python_version()}; "
        f"{time.strftime('%Y-%m-%d %H:%M')}; other processes used {busy['other_cores']:.1f} cores at the start; "
        f"{args.trials} trials per study")
    out = {}
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
        for name in args.models:
            spec = MODELS[name]()
            url = f"sqlite:///{tmp}/{name}.db"
            job = TuneConfig(spec=spec, space="cpu", trials=args.trials, seed=0)
            prepared = preparation.prepare(job, name, harness.open_store(url), "cpu")
            start = time.monotonic()
            summary = prepared.run()
            elapsed = time.monotonic() - start
            race = summary.race
            study = prepared.store.read(name)  # the study as the read commands read it, once
            ev = evidence_of(study)
            # the claim checked: the recommendation's when there is a gain, else the verdict's leader's (the fastest
            # it compared with the defaults; an export of --pick fastest can be the defaults themselves)
            verdict = ev.verdict()
            doc = C.export(study, "recommended")
            if verdict.state != "gain" and verdict.leader is not None and verdict.speedup is not None:
                leader = study.trial(verdict.leader)
                doc = {**doc, "knobs": dict(leader.config), "speedup": verdict.speedup.to_dict()}  # type: ignore[union-attr]
            claim = doc["speedup"]
            runner = prepared.runner
            defaults, best = [], []
            for _ in range(args.repeat):
                defaults.append(runner.measure(prepared.tuner.seeds.base).samples_per_s)
                best.append(runner.measure(doc["knobs"]).samples_per_s)
            again = geomean(best) / geomean(defaults)
            inside = claim["low"] <= again <= claim["high"] if claim["low"] is not None else None
            trial_s = sum(t.duration_s or 0.0 for t in study.trials if t.role != "minimal")
            cost = extras(study)
            searched = sum(1 for t in study.trials if t.duplicate_of is None and t.outcome is not None
                           and t.role != "minimal")
            ablation = ev.ablation()
            before = BEFORE.get(name, {}).get("claimed") or {}
            ex = {
                "model": spec.model,
                "trials": args.trials,
                "verdict": doc["verdict"]["state"],
                "verdict_text": doc["verdict"]["text"],
                "exported": knobs.short(doc["knobs"]),
                "claimed": claim,
                "noise_percent": doc["noise"]["percent"],
                "within_process_noise": ev.within_noise.to_dict(),
                "remeasured_defaults": defaults,
                "remeasured_exported": best,
                "remeasured_speedup": again,
                "inside": inside,
                "repeat_measurements": summary.repeats,
                "race_rounds": race.rounds if race else 0,
                "race_stopped": race.stopped if race else None,
                "extras": cost,
                "extra_processes_per_trial": cost["processes"] / max(1, searched),
                "extra_seconds_per_trial_second": cost["seconds"] / trial_s if trial_s else None,
                "ablation": ablation.to_dict() if ablation else None,
                "width_log": _width(claim),
                "width_log_before": _width(before),
                "study_s": elapsed,
                "trials_s": trial_s,
            }
            out[name] = ex
            say()
            say(f"== {name} ({spec.model}): {args.trials} trials in {elapsed:.0f} s, noise between processes "
                f"±{ex['noise_percent']:.0f}%, within one process {ev.within_noise.text().split(': ')[-1]}")
            say(f"   verdict: {ex['verdict_text']}")
            say(f"   claimed {claim['text']}; re-measured in {args.repeat}+{args.repeat} fresh processes: {again:.2f}x "
                f"-> {'inside' if inside else 'OUTSIDE'} the interval")
            if ex["width_log"] is not None and ex["width_log_before"] is not None:
                say(f"   interval width (log high/low): {ex['width_log']:.3f} now, {ex['width_log_before']:.3f} before "
                    f"({before.get('text')}): {ex['width_log'] / ex['width_log_before']:.2f}x")
            if ablation is not None:
                for line in ablation.lines():
                    say(f"   {line}")
            say(f"   extra: {cost['processes']} processes ({cost['floor']} floor, {cost['race_processes']} race "
                f"of which {cost['race_shared']} shared, {cost['ablation_processes']} ablation, "
                f"{cost['minimal_trials']} recommendation alone) measuring {cost['configurations']} configurations: "
                f"{ex['extra_processes_per_trial']:.2f} processes per search trial; {cost['seconds']:.0f} s against "
                f"the trials' {trial_s:.0f} s ({(ex['extra_seconds_per_trial_second'] or 0):.2f}x); "
                f"race {ex['race_rounds']} rounds ({ex['race_stopped']})")
    covered = [v["inside"] for v in out.values() if v["inside"] is not None]
    say(f"re-measured speed-up inside the claimed interval: {sum(covered)} of {len(covered)}")
    per_trial = [v["extra_processes_per_trial"] for v in out.values()]
    say(f"extra processes per search trial: {', '.join(f'{k} {v:.2f}' for k, v in zip(out, per_trial))} "
        "(target at most 0.5)")
    harness.write(args, out)


def _width(claim: dict) -> float | None:
    import math

    if not claim or claim.get("low") is None or claim.get("high") is None:
        return None
    return math.log(claim["high"] / claim["low"])


_BEFORE = harness.RESULTS / "calibration_before.json"  # the issue-8 run, before paired measurement
BEFORE = json.loads(_BEFORE.read_text()) if _BEFORE.exists() else {}


if __name__ == "__main__":
    main()
