"""scripts/real_model_study.py (issue 42): the split made before any run, the claims' decision rules, and the
whole study's code path at test size (the tiny model, 2 steps, 3 runs: a real adapter, estimate, evaluation and
`awarl train` processes), which must never write into docs/."""

from __future__ import annotations

import json

import pytest
from conftest import load_script

from awarl.data.types import example_key
from awarl.io import repo_root


def _study():
    return load_script("real_model_study")


def test_the_split_is_fixed_disjoint_and_holds_150_evaluation_questions_of_every_dataset():
    S = _study()
    split = S.split_questions(S.EVAL_PER_DATASET, S.WARMUP_PER_DATASET)
    assert {k: len(v) for k, v in split.items()} == {"eval": 150, "warmup": 120, "pool": 294}
    keys = {k: {example_key(e.dataset, e.id) for e in v} for k, v in split.items()}
    assert not (keys["eval"] & keys["warmup"]) and not (keys["eval"] & keys["pool"]) and not (keys["warmup"] & keys["pool"])
    assert {e.dataset for e in split["eval"]} == {"hotpotqa", "2wikimultihopqa", "musique"}
    again = S.split_questions(S.EVAL_PER_DATASET, S.WARMUP_PER_DATASET)
    assert [e.id for e in again["eval"]] == [e.id for e in split["eval"]]


def _rec(abst: float = 0.0, curves: list | None = None) -> dict:
    return {"macro": {"abstention_rate": abst}, "curves": curves or []}


def _delta(lo: float, hi: float, d: float = 0.0) -> dict:
    return {"delta": d, "ci": [lo, hi], "p_le_0": 0.5}


@pytest.mark.parametrize(("ci", "precision", "verdict"), [
    ((0.01, 0.05), 0.02, "holds"), ((0.01, 0.05), -0.01, "cannot be told apart from noise"),
    ((-0.05, -0.01), 0.02, "does not hold"), ((-0.03, 0.04), 0.05, "cannot be told apart from noise")])
def test_claim_1_reads_the_pooled_interval(ci, precision, verdict):
    S = _study()
    d = {"awarl vs plain, seeds 0-1 pooled": {"ra_f1": _delta(*ci), "precision": _delta(0, 0, precision),
                                              "accuracy": _delta(0, 0), "abstention_rate": _delta(0, 0)}}
    (c1,) = S.claims({}, d)
    assert c1["verdict"] == verdict and c1["detectable"] == pytest.approx((ci[1] - ci[0]) / 2)


@pytest.mark.parametrize(("ev", "tr", "verdict"), [(0.95, 0.97, "holds"), (0.95, 0.4, "partly"),
                                                    (0.2, 0.3, "does not hold")])
def test_claim_2_needs_both_the_evaluation_and_the_late_training_refusal(ev, tr, verdict):
    S = _study()
    curves = [{"step": i, "awarl/share_abstain": tr} for i in range(30)]
    (c2,) = S.claims({"static-s0": _rec(ev, curves)}, {})
    assert c2["verdict"] == verdict and c2["train_refusal_last10"] == pytest.approx(tr)


def test_claim_3_orders_refusal_by_gamma_in_training_and_evaluation():
    S = _study()
    low = _rec(0.2, [{"step": i, "awarl/share_abstain": 0.2} for i in range(30)])
    high = _rec(0.5, [{"step": i, "awarl/share_abstain": 0.6} for i in range(30)])
    recs = {"awarl-s0": low, "awarl-g0.25-s0": high}
    (c3,) = S.claims(recs, {"awarl-g0.25-s0 vs awarl-s0": {"abstention_rate": _delta(0.1, 0.4, 0.3)}})
    assert c3["verdict"] == "holds"
    (c3,) = S.claims({"awarl-s0": high, "awarl-g0.25-s0": low},
                     {"awarl-g0.25-s0 vs awarl-s0": {"abstention_rate": _delta(-0.4, -0.1, -0.3)}})
    assert c3["verdict"] == "does not hold"


def test_moving_mean_keeps_length_and_skips_missing_values():
    S = _study()
    assert S.moving_mean([1.0, None, 3.0], 5) == [2.0, 2.0, 2.0]
    assert S.moving_mean([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], 3) == [0.5, 1.0, 2.0, 3.0, 4.0, 4.5]


