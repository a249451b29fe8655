"""The race and the verdict, against fake studies of known truth with lognormal noise between processes.

Each fake measurement is ``truth(config) * exp(N(0, 0.15))``: 15% noise between
processes, the machine's spread described in DESIGN.md. 20 seeds per scenario.
"""

from __future__ import annotations

import math
import time
import random

import pytest

from autotune import config as C
from autotune import knobs, race, space
from autotune import result as R
from autotune import study as S
from autotune.request import DEFAULT_CONFIRM
from autotune.store import Store
from autotune.evidence import Evidence

CTX = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=2)
SPACE = space.parse(
    {"search": {"precision": ["fp32", "bf16"], "optimizer_impl": ["default", "foreach", "fused"], "num_workers": [0, 1]}},
    "race.toml",
    "race",
)
NOISE = 0.15
SEEDS = range(20)
FAST = {"precision": "bf16", "optimizer_impl": "fused", "num_workers": 1}  # truly 1.5x in the second scenario


def noisy(truth, seed: int, calls: list | None = None):
    rng = random.Random(seed)

    def evaluate(config, dominators=(), margin=None):
        if calls is not None:
            calls.append(dict(config))
        rate = 100.0 * truth(config) * math.exp(rng.gauss(0.0, NOISE))
        return R.TrialResult(outcome=R.OK, samples_per_s=rate, samples_per_s_cv=0.01, peak_memory_bytes=10**8, wall_s=0.01)

    return evaluate


def tune(truth, seed: int, name: str = "race", options: S.Options | None = None, calls: list | None = None):
    attrs = {"workload": {"model": "x:y"}, "space": SPACE.to_dict(), "space_hash": SPACE.hash(),
             "fingerprint": {"device_type": "cpu", "torch": "2"}, "device": "cpu", "context": CTX.to_dict(), "global_batch": None}
    study, _ = Store("sqlite:///:memory:").create_or_check(name, attrs, S.make_sampler("random", seed))
    base = S.base_config(CTX, SPACE.fixed, None)
    eff = space.effective(SPACE, CTX, base)
    options = options or S.Options(trials=12, max_repeats=500)
    summary = S.Tuner(study, eff, CTX, base, noisy(truth, seed, calls), options).run()
    return study, summary


def is_fast(config) -> bool:
    return all(config[k] == v for k, v in FAST.items())


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


def test_a_truly_faster_configuration_wins_the_race_and_its_interval_covers_the_truth():
    picked = covered = 0
    for seed in SEEDS:
        others = random.Random(1000 + seed)
        truths: dict[str, float] = {}

        def truth(config):
            if is_fast(config):
                return 1.5
            key = knobs.resolve(config, CTX).key()
            base = knobs.resolve(S.base_config(CTX, {}, None), CTX).key()
            return 1.0 if key == base else truths.setdefault(key, others.uniform(1.0, 1.1))

        study, summary = tune(truth, seed)
        verdict = summary.verdict
        assert verdict is not None
        if verdict.state == "gain" and is_fast(Evidence.of(study).configs[verdict.winner].config):
            picked += 1
            covered += verdict.speedup.low <= 1.5 <= verdict.speedup.high
            doc = C.export(study, "fastest")
            assert doc["study"]["trial"] == verdict.winner
            assert doc["speedup"]["estimate"] == pytest.approx(verdict.speedup.estimate)
    assert picked >= 18, f"the 1.5x configuration won in only {picked} of 20 seeds"
    assert covered >= 18, f"its interval covered 1.5 in only {covered} of 20 seeds"


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
        ev = Evidence.of(study)
        if v.state == "gain" and len(ev.configs[v.winner].changes) == 1:
            simpler += 1
            if v.simpler_preferred:
                assert "changes fewer knobs" in v.text
    assert simpler >= 4


