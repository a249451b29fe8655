"""The tuning loop (autotune.tuning.loop.Tuner: the phases composed) with a cheap fake objective (the real worker is
tested in test_runner/test_cli_run); each phase alone: tests/test_phases.py."""

from __future__ import annotations

import os
import socket
import statistics

import optuna
import pytest

from autotune import knobs
from autotune.knobs import space
from autotune import result as R
from autotune.tuning import loop
from autotune.tuning.phases import Bench, Seeds, Session, bench, sharing, floor, sampler, seeds
from autotune.store import LiveStudy, records, writing
from autotune.evidence import claim as CL
from autotune.evidence import evidence_of
from autotune.testing import fake as M
from autotune.testing import studies as made_up

CTX = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=2)
SPACE = space.parse(
    {
        "search": {
            "precision": ["fp32", "bf16"],
            "memory_format": ["contiguous", "channels_last"],
            "batch_size": {"low": 16, "high": 256, "step": 16},
            "num_workers": [0, 1, 2],
            "prefetch_factor": [2, 4],
            "optimizer_impl": ["default", "foreach", "fused"],
        }
    },
    "test.toml",
    "test",
)


def speed(config) -> float:
    """The fake's truth, in hundreds of samples/s: the batch, bf16 twice as fast, loader workers 10% each,
    channels-last 20% slower."""
    bs = config["batch_size"]
    rate = bs * (2.0 if config["precision"] == "bf16" else 1.0) * (1 + 0.1 * config["num_workers"])
    return rate * (0.8 if config["memory_format"] == "channels_last" else 1.0) / 100.0


def memory(config) -> int:
    return int(config["batch_size"] * 1e6 * (0.6 if config["precision"] == "bf16" else 1.0))


def fake(calls: list, fail=lambda c: False):
    """Measures the truth exactly (no noise); ``fail(config)``: it runs out of memory."""
    return M.lognormal(speed, 0, 0.0, calls, peak=memory, fail=lambda c: R.OOM if fail(c) else None)


def make(tmp_path, name="s", sampler="tpe", seed=0, url=None):
    url = url or f"sqlite:///{tmp_path}/{name}.db"
    live = made_up.live_study(url, name, SPACE, CTX, sampler=sampler, seed=seed)
    base = loop.base_config(CTX, SPACE.fixed, None)
    eff = space.effective(SPACE, CTX, base)
    return live, eff, base, url


def tuner(live, eff, base, evaluate, options=None, remeasure=None, warm=(), **kw):
    """The Tuner over ``live`` searching ``eff`` from ``base``, measuring with the fake ``evaluate``."""
    return loop.Tuner(live, Seeds(eff, CTX, base, list(warm)), Bench(evaluate, remeasure), options, **kw)


def front(live):
    """The Pareto front by the evidence's figures, as trials."""
    view = live.view()
    return [view.trial(n) for n in evidence_of(view).front()]


def test_study_runs_resumes_and_never_measures_twice(tmp_path):
    calls: list = []
    live, eff, base, url = make(tmp_path)
    summary = tuner(live, eff, base, fake(calls), loop.Options(trials=12, race_rounds=0)).run()
    # 12 configurations, plus the baseline measured again in 2 more processes for the noise floor
    assert summary.measured == 12 and summary.repeats == 2 and len(calls) == 14
    trials = live.trials()
    assert trials[0].role == "baseline" and trials[0].config == base
    assert trials[1].role == "recipe"
    assert trials[1].config["precision"] == "bf16" and trials[1].config["optimizer_impl"] == "fused"
    best = front(live)
    assert best and all(t.outcome == "ok" for t in best)
    assert all(t.measuring_since is not None for t in trials)  # every one of them was measured
    # a second run (a fresh process would load the study the same way) adds trials to the same study
    again = LiveStudy(optuna.load_study(study_name="s", storage=url))
    summary = tuner(again, eff, base, fake(calls), loop.Options(trials=16, race_rounds=0)).run()
    assert summary.new == 4 and sum(1 for t in again.trials() if t.measured) == 16
    keys = [knobs.resolve(c, CTX).key() for c in calls]
    base_key = knobs.resolve(base, CTX).key()
    assert keys.count(base_key) == 3, "the noise floor: the baseline in 3 processes, no more"
    others = [k for k in keys if k != base_key]
    assert len(others) == len(set(others)), "a configuration was measured twice"


