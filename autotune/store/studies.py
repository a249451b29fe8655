"""The studies a store holds: their names, a study read or loaded, a study created or joined.

Why a module of its own: what the commands ask of a store is mostly its studies (``list`` their names, every read
one study, the tuning job the study it creates or joins); :class:`Studies` is that part of
:class:`autotune.store.Store`, over the storage :class:`autotune.store.connection.Connection` opens.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from autotune._version import __version__
from autotune.errors import AutotuneError, StorageError, StudyError
from autotune.request import option
from autotune.store import reading, writing
from autotune.store.faults import first_line
from autotune.request import second_objective
from autotune.store.names import check_name
from autotune.store.records import StoredStudy
from autotune.store.secrets import redact_message
from autotune.store.matching import check_matches
from autotune.store.connection import Connection, _optuna

if TYPE_CHECKING:
    import optuna

METRICS = ["samples_per_s", "peak_memory_bytes"]
#: the trials' second value by the study's second objective (autotune.request.second_objective)
SECOND_METRIC = {"memory": "peak_memory_bytes", "energy": "joules_per_sample"}
DESCRIBE_WAIT_S = 15.0  # how long a study just created by another process may take to get its attributes


def _directions() -> list[Any]:
    optuna = _optuna()
    return [optuna.study.StudyDirection.MAXIMIZE, optuna.study.StudyDirection.MINIMIZE]


def __getattr__(name: str) -> Any:
    if name == "DIRECTIONS":  # the two objectives' directions, Optuna's enums: Optuna is imported when first asked for
        return _directions()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Studies(Connection):
    """The studies of one storage: listed, read, loaded, created (a part of :class:`autotune.store.Store`)."""

    def names(self) -> list[str]:
        """The names of every study (and submitted job) in the store."""
        if self.missing:
            return []
        with self._studies_read():
            direct = self._direct
            if direct is not None:
                return [name for _, name in direct.studies()]  # no attribute read
        return [s.name for s in self.summaries()]

    def summaries(self) -> list[StoredStudy]:
        """Every study's name and description, in one query (their trials are not read: ``trials`` is empty)."""
        if self.missing:
            return []
        with self._studies_read():
            direct = self._direct
            if direct is not None:
                studies = direct.studies()
                attrs = direct.attrs()
                return [StoredStudy(name, attrs.get(sid, {}), []) for sid, name in studies]
            return [StoredStudy(s.study_name, s.user_attrs, []) for s in self.storage.get_all_studies()]

    @contextlib.contextmanager
    def _studies_read(self) -> Iterator[None]:
        """The store's list of studies failing to be read, as one StorageError."""
        try:
            yield
        except AutotuneError:
            raise
        except Exception as exc:  # noqa: BLE001
            if self._url.startswith("journal:") and isinstance(exc, ValueError):  # a line that is no journal record
                raise StorageError(f"{self.shown} is not an Optuna journal file, or it is damaged (a line that is not "
                                   f"a whole record: {first_line(exc)}); it was left as it was") from None
            raise self.fault(exc) or StorageError(f"cannot read the studies of {self.shown}: "
                                                  f"{redact_message(first_line(exc), self._url)}") from None

    def has(self, name: str) -> bool:
        return name in self.names()

    def load(self, name: str, sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
        """An existing study; StudyError listing what exists when there is none of that name."""
        self._existing(name)
        return _optuna().load_study(study_name=name, storage=self.storage, sampler=sampler)

    def read(self, name: str, description: StoredStudy | None = None) -> StoredStudy:
        """The study ``name``, read once: its description and its trials in one pass (:mod:`.reading`);
        ``description``: already read (``list`` has every study's from one query). StudyError when there is none."""
        with self.faults():
            if description is None:
                self._existing(name)
            direct = self._direct
            if direct is not None:
                study_id = dict((n, i) for i, n in direct.studies())[name]
                attrs = direct.attrs([study_id]).get(study_id, {}) if description is None else description._attrs
                return StoredStudy(name, attrs, direct.trials(study_id))
            study_id = self.storage.get_study_id_from_name(name)
            attrs = self.storage.get_study_user_attrs(study_id) if description is None else description._attrs
            return StoredStudy.from_frozen(name, attrs, reading.all_trials(self.storage, study_id))

    def _existing(self, name: str) -> None:
        check_name(name)
        if not self.read_only and not self.missing:
            # One query for the name (the list of every study reads every study's attributes, kept views and
            # all: a year of nightly studies in one database), the list only to say what there is instead.
            with self._studies_read():
                try:
                    self.storage.get_study_id_from_name(name)
                    return
                except KeyError:
                    pass
        names = self.names()
        if name not in names:
            if self.missing:
                raise StudyError(f"no study {name!r}: {self.path} does not exist")
            hint = f"; studies there: {', '.join(names)}" if names else "; it holds no study"
            raise StudyError(f"no study {name!r} in {self.shown}{hint}")

    def _writable(self) -> optuna.storages.BaseStorage:
        if self.read_only:
            raise StorageError(f"{self.shown} was opened read-only")
        return self.storage

    def create(self, name: str) -> optuna.Study:
        """A new, empty two-objective study (a submitted job's record); StudyError when the name is taken."""
        check_name(name)
        storage = self._writable()
        optuna = _optuna()
        try:
            return optuna.create_study(study_name=name, storage=storage, directions=_directions())
        except optuna.exceptions.DuplicatedStudyError:
            raise StudyError(f"a study or job named {name!r} exists in {self.shown}: "
                             f"choose another {option('study')} name") from None

    def create_or_check(
        self, name: str, attrs: Mapping[str, Any], sampler: optuna.samplers.BaseSampler | None = None
    ) -> tuple[optuna.Study, bool]:
        """Create the study with ``attrs``, or load it and refuse when it was made for something else.

        Returns (study, created). ``attrs`` holds workload, space, space_hash, fingerprint, device, ...

        A seeded ``sampler`` keeps its seed only in the process that creates the study (a new study
        is reproducible). A process that joins one (a worker of a fleet, a resumed run) draws a fresh
        seed, as Optuna does for parallel jobs: with one seed, every worker would propose the same
        configurations in the same order, and all but one of each would be skipped.
        """
        check_name(name)
        storage = self._writable()
        optuna = _optuna()
        created = False
        if name not in self.names():
            try:
                study = optuna.create_study(study_name=name, storage=storage, directions=_directions(), sampler=sampler)
                created = True
            except optuna.exceptions.DuplicatedStudyError:  # another process created it meanwhile
                study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        else:
            study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        if created:
            study.set_metric_names([METRICS[0], SECOND_METRIC[second_objective(attrs.get("objectives"))]])
            writing.save(study, **attrs)
            writing.save(study, version=__version__)
            # written last
            writing.save(study, created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
            return study, True
        _wait_until_described(study)
        check_matches(study, attrs, self.shown)
        study.sampler.reseed_rng()
        return study, False


def _wait_until_described(study: optuna.Study) -> None:
    """Another process may have created the study an instant ago and still be writing its attributes
    (Optuna cannot create a study with them at once): give an empty study a moment to get them."""
    deadline = time.monotonic() + DESCRIBE_WAIT_S
    while (StoredStudy(study.study_name, study.user_attrs, []).created_at is None and time.monotonic() < deadline
           and not study.get_trials(deepcopy=False)):
        time.sleep(0.1)
