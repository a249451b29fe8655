"""How close a configuration runs to the hardware's limit: its MFU against a named peak, and what closes the gap.

A speed-up over the defaults says nothing of the headroom left: 1.5x the defaults can still be 15% of what the GPU
can do. :func:`efficiency` says it, for the recommendation (or any measured configuration) and for the defaults
beside it, from the study alone:

- MFU = the FLOPs of one sample (``flops_per_sample``, counted by the trial: :mod:`autotune.trial.measure_one`) x the
  configuration's samples/s *as every view shows it* (``evidence_of(study).samples_per_s``: its claim, not its
  trial's first measurement) / the peak of the study's device (its fingerprint's name) for the configuration's
  precision (:mod:`autotune.machine.peaks`: fp32 -> the fp32 peak, tf32 -> tf32, bf16/fp16 -> the 16-bit one);
- the peak is always named (``this H200's dense bf16 peak, 989 TFLOP/s``): an MFU of 55% against the fp32 peak and
  one of 17% against the bf16 peak are not the same distance from the limit, and a reader cannot tell which is which
  from the two numbers;
- against a peak below the best the device offers, how much higher that one is (fp32 defaults at 55% of an H200's
  fp32 peak: "bf16's dense peak is 15x higher", the ratio from the table);
- far from the peak (under :data:`HINT_BELOW` of the best peak the device offers, whatever the precision the step ran
  in), what usually closes the gap, naming only what the study did not try (read from its trials' configurations): a
  larger batch, CUDA graphs, 16-bit autocast.

``status`` (and ``--json``), the end of ``run``, ``export``, the dashboard's header, the verdict object (:func:`rated`:
its recommendation's MFU with the peak's device, precision and FLOP/s, and its energy per sample) and ``tune()``'s
result show this one figure (:mod:`autotune.reports.view`, :mod:`autotune.export.document`,
:mod:`autotune.reports.dashboard.header`, :mod:`autotune.api`), and ``autotune measure`` the same computation on one
result (:func:`of_result`), so a configuration never shows two MFUs. Pure computation over the stored study: no
torch, no trial side.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from autotune import knobs
from autotune.knobs import registry
from autotune.evidence import evidence_of
from autotune.evidence.ceiling import MAX_MEMORY
from autotune.evidence.energy import Energy, energy
from autotune.evidence.verdict import Verdict
from autotune.result import Outcome
from autotune.machine import peaks
from autotune.machine.peaks import Peak
from autotune.store.records import StoredStudy
from autotune.units import format_flops

#: Under this MFU a step is far from the peak: the line says what usually closes the gap.
HINT_BELOW = 0.30
#: compile modes that capture the step in CUDA graphs.
CUDA_GRAPHS = ("reduce-overhead", "max-autotune")
PRECISION = registry.PRECISION.name
COMPILE = registry.COMPILE.name


@dataclass(frozen=True)
class Figure:
    """One configuration's distance from the peak: ``mfu`` = ``achieved_flops`` / ``peak.flops``, None with
    ``missing`` saying why (no FLOP count stored, the device's peak unknown)."""

    number: int
    defaults: bool  # the baseline: PyTorch's defaults
    precision: str  # the precision class its peak is for
    flops_per_sample: float | None
    samples_per_s: float | None
    peak: Peak | None
    missing: str | None = None
    best: Peak | None = None  # the highest peak the device offers, whatever the precision (peaks.best)

    @property
    def achieved_flops(self) -> float | None:
        if self.flops_per_sample is None or not self.samples_per_s:
            return None
        return self.flops_per_sample * self.samples_per_s

    @property
    def peak_flops(self) -> float | None:
        return self.peak.flops if self.peak else None

    @property
    def mfu(self) -> float | None:
        achieved = self.achieved_flops
        return achieved / self.peak.flops if achieved is not None and self.peak else None

    @property
    def higher(self) -> Peak | None:
        """The device's best peak where it is above the one this figure is divided by (an fp32 step on an H200: its
        dense bf16 peak, 15x higher), else None."""
        return self.best if self.best is not None and self.peak is not None and self.best.flops > self.peak.flops \
            else None

    @property
    def of_best(self) -> float | None:
        """The achieved FLOP/s over the device's best peak: how far from the limit, whatever the precision."""
        achieved = self.achieved_flops
        top = self.best or self.peak
        return achieved / top.flops if achieved is not None and top is not None else None

    @property
    def far(self) -> bool:
        """Under :data:`HINT_BELOW` of the best peak the device offers (55% of an H200's fp32 peak is far)."""
        return self.of_best is not None and self.of_best < HINT_BELOW

    @property
    def higher_text(self) -> str | None:
        """``bf16's dense peak is 15x higher``, where the device offers a higher peak than this figure's."""
        h = self.higher
        if h is None or self.peak is None:
            return None
        return f"{h.precision}'s {h.name.removesuffix(h.precision + ' peak')}peak is {peaks.times(h, self.peak)} higher"

    @property
    def peak_named(self) -> str | None:
        """The peak it is divided by, ``this H200's dense bf16 peak, 989 TFLOP/s``; else why there is no MFU."""
        return self.missing if self.missing or self.peak is None else self.peak.text()

    @property
    def peak_text(self) -> str:
        """``17% of this H200's dense bf16 peak, 989 TFLOP/s``, or why there is no MFU."""
        if self.mfu is None or self.peak is None:
            return self.missing or "-"
        return f"{percent(self.mfu)} of {self.peak.text()}"

    def to_dict(self) -> dict[str, Any]:
        return {"trial": self.number, "defaults": self.defaults, "precision_class": self.precision,
                "flops_per_sample": self.flops_per_sample, "samples_per_s": self.samples_per_s,
                "achieved_flops": self.achieved_flops, "peak_flops": self.peak_flops,
                "peak": self.peak.to_dict() if self.peak else None, "mfu": self.mfu, "missing": self.missing,
                "text": self.peak_text,
                # the device's best peak where it is higher (an fp32 step: the 16-bit one), and the share of it
                "higher_peak": self.higher.to_dict() if self.higher else None, "higher_text": self.higher_text,
                "mfu_of_best_peak": self.of_best if self.mfu is not None else None}


@dataclass(frozen=True)
class Hint:
    """Something that usually closes the gap to the peak and that the study did not try: a knob's value, and why."""

    knob: str
    value: str  # as a user sets it (``reduce-overhead``, ``bf16``, ``>128``)
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"knob": self.knob, "value": self.value, "text": self.text}