def test_the_floor_and_the_race_measure_again_through_remeasure(tmp_path):
    """Re-measurements go through ``remeasure`` (``autotune run``'s leaves out the profile and the FLOP count),
    search trials through ``evaluate``."""
    searched: list = []
    again: list = []
    live, eff, base, _ = make(tmp_path)
    summary = tuner(live, eff, base, fake(searched), loop.Options(trials=6, race_rounds=2),
                    remeasure=lambda config: fake(again)(config)).run()
    minimal = [r for r in summary.records if r.role == "minimal" and r.duplicate_of is None]
    assert summary.measured == 6 and len(searched) == 6 + len(minimal)  # a least change never measured: a trial
    assert len(again) == summary.repeats >= 2 and again[0] == base  # the noise floor first: the defaults


def test_duplicates_are_answered_from_the_cache(tmp_path):
    tiny = space.parse({"search": {"precision": ["fp32", "bf16"]}}, "t.toml", "t")
    calls: list = []
    live, _, base, _ = make(tmp_path)
    eff = space.effective(tiny, CTX, base)
    summary = tuner(live, eff, base, fake(calls), loop.Options(trials=10, max_repeats=5, race_rounds=0)).run()
    assert len(calls) == 2 + summary.repeats and summary.measured == 2
    assert "space exhausted" in summary.reason
    trials = live.trials()
    dups = [t for t in trials if t.duplicate_of is not None]
    assert len(dups) == 5 and all(t.values == trials[t.duplicate_of].values for t in dups)
    assert not any(t.measuring_since is not None for t in dups)


@pytest.mark.slow  # 4 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_failures_never_reach_the_front(tmp_path):
    live, eff, base, _ = make(tmp_path)
    calls: list = []
    tuner(live, eff, base, fake(calls, fail=lambda c: c["batch_size"] >= 128), loop.Options(trials=20)).run()
    failed = [t for t in live.trials() if t.outcome == R.OOM]
    assert failed, "the fake failure region was never sampled"
    assert all(t.constraints["failed"] == 1.0 for t in failed)
    assert all(t.error["message"] == "out of memory (made up)" for t in failed)
    assert not {t.number for t in failed} & {t.number for t in live.study.best_trials}


@pytest.mark.slow  # 4 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_max_memory_is_a_real_constraint(tmp_path):
    live, eff, base, _ = make(tmp_path)
    budget = 100_000_000  # 100 MB: batch sizes above ~100 (fp32) or ~166 (bf16) violate it
    tuner(live, eff, base, fake([]), loop.Options(trials=20, max_memory_bytes=budget)).run()
    assert front(live)
    assert all(t.values[1] <= budget for t in front(live))
    over = [t for t in live.trials() if t.outcome == "ok" and t.values[1] > budget]
    assert all(t.constraints["memory"] > 0 for t in over)


def _failing_measured(failures_as: str, seed: int, tmp_path) -> int:
    live, eff, base, _ = make(tmp_path, name=f"{failures_as}{seed}", seed=seed, url="sqlite:///:memory:")
    fail = lambda c: c["precision"] == "bf16" or c["batch_size"] >= 160  # noqa: E731 - most of the space
    calls: list = []
    tuner(live, eff, base, fake(calls, fail),
          loop.Options(trials=30, failures_as=failures_as, max_repeats=1000, race_rounds=0)).run()
    return sum(1 for c in calls if fail(c))


