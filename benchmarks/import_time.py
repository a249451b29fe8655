"""How long the read commands take to start, as ratios to ``autotune --help`` (issue 27, point 2: start only what is
needed).

A read command's fixed cost is mostly imports: a 100-trial ``status`` spent about 1.2 s importing
(Alembic, pulled in by Optuna's storage, SQLAlchemy, Optuna, plotly's neighbours) against 0.25 s
for all of ``autotune --help``. Target: ``status`` of a 100-trial study at most 3x ``--help`` on
the same machine (6.4x when the issue was filed).

Builds a study of ``--trials`` trials with autotune/testing/studies.py in ``--workdir`` (kept and reused),
then runs each command in a fresh process as a user runs it (``python -m autotune.cli ...``, from
the work folder), ``--repeat`` rounds, the commands taken in turn within each round so that a busy
spell falls on all of them; each command's best wall time (and its best CPU time, user + system, less
sensitive to other processes) is printed with its ratio to ``--help``'s. Then ``status`` once more
under ``python -X importtime``: the packages its imports spent most time in (self time summed by
top-level package) and the slowest of the imports it asked for first (cumulative, as Python reports them).

    python benchmarks/import_time.py [--trials 100] [--repeat 7] [--top 15]

Takes about (repeat x 8) processes of under 2 s each. Run it on a quiet machine: the ratios are
what it is for, and the machine's load at the start is printed with them. Writes
benchmarks/results/import_time-<date>.txt and .json.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import harness
from harness import say

from autotune.testing.studies import make_study

NAME = "startup"
TARGET_STATUS_RATIO = 3.0  # issue 27: status of a 100-trial study at most 3x autotune --help
_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( +)(\S+)")


def commands(url: str) -> dict[str, list[str]]:
    """The commands timed, ``--help`` first (the reference)."""
    return {
        "--help": ["--help"],
        "status": ["status", NAME, "--storage", url],
        "status --json": ["status", NAME, "--storage", url, "--json"],
        "list": ["list", "--storage", url],
        "trials": ["trials", NAME, "--storage", url],
        "export": ["export", NAME, "--storage", url, "-o", "best.json"],
        "dashboard": ["dashboard", NAME, "--storage", url, "-o", "page.html"],
    }


def run(args: list[str], cwd: Path, *, python_flags: tuple[str, ...] = ()) -> tuple[float, float, str]:
    """``autotune ARGS`` in a fresh process: (wall s, CPU s of the process, its stderr); exits when it fails."""
    cmd = [sys.executable, *python_flags, "-m", "autotune.cli", *args]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stderr


def import_times(stderr: str) -> list[tuple[int, int, int, str]]:
    """``-X importtime``'s lines: (self us, cumulative us, depth, module)."""
    rows = []
    for line in stderr.splitlines():
        m = _LINE.match(line)
        if m:
            rows.append((int(m[1]), int(m[2]), (len(m[3]) - 1) // 2, m[4]))
    return rows


def by_package(rows: list[tuple[int, int, int, str]]) -> list[tuple[str, float]]:
    """Self time summed by top-level package, in seconds, largest first."""
    total: dict[str, int] = {}
    for own, _, _, module in rows:
        root = module.split(".")[0]
        total[root] = total.get(root, 0) + own
    return sorted(((k, v / 1e6) for k, v in total.items()), key=lambda kv: -kv[1])


def main(argv: list[str] | None = None) -> int:
    parser = harness.arguments(__doc__, trials=100, repeat=7)
    parser.add_argument("--top", type=int, default=15, help="how many packages and imports to list (default 15)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/autotune-import-time"),
                        help="where the study is built and the commands run (default /tmp/autotune-import-time)")
    args = parser.parse_args(argv)
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"{NAME}-{args.trials}.db"
    url = harness.sqlite_url(path)
    if not path.exists():
        say(f"building a {args.trials}-trial study in {path}", keep=False)
        make_study(url, n_trials=args.trials, seed=0, name=NAME)

    load = os.getloadavg()
    say(f"import_time: {args.trials}-trial SQLite study, best of {args.repeat} fresh processes per command, "
        f"{os.cpu_count()} cores, load average at the start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    cmds = commands(url)
    walls: dict[str, list[float]] = {name: [] for name in cmds}
    cpus: dict[str, list[float]] = {name: [] for name in cmds}
    run(cmds["status"], work)  # compiled bytecode in place before anything is timed
    for round_ in range(args.repeat):
        say(f"round {round_ + 1} of {args.repeat}", keep=False)
        for name, cmd in cmds.items():
            wall, cpu, _ = run(cmd, work)
            walls[name].append(wall)
            cpus[name].append(cpu)

    help_wall, help_cpu = min(walls["--help"]), min(cpus["--help"])
    say("")
    say(f"{'command':<24} {'wall s':>8} {'x --help':>9} {'CPU s':>8} {'x --help':>9}")
    results: dict[str, Any] = {}
    for name in cmds:
        wall, cpu = min(walls[name]), min(cpus[name])
        results[name] = {"wall_s": round(wall, 4), "cpu_s": round(cpu, 4), "wall_ratio": round(wall / help_wall, 2),
                         "cpu_ratio": round(cpu / help_cpu, 2) if help_cpu > 0 else None,
                         "walls_s": [round(w, 4) for w in walls[name]]}
        cpu_ratio = f"{cpu / help_cpu:.2f}x" if help_cpu > 0 else "-"
        say(f"{'autotune ' + name:<24} {wall:>8.3f} {wall / help_wall:>8.2f}x {cpu:>8.3f} {cpu_ratio:>9}")
    ratio = results["status"]["wall_ratio"]
    met = ratio <= TARGET_STATUS_RATIO
    say(f"status at {ratio:.2f}x --help (target at most {TARGET_STATUS_RATIO:.0f}x): {'met' if met else 'MISSED'}")

    _, _, stderr = run(["status", NAME, "--storage", url], work, python_flags=("-X", "importtime"))
    rows = import_times(stderr)
    packages = by_package(rows)
    total = sum(own for own, *_ in rows) / 1e6
    say("")
    say(f"`autotune status` under -X importtime: {len(rows)} modules, {total:.3f} s of imports (self times summed); "
        "by top-level package:")
    for name, seconds in packages[: args.top]:
        say(f"  {seconds:8.3f} s  {name}")
    slowest = sorted((r for r in rows if r[2] == 0), key=lambda r: -r[1])[: args.top]
    say("the slowest imports it asked for first (cumulative: each with all it imported):")
    for _, cumulative, _, module in slowest:
        say(f"  {cumulative / 1e6:8.3f} s  {module}")

    harness.write(args, {"trials": args.trials, "repeat": args.repeat, "load_average": load, "commands": results,
                         "status_ratio": ratio, "target_status_ratio": TARGET_STATUS_RATIO, "met": met,
                         "imports_s": round(total, 4), "by_package_s": dict((k, round(v, 4)) for k, v in packages),
                         "slowest_imports": [{"module": m, "cumulative_s": round(c / 1e6, 4)}
                                             for _, c, _, m in slowest]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
