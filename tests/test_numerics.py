"""The numerics check: one training run (autotune/trial/numerics_run.py), the runs of a check in order
(autotune/trial/trainings.py), the judgement (autotune/evidence/numerics_answer.py) and the phase that runs it after the
verdict (autotune/tuning/phases/numerics_check.py), on models whose numerics are
known (autotune/testing/known_numerics.py)."""

from __future__ import annotations

import os

import pytest
import torch

from autotune import knobs
from autotune.evidence import evidence_of
from autotune.evidence import numerics_answer as NU
from autotune.request import WorkloadSpec
from autotune.trial import numerics_run as N
from autotune.trial import trainings
from autotune.trial.messages import NumericsRequest
from autotune.tuning.phases import numerics_check as phase

SEEDS = range(20)


def spec(model: str, seed: int = 0, **args) -> WorkloadSpec:
    return WorkloadSpec(model=f"autotune.testing.known_numerics:{model}", model_args={"seed": seed, **args})


def in_process(workload: WorkloadSpec):
    """The bench's numerics run, in this process (each run seeds every generator itself)."""
    def numerics(config, steps, per_step, seed, save, references):
        return N.run(NumericsRequest(spec=workload, config=dict(config), steps=steps, samples_per_step=per_step,
                                     seed=seed, save_path=save, references=tuple(references)))
    return numerics


def checked(model: str, defaults: dict, config: dict, seed: int, steps: int = NU.MIN_STEPS) -> NU.Check:
    """The check as the phase runs it, of ``config`` against ``defaults`` on ``model`` built with ``seed``."""
    changes = {k: v for k, v in config.items() if defaults.get(k, knobs.KNOBS[k].default_for()) != v}
    record = trainings.plan(config, defaults, changes, steps, seed=seed, number=1)
    return NU.judge(trainings.check(in_process(spec(model, seed)), record))


# ---------------------------------------------------------------- known truth, 20 of 20 seeds


@pytest.mark.slow  # 20 seeds of four runs each
def test_bf16_on_a_layer_that_needs_more_mantissa_differs_and_the_precision_is_named_on_every_seed():
    for seed in SEEDS:
        check = checked("needs_mantissa", {}, {"precision": "bf16"}, seed)
        assert check.state == NU.DIFFER and check.causes == ("precision",), (seed, check.text())
        assert check.gap.loss > 5 * NU.LOSS_TOLERANCE and check.text().endswith(": precision=bf16"), check.text()


@pytest.mark.slow  # 20 seeds of three runs each
def test_bf16_on_an_ordinary_mlp_holds_on_every_seed():
    for seed in SEEDS:
        check = checked("mlp", {}, {"precision": "bf16"}, seed)
        assert check.state == NU.HOLD and not check.causes, (seed, check.text())
        assert check.text().startswith("numerics hold: loss within "), check.text()


@pytest.mark.slow  # 20 seeds of five runs each
def test_batchnorm_at_batch_32_against_128_differs_and_the_batch_size_is_named_on_every_seed():
    """The same 128 samples per optimizer step (four micro-batches of 32): BatchNorm's statistics differ; bf16,
    changed beside it, is not what changes the training."""
    for seed in SEEDS:
        check = checked("batchnorm", {"batch_size": 128}, {"batch_size": 32, "precision": "bf16"}, seed)
        assert check.state == NU.DIFFER and check.causes == ("batch_size",), (seed, check.text())
        assert check.reverted == {"batch_size": True, "precision": False}


@pytest.mark.slow  # 20 seeds of three runs each
def test_fp32_against_fp32_on_this_cpu_differs_by_nothing_beyond_the_floor_on_every_seed():
    """Another optimizer kernel (foreach) computes the same sums: the loss and the weights are where the defaults'
    second run puts them."""
    for seed in SEEDS:
        check = checked("mlp", {}, {"optimizer_impl": "foreach"}, seed)
        assert check.state == NU.HOLD, (seed, check.text())
        assert check.gap.loss <= max(1e-6, NU.FLOOR_TIMES * check.floor.loss), (seed, check.gap, check.floor)


