"""The simulated GPU's runner and clock: what a study's trials cost and measure there, in simulated time.

:class:`SimulatedRunner` answers as :class:`autotune.trial.runner.Runner` does (``probe``, ``measure``,
``measure_together``, ``numerics``, ``settings``), with the same contract on time: a process is not started past its
phase's deadline and is stopped at it (``out_of_time``); a compiled configuration's first step runs at most
:func:`autotune.trial.runner.first_step_limit` (the compile limit, or what is left: then ``slower``); steps after
the first past ``limit_s`` are ``slower``; the trial timeout kills a process (``timeout``). Every second a process
takes (its start, the workload's build, the compilation, the warm-up, the windows the settings ask for, the FLOP count
and the profile, its exit) advances :class:`SimulatedClock`, which the study reads through :mod:`autotune.clock`.
Its figures are the device's truth (:mod:`.device`) times each process's own noise, seeded: the same seed gives the
same study.
"""

from __future__ import annotations

import math
import random
from typing import Any, Mapping, Sequence

from autotune import result as R
from autotune.testing.simulated import device as D
from autotune.trial.protocol import Settings
from autotune.trial.runner import DEADLINE_GRACE_S, compile_stopped, first_step_limit
from autotune.request import DEFAULT_TRIAL_TIMEOUT_S

EPOCH = 1_790_000_000.0  # where a simulated clock starts (late 2026): a plausible stamp for what it writes
STOP_POLL_S = 1.0  # the runner looks at a process's progress once a second: a stop lands up to this late


class SimulatedClock:
    """Time that passes only when a simulated process (or a wait) takes it."""

    def __init__(self, start: float = EPOCH) -> None:
        self.at = float(start)
        self.origin = float(start)

    def time(self) -> float:
        return self.at

    def monotonic(self) -> float:
        return self.at - self.origin

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        self.at += max(0.0, float(seconds))


