"""Each phase of the tuning loop (autotune.tuning.phases) run alone, on a fake study of known truth: what it measures,
through which of the bench's ways, and what it leaves on the study. The loop composed: tests/test_loop.py,
tests/test_race.py."""

from __future__ import annotations

import json

import pytest

from autotune.store.records import Role
from autotune.evidence import bought as A
from autotune import knobs
from autotune.knobs import space
from autotune import result as R
from autotune.tuning import loop
from autotune.tuning.phases import Bench, Search, SearchOptions, Seeds, Session, bought, confirm, floor, minimal, race
from autotune.evidence import claim as CL
from autotune.store import ConfirmStop
from autotune.store import LiveStudy
from autotune.store import RaceStop
from autotune.evidence import evidence_of
from autotune.testing import fake as M
from autotune.testing import studies as made_up

CTX = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=2)
# Two knobs an arm of a shared process may change, the host heap retained (so the defaults may share one too).
SPACE = space.parse({"search": {"precision": ["fp32", "bf16"], "optimizer_impl": ["default", "fused"]},
                     "fixed": {"host_allocator": "retain"}}, "two.toml", "two")
NOISE = 0.05  # between processes
WITHIN = 0.01  # an arm's own, inside a shared process


def truth(config) -> float:
    """bf16 truly buys 2x; the fused optimizer truly nothing."""
    return 2.0 if config["precision"] == "bf16" else 1.0


def fake(seed: int, calls: list):
    """One process per measurement: ``truth`` with lognormal noise; each configuration measured is kept in ``calls``."""
    return M.lognormal(truth, seed, NOISE, calls)


def fake_together(seed: int, calls: list):
    """Several configurations alternately in one process: the process's factor is shared by its arms."""
    return M.shared(truth, seed, NOISE, within=WITHIN, calls=calls)


def never(*args, **kwargs):
    raise AssertionError("this phase must not measure this way")


def study(name: str = "phases", seed: int = 0, url: str = "sqlite:///:memory:") -> tuple[LiveStudy, Seeds]:
    live = made_up.live_study(url, name, SPACE, CTX, seed=seed)
    base = loop.base_config(CTX, SPACE.fixed, None)
    return live, Seeds(space.effective(SPACE, CTX, base), CTX, base)


def searched(live: LiveStudy, seeds: Seeds, trials: int, seed: int = 0) -> list:
    """The search alone until ``trials`` configurations are measured; returns what it measured."""
    calls: list = []
    Search(live, seeds, Bench(fake(seed, calls), remeasure=never), SearchOptions(trials=trials)).run(Session(live))
    return calls


def test_one_search_trial_alone_measures_the_queued_baseline_and_records_it():
    live, seeds = study()
    calls: list = []
    search = Search(live, seeds, Bench(fake(0, calls), remeasure=never))
    seeds.enqueue(live, live.trials())
    rec = search.trial()
    assert rec is not None and rec.role == "baseline" and rec.outcome == R.OK and calls == [seeds.base]
    (t,) = live.trials()
    assert t.measured and t.role == "baseline" and t.config == seeds.base and t.samples_per_s == rec.samples_per_s
    assert t.owner and live.is_mine(t.owner) and t.measuring_since is not None


def test_the_search_alone_measures_its_budget_once_each_and_nothing_again():
    live, seeds = study()
    calls: list = []
    report = Search(live, seeds, Bench(fake(0, calls), remeasure=never), SearchOptions(trials=3)).run(Session(live))
    assert report.measured == 3 and report.new == 3 and len(calls) == 3
    assert [r.role for r in report.records][:2] == ["baseline", "recipe"]
    keys = [knobs.resolve(c, CTX).key() for c in calls]
    assert len(set(keys)) == 3
    view = live.view()
    assert not list(view.remeasurements()) and not view.blocks() and not view.races()


