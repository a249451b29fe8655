"""Evidence: each figure from all of a configuration's measurements, computed once, on trials of known truth.

Each study is written through the store's writers (autotune.store.writing) and read back as the
StoredStudy every view computes from."""

from __future__ import annotations

import math
import statistics

import optuna
import pytest
from optuna.trial import TrialState

from autotune import result as R
from autotune.evidence import stats
from autotune.evidence import Evidence, evidence_of
from autotune.store import StoredStudy
from autotune.store import writing

MiB = 1024**2


def new_study(**description) -> optuna.Study:
    """An empty two-objective study in memory, described by ``description`` (fingerprint=, workload=, ...)."""
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), directions=["maximize", "minimize"])
    writing.save(study, **description)
    return study


def trial(study: optuna.Study, rate: float, peak_mib: float = 100, role: str = "search", **marks) -> int:
    """One more trial measured at ``rate`` samples/s (``state="fail"``: failed, no figures); returns its number."""
    t = study.ask()
    config = marks.pop("config", {"batch_size": 32 * (t.number + 1)})
    state = marks.pop("state", "complete")
    writing.mark(t, outcome=marks.pop("outcome", R.OK), role=role, config=config, **marks)
    if state == "complete":
        study.tell(t, [rate, peak_mib * MiB])
    else:
        study.tell(t, state=TrialState.FAIL)
    return t.number


def baseline(study: optuna.Study, rate: float, peak_mib: float = 100, **marks) -> int:
    return trial(study, rate, peak_mib, role="baseline", config=marks.pop("config", {"batch_size": 32}), **marks)


def measured(study: optuna.Study, round_id: str, rates: dict[int, float | None],
             other_cores: float | None = None) -> None:
    """Each trial of ``rates`` measured again in a process of its own in round ``round_id`` (None: it failed)."""
    for n, r in rates.items():
        writing.save_measurement(study, n, round_id, samples_per_s=r, outcome=R.OK if r else R.ERROR,
                                 peak_memory_bytes=None, other_cores=other_cores, wall_s=None)


def evidence(study: optuna.Study, max_memory_bytes: int | None = None) -> Evidence:
    stored = StoredStudy.of(study)
    return evidence_of(stored) if max_memory_bytes is None else Evidence(stored, max_memory_bytes)


def test_speedup_pairs_rounds_so_a_slow_round_cancels_and_the_first_lucky_measurement_is_dropped():
    # #1's first measurement (200) was lucky; raced twice against the baseline, in a fast round and
    # in a round where the whole machine ran 20% slower. Truth: 1.5x.
    study = new_study()
    baseline(study, 100.0), trial(study, 200.0)
    measured(study, "floor-1", {0: 100.0})
    measured(study, "race-a-1", {0: 100.0, 1: 150.0})
    measured(study, "race-a-2", {0: 80.0, 1: 120.0})
    ev = evidence(study)
    s = ev.speedup(1)
    assert s.estimate == pytest.approx(1.5) and s.paired
    assert ev.samples_per_s(1) == pytest.approx(math.sqrt(150.0 * 120.0))  # the lucky 200 is not in the claim
    assert ev.configs[1].processes == 2 and ev.configs[0].processes == 4
    assert s.low < 1.5 < s.high  # the 20% drift between rounds is noise between processes


def test_the_baseline_against_itself_is_exactly_one():
    study = new_study()
    baseline(study, 100.0), trial(study, 130.0)
    measured(study, "floor-1", {0: 90.0})
    measured(study, "floor-2", {0: 110.0})
    ev = evidence(study)
    s = ev.speedup(0)
    assert (s.estimate, s.low, s.high) == (1.0, 1.0, 1.0)
    assert ev.row(0)["speedup"]["estimate"] == 1.0


