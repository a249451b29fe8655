"""Energy per sample (autotune/machine/energy.py, autotune/evidence/energy.py): the counter read over the timed windows
only, what a counter that cannot be read says (never a zero), one configuration's figure pooled from its trials, and
that status, status --json, export, the dashboard's header and tune()'s result show the one figure beside MFU. On a
CPU, with made-up counters and made-up studies (autotune/testing/studies.py's ``power``)."""

from __future__ import annotations

import dataclasses
import json
import sys

import optuna
import pytest
import torch
from click.testing import CliRunner
from torch import nn

from autotune import knobs
from autotune.cli import main
from autotune.evidence.efficiency import efficiency, rated
from autotune.evidence.energy import NOT_RECORDED, energy, joules
from autotune.machine import energy as meter
from autotune.result import TrialResult
from autotune.store import StoredStudy, writing
from autotune.testing.fake import TIMED_S
from autotune.testing.studies import add_race, make_study
from autotune.trial.plan import Plan, infinite
from autotune.trial.protocol import Settings, StepLoop, run_protocol

H200 = "NVIDIA H200"


class Counter:
    """A made-up energy counter: ``watts`` x the seconds of a made-up clock that each read advances by ``step_s``."""

    def __init__(self, watts: float = 300.0, step_s: float = 0.5, fail_after: int | None = None) -> None:
        self.watts, self.step_s, self.fail_after = watts, step_s, fail_after
        self.reads = 0

    def millijoules(self) -> float:
        self.reads += 1
        if self.fail_after is not None and self.reads > self.fail_after:
            raise meter.Unreadable("NVML's energy counter: Not Supported")
        return 1000.0 * self.watts * self.step_s * self.reads


# ---------------------------------------------------------------- the meter


def test_the_meter_sums_the_windows_energy_seconds_and_samples():
    m = meter.Meter(Counter(watts=300.0, step_s=0.5))
    for _ in range(4):
        m.begin()
        m.end(0.5, 100)
    rec = m.record()
    assert rec == {"joules": pytest.approx(4 * 150.0), "seconds": 2.0, "samples": 400, "source": "nvml"}
    assert m.joules_per_sample == pytest.approx(1.5)


def test_a_counter_that_cannot_be_read_says_why_never_a_zero():
    assert meter.Meter.of("cpu").record() == {"unreadable": "no energy counter: CPU"} == {"unreadable": meter.CPU}
    assert meter.Meter.of("mps").record() == {"unreadable": "no energy counter: mps"}
    broken = meter.Meter(Counter(fail_after=3))
    for _ in range(3):
        broken.begin()
        broken.end(0.5, 10)
    assert broken.record() == {"unreadable": "NVML's energy counter: Not Supported"}
    assert broken.joules_per_sample is None
    still = meter.Meter(Counter(watts=0.0))
    still.begin()
    still.end(0.5, 10)
    assert still.record() == {"unreadable": "the energy counter did not move over 0.50 s of timed windows"}
    assert meter.Meter(Counter()).record()["unreadable"].startswith("no timed window measured")


def test_without_the_binding_a_gpu_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    rec = meter.Meter.of("cuda", 0).record()
    assert rec == {"unreadable": "no energy counter: nvidia-ml-py is not installed (pip install 'autotune[gpu]')"}


def test_the_package_does_not_import_the_binding():
    import subprocess

    code = "import autotune, autotune.api, autotune.cli, sys; print('pynvml' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() \
        == "False"


# ---------------------------------------------------------------- the trial


def _loop() -> StepLoop:
    cfg = knobs.resolve({"precision": "fp32", "batch_size": 8}, knobs.Context()).config
    p = Plan.from_config(cfg, "cpu", "train")
    model = p.prepare_model(nn.Linear(4, 2))
    step = p.stepper(model, p.build_optimizer(model))
    return StepLoop(p, step, infinite([(torch.randn(8, 4), torch.randint(0, 2, (8,)))] * 4))


def test_the_counter_is_read_at_the_timed_windows_edges_only():
    loop, counter = _loop(), Counter()
    m = run_protocol(loop, Settings.quick(), eager=loop.stepper, meter=meter.Meter(counter))
    windows = len(m.window_samples_per_s)
    assert counter.reads == 2 * windows  # not the first step, the warm-up, the FLOP count nor the profile
    assert m.energy["samples"] == windows * m.window_steps * 8 and m.energy["source"] == "nvml"
    assert m.energy["seconds"] == pytest.approx(sum(m.window_steps * 8 / w for w in m.window_samples_per_s))
    assert m.energy["joules"] == pytest.approx(windows * 300.0 * 0.5)


