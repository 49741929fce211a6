"""Generation backends behind one interface (`base.Backend`): transformers, vLLM (in process or a
`trl vllm-serve` server), scripted replay. `make_backend` is the one place a backend is built from the
`generation:` config, for evaluation, estimation and training alike."""

from __future__ import annotations

from typing import Any

from awarl.agent.backends.base import Backend, Generation
from awarl.agent.backends.hf import HFBackend
from awarl.agent.backends.scripted import ScriptedBackend
from awarl.agent.backends.vllm import VLLMBackend, engine_kwargs
from awarl.config import GenerationConfig

__all__ = ["Backend", "Generation", "make_backend"]


def make_backend(gen_cfg: GenerationConfig, model_path_or_obj: Any, tokenizer: Any, *, kind: str | None = None,
                 generation_config: Any = None) -> Backend:
    """The backend `kind` (default `gen_cfg.backend`) names. `model_path_or_obj`: a path / hub id, or a
    loaded object (a transformers model for `hf`, any `vllm.LLM` for `vllm`, e.g. TRL's colocated engine);
    ignored by `scripted`, which replays `gen_cfg.script`. `generation_config`: the policy's, for its eos
    ids, when the engine object does not carry it (a vLLM engine)."""
    kind = kind or gen_cfg.backend
    if kind == "scripted":
        if not gen_cfg.script:
            raise ValueError("generation.backend=scripted needs generation.script (a JSONL of scripted turns)")
        return ScriptedBackend.from_jsonl(tokenizer, gen_cfg.script)
    if kind == "hf":
        opts: dict[str, Any] = dict(static_cache=gen_cfg.static_cache, compile=gen_cfg.static_cache,
                                    batch_size=gen_cfg.batch_size)
        if isinstance(model_path_or_obj, str):
            backend = HFBackend.from_pretrained(model_path_or_obj, gen_cfg.dtype, **opts)
            # The caller's tokenizer wins (it may carry a chat template override).
            backend.tokenizer = tokenizer if tokenizer is not None else backend.tokenizer
            return backend
        return HFBackend.for_model(model_path_or_obj, tokenizer, **opts)
    if kind == "vllm":
        if isinstance(model_path_or_obj, str):
            engine = VLLMBackend.from_pretrained(model_path_or_obj, **engine_kwargs(gen_cfg))
            # The caller's tokenizer wins, as for `hf` (vLLM's own is loaded from the same folder).
            engine.tokenizer = tokenizer if tokenizer is not None else engine.tokenizer
            return engine
        return VLLMBackend(model_path_or_obj, tokenizer, generation_config=generation_config)
    raise ValueError(f"generation.backend: unknown backend {kind!r} (hf, vllm, scripted)")
