"""The dashboard (autotune.reports.dashboard): every info function on a stored study, escaping, the page, watch.

The studies are written through the store's writers (autotune/testing/studies.py, autotune.store.writing) and
read back as the StoredStudy every view computes from."""

from __future__ import annotations

import html
import base64
import gzip
import json
import math
import re
import time

import optuna
import pytest
from autotune.testing.studies import CAPACITY, MiB, add_failed_trial, add_race, make_study, storage_url

from autotune import knobs
from autotune.reports import dashboard
from autotune.errors import AutotuneError
from autotune.store import Store, StoredStudy
from autotune.store import writing
from autotune.evidence import evidence_of

HOSTILE_NAME = "<script>alert(1)</script>"
HOSTILE_MESSAGE = "bad input <img src=x onerror=alert(1)> & more"


def read(study) -> StoredStudy:
    """A study as every view reads it (a study already read is itself)."""
    return study if isinstance(study, StoredStudy) else StoredStudy.of(study)


def made(**kwargs) -> StoredStudy:
    """A made-up study in memory (autotune.testing.studies.make_study), read."""
    return read(make_study(optuna.storages.InMemoryStorage(), **kwargs))


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A 40-trial study in a real SQLite file, read back as the CLI would (and Optuna's own study of it)."""
    path = tmp_path_factory.mktemp("report") / "demo.db"
    make_study(path, n_trials=40, seed=0)
    url = storage_url(path)
    return url, Store(url, read_only=True).read("demo"), optuna.load_study(study_name="demo", storage=url)


@pytest.fixture(scope="module")
def snap(stored):
    return dashboard.snapshot(stored[1])


def ok_measured(study: StoredStudy):
    return [t for t in study.trials if t.outcome == "ok" and t.duplicate_of is None]


def assert_json(info):
    json.dumps(info, allow_nan=False)


def page_figures(page: str) -> list[dict]:
    """The plotly figures a page embeds, read as strictly as a browser's JSON.parse (no NaN, no Infinity)."""
    data = re.search(r'<script type="application/json" id="autotune-figures">(.*?)</script>', page, re.DOTALL)
    assert data, "the page embeds no figures"

    def refuse(constant):
        raise AssertionError(f"the figures' JSON holds {constant}, which a browser cannot parse")

    return [f["figure"] for f in json.loads(data.group(1), parse_constant=refuse)]


def axis_title(fig: dict, axis: str) -> str | None:
    return ((fig["layout"].get(axis) or {}).get("title") or {}).get("text")


def pareto_figure(figures: list[dict]) -> dict:
    """The page's one samples/s-against-peak-memory figure."""
    (fig,) = [f for f in figures
              if (axis_title(f, "xaxis") or "").startswith("peak memory") and axis_title(f, "yaxis") == "samples/s"]
    return fig


def trials_card(page: str) -> tuple[int, list[str]]:
    """The header's trials card: the count, and its outcome counts ("6 ok", "1 running", ...)."""
    card = re.search(r'<div class="label">trials</div><div class="value">(\d+)</div>'
                     r'<div class="sub">([^<]*)</div>', page)
    assert card, "the page has no trials card"
    return int(card.group(1)), card.group(2).split(";")[0].split(", ")


def test_snapshot_reads_every_trial(stored, snap):
    _, study, live = stored
    assert [r["number"] for r in snap.rows] == [t.number for t in study.trials]
    assert {r["outcome"] for r in snap.rows} >= {"ok", "oom", "nan", "error", "interrupted"}
    assert any(r["duplicate_of"] is not None for r in snap.rows)
    expected = {t.number for t in live.best_trials if study.trial(t.number).duplicate_of is None}
    assert set(snap.front) == expected and snap.front
    speeds = [snap.by_number()[n]["samples_per_s"] for n in snap.front]
    assert speeds == sorted(speeds, reverse=True)


def test_header_info(stored, snap):
    _, study, _ = stored
    info = dashboard.header_info(snap)
    assert_json(info)
    assert info["name"] == "demo"
    assert info["workload"]["model"] == "autotune.examples:cnn"
    assert info["fingerprint"]["cpu_count"] == 2 and info["fingerprint"]["torch"] and info["fingerprint"]["device_name"]
    assert sum(info["outcomes"].values()) + info["duplicates"] == len(study.trials)
    assert info["total_time_s"] == pytest.approx(sum(t.duration_s or 0.0 for t in study.trials))
    assert info["baseline"]["number"] == 0 and info["baseline"]["config_text"] == "defaults"
    # the card shows the recommendation: with no race nothing beats the defaults beyond the noise, so the defaults
    assert evidence_of(study).verdict().state == "no_gain"
    assert info["best"]["number"] == snap.recommended()["number"] == 0
    assert info["best_speedup"] == pytest.approx(1.0)


def test_pareto_info(stored, snap):
    _, study, _ = stored
    info = dashboard.pareto_info(study)  # takes the stored study as well as a snapshot
    assert_json(info)
    assert {p["number"] for p in info["points"]} == {t.number for t in ok_measured(study)}
    assert set(info["front"]) == set(snap.front)
    memories = [next(p for p in info["points"] if p["number"] == n)["peak_memory_bytes"] for n in info["front"]]
    assert memories == sorted(memories)  # joined left to right
    assert all(p["on_front"] == (p["number"] in info["front"]) for p in info["points"])
    outcomes = {f["outcome"] for f in info["failed"]}
    assert outcomes >= {"oom", "nan", "error", "interrupted"}
    oom = next(f for f in info["failed"] if f["outcome"] == "oom" and f["number"] == 3)
    assert oom["peak_memory_bytes"] == CAPACITY  # known memory is kept; unknown ones go to the edge
    assert info["edge_memory_bytes"] > max(p["peak_memory_bytes"] for p in info["points"])
    assert {label["role"] for label in info["labels"]} == {"baseline", "recipe"}
    assert info["max_memory_bytes"] is None and info["memory_unit"] in ("MiB", "GiB")
    baseline = next(p for p in info["points"] if p["role"] == "baseline")
    assert baseline["speedup"] == pytest.approx(1.0)


def test_pareto_with_memory_budget():
    budget = 700 * MiB
    study = made(n_trials=30, seed=1, max_memory_bytes=budget)
    info = dashboard.pareto_info(study)
    assert info["max_memory_bytes"] == budget
    over = [p for p in info["points"] if not p["feasible"]]
    assert over and all(p["peak_memory_bytes"] > budget for p in over)
    assert all(p["feasible"] for p in info["points"] if p["on_front"])
    fig = dashboard.pareto_figure(info)
    assert any(shape.x0 == pytest.approx(budget / info["memory_scale"]) for shape in fig.layout.shapes)


def test_front_table_info(snap):
    info = dashboard.front_table_info(snap)
    assert_json(info)
    rec = snap.recommended()["number"]
    # the recommendation first (here the defaults, which the front leaves out), then the front, fastest first
    assert [r["number"] for r in info["rows"]] == [rec, *(n for n in snap.front if n != rec)]
    assert [r["number"] for r in info["rows"] if r["recommended"]] == [rec]
    defaults = knobs.defaults(knobs.Context.from_dict(snap.study.context))
    baseline = snap.baseline()["samples_per_s"]
    for row in info["rows"]:
        assert row["speedup"] == pytest.approx(row["samples_per_s"] / baseline)
        config = snap.by_number()[row["number"]]["config"]
        assert set(row["changes"]) == {k for k, v in config.items() if defaults[k] != v}
    # the MFU of each row is the one every view shows (autotune.evidence.efficiency), never a trial's own record
    from autotune.evidence import efficiency

    expected = {r["number"]: (f.mfu if (f := efficiency.figure(snap.study, r["number"])) else None)
                for r in info["rows"]}
    assert {r["number"]: r["mfu"] for r in info["rows"]} == expected
    assert info["has_mfu"] == any(v is not None for v in expected.values())


def test_knob_effects_info(stored, snap):
    _, study, _ = stored
    info = dashboard.knob_effects_info(snap)
    assert_json(info)
    names = [k["name"] for k in info["knobs"]]
    assert set(names) == set(study.space["search"])
    assert names == sorted(names, key=knobs.NAMES.index)
    n_ok = len(ok_measured(study))
    for knob in info["knobs"]:
        assert sum(len(v["numbers"]) for v in knob["values"]) == n_ok
        for v in knob["values"]:
            assert len(v["samples_per_s"]) == len(v["peak_memory_bytes"]) == len(v["numbers"])
    by_name = {k["name"]: k for k in info["knobs"]}
    assert [v["value"] for v in by_name["precision"]["values"]] == ["fp32", "bf16"]
    assert {v["value"] for v in by_name["activation_checkpointing"]["values"]} <= {"off", "on"}


def test_importance_info(snap):
    info = dashboard.importance_info(snap)
    assert_json(info)
    assert info["note"] is None
    assert set(info["samples_per_s"]) <= set(dashboard.searched_knobs(snap)) and info["samples_per_s"]
    assert all(0.0 <= v <= 1.0 for v in [*info["samples_per_s"].values(), *info["peak_memory_bytes"].values()])
    assert max(info["peak_memory_bytes"], key=info["peak_memory_bytes"].get) == "batch_size"
    assert max(info["samples_per_s"], key=info["samples_per_s"].get) == "threads"  # the made-up model's largest factor


def test_importance_with_too_few_trials_is_a_note():
    study = made(n_trials=3, with_failures=False)
    info = dashboard.importance_info(study)
    assert info["samples_per_s"] == {} and "at least" in info["note"]
    assert "Knob importance needs" in dashboard.render_html(study)


def test_parallel_info(snap):
    info = dashboard.parallel_info(snap)
    assert_json(info)
    n = len(info["numbers"])
    assert n == len(snap.measured_ok()) == len(info["samples_per_s"]) == len(info["peak_memory_bytes"])
    dims = {d["name"]: d for d in info["dimensions"]}
    assert dims["batch_size"]["numeric"] and dims["batch_size"]["tickvals"]  # a range: numeric axis, whole ticks
    assert all(float(v).is_integer() for v in dims["batch_size"]["tickvals"])
    assert dims["precision"]["ticktext"] == ["fp32", "bf16"]
    assert dims["threads"]["ticktext"] == ["1", "2"]  # searched as choices: categorical
    for d in info["dimensions"]:
        assert len(d["values"]) == n


def test_hypervolume_2d():
    assert dashboard.hypervolume_2d([], 5.0) == 0.0
    assert dashboard.hypervolume_2d([(10.0, 2.0)], 5.0) == pytest.approx(30.0)
    two = [(10.0, 2.0), (20.0, 4.0)]
    assert dashboard.hypervolume_2d(two, 5.0) == pytest.approx(3 * 10 + 1 * 10)
    assert dashboard.hypervolume_2d(two + [(5.0, 3.0), (30.0, 6.0), (0.0, 1.0)], 5.0) == pytest.approx(40.0)


def test_history_info(stored, snap):
    _, study, _ = stored
    info = dashboard.history_info(snap)
    assert_json(info)
    finished = [t.number for t in study.trials if t.finished]
    assert info["numbers"] == finished and len(info["durations"]) == len(finished)
    assert info["metric"] == "speedup" and info["best_so_far"][0] == pytest.approx(1.0)
    assert all(a <= b for a, b in zip(info["best_so_far"], info["best_so_far"][1:]))
    assert all(a <= b + 1e-9 for a, b in zip(info["hypervolume"], info["hypervolume"][1:]))
    ref = info["reference"]["peak_memory_bytes"]
    assert ref == pytest.approx(1.1 * max(t.values[1] for t in ok_measured(study)))
    front = [(snap.by_number()[n]["samples_per_s"], snap.by_number()[n]["peak_memory_bytes"]) for n in snap.front]
    assert info["hypervolume"][-1] == pytest.approx(dashboard.hypervolume_2d(front, ref))
    assert 0 < info["hypervolume_share"][-1] <= 1
    assert {d["outcome"] for d in info["durations"]} >= {"ok", "oom", "interrupted"}


def test_history_keeps_the_hypervolume_of_every_point_so_far_exactly(snap):
    """history_info keeps only the non-dominated points as it goes; each step's volume is exactly that of every
    point measured so far, ties in memory and in rate included."""
    info = dashboard.history_info(snap)
    ref = info["reference"]["peak_memory_bytes"]
    rows = snap.by_number()
    seen: list[tuple[float, float]] = []
    for number, volume in zip(info["numbers"], info["hypervolume"]):
        r = rows[number]
        if r["outcome"] == "ok" and r["duplicate_of"] is None and r["feasible"] and r["samples_per_s"] is not None:
            seen.append((r["samples_per_s"], r["peak_memory_bytes"]))
            seen.append((r["samples_per_s"] * 0.5, r["peak_memory_bytes"]))  # a tie in memory, slower
        assert volume == dashboard.hypervolume_2d(seen, ref)


def test_profile_info(snap):
    info = dashboard.profile_info(snap)
    assert_json(info)
    assert [t["number"] for t in info["trials"]] == snap.front
    assert 0 < len(info["ops"]) <= dashboard.MAX_OPS
    for t in info["trials"]:
        assert set(t["ops"]) == set(info["ops"])
        assert t["other_share"] == pytest.approx(max(0.0, 1 - sum(t["ops"].values())))
        assert 0 <= t["data_wait_share"] <= 1


def test_profile_names_compiled_graphs_as_readers_know_them():
    """A compiled trial's profile names its graph ``## Call CompiledFxGraph <hash> ##``, a new hash per trial: the
    dashboard shows one readable ``compiled graph`` entry, not one raw name per hash."""
    import dataclasses

    src = made(n_trials=12, seed=0, with_failures=False)
    trials = []
    for t in src.trials:
        profile = t.result.get("profile")
        if isinstance(profile, dict) and profile.get("top_ops"):
            ops = [dict(op) for op in profile["top_ops"]]
            ops[0]["name"] = f"## Call CompiledFxGraph f{t.number:03d}qrddoohho5abcdefghijklmn ##"
            t = dataclasses.replace(t, result={**t.result, "profile": {**profile, "top_ops": ops}})
        trials.append(t)
    info = dashboard.profile_info(src.with_trials(trials))
    assert "compiled graph" in info["ops"] and not [name for name in info["ops"] if "CompiledFxGraph" in name]
    assert len(info["trials"]) >= 2 and all("compiled graph" in t["ops"] for t in info["trials"])


def test_failures_info(stored):
    _, study, _ = stored
    info = dashboard.failures_info(study)
    assert_json(info)
    failed = [t.number for t in study.trials if t.outcome != "ok"]
    assert [r["number"] for r in info["rows"]] == failed
    oom = next(r for r in info["rows"] if r["outcome"] == "oom")
    assert oom["error_type"] == "OutOfMemoryError" and "out of memory" in oom["error_message"]
    assert set(info["by_outcome"]) >= {"oom", "nan", "error", "interrupted"}


# ---------------------------------------------------------------- the page


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """A stored study whose name, error message and workload spec hold HTML."""
    path = tmp_path_factory.mktemp("hostile") / "hostile.db"
    study = make_study(path, n_trials=10, name=HOSTILE_NAME)
    add_failed_trial(study, message=HOSTILE_MESSAGE, error_type="<b>Err</b>")
    writing.save(study, workload={**read(study).workload, "model": "evil:<iframe src=x>"})
    # (a name no store accepts: read through Optuna, as a foreign storage would hold it)
    return read(optuna.load_study(study_name=HOSTILE_NAME, storage=storage_url(path)))


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_page_escapes_user_strings(hostile):
    page = dashboard.render_html(hostile)
    assert HOSTILE_NAME not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img src=x onerror=alert(1)>" not in page
    assert "&lt;img src=x onerror=alert(1)&gt; &amp; more" in page
    assert "<iframe" not in page and "&lt;iframe src=x&gt;" in page
    assert "<b>Err</b>" not in page
    # Only the page's own four script elements, and nothing in the embedded JSON can close one.
    assert len(re.findall(r"<script[\s>]", page)) == 4
    assert page.count("</script>") == 4
    data = re.search(r'<script type="application/json" id="autotune-figures">(.*?)</script>', page, re.DOTALL).group(1)
    assert "<" not in data and ">" not in data and "&" not in data
    figures = json.loads(data)
    texts = json.dumps(figures)
    assert "<img" not in texts and "<script>" not in texts  # plotly labels and hovers are escaped too
    assert "&lt;img src=x onerror=alert(1)&gt;" in texts


def test_script_json_cannot_close_the_tag():
    text = dashboard.script_json({"a": "</script><script>alert(1)</script>", "b": "x & y", "c": "\u2028"})
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"a": "</script><script>alert(1)</script>", "b": "x & y", "c": "\u2028"}


