"""The parent side of a trial: send a typed request to an isolated process with its timeout, type its outcome.

Trials are forked from a warm fork server (:mod:`autotune.trial.forkserver`): a separate
interpreter that imported torch and the trial code once and never touched a GPU or
started a thread pool. Each trial is a fresh fork of it (tens of milliseconds instead of the ~2 s a new
interpreter needs to import torch), becomes the leader of a new process group,
sets its environment-level knobs before anything reads them, and writes one JSON
answer. The runner makes the request (:mod:`autotune.trial.messages`) and hands it to the
fork server with the trial timeout, once; the whole group is killed at that deadline,
when a trial runs slower than its limit, or on interrupt, so DataLoader workers never
outlive their trial. A configuration whose knobs take effect only in a process started with them (a
preloaded allocator, bound cores: :mod:`autotune.trial.launch`) is forked from a server started that way.
Every ending (an answer, a crash, a signal, the timeout) becomes a
:class:`~autotune.result.TrialResult` (or a :class:`~autotune.result.PairedResult`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import tempfile
import time
from typing import Any, Mapping, Sequence

from autotune import clock
from autotune import knobs
from autotune.trial import forkserver, launch
from autotune import result as R
from autotune.errors import Said, SpecError, WorkloadError
from autotune.trial.forkserver import Ending, kill_group
from autotune.trial.messages import NumericsRequest, PairedRequest, ProbeAnswer, ProbeRequest, Request, TrialRequest
from autotune.trial.protocol import Settings
from autotune.request import DEFAULT_TRIAL_TIMEOUT_S, WorkloadSpec, option
from autotune.units import format_duration

#: A child stopped at its deadline (the stop is looked for every second) gets this long to go before its timeout
#: kills it instead: never a reason to outlast the deadline by more.
DEADLINE_GRACE_S = 2.0
#: A compilation is stopped this long before its phase's deadline, so that it ends typed as slower, not out of time.
FIRST_STEP_MARGIN_S = 1.0


def warm_up() -> None:
    """Start the fork server now (it imports torch once; about 2 s) rather than on the first trial."""
    forkserver.get().start()


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover
        return True
    return True


def _tail(path: str, lines: int = 20) -> list[str]:
    try:
        with open(path, errors="replace") as fh:
            return fh.read()[-8000:].splitlines()[-lines:]
    except OSError:
        return []


class Runner:
    """Runs trials (and workload probes) in isolated processes."""

    def __init__(
        self,
        spec: WorkloadSpec,
        device: str = "cpu",
        timeout_s: float = DEFAULT_TRIAL_TIMEOUT_S,
        settings: Settings | None = None,
        global_batch: int | None = None,
        compile_limit_s: float | None = None,
    ) -> None:
        self.spec = spec
        self.device = device
        self.timeout_s = timeout_s
        # a compiled configuration's first step may run this long (None: no limit)
        self.compile_limit_s = compile_limit_s
        self.settings = settings or Settings()
        self.global_batch = global_batch
        self._current: Any = None
        self.last_progress: dict[str, Any] = {}

    # ------------------------------------------------------------ processes

    def _spawn(self, request: Request, timeout_s: float, limit_s: float | None = None,
               first_limit_s: float | None = None,
               deadline: float | None = None) -> tuple[Ending, dict[str, Any] | None, list[str], float]:
        """Run one child within ``timeout_s``; returns (how it ended, its answer as JSON data, log tail, wall seconds).

        ``limit_s``: stop the child once it has run this long after its first step (compilation
        is in the first); ``first_limit_s``: once its first step has run this long. The last progress it
        reported is then ``self.last_progress``. ``deadline`` (epoch seconds): stop it then, whatever it is doing
        (the end of the time its phase may take: :func:`out_of_time` tells such an ending).
        """
        how = launch.launch_for(launch_config(request), self.device.split(":")[0])
        server = forkserver.get(how)
        with tempfile.TemporaryDirectory(prefix="autotune-trial-") as tmp:
            result_path = os.path.join(tmp, "result.json")
            log_path = os.path.join(tmp, "output.log")
            progress_path = os.path.join(tmp, "progress.json")
            request = dataclasses.replace(request, sys_path=tuple(sys.path), cwd=os.getcwd(),
                                          progress_path=progress_path, bound_cpus=how.cpus)
            start = time.perf_counter()
            self.last_progress = {}
            if deadline is not None:
                timeout_s = min(timeout_s, max(0.0, deadline - clock.now()) + DEADLINE_GRACE_S)
            child = server.spawn(request, result_path, log_path, timeout_s)
            self._current = child.pid
            try:
                watch = limit_s is not None or first_limit_s is not None or deadline is not None

                def stop() -> bool:
                    return ((deadline is not None and clock.now() >= deadline)
                            or self._past(limit_s, first_limit_s, progress_path))

                ending = child.wait(stop=stop if watch else None)
            finally:
                self._current = None
                # Whatever the trial left in its group (DataLoader workers, grandchildren) goes too.
                kill_group(child.pid)
            wall = time.perf_counter() - start
            payload = None
            if os.path.exists(result_path):
                with open(result_path) as fh:
                    payload = json.load(fh)
            return ending, payload, _tail(log_path), wall

    def _past(self, limit_s: float | None, first_limit_s: float | None, progress_path: str) -> bool:
        """Whether the child's last progress report says it has run past ``limit_s`` since its first step, or past
        ``first_limit_s`` in its first step."""
        try:
            with open(progress_path) as fh:
                self.last_progress = json.load(fh)
        except (OSError, ValueError):
            return False
        since = self.last_progress.get("since_first_step_s")
        within = self.last_progress.get("in_first_step_s")
        return ((limit_s is not None and since is not None and since > limit_s)
                or (first_limit_s is not None and within is not None and within > first_limit_s))

    def stop(self) -> None:
        """Kill the running trial's process group (from a signal handler or another thread)."""
        pid = self._current
        if pid is not None:
            kill_group(pid)

    # ------------------------------------------------------------ public

    def probe(self, timeout_s: float | None = None) -> dict[str, Any]:
        """Build the workload in a child and return its context, fingerprint and facts; raises on user errors.

        Bounded by the trial timeout (``--trial-timeout``): building the workload is part of every trial.
        """
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        ending, payload, log, _ = self._spawn(ProbeRequest(spec=self.spec, device=self.device), timeout_s)
        answer = ProbeAnswer.from_dict(payload) if payload is not None else None
        if answer is not None and answer.ok and answer.probe is not None:
            return answer.probe
        error = answer.error if answer is not None else None
        if error and error.get("user"):
            raise (SpecError if error["type"] == "SpecError" else WorkloadError)(error.get("said") or error["message"])
        if ending.timed_out:
            raise WorkloadError(f"building the workload took more than {timeout_s:g} s ({option('trial_timeout')}) "
                                "and was stopped")
        detail = error["message"] if error else describe_exit(ending.code, log)
        raise WorkloadError(f"building the workload failed: {detail}")

    def measure(
        self, config: Mapping[str, Any], dominators: Sequence[tuple[float, float]] = (),
        cut_margin: float | None = None,
        settings: Settings | None = None, limit_s: float | None = None, deadline: float | None = None,
    ) -> R.TrialResult:
        """Measure one configuration in an isolated process; every ending becomes a TrialResult.

        ``dominators`` ((samples/s, peak bytes) of the current front) let the trial stop
        early when one of them is ``cut_margin`` faster at no more memory (default:
        measure.Settings.cut_margin; the study passes one never below its noise floor).
        ``settings``: this trial's, instead of the runner's (the batch-ceiling probes).
        ``limit_s``: a trial whose steps after the first take longer than this is stopped as
        ``slower`` (the study passes a multiple of the defaults' whole trial; see
        :func:`autotune.tuning.phases.bench.slow_limit`); ``--trial-timeout`` still bounds the whole trial.
        ``deadline`` (epoch seconds): the end of the time the trial's phase may take (``--time-budget``): the trial is
        not started past it and is stopped at it, as :data:`autotune.result.OUT_OF_TIME` (nothing measured).
        """
        if deadline is not None and clock.now() >= deadline:
            return _out_of_time(R.TrialResult.failure, 0.0, "not started: the time its phase may take was spent")
        request = TrialRequest(
            spec=self.spec, device=self.device, config=dict(config), settings=settings or self.settings,
            global_batch=self.global_batch, dominators=tuple((float(t), float(m)) for t, m in dominators),
            cut_margin=cut_margin,
        )
        first_limit = first_step_limit(config, self.compile_limit_s, deadline)
        ending, payload, log, wall = self._spawn(request, self.timeout_s, limit_s, first_limit, deadline)
        exitcode = ending.code
        if out_of_time(ending, deadline):
            first = self.last_progress.get("since_first_step_s") is None
            result = _out_of_time(R.TrialResult.failure, wall, "stopped when the time its phase may take ran out"
                                  + (" (its first step, the compilation, had not finished)" if first else ""),
                                  stderr_tail=log, progress=dict(self.last_progress))
        elif ending.stopped and self.last_progress.get("since_first_step_s") is None and first_limit is not None:
            result = R.TrialResult.failure(R.SLOWER, compile_stopped(wall, first_limit, self.compile_limit_s),
                                           stderr_tail=log, progress=dict(self.last_progress))
        elif ending.stopped:
            got = self.last_progress
            rate = got.get("samples_per_s")
            result = R.TrialResult.failure(
                R.SLOWER, f"stopped after {wall:.0f} s: {limit_s:.0f} s after its first step (a multiple of the "
                f"defaults' whole trial) it had not finished; {got.get('steps', 0)} steps"
                + (f" at {rate:.1f} samples/s so far" if rate else ""), stderr_tail=log, progress=dict(got))
            if rate:
                result.notes["samples_per_s_so_far"] = rate
        elif ending.timed_out:
            result = R.TrialResult.failure(
                R.TIMEOUT, f"the trial ran past its {self.timeout_s:g} s timeout and was killed", stderr_tail=log
            )
        elif payload is not None:
            result = R.TrialResult.from_dict(payload)
            if result.error is not None and result.outcome != R.OK:
                result.error.setdefault("stderr_tail", log)
        elif exitcode is not None and exitcode < 0:
            result = R.TrialResult.failure(R.CRASHED, describe_exit(exitcode, log), signal=-exitcode, stderr_tail=log)
        else:
            result = R.TrialResult.failure(R.ERROR, describe_exit(exitcode, log), exitcode=exitcode, stderr_tail=log)
        if not result.config:
            result.config = dict(config)
        result.device = self.device
        inner = sum(result.phases_s.values()) if result.phases_s else 0.0
        result.wall_s = wall
        result.overhead_s = wall - inner if result.ok else None
        return result

    def measure_together(self, configs: Sequence[Mapping[str, Any]], settings: Settings | None = None,
                         unchecked: bool = False, deadline: float | None = None) -> R.PairedResult:
        """Measure ``configs`` alternately in one isolated process (:mod:`autotune.trial.paired`), the first being the
        reference; every ending becomes a PairedResult. The trial timeout bounds each arm: the process may run
        ``len(configs)`` times as long as one trial. ``unchecked``: measure even what :func:`autotune.knobs.apart`
        keeps apart (only ``benchmarks/paths_agree.py``, which measures the bias that check prevents). ``deadline``: as
        :meth:`measure`'s."""
        if deadline is not None and clock.now() >= deadline:
            return _out_of_time(R.PairedResult.failure, 0.0, "not started: the time its phase may take was spent",
                                arms=len(configs))
        request = PairedRequest(
            spec=self.spec, device=self.device, arms=tuple(dict(c) for c in configs),
            settings=settings or self.settings, global_batch=self.global_batch, unchecked=unchecked,
        )
        timeout_s = self.timeout_s * max(1, len(configs))
        ending, payload, log, wall = self._spawn(request, timeout_s, deadline=deadline)
        exitcode = ending.code
        if out_of_time(ending, deadline):
            result = _out_of_time(R.PairedResult.failure, wall, "stopped when the time its phase may take ran out",
                                  arms=len(configs), stderr_tail=log)
        elif ending.timed_out:
            result = R.PairedResult.failure(R.TIMEOUT, f"the paired measurement ran past its {timeout_s:g} s timeout "
                                            "and was killed", len(configs), stderr_tail=log)
        elif payload is not None:
            result = R.PairedResult.from_dict(payload)
        elif exitcode is not None and exitcode < 0:
            result = R.PairedResult.failure(R.CRASHED, describe_exit(exitcode, log), len(configs), signal=-exitcode,
                                            stderr_tail=log)
        else:
            result = R.PairedResult.failure(R.ERROR, describe_exit(exitcode, log), len(configs), exitcode=exitcode,
                                            stderr_tail=log)
        result.wall_s = wall
        return result


    def numerics(self, config: Mapping[str, Any], steps: int, samples_per_step: int, seed: int,
                 save_path: str | None = None, references: Sequence[tuple[str, str]] = (),
                 deadline: float | None = None) -> R.NumericsResult:
        """Train ``config`` for ``steps`` optimizer steps of ``samples_per_step`` samples from weights seeded by
        ``seed`` in an isolated process (:mod:`autotune.trial.numerics_run`); every ending becomes a NumericsResult. The
        trial timeout bounds it, and ``deadline`` as :meth:`measure`'s."""
        if deadline is not None and clock.now() >= deadline:
            return _out_of_time(R.NumericsResult.failure, 0.0, "not started: the time its phase may take was spent")
        request = NumericsRequest(spec=self.spec, device=self.device, config=dict(config), steps=steps,
                                  samples_per_step=samples_per_step, seed=seed, save_path=save_path,
                                  references=tuple((str(a), str(b)) for a, b in references))
        ending, payload, log, wall = self._spawn(request, self.timeout_s, deadline=deadline)
        exitcode = ending.code
        if out_of_time(ending, deadline):
            result = _out_of_time(R.NumericsResult.failure, wall, "stopped when the time its phase may take ran out",
                                  stderr_tail=log)
        elif ending.timed_out:
            result = R.NumericsResult.failure(R.TIMEOUT, f"the numerics run ran past its {self.timeout_s:g} s timeout "
                                              "and was killed", stderr_tail=log)
        elif payload is not None:
            result = R.NumericsResult.from_dict(payload)
        elif exitcode is not None and exitcode < 0:
            result = R.NumericsResult.failure(R.CRASHED, describe_exit(exitcode, log), signal=-exitcode,
                                              stderr_tail=log)
        else:
            result = R.NumericsResult.failure(R.ERROR, describe_exit(exitcode, log), exitcode=exitcode, stderr_tail=log)
        if not result.config:
            result.config = dict(config)
        result.wall_s = wall
        return result


