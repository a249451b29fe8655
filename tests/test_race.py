"""The race and the verdict, against fake studies of known truth with lognormal noise between processes.

Each fake measurement is ``truth(config) * exp(N(0, 0.15))``: 15% noise between
processes, the spread between processes measured on the 2-core machines (benchmarks/results/paired_noise.txt).
20 seeds per scenario.

That is the noise the statistics assume (independent, lognormal, no order). The scenarios at the end
hold the same promises under fakes that break those assumptions: slow drift, heavy tails, an order
effect within a round, per-arm factors that do not cancel in a shared process, and a space larger
than the trial budget. The measurement models are autotune/testing/fake.py's (the race-cost benchmark uses them
too), with this file's noise figures.
"""

from __future__ import annotations

import time
import random

import pytest

from autotune.export import document as C
from autotune import knobs
from autotune.knobs import space
from autotune.testing import fake as M
from autotune import result as R
from autotune.tuning import loop
from autotune.evidence import claim as CL
from autotune.evidence import evidence_of
from autotune.tuning.phases import Bench, Seeds, floor, race
from autotune.request import DEFAULT_CONFIRM
from autotune.store import RaceStop
from autotune.testing import studies as made_up

CTX = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=2)
RACE_SPACE = {"precision": ["fp32", "bf16"], "optimizer_impl": ["default", "foreach", "fused"], "num_workers": [0, 1]}
SPACE = space.parse({"search": RACE_SPACE}, "race.toml", "race")
# The same space with the host heap fixed at retain: only there may the defaults share a process with a candidate
# (autotune.machine.heap, knobs.apart), so the races of shared processes below run in it.
RETAINED = space.parse({"search": RACE_SPACE, "fixed": {"host_allocator": "retain"}}, "race.toml", "race")
NOISE = 0.15
SEEDS = range(20)
FAST = {"precision": "bf16", "optimizer_impl": "fused", "num_workers": 1}  # truly 1.5x in the second scenario


class MissedRate(AssertionError):
    """The 1.5x configuration was claimed, with an interval covering 1.5, in fewer seeds than the promise."""


FEWER_CLAIMS = ("measured: the 1.5x configuration claimed with an interval covering 1.5 in {} of 20 seeds (promise: "
                "18); every claim made covered its configuration's truth, the misses are verdicts of no gain")


def noisy(truth, seed: int, calls: list | None = None):
    return M.lognormal(truth, seed, NOISE, calls)


def tune(truth, seed: int, name: str = "race", options: loop.Options | None = None, calls: list | None = None,
         together=None, sp=SPACE, ablate=None, measure=None):
    """A 12-trial study of the fake; ``together``: how shared processes measure (None: every measurement alone);
    ``measure``: how a process measures (None: ``noisy``). Returns the study as the run left it, and the summary."""
    live, summary = tune_live(truth, seed, name, options, calls, together, sp, ablate, measure)
    return live.view(), summary


def tune_live(truth, seed: int, name: str = "race", options: loop.Options | None = None, calls: list | None = None,
              together=None, sp=SPACE, ablate=None, measure=None):
    """:func:`tune`, returning the study to go on writing (a :class:`autotune.store.LiveStudy`)."""
    live = made_up.live_study("sqlite:///:memory:", name, sp, CTX, seed=seed, grace_s=None)
    options = options or loop.Options(trials=12, max_repeats=500)
    measure = measure or noisy(truth, seed, calls)
    return live, tuner(live, measure, options, sp, together=together, ablate=ablate).run()


def tuner(live, measure, options, sp=SPACE, together=None, ablate=None, **kw):
    """The tuning loop over ``live`` in space ``sp``, measuring with ``measure`` (and ``together``/``ablate``)."""
    base = loop.base_config(CTX, sp.fixed, None)
    return loop.Tuner(live, Seeds(space.effective(sp, CTX, base), CTX, base),
                   Bench(measure, together=together, ablate=ablate), options, **kw)


def is_fast(config) -> bool:
    return all(config[k] == v for k, v in FAST.items())


@pytest.mark.slow  # 56 s in a full run on a 2-core CPU
def test_all_equal_gives_no_gain_and_no_claim():
    no_gain = 0
    claims_excluding_one = 0
    for seed in SEEDS:
        study, summary = tune(lambda c: 1.0, seed)
        verdict = summary.verdict
        assert verdict is not None and verdict.text
        if verdict.state == "no_gain":
            no_gain += 1
            assert "no configuration beats PyTorch's defaults beyond the noise" in verdict.text
            kept = C.export(study)  # the recommendation: the defaults, saying why
            assert kept["baseline"]["trial"] == kept["study"]["trial"] and kept["speedup"]["estimate"] == 1.0
            assert kept["pick_note"].startswith("recommended: the defaults, because no configuration beats")
            forced = C.export(study, "fastest")  # asked for: the fastest-looking, labelled as not the recommendation
            assert forced["verdict"]["state"] == "no_gain"
            assert forced["study"]["trial"] == kept["study"]["trial"] or "not the recommendation" in forced["pick_note"]
            claims_excluding_one += forced["speedup"]["low"] > 1.0  # a speed-up claimed (a slow-down is not one)
        else:
            doc = C.export(study)
            claims_excluding_one += doc["speedup"]["low"] > 1.0
    assert no_gain >= 18, f"'no significant gain' in only {no_gain} of 20 seeds"
    assert claims_excluding_one <= 20 - no_gain


