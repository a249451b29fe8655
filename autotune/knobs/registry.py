"""The registry: every performance knob autotune tunes, declared once (the functions that read it:
:mod:`autotune.knobs.reading`).

Each declaration below holds everything about one knob: its values and PyTorch's
default, where it applies, the tuning guides' recipe value, what applying it does
(``effects``, carried out by :mod:`autotune.trial.plan`), what to write by hand (``how``), and
how each framework export expresses it (``exports``, with the mapping functions written
just above the knob). This package is the only place that names knobs: adding one means adding
its declaration here (or, for a launch's knobs, in :mod:`autotune.knobs.launch`), to ``REGISTRY``, and its tests.

The order of ``REGISTRY`` matters: knobs are resolved in it (a knob that depends on
another, ``prefetch_factor`` on ``num_workers``, comes after it) and exports list
by-hand steps in it.
"""

from __future__ import annotations

from typing import Any

from autotune.machine import binding, preload
from autotune.machine.heap import NEVER_TRIM
from autotune.knobs.core import (
    ALONE,
    BACKEND,
    BATCH,
    CPUS,
    ENV,
    LOADER,
    MODEL,
    OPTIMIZER,
    PER_ARM,
    STEP,
    CompileSupported,
    ForTask,
    Glibc,
    InputRank,
    Knob,
    KnobAbove,
    NativeBF16,
    OnDevice,
    OptimizerSupports,
    Preloadable,
)
from autotune.knobs.effects import (
    FP32_PRECISION,
    LEGACY_TF32,
    Autocast,
    BatchSize,
    BindCores,
    ChannelsLast,
    CheckpointBlocks,
    Compile,
    Env,
    Flag,
    GradScaler,
    LoaderArg,
    Mallopt,
    NumThreads,
    OptimizerImpl,
    PinnedCopies,
    Preload,
)
from autotune.knobs.exports import (ACCELERATE, CALLBACKS, FRAMEWORKS, HF_TRAINER, LIGHTNING, Job, arg, by_hand,
                                    by_hand_at, callback)
from autotune.knobs.launch import BUCKET_CAP_MB, COMM_HOOK, GRADIENT_AS_BUCKET_VIEW, RANKS, STATIC_GRAPH

# ---------------------------------------------------------------- precision


def _precision_how(value: Any) -> str:
    return {
        "tf32": "torch.backends.cuda.matmul.fp32_precision = 'tf32' before training (torch 2.9 and newer; before "
                "2.9: torch.backends.cuda.matmul.allow_tf32 = True; cuDNN convolutions use TF32 by default)",
        "bf16": "with torch.autocast(device_type, dtype=torch.bfloat16): around forward and loss",
        "fp16": "with torch.autocast(device_type, dtype=torch.float16): around forward and loss, "
                "with torch.amp.GradScaler",
    }.get(value, "no autocast: run the step in float32")


def _hf_precision(job: Job, name: str, value: Any) -> None:
    job.arguments.update(bf16=value == "bf16", fp16=value == "fp16")
    if value == "tf32":
        job.arguments["tf32"] = True


def _pl_precision(job: Job, name: str, value: Any) -> None:
    job.arguments["trainer"]["precision"] = {"bf16": "bf16-mixed", "fp16": "16-mixed"}.get(value, "32-true")
    if value == "tf32":
        job.by_callback(name)  # Lightning's precision has no TF32 setting: the callback sets the TF32 flags


def _acc_precision(job: Job, name: str, value: Any) -> None:
    mixed = {"bf16": "bf16", "fp16": "fp16"}.get(value, "no")
    job.arguments["mixed_precision"] = mixed
    job.extra["accelerator"]["mixed_precision"] = mixed
    if value == "tf32":
        job.by_hand(name, "the Accelerate config has no TF32 setting")
    elif value == "fp32" and job.cuda and job.values[COMPILE.name] != "off":
        job.by_hand(name, "Accelerate turns TF32 matmuls on when dynamo runs without mixed precision; "
                          "the measured step kept them off",
                    "torch.backends.cuda.matmul.fp32_precision = 'ieee' after creating the Accelerator (torch 2.9 "
                    "and newer; before 2.9: torch.backends.cuda.matmul.allow_tf32 = False)")


