"""The CLI, in-process with click's CliRunner: measure, knobs, and every bad input."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

from autotune.cli import main
from autotune.machine import identity


def invoke(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


@pytest.mark.parametrize("command", sorted(main.commands))
def test_every_help_ends_with_examples(command):
    res = invoke(command, "--help")
    assert res.exit_code == 0, res.output
    assert "Examples:" in res.output, f"`autotune {command} --help` shows no examples"
    after = res.output.split("Examples:", 1)[1].splitlines()
    examples = [line.strip() for line in after if line.strip().startswith(f"autotune {command}")]
    assert len(examples) >= 2, f"`autotune {command} --help`: fewer than two examples after 'Examples:'"
    assert all(line.strip().startswith("autotune ")
               for line in after[1:len(examples) + 1]), "examples lost their lines (\\b)"


def test_knobs_table_and_json():
    res = invoke("knobs")
    assert res.exit_code == 0 and "precision" in res.output and "cuda_allocator" in res.output
    rows = json.loads(invoke("knobs", "--json").output)
    assert {r["name"] for r in rows} >= {"precision", "compile", "pin_memory"}


@pytest.mark.slow  # 16 s in a full run on a 2-core CPU
@pytest.mark.parametrize("example", ["cnn", "mlp", "transformer"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_measure_examples_json(example, precision):
    res = invoke("measure", "--model", f"autotune.examples:{example}", "--set", f"precision={precision}",
                 "--set", "batch_size=16", "--quick", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    for key in ("outcome", "samples_per_s", "samples_per_s_cv", "peak_memory_bytes", "time_to_first_step_s",
                "config", "not_applicable", "profile", "error"):
        assert key in doc
    assert doc["outcome"] == "ok" and doc["samples_per_s"] > 0 and doc["peak_memory_bytes"] > 0
    assert doc["config"]["precision"] == precision and doc["config"]["batch_size"] == 16
    assert doc["profile"]["top_ops"]


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_measure_human_output_and_not_applicable():
    res = invoke("measure", "--model", "autotune.examples:mlp", "--set", "pin_memory=on", "--quick")
    assert res.exit_code == 0, res.output
    assert "throughput" in res.output and "samples/s" in res.output
    assert "not applicable  pin_memory: needs a CUDA device" in res.output


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_measure_repeat_reports_spread():
    res = invoke("measure", "--model", "autotune.examples:mlp", "--repeat", "2", "--quick", "--json")
    doc = json.loads(res.output)
    assert len(doc["runs"]) == 2 and doc["samples_per_s_cv_across_runs"] is not None
    assert doc["runs"][0]["notes"]["pid"] != doc["runs"][1]["notes"]["pid"]  # separate processes


def test_measure_failure_exits_non_zero():
    res = CliRunner().invoke(main, ["measure", "--model", "failing_workloads:nan", "--quick"])
    assert res.exit_code == 1 and "outcome" in res.output and "nan" in res.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "autotune.examples.cnn"], "expected module:attribute"),
        (["--model", "surely_missing_pkg:x"], "no module named 'surely_missing_pkg'"),
        (["--model", "autotune.examples:nope"], "has no attribute 'nope'"),
        (["--model", "autotune.examples:cnn", "--set", "precison=bf16"], "unknown knob 'precison'"),
        (["--model", "autotune.examples:cnn", "--set", "precision=fp8"], "not one of"),
        (["--model", "autotune.examples:cnn", "--set", "num_workers=999"], "out of range"),
        (["--model", "autotune.examples:cnn", "--set", "batch_size=-3"], "out of range"),
        (["--model", "autotune.examples:cnn", "--device", "cuda:7"], "cuda:7"),
        (["--model", "autotune.examples:cnn", "--trial-timeout", "soon"], "expected a duration"),
        (["--model", "torch.nn:Identity"], "gives no data"),
    ],
)
def test_bad_input_one_line_no_traceback(args, message):
    res = CliRunner().invoke(main, ["measure", *args])
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert "Traceback" not in res.output
    assert res.output.strip().count("\n") == 0  # one line


def test_user_module_errors(user_module):
    name = user_module(
        """
        import torch
        def boom():
            raise ValueError("my factory is broken")
        def number():
            return 3
        """
    )
    broken_import = user_module("import surely_missing_dependency_xyz\n")
    for spec, message in (
        (f"{name}:boom", "raised ValueError: my factory is broken"),
        (f"{name}:number", "returned int; expected an nn.Module or an autotune.Workload"),
        (f"{broken_import}:net", "surely_missing_dependency_xyz"),
    ):
        res = CliRunner().invoke(main, ["measure", "--model", spec, "--quick"])
        assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output


def test_dashboard_command(tmp_path):
    from autotune.testing.studies import make_study

    url = f"sqlite:///{tmp_path}/demo.db"
    make_study(url, n_trials=12, name="demo")
    out = tmp_path / "page.html"
    res = CliRunner().invoke(main, ["dashboard", "demo", "--storage", url, "-o", str(out)])
    assert res.exit_code == 0 and str(out) in res.output
    assert out.stat().st_size > 100_000 and "demo" in out.read_text()
    res = CliRunner().invoke(main, ["dashboard", "nosuch", "--storage", url])
    assert res.exit_code == 2 and "no study 'nosuch'" in res.output
    res = CliRunner().invoke(main, ["dashboard", "demo", "--storage", url, "--watch", "never"])
    assert res.exit_code == 2 and "expected a duration" in res.output


# ---------------------------------------------------------------- storage passwords never shown

SECRET_URL = "postgresql://user:SECRETPW@127.0.0.1:1/db"  # nothing listens on port 1


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--model", "autotune.examples:mlp", "--quick"],
        ["status", "x"],
        ["status", "x", "--json"],
        ["list"],
        ["list", "--json"],
        ["export", "x"],
        ["dashboard", "x"],
    ],
)
def test_unreachable_storage_is_one_line_without_the_password(args):
    res = CliRunner().invoke(main, [*args, "--storage", SECRET_URL])
    assert res.exit_code == 2, res.output
    assert "SECRETPW" not in res.output
    assert res.output.startswith("error: the database server of postgresql://user:***@127.0.0.1:1/db is unreachable")
    assert res.output.strip().count("\n") == 0 and "Traceback" not in res.output


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--model", "autotune.examples:mlp", "--quick"],
        ["submit", "--model", "autotune.examples:mlp", "--quick"],
        ["status", "x"],
        ["list"],
        ["export", "x"],
        ["dashboard", "x"],
    ],
)
def test_every_command_takes_the_storage_from_the_environment(args):
    # AUTOTUNE_STORAGE keeps the password off the command line, for every command alike (a worker
    # takes it too, and `run --workers` hands it to its workers that way; a worker waits for an unreachable
    # storage to come back instead: tests/test_fleet.py)
    res = CliRunner(env={"AUTOTUNE_STORAGE": SECRET_URL}).invoke(main, args)
    assert res.exit_code == 2, res.output
    assert "SECRETPW" not in res.output
    assert res.output.startswith("error: the database server of postgresql://user:***@127.0.0.1:1/db "
                                 "is unreachable"), res.output
    assert res.output.strip().count("\n") == 0 and "Traceback" not in res.output


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_a_real_server_is_shown_without_its_password(postgres_url, tmp_path):
    from sqlalchemy.engine import make_url
    from autotune.testing.studies import make_study

    from autotune import store as storage

    make_study(storage.Store.open(postgres_url).storage, n_trials=12, name="demo")
    secret = make_url(postgres_url).password
    shown = storage.redact(postgres_url)
    assert secret not in shown and "***" in shown

    status = invoke("status", "demo", "--storage", postgres_url)
    assert status.exit_code == 0 and f"({shown})" in status.output
    listing = invoke("list", "--storage", postgres_url)
    assert listing.exit_code == 0 and "demo" in listing.output
    docs = json.loads(invoke("list", "--storage", postgres_url, "--json").output)
    assert [d["storage"] for d in docs] == [shown]
    exported = invoke("export", "demo", "--pick", "smallest", "--storage", postgres_url)
    assert exported.exit_code == 0, exported.output
    assert json.loads(exported.output)["study"]["storage"] == shown
    page = tmp_path / "demo.html"
    assert invoke("dashboard", "demo", "--storage", postgres_url, "-o", str(page)).exit_code == 0
    for res in (status, listing, exported):
        assert secret not in res.output
    assert secret not in page.read_text()


# ---------------------------------------------------------------- what the user reads


def test_the_cli_parses_before_it_imports_torch_or_optuna():
    """--help answers at once: the command line imports neither torch nor Optuna until a command needs them."""
    import subprocess
    import sys

    code = "import sys, autotune.cli; print(sorted(m for m in ('torch', 'optuna') if m in sys.modules))"
    assert (subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
            == "[]")


@pytest.mark.slow  # 5 s in a full run on a 2-core CPU
def test_the_read_commands_import_neither_torch_nor_the_trial_modules(tmp_path):
    """status, status --json, list, export and dashboard answer without loading torch (~1 s), scipy.stats (~0.5 s)
    or the modules that run trials."""
    import subprocess
    import sys

    from autotune.testing.studies import make_study

    make_study(tmp_path / "s.db", n_trials=12, name="s")
    url = f"sqlite:///{tmp_path / 's.db'}"
    heavy = ("torch", "scipy.stats", "autotune.trial.runner", "autotune.workloads.contract", "autotune.trial.protocol",
             "autotune.trial.plan")
    for args in (["status", "s"], ["status", "s", "--json"], ["list"], ["export", "s", "-o", str(tmp_path / "x.json")],
                 ["dashboard", "s", "-o", str(tmp_path / "d.html")]):
        code = ("import sys; from autotune import cli\n"
                f"try:\n    cli.main({[*args, '--storage', url]!r}, standalone_mode=False)\nexcept SystemExit: pass\n"
                f"print('loaded:', sorted(m for m in {heavy!r} if m in sys.modules))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert out.strip().splitlines()[-1] == "loaded: []", (args, out[-500:])


def test_status_without_a_name_shows_the_only_study_or_lists_them(tmp_path, monkeypatch):
    from autotune.testing.studies import make_study

    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["status"])
    assert (res.exit_code == 2
            and res.output.strip() == "error: no study in studies/: run one with `autotune run --model ...`")
    (tmp_path / "studies").mkdir()
    make_study(tmp_path / "studies" / "one.db", n_trials=8, name="one")
    res = CliRunner().invoke(main, ["status"])
    assert res.exit_code == 0 and res.output.startswith("study one ")
    make_study(tmp_path / "studies" / "two.db", n_trials=8, name="two")
    res = CliRunner().invoke(main, ["status"])
    assert (res.exit_code == 2
            and res.output.strip() == "error: which study? 2 in studies/: one, two (autotune status NAME)")


def test_the_recommendation_is_the_first_row_of_the_front_table_even_off_the_front():
    from autotune.cli import RECOMMENDED_MARK, front_rows

    front = [{"trial": 3}, {"trial": 5}]
    rows = front_rows({"recommended": {"trial": 7}, "front": front})
    assert [(r["trial"], mark) for r, mark in rows] == [(7, RECOMMENDED_MARK), (3, ""), (5, "")]
    rows = front_rows({"recommended": {"trial": 5}, "front": front})
    assert [(r["trial"], mark) for r, mark in rows] == [(5, RECOMMENDED_MARK), (3, "")]


def test_status_marks_the_recommendation_and_json_names_it(tmp_path):
    from autotune.testing.studies import make_study

    url = f"sqlite:///{tmp_path}/demo.db"
    make_study(url, n_trials=20, name="demo")
    doc = json.loads(invoke("status", "demo", "--storage", url, "--json").output)
    rec = doc["recommended"]
    verdict = doc["verdict"]
    assert rec["trial"] == (verdict["winner"] if verdict["state"] == "gain" else 0)
    table = invoke("status", "demo", "--storage", url).output
    first_row = next(line for line in table.splitlines() if line.startswith("│ #"))
    assert first_row.startswith(f"│ #{rec['trial']} recommended")


def test_a_trial_line_shows_one_measurement_as_one_measurement():
    from autotune.tuning.progress import speedup_text
    from autotune.evidence.stats import Ratio

    assert speedup_text(Ratio(10.61, 1.03, 108.8, processes=1, reference_processes=3)) == "10.61x, 1 run"
    assert speedup_text(Ratio(1.2, 1.1, 1.3, processes=4, reference_processes=7)) == "1.20x (1.10-1.30)"
    assert speedup_text(Ratio(1.0, 1.0, 1.0, processes=3, reference_processes=3), role="baseline") == (
        "1.00x (the defaults)")
    # an interval from a few processes on a noisy machine is too wide to read: the line says so instead
    assert speedup_text(Ratio(10.34, 0.09, 1172.76, processes=2, reference_processes=3)) == (
        "10.34x, 2 runs (too noisy yet for an interval)")
    assert speedup_text(Ratio(3.0, 1.6, 6.3, processes=2, reference_processes=3)) == "3.00x (1.60-6.30)"


def test_measure_says_compilation_only_when_it_compiled():
    from autotune.cli import result_lines
    from autotune.result import OK, TrialResult

    res = TrialResult(outcome=OK, config={"compile": "off"}, samples_per_s=10.0, samples_per_s_cv=0.01,
                      window_samples_per_s=[10.0], step_time_s=0.1, samples_per_step=1, time_to_first_step_s=2.0,
                      peak_memory_bytes=1,
                      profile={"top_ops": [{"name": "## Call CompiledFxGraph fgqrddoohho5abcdefgh", "share": 0.5}]})
    lines = dict(result_lines(res))
    assert lines["first step"] == "2.00 s"
    assert dict(result_lines(TrialResult(**{**res.__dict__, "config": {"compile": "default"}})))["first step"].endswith(
        "(includes compilation)")
    assert lines["top ops"] == "compiled graph 50%"


def test_measure_names_the_peak_its_mfu_is_a_fraction_of_and_its_energy():
    from autotune.cli import result_lines
    from autotune.machine import peaks
    from autotune.result import OK, TrialResult

    fp32 = peaks.peak("NVIDIA H200", "fp32")
    rate, flops = 1000.0, 0.55 * fp32.flops / 1000.0  # 55% of the H200's fp32 peak
    res = TrialResult(outcome=OK, config={"precision": "fp32"}, samples_per_s=rate, window_samples_per_s=[rate],
                      step_time_s=0.032, samples_per_step=32, time_to_first_step_s=1.0, peak_memory_bytes=1,
                      flops_per_sample=flops, achieved_flops=flops * rate, mfu=0.55, device="cuda:0",
                      notes={"device_name": "NVIDIA H200"}, joules_per_sample=0.3,
                      energy={"joules": 300.0, "seconds": 2.5, "samples": 1000, "source": "nvml"})
    lines = dict(result_lines(res))
    assert lines["MFU"] == "55% of this H200's fp32 peak, 66.9 TFLOP/s (bf16's dense peak is 15x higher)"
    assert lines["energy"] == "0.3 J/sample (120 W over 2.5 s of timed windows, NVML)"
    cpu = dict(result_lines(dataclasses.replace(res, device="cpu", notes={}, joules_per_sample=None,
                                                energy={"unreadable": "no energy counter: CPU"})))
    assert cpu["MFU"].startswith("peak unknown for ") and cpu["energy"] == "no energy counter: CPU"


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
@pytest.mark.parametrize("columns", [80, 100])
def test_list_breaks_no_word_on_a_narrow_terminal(tmp_path, monkeypatch, columns):
    """Every name, figure and word of `list` stays whole on an 80- or 100-column terminal (cells fold between words)."""
    from autotune.testing.studies import make_study

    from autotune.tuning import progress

    url = f"sqlite:///{tmp_path / ('a-long-folder-name-' * 4)}.db"
    for name in ("hf-gpt2-7f3a9c21", "cnn-images-0c4d"):
        make_study(url, n_trials=12, name=name)
    docs = json.loads(CliRunner().invoke(main, ["list", "--storage", url, "--json"]).output)
    monkeypatch.setattr(progress, "_isatty", lambda: True)
    monkeypatch.setenv("COLUMNS", str(columns))
    out = CliRunner().invoke(main, ["list", "--storage", url])
    assert out.exit_code == 0, out.output
    storage, machine, *table = out.output.splitlines()
    assert storage == f"storage {url}"  # what every row shares, said once, whole
    assert machine == f"machine {identity.short(docs[0]['fingerprint'])}"
    words = " ".join(table).split()
    for d in docs:
        whole = [d["study"], *d["speedup"]["text"].split(), *d["verdict"].replace("_", " ").split(), str(d["measured"])]
        assert [w for w in whole if w not in words] == [], out.output
    assert max(len(line.rstrip()) for line in table) <= columns


def test_each_option_a_user_asks_about_has_help():
    """--model names hf: models; --pick says what each pick is; status --json and export -o say what they write."""
    import re

    def help_of(*command: str) -> str:
        out = CliRunner(env={"COLUMNS": "200"}).invoke(main, [*command, "--help"])
        assert out.exit_code == 0, out.output
        return " ".join(out.output.split())

    assert "hf:<model_type>" in help_of("run") and "hf:<model_type>" in help_of("measure")
    export_help = help_of("export")
    for pick in ("recommended", "fastest", "smallest", "balanced"):
        assert re.search(rf"\b{pick}\b: ", export_help), pick  # each pick named with what it does
    assert re.search(r"-o, --output TEXT\s+\S+", export_help) and "hf-trainer" in export_help.split("-o, --output")[1]
    assert re.search(r"--json\s+Print the figures as JSON", help_of("status"))