class SimulatedRunner:
    """A runner of trials on a simulated GPU (see the module's docstring)."""

    def __init__(self, shape: D.Shape, clock: SimulatedClock, seed: int | str = 0, *, timeout_s: float =
                 DEFAULT_TRIAL_TIMEOUT_S, settings: Settings | None = None, compile_limit_s: float | None = None,
                 **_: Any) -> None:
        self.shape, self.device, self.workload = shape, shape.device, shape.workload
        self.clock = clock
        self.rng = random.Random(seed)
        self.timeout_s = timeout_s
        self.settings = settings or Settings()
        self.compile_limit_s = compile_limit_s
        self.level = 0.0  # the machine's drift (noise "drifting"), a random walk per process
        self.processes = 0

    # ------------------------------------------------------------ what a process costs

    def _noise(self, sigma: float) -> float:
        """One process's factor on its configuration's true speed."""
        kind = self.workload.noise
        if kind == "equal":
            sigma = 0.05
        if kind == "heavy":
            t3 = self.rng.normalvariate(0.0, 1.0) / math.sqrt(self.rng.gammavariate(1.5, 2.0) / 3)
            return math.exp(sigma * t3)
        if kind == "drifting":
            self.level += self.rng.normalvariate(0.0, 0.01)
            return math.exp(self.level + self.rng.normalvariate(0.0, sigma))
        return math.exp(self.rng.normalvariate(0.0, sigma))

    def _run(self, seconds: float, deadline: float | None, timeout_s: float) -> tuple[float, bool, bool]:
        """Advance the clock by a process of ``seconds``, stopped at ``deadline`` or its timeout; returns (wall,
        stopped by the deadline, timed out)."""
        self.processes += 1
        now = self.clock.time()
        limit = timeout_s
        if deadline is not None:
            limit = min(limit, max(0.0, deadline - now) + DEADLINE_GRACE_S)
        if seconds <= limit and (deadline is None or now + seconds <= deadline):
            self.clock.advance(seconds)
            return seconds, False, False
        by_deadline = deadline is not None and now + seconds > deadline
        wall = min(limit, max(0.0, deadline - now) + STOP_POLL_S) if by_deadline else limit
        self.clock.advance(wall)
        return wall, by_deadline, not by_deadline

    def _timeline(self, config: Mapping[str, Any], settings: Settings, step: D.Step) -> dict[str, float]:
        w = self.workload
        step_s = step.ms / 1000.0
        first = D.first_step_s(w, config) * math.exp(self.rng.normalvariate(0.0, 0.1))
        warmup = max(settings.min_warmup_s, settings.min_warmup_steps * step_s)
        if str(config.get("compile") or "off") in D.CUDA_GRAPHS:
            warmup += 2 * step_s  # the graphs are recorded in the first steps after the compilation
        return {"start": w.start_s + 0.15 * int(config.get("num_workers") or 0) + w.build_s, "first": first,
                "warmup": warmup, "timed": settings.windows * max(settings.window_s, step_s),
                "flops": 0.5 if settings.count_flops else 0.0,
                "profile": (0.6 + settings.profile_steps * step_s) if settings.profile_steps else 0.0,
                "exit": w.exit_s}

    # ------------------------------------------------------------ the runner's faces

    def probe(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Build the workload once in a (simulated) process: its context, the machine's fingerprint."""
        w = self.workload
        self._run(w.start_s + w.build_s + w.exit_s, None, timeout_s or self.timeout_s)
        context = {"device_type": "cuda", "task": "train", "input_rank": w.input_rank,
                   "torch_version": [2, 11], "cpu_count": self.device.cpu_count,
                   "optimizer_params": ["foreach", "fused"], "compile_supported": True, "cpu_bf16": True,
                   "glibc": True}
        return {"context": context, "fingerprint": self.device.fingerprint(),
                "workload": {"task": "train", "batch_size": w.batch, "model": w.model, "parameters": w.parameters,
                             "dataset_len": 1 << 16}}

    def measure(self, config: Mapping[str, Any], dominators: Any = (), cut_margin: float | None = None,
                settings: Settings | None = None, limit_s: float | None = None, deadline: float | None = None
                ) -> R.TrialResult:
        """One trial of ``config`` in a simulated process (see the module's docstring)."""
        settings = settings or self.settings
        config = dict(config)
        if deadline is not None and self.clock.time() >= deadline:
            return _failure(R.OUT_OF_TIME, "not started: the time its phase may take was spent", 0.0, config)
        w = self.workload
        step = D.step(w, config)
        t = self._timeline(config, settings, step)
        peak = D.peak_memory(w, config)
        if peak > self.device.memory_bytes:  # the first step runs out of memory
            wall, late, _ = self._run(t["start"] + min(t["first"], 2.0) + t["exit"], deadline, self.timeout_s)
            if late:
                return _failure(R.OUT_OF_TIME, "stopped when the time its phase may take ran out", wall, config)
            return _failure(R.OOM, f"CUDA out of memory (simulated): {peak / D.GiB:.1f} GiB needed of "
                            f"{self.device.memory_bytes / D.GiB:.0f} GiB", wall, config, exception="OutOfMemoryError")
        first_limit = first_step_limit(config, self.compile_limit_s, deadline)
        if first_limit is not None and t["first"] > first_limit:
            wall, late, _ = self._run(t["start"] + first_limit + STOP_POLL_S + t["exit"], deadline, self.timeout_s)
            if late:
                return _failure(R.OUT_OF_TIME, "stopped when the time its phase may take ran out (its first step, "
                                "the compilation, had not finished)", wall, config)
            return _failure(R.SLOWER, compile_stopped(wall, first_limit, self.compile_limit_s), wall, config)
        after_first = t["warmup"] + t["timed"] + t["flops"] + t["profile"]
        cut = self._dominated(step, peak, dominators, cut_margin, settings)
        if cut:
            after_first = t["warmup"] + settings.cut_after_windows * max(settings.window_s, step.ms / 1000.0)
        if limit_s is not None and after_first > limit_s:
            wall, late, _ = self._run(t["start"] + t["first"] + limit_s + STOP_POLL_S + t["exit"], deadline,
                                      self.timeout_s)
            outcome = R.OUT_OF_TIME if late else R.SLOWER
            return _failure(outcome, f"stopped after {wall:.0f} s: {limit_s:.0f} s after its first step it had not "
                            "finished", wall, config)
        total = t["start"] + t["first"] + after_first + t["exit"]
        wall, late, timed_out = self._run(total, deadline, self.timeout_s)
        if late:
            return _failure(R.OUT_OF_TIME, "stopped when the time its phase may take ran out", wall, config)
        if timed_out:
            return _failure(R.TIMEOUT, f"the trial ran past its {self.timeout_s:g} s timeout and was killed", wall,
                            config)
        rate = step.samples_per_s * self._noise(step.sigma)
        windows = [rate * math.exp(self.rng.normalvariate(0.0, 0.01))
                   for _ in range(settings.cut_after_windows if cut else settings.windows)]
        return self._result(config, step, peak, windows, t, wall, settings, cut)

    def _dominated(self, step: D.Step, peak: int, dominators: Any, margin: float | None, settings: Settings) -> bool:
        margin = settings.cut_margin if margin is None else margin
        return any(rate >= step.samples_per_s * (1.0 + margin) and mem <= peak for rate, mem in dominators or ())

    def _result(self, config: dict[str, Any], step: D.Step, peak: int, windows: list[float],
                t: Mapping[str, float], wall: float, settings: Settings, cut: bool) -> R.TrialResult:
        w = self.workload
        median = sorted(windows)[len(windows) // 2]
        mean = sum(windows) / len(windows)
        cv = (sum((x - mean) ** 2 for x in windows) / len(windows)) ** 0.5 / mean
        result = R.TrialResult(outcome=R.OK, config=config, samples_per_s=median, samples_per_s_cv=cv,
                               window_samples_per_s=windows, step_time_s=step.batch / median,
                               samples_per_step=step.batch, peak_memory_bytes=peak,
                               memory={"kind": "cuda", "peak_allocated_bytes": peak, "peak_reserved_bytes": peak},
                               time_to_first_step_s=t["first"], warmup_steps=settings.min_warmup_steps,
                               timed_steps=len(windows), wall_s=wall, overhead_s=t["start"] + t["exit"],
                               device="cuda:0", load={"other_cores": 0.0, "cores": self.device.cpu_count},
                               phases_s={k: round(v, 3) for k, v in t.items() if k not in ("start", "exit")})
        if settings.count_flops:
            result.flops_per_sample = w.flops_per_sample
            result.achieved_flops, result.mfu = D.mfu(self.device, w, config, median)
        joules = D.power_w(self.device, step) / median  # a made-up power: the views' energy figure
        result.joules_per_sample = joules
        result.energy = {"joules": joules * median * t["timed"], "seconds": t["timed"], "samples": median * t["timed"],
                         "source": "simulated"}
        if cut:
            result.notes["cut_short"] = True
        return result

    def measure_together(self, configs: Sequence[Mapping[str, Any]], settings: Settings | None = None,
                         unchecked: bool = False, deadline: float | None = None) -> R.PairedResult:
        """Several configurations measured alternately in one simulated process: they share its factor."""
        settings = settings or self.settings
        if deadline is not None and self.clock.time() >= deadline:
            return _paired_out_of_time("not started: the time its phase may take was spent", len(configs), 0.0)
        steps = [D.step(self.workload, c) for c in configs]
        peaks = [D.peak_memory(self.workload, c) for c in configs]
        times = [self._timeline(dict(c), settings, s) for c, s in zip(configs, steps)]
        total = times[0]["start"] + times[0]["exit"] + sum(t["first"] + t["warmup"] + t["timed"] for t in times)
        wall, late, timed_out = self._run(total, deadline, self.timeout_s * max(1, len(configs)))
        if late or timed_out:
            return _paired_out_of_time("stopped when the time its phase may take ran out", len(configs), wall)
        shared = self._noise(max(s.sigma for s in steps))
        arms = []
        for c, s, peak in zip(configs, steps, peaks):
            if peak > self.device.memory_bytes:
                arms.append({"config": dict(c), "outcome": R.OOM})
                continue
            rate = s.samples_per_s * shared * math.exp(self.rng.normalvariate(0.0, 0.01))
            arms.append({"config": dict(c), "outcome": R.OK, "samples_per_s": rate,
                         "window_samples_per_s": [rate] * settings.windows})
        ok = arms[0].get("outcome") == R.OK and any(a.get("outcome") == R.OK for a in arms[1:])
        return R.PairedResult(outcome=R.OK if ok else R.OOM, arms=arms, wall_s=wall,
                              load={"other_cores": 0.0, "cores": self.device.cpu_count})

    def numerics(self, config: Mapping[str, Any], steps: int, samples_per_step: int, seed: int,
                 save_path: str | None = None, references: Sequence[tuple[str, str]] = (),
                 deadline: float | None = None) -> R.NumericsResult:
        """A training run of ``steps`` optimizer steps: a loss curve of known shape, 16 bits a little apart."""
        if deadline is not None and self.clock.time() >= deadline:
            return _numerics_failure("not started: the time its phase may take was spent", 0.0)
        w = self.workload
        step = D.step(w, config)
        run_s = w.start_s + w.build_s + D.first_step_s(w, config) + steps * samples_per_step / step.samples_per_s
        wall, late, timed_out = self._run(run_s + w.exit_s, deadline, self.timeout_s)
        if late or timed_out:
            return _numerics_failure("stopped when the time its phase may take ran out", wall)
        apart = {"fp32": 0.0, "tf32": 0.002, "bf16": 0.012, "fp16": 0.008}.get(str(config.get("precision")), 0.0)
        jitter = random.Random(f"{seed}:{sorted(config.items())}:{self.processes}")
        losses = [(2.0 * math.exp(-k / max(1, steps)) + 0.5) * (1.0 + apart + jitter.normalvariate(0.0, 1e-4))
                  for k in range(steps)]
        distances = {label: 0.05 * (apart + 1e-3) for label, _ in references}
        return R.NumericsResult(outcome=R.OK, config=dict(config), device="cuda:0", losses=losses,
                                grad_norms=[1.0 + apart] * steps, moved=0.05 * (1.0 + apart), weights_norm=12.0,
                                distances=distances, initial_digest="simulated-weights",
                                data_digest="simulated-data", samples_per_step=samples_per_step, wall_s=wall)


def _failure(outcome: str, why: str, wall: float, config: Mapping[str, Any], **error: Any) -> R.TrialResult:
    result = R.TrialResult.failure(outcome, str(why), **error)
    result.config, result.wall_s, result.device = dict(config), wall, "cuda:0"
    return result


def _paired_out_of_time(why: str, arms: int, wall: float) -> R.PairedResult:
    result = R.PairedResult.failure(R.OUT_OF_TIME, why, arms=arms)
    result.wall_s = wall
    return result


def _numerics_failure(why: str, wall: float) -> R.NumericsResult:
    result = R.NumericsResult.failure(R.OUT_OF_TIME, why)
    result.wall_s = wall
    return result
