"""Critic judges: schema, the OpenAI-compatible judge against a real local HTTP server, the lexical judge on
real HotpotQA passages, and make_judge."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from types import SimpleNamespace

import pytest
from conftest import fake_chat_app, serve_app
from pydantic import ValidationError

from awarl.config import CriticConfig
from awarl.critic import make_judge
from awarl.critic.lexical_judge import LexicalJudge, split_claims
from awarl.critic.openai_judge import OpenAIJudge
from awarl.critic.schema import ClaimVerification, CriticInput, CriticOutput, PassageRef
from awarl.data import load_shipped
from awarl.io import shipped_data_dir
from awarl.rewards.citation import build_critic_input, citation_reward


def test_schema_rules():
    with pytest.raises(ValidationError, match="source_ids"):
        ClaimVerification(claim="x", status="grounded", confidence=0.5)
    with pytest.raises(ValidationError, match="source_ids"):
        ClaimVerification(claim="x", status="grounded", source_ids=[" ", ""], confidence=0.5)
    with pytest.raises(ValidationError):
        ClaimVerification(claim="x", status="inferred", confidence=1.5)
    with pytest.raises(ValidationError):
        ClaimVerification(claim="x", status="maybe", confidence=0.5)
    ok = ClaimVerification(claim="x", status="unsupported", confidence=0.0)
    assert ok.source_id is None and ok.source_ids == []
    # several passages jointly; the single-id form of older verdicts (and caches) is still read
    joint = ClaimVerification.model_validate({"claim": "x", "status": "grounded", "source_ids": ["a", " b", "a"],
                                              "confidence": 1})
    assert joint.source_ids == ["a", "b"] and joint.source_id == "a"
    assert ClaimVerification.model_validate({"claim": "x", "status": "grounded", "source_id": "w1",
                                             "confidence": 1}).source_ids == ["w1"]
    assert ClaimVerification.model_validate({"claim": "x", "status": "grounded", "source_id": ["w1", "w2"],
                                             "confidence": 1}).source_ids == ["w1", "w2"]
    assert "source_id\"" not in json.dumps(joint.model_dump())  # written in the list form only


VALID = {"verified_claims": [{"claim": "Paris", "status": "grounded", "source_id": "w1", "confidence": 0.9}],
         "overall_groundedness": 1.0, "flags": []}
INVALID = {"verified_claims": [{"claim": "Paris", "status": "grounded", "source_id": None, "confidence": 0.9}],
           "overall_groundedness": 1.0, "flags": []}


def kinds_reply(srv: SimpleNamespace):  # noqa: ANN201 - a fake_chat_app reply
    """The question names the case: VALID (fenced JSON), INVALID (schema violation), NOTJSON, SLOW (1.5 s),
    FLAKY (503 the first time). `srv.counts` counts the requests of each."""
    from fastapi.responses import Response

    def reply(body: dict) -> str | Response:
        kind = json.loads(body["messages"][-1]["content"])["question"]  # the user message is one JSON object
        with srv.lock:
            srv.counts[kind] = srv.counts.get(kind, 0) + 1
            n = srv.counts[kind]
        if kind == "SLOW":
            time.sleep(1.5)  # the client has given up by now: exactly what this case tests
        if kind == "FLAKY" and n == 1:
            return Response(status_code=503)
        content = {"VALID": json.dumps(VALID), "FLAKY": json.dumps(VALID), "SLOW": json.dumps(VALID),
                   "INVALID": json.dumps(INVALID), "NOTJSON": "I think the answer is grounded."}[kind]
        return "```json\n" + content + "\n```" if kind == "VALID" else content  # fenced replies are tolerated

    return reply


@pytest.fixture()
def server():
    srv = SimpleNamespace(counts={}, bodies=[], lock=threading.Lock())
    with serve_app(fake_chat_app(kinds_reply(srv), log=srv.bodies)) as url:
        srv.url = url
        yield srv


def _item(question: str) -> CriticInput:
    ps = [PassageRef(number=1, id="w1", title="Paris", text="Paris is the capital of France.")]
    return CriticInput(question=question, answer="Paris", cited=ps, passages=ps)


@pytest.mark.slow
def test_openai_judge_valid_invalid_slow_flaky_and_cache(server, tmp_path):
    cfg = CriticConfig(judge="openai", base_url=f"{server.url}/v1", model="m",
                       timeout_s=0.5, retries=1, backoff_s=0.01, concurrency=4, cache_dir=str(tmp_path / "c"))
    judge = make_judge(cfg)
    assert isinstance(judge, OpenAIJudge)
    kinds = ["VALID", "INVALID", "SLOW", "FLAKY", "NOTJSON"]
    out = judge.verify([_item(k) for k in kinds])
    res = dict(zip(kinds, out, strict=True))
    assert res["VALID"] == CriticOutput.model_validate(VALID)
    assert res["FLAKY"] == CriticOutput.model_validate(VALID)     # 503 then success: retried
    assert res["INVALID"] is None and res["NOTJSON"] is None      # schema violations: not retried
    assert res["SLOW"] is None                                     # timed out on every attempt
    assert judge.failures == 3
    assert server.counts == {"VALID": 1, "FLAKY": 2, "INVALID": 1, "NOTJSON": 1, "SLOW": 2}
    # the request asks for schema-bound JSON and shows the original passage text
    body = server.bodies[0]
    assert body["response_format"]["type"] == "json_schema"
    assert "Paris is the capital of France." in body["messages"][-1]["content"]
    assert body["model"] == "m" and body["temperature"] == 0.0

    # second judge, same cache: successes come from disk, failures are asked again
    judge2 = OpenAIJudge(cfg)
    again = judge2.verify([_item("VALID"), _item("FLAKY"), _item("INVALID")])
    assert again[0] == res["VALID"] and again[1] == res["FLAKY"] and again[2] is None
    assert server.counts["VALID"] == 1 and server.counts["FLAKY"] == 2 and server.counts["INVALID"] == 2
    assert judge2.cache_hits == 2
    # a different model is a different cache key
    assert judge2.cache_key([{"role": "user", "content": "x"}]) != OpenAIJudge(
        cfg.model_copy(update={"model": "other"})).cache_key([{"role": "user", "content": "x"}])


def test_openai_judge_unreachable_endpoint_returns_none():
    cfg = CriticConfig(judge="openai", base_url="http://127.0.0.1:9/v1", timeout_s=0.5, retries=1, backoff_s=0.01)
    judge = OpenAIJudge(cfg)
    assert judge.verify([_item("VALID")]) == [None]
    assert judge.failures == 1


def _hotpot_passages(example):
    return [PassageRef(number=i + 1, id=f"{example['_id']}:{title}", title=title, text="".join(sents))
            for i, (title, sents) in enumerate(example["context"])]


def test_lexical_judge_on_real_hotpotqa_passages():
    data = json.loads((shipped_data_dir() / "hotpotqa" / "hotpot_dev_distractor_v1.sample200.json").read_text())
    ex = data[0]  # "Rush": named in the Nobody's Hero and Neil Peart paragraphs
    ps = _hotpot_passages(ex)
    num = {p.title: p.number for p in ps}
    judge = LexicalJudge(CriticConfig())
    item = build_critic_input(ex["question"], ex["answer"], [num["Nobody's Hero"], num["Jeff Porcaro"]], ps)
    v = judge.verify([item])[0]
    assert [c.status for c in v.verified_claims] == ["grounded"]
    assert v.verified_claims[0].source_id == item.cited[0].id  # the cited supporting passage is preferred
    assert any("supports no claim" in f and "Jeff Porcaro" in f for f in v.flags)
    score = citation_reward(v, [num["Nobody's Hero"], num["Jeff Porcaro"]], ps)
    assert score.coverage == 1.0 and score.redundancy == 0.5

    # an answer from outside the passages is unsupported; citing nothing useful scores -1
    bad = build_critic_input(ex["question"], "Zanzibar Philharmonic", [1], ps)
    vb = judge.verify([bad])[0]
    assert [c.status for c in vb.verified_claims] == ["unsupported"]
    assert citation_reward(vb, [1], ps).reward == -1.0

    # a long answer is split into claims; one from each supporting paragraph
    long_answer = "Nobody's Hero is a song by Rush, and Neil Peart was inducted into the Modern Drummer Hall of Fame."
    claims = split_claims(long_answer)
    assert len(claims) == 2
    titles = {p.id: p.title for p in ps}
    cite = [num["Nobody's Hero"], num["Neil Peart"]]
    vl = judge.verify([build_critic_input(ex["question"], long_answer, cite, ps)])[0]
    assert [c.status for c in vl.verified_claims] == ["grounded", "grounded"]
    assert [titles[c.source_id] for c in vl.verified_claims] == ["Nobody's Hero", "Neil Peart"]
    assert not any("uncited" in f for f in vl.flags)
    assert citation_reward(vl, cite, ps).reward == 1.0
    # uncited: the best-overlapping passage wins (Mike Portnoy's paragraph names Peart's induction verbatim)
    vu = judge.verify([build_critic_input(ex["question"], long_answer, [], ps)])[0]
    assert [titles[c.source_id] for c in vu.verified_claims] == ["Nobody's Hero", "Mike Portnoy"]
    assert sum("uncited supporting passage" in f for f in vu.flags) == 2


def test_lexical_judge_inferred_and_conflicts():
    ps = [PassageRef(number=1, id="a", title="Film X", text="Film X was directed by Ann Lee."),
          PassageRef(number=2, id="b", title="Ann Lee", text="Ann Lee was born in Oslo in 1970."),
          PassageRef(number=3, id="c", title="Ann Lee bio", text="Ann Lee was born in Oslo in 1971.")]
    judge = LexicalJudge(CriticConfig(support_threshold=0.8))
    v = judge.verify_one(build_critic_input("q", "Film X director born Oslo", [1, 2], ps))
    assert v.verified_claims[0].status == "inferred"  # needs passages 1 and 2 together
    v2 = judge.verify_one(build_critic_input("q", "Ann Lee born in 1970", [2], ps))
    assert v2.verified_claims[0].status == "grounded"
    assert any("conflicting values" in f for f in v2.flags)
    assert split_claims("Simon and Garfunkel") == ["Simon and Garfunkel"]  # short answer: one claim


def test_make_judge_none_and_lexical():
    assert make_judge(CriticConfig(judge="none")) is None
    assert isinstance(make_judge(CriticConfig(judge="lexical")), LexicalJudge)


# ------------------------------------------------------------------------- lexical judge: issue 12 cases
ARTHUR = [PassageRef(number=1, id="am", title="Arthur's Magazine", text="Arthur's Magazine (1844-1846) was an "
                     "American literary periodical published in Philadelphia. In May 1846 it was merged into "
                     "\"Godey's Lady's Book\"."),
          PassageRef(number=2, id="ffw", title="First for Women", text="First for Women is a woman's magazine "
                     "published by Bauer Media Group in the USA. The magazine was started in 1989."),
          PassageRef(number=3, id="wd", title="Woman's Day", text="Woman's Day is an American women's magazine "
                     "that covers homemaking, food and health.")]


def _lex(question, answer, cites, ps):
    v = LexicalJudge(CriticConfig()).verify_one(build_critic_input(question, answer, cites, ps))
    return v, citation_reward(v, cites, ps)


def test_lexical_possessive_is_not_a_content_token():
    from awarl.critic.lexical_judge import content_tokens

    assert content_tokens("Arthur's Magazine") == {"arthur", "magazine"}
    q = "Which magazine was started first Arthur's Magazine or First for Women?"
    # citing only a magazine that merely contains "'s" and "magazine": unsupported, not 1.0 as before
    v, sc = _lex(q, "Arthur's Magazine", [3], ARTHUR)
    assert sc.reward == -1.0 and "[3] wd" in " ".join(v.flags)
    # the answer rests on both compared magazines' passages
    v, sc = _lex(q, "Arthur's Magazine", [1, 2], ARTHUR)
    assert v.verified_claims[0].source_ids == ["am", "ffw"] and sc.reward == 1.0
    assert _lex(q, "Arthur's Magazine", [1], ARTHUR)[1].reward == 0.5


def test_lexical_yes_no_is_grounded_only_when_each_entity_passage_states_the_predicate():
    """Issue 43: a yes/no answer was grounded (confidence 0.5) whenever both entities' passages were retrieved,
    whatever they said. "Are A and B both P?" answered yes is grounded when each entity's passage states P,
    else inferred (the judge cannot verify it); it never tells yes from no otherwise."""
    ex = next(e for e in load_shipped("hotpotqa") if e.question.startswith("Are Pothos"))
    ctx = {p.title: p.text for p in ex.context}
    ps = [PassageRef(number=i + 1, id=f"d{i}", title=t, text=ctx[t])
          for i, t in enumerate(["Pothos (genus)", "Tibouchina", "Zeltnera"])]
    assert ex.answers == ["yes"]  # both passages say "a genus of flowering plants" / "flowering plant genus"
    v, both = _lex(ex.question, "yes", [1, 2], ps)
    assert v.verified_claims[0].status == "grounded" and v.verified_claims[0].source_ids == ["d0", "d1"]
    assert both.reward == 1.0
    assert [ps[int(e.passage_id[1:])].text[e.start:e.end] for e in v.verified_claims[0].evidence] == [
        "Pothos is a genus of flowering plants in the Araceae family.",
        "Tibouchina Aubl. is a Neotropical flowering plant genus in Melastomataceae Juss. that contains "
        "approximately 240 species."]
    assert _lex(ex.question, "yes", [], ps)[1].reward == 0.0
    assert _lex(ex.question, "no", [1, 2], ps)[0].verified_claims[0].status == "inferred"  # cannot verify a no
    assert _lex(ex.question, "no", [3], ps)[1].reward == -1.0  # an unrelated passage supports nothing
    v, _ = _lex(ex.question, "yes", [3], ps[2:])
    assert v.verified_claims[0].status == "unsupported"  # neither entity retrieved
    # Bogosian's passage gives his name in Armenian; it does not state his descent: inferred, half the credit
    eve = next(e for e in load_shipped("hotpotqa") if e.question.startswith("Are Eve Beglarian"))
    ctx = {p.title: p.text for p in eve.context}
    ps = [PassageRef(number=i + 1, id=f"d{i}", title=t, text=ctx[t]) for i, t in enumerate(["Eve Beglarian",
                                                                                            "Zach Bogosian"])]
    v, sc = _lex(eve.question, "yes", [1, 2], ps)
    assert v.verified_claims[0].status == "inferred" and v.verified_claims[0].source_ids == ["d0", "d1"]
    assert sc.reward == 0.5


def test_lexical_two_hop_bridge_citation_is_not_redundant():
    ex = load_shipped("hotpotqa")[0]  # Rush: Nobody's Hero (answer) and Neil Peart (bridge, repeats "Rush")
    ctx = {p.title: p.text for p in ex.context}
    ps = [PassageRef(number=i + 1, id=f"d{i}", title=t, text=ctx[t])
          for i, t in enumerate(["Nobody's Hero", "Neil Peart", "Jeff Porcaro"])]
    v, sc = _lex(ex.question, "Rush", [1, 2], ps)
    assert sc.reward == 1.0 and sc.supporting == (1, 2)  # was 0.5: the bridge counted as redundant
    assert _lex(ex.question, "Rush", [1, 3], ps)[1].redundancy == 0.5  # Porcaro's passage supports nothing



def _shipped_passages(ex, titles):
    """Passages numbered 1.. from the shipped HotpotQA contexts (any question's), by title."""
    ctx = {p.title: p.text for e in load_shipped("hotpotqa") for p in e.context}
    return [PassageRef(number=i + 1, id=f"d{i}", title=t, text=ctx[t]) for i, t in enumerate(titles)]


def test_lexical_a_distractor_named_like_the_question_never_pays():
    # issue 22: every retrieved passage whose title the question named was a required joint source, so citing
    # a distractor raised r_cite. Rush: "Which Canadian rock band ..." named "Band (rock and pop)".
    rush = load_shipped("hotpotqa")[0]
    ps = _shipped_passages(rush, ["Nobody's Hero", "Neil Peart", "Band (rock and pop)"])
    two, three = (_lex(rush.question, "Rush", c, ps)[1].reward for c in ([1, 2], [1, 2, 3]))
    assert two >= three and (two, round(three, 2)) == (1.0, 0.67)  # was 0.67 vs 1.00
    assert _lex(rush.question, "Rush", [1, 3], ps)[1].reward < two  # was 1.00: the distractor stood in for [2]
    # a lower-cased question carries no capitals to tell a name by: every title it holds still counts
    assert "d2" in _lex(rush.question.lower(), "Rush", [1, 2], ps)[0].verified_claims[0].source_ids

    by_q = {e.question.split(",")[0]: e for e in load_shipped("hotpotqa")}
    # two passages whose titles match the same words are one entity: either may be cited, not both required
    opera = by_q["Which opera has more acts"]
    ps = _shipped_passages(opera, ["Parsifal", "Manon", "Manon (disambiguation)"])
    scores = {str(c): _lex(opera.question, "Parsifal", c, ps)[1].reward for c in ([1, 2], [1, 2, 3], [1])}
    assert scores == {"[1, 2]": 1.0, "[1, 2, 3]": 1.0 - 1 / 3, "[1]": 0.5}  # the comparison still needs both
    # a title matched only inside a longer matched title is part of that name
    berlioz = by_q["Which composer was a French Romantic composer in the 1800's"]
    ps = _shipped_passages(berlioz, ["Hector Berlioz", "Gaetano Donizetti", "Berlioz (disambiguation)"])
    v, sc = _lex(berlioz.question, berlioz.answers[0], [1, 2], ps)
    assert v.verified_claims[0].source_ids == ["d0", "d1"] and sc.reward == 1.0
    assert _lex(berlioz.question, berlioz.answers[0], [1, 2, 3], ps)[1].reward < sc.reward

# ------------------------------------------------------------- hardening against a fake endpoint (loopback)
def misbehaving_judge_app(srv: SimpleNamespace):  # noqa: ANN201 - an ASGI app
    """A bad judge endpoint; the path's first part names the case: trickle (headers, then a byte a second),
    huge (64 MB), busy (503 with Retry-After: 1 the first time), hang (no answer while `srv.hang`), anything
    else a valid verdict. `srv.seen[case]` gets the arrival time of each request."""
    from fastapi import FastAPI
    from fastapi.responses import Response, StreamingResponse

    app = FastAPI()

    @app.get("/{case}/v1/models")
    def models(case: str) -> dict:
        return {"data": [{"id": "m"}]}

    @app.post("/{case}/v1/chat/completions", response_model=None)
    async def chat(case: str, body: dict) -> Response | dict:
        with srv.lock:
            srv.seen.setdefault(case, []).append(time.monotonic())
            n = len(srv.seen[case])

        async def chunks(size: int, count: int, pause_s: float):  # noqa: ANN202
            for _ in range(count):
                if srv.closing:
                    return
                yield b" " * size
                await asyncio.sleep(pause_s)

        if case == "trickle":
            return StreamingResponse(chunks(1, 20, 1.0), headers={"Content-Length": "20"})
        if case == "huge":  # never needed whole
            return StreamingResponse(chunks(1 << 20, 64, 0.0), headers={"Content-Length": str(64 << 20)})
        if case == "busy" and n == 1:
            return Response(status_code=503, headers={"Retry-After": "1"})
        while case == "hang" and srv.hang and not srv.closing:
            await asyncio.sleep(0.05)
        return {"choices": [{"message": {"content": json.dumps(VALID)}}]}

    return app


@pytest.fixture()
def slow_server():
    srv = SimpleNamespace(seen={}, lock=threading.Lock(), hang=True, closing=False)
    with serve_app(misbehaving_judge_app(srv)) as url:
        srv.url = url
        yield srv
        srv.closing = True  # what still trickles or hangs ends now


def _judge(srv, case, **kw):
    return OpenAIJudge(CriticConfig(judge="openai", base_url=f"{srv.url}/{case}/v1",
                                    model="m", **{"retries": 0, "backoff_s": 0.01, **kw}))


@pytest.mark.slow
def test_one_deadline_per_request_and_streamed_size_cap(slow_server):
    judge = _judge(slow_server, "trickle", timeout_s=1.0)
    t0 = time.monotonic()
    assert judge.verify([_item("q")]) == [None]
    assert time.monotonic() - t0 < 3.0  # a per-read timeout would wait ~20 s for the trickle
    assert judge.failure_reasons == {"TimeoutError": 1}
    big = _judge(slow_server, "huge", timeout_s=30.0, max_response_bytes=1 << 20)
    assert big.verify([_item("q")]) == [None] and big.failure_reasons == {"JudgeResponseError": 1}


@pytest.mark.slow
def test_retry_after_is_honoured(slow_server):
    judge = _judge(slow_server, "busy", retries=2)
    assert judge.verify([_item("q")])[0] == CriticOutput.model_validate(VALID)
    first, second = slow_server.seen["busy"]
    assert second - first >= 0.95  # Retry-After: 1, not the 0.01 s backoff


def test_circuit_breaker_stops_calling_a_dead_endpoint_then_probes(slow_server):
    judge = _judge(slow_server, "hang", timeout_s=0.3, retries=2, concurrency=4, breaker_failures=3,
                   breaker_cooldown_s=0.5)
    items = [_item(f"q{i}") for i in range(20)]
    assert judge.verify(items) == [None] * 20 and judge.failures == 20
    # the first attempts in flight fail, the breaker opens, the rest are refused without a request:
    # 20 items x 3 attempts would have been 60 requests
    assert len(slow_server.seen["hang"]) <= 4 + 2 and judge.breaker.trips >= 1
    assert judge.failure_reasons["CircuitOpen"] >= 14
    slow_server.hang = False  # the endpoint comes back: after the cool-down one probe closes the breaker
    time.sleep(0.6)
    assert judge.verify([_item("again")])[0] is not None and not judge.breaker.is_open


def test_circuit_breaker_rule():
    from awarl.http import CircuitBreaker

    now = [0.0]
    b = CircuitBreaker(failures=2, cooldown_s=10, clock=lambda: now[0])
    assert b.allow()
    b.record(False)
    assert b.allow()
    b.record(False)  # second failure in a row: open
    assert not b.allow() and b.is_open and b.trips == 1 and b.refused == 1
    now[0] = 10.0
    assert b.allow() and not b.allow()  # half-open: one probe only
    b.record(False)  # the probe failed: open again for the cool-down
    assert not b.allow() and b.trips == 2
    now[0] = 20.0
    assert b.allow()
    b.record(True)
    assert b.allow() and b.allow() and not b.is_open
    assert CircuitBreaker(failures=0, cooldown_s=1).allow()


def test_endpoint_check_names_what_is_wrong(slow_server):
    from awarl.critic import JudgeUnavailable, check_endpoints

    dead = CriticConfig(judge="openai", base_url="http://127.0.0.1:9/v1", model="m")
    with pytest.raises(JudgeUnavailable, match=r"cannot reach critic.base_url=http://127.0.0.1:9/v1.*serve_judge.sh"):
        check_endpoints(dead, make_judge(dead))
    check_endpoints(dead.model_copy(update={"check_endpoint": False}), make_judge(dead))  # turned off
    check_endpoints(dead, make_judge(dead.model_copy(update={"judge": "gold"})))  # no endpoint needed
    up = dead.model_copy(update={"base_url": f"{slow_server.url}/ok/v1"})
    OpenAIJudge(up).check_reachable()  # serves "m"
    with pytest.raises(JudgeUnavailable, match=r"serves \['m'\], not critic.model='other'"):
        OpenAIJudge(up.model_copy(update={"model": "other"})).check_reachable()


def test_response_format_modes():
    from awarl.critic.openai_judge import build_messages
    from awarl.critic.schema import critic_output_json_schema

    msgs = build_messages(_item("q"))
    cfg = CriticConfig(judge="openai")
    body = OpenAIJudge(cfg).request_body(msgs, "critic_output", critic_output_json_schema())
    branches = body["response_format"]["json_schema"]["schema"]["properties"]["verified_claims"]["items"]["anyOf"]
    assert all(b["required"] == ["claim", "status", "source_ids", "confidence"] for b in branches)
    # a grounded claim names a passage: its branch alone requires one
    assert [(b["properties"]["status"]["enum"], b["properties"]["source_ids"].get("minItems")) for b in branches] == [
        (["grounded"], 1), (["inferred", "unsupported"], None)]
    assert OpenAIJudge(cfg.model_copy(update={"response_format": "json_object"})).request_body(
        msgs, "x", {})["response_format"] == {"type": "json_object"}
    plain = OpenAIJudge(cfg.model_copy(update={"response_format": "none"}))
    assert "response_format" not in plain.request_body(msgs, "x", {})
    assert '"source_ids"' in msgs[0]["content"]  # the schema is in the prompt for every mode
    assert plain.cache_key(msgs) != OpenAIJudge(cfg).cache_key(msgs)


# ----------------------------------------------------------------------------- the audit (awarl.critic.audit)
AUDIT_PASSAGES = [PassageRef(number=1, id="w1", title="Paris", text="Paris is the capital of France."),
                  PassageRef(number=2, id="w2", title="France", text="France is a country in Europe.")]


class _FixedJudge:
    """A judge that returns the given verdict (validated as a reply is) for every item."""

    name = "fixed"
    failures = 0

    def __init__(self, reply: dict) -> None:
        self.reply = reply

    def verify(self, items: list[CriticInput]) -> list[CriticOutput | None]:
        return [CriticOutput.model_validate(self.reply) for _ in items]


def _judged(reply: dict, citations: list[int] = (1,)):  # noqa: ANN202 - a CitationJudgement
    from awarl.rewards.citation import CitationItem, judge_citations

    passages = [p.model_dump() for p in AUDIT_PASSAGES]
    (j,) = judge_citations(_FixedJudge(reply), [CitationItem("What is the capital of France?", "Paris",
                                                             list(citations), passages, "correct")], 0.5)
    assert not j.failed, j.error
    return j


def _claim(status: str, ids: list[str], claim: str = "Paris", confidence: float = 1.0) -> dict:
    return {"claim": claim, "status": status, "source_ids": ids, "confidence": confidence}


def test_the_audit_flags_a_groundedness_given_for_no_claims():
    from awarl.critic.audit import disagrees

    j = _judged({"verified_claims": [], "overall_groundedness": 1.0, "flags": []})
    s = j.summary("fixed")
    assert s["groundedness"] == 0.0 and s["claims"] == 0
    assert disagrees(j.verdict) and s["judge_groundedness"] == 1.0
    assert any("reported overall_groundedness 1.00" in f and "0/0" in f for f in s["flags"])
    # a judge that says 0 of nothing agrees with the recount
    quiet = _judged({"verified_claims": [], "overall_groundedness": 0.0, "flags": []})
    assert not disagrees(quiet.verdict) and quiet.verdict.flags == []
    assert "judge_groundedness" not in quiet.summary("fixed")


def test_the_audit_counts_a_repeated_claim_once():
    # a weak judge repeats its one grounded claim: five copies beside one unsupported claim are two claims
    j = _judged({"verified_claims": [_claim("grounded", ["w1"])] * 5 + [_claim("unsupported", [], "Lyon")],
                 "overall_groundedness": 5 / 6, "flags": []})
    assert [(c.claim, c.status) for c in j.verdict.verified_claims] == [("Paris", "grounded"), ("Lyon", "unsupported")]
    assert j.score.coverage == 0.5 and j.verdict.overall_groundedness == 0.5
    assert any("5 times" in f for f in j.verdict.flags)
    # the same claim (same normalised text) with other labels: one claim, the first wording, the weakest
    # label with its copies' sources
    merged = _judged({"verified_claims": [_claim("grounded", ["w1"]), _claim("inferred", ["2"], " paris. "),
                                          _claim("unsupported", [], "Lyon")],
                      "overall_groundedness": 0.5, "flags": []}, citations=[1, 2])
    assert [(c.claim, c.status, c.source_ids) for c in merged.verdict.verified_claims] == [
        ("Paris", "inferred", ["w2"]), ("Lyon", "unsupported", [])]
    assert merged.score.coverage == pytest.approx(0.25)  # inferred (0.5) on cited sources, over 2 claims
    # a copy that names a passage never retrieved makes the claim unsupported however often it is repeated
    ghost = _judged({"verified_claims": [_claim("grounded", ["w1"]), _claim("grounded", ["w9"])],
                     "overall_groundedness": 1.0, "flags": []})
    assert [(c.status, c.source_ids) for c in ghost.verdict.verified_claims] == [("unsupported", [])]
    assert ghost.score.coverage == 0.0


def test_a_source_never_retrieved_makes_its_claim_unsupported():
    # the designed rule (docs/method.md "Critic"): a judge that invents a source cannot earn grounded for it,
    # even beside a real one
    j = _judged({"verified_claims": [_claim("grounded", ["w1", "w9"])], "overall_groundedness": 1.0, "flags": []})
    assert [(c.status, c.source_ids) for c in j.verdict.verified_claims] == [("unsupported", [])]
    assert j.score.coverage == 0.0 and j.score.reward == -1.0
    assert any("never retrieved" in f for f in j.verdict.flags)


def test_a_judge_cannot_set_reported_groundedness():
    from awarl.critic.audit import audit_verdict

    # an internal field (set by the audit): whatever a reply puts there neither fails the verdict nor survives
    for junk in ("n/a", "high", None, 3, -1, True, [0.5]):
        v = CriticOutput.model_validate({**VALID, "reported_groundedness": junk})
        assert v.reported_groundedness is None
    v = CriticOutput.model_validate({**VALID, "overall_groundedness": 1.0, "reported_groundedness": 0.2})
    item = build_critic_input("q", "Paris", [1], AUDIT_PASSAGES)
    assert audit_verdict(v, item).reported_groundedness == 1.0  # the judge's overall_groundedness, not 0.2
    j = _judged({**VALID, "verified_claims": [_claim("grounded", ["w1"])], "reported_groundedness": "n/a"})
    assert j.verdict.overall_groundedness == 1.0 and j.score.reward == 1.0


@pytest.mark.parametrize("answer", ["Paris…", "«Paris»", "Paris。", "„Paris“", "Paris‐", "¿Paris?", "『Paris』"])
def test_lexical_unicode_punctuation_is_punctuation(answer):
    from awarl.critic.lexical_judge import tokens
    from awarl.metrics import exact_match

    assert exact_match(answer, ["Paris"]) and tokens(answer) == ["paris"]
    paris = AUDIT_PASSAGES[:1]
    v = LexicalJudge(CriticConfig()).verify_one(build_critic_input("Which city is the seat of the French "
                                                                   "government?", answer, [1], paris))
    assert v.verified_claims[0].status == "grounded"
    assert citation_reward(v, [1], paris).reward == 1.0
    # and in the passage's text
    quoted = [PassageRef(number=1, id="w1", title="Capital", text=f"The seat of government is {answer} since 508.")]
    v = LexicalJudge(CriticConfig()).verify_one(build_critic_input("Which city is the seat of the French "
                                                                   "government?", "Paris", [1], quoted))
    assert v.verified_claims[0].status == "grounded"
    assert citation_reward(v, [1], quoted).reward == 1.0
