"""Framework exports: every knob becomes an argument, autotune's callback, or a by-hand step; the real frameworks
accept the arguments, and a tiny training run under the exported objects sees the knobs in force."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from autotune.export import callbacks as C
from autotune.export import frameworks as F
from autotune import knobs
from autotune.errors import ConfigError, KnobError
from autotune.knobs import exports
from autotune.knobs.registry import hf_checkpointing_argument
from autotune.trial.plan import Plan

CTX = knobs.Context(device_type="cpu", task="train", input_rank=4, cpu_count=8)


def make_doc(device: str = "cpu", task: str = "train", global_batch: int | None = None, **values) -> dict:
    """An export document as autotune.export.config.export writes it, built by hand."""
    ctx = knobs.Context(device_type=device.split(":")[0], task=task, input_rank=4, cpu_count=8)
    return {
        "schema": "autotune.config/2",
        "pick": "fastest",
        "knobs": {**knobs.defaults(ctx), **values},
        "task": task,
        "device": device,
        "global_batch": global_batch,
        "context": ctx.to_dict(),
        "speedup": {"ratio": 1.4, "low": 1.3, "high": 1.5},
        "study": {"name": "mynet", "storage": "sqlite:///studies/mynet.db", "trial": 7},
    }


def manual(out: dict) -> dict:
    return {item["knob"]: item for item in out["not_expressible"]}


def by_callback(out: dict) -> dict:
    """The knob values the export hands to autotune's callback."""
    return (out["callback"] or {}).get("knobs", {})


def other_values(knob: knobs.Knob) -> list:
    """Values of a knob other than its default, to render one at a time."""
    if knob.choices is not None:
        return [c for c in knob.choices if c != knob.default_for(CTX)]
    return {"batch_size": [48], "num_workers": [3], "prefetch_factor": [4], "threads": [3], "ranks": [2]}[knob.name]


def depends_on(knob: knobs.Knob) -> dict:
    """Other knobs' values a knob is in force only at (prefetching needs loader workers, DDP's arguments ranks)."""
    if knob.name in ("prefetch_factor", "persistent_workers"):
        return {"num_workers": 2}
    if knob.name in ("bucket_cap_mb", "gradient_as_bucket_view", "static_graph", "comm_hook"):
        return {"ranks": 2}
    return {}


# ---------------------------------------------------------------- every knob, every format


def test_bad_format_is_one_clear_line():
    with pytest.raises(ConfigError) as err:
        F.render(make_doc(), "keras")
    message = str(err.value)
    assert "\n" not in message and "'keras'" in message
    assert all(fmt in message for fmt in F.FORMATS)
    with pytest.raises(ConfigError):
        F.text(make_doc(), "yaml")


def test_every_registry_knob_has_a_handler_in_every_format():
    for fmt in F.FORMATS:
        assert set(F.HANDLERS[fmt]) == set(knobs.NAMES), fmt


@pytest.mark.parametrize("fmt", F.FORMATS)
def test_no_knob_value_is_dropped_silently(fmt):
    """Each non-default value changes the arguments or is listed as not expressible."""
    for knob in knobs.REGISTRY:
        extra = depends_on(knob)
        base = F.render(make_doc("cuda:0", global_batch=None, **extra), fmt)
        for value in other_values(knob):
            out = F.render(make_doc("cuda:0", **{**extra, knob.name: value}), fmt)
            assert (out["arguments"] != base["arguments"] or knob.name in manual(out)
                    or by_callback(out).get(knob.name) == value
                    or any((out.get(obj) or {}).get(knob.name) == value  # a keyword of DDPStrategy(...), ...
                           for obj in (exports.DDP_STRATEGY, exports.DDP_KWARGS))), (fmt, knob.name, value)


@pytest.mark.parametrize("fmt", ["hf-trainer", "lightning"])
def test_defaults_need_nothing_by_hand(fmt):
    for device in ("cpu", "cuda:0"):
        assert F.render(make_doc(device), fmt)["not_expressible"] == []
        assert F.render(make_doc(device), fmt)["callback"] is None
        assert "autotune.callbacks" not in F.text(make_doc(device), fmt)
    # Accelerate's config has no batch size, and accelerate launch sets its own thread count: those are always said
    assert list(manual(F.render(make_doc(), "accelerate"))) == ["batch_size", "threads"]


