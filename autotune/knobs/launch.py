"""The knobs of a launch: how many ranks train as one (DistributedDataParallel, started as ``torchrun
--nproc-per-node N`` starts them), DDP's own arguments and the communication hook that compresses its gradients,
declared as the registry's knobs are.

Why a module of its own: these five are one topic, the processes a training runs as rather than its step, and the
registry's module holds no more (at most 500 lines). :mod:`autotune.knobs.registry` lists them in ``REGISTRY`` (after
every knob of one process; DDP's arguments after ``ranks``, whose value they depend on), and a trial of several ranks
(:mod:`autotune.trial.ranks`) carries them out. Each is keyed at its default as if it were not there: studies stored
before these knobs keep their configurations' keys.
"""

from __future__ import annotations

from typing import Any

from autotune.knobs.core import ALONE, LAUNCH, MODEL, RANK_SLOTS, Knob, KnobAbove, OnDevice
from autotune.knobs.effects import CommHook, DDPArg, Ranks
from autotune.knobs.exports import (ACCELERATE, DDP_KWARGS, DDP_STRATEGY, HF_TRAINER, LIGHTNING, Export, Job, arg,
                                    by_hand, keyword_of)


def _lightning_ranks(job: Job, name: str, value: int) -> None:
    """Several ranks as Lightning starts them: ``Trainer(devices=N, strategy="ddp")`` (N processes on a CPU, N GPUs)."""
    if value > 1:
        job.arguments["trainer"].update(devices=value, strategy="ddp")


def _accelerate_ranks(job: Job, name: str, value: int) -> None:
    """Several ranks as ``accelerate launch`` starts them: its config's process count and distributed type."""
    if value > 1:
        job.arguments.update(num_processes=value, distributed_type="MULTI_GPU" if job.cuda else "MULTI_CPU")
        if job.cuda:
            job.arguments["gpu_ids"] = "all"

RANKS = Knob(
    "ranks",
    LAUNCH,
    1,
    "processes training as one (DistributedDataParallel): gloo on a CPU, NCCL on GPUs; threads is per rank",
    low=1,
    high=RANK_SLOTS,
    torch_default="1 (one process)",
    effects=(Ranks(),),
    how=lambda value: (f"torchrun --nproc-per-node {value} train.py, the model wrapped in "
                       "DistributedDataParallel and the DataLoader given a DistributedSampler (torchrun sets "
                       "OMP_NUM_THREADS=1 unless told: state threads too)" if value > 1 else "run one process"),
    exports={HF_TRAINER: by_hand("TrainingArguments has no process count: the launcher starts the ranks"),
             LIGHTNING: _lightning_ranks, ACCELERATE: _accelerate_ranks},
    in_process=ALONE,  # the ranks are processes of their own
    starts_processes=True,
    keyed_at_default=False,  # added after studies were stored
)

SEVERAL_RANKS = (KnobAbove(RANKS, 1),)
HF_BUILDS_DDP = ("the Trainer builds DistributedDataParallel itself and TrainingArguments has no argument for it: "
                 "in your own loop")


def _ddp_knob(keyword: str, default: Any, help: str, choices: tuple[Any, ...], torch_default: str,
              hf: str | None) -> Knob:
    """A DistributedDataParallel keyword argument as a knob: in force with several ranks only; exported as
    TrainingArguments' ``hf`` argument (by hand where it has none), a keyword of Lightning's ``DDPStrategy`` and of
    Accelerate's ``DistributedDataParallelKwargs``."""
    return Knob(
        keyword,
        MODEL,
        default,
        help,
        choices=choices,
        when=SEVERAL_RANKS,
        torch_default=torch_default,
        effects=(DDPArg(keyword),),
        how=lambda value: f"DistributedDataParallel(model, ..., {keyword}={value!r})",
        exports={HF_TRAINER: arg(hf) if hf else by_hand(HF_BUILDS_DDP), LIGHTNING: keyword_of(DDP_STRATEGY, keyword),
                 ACCELERATE: keyword_of(DDP_KWARGS, keyword)},
        keyed_at_default=False,
    )


BUCKET_CAP_MB = _ddp_knob("bucket_cap_mb", 25,
                          "DDP's gradient bucket size in MiB: larger buckets, fewer all-reduces that start later",
                          (5, 25, 100), "25", hf="ddp_bucket_cap_mb")
GRADIENT_AS_BUCKET_VIEW = _ddp_knob(
    "gradient_as_bucket_view", False,
    "DDP's gradients as views into its all-reduce buckets: one copy and its memory fewer", (False, True), "off",
    hf=None)
STATIC_GRAPH = _ddp_knob("static_graph", False,
                         "tell DDP the set of used parameters never changes: it plans its all-reduces once",
                         (False, True), "off", hf="ddp_static_graph")


# ---------------------------------------------------------------- comm_hook

#: The gradients' compression before DDP's all-reduce, as ``default_hooks``' hooks: bf16's keeps fp32's range.
HOOKS = {"fp16": "fp16_compress_hook", "bf16": "bf16_compress_hook"}
HOOK_IMPORT = "from torch.distributed.algorithms.ddp_comm_hooks import default_hooks"


def _hook_by_hand(how: Any, why: str) -> Export:
    """The hook as the framework takes it (``how(value)``), written by hand: it is a function, not a setting."""

    def write(job: Job, name: str, value: Any) -> None:
        if not job.is_default(name):
            job.by_hand(name, why, how(value))

    return write


COMM_HOOK = Knob(
    "comm_hook",
    MODEL,
    "none",
    "DDP's gradients compressed to 16 bits for their all-reduce (a communication hook): half the bytes sent, the "
    "summed gradients rounded to 16 bits",
    choices=("none", "fp16", "bf16"),
    when=SEVERAL_RANKS,
    value_when={"bf16": (OnDevice("cuda"),)},  # torch registers bf16's hook on NCCL (CUDA 11+) only
    torch_default="none (the gradients all-reduced at their own precision)",
    effects=(CommHook(HOOKS),),
    how=lambda value: (f"{HOOK_IMPORT}; model.register_comm_hook(None, default_hooks.{HOOKS[value]}) after "
                       "wrapping the model in DistributedDataParallel" if value in HOOKS
                       else "register no communication hook"),
    exports={HF_TRAINER: by_hand(HF_BUILDS_DDP),
             LIGHTNING: _hook_by_hand(lambda value: f"{HOOK_IMPORT}; Trainer(strategy=DDPStrategy("
                                      f"ddp_comm_hook=default_hooks.{HOOKS[value]}))",
                                      "DDPStrategy takes the hook as a function: in your script"),
             ACCELERATE: _hook_by_hand(lambda value: "Accelerator(kwargs_handlers=[DistributedDataParallelKwargs("
                                       f"comm_hook=DDPCommunicationHookType.{value.upper()})])",
                                       "Accelerate takes the hook as its enum, in the script's kwargs handler")},
    keyed_at_default=False,
)
