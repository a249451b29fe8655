"""The one typed request: validated once, every default in one place, the same rules for the CLI and the API."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from click.testing import CliRunner

from autotune import api, cli, request
from autotune.tuning import loop
from autotune.errors import FieldError, FieldSpecError, FieldValueError, KnobError, SpecError
from autotune.declaration import declarations
from autotune.request import FIELDS, MeasureConfig, TuneConfig, WorkloadSpec
from autotune.units import DURATION_EXPECTED

SPEC = WorkloadSpec(model="autotune.examples:mlp")


def test_every_default_is_written_once_and_every_face_uses_it():
    job = TuneConfig(spec=SPEC)
    assert (job.trials, job.confirm, job.sampler, job.trial_timeout_s, job.numerics) == (
        request.DEFAULT_TRIALS, request.DEFAULT_CONFIRM, request.DEFAULT_SAMPLER, request.DEFAULT_TRIAL_TIMEOUT_S,
        request.DEFAULT_NUMERICS)
    tune = inspect.signature(api.tune).parameters
    assert (tune["trials"].default, tune["confirm"].default, tune["sampler"].default, tune["trial_timeout"].default,
            tune["numerics"].default) == (job.trials, job.confirm, job.sampler, job.trial_timeout_s, job.numerics)
    assert loop.Options().numerics == job.numerics
    assert inspect.signature(api.measure).parameters["trial_timeout"].default == job.trial_timeout_s
    options = {p.name: p for p in cli.run.params}
    assert ((options["trials"].default, options["confirm"].default, options["sampler"].default)
            == (job.trials, job.confirm, job.sampler))
    assert options["trial_timeout"].type.convert(options["trial_timeout"].default, None, None) == job.trial_timeout_s
    from autotune.tuning import preparation
    from autotune.store import Store

    tuner = loop.Options()
    live, _ = preparation.open_live(job, Store("sqlite:///:memory:"), "s", {})  # the study the loop writes: its grace
    assert (tuner.trials, tuner.race_rounds, live.grace_s) == (job.trials, job.confirm, job.stale_grace_s)
    from autotune.trial.runner import Runner

    assert inspect.signature(Runner).parameters["timeout_s"].default == job.trial_timeout_s


def test_the_stale_grace_derives_from_the_trial_timeout():
    from autotune.tuning import preparation
    from autotune.store import Store

    assert TuneConfig(spec=SPEC, trial_timeout_s=100).stale_grace_s == 260
    job = TuneConfig(spec=SPEC, trial_timeout_s=100, confirm=3)
    options = loop.Options.of(job, max_memory_bytes=None)
    # one grace, set where the study is opened
    live, _ = preparation.open_live(job, Store("sqlite:///:memory:"), "s", {})
    assert (live.grace_s, options.race_rounds) == (260, 3)
    assert loop.Options.of(TuneConfig(spec=SPEC, confirm=3), max_memory_bytes=None, race=False).race_rounds == 0


@pytest.mark.parametrize("field, value, message", [
    ("trials", 0, "trial budget"), ("trials", 2.5, "trial budget"), ("trials", True, "trial budget"),
    ("confirm", 51, "race's rounds"), ("confirm", -1, "race's rounds"),
    ("max_memory_bytes", 0, "memory budget"), ("max_memory_bytes", -5, "memory budget"),
    ("max_memory_bytes", 0.5, "memory budget"),
    ("time_budget_s", 0, "time budget"), ("trial_timeout_s", -1, "trial timeout"),
    ("trial_timeout_s", float("nan"), "trial timeout"),
    ("global_batch", 0, "global batch"), ("sampler", "cmaes", "sampler"), ("seed", "0", "seed"), ("space", "", "space"),
    ("quick", "yes", "quick"), ("early_stop", None, "early_stop"), ("batch_ceiling", "auto", "batch_ceiling"),
    ("numerics", "loose", "numerics check"),
])
def test_a_bad_value_is_refused_once_naming_the_field(field, value, message):
    with pytest.raises(FieldValueError, match=message) as info:
        TuneConfig(spec=SPEC, **{field: value})
    assert isinstance(info.value, KnobError) and info.value.field == field
    assert f"({field}=)" in str(info.value) or str(info.value).startswith(f"{field}= ")  # the request's own word for it
    assert "--" not in str(info.value)


def test_a_config_is_frozen_and_round_trips_through_a_study():
    job = TuneConfig(spec=WorkloadSpec(model="m:f", model_args=(("width", 8),)), trials=5, max_memory_bytes=1 << 30,
                     seed=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.trials = 6  # type: ignore[misc]
    assert TuneConfig.from_dict(job.to_dict()) == job
    assert TuneConfig.from_dict({**job.to_dict(), "a_field_from_a_newer_version": 1}) == job


@pytest.mark.parametrize("spec, message", [({"model": ""}, "model"), ({"model": "m:f", "num_classes": 1}, "classes"),
                                           ({"model": "m:f", "task": "finetune"}, "task")])
def test_a_bad_workload_is_refused(spec, message):
    with pytest.raises((KnobError, SpecError), match=message):
        WorkloadSpec(**spec)


def test_the_cli_and_the_api_refuse_a_zero_memory_budget_alike(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(cli.main, ["run", "--model", "autotune.examples:mlp", "--max-memory", "0"])
    assert out.exit_code == 2 and "--max-memory" in out.output and "must be positive" in out.output
    assert out.output.strip().count("\n") == 0
    with pytest.raises(KnobError, match="must be positive"):
        api.tune("autotune.examples:mlp", max_memory=0, progress=False)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- one declaration, every surface

#: The declared fields each surface shows (a workload's, a job's or a measurement's, and where it runs).
WORKLOAD = [n for n in declarations(WorkloadSpec)]
JOB = [n for n in declarations(TuneConfig)]
MEASUREMENT = [n for n in declarations(MeasureConfig)]
WHERE = ["study", "storage", "device"]
HERE = ["workers", "devices"]  # how a run measures on this machine: run's and tune()'s (a submitted job runs elsewhere)
CLI_FIELDS = {"run": WORKLOAD + JOB + WHERE + HERE, "submit": WORKLOAD + JOB + WHERE,
              "measure": WORKLOAD + MEASUREMENT + ["device"], "worker": WHERE}
API_FIELDS = {"tune": WORKLOAD + JOB + WHERE + HERE, "measure": WORKLOAD + MEASUREMENT + ["device"]}

#: What a surface has beyond the declared fields, and why (a new option or argument must say why here).
CLI_ONLY = {
    ("run", "seq_len"): "sugar for --model-arg seq_len=N on hf: models (tune() takes model_args={'seq_len': N})",
    ("submit", "seq_len"): "as run's",
    ("measure", "seq_len"): "as run's",
    ("measure", "assignments"): "--set KNOB=VALUE: the knob values (measure()'s config), checked by the knob registry",
    ("measure", "as_json"): "--json: how the command prints (measure() returns the results)",
    ("worker", "all_jobs"): "the daemon's own setting: every submitted job",
    ("worker", "cpus"): "the worker process's own cores",
    ("worker", "no_race"): "set by run --workers for the processes it starts",
    ("worker", "poll"): "the daemon's own setting: how often it looks for new jobs",
    ("worker", "exit_when_idle"): "the daemon's own setting",
}
API_ONLY = {
    ("tune", "progress"): "a notebook may want silence; the command line always shows progress",
    ("measure", "config"): "the knob values (the command's --set), checked by the knob registry",
    ("tune", "seq_len"): "the command's --seq-len: a model argument of hf: models (request.with_seq_len), no field",
    ("measure", "seq_len"): "as tune's",
}
#: Where an API default differs from the declared one, and why.
API_DEFAULTS = {
    ("tune", "model"): (None, "model=None with study=NAME resumes that study's own workload"),
    ("tune", "model_args"): (None, "None: no arguments (a dict, or KEY=VALUE strings as on the command line)"),
    ("measure", "model_args"): (None, "as tune's"),
}


@pytest.mark.parametrize("command", sorted(CLI_FIELDS))
def test_every_option_is_a_declared_field_or_says_why_not(command):
    """Each declared field is an option of the command: the declared flag, the field's keyword as its name, the
    declared help and default; every other option is listed in CLI_ONLY with its reason."""
    params = {p.name: p for p in getattr(cli, command).params}
    for name in CLI_FIELDS[command]:
        declared = FIELDS[name]
        option = params.pop(declared.word, None)
        assert option is not None, f"{command}: the field {name} has no option"
        assert declared.cli in option.opts, (command, name, option.opts)
        assert option.help.startswith(declared.help_for(command)), (command, name)
        if declared.required:
            assert option.required, (command, name)
        else:
            assert option.default == declared.default, (command, name, option.default, declared.default)
    extra = {name for name in params if (command, name) not in CLI_ONLY}
    assert not extra, f"{command}: options that are no declared field and say no reason in CLI_ONLY: {sorted(extra)}"


@pytest.mark.parametrize("function", sorted(API_FIELDS))
def test_every_api_argument_is_a_declared_field_or_says_why_not(function):
    """Each declared field is a keyword of tune()/measure() with the declared default; --no-early-stop's field
    included (it had no tune() counterpart)."""
    params = dict(inspect.signature(getattr(api, function)).parameters)
    for name in API_FIELDS[function]:
        declared = FIELDS[name]
        param = params.pop(declared.word, None)
        assert param is not None, f"{function}(): the field {name} has no argument {declared.word}="
        default, _ = API_DEFAULTS.get((function, name),
                                      (inspect.Parameter.empty if declared.required else declared.default, ""))
        assert param.default == default, (function, name, param.default, default)
    extra = {name for name in params if (function, name) not in API_ONLY}
    assert not extra, (f"{function}(): arguments that are no declared field and say no reason in API_ONLY: "
                       f"{sorted(extra)}")
    assert "early_stop" in inspect.signature(api.tune).parameters


def test_every_field_of_a_request_is_declared_or_internal():
    internal = {"spec": "the workload, built from its own declared fields",
                "synthetic_size": "how many synthetic samples a workload without data makes: no surface sets it",
                "pickled": "the bytes of a Python object tune() or measure() was given, made by the API"}
    for cls in (WorkloadSpec, TuneConfig, MeasureConfig):
        for f in dataclasses.fields(cls):
            assert f.name in declarations(cls) or f.name in internal, (cls.__name__, f.name)
    for declared in FIELDS.values():
        assert declared.flag and declared.help and declared.word.isidentifier(), declared.name
        if declared.unit is not None:  # a keyword that takes "2h" or "20GiB" drops the field's unit
            assert declared.name.startswith(declared.word + "_") and declared.name != declared.word


SPECIFIC = {"global_batch": 64, "seed": 3, "space": "cpu", "sampler": "tpe", "confirm": 0, "trials": 5, "quick": True,
            "early_stop": False, "warm_start": True, "batch_ceiling": True, "time_budget": "2h", "max_memory": "1GiB",
            "trial_timeout": "5m", "compile_limit": "90s", "numerics": "strict", "objectives": "speed,energy"}
SPECIFIC_FLAGS = ["--global-batch", "64", "--seed", "3", "--space", "cpu", "--sampler", "tpe", "--confirm", "0",
                  "--trials", "5", "--quick", "--no-early-stop", "--warm-start", "--batch-ceiling", "--time-budget",
                  "2h", "--max-memory", "1GiB", "--trial-timeout", "5m", "--compile-limit", "90s", "--numerics",
                  "strict", "--objectives", "speed,energy"]


def test_the_command_line_and_tune_build_the_same_job(tmp_path, monkeypatch):
    """Every field of the job set away from its default, once by options and once by keywords: submit stores the
    job tune() would have run."""
    from autotune.tuning import preparation
    from autotune.store import Store

    expected = TuneConfig.from_keywords(SPEC, **SPECIFIC)
    for name, declared in declarations(TuneConfig).items():  # the test covers every field
        assert getattr(expected, name) != declared.default, name
    assert (expected.time_budget_s, expected.max_memory_bytes, expected.trial_timeout_s) == (7200, 1 << 30, 300)

    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    out = CliRunner().invoke(cli.main, ["submit", "--model", SPEC.model, "--storage", url, "--study", "j",
                                        *SPECIFIC_FLAGS])
    assert out.exit_code == 0, out.output
    assert preparation.stored_config(Store(url).read("j")) == expected

    made: list[TuneConfig] = []

    def prepare(job, *args, **kwargs):
        made.append(job)
        raise KeyboardInterrupt

    monkeypatch.setattr(api.preparation, "prepare", prepare)
    with pytest.raises(KeyboardInterrupt):
        api.tune(SPEC.model, storage=f"sqlite:///{tmp_path / 'tune.db'}", study="t", progress=False, **SPECIFIC)
    assert made == [expected]


def test_a_request_reads_units_once_and_takes_only_its_keywords():
    job = TuneConfig.from_keywords(SPEC, time_budget="1h30m", max_memory=2048, trial_timeout=90)
    assert (job.time_budget_s, job.max_memory_bytes, job.trial_timeout_s) == (5400.0, 2048, 90.0)
    with pytest.raises(FieldValueError) as info:
        TuneConfig.from_keywords(SPEC, max_memory="lots")
    assert (info.value.field == "max_memory_bytes"
            and str(info.value).startswith("max_memory_bytes='lots': expected a size"))
    with pytest.raises(TypeError, match="time_budget_s"):
        TuneConfig.from_keywords(SPEC, time_budget_s=60)  # the field's keyword is time_budget
    measurement = MeasureConfig.from_keywords(SPEC, repeat=3, trial_timeout="2m")
    assert (measurement.repeat, measurement.trial_timeout_s, measurement.quick) == (3, 120.0, False)


BAD = [  # field, options, keywords; for the run command and tune() (or measure, for the measurement's own fields)
    ("trials", ["--trials", "0"], {"trials": 0}),
    ("confirm", ["--confirm", "51"], {"confirm": 51}),
    ("time_budget_s", ["--time-budget", "0"], {"time_budget": 0}),
    ("time_budget_s", ["--time-budget", "soon"], {"time_budget": "soon"}),
    ("max_memory_bytes", ["--max-memory", "0"], {"max_memory": 0}),
    ("trial_timeout_s", ["--trial-timeout", "0"], {"trial_timeout": 0}),
    ("sampler", ["--sampler", "cmaes"], {"sampler": "cmaes"}),
    ("numerics", ["--numerics", "loose"], {"numerics": "loose"}),
    ("global_batch", ["--global-batch", "0"], {"global_batch": 0}),
    ("space", ["--space", " "], {"space": " "}),
    ("num_classes", ["--num-classes", "1"], {"num_classes": 1}),
    ("task", ["--task", "fly"], {"task": "fly"}),
    ("model_args", ["--model-arg", "width"], {"model_args": ["width"]}),
    ("input_shape", ["--input-shape", "3,a"], {"input_shape": "3,a"}),
    ("repeat", ["--repeat", "0"], {"repeat": 0}),
]


@pytest.mark.parametrize("field, options, keywords", BAD, ids=[f"{b[0]}-{b[1][1]}" for b in BAD])
def test_each_surface_names_a_bad_field_in_its_own_words(field, options, keywords, tmp_path, monkeypatch):
    """One check, one problem, two words: the command line names the option, the API the keyword, from the
    declaration (no message rewritten); neither leaves a file behind."""
    monkeypatch.chdir(tmp_path)
    declared = FIELDS[field]
    command, function = ("measure", api.measure) if field in ("repeat",) else ("run", api.tune)
    out = CliRunner().invoke(cli.main, [command, "--model", SPEC.model, *options])
    assert out.exit_code == 2 and out.output.count("\n") == 1 and out.output.startswith("error: "), out.output
    cli_text = out.output.strip()[len("error: "):]
    assert declared.cli in cli_text and f"{declared.word}=" not in cli_text and f"({declared.word}" not in cli_text
    extra = {"progress": False} if function is api.tune else {}
    with pytest.raises(FieldError) as info:
        function(SPEC.model, **keywords, **extra)
    api_text = str(info.value)
    assert info.value.field == field and isinstance(info.value, FieldSpecError if declared.spec else FieldValueError)
    assert f"{declared.word}=" in api_text and "--" not in api_text, api_text
    if not keywords.get(declared.word) == "soon":  # the same words around the field's name: the problem is stated once
        cli_before, cli_after = cli_text.split(declared.cli, 1)
        api_before, api_after = api_text.split(f"{declared.word}=", 1)
        assert (cli_before, cli_after.lstrip()) == (api_before, api_after.lstrip()), (cli_text, api_text)
    else:  # text that reads as no duration: click's own line on the command line (with its --help hint), the same words
        assert cli_text.startswith(f"Invalid value for '{declared.cli}': 'soon': {DURATION_EXPECTED} (see autotune")
        assert api_text == f"{declared.word}='soon': {DURATION_EXPECTED}"
    assert list(tmp_path.iterdir()) == []


def test_a_message_names_a_field_in_each_surfaces_words_from_its_declaration():
    """request.option: the command line's words from the declared flag, Python's from the declared keyword, for
    every field with an option (by its name or its keyword); a pickled object reads by its own name in Python."""
    from autotune.errors import in_words

    def python(name: str) -> str:
        return request.declared(name).word

    for name, declared in {**FIELDS, **request.NAMED}.items():
        if declared.cli is None:
            continue
        for key in {name, declared.word}:
            assert in_words(request.option(key)) == declared.cli
            assert in_words(request.option(key), python) == f"{declared.word}="
            assert in_words(request.option(key, 3)) == f"{declared.cli} 3"
            assert in_words(request.option(key, "a b", quoted=True), python) == f"{declared.word}='a b'"
    assert in_words(request.option("trial_timeout")) == "--trial-timeout"
    assert in_words(request.option("study", "mlp-2")) == "--study mlp-2"
    assert in_words(request.option("study", "mlp-2"), python) == "study='mlp-2'"
    spec = "pickled:test_x.<locals>.Net@" + "0" * 64
    assert in_words(request.option("model", spec, quoted=True)) == f"--model {spec!r}"
    assert in_words(request.option("model", spec, quoted=True), python) == "model=test_x.<locals>.Net"
    with pytest.raises(KeyError):
        request.option("no_such_field")


def test_the_named_arguments_are_the_commands_own_options():
    """--pick and --set are no fields of a request, but messages name them: their declared words are the CLI's
    options of export and measure, and the API's arguments of TuneResult.export and measure."""
    pick, config = request.NAMED["pick"], request.NAMED["config"]
    assert pick.cli in {o for p in cli.export.params for o in p.opts}
    assert config.cli in {o for p in cli.measure.params for o in p.opts}
    assert pick.word in inspect.signature(api.TuneResult.export).parameters
    assert config.word in inspect.signature(api.measure).parameters
    from autotune import knobs  # the knob registry (below the request) names --set itself: the same words
    with pytest.raises(KnobError) as info:
        knobs.parse_assignments(["precision"])
    assert str(info.value) == f"{config.cli} 'precision': expected name=value"
    assert str(api.in_python_words(info.value)) == f"{config.word}='precision': expected name=value"


def test_the_objectives_are_the_fronts_axes_and_a_cpu_has_no_energy_axis():
    from autotune.errors import FieldError
    from autotune.request import second_objective

    assert TuneConfig(SPEC).objectives == "speed,memory" and second_objective(None) == "memory"
    job = TuneConfig.from_keywords(SPEC, objectives="speed,energy")
    assert second_objective(job.objectives) == "energy"
    job.check_objectives("cuda:0")
    with pytest.raises(FieldError, match=r"needs an NVIDIA GPU's energy counter, and this run is on cpu"):
        job.check_objectives("cpu")
    with pytest.raises(FieldError, match=r"speed,power"):
        TuneConfig.from_keywords(SPEC, objectives="speed,power")
    out = CliRunner().invoke(cli.main, ["run", "--model", SPEC.model, "--objectives", "speed,power"])
    assert out.exit_code != 0 and "(--objectives) must be one of" in out.output and "Traceback" not in out.output