@pytest.mark.parametrize("fmt, factory", [("hf-trainer", "for_trainer"), ("lightning", "for_lightning")])
def test_an_export_with_the_studys_figures_passes_them_to_the_callback_even_for_the_defaults(fmt, factory):
    """The callback says the training's samples/s beside the study's: it is in the snippet whenever the export has a
    figure, with the knobs it applies (none here) and what the study measured."""
    doc = {**make_doc(), "measured": {"samples_per_s": 398.0},
           "speedup": {"estimate": 2.9, "low": 2.7, "high": 3.1}}
    out = F.render(doc, fmt)
    expected = {"samples_per_s": 398.0, "estimate": 2.9, "low": 2.7, "high": 3.1, "where": "on the study's machine"}
    assert out["callback"] == {"factory": f"autotune.callbacks.{factory}", "knobs": {}, "expected": expected}
    snippet = F.text(doc, fmt)
    compile(snippet, f"<{fmt}>", "exec")
    assert f"autotune_callbacks = [autotune.callbacks.{factory}(\n    {{}},\n    expected={expected!r},\n)]" in snippet
    assert "report_speed=False turns that off" in snippet


def test_a_knob_without_a_mapping_still_lands_in_not_expressible(monkeypatch):
    table = dict(F.HANDLERS["lightning"])
    del table["memory_format"]
    monkeypatch.setitem(F.HANDLERS, "lightning", table)
    out = F.render(make_doc(memory_format="channels_last"), "lightning")
    assert "no lightning mapping" in manual(out)["memory_format"]["why"]


def test_bad_documents_are_config_errors():
    with pytest.raises(ConfigError, match="no 'knobs'"):
        F.render({"schema": "autotune.config/2"}, "hf-trainer")
    with pytest.raises(ConfigError, match="bad knob values"):
        F.render(make_doc(warp_drive=True), "lightning")
    with pytest.raises(ConfigError, match="bad knob values"):
        F.render(make_doc(precision="fp8"), "accelerate")
    with pytest.raises(ConfigError, match="does not divide"):
        F.render(make_doc(global_batch=100, batch_size=64), "hf-trainer")


def test_source_and_speedup_are_copied_through():
    out = F.render(make_doc(), "json")
    assert out["source"]["study"] == "mynet" and out["source"]["trial"] == 7 and out["source"]["pick"] == "fastest"
    assert out["speedup"] == {"ratio": 1.4, "low": 1.3, "high": 1.5}
    json.dumps(out)  # JSON-able
    assert out["arguments"] == make_doc()["knobs"] and out["not_expressible"] == []


def test_a_batch_size_the_user_did_not_ask_for_is_named_with_how_to_keep_their_samples_per_step():
    """A batch size other than the defaults': the export says what it changes and how accumulation keeps the
    defaults' samples per optimizer step; it applies nothing the study did not measure."""
    from autotune.export import document as D

    smaller = D._samples_per_step(None, {"batch_size": 32}, {"batch_size": 16}, "train")
    assert smaller["global_batch"] is None
    assert "from 32 to 16: gradient accumulation over 2 micro-batches keeps 32" in smaller["batch_note"]
    doc = {**make_doc(batch_size=16), **smaller}
    out = F.render(doc, exports.HF_TRAINER)
    assert "gradient_accumulation_steps" not in out["arguments"] and out["batch_note"] == smaller["batch_note"]
    assert f"# {smaller['batch_note']}" in F.text(doc, exports.HF_TRAINER)
    bigger = D._samples_per_step(None, {"batch_size": 32}, {"batch_size": 128}, "train")
    assert bigger["global_batch"] is None
    assert "changes your optimizer's samples per step from 32 to 128: its learning rate" in bigger["batch_note"]
    assert D._samples_per_step(None, {"batch_size": 32}, {"batch_size": 32}, "train")["batch_note"] is None
    assert D._samples_per_step(64, {"batch_size": 32}, {"batch_size": 16}, "train") == {"global_batch": 64,
                                                                                        "batch_note": None}
    assert D._samples_per_step(None, {"batch_size": 32}, {"batch_size": 16}, "infer")["batch_note"] is None


# ---------------------------------------------------------------- mappings


def test_hf_trainer_mapping():
    doc = make_doc(precision="bf16", compile="max-autotune", batch_size=16, num_workers=4, prefetch_factor=4,
                   persistent_workers=True, activation_checkpointing=True, optimizer_impl="fused",
                   memory_format="channels_last", threads=4, global_batch=64)
    out = F.render(doc, "hf-trainer")
    args = out["arguments"]
    assert args["bf16"] is True and args["fp16"] is False and "tf32" not in args
    assert args["torch_compile"] is True and args["torch_compile_mode"] == "max-autotune"
    assert args["per_device_train_batch_size"] == 16 and args["gradient_accumulation_steps"] == 4
    assert args["dataloader_num_workers"] == 4 and args["dataloader_prefetch_factor"] == 4
    assert args["dataloader_persistent_workers"] is True and args["dataloader_pin_memory"] is False
    assert args["optim"] == "adamw_torch_fused" and args["use_cpu"] is True
    assert args[hf_checkpointing_argument(F._version("transformers"))] is True
    assert out["not_expressible"] == []  # the callback applies what TrainingArguments cannot
    assert out["callback"] == {"factory": "autotune.callbacks.for_trainer",
                               "knobs": {"memory_format": "channels_last", "threads": 4}, "expected": None}