def test_a_single_unraced_measurement_gets_the_noise_of_the_machine_not_of_its_windows():
    study = new_study()
    baseline(study, 100.0), trial(study, 130.0)
    measured(study, "floor-1", {0: 80.0})
    measured(study, "floor-2", {0: 125.0})
    ev = evidence(study)
    s = ev.speedup(1)
    # one process of it, and only the defaults' spread known: no interval is drawn from that (their noise is not its)
    assert s.estimate == pytest.approx(1.3) and not s.has_interval
    assert ev.verdict().state == "no_gain"  # and the defaults' own spread alone could make 30%: no claim either


def test_cache_answers_interrupted_and_failed_trials_are_not_measurements():
    study = new_study()
    baseline(study, 100.0)
    trial(study, 150.0)
    trial(study, 150.0, duplicate_of=1)
    trial(study, 0.0, state="fail", outcome=R.INTERRUPTED)
    trial(study, 0.0, state="fail", outcome=R.OOM)
    measured(study, "race-a-1", {1: None})
    ev = evidence(study)
    assert sorted(ev.configs) == [0, 1]
    assert ev.configs[1].failed_repeats == 1 and ev.configs[1].processes == 1


def test_front_drops_dominated_points_and_those_over_the_memory_limit():
    study = new_study()
    baseline(study, 100.0, 100)
    trial(study, 300.0, 400)
    trial(study, 200.0, 150)
    trial(study, 150.0, 200)  # slower and larger than #2
    assert evidence(study).front() == [1, 2, 0]
    assert evidence(study, max_memory_bytes=300 * MiB).front() == [2, 0]
    writing.save(study, max_memory_bytes=300 * MiB)  # the study's own budget (--max-memory) is the default
    assert evidence(study).front() == [2, 0]


def test_front_is_the_pairs_definition_on_ties_and_duplicates():
    """The one-sweep front equals the definition (no other point as fast with no more memory, one of them
    strictly better) on random points with many ties in rate and in memory."""
    import random

    rng = random.Random(3)
    for _ in range(30):
        study = new_study()
        baseline(study, 100.0)
        for _ in range(1, 25):
            trial(study, float(rng.choice([90, 100, 120, 150, 150, 200])), peak_mib=rng.choice([50, 100, 100, 300]))
        ev = evidence(study)
        points = ev.ok()
        pareto = [c for c in points if not any(
            o is not c and o.samples_per_s >= c.samples_per_s and o.peak_memory_bytes <= c.peak_memory_bytes
            and (o.samples_per_s > c.samples_per_s or o.peak_memory_bytes < c.peak_memory_bytes) for o in points)]
        expected = [c.number for c in sorted(pareto, key=lambda c: (-c.samples_per_s, c.peak_memory_bytes))]
        assert ev.front() == expected


def test_time_spent_counts_overlapping_workers_once():
    study = new_study()
    writing.save_session(study, "a", {"started_at": 1000.0, "elapsed_s": 100.0})
    writing.save_session(study, "b", {"started_at": 1050.0, "elapsed_s": 100.0})  # overlaps a by 50 s
    writing.save_session(study, "c", {"started_at": 2000.0, "elapsed_s": 10.0})
    assert evidence(study).time_spent() == {"wall_s": 160.0, "sessions": 3.0}


def test_a_study_builds_its_evidence_once_from_its_stored_view():
    study = new_study()
    baseline(study, 100.0, 50), trial(study, 150.0)
    stored = StoredStudy.of(study)
    assert evidence_of(stored) is evidence_of(stored) and evidence_of(stored).study is stored
    # another budget, another evidence
    assert Evidence(stored, 1).front() == [] and evidence_of(stored).front() == [1, 0]


def test_a_studys_evidence_is_built_once_per_read_and_a_new_read_gets_its_own():
    """evidence_of: every view of one read shows the same figures from one computation; a study read again (with a
    trial more) is computed afresh, never answered from the earlier read."""
    study = new_study()
    baseline(study, 100.0, config_key="B"), trial(study, 150.0, config_key="c1")
    first = StoredStudy.of(study)
    assert evidence_of(first) is evidence_of(first)
    trial(study, 300.0, config_key="c2")
    again = StoredStudy.of(study)
    assert evidence_of(again) is not evidence_of(first)
    assert 2 in evidence_of(again).configs and 2 not in evidence_of(first).configs



