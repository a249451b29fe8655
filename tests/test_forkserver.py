"""The warm fork server: a trial given up on before it started never runs on, and says nothing."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest
import torch

from autotune import knobs
from autotune.trial import forkserver
from autotune.errors import TrialProcessError
from autotune.trial.messages import TrialRequest
from autotune.workloads.contract import WorkloadSpec


def _trial_request(model: str) -> TrialRequest:
    return TrialRequest(spec=WorkloadSpec(model), sys_path=tuple(sys.path), cwd=".")


@pytest.fixture
def server():
    fs = forkserver.ForkServer()  # its own, so its stderr is this test's (capfd)
    yield fs
    fs.close()


def test_a_trial_whose_directory_is_gone_leaves_quietly(server, tmp_path, capfd):
    server.start()
    gone = tmp_path / "removed"
    child = server.spawn(_trial_request("failing_workloads:tiny"), str(gone / "result.json"),
                         str(gone / "output.log"), 60)
    assert child.wait() == forkserver.Ending(0)
    err = capfd.readouterr().err
    assert "Traceback" not in err and "FileNotFoundError" not in err, err


@pytest.mark.slow  # 6 s in a full run on a 2-core CPU
def test_a_spawn_interrupted_before_its_pid_came_back_kills_that_trial(server, tmp_path, monkeypatch):
    server.start()
    real_wait_for = server._cond.wait_for
    calls = []

    def interrupted(predicate, timeout=None):  # the signal lands while waiting for "started"
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real_wait_for(predicate, timeout)

    monkeypatch.setattr(server._cond, "wait_for", interrupted)
    with pytest.raises(KeyboardInterrupt):
        server.spawn(_trial_request("failing_workloads:sleeper"), str(tmp_path / "r.json"), str(tmp_path / "o.log"), 60)
    deadline = time.monotonic() + 30
    while not server._exited and time.monotonic() < deadline:  # the trial sleeps forever unless killed
        time.sleep(0.05)
    assert list(server._exited.values()) == [-signal.SIGKILL]
    assert not server._abandoned and not server._started


@pytest.mark.slow  # 5 s in a full run on a 2-core CPU
def test_a_trial_past_its_deadline_is_killed_at_it(server, tmp_path):
    """The timeout is given once, to spawn: the child's one wait kills its group at that deadline."""
    started = time.monotonic()
    child = server.spawn(_trial_request("failing_workloads:sleeper"), str(tmp_path / "r.json"),
                         str(tmp_path / "o.log"), 3)
    ending = child.wait()
    assert ending == forkserver.Ending(-signal.SIGKILL, timed_out=True)
    assert 3 <= time.monotonic() - started < 30  # not before its deadline, and not long after


@pytest.mark.slow  # 7 s in a full run on a 2-core CPU
def test_a_trial_the_caller_stops_is_killed_and_said_stopped(server, tmp_path):
    asked = []

    def stop() -> bool:
        asked.append(time.monotonic())
        return len(asked) == 2

    child = server.spawn(_trial_request("failing_workloads:sleeper"), str(tmp_path / "r.json"),
                         str(tmp_path / "o.log"), 120)
    ending = child.wait(stop=stop, every_s=0.2)
    assert ending == forkserver.Ending(-signal.SIGKILL, stopped=True) and len(asked) == 2


@pytest.mark.slow  # 6 s in a full run on a 2-core CPU
def test_an_interrupted_wait_kills_the_trial(server, tmp_path):
    def interrupted() -> bool:
        raise KeyboardInterrupt

    child = server.spawn(_trial_request("failing_workloads:sleeper"), str(tmp_path / "r.json"),
                         str(tmp_path / "o.log"), 120)
    with pytest.raises(KeyboardInterrupt):
        child.wait(stop=interrupted, every_s=0.2)
    assert child.pid not in server._started.values()
    with pytest.raises(ProcessLookupError):  # its group is gone, reaped by the kill
        os.killpg(child.pid, 0)


# ---------------------------------------------------------------- CUDA and fork; the environment trials start from


