"""Issue 41: a p_i that follows a learning policy (`reward.p_online: group`, `abstention.group_estimate`) and the
simulator options that stop it sharing the reward's assumptions (latent queries that grow or stay dead, each query
seen once, a learned self-estimate, correctness coupled to retrieval, skill from answered rollouts, held-out
metrics)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import round4_reward

from awarl.config import ConfigError, RewardConfig, SimulateConfig, load_config
from awarl.io import repo_root
from awarl.rewards import abstention as A
from awarl.rewards.trl_reward import AwaRLReward
from awarl.simulate import make_population, simulate_run
from awarl.simulate_env import Batch, Policy, World, current_success, sigmoid


# ----------------------------------------------------------------------------------- the pure estimate
def test_group_estimate_joins_the_groups_answered_outcomes_to_the_discounted_pre_rl_counts():
    # pre-RL 1 of 8, this group 3 correct of 4 answered: λ = 1 pools them, λ = 0.5 halves the old samples
    assert A.group_estimate(1 / 8, 8, 3, 4, 1.0) == pytest.approx((4 / 12, 12.0))
    assert A.group_estimate(1 / 8, 8, 3, 4, 0.5) == pytest.approx((3.5 / 8, 8.0))
    assert A.group_estimate(1 / 8, 8, 3, 4, 0.0) == pytest.approx((0.75, 4.0))
    # a group that answered nothing leaves the estimate, on its discounted count
    assert A.group_estimate(0.25, 8, 0, 0, 0.5) == pytest.approx((0.25, 4.0))
    # no pre-RL samples and nothing answered: the prior alone (n = 0)
    assert A.group_estimate(0.5, 0, 0, 0, 1.0) == (0.5, 0.0)


@pytest.mark.parametrize("bad", [dict(prior_weight=1.5), dict(correct=3, answered=2), dict(n=-1.0),
                                 dict(correct=-1, answered=0)])
def test_group_estimate_refuses_what_is_no_count(bad):
    args = dict(p=0.5, n=8.0, correct=1, answered=2, prior_weight=1.0) | bad
    with pytest.raises(ValueError):
        A.group_estimate(**args)


def test_a_group_that_answers_correctly_takes_the_stale_zero_off_the_expected_refusal_rate():
    """The filed failure in one batch: a query never solved before RL (p_i = 0/8) that the policy now answers
    correctly. Off, ρ̂ still counts it as one to refuse; with `p_online: group` its own group says otherwise, and
    refusing it pays less (R_base of the new p)."""
    outcomes = ["correct", "correct", "wrong", "abstain"]
    kw = dict(prompts=["p"] * 4, completions=["c"] * 4, outcome=outcomes, qid=["q"] * 4, p_i=[0.0] * 4, p_n=[8] * 4)
    # at γ 0.02 (round 3's) the abstain line puts the stale zero's ρ̂ above one half; the shipped 0.01, just below
    off, group = AwaRLReward(round4_reward(gamma=0.02)), AwaRLReward(round4_reward(gamma=0.02, p_online="group"))
    r_off, r_group = off(**kw), group(**kw)
    assert off.last_stats["rho_hat"] > 0.5 > 0.05 > group.last_stats["rho_hat"]
    assert r_group[3] < r_off[3]  # the abstention in that group earns less
    assert r_group[:3] == r_off[:3]  # answers are paid as before
    # a group that fails every answer keeps ρ̂ high: the estimate follows the policy both ways
    fail = AwaRLReward(round4_reward(p_online="group"))
    fail(**{**kw, "outcome": ["wrong", "wrong", "wrong", "abstain"]})
    assert fail.last_stats["rho_hat"] > 0.5


# ----------------------------------------------------------------------------------- the simulated world
def _cfg(name: str, *overrides: str) -> SimulateConfig:
    return load_config(repo_root() / "configs" / "simulate" / f"{name}.yaml", list(overrides)).simulate


def test_grow_and_dead_share_their_pre_rl_counts_and_differ_only_in_what_happens_after():
    grow, dead = _cfg("grow"), _cfg("dead")
    pg, pd = make_population(grow, np.random.default_rng(0)), make_population(dead, np.random.default_rng(0))
    assert np.array_equal(pg.counts, pd.counts) and np.array_equal(pg.latent, pd.latent)
    assert 0.5 < pg.latent.mean() < 0.7 and (pg.counts[pg.latent, 0] == 0).mean() > 0.8
    end_g, end_d = current_success(pg, grow, 1000), current_success(pd, dead, 1000)
    assert end_g[pg.latent].mean() == pytest.approx(0.49, abs=0.02)      # the latent queries learned
    assert end_d[pd.latent].mean() == pytest.approx(0.02, abs=1e-3)      # ... or never did
    assert np.allclose(end_g[~pg.latent], end_d[~pd.latent])             # the rest improved alike


def test_each_query_once_never_repeats_a_query_and_is_checked_at_load():
    sc = SimulateConfig(n_queries=400, batch_queries=8, group_size=2, steps=50, query_schedule="once")
    pop = make_population(sc, np.random.default_rng(1))
    seen: list[int] = []
    simulate_run(pop, sc, RewardConfig(p_online="group"), "awarl", gamma=0.02,
                 on_batch=lambda b: seen.extend(b["idx"].tolist()))
    assert len(seen) == 400 and len(set(seen)) == 400
    with pytest.raises(ValueError, match="n_queries >= 401"):
        SimulateConfig(n_queries=400, batch_queries=8, steps=50, query_schedule="once", held_out_share=0.002)
    with pytest.raises(ConfigError, match="n_queries >= 32000"):
        load_config(repo_root() / "configs/simulate/grow.yaml", ["simulate.query_schedule=once"])


def _batch(abstain: list[bool], correct: list[bool], x: float = 0.0) -> Batch:
    n = len(abstain)
    return Batch(idx=np.arange(1), group=np.zeros(n, dtype=int), x=np.full(n, x), found=None, pi=np.full(n, 0.5),
                 abstain=np.array(abstain), invalid=np.zeros(n, dtype=bool), correct=np.array(correct))


def test_skill_from_answered_rollouts_stops_growing_when_the_policy_refuses():
    sc = SimulateConfig(n_queries=50, skill_gain=0.01, skill_source="answered")
    world = World(make_population(sc, np.random.default_rng(0)), sc, np.random.default_rng(0))
    world.learn(_batch([True] * 4, [False] * 4))
    assert world.skill == 0.0                      # a refusing batch teaches nothing
    world.learn(_batch([False, False, True, True], [True, False, False, False]))
    assert world.skill == pytest.approx(0.005)     # half answered: half the gain
    assert np.array_equal(world.success(999), current_success(world.pop, sc, 0.005 / 0.01))
    # the schedule grows whatever the policy does (the original simulator)
    sched = World(world.pop, sc.model_copy(update={"skill_source": "schedule"}), np.random.default_rng(0))
    sched.learn(_batch([True] * 4, [False] * 4))
    assert np.array_equal(sched.success(10), current_success(world.pop, sc, 10))


def test_the_self_estimate_does_not_see_skill_grow_and_learns_only_from_answered_rollouts():
    sc = SimulateConfig(n_queries=50, skill_gain=0.01, abstain_feature="self_estimate", self_estimate_bias=0.5,
                        self_estimate_lr=0.1, perception_noise=0.0)
    world = World(make_population(sc, np.random.default_rng(0)), sc, np.random.default_rng(0))
    x0 = world.feature(world.success(0))
    assert np.array_equal(world.feature(world.success(500)), x0)  # skill grew, the self-estimate did not
    world.learn(_batch([True] * 4, [False] * 4, x=0.0))
    assert world.drift == 0.0  # refusals teach the self-estimate nothing
    world.learn(_batch([False] * 4, [True] * 4, x=0.0))  # believed 0.5, all correct: the offset rises
    assert world.drift == pytest.approx(0.1 * 0.5)
    assert np.allclose(world.feature(world.success(0)), x0 + 0.05)


def test_evidence_coupling_keeps_each_querys_success_and_pays_only_answers_that_found_it():
    sc = SimulateConfig(n_queries=300, evidence_precision=0.6, perception_noise=0.0)
    pop = make_population(sc, np.random.default_rng(2))
    world = World(pop, sc, np.random.default_rng(0))
    s = world.success(0)
    found, given = world.evidence(s)
    assert np.allclose(found * given, s)  # marginal success unchanged
    # a policy blind to the evidence has the uncoupled metrics; one that refuses without it is more precise
    blind = world.metrics(Policy(0.0, -1.0), s, world.feature(s))
    plain = World(pop, sc.model_copy(update={"evidence_precision": None}), np.random.default_rng(0))
    assert blind == pytest.approx(plain.metrics(Policy(0.0, -1.0), s, plain.feature(s)))
    sharp = world.metrics(Policy(0.0, 3.0, w_found=-6.0), s, world.feature(s))  # refuses when nothing was found
    assert sharp["precision"] > blind["precision"] + 0.1
    batch = world.sample(np.random.default_rng(4), np.arange(100), 8, Policy(0.0, -3.0), s, world.feature(s))
    assert not (batch.correct & ~batch.found).any()  # no evidence, no correct answer


def test_held_out_queries_are_never_trained_on_and_are_what_the_curves_measure():
    sc = SimulateConfig(n_queries=300, batch_queries=10, group_size=2, steps=30, held_out_share=0.3)
    pop = make_population(sc, np.random.default_rng(3))
    seen: set[int] = set()
    res = simulate_run(pop, sc, RewardConfig(), "none", gamma=0.02, on_batch=lambda b: seen.update(b["idx"].tolist()))
    assert seen and not (seen & set(np.flatnonzero(pop.held_out).tolist()))
    world = World(pop, sc, np.random.default_rng(0))
    p0 = Policy(0.0, np.log(sc.init_abstain_rate / (1 - sc.init_abstain_rate)))
    s = world.success(0)
    want = float(((1 - p0.abstain(world.feature(s))) * s)[pop.held_out].mean())
    assert res.history["accuracy"][0] == pytest.approx(want)


def test_options_off_draw_nothing_so_earlier_populations_are_unchanged():
    base = SimulateConfig(n_queries=200)
    off = base.model_copy(update={"latent_gain": None, "held_out_share": 0.0, "latent_share": 0.0})
    a, b = make_population(base, np.random.default_rng(9)), make_population(off, np.random.default_rng(9))
    assert np.array_equal(a.counts, b.counts) and a.latent is None and a.held_out is None
    assert np.array_equal(Policy(0.3, -1.0).abstain(np.array([0.5])), sigmoid(0.3 * np.array([0.5]) - 1.0))


# ------------------------------------------------------------------ round 5: the refusal gate and the warm-up
def test_the_refusal_gate_pays_a_wrong_answers_reward_where_the_group_answered_right():
    """`reward.refusal_gate: any_correct`: an abstention in a group with a correct answer earns r_wrong; in a group
    without one, AWA-RL's r_ref as before (unweighted: `refusal_gate_weight: off`; tests/test_gate_weight.py has
    the weight)."""
    kw = dict(prompts=["p"] * 8, completions=["c"] * 8, qid=["a"] * 4 + ["b"] * 4, p_i=[0.0] * 8, p_n=[8] * 8,
              outcome=["correct", "wrong", "abstain", "abstain", "wrong", "wrong", "abstain", "abstain"])
    off, gated = AwaRLReward(round4_reward(gamma=0.25)), AwaRLReward(round4_reward(gamma=0.25, refusal_gate="any_correct",
                                                                                   refusal_gate_weight="off"))
    r_off, r_gated = off(**kw), gated(**kw)
    assert r_off[2] > 0.1 and r_gated[2] == r_gated[3] == 0.0      # group a answered right: refusing pays r_wrong
    assert r_gated[6:] == r_off[6:] and r_gated[6] > 0.1           # group b did not: r_ref, untouched
    assert r_gated[:2] == r_off[:2]                                # answers are paid as before
    assert gated.last_stats["rho_hat"] == off.last_stats["rho_hat"]  # ρ̂ and the penalty do not change


def test_the_warm_up_is_plain_grpo_then_awarl_and_survives_a_restart(tmp_path):
    """`reward.refusal_warmup: 0.2` of a 10-step run: the first two training steps pay an abstention r_wrong with Ē held at 0;
    the third pays r_ref and moves Ē; evaluation batches do not count as steps; a reloaded state keeps the count."""
    from awarl.rewards.trl_reward import load_reward_state, save_reward_state

    kw = dict(prompts=["p"] * 4, completions=["c"] * 4, qid=["q"] * 4, p_i=[0.0] * 4, p_n=[8] * 4,
              outcome=["abstain", "abstain", "abstain", "wrong"])
    reward = AwaRLReward(RewardConfig(gamma=0.25, abstain_line="courage", refusal_warmup=0.2), total_steps=10)
    first = reward(**kw)
    assert first[0] == 0.0 and reward.e_bar == 0.0 and reward.last_stats["penalty"] == 0.0
    reward(**kw, training=False)                      # an evaluation batch: no step counted
    reward(**kw)
    assert reward.e_bar == 0.0 and reward.updates == 2
    save_reward_state(reward, tmp_path)
    fresh = AwaRLReward(RewardConfig(gamma=0.25, abstain_line="courage", refusal_warmup=0.2), total_steps=10)
    load_reward_state(fresh, tmp_path)
    third = fresh(**kw)
    assert third[0] > 0.1 and fresh.e_bar != 0.0      # r_ref now, and Ē moves (E = 0.75 − ρ̂)


def test_a_warm_up_as_long_as_the_run_is_plain_grpo_step_for_step():
    sc = SimulateConfig(n_queries=200, batch_queries=8, group_size=4, steps=30, init_abstain_rate=0.3)
    pop = make_population(sc, np.random.default_rng(1))
    warm = simulate_run(pop, sc, RewardConfig(refusal_warmup=0.999), "awarl", gamma=0.25, seed=4)
    plain = simulate_run(pop, sc, RewardConfig(), "none", gamma=0.25, seed=4)
    assert warm.history["refusal_rate"] == plain.history["refusal_rate"]
    assert set(warm.history["E_bar"]) == {0.0}
    short = simulate_run(pop, sc, RewardConfig(refusal_warmup=1 / 3), "awarl", gamma=0.25, seed=4)
    assert short.history["refusal_rate"][:11] == plain.history["refusal_rate"][:11]
    assert short.history["refusal_rate"][-1] != plain.history["refusal_rate"][-1]


def test_the_warm_up_is_a_share_of_the_run_read_from_the_trainer_when_not_given():
    class State:
        max_steps = 20

    kw = dict(prompts=["p"] * 2, completions=["c"] * 2, qid=["q"] * 2, p_i=[0.0] * 2, p_n=[8] * 2,
              outcome=["abstain", "wrong"])
    reward = AwaRLReward(RewardConfig(gamma=0.25, abstain_line="courage", refusal_warmup=0.1))
    for _ in range(2):
        assert reward(**kw, trainer_state=State())[0] == 0.0     # 2 of 20 steps: warm-up
    assert reward(**kw, trainer_state=State())[0] > 0.0
    with pytest.raises(ValueError, match="refusal_warmup"):
        AwaRLReward(RewardConfig(refusal_warmup=0.1))(**kw)      # no run length anywhere: a clear error
    assert A.warmup_steps(0.6, 1000) == 600 and A.warmup_steps(0.0, 50) == 0
    with pytest.raises(ValueError):
        A.warmup_steps(1.0, 10)