def test_race_costs_stay_with_the_leaders():
    calls: list = []
    study, summary = tune(lambda c: 1.5 if is_fast(c) else 1.0, 3, calls=calls)
    report = summary.race
    assert report is not None and report.candidates and len(report.candidates) <= race.MAX_CANDIDATES + 1
    assert summary.repeats == report.measurements + race.FLOOR_REPEATS
    # each round measures the baseline and the candidates still in the race, nothing else
    assert report.measurements <= report.rounds * (1 + len(report.candidates))
    assert report.rounds <= DEFAULT_CONFIRM


def test_a_stopped_race_resumes_where_it_stopped():
    seed = 4

    def truth(config):  # every configuration but the defaults equally 1.5x: the race can neither separate one nor give up
        return 1.0 if all(config[k] == v for k, v in {"precision": "fp32", "optimizer_impl": "default", "num_workers": 0}.items()) else 1.5

    study, summary = tune(truth, seed, options=S.Options(trials=12, max_repeats=500, race_rounds=0))
    base = S.base_config(CTX, SPACE.fixed, None)
    eff = space.effective(SPACE, CTX, base)
    inner = noisy(truth, seed + 100)
    calls: list = []

    def stopped_in_round_two(config, dominators=(), margin=None):
        calls.append(config)
        if len(calls) == 8:
            raise KeyboardInterrupt
        return inner(config)

    with pytest.raises(KeyboardInterrupt):
        S.Tuner(study, eff, CTX, base, stopped_in_round_two, S.Options(trials=12, max_repeats=500, race_rounds=3)).run()
    again = S.Tuner(study, eff, CTX, base, inner, S.Options(trials=12, max_repeats=500, race_rounds=3)).run()
    assert again.new == 0 and again.race is not None
    assert again.race.rounds == 3  # the same race, its earlier rounds kept
    keys = [k for k in study.user_attrs if k.startswith("race:")]
    assert len(keys) == 1 and study.user_attrs[keys[0]]["done"]
    assert again.race.stopped.startswith("budget")
    # a bigger --confirm later extends the finished race instead of starting over: one more round
    more = S.Tuner(study, eff, CTX, base, inner, S.Options(trials=12, max_repeats=500, race_rounds=4)).run()
    assert more.new == 0 and more.race is not None, "the finished race was not extended"
    assert more.race.race_id == again.race.race_id and more.race.candidates == again.race.candidates
    assert more.race.rounds == 4 and more.race.measurements >= 2  # round 4: the baseline and the candidates still in
    assert [k for k in study.user_attrs if k.startswith("race:")] == keys
    record = study.user_attrs[keys[0]]
    assert record["done"] and record["rounds_run"] == 4
    assert len({k.rpartition(":")[0] for k in study.user_attrs if k.startswith(f"measurement:race-{more.race.race_id}-")}) == 4


def test_the_race_honours_the_time_budget_and_numbers_its_rounds():
    study, summary = tune(lambda c: 1.5 if is_fast(c) else 1.0, 3, options=S.Options(trials=12, max_repeats=500, race_rounds=0))
    seen: list[str] = []
    late = race.run_race(study, noisy(lambda c: 1.0, 3), 5, deadline=time.time() - 1, on_measure=lambda w, n, r: seen.append(w))
    assert late is not None and late.rounds == 0 and late.stopped == "time budget spent (--time-budget)" and not seen
    later = race.run_race(study, noisy(lambda c: 1.0, 3), 5, on_measure=lambda w, n, r: seen.append(w))
    assert later is None and not seen  # that race is over: the deadline ended it, and a later run does not take it up
    fresh, _ = tune(lambda c: 1.5 if is_fast(c) else 1.0, 4, name="race2", options=S.Options(trials=12, max_repeats=500, race_rounds=0))
    report = race.run_race(fresh, noisy(lambda c: 1.0, 4), 5, on_measure=lambda w, n, r: seen.append(w))
    assert report is not None and report.rounds >= 1
    assert seen[0] == "race round 1 of at most 5" and f"race round {report.rounds} of at most 5" in seen
