"""Export a study's pick as JSON, load it, and apply it in a plain training loop as a user would."""

from __future__ import annotations

import json
import statistics
import warnings

import pytest
import torch
from click.testing import CliRunner

import autotune
import autotune.examples
import autotune.workloads.contract
from autotune.export import config as C
from autotune.cli import main
from autotune.errors import ConfigError


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A small real study of the mlp example (real trials, normal measurement windows)."""
    folder = tmp_path_factory.mktemp("cfg")
    url = f"sqlite:///{folder}/mlp.db"
    res = CliRunner().invoke(
        main,
        ["run", "--model", "autotune.examples:mlp", "--space", "cpu", "--study", "mlp", "--storage", url,
         "--trials", "4", "--seed", "3", "--no-early-stop", "--confirm", "3"],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    return url, folder, res.output


def export(url, folder, *args):
    out = folder / "best.json"
    res = CliRunner().invoke(main, ["export", "mlp", "--storage", url, "-o", str(out), *args], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return out, json.loads(out.read_text())


@pytest.mark.slow  # 59 s in a full run on a 2-core CPU
def test_export_document(study):
    url, folder, _ = study
    path, doc = export(url, folder, "--pick", "fastest")
    assert doc["schema"] == C.SCHEMA and doc["pick"] == "fastest" and doc["pick_note"].startswith("fastest")
    for key in ("knobs", "measured", "baseline", "speedup", "workload", "fingerprint", "study"):
        assert key in doc
    assert doc["measured"]["samples_per_s"] > 0 and doc["measured"]["processes"] >= 1
    assert doc["study"]["name"] == "mlp" and isinstance(doc["study"]["trial"], int)
    assert doc["workload"]["model"] == "autotune.examples:mlp"
    claim = doc["speedup"]
    assert claim["low"] <= claim["estimate"] <= claim["high"] and claim["level"] == 0.9
    assert doc["verdict"]["state"] in ("gain", "no_gain") and doc["verdict"]["text"]
    assert doc["noise"]["df"] >= 2  # the baseline in 3 processes at least
    _, small = export(url, folder, "--pick", "smallest")
    assert small["measured"]["peak_memory_bytes"] <= doc["measured"]["peak_memory_bytes"]
    _, balanced = export(url, folder, "--pick", "balanced")
    assert balanced["measured"]["samples_per_s"] > 0


@pytest.mark.slow  # the module's study: about a minute to make
def test_export_errors(study):
    url, folder, _ = study
    res = CliRunner().invoke(main, ["export", "mlp", "--storage", url, "--max-memory", "1KiB"])
    assert res.exit_code == 2 and "successful trials fits in --max-memory 1.0 KiB (the smallest peaked at" in res.output
    res = CliRunner().invoke(main, ["export", "nosuch", "--storage", url])
    assert res.exit_code == 2 and "no study 'nosuch'" in res.output and "mlp" in res.output
    res = CliRunner().invoke(main, ["export", "mlp", "--storage", url, "--max-memory", "0"])
    assert res.exit_code == 2 and res.output.strip().count("\n") == 0 and "must be positive" in res.output
    res = CliRunner().invoke(main, ["export", "mlp", "--storage", url, "-o", str(folder)])
    assert res.exit_code == 2 and res.output.strip() == f"error: -o {folder}: is a folder; name a file, e.g. {folder / 'best.json'}"
    assert not list(folder.glob("*.tmp"))


def test_load_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        autotune.load_config(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not JSON"):
        autotune.load_config(bad)
    bad.write_text(json.dumps({"schema": "other/9"}))
    with pytest.raises(ConfigError, match="not an autotune configuration"):
        autotune.load_config(bad)
    bad.write_text(json.dumps({"schema": C.SCHEMA, "knobs": {"precision": "fp99"}}))
    with pytest.raises(ConfigError, match="bad knob values"):
        autotune.load_config(bad)


@pytest.mark.slow  # the module's study: about a minute to make
def test_load_config_warns_on_other_hardware(study):
    url, folder, _ = study
    path, doc = export(url, folder)
    doc["fingerprint"]["torch"] = "1.0.0"
    path.write_text(json.dumps(doc))
    with pytest.warns(C.HardwareMismatchWarning, match="torch: 1.0.0"):
        autotune.load_config(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        autotune.load_config(path, check_hardware=False)


def test_apply_sets_every_knob(tmp_path):
    path = tmp_path / "c.json"
    knobs = {"precision": "bf16", "memory_format": "channels_last", "batch_size": 8, "num_workers": 1,
             "persistent_workers": True, "optimizer_impl": "foreach", "threads": 1}
    path.write_text(json.dumps({"schema": C.SCHEMA, "knobs": knobs, "context": {"device_type": "cpu", "task": "train", "input_rank": 4}}))
    cfg = autotune.load_config(path)
    model = autotune.examples.SmallResNet(width=8)
    dataset = autotune.examples.images(length=64, size=16)
    model, loader, step = cfg.apply(model, dataset, torch.optim.AdamW(model.parameters(), lr=1e-3))
    assert model.stem[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert loader.batch_size == 8 and loader.num_workers == 1 and loader.persistent_workers
    assert torch.get_num_threads() == 1
    batch = next(iter(loader))
    before = model.head.weight.detach().clone()
    loss = step(batch)
    assert torch.isfinite(loss) and not torch.equal(before, model.head.weight)


def test_a_document_that_does_not_say_which_optimizer_keeps_the_optimizer_kernels(tmp_path):
    # A context without optimizer_params (hand-written, or older) must not drop fused/foreach on a guess: the
    # optimizer it is applied to decides. benchmarks/paths_agree.py once measured fused against a silent default.
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"schema": C.SCHEMA, "knobs": {"optimizer_impl": "fused"},
                                "context": {"device_type": "cpu", "task": "train", "input_rank": 2}}))
    cfg = autotune.load_config(path, check_hardware=False)
    assert cfg.knobs["optimizer_impl"] == "fused"
    model = autotune.examples.mlp()
    applied = cfg.apply(model, None, torch.optim.AdamW(model.parameters(), lr=1e-4))
    assert applied.optimizer.param_groups[0]["fused"] is True


USER_SCRIPT = """
import json, sys, time, torch, autotune, autotune.examples, autotune.workloads.contract
cfg = autotune.load_config(sys.argv[1])
model = autotune.examples.mlp()
dataset = autotune.workloads.contract.SyntheticDataset(model.example_input)
model, loader, step = cfg.apply(model, dataset, torch.optim.AdamW(model.parameters(), lr=1e-4))
batches = iter(loader)
for _ in range(10):  # warm-up
    step(next(batches))