def test_a_trial_records_joules_per_sample_from_the_counter_its_device_has(monkeypatch):
    from autotune.trial import measure_one

    made_up = Counter(watts=250.0)
    monkeypatch.setattr(measure_one, "FINDER", lambda device_type, index, uuid: made_up)
    m = measure_one.energy_meter(torch.device("cpu"))
    assert m.counter is made_up
    # and on a CPU without a made-up counter: the one way it is said
    assert measure_one.energy_meter(torch.device("cpu"), meter.find).record() == {"unreadable": meter.CPU}
    fields = {f.name: f.default for f in dataclasses.fields(TrialResult) if f.name in ("joules_per_sample",)}
    assert fields == {"joules_per_sample": None} and TrialResult("ok").energy == {}


# ---------------------------------------------------------------- the figure


def gpu_study(storage=None, name="h200", watts=lambda c: 400.0 if c["precision"] == "bf16" else 300.0):
    live = make_study(storage or optuna.storages.InMemoryStorage(), n_trials=12, seed=0, with_failures=False,
                      name=name, power=watts)
    fingerprint = dict(StoredStudy.of(live).fingerprint)
    fingerprint.update(device_type="cuda", device_name=H200)
    writing.save(live, fingerprint=fingerprint, device="cuda:0")
    from autotune.evidence import evidence_of

    ev = evidence_of(StoredStudy.of(live))
    best = max((c for c in ev.configs.values() if not c.is_baseline), key=lambda c: c.samples_per_s)
    add_race(live, {best.number: best.samples_per_s}, rounds=4, spread=0.02)
    return live


def test_a_configuration_pools_the_joules_over_the_samples_of_its_trials():
    study = StoredStudy.of(gpu_study())
    rec = efficiency(study).figure.number
    trial = study.trial(rec)
    e = energy(study, rec)
    watts = 400.0 if trial.config["precision"] == "bf16" else 300.0
    samples = trial.result["energy"]["samples"]
    assert e.trials == (rec,) and e.joules == pytest.approx(watts * TIMED_S) and e.samples == samples
    assert e.joules_per_sample == pytest.approx(watts * TIMED_S / samples) and e.watts == pytest.approx(watts)
    assert e.text == f"{joules(e.joules_per_sample)}/sample ({watts:.0f} W over 2.5 s of timed windows, NVML)"
    # a second measured trial of the same configuration: its joules and samples join, not a mean of ratios
    again = dataclasses.replace(trial, number=99, result={**trial.result, "energy": {
        "joules": 100.0, "seconds": 1.0, "samples": 1000, "source": "nvml"}})
    pooled = energy(study.with_trials([*study.trials, again]), rec)
    assert pooled.trials == (rec, 99)
    assert pooled.joules_per_sample == pytest.approx((watts * TIMED_S + 100.0) / (samples + 1000))


def test_no_figure_says_why_in_the_trials_words():
    cpu = StoredStudy.of(make_study(optuna.storages.InMemoryStorage(), n_trials=8, seed=0))
    e = energy(cpu, 0)
    assert e.joules_per_sample is None and e.missing == "no energy counter: CPU" and e.text == e.missing
    old = cpu.with_trials([dataclasses.replace(t, result={k: v for k, v in t.result.items() if k != "energy"})
                           for t in cpu.trials])
    assert energy(old, 0).missing == NOT_RECORDED


def test_the_verdict_carries_the_recommendations_mfu_with_its_peak_named_and_its_energy():
    study = StoredStudy.of(gpu_study())
    eff = efficiency(study)
    verdict = rated(study).to_dict()
    assert verdict["mfu"]["mfu"] == pytest.approx(eff.mfu) and verdict["mfu"]["trial"] == eff.figure.number
    assert (verdict["mfu"]["device"], verdict["mfu"]["precision"], verdict["mfu"]["peak_flops"]) == (
        "H200", eff.figure.precision, eff.peak_flops)
    assert verdict["mfu"]["peak"] == eff.figure.peak.text()
    assert verdict["energy"]["joules_per_sample"] == pytest.approx(energy(study, eff.figure.number).joules_per_sample)


