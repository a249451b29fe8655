"""How close a configuration runs to the hardware's limit (autotune/machine/peaks.py, autotune/evidence/efficiency.py):
the peak table's lookups by the names torch gives devices, the MFU of a made-up study's recommendation and defaults
(each against its own, named peak), the hints of what closes the gap, and that status, status --json, export and the
dashboard's header show the one figure."""

from __future__ import annotations

import dataclasses
import json

import optuna
import pytest
from click.testing import CliRunner

from autotune.cli import main
from autotune.evidence import evidence_of
from autotune.evidence.efficiency import HINT_BELOW, efficiency, figure, percent
from autotune.machine import peaks
from autotune.store import StoredStudy, writing
from autotune.testing.studies import add_race, make_study

H200 = "NVIDIA H200"
FLOPS = 3 * 1.2e9  # the made-up studies' FLOPs a sample (autotune/testing/studies.py)


# ---------------------------------------------------------------- the table


@pytest.mark.parametrize(("name", "precision", "device", "tflops"), [
    ("NVIDIA H100 80GB HBM3", "bf16", "H100 SXM", 989.4),
    ("NVIDIA H100 80GB HBM3", "fp16", "H100 SXM", 989.4),
    ("NVIDIA H100 80GB HBM3", "tf32", "H100 SXM", 494.7),
    ("NVIDIA H100 80GB HBM3", "fp32", "H100 SXM", 66.9),
    ("NVIDIA H100", "bf16", "H100 SXM", 989.4),
    ("NVIDIA H100 PCIe", "bf16", "H100 PCIe", 756.0),
    ("NVIDIA H100 NVL", "bf16", "H100 NVL", 835.5),
    ("NVIDIA H200", "bf16", "H200", 989.4),
    ("NVIDIA H200", "fp32", "H200", 66.9),
    ("NVIDIA H200 NVL", "bf16", "H200 NVL", 835.5),
    ("NVIDIA GH200 480GB", "bf16", "GH200", 989.4),  # not the H200's row, though its name holds "H200"
    ("NVIDIA A100-SXM4-80GB", "bf16", "A100", 312.0),
    ("NVIDIA A100-SXM4-40GB", "tf32", "A100", 156.0),
    ("NVIDIA A100 80GB PCIe", "fp32", "A100", 19.5),
    ("NVIDIA A10G", "bf16", "A10G", 125.0),
    ("NVIDIA A10", "bf16", "A10", 125.0),  # not the A100's row
    ("NVIDIA L4", "bf16", "L4", 121.0),
    ("NVIDIA L40S", "bf16", "L40S", 362.05),  # not the L4's row
    ("NVIDIA GeForce RTX 4090", "bf16", "RTX 4090", 165.2),
    ("Tesla V100-SXM2-16GB", "fp16", "V100", 125.0),
    ("Tesla V100-SXM2-16GB", "tf32", "V100", 15.7),  # no TF32 tensor cores: a tf32 step runs in fp32
    ("Tesla T4", "fp16", "T4", 65.0),
    ("Tesla T4", None, "T4", 8.1),  # no precision knob: fp32
])
def test_the_table_finds_a_device_by_the_name_torch_gives_it(name, precision, device, tflops):
    found = peaks.peak(name, precision)
    assert found is not None and found.device == device
    assert found.flops == pytest.approx(tflops * 1e12)
    assert peaks.peak_flops(name, precision) == pytest.approx(tflops * 1e12)


def test_the_trial_process_reads_the_same_table():
    from autotune.machine import hardware  # the trial side's (autotune/trial/measure_one.py): no table of its own

    assert hardware.peak_flops is peaks.peak_flops and hardware.PEAK_FLOPS is peaks.PEAK_FLOPS


