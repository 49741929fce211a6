"""The gold-evidence judge on real records of HotpotQA, 2WikiMultiHopQA and MuSiQue: closed-corpus passages
matched by id, real wiki-18 passages matched by title; multi-hop citations scored through the one citation
path (`judge_citations`); a scripted LLM judge behind a real HTTP server on loopback scores a two-hop
citation the same way; data without evidence goes to the fallback, counted."""

from __future__ import annotations

import json

import pytest
from conftest import chat_answer, fake_chat_app, serve_app

from awarl.config import CriticConfig
from awarl.critic import GoldJudge, LexicalJudge, OpenAIJudge, make_judge
from awarl.critic.gold_judge import compact_evidence, evidence_from, gold_matches
from awarl.critic.schema import critic_output_json_schema
from awarl.data import load_examples, load_shipped
from awarl.data.corpus import build_corpus
from awarl.data.evidence import GoldEvidence, gold_evidence
from awarl.data.loaders import shipped_path
from awarl.io import shipped_data_dir
from awarl.retrieval.types import Passage
from awarl.rewards.citation import CitationItem, judge_citations


def _closed_passages(ex, corpus_ids):
    """The example's context paragraphs as rows of the shipped closed corpus (id and contents), gold first."""
    ev = gold_evidence(ex)
    by_id = {r["id"]: r for r in build_corpus([ex])}
    assert set(by_id) <= corpus_ids
    gold = [pid for pid in (p.passage_id for p in ev.paragraphs) if pid]
    order = gold + [pid for pid in sorted(by_id) if pid not in gold]
    return [Passage.from_contents(pid, by_id[pid]["contents"]) for pid in order]


def _rollout(passages):
    return [{"number": i + 1, "id": p.id, "title": p.title, "text": p.text} for i, p in enumerate(passages)]


def _score(judge, ex, passages, cites, answer=None):
    item = CitationItem(ex.question, answer or ex.answers[0], cites, _rollout(passages), "correct", gold_evidence(ex))
    (res,) = judge_citations(judge, [item], 0.5)
    return res


@pytest.fixture(scope="module")
def corpus_ids():
    return {r["id"] for name in ("hotpotqa", "2wikimultihopqa", "musique") for r in build_corpus(load_shipped(name))}


@pytest.mark.parametrize("name", ["hotpotqa", "2wikimultihopqa", "musique"])
def test_gold_judge_on_closed_corpus_records(name, corpus_ids):
    judge = make_judge(CriticConfig(judge="gold"))
    assert isinstance(judge, GoldJudge)
    for ex in load_shipped(name, limit=12, seed=0):
        ev = gold_evidence(ex)
        n = len(ev.paragraphs)
        ps = _closed_passages(ex, corpus_ids)
        distractor = n + 1  # passage numbers are 1-based: gold paragraphs are 1..n
        every = _score(judge, ex, ps, list(range(1, n + 1)))
        assert [c.status for c in every.verdict.verified_claims] == ["grounded"] * n
        assert every.score.reward == 1.0 and every.score.supporting == tuple(range(1, n + 1))
        assert every.verdict.overall_groundedness == 1.0
        one = _score(judge, ex, ps, [1])
        assert one.score.coverage == pytest.approx(1 / n) and one.score.redundancy == 0.0
        assert sum(f.startswith("uncited gold passage") for f in one.verdict.flags) == n - 1
        assert every.score.reward > one.score.reward  # citing every hop beats citing one
        wrong = _score(judge, ex, ps, [1, distractor])
        assert wrong.score.coverage == pytest.approx(1 / n) and wrong.score.redundancy == 0.5
        assert any(f.startswith(f"cited passage [{distractor}]") and "not gold" in f for f in wrong.verdict.flags)
        # the evidence never retrieved: unsupported facts, groundedness 0, no credit
        none = _score(judge, ex, ps[n:], [1])
        assert {c.status for c in none.verdict.verified_claims} == {"unsupported"}
        assert (none.verdict.overall_groundedness, none.score.reward) == (0.0, -1.0)


