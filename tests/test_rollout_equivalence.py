"""The continuous engine (slot KV cache, no barrier per turn, searches off the critical path) produces at
temperature 0 token for token the trajectories of the engine it replaced: one transformers `generate` per
turn over prompt + completion, kept below verbatim as the reference (`ReferenceEngine`, `LegacyHFBackend`,
from awarl/agent/rollout.py and backends/hf.py at commit 210d0f3).

Real parts: the tiny model (`awarl model tiny`), real shipped questions, the real BM25 index over the shipped
closed corpus. Two changes to the tiny model make greedy rollouts exercise the whole protocol: its weight
matrices are scaled up (a random-init model at its initial scale repeats one token forever at temperature 0)
and its output layer gets a bias towards `</search>`, `</answer>` and eos, so that trajectories search (with
real and empty queries), answer, end, run into max_turns and into both budgets. It runs in float64, so the
two engines' different summation orders (other batch compositions, no re-encoding) cannot flip a near-tie.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import replace

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from awarl.agent.backends.base import eos_ids, finish  # noqa: E402
from awarl.agent.backends.hf import HFBackend  # noqa: E402
from awarl.agent.rollout import RolloutEngine, Trajectory, _as_passage, _State  # noqa: E402
from awarl.agent.templates import load_template, render_prompt  # noqa: E402
from awarl.config import AgentConfig  # noqa: E402
from awarl.data.loaders import load_shipped  # noqa: E402

_TAIL_TOKENS = 16
BIAS = {"</search>": 0.5, "</answer>": 0.45, "<|im_end|>": 0.35}
WEIGHT_SCALE = 6.0


# ------------------------------------------------------------------------------ the reference (frozen)
class LegacyHFBackend:
    """The transformers backend as it was: left-padded `generate` with `stop_strings=` per call, all logits
    kept and stacked to read the sampled tokens' log-probs."""

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer
        self.eos = eos_ids(tokenizer, getattr(model, "generation_config", None))
        self.pad_id = int(tokenizer.pad_token_id)

    def generate(self, prompts, *, max_new_tokens, temperature, top_p=1.0, stop_strings=(), seed=None):
        import torch

        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attn = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            attn[i, width - len(p):] = 1
        assert temperature == 0, "the reference runs greedy only"
        with torch.no_grad():
            res = self.model.generate(input_ids=input_ids, attention_mask=attn, max_new_tokens=max_new_tokens,
                                      do_sample=False, pad_token_id=self.pad_id, eos_token_id=sorted(self.eos),
                                      output_logits=True, return_dict_in_generate=True, temperature=None,
                                      top_p=None, top_k=None, stop_strings=list(stop_strings),
                                      tokenizer=self.tokenizer)
        gen = res.sequences[:, width:]
        logits = torch.stack(res.logits, dim=1).float()
        lp = torch.log_softmax(logits, dim=-1).gather(-1, gen[:, : logits.shape[1]].unsqueeze(-1)).squeeze(-1)
        return [finish(gen[i].tolist(), lp[i].tolist(), self.tokenizer, stop_strings, self.eos)
                for i in range(len(prompts))]