@pytest.mark.parametrize(("name", "precision", "said"), [
    ("NVIDIA B200", "bf16", "peak unknown for NVIDIA B200"),
    ("Some Future GPU", "fp32", "peak unknown for Some Future GPU"),
    (None, "bf16", "peak unknown for this device"),
    ("Tesla V100-SXM2-16GB", "bf16", "the V100 has no bf16 peak"),
    ("Tesla T4", "bf16", "the T4 has no bf16 peak"),
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "bf16", "peak unknown for NVIDIA A100-SXM4-40GB MIG 1g.5gb (a share"),
    ("NVIDIA GeForce RTX 4090 Laptop GPU", "bf16", "peak unknown for NVIDIA GeForce RTX 4090 Laptop GPU (a"),
])
def test_a_device_or_precision_without_a_peak_says_which(name, precision, said):
    assert peaks.peak(name, precision) is None and peaks.peak_flops(name, precision) is None
    assert peaks.missing(name, precision).startswith(said)


def test_a_cpu_has_no_peak_and_says_so():
    cpu = "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"
    assert peaks.peak(cpu, "fp32") is None
    assert peaks.missing(cpu, "fp32", cpu=True) == f"peak unknown for {cpu} (a CPU: autotune knows GPU peaks only)"


def test_a_peak_is_named_in_words():
    assert peaks.peak(H200, "bf16").text() == "this H200's dense bf16 peak, 989 TFLOP/s"
    # no sparse fp32 figure: not "dense"
    assert peaks.peak(H200, "fp32").text() == "this H200's fp32 peak, 66.9 TFLOP/s"
    assert peaks.peak("NVIDIA A10G", "bf16").text().endswith(
        "(the A10's datasheet: NVIDIA publishes none for the A10G)")
    assert [peaks.tflops(x * 1e12) for x in (989.4, 494.7, 66.9, 8.1, 1979)] == [
        "989 TFLOP/s", "495 TFLOP/s", "66.9 TFLOP/s", "8.1 TFLOP/s", "1980 TFLOP/s"]
    assert [peaks.sixteen_bit(n) for n in (H200, "Tesla V100-SXM2-16GB", "NVIDIA B200")] == ["bf16", "fp16", None]


# ---------------------------------------------------------------- the figure


def speed(config):
    """Made-up samples/s on an H200: bf16 3x fp32, compile 1.3x."""
    rate = 10000.0 * (3.0 if config["precision"] == "bf16" else 1.0) * (1.3 if config["compile"] != "off" else 1.0)
    return rate * min(config["batch_size"] / 32, 4) ** 0.1


def on(live, device_name=H200, device_type="cuda"):
    """The study as if measured on ``device_name``: its fingerprint's device."""
    fingerprint = dict(StoredStudy.of(live).fingerprint)
    fingerprint.update(device_type=device_type, device_name=device_name)
    writing.save(live, fingerprint=fingerprint, device="cuda:0" if device_type == "cuda" else "cpu")
    return live


def gained(storage=None, name="demo", device_name=H200):
    """A study whose fastest configuration won a race against the defaults (a gain), on ``device_name``."""
    live = on(make_study(storage or optuna.storages.InMemoryStorage(), n_trials=12, seed=0, with_failures=False,
                         speed=speed, name=name), device_name)
    ev = evidence_of(StoredStudy.of(live))
    best = max((c for c in ev.configs.values() if not c.is_baseline), key=lambda c: c.samples_per_s)
    add_race(live, {best.number: best.samples_per_s}, rounds=4, spread=0.02)
    return live


