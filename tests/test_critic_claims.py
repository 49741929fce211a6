"""Issue 43, the offline judge's reading of claims: values normalised (dates at their precision, quantities in
their units), claims split without breaking numbers, dates or names, the contradiction set of constructed and
real shipped passages (tests/critic_contradictions.py), typed conflicts (the LLM judge's schema, the audit,
older verdicts still read), claims a verdict leaves out, and drift across steps on normalised values."""

from __future__ import annotations

import json

import pytest
from critic_contradictions import CASES, grounded

from awarl.config import CriticConfig
from awarl.critic.claims import clause_spans, sentence_spans, split_claims
from awarl.critic.lexical_judge import LexicalJudge
from awarl.critic.schema import CriticInput, CriticOutput, PassageRef, critic_output_json_schema
from awarl.critic.values import read_values
from awarl.rewards.citation import build_critic_input


def value(text: str):  # noqa: ANN201 - a Value
    (v,) = read_values(text)
    return v


# ------------------------------------------------------------------------------------------------ values
@pytest.mark.parametrize("a, b", [("March 1999", "3 March 1999"), ("1999", "March 3, 1999"), ("5 km", "5,000 m"),
                                  ("5000 m", "5 km"), ("$5B", "$5,000 million"), ("$5 billion", "$5,000 million"),
                                  ("£3m", "£3 million"), ("$58 million", "$58.4 million"), ("three acts", "3 acts"),
                                  ("40%", "40 percent"), ("1999-03-03", "3 March 1999")])
def test_values_that_agree(a, b):
    assert value(a).agrees(value(b)) and not value(a).conflicts(value(b))


@pytest.mark.parametrize("a, b", [("1999", "2001"), ("3 March 1999", "4 March 1999"), ("March 1999", "April 1999"),
                                  ("5 km", "5 miles"), ("$5B", "$3B"), ("5000 m", "5 m")])
def test_values_that_conflict(a, b):
    assert value(a).conflicts(value(b)) and not value(a).agrees(value(b))


def test_values_of_different_kinds_are_never_compared():
    # "5000 m" is five thousand metres, never five billion: it does not meet a sum of money at all
    assert value("5000 m").quantity.dim == "length" and value("5000 m").quantity.value == 5000
    assert not value("5 km").comparable(value("$5B")) and not value("$5").comparable(value("€5"))
    assert not value("3 acts").comparable(value("3 scenes"))


def test_a_life_span_marks_its_start_and_end_and_a_bare_year_is_a_date_unless_it_counts_something():
    roles = [(v.text, v.role) for v in read_values("Richard Llewellyn Lloyd (8 December 1906 – 30 November 1983) was")]
    assert roles == [("8 December 1906", "start"), ("30 November 1983", "end")]
    assert [(v.kind, v.role) for v in read_values("Iain Pears (born 1 January 1955) is")] == [("date", "start")]
    assert [v.kind for v in read_values("1500 soldiers died in 1645")] == ["quantity", "date"]
    assert [v.kind for v in read_values("The Ninth Gate is a 1999 mystery thriller film")] == ["date"]


# ------------------------------------------------------------------------------------------------ claims
@pytest.mark.parametrize("answer, claims", [
    ("The census puts the Bex market size at $5,000 million.", ["The census puts the Bex market size at $5,000 million"]),
    ("Vel Corp was founded on March 3, 1999 in Springfield.", ["Vel Corp was founded on March 3, 1999 in Springfield"]),
    ("Van Hook Township is a township in Mountrail County, North Dakota.",
     ["Van Hook Township is a township in Mountrail County, North Dakota"]),
    ("Ann Lee, the director of Film X, was born in Oslo.", ["Ann Lee, the director of Film X, was born in Oslo"]),
    ("Nobody's Hero is a song by Rush, and Neil Peart was inducted into the Modern Drummer Hall of Fame.",
     ["Nobody's Hero is a song by Rush", "Neil Peart was inducted into the Modern Drummer Hall of Fame"]),
    ("Dr. Ann Lee moved to the U.S. in 1990. She was born in Oslo; her brother was born in Bergen.",
     ["Dr. Ann Lee moved to the U.S. in 1990", "She was born in Oslo", "her brother was born in Bergen"]),
    ("Simon and Garfunkel", ["Simon and Garfunkel"]),
])
def test_claims_keep_numbers_dates_and_names_whole(answer, claims):
    """Issue 43: "$5,000 million" and "March 3, 1999" were split at the comma into "000 million" and "1999"."""
    assert split_claims(answer) == claims


