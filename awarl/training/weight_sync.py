"""Policy -> colocated vLLM weight sync of awarl's own, installed on TRL's `VLLMGeneration`.

TRL 1.16 syncs a colocated engine by calling `model.load_weights([(name, tensor)])` once per parameter. vLLM
0.32 repacks weights after loading them (its kernels' layout) and reloads them through its *layerwise
reload* API instead; per-parameter `load_weights` on a repacked model fails with "'Parameter' object has
no attribute 'weight_loader'". So where the engine's worker has `reload_weights` (vLLM >= 0.32), the whole
model goes through it in one call, in checkpoint format (names and shapes as the policy has them); where
it does not (vLLM <= 0.31, TRL's supported range on GPU), TRL's own sync runs unchanged.

Only how tensors reach vLLM changes: the parameters still come from TRL's `_iter_named_params`, which
gathers ZeRO-3 / FSDP shards and merges LoRA adapters (names as vLLM expects them), and the prefix cache
is reset afterwards, as TRL does. Server mode is untouched (TRL's client pushes over NCCL). What this
reaches inside TRL and vLLM (the parameter iterator, the engine's worker, its reload API) goes through
awarl.upstream.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from awarl.upstream import trl as upstream_trl
from awarl.upstream import vllm as upstream_vllm

log = logging.getLogger(__name__)

RELOAD = "vllm-reload"   # vLLM's layerwise reload API (awarl's sync)
TRL = "trl"              # TRL's own per-parameter load_weights


def sync_method(llm: Any) -> str:
    """Which sync a colocated engine gets: RELOAD where its worker can reload weights it is given (vLLM's
    reload API, whose `weights_iterator` argument is checked: older runners re-read the checkpoint from
    disk), else TRL."""
    worker = upstream_vllm.engine_worker(llm)
    return RELOAD if worker is not None and upstream_vllm.reload_takes_weights(worker) else TRL


def _detached(named: Iterator[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """Copies of the tensors TRL yields. vLLM buffers a layer's tensors until all of them arrived, while TRL
    frees a gathered ZeRO-3 shard or unmerges LoRA right after yielding it: the buffer must own its data."""
    for name, tensor in named:
        yield name, tensor.detach().clone()


def reload_sync(vllm_generation: Any) -> None:
    """Push the policy's current weights into the colocated engine through vLLM's reload API."""
    llm = vllm_generation.llm
    upstream_vllm.reload_weights(upstream_vllm.engine_worker(llm),
                                 _detached(upstream_trl.named_params(vllm_generation)))
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
        upstream_trl.replace_sync_weights(gen, lambda: reload_sync(gen))
    log.info("colocated vLLM weight sync: %s", "vLLM's reload_weights" if method == RELOAD
             else "TRL's load_weights per parameter")
    return method
