"""autotune.evidence.claim: the claim measured apart and the least change, on fakes of known truth."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from autotune.evidence import claim
from autotune.evidence.stats import Noise, Ratio


def test_the_width_a_claim_stops_at_is_what_the_noise_allows():
    assert claim.width_target(0.15) == pytest.approx(1.40, abs=0.01)
    assert claim.width_target(0.03) == pytest.approx(1.10)  # never narrower: 1.07 would cost more than it tells
    assert claim.width_target(None) == pytest.approx(1.40, abs=0.01)
    assert claim.width_target(0.30) > claim.width_target(0.15)


def test_the_claim_is_the_fresh_processes_over_every_process_of_the_defaults():
    fresh = [("confirm-a-01", 150.0), ("confirm-a-02", 150.0), ("confirm-a-03", 150.0)]
    defaults = [("0", 100.0), ("floor-1", 100.0), ("confirm-a-01", 100.0)]
    r = claim.claim_ratio(fresh, defaults, Noise(0.1, 10))
    assert r.estimate == pytest.approx(1.5)
    assert (r.processes, r.reference_processes, r.paired) == (3, 3, False)
    assert r.low < 1.5 < r.high
    two = claim.claim_ratio(fresh[:2], defaults, Noise(0.1, 10))  # fewer than 3 processes of it: no interval
    assert two.estimate == pytest.approx(1.5) and not two.has_interval and claim.MIN_PROCESSES == 3
    unknown = claim.claim_ratio(fresh, defaults, Noise(None, 0))
    assert unknown.estimate == pytest.approx(1.5) and not unknown.has_interval
    with pytest.raises(ValueError):
        claim.claim_ratio([], defaults, Noise(0.1, 10))


def test_a_claim_whose_configuration_spreads_more_than_the_defaults_takes_its_own_spread():
    """Welch: 25% between the recommendation's processes, 1% between the defaults': the interval is the
    recommendation's spread over its 3 processes on about 2 degrees of freedom, not the defaults' 1% lent to it."""
    fresh = [("confirm-a-01", 200.0), ("confirm-a-02", 250.0), ("confirm-a-03", 300.0)]
    defaults = [("0", 100.0), ("floor-1", 101.0), ("floor-2", 99.0), ("confirm-a-01", 100.0)]
    own, steady = Noise(0.25, 2), Noise(0.01, 3)
    r = claim.claim_ratio(fresh, defaults, own, reference_noise=steady)
    assert r.df == 2 and r.low < 2.0 and r.high > 3.0  # t(2) 2.92 x 0.25 / sqrt(3): x/ 1.52
    lent = claim.claim_ratio(fresh, defaults, steady)  # one noise, the defaults': what a claim no longer does
    assert lent.high / lent.low < 1.1 < r.high / r.low

def test_the_claim_covers_the_truth_at_its_level_on_seeded_noise():
    """1.5x truly, 15% noise between processes, 4 fresh against 6 of the defaults: the 90% interval covers 1.5 in
    about 90% of 2,000 seeded claims, and its estimate is unbiased (geometric mean of estimate/truth within 1%)."""
    covered, logs = 0, []
    for seed in range(2000):
        rng = random.Random(seed)
        fresh = [(f"confirm-{i}", 150.0 * math.exp(rng.gauss(0, 0.15))) for i in range(4)]
        defaults = [(str(i), 100.0 * math.exp(rng.gauss(0, 0.15))) for i in range(6)]
        r = claim.claim_ratio(fresh, defaults, Noise(0.15, 30))
        covered += r.low <= 1.5 <= r.high
        logs.append(math.log(r.estimate / 1.5))
    assert 0.87 <= covered / 2000 <= 0.93
    assert abs(statistics.fmean(logs)) < 0.01


def rows_of(truth, seed: int, n: int = 40, sigma: float = 0.10):
    """A search's measurements of random configurations of three knobs, each measured once with seeded noise."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        config = {"memory_format": rng.choice(["contiguous", "channels_last"]), "batch_size": rng.choice([32, 128]),
                  "optimizer_impl": rng.choice(["default", "foreach"])}
        out.append((config, 100.0 * truth(config) * math.exp(rng.gauss(0, sigma))))
    return out


