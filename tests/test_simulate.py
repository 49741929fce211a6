"""The reward-dynamics simulator through `awarl simulate` with a fixed seed: the mechanism must show."""

from __future__ import annotations

import json

from awarl.cli import main
from awarl.config import RewardConfig
from awarl.metrics import ra_f1
from awarl.simulate import dead_zone


def test_simulate_penalty_pulls_toward_rho_hat_and_plateau_rises_with_gamma(tmp_path):
    out = tmp_path / "sim"
    rc = main(["simulate", "--out", str(out), "--seed", "0", "--no-progress",
               "simulate.gammas=[0.25, 1.0]", "simulate.strategies=[none, static, awarl, awarl_no_penalty]",
               "simulate.static_values=[0.05]"])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["simulate"]["steps"] == 1000 and summary["config"]["simulate"]["seed"] == 0
    runs = {r["label"]: r for r in summary["runs"]}
    assert set(runs) == {"none (plain GRPO)", "static 0.05", "awarl γ=0.25", "awarl γ=1",
                         "awarl γ=0.25 no penalty", "awarl γ=1 no penalty"}
    dz = dead_zone(RewardConfig())
    for g in ("0.25", "1"):
        on, off = runs[f"awarl γ={g}"], runs[f"awarl γ={g} no penalty"]
        # the penalty only exists outside the dead zone: the ablation must actually leave it for the test to mean
        # anything, and then the penalised run must end closer to ρ̂
        assert abs(off["gap_to_rho_hat"]) > dz
        assert abs(on["gap_to_rho_hat"]) < abs(off["gap_to_rho_hat"])
    assert runs["awarl γ=1"]["refusal_rate"] > runs["awarl γ=0.25"]["refusal_rate"]
    assert runs["awarl γ=1"]["rho_hat"] >= runs["awarl γ=0.25"]["rho_hat"]
    for r in summary["runs"]:
        assert r["ra_f1"] == ra_f1(r["precision"], r["accuracy"])
        assert 0.0 <= r["refusal_rate"] <= 1.0
    assert (out / "curves.png").stat().st_size > 10_000
    md = (out / "summary.md").read_text()
    assert "| awarl γ=0.25 |" in md and "Paper claims" in md
    claims = {c["claim"].split(" (")[0]: c for c in summary["claims"]}
    assert claims["the penalty pulls the observed refusal rate toward ρ̂"]["holds"] is True


def test_simulate_bad_override_is_a_clear_error(tmp_path, capsys):
    assert main(["simulate", "--out", str(tmp_path), "simulate.stepz=3"]) == 2
    assert "simulate.stepz" in capsys.readouterr().err
