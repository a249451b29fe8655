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
from autotune.errors import AutotuneError, KnobError
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
def measure(
    model: str,
    data: str | None,
    model_args: tuple[str, ...],
    input_shape: str | None,
    num_classes: int | None,
    task: str | None,
    device: str | None,
    trial_timeout: str,
    assignments: tuple[str, ...],
    global_batch: int | None,
    repeat: int,
    quick: bool,
    as_json: bool,
) -> None:
    """Measure one configuration of a model in an isolated process."""
    from autotune.measure import Settings, cv
    from autotune.runner import Runner

    spec = make_spec(model, data, model_args, input_shape, num_classes, task)
    config = knobs.parse_assignments(assignments)
    timeout = parse_duration(trial_timeout, "--trial-timeout")
    dev = resolve_device(device)
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


if __name__ == "__main__":  # pragma: no cover
    main()