# ---------------------------------------------------------------- a busy machine, named


BASE = {"batch_size": 32, "threads": 2, "precision": "fp32"}
FP = {"cpu_count": 2}


def loaded(study: optuna.Study, rate: float, other: float, role: str = "search", **changes) -> int:
    """A trial whose own measurement was taken while other processes used ``other`` cores."""
    return trial(study, rate, role=role, config={**BASE, **changes},
                 result={"load": {"other_cores": other, "cores": 2}})


def rounds(study: optuna.Study, loads: dict[int, tuple[float, float]], prefix: str = "race-a-", n: int = 4) -> None:
    """``n`` race rounds: each trial at its rate, measured while other processes used ``other`` cores."""
    for k in range(1, n + 1):
        for number, (rate, other) in loads.items():
            measured(study, f"{prefix}{k}", {number: rate * (1 + 0.01 * k)}, other_cores=other)


def test_a_quiet_study_says_so_and_its_verdict_stands():
    study = new_study(fingerprint=FP)
    loaded(study, 100.0, 0.1, role="baseline"), loaded(study, 150.0, 0.1, precision="bf16")
    rounds(study, {0: (100.0, 0.1), 1: (150.0, 0.1)})
    ev = evidence(study)
    assert not ev.load.was_busy and ev.load.text().startswith("machine quiet while measuring")
    assert ev.verdict().state == "gain" and ev.verdict().winner == 1 and "busy" not in ev.verdict().text


def test_a_thread_count_that_won_on_a_busy_machine_is_not_recommended_and_how_to_recheck_is_said():
    # On a busy machine threads=1 looks 3x faster (the baseline's 2 threads fight the other process);
    # bf16 is 1.5x whatever the load.
    study = new_study(fingerprint=FP, workload={"model": "autotune.examples:cnn"})
    loaded(study, 100.0, 1.0, role="baseline"), loaded(study, 300.0, 1.0, threads=1)
    loaded(study, 150.0, 1.0, precision="bf16")
    rounds(study, {0: (100.0, 1.0), 1: (300.0, 1.0), 2: (150.0, 1.0)})
    ev = evidence(study)
    assert ev.load.was_busy and ev.load.busy == ev.load.measurements
    v = ev.verdict()
    assert v.state == "gain" and v.winner == 2  # the load-free gain is recommended, not threads=1
    assert "#1 (threads=1) measured" in v.text and "depends on the load" in v.text
    assert "autotune measure --model autotune.examples:cnn --set threads=1 --repeat 5" in v.text
    assert "measured on a busy machine: other processes used up to 1.0 of 2 cores" in v.text


def test_with_nothing_else_separated_a_busy_study_keeps_the_defaults():
    study = new_study(fingerprint=FP)
    loaded(study, 100.0, 1.0, role="baseline"), loaded(study, 300.0, 1.0, threads=1)
    rounds(study, {0: (100.0, 1.0), 1: (300.0, 1.0)})
    v = evidence(study).verdict()
    assert v.state == "no_gain" and v.text.startswith("keep the defaults: no configuration beats PyTorch's defaults "
                                                      "beyond the noise once the load-sensitive knobs are set aside; "
                                                      "#1 (threads=1)")
    assert v.details and v.details[0].startswith("#1 (threads=1)")  # the why: on the line below the headline