def test_optuna_reads_the_stored_study(stored):
    url, view, _ = stored
    study = optuna.load_study(study_name="demo", storage=url)
    assert study.metric_names == ["samples_per_s", "peak_memory_bytes"]
    assert view.trials[0].role == "baseline" and view.trials[1].role == "recipe"
    assert study.trials[3].constraints == {"failed": 1.0, "memory": 0.0} == view.trials[3].constraints
    assert all(view.trial(t.number).outcome == "ok" for t in study.best_trials)
    fig = optuna.visualization.plot_pareto_front(study)
    assert len(fig.data) >= 1


def test_write_dashboard(stored, tmp_path):
    _, study, _ = stored
    target = tmp_path / "deep" / "er" / "demo.html"
    assert dashboard.write_dashboard(study, str(target)) == target
    page = target.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "http-equiv" not in page
    packed = re.findall(r'<script type="application/octet-stream" id="autotune-plotly">([A-Za-z0-9+/=]+)</script>',
                        page)
    # embedded once
    assert len(packed) == 1 and gzip.decompress(base64.b64decode(packed[0])).decode().count("plotly.js v") == 1
    assert len(page) < 2.5e6  # compressed: plotly.js alone is 4.8 MB
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page)  # nothing to fetch
    assert [p.name for p in target.parent.iterdir()] == ["demo.html"]  # no temp file left
    dashboard.write_dashboard(study, target, refresh_s=7.4)
    assert '<meta http-equiv="refresh" content="7">' in target.read_text(encoding="utf-8")


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_write_dashboard_into_a_folder_and_unwritable_paths(hostile, tmp_path):
    written = dashboard.write_dashboard(hostile, tmp_path)
    assert written.parent == tmp_path and written.name == "script_alert_1_script.html"
    assert dashboard.default_path("my/model:v2") == dashboard.DASHBOARDS_DIR / "my_model_v2.html"
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(AutotuneError, match="cannot write the dashboard"):
        dashboard.write_dashboard(hostile, blocker / "page.html")


