"""The reward-dynamics simulator through `awarl simulate` with a fixed seed: the mechanism must show."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import ROUND4_OVERRIDES, spec_reward

from awarl.cli import main
from awarl.config import RewardConfig, SimulateConfig
from awarl.metrics import ra_f1
from awarl.rewards.trl_reward import AwaRLReward
from awarl.simulate import (
    OracleReward,
    current_success,
    dead_zone,
    make_population,
    population_from_counts,
    simulate_run,
)


@pytest.mark.slow
def test_simulate_penalty_pulls_toward_rho_hat_and_plateau_rises_with_gamma(tmp_path):
    out = tmp_path / "sim"
    # The previous default's target (r_base_mean) is off by more than the dead zone, so the penalty has work to do
    # here; under the shipped posterior target the no-penalty runs already end inside it (the study's ablation).
    rc = main(["simulate", "--out", str(out), "--seed", "0", "--no-progress",
               "simulate.gammas=[0.25, 1.0]", "simulate.strategies=[none, static, awarl, awarl_no_penalty]",
               "simulate.static_values=[0.05]", "reward.expected_rate=r_base_mean", "reward.r_ref_floor_margin=null",
               *ROUND4_OVERRIDES])
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


SMALL = ["simulate.steps=60", "simulate.n_queries=200", "simulate.batch_queries=8", "simulate.group_size=4"]


@pytest.mark.parametrize("option", ["reward.expected_rate=r_base_mean", "reward.expected_rate=soft",
                                    "reward.r_ref_margin=0.1", "reward.ema_start=bias_corrected",
                                    "reward.p_definition=among_answered", "reward.p_online=ema"])
@pytest.mark.slow
def test_every_reconstruction_option_runs_from_the_command_line(tmp_path, option):
    out = tmp_path / "sim"
    assert main(["simulate", "--out", str(out), "--no-progress", *SMALL, "simulate.seeds=2",
                 "simulate.strategies=[none, awarl]", "simulate.gammas=[0.5, 1.0]", "reward.abstain_line=courage",
                 option]) == 0
    summary = json.loads((out / "summary.json").read_text())
    key, value = option.split("=")
    assert str(summary["config"]["reward"][key.split(".")[1]]) == value
    md = (out / "summary.md").read_text()
    assert f"{key.split('.')[1]}={value}" in md.split("\n")[2]  # the options line names it
    assert "refusal plateaus by γ" in md and "AWA-RL raises precision and RA-F1" in md
    runs = {r["label"]: r for r in summary["runs"]}
    assert runs["awarl γ=1"]["seeds"] == 2 and runs["awarl γ=1"]["refusal_rate_sd"] >= 0.0


def test_the_ra_f1_line_runs_once_whatever_the_gamma_grid_and_skips_the_claims_about_gamma(tmp_path):
    """γ does not enter the RA-F1 line (the shipped one): a γ grid would run the same reward once per γ, so the
    simulator runs it once, and the paper's claim about γ (refusal rising with it) is not checked on one run."""
    out = tmp_path / "sim"
    assert main(["simulate", "--out", str(out), "--no-progress", *SMALL, "simulate.seeds=1",
                 "simulate.strategies=[none, awarl, awarl_no_penalty]", "simulate.gammas=[0.5, 1.0]"]) == 0
    labels = [r["label"] for r in json.loads((out / "summary.json").read_text())["runs"]]
    assert labels == ["none (plain GRPO)", "awarl RA-F1 line", "awarl RA-F1 line no penalty"]
    md = (out / "summary.md").read_text()
    assert "abstain_line=ra_f1" in md and "refusal plateaus by γ" not in md and "AWA-RL raises precision" in md


