"""Continuous decoding over a transformers causal LM: a slot KV cache and the session that schedules it.

Each of `slots` rows of the cache holds one sequence, the key/value of its token at position p stored at
index p, so a sequence's context stays in place between turns: a continued sequence prefills only what the
cache has not seen (its last sampled token and the information block). Every forward passes per-row
positions and a 4-D mask (a query sees the keys at indices <= its position), so rows of different lengths
never pad each other, and a row that finishes frees its slot for the next waiting sequence.

Two kinds of forward:
- a decode step runs the rows that are decoding, kept packed at the front of the cache (a row that joins
  or stops swaps places with another, one row of keys/values), so the step reads a view of the cache;
- a prefill runs rows with several new tokens, right-aligned: pads come first and write their keys to a
  scratch column that is never read, so every row's last real token is the last position and
  `logits_to_keep=1` reads one logits row per sequence. Nothing keeps [batch x tokens x vocab] logits.
  New sequences with the same prompt (the completions of a GRPO group) are prefilled once: the others get
  a copy of its keys and values and its logits row, then sample from their own streams.

Sampling: greedy at temperature 0; otherwise inverse-CDF sampling of softmax(logits / T), top-p truncated as
transformers' TopPLogitsWarper does, with uniforms from the sequence's own stream (`sequence_seed(seed, key)`)
indexed by its model-token count, so a sequence's samples do not depend on which others share its forwards.
The log-prob kept is log softmax(logits / T) of the sampled token (T = 0 uses T = 1), what TRL recomputes.
Only temperature and top-p shape sampling: a checkpoint's generation_config processors (repetition
penalty, top-k) are not applied, as in TRL's and vLLM's sampling parameters.

Static mode (`generation.static_cache`): the cache has a fixed shape (slots x length rounded up to 256,
kept by the backend across calls) and every decode step runs all slots over the whole length, so shapes
never change; on CUDA with `compile` the decode step is compiled once (torch.compile, CUDA graphs). On CPU
static mode only fixes the shapes (slower there): it is meant for GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import torch

from awarl.agent.backends.base import Seed, TurnEnd, sequence_seed
from awarl.upstream import torch as upstream_torch
from awarl.upstream import transformers as upstream_transformers

ATTENTION = "awarl_slots"

# Static-mode cache lengths are rounded up to this, so calls with slightly longer prompts reuse one cache
# (and one compiled decode step).
_LENGTH_QUANTUM = 256


class SlotCache(upstream_transformers.cache_base()):  # type: ignore[misc]  # transformers' Cache, checked there
    """The KV cache of `slots` sequences of up to `length` positions: per layer [slots, kv_heads, capacity + 1,
    head_dim] keys and values, allocated at the first forward (when the model's shapes are known) and grown
    (doubling) as sequences get longer; `fixed` allocates the whole length at once (static shapes). Index
    `capacity` is the scratch column pads write to. Before each forward the session sets which rows it
    covers and where each new key goes."""

    def __init__(self, slots: int, length: int, *, fixed: bool = False) -> None:
        upstream_transformers.init_cache(self)
        self.slots, self.length, self.fixed = slots, length, fixed
        self.capacity = length if fixed else 0
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.rows: torch.Tensor | None = None   # the forward's rows; None: the first `n` slots (a view)
        self.n = 0
        self.write: torch.Tensor | None = None  # [n, q] cache index of each new key
        self.view = 0                           # keys read: indices [0, view)
        self._front: torch.Tensor | None = None

    def reserve(self, needed: int) -> int:
        """Make room for `needed` positions; returns the scratch index (the capacity)."""
        if needed > self.capacity:
            new = min(self.length, max(needed, 2 * self.capacity, 64))
            for layer, t in enumerate(self.keys):
                self.keys[layer] = self._grown(t, new)
                self.values[layer] = self._grown(self.values[layer], new)
            self.capacity = new
        return self.capacity

    def _grown(self, t: torch.Tensor, capacity: int) -> torch.Tensor:
        out = t.new_zeros((t.shape[0], t.shape[1], capacity + 1, t.shape[3]))
        out[:, :, : self.capacity] = t[:, :, : self.capacity]
        return out

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if layer_idx == len(self.keys):
            width = self.capacity + 1
            self.keys.append(key_states.new_zeros((self.slots, key_states.shape[1], width, key_states.shape[3])))
            self.values.append(value_states.new_zeros((self.slots, value_states.shape[1], width,
                                                       value_states.shape[3])))
        front = self._front
        if front is None:  # at the first layer's first update
            front = self._front = torch.arange(self.slots, device=key_states.device)
        keys, values = self.keys[layer_idx], self.values[layer_idx]
        rows = front[: self.n] if self.rows is None else self.rows
        keys[rows[:, None], :, self.write] = key_states.transpose(1, 2)
        values[rows[:, None], :, self.write] = value_states.transpose(1, 2)
        if self.rows is None:
            return keys[: self.n, :, : self.view], values[: self.n, :, : self.view]
        return keys[self.rows, :, : self.view], values[self.rows, :, : self.view]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.view

    def copy(self, src: int, dst: int, used: int) -> None:
        """Copy the first `used` positions of slot src into slot dst (every layer)."""
        if src == dst or used <= 0:
            return
        for t in (*self.keys, *self.values):
            t[dst, :, :used] = t[src, :, :used]

    def swap(self, a: int, b: int, used: int) -> None:
        """Exchange the first `used` positions of slots a and b (every layer)."""
        if a == b or used <= 0:
            return
        for t in (*self.keys, *self.values):
            t[[a, b], :, :used] = t[[b, a], :, :used]


def static_length(length: int) -> int:
    return -(-length // _LENGTH_QUANTUM) * _LENGTH_QUANTUM


def slot_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                   **kwargs: Any) -> tuple[torch.Tensor, None]:
    """SDPA over the slot cache: the session's additive mask, grouped-query heads read in place (transformers'
    sdpa path copies the keys once per query group whenever a mask is given: most of a decode step)."""
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=0.0, scale=scaling,
        enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous(), None


upstream_transformers.register_attention(ATTENTION, slot_attention)


def run_forward(model: Any, cache: SlotCache, ids: torch.Tensor, pos: torch.Tensor, write: torch.Tensor,
                rows: torch.Tensor | None, n: int, view: int, dtype: torch.dtype,
                cache_arg: str = "past_key_values") -> torch.Tensor:
    """Logits at the last position of each row: the new tokens `ids` at positions `pos`, their keys
    written at cache index `write`, reading keys [0, view) of the cache rows `rows` (None: the first n).
    `cache_arg`: the name the model's forward takes the cache under (awarl.upstream.transformers)."""
    keys = torch.arange(view, device=ids.device)
    hidden = keys[None, None, :] > pos[:, :, None]   # [n, q, view]: a query sees the keys up to its position
    mask = torch.zeros(hidden.shape, dtype=dtype, device=ids.device).masked_fill_(hidden, float("-inf"))[:, None]
    cache.rows, cache.n, cache.write, cache.view = rows, n, write, view
    with torch.no_grad():
        out = model(input_ids=ids, position_ids=pos, attention_mask=mask, use_cache=True, logits_to_keep=1,
                    **{cache_arg: cache})
    return out.logits[:, -1]