class ReferenceEngine(RolloutEngine):
    """The rollout loop as it was: one `generate` per turn over prompt + completion for every active
    trajectory, the turn's searches in one retriever call. Only configuration is inherited."""

    def run(self, questions, *, temperature, top_p=1.0, seed=None, prompt_ids=None):
        prompts = prompt_ids if prompt_ids is not None else [render_prompt(self.template, q, self.tokenizer)
                                                             for q in questions]
        states = [_State(list(p)) for p in prompts]
        while True:
            active = [s for s in states if s.stop_reason is None]
            for s in active:
                if self._ref_left(s) <= 0:
                    s.stop_reason = "token_budget"
            active = [s for s in active if s.stop_reason is None]
            if not active:
                break
            budgets = [min(self.cfg.max_new_tokens_per_turn, self._ref_left(s)) for s in active]
            gens = self.backend.generate([s.prompt + s.completion for s in active], max_new_tokens=max(budgets),
                                         temperature=temperature, top_p=top_p, stop_strings=self.stop_strings)
            pending = []
            for s, g, budget in zip(active, gens, budgets, strict=True):
                ids, lps, reason = list(g.token_ids), list(g.logprobs), g.finish_reason
                if len(ids) > budget:
                    ids, lps, reason = ids[:budget], lps[:budget], "length"
                s.add(ids, lps, model=True)
                query = self._ref_turn_action(s, ids, reason)
                if query is not None:
                    pending.append((s, query))
            self._ref_retrieve(pending)
        return [self._ref_finish(s) for s in states]

    def _ref_left(self, s):
        return self.cfg.max_trajectory_tokens - len(s.completion)

    def _ref_turn_action(self, s, ids, reason):
        s.text_parts.append(self._ref_turn_text(ids, reason))
        if reason in ("length", "eos"):
            s.stop_reason = "token_budget" if reason == "length" else "eos"
            return None
        tail = self.tokenizer.decode(ids[-_TAIL_TOKENS:], skip_special_tokens=False)
        at_answer, at_search = tail.rfind(self.answer_close), tail.rfind(self.search_close)
        if at_answer < 0 and at_search < 0:
            s.stop_reason = "eos"
            return None
        if at_answer > at_search:
            s.stop_reason = "answer"
            return None
        if s.searches >= self.cfg.max_turns:
            s.stop_reason = "max_turns"
            return None
        s.searches += 1
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        body = text[: text.rfind(self.search_close)]
        start = body.rfind(self.search_open)
        return (body[start + len(self.search_open):] if start >= 0 else body).strip()

    def _ref_turn_text(self, ids, reason):
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        if reason != "stop":
            return text
        ends = [text.find(stop) + len(stop) for stop in self.stop_strings if stop in text]
        return text[:min(ends)] if ends else text

    def _ref_retrieve(self, pending):
        if not pending:
            return
        queries = [q for _, q in pending if q]
        results = iter(self.retriever.search(queries, self.topk) if queries else [])
        for s, q in pending:
            hits = [_as_passage(p) for p in next(results)][: self.topk] if q else []
            numbered = []
            cumulative = self.template.information.numbering == "cumulative"
            for j, p in enumerate(hits):
                number = len(s.passages) + 1 if cumulative else j + 1
                s.passages.append({"number": number, "id": p.id, "title": p.title, "text": p.text})
                numbered.append((number, p.title, p.text, p.id))
            block = self.tokenizer.encode(self.template.information_block(numbered), add_special_tokens=False)
            left = self._ref_left(s)
            if len(block) > left:
                block = block[:max(left, 0)]
                s.stop_reason = "token_budget"
            s.add(block, None, model=False)
            s.text_parts.append(self.tokenizer.decode(block, skip_special_tokens=True))

    def _ref_finish(self, s):
        text = self.tokenizer.decode(s.completion, skip_special_tokens=True)
        parsed = self.parse("".join(s.text_parts))
        forced = {"token_budget": "token budget exceeded", "max_turns": "search beyond max turns"}.get(
            s.stop_reason or "")
        if forced and (parsed.valid or s.stop_reason == "token_budget"):
            parsed = replace(parsed, valid=False, invalid_reason=forced)
        return Trajectory(prompt_ids=s.prompt, completion_ids=s.completion, env_mask=s.mask, logprobs=s.logprobs,
                          response_text=text, parsed=parsed, passages=s.passages, stop_reason=s.stop_reason or "eos")


# ------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def tok(tiny_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_dir)


@pytest.fixture(scope="module")
def model(tiny_dir, tok):
    """The tiny model, weights scaled and output biased towards the protocol's endings, in float64."""
    import torch
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(tiny_dir).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() == 2 and "embed" not in name:
                p.mul_(WEIGHT_SCALE)
        head = m.get_output_embeddings()
        biased = torch.nn.Linear(head.in_features, head.out_features, bias=True)
        biased.weight = head.weight   # still tied to the input embeddings
        biased.bias.zero_()
        for token, b in BIAS.items():
            biased.bias[tok.convert_tokens_to_ids(token)] = b
        m.set_output_embeddings(biased)
    return m.double()


@pytest.fixture(scope="module")
def retriever(shipped_bm25_dir):
    from awarl.retrieval import load_index

    return load_index(shipped_bm25_dir)


@pytest.fixture(scope="module")
def questions():
    return [ex.question for name, n in (("hotpotqa", 6), ("musique", 3), ("2wikimultihopqa", 3))
            for ex in load_shipped(name, limit=n, seed=0)]


def engines(model, tok, retriever, template, *, slots=None, static=False, **agent):
    cfg, tpl = AgentConfig(**agent), load_template(template)
    backend = HFBackend(model, tok, batch_size=slots, static_cache=static)
    new = RolloutEngine(backend, tok, retriever, tpl, cfg, topk=2)
    return ReferenceEngine(LegacyHFBackend(model, tok), tok, retriever, tpl, cfg, topk=2), new


def assert_same(ref: list[Trajectory], new: list[Trajectory]) -> None:
    for a, b in zip(ref, new, strict=True):
        assert b.completion_ids == a.completion_ids
        assert b.env_mask == a.env_mask and b.stop_reason == a.stop_reason
        assert b.passages == a.passages and b.response_text == a.response_text
        assert b.parsed == a.parsed
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-6)


def env_spans(t: Trajectory) -> int:
    return sum(1 for i, m in enumerate(t.env_mask) if m == 0 and (i == 0 or t.env_mask[i - 1] == 1))


