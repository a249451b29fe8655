"""The launch knobs: a preloaded allocator (host_allocator=jemalloc/tcmalloc) and bound cores (core_binding), from
finding the library (autotune/machine/preload.py) and the cores (autotune/machine/binding.py) to a real trial whose
result proves, from its own /proc, that it ran as asked (autotune/trial/launch.py)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from autotune import knobs
from autotune import result as R
from autotune.export import frameworks as F
from autotune.knobs import space
from autotune.knobs.registry import CORE_BINDING, HOST_ALLOCATOR, THREADS
from autotune.machine import binding, preload
from autotune.request import WorkloadSpec
from autotune.testing.suite import need
from autotune.trial import forkserver, launch
from autotune.trial.runner import Runner

DEBIAN_PACKAGE = {"jemalloc": "libjemalloc2", "tcmalloc": "libtcmalloc-minimal4"}


def installed(library: str) -> str:
    """The library's path here, or the test cannot run (a skip on a developer's machine, a failure in CI)."""
    path = preload.find(library)
    if path is None:
        need(f"{library} is not installed: apt-get install {DEBIAN_PACKAGE[library]}")
    return path


# ---------------------------------------------------------------- finding the library


@pytest.mark.parametrize("library", ["jemalloc", "tcmalloc"])
def test_the_library_is_found_where_debian_installs_it(library, tmp_path):
    installed(library)
    path = preload.find(library, environ={}, prefix=str(tmp_path))  # no venv or conda copy: the linker's cache
    assert path is not None and os.path.isfile(path), f"{library} is installed, but not where ldconfig -p says"
    assert os.path.basename(path) == preload.LIBRARIES[library].files[0]  # Debian's name, which run_cpu misses
    assert f" => {path}" in preload._linker_cache()


def test_the_linker_cache_is_read_as_ldconfig_prints_it(tmp_path):
    lib = tmp_path / "libjemalloc.so.2"
    lib.write_bytes(b"")
    cache = ("2 libs found in cache `/etc/ld.so.cache'\n"
             f"\tlibjemalloc.so.2 (libc6,x86-64) => {lib}\n"
             "\tlibjemalloc_debug.so.2 (libc6,x86-64) => /nowhere/libjemalloc_debug.so.2\n")
    empty = tmp_path / "empty"
    assert preload.find("jemalloc", environ={}, prefix=str(empty), linker_cache=cache) == str(lib)
    assert preload.find("tcmalloc", environ={}, prefix=str(empty), linker_cache=cache) is None


def test_a_virtual_environments_lib_folder_is_looked_in_first(tmp_path):
    venv = tmp_path / "venv"
    (venv / "lib").mkdir(parents=True)
    (venv / "lib" / "libtcmalloc_minimal.so.4").write_bytes(b"")
    assert preload.find("tcmalloc", environ={}, prefix=str(venv), linker_cache="") == str(
        venv / "lib" / "libtcmalloc_minimal.so.4")


def test_condas_lib_folder_is_looked_in(tmp_path):
    conda = tmp_path / "conda"
    (conda / "lib").mkdir(parents=True)
    (conda / "lib" / "libjemalloc.so").write_bytes(b"")
    assert preload.find("jemalloc", environ={"CONDA_PREFIX": str(conda)}, prefix=str(tmp_path / "none"),
                        linker_cache="") == str(conda / "lib" / "libjemalloc.so")


def test_an_absent_library_is_not_applicable_and_the_package_to_install_is_named(tmp_path):
    assert preload.find("jemalloc", environ={}, prefix=str(tmp_path), linker_cache="") is None
    without = knobs.Context(device_type="cpu", libraries=())
    why = HOST_ALLOCATOR.not_applicable("jemalloc", without, {})
    assert why is not None and "apt-get install libjemalloc2" in why and "conda" in why
    assert "libtcmalloc-minimal4" in HOST_ALLOCATOR.not_applicable("tcmalloc", without, {})
    assert HOST_ALLOCATOR.not_applicable("retain", without, {}) is None
    assert HOST_ALLOCATOR.not_applicable("jemalloc", knobs.Context(libraries=("jemalloc",)), {}) is None
    # resolved where it runs: dropped to the default, with the reason
    resolved = knobs.resolve({HOST_ALLOCATOR.name: "jemalloc"}, without)
    assert resolved.config[HOST_ALLOCATOR.name] == "default"
    assert "libjemalloc2" in resolved.not_applicable[HOST_ALLOCATOR.name]
    # a search leaves it out, and run says why
    fitted = space.fit(space.load("launch"), without, {})
    assert fitted.space.search[HOST_ALLOCATOR.name].choices == ("default", "retain")
    assert "libjemalloc2" in (fitted.text() or "") and "libtcmalloc-minimal4" in (fitted.text() or "")


def test_a_stored_context_without_the_libraries_leaves_nothing_out():
    ctx = knobs.Context.from_dict({"device_type": "cpu", "task": "train"})
    assert ctx.libraries is None and HOST_ALLOCATOR.not_applicable("jemalloc", ctx, {}) is None
    assert knobs.Context.from_dict(knobs.Context(libraries=("tcmalloc",)).to_dict()).libraries == ("tcmalloc",)


def test_the_maps_are_read_for_the_library():
    maps = ("7f51cda00000-7f51cda09000 r--p 00000000 fe:00 5595147    /usr/lib/x86_64-linux-gnu/libjemalloc.so.2\n"
            "7f51cdb00000-7f51cdb09000 r--p 00000000 fe:00 5595148    /usr/lib/x86_64-linux-gnu/libc.so.6\n"
            "7ffd1c9e0000-7ffd1ca01000 rw-p 00000000 00:00 0          [stack]\n")
    assert preload.loaded("jemalloc", maps) == "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
    assert preload.loaded("tcmalloc", maps) is None
    assert preload.loaded("tcmalloc", "1-2 r--p 0 fe:00 1 /lib/libtcmalloc_minimal.so.4.5.10\n") is not None


# ---------------------------------------------------------------- the knobs' declarations and exports


def test_the_exports_say_ld_preload_with_the_path():
    path = installed("jemalloc")
    assert HOST_ALLOCATOR.how_to("jemalloc").startswith(f"LD_PRELOAD={path} ")
    env = next(e for e in HOST_ALLOCATOR.effects if isinstance(e, knobs.effects.Preload))
    assert env.variables("jemalloc") == {"LD_PRELOAD": path} and env.variables("retain") == {}
    assert "LD_PRELOAD" in knobs.owned_environment()  # a shell's preload never shapes the defaults' trials
    ctx = knobs.Context(device_type="cpu", input_rank=4, cpu_count=2)
    for fmt in knobs.exports.FRAMEWORKS:
        doc = {"schema": "autotune.config/2", "pick": "fastest", "task": "train", "device": "cpu",
               "knobs": {**knobs.defaults(ctx), HOST_ALLOCATOR.name: "jemalloc", CORE_BINDING.name: "compact"},
               "global_batch": None, "context": ctx.to_dict()}
        steps = {item["knob"]: item for item in F.render(doc, fmt)["not_expressible"]}
        assert f"LD_PRELOAD={path}" in steps[HOST_ALLOCATOR.name]["how"], fmt
        assert "OMP_PROC_BIND=close" in steps[CORE_BINDING.name]["how"] and "numactl" in steps[CORE_BINDING.name]["how"]


def test_core_binding_applies_on_a_cpu_only():
    assert CORE_BINDING.not_applicable("compact", knobs.Context(device_type="cpu"), {}) is None
    assert "needs a CPU" in CORE_BINDING.not_applicable("compact", knobs.Context(device_type="cuda"), {})
    assert launch.launch_for({CORE_BINDING.name: "compact"}, "cuda") == launch.Launch()


def test_the_launch_is_the_configurations_start_only_environment_and_cores():
    path = installed("jemalloc")
    assert launch.launch_for({}, "cpu") == launch.Launch() and not launch.Launch()
    assert launch.launch_for({HOST_ALLOCATOR.name: "retain"}, "cpu") == launch.Launch()  # mallopt acts in a fork
    assert launch.launch_for({HOST_ALLOCATOR.name: "jemalloc"}, "cpu").environment == (("LD_PRELOAD", path),)
    bound = launch.launch_for({CORE_BINDING.name: "compact", THREADS.name: 1}, "cpu")
    assert bound.cpus == (binding.allowed()[0],)
    assert dict(bound.environment) == {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"}
    assert bound.command()[-1].endswith(str(binding.allowed()[0]))
    # several ranks: a core a thread of every rank
    from autotune.knobs.launch import RANKS

    ranked = launch.launch_for({CORE_BINDING.name: "compact", THREADS.name: 1, RANKS.name: 2}, "cpu")
    assert ranked.cpus == tuple(binding.compact_cpus(2))
    # ... each rank binds itself to its slice of them: OpenMP's binding, read in the process the ranks are forked
    # from, would put every rank on its first core
    assert "OMP_PROC_BIND" not in dict(ranked.environment)
    assert binding.rank_cpus([4, 5, 6, 7], 1, 2) == [6, 7] and binding.rank_cpus([0, 1], 1, 1) == [1]
    assert binding.rank_cpus([0], 1, 1) == [0]  # too few: all of them


def test_compact_cores_are_one_a_physical_core_first(monkeypatch):
    siblings = {0: (0, 0), 1: (0, 1), 2: (0, 0), 3: (0, 1)}  # 2 cores, 2 hyperthreads each
    monkeypatch.setattr(binding, "_core_of", lambda cpu: siblings[cpu])
    assert binding.compact_cpus(2, [0, 1, 2, 3]) == [0, 1]
    assert binding.compact_cpus(3, [0, 1, 2, 3]) == [0, 1, 2]
    assert binding.compact_cpus(9, [0, 1, 2, 3]) == [0, 1, 2, 3]
    assert binding.parse_list("0-3,8\n") == [0, 1, 2, 3, 8]


def test_a_process_not_started_so_fails_the_proof_with_a_typed_error():
    installed("jemalloc")
    if preload.loaded("jemalloc") is not None:
        pytest.skip("this test process runs on jemalloc already")
    with pytest.raises(launch.LaunchNotInForce, match="jemalloc is not in this trial process's memory map"):
        launch.prove({HOST_ALLOCATOR.name: "jemalloc"}, "cpu", ())
    with pytest.raises(launch.LaunchNotInForce, match="not only on the cores"):
        launch.prove({CORE_BINDING.name: "compact"}, "cpu", (10_000,))
    assert launch.prove({}, "cpu", ()) == {}


# ---------------------------------------------------------------- real trials of the mlp example


def trial(quick, config):
    return Runner(WorkloadSpec("autotune.examples:mlp"), timeout_s=180, settings=quick).measure(config)


@pytest.mark.parametrize("library", ["jemalloc", "tcmalloc"])
def test_a_trial_runs_on_the_preloaded_library_and_its_maps_say_so(quick, library):
    installed(library)
    res = trial(quick, {HOST_ALLOCATOR.name: library})
    assert res.outcome == R.OK, res.error
    assert res.config[HOST_ALLOCATOR.name] == library and not res.not_applicable
    assert os.path.basename(res.notes["preloaded"]).startswith(preload.LIBRARIES[library].files[0].split(".so")[0])
    assert res.samples_per_s and res.samples_per_s > 0
    # the next trial at the defaults is forked from the warm interpreter, without the library
    plain = trial(quick, {})
    assert plain.outcome == R.OK and "preloaded" not in plain.notes


def test_a_trial_that_asked_for_jemalloc_but_was_not_started_with_it_fails_typed(quick, monkeypatch):
    installed("jemalloc")
    monkeypatch.setattr(launch, "launch_for", lambda config, device_type: launch.Launch())  # forked from the warm one
    res = trial(quick, {HOST_ALLOCATOR.name: "jemalloc"})
    assert res.outcome == R.ERROR and res.error["type"] == "LaunchNotInForce"
    assert "jemalloc is not in this trial process's memory map" in res.error["message"]
    assert "preloaded" not in res.notes and res.samples_per_s is None


def test_a_trial_bound_to_compact_cores_records_its_affinity(quick):
    if not (shutil.which("numactl") or shutil.which("taskset")):
        need("neither numactl nor taskset is installed: apt-get install numactl")
    first = binding.allowed()[0]
    res = trial(quick, {CORE_BINDING.name: "compact", THREADS.name: 1})
    assert res.outcome == R.OK, res.error
    assert res.notes["bound_cpus"] == [first]
    assert res.notes["affinity"] == [first]  # os.sched_getaffinity(0) in the trial process
    assert res.notes["thread_cpus"] == [first]  # every thread of it, the steps' included
    launched = next(iter(forkserver._launched.values()))
    assert launched.command[:1] == [("numactl" if shutil.which("numactl") else "taskset")]


@pytest.mark.slow  # two ranks: 8 s on the 2-core VM
def test_two_ranks_bound_to_compact_cores_run_each_on_a_core_of_its_own(quick):
    if not (shutil.which("numactl") or shutil.which("taskset")):
        need("neither numactl nor taskset is installed: apt-get install numactl")
    if len(binding.allowed()) < 2:
        pytest.skip("two ranks of one thread need two cores")
    from autotune.knobs.launch import RANKS

    cores = binding.compact_cpus(2)
    res = trial(quick, {CORE_BINDING.name: "compact", THREADS.name: 1, RANKS.name: 2})
    assert res.outcome == R.OK, res.error
    assert res.notes["bound_cpus"] == cores
    assert res.notes["rank_affinity"] == [[cores[0]], [cores[1]]]  # not both on the first core


def test_autotune_knobs_lists_both_with_where_each_applies():
    from click.testing import CliRunner

    from autotune.cli import main

    res = CliRunner().invoke(main, ["knobs", "--json"])
    assert res.exit_code == 0, res.output
    rows = {row["name"]: row for row in json.loads(res.output)}
    assert rows[HOST_ALLOCATOR.name]["values"].startswith("default, retain, jemalloc (jemalloc installed), tcmalloc")
    assert rows[HOST_ALLOCATOR.name]["applies"] == "glibc"
    assert rows[CORE_BINDING.name]["values"] == "none, compact" and rows[CORE_BINDING.name]["applies"] == "CPU"


def test_the_launch_space_is_the_cpu_space_with_the_launch_knobs():
    from autotune.knobs.launch import BUCKET_CAP_MB, COMM_HOOK, GRADIENT_AS_BUCKET_VIEW, RANKS, STATIC_GRAPH

    cpu, launched = space.load("cpu"), space.load("launch")
    ddp = {RANKS.name, BUCKET_CAP_MB.name, GRADIENT_AS_BUCKET_VIEW.name, STATIC_GRAPH.name, COMM_HOOK.name}
    assert set(launched.search) == set(cpu.search) | {HOST_ALLOCATOR.name, CORE_BINDING.name} | ddp
    assert launched.search[HOST_ALLOCATOR.name].choices == HOST_ALLOCATOR.choices
    assert launched.search[CORE_BINDING.name].choices == CORE_BINDING.choices
    assert CORE_BINDING.name not in cpu.search and "jemalloc" not in cpu.search[HOST_ALLOCATOR.name].choices