windows = []
for _ in range(5):
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < 0.5:
        step(next(batches))
        n += 1
    windows.append(n * cfg.knobs["batch_size"] / (time.perf_counter() - start))
print(json.dumps(windows))
"""


@pytest.mark.slow  # 9 s in a full run on a 2-core CPU
def test_user_loop_matches_the_study(study):
    """A user's training script (a fresh process) with the exported config runs at the speed the study measured."""
    import subprocess
    import sys

    url, folder, _ = study
    path, doc = export(url, folder, "--pick", "fastest")
    out = subprocess.run([sys.executable, "-c", USER_SCRIPT, str(path)], capture_output=True, text=True, check=True)
    windows = json.loads(out.stdout.strip().splitlines()[-1])
    mine = statistics.median(windows)
    theirs = doc["measured"]["samples_per_s"]
    # The study's figure is the geometric mean of its measurements in separate processes, or (for a
    # configuration measured alongside the defaults, as the ablation's recommendation is) the defaults'
    # figure times the ratio inside those shared processes; either way the uncertainty of one process
    # against it is the study's noise between processes.
    measured = doc["measured"]
    runs = measured["measurements_samples_per_s"]
    behind = measured["within_process_measurements"] or len(runs)
    spread = 3 * doc["noise"]["sigma"] + 3 * statistics.pstdev(windows) / statistics.fmean(windows)
    # the race selects among fewer configurations since its claim is measured apart: the fastest-looking one may
    # rest on its search trial alone (then the figure is that one process's, within the same noise)
    assert behind >= 1 and measured["processes"] == behind
    assert abs(mine / theirs - 1) <= max(spread, 0.25), (mine, theirs, runs, spread)


@pytest.mark.slow  # the module's study: about a minute to make
def test_every_view_quotes_the_same_speedup(study):
    """The run's summary, status --json, export and the dashboard's info functions: one speed-up, one interval."""
    from autotune.reports import dashboard as report
    from autotune.store import Store

    url, folder, run_output = study
    status = json.loads(CliRunner().invoke(main, ["status", "mlp", "--storage", url, "--json"]).output)
    verdict = status["verdict"]
    claim = verdict["speedup"]["text"]
    assert f"verdict: {verdict['text']}" in " ".join(run_output.split())  # the run's summary (rich may wrap it)
    assert claim in " ".join(run_output.split())
    _, doc = export(url, folder)  # --pick recommended
    rec = status["recommended"]
    assert doc["pick"] == "recommended" and doc["study"]["trial"] == rec["trial"]
    assert doc["speedup"]["text"] == rec["speedup"]["text"] and doc["verdict"] == verdict
    if verdict["state"] == "gain":
        assert rec["trial"] == verdict["winner"] and rec["speedup"]["text"] == claim
    else:  # keep the defaults: the recommendation is the baseline, at exactly 1.00x
        assert rec["role"] == "baseline" and rec["speedup"]["text"] == "1.00x (1.00-1.00)"
        assert doc["pick_note"] == f"recommended: the defaults, because {verdict['text']}"
    front = {row["trial"]: row for row in status["front"]}
    if rec["trial"] in front:
        assert front[rec["trial"]]["speedup"]["text"] == rec["speedup"]["text"]
    snap = report.snapshot(Store(url, read_only=True).read("mlp"))
    header = report.header_info(snap)
    assert header["best_speedup_text"] == rec["speedup"]["text"] and header["verdict"]["text"] == verdict["text"]
    assert header["noise"]["percent"] == pytest.approx(status["noise"]["percent"])
    points = {p["number"]: p for p in report.pareto_info(snap)["points"]}
    assert points[rec["trial"]]["speedup_text"] == rec["speedup"]["text"]
    rows = {r["number"]: r for r in report.front_table_info(snap)["rows"]}
    if rec["trial"] in rows:
        assert rows[rec["trial"]]["speedup_text"] == rec["speedup"]["text"]
    listing = json.loads(CliRunner().invoke(main, ["list", "--storage", url, "--json"]).output)
    assert listing[0]["speedup"]["text"] == rec["speedup"]["text"] and listing[0]["recommended"] == rec["trial"]
    # time spent: the dashboard and status read the same sessions the run recorded
    assert header["total_time_s"] == pytest.approx(status["time_spent_s"])