def test_the_recommendation_and_the_defaults_each_against_their_own_named_peak():
    study = StoredStudy.of(gained())
    ev = evidence_of(study)
    rec = ev.recommended()
    assert ev.verdict().state == "gain" and rec != ev.baseline.number
    eff = efficiency(study)
    bf16, fp32 = peaks.peak(H200, "bf16"), peaks.peak(H200, "fp32")
    assert study.trial(rec).config["precision"] == "bf16"
    # the claimed samples/s every view shows (the race's), not the trial's first measurement
    assert eff.figure.samples_per_s == ev.samples_per_s(rec) != study.trial(rec).values[0]
    assert eff.figure.number == rec and eff.figure.peak == bf16
    assert eff.mfu == pytest.approx(FLOPS * ev.samples_per_s(rec) / bf16.flops)
    assert eff.achieved_flops == pytest.approx(FLOPS * ev.samples_per_s(rec)) and eff.peak_flops == bf16.flops
    assert eff.baseline.defaults and eff.baseline.peak == fp32
    assert eff.baseline.mfu == pytest.approx(FLOPS * ev.baseline.samples_per_s / fp32.flops)
    assert eff.figure.peak_text == f"{percent(eff.mfu)} of this H200's dense bf16 peak, 989 TFLOP/s"
    assert eff.text.startswith(f"#{rec} runs at {percent(eff.mfu)} of this H200's dense bf16 peak (989 TFLOP/s); "
                               f"the defaults (#0) at {percent(eff.baseline.mfu)} of its fp32 peak (66.9 TFLOP/s)")
    # the one function the views call for any configuration gives the same figures
    assert figure(study, rec) == eff.figure and figure(study, 0) == eff.baseline
    doc = eff.to_dict()
    assert doc["mfu"] == eff.mfu and doc["recommended"]["peak"]["text"] == bf16.text()
    assert doc["baseline"]["peak_flops"] == fp32.flops and json.loads(json.dumps(doc)) == doc


def test_a_cpu_study_says_its_peak_is_unknown_and_what_it_computes():
    study = StoredStudy.of(make_study(optuna.storages.InMemoryStorage(), n_trials=12, seed=0))
    eff = efficiency(study)
    cpu = study.fingerprint["device_name"]
    assert eff.mfu is None and eff.peak_flops is None and eff.hints == []
    assert eff.achieved_flops == pytest.approx(FLOPS * evidence_of(study).samples_per_s(eff.figure.number))
    assert eff.figure.missing == f"peak unknown for {cpu} (a CPU: autotune knows GPU peaks only)"
    assert eff.text.endswith(f"; no MFU: peak unknown for {cpu} (a CPU: autotune knows GPU peaks only)")
    assert "TFLOP/s (3.60 GFLOP a sample)" in eff.text


def test_an_unknown_gpu_and_a_study_without_flop_counts_say_which():
    live = gained(device_name="NVIDIA B200")
    eff = efficiency(StoredStudy.of(live))
    assert eff.mfu is None and eff.figure.missing == "peak unknown for NVIDIA B200"
    assert "no MFU: peak unknown for NVIDIA B200" in eff.text
    study = StoredStudy.of(on(live, H200))
    uncounted = study.with_trials([
        dataclasses.replace(t, result={k: v for k, v in t.result.items() if k != "flops_per_sample"})
        for t in study.trials])
    eff = efficiency(uncounted)
    assert eff.mfu is None and eff.achieved_flops is None
    assert eff.text == f"no FLOP count stored for #{eff.figure.number} (its trial counted none)"


def test_nothing_to_rate_before_the_defaults_are_measured():
    live = make_study(optuna.storages.InMemoryStorage(), n_trials=12, seed=0)
    study = StoredStudy.of(live).with_trials([])
    eff = efficiency(study)
    assert eff.figure is None and eff.mfu is None and "no recommendation (yet)" in eff.text


# ---------------------------------------------------------------- what closes the gap


def rewritten(study: StoredStudy, **knobs) -> StoredStudy:
    """The study with every trial but the defaults' trying ``knobs``."""
    return study.with_trials([t if t.role == "baseline" else dataclasses.replace(t, config={**t.config, **knobs})
                              for t in study.trials])


def slow(device_name=H200, **save):
    """A study on ``device_name`` whose recommendation is the defaults (fp32, batch 32), far below the peak."""
    live = on(make_study(optuna.storages.InMemoryStorage(), n_trials=8, seed=0, with_failures=False,
                         speed=lambda c: 1000.0), device_name)
    if save:
        writing.save(live, **save)
    study = StoredStudy.of(live)
    assert evidence_of(study).recommended() == 0
    return study


