"""The one generation interface every backend implements, and the stop-string trimming they share.

`generate` takes token-id prompts and returns, per prompt, the generated ids, their sampling
log-probabilities and why generation ended:
- "stop":   a stop string was produced; ids end right after it (anything after is trimmed),
- "eos":    an end-of-sequence token was produced (it is kept, as the last id),
- "length": `max_new_tokens` ran out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Generation:
    token_ids: list[int]
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "length"   # "stop" | "eos" | "length"


class Backend(Protocol):
    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float,
                 top_p: float, stop_strings: Sequence[str], seed: int | None) -> list[Generation]:
        ...


def eos_ids(tokenizer: Any, generation_config: Any = None) -> set[int]:
    """Every id that ends a message: the tokenizer's eos and the model's generation_config eos list
    (Qwen instruct models stop on both `<|im_end|>` and `<|endoftext|>`)."""
    ids: set[int] = set()
    if getattr(tokenizer, "eos_token_id", None) is not None:
        ids.add(int(tokenizer.eos_token_id))
    eos = getattr(generation_config, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif isinstance(eos, (list, tuple)):
        ids.update(int(e) for e in eos)
    return ids


def first_stop(ids: Sequence[int], tokenizer: Any, stop_strings: Sequence[str]) -> int | None:
    """Length of the shortest prefix of `ids` whose decoded text contains a stop string, or None.

    Binary search over prefixes (decoded text only grows with the prefix), so it costs O(log n) decodes
    instead of one per token."""
    stops = [s for s in stop_strings if s]
    if not ids or not stops:
        return None

    def has_stop(k: int) -> bool:
        text = tokenizer.decode(list(ids[:k]), skip_special_tokens=False)
        return any(s in text for s in stops)

    if not has_stop(len(ids)):
        return None
    lo, hi = 1, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if has_stop(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def finish(ids: Sequence[int], logprobs: Sequence[float], tokenizer: Any, stop_strings: Sequence[str],
           eos: set[int]) -> Generation:
    """Cut raw generated ids at the first eos (kept) or right after the first stop string, whichever is
    first, and label the reason."""
    ids = list(ids)
    lps = [float(x) for x in logprobs]
    end_eos = next((i + 1 for i, t in enumerate(ids) if t in eos), None)
    scan = ids[:end_eos] if end_eos else ids
    end_stop = first_stop(scan, tokenizer, stop_strings)
    if end_stop is not None and (end_eos is None or end_stop <= end_eos):
        return Generation(ids[:end_stop], lps[:end_stop], "stop")
    if end_eos is not None:
        return Generation(ids[:end_eos], lps[:end_eos], "eos")
    return Generation(ids, lps, "length")