def test_no_gain_beyond_the_noise_comes_with_the_fastests_interval_measured_apart():
    """Where nothing pays, the verdict keeps the defaults and bounds what the fastest configuration found would buy:
    its claim measured apart, in at least MIN_PROCESSES fresh processes, with an interval (not one process's figure)."""
    for seed in range(3):
        study, summary = tune(lambda c: 1.0, seed)
        verdict = summary.verdict
        if verdict.state != "no_gain":
            continue
        assert summary.confirm is not None and summary.confirm.chosen == verdict.leader, verdict.text
        assert verdict.speedup.has_interval and verdict.speedup.processes >= CL.MIN_PROCESSES, verdict.text
        assert f"the fastest, #{verdict.leader} (" in verdict.text and "measured apart" in verdict.text, verdict.text
        return
    raise AssertionError("no seed of 3 ended in no gain where nothing pays")


@pytest.mark.slow  # 51 s in a full run on a 2-core CPU
def test_a_truly_faster_configuration_wins_the_race_and_its_interval_covers_the_truth():
    picked = covered = 0
    for seed in SEEDS:
        others = random.Random(1000 + seed)
        truths: dict[str, float] = {}

        def truth(config):
            if is_fast(config):
                return 1.5
            key = knobs.resolve(config, CTX).key()
            base = knobs.resolve(loop.base_config(CTX, {}, None), CTX).key()
            return 1.0 if key == base else truths.setdefault(key, others.uniform(1.0, 1.1))

        study, summary = tune(truth, seed)
        verdict = summary.verdict
        assert verdict is not None
        if verdict.state == "gain" and is_fast(evidence_of(study).configs[verdict.winner].config):
            picked += 1
            covered += verdict.speedup.low <= 1.5 <= verdict.speedup.high
            doc = C.export(study)  # the recommendation, with its claim measured apart
            assert doc["study"]["trial"] == verdict.winner and doc["claim"]["recommendation"] == verdict.winner
            assert doc["speedup"]["estimate"] == pytest.approx(verdict.speedup.estimate)
    assert picked >= 18, f"the 1.5x configuration won in only {picked} of 20 seeds"
    assert covered >= 18, f"its interval covered 1.5 in only {covered} of 20 seeds"


@pytest.mark.slow  # 15 s in a full run on a 2-core CPU
@pytest.mark.xfail(strict=True, reason="measured: the one-knob configuration in 3 of 5 seeds; in 2 the race chose the "
                   "three-knob one and the search's main-effects fit proposed reverting bf16 (a combination's knobs "
                   "show effects only together), which measurement refused: no smaller reduction is tried yet")
def test_tied_candidates_prefer_fewer_changed_knobs():
    """Two configurations equally 1.5x: the verdict names the one that changes fewer knobs, and says why."""

    def truth(config):
        if config["precision"] == "bf16" and config["optimizer_impl"] == "default" and config["num_workers"] == 0:
            return 1.5  # one knob changed
        return 1.5 if is_fast(config) else 1.0  # three knobs changed

    simpler = 0
    for seed in range(5):
        study, summary = tune(truth, seed)
        v = summary.verdict
        ev = evidence_of(study)
        if v.state == "gain" and len(ev.configs[v.winner].changes) == 1:
            simpler += 1
            if v.simpler_preferred:
                assert "changes fewer knobs" in v.text
    assert simpler >= 4


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_race_costs_stay_with_the_leaders():
    calls: list = []
    study, summary = tune(lambda c: 1.5 if is_fast(c) else 1.0, 3, calls=calls)
    report = summary.race
    assert report is not None and report.candidates and len(report.candidates) <= race.MAX_CANDIDATES + 1
    claim = summary.confirm.processes - len(summary.confirm.records) if summary.confirm else 0  # its rounds
    assert summary.repeats == report.measurements + floor.FLOOR_REPEATS + claim
    # each round measures the baseline and the candidates still in the race, nothing else
    assert report.measurements <= report.rounds * (1 + len(report.candidates))
    assert report.rounds <= DEFAULT_CONFIRM


@pytest.mark.slow  # 3 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_a_stopped_race_resumes_where_it_stopped():
    seed = 4

    def truth(config):  # every configuration but the defaults equally 1.5x
        return 1.0 if all(config[k] == v for k, v in {"precision": "fp32", "optimizer_impl": "default",
                                                      "num_workers": 0}.items()) else 1.5

    live, summary = tune_live(truth, seed, options=loop.Options(trials=12, max_repeats=500, race_rounds=0))
    inner = noisy(truth, seed + 100)
    calls: list = []

    def race_rounds(view):
        return {(m.round_id, m.trial) for m in view.remeasurements() if m.round_id.startswith("race-")}

    def stopped_in_round_two(config, dominators=(), margin=None):
        calls.append(config)
        view = live.view()
        stored = race_rounds(view)
        if stored and len(stored) == 1 + len(view.races()[0][1].candidates):  # round 1 whole: round 2 begins
            raise KeyboardInterrupt
        return inner(config)

    with pytest.raises(KeyboardInterrupt):
        tuner(live, stopped_in_round_two, loop.Options(trials=12, max_repeats=500, race_rounds=3)).run()
    races = live.view().races()
    assert len(races) == 1 and not races[0][1].done
    first_round = race_rounds(live.view())
    assert len({r for r, _ in first_round}) == 1  # round 1 stored, round 2 not begun
    again = tuner(live, inner, loop.Options(trials=12, max_repeats=500, race_rounds=3)).run()
    assert again.new == 0 and again.race is not None
    assert again.race.rounds >= 2 and again.race.race_id == races[0][0]  # the same race, round 1 kept
    assert again.race.measurements < 7 * 3  # rounds 2 and 3 only, and only the candidates still undecided
    assert first_round <= race_rounds(live.view())
    after = live.view().races()
    assert [i for i, _ in after] == [races[0][0]] and after[0][1].done