# ---------------------------------------------------------------- every view, one figure


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_status_json_export_the_dashboard_and_the_verdict_show_the_same_energy(tmp_path):
    from autotune.reports import dashboard
    from autotune.store import Store

    url = f"sqlite:///{tmp_path}/h200.db"
    gpu_study(url)
    study = Store(url, read_only=True).read("h200")
    eff = efficiency(study)
    e = energy(study, eff.figure.number)
    assert e.joules_per_sample is not None
    doc = json.loads(invoke("status", "h200", "--storage", url, "--json").output)
    assert doc["energy"]["joules_per_sample"] == pytest.approx(e.joules_per_sample)
    assert doc["verdict"]["energy"]["joules_per_sample"] == pytest.approx(e.joules_per_sample)
    assert doc["verdict"]["mfu"]["mfu"] == pytest.approx(eff.mfu)
    lines = " ".join(invoke("status", "h200", "--storage", url).output.split())
    assert f"hardware: {eff.text}; energy {e.text}" in lines
    exported = json.loads(invoke("export", "h200", "--storage", url).output)
    assert exported["measured"]["joules_per_sample"] == pytest.approx(e.joules_per_sample)
    assert exported["measured"]["energy"]["text"] == e.text and exported["verdict"] == doc["verdict"]
    header = dashboard.header_info(study)
    assert header["best"]["joules_per_sample"] == pytest.approx(e.joules_per_sample)
    assert header["verdict"]["energy"]["text"] == e.text
    cards = " ".join(str(c) for c in header["cards"])
    assert f"{joules(e.joules_per_sample)}/sample" in cards


def test_a_cpu_study_says_no_energy_counter_everywhere(tmp_path):
    url = f"sqlite:///{tmp_path}/cpu.db"
    make_study(url, n_trials=12, name="cpu")
    doc = json.loads(invoke("status", "cpu", "--storage", url, "--json").output)
    assert doc["energy"]["joules_per_sample"] is None and doc["energy"]["missing"] == meter.CPU
    assert doc["verdict"]["energy"]["missing"] == meter.CPU
    assert f"; no energy figure ({meter.CPU})" in " ".join(invoke("status", "cpu", "--storage", url).output.split())
    exported = json.loads(invoke("export", "cpu", "--storage", url).output)["measured"]
    assert exported["joules_per_sample"] is None and exported["energy"]["missing"] == meter.CPU


# ---------------------------------------------------------------- --objectives speed,energy


def energy_study(storage, name="e"):
    """A made-up GPU study whose front's second axis is energy: bf16 draws more power but runs 3x as fast."""
    live = make_study(storage, n_trials=16, seed=0, with_failures=False, name=name, objectives="speed,energy",
                      power=lambda c: 400.0 if c["precision"] == "bf16" else 300.0)
    fingerprint = {**StoredStudy.of(live).fingerprint, "device_type": "cuda", "device_name": H200}
    writing.save(live, fingerprint=fingerprint, device="cuda:0")
    return live


def test_a_speed_energy_study_keeps_joules_per_sample_as_its_second_value_and_its_front_follows():
    from autotune.evidence import evidence_of

    study = StoredStudy.of(energy_study(optuna.storages.InMemoryStorage()))
    assert study.objectives == "speed,energy" and study.second == "energy"
    ev = evidence_of(study)
    front = ev.front()
    for n, c in ev.configs.items():
        t = study.trial(n)
        assert c.second == pytest.approx(t.result["joules_per_sample"])  # the told value: joules per sample
        assert c.peak_memory_bytes == t.result["peak_memory_bytes"] == study.peak_memory_of(t)
    # the front: no configuration beats a point on both speed and energy (memory plays no part)
    for n in front:
        assert not any(o.samples_per_s > ev.configs[n].samples_per_s and o.second < ev.configs[n].second
                       for o in ev.ok())
    dominated = [c for c in ev.ok() if c.number not in front]
    assert dominated and all(any(o.samples_per_s >= c.samples_per_s and o.second <= c.second and o is not c
                                 for o in ev.ok()) for c in dominated)
    assert ev.row(front[0])["joules_per_sample"] == pytest.approx(ev.configs[front[0]].second)
    # a trial whose counter could not be read is off an energy front, not on it at zero
    blind = study.with_trials([dataclasses.replace(t, result={**t.result, "energy": {"unreadable": "NVML: off"}})
                               if t.number == front[0] else t for t in study.trials])
    assert front[0] not in evidence_of(blind).front()