@pytest.mark.slow  # 5 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_a_server_that_initialised_cuda_refuses_to_fork_and_the_client_says_why(tmp_path):
    """A child forked from a process that started CUDA cannot use the GPU: the server refuses instead (CUDA's start
    simulated here: torch.cuda.is_initialized says yes in the server)."""
    code = ("import torch; torch.cuda.is_initialized = lambda: True; "
            "from autotune.trial import forkserver; forkserver.serve()")
    fs = forkserver.ForkServer(command=[sys.executable, "-c", code])
    try:
        with pytest.raises(forkserver.ForkServerError, match="initialised CUDA") as caught:
            fs.spawn(_trial_request("failing_workloads:tiny"), str(tmp_path / "r.json"), str(tmp_path / "o.log"), 60)
        assert isinstance(caught.value, TrialProcessError)  # one line at the edges, not a traceback
        assert not (tmp_path / "r.json").exists() and not (tmp_path / "o.log").exists()  # nothing was forked
    finally:
        fs.close()


@pytest.mark.slow  # 9 s in a full run on a 2-core CPU
def test_the_real_server_forks_while_cuda_is_untouched(server, tmp_path):
    assert forkserver.cuda_clean() is None or torch.cuda.is_initialized()  # this test process may have used CUDA
    child = server.spawn(_trial_request("failing_workloads:tiny"), str(tmp_path / "r.json"),
                         str(tmp_path / "o.log"), 60)
    assert child.wait() == forkserver.Ending(0)


@pytest.mark.slow  # 5 s in a full run on a 2-core CPU
def test_the_server_asks_nvml_and_inherits_no_variable_a_knob_decides(server, monkeypatch):
    inherited = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
                 "PYTORCH_ALLOC_CONF": "expandable_segments:True",
                 "OMP_NUM_THREADS": "1", "MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "1"}
    for name, value in inherited.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AUTOTUNE_UNRELATED_VARIABLE", "kept")
    assert set(inherited) <= set(knobs.owned_environment())
    server.start()
    with open(f"/proc/{server._proc.pid}/environ", "rb") as fh:  # glibc read MALLOC_* when the server started
        env = dict(item.split(b"=", 1) for item in fh.read().split(b"\0") if b"=" in item)
    assert not {name.encode() for name in inherited} & set(env), env.keys()
    assert env[forkserver.NVML_CHECK.encode()] == b"1" and env[b"AUTOTUNE_UNRELATED_VARIABLE"] == b"kept"


SIGNALS = ("SIGINT", "SIGTERM", "SIGPIPE", "SIGCHLD", "SIGXFSZ")
#: Each signal's disposition, as a JSON object on one line: 'default', 'ignored' or the handler's name.
DISPOSITIONS = ("import json, signal; "
                "names = {signal.SIG_DFL: 'default', signal.SIG_IGN: 'ignored'}; "
                "print(json.dumps({s: names.get(signal.getsignal(getattr(signal, s)), "
                "getattr(signal.getsignal(getattr(signal, s)), '__name__', 'handler')) for s in %r}))" % (SIGNALS,))


@pytest.mark.slow  # 4 s: a fresh interpreter, and a child of the server
def test_a_forked_trial_starts_with_the_signals_of_a_fresh_interpreter(server, tmp_path):
    """The server ignores SIGINT and reports SIGCHLD: a trial must start as a user's fresh process does, whose SIGINT
    raises KeyboardInterrupt and whose write to a closed pipe raises (Python ignores SIGPIPE), for itself and the
    DataLoader workers it forks. A child once started with SIGINT and SIGPIPE at the system's default."""
    import subprocess

    fresh = json.loads(subprocess.run([sys.executable, "-c", DISPOSITIONS], capture_output=True, text=True,
                                      check=True).stdout)
    (tmp_path / "signals_workload.py").write_text(
        "import contextlib, io, os\n"
        "def tiny():\n"
        "    out = io.StringIO()\n"
        "    with contextlib.redirect_stdout(out):\n"
        f"        exec({DISPOSITIONS!r}, {{}})\n"
        "    open(os.path.join(os.path.dirname(__file__), 'signals.json'), 'w').write(out.getvalue())\n"
        "    from failing_workloads import tiny\n"
        "    return tiny()\n")
    request = TrialRequest(spec=WorkloadSpec("signals_workload:tiny"), sys_path=(str(tmp_path), *sys.path), cwd=".")
    child = server.spawn(request, str(tmp_path / "r.json"), str(tmp_path / "o.log"), 60)
    assert child.wait() == forkserver.Ending(0)
    forked = json.loads((tmp_path / "signals.json").read_text())
    assert fresh == {"SIGINT": "default_int_handler", "SIGTERM": "default", "SIGPIPE": "ignored",
                     "SIGCHLD": "default", "SIGXFSZ": "ignored"}  # Python's own start, where this test runs
    assert forked == fresh
