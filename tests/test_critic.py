"""Critic judges: schema, the OpenAI-compatible judge against a real local HTTP server, the lexical judge on
real HotpotQA passages, and make_judge."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pydantic import ValidationError

from awarl.config import CriticConfig
from awarl.critic import make_judge
from awarl.critic.lexical_judge import LexicalJudge, split_claims
from awarl.critic.openai_judge import OpenAIJudge
from awarl.critic.schema import ClaimVerification, CriticInput, CriticOutput, PassageRef
from awarl.io import shipped_data_dir
from awarl.rewards.citation import build_critic_input, citation_reward


def test_schema_rules():
    with pytest.raises(ValidationError, match="source_id"):
        ClaimVerification(claim="x", status="grounded", confidence=0.5)
    with pytest.raises(ValidationError):
        ClaimVerification(claim="x", status="inferred", confidence=1.5)
    with pytest.raises(ValidationError):
        ClaimVerification(claim="x", status="maybe", confidence=0.5)
    ok = ClaimVerification(claim="x", status="unsupported", confidence=0.0)
    assert ok.source_id is None


VALID = {"verified_claims": [{"claim": "Paris", "status": "grounded", "source_id": "w1", "confidence": 0.9}],
         "overall_groundedness": 1.0, "flags": []}
INVALID = {"verified_claims": [{"claim": "Paris", "status": "grounded", "source_id": None, "confidence": 0.9}],
           "overall_groundedness": 1.0, "flags": []}


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep test output clean
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        user = body["messages"][-1]["content"]
        kind = user.split("QUESTION:\n", 1)[1].split("\n", 1)[0]
        srv = self.server
        with srv.lock:
            srv.counts[kind] = srv.counts.get(kind, 0) + 1
            srv.bodies.append(body)
            n = srv.counts[kind]
        if kind == "SLOW":
            time.sleep(1.5)
        if kind == "FLAKY" and n == 1:
            self.send_response(503)
            self.end_headers()
            return
        content = {"VALID": json.dumps(VALID), "FLAKY": json.dumps(VALID), "SLOW": json.dumps(VALID),
                   "INVALID": json.dumps(INVALID), "NOTJSON": "I think the answer is grounded."}[kind]
        if kind == "VALID":
            content = "```json\n" + content + "\n```"  # fenced replies are tolerated
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the SLOW client gave up (timeout): exactly what this case tests


@pytest.fixture()
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.counts, srv.bodies, srv.lock = {}, [], threading.Lock()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _item(question: str) -> CriticInput:
    ps = [PassageRef(number=1, id="w1", title="Paris", text="Paris is the capital of France.")]
    return CriticInput(question=question, answer="Paris", cited=ps, passages=ps)


def test_openai_judge_valid_invalid_slow_flaky_and_cache(server, tmp_path):
    cfg = CriticConfig(judge="openai", base_url=f"http://127.0.0.1:{server.server_port}/v1", model="m",
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
