"""The speed-up of the exported best over the PyTorch defaults, per CPU example, measured in one run.

    python benchmarks/export_speedup.py [--trials 20]

For each example: a study of N trials (the `cpu` space, confirmation on, as
`autotune run` does), `export --pick fastest`, then in this same run the defaults
and the exported configuration are measured again alternately (3 trials each,
isolated processes) and their medians compared.
It also times the exported configuration applied in a plain training loop written
as a user would (autotune.load_config + cfg.apply) and compares it with the study's
figure. Writes benchmarks/results/export_speedup.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from autotune import config as C
from autotune import knobs, space
from autotune import storage as stores
from autotune import study as S
from autotune.runner import Runner, warm_up
from autotune.workload import WorkloadSpec

EXAMPLES = {
    "cnn+images": WorkloadSpec("autotune.examples:cnn", data="autotune.examples:images"),
    "mlp": WorkloadSpec("autotune.examples:mlp"),
    "transformer": WorkloadSpec("autotune.examples:transformer"),
}

USER_LOOP = textwrap.dedent(
    """
    import statistics, sys, time, torch, autotune
    from autotune.workload import WorkloadSpec, build
    path, model_spec, data_spec = sys.argv[1], sys.argv[2], sys.argv[3] or None
    w = build(WorkloadSpec(model_spec, data=data_spec))        # the same model and data the study measured
    cfg = autotune.load_config(path)
    model, loader, step = cfg.apply(w.model, w.dataset, w.optimizer, loss_fn=w.loss_fn)
    batches = iter(loader)
    for _ in range(10):
        step(next(batches))
    windows = []
    for _ in range(5):
        start, n = time.perf_counter(), 0
        while time.perf_counter() - start < 0.5:
            step(next(batches)); n += 1
        windows.append(n * cfg.knobs["batch_size"] / (time.perf_counter() - start))
    print(statistics.median(windows))
    """
)


def run_study(name: str, spec: WorkloadSpec, runner: Runner, trials: int, folder: Path):
    probe = runner.probe()
    ctx = knobs.Context.from_dict(probe["context"])
    sp = space.load("cpu")
    base = S.base_config(ctx, sp.fixed, probe["workload"].get("batch_size"))
    eff = space.effective(sp, ctx, base)
    url = f"sqlite:///{folder}/{name}.db"
    attrs = {"workload": spec.to_dict(), "space": sp.to_dict(), "space_hash": sp.hash(), "fingerprint": probe["fingerprint"],
             "device": "cpu", "context": probe["context"], "global_batch": None}
    study, _ = stores.create_or_check(name, url, attrs, S.make_sampler(S.DEFAULT_SAMPLER, 0))
    S.Tuner(study, eff, ctx, base, runner.measure, S.Options(trials=trials)).run()
    return study, url


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--examples", nargs="*", default=list(EXAMPLES))
    args = ap.parse_args()
    warm_up()
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in args.examples:
            spec = EXAMPLES[name]
            runner = Runner(spec, timeout_s=600)
            study, url = run_study(name.replace("+", "-"), spec, runner, args.trials, folder)
            doc = C.export(study, "fastest", None, url)
            path = C.write(doc, folder / f"{name}.json")
            defaults, best = [], []
            for _ in range(3):
                defaults.append(runner.measure({}).samples_per_s)
                best.append(runner.measure(doc["knobs"]).samples_per_s)
            loop = subprocess.run([sys.executable, "-c", USER_LOOP, str(path), spec.model, spec.data or ""],
                                  capture_output=True, text=True, check=True)
            user = float(loop.stdout.strip().splitlines()[-1])
            ex = {
                "trials": args.trials,
                "exported": knobs.short(doc["knobs"]),
                "study_speedup": doc["speedup"],
                "defaults_samples_per_s": defaults,
                "exported_samples_per_s": best,
                "speedup_same_run": statistics.median(best) / statistics.median(defaults),
                "user_loop_samples_per_s": user,
                "user_loop_vs_study": user / doc["measured"]["samples_per_s"],
                "study_cv": doc["measured"]["samples_per_s_cv"],
            }
            out[name] = ex
            print(f"== {name}: exported after {args.trials} trials: {ex['exported']}")
            print(f"   study: {doc['speedup']:.2f}x the baseline; re-measured in one run, 3 processes each: "
                  f"{ex['speedup_same_run']:.2f}x ({statistics.median(best):.1f} vs {statistics.median(defaults):.1f} samples/s)")
            print(f"   a plain user loop with load_config/apply: {user:.1f} samples/s = {ex['user_loop_vs_study']:.2f} of the study's "
                  f"{doc['measured']['samples_per_s']:.1f} (study window CV {100 * (ex['study_cv'] or 0):.1f}%)")
    results = Path(__file__).resolve().parent / "results"
    results.mkdir(exist_ok=True)
    (results / "export_speedup.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
