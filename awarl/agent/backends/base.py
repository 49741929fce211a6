"""The one generation interface every backend implements, and the stop-string trimming they share.

`generate` takes token-id prompts and returns, per prompt, the generated ids, their sampling
log-probabilities and why generation ended:
- "stop":   a stop string was produced; ids end right after it (anything after is trimmed),
- "eos":    an end-of-sequence token was produced (it is kept, as the last id),
- "length": `max_new_tokens` ran out.

A backend may also open a `Session` (continuous decoding: contexts kept between turns, sequences advancing
each at its own pace); the rollout engine then uses it instead of one `generate` per turn.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, overload

if TYPE_CHECKING:
    from awarl.config import GenerationConfig


@dataclass
class Generation:
    token_ids: list[int]
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "length"   # "stop" | "eos" | "length"


class Backend(Protocol):
    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float,
                 top_p: float, stop_strings: Sequence[str], seed: Seed) -> list[Generation]:
        ...


@dataclass(frozen=True)
class BackendKind:
    """A registered generation backend (awarl.choices.BACKENDS; docs/extending.md): its factory, called as
    `kind(gen_cfg, model_path_or_obj, tokenizer, generation_config=None)`, and what a run must know of it
    without comparing its name.

    `replays_script`: it replays the written turns of generation.script instead of running a model, so the
    script is the policy (its hash identifies the run; a dry run checks the file; training trains on its turns
    off-policy). `vllm_engine`: it starts a vLLM engine from the `generation:` options, which vLLM itself
    checks before any launch."""

    build: Callable[..., Backend]
    replays_script: bool = False
    vllm_engine: bool = False

    def __call__(self, gen_cfg: GenerationConfig, model_path_or_obj: Any, tokenizer: Any,
                 generation_config: Any = None) -> Backend:
        return self.build(gen_cfg, model_path_or_obj, tokenizer, generation_config=generation_config)


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


# ------------------------------------------------------------------------------ continuous decoding
@dataclass
class TurnEnd:
    """One model turn of a session's sequence that ended: its ids, their log-probs and why it ended (the
    reasons of `Generation`)."""

    key: int
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str


class Session(Protocol):
    """Many sequences decoded together, each at its own pace, with its context kept between turns (the
    transformers backend keeps its KV cache; a vLLM engine would keep its prefix cache). The rollout engine
    drives it: `add` starts a sequence (its prompt) or continues a paused one (the information block its
    search returned), `step` advances every running sequence by one forward and returns the turns that
    ended there (those sequences pause until `add` or `release`), `release` frees the sequence's slot.
    Sampling (temperature, top-p, each sequence's own random stream from `sequence_seed(seed, key)`) and the
    stop strings are fixed when the session is opened.

    A session whose `step` returns what finished within a time (a server's replies) may set
    `timed_steps = True`: its steps are not repeatable anyway, so the engine never waits for a search's
    passages there (generation.search_lag_steps is for sessions whose batches can repeat)."""

    def free_slots(self) -> int: ...

    def busy(self) -> bool: ...   # any sequence running (prefilling or decoding)

    def add(self, key: int, ids: Sequence[int], *, max_new_tokens: int) -> None: ...

    def step(self) -> list[TurnEnd]: ...

    def release(self, key: int) -> None: ...

    def close(self) -> dict[str, Any]: ...   # counters of the session (decode steps, slot use, ...)


class SessionBackend(Protocol):
    """A backend that can also decode continuously. `open_session` returns None where it cannot (the
    engine then runs one `generate` per turn)."""

    def open_session(self, *, n_sequences: int, max_len: int, max_new_total: int, temperature: float,
                     top_p: float, stop_strings: Sequence[str], seed: Seed) -> Session | None:
        ...


_MASK64 = (1 << 64) - 1

# What a backend call is seeded with: one seed for the call (sequence i's stream is `stream_seed(seed, i)`), one
# seed per sequence (its stream, whatever else is in the call: see `question_seed`), or None (unseeded).
Seed = int | Sequence[int] | None


@overload
def sequence_seed(seed: None, index: int) -> None: ...


@overload
def sequence_seed(seed: int | Sequence[int], index: int) -> int: ...


def sequence_seed(seed: Seed, index: int) -> int | None:
    """The seed of sequence `index`'s own random stream in a call seeded `seed`."""
    if seed is None:
        return None
    if isinstance(seed, int):
        return stream_seed(seed, index)
    return int(seed[index])


def question_seed(seed: int, dataset: str, qid: str, sample: int = 0) -> int:
    """The seed of sample `sample` of question (`dataset`, `qid`) in a run seeded `seed`: a function of the
    question alone, so a question resumed into a smaller batch, or listed in another order, is sampled as it
    would have been in an uninterrupted run, at any temperature."""
    key = "\x1f".join((str(int(seed)), str(dataset), str(qid), str(int(sample)))).encode("utf-8")
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") & ((1 << 63) - 1)


def stream_seed(seed: int, index: int) -> int:
    """The seed of sequence `index`'s own random stream in a call seeded `seed` (splitmix64 of both): a
    trajectory's samples depend on its run seed and its position, never on which others share its batch,
    and neighbouring (seed, index) pairs get unrelated streams."""
    x = (int(seed) * 0x9E3779B97F4A7C15 + int(index) + 1) & _MASK64
    for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
        x = ((x ^ (x >> shift)) * mult) & _MASK64
    return (x ^ (x >> 31)) & ((1 << 63) - 1)


class StopMatcher:
    """The stop-string test of one (tokenizer, stop strings), built once per backend: which token ids can
    complete a stop string (their text holds a stop string's last character, or an incomplete byte sequence
    that a later token may finish), and whether a turn's ids contain one. Only candidate tokens pay for a
    decode, and only of the turn's tail, which always covers a stop string just completed. It answers what
    `first_stop` answers, one token at a time: the first prefix whose text holds a stop string."""

    def __init__(self, tokenizer: Any, stop_strings: Sequence[str], vocab_size: int) -> None:
        self.tokenizer = tokenizer
        self.stops = [s for s in stop_strings if s]
        # A token holds at least one character (or byte) of a stop string it helps to form.
        self.tail = max([16] + [2 * len(s) for s in self.stops])
        n_tok = min(int(vocab_size), len(tokenizer))
        lasts = {s[-1] for s in self.stops}
        self.candidate = [False] * int(vocab_size)   # ids the tokenizer lacks never decode to text
        if lasts:
            single = [[i] for i in range(n_tok)]
            # The Rust tokenizer of a fast tokenizer decodes Qwen's 152k ids in a fraction of a second.
            rust = getattr(tokenizer, "backend_tokenizer", None)
            texts = (rust.decode_batch(single, skip_special_tokens=False)
                     if rust is not None and hasattr(rust, "decode_batch")
                     else tokenizer.batch_decode(single, skip_special_tokens=False))
            self.candidate[:n_tok] = [any(c in t for c in lasts) or "\ufffd" in t for t in texts]

    def ends(self, ids: Sequence[int]) -> bool:
        """True when the text of `ids` (a turn so far, whose last id is a candidate) holds a stop string."""
        text = self.tokenizer.decode(list(ids[-self.tail:]), skip_special_tokens=False)
        return any(s in text for s in self.stops)