PRECISION = Knob(
    "precision",
    STEP,
    "fp32",
    "numeric precision of the step: autocast to bf16/fp16 (fp16 training with a GradScaler), or TF32 matmuls",
    choices=("fp32", "tf32", "bf16", "fp16"),
    value_when={"tf32": (OnDevice("cuda"),), "fp16": (OnDevice("cuda"),)},
    pays_when={"bf16": (NativeBF16(),)},  # on a CPU without AVX512-BF16/AMX it runs, several times slower
    torch_default="fp32, no autocast",
    recipe="bf16",
    effects=(
        Autocast({"bf16": "bfloat16", "fp16": "float16"}),
        GradScaler(("fp16",)),
        # fp32 keeps PyTorch's defaults: TF32 off for matmuls, on for cuDNN convolutions; through the one TF32 API
        # the running torch uses (effects.FP32_PRECISION from torch 2.9, effects.LEGACY_TF32 before).
        Flag("backends.cuda.matmul.allow_tf32", "cuda", lambda value: value == "tf32", api=LEGACY_TF32),
        Flag("backends.cudnn.allow_tf32", "cuda", lambda value: True, api=LEGACY_TF32),
        Flag("backends.cuda.matmul.fp32_precision", "cuda", lambda value: "tf32" if value == "tf32" else "ieee",
             api=FP32_PRECISION),
        Flag("backends.cudnn.conv.fp32_precision", "cuda", lambda value: "tf32", api=FP32_PRECISION),
        Flag("backends.cudnn.rnn.fp32_precision", "cuda", lambda value: "tf32", api=FP32_PRECISION),
    ),
    in_process=PER_ARM,  # autocast and the scaler belong to the arm's step; its TF32 flags are set before each window
    how=_precision_how,
    exports={HF_TRAINER: _hf_precision, LIGHTNING: _pl_precision, ACCELERATE: _acc_precision},
)

# ---------------------------------------------------------------- compile


#: the compile modes that capture the step in CUDA graphs (on a CUDA device; torch's own mode options say so)
GRAPH_MODES = ("reduce-overhead", "max-autotune")


def _compile_how(value: Any) -> str:
    if value == "default":
        return "model = torch.compile(model)"
    how = f"model = torch.compile(model, mode={value!r})"
    if value in GRAPH_MODES:
        how += ("; under its CUDA graphs the next step overwrites a step's outputs: keep a loss as "
                "loss.detach().clone()")
    return how


def _hf_compile(job: Job, name: str, value: Any) -> None:
    job.arguments["torch_compile"] = value != "off"
    if value != "off":
        job.arguments["torch_compile_mode"] = value
        if job.cuda and job.values[PRECISION.name] in ("fp32", "bf16"):
            # with torch_compile, Trainer (through Accelerate) turns TF32 matmuls on; the measured step kept them
            # off: the callback sets the precision's TF32 flags back once the Trainer is built
            job.by_callback(PRECISION.name)


def _pl_compile(job: Job, name: str, value: Any) -> None:
    if value != "off":
        job.by_hand(name, "Lightning's Trainer has no compile argument, and a callback cannot swap the module "
                          "fit() was given for a compiled one",
                    _compile_how(value) + " on the LightningModule before trainer.fit(model)")


def _acc_compile(job: Job, name: str, value: Any) -> None:
    if value != "off":
        job.arguments["dynamo_config"] = {"dynamo_backend": "INDUCTOR", "dynamo_mode": value,
                                          "dynamo_use_fullgraph": False, "dynamo_use_dynamic": False}