def test_a_real_shipped_sentence_splits_into_its_clauses_with_offsets():
    text = ("Jerome Storm( November 11, 1890 – July 10, 1958) was an American film director, actor and writer. He "
            "was born in Denver, Colorado, and died in Desert Hot Springs, California.")
    s0, s1 = sentence_spans(text)
    assert text[s0[0]:s0[1]].endswith("actor and writer.")
    assert [text[a:b] for a, b in clause_spans(text, *s1)] == ["He was born in Denver, Colorado",
                                                               "died in Desert Hot Springs, California"]


# ---------------------------------------------------------------------------------------- contradiction set
@pytest.mark.parametrize("cid, question, answer, spec, want", CASES, ids=[c[0] for c in CASES])
def test_the_contradiction_set(cid, question, answer, spec, want):
    """Grounded exactly when a span states it (constructed and real shipped passages; the judge before issue 43
    got 22 of these 42 wrong, grounding 20 of the 23 it must refuse)."""
    assert grounded(LexicalJudge(CriticConfig()), question, answer, spec) is want


def test_a_contradiction_names_the_span_and_a_grounding_names_its_span():
    from critic_contradictions import passages

    refs = passages([("shipped", "Christian Ackermann")])
    judge = LexicalJudge(CriticConfig())
    v = judge.verify_one(build_critic_input("Where was Christian Ackermann born?", "Riga", [1], refs))
    assert v.verified_claims[0].status == "unsupported"
    assert any("contradicted by [1] p1: “Christian Ackermann was born in Königsberg.”" in f for f in v.flags)
    v = judge.verify_one(build_critic_input("Where was Christian Ackermann born?", "Königsberg", [1], refs))
    (span,) = v.verified_claims[0].evidence
    assert refs[0].text[span.start:span.end] == "Christian Ackermann was born in Königsberg."


def test_one_step_s_sources_that_disagree_are_a_typed_conflict():
    refs = [PassageRef(number=1, id="z1", title="Zed Corp history", text="Zed Corp was founded in 1999."),
            PassageRef(number=2, id="z2", title="Zed Corp registry", text="The registry says Zed Corp was founded in 2001.")]
    v = LexicalJudge(CriticConfig()).verify_one(build_critic_input("When was Zed Corp founded?", "1999", [1], refs))
    assert v.verified_claims[0].status == "grounded"  # stated by z1...
    (c,) = v.conflicts  # ...and contradicted by z2: reported, not averaged
    assert c.values == ["1999", "2001"] and c.source_ids == ["z1", "z2"]


# --------------------------------------------------------------------------------------- typed conflicts
def test_the_llm_judge_s_schema_asks_for_typed_conflicts_and_older_verdicts_still_read():
    schema = critic_output_json_schema()
    assert "conflicts" in schema["required"]
    item = schema["properties"]["conflicts"]["items"]
    assert item["required"] == ["claim", "values", "source_ids", "detail"] and item["additionalProperties"] is False
    # a verdict cached before issue 43 (no conflicts, no evidence, the single-id form) is read as before
    old = {"verified_claims": [{"claim": "Paris", "status": "grounded", "source_id": "w1", "confidence": 0.9}],
           "overall_groundedness": 1.0, "flags": []}
    v = CriticOutput.model_validate(json.loads(json.dumps(old)))
    assert v.conflicts == [] and v.verified_claims[0].evidence == [] and v.verified_claims[0].source_ids == ["w1"]


def test_the_prompt_version_moves_the_cache_key():
    from awarl.critic.openai_judge import PROMPT_VERSION, OpenAIJudge

    judge = OpenAIJudge(CriticConfig(judge="openai"))
    msgs = [{"role": "user", "content": "x"}]
    assert PROMPT_VERSION == "awarl-critic/4" and judge.cache_key(msgs) != judge.cache_key(msgs, "awarl-critic/3")


