"""``autotune list``, ``status``, ``trials``, ``export`` and ``dashboard``: the commands that read studies (never
torch).

Each opens its store read-only and shows what :mod:`autotune.reports.view` and :mod:`autotune.evidence` computed.
"""

from __future__ import annotations

import json
from typing import Any

import click

from autotune.evidence.energy import joules
from autotune.evidence.verdict import shown
from autotune import knobs
from autotune.cli.edge import open_store, study_store
from autotune.cli.options import DURATION, SIZE, storage_option
from autotune.export.frameworks import FORMATS
from autotune.tuning.progress import console
from autotune.request import DEFAULT_PICK, PICKS
from autotune.units import format_bytes, format_duration, format_rate
from autotune.machine import identity


# ---------------------------------------------------------------- list / status / export


RECOMMENDED_MARK = " recommended"
NAMED_MARK = " (in the verdict)"  # a configuration the verdict names, off the front


def front_rows(doc: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """The rows of a front table: the recommended configuration first (marked, even when the front leaves it out,
    dominated on memory), then the rest of the front, then any other configuration the verdict names (marked)."""
    rec = doc.get("recommended")
    rows = [(rec, RECOMMENDED_MARK)] if rec else []
    rows += [(row, "") for row in doc["front"] if not rec or row["trial"] != rec["trial"]]
    return rows + [(row, NAMED_MARK) for row in doc.get("named") or []]  # what the verdict names, off the front


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


def print_status(doc: dict[str, Any], store: Any) -> None:
    """The status table of ``doc`` (:func:`autotune.reports.view.status_of`)."""
    from rich.table import Table


    out = console()
    counts = ", ".join(f"{k} {v}" for k, v in sorted(doc["outcomes"].items(), key=lambda kv: -kv[1]))
    out.print(f"study {doc['study']} ({store.shown})", markup=False)
    out.print(f"workload {doc['workload'].get('model')}  device {doc['device']}  {identity.short(doc['fingerprint'])}",
              markup=False)
    out.print(f"trials {doc['trials']}: {counts or 'none'}; time spent {format_duration(doc['time_spent_s'])}",
              markup=False)
    out.print(doc["noise_text"], markup=False)
    if doc.get("within_process_noise_text"):
        out.print(doc["within_process_noise_text"], markup=False)
    out.print(doc["load"]["text"], markup=False)
    if doc["batch_ceiling"]:
        out.print(f"batch ceiling: {doc['batch_ceiling']['text']}", markup=False)
    energy = doc.get("objectives") == "speed,energy"  # the front's second axis: energy per sample, not peak memory
    table = Table(title=f"Recommended, then the Pareto front: throughput vs {'energy' if energy else 'peak memory'} "
                        "(speed-up over the defaults, 90% interval)",
                  title_justify="left")
    for col in ("trial", "knobs that differ from the defaults", "samples/s", "processes", "peak memory",
                *(("energy",) if energy else ()), "speed-up"):
        table.add_column(col, overflow="fold")
    for row, mark in front_rows(doc):
        changes = " ".join(f"{k}={knobs.KNOBS[k].format(v)}" for k, v in row["changes"].items()) or "defaults"
        speed = row["speedup"]["text"] if row["speedup"] else "-"
        if doc.get("claim") and row["speedup"] and row["changes"]:
            speed += " *" if row.get("figure") == "claim" else " (selection)"
        per_sample = row.get("joules_per_sample")
        table.add_row(f"#{row['trial']}{mark}", changes, format_rate(row["samples_per_s"]), str(row["processes"]),
                      format_bytes(row["peak_memory_bytes"]),
                      *((f"{joules(per_sample)}/sample" if per_sample is not None else "-",) if energy else ()),
                      speed)
    out.print(table)
    if doc.get("claim"):
        out.print("* the claim, measured apart from the search that chose it; (selection): as the search and the race "
                  "measured it, which runs high for the configurations they chose", markup=False)
    if doc["failures"]:
        out.print("failures:", markup=False)
        for outcome, entry in doc["failures"].items():
            trials = ", ".join(f"#{n}" for n in entry["trials"][:8]) + (" ..." if len(entry["trials"]) > 8 else "")
            out.print(f"  {outcome}: {entry['count']} ({trials}) {entry['example'][:200]}", markup=False)
    _print_ablation(out, doc.get("ablation"))
    for line in shown(doc["verdict"]):  # what to do and the claim; the numerics and the machine; the knobs left
        out.print(line, markup=False)
    if doc.get("efficiency"):  # (views kept before it was computed have none)
        out.print(f"hardware: {doc.get('hardware_text') or doc['efficiency']['text']}", markup=False)


def _print_ablation(out: Any, ablation: dict[str, Any] | None) -> None:
    """What each knob of the winner bought, from the defaults: one row a step (autotune.evidence.bought)."""
    if not ablation or len(ablation["steps"]) < 2:
        return
    from rich.table import Table

    table = Table(title="What each knob bought, added one at a time from the defaults (90% intervals)",
                  title_justify="left")
    for col in ("added", "this step", "speed-up so far", "measured", "kept"):
        table.add_column(col, overflow="fold")
    for step in ablation["steps"]:
        table.add_row(step["label"], step["bought"]["text"], step["speedup"]["text"],
                      "in one process" if step["within_process"] else "between processes",
                      "yes" if step["kept"] else f"no: {step.get('why_left') or 'bought nothing beyond the noise'}")
    out.print(table)


@click.command("list")
@storage_option("A storage URL (default: every .db file under studies/).")
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
    from autotune.reports import view
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
                        ("machine", {identity.short(d["fingerprint"]) for d in docs if d["kind"] != "job"})):
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
                   "verdict": d["verdict"].replace("_", " "), "machine": identity.short(d["fingerprint"])}
        row["storage"] = d["storage"]
        table.add_row(*(v for k, v in row.items() if k not in shared))
    console().print(table)


