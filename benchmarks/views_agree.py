"""Every read command prints the same figures, to the digit, in two checkouts: this one and an earlier commit.

    python benchmarks/views_agree.py --against REV [--studies 3]

Writes made-up studies (``autotune.testing.studies``: a searched study with failures, a race, sessions; one raced
in shared processes) into one SQLite file, then runs the read commands on it with this checkout's package and with
REV's (a ``git worktree`` of it, its package first on PYTHONPATH): ``status`` (table and ``--json``), ``trials``
(table, ``--json``, ``--csv``), ``export`` (the JSON document, and ``--format hf-trainer``), ``list`` (table and
``--json``) and ``dashboard`` (the page). The time a view was made (``exported_at``, the page's clock) is blanked in
both; everything else must be byte-for-byte the same. Prints one line per command and exits 1 on any difference,
with the first differing line. For a layout change that must change no figure (the rooms of the package).
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import harness
from harness import say

COMMANDS = [
    ["status", "{name}"], ["status", "{name}", "--json"],
    ["trials", "{name}"], ["trials", "{name}", "--json"], ["trials", "{name}", "--csv"],
    ["export", "{name}"], ["export", "{name}", "--format", "hf-trainer"],
    ["list"], ["list", "--json"],
]
CLOCK = re.compile(r'\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d[^"\s<]*')  # a moment, in an export or on the page


def blank(text: str) -> str:
    """The output without the moments it was made."""
    return CLOCK.sub("<time>", text)


def made_up(folder: Path, count: int) -> tuple[str, list[str]]:
    """``count`` made-up studies in one SQLite file, written by this checkout's package."""
    import optuna

    from autotune.testing import studies

    url = harness.sqlite_url(folder / "views.db")
    storage = optuna.storages.RDBStorage(url)
    names = []
    for k in range(count):
        name = f"made{k}"
        study = studies.make_study(storage, n_trials=24 + 8 * k, seed=k, name=name)
        studies.add_race(study, {t.number: t.values[0] for t in study.best_trials[:3]}, rounds=2 + k, seed=k)
        studies.add_sessions(study)
        names.append(name)
    return url, names


def run(python_path: str, cwd: Path, args: list[str], url: str) -> str:
    env = {**os.environ, "PYTHONPATH": python_path, "AUTOTUNE_STORAGE": url, "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


def main() -> int:
    parser = harness.arguments(__doc__)
    parser.add_argument("--against", required=True, help="the earlier commit (or branch) to compare with")
    parser.add_argument("--studies", type=int, default=3, help="made-up studies (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="views-agree-") as tmp:
        folder = Path(tmp)
        old = folder / "old"
        subprocess.run(["git", "-C", str(harness.ROOT), "worktree", "add", "--detach", str(old), args.against],
                       check=True, capture_output=True)
        try:
            url, names = made_up(folder, args.studies)
            work = folder / "work"
            work.mkdir()
            differ = 0
            for name in names:
                for command in COMMANDS:
                    cmd = [part.format(name=name) for part in command]
                    if cmd[0] == "list" and name != names[0]:
                        continue
                    now = blank(run(str(harness.ROOT), work, cmd, url))
                    then = blank(run(str(old), work, cmd, url))
                    same = now == then
                    differ += not same
                    say(f"{'same' if same else 'DIFFERENT':9} autotune {' '.join(cmd)} ({len(now.splitlines())} lines)")
                    if not same:
                        first = next(iter(difflib.unified_diff(then.splitlines(), now.splitlines(),
                                                               lineterm="", n=0)), "")
                        diff = list(difflib.unified_diff(then.splitlines(), now.splitlines(), lineterm="", n=0))[2:6]
                        say("          " + " | ".join(diff or [first]))
                pages = []
                for root in (harness.ROOT, old):
                    page = folder / f"{name}-{root == old}.html"
                    run(str(root), work, ["dashboard", name, "-o", str(page)], url)
                    pages.append(blank(page.read_text()) if page.exists() else "missing")
                same = pages[0] == pages[1]
                differ += not same
                say(f"{'same' if same else 'DIFFERENT':9} autotune dashboard {name} ({len(pages[0])} bytes)")
            say(f"{differ} of the read commands' outputs differ between {args.against} and this checkout")
        finally:
            subprocess.run(["git", "-C", str(harness.ROOT), "worktree", "remove", "--force", str(old)],
                           capture_output=True)
    harness.write(args, {"against": args.against, "differ": differ})
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