def hinted(study, number=None):
    return {h.knob: h.value for h in efficiency(study, number).hints}


def test_far_from_the_peak_it_names_what_the_study_did_not_try():
    study = rewritten(slow(), precision="fp32", compile="off", batch_size=16)
    eff = efficiency(study)
    assert eff.mfu < HINT_BELOW
    assert hinted(study) == {"batch_size": ">32", "compile": "reduce-overhead", "precision": "bf16"}
    assert "no batch above the defaults' 32 was tried" in eff.text
    assert "CUDA graphs (compile=reduce-overhead)" in eff.text and "bf16 autocast (precision=bf16)" in eff.text
    # on a GPU without bf16, the 16-bit autocast it has
    volta = rewritten(slow("Tesla V100-SXM2-16GB"), precision="fp32", compile="off", batch_size=16)
    assert hinted(volta)["precision"] == "fp16"


def test_what_the_study_tried_is_not_hinted():
    study = slow()
    tried = study.with_trials([dataclasses.replace(t, config={**t.config, "compile": "reduce-overhead"})
                               if t.number == 2 else t for t in study.trials])
    # one trial with CUDA graphs, whatever its outcome
    assert "compile" not in hinted(rewritten(tried, precision="fp32"))
    assert "compile" not in hinted(rewritten(study, compile="max-autotune"))  # max-autotune captures CUDA graphs too
    assert "precision" not in hinted(rewritten(study, precision="fp16"))  # 16-bit autocast was tried
    assert "batch_size" not in hinted(rewritten(study, batch_size=64))  # above the defaults' 32, and #0 below the top


def test_a_larger_batch_is_hinted_at_the_top_of_what_was_tried_unless_the_ceiling_says_it_does_not_fit():
    study = rewritten(slow(), batch_size=64, precision="fp32")
    top = next(t.number for t in study.trials if t.role != "baseline" and t.ok)
    assert (hinted(study, top)["batch_size"] == ">64"
            and f"#{top}'s 64 is the largest tried" in efficiency(study, top).text)
    ceiling = {"batch_size": 64, "limit": "oom", "first_failing": 80, "probes": [], "seconds": 1.0}
    capped = rewritten(slow(batch_ceiling=ceiling), batch_size=64, precision="fp32")
    assert "batch_size" not in hinted(capped, top)


def test_fp32_near_its_own_peak_is_far_from_the_best_the_device_offers():
    live = on(make_study(optuna.storages.InMemoryStorage(), n_trials=8, seed=0, with_failures=False,
                         speed=lambda c: 10000.0))  # 36 TFLOP/s: 54% of the H200's fp32 peak, 3.6% of its bf16 one
    study = rewritten(StoredStudy.of(live), precision="fp32", compile="off", batch_size=16)
    eff = efficiency(study)
    ratio = peaks.peak(H200, "bf16").flops / peaks.peak(H200, "fp32").flops  # from the table: 14.8
    assert eff.mfu > HINT_BELOW and eff.figure.far and eff.figure.of_best < HINT_BELOW
    assert eff.figure.higher == peaks.best(H200) == peaks.peak(H200, "bf16")
    assert f"{ratio:.0f}x" == "15x"
    assert eff.text.startswith(f"the defaults (#0) run at {percent(eff.mfu)} of this H200's fp32 peak "
                               "(66.9 TFLOP/s; bf16's dense peak is 15x higher)")
    assert hinted(study)["precision"] == "bf16" and "bf16's dense peak is 15x higher (989 TFLOP/s)" in eff.text
    # where bf16 was tried (and did not win), the distance is said, the autocast not hinted
    tried = study.with_trials([dataclasses.replace(t, config={**t.config, "precision": "bf16"})
                               if t.number == 2 else t for t in study.trials])
    assert "precision" not in hinted(tried) and "bf16's dense peak is 15x higher" in efficiency(tried).text
    # on a T4 (no bf16) the 16-bit peak it has, its ratio from the table
    t4 = efficiency(rewritten(slow("Tesla T4"), precision="fp32"))
    assert "fp16's dense peak is 8.0x higher" in t4.text