@pytest.mark.slow  # 19 s in a full run on a 2-core CPU
def test_failure_feedback_beats_fail_state(tmp_path):
    """Failures told as violated constraints steer the sampler away; told as FAIL they are ignored."""
    seeds = range(3)
    constraint = [_failing_measured("constraint", s, tmp_path) for s in seeds]
    fail_state = [_failing_measured("fail", s, tmp_path) for s in seeds]
    assert statistics.median(constraint) < statistics.median(fail_state), (constraint, fail_state)


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_interrupted_trial_is_requeued_and_measured_again(tmp_path):
    live, eff, base, url = make(tmp_path)
    calls: list = []
    inner = fake(calls)

    def evaluate(config, dominators=(), margin=None):
        if len(calls) == 3:  # the baseline, its two noise-floor repeats, then the recipe is interrupted
            raise KeyboardInterrupt
        return inner(config, dominators)

    with pytest.raises(KeyboardInterrupt):
        tuner(live, eff, base, evaluate, loop.Options(trials=8, race_rounds=0)).run()
    stopped = next(t for t in live.trials() if t.outcome == "interrupted")
    assert stopped.state == "fail" and stopped.outcome == "interrupted"
    calls_before = len(calls)
    tuner(live, eff, base, fake(calls), loop.Options(trials=8, race_rounds=0)).run()
    resumed = live.trials()[stopped.number + 1]
    assert resumed.params == stopped.params and resumed.outcome == "ok"
    assert stopped.role == resumed.role == "recipe"
    assert len(calls) - calls_before == 7  # 8 trials; only the baseline had been measured


def signed_by(live, trial, pid, monkeypatch):
    """Sign ``trial`` as another process of this host would (``pid``)."""
    with monkeypatch.context() as m:
        m.setattr(writing, "owner", lambda: {"host": socket.gethostname(), "pid": pid, "started": 0})
        live.sign(trial)


def test_stale_running_trial_is_recovered(tmp_path, monkeypatch):
    live, eff, base, url = make(tmp_path)
    tuner(live, eff, base, fake([]), loop.Options(trials=3)).run()
    precision = {"precision": optuna.distributions.CategoricalDistribution(["fp32", "bf16"])}
    trial = live.study.ask(precision)
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    signed_by(live, trial, dead, monkeypatch)
    assert live.recover_stale() == [trial.number]
    assert live.trials()[trial.number].outcome == "interrupted"
    waiting = [t for t in live.trials() if t.state == "waiting"]
    assert len(waiting) == 1 and live.study.ask(precision).params == trial.params  # queued with its parameters


def test_live_running_trial_of_another_process_is_left_alone(tmp_path, monkeypatch):
    live, *_ = make(tmp_path)
    trial = live.study.ask()
    signed_by(live, trial, os.getppid(), monkeypatch)
    assert live.recover_stale() == []


def _sampler_draws(name: str, seed: int | None) -> list[tuple[float, ...]]:
    """The parameters a fresh study with ``make_sampler(name, seed)`` suggests in 6 trials (3 past the start-up)."""
    study = optuna.create_study(direction="maximize", sampler=loop.make_sampler(name, seed=seed, n_startup_trials=3))
    study.optimize(lambda t: t.suggest_float("x", 0, 1) - (t.suggest_float("y", 0, 1) - 0.5) ** 2, n_trials=6)
    return [(t.params["x"], t.params["y"]) for t in study.trials]


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_samplers_by_name():
    # gp: the Gaussian process, handing over to TPE past GP_MAX_TRIALS complete trials (test_gp_hands_over_to_tpe...)
    kinds = {"tpe": optuna.samplers.TPESampler, "gp": loop.GPThenTPE,
             "random": optuna.samplers.RandomSampler, "nsga2": optuna.samplers.NSGAIISampler}
    assert set(loop.SAMPLERS) == set(kinds) and loop.DEFAULT_SAMPLER == "gp"
    for name in loop.SAMPLERS:
        assert type(loop.make_sampler(name, seed=1)) is kinds[name], name
        # the seed fixes every suggestion, the model-based ones after the start-up included; another seed differs
        first = _sampler_draws(name, seed=1)
        assert _sampler_draws(name, seed=1) == first, f"{name}: the same seed suggested other parameters"
        assert _sampler_draws(name, seed=2) != first, f"{name}: another seed suggested the same parameters"
    # the options each sampler is made with
    tpe = loop.make_sampler("tpe", seed=1)
    assert (tpe._multivariate, tpe._group, tpe._n_startup_trials) == (True, True, 8)
    assert loop.make_sampler("tpe", n_startup_trials=3)._n_startup_trials == 3
    both = loop.make_sampler("gp", seed=1)
    gp, after = both.gp, both.tpe
    assert type(gp) is optuna.samplers.GPSampler and both.limit == loop.GP_MAX_TRIALS
    assert gp._n_startup_trials == 8 and gp._warn_independent_sampling is False
    assert type(after) is optuna.samplers.TPESampler and (after._multivariate, after._group) == (True, True)
    assert loop.make_sampler("gp", n_startup_trials=3).gp._n_startup_trials == 3
    assert loop.make_sampler("gp", gp_max_trials=7).limit == 7
    assert loop.make_sampler("nsga2", seed=1)._population_size == 10
    with pytest.raises(Exception, match="expected one of"):
        loop.make_sampler("magic")