@pytest.mark.slow  # 3 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_a_race_that_spent_its_budget_is_extended_by_a_bigger_confirm():
    """Every configuration a little slower than the defaults: one round cannot choose (nothing beats them, and a race
    is not futile before its third round), so it stops with its budget spent, and a bigger --confirm goes on. The first
    run measures no claim apart: the fastest's fresh processes would settle the race before it is extended."""
    seed = 4

    def truth(config):
        return 1.0 if all(config[k] == v for k, v in {"precision": "fp32", "optimizer_impl": "default",
                                                      "num_workers": 0}.items()) else 0.8

    live, summary = tune_live(truth, seed, options=loop.Options(trials=12, max_repeats=500, race_rounds=1,
                                                                 confirm=False))
    assert summary.race is not None and summary.race.stop is RaceStop.ROUNDS and summary.race.rounds == 1
    more = tuner(live, noisy(truth, seed + 100), loop.Options(trials=12, max_repeats=500, race_rounds=4)).run()
    assert more.new == 0 and more.race is not None, "the finished race was not extended"
    assert more.race.race_id == summary.race.race_id and more.race.candidates == summary.race.candidates
    assert more.race.rounds > 1 and more.race.measurements >= 2
    view = live.view()
    races = view.races()
    assert len(races) == 1
    record = races[0][1]
    assert record.done and record.rounds_run == more.race.rounds and record.rounds == 4
    rounds = {m.round_id for m in view.remeasurements() if m.round_id.startswith(f"race-{more.race.race_id}-")}
    assert len(rounds) == more.race.rounds


@pytest.mark.slow  # 6 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_the_race_honours_the_time_budget_and_numbers_its_rounds():
    study, summary = tune_live(lambda c: 1.5 if is_fast(c) else 1.0, 3,
                               options=loop.Options(trials=12, max_repeats=500, race_rounds=0))
    seen: list[str] = []
    late = race.run(study, Bench(noisy(lambda c: 1.0, 3), on_repeat=lambda w, n, r, shared: seen.append(w)), 5,
                    deadline=time.time() - 1)
    assert late is not None and late.rounds == 0 and late.stopped == "time budget spent (--time-budget)" and not seen
    later = race.run(study, Bench(noisy(lambda c: 1.0, 3), on_repeat=lambda w, n, r, shared: seen.append(w)), 5)
    assert later is None and not seen  # that race is over: the deadline ended it, and a later run does not take it up
    fresh, _ = tune_live(lambda c: 1.5 if is_fast(c) else 1.0, 4, name="race2",
                         options=loop.Options(trials=12, max_repeats=500, race_rounds=0))
    report = race.run(fresh, Bench(noisy(lambda c: 1.0, 4), on_repeat=lambda w, n, r, shared: seen.append(w)), 5)
    assert report is not None and report.rounds >= 1
    assert seen[0] == "race round 1 of at most 5" and f"race round {report.rounds} of at most 5" in seen


# ---------------------------------------------------------------- measured alternately in one process

WITHIN = 0.03  # each arm's own noise inside one process; the process's factor (NOISE) is shared by its arms
INSIDE_FAST = {"precision": "bf16", "optimizer_impl": "fused"}  # knobs an arm of a shared process may change


def noisy_together(truth, seed: int, calls: list | None = None):
    return M.shared(truth, seed, NOISE, within=WITHIN, calls=calls)


def tune_together(truth, seed: int, name: str = "race", options: loop.Options | None = None, calls=None, shared=None):
    return tune(truth, seed, name, options, calls, together=noisy_together(truth, seed, shared), sp=RETAINED)


def ablated_study():
    """A study whose winner changes several knobs, raced and ablated in shared processes (bf16 truly buys 1.5x, the
    loader workers cost 30%): the first seed that gives one. For the views of what each knob bought."""
    def truth(config):
        return (1.5 if config["precision"] == "bf16" else 1.0) * (0.7 if config["num_workers"] else 1.0)

    for seed in range(20):
        study, _ = tune_together(truth, seed, options=loop.Options(trials=12, max_repeats=500))
        ab = evidence_of(study).ablation()
        if ab is not None and len(ab.steps) > 1:
            return study, ab
    raise AssertionError("no seed gave a winner of several knobs to ablate")


def inside_truth(config) -> float:
    return 1.5 if all(config[k] == v for k, v in INSIDE_FAST.items()) and config["num_workers"] == 0 else 1.0


@pytest.mark.slow  # 61 s in a full run on a 2-core CPU
@pytest.mark.xfail(strict=True, raises=MissedRate, reason="measured: the 1.5x configuration chosen in 17 of these 20 "
                   "seeds (56 of seeds 0-59), its claim (measured apart: an exact 90% interval, no longer adjusted for "
                   "comparisons and looks) covering 1.5 in 52 of those 60")
