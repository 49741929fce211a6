"""A stop string completed by a token that carries more text (Qwen's vocabulary has `>.`, `><`, `>\\n\\n`) ends
the turn and does not invalidate the trajectory: `<answer> Genentech </answer>.` is the valid answer
"Genentech". Through the real engine with a real byte-level BPE tokenizer whose merges create such tokens
(trained here; the tiny model's tokenizer has the tags as whole tokens, so it never merges them)."""

from __future__ import annotations

import pytest

Q = "Which company did Evan Morris work for?"


@pytest.fixture(scope="module")
def merged_tok():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    texts = ["<answer> Genentech </answer>.", "<search> Evan Morris </search><", "<think> hm </think>"] * 50
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|im_end|>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>")
    for text, last in (("<answer> Genentech </answer>.", ">."), ("<search> Evan Morris </search><", "><")):
        assert tok.decode(tok.encode(text, add_special_tokens=False)[-1:]) == last  # the merge exists
    return tok


def run(tok, bm25_dir, turns):
    from awarl.agent.backends.scripted import ScriptedBackend
    from awarl.agent.rollout import RolloutEngine
    from awarl.config import load_config
    from awarl.retrieval import load_index

    cfg = load_config(None, ["agent.max_turns=2", "retrieval.topk=2"])
    engine = RolloutEngine.from_config(cfg, tok, load_index(bm25_dir), backend=ScriptedBackend(tok, {Q: turns}))
    (t,) = engine.run([Q], temperature=0)
    return t


def test_answer_closed_by_a_merged_token_is_valid(merged_tok, shipped_bm25_dir):
    t = run(merged_tok, shipped_bm25_dir, ["<answer> Genentech </answer>. And more words"])
    assert merged_tok.decode(t.completion_ids[-1:]) == ">."  # the ids are kept as produced
    assert t.stop_reason == "answer" and t.response_text == "<answer> Genentech </answer>."
    assert t.parsed.valid and t.parsed.answer == "Genentech"


def test_search_closed_by_a_merged_token_runs_the_search_and_stays_valid(merged_tok, shipped_bm25_dir):
    t = run(merged_tok, shipped_bm25_dir, ["<search> Evan Morris </search><", "<answer> Genentech </answer>."])
    assert t.parsed.searches == ["Evan Morris"] and len(t.passages) == 2
    assert t.parsed.valid and t.parsed.answer == "Genentech" and t.stop_reason == "answer"
    # what was produced stays in the response; only the parser's view is cut at the stop strings
    assert "</search><" in t.response_text


def test_text_after_the_answer_in_a_later_token_is_still_a_protocol_break():
    """The parser itself stays strict: text after `</answer>` that no stop token explains is invalid."""
    from awarl.agent.parser import parse_trajectory

    p = parse_trajectory("<answer> Genentech </answer>. More", max_turns=2, phrases=["not enough information"])
    assert not p.valid and p.invalid_reason == "text after </answer>"