@pytest.mark.slow
def test_greedy_multi_turn_trajectories_equal_the_reference_engine(model, tok, retriever, questions):
    ref_engine, new_engine = engines(model, tok, retriever, "awarl", max_turns=2, max_new_tokens_per_turn=12,
                                     max_trajectory_tokens=1000)
    ref = ref_engine.run(questions, temperature=0.0)
    # The case covers the whole protocol: every ending, searches with passages, an empty query (no passages).
    assert set(Counter(t.stop_reason for t in ref)) == {"answer", "eos", "max_turns", "token_budget"}
    assert any(len(t.passages) > 2 for t in ref)   # two searches: numbering goes on across blocks
    assert any(env_spans(t) and len(t.passages) < 2 * env_spans(t) for t in ref)
    new = new_engine.run(questions, temperature=0.0)
    assert new_engine.last_stats["engine"] == "continuous"
    assert_same(ref, new)


@pytest.mark.slow
def test_budget_cuts_fewer_slots_than_questions_and_static_cache_are_equal_too(model, tok, retriever, questions):
    """A trajectory budget that cuts information blocks, search-r1's per-block numbering, and 5 slots for 12
    questions (finished trajectories hand their slot on), dynamic and static cache."""
    kw = dict(max_turns=2, max_new_tokens_per_turn=12, max_trajectory_tokens=420)
    ref_engine, new_engine = engines(model, tok, retriever, "search-r1", slots=5, **kw)
    ref = ref_engine.run(questions, temperature=0.0)
    assert any(t.stop_reason == "token_budget" and t.env_mask[-1] == 0 for t in ref)   # cut inside a block
    assert any(t.stop_reason == "token_budget" and t.env_mask[-1] == 1 for t in ref)   # a turn at its budget
    new = new_engine.run(questions, temperature=0.0)
    assert new_engine.last_stats["slots"] == 5
    assert_same(ref, new)
    _, static_engine = engines(model, tok, retriever, "search-r1", slots=5, static=True, **kw)
    assert_same(ref, static_engine.run(questions, temperature=0.0))
    assert static_engine.last_stats["static"] and static_engine.last_stats["cache_length"] % 256 == 0


def test_the_generate_fallback_ignores_a_checkpoints_logits_processors(tiny_dir, tok):
    """transformers' generate (the path for models the slot cache cannot serve) applied the processors a
    checkpoint's generation_config switches on (repetition_penalty, no_repeat_ngram_size, ...), which the
    slot-cache path does not: greedy output differed, and the recorded logprobs (raw logits / T) were not
    the distribution sampled."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()
    prompt = tok.encode("Who was Evan Morris a lobbyist for? " * 3, add_special_tokens=False)
    backend = HFBackend(m, tok)
    (plain,) = backend.generate([prompt], max_new_tokens=24, temperature=0.0, stop_strings=["</answer>"])
    first = plain.token_ids[0]
    for name, value in (("repetition_penalty", 1.5), ("no_repeat_ngram_size", 2), ("suppress_tokens", [first]),
                        ("bad_words_ids", [[first]]), ("sequence_bias", {(first,): -100.0})):
        kept = copy.deepcopy(m.generation_config)
        setattr(m.generation_config, name, value)
        (session,) = backend.generate([prompt], max_new_tokens=24, temperature=0.0, stop_strings=["</answer>"])
        (fallback,) = backend._generate_transformers([prompt], 24, 0.0, 1.0, ["</answer>"], None)
        m.generation_config = kept
        assert fallback.token_ids == session.token_ids == plain.token_ids, name
        assert fallback.logprobs == pytest.approx(session.logprobs, abs=1e-4), name


def test_the_generate_fallback_samples_plainly_whatever_sampling_warper_a_checkpoint_sets(tiny_dir, tok):
    """top_h (transformers 5's TopHLogitsWarper) was missing from the neutral list: a checkpoint setting it
    truncated what the fallback sampled, while the logprobs it recorded were raw logits / T."""
    import torch
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()
    prompt = tok.encode("Who was Evan Morris a lobbyist for? " * 3, add_special_tokens=False)
    backend = HFBackend(m, tok)

    def samples() -> list:
        return [backend._generate_transformers([prompt], 6, 1.0, 1.0, [], seed)[0] for seed in range(6)]

    plain = samples()
    m.generation_config.top_h = 0.05
    truncated = samples()
    m.generation_config.top_h = None
    assert [g.token_ids for g in truncated] == [g.token_ids for g in plain]
    assert [g.logprobs for g in truncated] == [g.logprobs for g in plain]


def test_a_turn_with_no_room_generates_nothing(model, tok):
    """generate(max_new_tokens=0) returned one token marked "length": more than the budget it was given."""
    from awarl.agent.backends.base import Generation

    prompt = tok.encode("Who was Evan Morris?", add_special_tokens=False)
    assert HFBackend(model, tok).generate([prompt], max_new_tokens=0, temperature=0.0) == [Generation([], [], "length")]
