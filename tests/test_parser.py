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
    ("<search> q </search>" + INFO1 + "<cite> one </cite><answer> x </answer>", "malformed citation"),
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
    assert set(a.citations) <= set(a.shown) or not a.valid