def test_running_trials_are_counted_not_drawn(tmp_path):
    live = make_study(optuna.storages.InMemoryStorage(), n_trials=12)
    running = live.ask()
    writing.mark(running, role="search")
    study = read(live)
    snap = dashboard.snapshot(study)
    assert dashboard.header_info(snap)["outcomes"]["running"] == 1
    assert running.number not in dashboard.history_info(snap)["numbers"]
    assert running.number not in [f["number"] for f in dashboard.pareto_info(snap)["failed"]]
    assert running.number not in [r["number"] for r in dashboard.failures_info(snap)["rows"]]
    page = dashboard.render_html(snap)
    finished = {t.number for t in study.trials if t.finished}
    assert running.number not in finished and len(finished) == 12
    # counted: the header's card counts it, as running
    count, outcomes = trials_card(page)
    assert count == 13 and "1 running" in outcomes, outcomes
    # not drawn: no figure holds it, while every finished trial is drawn
    figures = page_figures(page)
    pareto = pareto_figure(figures)
    hovers = " ".join(h for trace in pareto["data"] for h in trace.get("hovertext") or [])
    drawn = {int(n) for n in re.findall(r"<b>#(\d+)</b>", hovers)}
    cached = {t.number for t in study.trials if t.duplicate_of is not None}
    assert drawn == finished - cached, (drawn, finished, cached)
    assert sum(len(trace["x"]) for trace in pareto["data"]) == len(finished - cached)
    by_trial = [f for f in figures if axis_title(f, "xaxis") == "trial"]
    assert [axis_title(f, "yaxis") for f in by_trial] == ["speed-up over baseline", "duration (s)"]
    history, durations = by_trial
    assert {x for trace in history["data"] for x in trace["x"]} == finished
    assert sorted(x for trace in durations["data"] for x in trace["x"]) == sorted(finished)


