from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import knobs
from autotune.errors import KnobError

CPU = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=4)
CUDA = knobs.Context(device_type="cuda", task="train", input_rank=4, cpu_count=4)


def test_registry_has_every_knob_once():
    expected = {
        "precision", "compile", "memory_format", "batch_size", "num_workers", "prefetch_factor",
        "persistent_workers", "pin_memory", "activation_checkpointing", "cudnn_benchmark",
        "optimizer_impl", "threads", "cuda_allocator",
        # beyond the knobs experts name first: glibc's heap (autotune.machine.heap), found by benchmarks/paths_agree.py
        "host_allocator",
        # a launch: several ranks of one DDP training (autotune.trial.ranks), and DDP's own arguments
        "ranks", "bucket_cap_mb", "gradient_as_bucket_view", "static_graph", "comm_hook",
        # how a process is launched: its cores bound (autotune.machine.binding)
        "core_binding",
    }
    assert set(knobs.NAMES) == expected
    assert len(knobs.NAMES) == len(knobs.REGISTRY)
    for k in knobs.REGISTRY:
        assert k.help and k.stage in knobs.STAGE_HELP


def test_defaults_are_valid_values():
    for k in knobs.REGISTRY:
        assert k.validate(k.default_for(CPU), CPU) == k.default_for(CPU)


def test_parse_assignments_types_and_errors():
    cfg = knobs.parse_assignments(["precision=bf16", "batch_size=64", "pin_memory=on", "num_workers=2"], CPU)
    assert cfg == {"precision": "bf16", "batch_size": 64, "pin_memory": True, "num_workers": 2}
    with pytest.raises(KnobError, match="unknown knob 'precison'"):
        knobs.parse_assignments(["precison=bf16"])
    with pytest.raises(KnobError, match="not one of"):
        knobs.parse_assignments(["precision=fp8"])
    with pytest.raises(KnobError, match="out of range"):
        knobs.parse_assignments(["num_workers=99"], CPU)
    with pytest.raises(KnobError, match="not an integer"):
        knobs.parse_assignments(["batch_size=lots"])
    with pytest.raises(KnobError, match="name=value"):
        knobs.parse_assignments(["precision"])


def test_cuda_only_knobs_do_not_apply_on_cpu():
    res = knobs.resolve({"pin_memory": True, "cudnn_benchmark": True, "precision": "fp16",
                         "cuda_allocator": "expandable_segments"}, CPU)
    assert set(res.not_applicable) == {"pin_memory", "cudnn_benchmark", "precision", "cuda_allocator"}
    assert "CUDA" in res.not_applicable["pin_memory"]
    assert res.config["pin_memory"] is False and res.config["precision"] == "fp32"
    on_gpu = knobs.resolve({"pin_memory": True, "precision": "fp16"}, CUDA)
    assert on_gpu.not_applicable == {} and on_gpu.config["precision"] == "fp16"


def test_dependent_knob_follows_num_workers():
    res = knobs.resolve({"prefetch_factor": 4, "persistent_workers": True}, CPU)
    assert "num_workers" in res.not_applicable["prefetch_factor"]
    assert res.config["prefetch_factor"] == 2
    res = knobs.resolve({"num_workers": 2, "prefetch_factor": 4}, CPU)
    assert res.not_applicable == {} and res.config["prefetch_factor"] == 4


def test_input_rank_and_task_conditions():
    flat = knobs.Context(device_type="cpu", task="infer", input_rank=2)
    res = knobs.resolve({"memory_format": "channels_last", "activation_checkpointing": True,
                         "optimizer_impl": "fused"}, flat)
    assert set(res.not_applicable) == {"memory_format", "activation_checkpointing", "optimizer_impl"}


def test_optimizer_support_condition():
    ctx = knobs.Context(device_type="cpu", task="train", optimizer_params=frozenset({"foreach"}))
    dropped = knobs.resolve({"optimizer_impl": "fused"}, ctx).not_applicable
    assert "fused=" in dropped["optimizer_impl"]
    assert knobs.resolve({"optimizer_impl": "foreach"}, ctx).not_applicable == {}


def test_key_is_canonical_and_ignores_dropped_values():
    a = knobs.resolve({"precision": "bf16", "pin_memory": True}, CPU)
    b = knobs.resolve({"pin_memory": False, "precision": "bf16"}, CPU)
    assert a.key() == b.key()
    assert a.key() != knobs.resolve({}, CPU).key()