def test_hf_trainer_gpu_details():
    out = F.render(make_doc("cuda:0", precision="tf32", optimizer_impl="foreach", cudnn_benchmark=True, pin_memory=True,
                            cuda_allocator="expandable_segments"), "hf-trainer")
    args = out["arguments"]
    assert args["tf32"] is True and "use_cpu" not in args and args["dataloader_pin_memory"] is True
    assert args["optim"] == "adamw_torch" and out["not_expressible"] == []
    # no optim name for foreach, no argument for cuDNN's benchmark or the allocator: the callback applies them
    assert by_callback(out) == {"optimizer_impl": "foreach", "cudnn_benchmark": True,
                                "cuda_allocator": "expandable_segments"}
    # compile without tf32 on a GPU: Trainer would switch TF32 on, which the measurement did not; the callback
    # sets the precision's flags back (matmul TF32 off)
    out = F.render(make_doc("cuda:0", compile="default"), "hf-trainer")
    assert by_callback(out) == {"precision": "fp32"} and out["not_expressible"] == []


def test_hf_trainer_inference_and_defaults():
    out = F.render(make_doc(task="infer", batch_size=128, global_batch=256), "hf-trainer")
    args = out["arguments"]
    assert args["per_device_eval_batch_size"] == 128 and "gradient_accumulation_steps" not in args
    assert "optim" not in args and "activation_checkpointing" not in args and "gradient_checkpointing" not in args
    args = F.render(make_doc(), "hf-trainer")["arguments"]
    assert args["optim"] == "adamw_torch"  # transformers' own default is the fused one
    assert "dataloader_prefetch_factor" not in args and "dataloader_persistent_workers" not in args
    assert args["torch_compile"] is False and "torch_compile_mode" not in args


def test_hf_checkpointing_argument_follows_the_installed_version(monkeypatch):
    assert hf_checkpointing_argument("5.23.0") == "activation_checkpointing"
    assert hf_checkpointing_argument("4.57.1") == "gradient_checkpointing"
    assert hf_checkpointing_argument(None) == "gradient_checkpointing"
    doc = make_doc(activation_checkpointing=True)
    for version, argument in (("5.23.0", "activation_checkpointing"), ("4.57.1", "gradient_checkpointing"),
                              (None, "gradient_checkpointing")):
        monkeypatch.setattr(F, "_version", lambda package, installed=version: installed)
        args = F.render(doc, "hf-trainer")["arguments"]
        assert args[argument] is True and hf_checkpointing_argument(version) == argument


def test_lightning_mapping():
    doc = make_doc("cuda:1", precision="fp16", compile="reduce-overhead", batch_size=32, num_workers=2, pin_memory=True,
                   cudnn_benchmark=True, optimizer_impl="fused", cuda_allocator="expandable_segments", global_batch=128)
    out = F.render(doc, "lightning")
    trainer, loader = out["arguments"]["trainer"], out["arguments"]["dataloader"]
    assert trainer == {"accelerator": "gpu", "devices": [1], "precision": "16-mixed", "accumulate_grad_batches": 4,
                       "benchmark": True}
    assert loader == {"batch_size": 32, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": False,
                      "pin_memory": True}
    by_hand = manual(out)
    assert set(by_hand) == {"compile"}  # a callback cannot swap the module fit() was given for a compiled one
    assert "torch.compile(model, mode='reduce-overhead')" in by_hand["compile"]["how"]
    assert out["callback"] == {"factory": "autotune.callbacks.for_lightning",
                               "knobs": {"optimizer_impl": "fused", "cuda_allocator": "expandable_segments"},
                               "expected": None}
    cpu = F.render(make_doc(precision="bf16"), "lightning")["arguments"]
    assert cpu["trainer"]["precision"] == "bf16-mixed" and cpu["trainer"]["accelerator"] == "cpu"
    assert "prefetch_factor" not in cpu["dataloader"]
    tf32 = F.render(make_doc("cuda:0", precision="tf32"), "lightning")
    assert tf32["arguments"]["trainer"]["precision"] == "32-true" and by_callback(tf32) == {"precision": "tf32"}
    checkpointed = F.render(make_doc(activation_checkpointing=True, memory_format="channels_last"), "lightning")
    assert by_callback(checkpointed) == {"memory_format": "channels_last", "activation_checkpointing": True}


