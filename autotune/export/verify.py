"""Does an exported claim still hold here? The configuration and its defaults measured again, round by round.

``autotune verify best.json`` (and :func:`autotune.verify`) reads an export (:mod:`autotune.export.document`: the
knobs, the workload, the defaults it was measured against, its speed-up with a 90% interval and the
fingerprint of the machine that measured it), then measures the defaults and the exported configuration
again on this machine, each in a fresh process, interleaved, the order alternating by round, and says:

- ``holds``: the speed-up measured here is at least the claim's lower bound, or short of it by no more than the
  noise (its interval reaches the bound; the line says so);
- ``weaker``: below it beyond the noise (the interval wholly below the bound), but still faster than the defaults
  beyond the noise ("weaker: 1.90x (1.80-2.00), claimed 3.08x (2.87-3.31)");
- ``gone``: not faster than the defaults beyond the noise;
- ``busy``: weaker or gone, but measured while other processes used the machine: the evidence cannot tell
  a lost gain from a loaded machine, so the re-check needs a quiet one;
- ``failed``: a measurement did not finish (out of memory, an error, a timeout): its outcome is named.

Every figure comes from the functions the study's own figures come from: each measurement is a
:class:`autotune.evidence.Measured`'s, labelled with its round; :class:`autotune.evidence.Load` says how busy
the machine was and leaves out of the claim what was taken while it was much busier than during the
defaults' (the study's rule); the noise is :func:`autotune.evidence.stats.pooled_noise` over both configurations, and
the speed-up :func:`autotune.evidence.stats.ratio`, paired on rounds. Nothing here selected the configuration, so
none of its measurements is dropped (a study drops a configuration's first one, which got it into the race).

It stops early once the interval is clear of the claim's lower bound, on either side, after round 2 or any
later one; each such look is a chance to stop on a lucky round, so the interval is adjusted for the looks
``rounds`` allows, as the race's is (``looks``). What changed since the claim was measured (torch, the CPU,
the device, the workload's arguments and what its probe reports, autotune itself) is listed every time, not
only when the claim fails: it is what a user reads after upgrading PyTorch.

The measuring is injected (``measure``: one configuration in a fresh process, :class:`autotune.trial.runner.Runner`'s
by default, built by :func:`runner_for`), so tests run the decision against fakes of known truth.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from autotune.store.plans import RoundId
from autotune import knobs
from autotune._version import __version__
from autotune.evidence import stats
from autotune import result as R
from autotune.errors import ConfigError, DeviceError, SpecError, WorkloadError
from autotune.evidence import Measured, Load
from autotune.evidence.busy import leave_out
from autotune.evidence import numerics_answer as NU
from autotune.request import DEFAULT_TRIAL_TIMEOUT_S, VERIFY_ROUNDS, WorkloadSpec, option, pickled_name
from autotune.evidence.stats import Measurement, Ratio
from autotune.store.records import Role

# an export whose speedup is a claim with its interval (autotune.export.document.SCHEMA)
SCHEMAS = ("autotune.config/2",)
MIN_ROUNDS, DEFAULT_ROUNDS, MAX_ROUNDS = VERIFY_ROUNDS  # the noise, and so an interval, needs two measurements of each
HOLDS, WEAKER, GONE, BUSY, FAILED = "holds", "weaker", "gone", "busy", "failed"

#: ``measure(config)``: one configuration measured in a fresh process (what a study's Bench re-measures with).
Measure = Callable[[Mapping[str, Any]], R.TrialResult]
#: Told after each measurement: (round, "defaults" or "configuration", its result).
OnMeasure = Callable[[int, str, R.TrialResult], None]

DEFAULTS, CANDIDATE = "defaults", "configuration"


# ---------------------------------------------------------------- the claim, read from an export


@dataclass(frozen=True)
class Claim:
    """What an export claims: this configuration is ``speedup`` times as fast as ``defaults`` on the machine of
    ``fingerprint``, for the workload of ``spec``."""

    source: str  # the file, or "the document" when given as data
    knobs: dict[str, Any]
    defaults: dict[str, Any]  # the study's baseline (PyTorch's defaults, the workload's batch, a space's fixed values)
    spec: WorkloadSpec
    speedup: Ratio
    device: str | None = None
    global_batch: int | None = None
    fingerprint: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    study: dict[str, Any] = field(default_factory=dict)
    version: str | None = None
    numerics: dict[str, Any] | None = None  # the study's numerics check of this configuration, when one ran

    @property
    def low(self) -> float:
        assert self.speedup.low is not None
        return self.speedup.low

    def what(self) -> str:
        """The configuration in words: its trial and study, and the knobs it changes from the defaults."""
        changed = {k: v for k, v in self.knobs.items() if self.defaults.get(k, knobs.defaults().get(k)) != v}
        where = (f"#{self.study['trial']} of study {self.study['name']!r}" if self.study.get("name")
                 else "the configuration")
        said = " ".join(f"{k}={knobs.KNOBS[k].format(v)}" for k, v in changed.items())
        return f"{where} ({said or 'the defaults'})"


def _bad(source: str, problem: str) -> ConfigError:
    return ConfigError(f"{source}: {problem}")


def read(export: str | Path | Mapping[str, Any]) -> Claim:
    """The claim of an export: a file written by ``autotune export STUDY -o FILE`` (or its document as data).
    What cannot be verified is refused in one line that says why (ConfigError)."""
    if isinstance(export, Mapping):
        source, doc = "the document", export
    else:
        source = str(export)
        try:
            doc = json.loads(Path(export).read_text())
        except FileNotFoundError:
            raise _bad(source, "no such file") from None
        except IsADirectoryError:
            raise _bad(source, "is a folder; name an export written by `autotune export STUDY -o FILE`") from None
        except OSError as exc:
            raise _bad(source, f"cannot read it: {exc.strerror or exc}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise _bad(source, f"not JSON ({exc}); name an export written by `autotune export STUDY -o FILE`") from None
    if not isinstance(doc, Mapping) or not str(doc.get("schema", "")).startswith("autotune.config/"):
        found = doc.get("schema") if isinstance(doc, Mapping) else type(doc).__name__
        raise _bad(source, f"not an autotune export (expected schema {SCHEMAS[-1]!r}, found {found!r}); write one "
                           "with `autotune export STUDY -o FILE`")
    if doc["schema"] not in SCHEMAS:
        raise _bad(source, f"schema {doc['schema']!r} carries no claim with an interval to verify (expected "
                           f"{SCHEMAS[-1]!r}); export the study again with this autotune")
    speedup = doc.get("speedup")
    if not isinstance(speedup, Mapping) or not isinstance(speedup.get("estimate"), (int, float)):
        raise _bad(source, "holds no speed-up claim (its study measured no defaults to compare with); "
                           "nothing to verify")
    if not all(isinstance(speedup.get(k), (int, float)) and speedup[k] > 0 for k in ("low", "high")):
        raise _bad(source, f"its claim {float(speedup['estimate']):.2f}x has no interval (its study measured no noise "
                           f"between processes); nothing to verify it against: run the study with a race "
                           f"({option('confirm')}) and export it again")
    workload = doc.get("workload")
    if not isinstance(workload, Mapping) or not workload.get("model"):
        raise _bad(source, "names no workload to measure")
    if pickled_name(workload["model"]) is not None or pickled_name(workload.get("data")) is not None:
        raise _bad(source, f"its workload is a Python object ({workload['model']}) that an export does not carry; "
                           "verify it from Python, where the object is")
    try:
        values = knobs.validate_config(doc.get("knobs") or {})
        base = knobs.validate_config((doc.get("baseline") or {}).get("knobs") or {})
        spec = WorkloadSpec.from_dict(workload)
    except (knobs.KnobError, SpecError, KeyError, TypeError, ValueError) as exc:
        raise _bad(source, f"bad export: {exc}") from None
    trial, base_trial = (doc.get("study") or {}).get("trial"), (doc.get("baseline") or {}).get("trial")
    if values == base or not doc.get("knobs") or (trial is not None and trial == base_trial):
        raise _bad(source, "its configuration is the defaults themselves (the study found no gain beyond the "
                           "noise); there is no speed-up to verify")
    claimed = Ratio(float(speedup["estimate"]), float(speedup["low"]), float(speedup["high"]),
                    int(speedup.get("processes") or 1), int(speedup.get("baseline_processes") or 1),
                    bool(speedup.get("paired")), float(speedup.get("level") or stats.LEVEL))
    return Claim(source, values, base, spec, claimed, doc.get("device"), doc.get("global_batch"),
                 dict(doc.get("fingerprint") or {}), dict(doc.get("context") or {}), dict(doc.get("study") or {}),
                 doc.get("autotune_version"),
                 dict(doc["numerics"]) if isinstance(doc.get("numerics"), Mapping) else None)


# ---------------------------------------------------------------- what changed since


def changes(claim: Claim, here: Mapping[str, Any], *, device: str, spec: WorkloadSpec | None = None,
            version: str = __version__) -> list[str]:
    """What differs between where the claim was measured and here, one line each: the machine's identity
    (:func:`autotune.machine.identity.differences`: torch, CUDA, the CPU, the device), the device, the workload (its
    spec, and what its probe reports now: task, input rank, optimizer, ...), autotune itself. ``here``: the
    workload's probe on this machine (its ``fingerprint`` and ``context``)."""
    from autotune.machine.identity import differences

    out = differences(claim.fingerprint, dict(here.get("fingerprint") or {})) if claim.fingerprint else []
    if claim.device is not None and claim.device != device:
        out.append(f"device: {claim.device} (stored) vs {device} (here)")
    now = (spec or claim.spec).to_dict(payload=False)
    then = claim.spec.to_dict(payload=False)
    for key in then:
        if then[key] != now[key]:
            out.append(f"workload {key}: {then[key]} (stored) vs {now[key]} (here)")
    context = dict(here.get("context") or {})
    for key, value in claim.context.items():
        if key in context and context[key] != value and key not in ("device_type", "cpu_count"):  # said above
            out.append(f"workload context {key}: {value} (stored) vs {context[key]} (here)")
    if claim.version and claim.version != version:
        out.append(f"autotune: {claim.version} (stored) vs {version} (here)")
    return out


