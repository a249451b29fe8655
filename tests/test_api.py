"""The Python API: autotune.tune() and autotune.measure() with factories no process can import by name."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import optuna
import pytest
import torch
from torch import nn

import autotune
from autotune import api
from autotune.workloads import shipping
from autotune.errors import AutotuneError, KnobError, SpecError, WorkloadError
from autotune.evidence import Verdict
from autotune.evidence.stats import Noise, Ratio
from autotune.workloads.specs import build
from autotune.workloads.contract import WorkloadSpec

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # about 15-20 s on a 2-core CPU: 3 configurations, the noise floor, a race round, a resume
def test_tune_a_factory_defined_inside_the_test(tmp_path):
    width = 16

    class TinyNet(nn.Module):  # a class no other process can import
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 4))

        def forward(self, x):
            # Each step waits 20 ms whatever its batch, as a step bound by a device would (a wait,
            # not CPU work: other processes on the machine barely change it), so samples/s grows
            # with the batch and the largest batch wins far beyond the noise.
            threading.Event().wait(0.02)
            return self.body(x)

    def factory():
        return autotune.Workload(model=TinyNet(), example=(torch.zeros(8), torch.tensor(3)))

    # Three configurations in all: the baseline's batch of 32 (the recipe is the same one), 8 and 256;
    # one intra-op thread, so that other processes on the machine do not stall the step's CPU part.
    (tmp_path / "space.toml").write_text("[search]\nbatch_size = [8, 32, 256]\n\n[fixed]\nthreads = 1\n")
    url = f"sqlite:///{tmp_path}/s.db"
    result = autotune.tune(factory, trials=3, space=str(tmp_path / "space.toml"), quick=True, confirm=1, storage=url,
                           study="s", progress=False)

    assert isinstance(result, autotune.TuneResult) and isinstance(result.study, optuna.Study)
    assert result.study.study_name == "s" and result.measured == 3
    assert result.summary.measured == 3 and result.summary.new == 3
    # the repr shows the verdict as a user reads it: its headline, its details on the line below
    assert (isinstance(result.verdict, Verdict)
            and f"verdict: {result.verdict.headline or result.verdict.text}" in repr(result))
    assert all(detail in repr(result) for detail in result.verdict.details)
    assert result.front and all({"trial", "changes", "samples_per_s", "peak_memory_bytes", "speedup"} <= set(r)
                                for r in result.front)
    assert isinstance(result.noise, Noise) and result.noise.known
    batch = {t.number: t.config["batch_size"] for t in result.view.trials if t.config and t.duplicate_of is None}
    assert sorted(batch.values()) == [8, 32, 256]
    # the batch of 256 wins beyond the noise, and the result says so
    assert result.verdict.state == "gain", result.verdict.text
    assert result.winner is not None and batch[result.winner] == 256, (result.winner, batch, result.verdict.text)
    assert result.front[0]["trial"] == result.winner
    assert isinstance(result.speedup, Ratio) and result.speedup.above_one(), result.speedup
    assert result.speedup == result.verdict.speedup

    # The study names the workload by its code digest; the bytes travel with the job only.
    view = result.view  # the study as every view reads it (autotune.store.StoredStudy)
    assert view.workload["model"].startswith("pickled:test_tune_a_factory_defined_inside_the_test.factory@")
    assert "pickled" not in view.workload
    assert view.job["spec"]["pickled"].keys() == {view.workload["model"]}

    best = tmp_path / "best.json"
    doc = result.export(best)  # the recommendation: the verdict's winner
    assert doc["knobs"]["batch_size"] == 256 and doc["knobs"]["threads"] == 1
    assert json.loads(best.read_text())["knobs"] == doc["knobs"]
    cfg = autotune.load_config(best)
    assert cfg.knobs == doc["knobs"]
    text = result.export(format="hf-trainer")
    assert "TrainingArguments" in text
    written = tmp_path / "out" / "args.py"
    assert result.export(written, format="hf-trainer") == written.read_text()

    # A new tune() without the object resumes from the bytes stored with the study.
    again = autotune.tune(None, study="s", storage=url, trials=3, space=str(tmp_path / "space.toml"), quick=True,
                          confirm=0, progress=False)
    assert again.summary.new == 0 and again.measured == 3


def test_an_unpicklable_callable_is_one_spec_error(tmp_path):
    lock = threading.Lock()

    def factory():
        with lock:
            return nn.Linear(4, 2)

    with pytest.raises(SpecError) as info:
        autotune.tune(factory, trials=3, quick=True, storage=f"sqlite:///{tmp_path}/s.db", study="s", progress=False)
    message = str(info.value)
    assert ("\n" not in message and ".factory' cannot be sent" in message and "lock" in message
            and "inside the factory" in message)
    assert not (tmp_path / "s.db").exists()  # refused before anything ran or was stored


def test_an_open_file_is_one_spec_error(tmp_path):
    with open(tmp_path / "log.txt", "w") as fh:
        with pytest.raises(SpecError, match="cannot be sent to the trial processes") as info:
            autotune.measure(lambda: (fh.write("x"), nn.Linear(4, 2))[1], quick=True)
    assert "\n" not in str(info.value)


@pytest.mark.slow  # 5 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_measure_a_local_factory():
    def factory():
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        return autotune.Workload(model=model, example=(torch.zeros(8), torch.tensor(3)))

    res = autotune.measure(factory, {"batch_size": 16}, quick=True)
    assert res.ok, res.error
    assert res.config["batch_size"] == 16 and res.samples_per_s > 0


def test_measure_a_bare_module_and_a_data_lambda():
    from torch.utils.data import TensorDataset

    n = 64
    results = autotune.measure(
        lambda: nn.Linear(8, 4),
        ["batch_size=8"],
        data=lambda: TensorDataset(torch.randn(n, 8), torch.randint(0, 4, (n,))),
        quick=True,
        repeat=2,
    )
    assert len(results) == 2 and all(r.ok for r in results), [r.error for r in results]


def test_a_large_capture_travels_and_a_huge_one_is_refused():
    table = bytes(3 * 1024**2)  # a request of several pipe buffers to the fork server

    def factory():
        return nn.Linear(8, 4 + len(table) % 7)

    assert autotune.measure(factory, input_shape=(8,), quick=True).ok
    huge = bytes(9 * 1024**2)
    with pytest.raises(SpecError, match=r"pickles to 9 MiB .*build them inside the factory"):
        autotune.measure(lambda: nn.Linear(8, 4 + len(huge) % 7), input_shape=(8,), quick=True)


def test_without_cloudpickle_a_callable_is_refused_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # import cloudpickle now raises ImportError
    with pytest.raises(SpecError, match=r"needs cloudpickle \(pip install cloudpickle\)"):
        autotune.tune(lambda: nn.Linear(4, 2), progress=False)


def test_objects_of_importable_modules_are_named_not_pickled():
    from autotune.workloads import examples

    spec = api._spec(examples.cnn, None, {"width": 8}, None, None, None)
    assert spec.model == "autotune.examples:cnn" and spec.pickled == () and spec.model_args == (("width", 8),)
    assert api.default_study(spec).startswith("autotune.examples-cnn-")  # its model_args set it apart
    assert api._spec("hf:gpt2", None, ["n_layer=1"], None, None, None).model_args == (("n_layer", 1),)
    with pytest.raises(SpecError, match="expected module:attribute"):
        api._spec("not-a-spec", None, None, None, None, None)
    with pytest.raises(SpecError, match="expected a module:attr string"):
        api._spec(42, None, None, None, None, None)
    with pytest.raises(SpecError, match=r"functools.partial"):
        api._spec("autotune.examples:mlp", None, {"dtype": torch.float16}, None, None, None)
    with pytest.raises(SpecError, match="input_shape"):
        api._spec("autotune.examples:mlp", None, None, ("a", 3), None, None)


def test_a_pickled_spec_without_its_bytes_says_how_to_resume():
    with pytest.raises(SpecError, match=r"autotune.tune\(\.\.\., study=NAME\)"):
        build(WorkloadSpec(model="pickled:factory@" + "0" * 64))


def test_the_bytes_travel_with_the_spec_but_not_in_its_name():
    def factory():
        return nn.Linear(4, 2)

    spec = api._spec(factory, None, None, (4,), None, "infer")
    assert spec.to_dict(payload=False) == {"model": spec.model, "data": None, "model_args": {}, "input_shape": [4],
                                           "num_classes": None, "task": "infer"}
    again = WorkloadSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert again == spec
    workload = build(again)  # unpickled here as in a trial process
    assert isinstance(workload.model, nn.Linear) and workload.task == "infer"
    # module specs keep their JSON as before
    assert "pickled" not in WorkloadSpec(model="autotune.examples:mlp").to_dict()


@pytest.mark.slow  # 16 s in a full run on a 2-core CPU
def test_the_digest_follows_the_code_not_the_process(tmp_path):
    def make(constant):
        def factory():
            return nn.Linear(4, constant)

        return factory

    assert shipping.digest(make(2)) == shipping.digest(make(2))
    assert shipping.digest(make(2)) != shipping.digest(make(3))

    script = tmp_path / "notebook.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch import nn
        from autotune import api

        class Net(nn.Module):  # cloudpickle gives a class of __main__ a random id in every process
            def __init__(self):
                super().__init__()
                self.layer = nn.Linear(8, WIDTH)

        WIDTH = 4

        def factory():
            return Net()

        print(api._spec(factory, None, None, None, None, None).model)
    """))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}

    def spec_of(source: str) -> str:
        script.write_text(source)
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    source = script.read_text()
    first, second = spec_of(source), spec_of("\n\n# a comment moves every line\n" + source)
    assert first == second and first.startswith("pickled:factory@")
    assert spec_of(source.replace("WIDTH = 4", "WIDTH = 5")) != first