def test_accelerate_mapping():
    out = F.render(make_doc("cuda:0", precision="bf16", compile="default", batch_size=8, global_batch=32,
                            num_workers=2), "accelerate")
    config = out["arguments"]
    assert config["distributed_type"] == "NO" and config["mixed_precision"] == "bf16" and config["use_cpu"] is False
    assert config["dynamo_config"] == {"dynamo_backend": "INDUCTOR", "dynamo_mode": "default",
                                       "dynamo_use_fullgraph": False, "dynamo_use_dynamic": False}
    assert out["accelerator"] == {"mixed_precision": "bf16", "gradient_accumulation_steps": 4}
    by_hand = manual(out)
    assert set(by_hand) == {"batch_size", "num_workers", "threads"}
    assert "gradient_accumulation_steps=4" in by_hand["batch_size"]["how"]
    assert "--num_cpu_threads_per_process 8" in by_hand["threads"]["how"]  # the measuring machine's default
    plain = F.render(make_doc(), "accelerate")
    assert plain["arguments"]["mixed_precision"] == "no" and "dynamo_config" not in plain["arguments"]
    assert plain["arguments"]["use_cpu"] is True and plain["accelerator"] == {"cpu": True, "mixed_precision": "no"}
    fp32 = F.render(make_doc("cuda:0", compile="default"), "accelerate")
    assert "allow_tf32 = False" in manual(fp32)["precision"]["how"]


def test_a_launch_of_several_ranks_in_every_format():
    """Ranks and DDP's arguments: TrainingArguments' ddp_* where it has them, Lightning's devices and DDPStrategy,
    Accelerate's process count and DistributedDataParallelKwargs; at DDP's defaults, nothing of them."""
    ddp = {"bucket_cap_mb": 100, "gradient_as_bucket_view": True, "static_graph": True}
    doc = make_doc(ranks=2, **ddp)
    hf = F.render(doc, "hf-trainer")
    assert hf["arguments"]["ddp_bucket_cap_mb"] == 100 and hf["arguments"]["ddp_static_graph"] is True
    assert set(manual(hf)) == {"ranks", "gradient_as_bucket_view"}
    assert "gradient_as_bucket_view=True" in manual(hf)["gradient_as_bucket_view"]["how"]
    pl = F.render(doc, "lightning")
    assert pl["arguments"]["trainer"]["devices"] == 2 and pl["arguments"]["trainer"]["strategy"] == "ddp"
    assert pl[exports.DDP_STRATEGY] == ddp and manual(pl) == {}
    acc = F.render(doc, "accelerate")
    assert acc["arguments"]["num_processes"] == 2 and acc["arguments"]["distributed_type"] == "MULTI_CPU"
    assert acc[exports.DDP_KWARGS] == ddp and "ranks" not in manual(acc)
    gpu = F.render(make_doc("cuda:0", ranks=2), "accelerate")["arguments"]
    assert gpu["distributed_type"] == "MULTI_GPU" and gpu["num_processes"] == 2 and gpu["gpu_ids"] == "all"
    assert F.render(make_doc("cuda:1", ranks=2), "lightning")["arguments"]["trainer"]["devices"] == 2
    plain = make_doc(ranks=2)
    assert all(F.render(plain, fmt).get(obj) is None for fmt in ("lightning", "accelerate")
               for obj in (exports.DDP_STRATEGY, exports.DDP_KWARGS))
    snippet = F.text(doc, "lightning")
    compile(snippet, "<lightning>", "exec")
    assert f"trainer_kwargs['strategy'] = DDPStrategy(**{ddp!r})" in snippet
    assert ("accelerator = Accelerator(cpu=True, mixed_precision='no', kwargs_handlers=[DistributedDataParallelKwargs("
            "bucket_cap_mb=100, gradient_as_bucket_view=True, static_graph=True)])") in F.text(doc, "accelerate")


# ---------------------------------------------------------------- text


def test_text_snippets_are_valid_and_name_every_by_hand_step():
    doc = make_doc(precision="bf16", memory_format="channels_last", threads=2, batch_size=16, global_batch=32)
    for fmt in ("hf-trainer", "lightning"):
        snippet = F.text(doc, fmt)
        compile(snippet, f"<{fmt}>", "exec")
        for item in F.render(doc, fmt)["not_expressible"]:
            assert item["how"] in snippet
    assert "training_args = TrainingArguments(" in F.text(doc, "hf-trainer")
    for fmt, factory in (("hf-trainer", "for_trainer"), ("lightning", "for_lightning")):
        snippet = F.text(doc, fmt)
        assert f"autotune_callbacks = [autotune.callbacks.{factory}({by_callback(F.render(doc, fmt))!r})]" in snippet
    assert "TrainingArguments(output_dir=\"autotune-trainer\", **training_args_kwargs)" in F.text(doc, "hf-trainer")
    assert "lightning.Trainer(**trainer_kwargs, callbacks=list(autotune_callbacks))" in F.text(doc, "lightning")
    assert json.loads(F.text(doc, "json")) == json.loads(json.dumps(doc))


def test_accelerate_text_is_the_yaml_config():
    yaml = pytest.importorskip("yaml", reason="PyYAML (an Optuna dependency) reads the Accelerate config")
    doc = make_doc(precision="bf16", compile="default", threads=2)
    body = F.text(doc, "accelerate")
    assert yaml.safe_load(body) == F.render(doc, "accelerate")["arguments"]
    assert "distributed_type: 'NO'" in body and "--num_cpu_threads_per_process 2" in body


