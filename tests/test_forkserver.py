"""The warm fork server: a trial given up on before it started never runs on, and says nothing."""

from __future__ import annotations

import signal
import sys
import time

import pytest

from autotune import forkserver
from autotune.workload import WorkloadSpec


def _trial_request(model: str) -> dict:
    return {"kind": "trial", "spec": WorkloadSpec(model).to_dict(), "device": "cpu", "config": {},
            "settings": {}, "sys_path": list(sys.path), "cwd": "."}


@pytest.fixture
def server():
    fs = forkserver.ForkServer()  # its own, so its stderr is this test's (capfd)
    yield fs
    fs.close()


def test_a_trial_whose_directory_is_gone_leaves_quietly(server, tmp_path, capfd):
    server.start()
    gone = tmp_path / "removed"
    pid = server.spawn(_trial_request("failing_workloads:tiny"), str(gone / "result.json"), str(gone / "output.log"))
    assert server.wait(pid, 60) == 0
    err = capfd.readouterr().err
    assert "Traceback" not in err and "FileNotFoundError" not in err, err


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
        server.spawn(_trial_request("failing_workloads:sleeper"), str(tmp_path / "r.json"), str(tmp_path / "o.log"))
    deadline = time.monotonic() + 30
    while not server._exited and time.monotonic() < deadline:  # the trial sleeps forever unless killed
        time.sleep(0.05)
    assert list(server._exited.values()) == [-signal.SIGKILL]
    assert not server._abandoned and not server._started