def test_a_200_trial_page_is_quick(tmp_path):
    study = made(n_trials=200, seed=3)
    start = time.perf_counter()
    path = dashboard.write_dashboard(study, tmp_path / "big.html")
    elapsed = time.perf_counter() - start
    page = path.read_text(encoding="utf-8")
    assert "<h2>Failures</h2>" in page and 'id="front-table"' in page
    assert elapsed < 30  # ~1 s here; the benchmark tracks the real figure


def test_empty_and_foreign_studies_render(tmp_path):
    empty = optuna.create_study(directions=["maximize", "minimize"])
    page = dashboard.render_html(read(empty))
    assert "No finished trial yet." in page and page_figures(page) == []
    assert trials_card(page) == (0, ["none yet"])
    foreign = optuna.create_study(direction="maximize")  # not an autotune study at all
    foreign.optimize(
        lambda t: t.suggest_float("x", 0, 1) + (t.suggest_categorical("c", ["a", "<b>"]) == "a"), n_trials=6
    )
    foreign.enqueue_trial({"c": "<b>"})
    failing = foreign.ask({"c": optuna.distributions.CategoricalDistribution(["a", "<b>"])})
    foreign.tell(failing, state=optuna.trial.TrialState.FAIL)
    page = dashboard.render_html(read(foreign))
    assert "Knobs against samples/s" in page and "c=<b>" not in page and "c=&lt;b&gt;" in page
    assert trials_card(page) == (7, ["6 ok", "1 error"])
    figures = page_figures(page)
    (parallel,) = [f for f in figures if [t["type"] for t in f["data"]] == ["parcoords"]]
    # its own parameters, drawn as knobs
    assert [d["label"] for d in parallel["data"][0]["dimensions"]][:2] == ["c", "x"]
    pareto = pareto_figure(figures)
    assert sorted(trace["name"] for trace in pareto["data"]) == ["error (1)", "trials (6)"]
    assert (sorted(pareto["data"][[t["name"] for t in pareto["data"]].index("trials (6)")]["y"])
            == sorted(t.value for t in foreign.trials[:6]))
    nan_study = optuna.create_study(directions=["maximize", "minimize"])
    t = nan_study.ask()
    writing.mark(t, outcome="ok", result={"samples_per_s": math.inf, "peak_memory_bytes": "lots", "profile": "oops"})
    nan_study.tell(t, [1.0, 2.0])
    page = dashboard.render_html(read(nan_study))
    # the broken result attributes are ignored: the trial is drawn from its values, and no inf reaches the JSON
    figures = page_figures(page)
    assert trials_card(page) == (1, ["1 ok"])
    pareto = pareto_figure(figures)
    assert [(trace["x"], trace["y"]) for trace in pareto["data"]] == [([2.0], [1.0])]  # 2 bytes, 1 sample/s
    assert "No profile for the front trials." in page