@dataclass(frozen=True)
class Efficiency:
    """A configuration's MFU and the defaults' (each against its own, named peak), the words every view shows, and
    the hints (empty unless the configuration is under :data:`HINT_BELOW` of the best peak its device offers)."""

    device: str | None
    figure: Figure | None  # the configuration rated (the recommendation unless another was asked for)
    baseline: Figure | None
    hints: list[Hint] = field(default_factory=list)
    text: str = ""
    #: the rated configuration's energy per sample (:func:`autotune.evidence.energy.energy`), shown beside its MFU
    energy: Energy | None = None

    @property
    def mfu(self) -> float | None:
        return self.figure.mfu if self.figure else None

    @property
    def achieved_flops(self) -> float | None:
        return self.figure.achieved_flops if self.figure else None

    @property
    def peak_flops(self) -> float | None:
        return self.figure.peak_flops if self.figure else None

    @property
    def joules_per_sample(self) -> float | None:
        return self.energy.joules_per_sample if self.energy else None

    @property
    def peak(self) -> Peak | None:
        """The peak :attr:`mfu` is a fraction of (device, precision, FLOP/s), None where there is none."""
        return self.figure.peak if self.figure else None

    @property
    def peak_text(self) -> str:
        return self.figure.peak_text if self.figure else self.text

    def of(self, number: int | None) -> Figure | None:
        """The figure of trial ``number`` (the rated configuration's or the defaults'), None for another."""
        return next((f for f in (self.figure, self.baseline) if f is not None and f.number == number), None)

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "text": self.text, "mfu": self.mfu, "achieved_flops": self.achieved_flops,
                "peak_flops": self.peak_flops, "peak_text": self.peak_text,
                "recommended": self.figure.to_dict() if self.figure else None,
                "baseline": self.baseline.to_dict() if self.baseline else None,
                "hint_below": HINT_BELOW, "hints": [h.to_dict() for h in self.hints]}


