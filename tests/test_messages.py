"""What crosses the trial process boundary (autotune.trial.messages): each request survives the pipe as the same typed
object, and only the wire form names its kind."""

from __future__ import annotations

import json

import pytest

from autotune.trial.messages import PairedRequest, ProbeAnswer, ProbeRequest, TrialRequest, from_wire
from autotune.trial.protocol import Settings
from autotune.request import WorkloadSpec

SPEC = WorkloadSpec("autotune.examples:mlp", model_args=(("width", 8),), pickled=(("pickled:abc", "data"),))


def _through_the_pipe(data: dict) -> dict:
    return json.loads(json.dumps(data))


@pytest.mark.parametrize("request_", [
    ProbeRequest(spec=SPEC, device="cpu", sys_path=("/a", "/b"), cwd="/work"),
    TrialRequest(spec=SPEC, config={"batch_size": 16, "precision": "bf16"}, settings=Settings.quick(), global_batch=64,
                 dominators=((120.5, 1e9), (80.0, 5e8)), cut_margin=0.2, progress_path="/tmp/p.json"),
    PairedRequest(spec=SPEC, arms=({"batch_size": 8}, {"batch_size": 16}), settings=Settings().lean(), unchecked=True),
])
def test_a_request_reads_back_as_the_same_object(request_):
    wire = _through_the_pipe(request_.to_wire())
    assert wire["kind"] == request_.kind
    assert from_wire(wire) == request_


def test_a_request_without_a_kind_is_a_trial():
    """``python -m autotune.trial.measure_one REQUEST.json`` reads a trial's request as written by hand."""
    read = from_wire({"spec": SPEC.to_dict(), "config": {"threads": 1}})
    assert read == TrialRequest(spec=SPEC, config={"threads": 1})


def test_the_probe_answer_is_ok_only_without_an_error():
    found = ProbeAnswer(probe={"context": {"device_type": "cpu"}})
    failed = ProbeAnswer(error={"type": "SpecError", "message": "no module named 'x'", "user": True})
    assert found.ok and not failed.ok
    for answer in (found, failed):
        assert ProbeAnswer.from_dict(json.loads(answer.to_json())) == answer
