"""`awarl compare` and the paired bootstrap behind it."""

from __future__ import annotations

import json

import pytest

from awarl.metrics import Outcome, aggregate, paired_bootstrap_delta

C, W, A = Outcome.CORRECT, Outcome.WRONG, Outcome.ABSTAIN


def test_paired_delta_of_identical_runs_is_exactly_zero():
    runs = {"x": [C, W, A, C, W] * 4, "y": [A, C, W, W] * 5}
    d = paired_bootstrap_delta(runs, runs, "ra_f1", n=200, seed=1)
    assert d == {"delta": 0.0, "ci": [0.0, 0.0], "p_le_0": 1.0}


def test_paired_delta_point_value_and_interval():
    # b turns 6 of a's 20 wrong answers on x into abstentions: hand-computed from P, A, RA-F1 of each run
    a = {"x": [C] * 10 + [W] * 20}
    b = {"x": [C] * 10 + [W] * 14 + [A] * 6}
    d = paired_bootstrap_delta(a, b, "ra_f1", n=2000, seed=0)
    fa = aggregate(a["x"])["ra_f1"]
    p_b, acc_b = 10 / 24, 10 / 30
    assert fa == pytest.approx(2 * (1 / 3) * (1 / 3) / (2 / 3))
    assert d["delta"] == pytest.approx(2 * p_b * acc_b / (p_b + acc_b) - fa)
    lo, hi = d["ci"]
    assert 0 < lo < d["delta"] < hi  # every resample keeps b >= a: abstaining on wrong answers never hurts
    assert d["p_le_0"] < 0.05
    acc = paired_bootstrap_delta(a, b, "accuracy", n=500)
    assert acc["delta"] == 0.0 and acc["ci"] == [0.0, 0.0]  # accuracy is unchanged on every resample
    ab = paired_bootstrap_delta(a, b, "abstention_rate", n=500)
    assert ab["delta"] == pytest.approx(0.2)


def test_paired_delta_rejects_misaligned_runs():
    with pytest.raises(ValueError, match="same questions"):
        paired_bootstrap_delta({"x": [C, W]}, {"x": [C]}, "ra_f1")
    with pytest.raises(ValueError, match="same datasets"):
        paired_bootstrap_delta({"x": [C]}, {"y": [C]}, "ra_f1")
    with pytest.raises(ValueError, match="supports"):
        paired_bootstrap_delta({"x": [C]}, {"x": [C]}, "em")


def _row(ds, i, pred, gold="Paris"):
    return {"id": str(i), "dataset": ds, "question": f"q{i}?", "prediction": pred, "answers": [gold]}


def _write(path, rows, extra_lines=()):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "".join(extra_lines))
    return path


def test_cli_compares_on_shared_questions_with_overrides(tmp_path, capsys):
    from awarl.cli import main

    base = [_row("hotpotqa", 1, "Paris"), _row("hotpotqa", 2, "Lyon"), _row("hotpotqa", 3, "Paris France"),
            _row("musique", 1, "Paris"), _row("musique", 2, "Rome")]
    better = [_row("hotpotqa", 1, "Paris"), _row("hotpotqa", 2, "not enough information"),
              _row("hotpotqa", 3, "Paris France"), _row("musique", 1, "Paris"),
              _row("musique", 2, "not enough information"), _row("musique", 9, "Paris")]  # musique/9: only here
    _write(tmp_path / "base" / "predictions.jsonl", base)
    other = _write(tmp_path / "other.jsonl", better, extra_lines=["{broken\n"])
    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "base"), str(other), "--names", "base,abstainer", "--out", str(out),
                 "metrics.bootstrap_samples=300"]) == 0
    res = json.loads((out / "compare.json").read_text())
    assert res["common_questions"] == 5 and res["datasets"] == ["hotpotqa", "musique"]
    b, o = res["runs"]
    assert (o["questions"], o["not_shared"], len(o["skipped_lines"])) == (6, 1, 1)
    # EM: "Paris France" is wrong. base: hotpotqa 1C 2W -> P=A=1/3; musique 1C 1W -> P=A=1/2
    assert b["per_dataset"]["hotpotqa"]["ra_f1"] == pytest.approx(1 / 3)
    assert b["macro"]["ra_f1"] == pytest.approx((1 / 3 + 1 / 2) / 2)
    # abstainer: hotpotqa 1C 1W 1A -> P=1/2, A=1/3, RA-F1=0.4; musique 1C 1A -> P=1, A=1/2, RA-F1=2/3
    assert o["macro"]["ra_f1"] == pytest.approx((0.4 + 2 / 3) / 2)
    d = res["deltas"]["abstainer"]
    assert d["ra_f1"]["delta"] == pytest.approx(o["macro"]["ra_f1"] - b["macro"]["ra_f1"])
    assert d["accuracy"]["delta"] == 0.0 and len(d["ra_f1"]["ci"]) == 2
    md = (out / "compare.md").read_text()
    assert "| abstainer |" in md and "baseline" in md and "not in every run" in md
    assert (out / "compare.png").stat().st_size > 1000
    assert "abstainer" in capsys.readouterr().out

    # one rule for all runs: under cover_em "Paris France" becomes correct in both
    assert main(["compare", str(tmp_path / "base"), str(other), "--out", str(out),
                 "metrics.correctness=cover_em", "metrics.bootstrap_samples=0"]) == 0
    res = json.loads((out / "compare.json").read_text())
    assert res["runs"][0]["per_dataset"]["hotpotqa"]["accuracy"] == pytest.approx(2 / 3)
    assert res["deltas"]["other"]["ra_f1"]["ci"] is None  # no resamples asked