def test_each_known_case_on_one_seed():
    """The quick loop's share of the four known-truth tests above: one seed each."""
    assert checked("needs_mantissa", {}, {"precision": "bf16"}, 3).causes == ("precision",)
    assert checked("mlp", {}, {"precision": "bf16"}, 3).state == NU.HOLD
    assert checked("batchnorm", {"batch_size": 128}, {"batch_size": 32}, 3).state == NU.DIFFER
    assert checked("mlp", {}, {"optimizer_impl": "foreach"}, 3).state == NU.HOLD


# ---------------------------------------------------------------- what a run makes the same, and what it cannot


def test_two_runs_of_one_configuration_see_the_same_weights_and_samples_and_end_equal(tmp_path):
    run = in_process(spec("mlp"))
    first = run({}, 5, 64, 7, str(tmp_path / "w.pt"), ())
    second = run({}, 5, 64, 7, None, (("defaults", str(tmp_path / "w.pt")),))
    assert first.ok and second.ok and len(first.losses) == 5
    assert (first.initial_digest, first.data_digest, first.losses) == (second.initial_digest, second.data_digest,
                                                                        second.losses)
    assert second.distances == {"defaults": 0.0} and first.moved > 0


def test_a_smaller_batch_reads_the_same_samples_through_accumulation():
    run = in_process(spec("mlp"))
    big, small = run({"batch_size": 64}, 3, 64, 1, None, ()), run({"batch_size": 16}, 3, 64, 1, None, ())
    assert small.accumulation == 4 and big.accumulation == 1 and small.samples_per_step == 64
    assert small.data_digest == big.data_digest and small.initial_digest == big.initial_digest


def test_dropout_is_turned_off_for_the_check_and_said():
    check = checked("dropout", {}, {"precision": "bf16"}, 0)
    assert check.dropout_off == 1 and "dropout off for the check (1 module)" in check.text()


def unseedable(seed: int = 0):
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))  # its own seed: the caller's cannot hold
    from autotune.testing.known_numerics import mlp

    return mlp(seed=seed)


class Fresh(torch.utils.data.Dataset):
    """Samples drawn from the operating system's randomness: no seed makes them repeat."""

    def __len__(self):
        return 1024

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
        return torch.randn(64, generator=g), torch.tensor(index % 10)


def fresh_data(seed: int = 0):
    from autotune.testing.known_numerics import mlp

    made = mlp(seed=seed)
    made.dataset = Fresh()
    return made


@pytest.mark.parametrize("factory, reason", [
    ("unseedable", "the model factory gives different initial weights under the same seed (it cannot be seeded)"),
    ("fresh_data", "the data does not repeat: two runs read different samples at the same positions")])
def test_runs_that_cannot_be_compared_are_not_checked_never_held(factory, reason):
    workload = WorkloadSpec(model=f"{__name__}:{factory}")
    record = {"number": 1, "steps": 3, "seed": 0, "changes": {"precision": "bf16"}, "config": {"precision": "bf16"},
              "defaults": {}, "runs": [], "samples_per_step": 32}
    check = NU.judge(trainings.check(in_process(workload), record))
    assert check.state == NU.NOT_CHECKED and check.reason == reason
    assert check.text() == f"numerics not checked: {reason}"


# ---------------------------------------------------------------- the judgement, on runs of known figures


def run(label: str, losses, distance=0.0, moved=1.0, **extra) -> dict:
    return {"label": label, "outcome": "ok", "losses": list(losses), "grad_norms": [1.0] * len(losses),
            "moved": moved, "distances": {"defaults": distance}, "initial_digest": "w", "data_digest": "d", **extra}


def judged(rec_losses, rec_distance=0.0, floor_losses=None, floor_distance=0.0, reverts=()) -> NU.Check:
    base = [2.0] * 10
    runs = [run("defaults", base), run("floor", floor_losses or base, floor_distance),
            run("recommendation", rec_losses, rec_distance), *reverts]
    return NU.judge({"number": 4, "steps": 10, "changes": {"precision": "bf16", "compile": "default"}, "runs": runs})