COMPILE = Knob(
    "compile",
    MODEL,
    "off",
    "torch.compile mode; compile time is kept apart as time to first step",
    choices=("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"),
    when=(CompileSupported(),),
    value_when={
        "reduce-overhead": (OnDevice("cuda"),),
        "max-autotune-no-cudagraphs": (OnDevice("cuda"),),
    },
    torch_default="eager",
    recipe="default",
    effects=(Compile(off="off", plain="default", graphs=GRAPH_MODES),),
    in_process=ALONE,  # dynamo's caches are the process's: a second arm would recompile (other shapes) or reuse
    starts_processes=True,  # inductor's compile workers
    how=_compile_how,
    exports={HF_TRAINER: _hf_compile, LIGHTNING: _pl_compile, ACCELERATE: _acc_compile},
)

# ---------------------------------------------------------------- memory_format

MEMORY_FORMAT = Knob(
    "memory_format",
    MODEL,
    "contiguous",
    "channels_last puts model weights and 4-D inputs in NHWC layout",
    choices=("contiguous", "channels_last"),
    when=(InputRank(4),),
    torch_default="contiguous (NCHW)",
    recipe="channels_last",
    effects=(ChannelsLast(on="channels_last"),),
    in_process=PER_ARM,  # the arm's own model and inputs
    how=lambda value: ("model = model.to(memory_format=torch.channels_last), "
                       "and 4-D inputs x.contiguous(memory_format=torch.channels_last)"),
    exports={HF_TRAINER: callback(), LIGHTNING: callback(), ACCELERATE: by_hand()},
)

# ---------------------------------------------------------------- batch_size


def _hf_batch(job: Job, name: str, value: Any) -> None:
    job.arguments["per_device_train_batch_size" if job.train else "per_device_eval_batch_size"] = value
    steps = job.accumulation(value)
    if steps:
        job.arguments["gradient_accumulation_steps"] = steps


def _pl_batch(job: Job, name: str, value: Any) -> None:
    job.arguments["dataloader"]["batch_size"] = value
    steps = job.accumulation(value)
    if steps:
        job.arguments["trainer"]["accumulate_grad_batches"] = steps


def _acc_batch(job: Job, name: str, value: Any) -> None:
    how = BATCH_SIZE.how_to(value)
    steps = job.accumulation(value)
    if steps:
        job.extra["accelerator"]["gradient_accumulation_steps"] = steps
        how += (f"; Accelerator(gradient_accumulation_steps={steps}) and `with accelerator.accumulate(model):` "
                f"around each step (global batch {job.global_batch})")
    job.by_hand(name, "the Accelerate config has no batch size: your script builds the DataLoader", how)


BATCH_SIZE = Knob(
    "batch_size",
    BATCH,
    32,
    "samples per step; with --global-batch the effective batch is kept by gradient accumulation",
    low=1,
    high=65536,
    step=8,
    torch_default="the user's choice",
    in_process=PER_ARM,  # the arm's own DataLoader
    effects=(BatchSize("batch_size"),),
    exports={HF_TRAINER: _hf_batch, LIGHTNING: _pl_batch, ACCELERATE: _acc_batch},
    always_stated=True,
)

# ---------------------------------------------------------------- the DataLoader's workers and pinned memory

ACC_LOADER = "the Accelerate config has no DataLoader arguments: your script builds the DataLoader"

NUM_WORKERS = Knob(
    "num_workers",
    LOADER,
    0,
    "DataLoader worker processes",
    low=0,
    high=CPUS,
    torch_default="0 (load in the main process)",
    recipe=4,
    effects=(LoaderArg("num_workers"),),
    exports={HF_TRAINER: arg("dataloader_num_workers"), LIGHTNING: arg("num_workers", "dataloader"),
             ACCELERATE: by_hand(ACC_LOADER)},
    starts_processes=True,
    load_sensitive=True,
)

