"""The p_i report of `awarl demo-real`: histogram counts and the ρ̂ of every expected-rate reading."""

from __future__ import annotations

import pytest

from awarl.config import RewardConfig
from awarl.rewards import abstention
from awarl.stages.p_report import p_distribution, p_markdown, plot_histogram


def row(correct: int, wrong: int, abstain: int, k: int = 4) -> dict:
    return {"qid": f"q{correct}{wrong}{abstain}", "dataset": "hotpotqa", "k": k, "correct": correct,
            "p_i": correct / k, "outcomes": {"correct": correct, "wrong": wrong, "abstain": abstain,
                                             "invalid": k - correct - wrong - abstain}}


ROWS = [row(0, 0, 4), row(0, 2, 2), row(1, 3, 0), row(2, 0, 2), row(4, 0, 0)]


def test_histogram_counts_both_p_definitions():
    dist = p_distribution(ROWS, RewardConfig())
    share = dist["definitions"]["share_of_k"]
    assert share["histogram"] == {"0": 2, "0.25": 1, "0.5": 1, "1": 1}
    assert share["mean_p"] == pytest.approx((0 + 0 + 0.25 + 0.5 + 1) / 5)
    # among answered: 2 of 2 answered correct -> 1; a question never answered keeps its share of K (0)
    assert dist["definitions"]["among_answered"]["histogram"] == {"0": 2, "0.25": 1, "1": 2}


@pytest.mark.parametrize("gamma", [0.25, 0.5])
def test_every_reading_gives_the_rho_hat_of_expected_refusal_rate(gamma):
    reward = RewardConfig(gamma=gamma)
    dist = p_distribution(ROWS, reward)
    assert dist["readings"] == list(abstention.EXPECTED_RATES)
    ps = [r["p_i"] for r in ROWS]
    for mode in abstention.EXPECTED_RATES:
        want = abstention.expected_refusal_rate(ps, gamma, reward.p_min, mode, reward.soft_tau, reward.r_correct,
                                                reward.r_wrong, [r["k"] for r in ROWS], reward.posterior_prior)
        assert dist["definitions"]["share_of_k"]["rho_hat"][mode][f"{gamma:g}"] == pytest.approx(want)
    # the readings disagree on this population (otherwise the table would say nothing)
    values = {round(dist["definitions"]["share_of_k"]["rho_hat"][m]["0.5"], 6) for m in abstention.EXPECTED_RATES}
    assert len(values) > 1


def test_markdown_and_plot(tmp_path):
    dist = p_distribution(ROWS, RewardConfig())
    text = "\n".join(p_markdown(dist, "p_histogram.png"))
    assert "| share_of_k | 2 | 1 | 1 | 1 | 0.350 |" in text and "![p_i histogram](p_histogram.png)" in text
    for mode in abstention.EXPECTED_RATES:
        assert f"| {mode} | share_of_k |" in text
    plot_histogram(dist, tmp_path / "h.png")
    assert (tmp_path / "h.png").stat().st_size > 1000