def test_candidates_that_share_a_process_with_the_defaults_are_raced_there_and_the_claim_covers_the_truth():
    picked = covered = 0
    for seed in SEEDS:
        study, summary = tune_together(inside_truth, seed)
        v = summary.verdict
        ev = evidence_of(study)
        if v.state == "gain" and inside_truth(ev.configs[v.winner].config) == 1.5:
            picked += 1
            covered += v.speedup.low <= 1.5 <= v.speedup.high
            # raced in shared processes, claimed apart: fresh processes of their own against the defaults'
            assert summary.race.within and not v.speedup.within and v.speedup == ev.confirmation.claim
    if picked < 18:
        raise MissedRate(f"the 1.5x configuration won in only {picked} of 20 seeds")
    if covered < 18:
        raise MissedRate(f"the 1.5x configuration claimed, its interval covering 1.5, in only {covered} of 20 seeds")


@pytest.mark.slow  # 50 s in a full run on a 2-core CPU
def test_nothing_shares_a_process_with_defaults_whose_heap_keeps_history():
    """At glibc's default heap a shared process runs its later arms faster (benchmarks/paths_agree.py): the race
    measures every candidate in processes of its own, and no path of what each knob bought is measured."""
    def truth(config):
        return (1.5 if config["precision"] == "bf16" else 1.0) * (0.7 if config["num_workers"] else 1.0)

    several = 0
    for seed in range(20):
        shared: list = []
        study, summary = tune(truth, seed, together=noisy_together(truth, seed, shared), sp=SPACE)
        assert shared == []
        assert summary.race is not None and not summary.race.within
        ev = evidence_of(study)
        chosen = ev.confirmation.record.chosen if ev.confirmation is not None else None  # the race's choice
        if chosen is not None and len(knobs.per_arm(ev.configs[chosen].changes)[0]) >= 1 \
                and len(ev.configs[chosen].changes) >= 2:
            several += 1  # a choice a path would have ablated in shared processes
            assert summary.ablation is None
    assert several >= 3


HEAP_SPACE = space.parse({"search": {"precision": ["fp32", "bf16"], "optimizer_impl": ["default", "fused"],
                                      "host_allocator": ["default", "retain"]}}, "heap.toml", "heap")


@pytest.mark.slow  # 19 s in a full run on a 2-core CPU
def test_what_each_knob_bought_starts_with_the_heap_when_the_defaults_cannot_share_a_process():
    """bf16 truly buys 1.5x, the retained heap 1.3x, the fused optimizer nothing. The race runs in separate processes
    (the defaults' heap keeps history); the path of what each knob bought starts from the defaults with the heap
    retained, a step measured between processes, then adds bf16 and fused in shared processes, all retained."""
    def truth(config):
        return (1.5 if config["precision"] == "bf16" else 1.0) * (1.3 if config["host_allocator"] == "retain" else 1.0)

    ablated = heap_covered = bf16_pays = 0
    for seed in range(12):
        shared: list = []
        inner = noisy_together(truth, seed, shared)

        def together(configs):
            assert knobs.apart(configs) is None, configs  # every process of the path may be shared
            return inner(configs)

        study, summary = tune(truth, seed, sp=HEAP_SPACE, ablate=together,
                              options=loop.Options(trials=8, max_repeats=500))
        assert not summary.race.within  # the race shared nothing with the defaults
        ab = evidence_of(study).ablation()
        winner = evidence_of(study).configs[evidence_of(study).verdict(ablated=False).winner].changes \
            if summary.verdict.state == "gain" else {}
        if not (winner.get("host_allocator") == "retain" and len(winner) >= 2):
            continue
        ablated += 1
        assert ab is not None and ab.processes >= 2 and shared
        first, *rest = ab.steps
        assert first.added == {"host_allocator": "retain"} and not first.within_process
        assert rest and all(s.within_process for s in rest)
        assert all(c["host_allocator"] == "retain" for process in shared for c in process)
        heap_covered += first.bought.low <= 1.3 <= first.bought.high
        ev = evidence_of(study)  # the path ends at the race's choice, as the race measured it (the selection's figure)
        assert rest[0].label() == "precision=bf16"  # then fused, when the race chose it too: it buys nothing
        assert [s.label() for s in rest[1:]] in ([], ["optimizer_impl=fused"])
        assert rest[-1].speedup == ev.compare(ab.winner, ev.baseline.number, claim=False)
        bf16_pays += rest[0].pays
    assert ablated >= 6, f"a winner with the heap and another knob in only {ablated} of 12 seeds"
    assert heap_covered >= ablated - 1
    assert bf16_pays >= ablated - 2  # two processes of the path give its within-process noise one degree of freedom


def heap_first_study():
    """A study whose winner retains the heap and takes bf16 (truly 1.3x and 1.5x), its race in separate processes and
    what each knob bought in shared ones, the heap first: the first seed that gives one. For the views."""
    def truth(config):
        return (1.5 if config["precision"] == "bf16" else 1.0) * (1.3 if config["host_allocator"] == "retain" else 1.0)

    for seed in range(12):
        study, _ = tune(truth, seed, sp=HEAP_SPACE, ablate=noisy_together(truth, seed),
                        options=loop.Options(trials=8, max_repeats=500))
        ab = evidence_of(study).ablation()
        if ab is not None and len(ab.steps) > 1 and not ab.steps[0].within_process:
            return study, ab
    raise AssertionError("no seed gave a winner that retains the heap and changes another knob")


