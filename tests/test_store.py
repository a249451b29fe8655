"""The store: passwords never reach an error message or a printed URL (redact); bad URLs and unsafe
study names fail in one line before any file is touched; read-only stores create nothing and leave
foreign databases as they were; a storage that refuses writes ends in one line and strands nothing.
Storage behaviour runs over SQLite, the journal file and PostgreSQL alike (the ``store_url`` fixture)."""

from __future__ import annotations

import pytest

import hashlib
import os
import subprocess
from pathlib import Path

import optuna
from click.testing import CliRunner
from autotune.testing.suite import need

from autotune import cli
from autotune.store import recovery
from autotune import result as R
from autotune import store as storage
from autotune.tuning import loop
from autotune.errors import StorageError, StorageUnreachable, StudyError
from autotune.request import WorkloadSpec
from autotune import knobs
from autotune.store import Store, check_name, redact, redact_message
from autotune.testing import studies as made_up

SECRET = "SECRETPW"


@pytest.mark.parametrize(
    "url, shown",
    [
        ("postgresql://user:SECRETPW@127.0.0.1:1/db", "postgresql://user:***@127.0.0.1:1/db"),
        ("postgresql+psycopg2://user:SECRETPW@db.example:5432/studies?sslmode=require",
         "postgresql+psycopg2://user:***@db.example:5432/studies?sslmode=require"),
        ("mysql+pymysql://user:SECRETPW@host/db", "mysql+pymysql://user:***@host/db"),
        ("postgresql://user:p%40SECRETPW@host/db", "postgresql://user:***@host/db"),  # an escaped '@' in the password
        ("postgresql://user:p@SECRETPW@host/db", "postgresql://user:***@host/db"),  # an unescaped one
        ("postgresql://host/db?user=me&password=SECRETPW&sslmode=require",
         "postgresql://host/db?user=me&password=***&sslmode=require"),
        # SQLAlchemy cannot parse it
        ("postgresql://user:SECRETPW@host:notaport/db", "postgresql://user:***@host:notaport/db"),
        ("postgresql:/user:SECRETPW@host/db", "postgresql:/user:***@host/db"),  # nor this
        ("host=db password=SECRETPW dbname=x", "host=db password=*** dbname=x"),  # a libpq DSN
    ],
)
def test_redact_masks_the_password(url, shown):
    assert redact(url) == shown
    assert SECRET not in redact(url)


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///studies/x.db",
        "sqlite:////abs/path/x.db",
        "sqlite:///:memory:",
        "journal:studies/x.log",
        "journal:///abs/x.log",
        "postgresql://user@host/db",
        "postgresql://user@/db?host=/var/run/postgresql",
        "garbage",
        "",
    ],
)
def test_redact_leaves_urls_without_a_password_alone(url):
    assert redact(url) == url


def test_redact_message_masks_the_urls_password_anywhere():
    url = "postgresql://user:p%40SECRETPW@host/db"
    text = "could not parse 'postgresql://user:p%40SECRETPW@host/db'; password p@SECRETPW rejected"
    masked = redact_message(text, url)
    assert SECRET not in masked and masked.count("***") == 2
    # without the URL, what is shaped like a password still goes
    assert SECRET not in redact_message("dsn 'host=h password=SECRETPW' and mysql://u:SECRETPW@h/db")


@pytest.mark.parametrize(
    "url, message",
    [
        ("postgresql://user:SECRETPW@127.0.0.1:1/db", "postgresql://user:***@127.0.0.1:1/db is unreachable"),
        ("postgresql:/user:SECRETPW@127.0.0.1:1/db", "expected a URL such as"),
        ("nosuchdialect://user:SECRETPW@host/db", "cannot be opened"),
        ("postgresql://user:SECRETPW@host:notaport/db", "storage 'postgresql://user:***@host:notaport/db'"),
    ],
)
def test_open_storage_errors_never_show_the_password(url, message):
    with pytest.raises(StorageError) as info:
        Store(url).names()
    text = str(info.value)
    assert message in text and SECRET not in text and "\n" not in text


def test_a_password_written_unencoded_shows_no_piece_of_itself():
    """'@' and ':' in a password split it where the URL is parsed; an error may quote a piece: masked too."""
    with pytest.raises(StorageError) as info:
        Store("postgresql://user:p4ss@SECRETPW:w0rd@127.0.0.1:1/db").names()
    text = str(info.value)
    assert SECRET not in text and "w0rd" not in text and "p4ss" not in text and "\n" not in text


