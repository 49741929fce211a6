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
    empty = tmp_path / "empty.jsonl"
    empty.write_text("not json\n")
    assert main(["score", str(empty)]) == 2
    assert "no scorable line" in capsys.readouterr().err