def test_on_a_busy_machine_the_claim_reverts_the_load_sensitive_knob_alone_not_the_gain_with_it():
    # threads=1 with bf16 won while another process used a core: the race's choice stands, its claim is of bf16 alone
    from dataclasses import replace

    from autotune.store.plans import RoundId
    from autotune.store import LiveStudy, RaceRecord, RaceStop
    from autotune.tuning.phases import confirm

    study = new_study(fingerprint=FP)
    loaded(study, 100.0, 1.0, role="baseline"), loaded(study, 450.0, 1.0, threads=1, precision="bf16")
    rounds(study, {0: (100.0, 1.0), 1: (450.0, 1.0)})
    ev = evidence(study)
    assert ev.load.was_busy and ev.chosen() == 1  # not set aside whole for its threads
    live = LiveStudy(study)
    live.save_race("a", RaceRecord((1,), 2, 4, 0.0, done=True, stop=RaceStop.CHOSEN))
    ev = evidence(study)
    assert ev.chosen() == 1
    confirm_id, record = confirm._plan(live, ev, 1, "a")
    assert record.reverted == {"threads": 1} and record.reduction is True and record.reduced is None
    reduced = loaded(study, 150.0, 1.0, role="minimal", precision="bf16")
    live.save_confirm(confirm_id, replace(record, reduced=reduced))
    for k in range(1, record.processes + 1):
        measured(study, RoundId(RoundId.CLAIM, confirm_id, k).format(),
                 {0: 100.0 * (1 + 0.01 * k), reduced: 150.0 * (1 - 0.01 * k)}, other_cores=1.0)
    v = evidence(study).verdict()
    assert v.state == "gain" and v.winner == reduced, v
    assert v.headline.startswith(f"use #{reduced} (precision=bf16): 1.")
    assert "left at your setting as their gain depends on the load: threads: 2" in v.details
    assert not v.left  # not among the knobs that bought nothing


def test_measurements_much_busier_than_the_baselines_are_left_out_of_the_claim():
    # #1 raced in 4 rounds; in two of them another process used 1.5 of the 2 cores (the baseline's saw 0.1).
    study = new_study(fingerprint=FP)
    loaded(study, 100.0, 0.1, role="baseline"), loaded(study, 150.0, 0.1, precision="bf16")
    rounds(study, {0: (100.0, 0.1), 1: (150.0, 0.1)}, n=2)
    rounds(study, {1: (60.0, 1.5)}, prefix="race-b-", n=2)
    ev = evidence(study)
    c = ev.configs[1]
    assert c.left_out == {"race-b-1", "race-b-2"} and all(r.startswith("race-a-") for r, _ in c.claim)
    assert ev.samples_per_s(1) > 140 and ev.load.left_out == 2
    assert "2 taken while it was much busier than during the baseline's were left out" in ev.load.text()


def test_figures_measured_on_a_share_of_the_machine_say_so_in_the_verdict():
    """run --workers 2 on 2 cores: each trial on 1 of them; a claim measured on a share holds for such a share."""
    study = new_study(fingerprint=FP)
    for rate, role, changes in ((100.0, "baseline", {}), (150.0, "search", {"precision": "bf16"})):
        trial(study, rate, role=role, config={**BASE, **changes}, result={"load": {"other_cores": 0.0, "cores": 1}})
    for k in range(1, 5):
        for number, rate in ((0, 100.0), (1, 150.0)):
            writing.save_measurement(study, number, f"race-a-{k}", samples_per_s=rate * (1 + 0.01 * k), outcome=R.OK,
                                     peak_memory_bytes=None, other_cores=0.1, wall_s=None, cores=1)
    ev = evidence(study)
    assert ev.load.cores == 1 and ev.load.machine_cores == 2 and not ev.load.was_busy
    v = ev.verdict()
    assert (v.state == "gain"
            and v.text.endswith("measured on 1 of the machine's 2 CPUs: the figures hold for such a share"))
    whole = new_study(fingerprint=FP)
    loaded(whole, 100.0, 0.1, role="baseline"), loaded(whole, 150.0, 0.1, precision="bf16")
    rounds(whole, {0: (100.0, 0.1), 1: (150.0, 0.1)})
    assert evidence(whole).load.share is None and "CPUs" not in evidence(whole).verdict().text


def test_a_configuration_measured_only_while_much_busier_cannot_win():
    study = new_study(fingerprint=FP)
    loaded(study, 100.0, 0.0, role="baseline"), loaded(study, 400.0, 1.9, precision="bf16")
    measured(study, "floor-1", {0: 101.0})
    measured(study, "floor-2", {0: 99.0})
    ev = evidence(study)
    assert ev.configs[1].busy_only
    assert ev.verdict().winner != 1
    assert 1 in ev.race_candidates(1)  # measured again in the race, beyond its limit


