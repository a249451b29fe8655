"""The dashboard in a real browser: headless Chromium opens the page from disk with the network off.

The page carries a self-test: opened with ``#selftest`` it writes a JSON summary
(JavaScript errors, marks drawn per figure, resources fetched, whether the front
table sorts) into ``<pre id="autotune-selftest">``, which ``--dump-dom`` prints.
A second run takes a screenshot. Needs Debian's ``chromium`` package (CI installs
it); skipped with the reason when no Chromium can be found, and failed with it in CI (autotune.testing.suite.need).
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
from autotune.testing.suite import need
from autotune.testing.studies import MiB, add_failed_trial, add_race, make_study, storage_url

from autotune.reports import dashboard
from autotune.store import Store, StoredStudy
from autotune.store import writing
from autotune.evidence import evidence_of

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
    need(
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
        need(f"chromium not installed: {binary} cannot run ({exc})")


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    """A 40-trial stored study with a memory budget, a hostile name and a hostile error message."""
    folder = tmp_path_factory.mktemp("browser")
    name = "<script>window.pwned=1</script>"
    study = make_study(folder / "study.db", n_trials=40, name=name, max_memory_bytes=1200 * MiB)
    add_failed_trial(study, message="<img src=x onerror=window.pwned=1>")
    # (a name no store accepts: read through Optuna, as a foreign storage would hold it)
    study = StoredStudy.of(optuna.load_study(study_name=name, storage=storage_url(folder / "study.db")))
    return dashboard.write_dashboard(study, folder / "dashboard.html")


def self_test(page: Path, profile: Path) -> dict:
    """The page's own summary of itself, opened with ``#selftest`` in headless Chromium."""
    binary = find_chromium()
    proc = run_chromium(binary, profile, "--dump-dom", page.resolve().as_uri() + "#selftest")
    match = re.search(r'<pre id="autotune-selftest"[^>]*>(.*?)</pre>', proc.stdout, re.DOTALL)
    assert match and match.group(1).strip(), f"no self-test output (rc={proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(html.unescape(match.group(1)))


def test_every_figure_renders_without_errors(page, tmp_path):
    summary = self_test(page, tmp_path / "profile")

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


DOCS_PICTURE = Path(__file__).resolve().parents[1] / "docs" / "_static" / "dashboard.png"


def test_the_docs_picture_is_a_page_chromium_drew(tmp_path):
    """The documentation's picture of the dashboard (docs/dashboard.md) is this test's screenshot of a made-up
    40-trial study with a race; ``AUTOTUNE_DOCS_PICTURE=1`` writes it to docs/_static/dashboard.png. Either way
    the committed picture is a PNG of the size this test draws, so it cannot be an image from elsewhere."""
    study = make_study(tmp_path / "mynet.db", n_trials=40, name="mynet", max_memory_bytes=1200 * MiB)
    ev = evidence_of(StoredStudy.of(study))
    add_race(study, {n: ev.configs[n].samples_per_s for n in ev.configs if n != 0}, rounds=3)
    page = dashboard.write_dashboard(Store(storage_url(tmp_path / "mynet.db"), read_only=True).read("mynet"),
                                  tmp_path / "mynet.html")
    shot = tmp_path / "dashboard.png"
    proc = run_chromium(find_chromium(), tmp_path / "profile", f"--screenshot={shot}", "--window-size=1200,1500",
                        page.resolve().as_uri())
    assert shot.exists(), f"no screenshot (rc={proc.returncode}): {proc.stderr[-2000:]}"
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000
    if os.environ.get("AUTOTUNE_DOCS_PICTURE") == "1":
        DOCS_PICTURE.write_bytes(data)
    committed = DOCS_PICTURE.read_bytes()
    size = int.from_bytes(committed[16:20], "big"), int.from_bytes(committed[20:24], "big")
    assert committed[:8] == data[:8] and size == (1200, 1500)


# ---------------------------------------------------------------- what a reader sees


def lm_speed(config) -> float:
    """An hf:gpt2-like model on a busy 2-CPU machine: 4 to 6.5 samples/s."""
    return 4.0 + 2.5 * (config["batch_size"] - 16) / 240


@pytest.fixture(scope="module")
def small_page(tmp_path_factory) -> tuple[Path, int]:
    """A 4-trial hf:gpt2-like study, as filed: a few samples/s, no data wait, synthetic data with nothing else said
    of the workload, threads stored as 1-16 on 2 CPUs, and a race whose measurements stored no wall time."""
    folder = tmp_path_factory.mktemp("small")
    study = make_study(
        folder / "small.db", n_trials=4, name="hf-gpt2", with_failures=False, speed=lm_speed, data_wait_share=0.0003
    )
    writing.save(study, workload={"model": "hf:gpt2", "data": None, "model_args": {}, "task": None})
    ev = evidence_of(StoredStudy.of(study))
    add_race(study, {n: ev.configs[n].samples_per_s for n in ev.configs if n != 0}, rounds=3)
    study = Store(storage_url(folder / "small.db"), read_only=True).read("hf-gpt2")
    verdict = evidence_of(study).verdict()
    recommended = verdict.winner if verdict.state == "gain" else 0
    return dashboard.write_dashboard(study, folder / "small.html"), recommended


def plot(summary: dict, name: str) -> dict:
    (found,) = [p for p in summary["plots"] if p["name"] == name]
    return found


def assert_readable_ticks(summary: dict) -> None:
    """On every axis of every figure, as drawn: no two tick labels read the same."""
    for p in summary["plots"]:
        for axis, labels in p["ticks"].items():
            shown = [t for t in labels if t]
            assert len(shown) == len(set(shown)), (p["name"], axis, labels)
        for axis in p["axes"]:
            assert len(axis["ticks"]) == len(set(axis["ticks"])), (p["name"], axis)


