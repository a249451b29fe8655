"""``autotune knobs`` and ``autotune measure``: the knob registry, and one configuration measured."""

from __future__ import annotations

import json
import statistics
import sys
from typing import Any

import click

from autotune import knobs
from autotune.cli.options import WORKLOAD, measurement_from, options, workload_from
from autotune.tuning.progress import console
from autotune.units import format_bytes, format_duration, format_flops, format_rate


# ---------------------------------------------------------------- knobs


@click.command("knobs")
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
        table.add_row(k.name, k.values_text(), k.format(k.default_for()), k.applies_text(), knobs.STAGE_HELP[k.stage],
                      k.help)
    console().print(table)


# ---------------------------------------------------------------- measure


def _compiled(config: dict[str, Any] | None) -> bool:
    """The configuration compiled the model (so its first step holds the compilation)."""
    from autotune.knobs.registry import COMPILE

    return bool(config) and config.get(COMPILE.name, COMPILE.default) != COMPILE.default


def result_lines(res: Any) -> list[tuple[str, str]]:
    """What ``autotune measure`` prints of one measured result: (label, value) lines."""
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
            ("peak memory", format_bytes(res.peak_memory_bytes)
             + (" (CUDA reserved)" if res.device and res.device.startswith("cuda") else " (process tree RSS)")),
        ]
        if res.flops_per_sample:
            lines.append(("compute",
                          f"{format_flops(res.flops_per_sample)}/sample, {format_flops(res.achieved_flops)}/s"))
            lines.append(("MFU", mfu_text(res)))
        lines.append(("energy", energy_text(res)))
        prof = res.profile or {}
        lines.append(("data wait", f"{100 * prof.get('data_wait_share', 0):.1f}% of step time"))
        top = prof.get("top_ops") or []
        if top:
            lines.append(("top ops", ", ".join(f"{op_name(op['name'])} {100 * op['share']:.0f}%" for op in top[:4])))
        lines.append(("trial",
                      f"{format_duration(res.wall_s)} wall, {format_duration(res.overhead_s)} outside the steps"))
    elif res.error:
        lines.append(("error", f"{res.error.get('type', '')}: {res.error.get('message', '')}".strip(": ")))
        tail = [line for line in res.error.get("stderr_tail") or [] if line.strip()]
        if tail:
            lines.append(("stderr", tail[-1]))
    return lines


def mfu_text(res: Any) -> str:
    """``55% of this H200's fp32 peak, 66.9 TFLOP/s (bf16's dense peak is 15x higher)``, or why there is none: the
    figure every view computes (:func:`autotune.evidence.efficiency.of_result`), its peak named."""
    from autotune.evidence.efficiency import of_result

    f = of_result(res.to_dict(), (res.notes or {}).get("device_name"))
    return f"{f.peak_text} ({f.higher_text})" if f.mfu is not None and f.higher_text else f.peak_text


def energy_text(res: Any) -> str:
    """``0.42 J/sample (310 W over 2.5 s of timed windows, NVML)``, or why there is none (a CPU: no energy counter)."""
    from autotune.evidence.energy import Energy

    rec = res.energy or {}
    if "joules" in rec:
        return Energy(-1, rec["joules"], rec["seconds"], rec["samples"], rec.get("source")).text
    return str(rec.get("unreadable") or "not measured")


def _print_result(res: Any) -> None:
    width = max(len(k) for k, _ in result_lines(res))
    for key, value in result_lines(res):
        click.echo(f"{key:<{width}}  {value}")


@click.command()
@options("measure", *WORKLOAD,
         click.option("--set", "assignments", multiple=True, metavar="KNOB=VALUE",
                      help="A knob value (repeatable); the rest stay at PyTorch's defaults."),
         "global_batch", "repeat", "quick",
         click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."))
def measure(assignments: tuple[str, ...], as_json: bool, **fields: Any) -> None:
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
    from autotune.trial.protocol import cv

    spec, dev, _ = workload_from(fields)
    request = measurement_from(spec, fields)
    config = knobs.parse_assignments(assignments)
    repeat = request.repeat

    def show(i: int, res: Any) -> None:
        if not as_json:
            if repeat > 1:
                click.echo(f"--- run {i + 1}/{repeat}")
            _print_result(res)

    results = measure_spec(request, config, device=dev, on_result=show)
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
