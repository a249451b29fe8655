"""The one typed request: what a tuning job is, declared once, validated once, every default in one place.

A :class:`TuneConfig` holds a whole job: the workload (a :class:`WorkloadSpec`), the
search space, the budget and how to measure; a :class:`MeasureConfig` one configuration's
measurement. ``autotune run``, ``autotune submit``, ``autotune measure``, ``autotune.tune()``
and ``autotune.measure()`` only translate their arguments into one; :mod:`autotune.tuning.preparation`
and :mod:`autotune.tuning.loop` take it (or what derives from it) and nothing else. A job is
stored on its study (``job``), so a worker on another machine joins with nothing but a
study name and a storage URL.

Each field is declared once, beside its default (:class:`autotune.declaration.Declared`, in the field's
metadata): its CLI option, its Python keyword, its help, its unit and its rule. The CLI's
options are made from the declarations (:mod:`autotune.cli.options`), ``tune()`` and
``measure()`` are checked against them field by field (tests/test_request.py), and a value
a field cannot take raises one :class:`autotune.errors.FieldError` naming the field, which
each surface words as its own (``--trial-timeout``, ``trial_timeout=``). A message of any other
module that tells the user what to pass names the field through :func:`option`, a term with the
declaration's words (:mod:`autotune.errors`), never the command line's spelling.

Why: the job was spelled on every surface (click options, ``tune``'s parameters, a map
from options to keywords, the tuner's Options) and the copies drifted (the trial timeout
was 600 s in two places and 300 s in a third; ``--no-early-stop`` had no ``tune()``
counterpart; values were checked by click, by the API and here, in three wordings).

This module imports neither torch nor Optuna: the CLI reads its declarations before parsing.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterable, Mapping

from autotune.declaration import Declared, OneOf, Positive, Switch, Text, Whole, declarations, declare
from autotune.errors import SpecError, either, named

TASKS = ("train", "infer")
SAMPLERS = ("tpe", "gp", "random", "nsga2")
# the numerics check (autotune.evidence.numerics_answer): skipped, marks, or decides
NUMERICS_MODES = ("off", "warn", "strict")
DEFAULT_NUMERICS = "warn"
DEFAULT_SAMPLER = "gp"  # from benchmarks/search_efficiency.py: best share of the grid optimum after 20 trials
DEFAULT_TRIALS = 30
# rounds of the final race at most: it selects (the claim is measured apart, autotune.tuning.phases.confirm)
DEFAULT_CONFIRM = 8
MAX_CONFIRM = 50
MAX_TRIALS = 100_000
DEFAULT_TRIAL_TIMEOUT_S = 600.0
# A compiled configuration's first step (compilation; max-autotune's kernel benchmarks too) may take this long: a GPU
# study's first hour must not go to kernel autotuning (a max-autotune first step can run for many minutes).
DEFAULT_COMPILE_LIMIT_S = 180.0
DEFAULT_POLL_S = 30.0  # how often a worker --all looks for new jobs
MAX_REPEAT = 100  # measure --repeat: new processes at most
VERIFY_ROUNDS = (2, 4, 50)  # autotune verify's rounds: at least (an interval needs two of each), by default, at most
CUT_MARGIN = 0.25  # early stopping: a trial is cut when a front point is this much faster at no more memory (at least)
#: What ``autotune export --pick`` may take: the verdict's recommendation (the defaults when nothing beats them
#: beyond the noise), the fastest-looking point of the front, the smallest, or the balance of the two.
PICKS = ("recommended", "fastest", "smallest", "balanced")
DEFAULT_PICK = "recommended"
#: The Pareto front's axes (the study's two objectives): samples/s against peak memory, or against joules per sample
#: (an NVIDIA GPU's energy counter, autotune.machine.energy). Fixed when the study is made: a resume with others is
#: refused, as a changed space is.
OBJECTIVES = ("speed,memory", "speed,energy")
DEFAULT_OBJECTIVES = "speed,memory"


def second_objective(objectives: str | None) -> str:
    """The front's second axis of a study's ``objectives`` (``memory`` or ``energy``; ``memory`` for a study made
    before they were declared)."""
    return (objectives or DEFAULT_OBJECTIVES).split(",")[1]


# ---------------------------------------------------------------- the declaration (autotune.declaration), checked


def _check_declared(obj: Any) -> None:
    for name, declared in declarations(type(obj)).items():
        declared.check(getattr(obj, name))


def _from_keywords(cls: type, spec: WorkloadSpec, values: Mapping[str, Any]) -> Any:
    by_word = {d.word: d for d in declarations(cls).values()}
    unknown = sorted(set(values) - set(by_word))
    if unknown:
        raise TypeError(f"{cls.__name__} takes no {', '.join(unknown)}")
    return cls(spec=spec, **{by_word[word].name: by_word[word].read(value) for word, value in values.items()})


# ---------------------------------------------------------------- the workload

MAX_NAME = 200


def safe_name(text: str) -> str:
    """A study name made from any text (a model spec, a callable's name): what is not allowed becomes '-'
    (the rule: :func:`autotune.store.check_name`)."""
    name = re.sub(r"[^A-Za-z0-9._@-]+", "-", text).strip("-.@")[:MAX_NAME]
    return name or "study"


MODEL_HELP = ("Model factory, module:attr (returns an nn.Module or an autotune.Workload), or hf:<model_type> for a "
              "Hugging Face model built from its config (e.g. hf:gpt2; sizes with --model-arg).")


@dataclass(frozen=True)
class WorkloadSpec:
    """How to build a workload: picklable, stored with a study."""

    model: str = declare(what="the model", flag="--model", spec=True, help=MODEL_HELP,
                         rule=Text("is empty: name a factory as module:attr, or hf:<model_type>"))
    data: str | None = declare(None, flag="--data", spec=True,
                               help="Dataset factory, module:attr (else the workload's data or synthetic data).")
    model_args: tuple[tuple[str, Any], ...] = declare((), flag="--model-arg", spec=True, metavar="KEY=VALUE",
                                                      help="Keyword argument for the model factory (repeatable).")
    input_shape: tuple[int, ...] | None = declare(None, flag="--input-shape", spec=True,
                                                  help="Shape of one synthetic input sample, e.g. 3,224,224.")
    num_classes: int | None = declare(None, what="the number of classes", flag="--num-classes",
                                      rule=Whole(2, shown=False),
                                      help="Synthetic integer labels in [0, N).")
    task: str | None = declare(None, what="the task", flag="--task", rule=OneOf(TASKS),  # overrides the workload's own
                               help="Override the workload's task.")
    synthetic_size: int = 1 << 16
    # ``pickled:<name>@<sha256>`` spec -> base64 of the cloudpickled object (autotune.tune/measure with a callable)
    pickled: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        _check_declared(self)

    def default_study_name(self) -> str:
        """The study a run of this workload resumes when no ``--study`` is given: the model's name, and, when
        anything else sets this workload apart (model arguments, data, shapes, task, a Python object's code), a
        digest of it, so that unrelated models and changed arguments never share a study by accident.
        ``mypkg.models:build`` -> ``mypkg.models-build``; with ``--model-arg width=8`` ->
        ``mypkg.models-build-1a2b3c4d``."""
        pickled = pickled_name(self.model) is not None
        model = pickled_name(self.model) or self.model
        name = safe_name(model.replace(":", "-").replace("/", "-"))
        identity = self.to_dict(payload=False)
        if pickled or any(v for k, v in identity.items() if k != "model"):
            digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:8]
            name = f"{name[:MAX_NAME - 9]}-{digest}"
        return name

    def to_dict(self, payload: bool = True) -> dict[str, Any]:
        """The spec as JSON. ``payload=False`` leaves out the pickled bytes: the workload's name, not its bytes
        (what a study records as its ``workload`` and compares on a resume)."""
        out = {
            "model": self.model,
            "data": self.data,
            "model_args": {k: v for k, v in self.model_args},
            "input_shape": list(self.input_shape) if self.input_shape else None,
            "num_classes": self.num_classes,
            "task": self.task,
        }
        if self.pickled and payload:
            out["pickled"] = dict(self.pickled)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WorkloadSpec:
        return cls(
            model=d["model"],
            data=d.get("data"),
            model_args=tuple(sorted((d.get("model_args") or {}).items())),
            input_shape=tuple(d["input_shape"]) if d.get("input_shape") else None,
            num_classes=d.get("num_classes"),
            task=d.get("task"),
            pickled=tuple(sorted((d.get("pickled") or {}).items())),
        )


def pickled_name(spec: Any) -> str | None:
    """The own name of the object a ``pickled:<name>@<sha256>`` spec carries (``Net``, ``<locals>.factory``);
    None for any other spec."""
    if not isinstance(spec, str) or not spec.startswith("pickled:"):
        return None
    return spec[len("pickled:"):].rsplit("@", 1)[0]


def parse_model_args(items: Iterable[str]) -> tuple[tuple[str, Any], ...]:
    """``key=value`` strings into keyword arguments (values as Python literals when they parse)."""
    out: dict[str, Any] = {}
    model_args = FIELDS["model_args"]
    for item in items:
        if "=" not in item:
            raise model_args.error("expected key=value", item, valued=True)
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key.isidentifier():
            raise model_args.error(f"{key!r} is not a valid argument name", item, valued=True)
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        out[key] = value
    return tuple(sorted(out.items()))


def parse_shape(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    input_shape = FIELDS["input_shape"]
    try:
        shape = tuple(int(p) for p in text.replace("x", ",").split(",") if p.strip())
    except ValueError:
        raise input_shape.error("expected comma-separated integers, e.g. 3,32,32", text, valued=True) from None
    if not shape or any(d <= 0 for d in shape):
        raise input_shape.error("expected positive integers, e.g. 3,32,32", text, valued=True)
    return shape


# ---------------------------------------------------------------- the job


def stale_grace(trial_timeout_s: float) -> float:
    """How long a trial of another host may go without a sign of life before it is taken as stale:
    two trial timeouts and a minute (a trial is killed after one timeout; the second covers the probe)."""
    return 2 * trial_timeout_s + 60


@dataclass(frozen=True)
class TuneConfig:
    """A tuning job: what to tune and how (everything but where: the study name and the store).

    Validated on construction, by each field's declared rule; every field's default is the
    product's default. Durations are seconds and sizes bytes here: :meth:`from_keywords`
    (what the CLI and :func:`autotune.tune` call) reads ``"2h"`` or ``"20GiB"`` into them.
    """

    spec: WorkloadSpec
    space: str | None = declare(  # a built-in space's name or a TOML path; default: 'cpu' on a CPU, 'default' on a GPU
        None, what="the space", flag="--space", rule=Text("must name a space or a TOML file, not {value!r}"),
        help="A search space: a name in search_spaces/ or a TOML path (default: 'default' on a GPU, 'cpu' on a CPU).")
    trials: int = declare(
        DEFAULT_TRIALS, what="the trial budget", flag="--trials", rule=Whole(1, MAX_TRIALS), show_default=True,
        help="Measured configurations the study should hold; a resumed study goes on to this total.",
        help_in={"submit": "Measured configurations per hardware kind."})
    time_budget_s: float | None = declare(
        None, what="the time budget", flag="--time-budget", keyword="time_budget", unit="duration", rule=Positive(),
        help="Stop starting trials after this long (e.g. 2h, 30m).",
        help_in={"submit": "Stop starting trials this long after a kind's study starts."})
    max_memory_bytes: int | None = declare(
        None, what="the memory budget", flag="--max-memory", keyword="max_memory", unit="size",
        rule=Positive(whole=True),
        help="Peak-memory budget, a real constraint (e.g. 20GiB).")
    global_batch: int | None = declare(
        None, what="the global batch", flag="--global-batch", rule=Whole(1),
        help="Keep this effective batch constant (gradient accumulation).",
        help_in={"measure": "Keep this effective batch through gradient accumulation."})
    sampler: str = declare(
        DEFAULT_SAMPLER, what="the sampler", flag="--sampler", rule=OneOf(SAMPLERS), show_default=True,
        help="gp (default: best in benchmarks/search_efficiency.py), tpe, nsga2 or random.")
    seed: int | None = declare(
        None, what="the seed", flag="--seed", rule=Whole(),
        help="Sampler seed, for the process that creates the study (workers that join it, and resumed runs, draw their "
             "own so that they do not propose the same configurations).")
    quick: bool = declare(
        False, flag="--quick", rule=Switch(), help="Short measurement windows (smoke runs; noisier figures).",
        help_in={"measure": "Short windows (for smoke tests; noisier figures)."})
    early_stop: bool = declare(True, flag="--no-early-stop", rule=Switch(), help="Never cut a dominated trial short.")
    confirm: int = declare(
        DEFAULT_CONFIRM, what="the race's rounds", flag="--confirm", rule=Whole(0, MAX_CONFIRM), show_default=True,
        help="Rounds of the final race at most: the configurations tied with the fastest and the baseline measured "
             "again, interleaved, until one is chosen; its claim is then measured apart (0: no race and no claim; "
             "figures then rest on single measurements).")
    numerics: str = declare(
        DEFAULT_NUMERICS, what="the numerics check", flag="--numerics", rule=OneOf(NUMERICS_MODES), show_default=True,
        help="After the verdict, train the recommendation beside the defaults from the same weights on the same "
             "samples and compare the losses: warn marks a recommendation whose numerics differ, strict recommends "
             "the fastest configuration whose numerics hold, off skips the check.")
    trial_timeout_s: float = declare(
        DEFAULT_TRIAL_TIMEOUT_S, what="the trial timeout", flag="--trial-timeout", keyword="trial_timeout",
        unit="duration", rule=Positive(), show_default=True, help="Kill a trial after this long (e.g. 300, 5m).")
    compile_limit_s: float = declare(
        DEFAULT_COMPILE_LIMIT_S, what="the compile limit", flag="--compile-limit", keyword="compile_limit",
        unit="duration", rule=Positive(), show_default=True,
        help="Stop a compiled configuration whose first step (the compilation, max-autotune's kernel benchmarks "
             "included) runs longer than this; it is recorded as too slow and the search steers away (e.g. 3m).")
    batch_ceiling: bool | None = declare(  # probe the largest batch that fits; None: on a GPU or with a memory budget
        None, flag="--batch-ceiling/--no-batch-ceiling", rule=Switch(maybe=True),
        help="First find the largest batch that fits (doubling, then bisection, in isolated trials) and search no "
             "batch above it (default: on a GPU, or with --max-memory).")
    objectives: str = declare(  # the front's axes, fixed with the study (autotune.store.matching refuses a change)
        DEFAULT_OBJECTIVES, what="the objectives", flag="--objectives", rule=OneOf(OBJECTIVES), show_default=True,
        help="The Pareto front's axes, fixed when the study is made: speed,memory (samples/s against peak memory) or "
             "speed,energy (against joules per sample, read from an NVIDIA GPU's energy counter; pip install "
             "'autotune[gpu]').")
    warm_start: bool = declare(  # a new study first measures earlier studies' winners on this kind of machine
        False, flag="--warm-start/--no-warm-start", rule=Switch(), show_default=True,
        help="A new study first measures the winners of earlier studies in the same storage on this kind of machine "
             "(after the baseline and the recipe), before the sampler takes over. Off by default: across models it "
             "bought nothing (benchmarks/warm_start.py); for a study of the same model again it pays.")

    def __post_init__(self) -> None:
        if not isinstance(self.spec, WorkloadSpec):
            raise SpecError(f"a tuning job needs a WorkloadSpec, not {type(self.spec).__name__}")
        _check_declared(self)

    @classmethod
    def from_keywords(cls, spec: WorkloadSpec, **values: Any) -> TuneConfig:
        """The job from a surface's values, keyed by the fields' keywords (``trials``, ``time_budget``): what the
        CLI and :func:`autotune.tune` call. Durations and sizes may be text (``"2h"``, ``"20GiB"``) or numbers;
        a field not given takes its default."""
        return _from_keywords(cls, spec, values)

    @property
    def stale_grace_s(self) -> float:
        return stale_grace(self.trial_timeout_s)

    def space_name(self, device: str) -> str:
        return self.space or ("cpu" if device == "cpu" else "default")

    def check_objectives(self, device: str) -> None:
        """Refuse ``speed,energy`` where no energy counter is read (a CPU): its front would have no second axis."""
        if second_objective(self.objectives) == "energy" and not device.startswith("cuda"):
            raise FIELDS["objectives"].error(f"needs an NVIDIA GPU's energy counter, and this run is on {device} "
                                             "(use speed,memory)", self.objectives, valued=True)

    def probes_ceiling(self, device: str) -> bool:
        """Whether to find the batch ceiling before searching batch sizes (see :mod:`autotune.tuning.ceiling_probe`)."""
        if self.batch_ceiling is not None:
            return self.batch_ceiling
        return device != "cpu" or self.max_memory_bytes is not None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["spec"] = self.spec.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TuneConfig:
        """A stored job (a study's ``job`` attribute); fields a newer version added take their defaults."""
        names = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in d.items() if k in names and k != "spec"}
        return cls(spec=WorkloadSpec.from_dict(d["spec"]), **kwargs)


@dataclass(frozen=True)
class MeasureConfig:
    """One configuration's measurement (``autotune measure``, :func:`autotune.measure`): the workload and how to
    measure it. Its fields are the job's (the same declarations), and the number of runs."""

    spec: WorkloadSpec
    quick: bool = field(default=False, metadata=TuneConfig.__dataclass_fields__["quick"].metadata)
    global_batch: int | None = field(default=None, metadata=TuneConfig.__dataclass_fields__["global_batch"].metadata)
    trial_timeout_s: float = field(default=DEFAULT_TRIAL_TIMEOUT_S,
                                   metadata=TuneConfig.__dataclass_fields__["trial_timeout_s"].metadata)
    repeat: int = declare(1, what="the number of runs", flag="--repeat", rule=Whole(1, MAX_REPEAT), show_default=True,
                          help="Measure N times, each in a new process, and report the spread.")

    def __post_init__(self) -> None:
        if not isinstance(self.spec, WorkloadSpec):
            raise SpecError(f"a measurement needs a WorkloadSpec, not {type(self.spec).__name__}")
        _check_declared(self)

    @classmethod
    def from_keywords(cls, spec: WorkloadSpec, **values: Any) -> MeasureConfig:
        """The measurement from a surface's values, keyed by the fields' keywords (as
        :meth:`TuneConfig.from_keywords`)."""
        return _from_keywords(cls, spec, values)


# ---------------------------------------------------------------- where a job runs

#: Not fields of a job (a job is the same wherever it runs), but named on the same surfaces: declared here so that
#: the CLI and the API name them alike. Their values are checked where they are used (autotune.store,
#: autotune.machine.hardware).
WHERE: dict[str, Declared] = {
    "study": Declared(
        flag="--study", name="study", default=None, help="Study name (default: derived from --model).",
        help_in={"submit": "The job's name (default: derived from --model); studies are named JOB@KIND.",
                 "worker": "The study to join (made by run or submit)."}),
    "storage": Declared(
        flag="--storage", name="storage", default=None, help="Optuna storage URL (default: sqlite:///studies/<study>.db).",
        help_in={"submit": "The shared storage URL the fleet's workers read.",
                 "worker": "The shared storage URL (PostgreSQL, MySQL, journal:PATH, "
                           "or a SQLite file on this machine)."}),
    "device": Declared(
        flag="--device", name="device", default=None,
        help="cpu, cuda or cuda:N (default: cuda:0 if there is one, else cpu)."),
    "workers": Declared(
        what="the workers", flag="--workers", name="workers", default=1, rule=Whole(1), show_default=True,
        help="Trials at once on this machine, each worker pinned to its share of the cores."),
    "devices": Declared(
        what="the GPUs", flag="--devices", name="devices", default=None,
        help="GPUs to use at once, e.g. 0,1,2,3 or 0-7: one trial per GPU (a trial of N ranks takes N), each "
             "trial sees only its GPUs (and a share of the cores)."),
}

#: Every declared field by name: the workload's, the job's, the measurement's and where a job runs.
FIELDS: dict[str, Declared] = {**declarations(WorkloadSpec), **declarations(TuneConfig), **declarations(MeasureConfig),
                               **WHERE}

#: Named on both surfaces, yet no field of a request: what one command takes (``export --pick`` and
#: ``TuneResult.export(pick=)``; ``measure --set`` and ``measure(config=)``), declared for their words alone.
NAMED: dict[str, Declared] = {
    "pick": Declared(flag="--pick", name="pick", default=DEFAULT_PICK),
    "config": Declared(flag="--set", keyword="config", name="config"),
    "seq_len": Declared(flag="--seq-len", name="seq_len"),  # folded into model_args (with_seq_len)
}

# ---------------------------------------------------------------- the declaration's words, in messages

_BY_NAME: dict[str, Declared] = {**{d.word: d for d in (*FIELDS.values(), *NAMED.values())}, **FIELDS, **NAMED}
_NO_VALUE = object()


def declared(name: str) -> Declared:
    """A declared field (or named argument) by its name or its keyword: ``trial_timeout_s`` or ``trial_timeout``."""
    return _BY_NAME[name]


def option(name: str, value: Any = _NO_VALUE, *, quoted: bool = False) -> str:
    """A field named in a message, as a term each surface says in its own words (:func:`autotune.errors.named`),
    from the field's declaration: ``--trial-timeout`` on the command line, ``trial_timeout=`` in Python. With a
    value: ``--study mlp-2`` (``quoted``: ``--device 'cuda:3'``) and ``study='mlp-2'``; a spec that carries a
    pickled object reads by the object's own name in Python (``model=Net``), as it was passed."""
    field = declared(name)
    flag = field.cli
    assert flag is not None, f"{field.name} has no option to name"
    if value is _NO_VALUE:
        return named(field.name, flag)
    return named(field.name, f"{flag} {value!r}" if quoted else f"{flag} {value}", pickled_name(value) or repr(value))


def with_seq_len(model: str, model_args: tuple[tuple[str, Any], ...], seq_len: Any) -> tuple[tuple[str, Any], ...]:
    """``model_args`` with ``seq_len`` (tokens per synthetic sample of an ``hf:`` model: ``--seq-len``, ``seq_len=``)
    among them, as ``--model-arg seq_len=N`` would put it; unchanged for None. Refused for any other model (its factory
    takes what it takes, through the model's own arguments), beside a ``seq_len`` model argument, and when not a
    positive integer."""
    if seq_len is None:
        return model_args
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise SpecError(f"{option('seq_len', seq_len)}: expected a positive integer")
    if not model.startswith("hf:"):
        shown = pickled_name(model) or model
        raise SpecError(f"{option('seq_len')} applies to hf: models; for {shown} pass what the factory takes with "
                        f"{option('model_args')}")
    if any(key == "seq_len" for key, _ in model_args):
        both = either("--model-arg seq_len=...", "model_args={'seq_len': ...}")
        raise SpecError(f"{option('seq_len')} and {both} both given: pass one")
    return tuple(sorted((*model_args, ("seq_len", seq_len))))
