"""reward.p_definition: the estimate file's counts give p_i as correct / K (SPEC) or correct / answered, read at
training time; `awarl estimate`'s summary reports both."""

from __future__ import annotations

import json

import pytest

from awarl.config import load_config
from awarl.data.estimates import estimate_row, estimates_summary, join_p, read_estimates, row_p
from awarl.data.types import QAExample, example_key
from awarl.io import repo_root
from awarl.stages.train import training_rows


def ex(i: str, ds: str = "nq") -> QAExample:
    return QAExample(id=i, dataset=ds, question=f"q{i}?", answers=["a"])


def test_row_stores_both_definitions_from_its_counts():
    row = estimate_row(ex("1"), ["correct", "abstain", "abstain", "wrong", "invalid", "abstain", "correct", "abstain"])
    assert row["p_i"] == 0.25 and row["p_answered"] == 0.5  # 2 of 8; 2 of the 4 answered (invalid counts)
    assert row_p(row, "share_of_k") == 0.25 and row_p(row, "among_answered") == 0.5
    shy = estimate_row(ex("2"), ["abstain"] * 4)
    assert shy["p_i"] == 0.0 and shy["p_answered"] is None
    assert row_p(shy, "among_answered") == 0.0  # never answered: keeps its share of K
    with pytest.raises(ValueError, match="outcome counts"):
        row_p({"qid": "3", "dataset": "nq", "p_i": 0.5}, "among_answered")
    est = {example_key("nq", "1"): row, example_key("nq", "2"): shy}
    assert join_p([ex("1"), ex("2"), ex("9")], est, "among_answered") == ([0.5, 0.0, None], 1)
    assert join_p([ex("1"), ex("2")], est) == ([0.25, 0.0], 0)


def test_summary_reports_both_definitions_and_the_abstention_share():
    rows = {"a": estimate_row(ex("a"), ["correct", "abstain", "abstain", "wrong"]),
            "b": estimate_row(ex("b"), ["abstain"] * 4)}
    text = estimates_summary(rows)
    assert text.startswith("2 questions, mean p_i 0.125;")  # (0.25 + 0) / 2
    assert "mean p_i among answered 0.250" in text  # (0.5 + 0) / 2
    assert "abstained in 75.0% of the samples, on every sample of 1 question(s)" in text


def test_training_rows_use_the_configured_definition(tmp_path):
    exs = [ex("1"), ex("2")]
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(estimate_row(e, outs)) + "\n" for e, outs in
                            zip(exs, [["correct", "abstain", "abstain", "abstain"], ["wrong", "correct"]], strict=True)))
    assert len(read_estimates(path)) == 2
    for definition, expected in (("share_of_k", [0.25, 0.5]), ("among_answered", [1.0, 0.5])):
        cfg = load_config(repo_root() / "configs" / "base.yaml",
                          [f"train.p_estimates={path}", f"reward.p_definition={definition}"])
        rows, info = training_rows(cfg, examples=exs)
        assert [r["p_i"] for r in rows] == expected and info["with_p"] == 2