# ---------------------------------------------------------------- the verdict


@dataclass
class Verification:
    """The outcome: ``verdict`` (holds, weaker, gone, busy, failed), the speed-up measured here (None when a
    measurement failed first), the claim, the rounds measured, what changed, how busy the machine was."""

    verdict: str
    claim: Claim
    measured: Ratio | None
    rounds: int
    changed: list[str]
    load: Load | None
    measurements: dict[str, list[Measurement]]
    failure: str | None = None
    not_applicable: dict[str, str] = field(default_factory=dict)  # exported knobs that do not apply here, and why
    numerics: NU.Check | None = None  # the numerics checked again here, when the export carries a check

    @property
    def holds(self) -> bool:
        return self.verdict == HOLDS

    @property
    def numerics_changed(self) -> bool:
        """The study found the numerics to hold, and here they differ (or the other way round)."""
        then = (self.claim.numerics or {}).get("state")
        return (self.numerics is not None and then in (NU.HOLD, NU.DIFFER)
                and self.numerics.state in (NU.HOLD, NU.DIFFER) and self.numerics.state != then)

    @property
    def exit_code(self) -> int:
        """0 when the claim holds and its numerics, checked again, hold where the study found them to."""
        return 0 if self.holds and not (self.numerics_changed and self.numerics is not None
                                        and self.numerics.state == NU.DIFFER) else 1

    def text(self) -> str:
        """The verdict in one line."""
        claimed = f"claimed {self.claim.speedup.text()}"
        if self.verdict == FAILED:
            return f"failed: {self.failure}; {claimed}"
        assert self.measured is not None
        measured = (f"{self.measured.text()}{stats.interval_label(self.measured.to_dict())}, {claimed}, "
                    f"{self.rounds} rounds")
        if self.verdict == HOLDS:
            short = (f"; below the claim's {self.claim.low:.2f}x, but within the noise (more rounds tell them "
                     f"apart: --rounds)" if within_noise(self.measured, self.claim) else "")
            return f"holds: {measured}{short}"
        if self.verdict == WEAKER:
            return f"weaker: {measured}"
        if self.verdict == GONE:
            return f"gone: {measured} (not faster than the defaults beyond the noise)"
        seen = GONE if self.measured.includes_one() or self.measured.below_one() else WEAKER
        return (f"busy: {measured}; it looked {seen}, but other processes used the machine meanwhile "
                f"({self.load.text() if self.load else 'load unknown'}): re-check on a quiet machine")

    def lines(self) -> list[str]:
        """What the command prints after the rounds: what changed, the machine's load, the verdict."""
        out = [f"changed since it was measured: {'; '.join(self.changed)}" if self.changed
               else "changed since it was measured: nothing (torch, CPU, device and workload as recorded)"]
        if self.not_applicable:
            out.append("not applicable here, so measured without: "
                       + "; ".join(f"{k}: {why}" for k, why in self.not_applicable.items()))
        if self.load is not None and self.verdict != BUSY:
            out.append(self.load.text())
        if self.numerics is not None:
            then = (self.claim.numerics or {}).get("text")
            out.append(f"{self.numerics.text()} (checked again here; the study's: {then})" if self.numerics_changed
                       else f"{self.numerics.text()} (checked again here, as the study found)")
        out.append(self.text())
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "text": self.text(),
            "measured": self.measured.to_dict() if self.measured is not None else None,
            "claimed": self.claim.speedup.to_dict(),
            "rounds": self.rounds,
            "changed": list(self.changed),
            "load": self.load.to_dict() if self.load is not None else None,
            "failure": self.failure,
            "not_applicable": dict(self.not_applicable),
            "numerics": self.numerics.to_dict() if self.numerics is not None else None,
            "numerics_claimed": (self.claim.numerics or {}).get("state"),
            "measurements": {k: [{"round": r, "samples_per_s": v} for r, v in ms]
                             for k, ms in self.measurements.items()},
            "export": self.claim.source,
            "knobs": dict(self.claim.knobs),
            "defaults": dict(self.claim.defaults),
        }


