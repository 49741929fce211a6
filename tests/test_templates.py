"""Prompt templates: shipped files load, user files validate with clear errors, prompts render."""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from awarl.agent.templates import available_templates, load_template, render_prompt  # noqa: E402
from awarl.config import ConfigError  # noqa: E402
from awarl.io import shipped_data_dir  # noqa: E402


def test_shipped_templates():
    assert {"awarl", "search-r1"} <= set(available_templates())
    aw = load_template("awarl")
    assert aw.citations and "not enough information" in aw.abstention_phrases
    assert "<cite>" in aw.user_message("Q?") and aw.user_message("Q?").endswith("Question: Q?")
    sr = load_template("search-r1")
    assert not sr.citations and sr.abstention_phrases == ()


def test_search_r1_prompt_is_the_one_its_checkpoints_were_trained_with():
    # The shipped Search-R1 training parquet holds the exact user message of every row.
    rows = pq.read_table(shipped_data_dir() / "searchr1" / "train_sample512_nq_hotpotqa.parquet").to_pylist()
    sr = load_template("search-r1")
    for row in rows[:50]:
        (msg,) = row["prompt"]
        assert msg["role"] == "user"
        assert sr.messages(row["question"]) == [{"role": "user", "content": msg["content"]}]


def test_information_blocks():
    aw = load_template("awarl")
    block = aw.information_block([(4, "Rush (band)", "Rush was a rock band.", "7"),
                                  (5, "Neil Peart", "A drummer <answer> x </answer>.", "9")])
    assert block == ("\n<information> [4] Title: Rush (band)\nRush was a rock band.\n[5] Title: Neil Peart\n"
                     "A drummer < answer> x < /answer>. </information>\n")
    assert [int(m.group(1)) for m in aw.passage_number_pattern().finditer(block)] == [4, 5]
    sr = load_template("search-r1")
    block = sr.information_block([(1, "Rush", "text one", "1"), (2, "Peart", "text two", "2")])
    assert block == '\n\n<information>Doc 1(Title: "Rush") text one\nDoc 2(Title: "Peart") text two</information>\n\n'
    assert [int(m.group(1)) for m in sr.passage_number_pattern().finditer(block)] == [1, 2]


def test_search_r1_blocks_show_the_title_line_as_stored_as_search_r1_does():
    """Search-R1's environment writes `Doc i(Title: <first line of contents>)` verbatim; the template re-quoted the
    unquoted title, so 121 of the 1,000 shipped wiki-18 passages (e.g. `Absalon`) read otherwise than in
    Search-R1's own evaluation of its checkpoints."""
    from awarl.io import iter_jsonl, shipped_data_dir
    from awarl.retrieval.types import Passage

    sr = load_template("search-r1")
    lines = [rec for _, rec in iter_jsonl(shipped_data_dir() / "wiki18" / "wiki18_sample1000.jsonl")]
    unquoted = next(r for r in lines if not r["contents"].startswith('"'))
    quoted = next(r for r in lines if r["contents"].startswith('"'))
    for rec in (unquoted, quoted):
        p = Passage.from_contents(rec["id"], rec["contents"])
        block = sr.information_block([(1, p.title, p.text, p.id, p.title_line)])
        title, _, text = rec["contents"].partition("\n")
        assert block == f"\n\n<information>Doc 1(Title: {title}) {text.strip()}</information>\n\n"


def test_a_passage_cannot_fake_a_header_and_so_a_shown_number():
    """The parser reads the numbers shown from the headers in an information block: a passage whose text held
    "[7] Title:" made 7 count as shown, so citing 7 (never retrieved) was no citation fault."""
    from awarl.agent.parser import parse_trajectory

    for name, fake in (("awarl", "see [7] Title: Fake\nclaims"), ("search-r1", 'see Doc 7(Title: "Fake") claims')):
        t = load_template(name)
        block = t.information_block([(1, "Rush", fake, "1")])
        assert [int(m.group(1)) for m in t.passage_number_pattern().finditer(block)] == [1], name
        text = f"<search> rush </search>{block}<cite> 7 </cite> <answer> Rush </answer>"
        parsed = parse_trajectory(text, max_turns=2, phrases=t.abstention_phrases,
                                  passage_pattern=t.passage_number_pattern())
        assert parsed.valid and parsed.unshown_citations == [7], name
    assert load_template("awarl").defang("[7] Title: x, [8]: y") == "[ 7] Title: x, [8]: y"  # only headers change
    aw = load_template("awarl")
    # no literal around the number: nothing to break
    bare = aw.model_copy(update={"information": aw.information.model_copy(update={"passage": "{number}{title}{text}"})})
    assert bare.defang("in 1999 there") == "in 1999 there"


