"""Gold supporting evidence (awarl.data.evidence) on the real shipped records of HotpotQA, 2WikiMultiHopQA,
MuSiQue and the Search-R1 parquet, matched by id in the shipped closed corpus and by title in wiki-18."""

from __future__ import annotations

import json
import re
import unicodedata

import pyarrow.parquet as pq
import pytest

from awarl.cli import main
from awarl.data import load_examples, load_shipped
from awarl.data.corpus import build_corpus, passage_contents, shipped_closed_corpus
from awarl.data.evidence import GoldEvidence, GoldParagraph, base_title_key, gold_evidence, title_key
from awarl.data.loaders import shipped_path
from awarl.data.types import Paragraph, QAExample
from awarl.io import shipped_data_dir
from awarl.retrieval.types import Passage


@pytest.fixture(scope="module")
def closed_ids(tmp_path_factory) -> set[str]:
    path = shipped_closed_corpus(tmp_path_factory.mktemp("closed") / "closed.jsonl")
    return {json.loads(line)["id"] for line in path.read_text().splitlines()}


def _distinct(items):
    return list(dict.fromkeys(items))


def test_hotpotqa_every_dev_record_yields_its_supporting_paragraphs(closed_ids):
    raw = json.loads(shipped_path("hotpotqa").read_text())
    exs = load_shipped("hotpotqa")
    for r, ex in zip(raw, exs, strict=True):
        ev = gold_evidence(ex)
        assert [p.title for p in ev.paragraphs] == _distinct(t for t, _ in r["supporting_facts"])
        ctx = dict((t, s) for t, s in r["context"])
        for p in ev.paragraphs:
            ids = [i for t, i in r["supporting_facts"] if t == p.title]
            assert list(p.sentence_ids) == ids
            assert list(p.sentences) == [ctx[p.title][i].strip() for i in ids if ctx[p.title][i].strip()]
            assert p.passage_id in closed_ids
        assert not ev.triples and not ev.hops
    ev = gold_evidence(exs[0])
    assert [p.sentences[0][:22] for p in ev.paragraphs] == ['"Nobody\'s Hero" is a s', "Peart has received num"]


def test_2wiki_supporting_paragraphs_and_evidence_triples(closed_ids):
    raw = json.loads(shipped_path("2wikimultihopqa").read_text())
    exs = load_shipped("2wikimultihopqa")
    linked = 0
    for r, ex in zip(raw, exs, strict=True):
        ev = gold_evidence(ex)
        assert [p.title for p in ev.paragraphs] == _distinct(t for t, _ in r["supporting_facts"])
        assert all(p.passage_id in closed_ids and p.sentences for p in ev.paragraphs)
        assert [[t.subject, t.relation, t.object] for t in ev.triples] == r["evidences"]
        gold_titles = {p.title for p in ev.paragraphs}
        for t in ev.triples:
            if t.subject in gold_titles:
                assert t.title == t.subject
            linked += t.title is not None
            assert t.title is None or t.title in gold_titles
    assert linked > 0.9 * sum(len(r["evidences"]) for r in raw)
    # a subject without its disambiguation parenthetical still finds its paragraph (one gold candidate)
    zone = next(gold_evidence(e) for e in exs if any(t.subject == "The Zone" for t in gold_evidence(e).triples))
    assert next(t for t in zone.triples if t.subject == "The Zone").title == "The Zone (2017 film)"
    # 2Wiki repeats some paragraphs verbatim in a context: never a duplicate gold paragraph
    assert all(len(gold_evidence(e).passage_ids) == len(gold_evidence(e).paragraphs) for e in exs)


def _hop_count(qid: str) -> int:
    return int(re.match(r"(\d)hop", qid).group(1))


def test_musique_supporting_paragraphs_match_the_hop_count(closed_ids):
    exs = load_shipped("musique")
    shared_title = 0
    for ex in exs:
        ev = gold_evidence(ex)
        n = _hop_count(ex.id)
        assert len(ev.paragraphs) == n == len(ev.hops) == len(ev.passage_ids)
        assert ev.passage_ids <= closed_ids
        assert {h.passage_id for h in ev.hops} == ev.passage_ids  # each hop rests on its own paragraph
        assert all(not re.search(r"#\d", h.question) and h.answer for h in ev.hops)
        assert ev.hops[-1].answer == ex.answers[0]
        assert all(p.sentence_ids == () for p in ev.paragraphs)
        if len(ev.title_keys) < len(ev.paragraphs):
            shared_title += 1  # two supporting paragraphs of one article: a title matches both
            key = next(k for k in ev.title_keys if sum(p.title_key == k for p in ev.paragraphs) == 2)
            assert len(ev.match_title(key)) == 2
    assert shared_title > 0
    ex = next(e for e in exs if e.id.startswith("4hop3"))
    assert gold_evidence(ex).hops[1].question == "What city was Papa Roach formed in?"