def test_a_configuration_measured_only_while_much_busier_is_raced_again_and_can_then_win():
    study = new_study(fingerprint=FP)
    loaded(study, 100.0, 0.0, role="baseline"), loaded(study, 150.0, 0.0, precision="bf16")
    loaded(study, 60.0, 1.9, optimizer_impl="fused")  # slowed by another process's 1.9 cores: it looks slowest
    ev = evidence(study)
    assert ev.configs[2].busy_only and ev.race_candidates(1) == [1, 2]
    rounds(study, {0: (100.0, 0.0), 1: (150.0, 0.0), 2: (200.0, 0.0)})  # measured again on a quiet machine
    ev = evidence(study)
    assert not ev.configs[2].busy_only and ev.verdict().winner == 2


def paired_process(study: optuna.Study, round_id: str, rates: dict[str, float | None], other_cores: float = 0.0,
                   outcomes: dict[str, str] | None = None, **purpose) -> None:
    """One process that measured several configurations (by key) alternately, as autotune.trial.paired stores it."""
    arms = [{"key": k, "trial": None, "samples_per_s": r,
             "outcome": (outcomes or {}).get(k) or (R.OK if r else R.ERROR)}
            for k, r in rates.items()]
    writing.save_paired(study, round_id, arms, other_cores=other_cores, wall_s=None, **purpose)


def test_configurations_measured_alongside_the_defaults_get_the_within_process_noise_and_a_figure_that_agrees():
    study = new_study()
    baseline(study, 100.0, config_key="B"), trial(study, 190.0, config_key="c1"), trial(study, 120.0, config_key="c2")
    # three processes, each 30% faster or slower as a whole; inside each, c1 is 1.5x and c2 1.1x the defaults
    measured(study, "floor-1", {0: 70.0})
    measured(study, "floor-2", {0: 130.0})
    for k, speed in enumerate((1.0, 0.7, 1.3)):
        paired_process(study, f"pair-r-{k + 1:02d}-0", {"B": 100 * speed, "c1": 150 * speed * (1.01 if k else 0.99),
                                                        "c2": 110 * speed * (0.99 if k else 1.01)}, race="r")
    ev = evidence(study)
    s1 = ev.speedup(1)
    assert s1.within and s1.paired and s1.processes == 3 and s1.estimate == pytest.approx(1.5, rel=0.02)
    assert ev.within_noise.known and ev.within_noise.df == 9 - (3 + 3 - 1)
    # the process-wide 30% swings cancel: the interval is far narrower than the noise between processes allows
    between = stats.ratio(ev.configs[1].together, [("x", 100.0)], ev.noise)
    assert math.log(s1.high / s1.low) < math.log(between.high / between.low) / 4
    assert ev.samples_per_s(1) == pytest.approx(ev.samples_per_s(0) * s1.estimate)  # one figure, one speed-up
    assert ev.row(1)["speedup"]["within_process"] is True
    versus = ev.compare(1, 2)  # c1 over c2, measured in the same processes: their own ratio
    assert versus.within and versus.estimate == pytest.approx(1.5 / 1.1, rel=0.03)


def test_a_shared_process_joins_a_trial_by_its_configuration_and_counts_a_failed_arm():
    study = new_study()
    baseline(study, 100.0, config_key="B"), trial(study, 150.0, config_key="c1")
    paired_process(study, "abl-a-01", {"B": 100.0, "late": 140.0, "c1": None}, ablation="a")
    paired_process(study, "abl-a-02", {"B": 90.0, "late": 125.0, "c1": 140.0}, ablation="a")
    late = trial(study, 140.0, config_key="late", role="minimal")  # measured as a trial after the processes
    ev = evidence(study)
    assert [r for r, _ in ev.configs[late].together] == ["abl-a-01", "abl-a-02"]
    assert ev.configs[1].failed_repeats == 1 and ev.configs[1].together == [("abl-a-02", 140.0)]
    assert ev.within["late"] == [("abl-a-01", 140.0), ("abl-a-02", 125.0)]


