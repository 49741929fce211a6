"""transformers backend: left-padded batched `generate`, sampling log-probs, stop strings.

Takes a model OBJECT so training can pass the trainer's live policy (no copy, no reload), or loads one
with `HFBackend.from_pretrained`. The log-prob of each sampled token is log softmax(logits / T) of the
raw logits (T = temperature; T = 0 uses T = 1), which is what TRL recomputes for the policy, so the
importance ratio starts at 1 (top-p truncation is not part of it, as in TRL).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from awarl.agent.backends.base import Generation, eos_ids, finish

log = logging.getLogger(__name__)


def resolve_dtype(dtype: str, device: str) -> Any:
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


class HFBackend:
    def __init__(self, model: Any, tokenizer: Any, *, static_cache: bool = False, compile: bool = False,
                 batch_size: int | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.static_cache = static_cache
        # transformers compiles the forward itself when the cache is static and the device is a GPU.
        self.compile = compile
        self.batch_size = batch_size
        self.eos = eos_ids(tokenizer, getattr(model, "generation_config", None))
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else next(iter(self.eos)))

    @classmethod
    def from_pretrained(cls, path_or_hub_id: str, dtype: str = "auto", device: str | None = None,
                        **kwargs: Any) -> HFBackend:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        tok = AutoTokenizer.from_pretrained(path_or_hub_id)
        model = AutoModelForCausalLM.from_pretrained(path_or_hub_id, dtype=resolve_dtype(dtype, device))
        model.to(device).eval()
        return cls(model, tok, **kwargs)

    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float,
                 top_p: float = 1.0, stop_strings: Sequence[str] = (), seed: int | None = None) -> list[Generation]:
        import torch

        if not prompts:
            return []
        step = self.batch_size or len(prompts)
        device = next(self.model.parameters()).device
        devices = [device] if device.type == "cuda" else []
        out: list[Generation] = []
        was_training = self.model.training
        self.model.eval()
        try:
            # fork_rng: seeding must not disturb the caller's (e.g. the trainer's) random stream.
            with torch.random.fork_rng(devices=devices, enabled=seed is not None), torch.no_grad():
                if seed is not None:
                    torch.manual_seed(seed)
                for start in range(0, len(prompts), step):
                    out.extend(self._generate_batch(prompts[start:start + step], device, max_new_tokens,
                                                    temperature, top_p, stop_strings))
        finally:
            self.model.train(was_training)
        return out

    def _generate_batch(self, prompts: list[list[int]], device: Any, max_new_tokens: int, temperature: float,
                        top_p: float, stop_strings: Sequence[str]) -> list[Generation]:
        import torch

        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            if p:
                input_ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
                attn[i, width - len(p):] = 1
        sample = temperature > 0
        kwargs: dict[str, Any] = dict(
            input_ids=input_ids.to(device), attention_mask=attn.to(device), max_new_tokens=max_new_tokens,
            do_sample=sample, pad_token_id=self.pad_id, eos_token_id=sorted(self.eos),
            output_logits=True, return_dict_in_generate=True,
        )
        if sample:
            kwargs.update(temperature=temperature, top_p=top_p, top_k=0)
        else:  # greedy: clear sampling knobs a checkpoint's generation_config may carry, to avoid warnings
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if stop_strings:
            kwargs.update(stop_strings=list(stop_strings), tokenizer=self.tokenizer)
        if self.static_cache:
            kwargs.update(cache_implementation="static", disable_compile=not self.compile)
        res = self.model.generate(**kwargs)
        gen = res.sequences[:, width:]
        if gen.shape[1] == 0:
            return [Generation([], [], "length") for _ in prompts]
        logits = torch.stack(res.logits, dim=1).float()          # [B, T, V] raw logits
        if sample:
            logits = logits / temperature
        lp = torch.log_softmax(logits, dim=-1).gather(-1, gen[:, : logits.shape[1]].unsqueeze(-1)).squeeze(-1)
        out = []
        for i in range(len(prompts)):
            out.append(finish(gen[i].tolist(), lp[i].tolist(), self.tokenizer, stop_strings, self.eos))
        return out