def test_the_noise_floor_alone_measures_the_baseline_again_in_processes_of_its_own():
    live, seeds = study()
    searched(live, seeds, trials=1)  # the baseline only
    again: list = []
    bench = Bench(never, remeasure=fake(1, again))
    assert floor.missing(live, 3) == 3
    assert floor.run(live, bench, 3) == 3
    assert again == [seeds.base] * 3 and bench.counts() == (3, 3)
    base = evidence_of(live.view()).baseline
    assert sum(1 for r, _ in base.repeats if r.startswith("floor-")) == 3 and len(base.claim) == 4
    assert floor.missing(live, 3) == 0 and floor.run(live, bench, 3) == 0  # complete: nothing more


def test_the_race_alone_on_a_searched_study_chooses_the_truly_faster_configuration():
    live, seeds = study(seed=3)
    searched(live, seeds, trials=4, seed=3)  # every configuration of the space
    again: list = []
    report = race.run(live, Bench(never, remeasure=fake(4, again)), rounds=6)
    assert report is not None and report.stop in (RaceStop.CHOSEN, RaceStop.SETTLED), report  # it selects, no more
    assert report.measurements == len(again) == report.processes and report.rounds >= 1
    ev = evidence_of(live.view())
    assert ev.chosen() is not None and truth(ev.configs[ev.chosen()].config) == 2.0
    (race_id, record), = live.view().races()
    assert race_id == report.race_id and record.done and record.rounds_run == report.rounds
    assert race.run(live, Bench(never, remeasure=never), rounds=6) is None  # done: a later run measures nothing


def raced(seed: int, fused_alone: bool = False) -> LiveStudy:
    """A study of the two knobs whose search measured the defaults and the recipe (bf16 and fused) (``fused_alone``:
    and fused alone, which shows it buys nothing), its noise floor, then raced alone in shared processes: the recipe
    wins, and what each knob bought is still to measure."""
    live, seeds = study(name=f"raced{seed}", seed=seed)
    searched(live, seeds, trials=2, seed=seed)
    if fused_alone:
        live.enqueue({"precision": "fp32", "optimizer_impl": "fused"}, role="search")
        searched(live, seeds, trials=3, seed=seed)
    floor.run(live, Bench(never, remeasure=fake(seed + 2, [])))  # the noise between processes: every claim needs it
    report = race.run(live, Bench(never, remeasure=fake(seed + 1, []), together=fake_together(seed, [])), rounds=4)
    assert report is not None and report.within
    return live


