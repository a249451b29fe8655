"""autotune.machine.heap and the host_allocator knob: glibc keeps freed memory for the next step, in this process and in
the processes a configuration starts, and the knob says where it does not apply."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from autotune import knobs
from autotune.machine import heap

pytestmark = pytest.mark.skipif(not heap.available(), reason="needs glibc")

# A step that allocates, touches and frees 64 MiB (above glibc's largest dynamic mmap threshold, 32 MiB), twenty
# times; prints the minor page faults of each time.
STEPS = """
import json, resource, sys, torch
from autotune.trial.plan import Plan
if sys.argv[1] != "none":
    Plan.from_config({"host_allocator": sys.argv[1]}, "cpu", "train").apply_process()
faults = []
for _ in range(20):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    block = torch.ones(16 << 20)
    del block
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps(faults))
"""


def _faults(value: str) -> list[int]:
    out = subprocess.run([sys.executable, "-c", STEPS, value], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.slow  # 7 s in a full run on a 2-core CPU
def test_retain_keeps_freed_memory_so_later_steps_touch_no_fresh_pages():
    pages = (64 << 20) // 4096
    default = _faults("default")
    assert min(default) > pages // 2  # every step faults its block in again
    retained = _faults("retain")
    assert retained[0] > pages // 2  # the first step grows the heap
    # torch's aligned blocks leave small pieces between them, so the heap grows for a few steps (glibc keeps up to
    # seven such pieces per size in its thread cache); then every step reuses it
    assert max(retained[-5:]) < pages // 20


def test_retain_sets_the_environment_for_processes_started_later():
    from autotune.trial.plan import Plan

    knob = knobs.KNOBS["host_allocator"]
    env = Plan.from_config({"host_allocator": "retain"}, "cpu", "train").environment()
    assert env["MALLOC_MMAP_MAX_"] == "0" and int(env["MALLOC_TRIM_THRESHOLD_"]) == heap.NEVER_TRIM
    assert "MALLOC_MMAP_MAX_" not in Plan.from_config({"host_allocator": "default"}, "cpu", "train").environment()
    assert "MALLOC_MMAP_MAX_=0" in knob.how_to("retain")


def test_the_knob_does_not_apply_without_glibc():
    ctx = knobs.Context(device_type="cpu", task="train", input_rank=2, glibc=False)
    resolved = knobs.resolve({"host_allocator": "retain"}, ctx)
    assert resolved.config["host_allocator"] == "default"
    assert "glibc" in resolved.not_applicable["host_allocator"]
    assert (knobs.resolve({"host_allocator": "retain"}, knobs.Context(device_type="cuda")).config["host_allocator"]
            == "retain")


def test_context_records_glibc_and_reads_studies_stored_before_it():
    ctx = knobs.Context(device_type="cpu", task="train", glibc=False)
    assert knobs.Context.from_dict(ctx.to_dict()) == ctx
    older = {k: v for k, v in ctx.to_dict().items() if k != "glibc"}
    assert knobs.Context.from_dict(older).glibc is True


def test_host_allocator_shares_a_process_only_at_one_value():
    base = knobs.defaults()
    assert knobs.apart([base, {**base, "host_allocator": "retain"}]) is not None
    assert knobs.apart([{**base, "host_allocator": "retain"}, {**base, "host_allocator": "retain",
                                                                 "precision": "bf16"}]) is None


def test_keys_of_configurations_stored_before_the_knob_stay_the_same():
    """Trials stored before host_allocator existed ran at the default heap: their configuration keys (here, a grid
    measured then, benchmarks/data/grid_mlp.json) are what the same configurations key to now, so a resumed study
    does not measure them again; at retain the knob is in the key."""
    import pathlib

    doc = json.loads((pathlib.Path(__file__).resolve().parents[1] / "benchmarks/data/grid_mlp.json").read_text())
    ctx = knobs.Context(device_type="cpu", task="train", input_rank=2, cpu_count=2)
    for row in doc["rows"][:20]:
        assert "host_allocator" not in row["config_key"]
        assert knobs.resolve({**knobs.defaults(ctx), **row["params"]}, ctx).key() == row["config_key"]
    assert "host_allocator=retain" in knobs.resolve({"host_allocator": "retain"}, ctx).key()
