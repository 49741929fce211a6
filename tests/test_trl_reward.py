"""The stateful TRL reward object: values on a hand-checked batch, EMA across calls, strategies, judges, state."""

from __future__ import annotations

import json
import math

import pytest
from conftest import round4_reward, spec_reward
from transformers import TrainerControl, TrainerState, TrainingArguments

from awarl.config import CriticConfig
from awarl.critic.lexical_judge import LexicalJudge
from awarl.rewards.trl_reward import STATE_FILE, AwaRLReward, load_reward_state
from awarl.training.callbacks import RewardStateCallback

R_HARD = 1 - math.sqrt(0.1)  # p=0.04 -> clipped to 0.1 -> R_base at γ=0.5
R_EASY = 0.1                 # p=0.81 -> p* = 0.9


def batch(**extra):
    kw = {"outcome": ["abstain", "abstain", "correct", "abstain"], "qid": ["h", "h", "e", "e"],
          "p_i": [0.04, 0.04, 0.81, 0.81]}
    kw.update(extra)
    return dict(prompts=["p"] * 4, completions=["c"] * 4, completion_ids=[[1]] * 4, **kw)


def test_hand_checked_batch_and_ema_across_calls():
    reward = AwaRLReward(spec_reward())
    logged: dict[str, float] = {}
    # rho = 3/4, rho_hat = 2/4 (only the hard query prefers abstaining), E = 0.25, Ē_1 = 0.025: dead zone
    r1 = reward(**batch(), log_metric=lambda k, v: logged.__setitem__(k, v))
    assert r1 == pytest.approx([R_HARD, R_HARD, 1.0, R_EASY])
    assert logged["awarl/rho"] == 0.75 and logged["awarl/rho_hat"] == 0.5
    assert logged["awarl/E"] == pytest.approx(0.25) and logged["awarl/E_bar"] == pytest.approx(0.025)
    assert logged["awarl/penalty"] == 0.0
    assert logged["awarl/share_correct"] == 0.25 and logged["awarl/share_abstain"] == 0.75
    assert logged["awarl/r_ref_mean"] == pytest.approx((2 * R_HARD + 2 * R_EASY) / 4)
    r2 = reward(**batch())  # Ē_2 = 0.0475: still inside the dead zone
    assert reward.e_bar == pytest.approx(0.0475) and r2 == pytest.approx(r1)
    r3 = reward(**batch())  # Ē_3 = 0.06775 > 0.05: over-refusal penalty 0.2 lowers every refusal reward
    assert reward.e_bar == pytest.approx(0.06775)
    assert r3 == pytest.approx([R_HARD - 0.2, R_HARD - 0.2, 1.0, R_EASY - 0.2])
    assert reward.updates == 3 and reward.last_stats["penalty"] == 0.2


def test_under_refusal_raises_refusal_reward_and_eval_batches_do_not_update():
    reward = AwaRLReward(spec_reward(beta=0.0))  # no smoothing: Ē = E
    out = reward(**batch(outcome=["wrong", "wrong", "correct", "correct"]))  # rho 0 vs rho_hat 0.5
    assert reward.e_bar == -0.5 and reward.last_stats["penalty"] == -1.0
    assert out == pytest.approx([0.0, 0.0, 1.0, 1.0])
    # evaluation batch (rho 0.75 vs 0.5 here): scored with the stored Ē = -0.5, which it leaves alone
    out = reward(**batch(training=[False] * 4))
    assert reward.e_bar == -0.5 and reward.updates == 1
    assert out == pytest.approx([1.0, 1.0, 1.0, 1.0])  # R_base + 1, clipped to r_clip's upper bound


def test_unknown_p_uses_table_then_default_and_is_counted():
    reward = AwaRLReward(spec_reward(default_p=0.81), p_table={"h": 0.04})
    out = reward(**batch(p_i=[None, None, None, None]))
    assert out == pytest.approx([R_HARD, R_HARD, 1.0, R_EASY])
    assert reward.last_stats["unknown_p"] == 2 and reward.unknown_p_total == 2