def test_study_errors_show_no_password(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path}/s.db"
    with pytest.raises(StudyError, match="no study 'x'"):
        Store(url).load("x")
    # a URL whose password the messages would otherwise carry
    monkeypatch.setattr(Store, "_connect", lambda self: optuna.storages.InMemoryStorage())
    with pytest.raises(StudyError) as info:
        Store("postgresql://user:SECRETPW@host/db").load("x")
    assert SECRET not in str(info.value) and "postgresql://user:***@host/db" in str(info.value)


def test_journal_folder_missing_is_one_line(tmp_path):
    with pytest.raises(StorageError, match="does not exist"):
        Store(f"journal:{tmp_path}/nope/x.log").create("x")


ATTRS = made_up.description(made_up.space_of_one(), knobs.Context())


def test_a_study_another_process_is_still_describing_is_joined_not_refused(tmp_path):
    """Workers starting together: one creates the study, another loads it before its attributes are written."""
    import threading

    url = f"sqlite:///{tmp_path / 'race.db'}"
    bare = optuna.create_study(study_name="s", storage=url, directions=storage.DIRECTIONS)  # created, not yet described

    def describe() -> None:
        for key, value in ATTRS.items():
            bare.set_user_attr(key, value)
        bare.set_user_attr("created_at", "2026-11-23T00:00:00+00:00")

    timer = threading.Timer(1.0, describe)
    timer.start()
    study, created = Store(url).create_or_check("s", ATTRS)
    timer.join()
    assert not created and study.user_attrs["fingerprint"] == ATTRS["fingerprint"]


def test_a_study_not_made_by_autotune_is_refused_after_the_wait(tmp_path, monkeypatch):
    monkeypatch.setattr(storage.studies, "DESCRIBE_WAIT_S", 0.3)
    url = f"sqlite:///{tmp_path / 'foreign.db'}"
    optuna.create_study(study_name="s", storage=url, directions=storage.DIRECTIONS)
    with pytest.raises(StudyError, match="was not made by autotune"):
        Store(url).create_or_check("s", ATTRS)


def test_a_seed_holds_for_the_process_that_creates_the_study_and_each_joiner_draws_its_own(tmp_path):
    def first_draws(study: optuna.Study) -> list[int]:
        trial = study.ask()
        return [trial.suggest_int(f"x{i}", 0, 10**9) for i in range(3)]

    reference = first_draws(optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1)))
    url = f"sqlite:///{tmp_path / 'seeded.db'}"
    creator, created = Store(url).create_or_check("s", ATTRS, optuna.samplers.RandomSampler(seed=1))
    assert created and first_draws(creator) == reference  # a new study is reproducible
    joiners = [Store(url).create_or_check("s", ATTRS, optuna.samplers.RandomSampler(seed=1))[0] for _ in range(2)]
    draws = [first_draws(j) for j in joiners]
    # same seed, yet the workers joining the study would not propose what the creator or each other did
    assert reference not in draws and draws[0] != draws[1]


# ---------------------------------------------------------------- one storage behaviour, three storages