@pytest.mark.slow  # 3 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_watch_rewrites_until_told(stored, tmp_path):
    _, study, _ = stored
    target = tmp_path / "live.html"
    loads = []

    def load():
        loads.append(1)
        if len(loads) == 2:
            raise RuntimeError("database is locked")  # a later failure keeps the old page
        return study

    dashboard.watch(load, target, interval_s=0.01, iterations=3)
    assert len(loads) == 3 and 'content="1"' in target.read_text(encoding="utf-8")

    calls = []
    dashboard.watch(lambda: study, target, interval_s=0.01, stop=lambda: calls.append(1) or len(calls) >= 2)
    assert len(calls) == 2

    with pytest.raises(RuntimeError):
        dashboard.watch(lambda: (_ for _ in ()).throw(RuntimeError("no such study")), tmp_path / "x.html", interval_s=1)
    with pytest.raises(ValueError):
        dashboard.watch(lambda: study, target, interval_s=0)


# ---------------------------------------------------------------- what a reader sees


SEPARATORS = (";", ",", "·", ":")


def assert_tidy(text: str) -> None:
    """No dangling, doubled or empty separators, and no count that disagrees with its noun."""
    stripped = text.strip()
    assert stripped == text, repr(text)
    for sep in SEPARATORS:
        assert not stripped.startswith(sep) and not stripped.endswith(sep), repr(text)
    assert not re.search(r"[;,·]\s*[;,·]", text), repr(text)
    assert not re.search(r"\b1 (trials|processes|CPUs|re-measurements|classes)\b", text), repr(text)


def test_header_texts_agree_in_number_and_leave_no_separator_dangling():
    # the recipe's bigger batch is slower here and takes more memory: the baseline alone is the front
    live = make_study(
        optuna.storages.InMemoryStorage(), n_trials=2, with_failures=False, speed=lambda c: 2e3 / c["batch_size"]
    )
    writing.save(live, workload={"model": "hf:gpt2", "data": None, "model_args": {}, "task": None})
    study = read(live)
    info = dashboard.header_info(study)
    assert info["front_size"] == 1
    assert info["meta"].endswith("front: 1 trial")
    workload = next(c for c in info["cards"] if c["label"] == "workload")
    assert workload["sub"] == "data synthetic"  # was "data synthetic; "
    for text in [info["meta"], *(c["sub"] for c in info["cards"]), *(c["value"] for c in info["cards"])]:
        assert_tidy(text)
    page = dashboard.render_html(study)
    assert "front: 1 trial<" in page and "1 trials" not in page and "synthetic; <" not in page


