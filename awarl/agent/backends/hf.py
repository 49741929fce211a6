"""transformers backend: continuous decoding over a slot KV cache (awarl.agent.backends.hf_slots), with
transformers' own `generate` as the fallback for models the slot cache does not fit.

Takes a model OBJECT so training can pass the trainer's live policy (no copy, no reload), or loads one
with `HFBackend.from_pretrained`. The log-prob of each sampled token is log softmax(logits / T) of the
raw logits (T = temperature; T = 0 uses T = 1), which is what TRL recomputes for the policy, so the
importance ratio starts at 1 (top-p truncation is not part of it, as in TRL).

The slot cache serves every decoder-only model whose layers all use full attention and whose forward takes
`position_ids` and `logits_to_keep` (Qwen2/2.5/3, Llama, Mistral without a sliding window, ...): for the
session the model runs awarl's own attention function (SDPA over the slot cache, registered with
transformers' AttentionInterface), its own one (sdpa, eager, flash-attention) restored after. Others
(sliding-window or linear-attention layers, encoder-decoders) use transformers' `generate`, one call per
turn. What is built per stop-string set (the stop test, transformers' StopStringCriteria) is built once.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from awarl.agent.backends.base import (
    BackendKind,
    Generation,
    Seed,
    Session,
    StopMatcher,
    eos_ids,
    finish,
    stream_seed,
)
from awarl.upstream import transformers as upstream_transformers

if TYPE_CHECKING:
    from awarl.config import GenerationConfig

log = logging.getLogger(__name__)


def resolve_dtype(dtype: str, device: str) -> Any:
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def model_positions(model: Any) -> int | None:
    """The positions a model's config says it was trained for (`max_position_embeddings` and the other names
    configs use), or None when it names none."""
    config = getattr(model, "config", None)
    for key in POSITION_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


class HFBackend:
    """`batch_size`: sequences decoded together (the slot count; default: all of a call's). `static_cache`:
    fixed-shape slot cache, decode steps over all slots, compiled on CUDA when `compile` (see hf_slots).
    `prefill_chunk_tokens`: the most rows x width one prefill forward takes (bounds its activations).
    `share_prompts`: new sequences with the same prompt (a GRPO group's) are prefilled once (off: each its
    own prefill, the same tokens at the same seeds; for measuring what sharing saves)."""

    def __init__(self, model: Any, tokenizer: Any, *, static_cache: bool = False, compile: bool = False,
                 batch_size: int | None = None, prefill_chunk_tokens: int = 8192, share_prompts: bool = True) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.static_cache = static_cache
        self.compile = compile
        self.batch_size = batch_size
        self.prefill_chunk_tokens = int(prefill_chunk_tokens)
        self.share_prompts = bool(share_prompts)
        self.eos = eos_ids(tokenizer, getattr(model, "generation_config", None))
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else next(iter(self.eos)))
        self._matchers: dict[tuple[str, ...], StopMatcher] = {}
        self._criteria: dict[tuple[str, ...], Any] = {}
        self._static: Any = None      # the static-mode cache, kept across calls
        self._compiled: Any = None    # (cache, compiled decode step)
        self._support: tuple[str | None] | None = None   # (session_support(),) once worked out
        # The model's context: the rollout keeps each trajectory (prompt + turns + blocks) inside it, as it keeps
        # a vLLM request inside max_model_len (past it a model with rotary positions generated on, unwarned).
        self.context_len: int | None = model_positions(model)

    @classmethod
    def for_model(cls, model: Any, tokenizer: Any, **kwargs: Any) -> HFBackend:
        """The backend of a live model object, one per (model, tokenizer, options): training builds its
        generator every step, and a static cache with its compiled decode step (and the stop test) must
        outlive the step to pay off."""
        key = (id(tokenizer), tuple(sorted(kwargs.items())))
        # Kept on the model itself, so they go with it (a weak mapping would be kept alive by its values).
        per_model = model.__dict__.setdefault("_awarl_hf_backends", {})
        backend = per_model.get(key)
        if backend is None or backend.tokenizer is not tokenizer:
            backend = per_model[key] = cls(model, tokenizer, **kwargs)
        return backend

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

    # ------------------------------------------------------------------------------ built once
    def stop_matcher(self, stop_strings: Sequence[str]) -> StopMatcher:
        key = tuple(stop_strings)
        if key not in self._matchers:
            head = self.model.get_output_embeddings()
            vocab = head.weight.shape[0] if head is not None else self.model.config.vocab_size
            self._matchers[key] = StopMatcher(self.tokenizer, key, vocab)
        return self._matchers[key]

    def slot_cache(self, slots: int, length: int) -> Any:
        from awarl.agent.backends.hf_slots import SlotCache, static_length

        if not self.static_cache:
            return SlotCache(slots, length)
        cache = self._static
        if cache is None or cache.slots != slots or cache.length < length:
            cache = self._static = SlotCache(slots, static_length(length), fixed=True)
        return cache

    def compiled_step(self, cache: Any, dtype: Any) -> Any:
        """The compiled static decode step of `cache` (CUDA with `compile` only; None: run it eagerly)."""
        if not (self.compile and cache.keys and cache.keys[0].device.type == "cuda"):
            return None
        if self._compiled is None or self._compiled[0] is not cache:
            from awarl.agent.backends.hf_slots import compiled_static_step

            self._compiled = (cache, compiled_static_step(self.model, cache, dtype))
        return self._compiled[1]

    # ------------------------------------------------------------------------------ sessions
    def session_support(self) -> str | None:
        """Why the slot cache cannot serve this model, or None when it can (worked out once: it depends on the
        model's architecture only, and `generate` asks on every turn of a model the cache cannot serve)."""
        if self._support is None:
            why = self._why_no_session()
            if why is not None:
                log.info("HFBackend: transformers generate per turn for %s: %s", type(self.model).__name__, why)
            self._support = (why,)
        return self._support[0]

    def _why_no_session(self) -> str | None:
        cfg = getattr(self.model, "config", None)
        if cfg is None or getattr(cfg, "is_encoder_decoder", False):
            return "not a decoder-only transformers model"
        kinds = set(getattr(cfg, "layer_types", None) or ["full_attention"])
        if kinds != {"full_attention"} or getattr(cfg, "use_sliding_window", False):
            return f"layer types {sorted(kinds)} (the slot cache is for full attention)"
        if not {"position_ids", "logits_to_keep"} <= upstream_transformers.forward_parameters(self.model):
            return "its forward takes no position_ids / logits_to_keep"
        return None

    def open_session(self, *, n_sequences: int, max_len: int, max_new_total: int, temperature: float,
                     top_p: float, stop_strings: Sequence[str], seed: Seed) -> Session | None:
        if self.session_support() is not None:
            return None
        from awarl.agent.backends.hf_slots import SlotSession

        slots = self.batch_size or n_sequences
        if not self.static_cache:   # a fixed slot count keeps static shapes; otherwise no idle slots
            slots = min(slots, n_sequences)
        return SlotSession(self, slots=max(1, slots), length=max_len, n_sequences=n_sequences,
                           max_new_total=max_new_total, temperature=temperature, top_p=top_p,
                           stop_strings=stop_strings, seed=seed)

    # ------------------------------------------------------------------------------ one turn per call
    def generate(self, prompts: list[list[int]], *, max_new_tokens: int, temperature: float,
                 top_p: float = 1.0, stop_strings: Sequence[str] = (), seed: Seed = None) -> list[Generation]:
        """One turn per prompt (the Backend protocol): prompt i samples from sequence_seed(seed, i)."""
        if not prompts:
            return []
        if any(not p for p in prompts):
            raise ValueError("HFBackend.generate: empty prompt")
        if max_new_tokens <= 0:  # no room: nothing generated ("length"), where a session still took one step
            return [Generation([], [], "length") for _ in prompts]
        session = self.open_session(n_sequences=len(prompts), max_len=max(map(len, prompts)) + max_new_tokens,
                                    max_new_total=max_new_tokens, temperature=temperature, top_p=top_p,
                                    stop_strings=stop_strings, seed=seed)
        if session is None:
            return self._generate_transformers(prompts, max_new_tokens, temperature, top_p, stop_strings, seed)
        out: dict[int, Generation] = {}
        waiting = list(range(len(prompts)))[::-1]
        try:
            while waiting or session.busy():
                while waiting and session.free_slots():
                    i = waiting.pop()
                    session.add(i, prompts[i], max_new_tokens=max_new_tokens)
                for end in session.step():
                    out[end.key] = Generation(end.token_ids, end.logprobs, end.finish_reason)
                    session.release(end.key)
        finally:
            session.close()
        return [out[i] for i in range(len(prompts))]

    def _generate_transformers(self, prompts: list[list[int]], max_new_tokens: int, temperature: float,
                               top_p: float, stop_strings: Sequence[str], seed: Seed) -> list[Generation]:
        """transformers' `generate`, left-padded batches of `batch_size`, for models without sessions. It draws
        from ONE random stream per call (per-sequence seeds are folded into it): samples depend on the batch."""
        if seed is not None and not isinstance(seed, int):
            folded = len(seed)
            for x in seed:
                folded = stream_seed(folded, int(x))
            seed = folded
        import torch

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

    def _stop_criteria(self, stop_strings: Sequence[str]) -> Any:
        # Built once per stop-string set: transformers' own cache of it misses (issue 14), 0.9 s a call at
        # a 152k vocabulary.
        key = tuple(stop_strings)
        if key not in self._criteria:
            from transformers import StoppingCriteriaList, StopStringCriteria

            self._criteria[key] = StoppingCriteriaList([StopStringCriteria(self.tokenizer, list(key))])
        return self._criteria[key]

    def _generate_batch(self, prompts: list[list[int]], device: Any, max_new_tokens: int, temperature: float,
                        top_p: float, stop_strings: Sequence[str]) -> list[Generation]:
        import torch

        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            attn[i, width - len(p):] = 1
        sample = temperature > 0
        kwargs: dict[str, Any] = dict(
            input_ids=input_ids.to(device), attention_mask=attn.to(device), max_new_tokens=max_new_tokens,
            do_sample=sample, pad_token_id=self.pad_id, eos_token_id=sorted(self.eos),
            output_logits=True, return_dict_in_generate=True,
        )
        # Plain sampling, as the slot-cache path and the recorded logprobs (raw logits / T) assume: the logits
        # processors a checkpoint's generation_config may switch on (repetition_penalty, no_repeat_ngram_size,
        # ...) are set back to transformers' neutral defaults, or this path would sample another distribution.
        kwargs.update(upstream_transformers.neutral_processors())
        if sample:
            kwargs.update(temperature=temperature, top_p=top_p, top_k=0)
        else:  # greedy: clear sampling knobs a checkpoint's generation_config may carry, to avoid warnings
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if stop_strings:
            kwargs.update(stopping_criteria=self._stop_criteria(stop_strings))
        if self.static_cache:
            kwargs.update(cache_implementation="static", disable_compile=not self.compile)
        res = self.model.generate(**kwargs)
        gen = res.sequences[:, width:]
        # One step's [batch x vocab] at a time: no stacked [batch x tokens x vocab] copy.
        lp = torch.zeros(gen.shape, dtype=torch.float32)
        for t, step_logits in enumerate(res.logits[: gen.shape[1]]):
            scaled = step_logits.float() / temperature if sample else step_logits.float()
            lp[:, t] = (scaled.gather(1, gen[:, t:t + 1]).squeeze(1) - torch.logsumexp(scaled, -1)).cpu()
        return [finish(gen[i].tolist(), lp[i].tolist(), self.tokenizer, stop_strings, self.eos)
                for i in range(len(prompts))]


def build(gen_cfg: GenerationConfig, model_path_or_obj: Any, tokenizer: Any, generation_config: Any = None) -> HFBackend:
    """The registered factory (awarl.choices.BACKENDS `hf`): a path / hub id is loaded, a model object is used
    as it is (one backend per live model, so training's per-step backend keeps its caches)."""
    opts: dict[str, Any] = dict(static_cache=gen_cfg.static_cache, compile=gen_cfg.static_cache,
                               batch_size=gen_cfg.batch_size)
    if isinstance(model_path_or_obj, str):
        backend = HFBackend.from_pretrained(model_path_or_obj, gen_cfg.dtype, **opts)
        # The caller's tokenizer wins (it may carry a chat template override).
        backend.tokenizer = tokenizer if tokenizer is not None else backend.tokenizer
        return backend
    return HFBackend.for_model(model_path_or_obj, tokenizer, **opts)


HF = BackendKind(build)  # awarl.choices.BACKENDS `hf`
