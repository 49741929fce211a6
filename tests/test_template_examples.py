"""Few-shot templates (`examples:`): worked exchanges rendered as earlier chat turns, through a real chat
template (the tiny model's ChatML) and the plain-text fallback; the shipped `awarl-fewshot` file."""

from __future__ import annotations

import pytest

from awarl.agent.parser import parse_trajectory
from awarl.agent.templates import load_template, render_prompt, template_from_dict
from awarl.config import ConfigError


def test_examples_are_earlier_user_and_assistant_turns(tiny_dir):
    from transformers import AutoTokenizer

    t = template_from_dict({"name": "x", "user_prompt": "Q: {question}",
                            "examples": [{"question": "one?", "response": "<answer> 1 </answer>"}]})
    msgs = t.messages("two?")
    assert msgs == [{"role": "user", "content": "Q: one?"}, {"role": "assistant", "content": "<answer> 1 </answer>"},
                    {"role": "user", "content": "Q: two?"}]
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    text = tok.decode(render_prompt(t, "two?", tok))
    assert text.index("<|im_start|>user\nQ: one?<|im_end|>") < text.index(
        "<|im_start|>assistant\n<answer> 1 </answer><|im_end|>") < text.index("<|im_start|>user\nQ: two?")
    assert text.endswith("<|im_start|>assistant\n")
    tok.chat_template = None
    plain = tok.decode(render_prompt(t, "two?", tok))
    # the response follows a blank line, as in the example (the prompt used to end right after "Q: two?")
    assert plain == "Q: one?\n\n<answer> 1 </answer>\n\nQ: two?\n\n"


def test_an_example_without_a_response_is_a_config_error():
    with pytest.raises(ConfigError, match="examples.0.response"):
        template_from_dict({"name": "x", "user_prompt": "{question}", "examples": [{"question": "q"}]})


def test_shipped_fewshot_examples_are_valid_trajectories_of_their_own_template():
    """Each worked exchange parses as the protocol it teaches: one answers with a citation, one abstains."""
    t = load_template("awarl-fewshot")
    phrases = list(t.abstention_phrases)
    parsed = [parse_trajectory(ex.response, max_turns=4, phrases=phrases, require_citations=False)
              for ex in t.examples]
    assert all(p.valid for p in parsed), [p.invalid_reason for p in parsed]
    assert [p.abstained for p in parsed] == [False, True]
    assert parsed[0].citations == [1] and parsed[0].answer == "Paris"
    for ex in t.examples:  # written in the template's own information format
        assert "\n<information> [1] Title: " in ex.response and " </information>\n" in ex.response