def efficiency(study: StoredStudy, number: int | None = None) -> Efficiency:
    """How close configuration ``number`` (default: the recommendation, as every view shows it) and the defaults run
    to the peak of the study's device, in figures and words (see the module docstring)."""
    ev = evidence_of(study)
    number = ev.recommended() if number is None else number
    rated = figure(study, number) if number is not None else None
    if rated is None:
        return Efficiency(_device(study)[0], None, None,
                          text="no recommendation (yet) to set against the hardware's peak")
    base = figure(study, ev.baseline.number) if ev.baseline is not None else None
    name = _device(study)[0]
    hints = _hints(study, rated, name) if rated.mfu is not None and rated.far else []
    return Efficiency(name, rated, base, hints, _text(rated, base, hints), energy(study, rated.number))


def rated(study: StoredStudy, verdict: Verdict | None = None) -> Verdict:
    """The verdict (``verdict``, default the study's) with its recommendation's MFU, the peak it is a fraction of named
    (device, precision, FLOP/s), and its energy per sample: what ``status --json``, the export and ``tune()``'s result
    carry as the verdict, the figures :func:`efficiency` and :func:`autotune.evidence.energy.energy` compute."""
    verdict = evidence_of(study).verdict() if verdict is None else verdict
    eff = efficiency(study)
    if eff.figure is None:
        return verdict
    return replace(verdict, mfu=mfu_of(eff.figure), energy=eff.energy.to_dict() if eff.energy else None)


def mfu_of(f: Figure) -> dict[str, Any]:
    """A configuration's MFU as the verdict and the export carry it: the figure, the peak named (device, precision,
    FLOP/s) or why there is none, and the device's higher peak where there is one."""
    return {"trial": f.number, "mfu": f.mfu, "achieved_flops": f.achieved_flops,
            "device": f.peak.device if f.peak else None, registry.PRECISION.name: f.precision,
            "peak_flops": f.peak_flops, "peak": f.peak_named, "text": f.peak_text,
            "higher_peak": f.higher.to_dict() if f.higher else None, "higher_text": f.higher_text,
            "missing": f.missing}


def hardware_line(eff: Efficiency) -> str:
    """The line ``status`` and ``run`` print after the verdict: the MFU's words, then the energy beside them
    (``energy 0.42 J/sample (...)``, or ``no energy figure (no energy counter: CPU)``)."""
    if eff.energy is None:
        return eff.text
    used = (f"energy {eff.energy.text}" if eff.energy.joules_per_sample is not None
            else f"no energy figure ({eff.energy.text})")
    return f"{eff.text}; {used}" if eff.text else used


def figure(study: StoredStudy, number: int) -> Figure | None:
    """One measured configuration's MFU against its named peak (what :func:`efficiency` says of the recommendation
    and the defaults, for a view that shows it for every configuration); None for a trial that measured none."""
    ev = evidence_of(study)
    c = ev.configs.get(number)
    if c is None:
        return None
    name, cpu = _device(study)
    trial = study.trial(number)
    return _figure(number, c.is_baseline, c.config.get(PRECISION),
                   (trial.result if trial is not None else {}).get("flops_per_sample"), ev.samples_per_s(number),
                   name, cpu)


