"""The dashboard in a real browser: headless Chromium opens the page from disk with the network off.

The page carries a self-test: opened with ``#selftest`` it writes a JSON summary
(JavaScript errors, marks drawn per figure, resources fetched, whether the front
table sorts) into ``<pre id="autotune-selftest">``, which ``--dump-dom`` prints.
A second run takes a screenshot. Needs Debian's ``chromium`` package (CI installs
it); skipped with the reason when no Chromium can be found.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import optuna
import pytest
from study_factory import MiB, add_failed_trial, make_study, storage_url

from autotune import report

pytestmark = pytest.mark.slow

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Headless, no sandbox (CI runs as root), nothing fetched: every host resolves to nowhere
# and every request goes to a dead proxy. Software WebGL for the parallel-coordinates lines.
FLAGS = [
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
    "--virtual-time-budget=20000",
]


def find_chromium() -> str:
    override = os.environ.get("AUTOTUNE_CHROMIUM")
    if override:
        return override
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip(
        f"chromium not installed: none of {', '.join(CANDIDATES)} is on PATH (Debian: apt-get install chromium)"
    )


def run_chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [binary, *FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    except OSError as exc:
        pytest.skip(f"chromium not installed: {binary} cannot run ({exc})")


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    """A 40-trial stored study with a memory budget, a hostile name and a hostile error message."""
    folder = tmp_path_factory.mktemp("browser")
    name = "<script>window.pwned=1</script>"
    study = make_study(folder / "study.db", n_trials=40, name=name, max_memory_bytes=1200 * MiB)
    add_failed_trial(study, message="<img src=x onerror=window.pwned=1>")
    study = optuna.load_study(study_name=name, storage=storage_url(folder / "study.db"))
    return report.write_dashboard(study, folder / "dashboard.html")


def test_every_figure_renders_without_errors(page, tmp_path):
    binary = find_chromium()
    proc = run_chromium(binary, tmp_path / "profile", "--dump-dom", page.resolve().as_uri() + "#selftest")
    match = re.search(r'<pre id="autotune-selftest"[^>]*>(.*?)</pre>', proc.stdout, re.DOTALL)
    assert match and match.group(1).strip(), f"no self-test output (rc={proc.returncode}): {proc.stderr[-2000:]}"
    summary = json.loads(html.unescape(match.group(1)))

    assert summary["ready"]
    assert summary["errors"] == []
    assert summary["resources"] == []  # nothing fetched: plotly.js and the data are in the page
    plots = summary["plots"]
    assert len(plots) == summary["expected"] >= 10
    for plot in plots:
        assert plot["marks"] > 0, plot
    pareto = plots[0]
    assert pareto["points"] > 30 and pareto["lines"] >= 1  # every trial, the front joined by a line
    assert summary["table_sorts"] is True
    assert summary["scripts"] == 4 and summary["images"] == 0  # the hostile name and message stayed text
    assert summary["title"].startswith("autotune · <script>")  # the name is shown as text


def test_screenshot(page, tmp_path):
    binary = find_chromium()
    shot = tmp_path / "dashboard.png"
    proc = run_chromium(
        binary, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1400,4000", page.resolve().as_uri()
    )
    assert shot.exists(), f"no screenshot (rc={proc.returncode}): {proc.stderr[-2000:]}"
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1400, 4000)
    assert len(data) > 100_000  # a blank page compresses to a few kB