@click.command()
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
    from autotune.reports import view

    study_name = study_name or _the_only_study(storage)
    store = study_store(study_name, storage, read_only=True)
    doc = view.status_of(store, study_name)
    if as_json:
        click.echo(json.dumps(doc, indent=2, default=str))
    else:
        print_status(doc, store)


@click.command("trials")
@click.argument("study_name", required=False)
@storage_option("Storage URL (default: sqlite:///studies/<study>.db).")
@click.option("--json", "as_json", is_flag=True, help="Print every trial as JSON (the same figures as the table).")
@click.option("--csv", "as_csv", is_flag=True, help="Print every trial as CSV (knobs as knob=value pairs).")
def trials_cmd(study_name: str | None, storage: str | None, as_json: bool, as_csv: bool) -> None:
    """Every trial of a study: role, the knobs it changed, outcome, samples/s, peak memory, duration, repeats.

    The samples/s is the configuration's figure, the one status and export show (with the processes behind it);
    a trial's own first measurement is ``measured_samples_per_s`` in --json and --csv.

    \b
    Examples:
      autotune trials mynet
      autotune trials mynet --csv
      autotune trials mynet --storage postgresql://tuner@db/autotune --json
    """
    from autotune.reports import trials as trial_table
    from autotune.reports import view

    if as_json and as_csv:
        raise click.UsageError("choose one of --json and --csv")
    study_name = study_name or _the_only_study(storage)
    store = study_store(study_name, storage, read_only=True)
    table = trial_table.rows(view.read(store, study_name))
    if as_json:
        click.echo(json.dumps([row.to_dict() for row in table], indent=2, default=str))
        return
    if as_csv:
        click.echo(trial_table.to_csv(table), nl=False)
        return
    from rich import box
    from rich.table import Table

    out = console()
    out.print(f"study {study_name} ({store.shown}): {len(table)} trials", markup=False)
    grid = Table(box=box.SIMPLE_HEAD)
    for col in ("trial", "role", "outcome", "knobs that differ from the defaults", "samples/s", "processes",
                "peak memory", "duration", "note"):
        grid.add_column(col, overflow="fold")
    for row in table:
        changes = " ".join(f"{k}={knobs.KNOBS[k].format(v)}" for k, v in row.changes.items() if k in knobs.KNOBS)
        note = (f"repeats #{row.repeat_of}" if row.repeat_of is not None else
                f"queued again for #{row.requeued_from}" if row.requeued_from is not None else row.error[:80])
        if row.numerics:
            note = f"recommended; numerics {row.numerics.replace('_', ' ')}"
        grid.add_row(f"#{row.number}", row.role, row.outcome or row.state,
                     changes or ("defaults" if row.config else "-"),
                     format_rate(row.samples_per_s) if row.samples_per_s is not None else "-",
                     str(row.processes) if row.processes is not None else "-",
                     format_bytes(row.peak_memory_bytes) if row.peak_memory_bytes is not None else "-",
                     format_duration(row.duration_s) if row.duration_s is not None else "-", note)
    out.print(grid)