def test_bad_input_names_the_key():
    reward = AwaRLReward(spec_reward())
    with pytest.raises(ValueError, match="outcome\\[1\\]"):
        reward(**batch(outcome=["abstain", "maybe", "correct", "abstain"]))
    with pytest.raises(ValueError, match="`qid`"):
        reward(prompts=["p"], completions=["c"], outcome=["correct"])
    with pytest.raises(ValueError, match="`p_i` must be a list"):
        reward(**batch(p_i=[0.1]))


@pytest.mark.parametrize("strategy,expected", [
    ("none", [0.0, 0.0, 1.0, 0.0]),
    ("static", [0.05, 0.05, 1.0, 0.05]),
    ("bapo", [0.5, 0.5, 1.0, 0.0]),   # group "h" has no correct rollout, group "e" has one
])
def test_strategies_in_reward_object(strategy, expected):
    assert AwaRLReward(spec_reward(strategy=strategy))(**batch()) == pytest.approx(expected)


def test_p_online_ema_moves_estimate_for_next_step():
    reward = AwaRLReward(spec_reward(p_online="ema", p_online_beta=0.5))
    first = reward(**batch(outcome=["correct", "correct", "correct", "abstain"]))
    assert first[3] == pytest.approx(R_EASY)  # this step still uses the pre-RL p
    assert reward.p_online["h"] == pytest.approx(0.5 * 0.04 + 0.5 * 1.0)
    assert reward.p_online["e"] == pytest.approx(0.5 * 0.81 + 0.5 * 1.0)  # 1 correct of the 1 answered


PASSAGES = [{"number": 1, "id": "w1", "title": "Paris", "text": "Paris is the capital of France."},
            {"number": 2, "id": "w2", "title": "Lyon", "text": "Lyon is a city in France."}]


def citing_batch():
    return dict(prompts=["p"] * 3, completions=["c"] * 3, outcome=["correct", "wrong", "abstain"],
                qid=["a", "b", "c"], p_i=[0.9, 0.9, 0.9], question=["Capital of France?"] * 3,
                answer=["Paris", "Lyon", None], citations=[[1], [1], []], passages=[PASSAGES] * 3)


def test_citation_reward_with_lexical_judge():
    reward = AwaRLReward(spec_reward(lambda_cite=0.1), judge=LexicalJudge(CriticConfig()))
    out = reward(**citing_batch())
    # "Paris" grounded in cited [1]: r_cite = 1 - 0. "Lyon" is grounded only in uncited [2], and the cited [1]
    # supports nothing: r_cite = 0 - 1.
    assert out[0] == pytest.approx(1.0 + 0.1)
    assert out[1] == pytest.approx(0.0 - 0.1)
    assert reward.last_stats["r_cite_mean"] == pytest.approx(0.0)
    assert reward.last_stats["judge_failures"] == 0


class _FailingJudge:
    failures = 0

    def __init__(self, mode):
        self.mode = mode

    def verify(self, items):
        if self.mode == "raise":
            raise RuntimeError("endpoint down")
        return [None] * len(items)


@pytest.mark.parametrize("mode", ["none", "raise"])
def test_judge_failure_never_crashes_and_is_counted(mode):
    reward = AwaRLReward(spec_reward(lambda_cite=0.1), judge=_FailingJudge(mode))
    out = reward(**citing_batch())
    assert out[:2] == [1.0, 0.0]  # no citation reward for failed items
    assert reward.last_stats["judge_failures"] == 2 and reward.judge_failures_total == 2