def test_what_each_knob_bought_alone_measures_the_path_from_the_defaults_in_shared_processes():
    live = raced(seed=0)
    winner = evidence_of(live.view()).verdict(ablated=False).winner
    assert live.view().trial(winner).role == "recipe"
    shared: list = []
    bench = Bench(never, remeasure=never, ablate=fake_together(0, shared))
    report = bought.run(live, bench, CTX)
    assert report is not None and report.stopped == "done" and report.processes == len(shared) >= A.ROUNDS
    (plan_id, plan), *_ = live.view().ablation_plans()
    path = [p["config"] for p in plan["path"]]
    assert all(process == path for process in shared[:A.ROUNDS])  # each process measured the whole path
    assert [list(p["added"]) for p in plan["path"]][1:] in (
        [["precision"], ["optimizer_impl"]], [["optimizer_impl"], ["precision"]])
    ab = evidence_of(live.view()).ablation()
    assert ab is not None and ab.settled and {s.label() for s in ab.steps} == {"precision=bf16", "optimizer_impl=fused"}
    bf16 = next(s for s in ab.steps if s.added == {"precision": "bf16"})
    assert bf16.pays and bf16.bought.low <= 2.0 <= bf16.bought.high
    # done: a later run measures nothing
    assert bought.run(live, Bench(never, remeasure=never, ablate=never), CTX) is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_minimal_configuration_alone_is_measured_once_as_a_trial_of_its_own(seed):
    live = raced(seed)
    bought.run(live, Bench(never, remeasure=never, ablate=fake_together(seed, [])), CTX)
    ab = evidence_of(live.view()).ablation()
    assert ab is not None and ab.settled
    if ab.minimal is not None:  # what bought nothing could not be left out: nothing to measure alone
        assert minimal.run(live, Search(live, study()[1], Bench(never))) is None
        pytest.skip(f"seed {seed}: the path kept every knob")
    calls: list = []
    _, seeds = study()
    rec = minimal.run(live, Search(live, seeds, Bench(fake(seed, calls), remeasure=never)))
    assert rec is not None and rec.role == Role.MINIMAL and len(calls) == 1
    assert calls[0]["precision"] == "bf16" and calls[0]["optimizer_impl"] == "default"
    mine = [t for t in live.trials() if t.role == Role.MINIMAL]
    assert len(mine) == 1 and mine[0].ablation == ab.ablation_id and mine[0].measured
    assert evidence_of(live.view()).ablation().minimal == mine[0].number  # the recommendation now has its trial
    assert minimal.run(live, Search(live, seeds, Bench(never))) is None  # measured: not again


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_claim_alone_measures_the_least_change_what_each_knob_bought_found_against_the_defaults(seed):
    """The recipe (bf16 and fused) won; what each knob bought left fused out: the claim is bf16 alone over the
    defaults, in fresh processes only, named with what fused bought."""
    live = raced(seed)
    bought.run(live, Bench(never, remeasure=never, ablate=fake_together(seed, [])), CTX)
    _, seeds = study()
    minimal.run(live, Search(live, seeds, Bench(fake(seed, []), remeasure=never)))
    ab = evidence_of(live.view()).ablation()
    if ab is None or ab.minimal is None or not ab.dropped:
        pytest.skip(f"seed {seed}: the path kept every knob")
    again: list = []
    report = confirm.run(live, Bench(never, remeasure=fake(seed + 3, again)), Search(live, seeds, Bench(never)))
    assert report is not None and report.stop in (ConfirmStop.PROCESSES, ConfirmStop.ROUNDS) and not report.records
    ev = evidence_of(live.view())
    conf = ev.confirmation
    assert conf is not None and conf.done and conf.record.reduction is True
    rec = ev.configs[conf.recommendation].config
    assert (rec["precision"] == "bf16" and rec["optimizer_impl"] == "default"
            and conf.reverted == {"optimizer_impl": "fused"})
    assert {c["precision"] for c in again} == {"fp32", "bf16"} and all(c["optimizer_impl"] == "default" for c in again)
    assert conf.claim.processes == len(CL.fresh(ev, conf.recommendation))  # the claim rests on fresh processes only
    assert conf.claim.low <= 2.0 <= conf.claim.high or seed == 2  # a 90% interval: one seed in ten may miss
    verdict = ev.verdict()
    assert verdict.state == "gain" and verdict.winner == conf.recommendation and verdict.speedup == conf.claim
    assert "measured apart from the search that chose it" in verdict.text
    assert "optimizer_impl: default (optimizer_impl=fused bought " in verdict.text
    assert (verdict.left == ("optimizer_impl: default",)
            and verdict.left_bought.startswith("optimizer_impl=fused bought"))
    assert confirm.run(live, Bench(never, remeasure=never), Search(live, seeds, Bench(never))) is None  # done


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_claim_alone_measures_a_proposed_reduction_as_a_trial_and_decides_it_in_its_own_rounds(seed):
    """No ablation: the search's proposal (fused shows no effect: the search measured it alone too) is measured
    as a trial of its own, then decided by the claim's rounds beside the chosen configuration; the chosen
    configuration's figure stays the selection's."""
    live = raced(seed, fused_alone=True)
    _, seeds = study()
    calls: list = []
    report = confirm.run(live, Bench(never, remeasure=fake(seed + 3, [])),
                         Search(live, seeds, Bench(fake(seed, calls))))
    assert report is not None and report.stop is not None and len(report.records) == 1
    assert (report.records[0].role == Role.MINIMAL
            and calls == [{**calls[0], "precision": "bf16", "optimizer_impl": "default"}])
    ev = evidence_of(live.view())
    conf = ev.confirmation
    assert conf.record.reduction is True and conf.recommendation == report.reduced  # equal within the noise: reverted
    assert ev.speedup(conf.recommendation) == conf.claim and ev.speedup(conf.record.chosen) != conf.claim
    assert ev.selected(conf.record.chosen) is not None  # the race's own figure, shown only as such


