"""The dashboard page: one self-contained HTML file, written atomically, optionally rewritten on a timer.

:func:`render_html` puts the header, the figures, the front as a sortable table and
the failures table together; plotly.js is embedded once (compressed, unpacked by the browser) and each figure is drawn
from JSON held in the page, whose ``<``, ``>`` and ``&`` are escaped so nothing in it
can close its script tag. :func:`write_dashboard` replaces the file atomically;
:func:`watch` rewrites it while a study runs.
"""

from __future__ import annotations

import base64
import contextlib
import gc
import gzip
import json
import logging
import re
from importlib import resources
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import plotly.graph_objects as go
import plotly.io
import plotly.offline

from autotune import files
from autotune.errors import AutotuneError
from autotune.evidence.energy import joules
from autotune.reports.dashboard.bought import ablation_info
from autotune.reports.dashboard.failures import failures_info
from autotune.reports.dashboard.front import front_table_info, pareto_info, profile_info
from autotune.reports.dashboard.header import header_info
from autotune.reports.dashboard.history import history_info
from autotune.reports.dashboard.losses import numerics_figure, numerics_info
from autotune.reports.dashboard.knob_effects import importance_info, knob_effects_info, parallel_info
from autotune.reports.dashboard.timeline import duration_figure, history_figure
from autotune.reports.dashboard.charts import (
    OUTCOME_COLORS,
    ablation_figure,
    importance_figure,
    knob_figure,
    parallel_figure,
    pareto_figure,
    profile_figure,
)
from autotune.reports.dashboard.source import Snapshot, config_text, html_text, join, script_json
from autotune.units import plural
from autotune.store import StoredStudy
from autotune.units import clip, format_bytes, format_duration, format_percent, format_rate

log = logging.getLogger(__name__)

# ---------------------------------------------------------------- the page


