"""Round 9 of the reward study (issue 41): the refusal gate's weight (`reward.refusal_gate_weight: tie_at_line`) puts
the tie between abstaining and answering back at the abstain line, and `reward.refusal_warmup` may give one share
per advantage normalisation (docs/method.md "Gating and warm-up")."""

from __future__ import annotations

import math

import numpy as np
import pytest

from awarl.config import ConfigError, RewardConfig, SimulateConfig, config_from_dict, load_config
from awarl.rewards import abstention as A
from awarl.rewards.trl_reward import AwaRLReward
from awarl.simulate import make_population, simulate_run


def expected_gated(s: float, line: float, others: int, refusal: float, r_ref: float, weighted: bool) -> float:
    """An abstention's expected reward for a query of true success s, its group's `others` other rollouts each
    abstaining with probability `refusal` and else correct with probability s (r_wrong 0, no cap): the sum over
    how many of them answer (a) and whether any of those is correct."""
    total = 0.0
    for a in range(others + 1):
        p_a = math.comb(others, a) * (1.0 - refusal) ** a * refusal ** (others - a)  # a of them answer
        paid = A.gated_refusal_reward(r_ref, line, a, 0.0, (-math.inf, math.inf)) if weighted else r_ref
        total += p_a * (1.0 - s) ** a * paid
    return total


@pytest.mark.parametrize("line", [0.05, 0.2, 0.26, 0.45])
@pytest.mark.parametrize("others", [1, 3, 7, 15])
@pytest.mark.parametrize("refusal", [0.0, 0.3, 0.9])
def test_weighted_the_gate_ties_abstaining_with_answering_at_the_line(line, others, refusal):
    """At s = s* an abstention paid r_ref = s* (the line's own R_base) is worth s*, what answering is worth, for any
    group size and refusal rate; below the line more, above it less. Unweighted, the tie sits below s*."""
    r_ref = line  # R_base at the line with r_correct 1, r_wrong 0
    assert expected_gated(line, line, others, refusal, r_ref, True) == pytest.approx(line, rel=1e-12)
    for s in (line / 2, line * 0.9):
        assert expected_gated(s, line, others, refusal, r_ref, True) > s
    for s in (min(1.0, line * 1.1), min(1.0, line * 2)):
        assert expected_gated(s, line, others, refusal, r_ref, True) < s
    unweighted = expected_gated(line, line, others, refusal, r_ref, False)
    if refusal < 1.0:
        assert unweighted < line  # the bias the weight removes: at s* abstaining is worth less than answering


def test_gate_weight_values_and_bad_input():
    assert A.gate_weight(0.25, 0) == 1.0
    assert A.gate_weight(0.25, 3) == pytest.approx(1 / 0.75**3)
    assert A.gate_weight(0.0, 7) == 1.0
    assert A.gate_weight(1.0, 2) == math.inf and A.gate_weight(1.0, 0) == 1.0
    with pytest.raises(ValueError, match="abstain line"):
        A.gate_weight(1.5, 2)
    with pytest.raises(ValueError, match="answered"):
        A.gate_weight(0.2, -1)


def test_the_weighted_reward_keeps_the_cap_clip_and_floor():
    # r_ref 0.26 at s* 0.26 with 7 answers would be 0.26 / 0.74**7 = 2.1: the cap keeps a correct answer worth more
    assert A.gated_refusal_reward(0.26, 0.26, 7, 0.0, (-1.0, 1.0), r_max=0.9) == 0.9
    assert A.gated_refusal_reward(0.26, 0.26, 7, 0.0, (-1.0, 1.0)) == 1.0          # r_clip without a cap
    assert A.gated_refusal_reward(0.26, 0.26, 1, 0.0, (-1.0, 1.0), 0.9) == pytest.approx(0.26 / 0.74)
    assert A.gated_refusal_reward(0.0, 0.26, 5, 0.0) == 0.0                          # r_ref = r_wrong: nothing to weight
    assert A.gated_refusal_reward(-0.1, 0.26, 5, 0.0, (-1.0, 1.0), r_min=0.0) == 0.0  # the floor holds
    assert A.gated_refusal_reward(-0.1, 0.26, 1, 0.0) == pytest.approx(-0.1 / 0.74)   # symmetric below r_wrong
    assert A.gated_refusal_reward(0.3, 1.0, 2, 0.0, (-1.0, 1.0), 0.9) == 0.9         # s* = 1: infinite weight, capped
    # r_wrong ≠ 0: the gap above r_wrong is weighted
    assert A.gated_refusal_reward(0.2, 0.5, 1, -0.5, (-1.0, 1.0)) == pytest.approx(-0.5 + 0.7 * 2)


