"""Scoring a predictions file: outcomes per dataset, macro, CIs, coverage gaps, bad lines, report files."""

from __future__ import annotations

import json

import pytest

from awarl.cli import main
from awarl.config import MetricsConfig, load_config
from awarl.io import repo_root
from awarl.metrics import ra_f1
from awarl.report import print_results_table, results_markdown, write_report
from awarl.stages.score import score_file, score_predictions

PHRASES = ["not enough information"]
SAMPLE = repo_root() / "examples" / "predictions.sample.jsonl"


def _row(i, ds, pred, answers=None, **extra):
    return {"id": f"{ds}-{i}", "dataset": ds, "question": f"question {i}?", "prediction": pred,
            "answers": ["Paris"] if answers is None else answers, **extra}


def _rows():
    return [
        _row(1, "a", "Paris"),
        _row(2, "a", "the paris!"),
        _row(3, "a", "Lyon"),
        _row(4, "a", "Not enough information.", trajectory={"searches": ["capital of France", "France"]}),
        _row(5, "b", "Paris"),
        _row(6, "b", None, valid=False),
        _row(7, "b", "not enough information"),
        _row(8, "b", "Paris", valid=False),
    ]


def test_score_predictions_hand_computed():
    res = score_predictions(_rows(), MetricsConfig(bootstrap_samples=200), PHRASES, seed=0)
    a, b = res["per_dataset"]["a"], res["per_dataset"]["b"]
    assert (a["correct"], a["wrong"], a["abstain"], a["invalid"]) == (2, 1, 1, 0)
    assert (b["correct"], b["wrong"], b["abstain"], b["invalid"]) == (1, 0, 1, 2)
    assert a["precision"] == pytest.approx(2 / 3) and a["accuracy"] == pytest.approx(0.5)
    assert b["precision"] == pytest.approx(1 / 3) and b["accuracy"] == pytest.approx(0.25)
    ra_a, ra_b = ra_f1(2 / 3, 0.5), ra_f1(1 / 3, 0.25)
    assert res["macro"]["ra_f1"] == pytest.approx((ra_a + ra_b) / 2)
    assert res["overall"]["precision"] == pytest.approx(3 / 6) and res["n"] == 8
    # EM is about the answer text: the invalid row 8 still says "Paris"
    assert b["em"] == pytest.approx(2 / 4)
    for m in (a, b, res["macro"]):
        lo, hi = m["ci"]["ra_f1"]
        assert lo <= m["ra_f1"] <= hi
    assert set(a["ci"]) >= {"precision", "accuracy", "ra_f1", "em", "f1"}
    gaps = res["coverage_gaps"]
    assert [(g["dataset"], g["id"]) for g in gaps] == [("a", "a-4"), ("b", "b-7")]
    assert gaps[0]["searches"] == ["capital of France", "France"] and gaps[1]["searches"] == []
    assert gaps[0]["question"] == "question 4?"
    assert res["skipped_lines"] == []
    assert res["config"]["correctness"] == "em"


def test_correctness_modes_change_outcomes():
    rows = [_row(1, "a", "Barack Obama", answers=["Barack Hussein Obama"]),
            _row(2, "a", "the former president Barack Hussein Obama of USA", answers=["Barack Hussein Obama"],
                 judge_correct=False)]
    em = score_predictions(rows, MetricsConfig(bootstrap_samples=0), PHRASES)
    f1 = score_predictions(rows, MetricsConfig(correctness="f1", f1_threshold=0.8, bootstrap_samples=0), PHRASES)
    cov = score_predictions(rows, MetricsConfig(correctness="cover_em", bootstrap_samples=0), PHRASES)
    assert em["per_dataset"]["a"]["correct"] == 0
    assert f1["per_dataset"]["a"]["correct"] == 1  # F1 0.8 and 3/7 precision -> 0.6
    assert cov["per_dataset"]["a"]["correct"] == 1
    assert em["per_dataset"]["a"]["ci"] == {} and em["macro"]["ci"] == {}
    judge = score_predictions(rows, MetricsConfig(correctness="judge", bootstrap_samples=0), PHRASES)
    assert judge["n"] == 1 and judge["per_dataset"]["a"]["correct"] == 0
    assert "judge_correct" in judge["skipped_lines"][0] and "row 0" in judge["skipped_lines"][0]


