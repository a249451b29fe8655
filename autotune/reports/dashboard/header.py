"""The dashboard's header: the study's name, workload, machine, trials by outcome, time spent and the verdict's figures.

:func:`header_info` reduces the stored study to plain data; :func:`header_texts` words it (the
meta line and the cards), leaving out what is unknown with its separator and agreeing counts
with their nouns.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping

from autotune.evidence import ceiling
from autotune.evidence.efficiency import efficiency, rated
from autotune.evidence.energy import energy, joules
from autotune.machine.peaks import tflops
from autotune.reports.dashboard.history import remeasure_totals, remeasurements
from autotune.reports.dashboard.source import OK, Snapshot, config_text, finite, join, jsonable
from autotune.units import plural
from autotune.store import StoredStudy
from autotune.units import format_bytes, format_duration, format_percent, format_rate


def header_info(study: StoredStudy | Snapshot) -> dict[str, Any]:
    """Study name, workload, machine, trials by outcome, time spent, baseline and best speed-up."""
    snap = Snapshot.of(study)
    study = snap.study
    workload = study.workload if isinstance(study.workload, Mapping) else {}
    fingerprint = study.fingerprint if isinstance(study.fingerprint, Mapping) else {}
    space = study.space if isinstance(study.space, Mapping) else {}
    outcomes = Counter(r["outcome"] for r in snap.rows if r["duplicate_of"] is None)
    baseline = snap.baseline()
    best = snap.best()
    ev = snap.evidence
    # the recommendation's own figure, as every view shows it
    recommended = ev.speedup(best["number"]) if best else None
    verdict = rated(study, ev.verdict())  # with the recommendation's MFU and energy, as status --json shows it
    # MFU as status and export show it (the configuration's samples/s over the peak of its precision, named)
    eff = efficiency(study, best["number"] if best else None)

    def figures(r: Mapping[str, Any] | None) -> dict[str, Any] | None:
        if r is None:
            return None
        mfu = eff.of(r["number"])
        used = energy(study, r["number"])  # beside the MFU, as status and export show it
        return {
            "number": r["number"],
            "role": r["role"],
            "samples_per_s": r["samples_per_s"],
            "processes": r.get("processes"),
            "peak_memory_bytes": r["peak_memory_bytes"],
            "mfu": mfu.mfu if mfu else None,
            "mfu_peak": mfu.peak.to_dict() if mfu and mfu.peak and mfu.mfu is not None else None,
            "joules_per_sample": used.joules_per_sample,
            "energy": jsonable(used.to_dict()),
            "time_to_first_step_s": r["time_to_first_step_s"],
            "config_text": config_text(r["changes"]),
        }

    info: dict[str, Any] = {
        "name": snap.name,
        "workload": jsonable(
            {k: workload.get(k) for k in ("model", "data", "model_args", "input_shape", "num_classes", "task")}
        ),
        "fingerprint": jsonable(
            {
                k: fingerprint.get(k)
                for k in (
                    "device_type",
                    "device_name",
                    "device_count",
                    "torch",
                    "cuda",
                    "python",
                    "cpu_model",
                    "cpu_count",
                )
            }
        ),
        "device": jsonable(study.device),
        "space": jsonable(space.get("name")),
        "max_memory_bytes": finite(study.max_memory_bytes),
        "global_batch": jsonable(study.global_batch),
        "created_at": jsonable(study.created_at),
        "autotune_version": jsonable(study.version),
        "n_trials": len(snap.rows),
        "outcomes": dict(sorted(outcomes.items(), key=lambda kv: (kv[0] != OK, -kv[1], kv[0]))),
        "duplicates": sum(1 for r in snap.rows if r["duplicate_of"] is not None),
        "total_time_s": ev.time_spent()["wall_s"] or sum(r["duration_s"] or 0.0 for r in snap.rows),
        "trial_time_s": sum(r["duration_s"] or 0.0 for r in snap.rows),
        "baseline": figures(baseline),
        "best": figures(best),
        "best_speedup": recommended.estimate if recommended else None,
        "best_speedup_text": recommended.text() if recommended else "-",
        "efficiency": jsonable(eff.to_dict()),
        "verdict": jsonable(verdict.to_dict()),
        "noise": jsonable(ev.noise.to_dict()),
        "noise_text": ev.noise.text(),
        "load": jsonable(ev.load.to_dict()),
        "batch_ceiling": jsonable(ceiling.describe(study.batch_ceiling)),
        "front_size": len(snap.front),
        "remeasurements": remeasure_totals(remeasurements(snap)),
    }
    info.update(header_texts(info))
    return info


def _figures_text(r: Mapping[str, Any] | None) -> str:
    if not r:
        return "not measured"
    runs = f" from {r['processes']} processes" if (r.get("processes") or 1) > 1 else ", 1 process"
    peak = r.get("mfu_peak")
    of = f" of the {peak['name']} ({tflops(peak['flops'])})" if peak else ""
    mfu = f", MFU {format_percent(r['mfu'])}{of}" if r.get("mfu") is not None else ""
    j = r.get("joules_per_sample")
    used = f", {joules(j)}/sample" if j is not None else ""
    rate, memory = format_rate(r["samples_per_s"]), format_bytes(r["peak_memory_bytes"])
    return f"{rate} samples/s{runs}, {memory}{mfu}{used} (#{r['number']})"


def header_texts(h: Mapping[str, Any]) -> dict[str, Any]:
    """The header as text: ``meta`` (version · created · front size) and the ``cards`` (label, value, sub).

    Parts that are unknown are left out with their separator (never ``data synthetic;`` or ``, ,``), and counts
    agree with their nouns (``front: 1 trial``).
    """
    w, fp = h["workload"], h["fingerprint"]
    shape = "×".join(map(str, w["input_shape"])) if isinstance(w.get("input_shape"), list) else w.get("input_shape")
    args = w.get("model_args")
    if isinstance(args, Mapping):
        args_text = "args " + ", ".join(f"{k}={v}" for k, v in args.items()) if args else ""
    else:
        args_text = f"args {args}" if args else ""
    workload = join(
        [
            f"data {w.get('data') or 'synthetic'}",
            join(
                [
                    f"task {w['task']}" if w.get("task") else "",
                    f"input {shape}" if shape else "",
                    f"{w['num_classes']} classes" if w.get("num_classes") else "",
                    args_text,
                ]
            ),
        ],
        "; ",
    )
    device = fp.get("device_name") or h.get("device") or "-"
    machine = join(
        [
            fp["cpu_model"] if fp.get("cpu_model") and fp.get("cpu_model") != device else "",
            f"torch {fp['torch']}" if fp.get("torch") else "",
            plural(int(fp["cpu_count"]), "CPU") if fp.get("cpu_count") else "",
            f"CUDA {fp['cuda']}" if fp.get("cuda") else "",
        ]
    )
    outcomes = join(
        [
            join(f"{n} {o}" for o, n in h["outcomes"].items()) or "none yet",
            f"{h['duplicates']} answered from the cache" if h["duplicates"] else "",
        ],
        "; ",
    )
    again = h.get("remeasurements") or {}
    spent = join(
        [
            f"trials {format_duration(h['trial_time_s'])}" if h.get("trial_time_s") else "",
            (
                f"{plural(again['count'], 're-measurement')} (noise floor, race, what each knob bought) "
                f"{format_duration(again['time_s'])}"
                + (" (estimated: each as long as its trial)" if again.get("estimated") else "")
            )
            if again.get("count")
            else "",
        ]
    )
    budget = f"memory budget {format_bytes(h['max_memory_bytes'])}" if h.get("max_memory_bytes") else ""
    ceiling_text = f"batch ceiling {h['batch_ceiling']['text']}" if h.get("batch_ceiling") else ""
    time_sub = join(
        [
            spent,
            join([f"search space {h['space'] or '-'}", budget]),
            ceiling_text,
            h.get("noise_text"),
            (h.get("load") or {}).get("text"),
        ],
        "; ",
    )
    best = h["best"]
    cards = [
        {"label": "workload", "value": w.get("model") or "-", "sub": workload},
        {"label": "machine", "value": device, "sub": machine},
        {"label": "trials", "value": str(h["n_trials"]), "sub": outcomes},
        {"label": "time spent", "value": format_duration(h["total_time_s"]), "sub": time_sub},
        {"label": "baseline", "value": _figures_text(h["baseline"]), "sub": "PyTorch defaults"},
        {
            "label": "speed-up (90% interval)",
            "value": h.get("best_speedup_text") or "-",
            "sub": join([_figures_text(best), best["config_text"] if best else ""], ": "),
        },
    ]
    meta = join(
        [
            f"autotune {h['autotune_version']}" if h.get("autotune_version") else "",
            f"created {h['created_at']}" if h.get("created_at") else "",
            f"front: {plural(h['front_size'], 'trial')}",
        ],
        " · ",
    )
    return {"meta": meta, "cards": cards}