def compiled_static_step(model: Any, cache: SlotCache, dtype: torch.dtype) -> Any:
    """The static-mode decode step (all slots, the whole length) compiled once per cache: fixed shapes, the
    cache tensors marked static so CUDA graphs can replay over them."""
    for t in (*cache.keys, *cache.values):
        upstream_torch.mark_static_address(t)
    cache_arg = upstream_transformers.cache_argument(model)

    def step(ids: torch.Tensor, pos: torch.Tensor, write: torch.Tensor) -> torch.Tensor:
        return run_forward(model, cache, ids, pos, write, None, cache.slots, cache.capacity, dtype, cache_arg)

    return torch.compile(step, mode="reduce-overhead", dynamic=False)


@dataclass
class _Seq:
    key: int
    pending: list[int]                  # ids not yet in the cache; the last is the next input
    cached: int = 0                     # ids in the cache, at indices [0, cached)
    budget: int = 0                     # max new tokens of the current turn
    produced: int = 0                   # model tokens sampled so far (the index into its uniforms)
    running: bool = False               # prefilling or decoding; False: paused after a turn
    turn_ids: list[int] = field(default_factory=list)
    turn_lps: list[float] = field(default_factory=list)


@dataclass
class _Stats:
    decode_steps: int = 0
    decode_rows: int = 0                # sum over decode steps of the rows that decoded
    prefill_forwards: int = 0
    prefill_tokens: int = 0             # real tokens prefilled
    prefill_padded: int = 0             # rows x width of the prefill forwards
    shared_prompt_tokens: int = 0       # prompt tokens copied from a twin's prefill instead of computed
    model_tokens: int = 0


