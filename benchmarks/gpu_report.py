"""The CUDA path measured on a real GPU: defaults vs recipe vs a tuned study, repeatability, and the guides' claims.

    python benchmarks/gpu_report.py [--device cuda:0] [--trials 30] [--repeat 5] [--examples cnn transformer resnet50]

Writes benchmarks/results/gpu_<device-name>-<date>.json, .txt (what it printed) and .md (a
markdown table for docs/results.md). Every figure carries the device name and torch version. On a
machine without CUDA it runs on the CPU (for a dry run; CUDA-only claims say n/a).
"""

from __future__ import annotations

import re
import statistics
import tempfile
from pathlib import Path

import harness
from harness import say

from autotune import knobs
from autotune.machine import hardware
from autotune.tuning import preparation as tuning
from autotune.trial.protocol import cv
from autotune.request import TuneConfig
from autotune.trial.runner import Runner, warm_up
from autotune.workloads.contract import WorkloadSpec
from autotune.evidence import evidence_of
from autotune.machine import identity

EXAMPLES = {
    "cnn": ("autotune.examples:cnn", "cnn"),
    "transformer": ("autotune.examples:transformer", "transformer"),
    "resnet50": ("autotune.examples:resnet50", "cnn"),
}
CLAIMS = {  # name: (configuration A, configuration B); the claim is B faster than A
    "bf16 autocast vs fp32": ({}, {"precision": "bf16"}),
    "fp16 autocast + GradScaler vs fp32": ({}, {"precision": "fp16"}),
    "tf32 vs fp32": ({}, {"precision": "tf32"}),
    "channels_last (bf16) vs contiguous (bf16)": ({"precision": "bf16"}, {"precision": "bf16", "memory_format": "channels_last"}),
    "torch.compile vs eager (bf16)": ({"precision": "bf16"}, {"precision": "bf16", "compile": "default"}),
    "compile reduce-overhead vs eager (bf16)": ({"precision": "bf16"}, {"precision": "bf16", "compile": "reduce-overhead"}),
    "pin_memory vs not (4 workers)": ({"num_workers": 4}, {"num_workers": 4, "pin_memory": True}),
    "cudnn.benchmark vs not": ({}, {"cudnn_benchmark": True}),
}


def row(res) -> dict:
    return {"outcome": res.outcome, "samples_per_s": res.samples_per_s, "cv": res.samples_per_s_cv,
            "peak_memory_bytes": res.peak_memory_bytes, "mfu": res.mfu, "time_to_first_step_s": res.time_to_first_step_s,
            "config": res.config, "not_applicable": res.not_applicable}


def study_best(spec: WorkloadSpec, device: str, space_name: str, trials: int, folder: Path) -> dict:
    """A study of ``trials`` trials as `autotune run` makes it (tuning.prepare: probe, space, seeds, the phases with
    the noise floor and the final race; no batch-ceiling probe and no warm start, as this report always ran), and
    what it found."""
    url = f"sqlite:///{folder}/{re.sub(r'[^a-z0-9]+', '-', spec.model)}.db"
    job = TuneConfig(spec=spec, space=space_name, trials=trials, seed=0, trial_timeout_s=900, batch_ceiling=False,
                     warm_start=False)
    store = harness.open_store(url)
    prepared = tuning.prepare(job, "gpu", store, device, on_trial=lambda r: say(
        f"   #{r.number} {r.outcome} {r.samples_per_s or 0:.1f}/s {knobs.short(r.config)}"))
    summary = prepared.run()
    study = store.read("gpu")
    ev = evidence_of(study)
    front = [t for t in (study.trial(n) for n in ev.front()) if t is not None]
    verdict = summary.verdict
    assert verdict is not None
    shown = verdict.winner if verdict.state == "gain" else verdict.leader
    best = (study.trial(shown) if shown is not None else None) or front[0]
    return {"trials": summary.measured, "best_config": dict(best.config), "verdict": verdict.to_dict(), "noise": ev.noise.to_dict(),
            "best": dict(best.result) | {"samples_per_s": ev.samples_per_s(best.number)},
            "front": [{"config": dict(t.config), "samples_per_s": t.values[0], "peak_memory_bytes": t.values[1]}  # type: ignore[index]
                      for t in front]}


def main() -> None:
    ap = harness.arguments(__doc__, trials=30, repeat=5)
    ap.add_argument("--device", default=None)
    ap.add_argument("--examples", nargs="*", default=list(EXAMPLES))
    args = ap.parse_args()
    device = hardware.check_device(args.device) if args.device else hardware.default_device()
    warm_up()
    out: dict = {"device": device, "examples": {}}
    md = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.examples:
            model, space_name = EXAMPLES[name]
            spec = WorkloadSpec(model)
            runner = Runner(spec, device=device, timeout_s=900)
            try:
                probe = runner.probe()
            except Exception as exc:  # noqa: BLE001 - e.g. torchvision missing
                say(f"== {name}: skipped: {exc}")
                continue
            out["fingerprint"] = probe["fingerprint"]
            ctx = knobs.Context.from_dict(probe["context"])
            say(f"== {name} on {identity.short(probe['fingerprint'])}")
            defaults = [runner.measure({}) for _ in range(args.repeat)]
            rates = [r.samples_per_s for r in defaults if r.ok]
            recipe = runner.measure(knobs.recipe(ctx, knobs.defaults(ctx)))
            tuned = study_best(spec, device, space_name, args.trials, Path(tmp))
            base = statistics.median(rates)
            ex = {"defaults": row(defaults[0]) | {"samples_per_s": base}, "repeat_cv": cv(rates), "recipe": row(recipe),
                  "study": tuned, "claims": {}}
            for claim, (a, b) in CLAIMS.items():
                ra, rb = runner.measure(a), runner.measure(b)
                applicable = ra.ok and rb.ok and not rb.not_applicable
                ex["claims"][claim] = {"a": row(ra), "b": row(rb),
                                       "speedup": rb.samples_per_s / ra.samples_per_s if applicable else None}
                say(f"   {claim}: {ex['claims'][claim]['speedup'] and round(ex['claims'][claim]['speedup'], 2)}")
            out["examples"][name] = ex
            gpu = probe["fingerprint"]["device_name"]
            best = tuned["best"]
            mfu = "-" if best.get("mfu") is None else f"{100 * best['mfu']:.1f}%"
            md.append(f"| {name} | {gpu} | {base:.0f} | {recipe.samples_per_s or 0:.0f} ({(recipe.samples_per_s or 0) / base:.2f}x) | "
                      f"{best['samples_per_s']:.0f} ({best['samples_per_s'] / base:.2f}x) | {100 * cv(rates):.2f}% | {mfu} |")
    tag = re.sub(r"[^A-Za-z0-9]+", "-", out.get("fingerprint", {}).get("device_name", device)).strip("-").lower()
    header = ["| example | device | defaults samples/s | recipe | tuned (study) | repeat CV | MFU (tuned) |", "|---|---|---|---|---|---|---|"]
    for line in header + md:
        say(line)
    table = "\n".join(header + md) + f"\n\ntorch {out.get('fingerprint', {}).get('torch')}\n"
    harness.write(args, out, name=f"gpu_{tag}", files={".md": table})


if __name__ == "__main__":
    main()