def assert_whole_trial_numbers(summary: dict) -> None:
    for name in ("history", "durations"):
        labels = plot(summary, name)["ticks"]["xtick"]
        assert labels and all(re.fullmatch(r"\d+", t) for t in labels), (name, labels)


def test_a_small_study_reads_right(small_page, tmp_path):
    page, recommended = small_page
    summary = self_test(page, tmp_path / "profile")
    assert summary["errors"] == [] and summary["resources"] == []
    assert_readable_ticks(summary)
    assert_whole_trial_numbers(summary)  # 4 trials: plotly's own ticks read -0.5, 0.5, 1.5, ...
    # the parallel coordinates: threads within the 2 CPUs, samples/s (4 to 6.5) on a scale that reads
    axes = {a["title"]: a["ticks"] for a in plot(summary, "parallel")["axes"]}
    assert set(axes["threads"]) <= {"1", "2"}, axes["threads"]
    assert len(axes["samples/s"]) >= 3, axes["samples/s"]
    # where time goes: the data-wait axis reads 0%, 2%, 4% (not 0% 0% 0%)
    wait = plot(summary, "profile")["ticks"]["x2tick"]
    assert wait[0] == "0%" and len(wait) >= 2, wait
    # the recommendation is a labelled point on the front
    annotations = plot(summary, "pareto")["annotations"]
    assert any(a.startswith(f"recommended: #{recommended}") for a in annotations), annotations
    # time per trial counts the race's re-measurements, estimated and said to be
    legend = plot(summary, "durations")["legend"]
    assert any(entry.startswith("re-measured") and "estimated" in entry for entry in legend), legend
    assert any("re-measurements" in h and "estimated" in h for h in summary["hints"])
    # the header: counts agree with their nouns, and no separator is left dangling
    assert re.search(r"front: (1 trial|[02-9]\d* trials)$", summary["meta"]), summary["meta"]
    assert "data synthetic" in summary["cards"]
    for text in [summary["meta"], *summary["cards"]]:
        assert text == text.strip() and not re.search(r"(^[;,·]|[;,·]$|[;,·]\s*[;,·])", text), text
        assert not re.search(r"\b1 (trials|processes|CPUs|re-measurements)\b", text), text


def test_a_full_study_reads_right(page, tmp_path):
    summary = self_test(page, tmp_path / "profile")
    assert summary["errors"] == []
    assert_readable_ticks(summary)
    assert_whole_trial_numbers(summary)
    # no race: nothing beats the defaults beyond the noise, so the baseline is the one labelled recommended
    annotations = plot(summary, "pareto")["annotations"]
    assert any(a.startswith("recommended: #0") for a in annotations), annotations
    axes = {a["title"]: a["ticks"] for a in plot(summary, "parallel")["axes"]}
    assert set(axes["threads"]) == {"1", "2"}, axes["threads"]
    legend = plot(summary, "importance")["legend"]
    assert any(entry.startswith("samples/s where ") for entry in legend), legend  # within the dominant split


def test_what_each_knob_bought_draws_one_bar_a_step(tmp_path):
    """The waterfall of an ablated winner (a fake study raced in shared processes, as tests/test_race.py makes them)."""
    from test_race import ablated_study

    study, ab = ablated_study()
    study = study if isinstance(study, StoredStudy) else StoredStudy.of(study)
    page = dashboard.write_dashboard(study, tmp_path / "ablated.html")
    summary = self_test(page, tmp_path / "profile")
    assert summary["ready"] and summary["errors"] == []
    drawn = plot(summary, "ablation")
    assert drawn["bars"] == len(ab.steps) + 1  # the defaults, then one bar a knob added
    assert_readable_ticks(summary)


def test_a_study_of_ten_thousand_trials_draws_every_figure_in_a_small_page(tmp_path):
    """10,000 trials (9,000 distinct measurements, ~8% failures): the page stays under 5 MB, every figure draws
    without an error, the cloud of trials in WebGL, and the front and every failure count exactly."""
    from autotune.testing.studies import jittered_copies

    study = make_study(optuna.storages.InMemoryStorage(), n_trials=60, seed=5, name="big")
    ev = evidence_of(StoredStudy.of(study))
    leaders = sorted((c for c in ev.configs.values() if not c.is_baseline), key=lambda c: -c.samples_per_s)[:4]
    add_race(study, {c.number: c.samples_per_s for c in leaders}, rounds=2, wall_s=True)
    stored = StoredStudy.of(study)
    view = stored.with_trials([*stored.trials, *jittered_copies(study, 10_000 - len(stored.trials), seed=2)])
    assert [t.number for t in view.trials] == list(range(10_000))
    path = dashboard.write_dashboard(view, tmp_path / "big.html")
    assert path.stat().st_size < 5e6
    summary = self_test(path, tmp_path / "profile")
    assert summary["errors"] == []
    assert len(summary["plots"]) == summary["expected"] >= 10 and all(p["marks"] > 0 for p in summary["plots"])
    pareto = summary["plots"][0]
    assert pareto["canvases"] > 0  # the cloud in WebGL
    front = len(evidence_of(view).front())
    assert f"Pareto front ({front})" in pareto["legend"]
    parallel = dashboard.parallel_info(view)  # a sample of the lines, every front point among them
    assert (len(parallel["numbers"]) == 1000 < parallel["of"]
            and set(evidence_of(view).front()) <= set(parallel["numbers"]))
    assert any("of the" in h and "ok trials are drawn" in h for h in summary["hints"])
    failed = dashboard.failures_info(view)["rows"]
    counts: dict[str, int] = {}
    for r in failed:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    for outcome, n in counts.items():
        assert f"{outcome} ({n})" in pareto["legend"]