@pytest.mark.parametrize("url", ["sqlite:///x.db", "journal:x.log"])
def test_a_relative_file_is_another_store_once_the_process_changes_folder(url, tmp_path, monkeypatch):
    """One store per URL and process, but ``x.db`` in another folder is another file (a notebook's os.chdir):
    the store opened in the first folder is not handed out for the second."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    first = Store.open(url)
    monkeypatch.chdir(tmp_path / "b")
    second = Store.open(url)
    assert second is not first and Store.open(url) is second
    assert Store.open(f"{url.split(':')[0]}:///{tmp_path}/a/x.db") is Store.open(f"{url.split(':')[0]}:///{tmp_path}/a/x.db")


def test_a_store_creates_checks_lists_and_loads_studies(store_url):
    store = Store(store_url)
    assert store.names() == [] and store.shown == redact(store_url)
    study, created = store.create_or_check("s", ATTRS)
    assert created and study.user_attrs["fingerprint"] == ATTRS["fingerprint"]
    study.tell(study.ask(), [1.0, 2.0])
    reader = Store(store_url, read_only=True)
    assert reader.names() == ["s"]
    (trial,) = reader.load("s").get_trials()
    assert trial.values == [1.0, 2.0]
    with pytest.raises(StudyError, match="no study 'nosuch'.*studies there: s"):
        reader.load("nosuch")
    with pytest.raises(StudyError, match="made for another setup"):
        Store(store_url).create_or_check("s", {**ATTRS, "space_hash": "other"})
    with pytest.raises(StorageError, match="read-only"):
        reader.create("t")


def test_a_race_and_a_claim_are_stored_and_read_back_typed(store_url):
    """The loop's plans (autotune.store.plans) round-trip through every storage: what a resumed run reads is what the
    stopped one wrote, stops and undecided reductions included."""
    from autotune.store import ConfirmRecord, ConfirmStop, LiveStudy, RaceRecord, RaceStop

    study, _ = Store(store_url).create_or_check("plans", ATTRS)
    live = LiveStudy(study)
    race = RaceRecord((3, 5), 12, 8, 1.5, within=(5,), min_rounds=2, looks=3, done=True, stop=RaceStop.CHOSEN,
                      stopped="chosen: #3", rounds_run=2, eliminated={5: "slower than #3 beyond the noise"})
    live.save_race("r1", race)
    open_claim = ConfirmRecord(3, "r1", 2.5, reduced=7, reverted={"batch_size": 128}, width=1.4)
    live.save_confirm("c1", open_claim)
    read = Store(store_url, read_only=True).read("plans")
    assert read.races() == [("r1", race)]
    assert read.confirms() == [("c1", open_claim)] and read.confirms()[0][1].reduction is None
    done = ConfirmRecord(3, "r1", 2.5, reduced=7, reverted={"batch_size": 128}, rounds=4, width=1.4, done=True,
                         stop=ConfirmStop.WIDTH, reduction=True)
    live.save_confirm("c1", done)
    assert Store(store_url, read_only=True).read("plans").confirms() == [("c1", done)]


def test_a_read_only_store_of_a_missing_file_creates_nothing(store_url, tmp_path):
    if "://" in store_url and not store_url.startswith("sqlite"):
        pytest.skip("a database server has no file to leave uncreated")
    reader = Store(store_url, read_only=True)
    assert reader.names() == []
    with pytest.raises(StudyError, match="does not exist"):
        reader.load("s")
    assert list(tmp_path.iterdir()) == []


def test_a_process_opens_each_store_once():
    url = "sqlite:///:memory:"
    assert Store.open(url) is Store.open(url)
    assert Store.open(url, read_only=True) is not Store.open(url)


def _pop_queue(url: str, name: str, out: str) -> None:
    """A worker process: take queued trials until none is left, writing each trial number taken to ``out``."""
    study = Store(url).load(name)
    with open(out, "w") as f:
        while True:
            trial = study.ask()
            if not trial.user_attrs.get("queued"):  # the queue is empty: this trial is a new one
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                return
            f.write(f"{trial.number}\n")
            f.flush()
            study.tell(trial, [1.0, 1.0])


def test_processes_taking_queued_trials_never_take_the_same_one(store_url, tmp_path):
    """Optuna's queue of enqueued trials (the baseline, the recipe, warm starts, neighbours) is popped by every worker:
    each queued trial goes to one of them, never two (on SQLite, Python's sqlite3 read the trial WAITING in one
    transaction and set it RUNNING in another, and two workers measured and told the same trial)."""
    import multiprocessing

    store = Store(store_url)
    study = store.create("queue")
    for k in range(60):
        study.enqueue_trial({"x": k}, user_attrs={"queued": True})
    spawn = multiprocessing.get_context("spawn")
    outs = [str(tmp_path / f"taken-{k}.txt") for k in range(4)]
    workers = [spawn.Process(target=_pop_queue, args=(store_url, "queue", out)) for out in outs]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=240)
    assert [w.exitcode for w in workers] == [0] * 4
    taken = [int(line) for out in outs for line in Path(out).read_text().split()]
    assert sorted(taken) == sorted(set(taken)), f"taken twice: {sorted(n for n in set(taken) if taken.count(n) > 1)}"
    assert len(taken) == 60


# ---------------------------------------------------------------- study names


@pytest.mark.parametrize("name", ["../../../tmp/escape", "a/b", "<script>alert(1)</script>", ".hidden", "-rf", "",
                                  "x" * 201, "tab\there", "naïve"])
def test_an_unsafe_study_name_is_refused(name):
    with pytest.raises(StudyError, match="not allowed|is needed"):
        check_name(name)


@pytest.mark.parametrize("name", ["mynet", "cnn-nightly", "autotune.examples-mlp",
                                  "job@cpu-amd-epyc-2c-avx512-torch2.13.0", "_private", "A1"])
def test_a_safe_study_name_is_accepted(name):
    assert check_name(name) == name


@pytest.mark.parametrize("spec", ["mypkg.models:build_model", "hf:gpt2", "<lambda>", "pkg/mod:f", "../x:y", "café:x"])
def test_default_study_names_are_always_safe(spec):
    assert check_name(WorkloadSpec(model=spec).default_study_name())


@pytest.mark.parametrize("command", [["status"], ["export"], ["dashboard"],
                                     ["run", "--model", "autotune.examples:mlp", "--study"]])
def test_a_command_refuses_a_name_that_is_a_path_before_touching_any_file(tmp_path, monkeypatch, command):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    args = command + ["../escape"] if command[0] == "run" else [command[0], "../escape"]
    out = CliRunner().invoke(cli.main, args)
    assert out.exit_code == 2, out.output
    assert out.output.count("\n") == 1 and "not allowed" in out.output and "Traceback" not in out.output
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["work"]


# ---------------------------------------------------------------- read commands create nothing


@pytest.mark.parametrize("command", [["status", "nosuch"], ["status", "nosuch", "--json"], ["export", "nosuch"],
                                     ["dashboard", "nosuch"], ["list"]])
def test_read_commands_in_an_empty_folder_leave_it_empty(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(cli.main, command)
    if command == ["list"]:
        assert out.exit_code == 0 and out.output.strip() == "no studies in studies/"
    else:
        assert out.exit_code == 2 and out.output.strip() == "error: no study 'nosuch': studies/nosuch.db does not exist"
    assert list(tmp_path.iterdir()) == []


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("command", [["status", "x"], ["status", "x", "--json"], ["export", "x"], ["dashboard", "x"],
                                     ["list"]])
def test_read_commands_leave_a_foreign_database_as_it_was(tmp_path, monkeypatch, command):
    import sqlite3

    monkeypatch.chdir(tmp_path)
    foreign = tmp_path / "theirs.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO accounts (name) VALUES ('alice')")
    conn.close()
    before = _digest(foreign)
    out = CliRunner().invoke(cli.main, [*command, "--storage", f"sqlite:///{foreign}"])
    assert out.exit_code == 2, out.output
    assert out.output.count("\n") == 1 and "not an Optuna storage" in out.output and "left as it was" in out.output
    assert _digest(foreign) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["theirs.db"]


@pytest.mark.parametrize("command", [["status", "x"], ["export", "x"], ["list"],
                                     ["run", "--model", "autotune.examples:mlp", "--study", "x", "--quick"]])
def test_a_file_that_is_no_journal_is_refused_in_one_line_and_left_as_it_was(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    foreign = tmp_path / "server.log"
    foreign.write_text("2026-11-24 23:40:01 server started\n2026-11-24 23:40:02 listening on :8080\n")
    before = _digest(foreign)
    out = CliRunner().invoke(cli.main, [*command, "--storage", f"journal:{foreign}"])
    assert out.exit_code == 2, out.output
    assert out.output.count("\n") == 1 and "Traceback" not in out.output
    assert f"journal:{foreign} is not an Optuna journal file, or it is damaged" in out.output
    assert "left as it was" in out.output
    assert _digest(foreign) == before and sorted(p.name for p in tmp_path.iterdir()) == ["server.log"]


# ---------------------------------------------------------------- faults: a storage that refuses writes


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, timeout=30)


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder that can be made read-only for real: a read-only bind mount (as root), else chmod 555."""
    folder = tmp_path / "ro"
    folder.mkdir()
    state = {"mounted": False}

    def make_read_only() -> None:
        if os.geteuid() == 0:
            try:
                _mount("--bind", str(folder), str(folder))
                state["mounted"] = True
                _mount("-o", "remount,bind,ro", str(folder))
            except (subprocess.CalledProcessError, FileNotFoundError) as exc:
                need(f"cannot make a read-only bind mount here: {exc}")
        else:
            for path in [folder, *folder.iterdir()]:
                path.chmod(0o555 if path.is_dir() else 0o444)

    def make_writable() -> None:
        if state["mounted"]:  # lazily: the store's pooled connections keep the file open
            subprocess.run(["umount", "-l", str(folder)], check=True, capture_output=True, timeout=30)
            state["mounted"] = False
        for path in [folder, *folder.iterdir()]:
            path.chmod(0o755 if path.is_dir() else 0o644)

    yield folder, make_read_only, make_writable
    make_writable()


