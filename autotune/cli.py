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
from autotune.errors import AutotuneError, KnobError, SpecError
from autotune.frameworks import FORMATS
from autotune.progress import Progress, console
from autotune.request import (DEFAULT_CONFIRM, DEFAULT_PICK, DEFAULT_POLL_S, DEFAULT_SAMPLER, DEFAULT_TRIAL_TIMEOUT_S,
                              DEFAULT_TRIALS, MAX_CONFIRM, MAX_TRIALS, PICKS, SAMPLERS, TuneConfig)
from autotune.units import format_bytes, format_duration, format_flops, format_rate, parse_duration, parse_size


class AutotuneGroup(click.Group):
    """Turns AutotuneError (and a storage that refuses to work, wherever it is met) into ``error: ...``
    on stderr and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AutotuneError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except click.UsageError as exc:  # a bad option value: one line, as for every other bad input
            click.echo(f"error: {exc.format_message()}" + (f" (see autotune {exc.ctx.info_name} --help)" if exc.ctx else ""),
                       err=True)
            ctx.exit(exc.exit_code)
        except (click.exceptions.Exit, click.ClickException, KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:
            fault = _storage_fault(exc)
            if fault is None:
                raise
            click.echo(f"error: {fault}", err=True)
            ctx.exit(fault.exit_code)


_STORES: list[Any] = []  # the stores this process opened (one per URL): a fault is explained by its own store


def _storage_fault(exc: BaseException) -> AutotuneError | None:
    for store in _STORES:
        fault = store.fault(exc)
        if fault is not None:
            return fault
    return None


def open_store(url: str, read_only: bool = False) -> Any:
    """The command's store (:class:`autotune.store.Store`), opened once; read commands open it read-only."""
    from autotune.store import Store

    store = Store.open(url, read_only=read_only)
    _STORES.append(store)
    return store


def study_store(study: str, url: str | None, read_only: bool = False) -> Any:
    """The store of ``--storage``, else the study's default SQLite file (the name checked before any file is touched)."""
    from autotune.store import check_name, default_url

    check_name(study)
    return open_store(url or default_url(study), read_only)


class Duration(click.ParamType):
    """A positive duration: seconds, or 90s, 10m, 2h, 1h30m."""

    name = "duration"

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        try:
            return parse_duration(value, "")
        except AutotuneError:
            self.fail(f"{value!r}: expected a duration such as 300, 45s, 10m, 2h or 1h30m", param, ctx)


class Size(click.ParamType):
    """A positive size: bytes, or 512MB, 20GiB, 1e9."""

    name = "size"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = parse_size(value, "")
            except AutotuneError:
                self.fail(f"{value!r}: expected a size such as 20GiB, 512MB or 1e9", param, ctx)
        if number <= 0:
            self.fail(f"{value!r}: must be positive", param, ctx)
        return number


DURATION = Duration()
SIZE = Size()