def test_the_loss_is_judged_on_the_second_half_against_one_percent_or_three_times_the_floor():
    early = [9.0] * 5 + [2.0] * 5  # far off while the first half lasts: says little
    assert judged(early).state == NU.HOLD
    assert judged([2.0] * 5 + [2.019] * 5).state == NU.HOLD  # 0.95%
    assert judged([2.0] * 5 + [2.021] * 5).state == NU.DIFFER  # 1.05%
    noisy_floor = [2.0] * 5 + [2.02] * 5  # the defaults again: 1% apart
    assert judged([2.0] * 5 + [2.05] * 5, floor_losses=noisy_floor).state == NU.HOLD  # 2.5% <= 3 x 1%
    assert judged([2.0] * 5 + [2.07] * 5, floor_losses=noisy_floor).state == NU.DIFFER


def test_the_weights_are_judged_as_a_share_of_how_far_training_moved_them():
    assert judged([2.0] * 10, rec_distance=0.39).state == NU.HOLD
    differs = judged([2.0] * 10, rec_distance=0.41)
    assert differs.state == NU.DIFFER and "weights 41% apart" in differs.text()
    assert judged([2.0] * 10, rec_distance=0.9, floor_distance=0.35).state == NU.HOLD  # 0.9 <= 3 x 0.35


def test_a_difference_names_the_knob_whose_revert_holds_or_says_no_one_knob_alone():
    named = judged([2.0] * 5 + [2.2] * 5, reverts=[run("revert:precision", [2.0] * 10),
                                                     run("revert:compile", [2.0] * 5 + [2.2] * 5)])
    assert named.causes == ("precision",) and named.reverted == {"precision": True, "compile": False}
    assert named.text() == ("numerics differ: loss 10% above the defaults over steps 6-10 (floor 0.0%), weights 0.0% "
                            "apart: precision=bf16")
    alone = judged([2.0] * 5 + [1.8] * 5, reverts=[run("revert:precision", [2.0] * 5 + [1.8] * 5)])
    assert alone.causes == () and "below the defaults" in alone.text()
    assert alone.text().endswith(": no one knob alone: precision=bf16 compile=default")
    why = "32 samples a step do not split into 2 ranks of whole batches of 32"  # a revert the check cannot run
    unrun = judged([2.0] * 5 + [1.8] * 5, reverts=[
        {"label": "revert:compile", "outcome": "not_applicable", "error": {"message": why}}])
    assert unrun.unrun == {"compile": why} and unrun.reverted == {}
    assert unrun.text().endswith(f": no one knob alone: precision=bf16 compile=default (compile's revert could not "
                                 f"run: {why})")


def test_a_failed_or_missing_run_leaves_the_numerics_not_checked():
    failed = NU.judge({"runs": [run("defaults", [2.0]), run("floor", [2.0]),
                                {"label": "recommendation", "outcome": "oom", "error": {"message": "out of memory"}}]})
    assert failed.state == NU.NOT_CHECKED and failed.reason == "the recommendation's run ended oom: out of memory"
    assert NU.judge({"runs": [run("defaults", [2.0])], "done": False}).reason == "the check did not finish"
    spent = NU.judge({"runs": [], "reason": "the time budget was spent before the check could finish"})
    assert spent.text() == "numerics not checked: the time budget was spent before the check could finish"


