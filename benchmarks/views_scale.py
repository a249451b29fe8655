"""How long the read commands take on studies of 100, 10,000 and 100,000 trials (issues 16 and 27).

Builds realistic studies with autotune/testing/studies.py (baseline, recipe, search trials
with oom/nan/error/interrupted failures, duplicates answered from the cache, a noise
floor and a race stored as ``measurement:*`` study attributes, and ``session:*``
records). Above 1,000 trials the factory's trials are copied with jittered figures
(samples/s x N(1, 3%), peak memory x N(1, 1%)) and about 8% of the copies turned into
failures, so that a 10,000-trial study holds ~9,000 distinct measurements rather than
the factory's few hundred distinct configurations answered from the cache again and
again. Each study is written to SQLite (and, with ``--journal``, to a journal file).

Each study is timed twice: as a run leaves it (``kept``: its views kept on it by the run that wrote it last,
autotune/store/kept.py; built here by the same call, ``autotune.reports.view.keep``, on a copy of the file) and as a
study being written is read (``computed``: no kept views, so every read command reads the trials and computes them).

Then each read command runs in a fresh process, as a user runs it, ``--repeat`` times
(median reported): ``status``, ``status --json``, ``list``, ``export -o FILE`` and
``dashboard -o PAGE``; the page's size is reported and, where Chromium is installed,
the time headless Chromium takes to open it and draw every figure (the page's own
``#selftest``, with the flags tests/test_dashboard_browser.py drives it with), less nothing: the
figure includes Chromium's own start-up, which is reported alone too.

    python benchmarks/views_scale.py [--sizes 100,10000,100000] [--repeat 3] [--journal] [--no-browser]

Printed last: issue 27's targets, each a ratio measured in this one run: every read command on 10,000 trials at
most 2x the same command on 100 trials (the dashboard at most 3x), on 100,000 trials at most 4x (6x), the same
for both ways of reading; ``status`` of 100 trials at most 3x ``autotune --help``; the page under 10 MB.

Writes benchmarks/results/views_scale-<date>.json and .txt (the summary it prints last). Built studies are kept in
``--workdir`` (default /tmp/autotune-views-scale) and reused when present.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import harness
from harness import say
from autotune.evidence import evidence_of

ROOT = harness.ROOT

#: Issue 27's targets: (size, ratio of a read command to the same at 100 trials, the dashboard's), status@100 / --help.
RATIO_TARGETS = {10000: (2.0, 3.0), 100000: (4.0, 6.0)}
HELP_TARGET = 3.0
PAGE_MB_TARGET = 10.0
READS = ["status", "status --json", "list", "export"]
FACTORY_MAX = 1000  # trials the factory makes itself; more are jittered copies of its own
NAME = "scale"
# Headless, no sandbox, nothing fetched (every host resolves to nowhere, every request goes to a dead proxy),
# software WebGL for the parallel-coordinates lines: the flags of tests/test_dashboard_browser.py, with a longer budget.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--enable-unsafe-swiftshader",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--proxy-server=http://127.0.0.1:9",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--virtual-time-budget=60000",
]


# ---------------------------------------------------------------- building studies


def build(n: int, workdir: Path, journal: bool) -> dict[str, str]:
    """The study of ``n`` trials in SQLite (and a journal file); returns the storage URLs, building what is missing."""
    import optuna

    sqlite = workdir / f"scale-{n}.db"
    log = workdir / f"scale-{n}.log"
    urls = {"sqlite": f"sqlite:///{sqlite}"}
    if journal:
        urls["journal"] = f"journal:{log}"
    if sqlite.exists() and (log.exists() or not journal):
        return urls
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    start = time.perf_counter()
    memory = _in_memory(n)
    tmp = workdir / f".building-{n}.db"
    tmp.unlink(missing_ok=True)
    optuna.copy_study(from_study_name=NAME, from_storage=memory, to_storage=f"sqlite:///{tmp}")
    os.replace(tmp, sqlite)
    if journal and not log.exists():
        from optuna.storages.journal import JournalFileBackend, JournalStorage

        part = workdir / f".building-{n}.log"
        part.unlink(missing_ok=True)
        optuna.copy_study(from_study_name=NAME, from_storage=memory,
                          to_storage=JournalStorage(JournalFileBackend(str(part))))
        os.replace(part, log)
    say(f"built {n} trials in {time.perf_counter() - start:.0f} s", keep=False)
    return urls


def kept_copy(urls: dict[str, str], n: int, workdir: Path) -> str:
    """A copy of the SQLite study with its views kept on it, as the run that wrote it last leaves a study."""
    from autotune.reports import view
    from autotune.store import Store

    path = workdir / f"scale-{n}-kept.db"
    if not path.exists():
        tmp = workdir / f".keeping-{n}.db"
        shutil.copyfile(workdir / f"scale-{n}.db", tmp)
        start = time.perf_counter()
        if not view.keep(Store(f"sqlite:///{tmp}"), NAME):
            raise SystemExit(f"the {n}-trial study could not keep its views")
        say(f"kept the views of {n} trials in {time.perf_counter() - start:.1f} s (what a run's end adds)")
        os.replace(tmp, path)
    return f"sqlite:///{path}"


def _in_memory(n: int) -> Any:
    import optuna
    from autotune.testing.studies import add_race, add_sessions, grow, make_study

    from autotune.store import StoredStudy

    memory = optuna.storages.InMemoryStorage()
    study = make_study(memory, n_trials=min(n, FACTORY_MAX), seed=0, name=NAME)
    grow(study, n - min(n, FACTORY_MAX), seed=1)
    ev = evidence_of(StoredStudy.of(study))
    leaders = sorted((c for c in ev.configs.values() if not c.is_baseline), key=lambda c: -c.samples_per_s)[:6]
    add_race(study, {c.number: c.samples_per_s for c in leaders}, rounds=3, wall_s=True)
    add_sessions(study, 4)  # the sessions that ran it (time spent)
    return memory


# ---------------------------------------------------------------- timing


def timed(cmd: list[str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return took, proc


def commands(url: str, out: Path) -> dict[str, list[str]]:
    cli = [sys.executable, "-m", "autotune.cli"]
    return {
        "status": [*cli, "status", NAME, "--storage", url],
        "status --json": [*cli, "status", NAME, "--storage", url, "--json"],
        "list": [*cli, "list", "--storage", url],
        "export": [*cli, "export", NAME, "--storage", url, "-o", str(out / "best.json")],
        "dashboard": [*cli, "dashboard", NAME, "--storage", url, "-o", str(out / "page.html")],
    }


def chromium() -> str | None:
    for name in (os.environ.get("AUTOTUNE_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def render(binary: str, page: Path, profile: Path) -> tuple[float, dict[str, Any] | None]:
    """Wall time of headless Chromium opening ``page#selftest`` until every figure is drawn (and its summary)."""
    start = time.perf_counter()
    proc = subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--dump-dom",
                           page.resolve().as_uri() + "#selftest"],
                          capture_output=True, text=True, timeout=600, check=False)
    took = time.perf_counter() - start
    match = re.search(r'<pre id="autotune-selftest"[^>]*>(.*?)</pre>', proc.stdout, re.DOTALL)
    if not (match and match.group(1).strip()):
        return took, None
    import html

    return took, json.loads(html.unescape(match.group(1)))