def test_sizes_durations_and_bad_arguments(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AutotuneError, match=r"^time_budget='soon': expected a duration such as"):
        autotune.tune("autotune.examples:mlp", time_budget="soon", progress=False)
    with pytest.raises(KnobError, match=r"^the trial budget \(trials=\) must be a whole number from 1 to"):
        autotune.tune("autotune.examples:mlp", trials=0, progress=False)
    with pytest.raises(KnobError, match=r"^the sampler \(sampler=\) must be one of"):
        autotune.tune("autotune.examples:mlp", sampler="grid", progress=False)
    with pytest.raises(SpecError, match="study=NAME"):
        autotune.tune(None, progress=False)
    with pytest.raises(KnobError, match=r"\(max_memory=\) must be positive and a whole number of bytes, not 0.5"):
        autotune.tune("autotune.examples:mlp", max_memory=0.5, progress=False)  # less than a byte is no budget
    with pytest.raises(KnobError, match=r"\(trial_timeout=\) must be positive"):
        autotune.measure("autotune.examples:mlp", trial_timeout="0s")
    with pytest.raises(KnobError, match=r"^the number of runs \(repeat=\) must be a whole number from 1 to 100, not 0"):
        autotune.measure("autotune.examples:mlp", repeat=0)
    with pytest.raises(KnobError, match=r"^early_stop= must be True or False"):
        autotune.tune("autotune.examples:mlp", early_stop="no", progress=False)
    db = tmp_path / "x.db"
    with pytest.raises(KnobError, match="global batch"):
        autotune.tune("autotune.examples:mlp", global_batch=0, storage=f"sqlite:///{db}", progress=False)
    assert not db.exists()  # refused before anything is stored
    with pytest.raises(KnobError, match="global batch"):
        autotune.measure("autotune.examples:mlp", global_batch=-8)
    assert list(tmp_path.iterdir()) == []


