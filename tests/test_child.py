"""The trial process's entry (autotune.trial.child): a request is answered by its type, and a probe's failure is an
answer, not an exception."""

from __future__ import annotations

from autotune.trial import child
from autotune.trial.messages import ProbeAnswer, ProbeRequest
from autotune.request import WorkloadSpec


def test_a_probe_reports_the_workloads_context():
    answer = child.answer(ProbeRequest(spec=WorkloadSpec("autotune.examples:mlp")))
    assert isinstance(answer, ProbeAnswer) and answer.ok, answer.error
    assert answer.probe["context"]["device_type"] == "cpu" and answer.probe["context"]["task"] == "train"
    assert answer.probe["workload"]["parameters"] > 0 and answer.probe["fingerprint"]


def test_a_probe_of_a_bad_spec_answers_with_the_users_error():
    answer = child.answer(ProbeRequest(spec=WorkloadSpec("surely_missing_pkg:net")))
    assert not answer.ok and answer.probe is None
    assert (answer.error["user"] and answer.error["type"] == "SpecError"
            and "surely_missing_pkg" in answer.error["message"])
