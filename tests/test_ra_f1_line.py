"""`reward.abstain_line: ra_f1`: the abstain line at F̂/2 (docs/method.md "The RA-F1 line"): the formula, the
claim it rests on (answering exactly the queries above F*/2 maximises RA-F1, and Dinkelbach's iteration finds it),
and the training reward's running F̂ (logged, resumed, untouched by evaluation batches)."""

from __future__ import annotations

import itertools
import random

import pytest

from awarl.config import RewardConfig
from awarl.metrics import ra_f1
from awarl.rewards import abstention as A
from awarl.rewards.trl_reward import AwaRLReward


@pytest.mark.parametrize("seed", range(20))
def test_ra_f1_of_counts_is_the_metrics_harmonic_mean(seed):
    rng = random.Random(seed)
    c, w, i, ab = (rng.randint(0, 9) for _ in range(4))
    n, answered = c + w + i + ab, c + w + i
    want = ra_f1(c / answered if answered else 0.0, c / n if n else 0.0)
    assert A.ra_f1_of_counts(c, answered, n) == pytest.approx(want)


def expected_ra_f1(s: list[float], answer: tuple[bool, ...]) -> float:
    """RA-F1 of answering the queries flagged in `answer` (expected correct counts: true successes s)."""
    c = sum(x for x, a in zip(s, answer, strict=True) if a)
    return 2 * c / (len(s) + sum(answer)) if c else 0.0


@pytest.mark.parametrize("seed", range(30))
def test_answering_above_half_the_best_ra_f1_is_the_best_subset_and_dinkelbach_reaches_it(seed):
    """Every subset of 8 queries tried: the best RA-F1 F* is reached by answering exactly those with s > F*/2,
    and the iteration the reward runs (pay an abstention F̂/2, the reward-maximiser answers s > F̂/2, F̂ becomes
    its RA-F1) climbs to F* from any start."""
    rng = random.Random(seed)
    s = [rng.random() ** rng.choice([0.5, 1, 3]) for _ in range(8)]
    best = max(expected_ra_f1(s, a) for a in itertools.product([False, True], repeat=len(s)))
    line = A.ra_f1_line(best)
    assert expected_ra_f1(s, tuple(x > line for x in s)) == pytest.approx(best)
    f = rng.random() * 0.2
    for _ in range(50):
        f_next = expected_ra_f1(s, tuple(x > A.ra_f1_line(f) for x in s))
        assert f_next >= f - 1e-12 or f > best  # never falls below where it stood (from a start under F*)
        f = f_next
    assert f == pytest.approx(best)


def test_the_line_prices_an_abstention_as_an_answer_of_success_on_the_line():
    assert A.line_base_reward(0.25) == 0.25
    assert A.line_base_reward(0.25, r_correct=1.0, r_wrong=-1.0) == pytest.approx(-0.5)
    cfg = RewardConfig()
    assert A.base_reward(0.9, cfg, line=0.2) == A.base_reward(0.0, cfg, line=0.2) == pytest.approx(0.2)
    assert A.base_reward(0.3, cfg) == A.base_refusal_reward(0.3, cfg.gamma, cfg.p_min)
    with pytest.raises(ValueError, match="running RA-F1"):
        A.ra_f1_line(1.5)


@pytest.mark.parametrize("rate", ["posterior", "threshold", "soft", "r_base_mean"])
def test_every_reading_of_rho_hat_moves_with_the_line_and_ignores_gamma(rate):
    lo, hi = RewardConfig(expected_rate=rate, gamma=0.01), RewardConfig(expected_rate=rate, gamma=0.9)
    for p in (0.0, 0.125, 0.25):
        assert A.expected_share(p, 8, lo, line=0.3) == pytest.approx(A.expected_share(p, 8, hi, line=0.3))
        assert A.expected_share(p, 8, lo, line=0.05) <= A.expected_share(p, 8, lo, line=0.3)
    assert A.expected_share(0.0, 8, lo, line=0.3) > A.expected_share(0.0, 8, lo, line=0.0) or rate == "threshold"


def call(reward: AwaRLReward, outcomes: list[str], training: bool = True) -> list[float]:
    n = len(outcomes)
    return reward(prompts=["p"] * n, completions=["c"] * n, outcome=outcomes, qid=[str(j // 4) for j in range(n)],
                  p_i=[0.0] * n, p_n=[8] * n, training=[training] * n)


def line_reward(**kw) -> AwaRLReward:
    return AwaRLReward(RewardConfig(abstain_line="ra_f1", refusal_gate="off", refusal_warmup=0.0, penalty_dither=0.0,
                                    **kw))


def test_the_training_reward_tracks_the_batches_ra_f1_and_pays_half_of_it_before_any_penalty():
    reward = line_reward()
    batch = ["correct", "wrong", "abstain", "wrong"] + ["correct", "correct", "invalid", "abstain"]
    got = call(reward, batch)
    f = A.ra_f1_of_counts(3, 6, 8)
    assert reward.last_stats["ra_f1_hat"] == pytest.approx(f) and reward.last_stats["line"] == pytest.approx(f / 2)
    # Ē's first step is small (EMA from 0): no penalty yet, so an abstention earns exactly the line
    assert reward.last_stats["penalty"] == 0.0
    assert got[2] == got[7] == pytest.approx(f / 2)
    call(reward, ["wrong"] * 8)
    assert reward.last_stats["ra_f1_hat"] == pytest.approx(0.9 * 0.1 * f / (1 - 0.9**2))  # bias-corrected EMA


def test_an_evaluation_batch_reads_the_running_ra_f1_and_leaves_it_and_a_restart_resumes_it():
    reward = line_reward()
    call(reward, ["correct", "wrong", "abstain", "wrong"])
    state = reward.state_dict()
    call(reward, ["wrong"] * 4, training=False)
    assert reward.state_dict()["f_ema"] == state["f_ema"]
    assert reward.last_stats["ra_f1_hat"] == pytest.approx(A.ra_f1_of_counts(1, 3, 4))
    fresh = line_reward()
    fresh.load_state_dict(state)
    assert call(fresh, ["correct", "abstain", "abstain", "wrong"]) == call(reward, ["correct", "abstain", "abstain", "wrong"])
    assert fresh.state_dict() == reward.state_dict()
    with pytest.raises(ValueError, match="f_ema"):
        fresh.load_state_dict({**state, "f_ema": 1.7})
    old = dict(state)
    del old["f_ema"]  # a state written before the option existed
    fresh.load_state_dict(old)
    assert fresh.f_ema == 0.0


def test_the_courage_line_logs_no_ra_f1_and_is_unchanged():
    reward = AwaRLReward(RewardConfig(abstain_line="courage", refusal_gate="off", refusal_warmup=0.0))
    call(reward, ["correct", "wrong", "abstain", "wrong"])
    assert "line" not in reward.last_stats and reward.f_ema == 0.0