def check_rounds(rounds: int) -> int:
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not MIN_ROUNDS <= rounds <= MAX_ROUNDS:
        raise ConfigError(f"rounds: must be a whole number from {MIN_ROUNDS} to {MAX_ROUNDS} (an interval needs two "
                          f"measurements of each), not {rounds!r}")
    return rounds


def _figures(measured: Mapping[str, Measured], cores: int, looks: int) -> tuple[Ratio, Load]:
    """The speed-up and the load, as a study computes them from its configurations' measurements."""
    base, cand = measured[DEFAULTS], measured[CANDIDATE]
    load = Load.of(measured.values(), base, {"cpu_count": cores})
    leave_out(measured.values(), load)
    noise = stats.pooled_noise([v for _, v in c.claim] for c in measured.values())
    return stats.ratio(cand.claim, base.claim, noise, looks=looks), load


def decide(measured: Ratio, claim: Claim, load: Load) -> str:
    """holds (the estimate reaches the claim's lower bound, or falls short of it by no more than the noise: faster
    than the defaults beyond the noise, with the interval reaching the bound), weaker (the interval wholly below the
    bound, but beyond the noise faster than the defaults), gone (not faster beyond the noise); busy instead of weaker
    or gone on a busy machine. A true claim measured again falls below its own lower bound by chance, often where the
    claim's interval is narrower than the noise of a few rounds here, and the CI step this is for would fail on the
    noise."""
    if measured.estimate >= claim.low or within_noise(measured, claim):
        return HOLDS
    if load.was_busy:
        return BUSY
    return WEAKER if measured.above_one() else GONE


