"""Generation backends behind one interface (`base.Backend`): transformers, vLLM, scripted replay."""

from __future__ import annotations

from typing import Any

from awarl.agent.backends.base import Backend, Generation

__all__ = ["Backend", "Generation", "make_backend"]


def make_backend(gen_cfg: Any, model_path_or_obj: Any, tokenizer: Any) -> Backend:
    """The backend `gen_cfg.backend` names. `model_path_or_obj`: a path / hub id, or a loaded object (a
    transformers model for `hf`, a `vllm.LLM` for `vllm`); ignored by `scripted`, which replays
    `gen_cfg.script`."""
    kind = gen_cfg.backend
    if kind == "scripted":
        from awarl.agent.backends.scripted import ScriptedBackend

        if not gen_cfg.script:
            raise ValueError("generation.backend=scripted needs generation.script (a JSONL of scripted turns)")
        return ScriptedBackend.from_jsonl(tokenizer, gen_cfg.script)
    if kind == "hf":
        from awarl.agent.backends.hf import HFBackend

        opts = dict(static_cache=gen_cfg.static_cache, compile=gen_cfg.static_cache, batch_size=gen_cfg.batch_size)
        if isinstance(model_path_or_obj, str):
            backend = HFBackend.from_pretrained(model_path_or_obj, gen_cfg.dtype, **opts)
            # The caller's tokenizer wins (it may carry a chat template override).
            backend.tokenizer = tokenizer if tokenizer is not None else backend.tokenizer
            return backend
        return HFBackend(model_path_or_obj, tokenizer, **opts)
    if kind == "vllm":
        from awarl.agent.backends.vllm import VLLMBackend

        if isinstance(model_path_or_obj, str):
            extra = {"max_model_len": gen_cfg.max_model_len} if gen_cfg.max_model_len else {}
            return VLLMBackend.from_pretrained(model_path_or_obj, gen_cfg.dtype, gen_cfg.gpu_memory_utilization,
                                               tensor_parallel_size=gen_cfg.tensor_parallel_size, **extra)
        return VLLMBackend(model_path_or_obj, tokenizer)
    raise ValueError(f"generation.backend: unknown backend {kind!r} (hf, vllm, scripted)")