class _Page:
    """Collects sections and figures; renders the final document."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.figures: list[dict[str, Any]] = []

    def add(self, markup: str) -> None:
        self.parts.append(markup)

    def section(self, anchor: str, title: str, parts: list[str]) -> None:
        """One ``<section>`` with its heading and body parts."""
        self.add(f'<section id="{anchor}"><h2>{title}</h2>' + "".join(parts) + "</section>")

    def figure(self, fig: go.Figure, css: str = "plot", name: str = "") -> str:
        fig_id = f"fig-{len(self.figures) + 1}"
        self.figures.append({"id": fig_id, "json": plotly.io.to_json(fig, validate=False)})
        return f'<div id="{fig_id}" class="{css}" data-name="{html_text(name)}"></div>'

    def figures_json(self) -> str:
        body = ",".join(f'{{"id":{json.dumps(f["id"])},"figure":{f["json"]}}}' for f in self.figures)
        return script_json(f"[{body}]")


def _note(text: str) -> str:
    return f'<p class="note">{html_text(text)}</p>'


def _header_html(h: Mapping[str, Any]) -> str:
    card_html = "".join(
        f'<div class="card"><div class="label">{html_text(c["label"])}</div>'
        f'<div class="value">{html_text(c["value"])}</div>'
        f'<div class="sub">{html_text(c["sub"])}</div></div>'
        for c in h["cards"]
    )
    verdict = f'<p class="verdict" id="verdict">{html_text(h["verdict"]["text"])}</p>'
    return (
        f'<header><h1>autotune study <span class="name">{html_text(h["name"])}</span></h1>'
        f'<p class="meta">{html_text(h["meta"])}</p>'
        f'<div class="cards">{card_html}</div>{verdict}</header>'
    )


def _front_table_html(info: Mapping[str, Any]) -> str:
    if not info["rows"]:
        return _note("No ok trial within the constraints yet, so there is no front.")
    cols = [
        ("#", "num"),
        ("role", "text"),
        ("samples/s", "num"),
        ("processes", "num"),
        ("peak memory", "num"),
        ("speed-up (90%)", "num"),
    ]
    if info["has_mfu"]:
        cols.append(("MFU", "num"))
    if info.get("has_energy"):
        cols.append(("energy", "num"))
    cols += [("data wait", "num"), ("first step", "num"), ("changes from PyTorch defaults", "text")]
    head = "".join(f'<th data-type="{kind}" title="sort">{html_text(name)}</th>' for name, kind in cols)
    body = []
    for r in info["rows"]:
        cells: list[tuple[Any, str]] = [
            (r["number"], f"#{r['number']}"),
            (r["role"], f"{r['role']} · recommended" if r.get("recommended") else r["role"]),
            (r["samples_per_s"], format_rate(r["samples_per_s"])),
            (r["processes"], str(r["processes"])),
            (r["peak_memory_bytes"], format_bytes(r["peak_memory_bytes"])),
            (r["speedup"], r["speedup_text"]),
        ]
        if info["has_mfu"]:
            cells.append((r["mfu"], format_percent(r["mfu"])))
        if info.get("has_energy"):
            per = r.get("joules_per_sample")
            cells.append((per, f"{joules(per)}/sample" if per is not None else "-"))
        cells += [
            (r["data_wait_share"], format_percent(r["data_wait_share"])),
            (r["time_to_first_step_s"], format_duration(r["time_to_first_step_s"])),
            (config_text(r["changes"]), config_text(r["changes"])),
        ]
        tds = "".join(f'<td data-v="{html_text("" if v is None else v)}">{html_text(text)}</td>' for v, text in cells)
        body.append(f"<tr>{tds}</tr>")
    return (
        f'<table class="sortable" id="front-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    )


def _failures_html(info: Mapping[str, Any]) -> str:
    if not info["rows"]:
        return _note("No trial failed.")
    if info.get("groups"):
        return _failure_groups_html(info)
    head = "".join(
        f'<th data-type="{k}" title="sort">{n}</th>'
        for n, k in (("#", "num"), ("outcome", "text"), ("error", "text"), ("configuration", "text"))
    )
    body = []
    for r in info["rows"]:
        message = clip(r["error_message"], 4000)
        kind = f"<b>{html_text(r['error_type'])}</b>: " if r["error_type"] else ""
        cached = (
            f' <span class="dim">(cached from #{r["duplicate_of"]})</span>' if r["duplicate_of"] is not None else ""
        )
        body.append(
            f'<tr><td data-v="{r["number"]}">#{r["number"]}</td>'
            f'<td data-v="{html_text(r["outcome"])}">'
            f'<span class="pill" style="background:{OUTCOME_COLORS.get(r["outcome"], "#555")}">'
            f'{html_text(r["outcome"])}</span>{cached}</td>'
            f'<td data-v="{html_text(r["error_type"])}" class="error">{kind}{html_text(message) or "-"}</td>'
            f'<td data-v="{html_text(config_text(r["changes"]))}" class="config">'
            f'{html_text(config_text(r["changes"]))}</td></tr>'
        )
    return (f'<table class="sortable" id="failures-table"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _failure_groups_html(info: Mapping[str, Any]) -> str:
    """The failures of a large study, one row per distinct error
    (:func:`autotune.reports.dashboard.failures.failure_groups`)."""
    groups = info["groups"]
    head = "".join(
        f'<th data-type="{k}" title="sort">{n}</th>'
        for n, k in (("trials", "num"), ("outcome", "text"), ("error", "text"), ("which", "num"),
                     ("configurations", "num"))
    )
    body = []
    for g in groups:
        message = clip(g["error_message"], 4000)
        kind = f"<b>{html_text(g['error_type'])}</b>: " if g["error_type"] else ""
        shown = ", ".join(f"#{n}" for n in g["numbers"]) + (", …" if g["count"] > len(g["numbers"]) else "")
        cached = f' <span class="dim">({g["cached"]:,} cached)</span>' if g["cached"] else ""
        body.append(
            f'<tr><td data-v="{g["count"]}">{g["count"]:,}</td>'
            f'<td data-v="{html_text(g["outcome"])}">'
            f'<span class="pill" style="background:{OUTCOME_COLORS.get(g["outcome"], "#555")}">'
            f'{html_text(g["outcome"])}</span>{cached}</td>'
            f'<td data-v="{html_text(g["error_type"])}" class="error">{kind}{html_text(message) or "-"}</td>'
            f'<td data-v="{g["numbers"][0]}" class="config">{html_text(shown)}</td>'
            f'<td data-v="{g["configurations"]}">{g["configurations"]:,}</td></tr>'
        )
    note = _note(
        f"{len(info['rows']):,} failed trials, one row per distinct error ({len(groups):,}), the most frequent first, "
        "with the first of its trials."
    )
    return (
        note + f'<table class="sortable" id="failures-table"><thead><tr>{head}</tr></thead>'
        f'<tbody>{"".join(body)}</tbody></table>'
    )


def render_html(study: StoredStudy | Snapshot | Drawn, refresh_s: float | None = None) -> str:
    """The whole dashboard page as a string (see the module docstring), of a study or of its page as :func:`draw`
    drew it (as the run that wrote a study last keeps it: :func:`autotune.reports.view.page_of`)."""
    drawn = study if isinstance(study, Drawn) else draw(study)
    refresh = f'<meta http-equiv="refresh" content="{max(1, round(refresh_s))}">' if refresh_s else ""
    return (drawn.text.replace(_REFRESH, refresh, 1)
            .replace(_GENERATED, html_text(time.strftime("%Y-%m-%d %H:%M:%S")), 1)
            .replace(_PLOTLY, _plotly_js(), 1))


@dataclass(frozen=True)
class Drawn:
    """A study's page as drawn (:func:`draw`), less what changes with each writing: when it was made, whether it
    reloads itself, and plotly.js (the same in every page of a version), each a marker :func:`render_html` fills."""

    name: str
    text: str


def draw(study: StoredStudy | Snapshot) -> Drawn:
    """The study's page (:class:`Drawn`): everything it shows, drawn once (what a run keeps of a large study)."""
    with _no_cycle_collection():
        snap = Snapshot.of(study)
        return Drawn(snap.name, _render_html(_page_info(snap)))