def test_header_texts_of_a_full_study_are_tidy(snap):
    info = dashboard.header_info(snap)
    assert re.search(r"front: \d+ trials$", info["meta"]) and info["front_size"] > 1
    for text in [info["meta"], *(c["sub"] for c in info["cards"])]:
        assert_tidy(text)


def test_trial_axes_tick_whole_numbers():
    study = made(n_trials=3, with_failures=False)
    info = dashboard.history_info(study)
    ticks = info["trial_ticks"]
    assert ticks["tickvals"] == [0, 1, 2] and ticks["ticktext"] == ["0", "1", "2"]
    for fig in (dashboard.history_figure(info), dashboard.duration_figure(info)):
        axis = fig.layout.xaxis
        assert list(axis.tickvals) == [0, 1, 2] and all(isinstance(v, int) for v in axis.tickvals)
    for n in (1, 7, 40, 200):
        vals = dashboard.nice_ticks(0, n - 1, target=8, integer=True)["tickvals"]
        assert vals and all(isinstance(v, int) for v in vals) and vals == sorted(set(vals))


@pytest.mark.parametrize(
    ("low", "high"), [(4.0, 6.5), (9.5, 125.0), (0.37, 0.372), (0.0, 0.0004), (1.0, 2.0), (5.2, 5.2), (380.8, 386.9)]
)
def test_nice_ticks_never_repeat_a_label(low, high):
    ticks = dashboard.nice_ticks(low, high)
    assert ticks["tickvals"] and len(set(ticks["ticktext"])) == len(ticks["ticktext"])
    assert all(low - 1e-9 <= v <= high + 1e-9 for v in ticks["tickvals"])
    percent = dashboard.nice_ticks(low / 1000, high / 1000, percent=True)
    assert len(set(percent["ticktext"])) == len(percent["ticktext"])


def lm_speed(config):
    """An hf:gpt2-like model on a busy 2-CPU machine: 4-6.5 samples/s."""
    return 4.0 + 2.5 * (config["batch_size"] - 16) / 240


def test_parallel_axes_never_repeat_a_tick_label():
    study = made(n_trials=12, with_failures=False, speed=lm_speed)
    info = dashboard.parallel_info(study)
    assert max(info["samples_per_s"]) < 8  # where ",.0f" read 6,5,5,5,5,5,4,4
    memory, speed = info["objectives"]
    assert speed["name"] == "samples/s" and memory["name"].startswith("peak memory (")
    for axis in [*info["dimensions"], memory, speed]:
        assert len(axis["ticktext"]) >= 1 and len(set(axis["ticktext"])) == len(axis["ticktext"]), axis["name"]
        assert len(axis["tickvals"]) == len(axis["ticktext"])
    assert len(speed["ticktext"]) >= 3  # a readable scale, not one label
    dims = dashboard.parallel_figure(info, "MiB", MiB).data[0].dimensions
    assert list(dims[-1].ticktext) == speed["ticktext"] and list(dims[-2].ticktext) == memory["ticktext"]


def test_threads_axis_stays_within_the_machines_cpus(snap):
    # The study stores search_spaces/cpu.toml's threads = [1, 2, 4, 8, 16]; on its 2 CPUs only 1 and 2 could run.
    assert snap.study.space["search"]["threads"]["choices"] == [1, 2, 4, 8, 16]
    assert snap.study.fingerprint["cpu_count"] == 2
    dims = {d["name"]: d for d in dashboard.parallel_info(snap)["dimensions"]}
    assert dims["threads"]["ticktext"] == ["1", "2"] and dims["threads"]["tickvals"] == [0, 1]
    effects = {k["name"]: k for k in dashboard.knob_effects_info(snap)["knobs"]}
    assert {v["value"] for v in effects["threads"]["values"]} <= {"1", "2"}


def test_threads_range_stays_within_the_cpus_of_an_older_study():
    live = make_study(optuna.storages.InMemoryStorage(), n_trials=10, with_failures=False)
    space = read(live).space
    writing.save(live, space={**space, "search": {**space["search"], "threads": {"low": 1, "high": 16}}})
    writing.save(live, context=None)  # older studies stored only the fingerprint's CPU count
    dims = {d["name"]: d for d in dashboard.parallel_info(read(live))["dimensions"]}
    threads = dims["threads"]
    assert threads["numeric"] and threads["range"][1] <= 2 and threads["tickvals"] == [1, 2]


def test_data_wait_axis_is_readable_when_nothing_waits():
    study = made(n_trials=8, with_failures=False, data_wait_share=0.0003)
    info = dashboard.profile_info(study)
    axis = info["data_wait_axis"]
    assert axis["range"][1] >= 0.05  # a 0.03% wait is a sliver, not a full-width bar
    assert len(set(axis["ticktext"])) == len(axis["ticktext"]) >= 2 and axis["ticktext"][0] == "0%"
    assert info["ops_axis"]["ticktext"][-1] == "100%"
    fig = dashboard.profile_figure(info)
    assert list(fig.layout.xaxis2.ticktext) == axis["ticktext"]