@pytest.mark.slow
def test_the_study_runs_end_to_end_at_test_size_and_keeps_out_of_docs(tmp_path):
    S = _study()
    args = ["--out", str(tmp_path / "w"), "--model", "tiny", "--eval-per-dataset", "2", "--warmup-per-dataset", "2",
            "--pool-per-dataset", "3", "--adapter-steps", "2", "--steps", "2", "--runs", "plain-s0,awarl-s0,static-s0"]
    with pytest.raises(SystemExit):  # never into docs/ unless it is the protocol's study
        S.main([*args, "--results", str(repo_root() / "docs" / "real_model_study_test")])
    assert S.main([*args, "--results", str(tmp_path / "r")]) == 0
    study = json.loads((tmp_path / "r" / "study.json").read_text())
    assert study["protocol"] is False and study["split"] == {"eval": 6, "warmup": 6, "pool": 9}
    assert set(study["runs"]) == {"warm", "plain-s0", "awarl-s0", "static-s0"}
    for name in ("plain-s0", "awarl-s0", "static-s0"):
        rec = study["runs"][name]
        assert [c["step"] for c in rec["curves"]] == [1, 2] and rec["n"] == 6
        assert (tmp_path / "r" / "runs" / f"{name}.json").exists()  # written as the run finished
    assert study["runs"]["static-s0"]["reward"]["strategy"] == "static"
    assert "awarl-s0 vs plain-s0" in study["deltas"] and (tmp_path / "r" / "curves.png").exists()
    assert [c["claim"][:2] for c in study["claims"]] == ["C2"]
    report = load_script("real_model_study_report")
    tables = "\n".join(report.runs_table(study) + report.deltas_table(study) + report.claims_lines(study))
    assert "| static-s0 | static, seed 0 |" in tables and "| awarl-s0 vs plain-s0 |" in tables and "C2:" in tables
    # a rerun resumes: every stage is kept, nothing trains again
    assert S.main([*args, "--results", str(tmp_path / "r")]) == 0
    assert not list((tmp_path / "w" / "runs" / "plain-s0").glob("checkpoint-3"))


def test_the_hours_of_cpu_behind_a_stage_travel_with_the_results_to_a_fresh_work_folder(tmp_path):
    """The adapter, p_i and the warm checkpoint's evaluation are kept under RESULTS/stages (committed), so a later
    session on another machine restores them instead of redoing them; a test-size study keeps nothing there."""
    S = _study()
    first = S.Study(tmp_path / "a", tmp_path / "r", S.MODEL, S.default_sizes(), S.RUNS, 2, {})
    assert first.protocol
    for rel in S.Study.STAGE_FILES:
        (first.out / rel).parent.mkdir(parents=True, exist_ok=True)
        (first.out / rel).write_text(rel)
    first.persist_stages()
    fresh = S.Study(tmp_path / "b", tmp_path / "r", S.MODEL, S.default_sizes(), S.RUNS, 2, {})
    fresh.restore_stages()
    assert all((fresh.out / rel).read_text() == rel for rel in S.Study.STAGE_FILES)
    # an interrupted estimate's partial p_i file, kept by hand, resumes in the fresh folder and its longer
    # successor replaces it in RESULTS (a copy only where missing kept the partial one for good)
    (tmp_path / "r" / "stages" / "p_estimates.jsonl").write_text('{"id": "q1"}\n')
    (fresh.out / "p_estimates.jsonl").unlink()
    fresh.restore_stages()
    assert (fresh.out / "p_estimates.jsonl").read_text() == '{"id": "q1"}\n'
    (fresh.out / "p_estimates.jsonl").write_text('{"id": "q1"}\n{"id": "q2"}\n')
    fresh.persist_stages()
    assert (tmp_path / "r" / "stages" / "p_estimates.jsonl").read_text().count("\n") == 2
    small = S.Study(tmp_path / "c", tmp_path / "r2", "tiny", S.default_sizes(), S.RUNS, 2, {})
    small.out.mkdir()
    (small.out / "p_estimates.jsonl").write_text("x")
    small.persist_stages()
    assert not (tmp_path / "r2").exists()