def test_a_busy_minute_is_not_left_out_of_a_ratio_measured_in_one_process():
    """Load touches both arms of a shared process alike: such rounds stay in the claim."""
    study = new_study()
    baseline(study, 100.0, config_key="B"), trial(study, 150.0, config_key="c1")
    measured(study, "floor-1", {0: 100.0}, other_cores=0.0)
    for k in (1, 2):  # much busier than the baseline's floor
        paired_process(study, f"pair-r-{k:02d}-0", {"B": 100.0, "c1": 150.0 + k}, other_cores=1.5, race="r")
    ev = evidence(study)
    assert ev.load.was_busy and not ev.configs[1].left_out
    assert ev.speedup(1).processes == 2


def test_an_arm_out_of_memory_beside_others_is_no_failure_of_its_configuration():
    study = new_study()
    baseline(study, 100.0, config_key="B"), trial(study, 150.0, config_key="big"), trial(study, 120.0, config_key="bad")
    # out of memory beside the others says nothing of "big" alone; a nan is a real failure of "bad"
    paired_process(study, "pair-r-01-0", {"B": 100.0, "big": None, "bad": None}, outcomes={"big": R.OOM, "bad": R.NAN},
                   race="r")
    ev = evidence(study)
    assert ev.configs[1].failed_repeats == 0 and ev.configs[2].failed_repeats == 1


def test_when_not_even_the_defaults_fit_the_memory_budget_nothing_is_recommended():
    study = new_study()
    baseline(study, 100.0, peak_mib=300), trial(study, 130.0, peak_mib=250)
    measured(study, "floor-1", {0: 95.0})
    measured(study, "floor-2", {0: 105.0})
    ev = evidence(study, max_memory_bytes=1)
    v = ev.verdict()
    assert v.state == "no_fit" and v.winner is None and ev.recommended() is None
    assert "nothing measured fits the memory budget (1 B), PyTorch's defaults included (they peaked at 300" in v.text
    assert ev.to_dict()["recommended"] is None


def test_a_configuration_measured_only_beside_the_raced_winner_rests_on_the_winners_claim_not_its_lucky_first():
    """What each knob bought from a start that retains the heap measures its path without the defaults: the
    recommendation measured there (and once as a trial of its own, by chance high) gets the raced winner's claim
    times its ratio to the winner inside those shared processes, with those processes behind it; its speed-up
    goes through the winner's (the ratio inside those processes times the winner's claim over the defaults)."""
    study = new_study()
    baseline(study, 100.0, config_key="B")
    trial(study, 210.0, config_key="W")  # the winner, raced below
    measured(study, "floor-1", {0: 100.0})
    for k, (b, w) in enumerate([(100.0, 200.0), (90.0, 180.0), (110.0, 220.0)]):
        measured(study, f"race-a-{k + 1:02d}", {0: b, 1: w})
    trial(study, 400.0, role="minimal", config_key="M")  # its own first measurement: lucky
    for k, (start, w, m) in enumerate([(150.0, 200.0, 190.0), (140.0, 186.0, 177.0), (160.0, 214.0, 203.0)]):
        paired_process(study, f"abl-x-{k + 1:02d}", {"S": start, "W": w, "M": m}, ablation="x")
    ev = evidence(study)
    winner, minimal = ev.configs[1], ev.configs[2]
    assert minimal.via == 1 and minimal.processes == 3
    ratio = math.exp(statistics.fmean(math.log(m / w) for w, m in [(200.0, 190.0), (186.0, 177.0), (214.0, 203.0)]))
    assert ev.samples_per_s(2) == pytest.approx(winner.samples_per_s * ratio)
    assert ev.samples_per_s(2) < 250.0  # not the lucky 400
    speedup = ev.speedup(2)
    assert speedup.estimate == pytest.approx(ratio * ev.speedup(1).estimate)  # through the winner's own speed-up
    assert speedup.low < speedup.estimate < speedup.high