def test_no_hint_near_the_best_peak_nor_without_an_mfu():
    live = on(make_study(optuna.storages.InMemoryStorage(), n_trials=8, seed=0, with_failures=False,
                         speed=lambda c: 150000.0))  # 540 TFLOP/s: 55% of the H200's dense bf16 peak
    study = rewritten(StoredStudy.of(live), precision="bf16", compile="off", batch_size=16)
    bf16 = next(t.number for t in study.trials if t.role != "baseline" and t.ok)
    eff = efficiency(study, bf16)
    assert eff.figure.number == bf16 and eff.figure.peak == peaks.peak(H200, "bf16")
    assert eff.mfu > HINT_BELOW and eff.figure.higher is None and eff.hints == []
    assert "usually closes" not in eff.text and "higher" not in eff.text
    cpu = rewritten(StoredStudy.of(make_study(optuna.storages.InMemoryStorage(), n_trials=8, seed=0)), batch_size=16)
    assert efficiency(cpu).hints == []


# ---------------------------------------------------------------- every view, one figure


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_status_json_export_and_the_dashboard_show_the_same_figure(tmp_path):
    from autotune.reports import dashboard
    from autotune.store import Store

    url = f"sqlite:///{tmp_path}/h200.db"
    gained(url, name="h200")
    eff = efficiency(Store(url, read_only=True).read("h200"))
    assert eff.mfu is not None
    doc = json.loads(invoke("status", "h200", "--storage", url, "--json").output)["efficiency"]
    assert doc["mfu"] == pytest.approx(eff.mfu) and doc["text"] == eff.text
    assert doc["recommended"]["peak"]["text"] == "this H200's dense bf16 peak, 989 TFLOP/s"
    assert doc["baseline"]["mfu"] == pytest.approx(eff.baseline.mfu)
    res = invoke("status", "h200", "--storage", url)
    lines = " ".join(res.output.split())  # the console folds long lines between words
    assert f"hardware: {eff.text}" in lines
    assert lines.index("verdict: ") < lines.index("hardware: ")  # the line after the verdict
    exported = json.loads(invoke("export", "h200", "--storage", url).output)["measured"]
    assert exported["mfu"] == pytest.approx(eff.mfu)
    assert (exported["mfu_peak"] == "this H200's dense bf16 peak, 989 TFLOP/s"
            and exported["mfu_peak_flops"] == eff.peak_flops)
    header = dashboard.header_info(Store(url, read_only=True).read("h200"))
    assert (header["best"]["mfu"] == pytest.approx(eff.mfu)
            and header["baseline"]["mfu"] == pytest.approx(eff.baseline.mfu))
    cards = {c["label"]: c for c in header["cards"]}
    assert f"MFU {100 * eff.mfu:.1f}% of the dense bf16 peak (989 TFLOP/s)" in cards["speed-up (90% interval)"]["sub"]
    assert f"MFU {100 * eff.baseline.mfu:.1f}% of the fp32 peak (66.9 TFLOP/s)" in cards["baseline"]["value"]


def test_a_cpu_study_shows_no_mfu_anywhere_and_says_why(tmp_path):
    url = f"sqlite:///{tmp_path}/cpu.db"
    make_study(url, n_trials=12, name="cpu")
    doc = json.loads(invoke("status", "cpu", "--storage", url, "--json").output)["efficiency"]
    assert doc["mfu"] is None and "no MFU: peak unknown for" in doc["text"]
    assert "hardware: " in invoke("status", "cpu", "--storage", url).output
    exported = json.loads(invoke("export", "cpu", "--storage", url).output)["measured"]
    assert exported["mfu"] is None and exported["mfu_peak"].startswith("peak unknown for ")