def test_gold_claims_are_the_datasets_facts():
    hop = next(e for e in load_shipped("musique") if e.id.startswith("4hop3"))
    v = GoldJudge().verify([_item(hop, [])])[0]
    # MuSiQue: one claim per hop (paragraph order), worded as the hop's sub-question and answer
    assert len(v.verified_claims) == 4
    assert sum("What city was Papa Roach formed in?" in c.claim for c in v.verified_claims) == 1
    wiki = load_shipped("2wikimultihopqa")[0]
    claims = [c.claim for c in GoldJudge().verify([_item(wiki, [])])[0].verified_claims]
    assert claims[0].startswith("Forbidden Ground: Forbidden Ground director")  # 2Wiki: the triples
    rush = load_shipped("hotpotqa")[0]
    claims = [c.claim for c in GoldJudge().verify([_item(rush, [])])[0].verified_claims]
    assert claims[0].startswith("Nobody's Hero: \"Nobody's Hero\" is a song")  # HotpotQA: the sentences


def _item(ex, cites, passages=()):
    from awarl.rewards.citation import build_critic_input, passages_from_rollout

    return build_critic_input(ex.question, ex.answers[0], cites, passages_from_rollout(_rollout(passages)),
                              gold_evidence(ex))


def _wiki18_chunks(title, text, first_id, words=100):
    """A gold paragraph as wiki-18 stores an article: 100-word chunks, numeric ids, `"Title"\\ntext` rows."""
    from awarl.data.corpus import passage_contents

    toks = text.split()
    return [Passage.from_contents(str(first_id + i), passage_contents(title, " ".join(toks[j:j + words])))
            for i, j in enumerate(range(0, len(toks), words))]


def test_gold_judge_matches_wiki18_passages_by_title():
    """wiki-18 passages (numeric ids, quoted title lines) match gold paragraphs by normalised title: every
    chunk of a gold article; real wiki-18 chunks of an article that is not gold evidence are flagged."""
    judge = GoldJudge()
    for name in ("hotpotqa", "2wikimultihopqa", "musique"):
        for ex in load_shipped(name, limit=8, seed=1):
            ev = gold_evidence(ex)
            texts = {p.title: p.text for p in ex.context}
            chunks = {p.title: _wiki18_chunks(p.title.replace("'", "’"), texts[p.title], 1000 * (k + 1))
                      for k, p in enumerate(ev.paragraphs)}  # curly apostrophes, as some dumps write them
            ps = [c for cs in chunks.values() for c in cs]
            firsts = [ps.index(cs[0]) + 1 for cs in chunks.values()]
            res = _score(judge, ex, ps, firsts)
            assert res.score.reward == 1.0, (ex.id, res.verdict.flags)
            assert all(k in gold_matches(ev, c.id, c.title) for k, p in enumerate(ev.paragraphs)
                       for c in chunks[p.title])
            if len(chunks) > 1:
                half = _score(judge, ex, ps, firsts[:1])
                assert half.score.coverage < 1.0 and half.score.redundancy == 0.0
    rows = [json.loads(line) for line in (shipped_data_dir() / "wiki18" / "wiki18_sample1000.jsonl").open()]
    ex = next(e for e in load_shipped("musique") if e.id == "2hop__799936_20273")
    regiment = [Passage.from_contents(r["id"], r["contents"]) for r in rows
                if r["contents"].startswith('"26th (Cameronian) Regiment of Foot"')]
    assert len(regiment) == 5 and not any(p.title == regiment[0].title for p in gold_evidence(ex).paragraphs)
    res = _score(judge, ex, regiment, [1, 2])
    assert res.score.redundancy == 1.0 and sum("is not gold evidence" in f for f in res.verdict.flags) == 2


