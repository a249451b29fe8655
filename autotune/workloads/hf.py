"""Hugging Face models by name, offline: ``--model hf:gpt2 --model-arg n_layer=2``.

Why: the speed and memory of a training step depend on a model's shapes, not on its
weights, so tuning a transformer architecture needs no download. A spec
``hf:<model_type>`` (any type ``transformers.AutoConfig.for_model`` knows: gpt2, bert,
t5, llama, ...) builds the model from its configuration class with random weights,
never touching the Hub (``HF_HUB_OFFLINE=1``), and returns an
:class:`autotune.workloads.contract.Workload` with synthetic token batches.

Model arguments (``--model-arg key=value``) override the configuration (``n_layer=2``,
``hidden_size=64``, ``vocab_size=1000``; the type's own defaults otherwise), except:

- ``head``: ``causal-lm`` | ``masked-lm`` | ``seq2seq-lm`` | ``sequence-classification``;
  by default seq2seq for encoder-decoders (t5, bart), masked LM for encoders (bert),
  causal LM for decoders (gpt2, llama);
- ``seq_len``: tokens per sample (default 128, or the model's maximum if smaller);
- ``target_len``: label tokens per sample of a seq2seq model (default ``seq_len``).

Samples are dicts (``input_ids``, ``attention_mask``, ``labels``) passed to the model as
keywords, so the model computes its own loss and autotune's default loss takes
``output.loss``. The KV cache is off (``use_cache=False``) unless a model arg sets it:
a training step has no use for it.
"""

from __future__ import annotations

import difflib
import functools
import os
from typing import Any, Callable

import torch
from torch.utils.data import Dataset

from autotune.machine import hardware
from autotune.errors import SpecError
from autotune.workloads.contract import Workload