def test_a_claim_waits_for_an_earlier_trial_still_choosing_so_a_configuration_is_never_measured_twice(tmp_path,
                                                                                                      monkeypatch):
    # Two processes, one configuration: the earlier trial (#a) is still choosing when the later one
    # (#b) claims; #a then picks the same configuration. #b must wait for #a's choice and give way.
    import threading

    live, eff, base, _ = make(tmp_path)
    a, b = live.study.ask(), live.study.ask()
    signed_by(live, a, os.getppid(), monkeypatch)  # #a belongs to another live process of this host
    live.sign(b)
    resolved = knobs.resolve(base, CTX)

    # #a chooses only once #b's claim has read the study and found #a still choosing
    claim_saw_a_undecided = threading.Event()
    claimer = threading.current_thread()
    read_trials = live.trials

    def trials(*args, **kwargs):
        read = read_trials(*args, **kwargs)
        if threading.current_thread() is claimer and any(t.number == a.number and t.config_key is None for t in read):
            claim_saw_a_undecided.set()
        return read

    live.trials = trials  # type: ignore[method-assign]

    def choose_late() -> None:
        if claim_saw_a_undecided.wait(timeout=sharing.UNDECIDED_WAIT_S):
            live.mark(a, config_key=resolved.key())

    chooser = threading.Thread(target=choose_late)
    chooser.start()
    try:
        claimed = sharing.claim(live, b, "search", resolved.key(), budget=10)
    finally:
        chooser.join()
    assert claim_saw_a_undecided.is_set(), "the claim never read the study while #a was still choosing"
    assert (claimed.answer is sharing.Answer.GIVEN_UP
            and claimed.why == f"#{a.number} is measuring the same configuration")


def test_a_trial_over_the_memory_budget_says_so_in_its_line(tmp_path):
    from autotune.tuning.progress import trial_line

    live, eff, base, _ = make(tmp_path)
    shown: list = []
    tuner(live, eff, base, fake([]), loop.Options(trials=3, max_memory_bytes=1, race_rounds=0, floor_repeats=0),
          on_trial=shown.append).run()
    ok = [r for r in shown if r.outcome == R.OK]
    assert ok and all(r.over_budget for r in ok)
    assert all("(over the --max-memory budget: not a candidate)" in trial_line(r) for r in ok)


def test_the_noise_floor_is_measured_by_the_process_that_measured_the_baseline(tmp_path, monkeypatch):
    """Two processes starting on one study measure the floor once: the baseline's own process does, and
    another takes over only when that one is gone."""
    import socket as sockets

    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    # a live process of this host measured the baseline; a gone one
    for pid, expected in ((os.getppid(), 0), (dead, 2)):
        live, eff, base, _ = make(tmp_path, name=f"s{pid}")
        with monkeypatch.context() as m:
            m.setattr(writing, "owner", lambda pid=pid: {"host": sockets.gethostname(), "pid": pid, "started": 0.0})
            tuner(live, eff, base, fake([]), loop.Options(trials=1, race_rounds=0, floor_repeats=0)).run()
            assert floor.missing(live, 2) == 2  # the process that measured the baseline takes it
        assert floor.missing(live, 2) == expected
        measured_again: list = []
        tuner(live, eff, base, fake(measured_again), loop.Options(trials=1, race_rounds=0)).run()
        assert len(measured_again) == expected  # this process measured the floor only when the baseline's own was gone


