"""transformers internals awarl relies on (checked against transformers 5.17.0).

- `cache_base` / `init_cache`: the slot KV cache (awarl.agent.backends.hf_slots) is a `Cache` subclass
  whose `update(key_states, value_states, layer_idx, ...)` models call once per layer, constructed empty
  (`Cache(layers=[])`, the transformers 5 constructor).
- `register_attention`: the slot attention is registered in `AttentionInterface` under its own name and
  called as transformers calls `sdpa_attention_forward`: (module, query, key, value, attention_mask,
  dropout=, scaling=, **kwargs).
- `attention_implementation` / `set_attention_implementation`: the model's current attention
  (`config._attn_implementation`, no public getter) and `PreTrainedModel.set_attn_implementation`.
- `forward_parameters` / `cache_argument`: the names a model's `forward` takes (the slot session needs
  `position_ids` and `logits_to_keep`), through a PEFT wrapper, and the one it takes the KV cache under:
  `past_key_values` up to 5.23, `cache` from 5.24 (`past_key_values` is deprecated there, gone in 5.40).
- `trainer_loggers`: the `report_to` names the Trainer knows (`integration_utils.INTEGRATION_TO_CALLBACK`).
- `neutral_processors`: the GenerationConfig fields at the values that switch their logits processor off, which
  awarl's transformers-generate fallback (awarl.agent.backends.hf) passes to every `generate`. Its probe
  (`transformers.logits_processors`) checks that every field `GenerationMixin._get_logits_processor` reads is
  one the fallback resets or sets: a new processor a checkpoint can switch on would otherwise make that path
  sample another distribution than the logprobs it records (`top_h` did, in 5.17).
- `set_backend_tokenizer`: replace a fast tokenizer's `tokenizers.Tokenizer` (`_tokenizer`, which
  `backend_tokenizer` returns and `save_pretrained` writes as tokenizer.json; no public setter), for the repaired
  tokenizer of a Gemma GGUF file (awarl.models.gguf_tokenizer).
- `commit_hash`: the hub revision a model was loaded from, for the eval manifest: `config._commit_hash` up
  to 5.17; from 5.18 the config no longer keeps it and the hub cache's snapshot folder tells.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from awarl.upstream import changed, shim

CHECKED = "5.17.0 and 5.24.0"


# ------------------------------------------------------------------------------------------ the cache
def cache_base() -> type[Any]:
    """transformers' `Cache`, the base class of awarl's slot cache."""
    from transformers.cache_utils import Cache

    return Cache


def init_cache(cache: Any) -> None:
    """Initialise `Cache`'s own state for a subclass that keeps its keys and values itself (no layers)."""
    try:
        cache_base().__init__(cache, layers=[])
    except TypeError as e:
        raise changed("transformers.cache", f"Cache(layers=[]) failed: {e}") from e


@shim("transformers.cache", dist="transformers", checked=CHECKED,
      reaches="transformers.cache_utils.Cache(layers=...), .update(key_states, value_states, layer_idx), "
              ".get_seq_length(layer_idx)")
def _cache_shape() -> str | None:
    cache = cache_base()
    if "layers" not in inspect.signature(cache.__init__).parameters:
        return "Cache.__init__ takes no `layers`"
    update = list(inspect.signature(cache.update).parameters)[1:4]
    if update != ["key_states", "value_states", "layer_idx"]:
        return f"Cache.update takes {update} first, not (key_states, value_states, layer_idx)"
    if "layer_idx" not in inspect.signature(cache.get_seq_length).parameters:
        return "Cache.get_seq_length takes no layer_idx"
    return None


# ------------------------------------------------------------------------------------------ attention
_ATTENTION_ARGS = ["module", "query", "key", "value", "attention_mask", "dropout", "scaling"]


def register_attention(name: str, fn: Callable[..., Any]) -> None:
    """Make `fn` available as attention implementation `name` (transformers calls it as it calls sdpa)."""
    from transformers import AttentionInterface

    AttentionInterface.register(name, fn)


def attention_implementation(model: Any) -> Any:
    """The attention implementation the model runs now (what `set_attention_implementation` restores)."""
    try:
        return model.config._attn_implementation
    except AttributeError as e:
        raise changed("transformers.attention", f"{type(model.config).__name__} has no _attn_implementation") from e


def set_attention_implementation(model: Any, name: Any) -> None:
    model.set_attn_implementation(name)


@shim("transformers.attention", dist="transformers", checked=CHECKED,
      reaches="AttentionInterface.register(name, fn), fn called as sdpa_attention_forward; "
              "PretrainedConfig._attn_implementation, PreTrainedModel.set_attn_implementation")
