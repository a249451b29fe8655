"""A year of nightly studies in one database (issue 27): how long `autotune list` and `status` take over it.

Builds ``--studies`` studies (default 365) of ``--trials`` trials each (default 30, the README's main job) in one
SQLite file with autotune/testing/studies.py (a made-up study each, seeded by its night: trials, failures, a race, a
session), and a copy of the file in which each study's views are kept, as the run that wrote it last leaves them
(``autotune.reports.view.keep``, autotune/store/kept.py). Both files are kept in ``--workdir`` and reused.

Then, in a fresh process each, as a user runs them, ``--repeat`` times (median): ``list``, ``list --json`` and
``status`` of one study, on a file of one study (the first night alone) and on the year's file, kept and computed.
Printed last: the year's ``list`` over one night's, for each way of reading.

    python benchmarks/list_scale.py [--studies 365] [--trials 30] [--repeat 3] [--workdir /tmp/autotune-list-scale]

Writes benchmarks/results/list_scale-<date>.json and .txt (the summary it prints last).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import harness
from harness import say

ROOT = harness.ROOT


def night(k: int) -> str:
    return f"nightly-{k:03d}"


def build(path: Path, studies: int, trials: int) -> None:
    """``studies`` made-up studies of ``trials`` trials in the SQLite file ``path`` (built once, then reused)."""
    if path.exists():
        return
    import optuna

    from autotune.testing.studies import add_race, add_sessions, make_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tmp = path.with_name(f".building-{path.name}")
    tmp.unlink(missing_ok=True)
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp}")
    start = time.perf_counter()
    for k in range(studies):
        study = make_study(storage, n_trials=trials, seed=k, name=night(k))
        leaders = sorted((t for t in study.get_trials(deepcopy=False) if t.values), key=lambda t: -t.values[0])[:3]
        add_race(study, {t.number: t.values[0] for t in leaders}, rounds=2)
        add_sessions(study, 1)
        if k % 25 == 0:
            say(f"built {k + 1}/{studies} studies in {time.perf_counter() - start:.0f} s", keep=False)
    storage.engine.dispose()
    os.replace(tmp, path)


def kept_copy(path: Path, studies: int) -> Path:
    """A copy of ``path`` with every study's views kept on it (what each night's run leaves)."""
    from autotune.reports import view
    from autotune.store import Store

    out = path.with_name(path.stem + "-kept.db")
    if out.exists():
        return out
    tmp = path.with_name(".keeping.db")
    shutil.copyfile(path, tmp)
    store = Store(f"sqlite:///{tmp}")
    start = time.perf_counter()
    for k in range(studies):
        if not view.keep(store, night(k)):
            raise SystemExit(f"{night(k)}: its views could not be kept")
    say(f"kept the views of {studies} studies in {time.perf_counter() - start:.1f} s "
        f"({(time.perf_counter() - start) / studies * 1000:.0f} ms a study: what each run's end adds)", keep=False)
    os.replace(tmp, out)
    return out


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return took


def main(argv: list[str] | None = None) -> int:
    parser = harness.arguments(__doc__, trials=30, repeat=3)
    parser.add_argument("--studies", type=int, default=365)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/autotune-list-scale"))
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    args.workdir.mkdir(parents=True, exist_ok=True)
    files = {}
    for n in (1, args.studies):
        path = args.workdir / f"nights-{n}-of-{args.trials}.db"
        build(path, n, args.trials)
        files[(n, "computed")] = path
        files[(n, "kept")] = kept_copy(path, n)
    cli = [sys.executable, "-m", "autotune.cli"]
    rows = []
    for (n, kind), path in sorted(files.items()):
        url = f"sqlite:///{path}"
        cmds = {"list": [*cli, "list", "--storage", url], "list --json": [*cli, "list", "--storage", url, "--json"],
                "status": [*cli, "status", night(0), "--storage", url]}
        row = {"studies": n, "kind": kind, "trials_each": args.trials, "seconds": {}, "runs": {}}
        for label, cmd in cmds.items():
            runs = [timed(cmd) for _ in range(args.repeat)]
            row["runs"][label] = [round(r, 3) for r in runs]
            row["seconds"][label] = round(statistics.median(runs), 3)
            say(f"{n:>4} studies {kind:<8} {label:<12} {row['seconds'][label]:6.2f} s  {row['runs'][label]}",
                keep=False)
        rows.append(row)
    labels = ["list", "list --json", "status"]
    lines = [f"list_scale: {args.studies} studies of {args.trials} trials in one SQLite file against one, "
             f"each command in a fresh process, median of {args.repeat} (seconds)",
             f"{'studies':>8} {'views':<9}" + "".join(f"{lab:>13}" for lab in labels)]
    for r in rows:
        lines.append(f"{r['studies']:>8} {r['kind']:<9}" + "".join(f"{r['seconds'][lab]:>13.2f}" for lab in labels))
    by = {(r["studies"], r["kind"]): r for r in rows}
    for kind in ("kept", "computed"):
        one, year = by[(1, kind)]["seconds"], by[(args.studies, kind)]["seconds"]
        lines.append(f"{kind}: {args.studies} studies over 1: " + ", ".join(
            f"{lab} {year[lab] / one[lab]:.1f}x" for lab in labels))
    for line in lines:
        say(line)
    harness.write(args, {"studies": args.studies, "trials_each": args.trials, "repeat": args.repeat, "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