# ---------------------------------------------------------------- the real frameworks


@pytest.mark.slow  # 3 s: the quick loop (-m 'not slow') has a test of this part that takes less
def test_real_training_arguments(tmp_path, monkeypatch):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[hf]')")
    doc = make_doc(precision="bf16", compile="default", batch_size=16, num_workers=2, prefetch_factor=4,
                   persistent_workers=True, activation_checkpointing=True, optimizer_impl="fused", global_batch=64)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), **F.render(doc, "hf-trainer")["arguments"])
    assert args.bf16 and args.use_cpu and args.torch_compile and args.torch_compile_mode == "default"
    assert args.per_device_train_batch_size == 16 and args.gradient_accumulation_steps == 4
    assert (args.dataloader_num_workers == 2 and args.dataloader_prefetch_factor == 4
            and args.dataloader_persistent_workers)
    assert args.optim == "adamw_torch_fused"
    assert getattr(args, hf_checkpointing_argument(F._version("transformers"))) is True
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(F.text(doc, "hf-trainer"), scope)  # the snippet as a user pastes it
    assert scope["training_args"].gradient_accumulation_steps == 4


def test_real_trainer_trains_two_steps(tmp_path):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[hf]')")
    from autotune.workloads import hf

    workload = hf.build("gpt2", n_layer=1, n_embd=32, n_head=2, vocab_size=128, seq_len=16)
    doc = make_doc(precision="bf16", batch_size=4, num_workers=1, optimizer_impl="fused", global_batch=8)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=2, report_to="none", save_strategy="no",
                                          logging_strategy="no", disable_tqdm=True,
                                          **F.render(doc, "hf-trainer")["arguments"])
    trainer = transformers.Trainer(model=workload.model, args=args,
                                   train_dataset=torch.utils.data.Subset(workload.dataset, range(64)))
    result = trainer.train()
    assert result.global_step == 2 and torch.isfinite(torch.tensor(result.training_loss))
    assert trainer.optimizer.defaults["fused"] is True  # optim="adamw_torch_fused"


def test_real_lightning_trainer_and_dataloader(tmp_path):
    lightning = pytest.importorskip("lightning", reason="lightning is not installed (pip install -e '.[frameworks]')")
    doc = make_doc(precision="bf16", batch_size=8, num_workers=2, prefetch_factor=3, persistent_workers=True,
                   global_batch=16)
    arguments = F.render(doc, "lightning")["arguments"]

    class Tiny(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 2)

        def training_step(self, batch, _):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    dataset = torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
    loader = torch.utils.data.DataLoader(dataset, **arguments["dataloader"])
    assert (loader.batch_size == 8 and loader.num_workers == 2 and loader.prefetch_factor == 3
            and loader.persistent_workers)
    trainer = lightning.Trainer(**arguments["trainer"], max_steps=2, default_root_dir=tmp_path, logger=False,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    assert trainer.accumulate_grad_batches == 2 and trainer.precision == "bf16-mixed"
    trainer.fit(Tiny(), loader)
    assert trainer.global_step == 2


def test_real_accelerate_config_and_accelerator(tmp_path):
    accelerate = pytest.importorskip("accelerate", reason="accelerate is not installed (pip install -e '.[hf]')")
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.state import AcceleratorState

    doc = make_doc(precision="bf16", compile="default", batch_size=8, global_batch=32)
    path = tmp_path / "accelerate.yaml"
    path.write_text(F.text(doc, "accelerate"))
    config = ClusterConfig.from_yaml_file(str(path))  # rejects any key accelerate does not know
    assert config.mixed_precision == "bf16" and config.use_cpu and config.dynamo_config["dynamo_backend"] == "INDUCTOR"
    out = F.render(doc, "accelerate")
    try:
        accelerator = accelerate.Accelerator(**out["accelerator"])
        assert accelerator.mixed_precision == config.mixed_precision
        assert accelerator.gradient_accumulation_steps == 4 and accelerator.device.type == "cpu"
    finally:
        AcceleratorState._reset_state(True)


def test_real_frameworks_take_the_launch(tmp_path, monkeypatch):
    """What each framework is given for two ranks with DDP's arguments, read back from the framework's own objects."""
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[hf]')")
    pytest.importorskip("lightning", reason="lightning is not installed (pip install -e '.[frameworks]')")
    accelerate = pytest.importorskip("accelerate", reason="accelerate is not installed (pip install -e '.[hf]')")
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.state import AcceleratorState

    ddp = {"bucket_cap_mb": 100, "gradient_as_bucket_view": True, "static_graph": True}
    doc = make_doc(ranks=2, **ddp)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), **F.render(doc, "hf-trainer")["arguments"])
    assert args.ddp_bucket_cap_mb == 100 and args.ddp_static_graph is True
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(F.text(doc, "lightning"), scope)  # the snippet as a user pastes it: the Trainer of two ranks is built
    trainer = scope["trainer"]
    assert trainer.num_devices == 2 and type(trainer.strategy).__name__ == "DDPStrategy"
    assert all(trainer.strategy._ddp_kwargs[k] == v for k, v in ddp.items())  # the keywords DDP will get
    (tmp_path / "accelerate.yaml").write_text(F.text(doc, "accelerate"))
    config = ClusterConfig.from_yaml_file(str(tmp_path / "accelerate.yaml"))
    assert config.num_processes == 2 and config.distributed_type == "MULTI_CPU"
    out = F.render(doc, "accelerate")
    try:
        accelerator = accelerate.Accelerator(**out["accelerator"], kwargs_handlers=[
            accelerate.DistributedDataParallelKwargs(**out[exports.DDP_KWARGS])])
        assert all(getattr(accelerator.ddp_handler, k) == v for k, v in ddp.items())
    finally:
        AcceleratorState._reset_state(True)


