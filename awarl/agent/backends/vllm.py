"""vLLM backend (offline `vllm.LLM`), mirroring the HF one. vLLM is a GPU extra: imported only here.

Accepts an existing `LLM` object so TRL's colocated engine can be reused for the multi-turn rollout.
Each prompt gets its own seed (seed + index): one shared seed would make every completion of a GRPO
group identical. Log-probs are those vLLM reports for the sampled token (`logprobs=0`); for TRL's
importance-sampling correction create the engine with `logprobs_mode="processed_logprobs"` if the
temperature-scaled values are wanted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from awarl.agent.backends.base import Generation, eos_ids, finish

INSTALL_HINT = ("the vLLM backend needs vLLM: `pip install 'awarl[vllm]'` (GPU; vllm<=0.31, as trl's "
                "[vllm] extra), or use generation.backend=hf")


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise ImportError(f"{INSTALL_HINT} ({e})") from None
    return vllm


class VLLMBackend:
    def __init__(self, llm: Any, tokenizer: Any, *, sampling_params_cls: Any = None) -> None:
        self.llm = llm
        self.tokenizer = tokenizer
        # Injected in tests; normally vllm.SamplingParams.
        self._params_cls = sampling_params_cls
        self.eos = eos_ids(tokenizer)

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
        return [cls(n=1, max_tokens=max_new_tokens, temperature=temperature, top_p=top_p if temperature > 0 else 1.0,
                    stop=list(stop_strings) or None, include_stop_str_in_output=True, logprobs=0,
                    skip_special_tokens=False, seed=None if seed is None else seed + i)
                for i in range(n_prompts)]

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
            lps = [float(step[t].logprob) if step and t in step else 0.0
                   for step, t in zip(comp.logprobs or [None] * len(ids), ids, strict=False)]
            # vLLM stops on the token completing the stop string; `finish` trims and labels uniformly.
            g = finish(ids, lps, self.tokenizer, stop_strings, self.eos)
            if g.finish_reason == "length" and getattr(comp, "finish_reason", None) == "stop" and \
                    not isinstance(getattr(comp, "stop_reason", None), str):
                # vLLM ended on an eos it takes from the model's generation_config (Qwen instruct: also
                # <|endoftext|>), which the tokenizer's eos may not list: the message ended, it was not cut.
                g = Generation(g.token_ids, g.logprobs, "eos")
            result.append(g)
        return result