def within_noise(measured: Ratio, claim: Claim) -> bool:
    """Below the claim's lower bound, but not beyond the noise: faster than the defaults, the interval reaching it."""
    return (measured.estimate < claim.low and measured.has_interval and measured.above_one()
            and measured.high >= claim.low)  # type: ignore[operator]


def settled(measured: Ratio, claim: Claim) -> bool:
    """The interval is clear of the claim's lower bound, on either side (the sequential stop)."""
    return measured.has_interval and (measured.low >= claim.low or measured.high < claim.low)  # type: ignore[operator]


def verify(claim: Claim, measure: Measure, *, here: Mapping[str, Any], device: str, rounds: int = DEFAULT_ROUNDS,
           spec: WorkloadSpec | None = None, on_measure: OnMeasure | None = None) -> Verification:
    """Measure the defaults and the claim's configuration in ``rounds`` rounds at most (each in a fresh process
    through ``measure``, interleaved, the order alternating by round) and decide (see the module docstring).
    ``here``: the workload's probe on this machine (``fingerprint``, ``context``)."""
    check_rounds(rounds)
    changed = changes(claim, here, device=device, spec=spec)
    cores = int((here.get("fingerprint") or {}).get("cpu_count") or 0) or 1
    configs = {DEFAULTS: claim.defaults, CANDIDATE: claim.knobs}
    taken: dict[str, list[Measurement]] = {DEFAULTS: [], CANDIDATE: []}
    loads: dict[str, dict[str, float]] = {DEFAULTS: {}, CANDIDATE: {}}
    looks = rounds - MIN_ROUNDS + 1  # after round 2 and each later one
    measured: Ratio | None = None
    load: Load | None = None
    done = 0
    dropped: dict[str, str] = {}
    for k in range(1, rounds + 1):
        order = (DEFAULTS, CANDIDATE) if k % 2 else (CANDIDATE, DEFAULTS)
        round_id = RoundId.verify(k)
        for which in order:
            result = measure(configs[which])
            if on_measure is not None:
                on_measure(k, which, result)
            if result.user_error:
                raise WorkloadError((result.error.get("said") or result.error["message"]) if result.error
                                    else "the workload failed")
            if which == CANDIDATE:
                dropped.update(result.not_applicable)
            rate = result.samples_per_s
            if not result.ok or rate is None or not math.isfinite(rate) or rate <= 0:
                why = (result.error or {}).get("message") or "no throughput"
                what = "the exported knobs" if which == CANDIDATE else "the study's baseline"
                return Verification(FAILED, claim, measured, done, changed, load, taken,
                                    failure=f"the {which} ({what}) ended {result.outcome} in round {k}: {why}",
                                    not_applicable=dropped)
            taken[which].append((round_id, float(rate)))
            other = (result.load or {}).get("other_cores")
            if other is not None:
                loads[which][round_id] = float(other)
        done = k
        if k < MIN_ROUNDS:
            continue
        # As a study holds them: the baseline's claim is its first measurement and its repeats; the configuration's
        # its repeats (a study drops the first one that selected it; here none did, so every round is a repeat).
        configs_now = {
            DEFAULTS: Measured(number=0, role=Role.BASELINE, config=dict(configs[DEFAULTS]), peak_memory_bytes=0,
                             feasible=True, first=taken[DEFAULTS][0], repeats=taken[DEFAULTS][1:],
                             loads=dict(loads[DEFAULTS])),
            CANDIDATE: Measured(number=1, role=Role.VERIFY, config=dict(configs[CANDIDATE]), peak_memory_bytes=0,
                              feasible=True, first=taken[CANDIDATE][0], repeats=list(taken[CANDIDATE]),
                              loads=dict(loads[CANDIDATE])),
        }
        measured, load = _figures(configs_now, cores, looks)
        if settled(measured, claim):
            break
    assert measured is not None and load is not None
    return Verification(decide(measured, claim, load), claim, measured, done, changed, load, taken,
                        not_applicable=dropped)


