"""Exported configurations: pick a point of a study's front and write it as a versioned JSON document.

``autotune export STUDY -o best.json`` (``--pick recommended``, the default) writes the
knob values, the measured figures with their spread, the speed-up over the baseline with
its interval (the evidence's: :mod:`autotune.evidence`), the workload spec, the
fingerprint, the study and the trial. :mod:`autotune.frameworks` renders the same document
for Hugging Face Trainer, Lightning and Accelerate; :func:`autotune.export.config.load_config`
reads it back into a training script. A read command: it imports neither torch nor the
trial modules (applying a configuration, in :mod:`autotune.export.config`, does). Everything it writes comes from
the stored study (:class:`autotune.store.StoredStudy`, read once by the command) and its evidence.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from autotune import files, knobs, units
from autotune._version import __version__
from autotune.errors import ConfigError, StudyError, plain, said
from autotune.evidence import Evidence, evidence_of
from autotune.evidence.efficiency import efficiency, mfu_of, rated
from autotune.evidence.energy import energy
from autotune.request import DEFAULT_PICK, PICKS, option
from autotune.store import StoredStudy, StoredTrial

SCHEMA = "autotune.config/2"  # /2: speedup became a claim with its interval
SCHEMAS = ("autotune.config/1", SCHEMA)  # what load_config reads


def pick_trial(study: StoredStudy, pick: str, max_memory_bytes: int | None = None) -> tuple[StoredTrial, str]:
    """A configuration to export, and what it is (the line an export records as ``pick_note``).

    ``recommended`` is the verdict's winner (:meth:`Evidence.verdict`: raced through the noise,
    the simplest among the tied), or the defaults when nothing beats them beyond the noise.
    ``fastest`` is the fastest-looking point of the front: where it is not the recommendation it
    is labelled so, with the verdict (never presented as a gain the evidence does not support).
    ``smallest`` and ``balanced`` pick on the front by memory.
    """
    if pick not in PICKS:
        raise StudyError(f"{option('pick', pick, quoted=True)}: expected one of {', '.join(PICKS)}")
    ev = evidence_of(study) if max_memory_bytes is None else Evidence(study, max_memory_bytes)
    trials = {t.number: t for t in study.trials}
    candidates = [ev.configs[n] for n in ev.front()]
    if not candidates:
        raise StudyError(_nothing_to_export(study, ev, max_memory_bytes))
    verdict = ev.verdict()
    recommended = ev.recommended()
    if pick == "recommended":
        if recommended is None or not ev.configs[recommended].feasible:
            raise StudyError(f"{said(verdict.text)}; and the defaults themselves do not fit the memory budget: export "
                             f"{option('pick', 'smallest')}, or one of the front's configurations")
        if verdict.recommends:
            return trials[recommended], f"recommended: {verdict.text}"
        why = verdict.text.removeprefix(KEEP).removeprefix("keep PyTorch's defaults: ")
        return trials[recommended], f"recommended: the defaults, because {why}"
    if pick == "fastest":
        chosen = max(candidates, key=lambda c: c.samples_per_s).number
    elif pick == "smallest":
        chosen = min(candidates, key=lambda c: (c.peak_memory_bytes, -c.samples_per_s)).number
    else:
        chosen = _balanced(candidates)
    s = ev.speedup(chosen)
    figure = f"{s.text()} the defaults" if s is not None else "no speed-up measured"
    if chosen == recommended:
        return trials[chosen], f"{pick}, and recommended: {verdict.text}"
    return trials[chosen], (f"{pick}: #{chosen} at {figure}, not the recommendation (#{recommended}); the verdict: "
                            f"{verdict.text}")


def _balanced(candidates: list[Any]) -> int:
    t_lo, t_hi = min(c.samples_per_s for c in candidates), max(c.samples_per_s for c in candidates)
    m_lo, m_hi = min(c.peak_memory_bytes for c in candidates), max(c.peak_memory_bytes for c in candidates)

    def distance(c: Any) -> float:
        speed_gap = (t_hi - c.samples_per_s) / (t_hi - t_lo) if t_hi > t_lo else 0.0
        mem_gap = (c.peak_memory_bytes - m_lo) / (m_hi - m_lo) if m_hi > m_lo else 0.0
        return speed_gap**2 + mem_gap**2

    return min(candidates, key=distance).number


def _nothing_to_export(study: StoredStudy, ev: Evidence, max_memory_bytes: int | None) -> str:
    """Why the front is empty: no trial succeeded, or those that did are over a memory budget (whose)."""
    from autotune.units import format_bytes

    ok = [c for c in ev.configs.values() if c.peak_memory_bytes is not None]
    name = study.name
    if not ok:
        return f"study {name!r} has no successful trial to export; run more trials first"
    smallest = format_bytes(min(c.peak_memory_bytes for c in ok))
    if max_memory_bytes is not None:
        return (f"study {name!r}: none of its {len(ok)} successful trials fits in "
                f"{option('max_memory', format_bytes(max_memory_bytes))} (the smallest peaked at {smallest}); "
                f"export with a larger {option('max_memory')}")
    budget = f" {format_bytes(study.max_memory_bytes)}" if study.max_memory_bytes else ""
    return (f"study {name!r}: all {len(ok)} successful trials are over the study's memory budget{budget} "
            f"(the smallest peaked at {smallest}); start a new study with a larger {option('max_memory')}")


def export(
    study: StoredStudy,
    pick: str = DEFAULT_PICK,
    max_memory_bytes: int | None = None,
    storage_url: str | None = None,
) -> dict[str, Any]:
    """The exported document of a picked configuration, with the study's figures for it (see module docstring)."""
    trial, note = pick_trial(study, pick, max_memory_bytes)
    ev = evidence_of(study)
    res = trial.result
    c = ev.configs[trial.number]
    base = ev.baseline
    speedup = ev.speedup(trial.number)
    mfu = efficiency(study, trial.number).figure
    used = energy(study, trial.number)
    described = study.description()  # as stored: a key a study lacks is null in the document
    verdict = rated(study, ev.verdict())  # with the recommendation's MFU and energy, as status --json shows it
    return plain({  # every text in the command line's words: no marker leaves in a document
        "schema": SCHEMA,
        "autotune_version": __version__,
        "exported_at": now(),
        "pick": pick,
        "pick_note": note,
        "knobs": trial.config,
        "not_applicable": trial.not_applicable,
        # how the training is started: the environment, torchrun's line (one rank included), DDP's arguments, the cores
        "launch": knobs.launch_of(trial.config),
        "measured": {
            "samples_per_s": c.samples_per_s,
            "processes": c.processes,
            "measurements_samples_per_s": [v for _, v in c.claim],
            # shared processes: beside the defaults, or the raced winner (via)
            "within_process_measurements": len(c.together),
            "first_measurement_samples_per_s": trial.values[0],  # type: ignore[index]
            "samples_per_s_cv_within_process": res.get("samples_per_s_cv"),
            "peak_memory_bytes": c.peak_memory_bytes,  # (the trial's second value in a speed,memory study)
            "time_to_first_step_s": res.get("time_to_first_step_s"),
            "step_time_s": res.get("step_time_s"),
            "samples_per_step": res.get("samples_per_step"),
            # the share of the device's peak, and which peak (autotune.evidence.efficiency: the figure status shows)
            "mfu": mfu.mfu if mfu else None,
            "mfu_peak": mfu.peak_named if mfu else None,  # "this H200's dense bf16 peak, 989 TFLOP/s", or why none
            "mfu_peak_flops": mfu.peak_flops if mfu else None,
            "mfu_figure": mfu_of(mfu) if mfu else None,  # the same figure with its peak's device and precision
            # the device's energy over the timed windows, or why none (autotune.evidence.energy: as status shows it)
            "joules_per_sample": used.joules_per_sample,
            "energy": used.to_dict(),
        },
        "baseline": {
            "trial": base.number if base else None,
            # what the speed-up is over (autotune verify measures it again)
            "knobs": dict(base.config) if base else None,
            "samples_per_s": base.samples_per_s if base else None,
            "processes": base.processes if base else None,
            "peak_memory_bytes": base.peak_memory_bytes if base else None,
        },
        "speedup": speedup.to_dict() if speedup else None,
        "claim_status": claim_status(ev, trial.number),
        "noise": ev.noise.to_dict(),
        "within_process_noise": ev.within_noise.to_dict(),
        "load": ev.load.to_dict(),
        "verdict": verdict.to_dict(),
        # the claim measured apart from the search, and the knobs left at the user's setting with what each bought
        "claim": ({**ev.confirmation.to_dict(), "left": [x.to_dict() for x in ev.left()]}
                  if ev.confirmation is not None and trial.number == ev.confirmation.recommendation else None),
        # the numerics check of this configuration, when it is the one checked (autotune.evidence.numerics_answer)
        "numerics": check.to_dict() if (check := ev.numerics()) is not None and check.number == trial.number else None,
        # what each knob bought, from the defaults, when this is the configuration the path led to (or its winner)
        "ablation": (ab.to_dict() if (ab := ev.ablation()) is not None and trial.number in (ab.winner, ab.minimal)
                     else None),
        "workload": described.get("workload"),
        "device": described.get("device"),
        **_samples_per_step(described.get("global_batch"), base.config if base else {}, trial.config,
                            study.context.get("task", "train")),
        "task": study.context.get("task", "train"),
        "context": described.get("context"),
        "fingerprint": described.get("fingerprint"),
        "study": {"name": study.name, "storage": storage_url, "trial": trial.number},
    })