def inverse_cdf_sample(probs: torch.Tensor, u: torch.Tensor, top_p: float) -> torch.Tensor:
    """Per row, the token whose cumulative probability interval holds u (in [0, 1)); with top_p < 1 only
    the tokens transformers' TopPLogitsWarper keeps (those whose more probable tokens hold less than top_p
    of the mass; the most probable one always) share the mass."""
    if top_p >= 1.0:
        order = None
        cdf = probs.cumsum(-1)
    else:
        probs, order = probs.sort(-1, descending=True)
        before = probs.cumsum(-1) - probs
        cdf = torch.where(before < top_p, probs, torch.zeros_like(probs)).cumsum(-1)
    idx = torch.searchsorted(cdf, u[:, None] * cdf[:, -1:], right=True).clamp_(max=probs.shape[-1] - 1)
    return (idx if order is None else order.gather(1, idx)).squeeze(1)


class SlotSession:
    """A `Session` (awarl.agent.backends.base) over an HFBackend's model: up to `slots` sequences in the KV
    cache at once; keys are 0 .. n_sequences - 1."""

    def __init__(self, backend: Any, *, slots: int, length: int, n_sequences: int, max_new_total: int,
                 temperature: float, top_p: float, stop_strings: Any, seed: Seed) -> None:
        self.backend = backend
        self.model = backend.model
        self.device = next(self.model.parameters()).device
        self.static = bool(backend.static_cache)
        self.cache = backend.slot_cache(slots, length)
        self.slots, self.length = self.cache.slots, self.cache.length
        self.matcher = backend.stop_matcher(stop_strings)
        self.eos, self.pad_id = backend.eos, backend.pad_id
        self.prefill_tokens = backend.prefill_chunk_tokens
        self.share_prompts = bool(getattr(backend, "share_prompts", True))
        self.temperature, self.top_p = float(temperature), float(top_p)
        self.seqs: list[_Seq | None] = [None] * self.slots
        self.where: dict[int, int] = {}
        self.n_dec = 0                   # slots [0, n_dec) hold the decoding sequences
        self.stats = _Stats()
        # Each sequence's uniforms, drawn from its own generator when it is added (sampling only).
        self.seed = seed if seed is not None else int(torch.randint(0, 2**62, (1,)).item())
        self.uniforms = (torch.zeros((n_sequences, max_new_total), device=self.device)
                         if self.temperature > 0 else None)
        # The session's attention reads its masks and the slot cache; the model's own one comes back at close.
        self._attention = upstream_transformers.attention_implementation(self.model)
        upstream_transformers.set_attention_implementation(self.model, ATTENTION)
        self._dtype = next(self.model.parameters()).dtype
        self._cache_arg = upstream_transformers.cache_argument(self.model)
        self._was_training = self.model.training
        self.model.eval()

    # ---------------------------------------------------------------------------------------- protocol
    def free_slots(self) -> int:
        return sum(s is None for s in self.seqs)

    def busy(self) -> bool:
        return any(s is not None and s.running for s in self.seqs)

    def _held(self, key: int) -> _Seq:
        """The sequence `key` (in a slot: `where` only names held slots)."""
        return cast(_Seq, self.seqs[self.where[key]])

    def add(self, key: int, ids: Any, *, max_new_tokens: int) -> None:
        if key in self.where:
            seq = self._held(key)
            if seq.running:
                raise RuntimeError(f"session: sequence {key} is still running")
            seq.pending.extend(int(t) for t in ids)
        else:
            slot = self.seqs.index(None)   # free slots all lie past the decoding ones
            seq = self.seqs[slot] = _Seq(key, [int(t) for t in ids])
            self.where[key] = slot
            self._draw_uniforms(key)
        if not seq.pending:
            raise ValueError(f"session: sequence {key} has no tokens to continue from")
        if seq.cached + len(seq.pending) + max_new_tokens - 1 > self.length:
            raise RuntimeError(f"session: sequence {key} would need {seq.cached + len(seq.pending) + max_new_tokens} "
                               f"positions; the cache holds {self.length}")
        seq.budget, seq.running, seq.turn_ids, seq.turn_lps = int(max_new_tokens), True, [], []
        if len(seq.pending) == 1:
            self._join(key)

    def release(self, key: int) -> None:
        if self.where[key] < self.n_dec:
            self._leave(key)
        self.seqs[self.where.pop(key)] = None

    def step(self) -> list[TurnEnd]:
        """Prefill every sequence with several new tokens, then one decode step of the decoding ones."""
        ends: list[TurnEnd] = []
        waiting = [s for s in self.seqs[self.n_dec:] if s is not None and s.running and len(s.pending) > 1]
        if waiting:
            ends += self._prefill(waiting)
        if self.n_dec:
            ends += self._decode()
        return ends

    def close(self) -> dict[str, Any]:
        self.model.train(self._was_training)
        upstream_transformers.set_attention_implementation(self.model, self._attention)
        st = self.stats
        return {"slots": self.slots, "cache_length": self.cache.capacity, "static": self.static,
                "decode_steps": st.decode_steps, "prefill_forwards": st.prefill_forwards,
                "prefill_tokens": st.prefill_tokens, "prefill_padded_tokens": st.prefill_padded,
                "shared_prompt_tokens": st.shared_prompt_tokens,
                "model_tokens": st.model_tokens,
                "slot_use": st.decode_rows / (st.decode_steps * self.slots) if st.decode_steps else 0.0}

    # ---------------------------------------------------------------------------------------- internals
    def _draw_uniforms(self, key: int) -> None:
        if self.uniforms is not None:
            gen = torch.Generator().manual_seed(sequence_seed(self.seed, key))
            self.uniforms[key] = torch.rand(self.uniforms.shape[1], generator=gen).to(self.device)

    def _swap(self, a: int, b: int) -> None:
        self.cache.swap(a, b, max(s.cached if s is not None else 0 for s in (self.seqs[a], self.seqs[b])))
        self.seqs[a], self.seqs[b] = self.seqs[b], self.seqs[a]
        for slot in (a, b):
            if (seq := self.seqs[slot]) is not None:
                self.where[seq.key] = slot

    def _join(self, key: int) -> None:
        """Move a sequence into the decoding block at the front."""
        self._swap(self.where[key], self.n_dec)
        self.n_dec += 1

    def _leave(self, key: int) -> None:
        self.n_dec -= 1
        self._swap(self.where[key], self.n_dec)

    def _prefill(self, waiting: list[_Seq]) -> list[TurnEnd]:
        """Prefill in forwards of at most `prefill_tokens` rows x width (sorted by length, so rows of a
        forward pad little); each row's last position samples the first token of its turn. New sequences with
        the same prompt (a GRPO group's completions) are prefilled once: the others get a copy of its keys
        and values and sample from its logits, each from its own stream."""
        ends: list[TurnEnd] = []
        twins: dict[int, list[_Seq]] = {}
        first: dict[tuple[int, ...], _Seq] = {}
        computed = []
        for s in sorted(waiting, key=lambda s: len(s.pending)):
            lead = first.setdefault(tuple(s.pending), s) if s.cached == 0 and self.share_prompts else s
            if lead is s:
                computed.append(s)
            else:
                twins.setdefault(lead.key, []).append(s)
        while computed:
            n = 1
            while n < len(computed) and (n + 1) * len(computed[n].pending) <= self.prefill_tokens:
                n += 1
            chunk, computed = computed[:n], computed[n:]
            ends += self._prefill_chunk(chunk, twins)
        return ends

    def _prefill_chunk(self, chunk: list[_Seq], twins: dict[int, list[_Seq]]) -> list[TurnEnd]:
        width = max(len(s.pending) for s in chunk)
        view = max(s.cached + len(s.pending) for s in chunk)
        scratch = self.cache.reserve(view)
        ids, pos, write = [], [], []
        for s in chunk:
            pad = width - len(s.pending)
            real = list(range(s.cached, s.cached + len(s.pending)))
            ids.append([self.pad_id] * pad + s.pending)
            pos.append([0] * pad + real)
            write.append([scratch] * pad + real)   # pads write to the scratch column, never read
        rows = torch.tensor([self.where[s.key] for s in chunk], device=self.device)
        logits = self._forward(self._tensor(ids), self._tensor(pos), self._tensor(write), rows, view)
        st = self.stats
        st.prefill_forwards += 1
        st.prefill_tokens += sum(len(s.pending) for s in chunk)
        st.prefill_padded += width * len(chunk)
        for s in chunk:
            s.cached += len(s.pending)
        if any(s.key in twins for s in chunk):
            chunk, logits = self._copy_twins(chunk, twins, logits)
        ends = self._advance(chunk, logits)
        for s in chunk:
            if s.running:
                self._join(s.key)
        return ends

    def _copy_twins(self, chunk: list[_Seq], twins: dict[int, list[_Seq]],
                    logits: torch.Tensor) -> tuple[list[_Seq], torch.Tensor]:
        """The chunk with each prefilled prompt's twins after it (their cache rows copied from it), and the
        logits row of each."""
        rows, members = [], []
        for i, s in enumerate(chunk):
            for m in (s, *twins.get(s.key, ())):
                if m is not s:
                    self.cache.copy(self.where[s.key], self.where[m.key], s.cached)
                    m.cached = s.cached
                    self.stats.shared_prompt_tokens += s.cached
                rows.append(i)
                members.append(m)
        return members, logits[torch.tensor(rows, device=logits.device)]

    def _decode(self) -> list[TurnEnd]:
        active = cast(list[_Seq], self.seqs[: self.n_dec])   # slots [0, n_dec) always hold a sequence
        n = self.slots if self.static else self.n_dec
        view = self.length if self.static else max(s.cached for s in active) + 1
        scratch = self.cache.reserve(view)
        ids = [[s.pending[0]] for s in active] + [[self.pad_id]] * (n - self.n_dec)
        pos = [[s.cached] for s in active] + [[0]] * (n - self.n_dec)
        write = [[s.cached] for s in active] + [[scratch]] * (n - self.n_dec)
        ids_t, pos_t, write_t = self._tensor(ids), self._tensor(pos), self._tensor(write)
        compiled = self.backend.compiled_step(self.cache, self._dtype) if self.static else None
        if compiled is not None:
            logits = compiled(ids_t, pos_t, write_t)
        else:
            logits = self._forward(ids_t, pos_t, write_t, None, view, n)
        self.stats.decode_steps += 1
        self.stats.decode_rows += self.n_dec
        for s in active:
            s.cached += 1
        ends = self._advance(active, logits[: self.n_dec])
        for e in ends:
            self._leave(e.key)
        return ends

    def _tensor(self, rows: list[list[int]]) -> torch.Tensor:
        return torch.tensor(rows, dtype=torch.long, device=self.device)

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, write: torch.Tensor, rows: torch.Tensor | None,
                 view: int, n: int | None = None) -> torch.Tensor:
        return run_forward(self.model, self.cache, ids, pos, write, rows, ids.shape[0] if n is None else n, view,
                           self._dtype, self._cache_arg)

    def _advance(self, seqs: list[_Seq], logits: torch.Tensor) -> list[TurnEnd]:
        """Sample each row's next token, record it and end the turns that are over."""
        tokens, logprobs = self._sample(logits, seqs)
        ends = []
        for s, t, lp in zip(seqs, tokens, logprobs, strict=True):
            s.pending = [t]
            s.turn_ids.append(t)
            s.turn_lps.append(lp)
            s.produced += 1
            reason = self._turn_over(s, t)
            if reason is not None:
                s.running = False
                ends.append(TurnEnd(s.key, s.turn_ids, s.turn_lps, reason))
        self.stats.model_tokens += len(seqs)
        return ends

    def _turn_over(self, s: _Seq, token: int) -> str | None:
        # In the order `finish` applies: a stop string (even one an eos token completes), eos, the budget.
        if self.matcher.candidate[token] and self.matcher.ends(s.turn_ids):
            return "stop"
        if token in self.eos:
            return "eos"
        return "length" if len(s.turn_ids) >= s.budget else None

    def _sample(self, logits: torch.Tensor, seqs: list[_Seq]) -> tuple[list[int], list[float]]:
        logits = logits.float()
        if self.temperature <= 0:
            tok = logits.argmax(-1)
            logz = torch.logsumexp(logits, -1)
            lp = logits.gather(1, tok[:, None]).squeeze(1) - logz
        else:
            scaled = logits / self.temperature
            logz = torch.logsumexp(scaled, -1, keepdim=True)
            keys = torch.tensor([s.key for s in seqs], device=self.device)
            index = torch.tensor([s.produced for s in seqs], device=self.device)
            uniforms = cast(torch.Tensor, self.uniforms)   # drawn whenever temperature > 0
            tok = inverse_cdf_sample((scaled - logz).exp(), uniforms[keys, index], self.top_p)
            lp = scaled.gather(1, tok[:, None]).squeeze(1) - logz.squeeze(1)
        both = torch.stack([tok.to(lp.dtype), lp]).tolist()   # one device-to-host copy
        return [int(t) for t in both[0]], both[1]