def recheck_numerics(claim: Claim, numerics: Any) -> NU.Check | None:
    """The export's numerics check run again here (``numerics``: one training in a fresh process,
    :meth:`autotune.trial.runner.Runner.numerics`) with the study's steps, samples per step and seed: an upgrade of
    torch can change the kernels and so the numerics. None when the export carries no check."""
    from autotune.trial import trainings

    then = claim.numerics or {}
    if then.get("state") not in (NU.HOLD, NU.DIFFER) or not then.get("steps") or not then.get("samples_per_step"):
        return None
    changed = {k: v for k, v in claim.knobs.items() if claim.defaults.get(k, knobs.defaults().get(k)) != v}
    record = {"number": claim.study.get("trial"), "mode": NU.WARN, "steps": int(then["steps"]),
              "samples_per_step": int(then["samples_per_step"]), "seed": int(then.get("seed") or 0),
              "changes": changed, "config": dict(claim.knobs), "defaults": dict(claim.defaults), "runs": []}
    return NU.judge(trainings.check(numerics, record))


# ---------------------------------------------------------------- measuring on this machine


def with_arguments(claim: Claim, model_args: Mapping[str, Any] | None) -> WorkloadSpec:
    """The claim's workload, with ``model_args`` set over its own (the arguments a user changed since)."""
    if not model_args:
        return claim.spec
    return replace(claim.spec, model_args=tuple(sorted({**dict(claim.spec.model_args), **dict(model_args)}.items())))