def test_the_audit_resolves_a_conflict_s_ids_and_drops_spans_outside_their_passage():
    from awarl.critic.audit import audit_verdict

    item = CriticInput(question="q", answer="1999", passages=[PassageRef(number=1, id="z1", text="founded in 1999"),
                                                              PassageRef(number=2, id="z2", text="founded in 2001")])
    v = CriticOutput.model_validate({
        "verified_claims": [{"claim": "1999", "status": "grounded", "source_ids": ["1"], "confidence": 1,
                             "evidence": [{"passage_id": "z1", "start": 11, "end": 15},
                                          {"passage_id": "z1", "start": 11, "end": 99}]}],
        "overall_groundedness": 1.0, "flags": [],
        "conflicts": [{"claim": "founding", "values": ["1999", "2001"], "source_ids": ["[1]", "2", "z9"], "detail": ""}]})
    out = audit_verdict(v, item)
    assert [(e.start, e.end) for e in out.verified_claims[0].evidence] == [(11, 15)]
    assert out.conflicts[0].source_ids == ["z1", "z2"]  # z9 was never retrieved: dropped, the conflict stands
    assert any("['z9']" in f and "the conflict stands" in f for f in out.flags)


# ----------------------------------------------------------------------------------------- omitted claims
def test_a_claim_the_verdict_leaves_out_is_added_as_unsupported():
    from awarl.research.checks import complete

    item = CriticInput(question="What do we know about Foo?",
                       answer="Foo was born in Springfield. Foo won the Nobel Prize in 1999.")
    v = CriticOutput.model_validate({"verified_claims": [{"claim": "Foo was born in Springfield", "status": "grounded",
                                                          "source_ids": ["p1"], "confidence": 1}],
                                     "overall_groundedness": 1.0, "flags": []})
    out = complete(v, item)
    assert [(c.claim, c.status) for c in out.verified_claims] == [("Foo was born in Springfield", "grounded"),
                                                                  ("Foo won the Nobel Prize in 1999", "unsupported")]
    assert out.overall_groundedness == 0.5 and any("leaves out the answer's claim" in f for f in out.flags)
    # a short answer is covered by a verdict claim that states it (a hop's fact naming it), or its value
    short = CriticInput(question="When was Zed Corp founded?", answer="1999")
    covers = CriticOutput.model_validate({"verified_claims": [{"claim": "Zed Corp was founded in 1999",
                                                               "status": "grounded", "source_ids": ["p1"],
                                                               "confidence": 1}], "overall_groundedness": 1.0})
    assert complete(covers, short) is covers


# ------------------------------------------------------------------------------------------------ drift
@pytest.mark.parametrize("a, b, conflict", [
    (("5 km", "How long is the Foo Trail according to the park?"),
     ("5 miles", "How long is the Foo Trail according to the guide?"), True),
    (("3 March 1999", "When was Qat Club founded?"), ("March 1999", "In what month was Qat Club founded?"), False),
    (("The Kop Peak trail climbs 5 km above the valley floor", ""),
     ("The Kop Peak trail climbs 5000 m above the valley floor", ""), False),
    (("1999", "When was Zed Corp founded?"), ("2001", "In what year was Zed Corp established, according to the "
                                                     "registry?"), True),
    (("Lia Moss", "Who directed Vox Film?"), ("Tom Reed", "Which filmmaker was the director of Vox Film?"), True),
    (("Acme market size is $5B", ""), ("Acme market size is $5,000 million", ""), False),
    (("Paris", "What is the capital of France?"), ("Rome", "What is the capital of Italy?"), False),
])
def test_drift_reads_normalised_values_of_one_subject(a, b, conflict):
    """Issue 43: 5 km and 5 miles were one value ("5"), "March 1999" and "3 March 1999" two, "5000 m" five
    billion, and paraphrased sub-questions ("founded" / "established") two subjects."""
    from awarl.research.drift import conflicts, read_statement

    found = conflicts([read_statement(0, *a[:1], ["p0"], a[1]), read_statement(1, *b[:1], ["p1"], b[1])], 0.8)
    assert bool(found) is conflict
    if found:
        flag, typed = found[0]
        assert typed.values == [a[0], b[0]] and typed.steps == [0, 1] and typed.found_by == "drift"