def test_cli_errors(tmp_path, capsys):
    from awarl.cli import main

    a = _write(tmp_path / "a.jsonl", [_row("hotpotqa", 1, "Paris")])
    b = _write(tmp_path / "b.jsonl", [_row("musique", 1, "Paris")])
    assert main(["compare", str(a), str(b), "--out", str(tmp_path / "o")]) == 2
    assert "share no" in capsys.readouterr().err
    assert main(["compare", str(a), str(tmp_path / "missing"), "--out", str(tmp_path / "o")]) == 2
    assert "no predictions at" in capsys.readouterr().err
    # a sweep's run folders have `=` in their names: a mistyped one is a missing run, not a config key
    typo = tmp_path / "sweep" / "gamma=0.2_expected_rate=posterior" / "eval" / "final"
    assert main(["compare", str(a), str(typo), "--out", str(tmp_path / "o")]) == 2
    assert f"no predictions at {typo}" in capsys.readouterr().err
    assert main(["compare", str(a), str(a), "--names", "x,x", "--out", str(tmp_path / "o")]) == 2
    assert "distinct names" in capsys.readouterr().err
    other_data = _write(tmp_path / "c.jsonl", [{**_row("hotpotqa", 1, "Paris"), "question": "another question?"}])
    assert main(["compare", str(a), str(other_data), "--out", str(tmp_path / "o")]) == 2
    assert "hotpotqa/1 (a: 'q1?'; c: 'another question?'): the runs were made on different data" in \
        capsys.readouterr().err


def test_score_and_compare_read_abstentions_with_the_templates_phrases_as_eval_does(tmp_path):
    """A template whose prompt teaches "I cannot answer": eval classified with it (template + configured
    phrases); `awarl score` and `awarl compare` read agent.abstention_phrases alone, so re-scoring a run under
    its own config scored those lines as wrong answers."""
    import yaml

    from awarl.agent.templates import load_template
    from awarl.config import load_config
    from awarl.stages.compare import run_outcomes
    from awarl.stages.score import score_file

    tpl = load_template("awarl").model_dump(mode="json")
    tpl.update(name="mytpl", abstention_phrases=["i cannot answer"])
    (tmp_path / "mytpl.yaml").write_text(yaml.safe_dump(tpl))
    cfg = load_config(None, [f"agent.template={tmp_path / 'mytpl.yaml'}", "metrics.bootstrap_samples=0"])
    pred = _write(tmp_path / "p.jsonl", [_row("a", 1, "I cannot answer."), _row("a", 2, "Paris")])
    per = score_file(pred, tmp_path / "out", cfg)["per_dataset"]["a"]
    assert (per["abstain"], per["wrong"], per["correct"]) == (1, 0, 1)
    outcomes, _, _ = run_outcomes(pred, cfg)
    assert outcomes[("a", "1")].value == "abstain"