def test_short_lists_only_changes():
    assert knobs.short(knobs.defaults(CPU), CPU) == "defaults"
    assert knobs.short({**knobs.defaults(CPU), "precision": "bf16"}, CPU) == "precision=bf16"


# ---------------------------------------------------------------- the registry is the only place that names knobs

PACKAGE = Path(knobs.__file__).resolve().parent.parent  # autotune/
REGISTRY_DIR = Path(knobs.__file__).resolve().parent  # autotune/knobs/

# Knob names still spelled as literals in modules this rule has not reached yet, each module owned by other work.
# Every entry is debt: delete it when its module reads the registry instead (the batch size is special to the
# ceiling probe and the global batch: knobs.registry.BATCH_SIZE.name says which knob holds it). Never add one.
def knob_literals(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every string literal in a source file that is exactly a knob's name."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return sorted({(node.lineno, node.value) for node in ast.walk(tree)
                   if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in knobs.KNOBS})


#: Modules that name knobs as data, not as logic, and why.
KNOBS_AS_DATA = {
    "testing/studies.py": "made-up studies for the suite and the read benchmarks: a fake performance model over knob "
                          "values",
    "testing/simulated/device.py": "the simulated GPU's performance model over knob values (speed, memory, compile "
                                   "time by knob), as testing/studies.py's",
    "testing/simulated/runner.py": "the simulated GPU's trials: the configurations its plain loop and probes run, as "
                                   "data",
}


def test_no_module_outside_the_registry_names_a_knob():
    sources = [p for p in PACKAGE.rglob("*.py")
               if not p.is_relative_to(REGISTRY_DIR) and str(p.relative_to(PACKAGE)) not in KNOBS_AS_DATA]
    assert len(sources) > 20 and PACKAGE / "trial/plan.py" in sources and PACKAGE / "export/frameworks.py" in sources
    found = []
    for path in sources:
        where = path.relative_to(PACKAGE)
        found += [f"{where}:{line}: {name!r}" for line, name in knob_literals(path)]
    assert not found, ("knob names belong in autotune/knobs/registry.py (declare an effect or an export there):\n"
                       + "\n".join(found))


def test_the_guard_sees_a_knob_literal(tmp_path):
    source = tmp_path / "bad.py"
    source.write_text('"""threads: a docstring is no literal of a knob."""\n'
                      'x = config.get("threads", 1)\ny = {"pin_memory": 1}\n')
    assert knob_literals(source) == [(2, "threads"), (3, "pin_memory")]


