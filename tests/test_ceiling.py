"""The batch-size ceiling: doubling then bisection finds the largest batch that fits, in few probes;
a study fits its searched batch sizes to it once and shows it."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
from click.testing import CliRunner

from autotune.evidence import ceiling as recorded
from autotune.tuning import ceiling_probe as C
from autotune import cli
from autotune.tuning import preparation
from autotune import result as R
from autotune.knobs import space as spaces
from autotune.request import TuneConfig, WorkloadSpec
from autotune.store import Store


def fits_below(truth: int, calls: list[int]):
    def fits(batch: int):
        calls.append(batch)
        return (batch <= truth, R.OK if batch <= truth else R.OOM, 1000 * batch)

    return fits


GRIDS = [list(range(16, 257, 16)), list(range(8, 513, 8)), [16, 32, 64, 128], list(range(1, 4097))]


@pytest.mark.parametrize("grid", GRIDS, ids=["16..256/16", "8..512/8", "choices", "1..4096"])
def test_finds_the_largest_fitting_batch_for_every_truth(grid):
    rng = random.Random(0)
    truths = sorted({grid[0] - 1, grid[0], grid[-1], grid[-1] + 100, *rng.sample(range(grid[0], grid[-1]), 25)})
    for truth in truths:
        start = rng.choice(grid)
        calls: list[int] = []
        found = C.find(fits_below(truth, calls), grid, start=start)
        expected = max((b for b in grid if b <= truth), default=None)
        assert len(calls) == len(set(calls)), "no batch is probed twice"
        assert len(calls) <= C.MAX_PROBES
        if 2 * math.log2(len(grid)) + 1 > C.MAX_PROBES:  # too fine a grid for the probes: a batch that fits
            # halving from any start reaches the smallest batch within the probes, so a batch is found
            # whenever one fits: the largest seen to fit, which is the largest of all unless the probes ran out
            assert (found.batch_size is None) == (expected is None), (truth, start, calls)
            assert found.batch_size == max((b for b in calls if b <= truth), default=None), (truth, start, calls)
            if len(calls) < C.MAX_PROBES:
                assert found.batch_size == expected, (truth, start, calls)
            continue
        assert found.batch_size == expected, (truth, start, calls)
        assert len(calls) <= 2 * math.log2(len(grid)) + 1, (truth, start, calls)
        if expected == grid[-1]:
            assert found.limit == "space" and found.first_failing is None
        else:
            assert found.limit == R.OOM
            assert found.first_failing == min(b for b in grid if b > truth)
        assert [p[0] for p in found.probes] == calls


def test_other_limits_are_named_and_said():
    found = C.find(lambda b: (b < 100, "max_memory", b), [16, 32, 64, 128, 256], start=32)
    assert (found.batch_size, found.limit, found.first_failing) == (64, "max_memory", 128)
    assert found.text().startswith("64 (128 needs more than --max-memory; 3 probes")
    none = C.find(lambda b: (False, R.OOM, None), [16, 32], start=32)
    assert none.batch_size is None and none.first_failing == 16
    assert "none: the smallest batch, 16, does not fit (ran out of memory" in none.text()
    assert C.Ceiling.from_dict(found.to_dict()) == C.Ceiling.from_dict(C.Ceiling.from_dict(found.to_dict()).to_dict())


def test_fits_with_counts_a_peak_over_the_budget_as_not_fitting():
    def measure(config):
        b = config["batch_size"]
        return R.TrialResult(outcome=R.OK, samples_per_s=1.0, peak_memory_bytes=b * 10)

    fits = C.fits_with(measure, {"precision": "fp32"}, max_memory_bytes=500)
    assert fits(40) == (True, R.OK, 400)
    assert fits(60) == (False, "max_memory", 600)


def test_clip_keeps_the_grid_and_the_baseline():
    ceiling = C.Ceiling(100, R.OOM, 112)
    rng = spaces.Dimension("batch_size", None, 16, 256, 16)
    assert C.clip(rng, ceiling, 32) == spaces.Dimension("batch_size", None, 16, 96, 16)
    assert C.clip(spaces.Dimension("batch_size", (16, 32, 64, 128)), ceiling, 32).choices == (16, 32, 64)
    assert C.clip(rng, C.Ceiling(None, R.OOM, 16), 32) is None  # nothing fits: nothing left to search
    assert C.clip(spaces.Dimension("batch_size", None, 64, 256, 64), C.Ceiling(32, R.OOM, 64), 32) is None


SPACE = """
[search]
batch_size = { low = 16, high = 128, step = 16 }
optimizer_impl = ["default", "foreach"]
"""


@pytest.mark.slow  # 9 s in a full run on a 2-core CPU
def test_a_study_fits_its_batch_sizes_to_the_ceiling_once_and_shows_it(tmp_path):
    space = tmp_path / "space.toml"
    space.write_text(SPACE)
    url = f"sqlite:///{tmp_path / 's.db'}"
    job = TuneConfig(spec=WorkloadSpec(model="failing_workloads:capped", model_args=(("cap", 56),)), space=str(space),
                     trials=4, quick=True, confirm=0, batch_ceiling=True, trial_timeout_s=120)
    probes: list[tuple[int, str]] = []
    prepared = preparation.prepare(job, "capped", Store.open(url), "cpu",
                                   on_probe=lambda b, o, p: probes.append((b, o)))
    assert prepared.ceiling is not None
    assert (prepared.ceiling.batch_size, prepared.ceiling.first_failing, prepared.ceiling.limit) == (48, 64, R.OOM)
    assert probes == [(b, o) for b, o, _ in prepared.ceiling.probes] and (64, R.OOM) in probes
    assert (prepared.tuner.seeds.space.search["batch_size"]
            == spaces.Dimension("batch_size", None, 16, 48, 16).with_value(32))
    summary = prepared.run()
    trials = Store.open(url).read("capped").trials
    sizes = [t.config["batch_size"] for t in trials if t.config]
    assert sizes and max(sizes) <= 48 and summary.measured >= 4
    assert not any(t.outcome == R.OOM for t in trials)

    # A resume (and any worker) reads the stored ceiling: no probes again, the same range.
    again = preparation.prepare(dataclasses.replace(job, trials=5), "capped", Store.open(url), "cpu",
                           on_probe=lambda b, o, p: pytest.fail("probed again"))
    assert again.ceiling == prepared.ceiling
    assert again.tuner.seeds.space.search["batch_size"] == prepared.tuner.seeds.space.search["batch_size"]

    out = CliRunner().invoke(cli.main, ["status", "capped", "--storage", url])
    assert out.exit_code == 0, out.output
    assert "batch ceiling: 48 (64 ran out of memory; " in out.output
    doc = CliRunner().invoke(cli.main, ["status", "capped", "--storage", url, "--json"])
    import json

    assert json.loads(doc.output)["batch_ceiling"]["batch_size"] == 48
    from autotune.reports import dashboard

    assert dashboard.header_info(Store.open(url).read("capped"))["batch_ceiling"]["text"].startswith(
        "48 (64 ran out of memory")
    assert recorded.describe(Store.open(url).read("capped")) == json.loads(doc.output)["batch_ceiling"]


def test_by_default_a_cpu_study_without_a_memory_budget_does_not_probe():
    job = TuneConfig(spec=WorkloadSpec(model="x:y"))
    assert not job.probes_ceiling("cpu")
    assert job.probes_ceiling("cuda:0")
    assert TuneConfig(spec=job.spec, max_memory_bytes=1 << 30).probes_ceiling("cpu")
    assert not TuneConfig(spec=job.spec, batch_ceiling=False).probes_ceiling("cuda:0")


# ---------------------------------------------------------------- with CUDA graphs


class GraphsRunner:
    """A runner whose configurations fit up to a batch: ``eager`` without CUDA graphs, ``graphs`` with them (the
    compile knob's graphs mode); it records what it ran."""

    def __init__(self, eager: int, graphs: int) -> None:
        self.eager, self.graphs = eager, graphs
        self.ran: list[dict] = []

    def measure(self, config, settings=None, deadline=None):
        self.ran.append(dict(config))
        top = self.graphs if config.get("compile") == "reduce-overhead" else self.eager
        fits = config["batch_size"] <= top
        return R.TrialResult(outcome=R.OK if fits else R.OOM, samples_per_s=1.0 if fits else None,
                             peak_memory_bytes=config["batch_size"] * 10)


GRAPHS_SEARCH = {"batch_size": spaces.Dimension("batch_size", None, 16, 256, 16),
                 "compile": spaces.Dimension("compile", ("off", "default", "reduce-overhead"))}
DEFAULTS = {"batch_size": 32, "compile": "off", "precision": "fp32"}


def probed(runner, device="cuda:0", search=GRAPHS_SEARCH):
    seen: list[tuple[int, str]] = []
    found = C.probe(runner, DEFAULTS, search["batch_size"], None)
    return C.probe_graphs(runner, device, DEFAULTS, search, found, None, lambda b, o, p: seen.append((b, o))), seen


def test_the_ceiling_is_the_one_cuda_graphs_memory_allows():
    """An out-of-memory with the graphs at the eager ceiling is typed and the next batch down tried, until one fits:
    the ceiling is theirs, said with them; only the graphs' probes compile with the graphs, the defaults otherwise."""
    runner = GraphsRunner(eager=200, graphs=100)
    found, seen = probed(runner)
    assert (found.batch_size, found.limit, found.first_failing) == (96, R.OOM, 112)
    assert seen == [(b, o) for b, o, _ in found.graphs] and seen[0] == (192, R.OOM)  # the eager ceiling first
    assert all(c["compile"] == "reduce-overhead" and c["precision"] == "fp32" for c in runner.ran[-len(seen):])
    assert all(c["compile"] == "off" for c in runner.ran[:-len(seen)])
    assert max(b for b, o, _ in found.probes if o == R.OK) == 192
    assert found.text().startswith("96 (112 ran out of memory with CUDA graphs; without them 208 ran out of memory; ")
    assert C.Ceiling.from_dict(found.to_dict()).graphs == found.graphs  # stored with the study, read back
    assert C.clip(GRAPHS_SEARCH["batch_size"], found, 32).values()[-1] == 96


def test_where_the_graphs_fit_at_the_ceiling_one_probe_says_so():
    runner = GraphsRunner(eager=200, graphs=400)
    found, seen = probed(runner)
    assert seen == [(192, R.OK)] and (found.batch_size, found.limit, found.first_failing) == (192, R.OOM, 208)
    assert found.text().startswith("192 (with CUDA graphs too; without them 208 ran out of memory; ")


def test_no_graphs_probe_without_graphs_in_the_search_or_off_cuda():
    for device, search in (("cpu", GRAPHS_SEARCH),
                           ("cuda:0", {**GRAPHS_SEARCH, "compile": spaces.Dimension("compile", ("off", "default"))})):
        runner = GraphsRunner(eager=200, graphs=100)
        found, seen = probed(runner, device, search)
        assert seen == [] and not found.graphs and found.batch_size == 192
        assert all(c["compile"] == "off" for c in runner.ran)
    assert C.graphs_config(DEFAULTS, GRAPHS_SEARCH, "cuda")["compile"] == "reduce-overhead"
    assert C.graphs_config(DEFAULTS, GRAPHS_SEARCH, "cpu") is None


def test_where_no_batch_fits_with_the_graphs_the_eager_ceiling_stays_and_says_so():
    runner = GraphsRunner(eager=200, graphs=8)
    found, seen = probed(runner)
    assert found.batch_size == 192 and seen and all(o == R.OOM for _, o in seen)
    assert "no batch fits with CUDA graphs: 16 ran out of memory" in found.text()
    old = {k: v for k, v in found.to_dict().items() if k != "graphs"}  # a study stored before the graphs' probes
    assert C.Ceiling.from_dict(old).graphs == [] and "CUDA graphs" not in C.Ceiling.from_dict(old).text()


def test_a_graphs_probe_that_fails_otherwise_than_for_memory_stops_the_graphs_probes():
    """A compile that fails (or passes the compile limit) would fail at every smaller batch too: one such probe, the
    eager ceiling kept, and the words say the graphs did not settle it."""

    class Failing(GraphsRunner):
        def measure(self, config, settings=None, deadline=None):
            if config.get("compile") == "reduce-overhead":
                self.ran.append(dict(config))
                return R.TrialResult(outcome=R.TIMEOUT)
            return super().measure(config, settings)

    runner = Failing(eager=200, graphs=100)
    found, seen = probed(runner)
    assert seen == [(192, R.TIMEOUT)] and found.batch_size == 192 and found.graphs[0][:2] == (192, R.TIMEOUT)
    assert "208 ran out of memory; with CUDA graphs not settled: 192 failed: timeout" in found.text()