def test_state_round_trip_through_callback(tmp_path):
    reward = AwaRLReward(spec_reward(p_online="ema"))
    cb = RewardStateCallback(reward)
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[])
    state = TrainerState()
    state.global_step = 7
    control = TrainerControl()
    assert reward.training is False
    cb.on_step_begin(args, state, control)
    reward(**batch())
    cb.on_step_end(args, state, control)
    reward(**batch())  # between steps (evaluation): no update
    assert reward.updates == 1
    ckpt = tmp_path / "checkpoint-7"
    ckpt.mkdir()
    cb.on_save(args, state, control)
    saved = json.loads((ckpt / STATE_FILE).read_text())
    assert saved["e_bar"] == pytest.approx(reward.e_bar) and saved["updates"] == 1

    fresh = AwaRLReward(spec_reward(p_online="ema"))
    assert load_reward_state(fresh, ckpt) is True
    assert fresh.e_bar == pytest.approx(reward.e_bar) and fresh.p_online == pytest.approx(reward.p_online)
    # the restored object continues the EMA exactly like the original
    cb.on_step_begin(args, state, control)
    assert fresh(**batch()) == pytest.approx(reward(**batch()))
    assert fresh.e_bar == pytest.approx(reward.e_bar)

    assert load_reward_state(AwaRLReward(spec_reward()), tmp_path / "missing") is False
    (ckpt / STATE_FILE).write_text(json.dumps({"format": "awarl-reward-state/1", "e_bar": "x"}))
    with pytest.raises(ValueError, match="e_bar"):
        load_reward_state(fresh, ckpt)


def test_name_is_set_for_trl_logging():
    assert AwaRLReward(spec_reward()).__name__ == "awarl_reward"


def test_state_is_saved_on_every_node_when_checkpoints_are_node_local(tmp_path):
    """With save_on_each_node the Trainer writes a checkpoint per node; the reward state used to be written
    by the global rank 0 only, so other nodes resumed with Ē = 0 while rank 0 had the real Ē."""
    reward = AwaRLReward(spec_reward())
    reward(**batch())
    cb = RewardStateCallback(reward)
    state = TrainerState()
    state.global_step = 3
    state.is_world_process_zero, state.is_local_process_zero = False, True  # local rank 0 of node 1
    for each_node, expect in ((False, False), (True, True)):
        out = tmp_path / str(each_node)
        (out / "checkpoint-3").mkdir(parents=True)
        args = TrainingArguments(output_dir=str(out), report_to=[], save_on_each_node=each_node)
        cb.on_save(args, state, TrainerControl())
        assert (out / "checkpoint-3" / STATE_FILE).is_file() is expect


# ---------------------------------------------------------------------------------- reconstruction options
def test_rho_hat_follows_non_default_outcome_rewards():
    # γ = 1: R_base = 1 − p. Default rewards: abstain iff p < 0.5 -> only the p = 0.3 query (ρ̂ = 0.5).
    # r_wrong = −0.5: answering p = 0.55 is worth −0.5 + 0.55·1.5 = 0.325 < R_base 0.45 -> both (ρ̂ = 1).
    kw = batch(p_i=[0.3, 0.3, 0.55, 0.55])
    default = AwaRLReward(spec_reward(gamma=1.0))
    default(**kw)
    assert default.last_stats["rho_hat"] == 0.5
    harsh = AwaRLReward(spec_reward(gamma=1.0, r_wrong=-0.5))
    out = harsh(**kw)
    assert harsh.last_stats["rho_hat"] == 1.0 and harsh.last_stats["E"] == pytest.approx(0.75 - 1.0)
    assert out[2] == 1.0  # the correct answer still earns r_correct
    generous = AwaRLReward(spec_reward(gamma=1.0, r_correct=2.0))
    generous(**kw)
    assert generous.last_stats["rho_hat"] == 0.5  # p < 1/3 only


def test_r_base_mean_rho_hat_is_the_batch_mean_of_r_base():
    reward = AwaRLReward(spec_reward(expected_rate="r_base_mean"))
    reward(**batch())
    assert reward.last_stats["rho_hat"] == pytest.approx((2 * R_HARD + 2 * R_EASY) / 4)