def test_a_configuration_may_run_three_times_the_defaults_whole_trial(tmp_path):
    live, eff, base, _ = make(tmp_path)
    assert bench.slow_limit(live, base) is None  # before the baseline: only --trial-timeout
    shown: list = []
    tuner(live, eff, base, fake([]), loop.Options(trials=1, race_rounds=0, floor_repeats=0),
          on_trial=shown.append).run()
    baseline = seeds.baseline(live.trials())
    assert bench.slow_limit(live, baseline.config) is None  # the baseline itself is never cut
    other = {**baseline.config, "precision": "bf16"}
    assert bench.slow_limit(live, other) == pytest.approx(bench.SLOW_FACTOR * baseline.duration_s)
    (rec,) = shown
    assert rec.estimate_s == 0  # trials=1: nothing left, no floor, no race


def test_the_baseline_line_is_followed_by_the_estimate_of_the_rest():
    from autotune.tuning.progress import estimate_line

    assert estimate_line(10.0, 600.0) == ("the defaults took 10.0s per trial here: the rest of the study (trials, "
                                          "noise floor, race, claim) will take up to about 10m00s")
    assert estimate_line(240.0, 7200.0).endswith("use --quick, a smaller model or batch, or --time-budget")
    options = loop.Options(trials=30, floor_repeats=2, race_rounds=8, race_candidates=6)
    claim = 2 * CL.ROUNDS + 1  # the claim measured apart: the defaults and the recommendation, a reduced one first
    assert options.estimate_s(10.0, 29) == 10.0 * (29 + 2 + 8 * 7 + claim)
    assert loop.Options(trials=30, floor_repeats=2, race_rounds=8, race_candidates=6, confirm=False
                     ).estimate_s(10.0, 29) == 10.0 * (29 + 2 + 8 * 7)
    budgeted = loop.Options(trials=30, race_rounds=8, time_budget_s=40.0)
    assert budgeted.estimate_s(10.0, 29, elapsed_s=15.0) == 25.0  # the time budget ends the study first


def test_a_time_budget_keeps_the_share_the_race_the_claim_and_the_numerics_need():
    """At 2 s a process and 15% noise: the claim's 5 processes of the recommendation and what goes with them (a
    reduced configuration, the defaults, the chosen one while undecided: 3) at the claim's own pace, the numerics
    check's tenth of the budget, the race's first two rounds of 2 candidates and the defaults (6 processes); never
    more than half the budget, the claim kept first, then the numerics check, the race taking what is left; nothing
    without a time budget or a race."""
    from autotune.tuning.phases.session import Shares

    options = loop.Options(trials=50, race_rounds=8, race_candidates=2, time_budget_s=90.0, numerics="off")
    assert CL.processes_needed(0.15) == 5 and CL.processes_needed(0.01) == CL.MIN_PROCESSES == 3
    # the claim: 5 of the recommendation and 3 more at its pace, 5 of the defaults interleaved at theirs
    assert options.shares(2.0, 2.0, 0.15) == Shares(race_s=2.0 * 2 * 3, claim_s=2.0 * (5 + 3) + 2.0 * 5, numerics_s=0.0)
    assert options.shares(2.0, 4.0, 0.15).claim_s == 4.0 * (5 + 3) + 2.0 * 5  # a compiled one compiles in each process
    checked = loop.Options(trials=50, race_rounds=8, race_candidates=2, time_budget_s=90.0, numerics="warn")
    assert checked.shares(2.0, 2.0, 0.15) == Shares(45.0 - 26.0 - 9.0, 26.0, 9.0)  # the race takes what is left ...
    assert checked.shares(2.0, 3.0, 0.15) == Shares(0.0, 34.0, 9.0)  # ... unless it is less than a whole round (6 s)
    assert checked.shares(2.0, 4.0, 0.15) == Shares(0.0, 42.0, 0.0)  # the 3 s left could not hold the check's runs
    tight = checked.shares(12.0, 12.0, 0.15)  # 156 s of claim alone: the search keeps half, the claim comes first
    assert tight == Shares(0.0, 45.0, 0.0) and tight.total_s == 45.0
    # the shares are of what the probes left (60 of the 90 s: half is 30 s), and the race is priced at its candidates'
    # pace (each compiles in every process): 2 s for the defaults and 3 s for each candidate, 8 s a round
    left = checked.shares(1.0, 1.0, 0.15, budget_s=60.0)
    assert left == Shares(1.0 * 3 * 2, 13.0, 6.0)  # the check: a tenth of the 60 s (of 90 s: 9 s)
    assert options.shares(2.0, 2.0, 0.15, candidate_s=3.0).race_s == 2 * (2.0 + 2 * 3.0)
    assert checked.shares(2.0, 2.0, 0.15, candidate_s=5.0).race_s == 0.0  # 10 s left, a round is 12 s: none
    assert loop.Options(trials=50, race_rounds=8).shares(2.0, 2.0, 0.15) == Shares()
    assert loop.Options(trials=50, race_rounds=0, time_budget_s=90.0).shares(2.0, 2.0, 0.15) == Shares()
    session = Session(None, time_budget_s=60.0)
    assert not session.spent()
    assert session.spent(next_s=61.0)  # what is left would not hold the next trial
    session.shares = Shares(claim_s=60.0)
    assert session.spent()  # the search's share is spent: no trial starts, the race and the claim have the rest
    ends = Session(None, time_budget_s=100.0)
    ends.shares = Shares(10.0, 20.0, 5.0)
    end = ends.end()
    assert ends.ends().search == end - 35.0 and ends.ends().race == end - 25.0 and ends.ends().claim == end - 5.0
    assert ends.ends().numerics == end