def test_progress_lines_without_a_terminal_or_in_jupyter(monkeypatch):
    from rich.console import Console

    from autotune.tuning import progress
    from autotune.tuning.loop import TrialRecord

    rec = TrialRecord(0, "baseline", {}, "ok", 100.0, 1024**2)
    lines: list[str] = []
    silent = progress.Progress(3, None, 0, enabled=False, echo=lines.append)
    silent(rec)
    silent.repeat("noise floor: baseline", 0, 90.0)
    assert lines == []

    plain = progress.Progress(3, None, 0, echo=lines.append)  # pytest's stdout is no terminal: lines, no bar
    assert plain.bar is None
    plain(rec)
    assert lines and lines[0].startswith("#0    baseline ok")

    monkeypatch.setattr(progress, "console", lambda: Console(force_jupyter=True, file=io.StringIO()))
    monkeypatch.setattr(progress, "_has_widgets", lambda: False)
    jupyter = progress.Progress(3, 60.0, 0, echo=lines.append)
    jupyter(rec)
    jupyter.close()
    assert jupyter.bar is None and len(lines) == 2


def test_errors_speak_python_and_a_failed_call_leaves_no_file(tmp_path, monkeypatch):
    """The API's errors name its arguments and the callable's own name, and a call that fails before any trial
    ran leaves no study file behind (it said '--model pickled:lambda@467cb7... returned NoneType' and left
    studies/lambda.db)."""
    from autotune.errors import WorkloadError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(WorkloadError) as nothing:
        autotune.tune(lambda: None, trials=2, quick=True, progress=False)
    import re

    assert re.match(r"model=\S*lambda returned NoneType", str(nothing.value)) and "--" not in str(nothing.value)

    class Net(nn.Module):  # no example input: the model gives no data
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 2)

        def forward(self, x):
            return self.lin(x)

    with pytest.raises(WorkloadError) as no_data:
        autotune.tune(Net, trials=2, quick=True, progress=False)
    message = str(no_data.value)
    assert re.match(r"model=\S*Net gives no data: pass data=, or input_shape=", message) and "--" not in message
    assert list(tmp_path.iterdir()) == []