def test_bad_rows_are_skipped_with_reasons():
    rows = _rows()[:3] + [
        {"id": "x", "dataset": "a", "question": "q"},  # no prediction / answers
        _row(9, "a", 42),
        _row(10, "a", "Paris", answers="Paris"),
        _row(11, "a", "Paris", valid="yes"),
        _row(1, "a", "Lyon"),  # duplicate id
        "not an object",
    ]
    res = score_predictions(rows, MetricsConfig(bootstrap_samples=0), PHRASES, source="p.jsonl",
                            line_numbers=list(range(1, len(rows) + 1)))
    assert res["n"] == 3
    msgs = res["skipped_lines"]
    assert len(msgs) == 6
    assert msgs[0].startswith("p.jsonl:4:") and "'prediction'" in msgs[0] and "'answers'" in msgs[0]
    assert msgs[1].startswith("p.jsonl:5:") and "prediction" in msgs[1]
    assert "answers" in msgs[2] and "valid" in msgs[3]
    assert "duplicate id 'a-1'" in msgs[4] and "p.jsonl:1" in msgs[4]
    assert msgs[5].startswith("p.jsonl:9:")


def test_no_rows_scores_to_empty_results():
    res = score_predictions([], MetricsConfig(), PHRASES)
    assert res["n"] == 0 and res["per_dataset"] == {} and res["coverage_gaps"] == []
    md = results_markdown(res)
    assert "## Coverage gaps\n\nnone" in md