REPLAY_CASES = [
    {"_shipped": True},
    {},
    {"expected_rate": "r_base_mean", "r_ref_margin": 0.1, "ema_start": "bias_corrected", "beta": 0.5},
    {"p_online": "ema", "p_online_beta": 0.5, "p_definition": "among_answered", "expected_rate": "soft"},
    {"p_online": "ema", "p_online_beta": 0.8},
    {"r_wrong": -0.5, "r_correct": 1.5, "beta": 0.0},
    {"strategy": "bapo"},
    {"strategy": "static", "static_value": 0.3},
    {"expected_rate": "posterior", "r_ref_margin": 0.1, "r_ref_floor_margin": 0.05},
    {"expected_rate": "posterior", "p_definition": "among_answered", "p_online": "ema", "r_ref_floor_margin": 0.0,
     "posterior_prior": 1.0, "beta": 0.5},
    {"penalty_dither": 0.4, "beta": 0.0, "p_online": "ema", "ema_start": "bias_corrected"},
    # issue 41: the group's own answered outcomes join the pre-RL counts (p_online: group)
    {"_shipped": True, "p_online": "group"},
    {"_shipped": True, "p_online": "group", "p_prior_weight": 0.25},
    {"expected_rate": "threshold", "p_online": "group", "p_prior_weight": 0.0, "p_definition": "among_answered"},
    {"strategy": "bapo", "p_online": "group", "p_prior_weight": 0.5},
    # round 5: AWA-RL behind BAPO's group rule, and a plain-GRPO warm-up before r_ref and the penalty start
    {"_shipped": True, "refusal_gate": "any_correct"},
    {"_shipped": True, "refusal_warmup": 0.4},
    {"_shipped": True, "refusal_gate": "any_correct", "p_online": "group", "p_prior_weight": 0.5,
     "refusal_warmup": 0.25, "ema_start": "bias_corrected"},
    # round 6: the RA-F1 line (F̂/2 for every query from the running RA-F1), with every reading of ρ̂
    {"_shipped": True, "abstain_line": "ra_f1"},
    {"_shipped": True, "abstain_line": "ra_f1", "p_online": "off", "refusal_gate": "off", "refusal_warmup": 0.0,
     "ra_f1_beta": 0.5},
    {"abstain_line": "ra_f1", "expected_rate": "threshold"},
    {"abstain_line": "ra_f1", "expected_rate": "soft"},
    {"abstain_line": "ra_f1", "expected_rate": "r_base_mean", "p_online": "ema"},
    # round 9: the gate's weight (on in the shipped reward above), off, under the courage line's per-query s*, and the
    # warm-up's share for mean-only advantages
    {"_shipped": True, "refusal_gate_weight": "off"},
    {"_shipped": True, "abstain_line": "courage", "r_ref_margin": None},
    {"_shipped": True, "refusal_warmup": {"group": 0.0, "none": 0.3}, "_scaling": "none"},
]


@pytest.mark.parametrize("opts", REPLAY_CASES, ids=lambda o: ",".join(
    "shipped" if k == "_shipped" else f"{k.lstrip('_')}={v}" for k, v in o.items()) or "spec")
def test_simulator_rewards_are_what_the_training_reward_gives_for_the_same_batches(opts):
    """Every simulated generation batch, fed to the real `AwaRLReward` as a TRL call would be, gets the same
    rewards, Ē and penalty: the simulator composes the training reward's steps, not a copy of them."""
    scaling = opts.get("_scaling", "group")
    sc = SimulateConfig(n_queries=120, batch_queries=6, group_size=4, steps=40, init_abstain_rate=0.3,
                        invalid_rate=0.1, advantage_scaling=scaling)
    given = {k: v for k, v in opts.items() if k not in ("strategy", "_shipped", "_scaling")}
    rc = RewardConfig(**given) if opts.get("_shipped") else spec_reward(**given)
    strategy = opts.get("strategy", "awarl")
    pop = make_population(sc, np.random.default_rng(3))
    batches: list[dict] = []
    simulate_run(pop, sc, rc, strategy, gamma=0.5, seed=5, on_batch=batches.append)
    reward = AwaRLReward(rc.model_copy(update={"strategy": strategy, "gamma": 0.5}), total_steps=sc.steps,
                         scale_rewards=scaling)
    pre_rl, samples = pop.p_hat(rc.p_definition), pop.p_samples(rc.p_definition)
    for b in batches:
        qids = [str(i) for i in b["idx"] for _ in range(sc.group_size)]
        # the rollout passes the dataset's pre-RL p_i and its sample count; AwaRLReward's own online table takes
        # over p (p_online)
        p_col = [float(pre_rl[i]) for i in b["idx"] for _ in range(sc.group_size)]
        n_col = [float(samples[i]) for i in b["idx"] for _ in range(sc.group_size)]
        got = reward(prompts=["p"] * len(qids), completions=["c"] * len(qids), outcome=b["outcomes"],
                     qid=qids, p_i=p_col, p_n=n_col)
        assert got == pytest.approx(b["rewards"].tolist(), abs=1e-12)
        if strategy == "awarl":
            assert reward.e_bar == pytest.approx(b["E_bar"]) and reward.last_stats["penalty"] == b["penalty"]
            # each group's own step (reward.penalty_dither): the same draw on both sides
            assert reward.last_stats["penalty_applied"] == pytest.approx(np.mean(b["group_penalties"]))
        else:
            assert "penalty" not in reward.last_stats and b["E_bar"] is None
    assert len(batches) == sc.steps