def test_default_study_names_tell_unrelated_workloads_apart():
    from autotune.request import WorkloadSpec

    plain = WorkloadSpec("autotune.examples:mlp").default_study_name()
    wider = WorkloadSpec("autotune.examples:mlp", model_args=(("width", 64),)).default_study_name()
    other = WorkloadSpec("autotune.examples:mlp", model_args=(("width", 128),)).default_study_name()
    assert plain == "autotune.examples-mlp" and len({plain, wider, other}) == 3 and wider.startswith(plain + "-")
    one = api._spec(lambda: nn.Linear(4, 2), None, None, None, None, None)
    two = api._spec(lambda: nn.Linear(8, 2), None, None, None, None, None)
    assert (api.default_study(one) != api.default_study(two)
            and api.default_study(one).rsplit(".", 1)[-1].startswith("lambda-"))


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_the_results_repr_shows_the_recommendations_own_figures(tmp_path):
    from autotune.testing.studies import make_study

    url = f"sqlite:///{tmp_path}/r.db"
    study = make_study(url, n_trials=12, name="r")
    from autotune.store import Store

    result = api.TuneResult(study, Store(url))
    with pytest.raises(KnobError, match=r"^max_memory='lots': expected a size such as"):
        result.export(max_memory="lots")
    with pytest.raises(KnobError, match=r"^max_memory=0: must be positive"):
        result.export(max_memory=0)
    text = repr(result)
    assert f"recommended=#{result.recommended}" in text
    if result.verdict.state != "gain":
        assert result.recommended == 0 and "(the defaults), speed-up 1.00x" in text
    else:
        assert result.speedup.text() in text and result.recommended == result.verdict.winner


def test_an_option_with_a_bare_value_reads_as_a_python_argument(tmp_path, monkeypatch):
    from autotune.errors import DeviceError, StudyError
    from autotune.request import option

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(DeviceError) as info:
        autotune.tune("autotune.examples:mlp", device="cuda", progress=False)
    assert str(info.value).endswith("(use device='cpu')") and "--" not in str(info.value)
    said = StudyError(f"start a new study ({option('study', 'mine-2')}): this one holds it")
    assert "study='mine-2'" in str(api.in_python_words(said)) and "(--study mine-2)" in str(said)


def test_tune_of_a_model_whose_defaults_fail_raises_in_python_words(tmp_path, monkeypatch):
    """Every speed-up is a ratio to the defaults: tune() of a model that fails with them says so, and why."""
    monkeypatch.chdir(tmp_path)

    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 2)
            self.example_input = torch.zeros(4)

        def forward(self, x):
            raise ValueError("this model cannot run")

    with pytest.raises(WorkloadError) as failed:
        autotune.tune(Broken, trials=3, quick=True, progress=False)
    message = str(failed.value)
    assert "PyTorch's defaults failed when measured (trial #0, error: ValueError" in message or \
        "PyTorch's defaults failed when measured (trial #0, error: this model cannot run" in message, message
    assert "--" not in message


def test_no_message_is_rewritten_by_a_regular_expression():
    """The API words each name a message holds from the request's declaration (a term, autotune.errors.named):
    the regular expressions that rewrote the CLI's words in free text are gone, and so is every use of re here."""
    import ast
    import inspect

    from autotune.cli import edge

    for gone in ("python_words", "_OPTIONS"):
        assert not hasattr(api, gone), gone
    for module in (api, edge):
        tree = ast.parse(inspect.getsource(module))
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                    for alias in node.names} | {node.module for node in ast.walk(tree)
                                                if isinstance(node, ast.ImportFrom)}
        assert "re" not in imported, module.__name__