def test_margin_keeps_refusal_below_a_correct_answer_under_under_refusal():
    # ρ = 0 vs ρ̂ = 0.5 with no smoothing: P = −1, so r_ref = clip(R_base + 1) = 1 without the cap
    under = batch(outcome=["wrong", "wrong", "correct", "correct"])
    for margin, top in ((None, 1.0), (0.1, 0.9)):
        reward = AwaRLReward(spec_reward(beta=0.0, r_ref_margin=margin))
        reward(**under)
        assert reward.last_stats["penalty"] == -1.0
        out = reward(**batch(training=[False] * 4))  # score abstentions with that state
        assert out == pytest.approx([top, top, 1.0, top])


def test_bias_corrected_ema_is_full_size_from_the_first_step_and_resumes(tmp_path):
    cfg = spec_reward(ema_start="bias_corrected")
    reward = AwaRLReward(cfg)
    r1 = reward(**batch())  # E = 0.25: Ē_1 = 0.025 / (1 − 0.9) = 0.25 -> penalty 0.5 at once
    assert reward.e_bar == pytest.approx(0.25) and reward.e_ema == pytest.approx(0.025)
    assert reward.last_stats["penalty"] == 0.5
    assert r1 == pytest.approx([R_HARD - 0.5, R_HARD - 0.5, 1.0, R_EASY - 0.5])
    reward(**batch(outcome=["correct", "correct", "correct", "abstain"]))  # E_2 = 0.25 − 0.5 = −0.25
    m2 = 0.9 * 0.025 + 0.1 * -0.25
    assert reward.e_bar == pytest.approx(m2 / (1 - 0.81))
    from awarl.rewards.trl_reward import save_reward_state

    save_reward_state(reward, tmp_path)
    fresh = AwaRLReward(cfg)
    load_reward_state(fresh, tmp_path)
    assert fresh(**batch()) == pytest.approx(reward(**batch()))
    assert fresh.e_bar == pytest.approx(reward.e_bar) and fresh.updates == 3


def test_state_written_before_ema_start_loads_as_zero_start(tmp_path):
    (tmp_path / STATE_FILE).write_text(json.dumps({"format": "awarl-reward-state/1", "e_bar": 0.2, "updates": 4}))
    reward = AwaRLReward(spec_reward())
    assert load_reward_state(reward, tmp_path)
    assert reward.e_ema == 0.2 and reward.e_bar == 0.2


@pytest.mark.parametrize("over, named", [({"updates": None}, "'updates' must be an integer >= 0, got None"),
                                         ({"updates": -5}, "'updates' must be an integer >= 0, got -5"),
                                         ({"unknown_p_total": 1.5}, "'unknown_p_total' must be an integer"),
                                         ({"last_stats": {"rho": None}}, "'last_stats' must be a mapping name -> number")])
def test_a_malformed_reward_state_is_refused_naming_the_file_and_key(tmp_path, over, named):
    """`updates: null` or a null in last_stats raised a bare TypeError out of the resume (the CLI turns only
    ValueErrors into messages), and a negative count was taken."""
    state = {"format": "awarl-reward-state/1", "e_bar": 0.2, "updates": 4, **over}
    (tmp_path / STATE_FILE).write_text(json.dumps(state))
    with pytest.raises(ValueError, match=rf"{STATE_FILE}: key {named}"):
        load_reward_state(AwaRLReward(spec_reward()), tmp_path)


@pytest.mark.parametrize("column, value, named", [("qid", None, r"qid\[0\] = None is not a query id"),
                                                  ("qid", " ", r"qid\[0\] = ' ' is not a query id"),
                                                  ("p_i", [0.5], r"p_i of query 'q0' must be a probability"),
                                                  ("p_i", True, r"p_i of query 'q0' must be a probability")])