@click.command()
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
              help="json (autotune.load_config), hf-trainer (TrainingArguments), lightning (Trainer + DataLoader), "
                   "accelerate (a config file).")
def export(study_name: str, pick: str, max_memory: int | None, storage: str | None, output: str | None,
           fmt: str) -> None:
    """Export a configuration: JSON for autotune.load_config(), or arguments for Hugging Face Trainer,
    Lightning or Accelerate (what a framework cannot express is listed, never dropped).

    \b
    Examples:
      autotune export mynet -o best.json                  # the recommendation (or the defaults, saying why)
      autotune export mynet --format hf-trainer -o training_args.py
      autotune export mynet --pick smallest --max-memory 20GiB --format lightning
    """
    from autotune.export import document
    from autotune.export import frameworks
    from autotune.reports import view

    frameworks.check_format(fmt)
    if output is not None:
        document.check_output(output)  # a folder or an unwritable place fails before the study is read
    store = study_store(study_name, storage, read_only=True)
    doc = view.export_of(store, study_name, pick, max_memory)
    if fmt != "json":
        rendered = frameworks.text(doc, fmt)
        if output is None:
            click.echo(rendered, nl=False)
            return
        document.write_text(rendered, output)
        missing = frameworks.render(doc, fmt)["not_expressible"]
        click.echo(f"wrote {output}: {fmt} arguments for trial #{doc['study']['trial']} "
                   f"({doc['speedup']['text'] if doc['speedup'] else '-'} the defaults)"
                   + (f"; by hand (the framework cannot express them): {', '.join(m['knob'] for m in missing)}"
                      if missing else ""))
        return
    if output is None:
        click.echo(json.dumps(doc, indent=2, default=str))
        return
    path = document.write(doc, output)
    from autotune.evidence.stats import interval_label
    from autotune.units import plural

    speed = f", {doc['speedup']['text']} the defaults{interval_label(doc['speedup'])}" if doc["speedup"] else ""
    click.echo(
        f"wrote {path}: trial #{doc['study']['trial']} ({pick}), "
        f"{format_rate(doc['measured']['samples_per_s'])} samples/s "
        f"from {plural(doc['measured']['processes'], 'process')}, "
        f"{format_bytes(doc['measured']['peak_memory_bytes'])}{speed}; "
        f"{knobs.short(doc['knobs'])}"
    )
    click.echo(doc["pick_note"])


@click.command()
@click.argument("study_name")
@storage_option("Storage URL (default: sqlite:///studies/<study>.db).")
@click.option("-o", "--output", default=None, help="Where to write the page (default: dashboards/<study>.html).")
@click.option("--watch", "watch_s", type=DURATION, default=None,
              help="Rewrite the page every N seconds while a study runs elsewhere (the page reloads itself).")
def dashboard(study_name: str, storage: str | None, output: str | None, watch_s: float | None) -> None:
    """Write a self-contained HTML dashboard of a study (plotly, works offline).

    \b
    Examples:
      autotune dashboard mynet                      # writes dashboards/mynet.html
      autotune dashboard mynet -o report.html --storage sqlite:///studies/mynet.db
      autotune dashboard mynet --watch 30           # rewrite it every 30 s while the study runs
    """
    from pathlib import Path

    from autotune.reports.dashboard import default_path, watch, write_dashboard
    from autotune.reports import view

    store = study_store(study_name, storage, read_only=True)

    def load() -> Any:
        return view.page_of(store, study_name)  # what the page shows: kept by the run that wrote the study last

    out = Path(output) if output else default_path(study_name)
    if watch_s is None:
        path = write_dashboard(load(), out)
        click.echo(f"wrote {path}")
        return
    click.echo(f"writing {out} every {watch_s:g}s; Ctrl-C to stop")
    try:
        watch(load, out, watch_s)
    except KeyboardInterrupt:
        click.echo("stopped")
