"""The composition behind run, worker, submit and the API: what it hands the search loop."""

from __future__ import annotations

from autotune import tuning
from autotune.request import TuneConfig
from autotune.store import Store
from autotune.workload import WorkloadSpec


def test_shared_processes_are_experimental_and_off_by_default(tmp_path, monkeypatch):
    """Claims rest on separate processes unless AUTOTUNE_PAIRED=1 asks for the shared ones (measured biased:
    benchmarks/paths_agree.py), so no study races or ablates inside shared processes by default."""
    config = TuneConfig(spec=WorkloadSpec("autotune.examples:mlp"), trials=2, quick=True)
    store = Store.open(f"sqlite:///{tmp_path}/s.db")
    monkeypatch.delenv(tuning.PAIRED_ENV, raising=False)
    assert tuning.prepare(config, "off", store, "cpu").tuner.together is None
    monkeypatch.setenv(tuning.PAIRED_ENV, "1")
    assert tuning.prepare(config, "on", store, "cpu").tuner.together is not None