PREFETCH_FACTOR = Knob(
    "prefetch_factor",
    LOADER,
    2,
    "batches each DataLoader worker loads ahead",
    low=1,
    high=8,
    when=(KnobAbove(NUM_WORKERS, 0),),
    torch_default="2",
    recipe=2,
    effects=(LoaderArg("prefetch_factor"),),
    exports={HF_TRAINER: arg("dataloader_prefetch_factor"), LIGHTNING: arg("prefetch_factor", "dataloader"),
             ACCELERATE: by_hand(ACC_LOADER)},
)

PERSISTENT_WORKERS = Knob(
    "persistent_workers",
    LOADER,
    False,
    "keep DataLoader workers alive between epochs",
    choices=(False, True),
    when=(KnobAbove(NUM_WORKERS, 0),),
    torch_default="off",
    recipe=True,
    effects=(LoaderArg("persistent_workers"),),
    exports={HF_TRAINER: arg("dataloader_persistent_workers"), LIGHTNING: arg("persistent_workers", "dataloader"),
             ACCELERATE: by_hand(ACC_LOADER)},
)

PIN_MEMORY = Knob(
    "pin_memory",
    LOADER,
    False,
    "page-locked host batches, copied to the GPU with non_blocking=True",
    choices=(False, True),
    when=(OnDevice("cuda"),),
    torch_default="off",
    recipe=True,
    effects=(PinnedCopies("pin_memory"),),
    how=lambda value: f"DataLoader(dataset, pin_memory={value!r})"
                      + (", and batch.to(device, non_blocking=True)" if value else ""),
    exports={
        HF_TRAINER: arg("dataloader_pin_memory"),  # always said: Trainer's default is on, PyTorch's off
        LIGHTNING: arg("pin_memory", "dataloader"),
        ACCELERATE: by_hand(ACC_LOADER),
    },
)

# ---------------------------------------------------------------- activation_checkpointing

HF_ACTIVATION_CHECKPOINTING = (5, 23)  # transformers renamed gradient_checkpointing to activation_checkpointing


def hf_checkpointing_argument(transformers_version: str | None) -> str:
    """``activation_checkpointing`` from transformers 5.23; ``gradient_checkpointing`` before (and when not
    installed)."""
    try:
        parts = tuple(int(p) for p in (transformers_version or "0.0").split(".")[:2])
    except ValueError:
        return "gradient_checkpointing"
    return "activation_checkpointing" if parts >= HF_ACTIVATION_CHECKPOINTING else "gradient_checkpointing"


def _hf_checkpointing(job: Job, name: str, value: Any) -> None:
    job.arguments[hf_checkpointing_argument(job.version("transformers"))] = value


ACTIVATION_CHECKPOINTING = Knob(
    "activation_checkpointing",
    MODEL,
    False,
    "recompute the activations of each block in backward: less memory, more compute",
    choices=(False, True),
    when=(ForTask("train"),),
    torch_default="off",
    in_process=PER_ARM,  # wraps the arm's own model's blocks
    effects=(CheckpointBlocks(),),
    how=lambda value: ("torch.utils.checkpoint.checkpoint(block, *inputs, use_reentrant=False) around each repeated "
                       "block (Hugging Face models: model.gradient_checkpointing_enable())"),
    exports={HF_TRAINER: _hf_checkpointing, LIGHTNING: callback(), ACCELERATE: by_hand()},
)

# ---------------------------------------------------------------- cudnn_benchmark

CUDNN_BENCHMARK = Knob(
    "cudnn_benchmark",
    BACKEND,
    False,
    "let cuDNN time its algorithms for each input shape and keep the fastest",
    choices=(False, True),
    when=(OnDevice("cuda"),),
    torch_default="off",
    recipe=True,
    effects=(Flag("backends.cudnn.benchmark", "cuda"),),
    how=lambda value: f"torch.backends.cudnn.benchmark = {value!r} before training",
    exports={HF_TRAINER: callback(), LIGHTNING: arg("benchmark", "trainer"), ACCELERATE: by_hand()},
)

# ---------------------------------------------------------------- optimizer_impl