KEEP = "keep the defaults: "  # how a verdict that recommends no change begins


def claim_status(ev: Any, number: int) -> str:
    """What the exported configuration's speed-up is: ``defaults`` (1.00x), ``confirmed`` (its claim, measured apart
    with an interval), ``not confirmed`` (recommended on too few processes for an interval), or ``selection`` (the
    search's and the race's own figure, which runs high for the configurations they chose)."""
    if ev.baseline is not None and number == ev.baseline.number:
        return "defaults"
    verdict = ev.verdict()
    s = ev.speedup(number)
    if verdict.unconfirmed and verdict.winner == number:
        return "not confirmed"
    conf = ev.confirmation
    if (conf is not None and conf.claim is not None and number == conf.recommendation and s is not None
            and s.has_interval):
        return "confirmed"
    return "selection"


def _samples_per_step(global_batch: int | None, defaults: dict[str, Any], config: dict[str, Any], task: str
                      ) -> dict[str, Any]:
    """The document's ``global_batch`` (the study's) and ``batch_note``: a batch size the user did not ask for changes
    their optimisation, so where the configuration's differs from the defaults' and the study set no global batch,
    the export says so and how to keep the defaults' samples per optimizer step. It does not apply accumulation
    itself: the study measured the configuration without it (a study with ``--global-batch`` measures it with)."""
    theirs, ours = defaults.get(knobs.BATCH_KNOB), config.get(knobs.BATCH_KNOB)
    if global_batch or task != "train" or not theirs or not ours or theirs == ours:
        return {"global_batch": global_batch, "batch_note": None}
    note = f"batch_size={ours} changes your optimizer's samples per step from {theirs} to {ours}"
    if knobs.keeps_global_batch(theirs, ours):
        steps = knobs.accumulation_steps(theirs, ours)
        note += (f": gradient accumulation over {steps} micro-batches keeps {theirs} (measured so with "
                 f"{option('global_batch', str(theirs))})")
    else:
        note += (f": its learning rate and schedule may need changing (study with "
                 f"{option('global_batch', str(theirs))} to keep them)")
    return {"global_batch": None, "batch_note": plain(note)}


def now() -> str:
    """When an export is made (its ``exported_at``)."""
    return units.iso()


def check_output(path: str | Path) -> Path:
    """Where an export will be written: refused in one line when it is a folder (or under a file)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"-o {path}: is a folder; name a file, e.g. {path / 'best.json'}")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise ConfigError(f"-o {path}: {parent} is a file, not a folder")
    return path


def write_text(text: str, path: str | Path) -> Path:
    """Write ``text`` whole or not at all (a temporary file beside it, then renamed); one line on failure,
    and no temporary file left behind."""
    path = check_output(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        files.write_atomic(path, text)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def write(doc: Mapping[str, Any], path: str | Path) -> Path:
    """Write an exported document as JSON (:func:`write_text`)."""
    return write_text(json.dumps(doc, indent=2, default=str) + "\n", path)