def runner_for(spec: WorkloadSpec, claim: Claim, *, device: str, quick: bool, trial_timeout_s: float
               ) -> tuple[dict[str, Any], Measure]:
    """The workload's probe on this machine and a ``measure`` that runs one configuration in a fresh process, as
    the study's re-measurements do (:meth:`autotune.trial.protocol.Settings.lean`: no profile, no FLOP count).
    A workload that cannot be built raises WorkloadError (or SpecError) in one line."""
    from autotune.trial.protocol import Settings
    from autotune.trial.runner import Runner

    settings = (Settings.quick() if quick else Settings()).lean()
    runner = Runner(spec, device=device, timeout_s=trial_timeout_s, settings=settings, global_batch=claim.global_batch)
    probe = runner.probe()
    ctx = knobs.Context.from_dict(probe["context"])
    try:
        knobs.validate_config(claim.knobs, ctx)
        knobs.validate_config(claim.defaults, ctx)
    except knobs.KnobError as exc:
        changed = changes(claim, probe, device=device, spec=spec)
        raise ConfigError(f"{claim.source}: its knobs cannot run here: {exc}"
                          + (f" (changed since it was measured: {'; '.join(changed)})" if changed else "")) from None

    def measure(config: Mapping[str, Any]) -> R.TrialResult:
        return runner.measure(config)

    measure.numerics = runner.numerics  # type: ignore[attr-defined]  # the numerics check's trainings, on this runner
    return probe, measure


# ---------------------------------------------------------------- the whole check, as both faces run it


def opening(claim: Claim) -> str:
    return (f"verifying {claim.source}: {claim.what()}, claimed {claim.speedup.text()}"
            f"{stats.interval_label(claim.speedup.to_dict())} over its defaults")


def measurement_line(k: int, which: str, result: R.TrialResult) -> str:
    from autotune.units import format_rate

    if result.ok and result.samples_per_s:
        what = f"{format_rate(result.samples_per_s)} samples/s"
    else:
        what = result.outcome
    other = (result.load or {}).get("other_cores")
    busy = f" (other processes used {other:.1f} cores)" if other is not None and other >= 0.05 else ""
    return f"round {k}: {which:<13} {what}{busy}"


def _device_for(claim: Claim, device: str | None) -> str:
    """``device`` when given, else the export's where this machine has it, else this machine's default."""
    from autotune.machine.hardware import check_device, default_device

    if device is not None:
        return check_device(str(device))
    if claim.device is not None:
        try:
            return check_device(claim.device)
        except DeviceError:  # a CUDA export checked on a machine without that device: this one's
            pass
    return default_device()


def run(export: str | Path | Mapping[str, Any], *, rounds: int = DEFAULT_ROUNDS, device: str | None = None,
        quick: bool = False, trial_timeout: float | str = DEFAULT_TRIAL_TIMEOUT_S,
        model_args: Mapping[str, Any] | None = None, echo: Callable[[str], Any] | None = None) -> Verification:
    """Read the export, build its workload here, measure and decide (``autotune verify`` and
    :func:`autotune.verify`). ``echo``: told the opening line and one line per measurement.
    Bad input raises one AutotuneError (the faces word it); a verdict other than ``holds`` is an outcome."""
    from autotune.request import FIELDS

    claim = read(export)
    check_rounds(rounds)
    timeout = FIELDS["trial_timeout_s"].read(trial_timeout)
    FIELDS["trial_timeout_s"].check(timeout)
    dev = _device_for(claim, device)
    spec = with_arguments(claim, model_args)
    if echo is not None:
        echo(opening(claim))
    here, measure_one = runner_for(spec, claim, device=dev, quick=quick, trial_timeout_s=timeout)
    told = (lambda k, which, res: echo(measurement_line(k, which, res))) if echo is not None else None
    outcome = verify(claim, measure_one, here=here, device=dev, rounds=rounds, spec=spec, on_measure=told)
    trains = getattr(measure_one, "numerics", None)
    if trains is not None and outcome.verdict != FAILED and claim.numerics:
        if echo is not None:
            echo(f"numerics: the study's check ({claim.numerics.get('steps')} steps) run again here")
        outcome.numerics = recheck_numerics(claim, trains)
    return outcome