def test_defaults_that_fail_end_the_study_in_one_line_now_and_on_every_later_run(tmp_path):
    """Every speed-up is a ratio to the defaults: when they fail (here out of memory), searching on would measure
    configurations nothing can be compared with. The run stops with what to do; a later run says it again."""
    from autotune.errors import WorkloadError

    live, eff, base, _ = make(tmp_path)
    calls: list = []
    seen: list = []
    with pytest.raises(WorkloadError, match=r"PyTorch's defaults failed when measured \(trial #0, oom: out of memory "
                                            r"\(made up\)\)"):
        tuner(live, eff, base, fake(calls, fail=lambda c: c == base), loop.Options(trials=20),
              on_trial=seen.append).run()
    assert len(calls) == 1 and [r.role for r in seen] == ["baseline"]  # shown, then nothing else measured
    with pytest.raises(WorkloadError, match="start a new study"):
        tuner(live, eff, base, fake(calls), loop.Options(trials=20)).run()
    assert len(calls) == 1


def test_defaults_that_time_out_say_to_raise_the_timeout(tmp_path):
    from autotune.errors import WorkloadError

    live, eff, base, _ = make(tmp_path)

    def timing_out(config, dominators=(), margin=None):
        return R.TrialResult.failure(R.TIMEOUT, "the trial ran past its 8 s timeout and was killed")

    with pytest.raises(WorkloadError, match="raise --trial-timeout"):
        tuner(live, eff, base, timing_out, loop.Options(trials=5)).run()


def _spied(sampler):
    """Which of GPThenTPE's two samplers each trial number was given to."""
    chosen: dict = {}
    for name in ("gp", "tpe"):
        inner = getattr(sampler, name)
        original = inner.before_trial

        def before(study, trial, original=original, name=name):
            chosen[trial.number] = name
            return original(study, trial)

        inner.before_trial = before
    return chosen