def test_closed_corpus_ids_and_titles_of_twin_paragraphs():
    # MuSiQue: two supporting paragraphs of one article. By closed-corpus id, citing one grounds one fact;
    # a wiki-18-style passage of that article (any chunk) grounds both.
    ex = next(e for e in load_shipped("musique") if len(gold_evidence(e).title_keys) < len(gold_evidence(e).paragraphs))
    ev = gold_evidence(ex)
    twins = [k for k, p in enumerate(ev.paragraphs)
             if sum(q.title_key == p.title_key for q in ev.paragraphs) == 2]
    pid = ev.paragraphs[twins[0]].passage_id
    assert gold_matches(ev, pid, ev.paragraphs[twins[0]].title) == (twins[0],)
    assert gold_matches(ev, "12345", ev.paragraphs[twins[0]].title) == tuple(twins)
    assert gold_matches(ev, "p-0000000000000000", ev.paragraphs[twins[0]].title) == ()


def test_data_without_evidence_goes_to_the_fallback_counted():
    exs = load_examples(shipped_path("searchr1-train")).examples
    nq = next(e for e in exs if not gold_evidence(e).paragraphs)
    hot = next(e for e in exs if gold_evidence(e).paragraphs)
    ps = [Passage("w1", "Some Title", f"The answer is {nq.answers[0]}.")]
    items = [CitationItem(ex.question, ex.answers[0], [1], _rollout(ps), "correct", gold_evidence(ex) or None)
             for ex in (nq, hot)]
    judge = make_judge(CriticConfig(judge="gold"))
    got = judge_citations(judge, items, 0.5)
    # lexical: the passage holds the answer but states none of the question's relation: inferred, half the credit
    assert got[0].judge == "lexical" and got[0].fallback and got[0].score.reward == 0.5
    assert got[0].verdict.verified_claims[0].status == "inferred"
    assert got[1].judge is None and not got[1].fallback and got[1].score.reward == -1.0  # gold: w1 is not gold
    assert judge.fallbacks == 1
    assert got[0].summary("gold")["judge"] == "lexical" and got[0].summary("gold")["fallback"] is True
    # gold_fallback: none -> not judged, not a failure
    strict = make_judge(CriticConfig(judge="gold", gold_fallback="none"))
    got = judge_citations(strict, items, 0.5)
    assert got[0].skipped and not got[0].failed and got[0].score is None
    assert got[0].summary("gold") == {"judge": "gold", "skipped": "no gold evidence (critic.gold_fallback: none)"}
    assert got[1].score.reward == -1.0


def test_compact_evidence_round_trips_as_json_and_bad_values_are_named():
    ev = gold_evidence(load_shipped("hotpotqa")[0])
    small = compact_evidence(ev)
    assert all(p["text"] == "" for p in small["paragraphs"])
    back = evidence_from(json.dumps(small))
    assert [(p.title, p.passage_id, p.sentences) for p in back.paragraphs] == \
        [(p.title, p.passage_id, p.sentences) for p in ev.paragraphs]
    assert evidence_from(None) is None and evidence_from(compact_evidence(GoldEvidence())) is None
    with pytest.raises(ValueError, match="row 3: not JSON"):
        evidence_from("{oops", where="row 3")
    with pytest.raises(ValueError, match="row 4: not a gold evidence object"):
        evidence_from({"paragraphs": [{"passage_id": "x"}]}, where="row 4")


# ----------------------------------------------------------------- a scripted LLM judge over real HTTP
def _hop_judge_app(log: list[dict]):
    """Stands in for an LLM that follows the prompt: one claim per hop, each grounded in the passage whose
    title the script names (the rule replaces the model, which cannot run here)."""

    def reply(body: dict) -> dict:
        user = body["messages"][-1]["content"]
        ids = {p["title"]: p["id"] for p in json.loads(user)["passages"]}  # the user message is one JSON object
        claims = [{"claim": "Nobody's Hero is a song by Rush", "status": "grounded",
                   "source_ids": [ids["Nobody's Hero"]], "confidence": 0.9},
                  {"claim": "Neil Peart, Rush's drummer, is in the Modern Drummer Hall of Fame", "status": "grounded",
                   "source_ids": [ids["Neil Peart"]], "confidence": 0.9}]
        verdict = {"verified_claims": claims, "overall_groundedness": 1.0, "flags": []}
        return chat_answer(json.dumps(verdict), usage={"prompt_tokens": 900, "completion_tokens": 120,
                                                       "total_tokens": 1020})

    return fake_chat_app(reply, models=["judge-m"], log=log)