CHOSEN = {"memory_format": "channels_last", "batch_size": 128, "optimizer_impl": "foreach"}


@pytest.mark.parametrize("seed", range(20))
def test_the_knobs_that_show_no_effect_in_the_search_are_proposed_for_reverting_batch_size_first(seed):
    """Only channels-last pays (1.5x): batch size and optimizer kernels are proposed for reverting, the batch size
    first; channels-last stays."""
    truth = lambda c: 1.5 if c["memory_format"] == "channels_last" else 1.0  # noqa: E731
    proposed = claim.propose(CHOSEN, rows_of(truth, seed), 0.10)
    assert proposed == ["batch_size", "optimizer_impl"]


def test_a_knob_is_never_proposed_when_the_search_shows_it_pays():
    truth = lambda c: (1.5 if c["memory_format"] == "channels_last" else 1.0) * (1.3 if c["batch_size"] == 128 else 1.0)  # noqa: E731
    assert "batch_size" not in claim.propose(CHOSEN, rows_of(truth, 3), 0.10)
    assert "memory_format" not in claim.propose(CHOSEN, rows_of(truth, 3), 0.10)


def test_the_knob_with_the_largest_effect_stays_when_none_shows_one():
    flat = lambda c: 1.0  # noqa: E731
    proposed = claim.propose(CHOSEN, rows_of(flat, 1, n=6), 0.30)
    assert len(proposed) == 2 and set(proposed) < set(CHOSEN)
    assert len(claim.propose(CHOSEN, rows_of(flat, 1, n=6), 0.30, keep_one=False)) == 3


def test_a_round_measures_the_recommendation_the_choice_while_undecided_and_the_defaults_every_time():
    assert sorted(claim.round_of(0, 5, 3, 0, 0, 4)) == [0, 3, 5]  # the first round: interleaved with the defaults
    assert sorted(claim.round_of(1, 5, None, 0, 1, 6)) == [0, 5]  # ... and every round, more of them or not
    assert [claim.round_of(k, 5, None, 0, 6, 6)[0] for k in range(2)] == [5, 0]  # the recommendation not always first
    firsts = {claim.round_of(k, 5, 3, 0, 0, 0)[0] for k in range(3)}
    assert firsts == {0, 3, 5}  # a rotating order: nobody always first


def test_the_reduction_holds_unless_it_is_slower_beyond_the_noise_once_a_loss_had_its_chance():
    assert claim.reduction_holds(Ratio(0.98, 0.90, 1.07), 1) is None  # one round: too early
    assert claim.reduction_holds(Ratio(0.98, 0.90, 1.07), 2) is True  # no loss shown, within the zone
    assert claim.reduction_holds(Ratio(1.0), 2) is True  # unknown noise: nothing shows it slower
    assert claim.reduction_holds(Ratio(0.70, 0.62, 0.80), 2) is False  # slower beyond the noise
    assert claim.reduction_holds(Ratio(0.85, 0.70, 1.03), 2) is None  # looks slower: measured more
    assert claim.reduction_holds(Ratio(0.93, 0.80, 1.08), claim.DECIDE_BY) is True  # ... until it has had its chance
    assert claim.reduction_holds(Ratio(0.85, 0.70, 1.03), claim.DECIDE_BY) is False  # 15% slower: a loss the noise hid


def test_a_knob_left_at_the_users_setting_is_named_with_what_it_bought():
    """Each knob with the user's value (``knob: your value``), then what the search's values bought (together)."""
    one = claim.Left({"batch_size": 128}, {"batch_size": 32}, Ratio(1.01, 0.93, 1.10))
    assert one.lines() == ["batch_size: 32"] and one.bought_text() == "batch_size=128 bought 1.01x (0.93-1.10)"
    assert one.text() == "batch_size: 32 (batch_size=128 bought 1.01x (0.93-1.10))"
    two = claim.Left({"batch_size": 128, "optimizer_impl": "foreach"}, {"batch_size": 32, "optimizer_impl": "default"},
                 Ratio(0.99, 0.90, 1.09))
    assert two.lines() == ["batch_size: 32", "optimizer_impl: default"]
    assert two.text() == ("batch_size: 32, optimizer_impl: default (batch_size=128 optimizer_impl=foreach bought "
                          "0.99x (0.90-1.09) together)")
    assert one.to_dict()["text"] == one.text() and one.to_dict()["lines"] == one.lines()