def test_importing_the_registry_imports_neither_torch_nor_optuna():
    """Read commands import the registry; it must stay light (the package's own __init__ is left out of the check)."""
    code = (
        "import sys, types\n"
        f"pkg = types.ModuleType('autotune'); pkg.__path__ = [{str(PACKAGE)!r}]; sys.modules['autotune'] = pkg\n"
        "from autotune import knobs\n"
        "knobs.resolve({}, knobs.Context()); [k.how_to(k.default_for()) for k in knobs.REGISTRY]\n"
        "print(sorted(m for m in ('torch', 'optuna', 'numpy', 'sqlalchemy') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# ---------------------------------------------------------------- each knob owns its effects and its exports


def test_every_knob_declares_its_effects_and_every_framework_mapping():
    for k in knobs.REGISTRY:
        assert k.effects, k.name
        assert all(isinstance(e, knobs.effects.Effect) for e in k.effects), k.name
        assert set(k.exports) == set(knobs.exports.FRAMEWORKS), k.name
        assert all(callable(m) for m in k.exports.values()), k.name


def test_every_value_has_a_how_to_by_hand():
    for k in knobs.REGISTRY:
        values = list(k.choices) if k.choices is not None else [k.low, 7]
        for value in values:
            how = k.how_to(value)
            assert how and "\n" not in how, (k.name, value)
            assert "autotune.load_config" not in how, (k.name, value)  # the fallback is for knobs added later


def test_a_knob_without_a_how_falls_back_on_its_loader_argument_or_load_config():
    bare = knobs.Knob("warp", knobs.MODEL, False, "engage the warp drive", choices=(False, True))
    assert bare.how_to(True) == "apply it with autotune.load_config(...).apply(...) (engage the warp drive)"
    loader = knobs.Knob("drop", knobs.LOADER, False, "drop the last batch", choices=(False, True),
                        effects=(knobs.effects.LoaderArg("drop_last"),))
    assert loader.how_to(True) == "DataLoader(dataset, drop_last=True)"


def test_in_force_checks_only_the_task_and_other_knobs():
    names = ("prefetch_factor", "activation_checkpointing", "pin_memory")
    prefetch, checkpointing, pin = (knobs.KNOBS[n] for n in names)
    assert not prefetch.in_force({"num_workers": 0}, "train") and prefetch.in_force({"num_workers": 2}, "train")
    assert not prefetch.in_force({}, "train")  # num_workers at its default, 0
    assert checkpointing.in_force({}, "train") and not checkpointing.in_force({}, "infer")
    assert pin.in_force({}, "train")  # CUDA-only was settled where the configuration was resolved


def test_environment_effects_are_data():
    threads = next(e for e in knobs.KNOBS["threads"].effects if isinstance(e, knobs.effects.Env))
    assert threads.variables(3) == {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3"}
    alloc = next(e for e in knobs.KNOBS["cuda_allocator"].effects if isinstance(e, knobs.effects.Env))
    assert alloc.variables("expandable_segments") == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert alloc.variables("default") == {}


# ---------------------------------------------------------------- the global batch


def test_accumulation_steps():
    assert knobs.accumulation_steps(None, 32) == 1
    assert knobs.accumulation_steps(64, 16) == 4
    assert knobs.accumulation_steps(16, 16) == 1
    with pytest.raises(KnobError, match="does not divide") as err:
        knobs.accumulation_steps(100, 64)
    assert "64" in str(err.value) and "100" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(KnobError, match="not a multiple"):
        knobs.accumulation_steps(16, 32)  # a global batch smaller than the batch
    for bad in (0, -8, True, 8.0, "64"):
        with pytest.raises(KnobError, match="global batch"):
            knobs.accumulation_steps(bad, 8)  # type: ignore[arg-type]
    for bad in (0, -1, None, False):
        with pytest.raises(KnobError, match="batch size"):
            knobs.accumulation_steps(64, bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------- values that apply but cannot pay


def test_bf16_applies_everywhere_but_pays_on_a_cpu_only_with_native_bf16():
    precision = knobs.KNOBS["precision"]
    slow_cpu = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=4, cpu_bf16=False)
    assert "no native bf16" in (precision.not_paying("bf16", slow_cpu) or "")
    assert "AVX512-BF16/AMX" in (precision.not_paying("bf16", slow_cpu) or "")
    assert precision.not_paying("fp32", slow_cpu) is None
    assert precision.not_paying("bf16", CPU) is None  # a CPU with native bf16
    assert precision.not_paying("bf16", knobs.Context(device_type="cuda", cpu_bf16=False)) is None  # GPUs keep it
    # Asked for, it still runs (measure --set precision=bf16, a space's [fixed]): a claim can always be checked.
    asked = knobs.resolve({"precision": "bf16"}, slow_cpu)
    assert asked.config["precision"] == "bf16" and asked.not_applicable == {}
    assert "bf16 (on a CPU, searched only with native bf16)" in precision.values_text()


def test_context_records_native_bf16_and_reads_studies_stored_before_it():
    ctx = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=2, cpu_bf16=False)
    assert ctx.to_dict()["cpu_bf16"] is False
    assert knobs.Context.from_dict(ctx.to_dict()) == ctx
    older = {k: v for k, v in ctx.to_dict().items() if k != "cpu_bf16"}  # a study stored before it was recorded
    assert knobs.Context.from_dict(older) == knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=2)
    assert knobs.Context.from_dict(older).cpu_bf16 is True  # unknown: nothing is left out on a guess
    silent = {k: v for k, v in ctx.to_dict().items() if k != "optimizer_params"}
    assert knobs.Context.from_dict(silent).optimizer_params == {"foreach", "fused"}  # the optimizer decides later


def test_the_registry_says_which_knob_sets_the_batch_and_which_start_processes():
    assert any(isinstance(e, knobs.effects.BatchSize) for e in knobs.KNOBS[knobs.BATCH_KNOB].effects)
    base = knobs.defaults(CPU)
    assert not knobs.starts_processes(base)
    starting = [k.name for k in knobs.REGISTRY if k.starts_processes]
    assert starting  # loader workers, compile workers
    for name in starting:
        other = next(v for v in (knobs.KNOBS[name].choices or (1, 2)) if v != knobs.KNOBS[name].default_for(CPU))
        assert knobs.starts_processes({**base, name: other})


