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
from autotune.errors import AutotuneError, KnobError, StudyError
from autotune.units import format_bytes, format_duration, format_flops, format_rate, parse_duration


class AutotuneGroup(click.Group):
    """Turns AutotuneError into ``error: ...`` on stderr and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AutotuneError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)


def console() -> Any:
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 160, highlight=False, soft_wrap=False)


def workload_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """The options that name a workload, shared by measure and run."""
    options = [
        click.option("--model", "model", required=True, help="Model factory, module:attr (returns an nn.Module or an autotune.Workload)."),
        click.option("--data", "data", default=None, help="Dataset factory, module:attr (else the workload's data or synthetic data)."),
        click.option("--model-arg", "model_args", multiple=True, metavar="KEY=VALUE", help="Keyword argument for the model factory (repeatable)."),
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
    spec = make_spec(options["model"], options["data"], options["model_args"], options["input_shape"], options["num_classes"], options["task"])
    timeout = parse_duration(options["trial_timeout"], "--trial-timeout")
    return spec, resolve_device(options["device"]), timeout


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
    """List every knob: its values, PyTorch's default, and where it applies."""
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
@click.option("--global-batch", type=int, default=None, help="Keep this effective batch through gradient accumulation.")
@click.option("--repeat", type=click.IntRange(1, 100), default=1, show_default=True, help="Measure N times, each in a new process, and report the spread.")
@click.option("--quick", is_flag=True, help="Short windows (for smoke tests; noisier figures).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def measure(assignments: tuple[str, ...], global_batch: int | None, repeat: int, quick: bool, as_json: bool, **workload: Any) -> None:
    """Measure one configuration of a model in an isolated process."""
    from autotune.measure import Settings, cv
    from autotune.runner import Runner

    spec, dev, timeout = workload_from(workload)
    config = knobs.parse_assignments(assignments)
    if global_batch is not None and global_batch <= 0:
        raise KnobError("--global-batch must be positive")
    runner = Runner(spec, device=dev, timeout_s=timeout, settings=Settings.quick() if quick else Settings(), global_batch=global_batch)
    probe = runner.probe()
    ctx = knobs.Context.from_dict(probe["context"])
    config = knobs.validate_config(config, ctx)
    if global_batch and global_batch % int(config.get("batch_size", probe["workload"].get("batch_size") or knobs.KNOBS["batch_size"].default)):
        raise KnobError(f"--global-batch {global_batch} is not a multiple of the batch size")
    results = []
    for i in range(repeat):
        res = runner.measure(config)
        if res.user_error:
            raise AutotuneError(res.error["message"] if res.error else "the workload failed")
        results.append(res)
        if not as_json:
            if repeat > 1:
                click.echo(f"--- run {i + 1}/{repeat}")
            _print_result(res)
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


def _trial_line(rec: Any) -> str:
    from autotune.result import OK

    head = f"#{rec.number:<4} {rec.role:<8} "
    if rec.outcome == OK and rec.samples_per_s:
        speed = rec.speedup.text() if rec.speedup else "-"
        body = f"{'ok':<8} {format_rate(rec.samples_per_s):>9} samples/s {format_bytes(rec.peak_memory_bytes):>10}  {speed:<18}"
    else:
        body = f"{rec.outcome:<8} {(rec.error or '')[:60]}"
    tags = []
    if rec.duplicate_of is not None:
        tags.append(f"(already measured as #{rec.duplicate_of})")
    if rec.cut_short:
        tags.append("(cut short: dominated)")
    return f"{head}{body}  {knobs.short(rec.config)} {' '.join(tags)}".rstrip()


class Progress:
    """A progress bar (on a terminal) and one line per finished trial."""

    def __init__(self, total: int, budget_s: float | None, done: int) -> None:
        import time

        self.total = total
        self.budget_s = budget_s
        self.start = time.monotonic()
        self.done = done
        self.console = console()
        self.bar: Any = None
        self.task: Any = None
        if sys.stdout.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeElapsedColumn

            self.bar = RichProgress(
                TextColumn("[bold]trials"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                TextColumn("{task.fields[info]}"), console=self.console, transient=True,
            )
            self.task = self.bar.add_task("trials", total=total, completed=done, info="")
            self.bar.start()

    def info(self) -> str:
        import time

        parts = []
        if self.budget_s is not None:
            left = max(0.0, self.budget_s - (time.monotonic() - self.start))
            parts.append(f"budget left {format_duration(left)}")
        return ", ".join(parts)

    def print(self, line: str) -> None:
        if self.bar is not None:
            self.bar.console.print(line, markup=False, highlight=False)
        else:
            click.echo(line)

    def __call__(self, rec: Any) -> None:
        if rec.duplicate_of is None:
            self.done += 1
        self.print(_trial_line(rec))
        if self.bar is not None:
            self.bar.update(self.task, completed=min(self.done, self.total), info=self.info())

    def repeat(self, what: str, number: int, rate: float | None) -> None:
        """A re-measurement: the baseline's noise floor, or a round of the final race."""
        again = f"{format_rate(rate)} samples/s" if rate is not None else "failed"
        label = "noise floor: baseline" if what == "floor" else "race"
        self.print(f"{label} #{number} measured again in a new process: {again}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@main.command()
@workload_options
@click.option("--space", "space_name", default=None, help="A search space: a name in search_spaces/ or a TOML path (default: 'default' on a GPU, 'cpu' on a CPU).")
@click.option("--study", "study_name", default=None, help="Study name (default: derived from --model).")
@click.option("--storage", default=None, help="Optuna storage URL (default: sqlite:///studies/<study>.db).")
@click.option("--trials", type=click.IntRange(1, 100000), default=30, show_default=True, help="Measured configurations the study should hold; a resumed study goes on to this total.")
@click.option("--time-budget", default=None, help="Stop starting trials after this long (e.g. 2h, 30m).")
@click.option("--max-memory", default=None, help="Peak-memory budget, a real constraint (e.g. 20GiB).")
@click.option("--global-batch", type=int, default=None, help="Keep this effective batch constant (gradient accumulation).")
@click.option("--sampler", type=click.Choice(["gp", "tpe", "random", "nsga2"]), default="gp", show_default=True, help="gp (default: best in benchmarks/search_efficiency.py), tpe, nsga2 or random.")
@click.option("--seed", type=int, default=None, help="Sampler seed.")
@click.option("--quick", is_flag=True, help="Short measurement windows (smoke runs; noisier figures).")
@click.option("--no-early-stop", is_flag=True, help="Never cut a dominated trial short.")
@click.option("--confirm", type=click.IntRange(0, 50), default=8, show_default=True, help="Rounds of the final race at most: the configurations tied with the fastest and the baseline measured again, interleaved, until they separate (0: no race; claims then rest on single measurements).")
def run(
    space_name: str | None,
    study_name: str | None,
    storage: str | None,
    trials: int,
    time_budget: str | None,
    max_memory: str | None,
    global_batch: int | None,
    sampler: str,
    seed: int | None,
    quick: bool,
    no_early_stop: bool,
    confirm: int,
    **workload: Any,
) -> None:
    """Tune a model: search the knob space; resume the study if it exists."""
    import signal

    from autotune import space as spaces
    from autotune import storage as stores
    from autotune import study as S
    from autotune.errors import SpaceError
    from autotune.measure import Settings
    from autotune.runner import Runner
    from autotune.units import parse_size

    spec, dev, timeout = workload_from(workload)
    budget = parse_duration(time_budget, "--time-budget") if time_budget else None
    memory = parse_size(max_memory, "--max-memory") if max_memory else None
    if global_batch is not None and global_batch <= 0:
        raise KnobError("--global-batch must be positive")
    space = spaces.load(space_name or ("cpu" if dev == "cpu" else "default"))
    name = study_name or stores.default_study_name(spec.model)
    url = _storage_for(name, storage)
    stores.open_storage(url)  # an unreachable storage fails before any measurement

    runner = Runner(spec, device=dev, timeout_s=timeout, settings=Settings.quick() if quick else Settings(), global_batch=global_batch)
    probe = runner.probe()
    ctx = knobs.Context.from_dict(probe["context"])
    base = S.base_config(ctx, space.fixed, probe["workload"].get("batch_size"))
    effective = spaces.effective(space, ctx, base)
    if global_batch:
        if global_batch % base["batch_size"]:
            raise KnobError(f"--global-batch {global_batch} is not a multiple of the baseline batch size {base['batch_size']}")
        dim = effective.search.get("batch_size")
        if dim is not None:
            divisors = tuple(v for v in dim.values() if global_batch % v == 0)
            effective.search["batch_size"] = spaces.Dimension("batch_size", divisors)
    if not effective.search:
        raise SpaceError(f"{space.path}: none of its knobs applies to this workload on {dev}: nothing to tune")

    attrs = {
        "workload": spec.to_dict(),
        "space": space.to_dict(),
        "space_hash": space.hash(),
        "fingerprint": probe["fingerprint"],
        "device": dev,
        "context": probe["context"],
        "global_batch": global_batch,
    }
    study, created = stores.create_or_check(name, url, attrs, S.make_sampler(sampler, seed))
    stored_memory = study.user_attrs.get("max_memory_bytes")
    if created:
        study.set_user_attr("max_memory_bytes", memory)
    elif memory is not None and memory != stored_memory:
        was = format_bytes(stored_memory) if stored_memory else "no budget"
        raise StudyError(f"study {name!r} was made with --max-memory {was}; pass the same value, or start a new study with --study {name}-2")
    memory = memory if created else stored_memory
    recovered = stores.recover_stale(study, grace_s=2 * timeout + 60)

    options = S.Options(trials=trials, time_budget_s=budget, max_memory_bytes=memory, early_stop=not no_early_stop, race_rounds=confirm)
    done = len([t for t in study.get_trials(deepcopy=False) if S.is_measured(t)])
    click.echo(
        f"{'new' if created else 'resuming'} study {name!r} in {_shown(url)}: {done} measured, target {trials}; "
        f"space {space.name} ({effective.size()} configurations here: {', '.join(effective.search)}); device {dev}"
    )
    if recovered:
        n = len(recovered)
        click.echo(f"re-queued {n} trial{'s' if n > 1 else ''} left running by a stopped process: {', '.join(f'#{t}' for t in recovered)}")
    progress = Progress(trials, budget, done)
    tuner = S.Tuner(study, effective, ctx, base, runner.measure, options, on_trial=progress, on_repeat=progress.repeat)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        summary = tuner.run()
    except KeyboardInterrupt:
        progress.close()
        click.echo("stopped: the running trial is recorded as interrupted and will be measured again. Run the same command to continue.", err=True)
        sys.exit(130)
    finally:
        signal.signal(signal.SIGTERM, previous)
        progress.close()
    race = summary.race
    raced = f"; race: {race.rounds} rounds, {race.measurements} measurements ({race.stopped})" if race else ""
    click.echo(
        f"done: {summary.reason}; {summary.new} new configurations and {summary.repeats} repeat measurements "
        f"in {format_duration(summary.elapsed_s)}{raced}"
    )
    _print_status(study, url)


# ---------------------------------------------------------------- list / status / export


def _status_doc(study: Any) -> dict[str, Any]:
    from autotune import storage as stores
    from autotune.evidence import Evidence

    ev = Evidence.of(study)
    doc = stores.summary(study, ev)
    doc.update(ev.to_dict())
    failures: dict[str, dict[str, Any]] = {}
    for t in study.get_trials(deepcopy=False):
        outcome = t.user_attrs.get("outcome")
        if outcome in (None, "ok") or t.user_attrs.get("duplicate_of") is not None:
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
@click.option("--storage", default=None, help="A storage URL (default: every studies/*.db).")
@click.option("--json", "as_json", is_flag=True)
def list_cmd(storage: str | None, as_json: bool) -> None:
    """List studies: trials done, best samples/s, fingerprint."""
    import optuna

    from autotune import hardware
    from autotune import storage as stores

    urls = [storage] if storage else [f"sqlite:///{p}" for p in sorted(stores.STUDIES_DIR.glob("*.db"))]
    docs = []
    for url in urls:
        store = stores.open_storage(url)
        for name in stores.study_names(store):
            doc = stores.summary(optuna.load_study(study_name=name, storage=store))
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
    for col in ("study", "trials", "recommended samples/s", "speed-up (90%)", "verdict", "machine", "storage"):
        table.add_column(col, overflow="fold")
    for d in docs:
        speed = d["speedup"]["text"] if d["speedup"] else "-"
        table.add_row(d["study"], str(d["trials"]), format_rate(d["best_samples_per_s"]), speed, d["verdict"].replace("_", " "),
                      hardware.short(d["fingerprint"]), d["storage"])
    console().print(table)


@main.command()
@click.argument("study_name")
@click.option("--storage", default=None, help="Storage URL (default: sqlite:///studies/<study>.db).")
@click.option("--json", "as_json", is_flag=True)
def status(study_name: str, storage: str | None, as_json: bool) -> None:
    """Progress, failures and the Pareto front of a study."""
    from autotune import storage as stores

    url = _storage_for(study_name, storage)
    study = stores.load(study_name, url)
    if as_json:
        click.echo(json.dumps(_status_doc(study), indent=2, default=str))
    else:
        _print_status(study, url)


@main.command()
@click.argument("study_name")
@click.option("--pick", type=click.Choice(["fastest", "smallest", "balanced"]), default="fastest", show_default=True)
@click.option("--max-memory", default=None, help="Only front points within this peak memory (e.g. 20GiB).")
@click.option("--storage", default=None, help="Storage URL (default: sqlite:///studies/<study>.db).")
@click.option("-o", "--output", default=None, help="Write the JSON here (default: print it).")
@click.option("--allow-no-gain", is_flag=True, help="With --pick fastest: export the fastest-looking configuration even when nothing beats the defaults beyond the noise (the verdict is recorded).")
def export(study_name: str, pick: str, max_memory: str | None, storage: str | None, output: str | None, allow_no_gain: bool) -> None:
    """Export a configuration of the front as JSON, for autotune.load_config()."""
    from autotune import config as C
    from autotune import storage as stores
    from autotune.units import parse_size

    url = _storage_for(study_name, storage)
    study = stores.load(study_name, url)
    doc = C.export(study, pick, parse_size(max_memory, "--max-memory") if max_memory else None, _shown(url), allow_no_gain=allow_no_gain)
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
@click.option("--storage", default=None, help="Storage URL (default: sqlite:///studies/<study>.db).")
@click.option("-o", "--output", default=None, help="Where to write the page (default: dashboards/<study>.html).")
@click.option("--watch", "watch_s", default=None, help="Rewrite the page every N seconds while a study runs elsewhere (the page reloads itself).")
def dashboard(study_name: str, storage: str | None, output: str | None, watch_s: str | None) -> None:
    """Write a self-contained HTML dashboard of a study (plotly, works offline)."""
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