def of_result(result: Mapping[str, Any], device_name: str | None) -> Figure:
    """One measurement's MFU against its named peak, from a trial's result alone (``autotune measure``, which has no
    study): the same computation as :func:`figure`, on the result's own samples/s."""
    cpu = str(result.get("device") or "cpu").split(":")[0] == "cpu"
    config = result.get("config") or {}
    return _figure(-1, False, config.get(PRECISION), result.get("flops_per_sample"), result.get("samples_per_s"),
                   device_name, cpu)


def _figure(number: int, defaults: bool, precision: Any, flops_per_sample: Any, samples_per_s: float | None,
            name: str | None, cpu: bool) -> Figure:
    flops = _positive(flops_per_sample)
    cls = peaks.precision_class(precision)
    peak = None if cpu else peaks.peak(name, cls)
    missing = None
    if flops is None:
        missing = (f"no FLOP count stored for #{number} (its trial counted none)" if number >= 0
                   else "no FLOP count (the trial counted none)")
    elif peak is None:
        missing = peaks.missing(name, cls, cpu=cpu)
    return Figure(number, defaults, cls, flops, samples_per_s, peak, missing, None if cpu else peaks.best(name))


def _device(study: StoredStudy) -> tuple[str | None, bool]:
    """The study's device name (its fingerprint's) and whether it is a CPU."""
    fingerprint = study.fingerprint if isinstance(study.fingerprint, Mapping) else {}
    kind = fingerprint.get("device_type") or str(study.device or "").split(":")[0]
    return fingerprint.get("device_name") or None, kind == "cpu"


# ---------------------------------------------------------------- the words


def percent(mfu: float) -> str:
    """``17%``, ``4.2%``: whole percents from 10% up."""
    return f"{100 * mfu:.0f}%" if 100 * mfu >= 9.95 else f"{100 * mfu:.1f}%"


def _at(f: Figure, same_peak_as: Figure | None = None) -> str:
    """``17% of this H200's dense bf16 peak (989 TFLOP/s)``; against the peak already named: ``55% of the same
    peak``, or ``55% of its fp32 peak (66.9 TFLOP/s)``. Against a peak below the best the device offers, and no
    figure before it named that one: ``55% of this H200's fp32 peak (66.9 TFLOP/s; bf16's dense peak is 15x
    higher)``."""
    assert f.mfu is not None and f.peak is not None
    named_best = same_peak_as is not None and same_peak_as.peak is not None and same_peak_as.higher is None
    higher = f"; {f.higher_text}" if f.higher_text and not named_best else ""
    if same_peak_as is not None and same_peak_as.peak is not None:
        whose = ("the same peak" if same_peak_as.peak == f.peak
                 else f"its {f.peak.name} ({peaks.tflops(f.peak.flops)}{higher})")
    else:
        source = f"; {f.peak.source}" if f.peak.source else ""
        whose = f"this {f.peak.device}'s {f.peak.name} ({peaks.tflops(f.peak.flops)}{source}{higher})"
    over = (" (over 100%: PyTorch's fp32 defaults run cuDNN's convolutions in TF32)"
            if f.mfu > 1 and f.precision == "fp32" else "")
    return f"{percent(f.mfu)} of {whose}{over}"


def _computes(f: Figure) -> str:
    """``#9 computes 2.16 TFLOP/s (3.60 GFLOP a sample)``."""
    who = f"the defaults (#{f.number}) compute" if f.defaults else f"#{f.number} computes"
    assert f.flops_per_sample is not None
    return f"{who} {format_flops(f.achieved_flops)}/s ({format_flops(f.flops_per_sample)} a sample)"