@pytest.mark.slow  # 3 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_gp_hands_over_to_tpe_past_its_limit_records_it_and_says_so_once(tmp_path):
    """The default sampler's Gaussian process refits on the whole history for each suggestion (its cost grows
    with it): past ``gp_max_trials`` complete trials TPE suggests; the run says so in one line and the study
    records it (here with a limit of 4, where the default is GP_MAX_TRIALS)."""
    live, eff, base, url = make(tmp_path, sampler="tpe")
    live.study.sampler = gp_then_tpe = loop.make_sampler("gp", seed=0, n_startup_trials=2, gp_max_trials=4)
    chosen = _spied(gp_then_tpe)
    shown: list = []
    tuner(live, eff, base, fake([]), loop.Options(trials=8, race_rounds=0, floor_repeats=0),
          on_trial=shown.append).run()
    switch = gp_then_tpe.switched_at
    assert switch is not None and chosen, "the study never reached the limit"
    assert all(name == ("tpe" if n >= switch else "gp") for n, name in chosen.items()), chosen
    # one process, one trial at a time: the trials before a trial are finished when it is asked
    complete = [t.number for t in live.trials() if t.state == "complete"]
    last_gp = max(n for n, name in chosen.items() if name == "gp")
    assert sum(1 for n in complete if n < switch) >= 4 > sum(1 for n in complete if n < last_gp)
    # one line, once, on the first trial line after the hand-over
    notes = [r for r in shown if r.note]
    assert (len(notes) == 1 and notes[0].number >= switch and "TPE" in notes[0].note
            and sampler.SAMPLER_SWITCH in notes[0].note)
    recorded = LiveStudy(optuna.load_study(study_name="s", storage=url)).view().sampler_switch
    assert (recorded["from"], recorded["to"], recorded["limit"], recorded["trial"]) == ("gp", "tpe", 4, switch)

    # A resumed study already past the limit: said before the first trial (the opening), not again, and the
    # study keeps the first hand-over's record.
    again = LiveStudy(optuna.load_study(study_name="s", storage=url,
                                        sampler=loop.make_sampler("gp", seed=1, gp_max_trials=4)))
    later: list = []
    resumed = tuner(again, eff, base, fake([]), loop.Options(trials=10, race_rounds=0, floor_repeats=0),
                    on_trial=later.append)
    chosen = _spied(again.sampler)
    line = resumed.sampler_opening()
    assert line and "TPE" in line and resumed.sampler_opening() is None
    resumed.run()
    assert later and not any(r.note for r in later) and set(chosen.values()) == {"tpe"}
    assert again.view().sampler_switch["trial"] == switch


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_gp_below_its_limit_says_nothing(tmp_path):
    live, eff, base, url = make(tmp_path, sampler="tpe")
    live.study.sampler = gp_then_tpe = loop.make_sampler("gp", seed=0, n_startup_trials=2, gp_max_trials=50)
    chosen = _spied(gp_then_tpe)
    shown: list = []
    run = tuner(live, eff, base, fake([]), loop.Options(trials=5, race_rounds=0, floor_repeats=0),
                on_trial=shown.append)
    assert run.sampler_opening() is None
    run.run()
    assert set(chosen.values()) == {"gp"} and gp_then_tpe.switched_at is None
    assert not any(r.note for r in shown) and live.view().sampler_switch is None


def timed(truth, seed: int, process_s: float, first_s: dict, sigma: float = 0.15):
    """A made-up machine whose processes take time: ``process_s`` each, plus its compile mode's first step
    (``first_s``: seconds by mode), slept for real; lognormal noise between processes, of known truth."""
    import time as clock

    measure = M.lognormal(truth, seed, sigma)

    def evaluate(config, dominators=(), margin=None, **_):
        first = first_s.get(config.get("compile", "off"), 0.0)
        clock.sleep(process_s + first)
        result = measure(config)
        result.wall_s, result.time_to_first_step_s = process_s + first, first + 0.01
        return result

    return evaluate