def test_the_steps_fit_a_tenth_of_the_study_from_thirty_to_a_hundred():
    assert NU.steps_for(study_s=600, step_s=0.1, overhead_s=2.0) == 100  # 20 s a run: 180 steps' worth, capped
    assert NU.steps_for(study_s=600, step_s=0.5, overhead_s=2.0) == 36  # (60 / 3 - 2) / 0.5
    assert NU.steps_for(study_s=60, step_s=1.0, overhead_s=5.0) == NU.MIN_STEPS  # never fewer than thirty
    assert trainings.samples_per_step({"batch_size": 48}, {"batch_size": 64}, None) == 192
    assert trainings.samples_per_step({"batch_size": 48}, {}, 96) == 96  # the study's global batch
    two_of_8, changes = {"ranks": 2, "batch_size": 8}, ("ranks", "batch_size")
    assert trainings.samples_per_step(two_of_8, {"batch_size": 32}, None) == 32  # a batch in each rank, in both
    # and the reverts: two ranks of the defaults' 32 take 64 (one process of 8 takes 8)
    assert trainings.samples_per_step(two_of_8, {"batch_size": 32}, None, changes) == 64


# ---------------------------------------------------------------- the phase, after a verdict


def test_the_phase_checks_the_recommendation_once_and_the_verdict_says_so():
    """A study whose verdict recommends bf16, trained as the model that needs the mantissa: the check runs three
    trainings and a revert per knob, names the precision, and the verdict every view shows carries it."""
    from test_phases import never

    from autotune.tuning.phases import Bench

    live = decided()
    ev = evidence_of(live.view())
    assert ev.verdict().state == "gain" and ev.configs[ev.recommended()].config["precision"] == "bf16"
    calls: list = []
    run_one = in_process(spec("needs_mantissa"))
    report = phase.run(live, Bench(never, numerics=lambda *a: calls.append(a[0]) or run_one(*a)), NU.WARN)
    assert report is not None and report.check.state == NU.DIFFER and report.check.causes == ("precision",)
    assert [c["precision"] for c in calls][:3] == ["fp32", "fp32", "bf16"]
    assert len(calls) == 3 + len(report.check.changes)  # a revert per knob of the recommendation
    ev = evidence_of(live.view())
    assert ev.numerics() is not None and ev.numerics().state == NU.DIFFER
    assert ev.verdict().text.endswith(report.check.text()) and ev.to_dict()["numerics"]["state"] == NU.DIFFER
    assert phase.run(live, Bench(never, numerics=never), NU.WARN) is None  # checked once
    assert phase.run(live, Bench(never, numerics=never), NU.OFF) is None