def _hf_optimizer(job: Job, name: str, value: Any) -> None:
    # explicit, even for the default loop: transformers' own default is the fused one
    job.arguments["optim"] = "adamw_torch_fused" if value == "fused" else "adamw_torch"
    if value == "foreach":
        job.by_callback(name)  # optim has no foreach variant: the callback switches the Trainer's optimizer to it


OPTIMIZER_IMPL = Knob(
    "optimizer_impl",
    OPTIMIZER,
    "default",
    "optimizer kernels: per-tensor loop, foreach (multi-tensor), or fused",
    choices=("default", "foreach", "fused"),
    when=(ForTask("train"),),
    value_when={"foreach": (OptimizerSupports("foreach"),), "fused": (OptimizerSupports("fused"),)},
    torch_default="default (foreach on CUDA where possible)",
    recipe="fused",
    in_process=PER_ARM,  # the arm's own optimizer
    effects=(OptimizerImpl(default="default"),),
    how=lambda value: (f"build the optimizer with {value}=True, "
                       f"e.g. torch.optim.AdamW(model.parameters(), lr=..., {value}=True)"),
    # Lightning's optimizer comes from configure_optimizers: the callback switches it in place (schedulers kept)
    exports={HF_TRAINER: _hf_optimizer, LIGHTNING: callback(),
             ACCELERATE: by_hand("your script builds the optimizer")},
)

# ---------------------------------------------------------------- threads


def _acc_threads(job: Job, name: str, value: Any) -> None:
    # Always said: unless told, `accelerate launch` sets OMP_NUM_THREADS itself (1, or the physical cores on a CPU).
    job.launch["--num_cpu_threads_per_process"] = value
    job.by_hand(name, "the Accelerate config has no thread count, and accelerate launch picks one of its own",
                f"accelerate launch --num_cpu_threads_per_process {value} (sets OMP_NUM_THREADS), "
                f"or torch.set_num_threads({value})")


THREADS = Knob(
    "threads",
    ENV,
    CPUS,
    "intra-op CPU threads (torch.set_num_threads, OMP_NUM_THREADS)",
    low=1,
    high=CPUS,
    torch_default="one per core",
    effects=(Env(("OMP_NUM_THREADS", "MKL_NUM_THREADS")), NumThreads()),
    how=lambda value: (f"torch.set_num_threads({value}) at start, and OMP_NUM_THREADS={value} in the environment "
                       "before Python starts"),
    exports={HF_TRAINER: callback(), LIGHTNING: callback(), ACCELERATE: _acc_threads},
    load_sensitive=True,
)

# ---------------------------------------------------------------- cuda_allocator

CUDA_ALLOCATOR = Knob(
    "cuda_allocator",
    ENV,
    "default",
    "CUDA caching allocator setting (PYTORCH_CUDA_ALLOC_CONF), set before CUDA starts",
    choices=("default", "expandable_segments"),
    when=(OnDevice("cuda"),),
    torch_default="default",
    effects=(Env(("PYTORCH_CUDA_ALLOC_CONF",), {"expandable_segments": "expandable_segments:True"},
                 aliases=("PYTORCH_ALLOC_CONF",)),),
    how=lambda value: "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the environment before Python starts",
    # the callbacks set it when built (before the Trainer starts CUDA), or on CUDA's running allocator
    exports={HF_TRAINER: callback(), LIGHTNING: callback(), ACCELERATE: by_hand()},
)

# ---------------------------------------------------------------- host_allocator

RETAIN = {"M_MMAP_MAX": 0, "M_TRIM_THRESHOLD": NEVER_TRIM}  # autotune.machine.heap: no mmap'd blocks, no trimming
PRELOADED = {"jemalloc": "jemalloc", "tcmalloc": "tcmalloc"}  # value -> autotune.machine.preload.LIBRARIES
STARTED = "a library is preloaded only into a process started with it"