def test_race_time_counts_in_time_per_trial():
    live = make_study(optuna.storages.InMemoryStorage(), n_trials=12, with_failures=False)
    ev = evidence_of(read(live))
    racers = sorted(ev.configs, key=lambda n: -ev.configs[n].samples_per_s)[:2]
    add_race(live, {n: ev.configs[n].samples_per_s for n in racers if n != 0}, rounds=3, floor=2)
    study = read(live)
    info = dashboard.history_info(study)
    durations = {d["number"]: d for d in info["durations"]}
    base = durations[0]
    again = base["remeasured"]
    assert again["count"] == 2 + 3 and again["by_kind"] == {"noise floor": 2, "race": 3}
    # stored without their wall time: estimated as long as the trial's own measurement each, and said to be
    assert again["estimated"] == 5 and again["timed"] == 0
    assert again["time_s"] == pytest.approx(5 * base["duration_s"])
    total = sum(d["remeasured"]["time_s"] for d in info["durations"])
    assert info["remeasurements"]["time_s"] == pytest.approx(total) and total > 0
    fig = dashboard.duration_figure(info)
    (bars,) = [t for t in fig.data if t.name.startswith("re-measured")]
    assert "estimated" in bars.name and fig.layout.barmode == "stack"
    assert dict(zip(bars.x, bars.y))[0] == pytest.approx(again["time_s"])
    header = dashboard.header_info(study)
    time_card = next(c for c in header["cards"] if c["label"] == "time spent")
    assert "5" not in time_card["sub"] or "re-measurements" in time_card["sub"]
    assert "(estimated: each as long as its trial)" in time_card["sub"]
    assert "estimated as long as" in dashboard.render_html(study)


def test_race_time_is_shown_as_measured_where_stored():
    live = make_study(optuna.storages.InMemoryStorage(), n_trials=8, with_failures=False)
    add_race(live, {}, rounds=2, floor=1, wall_s=True)
    # and a re-measurement stored with its wall time, as the race stores them now
    writing.save_measurement(live, 0, "race-new-01", samples_per_s=400.0, outcome="ok", peak_memory_bytes=None,
                             other_cores=None, wall_s=12.5)
    study = read(live)
    again = {d["number"]: d for d in dashboard.history_info(study)["durations"]}[0]["remeasured"]
    assert again["count"] == again["timed"] == 4 and again["estimated"] == 0
    stored = [m.wall_s for m in study.remeasurements()]
    assert 12.5 in stored and again["time_s"] == pytest.approx(sum(stored))
    fig = dashboard.duration_figure(dashboard.history_info(study))
    assert [t.name for t in fig.data if t.name.startswith("re-measured")] == [
        "re-measured (noise floor, race, what each knob bought)"]


def busy_threads_speed(config):
    """The filed study: in fp32, 2 threads on a busy 2-CPU machine ran 9.5-13.3 samples/s and 1 thread 50-125;
    in bf16 the thread count made no difference."""
    if config["precision"] == "bf16":
        return 600.0 * (config["batch_size"] / 128) ** 0.1
    return (11.0 if config["threads"] == 2 else 85.0) * (config["batch_size"] / 128) ** 0.1


def test_importance_sees_an_effect_within_the_dominant_split():
    study = made(n_trials=40, seed=2, speed=busy_threads_speed)
    info = dashboard.importance_info(study)
    assert info["note"] is None
    assert max(info["samples_per_s"], key=info["samples_per_s"].get) == "precision"
    splits = {s["value"]: s for s in info["splits"]}
    assert {s["knob"] for s in info["splits"]} == {"precision"} and "fp32" in splits
    fp32 = splits["fp32"]["samples_per_s"]
    assert "precision" not in fp32
    assert max(fp32, key=fp32.get) == "threads" and fp32["threads"] > 0.8
    if "bf16" in splits:
        assert splits["bf16"]["samples_per_s"].get("threads", 0.0) < 0.2
    fig = dashboard.importance_figure(info)
    names = [t.name for t in fig.data]
    assert any(n.startswith("samples/s where precision=fp32") for n in names)
    (within,) = [t for t in fig.data if t.name.startswith("samples/s where precision=fp32")]
    assert dict(zip(within.y, within.x))["threads"] == pytest.approx(fp32["threads"])


def test_importance_without_a_varied_knob_is_a_note():
    live = make_study(optuna.storages.InMemoryStorage(), n_trials=8, with_failures=False)
    writing.save(live, space={**read(live).space, "search": {"threads": {"choices": [2]}}})
    snap = dashboard.snapshot(read(live))
    for r in snap.rows:
        r["config"]["threads"] = 2
    info = dashboard.importance_info(snap)
    assert info["samples_per_s"] == {} and info["note"]


def dominated_winner(study):
    """A gain whose winner changes fewer knobs than a tied, faster configuration that also uses less memory."""
    ev = evidence_of(read(study))
    configs = [c for c in ev.configs.values() if not c.is_baseline and c.feasible]
    pairs = [
        (w, s)
        for w in configs
        for s in configs
        if s.peak_memory_bytes < w.peak_memory_bytes and len(s.changes) > len(w.changes)
    ]
    winner, shadow = min(pairs, key=lambda p: (len(p[0].changes), p[0].number, p[1].number))
    base = study.trials[0].values[0]
    add_race(study, {winner.number: 2.0 * base, shadow.number: 2.02 * base}, rounds=4, spread=0.02)
    return winner.number, shadow.number