@pytest.mark.slow
def test_real_accelerate_launch_reads_the_config(tmp_path):
    pytest.importorskip("accelerate", reason="accelerate is not installed (pip install -e '.[hf]')")
    doc = make_doc(precision="bf16", compile="max-autotune", threads=3)
    (tmp_path / "accelerate.yaml").write_text(F.text(doc, "accelerate"))
    (tmp_path / "train.py").write_text(
        "import os\nfrom accelerate import Accelerator\na = Accelerator()\n"
        "print('RESULT', a.mixed_precision, a.state.dynamo_plugin.backend.value, a.state.dynamo_plugin.mode, "
        "os.environ['OMP_NUM_THREADS'])\n"
    )
    launch = F.text(doc, "accelerate").splitlines()[1].removeprefix("# accelerate launch ").split()  # as the file says
    launch = [a.replace("THIS_FILE", "accelerate.yaml") for a in launch]
    done = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", *launch], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "RESULT bf16 INDUCTOR max-autotune 3" in done.stdout


# ---------------------------------------------------------------- autotune's callbacks

ENV_NAMES = sorted({name for knob in knobs.REGISTRY for effect in knob.effects
                    if isinstance(effect, knobs.effects.Env) for name in effect.names})


@pytest.fixture
def process_state(monkeypatch):
    """The callbacks set the thread count, backend flags and environment variables of this process: put them back."""
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    threads = torch.get_num_threads()
    flags = Plan({"batch_size": 8}, torch.device("cuda")).flag_values()  # through the TF32 API this torch uses
    yield
    torch.set_num_threads(threads)
    for path, value in flags.items():
        *parents, attribute = path.split(".")
        owner = torch
        for part in parents:
            owner = getattr(owner, part)
        setattr(owner, attribute, value)


def other_than_default_everywhere(device: str) -> dict:
    return {"precision": "tf32", "compile": "default", "memory_format": "channels_last", "num_workers": 2,
            "activation_checkpointing": True, "cudnn_benchmark": True, "optimizer_impl": "foreach", "threads": 3,
            "cuda_allocator": "expandable_segments", "pin_memory": True} if device.startswith("cuda") else {}


@pytest.mark.parametrize("fmt", ["hf-trainer", "lightning"])
def test_what_the_callback_is_given_it_can_carry_out(fmt):
    """A knob handed to the callback declares an effect a callback carries out; the rest are the framework's."""
    for device in ("cpu", "cuda:0"):
        for knob in knobs.REGISTRY:
            extra = depends_on(knob)
            for value in other_values(knob):
                everything = {**other_than_default_everywhere(device), knob.name: value}
                for values in ({**extra, knob.name: value}, everything):
                    out = F.render(make_doc(device, **values), fmt)
                    for name in by_callback(out):
                        effects = knobs.KNOBS[name].effects
                        assert any(isinstance(e, C.CARRIED_OUT) for e in effects), (fmt, name)
                    assert not set(by_callback(out)) & set(manual(out)), (fmt, values)
    assert F.render(make_doc(threads=2, memory_format="channels_last"), "accelerate")["callback"] is None


def test_importing_the_callbacks_imports_no_framework():
    """The frameworks are imported when a callback class is first needed, never at import (autotune needs neither)."""
    tree = ast.parse(Path(C.__file__).read_text())
    top = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    names = {alias.name for node in top if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module or "" for node in top if isinstance(node, ast.ImportFrom)}
    assert not {n for n in names if n.split(".")[0] in ("transformers", "lightning", "pytorch_lightning")}