def test_two_hop_citing_both_passages_beats_one_under_gold_and_scripted_llm_judge(corpus_ids, tmp_path):
    rush = load_shipped("hotpotqa")[0]
    ps = _closed_passages(rush, corpus_ids)  # [1] Nobody's Hero, [2] Neil Peart (gold), then distractors
    assert [p.title for p in ps[:2]] == ["Nobody's Hero", "Neil Peart"]
    gold = GoldJudge()
    assert _score(gold, rush, ps, [1, 2]).score.reward == 1.0 > _score(gold, rush, ps, [1]).score.reward == 0.5
    log: list[dict] = []
    with serve_app(_hop_judge_app(log)) as url:
        cfg = CriticConfig(judge="openai", base_url=f"{url}/v1", model="judge-m", retries=0,
                           cache_dir=str(tmp_path / "cache"))
        llm = make_judge(cfg)
        llm.check_reachable()
        both, one = _score(llm, rush, ps, [1, 2]), _score(llm, rush, ps, [1])
        assert both.score.reward == 1.0 > one.score.reward == 0.5
        assert llm.usage()["prompt_tokens"] == 1800 and llm.usage()["requests"] == 2
        # the request asks for JSON constrained to the critic's schema, and carries no gold evidence
        rf = log[0]["response_format"]
        assert rf["type"] == "json_schema" and rf["json_schema"]["schema"] == critic_output_json_schema()
        assert rf["json_schema"]["strict"] is True and "source_ids" in json.dumps(rf)
        assert "one claim per fact" in log[0]["messages"][0]["content"]
        assert "supporting_facts" not in json.dumps(log[0]) and "Neil Peart" in log[0]["messages"][1]["content"]
        llm.close()
    assert isinstance(make_judge(CriticConfig(judge="lexical")), LexicalJudge)
    assert isinstance(llm, OpenAIJudge)


def test_passage_ids_with_surrounding_whitespace_name_their_passages(corpus_ids):
    # issue 22: a retriever, a data file or an LLM judge that writes " p-…\n" still names the passage; before,
    # the gold judge gave coverage 0 (reward -1) and the lexical judge failed with a KeyError
    from awarl.critic.schema import CriticOutput
    from awarl.rewards.citation import citation_reward, passages_from_rollout

    ex = load_shipped("hotpotqa")[0]
    ev = gold_evidence(ex)
    ps = [Passage(f" {p.id}\n", p.title, p.text) for p in _closed_passages(ex, corpus_ids)[:3]]
    for judge in (make_judge(CriticConfig(judge="gold")), LexicalJudge(CriticConfig())):
        res = _score(judge, ex, ps, [1, 2], answer="Rush")
        assert not res.failed and (res.score.coverage, res.score.reward) == (1.0, 1.0), judge.name
    # gold evidence read back from JSON with padded ids matches by id as well
    padded = ev.to_dict()
    for p in padded["paragraphs"]:
        p["passage_id"] = f"\t{p['passage_id']} "
    item = CitationItem(ex.question, "Rush", [1, 2], _rollout(ps), "correct", GoldEvidence.from_dict(padded))
    (res,) = judge_citations(make_judge(CriticConfig(judge="gold")), [item], 0.5)
    assert res.score.reward == 1.0 and ev.match_id(f" {ev.paragraphs[0].passage_id}") == ev.paragraphs[0]
    # a judge's source ids padded differently from the passages' still resolve
    refs = passages_from_rollout(_rollout(ps))
    verdict = CriticOutput.model_validate({"verified_claims": [
        {"claim": "Rush", "status": "grounded", "source_ids": [f"{refs[0].id}  ", f"\n{refs[1].id}"],
         "confidence": 1}], "overall_groundedness": 1, "flags": []})
    assert citation_reward(verdict, [1, 2], refs).reward == 1.0