def test_the_path_shows_the_knobs_the_claim_left_out_and_the_verdict_quotes_their_step():
    """The claim's rounds left out a knob the path had kept (the host heap, its step judged between processes): the
    path marks it left out, and the verdict quotes that step's figure, not a second one for the same knob."""
    from types import SimpleNamespace

    from autotune.evidence import bought as A

    heap = A.Step({"host_allocator": "retain"}, "k1", Ratio(1.38, 0.96, 1.97), Ratio(1.38, 0.96, 1.97), False)
    batch = A.Step({"batch_size": 64}, "k2", Ratio(2.24, 1.56, 3.20), Ratio(1.62, 1.57, 1.67), True)
    fused = A.Step({"optimizer_impl": "fused"}, "k3", Ratio(2.96, 2.07, 4.24), Ratio(1.33, 1.29, 1.37), True)
    path = A.Ablation("a", 12, (heap, batch, fused), "k3", 12, {}, 3)
    settled = A.as_recommended(path, {"host_allocator": "retain"})
    assert [s.kept for s in settled.steps] == [False, True, True]
    assert settled.dropped == {"host_allocator": "retain"}
    conf = SimpleNamespace(reverted={"host_allocator": "retain"}, record=SimpleNamespace(chosen=12),
                           bought=Ratio(1.23, 0.86, 1.76))
    (left,) = claim.left(conf, settled, {"host_allocator": "default"})
    assert left.text() == "host_allocator: default (host_allocator=retain bought 1.38x (0.96-1.97))"
    # the reduction refused: the recommendation is the choice, every step of it kept
    assert all(s.kept for s in A.as_recommended(path, {}).steps) and A.as_recommended(path, {}).dropped == {}


def _evidence(defaults: list, fresh: list, race: list = ()):
    """A study's evidence as claim_of reads it: the defaults (#0) and one configuration (#1), each with its repeats."""
    from types import SimpleNamespace

    from autotune.evidence.configs import Measured

    base = Measured(0, "baseline", {}, 0, True, ("search-0", defaults[0][1]), repeats=list(defaults[1:]))
    one = Measured(1, "search", {}, 0, True, ("search-1", 1.0), repeats=[*race, *fresh])
    return SimpleNamespace(baseline=base, configs={0: base, 1: one})


def test_a_claim_takes_each_sides_own_spread_with_no_pretest():
    """Welch always: the configuration's 3 fresh processes spread about 20%, the defaults' 1%; the claim's interval
    is its own spread's (about 2 degrees of freedom), whatever a test of the spreads would have said."""
    defaults = [("search-0", 100.0), ("confirm-a-01", 101.0), ("confirm-a-02", 99.0), ("confirm-a-03", 100.0)]
    fresh = [("confirm-a-01", 160.0), ("confirm-a-02", 200.0), ("confirm-a-03", 250.0)]
    r = claim.claim_of(_evidence(defaults, fresh), 1)
    assert r.processes == 3 and r.df == 2
    assert r.low < 1.6 and r.high > 2.5  # t(2) 2.92 x 0.22 / sqrt(3): x/ 1.45 about 2.0


def test_a_claim_rests_on_the_defaults_measured_in_its_own_rounds():
    """On a machine that drifts, the defaults' processes from before the claim would carry the drift into it: the
    claim's defaults are those of its own rounds (the race's, the noise floor's and their first are left out)."""
    defaults = [("search-0", 50.0), ("floor-1-x", 50.0), ("race-r-01", 50.0), ("confirm-a-01", 100.0),
                ("confirm-a-02", 101.0), ("confirm-a-03", 99.0)]
    fresh = [("confirm-a-01", 150.0), ("confirm-a-02", 152.0), ("confirm-a-03", 148.0)]
    ev = _evidence(defaults, fresh)
    assert [r for r, _ in claim.defaults_pool(ev)] == ["confirm-a-01", "confirm-a-02", "confirm-a-03"]
    r = claim.claim_of(ev, 1)
    assert r.estimate == pytest.approx(1.5, rel=0.01) and r.reference_processes == 3
    assert r.low < 1.5 < r.high