def test_a_path_that_starts_with_the_heap_leaves_out_what_bought_nothing_after_it():
    """The pure reading of such a path (autotune.evidence.bought.analyse): the heap's step from the winner's claim,
    bf16's and fused's from the shared processes; fused bought nothing, so the recommendation stops at bf16."""
    from autotune.evidence import bought as A
    from autotune.evidence.stats import Noise, Ratio

    keys = ["heap", "heap+bf16", "heap+bf16+fused"]
    rounds = {"heap": [(1, 100.0), (2, 90.0), (3, 110.0)], "heap+bf16": [(1, 150.0), (2, 136.0), (3, 164.0)],
              "heap+bf16+fused": [(1, 151.0), (2, 134.0), (3, 166.0)]}
    plan = {"winner": 7, "winner_key": keys[-1], "apart": {"host_allocator": "retain"}, "apart_first": True,
            "path": [{"key": keys[0], "config": {}, "added": {}},
                     {"key": keys[1], "config": {}, "added": {"precision": "bf16"}},
                     {"key": keys[2], "config": {}, "added": {"optimizer_impl": "fused"}}]}
    claim = Ratio(1.95, 1.6, 2.4)
    ab = A.analyse("x", plan, rounds, Noise(0.02, 6, within=True), claim, {"heap+bf16": 5}.get, 3)
    assert [s.label() for s in ab.steps] == ["host_allocator=retain", "precision=bf16", "optimizer_impl=fused"]
    assert [s.within_process for s in ab.steps] == [False, True, True]
    assert ab.steps[-1].speedup == claim and ab.steps[0].bought.estimate == pytest.approx(1.95 / 1.5, rel=0.02)
    assert ab.steps[0].pays and ab.steps[1].pays and not ab.steps[2].pays
    assert ab.minimal_key == "heap+bf16" and ab.minimal == 5 and ab.dropped == {"optimizer_impl": "fused"}
    assert [s.kept for s in ab.steps] == [True, True, False]


@pytest.mark.slow  # 52 s in a full run on a 2-core CPU
def test_all_equal_gives_no_gain_when_raced_in_shared_processes_too():
    no_gain = sum(tune_together(lambda c: 1.0, seed)[1].verdict.state == "no_gain" for seed in SEEDS)
    assert no_gain >= 18, f"'no significant gain' in only {no_gain} of 20 seeds"


@pytest.mark.slow  # 72 s in a full run on a 2-core CPU
def test_sharing_a_process_settles_the_race_with_fewer_processes_and_the_claim_is_measured_apart_either_way():
    """A race in shared processes takes fewer processes than one in processes of their own; the claim is measured
    apart in both (a shared process's ratio ran high at glibc's heap, and it is never what a user's training sees),
    so its width is the one the noise between processes allows."""
    apart_cost = shared_cost = 0
    for seed in range(12):  # a race that settles at once costs either way about alike: the saving shows on average
        calls: list = []
        study, summary = tune(inside_truth, seed, calls=calls)
        apart_cost += summary.race.processes
        shared: list = []
        study, summary = tune_together(inside_truth, seed, shared=shared)
        shared_cost += summary.race.processes
        assert summary.race.processes < summary.race.measurements or not summary.race.within
        if summary.verdict.state == "gain":
            assert (not summary.verdict.speedup.within
                    and summary.verdict.speedup == evidence_of(study).confirmation.claim)
    assert shared_cost < apart_cost


@pytest.mark.slow  # 55 s in a full run on a 2-core CPU
def test_a_knob_that_buys_nothing_is_dropped_from_the_recommendation_and_the_rest_measured_alone():
    """bf16 is truly 1.5x; the fused optimizer truly buys nothing: a winner with both is ablated to bf16 alone."""

    def truth(config):
        return (1.5 if config["precision"] == "bf16" else 1.0) * (0.7 if config["num_workers"] else 1.0)

    ablated = right = 0
    for seed in SEEDS:
        study, summary = tune_together(truth, seed, options=loop.Options(trials=12, max_repeats=500))
        ev = evidence_of(study)
        v = summary.verdict
        assert v.state == "gain"
        ab = ev.ablation()
        assert ab is not None and ab.steps
        winner = ev.configs[v.winner]
        if len(ab.steps) > 1:
            ablated += 1
            assert summary.ablation is not None and ab.processes == summary.ablation.processes > 0
            assert all(s.within_process for s in ab.steps)
            bf16 = next(s for s in ab.steps if s.added.get("precision") == "bf16")
            assert bf16.pays and bf16.kept
            if "optimizer_impl" in ev.configs[ev.verdict(ablated=False).winner].changes:
                assert "optimizer_impl" in ab.dropped or ab.minimal == ev.verdict(ablated=False).winner
            if ab.dropped:
                # the smallest configuration that keeps the gain is named: a trial of the search, or measured once
                # on its own (role "minimal") when the search never measured it
                assert v.winner == ab.minimal and not set(ab.dropped) & set(winner.changes)
                assert "bought nothing beyond the noise" in v.text
        right += winner.changes == {"precision": "bf16"}
    assert right >= 16, f"the recommendation was bf16 alone in only {right} of 20 seeds"


def two_knobs():
    """A space of two knobs, precision and the optimizer's kernels."""
    # retained: the path shares processes
    return space.parse({"search": {"precision": ["fp32", "bf16"], "optimizer_impl": ["default", "fused"]},
                        "fixed": {"host_allocator": "retain"}}, "two.toml", "two")


def bf16_pays(config) -> float:
    """Only bf16 pays (truly 1.5x); the fused optimizer truly buys nothing."""
    return 1.5 if config["precision"] == "bf16" else 1.0


