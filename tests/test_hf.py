"""``--model hf:<model_type>``: Hugging Face models built offline from their configuration, with synthetic tokens."""

from __future__ import annotations

import importlib.util
import math
import os
import sys

import pytest
import torch

from autotune.workloads import hf
from autotune import result as R
from autotune.errors import SpecError
from autotune.trial.runner import Runner
from autotune.workloads.specs import build, import_spec
from autotune.workloads.contract import Workload, WorkloadSpec, default_loss, split_batch, call_model

needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="transformers is not installed (pip install -e '.[hf]')"
)
TINY_GPT2 = {"n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 128, "seq_len": 16}
TINY_BERT = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64,
             "vocab_size": 128, "seq_len": 16}
TINY_T5 = {"num_layers": 1, "d_model": 32, "num_heads": 2, "d_ff": 64, "d_kv": 16, "vocab_size": 128, "seq_len": 16}


def spec(model: str, **args) -> WorkloadSpec:
    return WorkloadSpec(model=model, model_args=tuple(sorted(args.items())))


def loss_of(workload: Workload, batch_size: int = 4) -> torch.Tensor:
    """One forward of a real batch, as the trial's step makes it: collate, split, call, default loss."""
    batch = torch.utils.data.default_collate([workload.dataset[i] for i in range(batch_size)])
    inputs, target = split_batch(batch)
    return default_loss(call_model(workload.model, inputs), target)


@needs_transformers
def test_tiny_gpt2_builds_offline():
    workload = build(spec("hf:gpt2", **TINY_GPT2))
    assert type(workload.model).__name__ == "GPT2LMHeadModel" and workload.task == "train"
    config = workload.model.config
    assert (config.n_layer, config.n_embd, config.vocab_size, config.use_cache) == (1, 32, 128, False)
    assert config.eos_token_id < 128  # special tokens moved inside the smaller vocabulary
    sample = workload.example
    assert set(sample) == {"input_ids", "attention_mask", "labels"} and sample["input_ids"].shape == (16,)
    assert int(sample["input_ids"].max()) < 128 and torch.equal(sample["labels"], sample["input_ids"])
    assert workload.metadata["hf"]["head"] == "causal-lm"
    loss = loss_of(workload)
    assert math.isfinite(loss.item())
    assert os.environ.get("HF_HUB_OFFLINE")  # set to 1 unless the user set it


@pytest.mark.slow  # 4 s: the quick loop (-m 'not slow') has a test of this part that takes less
@needs_transformers
def test_a_real_trial_runs(quick):
    runner = Runner(spec("hf:gpt2", **TINY_GPT2), settings=quick, timeout_s=180)
    res = runner.measure({"batch_size": 8, "activation_checkpointing": True})
    assert res.outcome == R.OK, res.error
    assert res.samples_per_s > 0 and res.samples_per_step == 8
    assert res.notes.get("checkpointed_blocks") == 1  # the transformer's ModuleList of blocks


@needs_transformers
def test_bert_is_a_masked_lm_with_a_finite_loss():
    workload = build(spec("hf:bert", **TINY_BERT))
    assert type(workload.model).__name__ == "BertForMaskedLM"
    assert math.isfinite(loss_of(workload).item())


@needs_transformers
def test_t5_is_a_seq2seq_lm_with_a_finite_loss():
    workload = build(spec("hf:t5", target_len=8, **TINY_T5))
    assert type(workload.model).__name__ == "T5ForConditionalGeneration"
    assert workload.example["labels"].shape == (8,)
    assert math.isfinite(loss_of(workload).item())


@needs_transformers
def test_head_override_and_inference_task():
    workload = build(spec("hf:gpt2", head="sequence-classification", num_labels=3, **TINY_GPT2))
    assert type(workload.model).__name__ == "GPT2ForSequenceClassification"
    assert workload.example["labels"].shape == () and int(workload.example["labels"]) < 3
    assert math.isfinite(loss_of(workload).item())  # batches > 1 pool on the pad token
    infer = build(WorkloadSpec("hf:bert", model_args=tuple(sorted(TINY_BERT.items())), task="infer"))
    assert infer.task == "infer"


@needs_transformers
def test_default_sequence_length_fits_the_model():
    args = dict(TINY_GPT2, n_positions=64)
    del args["seq_len"]
    assert build(spec("hf:gpt2", **args)).example["input_ids"].shape == (64,)


def test_missing_transformers_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers now raises ImportError
    with pytest.raises(SpecError) as err:
        import_spec("hf:gpt2")
    assert str(err.value) == "hf:gpt2 needs transformers: pip install -e '.[hf]'"
    with pytest.raises(SpecError, match="needs transformers"):
        build(spec("hf:bert", **TINY_BERT))


@needs_transformers
def test_unknown_model_type_lists_known_ones():
    with pytest.raises(SpecError) as err:
        import_spec("hf:gpt3")
    message = str(err.value)
    assert "'gpt3'" in message and "gpt2" in message and "llama" in message and "\n" not in message
    with pytest.raises(SpecError, match="expected hf:<model_type>"):
        import_spec("hf:")