def test_a_message_names_an_option_in_each_surfaces_words(tmp_path, monkeypatch):
    """One message, built with the request's helper: the command line reads --trial-timeout (str(exc) too, as logs
    do), the API trial_timeout=; a device this machine lacks is named by each surface alike, end to end."""
    from click.testing import CliRunner

    from autotune import cli
    from autotune.cli.edge import in_cli_words
    from autotune.errors import DeviceError
    from autotune.request import option

    said = WorkloadError(f"raise {option('trial_timeout')} (or use {option('quick')})")
    assert str(said) == in_cli_words(said) == "raise --trial-timeout (or use --quick)"
    assert str(api.in_python_words(said)) == "raise trial_timeout= (or use quick=)"
    assert type(api.in_python_words(said)) is WorkloadError

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    out = CliRunner().invoke(cli.main, ["measure", "--model", "autotune.examples:mlp", "--device", "cuda:1"])
    assert out.exit_code == 2 and out.output == ("error: --device 'cuda:1': this machine has no CUDA device "
                                                 "(use --device cpu)\n"), out.output
    with pytest.raises(DeviceError) as info:
        autotune.measure("autotune.examples:mlp", device="cuda:1")
    assert str(info.value) == "device='cuda:1': this machine has no CUDA device (use device='cpu')"
    assert list(tmp_path.iterdir()) == []


def test_the_verdict_names_options_and_commands_in_pythons_words():
    """A verdict's text reads in the command line's words wherever it is stored or printed by the CLI; the API's
    result says the same in Python's: the command to re-check a load-sensitive winner is a call."""
    from test_evidence import FP, evidence, loaded, new_study, rounds

    study = new_study(fingerprint=FP, workload={"model": "autotune.examples:cnn"})
    loaded(study, 100.0, 1.0, role="baseline"), loaded(study, 300.0, 1.0, threads=1)
    loaded(study, 150.0, 1.0, precision="bf16")
    rounds(study, {0: (100.0, 1.0), 1: (300.0, 1.0), 2: (150.0, 1.0)})
    verdict = evidence(study).verdict()
    assert "`autotune measure --model autotune.examples:cnn --set threads=1 --repeat 5`" in verdict.text
    assert json.loads(json.dumps(verdict.to_dict()))["text"] == verdict.text
    python = api.in_python_text(verdict)
    assert "autotune.measure('autotune.examples:cnn', config={'threads': 1}, repeat=5) against " \
           "autotune.measure('autotune.examples:cnn', repeat=5)" in python.text
    assert "--" not in python.text and python.state == verdict.state and python.winner == verdict.winner


def test_the_result_carries_mfu_with_its_peak_named_and_energy_as_status_json_does(tmp_path):
    import json

    from click.testing import CliRunner

    from autotune.cli import main
    from autotune.store import Store, StoredStudy, writing
    from autotune.testing.studies import make_study

    url = f"sqlite:///{tmp_path}/g.db"
    study = make_study(url, n_trials=12, name="g", with_failures=False, power=lambda c: 300.0)
    fingerprint = {**StoredStudy.of(study).fingerprint, "device_type": "cuda", "device_name": "NVIDIA H200"}
    writing.save(study, fingerprint=fingerprint, device="cuda:0")
    result = api.TuneResult(study, Store(url))
    status = json.loads(CliRunner().invoke(main, ["status", "g", "--storage", url, "--json"]).output)
    assert result.mfu is not None and result.mfu == pytest.approx(status["verdict"]["mfu"]["mfu"])
    assert (result.peak.device, result.peak.precision, result.peak.flops) == (
        status["verdict"]["mfu"]["device"], status["verdict"]["mfu"]["precision"],
        status["verdict"]["mfu"]["peak_flops"])
    assert result.verdict.mfu["peak"] == status["verdict"]["mfu"]["peak"] == result.peak.text()
    assert result.joules_per_sample == pytest.approx(status["energy"]["joules_per_sample"])
    assert result.verdict.energy["text"] == status["verdict"]["energy"]["text"] == result.energy.text
    assert f"hardware: {result.efficiency.text}; energy {result.energy.text}" in repr(result)