def test_the_launch_of_a_configuration_is_the_line_a_user_types():
    """The export's launch: torchrun's line (one rank included), the environment set before Python starts, DDP's
    arguments with several ranks, the cores bound: read from the knobs' effects, as a trial starts it."""
    from autotune.knobs.launch import BUCKET_CAP_MB, RANKS
    from autotune.knobs.registry import CORE_BINDING, THREADS

    one = knobs.launch_of({**knobs.defaults(), THREADS.name: 2})
    assert one["ranks"] == 1 and one["ddp"] == {} and one["binding"] is None
    assert one["environment"]["OMP_NUM_THREADS"] == "2"
    assert one["command"].endswith("torchrun --standalone --nproc-per-node=1 train.py")
    two = knobs.launch_of({**knobs.defaults(), THREADS.name: 1, RANKS.name: 2, BUCKET_CAP_MB.name: 5,
                           CORE_BINDING.name: "compact"})
    assert two["ranks"] == 2 and two["ddp"][BUCKET_CAP_MB.name] == 5 and two["comm_hook"] is None
    hooked = knobs.launch_of({**knobs.defaults(), RANKS.name: 2, "comm_hook": "fp16"})
    assert hooked["comm_hook"] == "fp16_compress_hook" and "comm_hook" not in hooked["ddp"]  # not DDP's keyword
    assert knobs.launch_of({**knobs.defaults(), "comm_hook": "fp16"})["comm_hook"] is None  # one rank: no hook
    # each rank on its own core: torchrun starts it through taskset; OpenMP's binding is each rank's own mask
    assert "OMP_PROC_BIND" not in two["environment"] and two["binding"] == "taskset -c 0-1"
    assert two["command"] == ("MKL_NUM_THREADS=1 OMP_NUM_THREADS=1 taskset -c 0-1 torchrun --standalone "
                              "--nproc-per-node=2 --no-python sh -c "
                              "'exec taskset -c $((LOCAL_RANK*1))-$((LOCAL_RANK*1+0)) python train.py'")
    bound_one = knobs.launch_of({**knobs.defaults(), THREADS.name: 2, CORE_BINDING.name: "compact"})
    assert bound_one["environment"]["OMP_PROC_BIND"] == "close" and bound_one["command"].endswith(
        "taskset -c 0-1 torchrun --standalone --nproc-per-node=1 train.py")


def test_ranks_above_one_is_not_applicable_on_one_gpu_nor_without_the_backend_and_says_why():
    """Several ranks need a GPU each (NCCL) or a core each (gloo), and the distributed backend in the PyTorch build:
    where one is missing, ranks stop at 1, a value above is refused with the reason, and the space leaves it out
    with the same reason."""
    from autotune.knobs import space as spaces
    from autotune.knobs.launch import RANKS

    one_gpu = knobs.Context(device_type="cuda", task="train", input_rank=4, cpu_count=4, devices=1,
                            backends=("gloo", "nccl"))
    with pytest.raises(KnobError, match=r"2 is out of range \[1, 1\] \(1 GPU here, a rank a GPU\)"):
        RANKS.validate(2, one_gpu)
    two_gpus = knobs.Context(device_type="cuda", task="train", input_rank=4, cpu_count=4, devices=2,
                             backends=("gloo", "nccl"))
    assert RANKS.validate(2, two_gpus) == 2
    no_nccl = knobs.Context(device_type="cuda", task="train", input_rank=4, cpu_count=4, devices=2,
                            backends=("gloo",))
    with pytest.raises(KnobError, match="need torch.distributed's nccl backend, which this PyTorch build lacks"):
        RANKS.validate(2, no_nccl)
    no_gloo = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=4, backends=())
    assert RANKS.bounds(no_gloo) == (1, 1) and RANKS.bounds(CPU) == (1, 4)  # unknown backends: nothing left out
    fitted = spaces.fit(spaces.load("launch"), no_gloo, knobs.defaults(no_gloo))
    assert "ranks" not in fitted.space.search
    assert any(x.knob == "ranks" and "gloo backend" in x.reason for x in fitted.left_out), fitted.left_out


def test_a_trial_records_the_distributed_backends_its_pytorch_build_has(monkeypatch):
    import torch.distributed as dist

    from autotune.trial.arm import distributed_backends

    assert "gloo" in distributed_backends()  # the CPU wheels have gloo
    monkeypatch.setattr(dist, "is_gloo_available", lambda: False)
    assert "gloo" not in distributed_backends()
    monkeypatch.setattr(dist, "is_available", lambda: False)
    assert distributed_backends() == ()