def workload_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options that name a workload, shared by measure and run."""
    options = [
        click.option("--model", "model", required=True, help="Model factory, module:attr (returns an nn.Module or an autotune.Workload), "
                     "or hf:<model_type> for a Hugging Face model built from its config (e.g. hf:gpt2; sizes with --model-arg)."),
        click.option("--data", "data", default=None, help="Dataset factory, module:attr (else the workload's data or synthetic data)."),
        click.option("--model-arg", "model_args", multiple=True, metavar="KEY=VALUE", help="Keyword argument for the model factory (repeatable)."),
        click.option("--seq-len", type=click.IntRange(1), default=None, help="Tokens per synthetic sample of an hf: model (as --model-arg seq_len=N)."),
        click.option("--input-shape", default=None, help="Shape of one synthetic input sample, e.g. 3,224,224."),
        click.option("--num-classes", type=int, default=None, help="Synthetic integer labels in [0, N)."),
        click.option("--task", type=click.Choice(["train", "infer"]), default=None, help="Override the workload's task."),
        click.option("--device", default=None, help="cpu, cuda or cuda:N (default: cuda:0 if there is one, else cpu)."),
        click.option("--trial-timeout", type=DURATION, default=DEFAULT_TRIAL_TIMEOUT_S, show_default=format_duration(DEFAULT_TRIAL_TIMEOUT_S),
                     help="Kill a trial after this long (e.g. 300, 5m)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def make_spec(model: str, data: str | None, model_args: tuple[str, ...], input_shape: str | None, num_classes: int | None, task: str | None) -> Any:
    from autotune.request import WorkloadSpec, parse_model_args, parse_shape
    from autotune.specs import import_spec

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
    return spec, resolve_device(options["device"]), options["trial_timeout"]


def storage_option(what: str, required: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--storage``, the same on every command: the URL, or the AUTOTUNE_STORAGE variable, which keeps a password
    off the command line (where `ps` and the shell's history show it)."""
    return click.option("--storage", default=None, required=required, envvar="AUTOTUNE_STORAGE", show_envvar=True,
                        help=what + " Give a password in the variable, or in ~/.pgpass, rather than here.")


