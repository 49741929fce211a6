"""TRL internals awarl relies on (checked against trl 1.16.0).

- `named_params`: `VLLMGeneration._iter_named_params()`, the policy's parameters gathered (ZeRO-3, FSDP) and
  LoRA-merged under the names vLLM expects: awarl's own weight sync feeds them to vLLM's reload API.
- `colocated_llm_options`: TRL builds its colocated engine by calling the `LLM` name of
  `trl.generation.vllm_generation`; awarl wraps that name while the trainer is built, to pass the
  `generation.*` options GRPOConfig has no field for.
- `replace_sync_weights`: TRL syncs the colocated engine through `trainer.vllm_generation.sync_weights()`;
  awarl replaces that method on the instance where vLLM needs its reload API.
- `metric_logger`: `GRPOTrainer._log_metric(name, value)`, the trainer's per-step scalar log (what it hands
  reward functions as `log_metric`), used by the rollout function.
- `fsdp_summon`: `trainer._dist.summon_full_params`, the full FSDP parameters for a whole multi-turn rollout.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from awarl.upstream import changed, shim

CHECKED = "1.16.0"
_VG = "trl.generation.vllm_generation"


def _source(obj: Any) -> str:
    return inspect.getsource(obj)


# ------------------------------------------------------------------------------------------ named_params
def named_params(vllm_generation: Any) -> Iterator[tuple[str, Any]]:
    """(name, tensor) of every policy parameter, as TRL's own colocated sync yields them."""
    fn = getattr(vllm_generation, "_iter_named_params", None)
    if not callable(fn):
        raise changed("trl.named_params", f"{type(vllm_generation).__name__} has no _iter_named_params")
    return fn()


@shim("trl.named_params", dist="trl", checked=CHECKED, reaches=f"{_VG}.VLLMGeneration._iter_named_params()")
def _named_params_shape() -> str | None:
    from trl.generation.vllm_generation import VLLMGeneration

    fn = getattr(VLLMGeneration, "_iter_named_params", None)
    if fn is None:
        return "VLLMGeneration has no _iter_named_params"
    if not inspect.isgeneratorfunction(fn):
        return "VLLMGeneration._iter_named_params is no longer a generator"
    params = list(inspect.signature(fn).parameters)
    return None if params == ["self"] else f"VLLMGeneration._iter_named_params takes {params}, not (self)"


# ------------------------------------------------------------------------------------------ colocated LLM
@contextlib.contextmanager
def colocated_llm_options(options: dict[str, Any]) -> Iterator[bool]:
    """While TRL builds its colocated `vllm.LLM`, add `options` to the arguments it passes (never overriding
    one TRL sets). Yields False (and changes nothing) where the module has no `LLM` name to wrap."""
    import trl.generation.vllm_generation as tvg

    original = getattr(tvg, "LLM", None)
    if original is None:
        yield False
        return

    def llm_with_options(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **{**options, **kwargs})

    tvg.LLM = llm_with_options
    try:
        yield True
    finally:
        tvg.LLM = original


@shim("trl.colocated_llm", dist="trl", checked=CHECKED,
      reaches=f"{_VG}.LLM (vllm.LLM, looked up by VLLMGeneration when it builds the colocated engine)")
def _colocated_llm_shape() -> str | None:
    import importlib.util

    import trl.generation.vllm_generation as tvg

    if "from vllm import LLM" not in _source(tvg):
        return f"{_VG} no longer imports vllm.LLM by that name"
    if "LLM(" not in _source(tvg.VLLMGeneration):
        return "VLLMGeneration no longer builds its engine by calling the module's LLM"
    if importlib.util.find_spec("vllm") is not None:
        import vllm

        if getattr(tvg, "LLM", None) is not vllm.LLM:
            return f"{_VG}.LLM is not vllm.LLM"
    return None


# ------------------------------------------------------------------------------------------ sync_weights
def replace_sync_weights(vllm_generation: Any, sync: Callable[[], None]) -> None:
    """Make TRL's calls of `vllm_generation.sync_weights()` run `sync` instead."""
    vllm_generation.sync_weights = sync


@shim("trl.sync_weights", dist="trl", checked=CHECKED,
      reaches="GRPOTrainer calls self.vllm_generation.sync_weights(); VLLMGeneration.mode / .llm / "
              ".enable_sleep_mode")
def _sync_weights_shape() -> str | None:
    from trl import GRPOTrainer
    from trl.generation.vllm_generation import VLLMGeneration

    if "self.vllm_generation.sync_weights()" not in _source(GRPOTrainer):
        return "GRPOTrainer no longer syncs through self.vllm_generation.sync_weights()"
    if list(inspect.signature(VLLMGeneration.sync_weights).parameters) != ["self"]:
        return "VLLMGeneration.sync_weights takes arguments"
    body = _source(VLLMGeneration)
    missing = [a for a in ("mode", "llm", "enable_sleep_mode") if f"self.{a} =" not in body]
    return f"VLLMGeneration no longer sets {missing}" if missing else None


# ------------------------------------------------------------------------------------------ log_metric
def metric_logger(trainer: Any) -> Callable[[str, float], None] | None:
    """The trainer's `log_metric(name, value)` (averaged per logging step), or None where it has none."""
    return getattr(trainer, "_log_metric", None)


@shim("trl.log_metric", dist="trl", checked=CHECKED, reaches="GRPOTrainer._log_metric(name, value)")
def _log_metric_shape() -> str | None:
    from trl import GRPOTrainer

    fn = getattr(GRPOTrainer, "_log_metric", None)
    if fn is None:
        return "GRPOTrainer has no _log_metric"
    params = list(inspect.signature(fn).parameters)
    return None if params == ["self", "name", "value"] else f"GRPOTrainer._log_metric takes {params}"


# ------------------------------------------------------------------------------------------ FSDP
def fsdp_summon(trainer: Any) -> Callable[..., Any] | None:
    """`summon_full_params(module, recurse=...)` of the trainer's distributed backend (a no-op context
    without FSDP), or None where the trainer has none."""
    return getattr(getattr(trainer, "_dist", None), "summon_full_params", None)


@shim("trl.fsdp_summon", dist="trl", checked=CHECKED,
      reaches="GRPOTrainer._dist (trl.distributed.DistributedBackend).summon_full_params(module, recurse=)")
def _fsdp_summon_shape() -> str | None:
    from trl import GRPOTrainer
    from trl.distributed import DistributedBackend

    if "self._dist = DistributedBackend(" not in _source(GRPOTrainer.__init__):
        return "GRPOTrainer no longer keeps a DistributedBackend as self._dist"
    fn = getattr(DistributedBackend, "summon_full_params", None)
    if fn is None:
        return "DistributedBackend has no summon_full_params"
    params = inspect.signature(fn).parameters
    if "module" not in params or not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return f"DistributedBackend.summon_full_params takes {list(params)}, not (module, **kwargs)"
    return None