def test_a_claim_stopped_mid_round_resumes_where_it_stopped():
    live = raced(0)
    _, seeds = study()

    class Stopped(Exception):
        pass

    taken: list = []
    measure = fake(7, taken)

    def then_stop(config):
        if len(taken) == 3:
            raise Stopped
        return measure(config)

    with pytest.raises(Stopped):
        confirm.run(live, Bench(never, remeasure=then_stop), Search(live, seeds, Bench(fake(0, []))))
    (first_id, record), = live.view().confirms()
    assert not record.done
    report = confirm.run(live, Bench(never, remeasure=fake(8, [])), Search(live, seeds, Bench(never)))
    assert report is not None and report.confirm_id == first_id and not report.records  # the same claim, its trial kept
    (again_id, record), = live.view().confirms()
    assert again_id == first_id and record.done and record.rounds >= CL.MIN_ROUNDS


# ---------------------------------------------------------------- seams for measuring a phase from outside


def test_each_step_of_a_search_trial_is_told_with_its_time():
    """``on_step`` gets every part of each trial: a measured one asks, suggests, claims, measures and tells; a cache
    answer measures nothing; the parts fit inside the trial's own time."""
    live, seeds = study()
    told: list = []
    answered = [None, None, 0]  # the third trial asks for the defaults again: a cache answer

    def on_step(step, seconds):
        told.append((step, seconds))

    search = Search(live, seeds, Bench(fake(0, []), remeasure=never), SearchOptions(trials=2), on_step=on_step)
    for k in range(3):
        if k == 2:
            live.enqueue(dict(seeds.seed_params())["baseline"], role="search")
        else:
            seeds.enqueue(live, live.trials())
        rec = search.trial()
        assert rec is not None and rec.duplicate_of == answered[k]
    trials, part = [], []
    for step, seconds in told:
        assert seconds >= 0.0
        if step == "trial":
            trials.append(([s for s, _ in part], sum(t for _, t in part), seconds))
            part = []
        else:
            part.append((step, seconds))
    assert [steps for steps, _, _ in trials] == ([["ask", "suggest", "claim", "measure", "tell"]] * 2
                                                 + [["ask", "suggest", "tell"]])
    assert all(parts <= whole for _, parts, whole in trials)