def test_status_shows_the_energy_axis_of_a_speed_energy_study(tmp_path):
    url = f"sqlite:///{tmp_path}/e.db"
    energy_study(url)
    doc = json.loads(invoke("status", "e", "--storage", url, "--json").output)
    assert doc["objectives"] == "speed,energy"
    assert all(row["joules_per_sample"] is not None for row in doc["front"])
    text = " ".join(invoke("status", "e", "--storage", url).output.split())
    assert "throughput vs energy" in text and "J/sample" in text


def test_a_study_resumed_with_other_objectives_is_refused_in_one_line(tmp_path):
    from autotune.errors import StudyError
    from autotune.store import Store
    from autotune.testing.studies import description, space_of_one

    url = f"sqlite:///{tmp_path}/o.db"
    attrs = description(space_of_one(), knobs.Context(), objectives="speed,energy")
    study, created = Store(url).create_or_check("o", attrs)
    assert created and StoredStudy.of(study).objectives == "speed,energy"
    assert study.metric_names == ["samples_per_s", "joules_per_sample"]
    assert Store(url).create_or_check("o", attrs)[1] is False  # the same objectives: resumed
    with pytest.raises(StudyError, match=r"the objectives differ: speed,energy \(stored\) vs speed,memory \(this run"):
        Store(url).create_or_check("o", {**attrs, "objectives": "speed,memory"})
    # a study made before the objectives were stored is speed,memory
    old = description(space_of_one(), knobs.Context())
    Store(url).create_or_check("old", old)
    assert Store(url).create_or_check("old", {**old, "objectives": "speed,memory"})[1] is False
    with pytest.raises(StudyError, match="the objectives differ: speed,memory"):
        Store(url).create_or_check("old", {**old, "objectives": "speed,energy"})


def test_the_search_tells_optuna_joules_per_sample_in_a_speed_energy_study(tmp_path):
    from autotune.knobs import space
    from autotune.testing import fake as M
    from autotune.testing import studies as made_up
    from autotune.tuning import loop
    from autotune.tuning.phases import Bench
    from autotune.tuning.phases.seeds import Seeds

    ctx = knobs.Context()
    sp = space.parse({"search": {"precision": ["fp32", "bf16"], "batch_size": [16, 32, 64]}}, "e.toml", "e")
    live = made_up.live_study(f"sqlite:///{tmp_path}/e.db", "e", sp, ctx, seed=0, grace_s=None,
                              objectives="speed,energy")
    def evaluate(config, *args, **kw):  # bf16 twice as fast at 400 W, fp32 at 300 W (fake.result's made-up energy)
        rate = 100.0 * (2.0 if config["precision"] == "bf16" else 1.0) * config["batch_size"] / 16
        return M.result(rate, config=config, watts=400.0 if config["precision"] == "bf16" else 300.0)

    base = loop.base_config(ctx, sp.fixed, None)
    eff = space.effective(sp, ctx, base)
    loop.Tuner(live, Seeds(eff, ctx, base, []), Bench(evaluate), loop.Options(trials=5, race_rounds=0)).run()
    view = live.view()
    ok = [t for t in view.trials if t.ok and t.duplicate_of is None]
    assert len(ok) >= 4
    for t in ok:  # the second value is the trial's joules per sample; its peak memory stays in its result
        assert t.values[1] == pytest.approx(t.result["joules_per_sample"])
        assert view.peak_memory_of(t) == t.result["peak_memory_bytes"] == 10**8


def test_the_dashboards_front_table_shows_energy_beside_mfu():
    from autotune.reports import dashboard
    from autotune.reports.dashboard.front import front_table_info

    study = StoredStudy.of(gpu_study())
    info = front_table_info(study)
    assert info["has_energy"] and info["has_mfu"]
    for row in info["rows"]:
        assert row["joules_per_sample"] == pytest.approx(energy(study, row["number"]).joules_per_sample)
    page = dashboard.draw(study).text
    first = info["rows"][0]
    assert f"{joules(first['joules_per_sample'])}/sample" in page
    cpu = front_table_info(StoredStudy.of(make_study(optuna.storages.InMemoryStorage(), n_trials=8, seed=0)))
    assert not cpu["has_energy"]