def test_awarl_reward_weights_an_abstention_only_where_the_gate_lets_it_through():
    """Group a has a correct answer (the gate pays r_wrong); group b answered 2 of 4 wrongly (weight 1/(1 − s*)^2);
    with the weight off, group b's abstentions earn r_ref."""
    kw = dict(prompts=["p"] * 8, completions=["c"] * 8, qid=["a"] * 4 + ["b"] * 4, p_i=[0.6] * 8, p_n=[8] * 8,
              outcome=["correct", "wrong", "abstain", "abstain", "wrong", "wrong", "abstain", "abstain"])
    base = dict(abstain_line="courage", gamma=0.5, p_online="off", refusal_warmup=0.0, penalty_max=0.0,
                penalty_steps=[(0.05, 0.0)], r_ref_margin=None)
    on, off = AwaRLReward(RewardConfig(**base)), AwaRLReward(RewardConfig(**base, refusal_gate_weight="off"))
    r_on, r_off = on(**kw), off(**kw)
    line = A.abstain_line(0.6, 0.5, 0.1)                       # s* of p 0.6 under γ 0.5: R_base = 1 − 0.6**0.5
    assert r_off[6] == pytest.approx(line)                     # unweighted: r_ref = R_base
    assert 0.3 < line / (1 - line) ** 2 < 0.9 and r_on[6] == r_on[7] == pytest.approx(line / (1 - line) ** 2)
    assert r_on[2] == r_on[3] == r_off[2] == 0.0               # group a: the gate
    assert r_on[:2] == r_off[:2] and r_on[4:6] == r_off[4:6]   # answers untouched
    capped = AwaRLReward(RewardConfig(**{**base, "r_ref_margin": 0.1}))(**kw)
    assert capped[6] == pytest.approx(min(0.9, line / (1 - line) ** 2))


def test_the_warm_up_may_differ_by_advantage_normalisation():
    cfg = RewardConfig()                                       # shipped: group 0.9, batch and none 0.75
    assert (cfg.warmup_share("group"), cfg.warmup_share("none"), cfg.warmup_share("batch")) == (0.9, 0.75, 0.75)
    assert RewardConfig(refusal_warmup=0.3).warmup_share("none") == 0.3  # one number: every normalisation
    with pytest.raises(ValueError, match="advantage normalisation 'std'"):
        cfg.warmup_share("std")
    assert AwaRLReward(cfg, total_steps=100)._warm_steps({}) == 90
    assert AwaRLReward(cfg, total_steps=100, scale_rewards="none")._warm_steps({}) == 75
    # awarl train hands the reward its train.scale_rewards
    from awarl.stages.train import build_reward

    for scale, steps in (("group", 90), ("none", 75), ("batch", 75)):
        run = config_from_dict({"train": {"scale_rewards": scale, "max_steps": 100, "report_to": ["none"]}})
        assert build_reward(run, [])._warm_steps({}) == steps


def test_a_mapping_in_yaml_or_on_the_command_line_and_its_errors():
    cfg = load_config("configs/base.yaml", ["reward.refusal_warmup.none=0.6"])
    assert cfg.reward.warmup_share("none") == 0.6 and cfg.reward.warmup_share("group") == 0.9
    assert load_config("configs/qwen2.5-7b_warm_8gpu.yaml").reward.warmup_share("none") == 0.0  # a number replaces it
    with pytest.raises(ConfigError, match=r"reward\.refusal_warmup\.nones: unknown key; allowed keys here: batch, "
                                          r"group, none"):
        load_config("configs/base.yaml", ["reward.refusal_warmup={nones: 0.5}"])
    with pytest.raises(ConfigError, match=r"reward\.refusal_warmup: Input should be less than 1"):
        load_config("configs/base.yaml", ["reward.refusal_warmup=1.0"])


def test_the_simulator_reads_the_warm_up_of_its_advantage_scaling():
    """A warm-up of (almost) the whole run under one normalisation and none under the other: only the first stays
    plain GRPO throughout."""
    rc = RewardConfig(refusal_warmup={"group": 0.999, "none": 0.0})
    for scaling, warm in (("group", True), ("none", False)):
        sc = SimulateConfig(n_queries=120, batch_queries=6, group_size=4, steps=20, init_abstain_rate=0.3,
                            advantage_scaling=scaling)
        pop = make_population(sc, np.random.default_rng(2))
        run = simulate_run(pop, sc, rc, "awarl", gamma=0.5, seed=3)
        assert (set(run.history["E_bar"]) == {0.0}) is warm, scaling