#: Markers in a drawn page, filled when the page is written.
_REFRESH, _GENERATED, _PLOTLY = "<!--autotune:refresh-->", "<!--autotune:generated-->", "<!--autotune:plotly.js-->"


def _page_info(study: StoredStudy | Snapshot) -> dict[str, Any]:
    """Everything the page shows of the study, as plain JSON-able data (each part's *info* function's), in the
    order the page shows them: the page is drawn from it alone."""
    snap = Snapshot.of(study)
    return {"name": snap.name, "header": header_info(snap), "pareto": pareto_info(snap),
            "front_table": front_table_info(snap), "bought": ablation_info(snap), "numerics": numerics_info(snap),
            "effects": knob_effects_info(snap),
            "importance": importance_info(snap), "parallel": parallel_info(snap), "history": history_info(snap),
            "profile": profile_info(snap), "failures": failures_info(snap)}


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector paused while the page is made: it makes hundreds of thousands of rows and lists that
    hold no cycle, and each of the collector's full passes would walk them all, and the study read (a third of a
    10,000-trial page's time). Resumed as it was after, which collects the few cycles plotly's figures made."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _render_html(info: Mapping[str, Any]) -> str:
    page = _Page()
    header = info["header"]
    page.add(_header_html(header))
    page.add(
        '<nav><a href="#front">Pareto front</a><a href="#bought">What each knob bought</a>'
        '<a href="#numerics">Numerics</a>'
        '<a href="#knobs">What each knob does</a><a href="#history">History</a>'
        '<a href="#time">Where time goes</a><a href="#failures">Failures</a></nav>'
    )

    pareto = info["pareto"]
    unit, scale = pareto["memory_unit"], pareto["memory_scale"]
    section: list[str] = []
    if pareto["points"] or pareto["failed"]:
        section.append(page.figure(pareto_figure(pareto), name="pareto"))
        section.append(
            '<p class="hint">Hover a point for its knobs. '
            'Failed trials sit at 0 samples/s, at their memory when known.</p>'
        )
    else:
        section.append(_note("No finished trial yet."))
    section.append("<h3>Recommended, then the front</h3>")
    section.append(_front_table_html(info["front_table"]))
    page.section("front", "Pareto front: samples/s against peak memory", section)

    bought = info["bought"]
    if bought["steps"]:
        section = [page.figure(ablation_figure(bought), name="ablation"),
                   f'<p class="hint">{html_text(bought["text"])}.</p>']
    else:
        section = [_note("Measured once the race settles a gain: the path from the defaults to the winner, one knob "
                         "at a time, each step's speed-up in shared processes.")]
    page.section("bought", "What each knob bought, from the defaults", section)

    numerics = info["numerics"]
    if numerics["curves"]:
        section = [page.figure(numerics_figure(numerics), name="numerics"),
                   f'<p class="hint">{html_text(numerics["text"])}; '
                   "each run trained from the same weights on the same samples per optimizer step.</p>"]
    else:
        section = [_note("Checked once the verdict recommends a change: the recommendation trained beside the "
                         "defaults from the same weights on the same samples, and their losses compared.")]
    page.section("numerics", "Numerics: the loss beside the defaults'", section)

    effects = info["effects"]
    section = []
    shown = [k for k in effects["knobs"] if k["values"]]
    if shown:
        section.append('<div class="grid">')
        for k in shown:
            drawn = page.figure(knob_figure(k, unit, scale), "plot small", "knob:" + k["name"])
            section.append(f'<div class="knob">{drawn}<p class="hint">{html_text(k["help"])}</p></div>')
        section.append("</div>")
    else:
        section.append(_note("No ok trial yet: nothing to show per knob."))
    importance = info["importance"]
    section.append("<h3>Knob importance</h3>")
    if importance["samples_per_s"]:
        section.append(page.figure(importance_figure(importance), name="importance"))
        section.append(f'<p class="hint">{html_text(importance["method"])}</p>')
    else:
        section.append(_note(importance["note"] or "No importance."))
    parallel = info["parallel"]
    section.append("<h3>Knobs against samples/s</h3>")
    if parallel["numbers"] and parallel["dimensions"]:
        section.append(page.figure(parallel_figure(parallel, unit, scale), name="parallel"))
        drawn = len(parallel["numbers"])
        sample = (f" {drawn:,} of the {parallel['of']:,} ok trials are drawn: every front point and a random sample "
                  "of the rest." if drawn < parallel["of"] else "")
        section.append(f'<p class="hint">Drag along an axis to filter the lines.{html_text(sample)}</p>')
    else:
        section.append(_note("No ok trial with searched knobs yet."))
    page.section("knobs", "What each knob does", section)

    history = info["history"]
    section = []
    if history["numbers"]:
        section.append(page.figure(history_figure(history), name="history"))
        ref = history["reference"]["peak_memory_bytes"]
        section.append(
            f'<p class="hint">Hypervolume reference point: 0 samples/s, {html_text(format_bytes(ref))} '
            '(1.1 × the largest peak memory of an ok trial).</p>'
        )
        section.append("<h3>Time per trial</h3>")
        section.append(page.figure(duration_figure(history), name="durations"))
        again = history["remeasurements"]
        if again["count"]:
            guessed = again["estimated"] + again["untimed"]
            section.append(
                '<p class="hint">'
                + html_text(
                    join(
                        [
                            f"On top of each trial, the time its configuration was measured again "
                            f"(noise floor, race, what each knob bought): "
                            f"{plural(again['count'], 're-measurement')}, {format_duration(again['time_s'])} in all",
                            f"{guessed} of them were not timed when stored and are estimated as long as their trial's "
                            f"own measurement (hatched)"
                            if guessed
                            else "",
                        ],
                        "; ",
                    )
                )
                + ".</p>"
            )
    else:
        section.append(_note("No finished trial yet."))
    page.section("history", "History", section)

    prof = info["profile"]
    page.section(
        "time",
        "Where time goes on the front",
        [
            page.figure(profile_figure(prof), name="profile")
            if prof["trials"]
            else _note("No profile for the front trials.")
        ],
    )

    failures = info["failures"]
    page.section("failures", "Failures", [_failures_html(failures)])

    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8">{_REFRESH}'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>autotune · {html_text(info['name'])}</title><style>{_asset('page.css')}</style>"
        f"<script>{_asset('early.js')}</script></head><body>"
        + "".join(page.parts)
        + (f"<footer>Generated {_GENERATED} by autotune. "
           "Everything on this page is embedded; it needs no network.</footer>")
        + '<pre id="autotune-selftest" hidden></pre>'
        + f'<script type="application/json" id="autotune-figures">{page.figures_json()}</script>'
        + f'<script type="application/octet-stream" id="autotune-plotly">{_PLOTLY}</script>'
        + f"<script>{_asset('page.js')}</script></body></html>\n"
    )