def job_options(trials_help: str, time_budget_help: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options that say how to tune a workload (a :class:`autotune.request.TuneConfig`), shared by run and submit."""
    options = [
        click.option("--space", "space_name", default=None, help="A search space: a name in search_spaces/ or a TOML path (default: 'default' on a GPU, 'cpu' on a CPU)."),
        click.option("--trials", type=click.IntRange(1, MAX_TRIALS), default=DEFAULT_TRIALS, show_default=True, help=trials_help),
        click.option("--time-budget", type=DURATION, default=None, help=time_budget_help),
        click.option("--max-memory", type=SIZE, default=None, help="Peak-memory budget, a real constraint (e.g. 20GiB)."),
        click.option("--global-batch", type=click.IntRange(min=1), default=None, help="Keep this effective batch constant (gradient accumulation)."),
        click.option("--sampler", type=click.Choice(SAMPLERS), default=DEFAULT_SAMPLER, show_default=True, help="gp (default: best in benchmarks/search_efficiency.py), tpe, nsga2 or random."),
        click.option("--seed", type=int, default=None, help="Sampler seed, for the process that creates the study (workers that join it, and resumed runs, draw their own so that they do not propose the same configurations)."),
        click.option("--quick", is_flag=True, help="Short measurement windows (smoke runs; noisier figures)."),
        click.option("--no-early-stop", is_flag=True, help="Never cut a dominated trial short."),
        click.option("--confirm", type=click.IntRange(0, MAX_CONFIRM), default=DEFAULT_CONFIRM, show_default=True, help="Rounds of the final race at most: the configurations tied with the fastest and the baseline measured again, interleaved, until they separate (0: no race; claims then rest on single measurements)."),
        click.option("--warm-start/--no-warm-start", "warm_start", default=True, show_default=True, help="A new study first measures the winners of earlier studies in the same storage on this kind of machine (after the baseline and the recipe), before the sampler takes over."),
        click.option("--batch-ceiling/--no-batch-ceiling", "batch_ceiling", default=None, help="First find the largest batch that fits (doubling, then bisection, in isolated trials) and search no batch above it (default: on a GPU, or with --max-memory)."),
    ]

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            func = option(func)
        return func

    return decorate


def job_from(spec: Any, timeout: float, options: dict[str, Any]) -> TuneConfig:
    """The tuning job (the one typed request) from the shared job options."""
    return TuneConfig(
        spec=spec, space=options["space_name"], trials=options["trials"], time_budget_s=options["time_budget"],
        max_memory_bytes=options["max_memory"],
        global_batch=options["global_batch"], sampler=options["sampler"], seed=options["seed"], quick=options["quick"],
        early_stop=not options["no_early_stop"], confirm=options["confirm"], trial_timeout_s=timeout,
        batch_ceiling=options["batch_ceiling"], warm_start=options["warm_start"],
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


def _compiled(config: dict[str, Any] | None) -> bool:
    """The configuration compiled the model (so its first step holds the compilation)."""
    from autotune.knobs.registry import COMPILE

    return bool(config) and config.get(COMPILE.name, COMPILE.default) != COMPILE.default


def _result_lines(res: Any) -> list[tuple[str, str]]:
    from autotune.result import OK, op_name

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
            ("first step", f"{res.time_to_first_step_s:.2f} s"
             + (" (includes compilation)" if _compiled(res.config) else "")),
            ("peak memory", format_bytes(res.peak_memory_bytes) + (" (CUDA reserved)" if res.device and res.device.startswith("cuda") else " (process tree RSS)")),
        ]
        if res.flops_per_sample:
            mfu = f", MFU {100 * res.mfu:.1f}%" if res.mfu is not None else ", MFU n/a (device peak unknown)"
            lines.append(("compute", f"{format_flops(res.flops_per_sample)}/sample, {format_flops(res.achieved_flops)}/s{mfu}"))
        prof = res.profile or {}
        lines.append(("data wait", f"{100 * prof.get('data_wait_share', 0):.1f}% of step time"))
        top = prof.get("top_ops") or []
        if top:
            lines.append(("top ops", ", ".join(f"{op_name(op['name'])} {100 * op['share']:.0f}%" for op in top[:4])))
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
      autotune measure --model autotune.examples:mlp --set batch_size=128 --set optimizer_impl=fused
      autotune measure --model mypkg.models:build --data mypkg.data:build --repeat 5 --json
      autotune measure --model hf:gpt2 --model-arg n_layer=2 --model-arg n_embd=128 --model-arg n_head=2 \\
                       --model-arg vocab_size=8000 --seq-len 64 --set activation_checkpointing=on --quick
      (mypkg stands for your own package: that line shows the options, it does not run as it is)
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
      autotune run --model autotune.examples:mlp --study mynet --trials 20   # a built-in example
      autotune run --model mypkg.models:build --data mypkg.data:build --time-budget 2h --max-memory 20GiB
      autotune run --model mypkg.models:build --workers 2 --study mymodel    # two trials at a time, cores split
      (mypkg stands for your own package: those lines show the options, they do not run as they are)
    """
    from autotune import tuning

    spec, dev, timeout = workload_from(options)
    gpus = _parse_devices(devices)
    job = job_from(spec, timeout, options)
    name = study_name or _default_study(spec)
    store = study_store(name, storage)
    parallel = workers > 1 or bool(gpus)
    if gpus:
        dev = "cuda:0"
    progress = Progress(job.trials, job.time_budget_s, 0)
    prepared = tuning.prepare(job, name, store, dev, on_trial=progress, on_repeat=progress.repeat, on_probe=_print_probe)
    progress.done = prepared.measured
    for line in prepared.opening(len(gpus) if gpus else workers):
        click.echo(line)
    summary = _until_stopped(lambda: _run_parallel(prepared, workers, gpus, dev) if parallel else prepared.run(), progress)
    click.echo(summary.text())
    _print_status(prepared.study, store)


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
    return str(spec.default_study_name())


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be, so a trial stops the same way; the exit code differs (143, not 130)."""


def _on_term(signum: int, frame: Any) -> None:
    raise Terminated


def _until_stopped(work: Callable[[], Any], progress: Any = None) -> Any:
    """Run ``work`` with SIGTERM as Ctrl-C; an interrupted trial is recorded and queued again.

    Exits as shells expect of a process stopped by a signal: 130 after Ctrl-C (SIGINT), 143 after SIGTERM.
    """
    import signal

    previous = signal.signal(signal.SIGTERM, _on_term)
    try:
        return work()
    except KeyboardInterrupt as exc:
        if progress is not None:
            progress.close()
        click.echo("stopped: the running trial is recorded as interrupted and will be measured again. Run the same command to continue.", err=True)
        sys.exit(128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT))
    finally:
        signal.signal(signal.SIGTERM, previous)
        if progress is not None:
            progress.close()


def _run_parallel(prepared: Any, workers: int, gpus: list[int], dev: str) -> Any:
    """``run --workers K``: K worker processes measure; this one waits, then runs the final race."""
    import signal

    from autotune import daemon

    procs = daemon.spawn_local(prepared.name, prepared.store, workers, gpus, dev)
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
@click.option("--poll", "poll", type=DURATION, default=DEFAULT_POLL_S, show_default=format_duration(DEFAULT_POLL_S),
              help="With --all: how often to look for new jobs.")
@click.option("--exit-when-idle", is_flag=True, help="With --all: stop when no job has budget left instead of waiting.")
def worker(device: str | None, study_name: str | None, storage: str | None, all_jobs: bool, cpus: str | None, no_race: bool,
           poll: float, exit_when_idle: bool) -> None:
    """Measure trials of a shared study, or (--all) of every submitted job, until their budgets are spent.

    \b
    Examples:
      autotune worker --study mynet --storage postgresql://tuner@db/autotune  # a study, or a job from submit
      autotune worker --all --storage postgresql://tuner@db/autotune          # the daemon
      autotune worker --all --storage journal:/shared/autotune.log --exit-when-idle
      (db stands for your PostgreSQL server, /shared for a file system every machine mounts)
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
        store = daemon.open_store(storage, log)
        _STORES.append(store)
        if all_jobs:
            return daemon.serve(store, dev, log, poll_s=poll, exit_when_idle=exit_when_idle,
                                on_trial=progress, on_repeat=progress.repeat)
        return daemon.work_on(study_name, store, dev, log, race=not no_race, on_trial=progress, on_repeat=progress.repeat)

    import signal

    previous = signal.signal(signal.SIGTERM, _on_term)
    try:
        work()
    except KeyboardInterrupt:
        click.echo(f"{_now()} stopped by a signal: the running trial is recorded as interrupted and queued again")
        return  # exit 0: a daemon stopped on purpose (SIGTERM is how a service manager stops it)
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
      autotune submit --model autotune.examples:mlp --study mlp-nightly --trials 20 --storage journal:/shared/autotune.log
      (mypkg stands for your own package, db for your PostgreSQL server, /shared for a file system every machine mounts)
    """
    from autotune import tuning

    spec, _, timeout = workload_from({**options, "device": "cpu"})
    job = job_from(spec, timeout, options)
    name = study_name or _default_study(spec)
    store = study_store(name, storage)
    tuning.submit(job, name, store)
    click.echo(f"submitted job {name!r} to {store.shown}: {job.trials} trials per hardware kind; "
               f"workers (`autotune worker --all --storage ...`) will tune it as study {name}@<kind>")


# ---------------------------------------------------------------- list / status / export


RECOMMENDED_MARK = " recommended"


def front_rows(doc: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """The rows of a front table: the recommended configuration first (marked, even when the front leaves it out,
    dominated on memory), then the rest of the front."""
    rec = doc.get("recommended")
    rows = [(rec, RECOMMENDED_MARK)] if rec else []
    return rows + [(row, "") for row in doc["front"] if not rec or row["trial"] != rec["trial"]]


def _the_only_study(storage: str | None) -> str:
    """The study ``status`` shows when no name is given: the only one in the storage (or in studies/)."""
    from autotune.errors import StudyError
    from autotune.store import STUDIES_DIR

    if storage:
        names = open_store(storage, read_only=True).names()
        where = open_store(storage, read_only=True).shown
    else:
        names = sorted(p.stem for p in STUDIES_DIR.glob("*.db"))
        where = f"{STUDIES_DIR}/"
    if len(names) == 1:
        return names[0]
    if not names:
        raise StudyError(f"no study in {where}: run one with `autotune run --model ...`")
    raise StudyError(f"which study? {len(names)} in {where}: {', '.join(names)} (autotune status NAME)")


def _print_status(study: Any, store: Any) -> None:
    from rich.table import Table

    from autotune import hardware, view

    doc = view.status(study)
    out = console()
    counts = ", ".join(f"{k} {v}" for k, v in sorted(doc["outcomes"].items(), key=lambda kv: -kv[1]))
    out.print(f"study {doc['study']} ({store.shown})", markup=False)
    out.print(f"workload {doc['workload'].get('model')}  device {doc['device']}  {hardware.short(doc['fingerprint'])}", markup=False)
    out.print(f"trials {doc['trials']}: {counts or 'none'}; time spent {format_duration(doc['time_spent_s'])}", markup=False)
    out.print(doc["noise_text"], markup=False)
    if doc.get("within_process_noise_text"):
        out.print(doc["within_process_noise_text"], markup=False)
    out.print(doc["load"]["text"], markup=False)
    if doc["batch_ceiling"]:
        out.print(f"batch ceiling: {doc['batch_ceiling']['text']}", markup=False)
    table = Table(title="Recommended, then the Pareto front: throughput vs peak memory (speed-up over the defaults, 90% interval)",
                  title_justify="left")
    for col in ("trial", "knobs that differ from the defaults", "samples/s", "processes", "peak memory", "speed-up"):
        table.add_column(col, overflow="fold")
    for row, mark in front_rows(doc):
        changes = " ".join(f"{k}={knobs.KNOBS[k].format(v)}" for k, v in row["changes"].items()) or "defaults"
        speed = row["speedup"]["text"] if row["speedup"] else "-"
        table.add_row(f"#{row['trial']}{mark}", changes, format_rate(row["samples_per_s"]), str(row["processes"]),
                      format_bytes(row["peak_memory_bytes"]), speed)
    out.print(table)
    if doc["failures"]:
        out.print("failures:", markup=False)
        for outcome, entry in doc["failures"].items():
            trials = ", ".join(f"#{n}" for n in entry["trials"][:8]) + (" ..." if len(entry["trials"]) > 8 else "")
            out.print(f"  {outcome}: {entry['count']} ({trials}) {entry['example'][:200]}", markup=False)
    _print_ablation(out, doc.get("ablation"))
    out.print(f"verdict: {doc['verdict']['text']}", markup=False)


def _print_ablation(out: Any, ablation: dict[str, Any] | None) -> None:
    """What each knob of the winner bought, from the defaults: one row a step (autotune.ablation)."""
    if not ablation or len(ablation["steps"]) < 2:
        return
    from rich.table import Table

    table = Table(title="What each knob bought, added one at a time from the defaults (90% intervals)", title_justify="left")
    for col in ("added", "this step", "speed-up so far", "measured", "kept"):
        table.add_column(col, overflow="fold")
    for step in ablation["steps"]:
        table.add_row(step["label"], step["bought"]["text"], step["speedup"]["text"],
                      "in one process" if step["within_process"] else "between processes",
                      "yes" if step["kept"] else "no: bought nothing beyond the noise")
    out.print(table)


@main.command("list")
@storage_option("A storage URL (default: every studies/*.db).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON (the same numbers as the table).")
def list_cmd(storage: str | None, as_json: bool) -> None:
    """List jobs and studies: trials measured (of the budget) and failed, running, workers seen lately, speed-up.

    \b
    Examples:
      autotune list
      autotune list --storage postgresql://tuner@db/autotune
      autotune list --storage journal:/shared/autotune.log --json
      (db stands for your PostgreSQL server, /shared for a file system every machine mounts)
    """
    from autotune import hardware, view
    from autotune.store import STUDIES_DIR, redact

    urls = [storage] if storage else [f"sqlite:///{p}" for p in sorted(STUDIES_DIR.glob("*.db"))]
    docs = []
    for url in urls:
        store = open_store(url, read_only=True)
        for doc in view.listing(store):
            doc["storage"] = store.shown
            docs.append(doc)
    if as_json:
        click.echo(json.dumps(docs, indent=2, default=str))
        return
    if not docs:
        click.echo("no studies" + (f" in {redact(storage)}" if storage else " in studies/"))
        return
    from rich.table import Table

    # Words never break inside themselves (a narrow terminal folds cells between words); the storage and the
    # machine, when every row shares them (the usual case), are said once above the table instead of in a column.
    from rich import box

    from autotune.units import plural

    shared = {}
    for col, values in (("storage", {d["storage"] for d in docs}),
                        ("machine", {hardware.short(d["fingerprint"]) for d in docs if d["kind"] != "job"})):
        if len(values) == 1:
            shared[col] = values.pop()
            click.echo(f"{col} {shared[col]}")
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("study", no_wrap=True, overflow="ellipsis")
    for col, width in (("trials", 8), ("activity", 9), ("speed-up (90%)", 11), ("verdict", 8), ("machine", 16)):
        if col not in shared:
            table.add_column(col, min_width=width)
    if "storage" not in shared:
        table.add_column("storage", no_wrap=True, overflow="ellipsis", max_width=48)
    for d in docs:
        if d["kind"] == "job":
            row = {"study": f"{d['study']} (job)", "trials": f"{d['budget']} per kind", "activity": "-",
                   "speed-up": "-", "verdict": f"studies: {', '.join(d['studies']) or 'none yet'}", "machine": "-"}
        else:
            measured = f"{d['measured']} / {d['budget']}" if d.get("budget") else str(d["measured"])
            activity = [f"{d['running']} running"] if d["running"] else []
            activity += [f"{plural(d['workers_recently'], 'worker')} lately"] if d["workers_recently"] else []
            row = {"study": d["study"], "trials": measured + (f" ({d['failed']} failed)" if d["failed"] else ""),
                   "activity": ", ".join(activity) or "-", "speed-up": d["speedup"]["text"] if d["speedup"] else "-",
                   "verdict": d["verdict"].replace("_", " "), "machine": hardware.short(d["fingerprint"])}
        row["storage"] = d["storage"]
        table.add_row(*(v for k, v in row.items() if k not in shared))
    console().print(table)


@main.command()
@click.argument("study_name", required=False)
@storage_option("Storage URL (default: sqlite:///studies/<study>.db).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON (the same numbers as the table).")
def status(study_name: str | None, storage: str | None, as_json: bool) -> None:
    """Progress, failures and the Pareto front of a study (without a name: the only study there is).

    \b
    Examples:
      autotune status mynet
      autotune status mynet --storage postgresql://tuner@db/autotune --json
      (db stands for your PostgreSQL server)
    """
    from autotune import view

    study_name = study_name or _the_only_study(storage)
    store = study_store(study_name, storage, read_only=True)
    study = view.read(store, study_name)
    if as_json:
        click.echo(json.dumps(view.status(study), indent=2, default=str))
    else:
        _print_status(study, store)


@main.command()
@click.argument("study_name")
@click.option("--pick", type=click.Choice(PICKS), default=DEFAULT_PICK, show_default=True,
              help="recommended: the verdict's configuration (the defaults when nothing beats them beyond the noise); "
                   "fastest: the fastest-looking point of the front, labelled with the verdict when it is not the "
                   "recommendation; smallest: the least peak memory; balanced: between the two.")
@click.option("--max-memory", type=SIZE, default=None, help="Only front points within this peak memory (e.g. 20GiB).")
@storage_option("Storage URL (default: sqlite:///studies/<study>.db).")
@click.option("-o", "--output", default=None, help="Write it to this file (default: print it): the JSON document for "
              "--format json, a Python snippet for hf-trainer and lightning, an Accelerate YAML config for accelerate.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="json", show_default=True,
              help="json (autotune.load_config), hf-trainer (TrainingArguments), lightning (Trainer + DataLoader), accelerate (a config file).")
def export(study_name: str, pick: str, max_memory: int | None, storage: str | None, output: str | None, fmt: str) -> None:
    """Export a configuration: JSON for autotune.load_config(), or arguments for Hugging Face Trainer,
    Lightning or Accelerate (what a framework cannot express is listed, never dropped).

    \b
    Examples:
      autotune export mynet -o best.json                  # the recommendation (or the defaults, saying why)
      autotune export mynet --format hf-trainer -o training_args.py
      autotune export mynet --pick smallest --max-memory 20GiB --format lightning
    """
    from autotune import export as C
    from autotune import frameworks, view

    frameworks.check_format(fmt)
    if output is not None:
        C.check_output(output)  # a folder or an unwritable place fails before the study is read
    store = study_store(study_name, storage, read_only=True)
    study = view.read(store, study_name)
    doc = C.export(study, pick, max_memory, store.shown)
    if fmt != "json":
        rendered = frameworks.text(doc, fmt)
        if output is None:
            click.echo(rendered, nl=False)
            return
        C.write_text(rendered, output)
        missing = frameworks.render(doc, fmt)["not_expressible"]
        click.echo(f"wrote {output}: {fmt} arguments for trial #{doc['study']['trial']} ({doc['speedup']['text'] if doc['speedup'] else '-'} the defaults)"
                   + (f"; by hand (the framework cannot express them): {', '.join(m['knob'] for m in missing)}" if missing else ""))
        return
    if output is None:
        click.echo(json.dumps(doc, indent=2, default=str))
        return
    path = C.write(doc, output)
    from autotune.stats import interval_label
    from autotune.units import plural

    speed = f", {doc['speedup']['text']} the defaults{interval_label(doc['speedup'])}" if doc["speedup"] else ""
    click.echo(
        f"wrote {path}: trial #{doc['study']['trial']} ({pick}), {format_rate(doc['measured']['samples_per_s'])} samples/s "
        f"from {plural(doc['measured']['processes'], 'process')}, {format_bytes(doc['measured']['peak_memory_bytes'])}{speed}; "
        f"{knobs.short(doc['knobs'])}"
    )
    click.echo(doc["pick_note"])


@main.command()
@click.argument("study_name")
@storage_option("Storage URL (default: sqlite:///studies/<study>.db).")
@click.option("-o", "--output", default=None, help="Where to write the page (default: dashboards/<study>.html).")
@click.option("--watch", "watch_s", type=DURATION, default=None, help="Rewrite the page every N seconds while a study runs elsewhere (the page reloads itself).")
def dashboard(study_name: str, storage: str | None, output: str | None, watch_s: float | None) -> None:
    """Write a self-contained HTML dashboard of a study (plotly, works offline).

    \b
    Examples:
      autotune dashboard mynet                      # writes dashboards/mynet.html
      autotune dashboard mynet -o report.html --storage sqlite:///studies/mynet.db
      autotune dashboard mynet --watch 30           # rewrite it every 30 s while the study runs
    """
    from pathlib import Path

    from autotune import report, view

    store = study_store(study_name, storage, read_only=True)

    def load() -> Any:
        return view.read(store, study_name)

    out = Path(output) if output else report.default_path(study_name)
    if watch_s is None:
        path = report.write_dashboard(load(), out)
        click.echo(f"wrote {path}")
        return
    click.echo(f"writing {out} every {watch_s:g}s; Ctrl-C to stop")
    try:
        report.watch(load, out, watch_s)
    except KeyboardInterrupt:
        click.echo("stopped")


if __name__ == "__main__":  # pragma: no cover
    main()