def main(argv: list[str] | None = None) -> int:
    parser = harness.arguments(__doc__, repeat=3)
    parser.add_argument("--sizes", default="100,10000,100000")
    parser.add_argument("--journal", action="store_true", help="also time a journal-file copy of each study")
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/autotune-views-scale"),
                        help="where the built studies are kept and reused")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    args.workdir.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",")]
    binary = None if args.no_browser else chromium()
    rows: list[dict[str, Any]] = []
    help_s = statistics.median(timed([sys.executable, "-m", "autotune.cli", "--help"], ROOT)[0]
                               for _ in range(max(args.repeat, 3)))
    for n in sizes:
        urls = build(n, args.workdir, args.journal)
        urls = {"kept": kept_copy(urls, n, args.workdir), "computed": urls.pop("sqlite"), **urls}
        for kind, url in urls.items():
            out = args.workdir / f"out-{n}-{kind}"
            out.mkdir(exist_ok=True)
            row: dict[str, Any] = {"trials": n, "storage": kind, "seconds": {}, "runs": {}}
            for label, cmd in commands(url, out).items():
                runs = [timed(cmd, ROOT)[0] for _ in range(args.repeat)]
                row["runs"][label] = [round(r, 3) for r in runs]
                row["seconds"][label] = round(statistics.median(runs), 3)
                say(f"{n:>6} {kind:<8} {label:<14} {row['seconds'][label]:7.2f} s  {runs}", keep=False)
            page = out / "page.html"
            row["page_mb"] = round(page.stat().st_size / 1e6, 2)
            if binary and kind == "kept":
                renders = []
                for k in range(args.repeat):
                    took, summary = render(binary, page, args.workdir / f"profile-{n}-{k}")
                    ok = bool(summary and summary.get("ready") and not summary.get("errors"))
                    renders.append(took if ok else None)
                    if not ok:
                        row["render_problem"] = (summary or {}).get("errors") or "no self-test output"
                good = [r for r in renders if r is not None]
                row["render_s"] = round(statistics.median(good), 3) if good else None
                row["runs"]["render"] = [None if r is None else round(r, 3) for r in renders]
                say(f"{n:>6} {kind:<8} {'render':<14} {row['render_s']} s  page {row['page_mb']} MB", keep=False)
            rows.append(row)
    startup = None
    if binary:
        blank = args.workdir / "blank.html"
        blank.write_text('<!DOCTYPE html><html><body><pre id="autotune-selftest">{"ready": true}</pre></body></html>')
        startup = round(statistics.median(render(binary, blank, args.workdir / "profile-blank")[0]
                                          for _ in range(3)), 3)

    labels = ["status", "status --json", "list", "export", "dashboard"]
    head = (f"{'trials':>7} {'storage':<8} " + " ".join(f"{lab:>13}" for lab in labels)
            + f" {'render':>8} {'page MB':>8}")
    lines = [f"views_scale: read commands in a fresh process, median of {args.repeat} (seconds)"
             + (f" [{args.label}]" if args.label else ""),
             f"machine: {platform.node()} {os.cpu_count()} CPUs, Python {platform.python_version()}; "
             f"Chromium start-up alone (blank page): {startup if startup is not None else 'not measured'} s; "
             f"autotune --help: {help_s:.2f} s", head]
    for r in rows:
        render_s = r.get("render_s")
        lines.append(f"{r['trials']:>7} {r['storage']:<8} " + " ".join(f"{r['seconds'][lab]:>13.2f}" for lab in labels)
                     + f" {('-' if render_s is None else f'{render_s:.2f}'):>8} {r['page_mb']:>8.2f}")
    verdicts = _targets(rows, help_s)
    lines.append("targets (issue 27, ratios in this run):")
    lines += [f"  {k}: {v}" for k, v in verdicts.items()]
    for line in lines:
        say(line)
    harness.write(args, {"label": args.label, "repeat": args.repeat, "cpus": os.cpu_count(),
                         "chromium_startup_s": startup,
                         "help_s": round(help_s, 3), "targets": {"ratios": RATIO_TARGETS, "help": HELP_TARGET,
                         "page_mb": PAGE_MB_TARGET}, "verdicts": verdicts, "rows": rows})
    return 0


