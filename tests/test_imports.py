"""The read commands start only what they use : each runs in a fresh interpreter, as a user runs
it, on a small real study, and the modules it loaded are checked: no torch, no Optuna (a read-only store reads the
tables itself), no Alembic, no SQLAlchemy for a SQLite file, no psutil, no plotly outside ``dashboard``.
benchmarks/import_time.py measures what the imports cost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.testing.studies import make_study
from autotune.store import Store

ROOT = Path(__file__).resolve().parent.parent

#: What no read command loads (top-level modules), and why.
FORBIDDEN = {
    "torch": "the trial stack's, never a read's (read commands never import torch)",
    "optuna": "a read-only store reads the tables into typed trials itself: no Optuna storage, no FrozenTrial",
    "alembic": "Optuna's storage checks its schema with it: a read-only store builds no Optuna storage",
    "mako": "Alembic's templates",
    "sqlalchemy": "a SQLite file is read through sqlite3 itself",
    "psutil": "the meter of other processes' CPU, used while measuring",
    "plotly": "the dashboard's alone",
    "narwhals": "plotly's",
    "pandas": "nothing reads with it",
    "scipy": "nothing a view shows needs it",
    "transformers": "export names the Trainer's arguments without importing it",
    "lightning": "export names the Trainer's arguments without importing it",
    "accelerate": "export writes Accelerate's config without importing it",
}
ALLOWED = {"dashboard": {"plotly", "narwhals"}}

# The command, in a fresh interpreter, then the modules it loaded (into the file named first).
PROBE = """
import json, sys
out, args = sys.argv[1], sys.argv[2:]
from autotune.cli import main
try:
    main(args, standalone_mode=False)
finally:
    with open(out, "w") as fh:
        json.dump(sorted(sys.modules), fh)
"""

READS = {
    "status": ["status", "s"],
    "status --json": ["status", "s", "--json"],
    "list": ["list"],
    "list --json": ["list", "--json"],
    "trials": ["trials", "s"],
    "trials --json": ["trials", "s", "--json"],
    "trials --csv": ["trials", "s", "--csv"],
    "export": ["export", "s", "-o", "best.json"],
    "export --format hf-trainer": ["export", "s", "--format", "hf-trainer"],
    "export --format lightning": ["export", "s", "--format", "lightning"],
    "export --format accelerate": ["export", "s", "--format", "accelerate"],
    "dashboard": ["dashboard", "s", "-o", "page.html"],
}


@pytest.fixture(scope="module")
def study_url(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("imports") / "s.db"
    make_study(f"sqlite:///{path}", n_trials=12, seed=3, name="s")
    return f"sqlite:///{path}"


def loaded(args: list[str], cwd: Path) -> set[str]:
    """The top-level modules ``autotune ARGS`` loaded in a fresh interpreter (it must succeed)."""
    out = cwd / "modules.json"
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.run([sys.executable, "-c", PROBE, str(out), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return {name.split(".")[0] for name in json.loads(out.read_text())}


@pytest.mark.parametrize("command", list(READS))
def test_a_read_command_imports_nothing_it_does_not_use(command, study_url, tmp_path):
    modules = loaded([*READS[command], "--storage", study_url], tmp_path)
    assert "autotune" in modules and "click" in modules
    allowed = ALLOWED.get(command.split()[0], set())
    unused = {name: why for name, why in FORBIDDEN.items() if name in modules and name not in allowed}
    assert not unused, f"`autotune {command}` imported what it does not use: {unused}"


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_the_dashboard_imports_plotly(study_url, tmp_path):
    """The control: the probe sees a module a command does import."""
    assert "plotly" in loaded(["dashboard", "s", "-o", "page.html", "--storage", study_url], tmp_path)


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_a_read_of_a_database_server_imports_no_alembic(postgres_url, tmp_path):
    make_study(Store(postgres_url).storage, n_trials=12, seed=3, name="s")
    modules = loaded(["status", "s", "--storage", postgres_url], tmp_path)
    assert "sqlalchemy" in modules  # a server is read through a SQLAlchemy engine
    assert not modules & {"optuna", "alembic", "mako", "torch", "plotly", "psutil"}


def test_a_journal_is_read_through_optunas_journal_storage(tmp_path):
    """The control for Optuna: a journal file has no tables to read directly."""
    make_study(Store(f"journal:{tmp_path / 's.log'}").storage, n_trials=12, seed=3, name="s")
    modules = loaded(["status", "s", "--storage", f"journal:{tmp_path / 's.log'}"], tmp_path)
    assert "optuna" in modules and not modules & {"alembic", "sqlalchemy", "torch", "plotly"}