def _attention_shape() -> str | None:
    from transformers import AttentionInterface, PretrainedConfig, PreTrainedModel
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if not callable(getattr(AttentionInterface, "register", None)):
        return "AttentionInterface has no register"
    args = list(inspect.signature(sdpa_attention_forward).parameters)[: len(_ATTENTION_ARGS)]
    if args != _ATTENTION_ARGS:
        return f"attention functions are called with {args}, not {_ATTENTION_ARGS}"
    if not isinstance(getattr(PretrainedConfig, "_attn_implementation", None), property):
        return "PretrainedConfig._attn_implementation is no longer a property"
    if not callable(getattr(PreTrainedModel, "set_attn_implementation", None)):
        return "PreTrainedModel has no set_attn_implementation"
    return None


# ------------------------------------------------------------------------------------------ forward
def forward_parameters(model: Any) -> set[str]:
    """The argument names of the model's `forward` (of the base model under a PEFT wrapper)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return set(inspect.signature(base.forward).parameters)


def cache_argument(model: Any) -> str:
    """The keyword the model's forward takes its KV cache under."""
    return "cache" if "cache" in forward_parameters(model) else "past_key_values"


@shim("transformers.forward", dist="transformers", checked=CHECKED,
      reaches="CausalLM.forward(position_ids=, logits_to_keep=, past_key_values= | cache=) (Qwen2ForCausalLM)")
def _forward_shape() -> str | None:
    from transformers import Qwen2ForCausalLM

    params = set(inspect.signature(Qwen2ForCausalLM.forward).parameters)
    missing = {"position_ids", "logits_to_keep"} - params
    if not params & {"past_key_values", "cache"}:
        missing.add("past_key_values (or cache)")
    return f"Qwen2ForCausalLM.forward takes no {sorted(missing)}" if missing else None


# ------------------------------------------------------------------------------------------ loggers
def trainer_loggers() -> frozenset[str]:
    """The `report_to` names transformers' Trainer accepts (besides `none`)."""
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK

    return frozenset(INTEGRATION_TO_CALLBACK)


@shim("transformers.loggers", dist="transformers", checked=CHECKED,
      reaches="transformers.integrations.integration_utils.INTEGRATION_TO_CALLBACK")
def _loggers_shape() -> str | None:
    missing = {"tensorboard", "wandb"} - trainer_loggers()
    return f"INTEGRATION_TO_CALLBACK lacks {sorted(missing)}" if missing else None


# ------------------------------------------------------------------------------------------ GGUF
def gguf_tensor_names(model: Any, architecture: str) -> dict[str, str] | None:
    """GGUF tensor name -> parameter name of `model`, the map transformers' GGUF loader fills the model by
    (`get_gguf_hf_weights_map` with the architecture's tensor processor; a file tensor it does not list is
    dropped, a parameter no file tensor fills keeps its random initialisation). None for an architecture whose
    processor renames or splits tensors on the way (MoE, T5, GPT-2, ...): its names cannot be checked one by
    one."""
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        LlamaTensorProcessor,
        TensorProcessor,
        get_gguf_hf_weights_map,
    )

    processor = TENSOR_PROCESSORS.get(architecture, TensorProcessor)
    if processor not in (TensorProcessor, LlamaTensorProcessor):
        return None
    return dict(get_gguf_hf_weights_map(model, processor(config=model.config.to_dict())))


@shim("transformers.gguf_tensor_names", dist="transformers", checked="5.17.0",
      reaches="modeling_gguf_pytorch_utils.get_gguf_hf_weights_map and TENSOR_PROCESSORS")
def _gguf_map_shape() -> str | None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig(hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                             num_attention_heads=2, num_key_value_heads=2, vocab_size=16))
    got = (gguf_tensor_names(model, "llama") or {}).get("blk.0.attn_q.weight")
    want = "model.layers.0.self_attn.q_proj.weight"
    return None if got == want else f"blk.0.attn_q.weight maps to {got!r}, not {want!r}"


def set_backend_tokenizer(tokenizer: Any, backend: Any) -> None:
    """Make `backend` (a `tokenizers.Tokenizer`) the one `tokenizer` encodes, decodes and saves with."""
    tokenizer._tokenizer = backend


@shim("transformers.set_backend_tokenizer", dist="transformers", checked="5.17.0",
      reaches="PreTrainedTokenizerFast._tokenizer (backend_tokenizer, save_pretrained)")
def _backend_tokenizer_shape() -> str | None:
    import json
    import tempfile

    from tokenizers import Tokenizer, models
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    def fast(vocab: dict[str, int]) -> Any:
        return Tokenizer(models.WordLevel(vocab, unk_token="u"))

    tok = PreTrainedTokenizerFast(tokenizer_object=fast({"u": 0, "a": 1}))
    set_backend_tokenizer(tok, fast({"u": 0, "b": 1}))
    if tok.convert_tokens_to_ids("b") != 1 or tok.backend_tokenizer.get_vocab() != {"u": 0, "b": 1}:
        return "the tokenizer does not encode with the backend it was given"
    with tempfile.TemporaryDirectory() as d:
        tok.save_pretrained(d)
        saved = json.loads((Path(d) / "tokenizer.json").read_text())["model"]["vocab"]
        if saved != {"u": 0, "b": 1} or AutoTokenizer.from_pretrained(d).convert_tokens_to_ids("b") != 1:
            return "save_pretrained does not write the backend it was given"
    return None


