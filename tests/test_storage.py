"""Storage URLs: passwords never reach an error message or a printed URL (redact), and bad URLs
fail with one clear line."""

from __future__ import annotations

import pytest

from autotune import storage
from autotune.errors import StorageError, StudyError
from autotune.storage import redact, redact_message

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
        ("postgresql://user:SECRETPW@host:notaport/db", "postgresql://user:***@host:notaport/db"),  # SQLAlchemy cannot parse it
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
        ("postgresql://user:SECRETPW@127.0.0.1:1/db", "storage 'postgresql://user:***@127.0.0.1:1/db'"),
        ("postgresql:/user:SECRETPW@127.0.0.1:1/db", "expected a URL such as"),
        ("nosuchdialect://user:SECRETPW@host/db", "cannot be opened"),
        ("postgresql://user:SECRETPW@host:notaport/db", "storage 'postgresql://user:***@host:notaport/db'"),
    ],
)
def test_open_storage_errors_never_show_the_password(url, message):
    with pytest.raises(StorageError) as info:
        storage.open_storage(url)
    text = str(info.value)
    assert message in text and SECRET not in text and "\n" not in text


def test_study_errors_show_no_password(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path}/s.db"
    with pytest.raises(StudyError, match="no study 'x'"):
        storage.load("x", url)
    # a URL whose password the messages would otherwise carry
    monkeypatch.setattr(storage, "open_storage", lambda u: storage.optuna.storages.InMemoryStorage())
    with pytest.raises(StudyError) as info:
        storage.load("x", "postgresql://user:SECRETPW@host/db")
    assert SECRET not in str(info.value) and "postgresql://user:***@host/db" in str(info.value)


def test_journal_folder_missing_is_one_line(tmp_path):
    with pytest.raises(StorageError, match="does not exist"):
        storage.open_storage(f"journal:{tmp_path}/nope/x.log")


ATTRS = {"workload": {"model": "x:y"}, "space": {"name": "s"}, "space_hash": "h", "fingerprint": {"device_type": "cpu"},
         "device": "cpu", "context": {}, "global_batch": None}


def test_a_study_another_process_is_still_describing_is_joined_not_refused(tmp_path):
    """Workers starting together: one creates the study, another loads it before its attributes are written."""
    import threading

    import optuna

    url = f"sqlite:///{tmp_path / 'race.db'}"
    bare = optuna.create_study(study_name="s", storage=url, directions=storage.DIRECTIONS)  # created, not yet described

    def describe() -> None:
        for key, value in ATTRS.items():
            bare.set_user_attr(key, value)
        bare.set_user_attr("created_at", "2026-11-23T00:00:00+00:00")

    timer = threading.Timer(1.0, describe)
    timer.start()
    study, created = storage.create_or_check("s", url, ATTRS)
    timer.join()
    assert not created and study.user_attrs["fingerprint"] == {"device_type": "cpu"}


def test_a_study_not_made_by_autotune_is_refused_after_the_wait(tmp_path, monkeypatch):
    import optuna

    monkeypatch.setattr(storage, "DESCRIBE_WAIT_S", 0.3)
    url = f"sqlite:///{tmp_path / 'foreign.db'}"
    optuna.create_study(study_name="s", storage=url, directions=storage.DIRECTIONS)
    with pytest.raises(StudyError, match="was not made by autotune"):
        storage.create_or_check("s", url, ATTRS)


def test_a_seed_holds_for_the_process_that_creates_the_study_and_each_joiner_draws_its_own(tmp_path):
    import optuna

    def first_draws(study: optuna.Study) -> list[int]:
        trial = study.ask()
        return [trial.suggest_int(f"x{i}", 0, 10**9) for i in range(3)]

    reference = first_draws(optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1)))
    url = f"sqlite:///{tmp_path / 'seeded.db'}"
    creator, created = storage.create_or_check("s", url, ATTRS, optuna.samplers.RandomSampler(seed=1))
    assert created and first_draws(creator) == reference  # a new study is reproducible
    joiners = [storage.create_or_check("s", url, ATTRS, optuna.samplers.RandomSampler(seed=1))[0] for _ in range(2)]
    draws = [first_draws(j) for j in joiners]
    # same seed, yet the workers joining the study would not propose what the creator or each other did
    assert reference not in draws and draws[0] != draws[1]