def _targets(rows: list[dict[str, Any]], help_s: float) -> dict[str, str]:
    """Issue 27's targets, each a ratio of two figures of this run (met or MISSED)."""
    out: dict[str, str] = {}
    by = {(r["trials"], r["storage"]): r for r in rows}
    for kind in ("kept", "computed"):
        small = by.get((100, kind))
        if small is None:
            continue
        for n, (reads, board) in RATIO_TARGETS.items():
            big = by.get((n, kind))
            if big is None:
                continue
            for label in [*READS, "dashboard"]:
                limit = board if label == "dashboard" else reads
                ratio = big["seconds"][label] / small["seconds"][label]
                out[f"{label} {n}/100 ({kind})"] = (f"{big['seconds'][label]:.2f} / {small['seconds'][label]:.2f} s = "
                                                     f"{ratio:.1f}x <= {limit:g}x: "
                                                     f"{'met' if ratio <= limit else 'MISSED'}")
        if kind == "kept":
            ratio = small["seconds"]["status"] / help_s
            out["status@100 / --help"] = (f"{small['seconds']['status']:.2f} / {help_s:.2f} s = {ratio:.1f}x <= "
                                          f"{HELP_TARGET:g}x: {'met' if ratio <= HELP_TARGET else 'MISSED'}")
    for r in rows:
        if r["storage"] == "kept" and r["trials"] == max(x["trials"] for x in rows):
            out[f"page MB@{r['trials']}"] = (f"{r['page_mb']:.2f} < {PAGE_MB_TARGET:g}: "
                                             f"{'met' if r['page_mb'] < PAGE_MB_TARGET else 'MISSED'}")
            if r.get("render_s") is not None or r.get("render_problem"):
                out[f"drawn in Chromium@{r['trials']}"] = (f"{r['render_s']} s" if r.get("render_s") is not None
                                                          else f"FAILED: {r.get('render_problem')}")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