# ------------------------------------------------------------------------------------------ revision
def commit_hash(model: Any, ref: str | None = None) -> str | None:
    """The hub commit the model was loaded from: its config's `_commit_hash` (transformers <= 5.17), else the
    commit the local hub cache holds for hub id `ref` at its default revision (what awarl loads; transformers
    >= 5.18 no longer records it on the config). None for local folders and objects without a config."""
    commit = getattr(getattr(model, "config", None), "_commit_hash", None)
    if commit or not ref or Path(ref).exists():
        return commit
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(ref, "config.json")
    except ValueError:   # not a hub id
        return None
    return Path(cached).parent.name if isinstance(cached, str) else None


# ------------------------------------------------------------------------------------------ logits processors
# The GenerationConfig fields that add a logits processor or change the search, at values that switch them off
# (transformers 5 names). A default GenerationConfig() holds None, "unset", for most of them, and an unset field
# takes the checkpoint's value; min_new_tokens 0 takes precedence over a checkpoint's min_length.
NEUTRAL_PROCESSORS: dict[str, Any] = {
    "min_new_tokens": 0, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0,
    "repetition_penalty": 1.0, "encoder_repetition_penalty": 1.0, "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0, "bad_words_ids": None, "renormalize_logits": False,
    "forced_bos_token_id": None, "forced_eos_token_id": None, "remove_invalid_values": False,
    "exponential_decay_length_penalty": None, "suppress_tokens": None, "begin_suppress_tokens": None,
    "sequence_bias": None, "guidance_scale": None, "min_p": None, "num_beams": 1, "num_return_sequences": 1,
    "top_h": None, "watermarking_config": None,
}
# The other fields transformers' logits-processor builder reads: set by every call (the sampling knobs), or no
# processor of the sampled distribution (lengths and special tokens the call sets, the KV cache). The probe
# `transformers.logits_processors` fails when the builder reads a field in none of the three.
SET_PER_CALL = frozenset({"do_sample", "temperature", "top_k", "top_p"})
NOT_A_PROCESSOR = frozenset({"_eos_token_tensor", "max_length", "min_length", "use_cache"})


def neutral_processors() -> dict[str, Any]:
    """NEUTRAL_PROCESSORS, the fields this transformers' GenerationConfig has: the generate keywords that keep
    a checkpoint's generation_config from switching a logits processor on."""
    from transformers import GenerationConfig

    default = GenerationConfig()
    return {name: v for name, v in NEUTRAL_PROCESSORS.items() if hasattr(default, name)}


@shim("transformers.logits_processors", dist="transformers", checked="5.17.0",
      reaches="GenerationMixin._get_logits_processor's generation_config fields (read from its source)")
def _logits_processor_fields() -> str | None:
    import re

    from transformers.generation.utils import GenerationMixin

    read = set(re.findall(r"generation_config\.(\w+)", inspect.getsource(GenerationMixin._get_logits_processor)))
    if not read:
        return "_get_logits_processor reads no generation_config field: its source changed shape"
    unknown = read - set(NEUTRAL_PROCESSORS) - SET_PER_CALL - NOT_A_PROCESSOR
    if unknown:
        return (f"_get_logits_processor reads {sorted(unknown)}, which the transformers-generate fallback neither "
                f"resets (NEUTRAL_PROCESSORS) nor sets")
    return None


@shim("transformers.commit_hash", dist="transformers", checked=CHECKED,
      reaches="PretrainedConfig._commit_hash (<= 5.17); else huggingface_hub.try_to_load_from_cache's snapshot "
              "folder (hub-cache layout models--ORG--NAME/snapshots/COMMIT/config.json)")
def _commit_hash_shape() -> str | None:
    import tempfile

    import huggingface_hub.constants as hub_constants
    from transformers import PretrainedConfig

    if getattr(PretrainedConfig(_commit_hash="abc"), "_commit_hash", None) == "abc":
        return None
    with tempfile.TemporaryDirectory() as cache:
        repo = Path(cache) / "models--org--name"
        (repo / "snapshots" / "c0ffee").mkdir(parents=True)
        (repo / "snapshots" / "c0ffee" / "config.json").write_text("{}")
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text("c0ffee")
        saved, hub_constants.HF_HUB_CACHE = hub_constants.HF_HUB_CACHE, cache
        try:
            found = commit_hash(None, "org/name")
        finally:
            hub_constants.HF_HUB_CACHE = saved
    return None if found == "c0ffee" else f"the hub cache gave {found!r} for a cached snapshot c0ffee"