def test_a_malformed_reward_column_is_a_clear_error(column, value, named):
    """A None qid became the string "None" (every such completion one group), a list p_i raised a bare
    TypeError, and True was read as p = 1."""
    kw = {"outcome": ["abstain", "correct"], "qid": ["q0", "q1"], "p_i": [0.5, 0.5]}
    kw[column] = [value, kw[column][1]]
    with pytest.raises(ValueError, match=named):
        AwaRLReward(spec_reward(lambda_cite=0.0))(prompts=["q"] * 2, completions=["c"] * 2, **kw)


@pytest.mark.parametrize("strategy", ["none", "static", "bapo"])
def test_baselines_log_no_penalty_or_smoothed_excess(strategy):
    reward = AwaRLReward(spec_reward(strategy=strategy, beta=0.0))
    logged: dict[str, float] = {}
    for _ in range(2):
        reward(**batch(outcome=["wrong"] * 4), log_metric=lambda k, v: logged.__setitem__(k, v))
    assert not {"awarl/E", "awarl/E_bar", "awarl/penalty"} & set(logged)
    assert {"awarl/rho", "awarl/rho_hat", "awarl/r_ref_mean"} <= set(logged)  # ρ̂ stays, as the reference
    assert reward.e_bar == 0.0 and reward.updates == 2


@pytest.mark.parametrize("definition", ["share_of_k", "among_answered"])
def test_p_online_ignores_the_policys_own_abstentions(definition):
    reward = AwaRLReward(spec_reward(p_online="ema", p_online_beta=0.5, p_definition=definition))
    reward(**batch(outcome=["abstain", "abstain", "correct", "abstain"]))
    assert reward.p_online["h"] == pytest.approx(0.04)  # group h answered nothing: unchanged
    assert reward.p_online["e"] == pytest.approx(0.5 * 0.81 + 0.5 * 1.0)  # 1 correct of 1 answered


def test_posterior_target_reads_the_sample_counts_behind_each_p():
    from awarl.rewards import abstention as A

    cfg = round4_reward(gamma=0.5, expected_rate="posterior", posterior_samples=2, beta=0.0)
    p = [0.04, 0.04, 0.81, 0.81]
    want = lambda ns: sum(A.posterior_abstain_probability(x, n, 0.5, 0.1) for x, n in zip(p, ns, strict=True)) / 4  # noqa: E731
    # the rollout's p_n column first
    reward = AwaRLReward(cfg)
    reward(**batch(p_n=[8, 8, 32, 32]))
    assert reward.last_stats["rho_hat"] == pytest.approx(want([8, 8, 32, 32]))
    # then the table built from the estimate file, then reward.posterior_samples
    reward = AwaRLReward(cfg, n_table={"h": 16})
    reward(**batch())
    assert reward.last_stats["rho_hat"] == pytest.approx(want([16, 16, 2, 2]))
    # a query without any p_i (reward.default_p) has no samples: the prior alone
    reward = AwaRLReward(cfg.model_copy(update={"default_p": 0.81}))
    reward(**batch(p_i=[None] * 4))
    assert reward.last_stats["rho_hat"] == pytest.approx(
        sum(A.posterior_abstain_probability(0.81, 0, 0.5, 0.1) for _ in range(4)) / 4)
    with pytest.raises(ValueError, match="sample count"):
        AwaRLReward(cfg)(**batch(p_n=[8, -1, 8, 8]))


def test_refusal_floor_keeps_refusing_above_a_wrong_answer_under_full_over_refusal():
    cfg = spec_reward(beta=0.0, r_ref_margin=0.1)
    # rho 1 vs rho_hat 1/2: Ē = 0.5, P = +1; R_base − 1 is negative for both queries
    over = batch(outcome=["abstain"] * 4)
    assert AwaRLReward(cfg)(**over) == pytest.approx([R_HARD - 1, R_HARD - 1, R_EASY - 1, R_EASY - 1])
    floored = AwaRLReward(cfg.model_copy(update={"r_ref_floor_margin": 0.05}))(**over)
    assert floored == pytest.approx([0.05] * 4)