def _tuner(store: Store, evaluate, trials: int = 6) -> loop.Tuner:
    from autotune import knobs
    from autotune.knobs import space

    CTX = knobs.Context(device_type="cpu", task="train", input_rank=2, cpu_count=2)
    SPACE = space.parse({"search": {"batch_size": {"low": 16, "high": 256, "step": 16}}}, "test.toml", "test")
    from autotune.tuning.phases import Bench, Seeds

    study, _ = store.create_or_check("s", {**ATTRS, "space": SPACE.to_dict(), "space_hash": SPACE.hash(),
                                           "context": CTX.to_dict()}, loop.make_sampler("random", 0))
    base = loop.base_config(CTX, SPACE.fixed, None)
    return loop.Tuner(storage.LiveStudy(study), Seeds(space.effective(SPACE, CTX, base), CTX, base), Bench(evaluate),
                   loop.Options(trials=trials, race_rounds=0, floor_repeats=0), check=store.check_alive)


def _sabotaging(on_call: int, sabotage):
    """A fake measurement that does ``sabotage()`` during its ``on_call``-th trial."""
    calls = {"n": 0}

    def evaluate(config, dominators=(), margin=None):
        calls["n"] += 1
        result = R.TrialResult(outcome=R.OK, samples_per_s=100.0 + config["batch_size"], samples_per_s_cv=0.01,
                               peak_memory_bytes=10**8, wall_s=0.01)
        if calls["n"] == on_call:
            sabotage()
            # a record larger than a page: a full disk still takes what fits in the last page a file holds, so
            # whether this trial's own record met the fault hung on where the file's earlier records ended
            result.notes["log"] = "x" * 16384
        return result

    return evaluate