def test_baseline_runs_record_no_penalty_or_smoothed_excess():
    sc = SimulateConfig(n_queries=100, batch_queries=4, group_size=4, steps=5)
    pop = make_population(sc, np.random.default_rng(0))
    for strategy in ("none", "static", "bapo"):
        h = simulate_run(pop, sc, RewardConfig(), strategy, gamma=0.5).history
        assert not {"E", "E_bar", "penalty"} & set(h) and len(h["r_ref_mean"]) == 5
    h = simulate_run(pop, sc, RewardConfig(), "awarl", gamma=0.5).history
    assert len(h["E_bar"]) == len(h["penalty"]) == 5


def test_an_oracle_reward_pays_refusal_below_its_threshold_on_the_key_it_names():
    """The feasibility control (docs/method.md "What no reward can"): every abstention of a batch earns
    r_wrong + pay where its query's key (true success, or the pre-RL p_i) is below the threshold and
    r_wrong − charge elsewhere, the same rule every step, and no penalty is kept."""
    sc = SimulateConfig(n_queries=200, batch_queries=8, group_size=4, steps=30, init_abstain_rate=0.3,
                        skill_gain=0.01)
    pop = make_population(sc, np.random.default_rng(1))
    rc = RewardConfig(r_wrong=0.0)
    for oracle in (OracleReward(0.3, 0.5, "success"), OracleReward(0.2, 0.0, "estimate")):
        batches: list[dict] = []
        res = simulate_run(pop, sc, rc, "none", gamma=rc.gamma, seed=2, oracle=oracle, on_batch=batches.append)
        assert res.label == oracle.label and "E_bar" not in res.history
        seen = 0
        for step, b in enumerate(batches):
            # the oracle on success reads the success *now* (skill_gain moves it), the other the pre-RL p_i
            key = current_success(pop, sc, step) if oracle.key == "success" else pop.p_hat()
            assert step == 0 or oracle.key != "success" or not np.allclose(key, pop.success)
            want = np.where(key[b["idx"]] < oracle.threshold, oracle.pay, -oracle.charge)
            for k, (o, r) in enumerate(zip(b["outcomes"], b["rewards"], strict=True)):
                if o == "abstain":
                    assert r == pytest.approx(want[k // sc.group_size])
                    seen += 1
        assert seen > 20
    with pytest.raises(ValueError, match="stationary"):
        simulate_run(pop, sc, rc, "awarl", gamma=0.05, oracle=OracleReward(0.3))


def test_an_oracle_threshold_sets_where_refusal_settles():
    """Paying refusal on every query drives it up, charging it on every query drives it out; a threshold in
    between settles in between (the family the feasibility control scans)."""
    sc = SimulateConfig(steps=300)
    pop = make_population(sc, np.random.default_rng(0))
    final = {th: simulate_run(pop, sc, RewardConfig(), "none", gamma=0.05, seed=1,
                              oracle=OracleReward(th, 0.5)).final()["refusal_rate"] for th in (0.0, 0.2, 1.01)}
    assert final[0.0] < 0.02 < final[0.2] < final[1.01] and final[1.01] > 0.5


def test_pre_rl_estimate_counts_abstentions_and_format_failures():
    sc = SimulateConfig(n_queries=4000, init_abstain_rate=0.3, invalid_rate=0.2, k_estimate=8)
    pop = make_population(sc, np.random.default_rng(0))
    assert (pop.counts.sum(axis=1) == 8).all()
    shares = pop.counts.sum(axis=0) / pop.counts.sum()
    assert shares[2] == pytest.approx(0.3, abs=0.01) and shares[3] == pytest.approx(0.7 * 0.2, abs=0.01)
    k_share, answered = pop.p_hat("share_of_k"), pop.p_hat("among_answered")
    assert (answered >= k_share).all() and answered.mean() == pytest.approx(k_share.mean() / 0.7, rel=0.05)
    # an estimate file's counts become the population's estimate unchanged
    counts = np.array([[2, 1, 1, 0], [0, 0, 4, 0], [0, 1, 0, 3]])
    made = population_from_counts(counts, sc, np.random.default_rng(0))
    assert made.p_hat("share_of_k").tolist() == [0.5, 0.0, 0.0]
    assert made.p_hat("among_answered").tolist() == pytest.approx([2 / 3, 0.0, 0.0])
    assert made.success.tolist() == pytest.approx([2 / 3, 0.0, 0.0])


def test_population_configs_are_valid_and_differ_only_in_the_environment():
    from awarl.config import load_config
    from awarl.io import repo_root

    cfgs = {p.stem: load_config(p) for p in sorted((repo_root() / "configs" / "simulate").glob("*.yaml"))}
    assert {"default", "paper_like", "format_failures", "skill_gain", "cautious_base"} <= set(cfgs)
    base = load_config(repo_root() / "configs" / "base.yaml")
    for name, cfg in cfgs.items():
        assert cfg.reward == base.reward, name  # the recipe's reward: the yardstick varies, the method does not
    assert cfgs["format_failures"].simulate.invalid_rate == 0.25 and cfgs["skill_gain"].simulate.skill_gain > 0


def test_linear_schedule_decays_the_step_to_zero_as_the_trainer_does():
    from awarl.simulate import learning_rate_at

    sc = SimulateConfig(steps=100, learning_rate=0.5, lr_schedule="linear")
    assert learning_rate_at(sc, 0) == 0.5 and learning_rate_at(sc, 50) == pytest.approx(0.25)
    assert learning_rate_at(sc, 99) == pytest.approx(0.005)
    assert learning_rate_at(sc.model_copy(update={"lr_schedule": "constant"}), 99) == 0.5
    # same population and samples: the decayed run moves its policy less over the last steps
    pop = make_population(sc, np.random.default_rng(0))
    moves = {}
    for schedule in ("constant", "linear"):
        h = simulate_run(pop, sc.model_copy(update={"lr_schedule": schedule}), RewardConfig(), "static", gamma=0.5,
                         static_value=0.05, seed=1).history["refusal_rate"]
        moves[schedule] = float(np.abs(np.diff(h[-20:])).sum())
    assert moves["linear"] < moves["constant"]


@pytest.mark.slow
def test_collapse_claim_names_a_collapsed_refusal_where_a_baseline_refuses(tmp_path):
    """The previous default (r_base_mean: ρ̂ capped at 1 − p_min^γ) on a 70%-unanswerable population: refusal dies
    out at γ = 0.25 while static 0.05 refuses ~0.8, and the summary says so; the shipped default does not."""
    from awarl.io import repo_root

    common = ["--config", str(repo_root() / "configs" / "simulate" / "paper_like.yaml"), "--no-progress",
              "simulate.unanswerable_share=0.7", "simulate.strategies=[static, awarl]", "simulate.gammas=[0.25]",
              "simulate.static_values=[0.05]"]
    claim = "AWA-RL's refusal never collapses"
    found = {}
    for name, extra in {"previous": ["reward.expected_rate=r_base_mean", "reward.r_ref_floor_margin=null",
                                     "reward.penalty_dither=0"],
                        "shipped": []}.items():
        out = tmp_path / name
        assert main(["simulate", "--out", str(out), *common, *extra]) == 0
        summary = json.loads((out / "summary.json").read_text())
        found[name] = next(c for c in summary["claims"] if c["claim"].startswith(claim))
    assert found["previous"]["holds"] is False and "γ=0.25 0.00" in found["previous"]["evidence"]
    assert found["shipped"]["holds"] is True


@pytest.mark.slow
def test_dithered_steps_hold_refusal_as_a_stationary_reward_would_where_one_step_chatters():
    """docs/method.md "Dithered steps", on the default population at the shipped γ. With one batch-wide step the
    penalty is an on/off switch: the live run cycles around the dead zone's edge, and its frozen twin (Ē held at
    the mean the run settled at) cannot hold that refusal rate at all. With each group's step drawn at Ē + u the
    frozen twin holds the live run's refusal rate, and the live run's late-phase sd is that of the stationary
    reward, well below the single step's."""
    from awarl.config import load_config
    from awarl.io import repo_root
    from awarl.simulate import run_all, run_frozen_twins, summary_rows

    path = repo_root() / "configs" / "simulate" / "default.yaml"
    rows = {}
    for width in (0.0, 0.1):
        cfg = load_config(path, [f"reward.penalty_dither={width}", *ROUND4_OVERRIDES])
        live, frozen = run_frozen_twins(cfg, 0.05)
        assert len(set(frozen[0].history["E_bar"])) == 1 and frozen[0].history["E"] != live[0].history["E"]
        rows[width] = summary_rows(live)[0], summary_rows(frozen)[0]
    (plain, plain_twin), (dith, dith_twin) = rows[0.0], rows[0.1]
    assert abs(plain_twin["refusal_rate"] - plain["refusal_rate"]) > 0.2
    assert abs(dith_twin["refusal_rate"] - dith["refusal_rate"]) < 0.02
    assert dith["late_sd"] < 0.75 * plain["late_sd"] and dith["late_sd"] < 1.5 * dith_twin["late_sd"]
    # the live run is the study's cell: the same population, samples and reward as run_all's
    cell = summary_rows(run_all(load_config(path, ["simulate.strategies=[awarl]", "simulate.gammas=[0.05]",
                                                   "reward.penalty_dither=0.1", *ROUND4_OVERRIDES]),
                                   progress=False))[0]
    assert cell["late_sd"] == dith["late_sd"] and cell["ra_f1"] == dith["ra_f1"]


def test_late_behaviour_and_the_per_seed_late_sd_of_a_summary_row():
    """The last fifth of a refusal curve: its sd, and its mean's move from the fifth before; summary_rows keeps
    each seed's late sd in seed order, its mean being the row's late_sd."""
    from awarl.simulate import RunResult, late_behaviour, summary_rows

    curve = [0.5] * 80 + [0.2, 0.4] * 10  # last fifth alternates 0.2/0.4, the fifth before sits at 0.5
    drift, sd = late_behaviour(curve)
    assert sd == pytest.approx(0.1) and drift == pytest.approx(0.2)
    assert late_behaviour([0.3] * 100) == pytest.approx((0.0, 0.0), abs=1e-12)
    flat = {k: [0.3] * 100 for k in ("refusal_rate", "rho_hat", "precision", "accuracy", "ra_f1")}
    runs = [RunResult("x", "none", seed=0, history={**flat, "refusal_rate": curve}),
            RunResult("x", "none", seed=1, history=flat)]
    row = summary_rows(runs)[0]
    assert row["late_sd_seeds"] == pytest.approx([0.1, 0.0]) and row["late_sd"] == pytest.approx(0.05)


@pytest.mark.parametrize("key, values, named", [("gammas", [0.1, 0.1, 0.5], "0.1 is listed twice"),
                                                ("static_values", [0.05, 0.050], "0.05 is listed twice"),
                                                ("strategies", ["none", "none"], "none is listed twice"),
                                                ("gammas", [0.0, 0.5], r"every γ must be in \(0, 1\]")])
def test_a_simulated_value_listed_twice_or_out_of_range_is_a_config_error(key, values, named):
    """`simulate.gammas=[0.1, 0.1, 0.5]` ran γ 0.1 twice and the summary merged the two as two seeds
    (`seeds= 2`, ± 0.000, with simulate.seeds 1); a γ of 0 was refused only after the baselines had run."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=named):
        SimulateConfig.model_validate({key: values})
