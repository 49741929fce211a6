"""Generation backends behind one interface (`base.Backend`): transformers, vLLM (in process or a
`trl vllm-serve` server), scripted replay, registered in `awarl.choices.BACKENDS`. `make_backend` is the
one place a backend is built from the `generation:` config, for evaluation, estimation and training alike."""

from __future__ import annotations

from typing import Any

from awarl.agent.backends.base import Backend, BackendKind, Generation
from awarl.choices import BACKENDS
from awarl.config import GenerationConfig

__all__ = ["Backend", "BackendKind", "Generation", "backend_kind", "make_backend"]


def backend_kind(name: str) -> BackendKind:
    """The registered backend `name` (ValueError naming the choices when there is none)."""
    return BACKENDS.load(name, BackendKind)


def make_backend(gen_cfg: GenerationConfig, model_path_or_obj: Any, tokenizer: Any, *, kind: str | None = None,
                 generation_config: Any = None) -> Backend:
    """The backend `kind` (default `gen_cfg.backend`) names, built by its registered factory.
    `model_path_or_obj`: a path / hub id, or a loaded object (a transformers model for `hf`, any `vllm.LLM`
    for `vllm`, e.g. TRL's colocated engine); ignored by `scripted`, which replays `gen_cfg.script`.
    `generation_config`: the policy's, for its eos ids, when the engine object does not carry it (a vLLM
    engine)."""
    return backend_kind(kind or gen_cfg.backend)(gen_cfg, model_path_or_obj, tokenizer,
                                                 generation_config=generation_config)
