"""A warm fork server for trial processes.

Importing torch costs about 2 s, so a fresh interpreter per trial would dwarf short
trials. The server is one interpreter (``python -m autotune.trial.forkserver``, in a
session of its own so a terminal's Ctrl-C does not reach it) that imports torch
and the trial code once, never touches a GPU and never runs a torch op (so no CUDA
context and no OpenMP pool exist to be broken by ``fork``). For each request it
forks a child that becomes the leader of a new process group and runs
:func:`autotune.trial.child.main`; it reaps children and reports their exit
status. When its parent goes away (EOF on stdin) it kills every live child group
and exits, so nothing outlives an ``autotune`` process killed with SIGKILL.

The client (:class:`ForkServer`) takes a typed request (:mod:`autotune.trial.messages`) and the
trial's timeout once: :meth:`ForkServer.spawn` fixes the trial's deadline and returns a
:class:`Child`, whose :meth:`Child.wait` is the one wait for its ending (its exit, or its
group killed at the deadline or when the caller's ``stop`` says so).

CUDA and ``fork`` do not mix: a child forked from a process that initialised CUDA cannot use
the GPU ("Cannot re-initialize CUDA in forked subprocess"). So the server asks CUDA's
availability of NVML (``PYTORCH_NVML_BASED_CUDA_CHECK=1``, which ``torch.cuda.is_available()``
reads without starting CUDA), and checks before each fork that nothing started it
(:func:`cuda_clean`); if something did, it refuses the request, and the client raises a
:class:`~autotune.errors.TrialProcessError` that says why, instead of forking trials that fail.

Its environment is the parent's without the variables the knobs decide
(:func:`autotune.knobs.owned_environment`): a ``PYTORCH_CUDA_ALLOC_CONF`` or ``OMP_NUM_THREADS``
exported by the user's shell would otherwise shape the defaults' trials, which must run
PyTorch's defaults. glibc reads its ``MALLOC_*`` variables once, when a process starts, so
they must be gone from the server itself, not only from its children.

A preloaded library (``LD_PRELOAD``) or OpenMP's binding takes effect only in a process started
with it, so a fork of this server cannot have it. A trial at such a value (:mod:`autotune.trial.launch`)
is forked from a server of its own, started with that environment and bound to its cores
(:func:`get` with a launch; one such server at a time besides the warm default one).

Protocol, one JSON object per line: the parent sends
``{"id", "request", "result_path", "log_path"}`` (the request as
:meth:`~autotune.trial.messages.Request.to_wire` writes it); the server answers
``{"event": "started", "id", "pid"}`` and later ``{"event": "exited", "pid", "code"}``
(``code`` negative for a signal, as in :mod:`subprocess`), or ``{"event": "refused", "id", "reason"}``
when it must not fork.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Callable

from autotune.errors import TrialProcessError
from autotune.knobs import owned_environment
from autotune.trial.launch import Launch
from autotune.trial.messages import Request, from_wire

REAP_S = 30.0  # how long a killed trial's exit may take to be reported
NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"  # torch.cuda.is_available() through NVML: no CUDA context made


def server_environment(parent: dict[str, str]) -> dict[str, str]:
    """The fork server's environment: the parent's, less the variables the knobs decide, with CUDA's availability
    asked of NVML (see the module's docstring)."""
    owned = set(owned_environment())
    env = {k: v for k, v in parent.items() if k not in owned}
    env[NVML_CHECK] = "1"
    return env


def cuda_clean() -> str | None:
    """None while this process has not initialised CUDA (a child forked now can use the GPU); else why not."""
    import torch

    if torch.cuda.is_initialized():
        return ("the trial fork server has initialised CUDA, so a trial forked from it could not use the GPU "
                "(Cannot re-initialize CUDA in forked subprocess); this is a bug of autotune's: please report it")
    return None


# ---------------------------------------------------------------- server side (the warm interpreter)


def signals_as_started() -> None:
    """Leave the signals as a freshly started Python has them, whatever the server set: SIGINT raises
    KeyboardInterrupt, SIGPIPE and SIGXFSZ are ignored (a write to a closed pipe, or past the file size limit, raises
    an OSError instead of killing the process), SIGCHLD and SIGTERM do what the system does. A trial measures what a
    user's process would, and its DataLoader workers inherit these."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for name in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)


def _child(job: dict[str, Any], keep: set[int]) -> None:
    """In the forked child: undo what the server set up, so that the trial starts as in a fresh interpreter, then
    run it."""
    signal.set_wakeup_fd(-1)
    signals_as_started()
    for fd in keep:
        try:
            os.close(fd)
        except OSError:
            pass
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    code = 0
    try:
        from autotune.trial import child

        child.main(from_wire(job["request"]), job["result_path"], job["log_path"])
    except BaseException:  # noqa: BLE001 - the child must never return into the server loop
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _become_subreaper() -> None:
    """Orphans of a killed trial (its DataLoader workers) are re-parented to us and reaped here."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def serve() -> None:
    """The server loop: read jobs on stdin, fork, reap, report on stdout."""
    import autotune.trial.child  # noqa: F401 - the whole point: import torch and the trial code once, here
    import torch._dynamo  # noqa: F401 - about 1 s; imported, never run, so forking stays safe

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _become_subreaper()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    out = sys.stdout
    stdin_fd = sys.stdin.fileno()
    children: set[int] = set()
    parts: list[bytes] = []  # a request's chunks until its newline

    def emit(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    def reap() -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid in children:  # else an adopted orphan: reaped, not reported
                children.discard(pid)
                emit({"event": "exited", "pid": pid, "code": os.waitstatus_to_exitcode(status)})

    emit({"event": "ready", "pid": os.getpid()})
    while True:
        try:
            ready, _, _ = select.select([stdin_fd, wake_r], [], [])
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            continue
        if wake_r in ready:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
            reap()
        if stdin_fd in ready:
            chunk = os.read(stdin_fd, 65536)
            if not chunk:  # the parent is gone: take every trial with us
                for pid in list(children):
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except OSError:
                        pass
                return
            parts.append(chunk)
            if b"\n" not in chunk:  # a long request (a pickled factory) arrives in many chunks: join them once
                continue
            buffer = b"".join(parts)
            parts.clear()
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if not line.strip():
                    continue
                job = json.loads(line)
                unsafe = cuda_clean()
                if unsafe is not None:
                    emit({"event": "refused", "id": job["id"], "reason": unsafe})
                    continue
                pid = os.fork()
                if pid == 0:
                    os.setpgid(0, 0)
                    _child(job, {stdin_fd, wake_r, wake_w, out.fileno()})
                try:
                    os.setpgid(pid, pid)  # both sides set it: no window where the group is missing
                except OSError:
                    pass
                children.add(pid)
                emit({"event": "started", "id": job["id"], "pid": pid})
            if buffer:  # the start of the next request
                parts.append(buffer)
            reap()


# ---------------------------------------------------------------- client side (the autotune process)


class ForkServerError(TrialProcessError):
    """The fork server died, did not answer, or refused to fork."""


class ForkServer:
    """Client of one fork-server process; thread-safe."""

    def __init__(self, command: list[str] | None = None, launch: Launch = Launch()) -> None:
        # the server's interpreter and module, started as ``launch`` says (its environment, bound cores)
        self.command = [*launch.command(), *(command or [sys.executable, "-m", "autotune.trial.forkserver"])]
        self.launch = launch
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._cond = threading.Condition()
        self._started: dict[int, int] = {}
        self._exited: dict[int, int] = {}
        self._abandoned: set[int] = set()  # requests given up on (a signal) before their pid came back
        self._refused: dict[int, str] = {}  # requests the server would not fork, and why
        self._next_id = 0
        self._dead = False

    @property
    def pid(self) -> int | None:
        """The server process's pid while it runs (a GPU's process list must never hold it)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def start(self) -> None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None and not self._dead:
                return
            env = {**server_environment(dict(os.environ)), **dict(self.launch.environment)}
            root = str(Path(__file__).resolve().parents[2])  # the folder autotune/ is in
            env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.getcwd(), env.get("PYTHONPATH")) if p)
            self._proc = subprocess.Popen(
                self.command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                start_new_session=True,
            )
            self._dead = False
            self._started.clear()
            self._exited.clear()
            ready = self._proc.stdout.readline() if self._proc.stdout else b""
            if not ready:
                self._dead = True
                raise ForkServerError("the trial fork server did not start (is torch importable?)")
            threading.Thread(target=self._read, args=(self._proc,), name="autotune-forkserver", daemon=True).start()

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            msg = json.loads(raw)
            with self._cond:
                if msg["event"] == "started" and msg["id"] in self._abandoned:
                    self._abandoned.discard(msg["id"])
                    kill_group(msg["pid"])
                elif msg["event"] == "started":
                    self._started[msg["id"]] = msg["pid"]
                elif msg["event"] == "refused":
                    self._refused[msg["id"]] = msg["reason"]
                elif msg["event"] == "exited":
                    self._exited[msg["pid"]] = msg["code"]
                self._cond.notify_all()
        with self._cond:
            if proc is self._proc:
                self._dead = True
            self._cond.notify_all()

    def spawn(self, request: Request, result_path: str, log_path: str, timeout_s: float) -> Child:
        """Fork a trial process that must end within ``timeout_s`` from now (its deadline, fixed here once)."""
        deadline = time.monotonic() + timeout_s
        self.start()
        with self._lock:
            assert self._proc is not None and self._proc.stdin is not None
            job_id = self._next_id
            self._next_id += 1
            line = json.dumps({"id": job_id, "request": request.to_wire(), "result_path": result_path,
                               "log_path": log_path})
            try:
                self._proc.stdin.write(line.encode() + b"\n")
                self._proc.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                self._dead = True
                raise ForkServerError(f"the trial fork server is gone: {exc}") from None
        with self._cond:
            try:
                answered = self._cond.wait_for(
                    lambda: job_id in self._started or job_id in self._refused or self._dead, timeout=60)
            except BaseException:  # Ctrl-C or SIGTERM before the pid came back: that trial must not run on
                if job_id in self._started:
                    kill_group(self._started.pop(job_id))
                else:
                    self._abandoned.add(job_id)
                raise
            if job_id in self._refused:
                raise ForkServerError(self._refused.pop(job_id))
            if not answered:
                self._abandoned.add(job_id)
                raise ForkServerError("the trial fork server did not answer within 60 s")
            if job_id not in self._started:
                raise ForkServerError("the trial fork server died")
            return Child(self, self._started.pop(job_id), deadline)

    def wait(self, pid: int, timeout: float | None) -> int | None:
        """The exit code of trial ``pid``, or None if it is still running after ``timeout`` seconds."""
        with self._cond:
            self._cond.wait_for(lambda: pid in self._exited or self._dead, timeout=timeout)
            if pid in self._exited:
                return self._exited.pop(pid)
            if self._dead:
                return -signal.SIGKILL
            return None

    def close(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            try:
                assert proc.stdin is not None
                proc.stdin.close()  # EOF: the server kills live trials and exits
                proc.wait(timeout=5)
            except Exception:  # noqa: BLE001
                proc.kill()


@dataclass(frozen=True)
class Ending:
    """How a trial process ended: its exit code (negative for a signal; None when it could not be reaped), and
    whether its group was killed because it ran past its deadline or because the caller stopped it."""

    code: int | None
    timed_out: bool = False
    stopped: bool = False


@dataclass(frozen=True)
class Child:
    """A trial process the server forked: its pid (also its process group id) and the moment it must have ended by."""

    server: ForkServer
    pid: int
    deadline: float  # time.monotonic()

    def wait(self, stop: Callable[[], bool] | None = None, every_s: float = 1.0) -> Ending:
        """Wait for the process to end. At its deadline, or once ``stop()`` (asked every ``every_s`` seconds) says
        so, its whole group is killed and reaped; so it is on an exception here (Ctrl-C), which goes on."""
        try:
            while True:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    return Ending(self.kill(), timed_out=True)
                code = self.server.wait(self.pid, min(left, every_s) if stop is not None else left)
                if code is not None:
                    return Ending(code)
                if stop is not None and stop():
                    return Ending(self.kill(), stopped=True)
        except BaseException:
            self.kill()
            raise

    def kill(self) -> int | None:
        """Kill the process's group; its exit code once reaped."""
        kill_group(self.pid)
        return self.server.wait(self.pid, REAP_S)


def kill_group(pgid: int) -> None:
    """SIGKILL every process of a process group; quiet if it is already gone."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_server: ForkServer | None = None
_launched: dict[Launch, ForkServer] = {}


def get(launch: Launch = Launch()) -> ForkServer:
    """The process-wide fork server (started on first use, closed at exit). With a ``launch`` (an environment that
    takes effect only in a process started with it, bound cores: :mod:`autotune.trial.launch`), a server started that
    way; one such server at a time: asking for another closes the last."""
    global _server
    if launch:
        if launch not in _launched:
            for other in list(_launched):
                _launched.pop(other).close()
            _launched[launch] = ForkServer(launch=launch)
            atexit.register(_launched[launch].close)
        return _launched[launch]
    if _server is None:
        _server = ForkServer()
        atexit.register(_server.close)
    return _server


if __name__ == "__main__":
    serve()