@needs_transformers
@pytest.mark.parametrize(
    ("args", "named"),
    [
        ({"n_layers": 2}, "'n_layers'"),  # no such attribute; the message suggests n_layer
        ({"n_layer": "two"}, "n_layer='two'"),
        ({"seq_len": 4096}, "seq_len=4096"),
        ({"seq_len": 0}, "seq_len=0"),
        ({"head": "masked-lm"}, "head='masked-lm'"),
        ({"head": "vision"}, "head='vision'"),
        ({"target_len": 8}, "target_len"),
        ({"n_embd": 30, "n_head": 4}, "n_embd"),  # the model refuses: 30 is not a multiple of 4
    ],
)
def test_bad_model_args_name_the_arg(args, named):
    with pytest.raises(SpecError) as err:
        build(spec("hf:gpt2", **{"n_layer": 1, **args}))
    assert named in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("hf:gpt2: ")


@needs_transformers
def test_a_type_without_a_text_head_is_refused():
    with pytest.raises(SpecError, match="builds text models on token ids"):
        build(spec("hf:vit"))


@pytest.mark.slow  # 2 s: the quick loop (-m 'not slow') has a test of this part that takes less
@needs_transformers
def test_a_failing_trial_reports_the_spec_error(quick):
    res = Runner(spec("hf:gpt2", n_layers=1), settings=quick, timeout_s=120).measure({})
    assert res.outcome == R.ERROR and res.error["user"] and "'n_layers'" in res.error["message"]


def test_seq_len_option_is_the_model_arg():
    from autotune.cli import workload_from

    base = {"model": "hf:gpt2", "data": None, "model_args": ("n_layer=1",), "input_shape": None, "num_classes": None,
            "task": None, "device": "cpu", "trial_timeout": "60"}
    spec, _, _ = workload_from({**base, "seq_len": 64})
    assert dict(spec.model_args) == {"n_layer": 1, "seq_len": 64}
    with pytest.raises(SpecError, match="--seq-len applies to hf: models"):
        workload_from({**base, "model": "autotune.examples:cnn", "seq_len": 64})
    with pytest.raises(SpecError, match="both given"):
        workload_from({**base, "model_args": ("seq_len=32",), "seq_len": 64})


def test_seq_len_is_a_keyword_of_the_api_as_it_is_an_option_of_the_command_line(monkeypatch):
    import autotune
    from autotune import api

    asked = []
    monkeypatch.setattr(api, "measure_spec", lambda request, values, device: asked.append(request.spec) or [None])
    autotune.measure("hf:gpt2", model_args={"n_layer": 1}, seq_len=64)  # the request measure() would run
    assert dict(asked[0].model_args) == {"n_layer": 1, "seq_len": 64}
    for call in (lambda **kw: autotune.measure("autotune.examples:cnn", **kw),
                 lambda **kw: autotune.tune("autotune.examples:cnn", progress=False, **kw)):
        with pytest.raises(SpecError) as err:
            call(seq_len=64)
        assert str(err.value).startswith("seq_len= applies to hf: models") and "model_args=" in str(err.value)
    with pytest.raises(SpecError, match="both given"):
        autotune.measure("hf:gpt2", model_args={"seq_len": 32}, seq_len=64)
    with pytest.raises(SpecError, match="expected a positive integer"):
        autotune.measure("hf:gpt2", seq_len=0)
    with pytest.raises(SpecError, match="takes no data or model options"):
        autotune.tune(None, study="s", seq_len=64, progress=False)


def test_seq_len_bad_input_is_one_line():
    from click.testing import CliRunner

    from autotune import cli

    out = CliRunner().invoke(cli.main, ["measure", "--model", "autotune.examples:cnn", "--seq-len", "64"])
    assert out.exit_code != 0 and "Traceback" not in out.output
    assert out.output.strip().splitlines()[-1].startswith("error: --seq-len applies to hf: models")


@needs_transformers
@pytest.mark.parametrize(
    ("model", "sizes", "names"),
    [
        ("hf:gpt2", {"n_layer": 1, "n_embd": 64, "n_head": 2}, {"n_layer": 1, "n_embd": 64, "n_head": 2}),
        ("hf:llama", {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 2,
                      "intermediate_size": 128}, {"num_hidden_layers": 1, "hidden_size": 64, "num_attention_heads": 2}),
    ],
)
def test_model_args_from_the_command_line_size_the_config_and_the_vocabulary(model, sizes, names):
    """`--model-arg vocab_size=8000` (as docs/model.md's line gives it) reaches the configuration, the embedding and the
    output layer, and the synthetic tokens are drawn from that vocabulary (not the type's own 50,257 or 32,000)."""
    from autotune.cli import workload_from

    words = tuple(f"{key}={value}" for key, value in {**sizes, "vocab_size": 8000}.items())
    spec, _, _ = workload_from({"model": model, "data": None, "model_args": words, "input_shape": None,
                                "num_classes": None, "task": None, "device": "cpu", "trial_timeout": "60",
                                "seq_len": 32})
    workload = build(spec)
    config = workload.model.config
    assert {key: getattr(config, key) for key in names} == names
    assert config.vocab_size == 8000 and workload.metadata["hf"]["vocab_size"] == 8000
    assert workload.model.get_input_embeddings().num_embeddings == 8000
    assert workload.model.get_output_embeddings().out_features == 8000
    for key in hf.SPECIAL_TOKENS:  # the type's special tokens fit the smaller vocabulary
        token = getattr(config, key, None)
        assert not isinstance(token, int) or token < 8000, (key, token)
    ids = torch.stack([workload.dataset[i]["input_ids"] for i in range(64)])
    assert ids.shape == (64, 32) and int(ids.min()) >= 0 and int(ids.max()) < 8000
    assert int(ids.max()) >= 4000  # drawn from the whole vocabulary (2,048 uniform draws all below 4000: p = 2^-2048)
    assert math.isfinite(loss_of(workload).item())
