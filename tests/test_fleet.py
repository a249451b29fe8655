"""Workers sharing studies through a real storage: PostgreSQL (tests/conftest.py's server), the journal
file and SQLite; kill -9, SIGTERM and a database outage in the middle of a study.

Every worker is a real ``autotune worker`` process; the workload is the tiny model of
tests/failing_workloads.py with short measurement windows, so 20 trials take seconds.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest
from click.testing import CliRunner

from autotune.tuning import fleet as daemon
from autotune.cli import main
from autotune.errors import AutotuneError, DeviceError
from autotune.store import LiveStudy, Store, StoredStudy, StoredTrial
from autotune.machine import identity

TESTS = Path(__file__).parent
SPACE = "[search]\nprecision = ['fp32', 'bf16']\nbatch_size = { low = 8, high = 256, step = 8 }\n"


def env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        "AUTOTUNE_HEARTBEAT_S": "1",
        "AUTOTUNE_HEARTBEAT_GRACE_S": "5",
    }


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=cwd, env=env(), capture_output=True,
                          text=True, timeout=600)


def start(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "autotune.cli", *args], cwd=cwd, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def submit(url: str, tmp_path: Path, name: str = "job", trials: int = 20,
           model: str = "failing_workloads:tiny") -> None:
    (tmp_path / "space.toml").write_text(SPACE)
    res = cli("submit", "--model", model, "--space", str(tmp_path / "space.toml"), "--study", name, "--storage", url,
              "--trials", str(trials), "--quick", "--no-early-stop", "--confirm", "0", "--seed", "1", "--sampler",
              "tpe", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr


def kind_study(url: str, job: str = "job") -> StoredStudy:
    names = [n for n in Store(url, read_only=True).names() if n.startswith(job + "@")]
    assert len(names) == 1, names
    return Store(url, read_only=True).read(names[0])


def read(url: str, name: str) -> StoredStudy:
    return Store(url, read_only=True).read(name)


def assert_exact(study: StoredStudy, n: int) -> None:
    """Exactly ``n`` distinct configurations measured: none lost, none doubled, nothing left running."""
    trials = study.trials
    measured = [t for t in trials if t.measured]
    keys = [t.config_key for t in measured]
    assert len(measured) == n, [(t.number, t.state, t.outcome) for t in trials]
    assert len(set(keys)) == n, "a configuration was measured twice"
    assert not [t for t in trials if t.running]


def wait_for_trial(url: str, min_done: int, timeout: float = 120, procs: list[subprocess.Popen] | None = None,
                   load: Callable[[], StoredStudy] | None = None) -> StoredStudy:
    """Until ``min_done`` configurations are measured and a trial (of one of ``procs``) is being measured.

    Measured, not merely running: a trial that has written its configuration may still give way to
    an earlier claim of the same one (then killing its worker leaves nothing to measure again).
    ``load`` loads the study (default: the submitted job's study for this machine).
    """
    pids = {p.pid for p in procs} if procs else None
    loader = load or (lambda: kind_study(url))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ended = [p for p in procs or [] if p.poll() is not None]
        if ended:
            raise AssertionError(f"worker {ended[0].pid} ended with {ended[0].returncode}: {ended[0].communicate()[0]}")
        try:
            study = loader()
            done = sum(1 for t in study.trials if t.measured)
            running = [t for t in study.trials if t.running and t.measuring_since is not None
                       and (pids is None or t.owner.get("pid") in pids)]
            if done >= min_done and running:
                return study
        except (AssertionError, Exception):  # noqa: BLE001 - not created yet
            pass
        time.sleep(0.1)
    raise AssertionError("no trial started")


def owner_pid(trial: StoredTrial) -> int | None:
    """The pid of the process that measured a trial (the owner it signed it with)."""
    return trial.owner.get("pid")


def run_workers(url: str, tmp_path: Path, n: int = 3) -> list[subprocess.Popen]:
    return [start("worker", "--all", "--storage", url, "--exit-when-idle", "--poll", "1", cwd=tmp_path)
            for _ in range(n)]


def finish(procs: list[subprocess.Popen]) -> list[str]:
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0, out
        assert "Traceback" not in out, out
        outs.append(out)
    return outs


@pytest.mark.slow  # real worker processes
def test_three_workers_finish_a_20_trial_job_exactly_on_postgres(postgres_url, tmp_path):
    submit(postgres_url, tmp_path)
    procs = run_workers(postgres_url, tmp_path)
    outs = finish(procs)
    study = kind_study(postgres_url)
    assert_exact(study, 20)
    measured = [t for t in study.trials if t.measured]
    # the three workers shared the job: each measured some of the 20 configurations, nobody else did
    by_worker = {p.pid: [t.number for t in measured if owner_pid(t) == p.pid] for p in procs}
    assert all(by_worker.values()) and sum(map(len, by_worker.values())) == 20, by_worker
    # the study records where each trial ran: this host, on the cores the workers may use
    where = {(t.placement["host"], tuple(t.placement["cpus"])) for t in measured}
    assert where == {(socket.gethostname(), tuple(sorted(os.sched_getaffinity(0))))}, where
    # each worker printed a line for each trial it measured (whatever its outcome: on a loaded machine a trial may
    # time out)
    for p, out in zip(procs, outs):
        printed = {int(m) for m in re.findall(r"^#(\d+)\s", out, flags=re.M)}
        assert set(by_worker[p.pid]) <= printed, (by_worker[p.pid], out)
    listing = CliRunner().invoke(main, ["list", "--storage", postgres_url])
    assert listing.exit_code == 0 and "job (job)" in listing.output and "20 / 20" in listing.output
    from sqlalchemy.engine import make_url

    assert make_url(postgres_url).password not in listing.output


def _trials_text(study: StoredStudy) -> str:
    """Every trial in a line, for a failing assertion's message."""
    keys = ("outcome", "role", "requeued_from", "duplicate_of", "config_key")
    return "\n".join(f"#{t.number} {t.state} "
                     + " ".join(f"{k}={getattr(t, k)}" for k in keys if getattr(t, k) is not None)
                     + (f" error={t.error_message}" if t.error else "")
                     for t in study.trials)


@pytest.mark.slow  # real worker processes
def test_kill_9_of_a_worker_mid_trial_is_requeued_and_finished_by_another(postgres_url, tmp_path):
    submit(postgres_url, tmp_path, model="failing_workloads:slow")
    procs = run_workers(postgres_url, tmp_path)
    study = wait_for_trial(postgres_url, min_done=3, procs=[procs[0]])
    victim = procs[0]
    victim.kill()
    victim.communicate(timeout=60)
    finish(procs[1:])
    study = kind_study(postgres_url)
    assert_exact(study, 20)
    stale = [t for t in study.trials if t.outcome == "interrupted"]
    assert len(stale) == 1, "the killed worker's trial was not found"
    for t in stale:
        assert any(u.requeued_from == t.number and u.measured for u in study.trials), _trials_text(study)


@pytest.mark.slow  # real worker processes
def test_run_with_two_workers_splits_the_cores_and_measures_each_configuration_once(tmp_path):
    (tmp_path / "space.toml").write_text(SPACE)
    url = f"sqlite:///{tmp_path}/two.db"
    res = cli("run", "--model", "failing_workloads:tiny", "--space", str(tmp_path / "space.toml"), "--study", "two",
              "--storage", url, "--trials", "8", "--quick", "--no-early-stop", "--confirm", "0", "--seed", "1",
              "--sampler", "tpe", "--workers", "2", cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 0 and "Traceback" not in out, out
    assert "2 workers" in out
    study = read(url, "two")
    assert_exact(study, 8)
    cores = sorted(os.sched_getaffinity(0))
    shares = {tuple(share) for share in daemon.shares(2)}
    assert len(shares) == 2 and set().union(*shares) == set(cores)
    # each of the two workers measured some of the configurations, each on its own share of the cores
    measured = [t for t in study.trials if t.measured]
    share_of = {}
    for t in measured:
        share_of.setdefault(owner_pid(t), set()).add(tuple(t.placement["cpus"]))
    assert len(share_of) == 2 and None not in share_of, share_of
    assert all(len(used) == 1 for used in share_of.values()), share_of  # a worker stays on its share
    assert {next(iter(used)) for used in share_of.values()} == shares, share_of


@pytest.mark.slow  # real worker processes
def test_journal_storage_with_three_processes_and_a_kill_9(tmp_path):
    url = f"journal:{tmp_path}/fleet.log"
    submit(url, tmp_path, model="failing_workloads:slow")
    procs = run_workers(url, tmp_path)
    wait_for_trial(url, min_done=3, procs=[procs[1]])
    procs[1].kill()
    procs[1].communicate(timeout=60)
    finish([procs[0], procs[2]])
    study = kind_study(url)
    assert_exact(study, 20)


@pytest.mark.slow  # real worker processes
def test_sigterm_of_a_daemon_mid_trial_requeues_it_and_exits_cleanly(postgres_url, tmp_path):
    submit(postgres_url, tmp_path, trials=6, model="failing_workloads:slow")
    (proc,) = run_workers(postgres_url, tmp_path, 1)
    study = wait_for_trial(postgres_url, min_done=1, procs=[proc])
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "stopped by a signal" in out and "Traceback" not in out
    study = kind_study(postgres_url)
    stopped = [t for t in study.trials if t.outcome == "interrupted"]
    assert len(stopped) == 1
    waiting = [t for t in study.trials if t.state == "waiting"]
    assert [t.requeued_from for t in waiting] == [stopped[0].number]
    finish(run_workers(postgres_url, tmp_path, 1))
    assert_exact(kind_study(postgres_url), 6)


@pytest.mark.slow  # real worker processes
def test_workers_carry_on_through_a_database_outage(postgres_url, postgres_server, tmp_path):
    submit(postgres_url, tmp_path, trials=12, model="failing_workloads:slow")
    procs = run_workers(postgres_url, tmp_path, 2)
    wait_for_trial(postgres_url, min_done=2)
    with postgres_server.down(seconds=4):  # held down 4 s, while the workers measure and write
        import psycopg2

        with pytest.raises(psycopg2.OperationalError):  # the outage is real
            psycopg2.connect(postgres_url, connect_timeout=2).close()
    outs = finish(procs)
    assert any("storage unreachable" in out for out in outs), outs
    assert_exact(kind_study(postgres_url), 12)


@pytest.mark.slow  # real worker processes
def test_two_runs_on_one_sqlite_study_share_it_without_double_counting(tmp_path):
    (tmp_path / "space.toml").write_text(SPACE)
    url = f"sqlite:///{tmp_path}/shared.db"
    args = ["run", "--model", "failing_workloads:slow", "--space", str(tmp_path / "space.toml"), "--study", "shared",
            "--storage", url, "--trials", "10", "--quick", "--no-early-stop", "--confirm", "0", "--seed", "2",
            "--sampler", "tpe"]
    first = start(*args, cwd=tmp_path)
    wait_for_trial(url, min_done=0, procs=[first], load=lambda: read(url, "shared"))
    second = start(*args, cwd=tmp_path)
    finish([first, second])
    study = read(url, "shared")
    assert_exact(study, 10)
    # they did share it: both measured configurations, and at the same time (a trial of each overlapped)
    measured = {pid: [t for t in study.trials if t.measured and owner_pid(t) == pid] for pid in (first.pid, second.pid)}
    assert all(measured.values()) and sum(map(len, measured.values())) == 10, _trials_text(study)
    assert any(a.started < b.completed and b.started < a.completed
               for a in measured[first.pid]
               for b in measured[second.pid]), "the two runs never measured at the same time"


@pytest.mark.slow  # real worker processes
def test_a_worker_of_another_machine_kind_refuses_to_join(tmp_path):
    (tmp_path / "space.toml").write_text(SPACE)
    url = f"sqlite:///{tmp_path}/s.db"
    res = cli("run", "--model", "failing_workloads:tiny", "--space", str(tmp_path / "space.toml"), "--study", "s",
              "--storage", url, "--trials", "2", "--quick", "--confirm", "0", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    fp = dict(read(url, "s").fingerprint, device_name="Other CPU", cpu_model="Other CPU")
    LiveStudy(Store(url).load("s")).save(fingerprint=fp)
    res = cli("worker", "--study", "s", "--storage", url, cwd=tmp_path)
    assert res.returncode == 2 and "hardware/software differ" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_shares_split_the_cores():
    assert daemon.shares(2, [0, 1]) == [[0], [1]]
    assert daemon.shares(2, [0, 1, 2, 3, 4]) == [[0, 1, 2], [3, 4]]
    with pytest.raises(Exception, match="one worker needs one"):
        daemon.shares(3, [0, 1])


def test_devices_are_the_gpus_of_the_mask_this_process_was_given():
    assert daemon.device_masks([0, 1], None) == ["0", "1"]
    assert daemon.device_masks([0, 1], "4,5") == ["4", "5"]  # cuda:0 and cuda:1 of this process are GPUs 4 and 5
    assert daemon.device_masks([1], "GPU-8f6b3c2e, MIG-2a1c") == ["MIG-2a1c"]  # UUIDs and MIG names as CUDA takes them
    with pytest.raises(DeviceError, match="GPU 2 is not among the 2"):
        daemon.device_masks([2], "4,5")


@pytest.fixture
def started(monkeypatch):
    """The (command, environment) of each worker process spawn_local starts, none of them started."""
    out = []

    class Popen:
        def __init__(self, cmd, env, **kwargs):
            out.append((cmd, env))

    monkeypatch.setattr(daemon.subprocess, "Popen", Popen)
    return out


def test_each_gpu_worker_sees_its_own_gpu_of_an_inherited_mask_and_a_share_of_the_cores(started, monkeypatch,
                                                                                        tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaa,GPU-bbb")
    monkeypatch.setattr(daemon.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    store = Store(f"sqlite:///{tmp_path}/s.db")
    daemon.spawn_local("s", store, 1, [[1], [0]], "cuda:0")
    masks = [env["CUDA_VISIBLE_DEVICES"] for _, env in started]
    assert masks == ["GPU-bbb", "GPU-aaa"]
    assert all(cmd[cmd.index("--device") + 1] == "cuda:0" for cmd, _ in started)
    assert [cmd[cmd.index("--cpus") + 1] for cmd, _ in started] == ["0,1", "2,3"]  # its sibling's cores are not its own


def test_a_trial_of_n_ranks_counts_as_n_gpus_a_worker_holding_that_many(started, monkeypatch, tmp_path):
    """--devices 0-7 with 2-rank trials: 4 workers, each seeing its two GPUs (of the inherited mask) and a share of the
    cores; the most ranks of the space decide; fewer GPUs than a trial's ranks is one clear line."""
    from types import SimpleNamespace

    from autotune.knobs.space import Dimension

    assert daemon.parse_devices("0-7") == tuple(range(8)) and daemon.parse_devices("0-1, 4") == (0, 1, 4)
    for bad in ("0-x", "3-1", "a"):
        with pytest.raises(AutotuneError, match="expected GPU numbers such as 0,1,2,3 or 0-7"):
            daemon.parse_devices(bad)
    assert daemon.device_groups(list(range(8)), 2) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert daemon.device_groups([0, 1, 2], 2) == [[0, 1]]  # the GPU left over is not used
    assert daemon.device_groups([3, 1], 1) == [[3], [1]]
    with pytest.raises(DeviceError, match="1 GPU given, but a configuration of this study trains as 2 ranks"):
        daemon.device_groups([0], 2)
    searched = SimpleNamespace(space=SimpleNamespace(search={"ranks": Dimension("ranks", (1, 2))}), base={"ranks": 1})
    fixed = SimpleNamespace(space=SimpleNamespace(search={}), base={"ranks": 4})
    assert daemon.ranks_per_trial(searched) == 2 and daemon.ranks_per_trial(fixed) == 4
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    monkeypatch.setattr(daemon.os, "sched_getaffinity", lambda pid: set(range(8)))
    daemon.spawn_local("s", Store(f"sqlite:///{tmp_path}/s.db"), 1, daemon.device_groups([0, 1, 2, 3], 2), "cuda:0")
    assert [env["CUDA_VISIBLE_DEVICES"] for _, env in started] == ["4,5", "6,7"]
    assert [cmd[cmd.index("--cpus") + 1] for cmd, _ in started] == ["0,1,2,3", "4,5,6,7"]


def test_a_worker_that_sees_one_gpu_of_several_joins_the_study_made_where_all_were_seen():

    made = {"device_type": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "device_count": 4, "torch": "2.11.0",
            "cuda": "13.0", "cpu_model": "Xeon", "cpu_count": 64, "cpu_capability": "AVX512"}
    assert identity.differences(made, {**made, "device_count": 1}) == []
    assert identity.differences(made, {**made, "device_name": "NVIDIA H200"}) != []


@pytest.mark.slow  # real worker processes
def test_a_worker_joins_a_submitted_job_by_its_name(tmp_path):
    """`submit --study fleet` then `worker --study fleet` (the worker's own --help example): the worker works on the
    job's study for this machine's kind, as `worker --all` would (it said "holds no job (made before autotune 0.2)")."""
    url = f"journal:{tmp_path / 'fleet.log'}"
    submit(url, tmp_path, name="fleet", trials=3)
    res = cli("worker", "--study", "fleet", "--storage", url, cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "job 'fleet': working on study 'fleet@" in res.stdout and "Traceback" not in res.stderr
    assert_exact(kind_study(url, "fleet"), 3)


@pytest.mark.slow  # real worker processes
def test_tune_with_two_workers_does_what_run_with_two_workers_does(tmp_path, monkeypatch):
    """tune(workers=2): two worker processes, each on its share of the cores, measure the budget exactly once."""
    import autotune

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    (tmp_path / "space.toml").write_text(SPACE)
    url = f"sqlite:///{tmp_path}/two.db"
    result = autotune.tune("failing_workloads:tiny", space=str(tmp_path / "space.toml"), study="two", storage=url,
                           trials=6, quick=True, early_stop=False, confirm=0, seed=1, sampler="tpe", workers=2,
                           progress=False)
    assert result.measured == 6
    study = read(url, "two")
    assert_exact(study, 6)
    share_of: dict = {}
    for t in study.trials:
        if t.measured:
            share_of.setdefault(owner_pid(t), set()).add(tuple(t.placement["cpus"]))
    assert len(share_of) == 2 and all(len(used) == 1 for used in share_of.values()), share_of


@pytest.mark.parametrize(("keywords", "options", "said_api", "said_cli"), [
    ({"workers": 0}, ["--workers", "0"], "the workers (workers=) must be a whole number of at least 1, not 0",
     "the workers (--workers) must be a whole number of at least 1, not 0"),
    ({"devices": "0,a"}, ["--devices", "0,a"], "devices='0,a': expected GPU numbers such as 0,1,2,3",
     "--devices '0,a': expected GPU numbers such as 0,1,2,3"),
    ({"devices": [0]}, ["--devices", "0"], "this machine has no CUDA device", "this machine has no CUDA device"),
])
def test_tune_and_run_refuse_bad_workers_and_devices_alike(tmp_path, monkeypatch, keywords, options, said_api,
                                                           said_cli):
    """The same checks on both surfaces, each in its own words, before anything is stored."""
    import autotune
    import torch

    from autotune.errors import AutotuneError

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(AutotuneError) as caught:
        autotune.tune("autotune.examples:mlp", progress=False, **keywords)
    assert said_api in str(caught.value)
    res = CliRunner().invoke(main, ["run", "--model", "autotune.examples:mlp", *options])
    assert res.exit_code == 2 and said_cli in res.output and "Traceback" not in res.output, res.output
    assert len(res.output.strip().splitlines()) == 1
    assert not (tmp_path / "studies").exists() or not any((tmp_path / "studies").iterdir())