HOST_ALLOCATOR = Knob(
    "host_allocator", ENV, "default",
    "host memory: glibc malloc as it comes, or retain freed memory for the next step (no mmap, no trim), or "
    "jemalloc/tcmalloc preloaded (LD_PRELOAD)",
    choices=("default", "retain", *PRELOADED),
    when=(Glibc(),),
    value_when={value: (Preloadable(library),) for value, library in PRELOADED.items()},
    torch_default="default (large blocks mmap'd, the heap trimmed: fresh pages fault in every step)",
    effects=(Env(("MALLOC_MMAP_MAX_",), {"retain": str(RETAIN["M_MMAP_MAX"])}),
             Env(("MALLOC_TRIM_THRESHOLD_",), {"retain": str(RETAIN["M_TRIM_THRESHOLD"])}),
             Mallopt({"retain": RETAIN}), Preload(libraries=PRELOADED)),
    how=lambda value: (preload.how(PRELOADED[value]) if value in PRELOADED else
                       f"MALLOC_MMAP_MAX_={RETAIN['M_MMAP_MAX']} MALLOC_TRIM_THRESHOLD_={RETAIN['M_TRIM_THRESHOLD']} "
                       "in the environment before Python starts (glibc)" if value == "retain"
                       else "leave MALLOC_MMAP_MAX_, MALLOC_TRIM_THRESHOLD_ and LD_PRELOAD unset"),
    # the callbacks call mallopt when training begins (it acts at once); Accelerate's launcher sets no environment
    exports={fmt: by_hand_at(PRELOADED, STARTED, callback() if fmt in CALLBACKS else by_hand()) for fmt in FRAMEWORKS},
    # benchmarks/paths_agree.py, the mlp's winner against the defaults: 6.58x in a shared process, 3.96x in processes
    # of their own, 4.43x in a user's loop; with retain in both, 4.52x, 4.47x and 4.34x
    shares_at=("retain",),
    why_apart="glibc's default heap carries one arm's allocations into the next arm's speed (a preloaded one: its own)",
    keyed_at_default=False,  # added after studies were stored: their trials ran at the default heap, keys unchanged
    started_with=tuple(PRELOADED),
)

# ---------------------------------------------------------------- core_binding

CORE_BINDING = Knob(
    "core_binding", ENV, "none",
    "bind the process and its threads to a compact set of cores, one a thread (numactl/taskset, OMP_PROC_BIND)",
    choices=("none", "compact"),
    when=(OnDevice("cpu"),),
    torch_default="none (threads run on any core the process may use, and move between them)",
    effects=(Env(("OMP_PROC_BIND",), {"compact": "close"}), Env(("OMP_PLACES",), {"compact": "cores"}),
             BindCores("compact")),
    how=lambda value: binding.HOW if value == "compact" else "start the process without numactl, taskset, OMP_PLACES",
    exports={fmt: by_hand("a process is bound where it starts: its launcher's command") for fmt in FRAMEWORKS},
    load_sensitive=True,  # bound cores are not shared with other processes' threads as the scheduler would
    keyed_at_default=False,  # added after studies were stored: their trials ran unbound, keys unchanged
    started_with=("compact",),
)


# ---------------------------------------------------------------- the registry (its readers: autotune.knobs.reading)

REGISTRY: tuple[Knob, ...] = (
    PRECISION, COMPILE, MEMORY_FORMAT, BATCH_SIZE, NUM_WORKERS, PREFETCH_FACTOR, PERSISTENT_WORKERS, PIN_MEMORY,
    ACTIVATION_CHECKPOINTING, CUDNN_BENCHMARK, OPTIMIZER_IMPL, THREADS, CUDA_ALLOCATOR, HOST_ALLOCATOR, CORE_BINDING,
    RANKS, BUCKET_CAP_MB, GRADIENT_AS_BUCKET_VIEW, STATIC_GRAPH, COMM_HOOK,
)

KNOBS: dict[str, Knob] = {k.name: k for k in REGISTRY}
NAMES: tuple[str, ...] = tuple(KNOBS)