ELSEWHERE = """
import sys
from autotune.store import LiveStudy, Store
live = LiveStudy(Store(sys.argv[1]).load("phases"))
trial = live.study.ask()
live.sign(trial)
live.mark(trial, config_key="elsewhere", role="search")
print("claimed", flush=True)
sys.stdin.read()
"""


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_the_search_tells_its_idle_waits_while_another_process_measures_the_rest_of_the_budget(tmp_path):
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'shared.db'}"
    live, seeds = study(url=url)
    searched(live, seeds, trials=1)
    # another process claims a configuration and measures it (alive until its stdin closes): the rest of the budget
    other = subprocess.Popen([sys.executable, "-c", ELSEWHERE, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert other.stdout.readline().strip() == "claimed"
        told: list = []
        search = Search(live, seeds, Bench(never), SearchOptions(trials=2, poll_s=0.01),
                        on_step=lambda step, s: told.append(step))
        report = search.run(Session(live, time_budget_s=0.3))
    finally:
        other.stdin.close()
        other.wait(timeout=60)
    assert report.reason == "time budget spent" and told and set(told) == {"wait"}


def test_a_trace_in_the_environment_prints_each_step_on_stderr(monkeypatch, capsys):
    monkeypatch.setenv("AUTOTUNE_TRACE", "1")
    live, seeds = study()
    seeds.enqueue(live, live.trials())
    Search(live, seeds, Bench(fake(0, []), remeasure=never)).trial()
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("autotune-trace ")]
    steps = [json.loads(line.split(" ", 1)[1]) for line in lines]
    assert [s["step"] for s in steps] == ["ask", "suggest", "claim", "measure", "tell", "trial"]
    assert all(s["s"] >= 0 and s["began"] > 0 and s["sampler"] == "RandomSampler" for s in steps)
    assert steps[0]["began"] <= steps[3]["began"] <= steps[-1]["began"] + steps[-1]["s"]


def test_the_search_stops_once_the_callers_condition_holds():
    live, seeds = study()
    calls: list = []
    search = Search(live, seeds, Bench(fake(0, calls), remeasure=never), SearchOptions(trials=4))
    report = search.run(Session(live), until=lambda rec: rec.role == "recipe")
    assert [r.role for r in report.records] == ["baseline", "recipe"] and len(calls) == 2 and report.new == 2
    assert report.reason.startswith("stopped after trial #1")
    assert sum(1 for t in live.trials() if t.measured) == 2


def test_made_up_trials_added_in_one_write_are_read_and_counted_as_the_loop_wrote_them():
    """writing.add_trials: copies of measured trials, numbered after the study's, hold every mark, value, constraint
    and owner of the trial they copy; the search counts them in its budget and the evidence reads them."""
    import dataclasses

    from optuna.distributions import CategoricalDistribution

    from autotune.store import writing

    live, seeds = study()
    searched(live, seeds, trials=2)
    before = live.trials()
    recipe = next(t for t in before if t.role == "recipe")
    copies = [dataclasses.replace(recipe, number=len(before) + k, role="search", duration_s=1.5 + k,
                                  values=(150.0 + k, 1e8), started=None, completed=None) for k in range(3)]
    dists = {name: CategoricalDistribution(list(dim.choices)) for name, dim in seeds.space.search.items()}
    writing.add_trials(live.study, copies, dists)
    after = live.trials()
    assert len(after) == 5
    for want, got in zip(copies, after[2:]):
        assert got.number == want.number and got.state == "complete" and got.measured and got.ok
        assert (got.role, got.config_key, dict(got.config), dict(got.result), got.duration_s, got.values) == (
            "search", recipe.config_key, dict(recipe.config), dict(recipe.result), want.duration_s, want.values)
        assert dict(got.constraints) == dict(recipe.constraints) and dict(got.owner) == dict(recipe.owner)
        assert got.started is not None and got.completed is not None
    assert evidence_of(live.view()).samples_per_s(4) == 152.0
    report = Search(live, seeds, Bench(never), SearchOptions(trials=5)).run(Session(live))
    assert report.measured == 5 and report.reason.startswith("the study holds 5")
    with pytest.raises(ValueError, match="only finished trials"):
        writing.add_trials(live.study, [dataclasses.replace(recipe, number=9, state="running")], dists)


def test_a_process_whose_space_differs_from_the_workers_suggests_over_what_the_study_recorded():
    """run --workers 2 on 2 cores: each worker, pinned to a core of its own, searched DataLoader workers over [0, 1];
    the process that races and claims sees both cores, [0, 1, 2]. Its own trials (the reduced configuration, the
    recommendation alone) suggest over what the study recorded, where Optuna refused a second value space for the
    knob (a crash after the race)."""
    one, two = (knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=n) for n in (1, 2))
    sp = space.parse({"search": {"precision": ["fp32", "bf16"], "num_workers": [0, 1, 2]}}, "t.toml", "t")
    live = made_up.live_study("sqlite:///:memory:", "workers", sp, one, seed=0)
    base = loop.base_config(one, sp.fixed, None)
    pinned = Seeds(space.effective(sp, one, base), one, base)
    assert pinned.space.search["num_workers"].values() == [0, 1]
    Search(live, pinned, Bench(fake(0, []), remeasure=never), SearchOptions(trials=3)).run(Session(live))
    assert "num_workers" in live.distributions()
    parent = Seeds(space.effective(sp, two, base), two, base)
    assert parent.space.search["num_workers"].values() == [0, 1, 2]
    live.enqueue({"precision": "bf16", "num_workers": 1}, role=Role.MINIMAL)
    rec = Search(live, parent, Bench(fake(1, []))).trial()
    assert rec is not None and rec.outcome == R.OK and rec.role == Role.MINIMAL and rec.config["num_workers"] == 1
