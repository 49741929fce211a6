"""Citation and evidence metrics in the evaluation report: `awarl eval` on the shipped data (scripted turns
through the real loop and the real BM25 index) reports citation precision/recall against the gold evidence,
the evidence-retrieved share, and the lexical judge's agreement with the gold judge; `awarl score` of the
same predictions agrees; bad lines are named."""

from __future__ import annotations

import json

import pytest

from awarl.cli import main
from awarl.config import load_config
from awarl.data.evidence import gold_evidence
from awarl.data.loaders import load_shipped
from awarl.stages.predictions import read_done
from awarl.stages.score import score_predictions


def _plan(ex, retriever, queries):
    """The passages the scripted searches will show (numbered cumulatively) and which of them are gold."""
    ev = gold_evidence(ex)
    shown = [p for q in queries for p in retriever.search([q], 3)[0]]
    gold = [n for n, p in enumerate(shown, 1) if p.id in ev.passage_ids]
    return shown, gold, [n for n in range(1, len(shown) + 1) if n not in gold]


def test_eval_reports_citation_precision_recall_and_evidence_retrieved(tmp_path, tiny_dir, shipped_bm25_dir):
    from transformers import AutoTokenizer

    from awarl.retrieval import load_index

    retriever = load_index(shipped_bm25_dir)
    a, b = load_shipped("hotpotqa", limit=2, seed=6)
    m, m2 = load_shipped("musique", limit=2, seed=6)
    ta, tb = ([p.title for p in gold_evidence(ex).paragraphs] for ex in (a, b))
    shown_a, gold_a, _ = _plan(a, retriever, ta)
    shown_b, gold_b, other_b = _plan(b, retriever, tb[:1])
    shown_m, gold_m, _ = _plan(m, retriever, [m.question])
    # premises (checked, not assumed): a's searches find both gold paragraphs, b's one search finds one
    assert len({shown_a[n - 1].id for n in gold_a}) == 2 and len({shown_b[n - 1].id for n in gold_b}) == 1
    assert len({shown_m[n - 1].id for n in gold_m}) < len(gold_evidence(m).paragraphs)
    turns = {
        a.question: [*(f"<search> {t} </search>" for t in ta),  # cites its two gold passages: P 1, R 1
                     f"<cite> {', '.join(map(str, gold_a))} </cite> <answer> {a.answers[0]} </answer>"],
        b.question: [f"<search> {tb[0]} </search>",  # one gold passage and one other: P 1/2, R 1/2
                     f"<cite> {gold_b[0]}, {other_b[0]} </cite> <answer> {b.answers[0]} </answer>"],
        m.question: [f"<search> {m.question} </search>", "<answer> not enough information </answer>"],
        m2.question: ["<answer> not enough information </answer>"],  # abstains without searching
    }
    script = tmp_path / "script.jsonl"
    script.write_text("".join(json.dumps({"question": q, "turns": t}) + "\n" for q, t in turns.items()))
    over = ["generation.backend=scripted", f"generation.script={script}", "eval.limit=2", "run.seed=6",
            "metrics.bootstrap_samples=200", "agent.max_trajectory_tokens=8192", "eval.datasets=[hotpotqa, musique]"]
    from awarl.stages.evaluate import run_eval

    tok = AutoTokenizer.from_pretrained(tiny_dir)
    out = tmp_path / "gold"
    res = run_eval(load_config(None, over), out, model=str(tiny_dir), tokenizer=tok, retriever=retriever, limit=None)
    rows = read_done(out / "predictions.jsonl")
    assert [rows[f"hotpotqa/{ex.id}"]["outcome"] for ex in (a, b)] == ["correct", "correct"]
    hp = res["per_dataset"]["hotpotqa"]["evidence"]
    assert (hp["questions"], hp["answered"], hp["citing"]) == (2, 2, 2)
    assert hp["citation_precision"] == 0.75 and hp["citation_recall"] == 0.75
    assert hp["evidence_retrieved"] == 0.5 and (hp["reading_failures"], hp["retrieval_gaps"]) == (0, 0)
    lo, hi = hp["ci"]["citation_precision"]
    assert 0.5 <= lo <= 0.75 <= hi <= 1.0
    mu = res["per_dataset"]["musique"]["evidence"]
    assert mu["answered"] == 0 and mu["citation_precision"] is None and mu["evidence_retrieved"] == 0.0
    assert mu["retrieval_gaps"] == 2  # abstained, and their evidence was never all retrieved: coverage gaps
    macro = res["macro"]["evidence"]
    assert macro["evidence_retrieved"] == 0.25 and macro["citation_precision"] == 0.75
    assert macro["questions"] == 4 and "citation_precision" in macro["ci"]
    assert [g["evidence_retrieved"] for g in res["coverage_gaps"]] == [False, False]
    # the gold judge's verdicts (the default judge) are the same figures: r_cite = recall - (1 - precision)
    assert [rows[f"hotpotqa/{ex.id}"]["critic"]["reward"] for ex in (a, b)] == [1.0, 0.0]
    md = (out / "results.md").read_text()
    assert "## Citations and evidence (against the gold evidence)" in md
    assert "| hotpotqa | 2 | 0.500 [" in md and "(gold evidence not retrieved)" in md

    # `awarl score` reads the same lines and reports the same evidence figures
    assert main(["score", str(out / "predictions.jsonl"), "--out", str(tmp_path / "sc"),
                 "metrics.bootstrap_samples=200", "run.seed=6"]) == 0
    scored = json.loads((tmp_path / "sc" / "results.json").read_text())
    assert scored["per_dataset"]["hotpotqa"]["evidence"] == hp and scored["macro"]["evidence"] == macro

    # the same turns judged by the lexical judge: its agreement with the gold judge is reported
    lex = run_eval(load_config(None, [*over, "critic.judge=lexical"]), tmp_path / "lex", model=str(tiny_dir),
                   tokenizer=tok, retriever=retriever)
    agree = lex["per_dataset"]["hotpotqa"]["evidence"]["judge_agreement"]
    lex_rows = read_done(tmp_path / "lex" / "predictions.jsonl")
    assert agree["judge"] == "lexical" and agree["compared"] == 2 and agree["passages_compared"] == 2
    assert agree["r_cite_gold"] == pytest.approx(0.5)  # the gold run's mean r_cite
    assert agree["r_cite_judge"] == pytest.approx(sum(lex_rows[f"hotpotqa/{ex.id}"]["critic"]["reward"]
                                                      for ex in (a, b)) / 2)
    assert 0.0 <= agree["passage_agreement"] <= 1.0
    assert "Agreement of the run's citation judge with the gold judge" in (tmp_path / "lex" / "results.md").read_text()
    assert lex["per_dataset"]["hotpotqa"]["evidence"]["citation_precision"] == 0.75  # whatever the judge


