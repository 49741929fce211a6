"""Policy -> colocated vLLM weight sync of awarl's own, installed on TRL's `VLLMGeneration`.

TRL 1.16 syncs a colocated engine by calling `model.load_weights([(name, tensor)])` once per parameter. vLLM
0.32 repacks weights after loading them (its kernels' layout) and reloads them through its *layerwise
reload* API instead; per-parameter `load_weights` on a repacked model fails with "'Parameter' object has
no attribute 'weight_loader'". So where the engine's worker has `reload_weights` (vLLM >= 0.32), the whole
model goes through it in one call, in checkpoint format (names and shapes as the policy has them); where
it does not (vLLM <= 0.31, TRL's supported range on GPU), TRL's own sync runs unchanged.

Only how tensors reach vLLM changes: the parameters still come from TRL's `_iter_named_params`, which
gathers ZeRO-3 / FSDP shards and merges LoRA adapters (names as vLLM expects them), and the prefix cache
is reset afterwards, as TRL does. Server mode is untouched (TRL's client pushes over NCCL).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

RELOAD = "vllm-reload"   # vLLM's layerwise reload API (awarl's sync)
TRL = "trl"              # TRL's own per-parameter load_weights


def engine_worker(llm: Any) -> Any | None:
    """The in-process worker of a colocated `vllm.LLM` (TRL runs it with the external launcher, one
    worker in the training process), or None where the engine does not expose one."""
    executor = getattr(getattr(llm, "llm_engine", None), "model_executor", None)
    wrapper = getattr(executor, "driver_worker", None)
    return getattr(wrapper, "worker", None)


def sync_method(llm: Any) -> str:
    """Which sync a colocated engine gets: RELOAD where its worker can reload weights it is given, else TRL.

    The worker's `reload_weights(*args, **kwargs)` forwards to its model runner's, whose signature tells:
    older runners' `reload_weights()` re-read the checkpoint from disk, which would silently bring back the
    initial weights, so the `weights_iterator` argument itself is checked."""
    worker = engine_worker(llm)
    fn = getattr(getattr(worker, "model_runner", None), "reload_weights", None)
    if not callable(getattr(worker, "reload_weights", None)) or not callable(fn):
        return TRL
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return TRL
    return RELOAD if "weights_iterator" in params else TRL


def _detached(named: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """Copies of the tensors TRL yields. vLLM buffers a layer's tensors until all of them arrived, while TRL
    frees a gathered ZeRO-3 shard or unmerges LoRA right after yielding it: the buffer must own its data."""
    for name, tensor in named:
        yield name, tensor.detach().clone()


def reload_sync(vllm_generation: Any) -> None:
    """Push the policy's current weights into the colocated engine through vLLM's reload API."""
    llm = vllm_generation.llm
    worker = engine_worker(llm)
    worker.reload_weights(weights_iterator=_detached(vllm_generation._iter_named_params()))
    llm.reset_prefix_cache()  # cached prefixes were computed with the old weights


def install(trainer: Any) -> str | None:
    """Make `trainer.vllm_generation.sync_weights` use vLLM's reload API where the colocated engine has it.
    Returns the method in use (RELOAD / TRL), or None when the trainer has no colocated engine."""
    gen = getattr(trainer, "vllm_generation", None)
    if gen is None or getattr(gen, "mode", None) != "colocate" or getattr(gen, "llm", None) is None:
        return None
    if getattr(gen, "enable_sleep_mode", False):
        # Sleep mode (off in awarl) wakes the weights inside TRL's sync; keep TRL's path whole there.
        log.info("colocated vLLM with sleep mode: TRL's weight sync is kept")
        return TRL
    method = sync_method(gen.llm)
    if method == RELOAD:
        gen.sync_weights = lambda: reload_sync(gen)
    log.info("colocated vLLM weight sync: %s", "vLLM's reload_weights" if method == RELOAD
             else "TRL's load_weights per parameter")
    return method