def _text(rated: Figure, base: Figure | None, hints: list[Hint]) -> str:
    """The line every view shows: the rated configuration, then the defaults, then the hints."""
    who = f"the defaults (#{rated.number}) run" if rated.defaults else f"#{rated.number} runs"
    if rated.mfu is not None:
        parts = [f"{who} at {_at(rated)}"]
        if base is not None and base is not rated and base.number != rated.number:
            parts.append(f"the defaults (#{base.number}) at {_at(base, rated)}" if base.mfu is not None
                         else f"the defaults (#{base.number}): {base.missing}")
        text = "; ".join(parts)
    elif rated.flops_per_sample is None:
        text = rated.missing or ""
    else:  # a FLOP count, no peak: what it computes, and why there is no MFU
        text = _computes(rated)
        if base is not None and base.number != rated.number and base.achieved_flops is not None:
            text += f", the defaults {format_flops(base.achieved_flops)}/s"
        text += f"; no MFU: {rated.missing}"
    if hints:
        text += (f"; under {percent(HINT_BELOW)} of the best peak, what usually closes the gap and this study did not "
                 "try: "
                 + "; ".join(h.text for h in hints))
    return text


# ---------------------------------------------------------------- what closes the gap


def _hints(study: StoredStudy, rated: Figure, device_name: str | None) -> list[Hint]:
    """What usually brings a step closer to the peak, of what the study's trials never tried (any outcome)."""
    ev = evidence_of(study)
    config = ev.configs[rated.number].config
    tried = [dict(t.config or t.params) for t in study.trials if (t.config or t.params)]
    out: list[Hint] = []
    larger = _larger_batch(study, config, ev.baseline.config if ev.baseline else None, tried, rated.number)
    if larger is not None:
        out.append(larger)
    if not _values(tried, COMPILE) & set(CUDA_GRAPHS):
        out.append(Hint(COMPILE, "reduce-overhead", "CUDA graphs (compile=reduce-overhead), where launching the "
                                                   "step's kernels holds the GPU back"))
    sixteen = peaks.sixteen_bit(device_name)
    if (sixteen and rated.precision in ("fp32", "tf32") and not _values(tried, PRECISION) & {"bf16", "fp16"}
            and (p16 := peaks.peak(device_name, sixteen)) is not None):
        out.append(Hint(PRECISION, sixteen, f"{sixteen} autocast (precision={sixteen}): {sixteen}'s "
                                            f"{p16.name.removesuffix(sixteen + ' peak')}peak is "
                                            f"{peaks.times(p16, rated.peak)} higher ({peaks.tflops(p16.flops)})"
                        if rated.peak is not None else f"{sixteen} autocast (precision={sixteen})"))
    return out


def _larger_batch(study: StoredStudy, config: Mapping[str, Any], defaults: Mapping[str, Any] | None,
                  tried: list[dict[str, Any]], number: int) -> Hint | None:
    """A batch above every one tried, when the search never went above the defaults' or the configuration is at
    the top of what it tried, and the study's batch ceiling does not say a larger one runs out of memory."""
    batch = knobs.BATCH_KNOB
    ours, theirs = _int(config.get(batch)), _int((defaults or {}).get(batch))
    sizes = [b for b in (_int(c.get(batch)) for c in tried) if b is not None]
    if ours is None or not sizes:
        return None
    top = max(sizes)
    ceiling = study.batch_ceiling if isinstance(study.batch_ceiling, Mapping) else {}
    limit = _int(ceiling.get(batch))
    if ceiling.get("limit") in (Outcome.OOM, MAX_MEMORY) and limit is not None and ours >= limit:
        return None  # the ceiling probe found the next batch up does not fit
    if theirs is not None and top <= theirs:
        why = f"no batch above the defaults' {theirs} was tried"
    elif ours >= top:
        why = f"#{number}'s {ours} is the largest tried"
    else:
        return None
    return Hint(batch, f">{top}", f"a larger batch ({batch} above {top}: {why})")


def _values(configs: Iterable[Mapping[str, Any]], knob: str) -> set[Any]:
    return {c.get(knob) for c in configs if knob in c}


def _int(x: Any) -> int | None:
    return int(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _positive(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if x > 0 and x == x and x != float("inf") else None