def test_the_callback_refuses_bad_values_and_warns_what_does_not_apply(process_state):
    with pytest.raises(KnobError, match="warp_drive"):
        C.KnobsInForce({"warp_drive": True})
    with pytest.raises(KnobError, match="task"):
        C.KnobsInForce({}, task="serve")
    core = C.KnobsInForce({"threads": 1, "activation_checkpointing": True, "optimizer_impl": "fused"})
    assert os.environ["OMP_NUM_THREADS"] == "1"  # when built: before the framework starts worker processes
    model = torch.nn.Linear(4, 2)  # no blocks to checkpoint
    optimizer = torch.optim.LBFGS(model.parameters())  # no fused= keyword
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        core.begin(model, [optimizer])
    said = sorted(str(w.message) for w in caught if issubclass(w.category, C.NotAppliedWarning))
    assert len(said) == 2 and "activation_checkpointing" in said[0] and "optimizer_impl" in said[1]
    assert "LBFGS takes no fused= argument" in said[1]
    assert torch.get_num_threads() == 1


def test_the_callback_switches_the_optimizer_in_place(process_state):
    """The framework and its LR schedulers hold the optimizer: it is switched, not replaced."""
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    C.KnobsInForce({"optimizer_impl": "foreach"}).begin(model, [optimizer])
    assert optimizer.defaults["foreach"] is True and all(g["foreach"] is True for g in optimizer.param_groups)
    model(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05) and scheduler.optimizer is optimizer