def test_dithered_penalty_gives_each_group_its_own_step_and_resumes(tmp_path):
    """reward.penalty_dither: every completion of a group gets the group's P(Ē + u), u drawn from its query id
    and the step (a group straddling processes gets one penalty); `penalty` logs P(Ē), `penalty_applied` the
    mean over completions; a restored state continues with the same draws."""
    from awarl.rewards import abstention as A
    from awarl.rewards.trl_reward import save_reward_state

    cfg = spec_reward(beta=0.0, penalty_dither=0.3)  # Ē = E; a wide dither so both steps show in a small batch
    qids = [f"q{k}" for k in range(12) for _ in range(2)]
    outcomes = ["abstain", "abstain"] * 12  # ρ 1 against ρ̂ 22/24 (threshold): Ē = 1/12, P(Ē) = 0.2
    kw = dict(prompts=["p"] * 24, completions=["c"] * 24, outcome=outcomes, qid=qids, p_i=[0.04] * 22 + [0.81] * 2)
    reward = AwaRLReward(cfg)
    logged: dict[str, float] = {}
    out = reward(**kw, log_metric=lambda k, v: logged.__setitem__(k, v))
    e_bar = reward.e_bar
    steps = [A.group_penalty(e_bar, f"q{k}", 1, cfg.penalty_steps, cfg.penalty_max, 0.3) for k in range(12)]
    assert reward.last_stats["penalty"] == 0.2 and e_bar == pytest.approx(1 / 12)
    assert len(set(steps)) >= 3 and all(abs(s) in (0.0, 0.2, 0.5, 1.0) for s in steps)  # Ē + u in [-0.22, 0.38)
    r_base = [A.base_refusal_reward(p, cfg.gamma, cfg.p_min) for p in kw["p_i"]]
    assert out == pytest.approx([A.refusal_reward(rb, steps[j // 2]) for j, rb in enumerate(r_base)])
    assert logged["awarl/penalty"] == A.stepwise_penalty(e_bar, cfg.penalty_steps, cfg.penalty_max)
    assert logged["awarl/penalty_applied"] == pytest.approx(sum(steps) / 12)
    # the batch split in two calls' worth of groups keeps each group's penalty: it depends on the group alone
    assert reward._group_penalties(qids[:6], {"e_bar": e_bar, "updates": 1}) == [s for s in steps[:3] for _ in "ab"]

    save_reward_state(reward, tmp_path)
    fresh = AwaRLReward(cfg)
    load_reward_state(fresh, tmp_path)
    assert fresh(**kw) == reward(**kw) and fresh.e_bar == reward.e_bar


def test_an_online_p_of_a_query_without_an_estimate_keeps_the_prior_alone():
    """With p_online: ema, a query on reward.default_p counts 0 samples (the prior alone); after its first
    step its online p was read with reward.posterior_samples (8) behind it, so ρ̂ jumped (0.075 to 0)."""
    reward = AwaRLReward(round4_reward(p_online="ema", lambda_cite=0.0))
    kw = dict(prompts=["x"] * 2, completions=["c"] * 2, outcome=["abstain", "abstain"], qid=["q", "q"],
              p_i=[None, None])
    reward(**kw)
    first = reward.last_stats["rho_hat"]
    assert "q" in reward.p_online and first > 0.05
    reward(**kw)
    assert reward.last_stats["rho_hat"] == pytest.approx(first)
    known = AwaRLReward(round4_reward(p_online="ema", lambda_cite=0.0), p_table={"q": 0.5}, n_table={"q": 8.0})
    known(**kw)
    assert known._resolve_p("q", None, None)[1] == 8.0  # a query with an estimate keeps its count