PREFIX = "hf:"
# head -> (the transformers Auto class, its mapping of model types in transformers.models.auto.modeling_auto)
HEADS: dict[str, tuple[str, str]] = {
    "causal-lm": ("AutoModelForCausalLM", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    "masked-lm": ("AutoModelForMaskedLM", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    "seq2seq-lm": ("AutoModelForSeq2SeqLM", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    "sequence-classification": ("AutoModelForSequenceClassification",
                                "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
}
OWN_ARGS = ("head", "seq_len", "target_len")  # model args that are not configuration attributes
EXAMPLES = ("gpt2", "bert", "t5", "llama", "bart", "mistral", "qwen2")
DEFAULT_SEQ_LEN = 128
POSITION_LIMITS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")
SPECIAL_TOKENS = ("bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "cls_token_id",
                  "decoder_start_token_id")


def _transformers(spec: str) -> Any:
    """The transformers package, imported offline; SpecError when it is not installed."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import transformers
    except ImportError:
        raise SpecError(f"{spec} needs transformers: pip install -e '.[hf]'") from None
    return transformers


def _model_types() -> set[str]:
    from transformers.models.auto import configuration_auto

    return set(configuration_auto.CONFIG_MAPPING_NAMES)


def _head_types(head: str) -> set[str]:
    from transformers.models.auto import modeling_auto

    return set(getattr(modeling_auto, HEADS[head][1], {}))


def parse(spec: str) -> str:
    """``hf:gpt2`` -> ``gpt2``."""
    model_type = spec[len(PREFIX) :].strip() if isinstance(spec, str) and spec.startswith(PREFIX) else ""
    if not model_type:
        raise SpecError(f"{spec!r}: expected hf:<model_type>, e.g. hf:gpt2, hf:bert, hf:t5, hf:llama")
    return model_type


def factory(spec: str) -> Callable[..., Workload]:
    """Check ``hf:<model_type>`` (transformers installed, type known) and return ``**model_args -> Workload``."""
    model_type = parse(spec)
    transformers = _transformers(spec)
    known = _model_types()
    if model_type not in known:
        close = difflib.get_close_matches(model_type, sorted(known), n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise SpecError(
            f"{spec}: transformers {transformers.__version__} knows no model type {model_type!r}; "
            f"{hint}known types include {', '.join(EXAMPLES)}"
        )
    return functools.partial(build, model_type)


# ---------------------------------------------------------------- arguments


def _check_type(spec: str, key: str, value: Any, default: Any) -> None:
    """SpecError when ``value`` cannot stand in for the configuration's ``default``."""
    if isinstance(default, bool):
        ok, kind = isinstance(value, bool), "True or False"
    elif isinstance(default, int):
        ok, kind = isinstance(value, int) and not isinstance(value, bool), "an integer"
    elif isinstance(default, float):
        ok, kind = isinstance(value, (int, float)) and not isinstance(value, bool), "a number"
    elif isinstance(default, str):
        ok, kind = isinstance(value, str), "a string"
    else:  # None or a structure: the configuration class decides
        return
    if not ok:
        raise SpecError(f"{spec}: model arg {key}={value!r}: expected {kind} (the default is {default!r})")


def _positive_int(spec: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(f"{spec}: model arg {key}={value!r}: expected a positive integer")
    return value


def _default_head(model_type: str, config: Any) -> str:
    if getattr(config, "is_encoder_decoder", False) and model_type in _head_types("seq2seq-lm"):
        return "seq2seq-lm"
    for head in ("masked-lm", "causal-lm", "sequence-classification"):
        if model_type in _head_types(head):
            return head
    return ""


def _config_overrides(spec: str, base: Any, args: dict[str, Any]) -> dict[str, Any]:
    """The model args that override the configuration, checked against its attributes."""
    names = sorted(set(base.to_dict()) | set(getattr(type(base), "attribute_map", {})))
    overrides: dict[str, Any] = {}
    for key, value in args.items():
        if key in OWN_ARGS:
            continue
        if not hasattr(base, key):
            close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; own args: {', '.join(OWN_ARGS)}"
            raise SpecError(f"{spec}: unknown model arg {key!r}: {type(base).__name__} has no such attribute{hint}")
        _check_type(spec, key, value, getattr(base, key))
        overrides[key] = value
    vocab = overrides.get("vocab_size")
    if isinstance(vocab, int) and vocab > 0:  # a smaller vocabulary: keep the special tokens inside it
        for key in SPECIAL_TOKENS:
            token = getattr(base, key, None)
            if key not in args and isinstance(token, int) and not isinstance(token, bool) and token >= vocab:
                overrides[key] = vocab - 1
    if "use_cache" not in args and hasattr(base, "use_cache"):
        overrides["use_cache"] = False
    return overrides


def _seq_limit(config: Any) -> tuple[str, int] | None:
    for key in POSITION_LIMITS:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return key, value
    return None


# ---------------------------------------------------------------- building


def build(model_type: str, **args: Any) -> Workload:
    """A Workload of ``model_type`` with random weights and synthetic token batches (see module docstring)."""
    spec = PREFIX + model_type
    transformers = _transformers(spec)
    try:
        base = transformers.AutoConfig.for_model(model_type)
    except Exception as exc:  # noqa: BLE001 - an unknown type, or one whose configuration needs arguments
        raise SpecError(f"{spec}: its configuration cannot be built: {type(exc).__name__}: "
                        f"{_first_line(exc)}") from None

    head = args.get("head")
    if head is None:
        head = _default_head(model_type, base)
        if not head:
            raise SpecError(
                f"{spec}: {model_type} has no {', '.join(HEADS)} head; autotune.workloads.hf builds text models on "
                "token ids"
            )
    elif head not in HEADS:
        raise SpecError(f"{spec}: model arg head={head!r}: expected one of {', '.join(HEADS)}")
    elif model_type not in _head_types(head):
        has = [h for h in HEADS if model_type in _head_types(h)]
        raise SpecError(f"{spec}: model arg head={head!r}: {model_type} has no {head} head; it has "
                        f"{', '.join(has) or 'none'}")

    overrides = _config_overrides(spec, base, args)
    given = {k: v for k, v in args.items() if k not in OWN_ARGS}
    try:
        config = transformers.AutoConfig.for_model(model_type, **overrides)
    except Exception as exc:  # noqa: BLE001 - the configuration rejected the values
        raise SpecError(f"{spec}: bad model args {given}: {type(exc).__name__}: {_first_line(exc)}") from None
    if head == "seq2seq-lm" and getattr(config, "decoder_start_token_id", None) is None:
        pad = getattr(config, "pad_token_id", None)
        config.decoder_start_token_id = pad if isinstance(pad, int) else 0  # T5's convention: start with pad
    if head == "sequence-classification" and getattr(config, "pad_token_id", None) is None:
        eos = getattr(config, "eos_token_id", None)
        config.pad_token_id = eos if isinstance(eos, int) else 0  # batches > 1 need a pad token to pool

    limit = _seq_limit(config)
    if "seq_len" in args:
        seq_len = _positive_int(spec, "seq_len", args["seq_len"])
        if limit and seq_len > limit[1]:
            raise SpecError(f"{spec}: model arg seq_len={seq_len} is longer than {model_type}'s {limit[0]}={limit[1]}")
    else:
        seq_len = min(DEFAULT_SEQ_LEN, limit[1]) if limit else DEFAULT_SEQ_LEN
    target_len = seq_len
    if "target_len" in args:
        if head != "seq2seq-lm":
            raise SpecError(f"{spec}: model arg target_len is for head=seq2seq-lm (this head is {head})")
        target_len = _positive_int(spec, "target_len", args["target_len"])

    auto_class = getattr(transformers, HEADS[head][0])
    try:
        model = auto_class.from_config(config)
    except Exception as exc:  # noqa: BLE001 - e.g. a hidden size the head count does not divide
        if isinstance(exc, hardware.oom_types()):
            raise  # too large for this machine: the trial reports it as oom
        raise SpecError(
            f"{spec}: {HEADS[head][0]} could not build {model_type} with model args {given}: "
            f"{type(exc).__name__}: {_first_line(exc)}"
        ) from None

    vocab = int(config.vocab_size)
    num_labels = int(getattr(config, "num_labels", 2) or 2)
    dataset = TokenDataset(vocab, seq_len, head, target_len=target_len, num_labels=num_labels)
    return Workload(
        model=model,
        dataset=dataset,
        example=dataset[0],
        metadata={
            "hf": {
                "model_type": model_type,
                "head": head,
                "class": type(model).__name__,
                "seq_len": seq_len,
                "vocab_size": vocab,
                "transformers": transformers.__version__,
            }
        },
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


class TokenDataset(Dataset):
    """Random token samples for a head: ``input_ids``, ``attention_mask`` and the ``labels`` that make
    the model return a loss. A small pool, cycled, so items cost nothing to load."""

    def __init__(
        self,
        vocab_size: int,
        seq_len: int,
        head: str = "causal-lm",
        target_len: int | None = None,
        num_labels: int = 2,
        length: int = 1 << 16,
        pool: int = 64,
        seed: int = 0,
    ) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.length = length
        self.pool: list[dict[str, torch.Tensor]] = []
        for _ in range(pool):
            ids = torch.randint(0, vocab_size, (seq_len,), generator=gen)
            sample = {"input_ids": ids, "attention_mask": torch.ones(seq_len, dtype=torch.long)}
            if head == "seq2seq-lm":
                sample["labels"] = torch.randint(0, vocab_size, (target_len or seq_len,), generator=gen)
            elif head == "sequence-classification":
                sample["labels"] = torch.randint(0, num_labels, (), generator=gen)
            else:  # causal LM shifts the labels itself; masked LM predicts every position
                sample["labels"] = ids.clone()
            self.pool.append(sample)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.pool[index % len(self.pool)]
