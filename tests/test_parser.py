"""Trajectory parser: verdicts on well-formed and broken responses; never raises on any string."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from awarl.agent.parser import parse_trajectory

PHRASES = ["not enough information"]
INFO1 = "\n<information> [1] Title: Rush\nRush is a band.\n[2] Title: Peart\nA drummer. </information>\n"
INFO2 = "\n<information> [3] Title: Toto\nToto is a band. </information>\n"


def parse(text, **kw):
    kw.setdefault("max_turns", 4)
    kw.setdefault("phrases", PHRASES)
    return parse_trajectory(text, **kw)


def test_full_valid_trajectory():
    text = ("<think> who? </think>\n<search> drummer Rush </search>" + INFO1
            + "<think> more </think><search> Toto </search>" + INFO2 + "<cite> 2, 3 </cite>\n<answer> Rush </answer>\n")
    p = parse(text, require_citations=True)
    assert p.valid and p.invalid_reason is None
    assert p.searches == ["drummer Rush", "Toto"]
    assert p.shown == [1, 2, 3] and p.citations == [2, 3]
    assert p.answer == "Rush" and not p.abstained
    assert p.num_turns == 3


@pytest.mark.parametrize("answer,abstained", [("not enough information", True), ("Not enough information.", True),
                                              ("The not enough information", True), ("enough information", False)])
def test_abstention_is_matched_after_normalisation(answer, abstained):
    p = parse(f"<answer> {answer} </answer>")
    assert p.valid and p.abstained is abstained


def test_abstention_needs_no_citation_but_an_answer_does_when_required():
    assert parse("<answer> not enough information </answer>", require_citations=True).valid
    p = parse("<search> q </search>" + INFO1 + "<answer> Rush </answer>", require_citations=True)
    assert p.invalid_reason == "missing citations"
    assert parse("<search> q </search>" + INFO1 + "<answer> Rush </answer>").valid


@pytest.mark.parametrize("text,reason", [
    ("<search> a </search>" + INFO1 + "<search> b </search>" + INFO2 + "<search> c </search>"
     + INFO2 + "<answer> x </answer>", "search beyond max turns"),
    ("<answer> x </answer> and more", "text after </answer>"),
    ("<answer> x </answer><think> hm </think>", "text after </answer>"),
    ("<answer>   </answer>", "empty answer"),
    ("<think> never closed", "unclosed tag"),
    ("<answer> x", "unclosed tag"),
    ("<think> a <search> q </search> </think>", "nested tag"),
    ("<think> a </search><answer> x </answer>", "tags out of order"),
    ("</think><answer> x </answer>", "tags out of order"),
    ("<information> [1] Title: fake\nx </information><answer> x </answer>", "tags out of order"),
    ("<search>  </search>\n<information>  </information>\n<answer> x </answer>", "empty search"),
    ("<think> I do not know </think>", "no answer"),
    ("", "no answer"),
])
def test_invalid_reasons(text, reason):
    p = parse(text, max_turns=2)
    assert not p.valid and p.invalid_reason == reason


def test_citing_a_passage_never_shown_is_a_citation_fault_not_a_protocol_break():
    p = parse("<search> q </search>" + INFO1 + "<cite> 1, 7 </cite><answer> Rush </answer>")
    assert p.valid and p.answer == "Rush" and p.citations == [1, 7] and p.unshown_citations == [7]
    assert parse("<search> q </search>" + INFO1 + "<cite> 1 </cite><answer> Rush </answer>").unshown_citations == []


@pytest.mark.parametrize("content,numbers", [
    # read: what models write in a cite tag (issue 22; before, all but the first two were "malformed citation")
    (" 2, 3 ", [2, 3]), ("[1, 2]", [1, 2]), ("1 and 2", [1, 2]), ("１, ２", [1, 2]), ("１，２", [1, 2]),
    ("[1][2]", [1, 2]), ("［１］［２］", [1, 2]), ("1、2", [1, 2]), ("1 & 2", [1, 2]), ("1; 2; 3", [1, 2, 3]),
    ("passages 1-3", [1, 2, 3]), ("1–3", [1, 2, 3]), ("Passage 1 and Passage 3", [1, 3]), ("Doc 1, Doc 2", [1, 2]),
    ("#1, #3", [1, 3]), ("(1), (2)", [1, 2]), ("[1] Title: Rush, [2] Peart", [1, 2]), ("1 or 2", [1, 2]),
    ("", []), ("2, 9", [2, 9]),
    # a full stop after the list and a label with a colon (before: citation faults)
    ("2, 5.", [2, 5]), ("Passage 1.", [1]), ("Sources: 1, 2", [1, 2]), ("Passages: 1-2.", [1, 2]), (".", []),
    # citation faults: cite nothing, listed, the trajectory keeps its outcome
    ("one", None), ("the second passage", None), ("Rush", None), ("3-1", None), ("1-1000000", None),
    ("1" * 5000, None), ("[Rush]", None), ("1.5", None), ("2, 5..", None),
])
def test_cite_blocks_as_models_write_them_parse_or_are_citation_faults(content, numbers):
    p = parse(f"<search> q </search>{INFO1}<cite>{content}</cite><answer> Rush </answer>")
    assert p.valid and p.invalid_reason is None and p.answer == "Rush"
    if numbers is None:
        assert p.citations == [] and p.malformed_citations == [content.strip()]
    else:
        assert p.citations == numbers and p.malformed_citations == []
        assert p.unshown_citations == [n for n in numbers if n > 2]  # INFO1 showed 1 and 2 before the cite
    p = parse(f"<search> q </search>{INFO1}<cite>{content}</cite><answer> Rush </answer>", require_citations=True)
    assert p.valid  # a cite block was written: a fault costs citation reward, not validity


@pytest.mark.parametrize("answer,clean", [
    ("Paris [1]", "Paris"), ("Paris[1][2].", "Paris."), ("Paris ［１］", "Paris"), ("Paris [1, 2]", "Paris"),
    ("Paris [1] and Lyon [3]", "Paris and Lyon"), ("not enough information [2]", "not enough information"),
    ("Paris [citation needed]", "Paris [citation needed]"), ("[1]", "[1]"),
])
def test_inline_citation_markers_are_not_part_of_the_answer(answer, clean):
    from awarl.metrics import Outcome, classify_outcome

    p = parse(f"<search> q </search>{INFO1}<cite> 1 </cite><answer> {answer} </answer>")
    assert p.valid and p.answer == clean and p.citations == [1]
    if clean == "Paris":  # was wrong: EM compared "paris 1" with "paris"
        assert classify_outcome(p.answer, ["Paris"], valid=p.valid, phrases=PHRASES) is Outcome.CORRECT
    assert p.abstained is (clean == "not enough information")


def test_prompt_examples_are_never_seen_only_the_response_is_parsed():
    # Search-R1's prompt shows "<answer> Beijing </answer>"; parsing the response alone must not see it.
    assert parse("<think> hmm").answer is None


def test_custom_tag_names_and_passage_pattern():
    text = '<query> q </query>\n\n<docs>Doc 1(Title: "A") x\nDoc 2(Title: "B") y</docs>\n\n<final> A </final>'
    p = parse(text, tags={"search": "query", "information": "docs", "answer": "final"},
              passage_pattern=re.compile(r"Doc (\d+)\(Title:"))
    assert p.valid and p.searches == ["q"] and p.shown == [1, 2] and p.answer == "A"


TAGS = ["<think>", "</think>", "<search>", "</search>", "<information>", "</information>", "<cite>", "</cite>",
        "<answer>", "</answer>", "[1] Title:", " 1, 2 ", "not enough information", "\n", " ", "x", "<", ">", "/"]
tag_soup = st.lists(st.sampled_from(TAGS) | st.text(max_size=5), max_size=40).map("".join)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=200), tag_soup), st.integers(min_value=0, max_value=5), st.booleans())
def test_never_raises_and_verdict_is_stable(text, max_turns, require):
    a = parse(text, max_turns=max_turns, require_citations=require)
    b = parse(text, max_turns=max_turns, require_citations=require)
    assert a == b
    assert a.valid == (a.invalid_reason is None)
    assert a.valid <= (a.answer is not None and a.answer != "")
    c = parse(text + " \n\t ", max_turns=max_turns, require_citations=require)
    assert (c.valid, c.invalid_reason, c.answer) == (a.valid, a.invalid_reason, a.answer)
    assert len(a.searches) <= max_turns or not a.valid
    assert set(a.citations) - set(a.shown) <= set(a.unshown_citations) <= set(a.citations)
    assert a.valid or a.invalid_reason != "malformed citation"  # a citation fault never makes it invalid


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["1", "２", "[", "]", "［", "］", ",", "、", " and ", "-", "–", " to ", "passage",
                                 "#", "(", ")", " ", "x", "99999999"]) | st.text(max_size=4), max_size=30).map("".join))
def test_citation_reading_never_raises(text):
    from awarl.agent.citations import MAX_RANGE, read_citations, strip_inline_citations

    nums = read_citations(text)
    assert nums is None or all(isinstance(n, int) and n >= 0 for n in nums)
    assert nums is None or len(nums) <= MAX_RANGE * (len(text) + 1)
    out = strip_inline_citations(text)
    assert isinstance(out, str) and len(out) <= len(text)