class TinyConvNet(torch.nn.Module):
    """A few conv blocks over 3x8x8 images (a 3-channel NCHW batch is not channels-last until converted); each
    conv records, from inside the step, what the knobs made of the process and of its input."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                            torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU())
        self.head = torch.nn.Linear(8, 4)
        self.seen: list[tuple[int, bool, bool]] = []
        for layer in self.features:
            if isinstance(layer, torch.nn.Conv2d):
                layer.register_forward_hook(self._record)

    def _record(self, layer, args, output) -> None:
        cl = torch.channels_last
        self.seen.append((torch.get_num_threads(), args[0].is_contiguous(memory_format=cl),
                          layer.weight.is_contiguous(memory_format=cl)))

    def forward(self, pixel_values, labels=None):
        logits = self.head(self.features(pixel_values).mean(dim=(2, 3)))
        loss = torch.nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


class Images(torch.utils.data.Dataset):
    def __init__(self, n: int = 32) -> None:
        self.x, self.y = torch.randn(n, 3, 8, 8), torch.randint(0, 4, (n,))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i):
        return {"pixel_values": self.x[i], "labels": self.y[i]}


def assert_in_force(seen: list[tuple[int, bool, bool]], threads: int) -> None:
    assert seen, "the step never ran the model's convolutions"
    assert all(t == threads for t, _, _ in seen), seen  # torch.get_num_threads() inside the step
    assert all(inputs and weights for _, inputs, weights in seen), seen  # channels_last inputs and weights


def test_trainer_with_the_exported_callback_trains_with_the_knobs_in_force(tmp_path, monkeypatch, process_state):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[hf]')")
    threads = 1 if torch.get_num_threads() > 1 else 2
    doc = make_doc(memory_format="channels_last", threads=threads, optimizer_impl="foreach", batch_size=4)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(F.text(doc, "hf-trainer"), scope)  # the snippet as a user pastes it: its keyword dict and its callback
    assert os.environ["OMP_NUM_THREADS"] == str(threads)  # set when the callback was built
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=2, report_to="none",
                                          save_strategy="steps", save_steps=2, logging_strategy="no", disable_tqdm=True,
                                          **scope["training_args_kwargs"])
    model = TinyConvNet()
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Images(),
                                   callbacks=scope["autotune_callbacks"])
    # saves a checkpoint at step 2: safetensors refuses a channels-last (non-contiguous) weight
    result = trainer.train()
    assert result.global_step == 2 and len(model.seen) == 2 * 2  # two steps, two convs each
    from safetensors.torch import load_file

    saved = load_file(str(next(tmp_path.glob("checkpoint-2/*.safetensors"))))
    assert saved["features.0.weight"].is_contiguous() and saved["features.0.weight"].shape == (8, 3, 3, 3)
    assert model.features[0].weight.is_contiguous(memory_format=torch.channels_last)  # training kept its layout
    assert_in_force(model.seen, threads)
    inner = getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # inside Accelerate's wrapper
    assert inner.param_groups[0]["foreach"] is True  # optim has no foreach name: the callback switched it


def test_lightning_with_the_exported_callback_trains_with_the_knobs_in_force(tmp_path, monkeypatch, process_state):
    lightning = pytest.importorskip("lightning", reason="lightning is not installed (pip install -e '.[frameworks]')")
    threads = 1 if torch.get_num_threads() > 1 else 2
    doc = make_doc(memory_format="channels_last", threads=threads, optimizer_impl="foreach",
                   activation_checkpointing=True, batch_size=4)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    # builds lightning.Trainer(**trainer_kwargs, callbacks=list(autotune_callbacks))
    exec(F.text(doc, "lightning"), scope)
    assert isinstance(scope["trainer"], lightning.Trainer)
    # the Trainer appended its own callbacks (ModelCheckpoint, progress bar) to the list it was given: the snippet gave
    # it a copy, so the pasted list holds autotune's callback alone and a second Trainer can be built from it
    ours = scope["autotune_callbacks"]
    assert len(ours) == 1 and isinstance(ours[0], C.AutotuneLightningCallback)
    net = TinyConvNet()

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = net
            self.built: torch.optim.Optimizer | None = None

        def training_step(self, batch, _):
            return self.net(batch["pixel_values"], batch["labels"])["loss"]  # a submodule, not self(...)

        def configure_optimizers(self):
            self.built = torch.optim.AdamW(self.parameters(), lr=1e-3)
            return self.built

    module = Module()
    loader = torch.utils.data.DataLoader(Images(), **scope["dataloader_kwargs"])
    trainer = lightning.Trainer(**scope["trainer_kwargs"], callbacks=ours, max_steps=2,
                                default_root_dir=tmp_path, logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, loader)
    assert trainer.global_step == 2 and len(net.seen) == 2 * 2
    assert_in_force(net.seen, threads)
    assert trainer.optimizers[0] is module.built and module.built.param_groups[0]["foreach"] is True  # in place
    assert all(hasattr(block.forward, "__wrapped__") for block in net.features if isinstance(block, torch.nn.Conv2d))


def test_the_header_names_an_interval_only_when_there_is_one():
    """A speed-up measured before the noise was known has no interval: the header does not call it one."""
    from autotune.export import frameworks
    from autotune.evidence import stats

    with_interval = stats.Ratio(1.3, 1.1, 1.5, processes=4, reference_processes=4).to_dict()
    without = stats.Ratio(2.7, processes=1, reference_processes=1).to_dict()
    assert stats.interval_label(with_interval) == " (90% interval)" and stats.interval_label(without) == ""
    source = {"study": "s", "trial": 3, "pick": "fastest", "pick_note": ""}
    out = {"source": source, "framework": {"package": "transformers", "version": "4"}, "device": "cpu", "task": "train"}
    assert "# speed-up over PyTorch's defaults: 1.30x (1.10-1.50) (90% interval)" in frameworks._header(
        {**out, "speedup": with_interval})
    assert "# speed-up over PyTorch's defaults: 2.70x" in frameworks._header({**out, "speedup": without})


@pytest.mark.slow  # a real Trainer and a real lightning.Trainer, 40 steps each
def test_the_exported_callbacks_say_the_trainings_speed_once_and_log_it(tmp_path, monkeypatch, process_state, capsys):
    """Issue 36: the callbacks an export names time the training's own steps, once warm, say the samples/s beside the
    study's once, and put the figure in the trainer's own logs."""
    transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[hf]')")
    lightning = pytest.importorskip("lightning", reason="lightning is not installed (pip install -e '.[frameworks]')")
    from autotune.export import training_speed

    for name, value in (("WARMUP_STEPS", 3), ("WARMUP_S", 0.0), ("WINDOW_STEPS", 5), ("WINDOW_S", 0.0)):
        monkeypatch.setattr(training_speed, name, value)
    monkeypatch.chdir(tmp_path)
    doc = {**make_doc(batch_size=4), "measured": {"samples_per_s": 398.0},
           "speedup": {"estimate": 2.9, "low": 2.7, "high": 3.1}}
    scope: dict = {}
    exec(F.text(doc, "hf-trainer"), scope)
    logged: list[dict] = []

    class Logs(transformers.TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            logged.append(dict(logs or {}))

    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=12, report_to="none", save_strategy="no",
                                          logging_strategy="steps", logging_steps=4, disable_tqdm=True,
                                          **scope["training_args_kwargs"])
    transformers.Trainer(model=TinyConvNet(), args=args, train_dataset=Images(64),
                         callbacks=[*scope["autotune_callbacks"], Logs()]).train()
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("autotune: ")]
    assert len(said) == 1 and "samples/s in this training; the study measured 398.0 for this configuration on the " \
                               "study's machine (2.90x the defaults, claimed 2.70-3.10x)" in said[0]
    assert any("autotune_samples_per_s" in logs for logs in logged)

    scope = {}
    exec(F.text(doc, "lightning"), scope)
    net = TinyConvNet()

    class Module(lightning.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def training_step(self, batch, batch_idx):
            return self.net(**batch)["loss"]

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    trainer = lightning.Trainer(max_steps=12, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                                enable_progress_bar=False, enable_model_summary=False,
                                callbacks=list(scope["autotune_callbacks"]))
    trainer.fit(Module(), torch.utils.data.DataLoader(Images(64), batch_size=4))
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("autotune: ")]
    assert len(said) == 1 and "samples/s in this training" in said[0]
    assert "autotune/samples_per_s" in trainer.callback_metrics