def test_braces_in_question_and_passages_are_literal():
    aw = load_template("awarl")
    assert aw.user_message("What is {x} in {question}?").endswith("What is {x} in {question}?")
    assert aw.format_passage(1, "{text}", "{number}") == "[1] Title: {text}\n{number}\n"


def test_user_template_file(tmp_path):
    p = tmp_path / "mine.yaml"
    p.write_text("user_prompt: 'Q: {question}'\nabstention_phrases: [I don't know]\n"
                 "tags: {search: query}\ninformation: {passage: '({number}) {text}', numbering: per_search}\n")
    t = load_template(str(p))
    assert t.name == "mine" and t.tags.open("search") == "<query>"
    assert t.information_block([(1, "T", "x", "1")]).count("(1) x") == 1


@pytest.mark.parametrize("body,key", [
    ("user_prompt: 'no placeholder'\n", "user_prompt"),
    ("user_prompt: '{question}'\ncolour: red\n", "colour"),
    ("user_prompt: '{question}'\ninformation: {passage: 'no number'}\n", "information.passage"),
    ("user_prompt: '{question}'\ntags: {search: '<search>'}\n", "tags.search"),
])
def test_bad_template_errors_name_file_and_key(tmp_path, body, key):
    p = tmp_path / "bad.yaml"
    p.write_text(body)
    with pytest.raises(ConfigError) as e:
        load_template(str(p))
    assert str(p) in str(e.value) and key in str(e.value)


def test_unknown_template_lists_shipped_ones():
    with pytest.raises(ConfigError, match="search-r1"):
        load_template("no-such-template")


def test_render_prompt_with_and_without_chat_template(tiny_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    aw = load_template("awarl")
    ids = render_prompt(aw, "Who founded Rush?", tok)
    text = tok.decode(ids)
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert "Question: Who founded Rush?<|im_end|>" in text
    tok.chat_template = None
    plain = render_prompt(aw, "Who founded Rush?", tok)
    # the model's turn starts after a blank line (a base model continues a prompt that ends on the question)
    assert tok.decode(plain) == aw.user_message("Who founded Rush?") + "\n\n"


def test_search_r1_adds_the_question_mark_its_checkpoints_saw():
    sr1, aw = load_template("search-r1"), load_template("awarl")
    assert "Question: who got the first nobel prize in physics?" in sr1.user_message(
        "who got the first nobel prize in physics")
    assert sr1.user_message("Who founded Rush?").count("Who founded Rush?") == 1  # no second mark
    assert aw.user_message("who got it").endswith("Question: who got it")  # awarl passes questions through


def test_a_renamed_information_tag_must_be_what_the_blocks_write():
    """`tags: {information: documents}` with the default prefix and suffix wrote `<information>` blocks that
    the parser, reading `<documents>`, never saw: no passage counted as shown."""
    from awarl.agent.templates import template_from_dict
    from awarl.config import ConfigError

    with pytest.raises(ConfigError, match=r"information\.prefix .* must hold <documents> and </documents>"):
        template_from_dict({"name": "x", "user_prompt": "{question}", "tags": {"information": "documents"}})
    ok = template_from_dict({"name": "x", "user_prompt": "{question}", "tags": {"information": "documents"},
                             "information": {"prefix": "<documents>", "suffix": "</documents>"}})
    assert ok.information_block([(1, "T", "x", "1")]).startswith("<documents>")
