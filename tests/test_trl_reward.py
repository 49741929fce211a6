"""The stateful TRL reward object: values on a hand-checked batch, EMA across calls, strategies, judges, state."""

from __future__ import annotations

import json
import math

import pytest
from transformers import TrainerControl, TrainerState, TrainingArguments

from awarl.config import CriticConfig, RewardConfig
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
    reward = AwaRLReward(RewardConfig())
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
    reward = AwaRLReward(RewardConfig(beta=0.0))  # no smoothing: Ē = E
    out = reward(**batch(outcome=["wrong", "wrong", "correct", "correct"]))  # rho 0 vs rho_hat 0.5
    assert reward.e_bar == -0.5 and reward.last_stats["penalty"] == -1.0
    assert out == pytest.approx([0.0, 0.0, 1.0, 1.0])
    # evaluation batch (rho 0.75 vs 0.5 here): scored with the stored Ē = -0.5, which it leaves alone
    out = reward(**batch(training=[False] * 4))
    assert reward.e_bar == -0.5 and reward.updates == 1
    assert out == pytest.approx([1.0, 1.0, 1.0, 1.0])  # R_base + 1, clipped to r_clip's upper bound


def test_unknown_p_uses_table_then_default_and_is_counted():
    reward = AwaRLReward(RewardConfig(default_p=0.81), p_table={"h": 0.04})
    out = reward(**batch(p_i=[None, None, None, None]))
    assert out == pytest.approx([R_HARD, R_HARD, 1.0, R_EASY])
    assert reward.last_stats["unknown_p"] == 2 and reward.unknown_p_total == 2


def test_bad_input_names_the_key():
    reward = AwaRLReward(RewardConfig())
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
    assert AwaRLReward(RewardConfig(strategy=strategy))(**batch()) == pytest.approx(expected)


def test_p_online_ema_moves_estimate_for_next_step():
    reward = AwaRLReward(RewardConfig(p_online="ema", p_online_beta=0.5))
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
    reward = AwaRLReward(RewardConfig(lambda_cite=0.1), judge=LexicalJudge(CriticConfig()))
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
    reward = AwaRLReward(RewardConfig(lambda_cite=0.1), judge=_FailingJudge(mode))
    out = reward(**citing_batch())
    assert out[:2] == [1.0, 0.0]  # no citation reward for failed items
    assert reward.last_stats["judge_failures"] == 2 and reward.judge_failures_total == 2


def test_state_round_trip_through_callback(tmp_path):
    reward = AwaRLReward(RewardConfig(p_online="ema"))
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

    fresh = AwaRLReward(RewardConfig(p_online="ema"))
    assert load_reward_state(fresh, ckpt) is True
    assert fresh.e_bar == pytest.approx(reward.e_bar) and fresh.p_online == pytest.approx(reward.p_online)
    # the restored object continues the EMA exactly like the original
    cb.on_step_begin(args, state, control)
    assert fresh(**batch()) == pytest.approx(reward(**batch()))
    assert fresh.e_bar == pytest.approx(reward.e_bar)

    assert load_reward_state(AwaRLReward(RewardConfig()), tmp_path / "missing") is False
    (ckpt / STATE_FILE).write_text(json.dumps({"format": "awarl-reward-state/1", "e_bar": "x"}))
    with pytest.raises(ValueError, match="e_bar"):
        load_reward_state(fresh, ckpt)


def test_name_is_set_for_trl_logging():
    assert AwaRLReward(RewardConfig()).__name__ == "awarl_reward"


def test_state_is_saved_on_every_node_when_checkpoints_are_node_local(tmp_path):
    """With save_on_each_node the Trainer writes a checkpoint per node; the reward state used to be written
    by the global rank 0 only, so other nodes resumed with Ē = 0 while rank 0 had the real Ē."""
    reward = AwaRLReward(RewardConfig())
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
    default = AwaRLReward(RewardConfig(gamma=1.0))
    default(**kw)
    assert default.last_stats["rho_hat"] == 0.5
    harsh = AwaRLReward(RewardConfig(gamma=1.0, r_wrong=-0.5))
    out = harsh(**kw)
    assert harsh.last_stats["rho_hat"] == 1.0 and harsh.last_stats["E"] == pytest.approx(0.75 - 1.0)
    assert out[2] == 1.0  # the correct answer still earns r_correct
    generous = AwaRLReward(RewardConfig(gamma=1.0, r_correct=2.0))
    generous(**kw)
    assert generous.last_stats["rho_hat"] == 0.5  # p < 1/3 only


def test_r_base_mean_rho_hat_is_the_batch_mean_of_r_base():
    reward = AwaRLReward(RewardConfig(expected_rate="r_base_mean"))
    reward(**batch())
    assert reward.last_stats["rho_hat"] == pytest.approx((2 * R_HARD + 2 * R_EASY) / 4)


def test_margin_keeps_refusal_below_a_correct_answer_under_under_refusal():
    # ρ = 0 vs ρ̂ = 0.5 with no smoothing: P = −1, so r_ref = clip(R_base + 1) = 1 without the cap
    under = batch(outcome=["wrong", "wrong", "correct", "correct"])
    for margin, top in ((None, 1.0), (0.1, 0.9)):
        reward = AwaRLReward(RewardConfig(beta=0.0, r_ref_margin=margin))
        reward(**under)
        assert reward.last_stats["penalty"] == -1.0
        out = reward(**batch(training=[False] * 4))  # score abstentions with that state
        assert out == pytest.approx([top, top, 1.0, top])


def test_bias_corrected_ema_is_full_size_from_the_first_step_and_resumes(tmp_path):
    cfg = RewardConfig(ema_start="bias_corrected")
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
    reward = AwaRLReward(RewardConfig())
    assert load_reward_state(reward, tmp_path)
    assert reward.e_ema == 0.2 and reward.e_bar == 0.2


@pytest.mark.parametrize("strategy", ["none", "static", "bapo"])
def test_baselines_log_no_penalty_or_smoothed_excess(strategy):
    reward = AwaRLReward(RewardConfig(strategy=strategy, beta=0.0))
    logged: dict[str, float] = {}
    for _ in range(2):
        reward(**batch(outcome=["wrong"] * 4), log_metric=lambda k, v: logged.__setitem__(k, v))
    assert not {"awarl/E", "awarl/E_bar", "awarl/penalty"} & set(logged)
    assert {"awarl/rho", "awarl/rho_hat", "awarl/r_ref_mean"} <= set(logged)  # ρ̂ stays, as the reference
    assert reward.e_bar == 0.0 and reward.updates == 2


@pytest.mark.parametrize("definition", ["share_of_k", "among_answered"])
def test_p_online_ignores_the_policys_own_abstentions(definition):
    reward = AwaRLReward(RewardConfig(p_online="ema", p_online_beta=0.5, p_definition=definition))
    reward(**batch(outcome=["abstain", "abstain", "correct", "abstain"]))
    assert reward.p_online["h"] == pytest.approx(0.04)  # group h answered nothing: unchanged
    assert reward.p_online["e"] == pytest.approx(0.5 * 0.81 + 0.5 * 1.0)  # 1 correct of 1 answered