def test_score_file_with_malformed_line_writes_report(tmp_path):
    lines = [json.dumps(r) for r in _rows()]
    lines.insert(2, '{"id": "broken", "dataset": "a", ')
    pred = tmp_path / "preds.jsonl"
    pred.write_text("\n".join(lines) + "\n")
    cfg = load_config(None, ["metrics.bootstrap_samples=100"])
    res = score_file(pred, None, cfg)  # default out dir: next to the predictions
    assert res["n"] == 8
    assert len(res["skipped_lines"]) == 1 and f"{pred}:3:" in res["skipped_lines"][0]
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["per_dataset"]["a"]["correct"] == 2 and saved["coverage_gaps"] == res["coverage_gaps"]
    assert set(saved) >= {"per_dataset", "macro", "overall", "n", "config", "coverage_gaps", "skipped_lines"}
    md = (tmp_path / "results.md").read_text()
    assert "| a |" in md and "| macro |" in md and "## Coverage gaps" in md
    assert "`capital of France`" in md and f"{pred}:3:" in md
    assert (tmp_path / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_write_report_and_rich_table(tmp_path):
    from rich.console import Console

    res = score_predictions(_rows(), MetricsConfig(bootstrap_samples=50), PHRASES)
    paths = write_report(res, tmp_path / "out")
    assert {k: p.name for k, p in paths.items()} == {"json": "results.json", "md": "results.md",
                                                     "png": "results.png"}
    console = Console(record=True, width=100)
    print_results_table(res, console=console)
    text = console.export_text()
    assert "macro" in text and "2/1/1/0" in text and "coverage gaps: 2" in text


def test_shipped_example_predictions_cover_every_outcome():
    res = score_predictions([json.loads(x) for x in SAMPLE.read_text().splitlines()],
                            MetricsConfig(bootstrap_samples=0), PHRASES)
    assert set(res["per_dataset"]) == {"hotpotqa", "2wikimultihopqa", "musique"}
    ov = res["overall"]
    assert ov["correct"] > 0 and ov["wrong"] > 0 and ov["abstain"] > 0 and ov["invalid"] == 1
    assert res["skipped_lines"] == [] and len(res["coverage_gaps"]) == ov["abstain"]
    assert all(g["searches"] for g in res["coverage_gaps"])


def test_cli_score_end_to_end(tmp_path, capsys):
    out = tmp_path / "report"
    # overrides follow the positional file (argparse cannot take positionals after an option)
    assert main(["score", str(SAMPLE), "metrics.bootstrap_samples=100", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "RA-F1" in printed and "macro" in printed and "coverage gaps" in printed
    saved = json.loads((out / "results.json").read_text())
    assert saved["config"]["bootstrap_samples"] == 100 and saved["n"] == 36
    assert sorted(saved["per_dataset"]) == ["2wikimultihopqa", "hotpotqa", "musique"]
    assert (out / "results.png").is_file() and (out / "results.md").is_file()
    # an unknown override key is a config error naming the key
    assert main(["score", str(SAMPLE), "metrics.bogus=1", "--out", str(out)]) == 2
    assert "metrics.bogus" in capsys.readouterr().err
    # nothing scorable: an error naming the file and the first bad line, and the earlier report is kept
    before = (out / "results.json").read_text()
    empty = tmp_path / "empty.jsonl"
    empty.write_text("not json\n")
    assert main(["score", str(empty), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{empty}: no scorable line (1 line(s) skipped; first: {empty}:1: malformed JSON" in err
    assert (out / "results.json").read_text() == before
    blank = tmp_path / "blank.jsonl"
    blank.write_text("")
    assert main(["score", str(blank)]) == 2
    assert "no scorable line (the file has no lines)" in capsys.readouterr().err
    assert not (tmp_path / "results.json").exists()


def _critic(cov, red, grounded, flags=()):
    return {"judge": "lexical", "coverage": cov, "redundancy": red, "reward": cov - red,
            "groundedness": grounded, "claims": 1, "flags": list(flags)}


def test_critic_verdicts_averaged_per_dataset_and_macro():
    rows = _rows()
    rows[0]["critic"] = _critic(1.0, 0.5, 1.0, ["cited passage [2] supports no claim"])  # a: correct
    rows[1]["critic"] = {"judge": "lexical", "failed": True, "error": "timeout"}         # a: correct, failed
    rows[2]["critic"] = _critic(0.0, 1.0, 0.0)                                          # a: wrong
    rows[3]["critic"] = _critic(1.0, 1.0, 1.0)  # a: abstention -> a stray verdict is ignored
    rows[4]["critic"] = _critic(0.5, 0.0, 0.5)                                          # b: correct
    rows[5]["critic"] = None                                                            # b: invalid
    res = score_predictions(rows, MetricsConfig(bootstrap_samples=0), PHRASES)
    a, b = res["per_dataset"]["a"]["critic"], res["per_dataset"]["b"]["critic"]
    assert (a["judged"], a["failures"], a["flagged"]) == (2, 1, 1)
    assert a["coverage"] == 0.5 and a["redundancy"] == 0.75 and a["groundedness"] == 0.5
    assert a["reward"] == -0.25
    assert (b["judged"], b["failures"], b["coverage"], b["redundancy"], b["groundedness"]) == (1, 0, 0.5, 0.0, 0.5)
    macro = res["macro"]["critic"]
    assert (macro["judged"], macro["failures"], macro["datasets_judged"]) == (3, 1, 2)
    assert macro["coverage"] == pytest.approx(0.5) and macro["redundancy"] == pytest.approx(0.375)
    assert macro["groundedness"] == pytest.approx(0.5) and macro["reward"] == pytest.approx(0.125)
    assert res["overall"]["critic"]["coverage"] == pytest.approx(0.5)  # pooled: (1 + 0 + 0.5) / 3
    md = results_markdown(res)
    assert "## Citation critic" in md and "| a | 2 | 1 | 0.500 | 0.750 | -0.250 | 0.500 | 1 |" in md
    # the outcome metrics do not depend on the critic fields
    plain = score_predictions(_rows(), MetricsConfig(bootstrap_samples=0), PHRASES)
    for ds in ("a", "b"):
        with_critic = dict(res["per_dataset"][ds])
        with_critic.pop("critic")
        assert with_critic == plain["per_dataset"][ds]


def test_critic_gate_turns_poorly_grounded_answers_into_abstentions():
    rows = _rows()
    rows[0]["critic"] = _critic(1.0, 0.0, 1.0)                                  # a: correct, grounded: kept
    rows[1]["critic"] = _critic(0.0, 1.0, 0.2)                                  # a: correct, ungrounded: gated
    rows[2]["critic"] = _critic(0.5, 0.0, 0.5)                                  # a: wrong, below 0.6: gated
    rows[4]["critic"] = {"judge": "lexical", "failed": True, "error": "timeout"}  # b: correct, no verdict: kept
    res = score_predictions(rows, MetricsConfig(bootstrap_samples=0, critic_gate=0.6), PHRASES)
    a, b = res["per_dataset"]["a"], res["per_dataset"]["b"]
    # a: 1 correct, 3 abstain (one abstained itself) -> P = 1, A = 1/4
    assert (a["correct"], a["wrong"], a["abstain"], a["gated"]) == (1, 0, 3, 2)
    assert a["precision"] == 1.0 and a["accuracy"] == 0.25 and a["ra_f1"] == pytest.approx(ra_f1(1.0, 0.25))
    assert a["em"] == 0.25  # a gated answer's text is not scored as an answer
    assert (b["correct"], b["gated"]) == (1, 0)
    gated = {g["id"] for g in res["coverage_gaps"] if g.get("gated")}
    assert gated == {"a-2", "a-3"} and res["config"]["critic_gate"] == 0.6
    md = results_markdown(res)
    assert "Critic gate 0.6: 2 answer(s)" in md and "`a-2` *gated*" in md
    # gate 0 never fires; no gate: no `gated` key and the plain figures
    assert score_predictions(rows, MetricsConfig(bootstrap_samples=0, critic_gate=0.0), PHRASES)[
        "per_dataset"]["a"]["gated"] == 0
    assert "gated" not in score_predictions(rows, MetricsConfig(bootstrap_samples=0), PHRASES)["per_dataset"]["a"]
    # a verdict the gold judge skipped (no gold evidence, gold_fallback none) is no verdict either: kept
    # (before: KeyError 'groundedness' out of score and compare)
    rows[4]["critic"] = {"judge": "gold", "skipped": "no gold evidence (critic.gold_fallback: none)"}
    res = score_predictions(rows, MetricsConfig(bootstrap_samples=0, critic_gate=0.6), PHRASES)
    assert (res["per_dataset"]["b"]["correct"], res["per_dataset"]["b"]["gated"]) == (1, 0)


def test_predictions_without_critic_score_exactly_as_before():
    plain = score_predictions(_rows(), MetricsConfig(bootstrap_samples=20), PHRASES)
    nulls = score_predictions([{**r, "critic": None} for r in _rows()], MetricsConfig(bootstrap_samples=20), PHRASES)
    assert plain == nulls
    assert "critic" not in plain["macro"] and "critic" not in plain["overall"]
    assert all("critic" not in m for m in plain["per_dataset"].values())
    assert "Citation critic" not in results_markdown(plain)


@pytest.mark.parametrize("critic, reason", [
    ("good", "key 'critic': expected an object"),
    ({"coverage": 1.0, "redundancy": 0.0}, "missing 'groundedness'"),
    ({"coverage": 1.5, "redundancy": 0.0, "groundedness": 1.0}, "critic.coverage"),
    ({"coverage": 1.0, "redundancy": 0.0, "groundedness": True}, "critic.groundedness"),
    ({"coverage": 1.0, "redundancy": 0.0, "groundedness": 1.0, "flags": "x"}, "critic.flags"),
])
def test_malformed_critic_field_skips_the_line_with_its_reason(critic, reason):
    rows = [_row(1, "a", "Paris", critic=critic), _row(2, "a", "Paris")]
    res = score_predictions(rows, MetricsConfig(bootstrap_samples=0), PHRASES, source="p.jsonl",
                            line_numbers=[1, 2])
    assert res["n"] == 1 and len(res["skipped_lines"]) == 1
    assert res["skipped_lines"][0].startswith("p.jsonl:1:") and reason in res["skipped_lines"][0]


def test_judge_correctness_needs_no_verdict_for_abstentions_or_blank_answers():
    rows = [_row(1, "a", "Paris", judge_correct=True),
            _row(2, "a", "Not enough information."),  # abstention: no verdict needed
            _row(3, "a", "   "),                      # blank: invalid, no verdict needed
            _row(4, "a", "Lyon")]                     # a real answer without a verdict: skipped
    res = score_predictions(rows, MetricsConfig(correctness="judge", bootstrap_samples=0), PHRASES)
    m = res["per_dataset"]["a"]
    assert (m["n"], m["correct"], m["abstain"], m["invalid"]) == (3, 1, 1, 1)
    assert len(res["skipped_lines"]) == 1 and "row 3" in res["skipped_lines"][0]
    assert [g["id"] for g in res["coverage_gaps"]] == ["a-2"]


def test_score_file_survives_non_utf8_and_bom(tmp_path):
    good = [json.dumps(r).encode() for r in _rows()]
    pred = tmp_path / "preds.jsonl"
    # a BOM before the first line (files saved on Windows) and one line in Latin-1 (not UTF-8)
    bad = json.dumps(_row(99, "a", "Paris")).replace("question 99?", "caf\u00e9?").encode("latin-1")
    pred.write_bytes(b"\xef\xbb\xbf" + b"\n".join(good[:4] + [bad] + good[4:]) + b"\n")
    res = score_file(pred, tmp_path / "out", load_config(None, ["metrics.bootstrap_samples=0"]))
    assert res["n"] == 8  # the BOM line is read, the Latin-1 line is skipped
    assert len(res["skipped_lines"]) == 1 and res["skipped_lines"][0].startswith(f"{pred}:5:")
    assert "utf-8" in res["skipped_lines"][0]
    assert json.loads((tmp_path / "out" / "results.json").read_text())["coverage_gaps"] == res["coverage_gaps"]


def test_the_macro_evidence_interval_resamples_each_dataset_on_its_own_draws():
    """Two datasets of 20 lines with complementary retrieved/missed patterns: each resample of one is the
    other's mirror only if both are resampled at the same indices, which one seed per dataset did (the macro
    interval was [0.5, 0.5]). Independent draws give the spread of two independent means."""
    def ev(title: str) -> dict:
        return {"paragraphs": [{"title": title, "passage_id": None, "sentence_ids": [], "sentences": []}],
                "triples": [], "hops": []}

    def row(i: int, ds: str, retrieved: bool) -> dict:
        passages = [{"number": 1, "id": "w1", "title": "Gold" if retrieved else "Other"}]
        return {"id": i, "dataset": ds, "question": "q", "prediction": "Paris", "answers": ["Paris"],
                "gold_evidence": ev("Gold"), "trajectory": {"passages": passages, "citations": [1], "searches": []}}

    rows = [row(i, "a", i % 2 == 0) for i in range(20)] + [row(i, "b", i % 2 == 1) for i in range(20)]
    res = score_predictions(rows, MetricsConfig(bootstrap_samples=1000), PHRASES)
    lo, hi = res["macro"]["evidence"]["ci"]["evidence_retrieved"]
    assert res["macro"]["evidence"]["evidence_retrieved"] == 0.5
    assert lo < 0.42 and hi > 0.58  # the sd of a mean of two independent 20-line means of p=0.5 is ~0.079
    again = score_predictions(rows, MetricsConfig(bootstrap_samples=1000), PHRASES)
    assert again["macro"]["evidence"]["ci"] == res["macro"]["evidence"]["ci"]  # still seeded