@pytest.mark.slow  # 3 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_the_smallest_configuration_that_keeps_the_gain_is_measured_on_its_own_and_named():
    """Two trials: the defaults and the recipe (bf16 and the fused optimizer). Only bf16 pays (1.5x): the race
    confirms the recipe, the path shows fused bought nothing, and bf16 alone, never measured by the search, is
    measured once as a trial of its own and becomes the recommendation in every view."""
    sp = two_knobs()
    truth = bf16_pays

    named = 0
    for seed in range(5):
        live = made_up.live_study("sqlite:///:memory:", f"two{seed}", sp, CTX, seed=seed, grace_s=None)
        seen: list = []
        summary = tuner(live, noisy(truth, seed), loop.Options(trials=2, max_repeats=50), sp, on_trial=seen.append,
                       together=noisy_together(truth, seed)).run()
        study = live.view()
        ev = evidence_of(study)
        raced = ev.verdict(ablated=False)
        assert raced.state == "gain" and ev.configs[raced.winner].role == "recipe"
        ab = ev.ablation()
        assert ab is not None and [s.label() for s in ab.steps][0] == "precision=bf16"
        if not ab.dropped:
            continue  # fused's step happened to separate from 1 (a 5% chance each): nothing to leave out
        named += 1
        assert ab.dropped == {"optimizer_impl": "fused"}
        minimal = [t for t in study.trials if t.role == "minimal"]
        assert len(minimal) == 1 and minimal[0].config["precision"] == "bf16"
        assert minimal[0].config["optimizer_impl"] == "default"
        assert seen[-1].role == "minimal" and summary.new == 3  # measured beyond the budget of 2, and shown
        v = summary.verdict
        assert v.winner == minimal[0].number == ev.recommended() and v.speedup.above_one()
        fused = next(s for s in ab.steps if not s.kept)  # the verdict says why it is left out, as its figure does
        assert ("slower beyond the noise" if fused.bought.below_one() else "bought nothing beyond the noise") in v.text
        doc = C.export(study)
        assert doc["study"]["trial"] == minimal[0].number and doc["knobs"]["optimizer_impl"] == "default"
        assert doc["speedup"]["estimate"] == pytest.approx(v.speedup.estimate)
    assert named >= 4


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_a_candidate_out_of_memory_beside_the_defaults_is_raced_alone_instead():
    """On a GPU every arm of a shared process holds memory: a candidate that fits alone may not fit beside the
    defaults. It is then measured in processes of its own, not dropped as failing."""
    big = {"precision": "bf16", "optimizer_impl": "fused"}

    def truth(config):
        return 1.5 if all(config[k] == v for k, v in big.items()) and config["num_workers"] == 0 else 1.0

    inner = noisy_together(truth, 3)

    def together(configs):
        result = inner(configs)
        for arm, config in zip(result.arms, configs):
            if all(config[k] == v for k, v in big.items()) and config["num_workers"] == 0:
                arm.update(outcome=R.OOM, samples_per_s=None)
        return result

    live = made_up.live_study("sqlite:///:memory:", "oom", RETAINED, CTX, seed=3, grace_s=None)
    calls: list = []
    summary = tuner(live, noisy(truth, 3, calls), loop.Options(trials=12, max_repeats=500), RETAINED,
                   together=together).run()
    ev = evidence_of(live.view())
    fast = [n for n, c in ev.configs.items() if truth(c.config) == 1.5]
    assert fast and summary.race is not None
    raced = [n for n in fast if n in summary.race.candidates]
    assert raced, "the 1.5x configuration was not raced"
    n = raced[0]
    assert n not in summary.race.within and n not in summary.race.eliminated  # moved out of the shared processes
    assert ev.configs[n].failed_repeats == 0 and ev.configs[n].repeats  # measured again, alone
    assert summary.verdict.state == "gain" and truth(ev.configs[summary.verdict.winner].config) == 1.5


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_no_race_measurement_starts_after_the_deadline_inside_a_round_too(monkeypatch):
    study, summary = tune_live(lambda c: 1.5 if is_fast(c) else 1.0, 3,
                               options=loop.Options(trials=12, max_repeats=500, race_rounds=0))
    clock = [1_000_000.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    inner = noisy(lambda c: 1.0, 3)
    started: list[float] = []

    def measure(config):  # each measurement takes a minute of the fake clock
        started.append(clock[0])
        clock[0] += 60.0
        return inner(config)

    deadline = clock[0] + 100.0
    report = race.run(study, Bench(remeasure=measure), 5, deadline=deadline)
    assert report is not None and len(report.candidates) >= 2
    assert started and all(t < deadline for t in started)  # none started past it, in its round either
    assert report.measurements == len(started) <= 2
    # it stops at the deadline, unless the race was decided before it (every configuration is truly alike here)
    assert report.stopped == "time budget spent (--time-budget)" or report.stop is not RaceStop.TIME


@pytest.mark.slow  # 3 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_a_knob_that_bought_nothing_before_one_that_paid_is_left_out_too(monkeypatch):
    """The path adds the fused optimizer (truly nothing) before bf16 (truly 1.5x), as a wrong order of effects from
    the search would: a start of that path cannot leave fused out, so the path is measured once more, bf16 first,
    and the recommendation is bf16 alone."""
    from autotune.evidence import bought as A

    monkeypatch.setattr(A, "order", lambda changes, measured: sorted(changes, key=lambda k: k != "optimizer_impl"))
    sp = two_knobs()
    truth = bf16_pays

    left_out = 0
    for seed in range(5):
        live = made_up.live_study("sqlite:///:memory:", f"order{seed}", sp, CTX, seed=seed, grace_s=None)
        summary = tuner(live, noisy(truth, seed), loop.Options(trials=2, max_repeats=50), sp,
                       together=noisy_together(truth, seed)).run()
        study = live.view()
        ids, plans = zip(*study.ablation_plans())  # oldest first
        assert plans[0]["order"] == ["optimizer_impl", "precision"]
        ab = evidence_of(study).ablation()
        if len(plans) == 1:
            continue  # fused's step happened to separate from 1 on the first path (a 5% chance each)
        assert (len(plans) == 2 and plans[1]["order"] == ["precision", "optimizer_impl"]
                and plans[1]["reordered_from"] == ids[0])
        assert ab.ablation_id == ids[1] and [s.label() for s in ab.steps] == ["precision=bf16", "optimizer_impl=fused"]
        assert summary.ablation is not None and summary.ablation.processes == 2 * A.ROUNDS
        if ab.dropped == {"optimizer_impl": "fused"}:
            left_out += 1
            v = summary.verdict
            assert ev_changes(study, v.winner) == {"precision": "bf16"} and "bought nothing beyond the noise" in v.text
        # a newer path stored but not measured yet (a run stopped by its time budget) hides nothing
        live.save_ablation_plan("later", {**plans[1], "started": plans[1]["started"] + 1, "done": False,
                                          "path": [{**q, "key": q["key"] + "-never"} for q in plans[1]["path"]]})
        assert evidence_of(live.view()).ablation().ablation_id == ids[1]
    assert left_out >= 4


def ev_changes(study, number):
    return evidence_of(study).configs[number].changes


# ---------------------------------------------------------------- fakes that do not share the statistics' assumptions
# Each is a measurement model of its own (a function like ``noisy``), so that a study built another way can use it.

DRIFT = 0.02  # the machine's speed wanders: a random walk of 2% per process (about 9% over 20 processes)
ORDER = 0.9  # the second process of a round runs 10% slower (what the first left behind: caches, clocks)
ARM = NOISE / 3  # each arm's own factor in a shared process, beside the process's (5%)


def drifting(truth, seed: int):
    """Lognormal noise between processes on a machine whose speed drifts slowly (a random walk), so that
    measurements close in time are alike and those far apart are not."""
    return M.drifting(truth, seed, NOISE, DRIFT)


def heavy_tailed(truth, seed: int):
    """Noise between processes with heavy tails: a t distribution of 3 degrees of freedom at the lognormal's scale
    (now and then a process several times the usual spread off)."""
    return M.heavy_tailed(truth, seed, NOISE)


def second_is_slower(truth, seed: int):
    """Lognormal noise, and the second process of each round runs ``ORDER`` times as fast."""
    return M.second_is_slower(truth, seed, CTX, NOISE, ORDER)


def arms_apart(truth, seed: int):
    """Shared processes whose factor does not cancel exactly: the process's (``NOISE``) and each arm's own in it
    (``ARM``, smaller), and the within-process noise of each arm."""
    return M.shared(truth, seed, NOISE, arm=ARM, within=WITHIN, offset=50_000)


# 48 configurations for a 12-trial budget: the search measures about a quarter of them.
BIG_SPACE = space.parse({"search": {**RACE_SPACE, "memory_format": ["contiguous", "channels_last"], "threads": [1, 2]}},
                        "big.toml", "big")
# The one truly 1.5x of them: not the recipe (which the study always measures), so the search may never meet it.
BIG_FAST = {"precision": "bf16", "optimizer_impl": "foreach", "num_workers": 0, "memory_format": "contiguous",
            "threads": 1}


def scenario(fake: str, truth, seed: int):
    """A study of ``truth`` measured by the fake named ``fake`` (see FAKES)."""
    if fake == "arms_apart":
        return tune(truth, seed, together=arms_apart(truth, seed), sp=RETAINED)
    if fake == "big_space":
        return tune(truth, seed, sp=BIG_SPACE)
    return tune(truth, seed, measure=FAKES[fake](truth, seed))


FAKES = {"drifting": drifting, "heavy_tailed": heavy_tailed, "second_is_slower": second_is_slower,
         "arms_apart": None, "big_space": None}


def fast_truth(fast: dict, seed: int, sp=SPACE):
    """One configuration truly 1.5x, the defaults 1.0, every other a fixed draw in 1.0-1.1 (as in the test above)."""
    others = random.Random(1000 + seed)
    truths: dict[str, float] = {}
    base = knobs.resolve(loop.base_config(CTX, sp.fixed, None), CTX).key()

    def truth(config):
        if all(config[k] == v for k, v in fast.items()):
            return 1.5
        key = knobs.resolve(config, CTX).key()
        return 1.0 if key == base else truths.setdefault(key, others.uniform(1.0, 1.1))

    return truth


@pytest.mark.slow  # 10-20 s each
@pytest.mark.parametrize("fake", list(FAKES))
def test_all_equal_gives_no_gain_under_noise_the_statistics_do_not_assume(fake):
    no_gain = sum(scenario(fake, lambda c: 1.0, seed)[1].verdict.state == "no_gain" for seed in SEEDS)
    print(f"{fake}: no gain claimed in {no_gain}/{len(SEEDS)} seeds")
    assert no_gain >= 18, f"'no significant gain' in only {no_gain} of 20 seeds"


@pytest.mark.slow  # 15-50 s each
@pytest.mark.parametrize("fake", [
    pytest.param("drifting", marks=pytest.mark.xfail(strict=True, raises=MissedRate, reason=FEWER_CLAIMS.format("16"))),
    pytest.param("heavy_tailed", marks=pytest.mark.xfail(strict=True, raises=MissedRate,
                                                         reason=FEWER_CLAIMS.format("14"))),
    "second_is_slower",  # 20 of 20 since the claim measures the defaults in every round (14 before)
    pytest.param("arms_apart", marks=pytest.mark.xfail(strict=True, raises=MissedRate,
                                                       reason=FEWER_CLAIMS.format("16"))),
    "big_space",
])
@pytest.mark.slow  # 68 s in a full run on a 2-core CPU
def test_a_claims_interval_covers_the_truth_under_noise_the_statistics_do_not_assume(fake):
    """One configuration truly 1.5x. Honest: a claim's interval covers its configuration's true speed-up (a verdict of
    no gain claims nothing) in 18 of 20 seeds. Found: the 1.5x one is claimed with an interval covering 1.5 in 18 of
    20 seeds, as in the test above. In the big space the search meets the 1.5x one in a few seeds only (12 trials of
    48 configurations; 3 of these 20): there the promise is the honest claim, and how often it was found is printed."""
    fast = BIG_FAST if fake == "big_space" else (INSIDE_FAST | {"num_workers": 0} if fake == "arms_apart" else FAST)
    measured = honest = covered = 0
    for seed in SEEDS:
        truth = fast_truth(fast, seed, RETAINED if fake == "arms_apart" else SPACE)
        study, summary = scenario(fake, truth, seed)
        ev = evidence_of(study)
        measured += any(truth(c.config) == 1.5 for c in ev.configs.values())
        v = summary.verdict
        if v.state != "gain":
            honest += 1
            continue
        true = truth(ev.configs[v.winner].config)
        honest += v.speedup.low <= true <= v.speedup.high
        covered += true == 1.5 and v.speedup.low <= 1.5 <= v.speedup.high
    print(f"{fake}: the 1.5x one measured in {measured}, claimed covering 1.5 in {covered}/{len(SEEDS)} seeds; "
          f"claims covering their truth (or none made) in {honest}/{len(SEEDS)}")
    assert honest >= 18, f"a claim's interval missed its configuration's truth in {len(SEEDS) - honest} of 20 seeds"
    if fake != "big_space" and covered < 18:
        raise MissedRate(f"the 1.5x configuration claimed, its interval covering 1.5, in only {covered} of 20 seeds")


@pytest.mark.slow  # 16 s in a full run on a 2-core CPU
def test_a_rival_within_the_indifference_zone_of_the_winner_leaves_the_race_as_equivalent():
    """bf16 alone is what pays (2x), at 1% noise between processes: the configurations that add knobs which buy
    nothing are equivalent to the winner once the evidence says none is more than 3% faster, and leave the race."""

    def truth(config):
        return 2.0 if config["precision"] == "bf16" else 1.0

    equivalents = 0
    for seed in range(5):
        study, summary = tune(truth, seed, measure=M.lognormal(truth, seed, 0.01))
        assert summary.verdict.state == "gain" and summary.race.stop is RaceStop.CHOSEN  # it chose, and stopped
        equivalents += sum("equivalent" in why for why in summary.race.eliminated.values())
    assert equivalents >= 5


def gpu_like(config) -> float:
    """bf16 truly 2x, fused 1.2x beside it (a made-up GPU study: the fast configurations are launch-bound)."""
    return (2.0 if config["precision"] == "bf16" else 1.0) * (1.2 if config["optimizer_impl"] == "fused" else 1.0)


def gpu_like_spread(config) -> float:
    """Between processes, the fast configurations spread 25%, the defaults (GPU-bound) 1%: as measured on an H200."""
    return 0.25 if gpu_like(config) > 1.05 else 0.01


@pytest.mark.slow  # 25 s in a full run on a 2-core CPU
def test_claims_cover_the_truth_when_the_fast_configurations_spread_more_than_the_defaults():
    """Each configuration's noise is its own: claims (Welch, on the recommendation's own spread; 3 fresh processes at
    least) cover the truth in at least 18 of 20 seeds, where one noise pooled over all (the defaults' processes
    outnumber the others') lent the defaults' 1% to configurations that spread 25%. Over 100 seeds: 86 of 100
    (benchmarks/results/unequal_noise-2026-11-28.txt)."""
    covered = claimed = 0
    for seed in SEEDS:
        study, summary = tune(gpu_like, seed, measure=M.unequal(gpu_like, seed, gpu_like_spread),
                              options=loop.Options(trials=12, max_repeats=500, numerics="off"))
        verdict = summary.verdict
        ev = evidence_of(study)
        assert ev.unequal  # the spreads differ beyond chance: each configuration has its own
        if verdict.state == "gain":
            claimed += 1
            truth = gpu_like(ev.configs[verdict.winner].config)
            assert verdict.speedup.processes >= 3 and verdict.speedup == ev.confirmation.claim
            covered += verdict.speedup.low <= truth <= verdict.speedup.high
    assert claimed >= 18, f"a claim in only {claimed} of 20 seeds"
    assert covered >= 18, f"the claim covered its configuration's truth in only {covered} of 20 seeds"