@pytest.mark.slow  # 20 s: the budget it proves
def test_a_time_budget_bounds_the_study_and_keeps_the_claim_its_share():
    """Under --time-budget the study ends within 5% of its budget (plus one small step of the loop), its search
    stops at its share, a configuration whose compilation would outlast what is left is never started (recorded as
    skipped, with why), and the claim measured apart gets its processes: at least 3 of the recommendation."""
    sp = space.parse({"search": {"precision": ["fp32", "bf16"], "compile": ["off", "default", "max-autotune"],
                                 "optimizer_impl": ["default", "foreach", "fused"],
                                 "batch_size": {"low": 16, "high": 256, "step": 16}}}, "t.toml", "t")
    live = made_up.live_study("sqlite:///:memory:", "budget", sp, CTX, sampler="random", seed=1, grace_s=None)
    base = loop.base_config(CTX, sp.fixed, None)

    def truth(config):
        return 1.5 if config["precision"] == "bf16" else 1.0

    budget = 20.0
    options = loop.Options(trials=200, time_budget_s=budget, deadline=None, numerics="off", compile_limit_s=60.0)
    evaluate = timed(truth, 3, 0.25, {"default": 1.0, "max-autotune": 10.0})
    start = __import__("time").monotonic()
    summary = loop.Tuner(live, Seeds(space.effective(sp, CTX, base), CTX, base), Bench(evaluate), options).run()
    wall = __import__("time").monotonic() - start
    assert wall <= 1.05 * budget + 0.5, summary.text()
    assert summary.reason == "the search's share of the time budget spent"
    view = live.view()
    assert not [t for t in view.trials if t.measured and t.config.get("compile") == "max-autotune"]  # 10 s: never fits
    ev = evidence_of(view)
    conf = ev.confirmation
    assert conf is not None and summary.confirm is not None, summary.text()
    assert len(CL.fresh(ev, conf.recommendation)) >= CL.MIN_PROCESSES, summary.text()


NEAR = space.parse({"search": {"precision": ["fp32", "bf16"], "optimizer_impl": ["default", "foreach", "fused"],
                               "batch_size": [16, 32, 64, 128], "threads": [1, 2], "num_workers": [0, 1, 2],
                               "memory_format": ["contiguous", "channels_last"]}}, "near.toml", "near")


def near_truth(c) -> float:
    """A made-up CPU surface of known truth: every knob but one has a best value; threads=2 pays 15%."""
    r = {16: 0.6, 32: 1.0, 64: 1.3, 128: 1.45}[c["batch_size"]] * (1.5 if c["precision"] == "bf16" else 1.0)
    r *= {"default": 1.0, "foreach": 1.05, "fused": 1.1}[c["optimizer_impl"]] * (1.15 if c["threads"] == 2 else 1.0)
    return r * {0: 1.0, 1: 1.05, 2: 1.0}[c["num_workers"]] * (0.9 if c["memory_format"] == "channels_last" else 1.0)


NEAR_BEST = 1.45 * 1.5 * 1.1 * 1.15 * 1.05


@pytest.mark.slow  # 19 s in a full run on a 2-core CPU
def test_the_last_third_of_the_search_goes_to_the_leaders_one_knob_neighbours(monkeypatch):
    """Before the race, the leader's unmeasured one-knob neighbours (the twin of the least change): on a surface of
    known truth, 16 trials of a random search reach 95% of the best configuration in 10 of 10 seeds with them and in
    2 of 10 without (a knob such as threads left at its worse value is found one step away)."""
    from autotune.tuning.phases import search as searching

    def reached(seed: int) -> float:
        live = made_up.live_study("sqlite:///:memory:", "near", NEAR, CTX, sampler="random", seed=seed, grace_s=None)
        base = loop.base_config(CTX, NEAR.fixed, None)
        loop.Tuner(live, Seeds(space.effective(NEAR, CTX, base), CTX, base), Bench(M.lognormal(near_truth, seed, 0.03)),
                loop.Options(trials=16, race_rounds=0, numerics="off")).run()
        view = live.view()
        neighbours = [t for t in view.trials if t.role == records.Role.NEIGHBOUR and t.measured]
        assert bool(neighbours) == (searching.NEIGHBOUR_SHARE > 0)  # the last third went to them, when asked
        return max(near_truth(c.config) for c in evidence_of(view).configs.values()) / NEAR_BEST

    assert sum(reached(seed) >= 0.95 for seed in range(10)) >= 9
    monkeypatch.setattr(searching, "NEIGHBOUR_SHARE", 0.0)
    assert sum(reached(seed) >= 0.95 for seed in range(10)) <= 5