def test_recommended_is_labelled_on_the_front_even_when_dominated():
    live = make_study(optuna.storages.InMemoryStorage(), n_trials=40, seed=0)
    winner, shadow = dominated_winner(live)
    study = read(live)
    verdict = evidence_of(study).verdict()
    assert verdict.state == "gain" and verdict.winner == winner and verdict.leader == shadow
    info = dashboard.pareto_info(study)
    assert info["recommended"] == winner and winner not in info["front"]  # dominated on memory by the leader
    (label,) = [lb for lb in info["labels"] if lb["recommended"]]
    assert label["number"] == winner and label["text"] == f"recommended: #{winner}"
    assert [p["number"] for p in info["points"] if p["recommended"]] == [winner]
    fig = dashboard.pareto_figure(info)
    assert any(f"recommended: #{winner}" in a.text for a in fig.layout.annotations)
    page = dashboard.render_html(study)
    assert f"recommended: #{winner}" in page
    table = dashboard.front_table_info(study)
    assert table["recommended"] == winner
    first, *rest = table["rows"]  # the first row, marked, though the front leaves it out
    assert first["number"] == winner and first["recommended"] and not any(r["recommended"] for r in rest)
    assert sorted(r["number"] for r in rest) == sorted(info["front"])
    assert page.index(f"#{winner}</td>") < min(page.index(f"#{n}</td>") for n in info["front"])


def test_keeping_the_defaults_labels_the_baseline_recommended():
    live = make_study(optuna.storages.InMemoryStorage(), n_trials=12, seed=0, with_failures=False)
    ev = evidence_of(read(live))
    fastest = max((n for n in ev.configs if n != 0), key=lambda n: ev.configs[n].samples_per_s)
    add_race(live, {fastest: live.trials[0].values[0]}, rounds=4, spread=0.02)  # no faster than the defaults
    study = read(live)
    verdict = evidence_of(study).verdict()
    assert verdict.state == "no_gain"
    info = dashboard.pareto_info(study)
    assert info["recommended"] == 0
    (label,) = [lb for lb in info["labels"] if lb["recommended"]]
    assert label["number"] == 0 and label["text"].startswith("recommended: #0") and "baseline" in label["text"]
    assert [lb["number"] for lb in info["labels"] if lb["role"] == "baseline"] == [0]  # one label for the point
    assert any(a.text.startswith("<b>recommended: #0") for a in dashboard.pareto_figure(info).layout.annotations)


@pytest.mark.slow  # 11 s in a full run on a 2-core CPU
@pytest.mark.parametrize("make", ["ablated_study", "heap_first_study"])
def test_what_each_knob_bought_is_a_waterfall_from_the_defaults(make):
    """bf16 truly buys 1.5x and the loader workers nothing (a fake study raced and ablated in shared processes, as
    tests/test_race.py makes them), or the heap comes first, measured between processes: the page draws the path,
    each step with what it bought, the left-out one marked."""
    import test_race

    study, ab = getattr(test_race, make)()
    study = read(study)
    info = dashboard.ablation_info(study)
    assert_json(info)
    assert [s["label"] for s in info["steps"]] == [s.label() for s in ab.steps]
    assert [s["speedup_text"] for s in info["steps"]] == [s.speedup.text() for s in ab.steps]
    assert [s["kept"] for s in info["steps"]] == [s.kept for s in ab.steps]
    # why a step is left out, as its figure says it (a knob slower beyond the noise did not "buy nothing")
    assert [s["why_left"] for s in info["steps"] if not s["kept"]] == [s.why_left for s in ab.steps if not s.kept]
    fig = dashboard.ablation_figure(info)
    (bars,) = fig.data
    assert bars.type == "waterfall" and list(bars.x)[0] == "the defaults" and len(bars.x) == len(ab.steps) + 1
    # each bar ends where the path's speed-up is measured: the running sum of the bars is each step's speed-up
    ends, total = [], 0.0
    for y in bars.y:
        total += y
        ends.append(total)
    assert ends == pytest.approx([1.0, *(s.speedup.estimate for s in ab.steps)])
    assert list(bars.text)[1:] == [f"×{s.bought.text()}" for s in ab.steps]
    assert sum("(left out)" in x for x in bars.x) == sum(not s.kept for s in ab.steps)
    page = dashboard.render_html(study)
    assert 'id="bought"' in page and 'data-name="ablation"' in page and ab.text() in html.unescape(page)
    # the shared processes (the race's and these) count in "Time per trial", each shared by the trials it measured
    shared = [b for b in evidence_of(study).blocks if any(isinstance(n, int) for n in b.trials.values())]
    again = dashboard.history_info(study)["remeasurements"]
    kinds = {k for e in dashboard.remeasurements(study).values() for k in e["by_kind"]}
    assert shared and "what each knob bought" in kinds and ("race" in kinds or make == "heap_first_study")
    assert again["time_s"] >= sum(b.wall_s for b in shared) - 1e-9
    assert [s["within_process"] for s in info["steps"]] == [s.within_process for s in ab.steps]


def test_before_any_ablation_the_page_says_what_will_be_shown():
    study = made(n_trials=12, seed=0, with_failures=False)
    assert dashboard.ablation_info(study)["steps"] == []
    page = dashboard.render_html(study)
    assert ('id="bought"' in page and 'data-name="ablation"' not in page
            and "Measured once the race settles a gain" in page)