def launch_config(request: Request) -> Mapping[str, Any]:
    """The configuration that decides how a request's process is started (:mod:`autotune.trial.launch`): a trial's,
    a numerics run's, a paired measurement's first arm (its arms share the process, so what only a process's start
    sets is equal in all: :func:`autotune.knobs.apart`); none for a probe."""
    if isinstance(request, PairedRequest):
        return request.arms[0] if request.arms else {}
    return getattr(request, "config", None) or {}


def first_step_limit(config: Mapping[str, Any], compile_limit_s: float | None, deadline: float | None
                     ) -> float | None:
    """How long a compiled configuration's first step (its compilation) may run: the smaller of the compile limit and
    what is left before ``deadline`` (a compilation stopped there is typed as slower, with what it ran: the study
    learns that it takes at least that long, where one stopped by the deadline would teach nothing); None for a
    configuration that does not compile, or with neither limit."""
    if not knobs.compiles(config):
        return None
    limits = [x for x in (compile_limit_s, None if deadline is None else deadline - clock.now() - FIRST_STEP_MARGIN_S)
              if x is not None]
    return max(0.0, min(limits)) if limits else None


def compile_stopped(wall_s: float, first_limit_s: float, compile_limit_s: float | None) -> Said:
    """Why a compiled configuration's trial was stopped in its first step (``first_limit_s``: what
    :func:`first_step_limit` allowed it)."""
    if compile_limit_s is not None and first_limit_s >= compile_limit_s:
        return Said(f"stopped after {wall_s:.0f} s: its first step (the compilation) ran past the "
                    f"{format_duration(first_limit_s)} compile limit ({option('compile_limit_s')})")
    return Said(f"stopped after {wall_s:.0f} s: its first step (the compilation) ran past the "
                f"{format_duration(first_limit_s)} left of its phase's time (it takes at least that long here)")


def out_of_time(ending: Ending, deadline: float | None) -> bool:
    """The child was stopped (or timed out) because ``deadline`` passed, not for anything it did."""
    return deadline is not None and (ending.stopped or ending.timed_out) and clock.now() >= deadline


def _out_of_time(failure: Any, wall: float, why: str, **extra: Any) -> Any:
    """A result of :data:`autotune.result.OUT_OF_TIME` (built by ``failure``, a result class's), after ``wall`` s."""
    result = failure(R.OUT_OF_TIME, f"{why} (after {wall:.0f} s)" if wall else why, **extra)
    result.wall_s = wall
    return result


def describe_exit(exitcode: int | None, log: list[str]) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        extra = " (the kernel's OOM killer sends SIGKILL)" if -exitcode == signal.SIGKILL else ""
        return f"the trial process was killed by {name}{extra}"
    last = next((line for line in reversed(log) if line.strip()), "")
    return f"the trial process exited with code {exitcode} without a result" + (f": {last}" if last else "")