def _line(i, citations, passages, evidence, outcome_answer="Paris", critic=None):
    return {"id": str(i), "dataset": "d", "question": "q?", "prediction": outcome_answer, "answers": ["Paris"],
            "gold_evidence": evidence, "critic": critic,
            "trajectory": {"searches": ["q"], "citations": citations,
                           "passages": [{"number": n, "id": pid, "title": t} for n, pid, t in passages]}}


def test_scorer_evidence_rules_on_hand_made_lines():
    ev = {"paragraphs": [{"title": "Paris", "passage_id": "p-00000000000000aa"},
                         {"title": "France", "passage_id": None}]}
    ps = [(1, "p-00000000000000aa", "Paris"), (2, "77", "France"), (3, "p-00000000000000bb", "Paris")]
    rows = [
        _line(0, [1, 2], ps, ev),  # both gold (by id; by title for the paragraph without text): P 1, R 1
        _line(1, [3, 9], ps, ev),  # same title, other closed id: not gold; [9] was never shown: P 0, R 0
        _line(2, [], ps[2:], ev, "London"),  # wrong, cites nothing, evidence not retrieved
        _line(3, [1], ps, {"paragraphs": []}),  # no evidence: left out
        _line(4, [1], ps, {"paragraphs": "oops"}),  # malformed: skipped and named
        _line(5, [1], ps, ev, critic={"judge": "gold", "skipped": "no gold evidence (critic.gold_fallback: none)"}),
    ]
    cfg = load_config(None, ["metrics.bootstrap_samples=0"]).metrics
    res = score_predictions(rows, cfg, ["not enough information"], source="p.jsonl")
    e = res["per_dataset"]["d"]["evidence"]
    assert (e["questions"], e["answered"], e["citing"]) == (4, 4, 3)
    assert e["citation_precision"] == pytest.approx((1 + 0 + 1) / 3)
    assert e["citation_recall"] == pytest.approx((1 + 0 + 0 + 0.5) / 4)
    assert e["evidence_retrieved"] == 0.75 and e["evidence_recall"] == pytest.approx((1 + 1 + 0 + 1) / 4)
    assert (e["reading_failures"], e["retrieval_gaps"]) == (0, 1)
    assert len(res["skipped_lines"]) == 1
    assert res["skipped_lines"][0].startswith("p.jsonl: row 4: key 'gold_evidence': gold_evidence: not a gold "
                                              "evidence object")
    assert res["per_dataset"]["d"]["critic"]["skipped"] == 1 and res["per_dataset"]["d"]["critic"]["judged"] == 0
    assert "judge_agreement" not in e  # no other judge's verdict to compare
    rows[0]["critic"] = {"judge": "lexical", "coverage": 0.5, "redundancy": 0.5, "reward": 0.0, "groundedness": 1.0,
                         "supporting": [1], "flags": []}
    rows[1]["critic"] = {"judge": "lexical", "coverage": 1.0, "redundancy": 0.0, "reward": 1.0, "groundedness": 1.0,
                         "flags": []}  # an older line without `supporting`: r_cite compared, passages not
    agree = score_predictions(rows, cfg, [])["per_dataset"]["d"]["evidence"]["judge_agreement"]
    assert (agree["compared"], agree["passages_compared"]) == (2, 1)
    assert agree["passage_agreement"] == 0.5  # [1]: both supporting; [2]: gold only
    assert agree["r_cite_abs_diff"] == pytest.approx((1.0 + 2.0) / 2)  # gold r_cite 1 and -1