def made_up(differs):
    """A numerics run of known figures: the loss 10% above the defaults' in the second half where
    ``differs(config)``."""
    from autotune import result as R

    def numerics(config, steps, per_step, seed, save, references):
        shift = 1.1 if differs(config) else 1.0
        losses = [2.0] * (steps // 2) + [2.0 * shift] * (steps - steps // 2)
        return R.NumericsResult("ok", dict(config), losses=losses, grad_norms=[1.0] * steps, moved=1.0,
                                distances={label: 0.0 for label, _ in references}, initial_digest="w", data_digest="d",
                                wall_s=0.5)
    return numerics


def decided():
    """The phases' study after the race, what each knob bought and the claim: bf16 recommended."""
    from test_phases import CTX, fake, fake_together, never, raced, study

    from autotune.tuning.phases import Bench, Search, bought, confirm, minimal

    live = raced(0)
    bought.run(live, Bench(never, remeasure=never, ablate=fake_together(0, [])), CTX)
    _, seeds = study()
    minimal.run(live, Search(live, seeds, Bench(fake(0, []), remeasure=never)))
    confirm.run(live, Bench(never, remeasure=fake(3, [])), Search(live, seeds, Bench(never)))
    return live


def test_strict_recommends_the_fastest_configuration_checked_whose_numerics_hold():
    from autotune.tuning.phases import Bench

    live = decided()
    ev = evidence_of(live.view())
    first = ev.recommended()
    assert ev.configs[first].config == {**ev.configs[first].config, "precision": "bf16", "optimizer_impl": "default"}
    def differs(c):
        return c.get("precision") == "bf16" and c.get("optimizer_impl") == "default"
    report = phase.run(live, Bench(None, numerics=made_up(differs)), NU.STRICT)
    assert report is not None and report.check.state == NU.DIFFER
    ev = evidence_of(live.view())
    verdict, pick = ev.verdict(), ev.recommended()
    assert pick != first and ev.configs[pick].config["optimizer_impl"] == "fused" and verdict.state == "gain"
    assert verdict.leader == first and verdict.speedup == ev.speedup(pick)
    assert verdict.headline.endswith("the fastest configuration checked whose numerics hold (--numerics strict)")
    assert verdict.details[0].startswith("numerics hold: ")
    assert verdict.text.endswith("numerics differ: loss 10% above the defaults over steps 16-30 (floor 0.0%), "
                                 "weights 0.0% apart: precision=bf16")
    assert ev.numerics().number == pick and ev.numerics().state == NU.HOLD
    assert phase.run(live, Bench(None, numerics=made_up(differs)), NU.STRICT) is None  # checked once


def test_strict_keeps_the_defaults_when_no_faster_configuration_holds():
    from autotune.tuning.phases import Bench

    live = decided()
    first = evidence_of(live.view()).recommended()
    report = phase.run(live, Bench(None, numerics=made_up(lambda c: c.get("precision") == "bf16")), NU.STRICT)
    assert report is not None and report.check.state == NU.DIFFER
    ev = evidence_of(live.view())
    verdict = ev.verdict()
    assert verdict.state == "no_gain" and ev.recommended() == ev.baseline.number and verdict.leader == first
    assert verdict.headline == "keep the defaults: no faster configuration checked holds (--numerics strict)"
    assert verdict.details[0].startswith(f"#{first} (")
    assert verdict.details[0].endswith("numerics differ: loss 10% above the defaults over steps 16-30 (floor 0.0%), "
                                       "weights 0.0% apart: precision=bf16")
    assert ev.numerics() is None


def test_warn_keeps_the_recommendation_and_marks_it_in_the_export_and_load_config(tmp_path):
    import json
    import warnings

    from autotune.export.config import NumericsWarning, load_config
    from autotune.export.document import export
    from autotune.tuning.phases import Bench

    live = decided()
    first = evidence_of(live.view()).recommended()
    phase.run(live, Bench(None, numerics=made_up(lambda c: c.get("precision") == "bf16")), NU.WARN)
    ev = evidence_of(live.view())
    assert ev.recommended() == first and ev.verdict().state == "gain" and "; numerics differ: " in ev.verdict().text
    doc = export(live.view())
    assert doc["numerics"]["state"] == NU.DIFFER and doc["numerics"]["number"] == first
    assert set(doc["numerics"]["curves"]) >= {"defaults", "floor", "recommendation"}
    path = tmp_path / "best.json"
    path.write_text(json.dumps(doc))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        load_config(path, check_hardware=False)
    said = [str(w.message) for w in seen if issubclass(w.category, NumericsWarning)]
    assert said == [f"{path}: {doc['numerics']['text']}; the study recommended it all the same (its numerics check "
                    "warned, it did not decide)"]


def test_the_trials_table_and_the_dashboard_show_the_check_of_the_recommendation():
    from autotune.reports import trials
    from autotune.reports.dashboard.losses import numerics_info
    from autotune.reports.dashboard.page import render_html
    from autotune.tuning.phases import Bench

    live = decided()
    before = render_html(live.view())
    assert 'id="numerics"' in before and 'data-name="numerics"' not in before  # the section, waiting for a check
    phase.run(live, Bench(None, numerics=made_up(lambda c: c.get("precision") == "bf16")), NU.WARN)
    study = live.view()
    ev = evidence_of(study)
    marked = [row for row in trials.rows(study) if row.numerics is not None]
    assert [(row.number, row.numerics) for row in marked] == [(ev.recommended(), NU.DIFFER)]
    info = numerics_info(study)
    assert info["state"] == NU.DIFFER and set(info["curves"]) >= {"defaults", "floor", "recommendation"}
    page = render_html(study)
    assert 'data-name="numerics"' in page and "numerics differ: loss 10% above the defaults" in page
