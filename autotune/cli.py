"""The ``autotune`` command line: a thin layer over the other modules.

Typed errors (:mod:`autotune.errors`) become one line on stderr and a non-zero
exit here, and only here; no user error prints a traceback.
"""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any, Callable

import click

from autotune import knobs
from autotune.config import PICKS
from autotune.errors import AutotuneError, KnobError, SpecError
from autotune.frameworks import FORMATS
from autotune.progress import Progress, console
from autotune.study import DEFAULT_SAMPLER, SAMPLERS
from autotune.units import format_bytes, format_duration, format_flops, format_rate, parse_duration


class AutotuneGroup(click.Group):
    """Turns AutotuneError into ``error: ...`` on stderr and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AutotuneError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)


def workload_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options that name a workload, shared by measure and run."""
    options = [
        click.option("--model", "model", required=True, help="Model factory, module:attr (returns an nn.Module or an autotune.Workload)."),
        click.option("--data", "data", default=None, help="Dataset factory, module:attr (else the workload's data or synthetic data)."),
        click.option("--model-arg", "model_args", multiple=True, metavar="KEY=VALUE", help="Keyword argument for the model factory (repeatable)."),
        click.option("--seq-len", type=click.IntRange(1), default=None, help="Tokens per synthetic sample of an hf: model (as --model-arg seq_len=N)."),
        click.option("--input-shape", default=None, help="Shape of one synthetic input sample, e.g. 3,224,224."),
        click.option("--num-classes", type=int, default=None, help="Synthetic integer labels in [0, N)."),
        click.option("--task", type=click.Choice(["train", "infer"]), default=None, help="Override the workload's task."),
        click.option("--device", default=None, help="cpu, cuda or cuda:N (default: cuda:0 if there is one, else cpu)."),
        click.option("--trial-timeout", default="10m", show_default=True, help="Kill a trial after this long (e.g. 300, 5m)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def make_spec(model: str, data: str | None, model_args: tuple[str, ...], input_shape: str | None, num_classes: int | None, task: str | None) -> Any:
    from autotune.workload import WorkloadSpec, import_spec, parse_model_args, parse_shape

    spec = WorkloadSpec(
        model=model,
        data=data,
        model_args=parse_model_args(model_args),
        input_shape=parse_shape(input_shape),
        num_classes=num_classes,
        task=task,
    )
    # Syntax errors of the specs are reported before any process starts.
    for value, option in ((model, "--model"), (data, "--data")):
        if value is not None and value.count(":") != 1:
            import_spec(value, option)
    if num_classes is not None and num_classes < 2:
        raise KnobError("--num-classes must be at least 2")
    return spec


def workload_from(options: dict[str, Any]) -> tuple[Any, str, float]:
    """The workload spec, device and trial timeout from the shared workload options."""
    model_args = tuple(options["model_args"])
    if options.get("seq_len") is not None:
        if not options["model"].startswith("hf:"):
            raise SpecError(f"--seq-len applies to hf: models; for {options['model']} pass what the factory takes with --model-arg")
        if any(a.split("=", 1)[0].strip() == "seq_len" for a in model_args):
            raise SpecError("--seq-len and --model-arg seq_len=... both given: pass one")
        model_args += (f"seq_len={options['seq_len']}",)
    spec = make_spec(options["model"], options["data"], model_args, options["input_shape"], options["num_classes"], options["task"])
    timeout = parse_duration(options["trial_timeout"], "--trial-timeout")
    return spec, resolve_device(options["device"]), timeout


def storage_option(what: str, required: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--storage``, the same on every command: the URL, or the AUTOTUNE_STORAGE variable, which keeps a password
    off the command line (where `ps` and the shell's history show it)."""
    return click.option("--storage", default=None, required=required, envvar="AUTOTUNE_STORAGE", show_envvar=True,
                        help=what + " Give a password in the variable, or in ~/.pgpass, rather than here.")


def job_options(trials_help: str, time_budget_help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options that say how to tune a workload (a :class:`autotune.tuning.Job`), shared by run and submit."""
    options = [
        click.option("--space", "space_name", default=None, help="A search space: a name in search_spaces/ or a TOML path (default: 'default' on a GPU, 'cpu' on a CPU)."),
        click.option("--trials", type=click.IntRange(1, 100000), default=30, show_default=True, help=trials_help),
        click.option("--time-budget", default=None, help=time_budget_help),
        click.option("--max-memory", default=None, help="Peak-memory budget, a real constraint (e.g. 20GiB)."),
        click.option("--global-batch", type=click.IntRange(min=1), default=None, help="Keep this effective batch constant (gradient accumulation)."),
        click.option("--sampler", type=click.Choice(SAMPLERS), default=DEFAULT_SAMPLER, show_default=True, help="gp (default: best in benchmarks/search_efficiency.py), tpe, nsga2 or random."),
        click.option("--seed", type=int, default=None, help="Sampler seed, for the process that creates the study (workers that join it, and resumed runs, draw their own so that they do not propose the same configurations)."),
        click.option("--quick", is_flag=True, help="Short measurement windows (smoke runs; noisier figures)."),
        click.option("--no-early-stop", is_flag=True, help="Never cut a dominated trial short."),
        click.option("--confirm", type=click.IntRange(0, 50), default=8, show_default=True, help="Rounds of the final race at most: the configurations tied with the fastest and the baseline measured again, interleaved, until they separate (0: no race; claims then rest on single measurements)."),
        click.option("--batch-ceiling/--no-batch-ceiling", "batch_ceiling", default=None, help="First find the largest batch that fits (doubling, then bisection, in isolated trials) and search no batch above it (default: on a GPU, or with --max-memory)."),
    ]

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def job_from(spec: Any, timeout: float, options: dict[str, Any]) -> Any:
    """The tuning job from the shared job options."""
    from autotune import tuning
    from autotune.units import parse_size

    return tuning.Job(
        spec=spec, space=options["space_name"], trials=options["trials"],
        time_budget_s=parse_duration(options["time_budget"], "--time-budget") if options["time_budget"] else None,
        max_memory_bytes=parse_size(options["max_memory"], "--max-memory") if options["max_memory"] else None,
        global_batch=options["global_batch"], sampler=options["sampler"], seed=options["seed"], quick=options["quick"],
        early_stop=not options["no_early_stop"], confirm=options["confirm"], trial_timeout_s=timeout,
        batch_ceiling=options["batch_ceiling"],
    )


def resolve_device(device: str | None) -> str:
    from autotune.hardware import check_device, default_device

    return check_device(device) if device else default_device()


@click.group(cls=AutotuneGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="autotune")
def main() -> None:
    """Find the fastest way to run a PyTorch model on this hardware.

    Every performance knob (precision, torch.compile, channels-last, DataLoader
    workers, batch size, ...) is a hyperparameter of an Optuna study; each trial is
    a short, isolated, profiled measurement of the real step.
    """


# ---------------------------------------------------------------- knobs


@main.command("knobs")
@click.option("--json", "as_json", is_flag=True, help="Print the registry as JSON.")
def knobs_cmd(as_json: bool) -> None:
    """List every knob: its values, PyTorch's default, and where it applies.

    \b
    Examples:
      autotune knobs
      autotune knobs --json > knobs.json
    """
    if as_json:
        rows = [
            {
                "name": k.name,
                "values": k.values_text(),
                "default": k.format(k.default_for()),
                "torch_default": k.torch_default,
                "applies": k.applies_text(),
                "stage": k.stage,
                "help": k.help,
            }
            for k in knobs.REGISTRY
        ]
        click.echo(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    table = Table(title="autotune knobs", show_lines=False)
    for col in ("knob", "values", "default", "applies", "how", "what"):
        table.add_column(col, overflow="fold")
    for k in knobs.REGISTRY:
        table.add_row(k.name, k.values_text(), k.format(k.default_for()), k.applies_text(), knobs.STAGE_HELP[k.stage], k.help)
    console().print(table)


# ---------------------------------------------------------------- measure


def _result_lines(res: Any) -> list[tuple[str, str]]:
    from autotune.result import OK

    lines = [("outcome", res.outcome), ("config", knobs.short(res.config) if res.config else "-")]
    for name, why in res.not_applicable.items():
        lines.append(("not applicable", f"{name}: {why}"))
    if res.outcome == OK:
        lines += [
            (
                "throughput",
                f"{format_rate(res.samples_per_s)} samples/s ± {100 * (res.samples_per_s_cv or 0):.1f}% "
                f"(median of {len(res.window_samples_per_s)} windows)",
            ),
            ("step time", f"{1000 * (res.step_time_s or 0):.1f} ms ({res.samples_per_step} samples)"),
            ("first step", f"{res.time_to_first_step_s:.2f} s (includes compilation)"),
            ("peak memory", format_bytes(res.peak_memory_bytes) + (" (CUDA reserved)" if res.device and res.device.startswith("cuda") else " (process tree RSS)")),
        ]
        if res.flops_per_sample:
            mfu = f", MFU {100 * res.mfu:.1f}%" if res.mfu is not None else ", MFU n/a (device peak unknown)"
            lines.append(("compute", f"{format_flops(res.flops_per_sample)}/sample, {format_flops(res.achieved_flops)}/s{mfu}"))
        prof = res.profile or {}
        lines.append(("data wait", f"{100 * prof.get('data_wait_share', 0):.1f}% of step time"))
        top = prof.get("top_ops") or []
        if top:
            lines.append(("top ops", ", ".join(f"{op['name']} {100 * op['share']:.0f}%" for op in top[:4])))
        lines.append(("trial", f"{format_duration(res.wall_s)} wall, {format_duration(res.overhead_s)} outside the steps"))
    elif res.error:
        lines.append(("error", f"{res.error.get('type', '')}: {res.error.get('message', '')}".strip(": ")))
        tail = [line for line in res.error.get("stderr_tail") or [] if line.strip()]
        if tail:
            lines.append(("stderr", tail[-1]))
    return lines


def _print_result(res: Any) -> None:
    width = max(len(k) for k, _ in _result_lines(res))
    for key, value in _result_lines(res):
        click.echo(f"{key:<{width}}  {value}")


@main.command()
@workload_options
@click.option("--set", "assignments", multiple=True, metavar="KNOB=VALUE", help="A knob value (repeatable); the rest stay at PyTorch's defaults.")
@click.option("--global-batch", type=click.IntRange(min=1), default=None, help="Keep this effective batch through gradient accumulation.")
@click.option("--repeat", type=click.IntRange(1, 100), default=1, show_default=True, help="Measure N times, each in a new process, and report the spread.")
@click.option("--quick", is_flag=True, help="Short windows (for smoke tests; noisier figures).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def measure(assignments: tuple[str, ...], global_batch: int | None, repeat: int, quick: bool, as_json: bool, **workload: Any) -> None:
    """Measure one configuration of a model in an isolated process.

    \b
    Examples:
      autotune measure --model autotune.examples:cnn --set precision=bf16 --set batch_size=64
      autotune measure --model mypkg.models:build --data mypkg.data:build --repeat 5 --json
      autotune measure --model hf:gpt2 --model-arg n_layer=2 --set compile=default --quick
    """
    from autotune.api import measure_spec
    from autotune.protocol import cv

    spec, dev, timeout = workload_from(workload)
    config = knobs.parse_assignments(assignments)

    def show(i: int, res: Any) -> None:
        if not as_json:
            if repeat > 1:
                click.echo(f"--- run {i + 1}/{repeat}")
            _print_result(res)

    results = measure_spec(spec, config, device=dev, quick=quick, repeat=repeat, global_batch=global_batch, timeout_s=timeout,
                           on_result=show)
    rates = [r.samples_per_s for r in results if r.ok and r.samples_per_s]
    if as_json:
        if repeat == 1:
            click.echo(results[0].to_json(indent=2))
        else:
            click.echo(
                json.dumps(
                    {
                        "runs": [r.to_dict() for r in results],
                        "samples_per_s_median": statistics.median(rates) if rates else None,
                        "samples_per_s_cv_across_runs": cv(rates) if len(rates) > 1 else None,
                    },
                    indent=2,
                    default=str,
                )
            )
    elif repeat > 1 and rates:
        click.echo(
            f"--- across {len(rates)} ok runs: median {format_rate(statistics.median(rates))} samples/s, "
            f"CV {100 * cv(rates):.2f}%, min {format_rate(min(rates))}, max {format_rate(max(rates))}"
        )
    if not all(r.ok for r in results):
        sys.exit(1)


# ---------------------------------------------------------------- run


def _storage_for(study: str, url: str | None) -> str:
    from autotune import storage

    return url or storage.default_url(study)


def _shown(url: str) -> str:
    """A storage URL as printed or written anywhere: its password masked."""
    from autotune import storage

    return storage.redact(url)


@main.command()
@workload_options
@job_options("Measured configurations the study should hold; a resumed study goes on to this total.",
             "Stop starting trials after this long (e.g. 2h, 30m).")
@click.option("--study", "study_name", default=None, help="Study name (default: derived from --model).")
@storage_option("Optuna storage URL (default: sqlite:///studies/<study>.db).")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True, help="Trials at once on this machine, each worker pinned to its share of the cores.")
@click.option("--devices", default=None, help="GPUs to use at once, e.g. 0,1,2,3: one trial per GPU, each trial sees only its GPU.")
def run(study_name: str | None, storage: str | None, workers: int, devices: str | None, **options: Any) -> None:
    """Tune a model: search the knob space; resume the study if it exists.

    \b
    Examples:
      autotune run --model autotune.examples:cnn --trials 30
      autotune run --model mypkg.models:build --data mypkg.data:build --time-budget 2h --max-memory 20GiB
      autotune run --model mypkg.models:build --workers 2 --study mynet      # two trials at a time, cores split
    """
    from autotune import tuning

    spec, dev, timeout = workload_from(options)
    gpus = _parse_devices(devices)
    job = job_from(spec, timeout, options)
    name = study_name or _default_study(spec)
    url = _storage_for(name, storage)
    parallel = workers > 1 or bool(gpus)
    if gpus:
        dev = "cuda:0"
    progress = Progress(job.trials, job.time_budget_s, 0)
    prepared = tuning.prepare(job, name, url, dev, on_trial=progress, on_repeat=progress.repeat, on_probe=_print_probe)
    progress.done = prepared.measured
    for line in prepared.opening(len(gpus) if gpus else workers):
        click.echo(line)
    summary = _until_stopped(lambda: _run_parallel(prepared, workers, gpus, dev) if parallel else prepared.run(), progress)
    click.echo(summary.text())
    _print_status(prepared.study, url)


def _print_probe(batch: int, outcome: str, peak: int | None) -> None:
    from autotune import ceiling

    click.echo(ceiling.probe_text(batch, outcome, peak))


def _parse_devices(devices: str | None) -> list[int]:
    if not devices:
        return []
    try:
        ids = [int(x) for x in devices.split(",") if x.strip()]
    except ValueError:
        raise KnobError(f"--devices {devices!r}: expected GPU numbers such as 0,1,2,3") from None
    from autotune.hardware import check_device

    for i in ids:
        check_device(f"cuda:{i}")
    return ids


def _default_study(spec: Any) -> str:
    from autotune import storage as stores

    return stores.default_study_name(spec.model)


def _until_stopped(work: Callable[[], Any], progress: Any = None) -> Any:
    """Run ``work`` with SIGTERM as Ctrl-C; an interrupted trial is recorded and queued again."""
    import signal

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        return work()
    except KeyboardInterrupt:
        if progress is not None:
            progress.close()
        click.echo("stopped: the running trial is recorded as interrupted and will be measured again. Run the same command to continue.", err=True)
        sys.exit(130)
    finally:
        signal.signal(signal.SIGTERM, previous)
        if progress is not None:
            progress.close()


def _run_parallel(prepared: Any, workers: int, gpus: list[int], dev: str) -> Any:
    """``run --workers K``: K worker processes measure; this one waits, then runs the final race."""
    import signal

    from autotune import daemon

    procs = daemon.spawn_local(prepared.name, prepared.url, workers, gpus, dev)
    try:
        for p in procs:
            p.wait()
    except KeyboardInterrupt:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait()
        raise
    prepared.tuner.options.poll_s = 0.5
    return prepared.run()  # the budget is spent: this records nothing new but runs the race and the verdict


@main.command()
@click.option("--device", default=None, help="cpu, cuda or cuda:N (default: cuda:0 if there is one, else cpu).")
@click.option("--study", "study_name", required=False, default=None, help="The study to join (made by run or submit).")
@storage_option("The shared storage URL (PostgreSQL, MySQL, journal:PATH, or a SQLite file on this machine).")
@click.option("--all", "all_jobs", is_flag=True, help="Be a daemon: work on every submitted job with budget left, and wait for more.")
@click.option("--cpus", default=None, help="Pin this worker to these cores, e.g. 0-3 or 0,2 (run --workers does it).")
@click.option("--no-race", is_flag=True, help="Leave the final race to another process (run --workers does it).")
@click.option("--poll", "poll", default="30s", show_default=True, help="With --all: how often to look for new jobs.")
@click.option("--exit-when-idle", is_flag=True, help="With --all: stop when no job has budget left instead of waiting.")
def worker(device: str | None, study_name: str | None, storage: str | None, all_jobs: bool, cpus: str | None, no_race: bool,
           poll: str, exit_when_idle: bool) -> None:
    """Measure trials of a shared study, or (--all) of every submitted job, until their budgets are spent.

    \b
    Examples:
      autotune worker --study mynet --storage postgresql://tuner@db/autotune
      autotune worker --all --storage postgresql://tuner@db/autotune          # the daemon
      autotune worker --all --storage journal:/shared/autotune.log --exit-when-idle
    """
    from autotune import daemon

    if not storage:
        raise KnobError("worker needs --storage URL (the storage the study or jobs live in)")
    if all_jobs == bool(study_name):
        raise KnobError("worker: give --study NAME to join one study, or --all to take every submitted job")
    if cpus:
        os_cpus = _parse_cpus(cpus)
        import os

        os.sched_setaffinity(0, os_cpus)
    dev = resolve_device(device)
    progress = Progress(0, None, 0)

    def log(line: str) -> None:
        click.echo(f"{_now()} {line}", err=False)

    def work() -> Any:
        if all_jobs:
            return daemon.serve(storage, dev, log, poll_s=parse_duration(poll, "--poll"), exit_when_idle=exit_when_idle,
                                on_trial=progress, on_repeat=progress.repeat)
        return daemon.work_on(study_name, storage, dev, log, race=not no_race, on_trial=progress, on_repeat=progress.repeat)

    import signal

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        work()
    except KeyboardInterrupt:
        click.echo(f"{_now()} stopped by a signal: the running trial is recorded as interrupted and queued again")
        return  # exit 0: a daemon stopped on purpose
    finally:
        signal.signal(signal.SIGTERM, previous)
    click.echo(f"{_now()} done: no budget left")


def _parse_cpus(text: str) -> set[int]:
    out: set[int] = set()
    try:
        for part in text.split(","):
            if "-" in part:
                lo, hi = part.split("-")
                out.update(range(int(lo), int(hi) + 1))
            elif part.strip():
                out.add(int(part))
    except ValueError:
        raise KnobError(f"--cpus {text!r}: expected cores such as 0-3 or 0,2") from None
    return out


def _now() -> str:
    import datetime as dt

    return dt.datetime.now().strftime("%H:%M:%S")


@main.command()
@workload_options
@job_options("Measured configurations per hardware kind.", "Stop starting trials this long after a kind's study starts.")
@click.option("--study", "study_name", default=None, help="The job's name (default: derived from --model); studies are named JOB@KIND.")
@storage_option("The shared storage URL the fleet's workers read.", required=True)
def submit(study_name: str | None, storage: str, **options: Any) -> None:
    """Record a tuning job in a shared storage and return at once; `autotune worker --all` daemons run it.

    \b
    Examples:
      autotune submit --model mypkg.models:build --trials 50 --storage postgresql://tuner@db/autotune
      autotune submit --model autotune.examples:cnn --study cnn-nightly --storage journal:/shared/autotune.log
    """
    from autotune import tuning

    spec, _, timeout = workload_from({**options, "device": "cpu"})
    job = job_from(spec, timeout, options)
    name = study_name or _default_study(spec)
    tuning.submit(job, name, storage)
    click.echo(f"submitted job {name!r} to {_shown(storage)}: {job.trials} trials per hardware kind; "
               f"workers (`autotune worker --all --storage ...`) will tune it as study {name}@<kind>")


# ---------------------------------------------------------------- list / status / export


def _status_doc(study: Any) -> dict[str, Any]:
    from autotune import ceiling
    from autotune import storage as stores
    from autotune.evidence import Evidence

    ev = Evidence.of(study)
    doc = stores.summary(study, ev)
    doc.update(ev.to_dict())
    doc["batch_ceiling"] = ceiling.describe(study.user_attrs)
    failures: dict[str, dict[str, Any]] = {}
    for t in study.get_trials(deepcopy=False):
        outcome = t.user_attrs.get("outcome")
        if outcome in (None, "ok", "skipped") or t.user_attrs.get("duplicate_of") is not None:
            continue
        entry = failures.setdefault(outcome, {"count": 0, "trials": [], "example": ""})
        entry["count"] += 1
        entry["trials"].append(t.number)
        entry["example"] = entry["example"] or (t.user_attrs.get("error") or {}).get("message", "")
    doc.update({"failures": failures, "device": study.user_attrs.get("device"), "time_spent_s": ev.time_spent()["wall_s"],
                "max_memory_bytes": study.user_attrs.get("max_memory_bytes"), "space": (study.user_attrs.get("space") or {}).get("name")})
    return doc


def _print_status(study: Any, url: str) -> None:
    from rich.table import Table

    from autotune import hardware

    doc = _status_doc(study)
    out = console()
    counts = ", ".join(f"{k} {v}" for k, v in sorted(doc["outcomes"].items(), key=lambda kv: -kv[1]))
    out.print(f"study {doc['study']} ({_shown(url)})", markup=False)
    out.print(f"workload {doc['workload'].get('model')}  device {doc['device']}  {hardware.short(doc['fingerprint'])}", markup=False)
    out.print(f"trials {doc['trials']}: {counts or 'none'}; time spent {format_duration(doc['time_spent_s'])}", markup=False)
    out.print(doc["noise_text"], markup=False)
    if doc["batch_ceiling"]:
        out.print(f"batch ceiling: {doc['batch_ceiling']['text']}", markup=False)
    table = Table(title="Pareto front: throughput vs peak memory (speed-up over the defaults, 90% interval)", title_justify="left")
    for col in ("trial", "knobs that differ from the defaults", "samples/s", "processes", "peak memory", "speed-up"):
        table.add_column(col, overflow="fold")
    for row in doc["front"]:
        changes = " ".join(f"{k}={knobs.KNOBS[k].format(v)}" for k, v in row["changes"].items()) or "defaults"
        speed = row["speedup"]["text"] if row["speedup"] else "-"
        table.add_row(f"#{row['trial']}", changes, format_rate(row["samples_per_s"]), str(row["processes"]), format_bytes(row["peak_memory_bytes"]), speed)
    out.print(table)
    if doc["failures"]:
        out.print("failures:", markup=False)
        for outcome, entry in doc["failures"].items():
            trials = ", ".join(f"#{n}" for n in entry["trials"][:8]) + (" ..." if len(entry["trials"]) > 8 else "")
            out.print(f"  {outcome}: {entry['count']} ({trials}) {entry['example'][:100]}", markup=False)
    out.print(f"verdict: {doc['verdict']['text']}", markup=False)


@main.command("list")
@storage_option("A storage URL (default: every studies/*.db).")
@click.option("--json", "as_json", is_flag=True)
def list_cmd(storage: str | None, as_json: bool) -> None:
    """List jobs and studies: budget, trials measured, running, failed, workers seen lately, speed-up.

    \b
    Examples:
      autotune list
      autotune list --storage postgresql://tuner@db/autotune
      autotune list --storage journal:/shared/autotune.log --json
    """
    from autotune import hardware
    from autotune import storage as stores

    from autotune import tuning

    urls = [storage] if storage else [f"sqlite:///{p}" for p in sorted(stores.STUDIES_DIR.glob("*.db"))]
    docs = []
    for url in urls:
        for doc in tuning.listing(url):
            doc["storage"] = _shown(url)
            docs.append(doc)
    if as_json:
        click.echo(json.dumps(docs, indent=2, default=str))
        return
    if not docs:
        click.echo("no studies" + (f" in {_shown(storage)}" if storage else " in studies/"))
        return
    from rich.table import Table

    table = Table()
    for col in ("study", "measured / budget", "running", "failed", "workers", "speed-up (90%)", "verdict", "machine", "storage"):
        table.add_column(col, overflow="fold")
    for d in docs:
        if d["kind"] == "job":
            table.add_row(f"{d['study']} (job)", f"- / {d['budget']} per kind", "-", "-", "-", "-",
                          f"studies: {', '.join(d['studies']) or 'none yet'}", "-", d["storage"])
            continue
        speed = d["speedup"]["text"] if d["speedup"] else "-"
        budget = f"{d['measured']} / {d['budget']}" if d.get("budget") else str(d["measured"])
        table.add_row(d["study"], budget, str(d["running"]), str(d["failed"]), str(d["workers_recently"]), speed,
                      d["verdict"].replace("_", " "), hardware.short(d["fingerprint"]), d["storage"])
    console().print(table)


@main.command()
@click.argument("study_name")
@storage_option("Storage URL (default: sqlite:///studies/<study>.db).")
@click.option("--json", "as_json", is_flag=True)
def status(study_name: str, storage: str | None, as_json: bool) -> None:
    """Progress, failures and the Pareto front of a study.

    \b
    Examples:
      autotune status mynet
      autotune status mynet --storage postgresql://tuner@db/autotune --json
    """
    from autotune import storage as stores

    url = _storage_for(study_name, storage)
    study = stores.load(study_name, url)
    if as_json:
        click.echo(json.dumps(_status_doc(study), indent=2, default=str))
    else:
        _print_status(study, url)


@main.command()
@click.argument("study_name")
@click.option("--pick", type=click.Choice(PICKS), default="fastest", show_default=True)
@click.option("--max-memory", default=None, help="Only front points within this peak memory (e.g. 20GiB).")
@storage_option("Storage URL (default: sqlite:///studies/<study>.db).")
@click.option("-o", "--output", default=None, help="Write the JSON here (default: print it).")
@click.option("--allow-no-gain", is_flag=True, help="With --pick fastest: export the fastest-looking configuration even when nothing beats the defaults beyond the noise (the verdict is recorded).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="json", show_default=True,
              help="json (autotune.load_config), hf-trainer (TrainingArguments), lightning (Trainer + DataLoader), accelerate (a config file).")
def export(study_name: str, pick: str, max_memory: str | None, storage: str | None, output: str | None, allow_no_gain: bool,
           fmt: str) -> None:
    """Export a configuration: JSON for autotune.load_config(), or arguments for Hugging Face Trainer,
    Lightning or Accelerate (what a framework cannot express is listed, never dropped).

    \b
    Examples:
      autotune export mynet --pick fastest -o best.json
      autotune export mynet --format hf-trainer -o training_args.py
      autotune export mynet --pick smallest --max-memory 20GiB --format lightning
    """
    from autotune import config as C
    from autotune import frameworks
    from autotune import storage as stores
    from autotune.units import parse_size

    frameworks.check_format(fmt)
    url = _storage_for(study_name, storage)
    study = stores.load(study_name, url)
    doc = C.export(study, pick, parse_size(max_memory, "--max-memory") if max_memory else None, _shown(url), allow_no_gain=allow_no_gain)
    if fmt != "json":
        rendered = frameworks.text(doc, fmt)
        if output is None:
            click.echo(rendered, nl=False)
            return
        from pathlib import Path

        Path(output).write_text(rendered)
        missing = frameworks.render(doc, fmt)["not_expressible"]
        click.echo(f"wrote {output}: {fmt} arguments for trial #{doc['study']['trial']} ({doc['speedup']['text'] if doc['speedup'] else '-'} the defaults)"
                   + (f"; by hand (the framework cannot express them): {', '.join(m['knob'] for m in missing)}" if missing else ""))
        return
    if output is None:
        click.echo(json.dumps(doc, indent=2, default=str))
        return
    path = C.write(doc, output)
    speed = f", {doc['speedup']['text']} the defaults (90% interval)" if doc["speedup"] else ""
    click.echo(
        f"wrote {path}: trial #{doc['study']['trial']} ({pick}), {format_rate(doc['measured']['samples_per_s'])} samples/s "
        f"from {doc['measured']['processes']} processes, {format_bytes(doc['measured']['peak_memory_bytes'])}{speed}; {knobs.short(doc['knobs'])}"
    )
    if doc["verdict"]["state"] != "gain" or doc["verdict"]["winner"] != doc["study"]["trial"]:
        click.echo(f"verdict: {doc['verdict']['text']}")


@main.command()
@click.argument("study_name")
@storage_option("Storage URL (default: sqlite:///studies/<study>.db).")
@click.option("-o", "--output", default=None, help="Where to write the page (default: dashboards/<study>.html).")
@click.option("--watch", "watch_s", default=None, help="Rewrite the page every N seconds while a study runs elsewhere (the page reloads itself).")
def dashboard(study_name: str, storage: str | None, output: str | None, watch_s: str | None) -> None:
    """Write a self-contained HTML dashboard of a study (plotly, works offline).

    \b
    Examples:
      autotune dashboard mynet                      # writes dashboards/mynet.html
      autotune dashboard mynet -o report.html --storage sqlite:///runs/mynet.db
      autotune dashboard mynet --watch 30           # rewrite it every 30 s while the study runs
    """
    from pathlib import Path

    from autotune import report
    from autotune import storage as stores

    url = _storage_for(study_name, storage)

    def load() -> Any:
        return stores.load(study_name, url)

    out = Path(output) if output else report.default_path(study_name)
    if watch_s is None:
        path = report.write_dashboard(load(), out)
        click.echo(f"wrote {path}")
        return
    seconds = parse_duration(watch_s, "--watch")
    click.echo(f"writing {out} every {seconds:g}s; Ctrl-C to stop")
    try:
        report.watch(load, out, seconds)
    except KeyboardInterrupt:
        click.echo("stopped")


if __name__ == "__main__":  # pragma: no cover
    main()