def test_searchr1_hotpotqa_rows_carry_their_evidence():
    table = pq.read_table(shipped_path("searchr1-train")).to_pylist()
    exs = load_examples(shipped_path("searchr1-train")).examples
    ids = {r["id"] for r in build_corpus(exs)}
    n_hot = 0
    for row, ex in zip(table, exs, strict=True):
        ev = gold_evidence(ex)
        if row["data_source"] == "nq":
            assert ev == GoldEvidence()
            continue
        n_hot += 1
        sf = row["metadata"]["supporting_facts"]
        ctx = dict(zip(row["metadata"]["context"]["title"], row["metadata"]["context"]["sentences"], strict=True))
        assert [p.title for p in ev.paragraphs] == _distinct(sf["title"])
        for p in ev.paragraphs:
            want = [i for t, i in zip(sf["title"], sf["sent_id"], strict=True) if t == p.title]
            assert list(p.sentence_ids) == want and p.passage_id in ids
            assert list(p.sentences) == [ctx[p.title][i].strip() for i in want if i < len(ctx[p.title])]
    assert n_hot == 256


def test_unified_jsonl_round_trips_the_evidence(tmp_path):
    for name in ("hotpotqa", "2wikimultihopqa", "musique", "searchr1-train"):
        out = tmp_path / f"{name}.jsonl"
        assert main(["data", "prepare", str(shipped_path(name)), "--out", str(out)]) == 0
        back = load_examples(out).examples
        direct = load_examples(shipped_path(name)).examples
        evs = [gold_evidence(e) for e in back]
        assert evs == [gold_evidence(e) for e in direct]
        assert sum(bool(ev.paragraphs) for ev in evs) >= len(back) // 2
        # and as plain JSON, e.g. on a predictions line or a training row
        assert [GoldEvidence.from_dict(json.loads(json.dumps(ev.to_dict()))) for ev in evs] == evs


def test_title_key_matches_wiki18_titles_however_they_are_quoted():
    rows = [json.loads(line) for line in (shipped_data_dir() / "wiki18" / "wiki18_sample1000.jsonl").open()]
    for r in rows:
        first_line = r["contents"].partition("\n")[0]
        assert title_key(first_line) == title_key(Passage.from_contents(r["id"], r["contents"]).title)
    wiki_keys = {title_key(r["contents"].partition("\n")[0]) for r in rows}
    # a MuSiQue paragraph and a wiki-18 passage of the same article (both real)
    reg = next(p for e in load_shipped("musique") for p in e.context if p.title.startswith("26th (Cameronian)"))
    assert title_key(reg.title) in wiki_keys
    # gold titles written as wiki-18 rows come back to the same key, quotes and all
    for ex in load_shipped("hotpotqa"):
        for p in gold_evidence(ex).paragraphs:
            assert title_key(passage_contents(p.title, p.text).partition("\n")[0]) == p.title_key


def test_a_title_that_starts_or_ends_with_a_quote_keeps_its_own_quotes():
    """Every double quote at either end was stripped, not the one pair a corpus wraps a title in: the song
    `"Heroes"` came back as `Heroes` (the TV series' title) and `"Weird Al" Yankovic` as `Weird Al" Yankovic`,
    the titles the agent is shown."""
    for title in ('"Heroes"', '"Weird Al" Yankovic', 'Heroes', 'The "Best" of'):
        p = Passage.from_contents("1", passage_contents(title, "text"))
        assert (p.title, p.text) == (title, "text")
    # the matching key stays symmetric: a title and the corpus line that quotes it again are one article
    assert title_key('""Heroes""') == title_key('"Heroes"')


def test_title_key_rule():
    assert title_key("Nobody’s Hero") == title_key("Nobody's Hero") == title_key('"nobody\'s hero"')
    assert title_key("Neil_Peart") == title_key("Neil  Peart ") == "neil peart"
    assert title_key("AT&amp;T Corp.") == title_key("AT&T Corp.")
    assert title_key(unicodedata.normalize("NFD", "Pál Gábor")) == title_key("Pál Gábor")
    assert title_key('""Weird Al" Yankovic"') == title_key('"Weird Al" Yankovic')  # wiki-18's quoting
    # disambiguation parentheses distinguish articles
    assert title_key("Rush (band)") != title_key("Rush") and base_title_key("Rush (band)") == "rush"
    assert title_key("Mountrail County") != title_key("Mountrail County Courthouse")


def test_match_by_id_and_loose_title_rules():
    film = GoldParagraph("The Zone (2017 film)", "p-1", "The Zone is a 2017 film.")
    ev = GoldEvidence(paragraphs=(film, GoldParagraph("Denys Desjardins", "p-2", "A director.")))
    assert ev.match_id("p-2").title == "Denys Desjardins" and ev.match_id("p-9") is None
    assert ev.match_title("the zone (2017 film)") == (film,)
    assert ev.match_title("The Zone") == () and ev.match_title("The Zone", loose=True) == (film,)
    assert ev.match_title("The Zone (1995 film)", loose=True) == ()  # another article
    two = GoldEvidence(paragraphs=(film, GoldParagraph("The Zone (album)", "p-3", "An album.")))
    assert two.match_title("The Zone", loose=True) == ()  # ambiguous: no match


def test_a_record_without_context_text_is_still_matchable_by_title():
    ex = QAExample(id="x", dataset="hotpotqa", question="q?", answers=["a"],
                   supporting_facts=[("Neil Peart", 1), ("Neil Peart", 0), ("Rush (band)", 0)],
                   context=[Paragraph("Neil Peart", "He drums. He writes.", True, [0, 10])])
    ev = gold_evidence(ex)
    peart, rush = ev.paragraphs
    assert peart.sentence_ids == (1, 0) and peart.sentences == ("He writes.", "He drums.")
    assert rush.passage_id is None and rush.text == "" and ev.match_title("Rush_(band)") == (rush,)
    assert ev.passage_ids == {peart.passage_id}