def _run_until_fault(store: Store, evaluate) -> StorageError:
    tuner = _tuner(store, evaluate)
    with pytest.raises(StorageError) as info:
        with store.faults():
            tuner.run()
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    return info.value


def _nothing_stranded(url: str) -> None:
    """Once the storage takes writes again, a new start leaves no trial RUNNING and queues the interrupted one again."""
    study = Store(url).load("s")
    recovery.recover_stale(study, grace_s=60)
    trials = study.get_trials()
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    interrupted = [t for t in trials if t.user_attrs.get("outcome") == "interrupted"]
    queued = [t for t in trials if t.state == optuna.trial.TrialState.WAITING]
    assert len(interrupted) == 1 and [t.user_attrs.get("requeued_from") for t in queued] == [interrupted[0].number]


def test_a_read_only_folder_ends_a_run_in_one_line_and_strands_nothing(read_only_folder):
    folder, make_read_only, make_writable = read_only_folder
    url = f"sqlite:///{folder / 's.db'}"
    fault = _run_until_fault(Store(url), _sabotaging(3, make_read_only))
    assert "refuses writes (a read-only file or folder)" in str(fault)
    out = CliRunner().invoke(cli.main, ["status", "s", "--storage", url])  # reading still works
    assert out.exit_code == 0, out.output
    make_writable()
    _nothing_stranded(url)


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_full_disk_ends_a_run_in_one_line_and_strands_nothing(tmp_path, kind):
    """Also for the journal, whose write cut short by the full disk leaves half a record at the file's end:
    the next start's writes must not join it into a line no reader can decode."""
    if os.geteuid() != 0:
        need("mounting a small tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    try:
        _mount("-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk))
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        need(f"cannot mount a tmpfs here: {exc}")
    filler = disk / "filler"
    try:
        url = f"sqlite:///{disk / 's.db'}" if kind == "sqlite" else f"journal:{disk / 's.log'}"

        def fill() -> None:
            # to the last byte: 64 KiB writes alone left up to 64 KiB free, and which of the next writes met the full
            # disk then hung on how large the study's records happened to be
            with open(filler, "wb", buffering=0) as fh:
                for size in (65536, 4096, 256, 16, 1):
                    try:
                        while True:
                            fh.write(b"\0" * size)
                    except OSError:
                        pass

        fault = _run_until_fault(Store(url), _sabotaging(3, fill))
        assert "is full" in str(fault)
        filler.unlink()
        _nothing_stranded(url)
        assert Store(url, read_only=True).load("s").get_trials()  # read back whole after the recovery's writes
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True, timeout=30)


def test_a_study_file_deleted_mid_run_ends_it_in_one_line(tmp_path):
    path = tmp_path / "s.db"
    fault = _run_until_fault(Store(f"sqlite:///{path}"), _sabotaging(3, path.unlink))
    assert "was deleted, moved or replaced while in use" in str(fault)


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_a_database_server_gone_ends_a_run_in_one_line_and_strands_nothing(postgres_url, postgres_server):
    fault = _run_until_fault(Store(postgres_url), _sabotaging(3, postgres_server.stop))
    assert isinstance(fault, StorageUnreachable) and "unreachable" in str(fault)
    assert password_free(str(fault), postgres_url)
    postgres_server.start()
    study = Store(postgres_url).load("s")
    (running,) = [t for t in study.get_trials() if t.state == optuna.trial.TrialState.RUNNING]
    # its worker is gone: this host's dead process (here: this very process, which no longer runs it)
    assert recovery.is_stale(running, grace_s=60)


def password_free(text: str, url: str) -> bool:
    from sqlalchemy.engine import make_url

    return (make_url(url).password or "\0") not in text


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_run_ends_in_one_line_when_its_study_file_is_deleted(tmp_path, monkeypatch):
    """The whole command, as a user meets it: a trial's process deletes the study file; the run stops in one line."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "studies" / "gone.db"
    out = CliRunner().invoke(cli.main, ["run", "--model", "failing_workloads:deletes_file",
                                        "--model-arg", f"path={str(path)!r}",
                                        "--model-arg", f"counter={str(tmp_path / 'builds')!r}",
                                        "--study", "gone", "--trials", "3", "--quick", "--confirm", "0"])
    assert out.exit_code == 2, out.output
    assert "Traceback" not in out.output
    last = out.output.strip().splitlines()[-1]
    assert last.startswith("error: ") and "was deleted, moved or replaced while in use" in last


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_new_study_in_a_read_only_folder_is_refused_in_one_line(read_only_folder, kind):
    folder, make_read_only, _ = read_only_folder
    make_read_only()
    store = Store(f"sqlite:///{folder / 's.db'}" if kind == "sqlite" else f"journal:{folder / 's.log'}")
    with pytest.raises(StorageError, match=r"refuses writes \(a read-only file or folder\)") as info:
        with store.faults():
            store.create_or_check("s", ATTRS)
    assert "\n" not in str(info.value) and list(folder.iterdir()) == []


@pytest.mark.parametrize("tail", [b'{"op_code":5,"worker_id":"x","study_id":0,"us', b"\x00" * 9000])
def test_a_journal_record_left_half_written_is_cut_not_joined_to_the_next(tmp_path, tail):
    """A write cut short (a full disk, a kill inside write) leaves half a record at the journal's end; the
    next write drops it instead of joining it into an undecodable line, and the study reads back whole."""
    path = tmp_path / "s.log"
    url = f"journal:{path}"
    study, _ = Store(url).create_or_check("s", ATTRS, loop.make_sampler("random", 0))
    with open(path, "ab") as fh:
        fh.write(tail)
    Store(url).load("s").set_user_attr("after", 1)  # a later process's write
    assert tail not in path.read_bytes()
    again = optuna.load_study(study_name="s", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(path))))  # Optuna's own reader
    assert again.user_attrs["after"] == 1 and again.user_attrs["workload"] == ATTRS["workload"]


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_a_writer_finds_its_study_without_reading_every_studys_attributes(store_url, monkeypatch):
    """Loading a study checks its name in one query: the list of every study (each one's attributes and kept views,
    a year of nightly studies in one database) is read only to say what there is when the name is not there."""
    from autotune.testing.studies import make_study

    store = Store(store_url)
    for k in range(3):
        make_study(store.storage, n_trials=3, seed=k, name=f"night-{k}")
    listed = []
    summaries = Store.summaries
    monkeypatch.setattr(Store, "summaries", lambda self: listed.append(1) or summaries(self))
    assert store.load("night-1").study_name == "night-1" and not listed
    with pytest.raises(StudyError, match="night-0, night-1, night-2"):
        store.load("night-9")
    assert listed