DASHBOARDS_DIR = Path("dashboards")


def default_path(study_name: str) -> Path:
    """Where a study's dashboard goes by default: ``dashboards/<study>.html`` (name made file-safe)."""
    return DASHBOARDS_DIR / f"{_file_safe(study_name)}.html"


def _file_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "study"


def write_dashboard(study: StoredStudy | Drawn, path: str | Path, refresh_s: float | None = None) -> Path:
    """Write the dashboard of ``study`` (or its page as :func:`draw` drew it) to ``path`` (parents created, replaced
    atomically); returns the path.

    A ``path`` that is an existing folder gets ``<study>.html`` inside it. With
    ``refresh_s`` the page reloads itself that often (see :func:`watch`). A path
    that cannot be written raises :class:`~autotune.errors.AutotuneError`.
    """
    target = Path(path)
    if target.is_dir():
        target = target / f"{_file_safe(study.name)}.html"
    text = render_html(study, refresh_s=refresh_s)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        files.write_atomic(target, text)
    except OSError as exc:
        raise AutotuneError(f"cannot write the dashboard to {target}: {exc.strerror or exc}") from None
    return target


def watch(
    load_study: Callable[[], StoredStudy | Drawn],
    path: str | Path,
    interval_s: float,
    stop: Callable[[], bool] | None = None,
    iterations: int | None = None,
) -> None:
    """Rewrite the dashboard every ``interval_s`` seconds until ``stop()`` is true or ``iterations`` pages are written.

    The study is loaded again each time (``load_study``), so the page follows a
    running study; the page reloads itself at the same interval. An error on the
    first load is raised; a later one (a busy database) is logged and the old page
    kept until the next round.
    """
    if not interval_s > 0:
        raise ValueError(f"interval_s must be positive, got {interval_s}")
    done = 0
    while True:
        try:
            write_dashboard(load_study(), path, refresh_s=interval_s)
        except Exception as exc:
            if done == 0:
                raise
            log.warning("dashboard not updated: %s", exc)
        done += 1
        if iterations is not None and done >= iterations:
            return
        deadline = time.monotonic() + interval_s
        while True:
            if stop is not None and stop():
                return
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(left, 0.25))


_PLOTLY_JS: str | None = None


def _asset(name: str) -> str:
    """A part of the page kept as a file of the package, read once: ``page.css`` (its style), ``early.js`` (runs first:
    records JavaScript errors, and with ``#selftest`` console errors, for the self-test), ``page.js`` (draws the
    figures, makes the tables sortable, and with ``#selftest`` writes a JSON summary into ``#autotune-selftest``)."""
    if name not in _ASSETS:
        _ASSETS[name] = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    return _ASSETS[name]


_ASSETS: dict[str, str] = {}


def _plotly_js() -> str:
    """plotly.js gzip-compressed and base64-encoded, made once per process: 4.8 MB of script become 2.0 MB, which
    the page unpacks with the browser's own DecompressionStream (base64 holds no character that could close
    its script element)."""
    global _PLOTLY_JS
    if _PLOTLY_JS is None:
        _PLOTLY_JS = base64.b64encode(
            gzip.compress(plotly.offline.get_plotlyjs().encode("utf-8"), 9, mtime=0)).decode("ascii")
    return _PLOTLY_JS
